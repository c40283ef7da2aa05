/* timer: see timer.h and docs/timer.md. */
#include "store/timer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/crc32.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"
#include "store/access.h"
#include "store/mfqueue.h"
#include "store/props.h"
#include "store/store.h"

/* {{{ Clock and the send rule */

int64_t
timer_now_ms(void)
{
    return clock_wall_ms() + errinj_get(ERRINJ_TIMER_CLOCK_MS);
}

int
timer_precision_snap(int64_t ms)
{
    static const int candidates[] = { 100, 200, 500, 1000 };
    for (int i = 1; i < 4; i++)
        if (ms < candidates[i])
            return candidates[i - 1];
    return candidates[3];
}

/* Java's Long.parseLong: an optional sign, then 1..19 decimal digits,
 * within int64.  Returns 0 or -1. */
static int
parse_long(const char *v, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (n > 0 && (v[0] == '-' || v[0] == '+')) {
        neg = v[0] == '-';
        i = 1;
    }
    if (i == n)
        return -1;
    uint64_t acc = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(v[i] - '0');
        if (acc > (lim - d) / 10)
            return -1;
        acc = acc * 10 + d;
    }
    *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 0;
}

/* a + b, saturated at the int64 range. */
static int64_t
sat_add(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b)
        return INT64_MIN;
    return a + b;
}

static int64_t
sat_mul(int64_t a, int64_t b)
{
    if (a > 0 && a > INT64_MAX / b)
        return INT64_MAX;
    if (a < 0 && a < INT64_MIN / b)
        return INT64_MIN;
    return a * b;
}

/* 5.x's remark for WHEEL_TIMER_MSG_ILLEGAL, then which field and why. */
static void
illegal(char *why, size_t whyn, int64_t max_delay_ms, const char *field,
        const char *v, size_t vn, const char *what)
{
    snprintf(why, whyn,
             "timer message illegal, the delay time should not be bigger than the max delay "
             "%" PRId64 "ms; or if set del msg, the delay time should be bigger than the current "
             "time (%s %.*s: %s)", max_delay_ms, field, (int)(vn > 40 ? 40 : vn), v, what);
}

int
timer_classify(const char *p, size_t n, bool enable, int64_t max_delay_ms,
               int precision_ms, int64_t now, int64_t *bucket, char *why,
               size_t whyn)
{
    const char *sec = NULL, *ms = NULL, *at = NULL, *del = NULL;
    size_t secn = 0, msn = 0, atn = 0, deln = 0;
    int level = 0;
    bool out_ms = false;
    size_t pos = 0;
    struct prop kv;
    /* One pass; the last pair of a key wins, as Java's map. */
    while (props_next(p, n, &pos, &kv)) {
        if (kv.klen < 5 || (kv.k[0] != 'T' && kv.k[0] != 'D'))
            continue;
#define IS(lit) (kv.klen == sizeof(lit) - 1 && memcmp(kv.k, lit, sizeof(lit) - 1) == 0)
        if (IS("TIMER_DELAY_SEC")) {
            sec = kv.v;
            secn = kv.vlen;
        } else if (IS("TIMER_DELAY_MS")) {
            ms = kv.v;
            msn = kv.vlen;
        } else if (IS("TIMER_DELIVER_MS")) {
            at = kv.v;
            atn = kv.vlen;
        } else if (IS("TIMER_DEL_UNIQKEY")) {
            del = kv.v;
            deln = kv.vlen;
        } else if (IS("TIMER_OUT_MS")) {
            out_ms = true;
        } else if (IS("DELAY")) {
            level = props_delay_level(kv.v, kv.vlen);
        }
#undef IS
    }
    if (level > 0 || out_ms || (sec == NULL && ms == NULL && at == NULL))
        return TIMER_PLAIN;
    if (!enable) {
        snprintf(why, whyn, "accurate timer message is not enabled, timerWheelEnable is false");
        return TIMER_DISABLED;
    }
    int64_t v, deliver;
    if (sec != NULL) {
        if (parse_long(sec, secn, &v) != 0) {
            illegal(why, whyn, max_delay_ms, "TIMER_DELAY_SEC", sec, secn, "not a number");
            return TIMER_ILLEGAL;
        }
        deliver = sat_add(now, sat_mul(v, 1000));
    } else if (ms != NULL) {
        if (parse_long(ms, msn, &v) != 0) {
            illegal(why, whyn, max_delay_ms, "TIMER_DELAY_MS", ms, msn, "not a number");
            return TIMER_ILLEGAL;
        }
        deliver = sat_add(now, v);
    } else {
        if (parse_long(at, atn, &v) != 0) {
            illegal(why, whyn, max_delay_ms, "TIMER_DELIVER_MS", at, atn, "not a number");
            return TIMER_ILLEGAL;
        }
        deliver = v;
    }
    if (deliver <= now) {
        if (del != NULL) {
            illegal(why, whyn, max_delay_ms, "TIMER_DEL_UNIQKEY", del, deln,
                    "a recall for a time that has passed");
            return TIMER_ILLEGAL;
        }
        return TIMER_PLAIN;
    }
    if (deliver - now > max_delay_ms) {
        const char *f = sec != NULL ? "TIMER_DELAY_SEC" : ms != NULL ? "TIMER_DELAY_MS" : "TIMER_DELIVER_MS";
        const char *fv = sec != NULL ? sec : ms != NULL ? ms : at;
        size_t fn = sec != NULL ? secn : ms != NULL ? msn : atn;
        illegal(why, whyn, max_delay_ms, f, fv, fn, "beyond timerMaxDelaySec");
        return TIMER_ILLEGAL;
    }
    /* 5.x's rounding: a multiple of the precision goes one bucket down, so
     * the bucket b always satisfies b < deliver <= b + precision. */
    if (deliver % precision_ms == 0)
        deliver -= precision_ms;
    else
        deliver = deliver / precision_ms * precision_ms;
    *bucket = deliver;
    return TIMER_HOLD;
}

int
timer_tags_of(const char *p, size_t n, int64_t *tags)
{
    size_t vl;
    const char *v = props_find(p, n, "TIMER_OUT_MS", &vl);
    int64_t b;
    if (v == NULL || parse_long(v, vl, &b) != 0)
        return -1;
    *tags = b;
    return 0;
}

int
timer_hold_props(struct buf *out, const char *p, size_t n, int64_t bucket,
                 const char *topic, size_t tlen, int32_t qid)
{
    char b[24], q[16];
    int bl = snprintf(b, sizeof(b), "%" PRId64, bucket);
    int ql = snprintf(q, sizeof(q), "%" PRId32, qid);
    struct prop edits[3] = {
        { "TIMER_OUT_MS", 12, b, (size_t)bl },
        { "REAL_TOPIC", 10, topic, tlen },
        { "REAL_QID", 8, q, (size_t)ql },
    };
    return props_edit(out, p, n, edits, 3);
}

/* }}} */

/* {{{ The service's state */

#define UNIT 32                 /* bytes of one timer log unit */
#define UNIT_MAGIC 0x544d5231u  /* "TMR1" */
#define CK_MAGIC 0x544d434bu    /* "TMCK" */
#define CK_SIZE 96              /* one checkpoint copy (two are kept) */
#define DELS_MAX 65536          /* recalls remembered in one bucket */
#define DROP_LINES 10           /* drop lines logged per tick, then a count */
#define SCAN_CHUNK 4096         /* units read at a time when rebuilding */

struct unit {
    int64_t bucket;
    int64_t phy;
    int32_t size;
    uint32_t magic;
    int64_t prev;               /* previous unit of the slot, -1 none */
};

struct seg {
    int64_t base;
    int fd;
    int64_t max_bucket;         /* latest bucket of a unit in it */
    bool dirty;                 /* written since the last fdatasync */
};

struct timer_store {
    struct store *s;
    char *dir;                  /* STORE/timer */
    char *logdir;               /* STORE/timer/log */
    int64_t p;                  /* precision ms */
    int64_t seg_size;
    struct seg *segs;
    int nsegs, segcap;
    int64_t tl_end;
    int64_t *slots;             /* last unit of each slot, -1 empty */
    int64_t nslots;
    int64_t cursor;             /* next bucket to start (ms) */
    int64_t walk_pos;           /* next unit of the bucket being delivered */
    int64_t walk_bucket;
    int64_t walk_head;          /* the first unit of that bucket's chain */
    /* Recalls (TIMER_DEL_UNIQKEY) met in the bucket being delivered:
     * "topic+uniqKey" strings, each with its hash. */
    char **dels;
    uint64_t *del_hash;
    int ndels, delcap;
    int64_t recalled;
    int drops_logged;           /* this tick's drop lines (at most DROP_LINES) */
    int64_t drops_unlogged;
    bool put_failing;           /* the last delivery put failed (logged once) */
    int64_t tps_ns, tps_enq, tps_deq;   /* the rates' last sample */
    int64_t enq;                /* next timer-topic queue offset to read */
    int64_t live_cursor;        /* at open: buckets below were delivered */
    int ck_fd;
    uint64_t ck_seq;
    int64_t last_ck_ns;
    bool dirty;                 /* state moved since the last checkpoint */
    /* Deliveries made after the last checkpoint before a crash. */
    int64_t *seen;
    size_t nseen;
    int64_t seen_until_cursor, seen_until_enq;
    int64_t seen_from;          /* the commit log offset they were read from */
    int64_t skipped;
    int64_t recovered_seen;
    struct buf props;
    struct buf wake_seen;       /* keys woken in this call */
};

static void dels_recollect(struct timer_store *t);

static struct timer_counters *
ctr(struct timer_store *t)
{
    return &t->s->timer;
}

static int64_t
slot_of(const struct timer_store *t, int64_t bucket)
{
    int64_t k = bucket / t->p;
    int64_t i = k % t->nslots;
    return i < 0 ? i + t->nslots : i;
}

static void
unit_encode(uint8_t *b, const struct unit *u)
{
    memcpy(b, &u->bucket, 8);
    memcpy(b + 8, &u->phy, 8);
    memcpy(b + 16, &u->size, 4);
    memcpy(b + 20, &u->magic, 4);
    memcpy(b + 24, &u->prev, 8);
}

static void
unit_decode(const uint8_t *b, struct unit *u)
{
    memcpy(&u->bucket, b, 8);
    memcpy(&u->phy, b + 8, 8);
    memcpy(&u->size, b + 16, 4);
    memcpy(&u->magic, b + 20, 4);
    memcpy(&u->prev, b + 24, 8);
}

static struct seg *
seg_for(struct timer_store *t, int64_t pos)
{
    int lo = 0, hi = t->nsegs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (pos < t->segs[mid].base)
            hi = mid - 1;
        else if (pos >= t->segs[mid].base + t->seg_size)
            lo = mid + 1;
        else
            return &t->segs[mid];
    }
    return NULL;
}

static void
seg_path(const struct timer_store *t, int64_t base, char *out, size_t n)
{
    snprintf(out, n, "%s/%020" PRId64, t->logdir, base);
}

static struct seg *
seg_new(struct timer_store *t, int64_t base)
{
    if (t->nsegs == t->segcap) {
        int cap = t->segcap ? t->segcap * 2 : 8;
        struct seg *s = realloc(t->segs, sizeof(*s) * (size_t)cap);
        if (s == NULL) {
            err_set("out of memory for the timer log");
            return NULL;
        }
        t->segs = s;
        t->segcap = cap;
    }
    char path[PATH_MAX];
    seg_path(t, base, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct seg *s = &t->segs[t->nsegs++];
    s->base = base;
    s->fd = fd;
    s->max_bucket = INT64_MIN;
    s->dirty = false;
    return s;
}

static int
unit_read(struct timer_store *t, int64_t pos, struct unit *u)
{
    struct seg *s = seg_for(t, pos);
    uint8_t b[UNIT];
    if (s == NULL || pread(s->fd, b, UNIT, pos - s->base) != UNIT) {
        err_set("timer log unit at %" PRId64 " cannot be read", pos);
        return -1;
    }
    unit_decode(b, u);
    if (u->magic != UNIT_MAGIC) {
        err_set("timer log unit at %" PRId64 " is not a unit", pos);
        return -1;
    }
    return 0;
}

/* Appends a unit at tl_end.  Returns its position or -1. */
static int64_t
unit_append(struct timer_store *t, struct unit *u)
{
    int64_t pos = t->tl_end;
    struct seg *s = seg_for(t, pos);
    if (s == NULL) {
        s = seg_new(t, pos / t->seg_size * t->seg_size);
        if (s == NULL)
            return -1;
    }
    uint8_t b[UNIT];
    u->magic = UNIT_MAGIC;
    unit_encode(b, u);
    if (pwrite(s->fd, b, UNIT, pos - s->base) != UNIT) {
        err_set("cannot write the timer log: %s", strerror(errno));
        return -1;
    }
    if (u->bucket > s->max_bucket)
        s->max_bucket = u->bucket;
    s->dirty = true;
    t->tl_end += UNIT;
    return pos;
}

/* }}} */

/* {{{ Checkpoint */

struct ck {
    uint64_t seq;
    int64_t enq, cursor, walk_pos, walk_bucket, clog_end, tl_end, precision, walk_head;
};

static void
ck_encode(uint8_t *b, const struct ck *c)
{
    uint32_t m = CK_MAGIC;
    memset(b, 0, CK_SIZE);
    memcpy(b, &m, 4);
    memcpy(b + 8, &c->seq, 8);
    memcpy(b + 16, &c->enq, 8);
    memcpy(b + 24, &c->cursor, 8);
    memcpy(b + 32, &c->walk_pos, 8);
    memcpy(b + 40, &c->walk_bucket, 8);
    memcpy(b + 48, &c->clog_end, 8);
    memcpy(b + 56, &c->tl_end, 8);
    memcpy(b + 64, &c->precision, 8);
    memcpy(b + 72, &c->walk_head, 8);
    uint32_t crc = rmq_crc32(0, b, 88);
    memcpy(b + 88, &crc, 4);
}

static bool
ck_decode(const uint8_t *b, struct ck *c)
{
    uint32_t m, crc;
    memcpy(&m, b, 4);
    memcpy(&crc, b + 88, 4);
    if (m != CK_MAGIC || crc != rmq_crc32(0, b, 88))
        return false;
    memcpy(&c->seq, b + 8, 8);
    memcpy(&c->enq, b + 16, 8);
    memcpy(&c->cursor, b + 24, 8);
    memcpy(&c->walk_pos, b + 32, 8);
    memcpy(&c->walk_bucket, b + 40, 8);
    memcpy(&c->clog_end, b + 48, 8);
    memcpy(&c->tl_end, b + 56, 8);
    memcpy(&c->precision, b + 64, 8);
    memcpy(&c->walk_head, b + 72, 8);
    return true;
}

/* The oldest bucket a live unit can have: segments wholly older go. */
static int64_t
live_from(const struct timer_store *t)
{
    return t->walk_pos >= 0 ? t->walk_bucket : t->cursor;
}

static void
delete_old_segments(struct timer_store *t)
{
    int64_t live = live_from(t);
    int keep = 0;
    /* Never the last (the writer's); the order is kept. */
    while (keep < t->nsegs - 1 && t->segs[keep].max_bucket < live) {
        char path[PATH_MAX];
        seg_path(t, t->segs[keep].base, path, sizeof(path));
        close(t->segs[keep].fd);
        if (unlink(path) != 0)
            log_warn("timer: cannot delete %s: %s", path, strerror(errno));
        keep++;
    }
    if (keep > 0) {
        memmove(t->segs, t->segs + keep, sizeof(*t->segs) * (size_t)(t->nsegs - keep));
        t->nsegs -= keep;
    }
}

/* fdatasync of the log, then the checkpoint in the older copy's place
 * (a torn write leaves the other copy).  Returns 0 or -1. */
static int
checkpoint(struct timer_store *t, bool sync_ck)
{
    for (int i = 0; i < t->nsegs; i++) {
        if (t->segs[i].dirty) {
            if (fdatasync(t->segs[i].fd) != 0) {
                err_set("timer log fdatasync: %s", strerror(errno));
                return -1;
            }
            t->segs[i].dirty = false;
        }
    }
    struct ck c = {
        .seq = t->ck_seq + 1, .enq = t->enq, .cursor = t->cursor, .walk_pos = t->walk_pos,
        .walk_bucket = t->walk_bucket, .tl_end = t->tl_end,
        .precision = t->p, .walk_head = t->walk_head,
    };
    /* While the replay after a crash is not past the crash point, a
     * second crash must find the first one's deliveries again: the scan
     * start stays where they are. */
    c.clog_end = t->nseen > 0 ? t->seen_from : store_max_phy(t->s);
    uint8_t b[CK_SIZE];
    ck_encode(b, &c);
    if (pwrite(t->ck_fd, b, CK_SIZE, (off_t)(c.seq % 2) * CK_SIZE) != CK_SIZE ||
        (sync_ck && fdatasync(t->ck_fd) != 0)) {
        err_set("cannot write the timer checkpoint: %s", strerror(errno));
        return -1;
    }
    t->ck_seq = c.seq;
    t->dirty = false;
    delete_old_segments(t);
    return 0;
}

/* }}} */

/* {{{ Open and recovery */

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static bool
seen_has(const struct timer_store *t, int64_t phy)
{
    return t->nseen > 0 &&
           bsearch(&phy, t->seen, t->nseen, sizeof(int64_t), cmp_i64) != NULL;
}

/* Whether record v is the delivery of the timer record at sphy: the
 * marker is a property, which any producer could set; a forged one must
 * not suppress someone else's timer, so the body (its CRC) and the born
 * time must be the timer record's too. */
static bool
is_delivery_of(struct timer_store *t, const struct clog_view *v, int64_t sphy)
{
    struct iovec iov[1];
    struct mfile *pins[1];
    struct store_slices sl = { .cap = 1, .iov = iov, .pins = pins };
    if (sphy < 0 || store_read_at(t->s, sphy, &sl) != 0)
        return false;
    struct clog_view src;
    bool same = clog_decode(iov[0].iov_base, iov[0].iov_len, sphy, false, &src) == CLOG_REC &&
                src.topic_len == sizeof(TIMER_TOPIC) - 1 &&
                memcmp(src.topic, TIMER_TOPIC, src.topic_len) == 0 &&
                src.body_crc == v->body_crc && src.body_len == v->body_len &&
                src.born_ts == v->born_ts;
    store_slices_release(&sl);
    return same;
}

/* The commit log from `from` to its end: deliveries made after the
 * checkpoint (records with __RMQ_TIMER_SRC), into t->seen. */
static int
scan_deliveries(struct timer_store *t, int64_t from)
{
    int64_t end = store_max_phy(t->s), phy = from;
    size_t cap = 0;
    if (phy < store_min_phy(t->s))
        phy = store_min_phy(t->s);
    struct iovec iov[1];
    struct mfile *pins[1];
    while (phy < end) {
        struct store_slices sl = { .cap = 1, .iov = iov, .pins = pins };
        if (store_read_at(t->s, phy, &sl) != 0) {
            /* The blank at a file's end: the next file. */
            int64_t next = clog_roll_next(&t->s->clog, phy);
            if (next <= phy)
                break;
            phy = next;
            continue;
        }
        struct clog_view v;
        int r = clog_decode(iov[0].iov_base, iov[0].iov_len, phy, false, &v);
        if (r == CLOG_REC) {
            size_t vl;
            const char *src = v.props_len > 0
                                  ? props_find((const char *)v.props, v.props_len, TIMER_SRC_KEY, &vl)
                                  : NULL;
            int64_t sphy;
            if (src != NULL && parse_long(src, vl, &sphy) == 0 && is_delivery_of(t, &v, sphy)) {
                if (t->nseen == cap) {
                    size_t nc = cap ? cap * 2 : 256;
                    int64_t *ns = realloc(t->seen, nc * sizeof(int64_t));
                    if (ns == NULL) {
                        store_slices_release(&sl);
                        err_set("out of memory reading timer deliveries");
                        return -1;
                    }
                    t->seen = ns;
                    cap = nc;
                }
                t->seen[t->nseen++] = sphy;
            }
        }
        int64_t size = (int64_t)iov[0].iov_len;
        store_slices_release(&sl);
        if (r != CLOG_REC)
            break;
        phy += size;
    }
    if (t->nseen > 0)
        qsort(t->seen, t->nseen, sizeof(int64_t), cmp_i64);
    t->recovered_seen = (int64_t)t->nseen;
    return 0;
}

static int
load_segments(struct timer_store *t)
{
    DIR *d = opendir(t->logdir);
    if (d == NULL) {
        err_set("cannot read %s: %s", t->logdir, strerror(errno));
        return -1;
    }
    int64_t *bases = NULL;
    size_t nb = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t b;
        if (strlen(e->d_name) != 20 || parse_long(e->d_name, 20, &b) != 0 || b < 0 ||
            b % t->seg_size != 0)
            continue;
        if (nb == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *nbs = realloc(bases, cap * sizeof(int64_t));
            if (nbs == NULL) {
                free(bases);
                closedir(d);
                err_set("out of memory");
                return -1;
            }
            bases = nbs;
        }
        bases[nb++] = b;
    }
    closedir(d);
    if (nb > 1)
        qsort(bases, nb, sizeof(int64_t), cmp_i64);
    int rc = 0;
    for (size_t i = 0; i < nb && rc == 0; i++) {
        char path[PATH_MAX];
        seg_path(t, bases[i], path, sizeof(path));
        if (bases[i] >= t->tl_end && !(bases[i] == t->tl_end && i == 0)) {
            /* Written after the checkpoint: read again from the queue. */
            if (unlink(path) != 0)
                log_warn("timer: cannot delete %s: %s", path, strerror(errno));
            continue;
        }
        struct seg *s = seg_new(t, bases[i]);
        if (s == NULL) {
            rc = -1;
            break;
        }
        int64_t keep = t->tl_end - s->base < t->seg_size ? t->tl_end - s->base : t->seg_size;
        if (ftruncate(s->fd, keep) != 0) {
            err_set("cannot cut %s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    free(bases);
    return rc;
}

/* Reads every live unit: the latest bucket (sizing the wheel), then
 * each slot's last unit, the pending count and each file's latest
 * bucket. */
static int
rebuild(struct timer_store *t, bool place, int64_t *max_bucket)
{
    uint8_t *b = malloc((size_t)SCAN_CHUNK * UNIT);
    if (b == NULL) {
        err_set("out of memory");
        return -1;
    }
    int64_t pending = 0;
    for (int i = 0; i < t->nsegs; i++) {
        struct seg *s = &t->segs[i];
        int64_t end = t->tl_end - s->base < t->seg_size ? t->tl_end - s->base : t->seg_size;
        s->max_bucket = INT64_MIN;
        for (int64_t off = 0; off < end;) {
            size_t want = (size_t)(end - off) < (size_t)SCAN_CHUNK * UNIT ? (size_t)(end - off)
                                                                          : (size_t)SCAN_CHUNK * UNIT;
            ssize_t got = pread(s->fd, b, want, off);
            if (got <= 0) {
                free(b);
                err_set("cannot read the timer log at %" PRId64 ": %s", s->base + off,
                        got < 0 ? strerror(errno) : "short file");
                return -1;
            }
            for (ssize_t k = 0; k + UNIT <= got; k += UNIT) {
                struct unit u;
                unit_decode(b + k, &u);
                if (u.magic != UNIT_MAGIC)
                    continue;
                if (u.bucket > s->max_bucket)
                    s->max_bucket = u.bucket;
                if (u.bucket < t->live_cursor)
                    continue;   /* delivered, or the walk's own */
                if (u.bucket > *max_bucket)
                    *max_bucket = u.bucket;
                if (place) {
                    /* Chained again as appended; the same links unless
                     * the wheel's size or precision changed. */
                    int64_t si = slot_of(t, u.bucket), pos = s->base + off + k;
                    if (u.prev != t->slots[si]) {
                        int64_t prev = t->slots[si];
                        if (pwrite(s->fd, &prev, 8, off + k + 24) != 8) {
                            free(b);
                            err_set("cannot relink the timer log: %s", strerror(errno));
                            return -1;
                        }
                        s->dirty = true;
                    }
                    t->slots[si] = pos;
                    pending++;
                }
            }
            off += got - got % UNIT;
            if (got % UNIT != 0)
                break;
        }
    }
    free(b);
    if (place) {
        /* The rest of the bucket being delivered. */
        for (int64_t pos = t->walk_pos; pos >= 0;) {
            struct unit u;
            if (unit_read(t, pos, &u) != 0)
                break;
            pending++;
            pos = u.prev;
        }
        atomic_store(&ctr(t)->pending, pending);
    }
    return 0;
}

struct timer_store *
timer_open(struct store *s, const char *root)
{
    struct timer_store *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        err_set("out of memory");
        return NULL;
    }
    t->ck_fd = -1;
    buf_init(&t->props);
    buf_init(&t->wake_seen);
    t->s = s;
    store_ref(s);
    t->p = s->conf.timer_precision_ms;
    t->seg_size = s->conf.timer_log_file_size / UNIT * UNIT;
    size_t rl = strlen(root);
    t->dir = malloc(rl + 8);
    t->logdir = malloc(rl + 12);
    if (t->dir == NULL || t->logdir == NULL) {
        err_set("out of memory");
        goto fail;
    }
    snprintf(t->dir, rl + 8, "%s/timer", root);
    snprintf(t->logdir, rl + 12, "%s/timer/log", root);
    if (mkdir_p(t->logdir) != 0)
        goto fail;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/checkpoint", t->dir);
    t->ck_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (t->ck_fd < 0) {
        err_set("cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    uint8_t b[2 * CK_SIZE];
    ssize_t got = pread(t->ck_fd, b, sizeof(b), 0);
    struct ck c0, c1, *c = NULL;
    bool ok0 = got >= CK_SIZE && ck_decode(b, &c0);
    bool ok1 = got >= 2 * CK_SIZE && ck_decode(b + CK_SIZE, &c1);
    if (ok0 && ok1)
        c = c0.seq > c1.seq ? &c0 : &c1;
    else if (ok0)
        c = &c0;
    else if (ok1)
        c = &c1;
    int64_t now = timer_now_ms();
    struct cq *q = cqt_find(&s->cqs, TIMER_TOPIC, sizeof(TIMER_TOPIC) - 1, 0);
    int64_t qmin = q != NULL ? cq_min(q) : 0, qmax = q != NULL ? cq_max(q) : 0;
    if (c != NULL) {
        t->ck_seq = c->seq;
        t->enq = c->enq;
        t->cursor = c->cursor;
        t->walk_pos = c->walk_pos;
        t->walk_bucket = c->walk_bucket;
        t->walk_head = c->walk_head;
        t->tl_end = c->tl_end;
        if (c->precision != t->p) {
            /* Buckets are multiples of the old precision: still correct
             * times; the cursor moves in the new steps from a multiple. */
            log_warn("timer: precision changed from %" PRId64 " to %" PRId64 " ms",
                     c->precision, t->p);
            t->cursor = t->cursor / t->p * t->p;
        }
    } else {
        /* A new service: everything already in the timer topic is read
         * (a store written before timers had none). */
        t->enq = qmin;
        t->cursor = now / t->p * t->p;
        t->walk_pos = -1;
        t->walk_bucket = 0;
        t->walk_head = -1;
        t->tl_end = 0;
    }
    if (t->enq < qmin)
        t->enq = qmin;
    if (t->enq > qmax)
        t->enq = qmax;   /* the store lost its tail (power loss) */
    if (load_segments(t) != 0)
        goto fail;
    if (t->nsegs > 0 && t->segs[0].base > t->tl_end)
        t->tl_end = t->segs[0].base;
    if (t->walk_pos >= 0 && (t->walk_pos >= t->tl_end || seg_for(t, t->walk_pos) == NULL))
        t->walk_pos = -1;
    t->live_cursor = c != NULL ? c->cursor : t->cursor;
    int64_t maxb = INT64_MIN;
    if (rebuild(t, false, &maxb) != 0)
        goto fail;
    int64_t want = 2 * (s->conf.timer_max_delay_ms / t->p) + 4;
    if (maxb != INT64_MIN && (maxb - t->cursor) / t->p + 4 > want)
        want = (maxb - t->cursor) / t->p + 4;
    t->nslots = want;
    t->slots = malloc((size_t)want * sizeof(int64_t));
    if (t->slots == NULL) {
        err_set("out of memory for %" PRId64 " timer wheel slots", want);
        goto fail;
    }
    memset(t->slots, 0xff, (size_t)want * sizeof(int64_t));   /* -1 */
    if (rebuild(t, true, &maxb) != 0)
        goto fail;
    /* Where deliveries the timer log does not know of may be: after the
     * checkpoint; or, with no checkpoint but timers in the queue (a
     * slave restarted as the master: its commit log holds the old
     * master's timers and deliveries, replicated, and no timer files),
     * from the oldest timer record on. */
    int64_t scan_from = c != NULL ? c->clog_end : -1;
    struct cq_entry first;
    if (c == NULL && q != NULL && qmax > qmin && cq_read(q, qmin, &first) == 0)
        scan_from = first.phy;
    if (scan_from >= 0 && scan_deliveries(t, scan_from) != 0)
        goto fail;
    t->seen_from = scan_from >= 0 ? scan_from : 0;
    if (t->walk_pos >= 0)
        dels_recollect(t);
    t->seen_until_cursor = now;
    t->seen_until_enq = qmax;
    t->last_ck_ns = clock_mono_ns();
    t->tps_ns = t->last_ck_ns;
    atomic_store(&ctr(t)->enqueued, 0);
    atomic_store(&ctr(t)->delivered, 0);
    atomic_store(&ctr(t)->dropped, 0);
    atomic_store(&ctr(t)->running, true);
    log_info("timer: %" PRId64 " pending, next bucket %" PRId64 ", queue offset %" PRId64
             ", log %" PRId64 " bytes in %d files, %zu deliveries after the checkpoint",
             atomic_load(&ctr(t)->pending), t->cursor, t->enq, t->tl_end, t->nsegs, t->nseen);
    if (checkpoint(t, true) != 0)
        goto fail;
    return t;
fail:
    timer_close(t);
    return NULL;
}

/* }}} */

/* {{{ Recalls */

static uint64_t
fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void
dels_clear(struct timer_store *t)
{
    for (int i = 0; i < t->ndels; i++)
        free(t->dels[i]);
    t->ndels = 0;
    if (t->delcap > 64) {
        free(t->dels);
        free(t->del_hash);
        t->dels = NULL;
        t->del_hash = NULL;
        t->delcap = 0;
    }
}

static bool
dels_has(const struct timer_store *t, const char *k, size_t n)
{
    uint64_t h = fnv1a(k, n);
    for (int i = 0; i < t->ndels; i++)
        if (t->del_hash[i] == h && strlen(t->dels[i]) == n && memcmp(t->dels[i], k, n) == 0)
            return true;
    return false;
}

static void
dels_add(struct timer_store *t, const char *k, size_t n)
{
    if (dels_has(t, k, n))
        return;
    if (t->ndels >= DELS_MAX) {
        log_warn("timer: more than %d recalls in bucket %" PRId64 "; this one is ignored",
                 DELS_MAX, t->walk_bucket);
        return;
    }
    if (t->ndels == t->delcap) {
        int cap = t->delcap ? t->delcap * 2 : 16;
        char **d = realloc(t->dels, sizeof(*d) * (size_t)cap);
        if (d != NULL)
            t->dels = d;
        uint64_t *h = realloc(t->del_hash, sizeof(*h) * (size_t)cap);
        if (h != NULL)
            t->del_hash = h;
        if (d == NULL || h == NULL) {
            log_error("timer: out of memory for a recall; it is ignored");
            return;
        }
        t->delcap = cap;
    }
    char *c = malloc(n + 1);
    if (c == NULL) {
        log_error("timer: out of memory for a recall; it is ignored");
        return;
    }
    memcpy(c, k, n);
    c[n] = '\0';
    t->del_hash[t->ndels] = fnv1a(k, n);
    t->dels[t->ndels++] = c;
}

int
timer_recall_handle(struct buf *out, const char *topic, size_t tlen, const char *broker,
                    size_t blen, int64_t bucket, const char *uniq, size_t ulen)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char raw[640];
    /* 5.x's HandleV1: TIMER_OUT_MS + 1 ("consider of floor"). */
    int n = snprintf(raw, sizeof(raw), "v1 %.*s %.*s %" PRId64 " %.*s", (int)tlen, topic,
                     (int)blen, broker, bucket + 1, (int)ulen, uniq);
    if (n < 0 || (size_t)n >= sizeof(raw)) {
        err_set("recall handle too long");
        return -EINVAL;
    }
    size_t len = (size_t)n, need = (len + 2) / 3 * 4;
    if (buf_reserve(out, need) != 0)
        return -ENOMEM;
    uint8_t *w = buf_tail(out);
    const uint8_t *r = (const uint8_t *)raw;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)r[i] << 16 | (uint32_t)r[i + 1] << 8 | r[i + 2];
        *w++ = (uint8_t)b64[v >> 18];
        *w++ = (uint8_t)b64[(v >> 12) & 63];
        *w++ = (uint8_t)b64[(v >> 6) & 63];
        *w++ = (uint8_t)b64[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)r[i] << 16 | (i + 1 < len ? (uint32_t)r[i + 1] << 8 : 0);
        *w++ = (uint8_t)b64[v >> 18];
        *w++ = (uint8_t)b64[(v >> 12) & 63];
        *w++ = i + 1 < len ? (uint8_t)b64[(v >> 6) & 63] : '=';
        *w++ = '=';
    }
    out->end += need;
    return 0;
}

/* The record of a timer unit, pinned in sl and decoded in v; -1 when it
 * is not a timer record (gone, or something else there). */
static int
timer_record(struct timer_store *t, int64_t phy, int32_t size, struct store_slices *sl,
             struct clog_view *v)
{
    if (store_read_at(t->s, phy, sl) != 0)
        return -1;
    if (clog_decode(sl->iov[0].iov_base, sl->iov[0].iov_len, phy, false, v) != CLOG_REC ||
        (int32_t)v->size != size || v->topic_len != sizeof(TIMER_TOPIC) - 1 ||
        memcmp(v->topic, TIMER_TOPIC, v->topic_len) != 0) {
        store_slices_release(sl);
        return -1;
    }
    return 0;
}

/* Collects the recalls of the bucket being delivered that the walk had
 * passed before a restart (from its first unit to where it stopped). */
static void
dels_recollect(struct timer_store *t)
{
    for (int64_t pos = t->walk_head; pos >= 0 && pos != t->walk_pos;) {
        struct unit u;
        if (unit_read(t, pos, &u) != 0)
            return;
        struct iovec iov[1];
        struct mfile *pins[1];
        struct store_slices sl = { .cap = 1, .iov = iov, .pins = pins };
        struct clog_view v;
        if (timer_record(t, u.phy, u.size, &sl, &v) == 0) {
            size_t dl;
            const char *dk = props_find((const char *)v.props, v.props_len, "TIMER_DEL_UNIQKEY", &dl);
            if (dk != NULL)
                dels_add(t, dk, dl);
            store_slices_release(&sl);
        }
        pos = u.prev;
    }
}

/* }}} */

/* {{{ Delivery */

enum { DONE = 0, RETRY = -1 };

static void
add_wake(struct timer_store *t, struct buf *wake, const char *topic, size_t tlen, int32_t qid)
{
    char key[160];
    int kl = snprintf(key, sizeof(key), "%.*s@%" PRId32 "\n", (int)tlen, topic, qid);
    if (kl <= 0 || (size_t)kl >= sizeof(key))
        return;
    /* Few queues per call: a linear look over this call's keys. */
    const char *h = (const char *)buf_head(&t->wake_seen);
    size_t n = buf_len(&t->wake_seen);
    for (size_t i = 0; i + (size_t)kl <= n;) {
        const char *nl = memchr(h + i, '\n', n - i);
        size_t l = (size_t)(nl - (h + i)) + 1;
        if (l == (size_t)kl && memcmp(h + i, key, l) == 0)
            return;
        i += l;
    }
    if (n > 64 * 1024)
        buf_reset(&t->wake_seen);   /* a wide call: duplicates are harmless */
    if (buf_append(&t->wake_seen, key, (size_t)kl) != 0 || buf_append(wake, key, (size_t)kl) != 0)
        log_warn("timer: out of memory noting a queue to wake");
}

static void
drop(struct timer_store *t, int64_t phy, const char *why)
{
    atomic_fetch_add(&ctr(t)->dropped, 1);
    /* A lost commit log file can hold a million of them: a few lines,
     * then a count at the end of the tick. */
    if (t->drops_logged >= DROP_LINES) {
        t->drops_unlogged++;
        return;
    }
    t->drops_logged++;
    log_error("timer: the timer message at commit log offset %" PRId64
              " can never be delivered: %s; skipped", phy, why);
}

/* Writes the timer record at phy to its real queue.  DONE (delivered or
 * dropped for good) or RETRY. */
static int
deliver(struct timer_store *t, int64_t phy, int32_t size, int64_t now, struct buf *wake,
        bool walk)
{
    if (seen_has(t, phy)) {
        t->skipped++;
        return DONE;
    }
    struct iovec iov[1];
    struct mfile *pins[1];
    struct store_slices sl = { .cap = 1, .iov = iov, .pins = pins };
    struct clog_view v;
    if (timer_record(t, phy, size, &sl, &v) != 0) {
        drop(t, phy, "no timer record there (gone from the commit log?)");
        return DONE;
    }
    size_t tl = 0, ql = 0;
    const char *props = (const char *)v.props;
    /* A recall (RECALL_MESSAGE's record) is never delivered: it marks
     * the message of its topic and UNIQ_KEY in this bucket.  The walk
     * goes newest first, so a recall is met before what it recalls. */
    size_t del_len;
    const char *dk = props_find(props, v.props_len, "TIMER_DEL_UNIQKEY", &del_len);
    if (dk != NULL) {
        if (walk)
            dels_add(t, dk, del_len);
        store_slices_release(&sl);
        return DONE;
    }
    if (walk && t->ndels > 0) {
        size_t ul, rtl;
        const char *uk = props_find(props, v.props_len, "UNIQ_KEY", &ul);
        const char *rt = props_find(props, v.props_len, "REAL_TOPIC", &rtl);
        char key[512];
        if (uk != NULL && rt != NULL && rtl + 1 + ul < sizeof(key)) {
            memcpy(key, rt, rtl);
            key[rtl] = '+';
            memcpy(key + rtl + 1, uk, ul);
            if (dels_has(t, key, rtl + 1 + ul)) {
                t->recalled++;
                store_slices_release(&sl);
                return DONE;
            }
        }
    }
    const char *topic = props_find(props, v.props_len, "REAL_TOPIC", &tl);
    const char *qs = props_find(props, v.props_len, "REAL_QID", &ql);
    int64_t qid;
    if (topic == NULL || tl > CLOG_TOPIC_MAX || qs == NULL || parse_long(qs, ql, &qid) != 0 ||
        qid < 0 || qid > INT32_MAX) {
        store_slices_release(&sl);
        drop(t, phy, "REAL_TOPIC or REAL_QID missing or invalid");
        return DONE;
    }
    char deq[24], src[24], enq[24];
    int dl = snprintf(deq, sizeof(deq), "%" PRId64, now);
    int sl2 = snprintf(src, sizeof(src), "%" PRId64, phy);
    int el = snprintf(enq, sizeof(enq), "%" PRId64, v.store_ts);
    struct prop edits[6] = {
        { "REAL_TOPIC", 10, NULL, 0 },
        { "REAL_QID", 8, NULL, 0 },
        { "TIMER_ENQUEUE_MS", 16, enq, (size_t)el },
        { "TIMER_DEQUEUE_MS", 16, deq, (size_t)dl },
        { "WAIT", 4, "false", 5 },
        { TIMER_SRC_KEY, sizeof(TIMER_SRC_KEY) - 1, src, (size_t)sl2 },
    };
    buf_reset(&t->props);
    if (props_edit(&t->props, props, v.props_len, edits, 6) != 0) {
        store_slices_release(&sl);
        log_error("timer: out of memory building a delivery");
        return RETRY;
    }
    struct store_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = topic;
    m.topic_len = tl;
    m.qid = (int32_t)qid;
    m.flag = v.flag;
    m.sysflag = v.sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    m.reconsume = v.reconsume;
    m.body = v.body;
    m.body_len = v.body_len;
    m.props = (const char *)buf_head(&t->props);
    m.props_len = buf_len(&t->props);
    m.born_ts = v.born_ts;
    memcpy(m.born.ip, v.born, v.born_len);
    m.born.len = v.born_len;
    m.born.port = (int32_t)be32_get(v.born + v.born_len);
    memcpy(m.store.ip, v.storeh, v.store_len);
    m.store.len = v.store_len;
    m.store.port = (int32_t)be32_get(v.storeh + v.store_len);
    struct store_put_result r;
    int st = store_put(t->s, &m, &r);
    store_slices_release(&sl);
    switch (st) {
    case PUT_OK:
    case PUT_FLUSH_DISK_TIMEOUT:
    case PUT_FLUSH_SLAVE_TIMEOUT:
    case PUT_SLAVE_NOT_AVAILABLE:
        if (t->put_failing)
            log_info("timer: deliveries go on");
        t->put_failing = false;
        if (atomic_fetch_add(&ctr(t)->delivered, 1) + 1 == errinj_get(ERRINJ_TIMER_CRASH_AFTER))
            (void)kill(getpid(), SIGKILL);   /* the crash window, for specs */
        add_wake(t, wake, m.topic, m.topic_len, m.qid);
        return DONE;
    case PUT_MESSAGE_ILLEGAL:
    case PUT_PROPERTIES_SIZE_EXCEEDED: {
        char why[300];
        snprintf(why, sizeof(why), "%s: %s", put_status_name(st), err_msg());
        drop(t, phy, why);
        return DONE;
    }
    default:
        if (!t->put_failing)
            log_warn("timer: delivery of commit log offset %" PRId64 " failed (%s: %s); retrying "
                     "until the store takes it", phy, put_status_name(st), err_msg());
        t->put_failing = true;
        return RETRY;
    }
}

int
timer_tick(struct timer_store *t, int64_t now, int budget, struct buf *wake)
{
    buf_reset(&t->wake_seen);
    int work = 0;
    int rc = 0;
    /* Read the timer topic into the wheel. */
    struct cq *q = cqt_find(&t->s->cqs, TIMER_TOPIC, sizeof(TIMER_TOPIC) - 1, 0);
    int64_t qmax = q != NULL ? cq_max(q) : 0;
    if (q != NULL && t->enq < cq_min(q))
        t->enq = cq_min(q);
    while (q != NULL && t->enq < qmax && work < budget) {
        struct cq_entry e;
        int rrc = cq_read(q, t->enq, &e);
        if (rrc == -ENOENT) {
            t->enq = cq_roll_next(q, t->enq);
            continue;
        }
        if (rrc != 0)
            break;  /* not mappable now (store/mfpool.h): next round */
        int64_t bucket = e.tags;
        if (bucket < t->cursor) {
            bool walk = t->walk_pos >= 0 && bucket == t->walk_bucket;
            if (deliver(t, e.phy, e.size, now, wake, walk) != DONE) {
                rc = -1;
                break;
            }
        } else {
            /* The wheel holds one bucket per slot: a bucket a whole turn
             * ahead waits until the cursor comes closer. */
            if ((bucket - t->cursor) / t->p >= t->nslots - 1)
                break;
            int64_t i = slot_of(t, bucket);
            struct unit u = { .bucket = bucket, .phy = e.phy, .size = e.size, .prev = t->slots[i] };
            int64_t pos = unit_append(t, &u);
            if (pos < 0) {
                log_error("timer: %s", err_msg());
                rc = -1;
                break;
            }
            t->slots[i] = pos;
            atomic_fetch_add(&ctr(t)->pending, 1);
        }
        atomic_fetch_add(&ctr(t)->enqueued, 1);
        t->enq++;
        t->dirty = true;
        work++;
    }
    atomic_store(&ctr(t)->enqueue_lag, qmax - t->enq);
    /* Deliver what is due. */
    int empty = 0;
    while (rc == 0 && work < budget) {
        if (t->walk_pos >= 0) {
            struct unit u;
            if (unit_read(t, t->walk_pos, &u) != 0) {
                log_error("timer: %s; the rest of bucket %" PRId64 " is lost", err_msg(),
                          t->walk_bucket);
                t->walk_pos = -1;
                continue;
            }
            if (deliver(t, u.phy, u.size, now, wake, true) != DONE) {
                rc = -1;
                break;
            }
            atomic_fetch_sub(&ctr(t)->pending, 1);
            t->walk_pos = u.prev;
            t->dirty = true;
            work++;
            continue;
        }
        if (t->cursor + t->p > now)
            break;
        int64_t i = slot_of(t, t->cursor);
        if (t->slots[i] >= 0) {
            t->walk_pos = t->slots[i];
            t->walk_head = t->slots[i];
            t->walk_bucket = t->cursor;
            dels_clear(t);
            t->slots[i] = -1;
        } else if (++empty >= 65536) {
            work++;   /* catching up: empty buckets cost a little too */
            empty = 0;
        }
        t->cursor += t->p;
        t->dirty = true;
    }
    if (t->drops_unlogged > 0)
        log_error("timer: and %" PRId64 " more timer messages that can never be delivered; skipped",
                  t->drops_unlogged);
    t->drops_logged = 0;
    t->drops_unlogged = 0;
    int64_t behind = now - (t->walk_pos >= 0 ? t->walk_bucket : t->cursor) - t->p;
    atomic_store(&ctr(t)->dequeue_lag_ms, behind > 0 ? behind : 0);
    /* The deliveries found at recovery are all behind us. */
    if (t->nseen > 0 && t->walk_pos < 0 && t->cursor > t->seen_until_cursor &&
        t->enq >= t->seen_until_enq) {
        free(t->seen);
        t->seen = NULL;
        t->nseen = 0;
    }
    int64_t mono = clock_mono_ns();
    if (mono - t->tps_ns >= 1000000000) {
        int64_t enq = atomic_load(&ctr(t)->enqueued), deq = atomic_load(&ctr(t)->delivered);
        int64_t el = mono - t->tps_ns;
        atomic_store(&ctr(t)->enqueue_tps_milli, (enq - t->tps_enq) * 1000000000000LL / el);
        atomic_store(&ctr(t)->dequeue_tps_milli, (deq - t->tps_deq) * 1000000000000LL / el);
        t->tps_ns = mono;
        t->tps_enq = enq;
        t->tps_deq = deq;
    }
    if (t->dirty && mono - t->last_ck_ns >= (int64_t)t->s->conf.timer_flush_ms * 1000000) {
        t->last_ck_ns = mono;
        if (checkpoint(t, true) != 0) {
            log_error("timer: %s", err_msg());
            rc = -1;
        }
    }
    if (rc != 0)
        return -1;
    return work >= budget ? 1 : 0;
}

void
timer_info(struct timer_store *t, struct timer_info *o)
{
    memset(o, 0, sizeof(*o));
    o->pending = atomic_load(&ctr(t)->pending);
    o->enqueued = atomic_load(&ctr(t)->enqueued);
    o->delivered = atomic_load(&ctr(t)->delivered);
    o->dropped = atomic_load(&ctr(t)->dropped);
    o->skipped_redelivery = t->skipped;
    o->cursor = t->cursor;
    o->enq_offset = t->enq;
    o->log_end = t->tl_end;
    o->log_files = t->nsegs;
    o->slots = t->nslots;
    o->recovered_seen = t->recovered_seen;
    o->recalled = t->recalled;
}

void
timer_close(struct timer_store *t)
{
    if (t == NULL)
        return;
    if (t->slots != NULL && t->ck_fd >= 0 && checkpoint(t, true) != 0)
        log_error("timer: %s", err_msg());
    if (t->s != NULL && t->slots != NULL)
        atomic_store(&ctr(t)->running, false);
    for (int i = 0; i < t->nsegs; i++)
        close(t->segs[i].fd);
    if (t->ck_fd >= 0)
        close(t->ck_fd);
    free(t->segs);
    free(t->slots);
    free(t->seen);
    dels_clear(t);
    free(t->dels);
    free(t->del_hash);
    free(t->dir);
    free(t->logdir);
    buf_free(&t->props);
    buf_free(&t->wake_seen);
    if (t->s != NULL)
        store_unref(t->s);
    free(t);
}

/* }}} */

/* Empties and removes DIR/log and DIR (a discarded timer directory). */
static int
discard_dir(const char *top)
{
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/log", top);
    int rc = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *at = pass == 0 ? dir : top;
        DIR *d = opendir(at);
        if (d == NULL) {
            if (errno == ENOENT)
                continue;
            err_set("cannot read %s: %s", at, strerror(errno));
            return -1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, "log") == 0)
                continue;
            if (snprintf(path, sizeof(path), "%s/%s", at, e->d_name) >= (int)sizeof(path))
                continue;   /* not one of ours */
            if (unlink(path) != 0 && errno != ENOENT) {
                err_set("cannot remove %s: %s", path, strerror(errno));
                rc = -1;
            }
        }
        closedir(d);
        if (rmdir(at) != 0 && errno != ENOENT) {
            err_set("cannot remove %s: %s", at, strerror(errno));
            rc = -1;
        }
    }
    return rc;
}

int
timer_discard(const char *root)
{
    char dir[PATH_MAX], old[PATH_MAX];
    if (snprintf(old, sizeof(old), "%s/timer.discarded", root) >= (int)sizeof(old)) {
        err_set("path too long: %s", root);
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/timer", root);
    /* One rename makes the state go at once (a crash leaves either the
     * whole directory or none of it); the files follow. */
    if (discard_dir(old) != 0)
        return -1;
    if (rename(dir, old) != 0) {
        if (errno == ENOENT)
            return 0;
        err_set("cannot rename %s: %s", dir, strerror(errno));
        return -1;
    }
    return discard_dir(old);
}
