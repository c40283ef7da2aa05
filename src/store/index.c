/*
 * index: RocketMQ's IndexFile, byte for byte.
 *
 * INDEX FILE FORMAT (RocketMQ 4.x IndexFile/IndexHeader; protocol.md
 * §5.11).  Big-endian.  Size = 40 + slots * 4 + max_entries * 20.
 *
 *   Header, 40 bytes:
 *     0  int64  beginTimestamp   store time of the first entry
 *     8  int64  endTimestamp     store time of the last entry
 *    16  int64  beginPhyOffset   commit log offset of the first entry
 *    24  int64  endPhyOffset     commit log offset of the last entry
 *    32  int32  hashSlotCount    slots in use
 *    36  int32  indexCount       next entry number; starts at 1 (entry 0
 *                                is never used, so 0 means "none")
 *   Slots, at 40: `slots` int32s; slot s = number of the newest entry
 *                 whose keyHash % slots == s (0 = empty).
 *   Entries, at 40 + slots * 4, 20 bytes each:
 *     0  int32  keyHash          abs(Java hashCode("topic#key")), 0 if
 *                                that overflows
 *     4  int64  phyOffset        the record
 *    12  int32  timeDiff         (storeTimestamp - beginTimestamp) / 1000,
 *                                clamped to [0, INT32_MAX]; 0 while the
 *                                file's beginTimestamp is still 0
 *    16  int32  prevIndex        previous entry in the same slot (0 = end)
 *
 * A new file starts with the previous file's end timestamp and offset as
 * both its begin and end (RocketMQ does this), indexCount 1.  Keys per
 * record: its UNIQ_KEY, then every non-empty space-separated token of
 * KEYS; rollback records are not indexed.  A lookup walks the chain of
 * the key's slot, newest first, keeping entries whose hash matches and
 * whose time is in the window; it stops at the chain's end, at an
 * out-of-range link, or at an entry older than the window.
 */
#include "store/index.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/jstr.h"
#include "store/props.h"
#include "core/log.h"

#define HDR 40
#define ENTRY 20
#define RESERVE_CHUNK (256 << 10)

struct ixhdr {
    int64_t begin_ts, end_ts, begin_phy, end_phy;
    int32_t slot_count, count;
};

static void
hdr_get(const uint8_t *p, struct ixhdr *h)
{
    h->begin_ts = (int64_t)be64_get(p);
    h->end_ts = (int64_t)be64_get(p + 8);
    h->begin_phy = (int64_t)be64_get(p + 16);
    h->end_phy = (int64_t)be64_get(p + 24);
    h->slot_count = (int32_t)be32_get(p + 32);
    h->count = (int32_t)be32_get(p + 36);
    if (h->count <= 0)
        h->count = 1;
}

static void
hdr_put(uint8_t *p, const struct ixhdr *h)
{
    be64_put(p, (uint64_t)h->begin_ts);
    be64_put(p + 8, (uint64_t)h->end_ts);
    be64_put(p + 16, (uint64_t)h->begin_phy);
    be64_put(p + 24, (uint64_t)h->end_phy);
    be32_put(p + 32, (uint32_t)h->slot_count);
    be32_put(p + 36, (uint32_t)h->count);
}

/* Java's hash of "topic#" (the part of every key's hash a record's keys
 * share: hashed once per record, not once per key). */
static int32_t
topic_hash(const char *topic, size_t tlen)
{
    return java_hash_more(java_hash(topic, tlen), "#", 1);
}

static uint32_t
key_hash_from(int32_t th, const char *key, size_t klen)
{
    int32_t h = java_hash_more(th, key, klen);
    /* Java: Math.abs(h), and 0 if that is still negative (INT_MIN). */
    if (h == INT32_MIN)
        return 0;
    return (uint32_t)(h < 0 ? -h : h);
}

static uint32_t
key_hash(const char *topic, size_t tlen, const char *key, size_t klen)
{
    return key_hash_from(topic_hash(topic, tlen), key, klen);
}

static bool
is_index_name(const char *name)
{
    if (strlen(name) != 17)
        return false;
    for (int i = 0; i < 17; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    return true;
}

static int
cmp_path(const void *a, const void *b)
{
    return strcmp((*(struct mfile *const *)a)->path,
                  (*(struct mfile *const *)b)->path);
}

static int
files_push(struct index *ix, struct mfile *mf)
{
    if (ix->n == ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 8;
        struct mfile **nf = realloc(ix->files, cap * sizeof(*nf));
        if (nf == NULL) {
            err_set("out of memory");
            return -ENOMEM;
        }
        ix->files = nf;
        ix->cap = cap;
    }
    ix->files[ix->n++] = mf;
    return 0;
}

int
ix_open(struct index *ix, const char *dir, uint32_t slots,
        uint32_t max_entries, bool enabled)
{
    memset(ix, 0, sizeof(*ix));
    ix->rfd = -1;
    ix->slots = slots;
    ix->max_entries = max_entries;
    ix->file_size = HDR + (size_t)slots * 4 + (size_t)max_entries * ENTRY;
    ix->enabled = enabled;
    pthread_mutex_init(&ix->lock, NULL);
    int rc = mkdir_p(dir);
    if (rc != 0)
        return rc;
    ix->dir = strdup(dir);
    if (ix->dir == NULL)
        return -ENOMEM;
    DIR *d = opendir(dir);
    if (d == NULL) {
        err_set("cannot list %s: %s", dir, strerror(errno));
        return -errno;
    }
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (!is_index_name(de->d_name))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        struct mfile *mf = mfile_open(path, 0, ix->file_size, 0);
        if (mf == NULL) {
            /* A file of another geometry (maxHashSlotNum / maxIndexNum
             * changed): unusable for lookups, so set it aside. */
            log_warn("index: %s; ignoring it", err_msg());
            continue;
        }
        if ((rc = files_push(ix, mf)) != 0) {
            mfile_unpin(mf);
            break;
        }
    }
    closedir(d);
    if (ix->n > 1)
        qsort(ix->files, ix->n, sizeof(*ix->files), cmp_path);
    return rc;
}

void
ix_close(struct index *ix)
{
    for (size_t i = 0; i < ix->n; i++)
        mfile_unpin(ix->files[i]);
    free(ix->files);
    free(ix->dir);
    free(ix->rbuf);
    free(ix->mq);
    ix->mq = NULL;
    if (ix->rfd >= 0)
        close(ix->rfd);
    ix->rfd = -1;
    ix->rbuf = NULL;
    ix->files = NULL;
    ix->dir = NULL;
    ix->n = ix->cap = 0;
    pthread_mutex_destroy(&ix->lock);
}

size_t
ix_count(struct index *ix)
{
    pthread_mutex_lock(&ix->lock);
    size_t n = ix->n;
    pthread_mutex_unlock(&ix->lock);
    return n;
}

int
ix_drop_unsafe(struct index *ix, int64_t safe, bool by_ts)
{
    int dropped = 0;
    pthread_mutex_lock(&ix->lock);
    size_t keep = 0;
    for (size_t i = 0; i < ix->n; i++) {
        struct mfile *mf = ix->files[i];
        struct ixhdr h;
        hdr_get(mf->base, &h);
        bool unsafe = by_ts ? h.end_ts > safe : (h.count > 1 && h.end_phy >= safe);
        if (unsafe) {
            log_info("index: %s may hold entries written after the last "
                     "checkpoint; deleting it (it is rebuilt from the "
                     "commit log)", mf->path);
            mfile_retire(mf);
            dropped++;
        } else {
            ix->files[keep++] = mf;
        }
    }
    ix->n = keep;
    if (ix->flushed_files > keep)
        ix->flushed_files = keep;
    pthread_mutex_unlock(&ix->lock);
    return dropped;
}

void
ix_resume(struct index *ix, struct commitlog *cl)
{
    pthread_mutex_lock(&ix->lock);
    int64_t next = clog_min(cl);
    if (ix->n > 0) {
        struct ixhdr h;
        hdr_get(ix->files[ix->n - 1]->base, &h);
        /* end_phy < 0: a cut removed every record it had indexed
         * (cut_end_phy). */
        if (h.end_phy >= 0 && (h.count > 1 || h.end_phy > 0)) {
            /* Resume after the last indexed record (RocketMQ re-checks
             * with endPhyOffset the same way). */
            const uint8_t *p;
            struct mfile *mf = clog_pin(cl, h.end_phy, 8, &p);
            int64_t at = h.end_phy;
            if (mf != NULL) {
                if (be32_get(p + 4) == CLOG_MAGIC)
                    at += be32_get(p);
                mfile_unpin(mf);
            }
            if (at > next)
                next = at;
        }
    }
    if (next > clog_wrote(cl))
        next = clog_wrote(cl);
    ix->next = next;
    atomic_store_explicit(&ix->next_seen, next, memory_order_release);
    ix->flushed_files = ix->n > 0 ? ix->n - 1 : 0;
    /* The last file is written again: its header and slots need their
     * blocks (it may be a sparse copy). */
    ix->res_hi = 0;
    if (ix->n > 0) {
        size_t slots_end = HDR + (size_t)ix->slots * 4;
        if (mfile_reserve_range(ix->files[ix->n - 1], 0, slots_end) == 0)
            ix->res_hi = slots_end;
        else
            log_error("index: %s", err_msg());
    }
    pthread_mutex_unlock(&ix->lock);
}

/* A new file, named by the current local time; if that would not sort
 * after the last file (a clock step, or files from a clock ahead of
 * ours), the last name plus one: names must stay in creation order. */
static struct mfile *
create_file(struct index *ix)
{
    char path[PATH_MAX];
    int64_t ms = clock_wall_ms();
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&s, &tm);
    /* yyyyMMddHHmmssSSS as a number: the name, and easy to bump. */
    int64_t v = (int64_t)(tm.tm_year + 1900) * 10000000000000LL +
                (int64_t)(tm.tm_mon + 1) * 100000000000LL +
                (int64_t)tm.tm_mday * 1000000000LL +
                (int64_t)tm.tm_hour * 10000000LL + (int64_t)tm.tm_min * 100000LL +
                (int64_t)tm.tm_sec * 1000LL + ms % 1000;
    if (ix->n > 0) {
        const char *last = strrchr(ix->files[ix->n - 1]->path, '/') + 1;
        int64_t lv = strtoll(last, NULL, 10);
        if (v <= lv)
            v = lv + 1;
    }
    snprintf(path, sizeof(path), "%s/%017" PRId64, ix->dir, v);
    /* Sparse (420 MB by default): the header and slots, written at
     * random, are reserved now; entries, appended in order, a chunk at
     * a time in put_key (no SIGBUS on a full disk). */
    struct mfile *mf = mfile_open(path, 0, ix->file_size, MF_CREATE);
    if (mf == NULL)
        return NULL;
    if (mfile_reserve_range(mf, 0, HDR + (size_t)ix->slots * 4) != 0) {
        mfile_retire(mf);
        return NULL;
    }
    ix->res_hi = HDR + (size_t)ix->slots * 4;
    return mf;
}

/* The file to add to: the last one unless full.  Lock held. */
static struct mfile *
writable_file(struct index *ix)
{
    struct ixhdr h = { 0, 0, 0, 0, 0, 1 };
    if (ix->n > 0) {
        struct mfile *last = ix->files[ix->n - 1];
        hdr_get(last->base, &h);
        if ((uint32_t)h.count < ix->max_entries)
            return last;
    }
    struct mfile *mf = create_file(ix);
    if (mf == NULL || files_push(ix, mf) != 0) {
        if (!ix->warned)
            log_error("index: cannot create a file (%s); messages are not "
                      "indexed until this is fixed", err_msg());
        ix->warned = true;
        if (mf != NULL)
            mfile_retire(mf);
        return NULL;
    }
    ix->warned = false;
    struct ixhdr nh = { h.end_ts, h.end_ts, h.end_phy, h.end_phy, 0, 1 };
    hdr_put(mf->base, &nh);
    return mf;
}

static void
put_key(struct index *ix, int32_t th, const char *key, size_t klen,
        int64_t phy, int64_t ts)
{
    struct mfile *mf = writable_file(ix);
    if (mf == NULL)
        return;
    uint8_t *b = mf->base;
    struct ixhdr h;
    hdr_get(b, &h);
    uint32_t kh = key_hash_from(th, key, klen);
    uint8_t *slot = b + HDR + (size_t)(kh % ix->slots) * 4;
    int32_t prev = (int32_t)be32_get(slot);
    if (prev <= 0 || prev > h.count)
        prev = 0;
    int64_t diff = h.begin_ts <= 0 ? 0 : (ts - h.begin_ts) / 1000;
    if (diff > INT32_MAX)
        diff = INT32_MAX;
    if (diff < 0)
        diff = 0;
    size_t eoff = HDR + (size_t)ix->slots * 4 + (size_t)h.count * ENTRY;
    if (eoff + ENTRY > ix->res_hi || ix->res_hi < HDR + (size_t)ix->slots * 4) {
        if (ix->res_hi < HDR + (size_t)ix->slots * 4 &&
            mfile_reserve_range(mf, 0, HDR + (size_t)ix->slots * 4) != 0)
            return;
        if (mfile_reserve_range(mf, eoff, RESERVE_CHUNK) != 0) {
            if (!ix->warned)
                log_error("index: %s; messages are not indexed until "
                          "there is space", err_msg());
            ix->warned = true;
            return;
        }
        ix->warned = false;
        ix->res_hi = eoff + RESERVE_CHUNK;
    }
    uint8_t *e = b + eoff;
    be32_put(e, kh);
    be64_put(e + 4, (uint64_t)phy);
    be32_put(e + 12, (uint32_t)diff);
    be32_put(e + 16, (uint32_t)prev);
    be32_put(slot, (uint32_t)h.count);
    if (h.count <= 1) {
        h.begin_phy = phy;
        h.begin_ts = ts;
    }
    if (prev == 0)
        h.slot_count++;
    h.count++;
    h.end_phy = phy;
    h.end_ts = ts;
    hdr_put(b, &h);
}

static void
index_record(struct index *ix, const struct clog_view *v, int64_t phy)
{
    if ((v->sysflag & SYSFLAG_TX_MASK) == SYSFLAG_TX_ROLLBACK)
        return;
    const char *props = (const char *)v->props;
    /* Both keys in one pass over the pairs (the last of each wins, as
     * props_find's). */
    const char *uniq = NULL, *keys = NULL;
    size_t un = 0, n = 0, pos = 0;
    struct prop kv;
    while (props_next(props, v->props_len, &pos, &kv)) {
        if (kv.klen == 8 && memcmp(kv.k, "UNIQ_KEY", 8) == 0) {
            uniq = kv.v;
            un = kv.vlen;
        } else if (kv.klen == 4 && memcmp(kv.k, "KEYS", 4) == 0) {
            keys = kv.v;
            n = kv.vlen;
        }
    }
    if (uniq == NULL && keys == NULL)
        return;
    int32_t th = topic_hash((const char *)v->topic, v->topic_len);
    if (uniq != NULL)
        put_key(ix, th, uniq, un, phy, v->store_ts);
    while (keys != NULL && n > 0) {
        const char *sp = memchr(keys, ' ', n);
        size_t len = sp ? (size_t)(sp - keys) : n;
        if (len > 0)
            put_key(ix, th, keys, len, phy, v->store_ts);
        if (sp == NULL)
            break;
        n -= len + 1;
        keys = sp + 1;
    }
}

#define IX_RBUF (256 * 1024)

/* `need` bytes of the log at pos (in mf, below `limit`): from the read
 * buffer, refilled with one pread of up to IX_RBUF bytes, stopping at
 * `stop` when the bytes fit before it (a record whose meta the index
 * has: its body is not copied); from the mapping when they do not fit
 * or the read fails.  Index lock held. */
static const uint8_t *
log_bytes(struct index *ix, struct mfile *mf, int64_t pos, size_t need,
          int64_t limit, int64_t stop)
{
    if (pos >= ix->rb_pos && pos + (int64_t)need <= ix->rb_pos + (int64_t)ix->rb_len)
        return ix->rbuf + (pos - ix->rb_pos);
    if (need > IX_RBUF)
        return mf->base + (pos - mf->start);
    if (ix->rbuf == NULL && (ix->rbuf = malloc(IX_RBUF)) == NULL)
        return mf->base + (pos - mf->start);
    if (ix->rfd < 0 || ix->rfd_start != mf->start) {
        if (ix->rfd >= 0)
            close(ix->rfd);
        ix->rfd = mfile_open_fd(mf);
        ix->rfd_start = mf->start;
    }
    ix->rb_len = 0;
    int64_t want = limit - pos < IX_RBUF ? limit - pos : IX_RBUF;
    if (stop - pos < want && stop - pos >= (int64_t)need)
        want = stop - pos;
    ssize_t k = ix->rfd >= 0 ? pread(ix->rfd, ix->rbuf, (size_t)want, (off_t)(pos - mf->start)) : -1;
    if (k < (ssize_t)need)
        return mf->base + (pos - mf->start);
    ix->rb_pos = pos;
    ix->rb_len = (size_t)k;
    return ix->rbuf;
}

/* The meta of the record at pos (clog_metas_take) and its real size in
 * *whole, its length in *n; NULL when there is none, and *next: where
 * the next record with a meta starts (INT64_MAX: none known).  Index
 * lock held. */
static const uint8_t *
meta_at(struct index *ix, struct commitlog *cl, int64_t pos, uint32_t *whole,
        size_t *n, int64_t *next)
{
    *next = INT64_MAX;
    /* A truncation (HA) during this pass: the metas held may describe
     * bytes no longer at their offsets. */
    if (ix->mq_len > 0 && ix->mq_gen != clog_generation(cl))
        ix->mq_at = ix->mq_len = 0;
    for (;;) {
        if (ix->mq_at >= ix->mq_len) {
            ix->mq_at = 0;
            ix->mq_gen = clog_generation(cl);
            ix->mq_len = clog_metas_take(cl, &ix->mq);
            if (ix->mq_len == 0)
                return NULL;
        }
        const uint8_t *e = ix->mq + ix->mq_at;
        int64_t phy;
        uint32_t u[2];
        memcpy(&phy, e, 8);
        memcpy(u, e + 8, 8);
        if (phy > pos) {
            *next = phy;
            return NULL;
        }
        ix->mq_at += CLOG_META_HDR + ((u[1] + 7) & ~(size_t)7);
        if (phy == pos) {
            *whole = u[0];
            *n = u[1];
            return e + CLOG_META_HDR;
        }
        /* phy < pos: read from the log already (it was behind). */
    }
}

int
ix_dispatch(struct index *ix, struct commitlog *cl, int max_records)
{
    if (!ix->enabled)
        return 0;
    int count = 0;
    pthread_mutex_lock(&ix->lock);
    ix->rb_len = 0;  /* a truncated log may have new bytes at old offsets */
    if (ix->mq_gen != clog_generation(cl))
        ix->mq_at = ix->mq_len = 0;  /* and so may the metas held */
    int64_t pos = ix->next;
    int64_t w = clog_wrote(cl);
    if (pos < clog_min(cl))
        pos = clog_min(cl);
    while (pos < w && (max_records <= 0 || count < max_records)) {
        struct mfile *mf = mfq_find(&cl->q, pos);
        if (mf == NULL) {
            pos = clog_roll_next(cl, pos);
            continue;
        }
        int64_t fend = mf->start + (int64_t)mf->size;
        int64_t limit = w < fend ? w : fend;
        while (pos < w && pos < fend && (max_records <= 0 || count < max_records)) {
            size_t rel = (size_t)(pos - mf->start);
            struct clog_view v;
            /* A record below `wrote` is whole: its size says how much to
             * read (a BLANK or anything else: its first 8 bytes). */
            const uint8_t *p = mf->base + rel;
            size_t avail = mf->size - rel;
            uint32_t whole = 0;  /* read from a meta: the record's size */
            size_t mn = 0;
            int64_t next;
            const uint8_t *m = meta_at(ix, cl, pos, &whole, &mn, &next);
            if (m != NULL) {
                p = m;
                avail = mn;
            } else if (limit - pos >= CLOG_BLANK_MIN) {
                const uint8_t *h = log_bytes(ix, mf, pos, CLOG_BLANK_MIN, limit, next);
                uint32_t size = be32_get(h), magic = be32_get(h + 4);
                if (magic == CLOG_BLANK_MAGIC)
                    p = h;
                else if (magic == CLOG_MAGIC && size > CLOG_BLANK_MIN &&
                         size <= (uint64_t)(limit - pos))
                    p = log_bytes(ix, mf, pos, size, limit, next);
            }
            int r = clog_decode(p, avail, -1, false, &v);
            if (r == CLOG_REC) {
                index_record(ix, &v, pos);
                pos += m != NULL ? whole : v.size;
                count++;
                /* Read: the page cache drop may pass it (store/flush.c). */
                atomic_store_explicit(&ix->next_seen, pos, memory_order_relaxed);
            } else {
                if (r != CLOG_BLANK)
                    log_error("index: no record at commit log offset %" PRId64
                              "; skipping to the next file", pos);
                pos = fend;
            }
        }
        mfile_unpin(mf);
    }
    ix->next = pos;
    atomic_store_explicit(&ix->next_seen, pos, memory_order_release);
    pthread_mutex_unlock(&ix->lock);
    return count;
}

/* The last file's endPhyOffset after a cut to `end`: the last entry
 * before the cut, or -1 (none: ix_resume starts at the log's first
 * record).  ix_resume restarts after that record; left past the cut, it
 * would restart inside (or after) the records that replaced the removed
 * ones, and never index them.  Entries are in log order, so the walk
 * back stops at the first one below `end`: it reads only the entries
 * past the cut, and those of files before the last only when the last
 * has none below it.  Lock held. */
static void
cut_end_phy(struct index *ix, int64_t end)
{
    if (ix->n == 0)
        return;
    uint8_t *last = ix->files[ix->n - 1]->base;
    struct ixhdr h;
    hdr_get(last, &h);
    if (h.end_phy < end)
        return;
    int64_t found = -1;
    for (size_t f = ix->n; f-- > 0 && found < 0;) {
        const uint8_t *b = ix->files[f]->base;
        struct ixhdr fh;
        hdr_get(b, &fh);
        const uint8_t *ents = b + HDR + (size_t)ix->slots * 4;
        for (int32_t i = fh.count - 1; i >= 1; i--) {
            int64_t phy = (int64_t)be64_get(ents + (size_t)i * ENTRY + 4);
            if (phy < end) {
                found = phy;
                break;
            }
        }
    }
    h.end_phy = found;
    hdr_put(last, &h);
}

int
ix_cut_log(struct index *ix, struct commitlog *cl, int64_t end, bool zero_tail)
{
    /* The index's lock first: a dispatch in progress finishes before the
     * bytes past `end` change, and none starts until `next` is right.
     * (Lock order: the log's append lock, then this one; a dispatch
     * never takes the append lock.) */
    pthread_mutex_lock(&ix->lock);
    int rc = clog_set_end(cl, end, zero_tail);
    if (ix->next > end)
        ix->next = end;
    cut_end_phy(ix, end);
    atomic_store_explicit(&ix->next_seen, ix->next, memory_order_release);
    ix->rb_len = 0;
    ix->mq_at = ix->mq_len = 0;
    pthread_mutex_unlock(&ix->lock);
    return rc;
}

int64_t
ix_next(struct index *ix)
{
    pthread_mutex_lock(&ix->lock);
    int64_t v = ix->next;
    pthread_mutex_unlock(&ix->lock);
    return v;
}

static bool
time_matched(const struct ixhdr *h, int64_t begin, int64_t end)
{
    return (begin < h->begin_ts && end > h->end_ts) ||
           (begin >= h->begin_ts && begin <= h->end_ts) ||
           (end >= h->begin_ts && end <= h->end_ts);
}

static int
select_file(struct index *ix, const uint8_t *b, uint32_t kh, int cap,
            int got, int64_t begin, int64_t end, int64_t *out)
{
    struct ixhdr h;
    hdr_get(b, &h);
    int32_t slot = (int32_t)be32_get(b + HDR + (size_t)(kh % ix->slots) * 4);
    if (slot <= 0 || slot > h.count || h.count <= 1)
        return got;
    for (int32_t at = slot; got < cap;) {
        const uint8_t *e = b + HDR + (size_t)ix->slots * 4 + (size_t)at * ENTRY;
        uint32_t hash = be32_get(e);
        int64_t phy = (int64_t)be64_get(e + 4);
        int64_t diff = (int32_t)be32_get(e + 12);
        int32_t prev = (int32_t)be32_get(e + 16);
        if (diff < 0)
            break;
        int64_t t = h.begin_ts + diff * 1000;
        if (hash == kh && t >= begin && t <= end)
            out[got++] = phy;
        if (prev <= 0 || prev > h.count || prev == at || t < begin)
            break;
        at = prev;
    }
    return got;
}

int
ix_query(struct index *ix, const char *topic, size_t tlen, const char *key,
         size_t klen, int cap, int64_t begin, int64_t end, int64_t *out,
         int64_t *last_ts, int64_t *last_phy)
{
    uint32_t kh = key_hash(topic, tlen, key, klen);
    int got = 0;
    *last_ts = 0;
    *last_phy = 0;
    pthread_mutex_lock(&ix->lock);
    for (size_t i = ix->n; i > 0; i--) {
        const uint8_t *b = ix->files[i - 1]->base;
        struct ixhdr h;
        hdr_get(b, &h);
        if (i == ix->n) {
            *last_ts = h.end_ts;
            *last_phy = h.end_phy;
        }
        if (time_matched(&h, begin, end))
            got = select_file(ix, b, kh, cap, got, begin, end, out);
        if (h.begin_ts < begin || got >= cap)
            break;
    }
    pthread_mutex_unlock(&ix->lock);
    return got;
}

int
ix_flush(struct index *ix)
{
    int rc = 0;
    pthread_mutex_lock(&ix->lock);
    /* Full files were synced once (flushed_files); the last one may
     * still change, so it is synced every time. */
    for (size_t i = ix->flushed_files; i < ix->n && rc == 0; i++) {
        rc = mfile_sync(ix->files[i], 0, ix->files[i]->size);
        if (rc == 0 && i + 1 < ix->n)
            ix->flushed_files = i + 1;
    }
    pthread_mutex_unlock(&ix->lock);
    return rc;
}

int
ix_delete_expired(struct index *ix, int64_t clog_min)
{
    int deleted = 0;
    pthread_mutex_lock(&ix->lock);
    while (ix->n > 1) {
        struct ixhdr h;
        hdr_get(ix->files[0]->base, &h);
        if (h.end_phy >= clog_min)
            break;
        log_info("index: deleting %s (its messages are gone)",
                 ix->files[0]->path);
        mfile_retire(ix->files[0]);
        memmove(ix->files, ix->files + 1, (ix->n - 1) * sizeof(*ix->files));
        ix->n--;
        if (ix->flushed_files > 0)
            ix->flushed_files--;
        deleted++;
    }
    pthread_mutex_unlock(&ix->lock);
    return deleted;
}
