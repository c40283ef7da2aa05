/*
 * access: putting and getting messages (see access.h): validation and
 * everything else that can be done before the append lock, the batch
 * encoding, RocketMQ's getMessage with its statuses and transfer limits,
 * and the look-ups by offset, time and key.
 */
#include "store/access.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/crc32.h"
#include "core/err.h"
#include "core/jstr.h"
#include "store/props.h"
#include "store/replica.h"
#include "core/log.h"

#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"

/* {{{ Names */

const char *
put_status_name(int s)
{
    static const char *const names[] = {
        "PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
        "SLAVE_NOT_AVAILABLE", "SERVICE_NOT_AVAILABLE",
        "CREATE_MAPEDFILE_FAILED", "MESSAGE_ILLEGAL",
        "PROPERTIES_SIZE_EXCEEDED", "OS_PAGECACHE_BUSY", "UNKNOWN_ERROR",
    };
    return s >= 0 && s <= PUT_UNKNOWN_ERROR ? names[s] : "UNKNOWN_ERROR";
}

const char *
get_status_name(int s)
{
    static const char *const names[] = {
        "FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING",
        "OFFSET_FOUND_NULL", "OFFSET_OVERFLOW_BADLY", "OFFSET_OVERFLOW_ONE",
        "OFFSET_TOO_SMALL", "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE",
    };
    return s >= 0 && s <= GET_NO_MESSAGE_IN_QUEUE ? names[s] : "UNKNOWN";
}

/* }}} */

/* {{{ Put */

static int64_t
tags_of(const char *props, size_t n)
{
    size_t vl;
    const char *v = props_find(props, n, "TAGS", &vl);
    return v != NULL ? (int64_t)java_hash(v, vl) : 0;
}

/* SCHEDULE_TOPIC_XXXX entries carry the delivery time: its delay. */
static int64_t
delay_of(struct store *s, const char *topic, size_t tlen, const char *props,
         size_t n)
{
    if (tlen != sizeof(SCHEDULE_TOPIC) - 1 || memcmp(topic, SCHEDULE_TOPIC, tlen) != 0)
        return 0;
    size_t vl;
    const char *v = props_find(props, n, "DELAY", &vl);
    int level = v != NULL ? props_delay_level(v, vl) : 0;
    if (level > s->conf.ndelay_levels)
        level = s->conf.ndelay_levels;
    return level > 0 ? s->conf.delay_levels[level] : 0;
}

static int
put_fail(struct store_put_result *r, int status)
{
    r->status = status;
    return status;
}

/* Why a put is refused by the store's state (closing, fenced,
 * read-only): off the hot path, with its message buffer. */
static __attribute__((noinline, cold)) int
put_refused(struct store *s, struct store_put_result *r)
{
    if (atomic_load_explicit(&s->closing, memory_order_relaxed)) {
        err_set("the store is closing");
        return put_fail(r, PUT_SERVICE_NOT_AVAILABLE);
    }
    if (store_fenced(s)) {
        /* 4.x's "message store is in slave mode": a slave's log is its
         * master's; a fenced master no longer knows it is the master. */
        err_set("the store is fenced (a slave, or a master cut from its controllers): puts are refused");
        return put_fail(r, PUT_SERVICE_NOT_AVAILABLE);
    }
    char why[256];
    if (!store_writable(s, why, sizeof(why))) {
        err_set("the store is read-only for writes: %s", why);
        return put_fail(r, PUT_SERVICE_NOT_AVAILABLE);
    }
    return PUT_OK;  /* writable again since the caller looked */
}

/* Checks what every put checks before anything is copied. */
static inline int
put_precheck(struct store *s, const struct store_msg *m,
             struct store_put_result *r)
{
    memset(r, 0, sizeof(*r));
    /* The three states in one test (no call, no buffer on this path). */
    if (__builtin_expect(atomic_load_explicit(&s->closing, memory_order_relaxed) |
                             atomic_load_explicit(&s->fenced, memory_order_relaxed) |
                             !atomic_load_explicit(&s->writable, memory_order_relaxed),
                         0) &&
        put_refused(s, r) != PUT_OK)
        return r->status;
    if (m->topic_len == 0 || m->topic_len > CLOG_TOPIC_MAX) {
        err_set("topic length %zu is not 1..%d", m->topic_len, CLOG_TOPIC_MAX);
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    if (m->props_len > CLOG_PROPS_MAX) {
        err_set("properties are %zu bytes, more than %d", m->props_len,
                CLOG_PROPS_MAX);
        return put_fail(r, PUT_PROPERTIES_SIZE_EXCEEDED);
    }
    if (m->qid < 0) {
        err_set("queue id %d is negative", m->qid);
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    if (m->born.len == 0 || m->store.len == 0) {
        err_set("born and store hosts are required");
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    if (m->body_len > (size_t)s->conf.max_message_size) {
        err_set("body of %zu bytes exceeds maxMessageSize %" PRId64,
                m->body_len, s->conf.max_message_size);
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    return PUT_OK;
}

static void
clog_msg_init(struct clog_msg *cm, const struct store_msg *m)
{
    memset(cm, 0, sizeof(*cm));
    cm->topic = m->topic;
    cm->topic_len = (uint32_t)m->topic_len;
    cm->qid = m->qid;
    cm->flag = m->flag;
    cm->sysflag = m->sysflag;
    cm->reconsume = m->reconsume;
    cm->born_ts = m->born_ts;
    cm->prep_tx_off = m->prep_tx_off;
    cm->born = m->born;
    cm->store = m->store;
}

static int
append_status(struct store *s, int rc, struct store_put_result *r)
{
    char why[300];
    switch (rc) {
    case -E2BIG:
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    case -EIO:
        snprintf(why, sizeof(why), "write failed: %s", err_msg());
        store_set_readonly(s, why);
        err_set("%s", why);
        return put_fail(r, PUT_UNKNOWN_ERROR);
    case -ENOSPC:
    case -EDQUOT:
    case -EROFS:
        /* The device: no put can succeed until space returns. */
        snprintf(why, sizeof(why), "cannot create a file: %s", err_msg());
        store_set_readonly(s, why);
        err_set("%s", why);
        return put_fail(r, PUT_CREATE_MAPEDFILE_FAILED);
    default:
        /* Out of descriptors or memory: this put fails, the next may not;
         * the store stays writable (RocketMQ answers the same status). */
        snprintf(why, sizeof(why), "cannot create a file: %s", err_msg());
        log_warn("put refused: %s", why);
        err_set("%s", why);
        return put_fail(r, PUT_CREATE_MAPEDFILE_FAILED);
    }
}

int
store_put(struct store *s, const struct store_msg *m,
          struct store_put_result *r)
{
    if (put_precheck(s, m, r) != PUT_OK)
        return r->status;
    struct clog_msg cm;
    clog_msg_init(&cm, m);
    cm.body = m->body;
    cm.body_len = (uint32_t)m->body_len;
    cm.props = m->props;
    cm.props_len = (uint32_t)m->props_len;
    cm.len = clog_msg_len(&cm);
    if (cm.len > (uint64_t)s->conf.max_message_size) {
        err_set("record of %u bytes exceeds maxMessageSize %" PRId64, cm.len,
                s->conf.max_message_size);
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    int tx = m->sysflag & SYSFLAG_TX_MASK;
    if (tx != SYSFLAG_TX_PREPARED && tx != SYSFLAG_TX_ROLLBACK) {
        cm.cq = cqt_get_for_put(&s->cqs, m->topic, m->topic_len, m->qid);
        if (cm.cq == NULL)
            return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    /* Everything that does not need the lock happens here. */
    cm.body_crc = rmq_body_crc(m->body, m->body_len);
    cm.tags_code = m->has_tags_code ? m->tags_code : tags_of(m->props, m->props_len);
    cm.delay_ms = delay_of(s, m->topic, m->topic_len, m->props, m->props_len);
    int64_t ts;
    int rc = clog_append(&s->clog, &cm, 1, &ts, m->defer, m->arrived_ms);
    if (rc != 0)
        return append_status(s, rc, r);
    r->status = PUT_OK;
    r->phy = cm.phy;
    r->qoff = cm.qoff;
    r->store_ts = ts;
    r->wrote = cm.len;
    r->end = cm.phy + cm.len;
    r->count = 1;
    return PUT_OK;
}

int
store_batch_count(const uint8_t *b, size_t len)
{
    size_t at = 0;
    int n = 0;
    while (at < len) {
        if (len - at < 22)
            return -1;
        uint32_t total = be32_get(b + at);
        uint32_t body_len = be32_get(b + at + 16);
        if (total < 22 || total > len - at || body_len > total - 22)
            return -1;
        uint16_t plen = be16_get(b + at + 20 + body_len);
        if (20u + body_len + 2u + plen != total)
            return -1;
        at += total;
        n++;
    }
    return n;
}

int
store_batch_cap(const uint8_t *body, size_t len)
{
    int n = store_batch_count(body, len);
    return n > 0 ? n : 1;
}

bool
store_put_must_wait(struct store *s, bool producer_waits, int64_t end)
{
    /* SYNC_MASTER: the wait also answers SLAVE_NOT_AVAILABLE (syncwait). */
    return producer_waits &&
           ((s->conf.sync_flush && store_flushed(s) < end) ||
            (store_role_sync_master(s) && store_ha_acked(s) < end));
}

int
store_put_batch(struct store *s, const struct store_msg *m,
                struct clog_msg *work, int cap, struct store_put_result *r)
{
    if (put_precheck(s, m, r) != PUT_OK)
        return r->status;
    if (m->sysflag & SYSFLAG_TX_MASK) {
        err_set("a batch cannot be transactional");
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    int n = store_batch_count(m->body, m->body_len);
    if (n <= 0 || n > cap) {
        err_set(n <= 0 ? "malformed batch body" : "batch larger than expected");
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    struct cq *cq = cqt_get_for_put(&s->cqs, m->topic, m->topic_len, m->qid);
    if (cq == NULL)
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    int64_t batch_tags = 0;
    size_t vl;
    bool batch_has_tags = props_find(m->props, m->props_len, "TAGS", &vl) != NULL;
    if (batch_has_tags)
        batch_tags = tags_of(m->props, m->props_len);
    uint64_t total = 0;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = m->body + at;
        uint32_t tsize = be32_get(p);
        struct clog_msg *cm = &work[i];
        clog_msg_init(cm, m);
        cm->flag = (int32_t)be32_get(p + 12);
        cm->body_len = be32_get(p + 16);
        cm->body = p + 20;
        cm->props_len = be16_get(p + 20 + cm->body_len);
        cm->props = (const char *)p + 22 + cm->body_len;
        cm->props2 = m->props;
        cm->props2_len = (uint32_t)m->props_len;
        /* RocketMQ's MessageExtBatchEncoder joins the two with a 0x02
         * unless the inner string already ends with one. */
        cm->props_sep = cm->props_len > 0 && m->props_len > 0 &&
                        cm->props[cm->props_len - 1] != 2;
        if (cm->props_len + cm->props2_len + (cm->props_sep ? 1u : 0u) > CLOG_PROPS_MAX) {
            err_set("batch message %d: properties too long", i);
            return put_fail(r, PUT_PROPERTIES_SIZE_EXCEEDED);
        }
        cm->cq = cq;
        cm->len = clog_msg_len(cm);
        cm->body_crc = rmq_body_crc(cm->body, cm->body_len);
        cm->tags_code = batch_has_tags ? batch_tags : tags_of(cm->props, cm->props_len);
        total += cm->len;
        at += tsize;
    }
    if (total > (uint64_t)s->conf.max_message_size) {
        err_set("batch of %" PRIu64 " record bytes exceeds maxMessageSize %" PRId64,
                total, s->conf.max_message_size);
        return put_fail(r, PUT_MESSAGE_ILLEGAL);
    }
    int64_t ts;
    int rc = clog_append(&s->clog, work, n, &ts, m->defer, m->arrived_ms);
    if (rc != 0)
        return append_status(s, rc, r);
    r->status = PUT_OK;
    r->phy = work[0].phy;
    r->qoff = work[0].qoff;
    r->store_ts = ts;
    r->wrote = (int64_t)total;
    r->end = work[0].phy + (int64_t)total;
    r->count = n;
    return PUT_OK;
}

/* }}} */

/* {{{ Get and look-ups */

void
store_slices_release(struct store_slices *sl)
{
    for (int i = 0; i < sl->npins; i++)
        mfile_unpin(sl->pins[i]);
    sl->npins = 0;
    sl->n = 0;
    sl->bytes = 0;
}

static void
slices_copy(const struct store_slices *sl, int from, int to, uint8_t *dst)
{
    for (int i = from; i < to; i++) {
        memcpy(dst, sl->iov[i].iov_base, sl->iov[i].iov_len);
        dst += sl->iov[i].iov_len;
    }
}

static bool
in_file(const struct mfile *mf, const void *p)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)mf->base;
    return a >= b && a - b < mf->size;
}

void
store_slices_read(const struct store_slices *sl, uint8_t *dst)
{
    store_slices_read_range(sl, 0, sl->n, dst);
}

void
store_slices_run(const struct store_slices *sl, int from, struct store_run *run)
{
    int j = 0;
    while (j < sl->npins && !in_file(sl->pins[j], sl->iov[from].iov_base))
        j++;
    const struct mfile *mf = j < sl->npins ? sl->pins[j] : NULL;
    run->from = from;
    run->to = from + 1;
    run->len = sl->iov[from].iov_len;
    run->fd = mf != NULL ? mfile_read_fd(sl->pins[j]) : -EINVAL;
    run->off = mf != NULL ? (int64_t)((const uint8_t *)sl->iov[from].iov_base - mf->base) : 0;
    const uint8_t *end = (const uint8_t *)sl->iov[from].iov_base + sl->iov[from].iov_len;
    while (run->to < sl->n && sl->iov[run->to].iov_base == end && mf != NULL &&
           in_file(mf, end)) {
        run->len += sl->iov[run->to].iov_len;
        end += sl->iov[run->to].iov_len;
        run->to++;
    }
}

void
store_window_init(struct store_window *w, size_t cap)
{
    size_t n = cap / STORE_WINDOW_BLOCK;
    *w = (struct store_window){ .nblocks = n >= 4 ? n : 0, .gen = -1 };
}

void
store_window_free(struct store_window *w)
{
    free(w->buf);
    free(w->tag);
    free(w->held);
    store_window_init(w, w->nblocks * STORE_WINDOW_BLOCK);
}

/* Forgets every block. */
static void
window_clear(struct store_window *w)
{
    for (size_t i = 0; w->tag != NULL && i < w->nblocks; i++)
        w->tag[i] = -1;
}

void
store_window_sync(struct store_window *w, struct store *s)
{
    int64_t g = clog_generation(&s->clog);
    if (g != w->gen) {
        window_clear(w);
        w->gen = g;
    }
    /* Read after the count: what is below it now stays as it is until
     * the count moves. */
    w->limit = clog_wrote(&s->clog);
}

/* Whether w holds bytes [off, end) of mf now. */
static bool
window_has(const struct store_window *w, const struct mfile *mf, size_t off, size_t end)
{
    const size_t B = STORE_WINDOW_BLOCK;
    size_t n = w->nblocks;
    for (size_t b = off / B; b <= (end - 1) / B; b++) {
        size_t need = b == (end - 1) / B ? end - b * B : B;
        if (w->tag[b % n] != mf->start + (int64_t)(b * B) || w->held[b % n] < need)
            return false;
    }
    return true;
}

/* Makes w hold bytes [off, end) of mf (at fd): true when it does, by
 * blocks it held or read now (one preadv for the blocks it lacked, from
 * the first to the last, whole but for the file's or the log's end). */
static bool
window_get(struct store_window *w, const struct mfile *mf, int fd, size_t off, size_t end)
{
    const size_t B = STORE_WINDOW_BLOCK;
    size_t n = w->nblocks;
    /* A run may not wrap over its own blocks: half the ring at most. */
    if (n == 0 || (w->gen & 1) != 0 || end - off > n / 2 * B)
        return false;
    if (w->buf == NULL) {
        w->buf = malloc(n * B);
        w->tag = malloc(n * sizeof(*w->tag));
        w->held = malloc(n * sizeof(*w->held));
        if (w->buf == NULL || w->tag == NULL || w->held == NULL) {
            free(w->buf);
            free(w->tag);
            free(w->held);
            w->buf = NULL;
            w->tag = NULL;
            w->held = NULL;
            return false;
        }
        window_clear(w);
    }
    /* A slot holds the block whose log offset its tag is, its first
     * `held` bytes (the last block of a file or of the log can be short). */
    size_t b0 = off / B, b1 = (end - 1) / B, miss0 = SIZE_MAX, miss1 = 0;
    for (size_t b = b0; b <= b1; b++) {
        size_t need = b == b1 ? end - b * B : B;
        if (w->tag[b % n] != mf->start + (int64_t)(b * B) || w->held[b % n] < need) {
            if (miss0 == SIZE_MAX)
                miss0 = b;
            miss1 = b;
        }
    }
    if (miss0 == SIZE_MAX)
        return true;
    /* Filled only while its records are read by more than one queue's
     * pulls: a lone consumer of interleaved queues (or consumers on other
     * workers) would pay whole blocks and a second copy for nothing.
     * Tried again after 16 windows' worth of reads past it. */
    if (w->filled >= n * B / 2 && w->served < w->filled / 2) {
        w->skipped += end - off;
        if (w->skipped < 16 * n * B)
            return false;
        w->filled = w->served = w->skipped = 0;
    }
    if (w->filled >= 16 * n * B) {   /* the recent reads weigh most */
        w->filled /= 2;
        w->served /= 2;
    }
    size_t from = miss0 * B, to = (miss1 + 1) * B;
    if (to > mf->size)
        to = mf->size;
    /* The log's end when the window was synced: a truncation between the
     * get and the sync can put it below these records (then not ours). */
    if (w->limit < mf->start + (int64_t)end)
        return false;
    if (mf->start + (int64_t)to > w->limit)
        to = (size_t)(w->limit - mf->start);   /* >= end */
    size_t at = from % (n * B), len = to - from;
    size_t first = len < n * B - at ? len : n * B - at;
    struct iovec v[2] = { { w->buf + at, first }, { w->buf, len - first } };
    for (size_t b = miss0; b <= miss1; b++)
        w->tag[b % n] = -1;     /* until the read succeeds */
    ssize_t got;
    do
        got = preadv(fd, v, len > first ? 2 : 1, (off_t)from);
    while (got < 0 && errno == EINTR);
    if (got < 0 || (size_t)got != len)
        return false;
    w->filled += len;
    for (size_t b = miss0; b <= miss1; b++) {
        w->tag[b % n] = mf->start + (int64_t)(b * B);
        w->held[b % n] = (uint32_t)(to - b * B < B ? to - b * B : B);
    }
    return true;
}

void
store_slices_read_range(const struct store_slices *sl, int from, int to, uint8_t *dst)
{
    if (sl->read_gap < 0) {
        slices_copy(sl, from, to, dst);
        return;
    }
    size_t max_gap = sl->read_gap > STORE_READ_GAP_MAX ? STORE_READ_GAP_MAX : (size_t)sl->read_gap;
    uint8_t gap_buf[STORE_READ_GAP_MAX];
    struct iovec v[64];
    int j = 0;
    for (int i = from; i < to;) {
        while (j < sl->npins && !in_file(sl->pins[j], sl->iov[i].iov_base))
            j++;
        int fd = j < sl->npins ? mfile_read_fd(sl->pins[j]) : -EINVAL;
        if (fd < 0) {
            slices_copy(sl, i, to, dst);
            return;
        }
        const struct mfile *mf = sl->pins[j];
        /* One run: records of this file in log order, the gaps between
         * them small enough that reading them beats another call. */
        uintptr_t base = (uintptr_t)mf->base;
        uintptr_t start = (uintptr_t)sl->iov[i].iov_base;
        uintptr_t end = start + sl->iov[i].iov_len;
        size_t bytes = sl->iov[i].iov_len;
        int k = i + 1, nv = 1;
        if (k == to) {   /* one record left (a one-record pull): no run to look for */
            ssize_t got;
            do
                got = pread(fd, dst, bytes, (off_t)(start - base));
            while (got < 0 && errno == EINTR);
            if (got < 0 || (size_t)got != bytes) {
                log_debug("pread %s: %s", mf->path, got < 0 ? strerror(errno) : "short read");
                slices_copy(sl, i, to, dst);
            }
            return;
        }
        for (; k < to && nv + 2 <= (int)(sizeof(v) / sizeof(v[0])); k++) {
            uintptr_t q = (uintptr_t)sl->iov[k].iov_base;
            if (!in_file(mf, sl->iov[k].iov_base) || q < end || q - end > max_gap)
                break;
            nv += q > end ? 2 : 1;
            bytes += sl->iov[k].iov_len;
            end = q + sl->iov[k].iov_len;
        }
        off_t off = (off_t)(start - base);
        size_t want = end - start;
        /* A spread run (gaps read and dropped): through the window,
         * which keeps the gaps for the reads of the records in them.  A
         * run of adjacent records is read straight into dst. */
        struct store_window *w = sl->win;
        if (w != NULL && want > bytes && window_get(w, mf, fd, (size_t)off, (size_t)(end - base))) {
            size_t cap = w->nblocks * STORE_WINDOW_BLOCK;
            for (int r = i; r < k; r++) {
                size_t at = ((uintptr_t)sl->iov[r].iov_base - base) % cap;
                size_t len = sl->iov[r].iov_len;
                if (len <= cap - at) {
                    memcpy(dst, w->buf + at, len);
                } else {
                    memcpy(dst, w->buf + at, cap - at);   /* the ring wraps */
                    memcpy(dst + (cap - at), w->buf, len - (cap - at));
                }
                dst += len;
            }
            w->served += bytes;
            i = k;
            continue;
        }
        nv = 0;
        uint8_t *d = dst;
        uintptr_t at = start;
        for (int r = i; r < k; r++) {   /* the records into dst, the gaps dropped */
            uintptr_t q = (uintptr_t)sl->iov[r].iov_base;
            if (q > at) {
                v[nv].iov_base = gap_buf;
                v[nv++].iov_len = q - at;
            }
            v[nv].iov_base = d;
            v[nv++].iov_len = sl->iov[r].iov_len;
            d += sl->iov[r].iov_len;
            at = q + sl->iov[r].iov_len;
        }
        ssize_t got;
        do
            got = preadv(fd, v, nv, off);
        while (got < 0 && errno == EINTR);
        if (got < 0 || (size_t)got != want) {
            /* The records are committed, so a short read or an error is
             * the file system's: the mapping still has them. */
            log_debug("preadv %s: %s", mf->path, got < 0 ? strerror(errno) : "short read");
            slices_copy(sl, i, to, dst);
            return;
        }
        dst = d;
        i = k;
    }
}

/* The file of s's pins that p lies in, from pin *j on (records come in
 * log order, so a caller walking them moves j forward only); NULL: none. */
static const struct mfile *
pin_of(const struct store_slices *sl, int *j, const void *p)
{
    while (*j < sl->npins && !in_file(sl->pins[*j], p))
        (*j)++;
    return *j < sl->npins ? sl->pins[*j] : NULL;
}

int
store_slices_window_iov(const struct store_slices *sl, struct iovec *v, int cap)
{
    struct store_window *w = sl->win;
    if (w == NULL || sl->read_gap < 0 || sl->n < 2 || w->nblocks == 0)
        return -1;
    size_t max_gap = sl->read_gap > STORE_READ_GAP_MAX ? STORE_READ_GAP_MAX : (size_t)sl->read_gap;
    size_t ring = w->nblocks * STORE_WINDOW_BLOCK;
    /* Not filling now (it did not pay): the blocks it holds still serve
     * (before, this refused them all); a run that lacks one goes to the
     * copy, whose window_get keeps the tally of reads past it. */
    bool filling = !(w->filled >= ring / 2 && w->served < w->filled / 2);
    int nv = 0, j = 0;
    size_t served = 0;   /* counted once the list is whole (a -1 reads by copy, which counts) */
    for (int i = 0; i < sl->n;) {
        const struct mfile *mf = pin_of(sl, &j, sl->iov[i].iov_base);
        int fd = mf != NULL ? mfile_read_fd(sl->pins[j]) : -EINVAL;
        if (fd < 0)
            return -1;
        /* The run store_slices_read_range would read in one call. */
        uintptr_t base = (uintptr_t)mf->base;
        uintptr_t start = (uintptr_t)sl->iov[i].iov_base;
        uintptr_t end = start + sl->iov[i].iov_len;
        size_t bytes = sl->iov[i].iov_len;
        int k = i + 1, nr = 1;
        for (; k < sl->n && nr + 2 <= 64; k++) {
            uintptr_t q = (uintptr_t)sl->iov[k].iov_base;
            if (!in_file(mf, sl->iov[k].iov_base) || q < end || q - end > max_gap)
                break;
            nr += q > end ? 2 : 1;
            bytes += sl->iov[k].iov_len;
            end = q + sl->iov[k].iov_len;
        }
        /* A run of adjacent records is read straight into the output,
         * not through the window (nor is a pull of them here). */
        size_t roff = (size_t)(start - base), rend = (size_t)(end - base);
        if (end - start == bytes ||
            !(filling ? window_get(w, mf, fd, roff, rend)
                      : w->tag != NULL && window_has(w, mf, roff, rend)))
            return -1;
        for (int r = i; r < k; r++) {
            size_t at = ((uintptr_t)sl->iov[r].iov_base - base) % ring;
            size_t len = sl->iov[r].iov_len;
            if (nv + 2 > cap)
                return -1;
            if (len <= ring - at) {
                v[nv++] = (struct iovec){ w->buf + at, len };
            } else {   /* the ring wraps */
                v[nv++] = (struct iovec){ w->buf + at, ring - at };
                v[nv++] = (struct iovec){ w->buf, len - (ring - at) };
            }
        }
        served += bytes;
        i = k;
    }
    /* A later run's fill may have taken an earlier run's slots (a slot
     * is a file's block number modulo the ring: with files smaller than
     * the ring, every file's first block has slot 0): every record's
     * blocks must still be there. */
    j = 0;
    for (int i = 0; i < sl->n; i++) {
        const struct mfile *mf = pin_of(sl, &j, sl->iov[i].iov_base);
        size_t off = (size_t)((const uint8_t *)sl->iov[i].iov_base - mf->base);
        if (!window_has(w, mf, off, off + sl->iov[i].iov_len))
            return -1;
    }
    w->served += served;
    w->sends++;
    return nv;
}

/* Adds a slice whose file `mf` the caller pinned (the pin moves here). */
static void
slices_add(struct store_slices *sl, struct mfile *mf, const uint8_t *p,
           size_t len)
{
    if (sl->npins > 0 && sl->pins[sl->npins - 1] == mf)
        mfile_unpin(mf);  /* same file as the previous slice */
    else
        sl->pins[sl->npins++] = mf;
    sl->iov[sl->n].iov_base = (void *)(uintptr_t)p;
    sl->iov[sl->n].iov_len = len;
    sl->n++;
    sl->bytes += len;
}

static bool
batch_full(const struct store_conf *c, int32_t size, int max_count,
           size_t bytes, int count, bool in_disk)
{
    if (bytes == 0 || count == 0)
        return false;
    if (max_count <= count)
        return true;
    if (in_disk)
        return bytes + (size_t)size > (size_t)c->max_bytes_on_disk ||
               count > c->max_count_on_disk - 1;
    return bytes + (size_t)size > (size_t)c->max_bytes_in_memory ||
           count > c->max_count_in_memory - 1;
}

/* The byte budget behind the log's end that counts as in memory. */
static int64_t
in_memory_bytes(const struct store *s)
{
    return (int64_t)((double)s->mem_total * s->conf.access_in_memory_ratio / 100.0);
}

int
store_get_max_records(struct store *s)
{
    int a = s->conf.max_count_in_memory, b = s->conf.max_count_on_disk;
    return a > b ? a : b;
}

static bool
code_matches(const int32_t *codes, int n, int32_t code)
{
    for (int i = 0; i < n; i++)
        if (codes[i] == code)
            return true;
    return false;
}

int
store_get(struct store *s, const char *topic, size_t tlen, int32_t qid,
          int64_t offset, int max_count, const int32_t *codes, int ncodes,
          struct store_slices *out, struct store_get_result *r)
{
    return store_get_match(s, topic, tlen, qid, offset, max_count, codes, ncodes,
                           NULL, NULL, out, r);
}

int
store_get_match(struct store *s, const char *topic, size_t tlen, int32_t qid,
                int64_t offset, int max_count, const int32_t *codes, int ncodes,
                store_match_fn match, void *match_ud,
                struct store_slices *out, struct store_get_result *r)
{
    memset(r, 0, sizeof(*r));
    out->n = 0;
    out->npins = 0;
    out->bytes = 0;
    out->read_gap = s->conf.pull_read_gap;
    out->zero_copy_min = s->conf.pull_zero_copy_min;
    out->win = NULL;
    bool correct = !store_role_slave(s);  /* nextOffsetCorrection */
#define NEXT(v) (correct ? (v) : offset)
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    /* Deferred puts are staged (a held pull their put just woke runs
     * before the put's loop commits them): commit them now, or the pull
     * misses what woke it. */
    if (clog_staged(&s->clog) > clog_wrote(&s->clog))
        (void)store_commit(s);
    int64_t max_phy = clog_wrote(&s->clog);
    r->max_phy = max_phy;
    if (c == NULL) {
        /* RocketMQ 4.9.8 creates the queue here (findConsumeQueue) and
         * so answers NO_MESSAGE_IN_QUEUE for a queue never written. */
        r->status = GET_NO_MESSAGE_IN_QUEUE;
        r->next = NEXT(0);
        return r->status;
    }
    int64_t min = cq_min(c), max = cq_max(c);
    r->min = min;
    r->max = max;
    if (max == 0) {
        r->status = GET_NO_MESSAGE_IN_QUEUE;
        r->next = NEXT(0);
    } else if (offset < min) {
        r->status = GET_OFFSET_TOO_SMALL;
        r->next = NEXT(min);
    } else if (offset == max) {
        r->status = GET_OFFSET_OVERFLOW_ONE;
        r->next = NEXT(offset);
        if (out->consumer)
            readers_note(&s->readers, c, max_phy);   /* caught up: reads what comes next */
    } else if (offset > max) {
        r->status = GET_OFFSET_OVERFLOW_BADLY;
        r->next = NEXT(min == 0 ? min : max);
    } else {
        const uint8_t *p;
        int64_t n;
        struct mfile *span = cq_span(c, offset, max, &p, &n);
        if (span == NULL) {
            /* Gone (retention): on to the next file.  There but not
             * mappable now (out of mappings): the same offset again. */
            r->status = GET_OFFSET_FOUND_NULL;
            r->next = NEXT(errno == ENOENT ? cq_roll_next(c, offset) : offset);
            return r->status;
        }
        if (out->consumer)
            readers_note(&s->readers, c, (int64_t)be64_get(p));
        int status = GET_NO_MATCHED_MESSAGE;
        int64_t filter_max = (max_count * CQ_UNIT > 16000 ? max_count * CQ_UNIT : 16000) / CQ_UNIT;
        int64_t next_file = INT64_MIN;
        int64_t mem = in_memory_bytes(s);
        /* The span of the log the file the last record taken is in
         * (out->pins' last, pinned for it) lets a record be taken from
         * with no look-up and no pin of its own: clog_pin's checks (in
         * the file, not below the log's start, not past its end). */
        int64_t same_lo = 0, same_hi = 0;
        struct mfile *last = NULL;
        int64_t i = 0;
        for (; i < n && i < filter_max; i++) {
            const uint8_t *e = p + i * CQ_UNIT;
            int64_t phy = (int64_t)be64_get(e);
            int32_t size = (int32_t)be32_get(e + 8);
            int64_t tags = (int64_t)be64_get(e + 12);
            r->max_phy_pulling = phy;
            if (next_file != INT64_MIN && phy < next_file)
                continue;
            bool in_disk = max_phy - phy > mem;
            if (batch_full(&s->conf, size, max_count, out->bytes, out->n, in_disk) ||
                out->n >= out->cap)
                break;
            if (codes != NULL && !code_matches(codes, ncodes, (int32_t)tags)) {
                if (out->bytes == 0)
                    status = GET_NO_MATCHED_MESSAGE;
                continue;
            }
            const uint8_t *rec;
            if (size > 0 && phy >= same_lo && phy + size <= same_hi) {
                rec = last->base + (phy - last->start);
                if (match != NULL && !match(match_ud, rec, (size_t)size)) {
                    if (out->bytes == 0)
                        status = GET_NO_MATCHED_MESSAGE;
                    next_file = INT64_MIN;
                    continue;
                }
                out->iov[out->n].iov_base = (void *)(uintptr_t)rec;
                out->iov[out->n].iov_len = (size_t)size;
                out->n++;
                out->bytes += (size_t)size;
                status = GET_FOUND;
                next_file = INT64_MIN;
                continue;
            }
            struct mfile *mf = size > 0 ? clog_pin(&s->clog, phy, (size_t)size, &rec) : NULL;
            if (mf == NULL) {
                if (out->bytes == 0)
                    status = GET_MESSAGE_WAS_REMOVING;
                next_file = clog_roll_next(&s->clog, phy);
                continue;
            }
            if (match != NULL && !match(match_ud, rec, (size_t)size)) {
                /* isMatchedByCommitLog: skipped, the scan goes on */
                mfile_unpin(mf);
                if (out->bytes == 0)
                    status = GET_NO_MATCHED_MESSAGE;
                next_file = INT64_MIN;
                continue;
            }
            slices_add(out, mf, rec, (size_t)size);
            status = GET_FOUND;
            next_file = INT64_MIN;
            if (out->n < max_count && out->pins[out->npins - 1] != last) {
                last = out->pins[out->npins - 1];
                int64_t log_min = clog_min(&s->clog);
                same_lo = last->start > log_min ? last->start : log_min;
                same_hi = last->start + (int64_t)last->size;
                if (same_hi > max_phy)
                    same_hi = max_phy;
            }
        }
        mfile_unpin(span);
        r->status = status;
        r->next = offset + i;
        r->suggest_slave = max_phy - r->max_phy_pulling > mem;
    }
#undef NEXT
    return r->status;
}

int
store_read_at(struct store *s, int64_t phy, struct store_slices *out)
{
    out->n = 0;
    out->npins = 0;
    out->bytes = 0;
    out->win = NULL;
    const uint8_t *p;
    struct mfile *mf = clog_pin(&s->clog, phy, 8, &p);
    if (mf == NULL)
        return -ENOENT;
    uint32_t size = be32_get(p);
    size_t room = mf->size - (size_t)(phy - mf->start);
    bool ok = be32_get(p + 4) == CLOG_MAGIC && size >= 91 && size <= room &&
              phy + (int64_t)size <= clog_wrote(&s->clog);
    if (!ok || out->cap < 1) {
        mfile_unpin(mf);
        return -ENOENT;
    }
    slices_add(out, mf, p, size);
    return 0;
}

int64_t
store_min_offset(struct store *s, const char *topic, size_t tlen, int32_t qid)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    return c != NULL ? cq_min(c) : 0;
}

int64_t
store_max_offset(struct store *s, const char *topic, size_t tlen, int32_t qid)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    return c != NULL ? cq_max(c) : 0;
}

bool
store_in_memory(struct store *s, const char *topic, size_t tlen, int32_t qid, int64_t offset)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    if (c == NULL || offset < cq_min(c) || offset >= cq_max(c))
        return false;
    struct cq_entry e;
    if (cq_read(c, offset, &e) != 0 || e.phy < clog_min(&s->clog))
        return false;
    return clog_wrote(&s->clog) - e.phy <= in_memory_bytes(s);
}

int64_t
store_time_at(struct store *s, int64_t phy, int32_t size)
{
    const uint8_t *p;
    if (size < 91)
        return -1;
    struct mfile *mf = clog_pin(&s->clog, phy, (size_t)size, &p);
    if (mf == NULL)
        return -1;
    int64_t ts = clog_peek_store_ts(p, (size_t)size);
    mfile_unpin(mf);
    return ts;
}

int64_t
store_offset_by_time(struct store *s, const char *topic, size_t tlen,
                     int32_t qid, int64_t ts)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    if (c == NULL)
        return 0;
    int64_t lo = cq_min(c), hi = cq_max(c) - 1;
    if (lo > hi)
        return 0;
    int64_t min_phy = clog_min(&s->clog);
    int64_t left = -1, right = -1, left_v = -1, right_v = -1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        struct cq_entry e;
        if (cq_read(c, mid, &e) != 0)
            return 0;
        if (e.phy < min_phy) {
            lo = mid + 1;
            left = mid;
            continue;
        }
        int64_t t = store_time_at(s, e.phy, e.size);
        if (t < 0)
            return 0;
        if (t == ts)
            return mid;
        if (t > ts) {
            hi = mid - 1;
            right = mid;
            right_v = t;
        } else {
            lo = mid + 1;
            left = mid;
            left_v = t;
        }
    }
    /* RocketMQ's choice: the closer neighbour, the later one when there
     * is no earlier, the earlier one when there is no later. */
    if (left_v == -1)
        return right >= 0 ? right : (left >= 0 ? left : 0);
    if (right_v == -1)
        return left;
    return (ts - left_v > right_v - ts) ? right : left;
}

int64_t
store_time_at_offset(struct store *s, const char *topic, size_t tlen,
                     int32_t qid, int64_t offset)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    if (c == NULL || offset < cq_min(c) || offset >= cq_max(c))
        return -1;
    struct cq_entry e;
    if (cq_read(c, offset, &e) != 0 || e.phy < clog_min(&s->clog))
        return -1;
    return store_time_at(s, e.phy, e.size);
}

int64_t
store_earliest_time(struct store *s, const char *topic, size_t tlen,
                    int32_t qid)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    if (c == NULL || cq_min(c) >= cq_max(c))
        return -1;
    struct cq_entry e;
    if (cq_read(c, cq_min(c), &e) != 0)
        return -1;
    return store_time_at(s, e.phy, e.size);
}

int64_t
store_earliest_time_all(struct store *s)
{
    int64_t min = clog_min(&s->clog);
    const uint8_t *p;
    struct mfile *mf = clog_pin(&s->clog, min, 91, &p);
    if (mf == NULL)
        return -1;
    int64_t ts = clog_peek_store_ts(p, mf->size - (size_t)(min - mf->start));
    mfile_unpin(mf);
    return ts;
}

void
store_index_sync(struct store *s)
{
    if (!s->conf.index_enable)
        return;
    while (ix_next(&s->ix) < clog_wrote(&s->clog))
        if (ix_dispatch(&s->ix, &s->clog, 0) == 0)
            break;
}

int
store_query(struct store *s, const char *topic, size_t tlen, const char *key,
            size_t klen, int max, int64_t begin, int64_t end,
            struct store_slices *out, int64_t *last_ts, int64_t *last_phy)
{
    out->n = 0;
    out->npins = 0;
    out->bytes = 0;
    *last_ts = 0;
    *last_phy = 0;
    if (!s->conf.index_enable)
        return 0;
    store_index_sync(s);
    int cap = max;
    if (cap > s->conf.max_msgs_per_query)
        cap = s->conf.max_msgs_per_query;
    if (cap > out->cap)
        cap = out->cap;
    if (cap <= 0)
        return 0;
    int64_t *offs = malloc((size_t)cap * sizeof(*offs));
    if (offs == NULL)
        return 0;
    int n = ix_query(&s->ix, topic, tlen, key, klen, cap, begin, end, offs,
                     last_ts, last_phy);
    int64_t min = clog_min(&s->clog);
    for (int i = 0; i < n && out->n < out->cap; i++) {
        if (offs[i] < min)
            continue;
        struct store_slices one = *out;
        one.iov = out->iov + out->n;
        one.pins = out->pins + out->npins;
        one.cap = out->cap - out->n;
        if (store_read_at(s, offs[i], &one) != 0)
            continue;
        /* store_read_at pinned one file for one record. */
        out->iov[out->n] = one.iov[0];
        out->pins[out->npins++] = one.pins[0];
        out->n++;
        out->bytes += one.bytes;
    }
    free(offs);
    return out->n;
}

/* }}} */
