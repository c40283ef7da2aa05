/*
 * consumequeue: per-queue indexes into the commit log.
 *
 * CONSUME QUEUE FORMAT (RocketMQ 4.x; protocol.md §5.9)
 *
 * STORE/consumequeue/<topic>/<queueId>/ holds files of
 * mappedFileSizeConsumeQueue bytes (rounded up to a multiple of 20; 300000
 * entries by default), named by the byte offset of their first entry (20
 * digits), so entry n is at byte n * 20 of the queue.  Entry, big-endian:
 *
 *     0  int64  commit log offset of the record
 *     8  int32  record size (TOTALSIZE)
 *    12  int64  tags code: Java String.hashCode of the TAGS property,
 *               sign-extended (0 = no tag); for SCHEDULE_TOPIC_XXXX the
 *               delivery time in ms instead
 *
 * An entry is valid when its offset >= 0 and its size > 0 (RocketMQ's
 * recovery rule); zeros mean "not written".  The first file of a queue
 * may start with zero entries (a queue whose first offset is not at a
 * file boundary).  Only records with transaction type NOT or COMMIT get
 * an entry.
 *
 * Entries are written under the commit log's append lock, at the logical
 * offset the record itself carries (QUEUEOFFSET), so recovery can rebuild
 * any entry from the record.
 */
#include "store/consumequeue.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"
#include "core/siphash.h"

#define PAGE 4096

static inline void
entry_get(const uint8_t *p, struct cq_entry *e)
{
    e->phy = (int64_t)be64_get(p);
    e->size = (int32_t)be32_get(p + 8);
    e->tags = (int64_t)be64_get(p + 12);
}

static inline bool
entry_valid(const uint8_t *p)
{
    return (int64_t)be64_get(p) >= 0 && (int32_t)be32_get(p + 8) > 0;
}

/* {{{ Entries */

/* cq_write when the entry is not in the reserved part of the writer's
 * file, or the file is cold: finds (or makes) the file, reserves ahead. */
int
cq_write_slow(struct cq *c, int64_t idx, int64_t phy, int32_t size, int64_t tags)
{
    int64_t byte = idx * CQ_UNIT;
    int64_t fsize = (int64_t)c->q.file_size;
    struct mfile *f = c->cur;
    /* The writer pins its file for the write: a lazily mapped file is
     * never unmapped under it, and an idle queue's file can be
     * (mfpool.h).  Between writes `cur` is held by the queue's
     * reference only: it is the queue's last file (it is remembered
     * only when it is, below; only the writer adds files), which
     * retention never drops (mfq_drop_first keeps one), and a
     * truncation forgets it (drop_cur).  So the pin needs no lock while
     * the file is mapped; a cold one is mapped under it. */
    if (f != NULL && byte >= f->start && byte + CQ_UNIT <= f->start + fsize) {
        if (!mfile_pin_mapped(f) && mfq_pin(&c->q, f) == NULL)
            return -(errno ? errno : EIO);
    } else {
        f = mfq_find(&c->q, byte);
        if (f == NULL && errno != ENOENT)
            return -errno;  /* exists, but cannot be mapped now */
        if (f == NULL) {
            int64_t min = mfq_min(&c->q);
            if (min >= 0 && byte < min)
                return 0;  /* recovery: that part was deleted already */
            for (;;) {
                struct mfile *last = mfq_last(&c->q);
                int64_t start = byte - byte % fsize;
                if (last != NULL) {
                    start = last->start + fsize;
                    mfile_unpin(last);
                }
                struct mfile *nf = mfq_create(&c->q, start, false);
                if (nf == NULL)
                    return -(errno ? errno : EIO);
                if (byte < nf->start + fsize)
                    break;
            }
            f = mfq_find(&c->q, byte);
            if (f == NULL)
                return -(errno ? errno : EIO);
        }
        /* An entry below the queue's end (recovery, or a replicated
         * record a master sent again) may be in an earlier file, which
         * retention can drop: written through this pin, never kept as
         * cur, which the lock-free pin above relies on. */
        if (f != c->cur && mfq_is_last(&c->q, f)) {
            c->cur = f;
            c->res_lo = c->res_hi = 0;  /* the reserved span is cur's */
        }
    }
    bool own = f == c->cur;
    if (!own || byte < c->res_lo || byte + CQ_UNIT > c->res_hi) {
        /* Files are sparse; blocks are reserved a chunk at a time before
         * the mapping is written (no SIGBUS on a full disk). */
        int64_t rel = byte - f->start;
        /* The chunk grows with the file, a page first: most queues of a
         * broker with many topics hold a few entries, and reserving and
         * faulting 64 KiB for each (a page-cache read-around zeroing
         * more) took most of the CPU when 8,192 topics were
         * auto-created, under the append lock every send waits for. */
        int64_t chunk = PAGE;
        while (chunk < CQ_RESERVE_CHUNK && chunk <= rel)
            chunk *= 2;
        int64_t from = rel - rel % chunk;
        /* + one entry: an entry may straddle the chunk's end. */
        int64_t to = from + chunk + CQ_UNIT;
        if (to > fsize)
            to = fsize;
        int rc = mfile_reserve_range(f, (size_t)from, (size_t)(to - from));
        if (rc != 0) {
            mfile_unpin(f);
            return rc;
        }
        /* And fault the chunk in with one call: one page fault per 204
         * entries otherwise, measured at ~10% of a put.  Not for an
         * earlier file's entry: the writer goes on in its own. */
        if (own) {
            (void)mfile_warm(f, (size_t)from, (size_t)(to - from));
            c->res_lo = f->start + from;
            c->res_hi = f->start + to;
        }
    }
    cq_entry_put(f->base + (byte - f->start), phy, size, tags);
    mfile_unpin(f);
    return 0;
}

void
cq_clear(struct cq *c, int64_t idx)
{
    struct mfile *f = mfq_find(&c->q, idx * CQ_UNIT);
    if (f == NULL)
        return;
    memset(f->base + (idx * CQ_UNIT - f->start), 0, CQ_UNIT);
    mfile_unpin(f);
}

int
cq_read(struct cq *c, int64_t idx, struct cq_entry *e)
{
    struct mfile *f = mfq_find(&c->q, idx * CQ_UNIT);
    if (f == NULL)
        return -(errno ? errno : ENOENT);
    entry_get(f->base + (idx * CQ_UNIT - f->start), e);
    mfile_unpin(f);
    return 0;
}

struct mfile *
cq_span(struct cq *c, int64_t idx, int64_t max, const uint8_t **p, int64_t *n)
{
    int64_t byte = idx * CQ_UNIT;
    struct mfile *f = mfq_find(&c->q, byte);
    if (f == NULL)
        return NULL;
    int64_t in_file = (f->start + (int64_t)f->size - byte) / CQ_UNIT;
    *n = max - idx < in_file ? max - idx : in_file;
    *p = f->base + (byte - f->start);
    return f;
}

int64_t
cq_roll_next(struct cq *c, int64_t idx)
{
    int64_t byte = idx * CQ_UNIT;
    int64_t fsize = (int64_t)c->q.file_size;
    return (byte + fsize - byte % fsize) / CQ_UNIT;
}

/* }}} */

/* {{{ Flush, recovery, retention */

/* The writer forgets its file (its next write finds the file again). */
static void
drop_cur(struct cq *c)
{
    c->cur = NULL;
    c->res_lo = c->res_hi = 0;
}

int
cq_flush(struct cq *c, int least_pages, int64_t upto)
{
    int64_t max = cq_max(c);
    if (upto < 0 || upto > max)
        upto = max;
    int64_t from = c->flushed * CQ_UNIT, to = upto * CQ_UNIT;
    if (to <= from)
        return 1;
    if (least_pages > 0 && to / PAGE - from / PAGE < least_pages)
        return 0;
    int64_t pos = from;
    while (pos < to) {
        struct mfile *f = mfq_find(&c->q, pos);
        int64_t fend;
        if (f == NULL && errno != ENOENT)
            return -errno;  /* there, but cannot be mapped now: later */
        if (f == NULL) {
            /* Deleted by retention meanwhile: nothing to sync there. */
            int64_t fsize = (int64_t)c->q.file_size;
            pos = pos + fsize - pos % fsize;
            continue;
        }
        fend = f->start + (int64_t)f->size;
        int64_t end = to < fend ? to : fend;
        /* Full pages behind the writer: unmapped before the sync so the
         * writeback sends no TLB shoot-down to the writer (mfile.h). */
        int64_t behind = max * CQ_UNIT - (max * CQ_UNIT) % PAGE;
        if (behind > pos)
            mfile_drop_pages(f, (size_t)(pos - f->start),
                             (size_t)((behind < end ? behind : end) - f->start));
        int rc = mfile_sync(f, (size_t)(pos - f->start), (size_t)(end - f->start));
        mfile_unpin(f);
        if (rc != 0)
            return rc;
        pos = end;
    }
    c->flushed = upto;
    return 1;
}

void
cq_recover_max(struct cq *c)
{
    size_t n = mfq_count(&c->q);
    int64_t max = -1;
    for (size_t i = n; i-- > 0;) {
        struct mfile *f = mfq_at(&c->q, i);
        if (f == NULL)
            break;
        if (entry_valid(f->base)) {
            size_t k = 0, units = f->size / CQ_UNIT;
            while (k < units && entry_valid(f->base + k * CQ_UNIT))
                k++;
            max = f->start / CQ_UNIT + (int64_t)k;
            mfile_unpin(f);
            break;
        }
        mfile_unpin(f);
    }
    int64_t first = mfq_min(&c->q);
    if (max < 0)
        max = first < 0 ? 0 : first / CQ_UNIT;
    atomic_store(&c->max, max);
    atomic_store(&c->min, first < 0 ? max : first / CQ_UNIT);
    c->next = max;
    c->flushed = max;
    drop_cur(c);
}

void
cq_truncate(struct cq *c, int64_t clog_end, bool zero_tail)
{
    int64_t max = cq_max(c);
    int64_t first = mfq_min(&c->q);
    int64_t lo = first < 0 ? max : first / CQ_UNIT;
    while (max > lo) {
        struct cq_entry e;
        if (cq_read(c, max - 1, &e) != 0)
            break;
        if (e.size > 0 && e.phy >= 0 && e.phy + e.size <= clog_end)
            break;
        max--;
    }
    if (max != cq_max(c))
        log_info("consume queue %s/%d: %" PRId64 " entries past the commit "
                 "log end dropped", c->topic, c->qid, cq_max(c) - max);
    if (zero_tail) {
        struct mfile *f = mfq_find(&c->q, max * CQ_UNIT);
        if (f != NULL) {
            if (mfile_zero_tail(f, (size_t)(max * CQ_UNIT - f->start), true) != 0)
                log_warn("%s", err_msg());
            mfile_unpin(f);
        }
    }
    mfq_truncate(&c->q, max * CQ_UNIT);
    atomic_store(&c->max, max);
    c->next = max;
    if (c->flushed > max)
        c->flushed = max;
    if (cq_min(c) > max)
        atomic_store(&c->min, max);
    drop_cur(c);
}

void
cq_correct_min(struct cq *c, int64_t clog_min)
{
    int64_t max = cq_max(c);
    int64_t idx = cq_min(c);
    int64_t first = mfq_min(&c->q);
    if (first >= 0 && idx < first / CQ_UNIT)
        idx = first / CQ_UNIT;
    while (idx < max) {
        const uint8_t *p;
        int64_t n;
        struct mfile *f = cq_span(c, idx, max, &p, &n);
        if (f == NULL && errno != ENOENT)
            break;  /* cannot be mapped now: min stays where it was */
        if (f == NULL) {
            idx = cq_roll_next(c, idx);
            continue;
        }
        int64_t k = 0;
        for (; k < n; k++) {
            struct cq_entry e;
            entry_get(p + k * CQ_UNIT, &e);
            if (e.size > 0 && e.phy >= clog_min)
                break;
        }
        mfile_unpin(f);
        idx += k;
        if (k < n)
            break;
    }
    if (idx > max)
        idx = max;
    atomic_store_explicit(&c->min, idx, memory_order_release);
}

int
cq_delete_expired(struct cq *c, int64_t clog_min)
{
    int deleted = 0;
    while (mfq_count(&c->q) > 1) {
        struct mfile *f = mfq_first(&c->q);
        if (f == NULL)
            break;
        struct cq_entry e;
        entry_get(f->base + f->size - CQ_UNIT, &e);
        bool expired = e.phy < clog_min;
        bool dropped = expired && mfq_drop_first(&c->q, f, 1);
        mfile_unpin(f);
        if (!dropped)
            break;
        deleted++;
    }
    if (deleted > 0)
        log_info("consume queue %s/%d: %d expired file(s) deleted", c->topic,
                 c->qid, deleted);
    cq_correct_min(c, clog_min);
    return deleted;
}

/* }}} */

/* {{{ Table */

/* Keyed (core/siphash.h): topics are names a peer chooses (auto-create),
 * so an unkeyed hash would let it fill one chain.  The queue id is mixed
 * in after (it is ours: 0..queueNums-1). */
static uint32_t
key_hash(const char *topic, size_t tlen, int32_t qid)
{
    uint64_t h = siphash_bytes(topic, tlen);
    h ^= (uint64_t)(uint32_t)qid * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Generations start at 1; 0 marks an empty cache slot.  A process-wide
 * counter: the one piece of shared state the cache needs. */
static _Atomic uint64_t table_gen;

#define CACHE_SLOTS 64

struct cache_slot {
    uint64_t gen;
    uint32_t hash;             /* cache_index() of the key */
    struct cq *c;
};

static _Thread_local struct cache_slot cache[CACHE_SLOTS];

int
cqt_init(struct cqtable *t, const char *root, size_t file_size,
         size_t max_mapped)
{
    memset(t, 0, sizeof(*t));
    int prc = mfpool_init(&t->pool, max_mapped);
    if (prc != 0)
        return prc;
    t->gen = atomic_fetch_add(&table_gen, 1) + 1;
    t->nbuckets = 64;
    t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
    t->root = strdup(root);
    t->file_size = file_size;
    if (t->buckets == NULL || t->root == NULL) {
        free(t->buckets);
        free(t->root);
        t->buckets = NULL;
        mfpool_destroy(&t->pool);
        err_set("out of memory");
        return -ENOMEM;
    }
    pthread_rwlock_init(&t->lock, NULL);
    pthread_mutex_init(&t->make_lock, NULL);
    pthread_mutex_init(&t->mk_mu, NULL);
    pthread_cond_init(&t->mk_cond, NULL);
    int rc = mkdir_p(root);
    return rc;
}

static void
cq_free(struct cq *c)
{
    mfq_destroy(&c->q);
    free(c->topic);
    free(c);
}

void
cqt_destroy(struct cqtable *t)
{
    if (t->buckets == NULL)
        return;
    /* The maker first: it may be making a queue (and then calls its
     * hook); queues still asked for are dropped (their sends are held
     * by workers that are gone by now). */
    pthread_mutex_lock(&t->mk_mu);
    bool started = t->mk_started;
    t->mk_stop = true;
    pthread_cond_broadcast(&t->mk_cond);
    pthread_mutex_unlock(&t->mk_mu);
    if (started)
        pthread_join(t->mk_thread, NULL);
    while (t->mk_head != NULL) {
        struct cq_make *m = t->mk_head;
        t->mk_head = m->next;
        free(m);
    }
    pthread_mutex_destroy(&t->mk_mu);
    pthread_cond_destroy(&t->mk_cond);
    pthread_mutex_destroy(&t->make_lock);
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct cq *c = t->buckets[i];
        while (c != NULL) {
            struct cq *next = c->chain;
            cq_free(c);
            c = next;
        }
    }
    free(t->buckets);
    t->buckets = NULL;
    free(t->root);
    pthread_rwlock_destroy(&t->lock);
    mfpool_destroy(&t->pool);
}

static struct cq *
find_locked(struct cqtable *t, const char *topic, size_t tlen, int32_t qid,
            uint32_t h)
{
    for (struct cq *c = t->buckets[h & (t->nbuckets - 1)]; c; c = c->chain)
        if (c->hash == h && c->qid == qid && c->topic_len == tlen &&
            memcmp(c->topic, topic, tlen) == 0)
            return c;
    return NULL;
}

/* The per-thread cache's slot for a key: a cheap unkeyed mix of the
 * length, the queue id and the first and last 8 bytes, so that a hit
 * costs no SipHash.  Names a peer makes collide here only share a slot
 * (a miss, then the keyed table): never a longer walk. */
static inline uint32_t
cache_index(const char *topic, size_t tlen, int32_t qid)
{
    uint64_t a = 0, b = 0;
    if (tlen >= 8) {
        memcpy(&a, topic, 8);
        memcpy(&b, topic + tlen - 8, 8);
    } else if (tlen >= 4) {
        /* Two overlapping words, as above: no byte loop. */
        uint32_t x, y;
        memcpy(&x, topic, 4);
        memcpy(&y, topic + tlen - 4, 4);
        a = (uint64_t)x << 32 | y;
    } else {
        for (size_t i = 0; i < tlen; i++)
            a = (a << 8) | (uint8_t)topic[i];
    }
    uint64_t x = (a ^ (b * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)tlen << 32) ^ (uint32_t)qid) *
                 0xFF51AFD7ED558CCDull;
    return (uint32_t)(x >> 32);
}


struct cq *
cqt_find(struct cqtable *t, const char *topic, size_t tlen, int32_t qid)
{
    uint32_t ci = cache_index(topic, tlen, qid);
    struct cache_slot *slot = &cache[ci % CACHE_SLOTS];
    if (slot->gen == t->gen && slot->hash == ci) {
        struct cq *c = slot->c;
        if (c->qid == qid && c->topic_len == tlen && bytes_eq(c->topic, topic, tlen))
            return c;
    }
    uint32_t h = key_hash(topic, tlen, qid);
    pthread_rwlock_rdlock(&t->lock);
    struct cq *c = find_locked(t, topic, tlen, qid, h);
    pthread_rwlock_unlock(&t->lock);
    if (c != NULL) {
        slot->gen = t->gen;
        slot->hash = ci;
        slot->c = c;
    }
    return c;
}

static void
grow_locked(struct cqtable *t)
{
    size_t nb = t->nbuckets * 2;
    struct cq **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;  /* longer chains, still correct */
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct cq *c = t->buckets[i];
        while (c != NULL) {
            struct cq *next = c->chain;
            c->chain = b[c->hash & (nb - 1)];
            b[c->hash & (nb - 1)] = c;
            c = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

/* A topic is a directory name: refuse what would escape or break it. */
static bool
topic_ok(const char *topic, size_t tlen)
{
    if (tlen == 0 || tlen > 127)
        return false;
    if ((tlen == 1 && topic[0] == '.') ||
        (tlen == 2 && topic[0] == '.' && topic[1] == '.'))
        return false;
    return memchr(topic, '/', tlen) == NULL && memchr(topic, 0, tlen) == NULL;
}

/* A queue new to a master's put path starts at offset 0: its first file
 * is created, and its first page reserved and faulted in, here, before
 * the queue is in the table -- not by its first write, under the commit
 * log's append lock that every send waits for (perf: the file system
 * work of new queues dominated the broker while 8,192 topics were
 * auto-created).  Best effort: whatever fails here the writer does.
 * The queue is still private. */
static void
prepare_first(struct cq *c)
{
    struct mfile *f = mfq_create(&c->q, 0, false);
    if (f == NULL) {
        log_debug("consume queue %s/%d: %s (its first write retries)", c->topic, c->qid, err_msg());
        return;
    }
    struct mfile *p = mfq_pin(&c->q, f);  /* mapped again if trimmed */
    if (p == NULL)
        return;
    int64_t to = PAGE + CQ_UNIT < (int64_t)p->size ? PAGE + CQ_UNIT : (int64_t)p->size;
    if (mfile_reserve_range(p, 0, (size_t)to) == 0) {
        (void)mfile_warm(p, 0, (size_t)to);
        c->cur = p;
        c->res_lo = 0;
        c->res_hi = to;
    }
    mfile_unpin(p);
}

/* Makes a queue (its directory, and with `fresh` -- a master's new
 * queue, starting at 0 -- its first file: prepare_first), not in the
 * table yet.  With `load`, opens the files it has instead.  No table
 * lock: a new queue is private until inserted, and make_lock (or the
 * table being private, at load) keeps two threads from making the same
 * one. */
static struct cq *
queue_new(struct cqtable *t, const char *topic, size_t tlen, int32_t qid,
          uint32_t h, bool load, bool fresh)
{
    struct cq *c = calloc(1, sizeof(*c));
    char *tp = malloc(tlen + 1);
    if (c == NULL || tp == NULL) {
        free(c);
        free(tp);
        err_set("out of memory");
        return NULL;
    }
    memcpy(tp, topic, tlen);
    tp[tlen] = '\0';
    c->topic = tp;
    c->topic_len = (uint32_t)tlen;
    c->qid = qid;
    c->hash = h;
    atomic_init(&c->rd[0], INT64_MAX);
    atomic_init(&c->rd[1], INT64_MAX);
    if (!load) {
        /* A slow file system, for tests (core/errinj.h): in 10 ms steps,
         * the point read again at each, so a spec lowering it ends the
         * wait when it chooses rather than when a clock does. */
        for (int64_t slept = 0; slept < errinj_get(ERRINJ_CQ_CREATE_DELAY_MS); slept += 10) {
            struct timespec d = { .tv_sec = 0, .tv_nsec = 10 * 1000000 };
            while (nanosleep(&d, &d) != 0 && errno == EINTR)
                ;
        }
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/%s/%d", t->root, tp, qid);
    if (mfq_init(&c->q, dir, t->file_size) != 0) {
        free(tp);
        free(c);
        return NULL;
    }
    mfq_set_pool(&c->q, &t->pool);
    if (load) {
        if (mfq_load(&c->q) != 0) {
            cq_free(c);
            return NULL;
        }
        cq_recover_max(c);
    } else if (fresh) {
        prepare_first(c);
    }
    return c;
}

/* Inserts a made queue; table write-locked (or private). */
static void
insert_locked(struct cqtable *t, struct cq *c)
{
    uint32_t h = c->hash;
    c->chain = t->buckets[h & (t->nbuckets - 1)];
    t->buckets[h & (t->nbuckets - 1)] = c;
    if (++t->count > t->nbuckets)
        grow_locked(t);
}

/* A queue not in the table yet (get): made under make_lock. */
static __attribute__((noinline)) struct cq *
get_slow(struct cqtable *t, const char *topic, size_t tlen, int32_t qid, bool fresh)
{
    struct cq *c;
    if (!topic_ok(topic, tlen) || qid < 0) {
        err_set("illegal topic or queue for the store: '%.*s' %d",
                (int)(tlen > 127 ? 127 : tlen), topic, qid);
        return NULL;
    }
    uint32_t h = key_hash(topic, tlen, qid);
    /* The file system's work outside the table's lock: a look-up of
     * another queue (a cache miss takes the read lock) must not wait for
     * this one's mkdir. */
    pthread_mutex_lock(&t->make_lock);
    pthread_rwlock_rdlock(&t->lock);
    c = find_locked(t, topic, tlen, qid, h);
    pthread_rwlock_unlock(&t->lock);
    if (c == NULL) {
        c = queue_new(t, topic, tlen, qid, h, false, fresh);
        if (c != NULL) {
            pthread_rwlock_wrlock(&t->lock);
            insert_locked(t, c);
            pthread_rwlock_unlock(&t->lock);
        }
    }
    pthread_mutex_unlock(&t->make_lock);
    return c;
}

/* The look-up alone inlined into its callers: a put's queue is found in
 * the cache without a second call and its frame. */
static inline struct cq *
get(struct cqtable *t, const char *topic, size_t tlen, int32_t qid, bool fresh)
{
    struct cq *c = cqt_find(t, topic, tlen, qid);
    return c != NULL ? c : get_slow(t, topic, tlen, qid, fresh);
}

struct cq *
cqt_get(struct cqtable *t, const char *topic, size_t tlen, int32_t qid)
{
    return get(t, topic, tlen, qid, false);
}

struct cq *
cqt_get_for_put(struct cqtable *t, const char *topic, size_t tlen, int32_t qid)
{
    return get(t, topic, tlen, qid, true);
}

int
cqt_load(struct cqtable *t)
{
    DIR *d = opendir(t->root);
    if (d == NULL) {
        err_set("cannot list %s: %s", t->root, strerror(errno));
        return -errno;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        const char *topic = de->d_name;
        size_t tlen = strlen(topic);
        if (!topic_ok(topic, tlen))
            continue;
        char tdir[PATH_MAX];
        snprintf(tdir, sizeof(tdir), "%s/%s", t->root, topic);
        DIR *qd = opendir(tdir);
        if (qd == NULL)
            continue;  /* a file, not a topic directory */
        struct dirent *qe;
        while ((qe = readdir(qd)) != NULL) {
            char *end;
            long qid = strtol(qe->d_name, &end, 10);
            if (*end != '\0' || end == qe->d_name || qid < 0 || qid > INT32_MAX)
                continue;
            uint32_t h = key_hash(topic, tlen, (int32_t)qid);
            struct cq *c = queue_new(t, topic, tlen, (int32_t)qid, h, true, false);
            if (c == NULL) {
                rc = -EINVAL;
                break;
            }
            insert_locked(t, c);
        }
        closedir(qd);
    }
    closedir(d);
    return rc;
}

/* {{{ The maker thread */

/* Queues asked for and not made yet: one per held send at most (a send
 * holds its connection's next frames), so this bound is only a guard. */
#define MK_MAX 65536

static void *
maker_main(void *arg)
{
    struct cqtable *t = arg;
    log_set_thread_name("store-cqmake");
    pthread_setname_np(pthread_self(), "store-cqmake");  /* for top -H, perf */
    pthread_mutex_lock(&t->mk_mu);
    while (!t->mk_stop) {
        struct cq_make *m = t->mk_head;
        if (m == NULL) {
            pthread_cond_wait(&t->mk_cond, &t->mk_mu);
            continue;
        }
        t->mk_head = m->next;
        if (t->mk_head == NULL)
            t->mk_tail = NULL;
        t->mk_len--;
        pthread_mutex_unlock(&t->mk_mu);
        struct cq *c = get(t, m->topic, m->tlen, m->qid, true);
        if (c == NULL)
            log_warn("cannot make consume queue %.*s/%d: %s (its send makes it again)",
                     (int)m->tlen, m->topic, m->qid, err_msg());
        pthread_mutex_lock(&t->mk_mu);
        cqt_made_fn fn = t->made;
        void *fa = t->made_arg;
        pthread_mutex_unlock(&t->mk_mu);
        if (fn != NULL)
            fn(fa, m->topic, m->tlen, m->qid, c != NULL);
        free(m);
        pthread_mutex_lock(&t->mk_mu);
    }
    pthread_mutex_unlock(&t->mk_mu);
    return NULL;
}

int
cqt_request(struct cqtable *t, const char *topic, size_t tlen, int32_t qid)
{
    if (cqt_find(t, topic, tlen, qid) != NULL)
        return 1;
    if (!topic_ok(topic, tlen) || qid < 0)
        return -EINVAL;
    struct cq_make *m = malloc(sizeof(*m) + tlen);
    if (m == NULL)
        return -ENOMEM;
    m->next = NULL;
    m->qid = qid;
    m->tlen = (uint32_t)tlen;
    memcpy(m->topic, topic, tlen);
    pthread_mutex_lock(&t->mk_mu);
    int rc = 0;
    if (t->mk_stop)
        rc = -ESHUTDOWN;
    else if (t->mk_len >= MK_MAX)
        rc = -EBUSY;
    else if (!t->mk_started) {
        int e = pthread_create(&t->mk_thread, NULL, maker_main, t);
        if (e != 0)
            rc = -e;
        else
            t->mk_started = true;
    }
    if (rc != 0) {
        pthread_mutex_unlock(&t->mk_mu);
        free(m);
        return rc;
    }
    if (t->mk_tail != NULL)
        t->mk_tail->next = m;
    else
        t->mk_head = m;
    t->mk_tail = m;
    t->mk_len++;
    pthread_cond_signal(&t->mk_cond);
    pthread_mutex_unlock(&t->mk_mu);
    return 0;
}

void
cqt_set_made_hook(struct cqtable *t, cqt_made_fn fn, void *arg)
{
    pthread_mutex_lock(&t->mk_mu);
    t->made = fn;
    t->made_arg = arg;
    pthread_mutex_unlock(&t->mk_mu);
}

/* }}} */

int
cqt_snapshot(struct cqtable *t, struct cq ***out)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = t->count;
    struct cq **a = malloc((n ? n : 1) * sizeof(*a));
    if (a == NULL) {
        pthread_rwlock_unlock(&t->lock);
        err_set("out of memory");
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < t->nbuckets; i++)
        for (struct cq *c = t->buckets[i]; c != NULL && k < n; c = c->chain)
            a[k++] = c;
    pthread_rwlock_unlock(&t->lock);
    *out = a;
    return (int)k;
}

int
cqt_foreach(struct cqtable *t, int (*fn)(struct cq *, void *), void *arg)
{
    int rc = 0;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->nbuckets && rc == 0; i++)
        for (struct cq *c = t->buckets[i]; c != NULL && rc == 0; c = c->chain)
            rc = fn(c, arg);
    pthread_rwlock_unlock(&t->lock);
    return rc;
}

/* }}} */
