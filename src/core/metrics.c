/*
 * metrics: see metrics.h.
 */
#include "core/metrics.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "core/siphash.h"
#include "core/membudget.h"

/* rocketmq_rpc_latency's bucket bounds, in ms: RocketMQ 5's
 * (RemotingMetricsManager), so dashboards made for it read ours. */
static const int64_t rpc_bounds_ms[] = { 1, 3, 5, 7, 10, 100, 1000, 2000, 3000 };
#define RPC_NB ((int)(sizeof(rpc_bounds_ms) / sizeof(rpc_bounds_ms[0])))

/* rocketmq_message_size's bounds, in bytes: RocketMQ 5's
 * (BrokerMetricsManager: 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB). */
static const int64_t size_bounds[] = { 1024, 4096, 524288, 1048576, 2097152, 4194304 };
#define SZ_NB ((int)(sizeof(size_bounds) / sizeof(size_bounds[0])))

/* rmq_storage_put_latency's bounds, in microseconds (RocketMQ 5 has no
 * such family; an append is µs, a page fault or a new file is ms). */
static const int64_t put_bounds_us[] = { 10, 50, 100, 500, 1000, 5000, 10000, 100000, 1000000 };
#define PUT_NB ((int)(sizeof(put_bounds_us) / sizeof(put_bounds_us[0])))

enum family { FAM_RPC, FAM_IN, FAM_OUT, FAM_DLQ, FAM_COUNT };

/* Values of one series.  RPC: count, RPC_NB + 1 buckets (not cumulative:
 * one increment per request), the sum in ns.  IN: messages, bytes, then
 * SZ_NB + 1 message size buckets and their sum (the count is the
 * messages).  OUT: messages, bytes.  DLQ: messages. */
#define RPC_COUNT 0
#define RPC_BUCKET0 1
#define RPC_SUM (RPC_BUCKET0 + RPC_NB + 1)
#define RPC_NVALS (RPC_SUM + 1)
#define IN_SZ0 2
#define IN_SZSUM (IN_SZ0 + SZ_NB + 1)
#define IN_NVALS (IN_SZSUM + 1)
#define MAX_NVALS (RPC_NVALS > IN_NVALS ? RPC_NVALS : IN_NVALS)

static const int fam_nvals[FAM_COUNT] = { RPC_NVALS, IN_NVALS, 2, 1 };

/* The shard's unlabelled put latency histogram: count, PUT_NB + 1
 * buckets, the sum in ns. */
#define PUT_BUCKET0 1
#define PUT_SUM (PUT_BUCKET0 + PUT_NB + 1)
#define PUT_NVALS (PUT_SUM + 1)

struct series {
    uint64_t hash;
    uint32_t klen;
    uint32_t split;            /* FAM_OUT: the topic's length in key;
                                * FAM_RPC: RPC_LABELLED for a series whose
                                * key is its label text (metrics_rpc_series) */
    bool overflow;
    _Atomic uint64_t v[];      /* fam_nvals values, then the key bytes */
};

struct table {
    uint32_t cap;
    _Atomic uint32_t n;        /* items published (release) */
    struct series **items;     /* cap slots */
    struct series *overflow;
    uint32_t *index;           /* owner only: item + 1 per slot, 0 = free */
    uint32_t mask;
    int64_t bytes;             /* owner only: the label sets' allocations,
                                * counted in the memory budget (MB_METRICS) */
};

/* The last rpc series of each request code below this: a request
 * code's replies nearly always have one response code, so most
 * recordings skip the hash. */
#define RPC_CACHE 1024

/* series.split of an rpc series keyed by its label text. */
#define RPC_LABELLED 1

/* A queue's pull offset: keyed by the topic+group's FAM_OUT series (its
 * address, unique in the shard) and the queue id, so that recording it
 * after metrics_out's lookup hashes two integers, not the names again. */
struct pull_slot {
    const struct series *out;
    int32_t qid;
    _Atomic uint64_t offset;
    _Atomic uint64_t stamp_ns;
};

struct pull_table {
    uint32_t cap;
    _Atomic uint32_t n;        /* items published (release) */
    struct pull_slot *items;   /* cap slots */
    uint32_t *index;           /* owner only: item + 1 per slot, 0 = free */
    uint32_t mask;
};

struct metrics_shard {
    struct table t[FAM_COUNT];
    struct series *rpc_last[RPC_CACHE];
    /* The last series of IN and OUT: a worker's sends and pulls mostly
     * name the topic (and group) of the one before, and comparing the
     * names is cheaper than hashing them. */
    struct series *in_last, *out_last;
    struct metrics *reg;       /* the registry it belongs to */
    struct pull_table pulls;
    _Atomic uint64_t put[PUT_NVALS];
    _Atomic int64_t loop_lag_ns;   /* -1: not measured yet */
    _Atomic int64_t loop_busy_ns;  /* -1: not measured yet */
    _Atomic int64_t renew_leases;  /* gRPC auto_renew leases held */
    _Atomic uint64_t renew_granted;
    _Atomic uint64_t window_sends;   /* the worker's pull window (store/access.h) */
};

struct collector {
    metrics_collect_fn fn;
    void *arg;
    void (*release)(void *arg);
};

struct metrics {
    int nshards;
    struct metrics_shard **shards;
    char *ident;               /* `cluster="..",node_type="..",node_id=".."` */
    uint32_t max_label_sets;
    int64_t started_ns;        /* CLOCK_MONOTONIC at metrics_new */
    pthread_mutex_t collector_lock;  /* the slots below */
    bool lock_ready;
    struct collector slots[METRICS_SLOTS];
    /* Controller mode (docs/controller.md): -1 until set. */
    _Atomic int64_t replica[METRICS_REPLICA_COUNT];
};

static int64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline const char *
series_key(const struct series *s, int fam)
{
    return (const char *)&s->v[fam_nvals[fam]];
}

static inline void
add(_Atomic uint64_t *v, uint64_t n)
{
    /* Only the owner writes: load + store, no locked instruction. */
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Keyed (core/siphash.h): the keys hold topic and group names a peer
 * chooses, and the index probes linearly, so an unkeyed hash would let a
 * peer line its names up into one long probe sequence.  SipHash-1-3 of a
 * short key costs about what the old multiply-rotate hash did per 8
 * bytes plus its finalisation (scripts/bench/hotpath.sh).  Only the
 * owner's index uses it. */
static uint64_t
key_hash(const void *p, size_t n)
{
    return siphash_bytes(p, n);
}

static struct series *
series_new(int fam, const char *key, size_t klen, uint32_t split, uint64_t hash)
{
    size_t nv = (size_t)fam_nvals[fam];
    struct series *s = calloc(1, sizeof(*s) + nv * sizeof(s->v[0]) + klen);
    if (s == NULL)
        return NULL;
    s->hash = hash;
    s->klen = (uint32_t)klen;
    s->split = split;
    if (klen > 0)
        memcpy((char *)&s->v[nv], key, klen);
    return s;
}

/* The series of key in t, made on first sight; the overflow series once
 * t is full (or out of memory). */
static struct series *
lookup(struct table *t, int fam, const char *key, size_t klen, uint32_t split)
{
    uint64_t h = key_hash(key, klen);
    uint32_t i = (uint32_t)h & t->mask;
    for (;;) {
        uint32_t it = t->index[i];
        if (it == 0)
            break;
        struct series *s = t->items[it - 1];
        if (s->hash == h && s->klen == klen && s->split == split &&
            memcmp(series_key(s, fam), key, klen) == 0)
            return s;
        i = (i + 1) & t->mask;
    }
    uint32_t n = atomic_load_explicit(&t->n, memory_order_relaxed);
    if (n >= t->cap)
        return t->overflow;
    struct series *s = series_new(fam, key, klen, split, h);
    if (s == NULL)
        return t->overflow;
    /* A label set lives as long as the registry: counted once, here. */
    int64_t size = (int64_t)(sizeof(*s) + (size_t)fam_nvals[fam] * sizeof(s->v[0]) + klen);
    t->bytes += size;
    struct membudget *b = membudget_shared();
    if (b != NULL)
        membudget_add(b, MB_METRICS, size);
    t->items[n] = s;
    t->index[i] = n + 1;
    /* Readers see the item (and its key) before they see the count. */
    atomic_store_explicit(&t->n, n + 1, memory_order_release);
    return s;
}

/* {{{ Recording */

/* An rpc series' key: the two codes big-endian with the sign flipped,
 * so that memcmp order is numeric order. */
static void
rpc_key(unsigned char key[8], int32_t request_code, int32_t response_code)
{
    uint32_t a = (uint32_t)request_code ^ 0x80000000u;
    uint32_t b = (uint32_t)response_code ^ 0x80000000u;
    for (int i = 0; i < 4; i++) {
        key[i] = (unsigned char)(a >> (24 - 8 * i));
        key[4 + i] = (unsigned char)(b >> (24 - 8 * i));
    }
}

void
metrics_rpc(struct metrics_shard *sh, int32_t request_code,
            int32_t response_code, int64_t elapsed_ns)
{
    unsigned char key[8];
    rpc_key(key, request_code, response_code);
    struct series *s = NULL;
    bool cacheable = request_code >= 0 && request_code < RPC_CACHE;
    if (cacheable) {
        s = sh->rpc_last[request_code];
        if (s != NULL && memcmp(series_key(s, FAM_RPC), key, sizeof(key)) != 0)
            s = NULL;
    }
    if (s == NULL) {
        s = lookup(&sh->t[FAM_RPC], FAM_RPC, (const char *)key, sizeof(key), 0);
        if (cacheable && !s->overflow)
            sh->rpc_last[request_code] = s;
    }
    metrics_rpc_observe((struct metrics_series *)s, elapsed_ns);
}

struct metrics_series *
metrics_rpc_series(struct metrics_shard *sh, const char *labels, size_t n)
{
    return (struct metrics_series *)lookup(&sh->t[FAM_RPC], FAM_RPC, labels, n, RPC_LABELLED);
}

void
metrics_rpc_observe(struct metrics_series *ms, int64_t elapsed_ns)
{
    struct series *s = (struct series *)ms;
    if (elapsed_ns < 0)
        elapsed_ns = 0;
    int bk = 0;
    while (bk < RPC_NB && elapsed_ns > rpc_bounds_ms[bk] * 1000000)
        bk++;
    add(&s->v[RPC_COUNT], 1);
    add(&s->v[RPC_BUCKET0 + bk], 1);
    add(&s->v[RPC_SUM], (uint64_t)elapsed_ns);
}

void
metrics_in(struct metrics_shard *sh, const char *topic, size_t tlen,
           uint64_t msgs, uint64_t bytes, uint64_t body_bytes, int64_t put_ns)
{
    struct series *s = sh->in_last;
    if (s == NULL || s->klen != tlen || memcmp(series_key(s, FAM_IN), topic, tlen) != 0) {
        s = lookup(&sh->t[FAM_IN], FAM_IN, topic, tlen, 0);
        if (!s->overflow)
            sh->in_last = s;
    }
    add(&s->v[0], msgs);
    add(&s->v[1], bytes);
    if (msgs > 0) {
        /* A batch's messages counted at their mean size: the put does
         * not keep each one's. */
        int64_t each = (int64_t)(body_bytes / msgs);
        int bk = 0;
        while (bk < SZ_NB && each > size_bounds[bk])
            bk++;
        add(&s->v[IN_SZ0 + bk], msgs);
        add(&s->v[IN_SZSUM], body_bytes);
    }
    if (put_ns >= 0)
        metrics_put_latency(sh, put_ns);
}

void
metrics_put_latency(struct metrics_shard *sh, int64_t put_ns)
{
    if (put_ns < 0)
        put_ns = 0;
    int bk = 0;
    while (bk < PUT_NB && put_ns > put_bounds_us[bk] * 1000)
        bk++;
    add(&sh->put[0], 1);
    add(&sh->put[PUT_BUCKET0 + bk], 1);
    add(&sh->put[PUT_SUM], (uint64_t)put_ns);
}

/* The series of topic+group in family fam (side by side in the key;
 * split tells them apart). */
static struct series *
lookup_pair(struct metrics_shard *sh, int fam, const char *topic, size_t tlen,
            const char *group, size_t glen)
{
    char key[512];
    if (tlen + glen > sizeof(key))
        return sh->t[fam].overflow;   /* longer than RocketMQ allows */
    memcpy(key, topic, tlen);
    memcpy(key + tlen, group, glen);
    return lookup(&sh->t[fam], fam, key, tlen + glen, (uint32_t)tlen);
}

/* Records (offset, stamp) in the pull slot of (out, qid), made on first
 * sight (nothing once the table is full). */
static void
pull_record(struct pull_table *t, const struct series *out, int32_t qid, int64_t offset,
            int64_t stamp_ns)
{
    uint64_t h = ((uint64_t)(uintptr_t)out ^ ((uint64_t)(uint32_t)qid << 40)) * 0x9E3779B97F4A7C15ULL;
    uint32_t i = (uint32_t)(h >> 32) & t->mask;
    for (;;) {
        uint32_t it = t->index[i];
        if (it == 0)
            break;
        struct pull_slot *p = &t->items[it - 1];
        if (p->out == out && p->qid == qid) {
            /* Offset first: a reader that sees the new stamp may pair
             * it with the old offset for one scrape, never with a newer
             * one. */
            atomic_store_explicit(&p->offset, (uint64_t)offset, memory_order_relaxed);
            atomic_store_explicit(&p->stamp_ns, (uint64_t)stamp_ns, memory_order_relaxed);
            return;
        }
        i = (i + 1) & t->mask;
    }
    uint32_t n = atomic_load_explicit(&t->n, memory_order_relaxed);
    if (n >= t->cap)
        return;
    struct pull_slot *p = &t->items[n];
    p->out = out;
    p->qid = qid;
    atomic_store_explicit(&p->offset, (uint64_t)offset, memory_order_relaxed);
    atomic_store_explicit(&p->stamp_ns, (uint64_t)stamp_ns, memory_order_relaxed);
    t->index[i] = n + 1;
    /* Readers see the slot whole before they see the count. */
    atomic_store_explicit(&t->n, n + 1, memory_order_release);
}

void
metrics_out(struct metrics_shard *sh, const char *topic, size_t tlen,
            const char *group, size_t glen, uint64_t msgs, uint64_t bytes,
            int32_t qid, int64_t next, int64_t stamp_ns)
{
    struct series *s = sh->out_last;
    if (s == NULL || s->split != tlen || s->klen != tlen + glen ||
        memcmp(series_key(s, FAM_OUT), topic, tlen) != 0 ||
        memcmp(series_key(s, FAM_OUT) + tlen, group, glen) != 0) {
        s = lookup_pair(sh, FAM_OUT, topic, tlen, group, glen);
        if (!s->overflow)
            sh->out_last = s;
    }
    add(&s->v[0], msgs);
    add(&s->v[1], bytes);
    if (qid < 0 || next < 0 || s->overflow)
        return;   /* an offset of no queue in particular says nothing */
    pull_record(&sh->pulls, s, qid, next, stamp_ns);
}

void
metrics_dlq(struct metrics_shard *sh, const char *topic, size_t tlen,
            const char *group, size_t glen, uint64_t msgs)
{
    add(&lookup_pair(sh, FAM_DLQ, topic, tlen, group, glen)->v[0], msgs);
}

void
metrics_loop_lag(struct metrics_shard *sh, int64_t lag_ns)
{
    atomic_store_explicit(&sh->loop_lag_ns, lag_ns < 0 ? 0 : lag_ns, memory_order_relaxed);
}

void
metrics_loop_busy(struct metrics_shard *sh, int64_t busy_ns)
{
    atomic_store_explicit(&sh->loop_busy_ns, busy_ns < 0 ? 0 : busy_ns, memory_order_relaxed);
}

void
metrics_renew_leases(struct metrics_shard *sh, int64_t delta)
{
    if (sh != NULL)
        atomic_store_explicit(&sh->renew_leases,
                              atomic_load_explicit(&sh->renew_leases, memory_order_relaxed) + delta,
                              memory_order_relaxed);
}

void
metrics_renew_granted(struct metrics_shard *sh)
{
    if (sh != NULL)
        add(&sh->renew_granted, 1);
}

/* }}} */

/* {{{ Life cycle */

/* An open-addressing index for cap items, at most half full: *mask. */
static uint32_t *
index_new(uint32_t cap, uint32_t *mask)
{
    uint32_t slots = 2;
    while (slots < 2 * cap)
        slots *= 2;
    *mask = slots - 1;
    return calloc(slots, sizeof(uint32_t));
}

static int
table_init(struct table *t, int fam, uint32_t cap)
{
    t->cap = cap;
    atomic_init(&t->n, 0);
    t->items = calloc(cap, sizeof(*t->items));
    t->index = index_new(cap, &t->mask);
    t->overflow = series_new(fam, NULL, 0, 0, 0);
    if (t->items == NULL || t->index == NULL || t->overflow == NULL)
        return -1;
    t->overflow->overflow = true;
    return 0;
}

static int
pull_table_init(struct pull_table *t, uint32_t cap)
{
    t->cap = cap;
    atomic_init(&t->n, 0);
    t->items = calloc(cap, sizeof(*t->items));
    t->index = index_new(cap, &t->mask);
    return t->items != NULL && t->index != NULL ? 0 : -1;
}

static void
table_free(struct table *t)
{
    uint32_t n = atomic_load_explicit(&t->n, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        free(t->items[i]);
    free(t->items);
    free(t->index);
    free(t->overflow);
    struct membudget *b = membudget_shared();
    if (b != NULL && t->bytes != 0)
        membudget_add(b, MB_METRICS, -t->bytes);
    t->bytes = 0;
}

/* Appends v as a label value: \, " and newline escaped as the format
 * says; other control and non-ASCII bytes as %XX, so that the output is
 * always valid UTF-8. */
static int
put_value(struct buf *b, const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        char tmp[4];
        size_t tl = 1;
        if (ch == '\\' || ch == '"') {
            tmp[0] = '\\';
            tmp[1] = (char)ch;
            tl = 2;
        } else if (ch == '\n') {
            tmp[0] = '\\';
            tmp[1] = 'n';
            tl = 2;
        } else if (ch < 0x20 || ch >= 0x7f) {
            static const char hex[] = "0123456789ABCDEF";
            tmp[0] = '%';
            tmp[1] = hex[ch >> 4];
            tmp[2] = hex[ch & 15];
            tl = 3;
        } else {
            tmp[0] = (char)ch;
        }
        if (buf_append(b, tmp, tl) != 0)
            return -1;
    }
    return 0;
}

static int
put_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

static int
put_label(struct buf *b, const char *name, const char *v, size_t n)
{
    return put_str(b, ",") == 0 && put_str(b, name) == 0 && put_str(b, "=\"") == 0 &&
                   put_value(b, v, n) == 0 && put_str(b, "\"") == 0
               ? 0 : -1;
}

struct metrics *
metrics_new(int nshards, uint32_t max_label_sets, const struct metrics_ident *id)
{
    if (nshards < 1 || max_label_sets < 1 || max_label_sets > (1u << 24)) {
        err_set("metrics: %d shards, %u label sets: out of range", nshards,
                max_label_sets);
        return NULL;
    }
    struct metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        goto oom;
    m->shards = calloc((size_t)nshards, sizeof(*m->shards));
    if (m->shards == NULL)
        goto oom;
    m->nshards = nshards;
    m->max_label_sets = max_label_sets;
    if (pthread_mutex_init(&m->collector_lock, NULL) != 0)
        goto oom;
    m->lock_ready = true;
    m->started_ns = mono_ns();
    for (int i = 0; i < METRICS_REPLICA_COUNT; i++)
        atomic_init(&m->replica[i], -1);
    for (int i = 0; i < nshards; i++) {
        /* A cache line of its own: the owners never share one. */
        m->shards[i] = aligned_alloc(64, (sizeof(struct metrics_shard) + 63) / 64 * 64);
        if (m->shards[i] == NULL)
            goto oom;
        memset(m->shards[i], 0, sizeof(struct metrics_shard));
        atomic_init(&m->shards[i]->loop_lag_ns, -1);
        m->shards[i]->reg = m;
        atomic_init(&m->shards[i]->loop_busy_ns, -1);
        for (int f = 0; f < FAM_COUNT; f++)
            if (table_init(&m->shards[i]->t[f], f, max_label_sets) != 0)
                goto oom;
        if (pull_table_init(&m->shards[i]->pulls, max_label_sets) != 0)
            goto oom;
    }
    struct buf b;
    buf_init(&b);
    const char *c = id->cluster ? id->cluster : "";
    const char *t = id->node_type ? id->node_type : "";
    const char *n = id->node_id ? id->node_id : "";
    if (put_label(&b, "cluster", c, strlen(c)) != 0 ||
        put_label(&b, "node_type", t, strlen(t)) != 0 ||
        put_label(&b, "node_id", n, strlen(n)) != 0 || buf_append(&b, "", 1) != 0) {
        buf_free(&b);
        goto oom;
    }
    m->ident = strdup((const char *)buf_head(&b) + 1);   /* without the ',' */
    buf_free(&b);
    if (m->ident == NULL)
        goto oom;
    return m;
oom:
    metrics_free(m);
    err_set("out of memory for the metrics registry");
    return NULL;
}

void
metrics_free(struct metrics *m)
{
    if (m == NULL)
        return;
    for (int i = 0; m->shards != NULL && i < m->nshards; i++) {
        if (m->shards[i] == NULL)
            continue;
        for (int f = 0; f < FAM_COUNT; f++)
            table_free(&m->shards[i]->t[f]);
        free(m->shards[i]->pulls.items);
        free(m->shards[i]->pulls.index);
        free(m->shards[i]);
    }
    free(m->shards);
    free(m->ident);
    for (int i = 0; i < METRICS_SLOTS; i++)
        if (m->slots[i].release != NULL)
            m->slots[i].release(m->slots[i].arg);
    if (m->lock_ready)
        pthread_mutex_destroy(&m->collector_lock);
    free(m);
}

struct metrics_shard *
metrics_shard(struct metrics *m, int i)
{
    return m != NULL && i >= 0 && i < m->nshards ? m->shards[i] : NULL;
}

/* }}} */

/* {{{ Rendering */

/* One label set, summed over the shards. */
struct merged {
    const struct series *s;    /* the key (any shard's copy) */
    uint64_t v[MAX_NVALS];
};

/* A series and where its key is (the offset depends on the family). */
struct keyed {
    const struct series *s;
    const char *key;
};

static int
keyed_cmp(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    if (a->s->overflow != b->s->overflow)
        return a->s->overflow ? 1 : -1;   /* overflow last */
    uint32_t n = a->s->klen < b->s->klen ? a->s->klen : b->s->klen;
    int c = memcmp(a->key, b->key, n);
    if (c != 0)
        return c;
    if (a->s->klen != b->s->klen)
        return a->s->klen < b->s->klen ? -1 : 1;
    return a->s->split < b->s->split ? -1 : a->s->split > b->s->split ? 1 : 0;
}

static bool
same_key(const struct keyed *a, const struct keyed *b)
{
    return keyed_cmp(a, b) == 0;
}

/* Every label set of family fam over the shards, sorted, summed:
 * *out (malloc'd) and its length; -1 out of memory. */
static int
merge_family(struct metrics *m, int fam, struct merged **out, size_t *nout)
{
    size_t total = 0;
    for (int i = 0; i < m->nshards; i++)
        total += atomic_load_explicit(&m->shards[i]->t[fam].n, memory_order_acquire) + 1;
    struct keyed *k = malloc(total * sizeof(*k));
    struct merged *mg = malloc(total * sizeof(*mg));
    if (k == NULL || mg == NULL) {
        free(k);
        free(mg);
        return -1;
    }
    size_t nk = 0;
    for (int i = 0; i < m->nshards; i++) {
        struct table *t = &m->shards[i]->t[fam];
        uint32_t n = atomic_load_explicit(&t->n, memory_order_acquire);
        for (uint32_t j = 0; j < n && nk < total; j++) {
            k[nk].s = t->items[j];
            k[nk].key = series_key(t->items[j], fam);
            nk++;
        }
        if (atomic_load_explicit(&t->overflow->v[0], memory_order_relaxed) > 0 && nk < total) {
            k[nk].s = t->overflow;
            k[nk].key = series_key(t->overflow, fam);
            nk++;
        }
    }
    qsort(k, nk, sizeof(*k), keyed_cmp);
    size_t nm = 0;
    int nv = fam_nvals[fam];
    for (size_t i = 0; i < nk; i++) {
        if (nm == 0 || !same_key(&k[i], &k[i - 1])) {
            memset(&mg[nm], 0, sizeof(mg[nm]));
            mg[nm].s = k[i].s;
            nm++;
        }
        for (int v = 0; v < nv; v++)
            mg[nm - 1].v[v] += atomic_load_explicit(&k[i].s->v[v], memory_order_relaxed);
    }
    free(k);
    *out = mg;
    *nout = nm;
    return 0;
}

/* `{ident,LABELS` for one series (the caller closes the brace). */
static int
put_labels(struct buf *b, const struct metrics *m, int fam, const struct series *s)
{
    if (put_str(b, "{") != 0 || put_str(b, m->ident) != 0)
        return -1;
    const char *key = series_key(s, fam);
    if (fam == FAM_RPC) {
        if (s->overflow)
            return put_label(b, "request_code", "overflow", 8) == 0 &&
                           put_label(b, "response_code", "overflow", 8) == 0
                       ? 0 : -1;
        if (s->split == RPC_LABELLED)
            return put_str(b, ",") == 0 && buf_append(b, key, s->klen) == 0 ? 0 : -1;
        /* RocketMQ 5's RemotingMetricsManager labels every series of
         * the family with its protocol. */
        if (put_label(b, "protocol_type", "remoting", 8) != 0)
            return -1;
        const unsigned char *u = (const unsigned char *)key;
        uint32_t a = 0, c = 0;
        for (int i = 0; i < 4; i++) {
            a = a << 8 | u[i];
            c = c << 8 | u[4 + i];
        }
        char ta[16], tc[16];
        int na = snprintf(ta, sizeof(ta), "%d", (int32_t)(a ^ 0x80000000u));
        int nc = snprintf(tc, sizeof(tc), "%d", (int32_t)(c ^ 0x80000000u));
        return put_label(b, "request_code", ta, (size_t)na) == 0 &&
                       put_label(b, "response_code", tc, (size_t)nc) == 0
                   ? 0 : -1;
    }
    if (s->overflow) {
        if (put_label(b, "topic", "overflow", 8) != 0)
            return -1;
        return fam != FAM_IN ? put_label(b, "consumer_group", "overflow", 8) : 0;
    }
    if (fam == FAM_IN)
        return put_label(b, "topic", key, s->klen);
    /* OUT, DLQ: topic + group */
    return put_label(b, "topic", key, s->split) == 0 &&
                   put_label(b, "consumer_group", key + s->split, s->klen - s->split) == 0
               ? 0 : -1;
}

int
metrics_put_head(struct buf *b, const char *name, const char *type, const char *help)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n", name, help,
                     name, type);
    return buf_append(b, line, (size_t)n);
}

static int
put_u64(struct buf *b, const char *suffix, uint64_t v)
{
    char tmp[48];
    int n = snprintf(tmp, sizeof(tmp), "%s %llu\n", suffix, (unsigned long long)v);
    return buf_append(b, tmp, (size_t)n);
}

/* One counter per label set: value index vi of each merged series. */
static int
put_counter(struct buf *b, const struct metrics *m, int fam, const struct merged *mg,
            size_t n, const char *name, const char *help, int vi)
{
    if (n == 0)
        return 0;
    if (metrics_put_head(b, name, "counter", help) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (put_str(b, name) != 0 || put_labels(b, m, fam, mg[i].s) != 0 ||
            put_u64(b, "}", mg[i].v[vi]) != 0)
            return -1;
    return 0;
}

/* One histogram series: name_bucket{labels,le=..} (cumulative over
 * nb + 1 non-cumulative buckets bk), name_sum{labels} sum, and
 * name_count{labels} count.  labels is "{ident,...", without the brace. */
static int
put_hist(struct buf *b, const char *name, const struct buf *labels, const int64_t *bounds,
         int nb, const uint64_t *bk, const char *sum, uint64_t count)
{
    uint64_t cum = 0;
    for (int k = 0; k <= nb; k++) {
        cum += bk[k];
        char le[48];
        if (k < nb)
            snprintf(le, sizeof(le), ",le=\"%lld\"}", (long long)bounds[k]);
        else
            snprintf(le, sizeof(le), ",le=\"+Inf\"}");
        if (put_str(b, name) != 0 || put_str(b, "_bucket") != 0 ||
            buf_append(b, buf_head(labels), buf_len(labels)) != 0 || put_u64(b, le, cum) != 0)
            return -1;
    }
    return put_str(b, name) == 0 && put_str(b, "_sum") == 0 &&
                   buf_append(b, buf_head(labels), buf_len(labels)) == 0 && put_str(b, "} ") == 0 &&
                   put_str(b, sum) == 0 && put_str(b, "\n") == 0 && put_str(b, name) == 0 &&
                   put_str(b, "_count") == 0 &&
                   buf_append(b, buf_head(labels), buf_len(labels)) == 0 && put_u64(b, "}", count) == 0
               ? 0 : -1;
}

/* A family's histograms, one per merged series: its buckets from value
 * index bk0, its sum from index sumi (printed as sum / scale with digits
 * decimals), its count from index counti. */
static int
put_hists(struct buf *b, const struct metrics *m, int fam, const struct merged *mg, size_t n,
          const char *name, const char *help, const int64_t *bounds, int nb, int bk0, int sumi,
          uint64_t scale, int digits, int counti)
{
    if (n == 0)
        return 0;
    if (metrics_put_head(b, name, "histogram", help) != 0)
        return -1;
    struct buf labels;
    buf_init(&labels);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        buf_reset(&labels);
        char sum[48];
        uint64_t v = mg[i].v[sumi];
        if (digits > 0) {
            /* The decimals by hand: a "%0*llu" width from a variable makes
             * gcc's -Wformat-truncation (Debug builds) assume any width. */
            char frac[24];
            uint64_t f = v % scale;
            int d = digits < (int)sizeof(frac) ? digits : (int)sizeof(frac) - 1;
            frac[d] = '\0';
            for (int k = d - 1; k >= 0; k--) {
                frac[k] = (char)('0' + f % 10);
                f /= 10;
            }
            snprintf(sum, sizeof(sum), "%llu.%s", (unsigned long long)(v / scale), frac);
        } else
            snprintf(sum, sizeof(sum), "%llu", (unsigned long long)v);
        rc = put_labels(&labels, m, fam, mg[i].s) == 0 &&
                     put_hist(b, name, &labels, bounds, nb, &mg[i].v[bk0], sum, mg[i].v[counti]) == 0
                 ? 0 : -1;
    }
    buf_free(&labels);
    return rc;
}

static int
put_rpc(struct buf *b, const struct metrics *m, const struct merged *mg, size_t n)
{
    return put_hists(b, m, FAM_RPC, mg, n, "rocketmq_rpc_latency",
                     "Time from a request's arrival to its reply, in milliseconds.", rpc_bounds_ms,
                     RPC_NB, RPC_BUCKET0, RPC_SUM, 1000000, 6, RPC_COUNT) == 0 &&
                   put_counter(b, m, FAM_RPC, mg, n, "rmq_requests_total",
                               "Requests answered, by request and response code.", RPC_COUNT) == 0
               ? 0 : -1;
}

/* rocketmq_message_size: one histogram per topic, from FAM_IN (its
 * count is the messages). */
static int
put_sizes(struct buf *b, const struct metrics *m, const struct merged *mg, size_t n)
{
    return put_hists(b, m, FAM_IN, mg, n, "rocketmq_message_size",
                     "Sizes of the message bodies stored, in bytes, by topic.", size_bounds, SZ_NB,
                     IN_SZ0, IN_SZSUM, 1, 0, 0);
}

/* rmq_storage_put_latency, summed over the shards (no labels but the
 * ident); nothing before the first timed put. */
static int
put_put_latency(struct buf *b, const struct metrics *m)
{
    uint64_t v[PUT_NVALS] = { 0 };
    for (int i = 0; i < m->nshards; i++)
        for (int k = 0; k < PUT_NVALS; k++)
            v[k] += atomic_load_explicit(&m->shards[i]->put[k], memory_order_relaxed);
    if (v[0] == 0)
        return 0;
    static const char name[] = "rmq_storage_put_latency";
    if (metrics_put_head(b, name, "histogram", "Time the store took to append a message or batch, in microseconds.") != 0)
        return -1;
    struct buf labels;
    buf_init(&labels);
    char sum[48];
    snprintf(sum, sizeof(sum), "%llu.%03llu", (unsigned long long)(v[PUT_SUM] / 1000),
             (unsigned long long)(v[PUT_SUM] % 1000));
    int rc = put_str(&labels, "{") == 0 && put_str(&labels, m->ident) == 0 &&
                     put_hist(b, name, &labels, put_bounds_us, PUT_NB, &v[PUT_BUCKET0], sum, v[0]) == 0
                 ? 0 : -1;
    buf_free(&labels);
    return rc;
}

/* Resident set size from /proc/self/statm (pages), -1 if unreadable. */
static int64_t
process_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return -1;
    long long size = 0, rss = -1;
    int n = fscanf(f, "%lld %lld", &size, &rss);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && rss >= 0 && page > 0 ? (int64_t)rss * page : -1;
}

/* Open descriptors: the entries of /proc/self/fd but the one reading
 * it; -1 if unreadable. */
static int64_t
process_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0;
}

/* The process's own gauges: RSS, fds, their limit, uptime, loop lag. */

/* A per-worker gauge in ns (an _Atomic int64_t of the shard at `off`;
 * -1: not measured yet), written in seconds. */
static int
put_worker_gauge(struct buf *b, const struct metrics *m, size_t off, const char *name,
                 const char *help)
{
    bool head = false;
    for (int i = 0; i < m->nshards; i++) {
        const _Atomic int64_t *p = (const _Atomic int64_t *)((const char *)m->shards[i] + off);
        int64_t v = atomic_load_explicit(p, memory_order_relaxed);
        if (v < 0)
            continue;
        if (!head && metrics_put_head(b, name, "gauge", help) != 0)
            return -1;
        head = true;
        char line[64];
        int n = snprintf(line, sizeof(line), ",worker=\"%d\"} %lld.%06lld\n", i,
                         (long long)(v / 1000000000), (long long)(v / 1000 % 1000000));
        if (put_str(b, name) != 0 || put_str(b, "{") != 0 || put_str(b, m->ident) != 0 ||
            buf_append(b, line, (size_t)n) != 0)
            return -1;
    }
    return 0;
}

/* The memory budget's figures (core/membudget.h, docs/memory.md). */
static int
put_budget(struct buf *b, const struct metrics *m)
{
    struct membudget *mb = membudget_shared();
    if (mb == NULL)
        return 0;
    struct membudget_figures f;
    membudget_figures(mb, &f);
    static const char *const kinds[MB_NKINDS] = { "requests", "output", "console", "metrics" };
    if (metrics_put_head(b, "rmq_memory_budget_used_bytes", "gauge",
                         "Memory held for peers and data, counted against memoryBudgetBytes, by kind.") != 0)
        return -1;
    for (int i = 0; i < MB_NKINDS; i++) {
        struct metrics_label l = { "kind", kinds[i], strlen(kinds[i]) };
        if (metrics_put_sample(b, m, "rmq_memory_budget_used_bytes", &l, 1, f.kind[i]) != 0)
            return -1;
    }
    if (metrics_put_head(b, "rmq_memory_budget_peer_max_bytes", "gauge",
                         "Memory held for the peer address holding most (memoryBudgetPerPeerBytes).") != 0 ||
        metrics_put_sample(b, m, "rmq_memory_budget_peer_max_bytes", NULL, 0, f.peer_max) != 0)
        return -1;
    const int64_t limits[MB_NLIMITS] = { f.limits.per_conn, f.limits.per_peer, f.limits.total };
    if (metrics_put_head(b, "rmq_memory_budget_limit_bytes", "gauge",
                         "The memory budget's limits, by conf key (0: none).") != 0)
        return -1;
    for (int i = 0; i < MB_NLIMITS; i++) {
        const char *k = membudget_limit_key((enum membudget_limit)i);
        struct metrics_label l = { "limit", k, strlen(k) };
        if (metrics_put_sample(b, m, "rmq_memory_budget_limit_bytes", &l, 1, limits[i]) != 0)
            return -1;
    }
    if (metrics_put_head(b, "rmq_memory_budget_refused_total", "counter",
                         "Requests refused with SYSTEM_BUSY by the memory budget, by the limit reached.") != 0)
        return -1;
    for (int i = 0; i < MB_NLIMITS; i++) {
        const char *k = membudget_limit_key((enum membudget_limit)i);
        struct metrics_label l = { "limit", k, strlen(k) };
        if (metrics_put_sample(b, m, "rmq_memory_budget_refused_total", &l, 1, f.refused[i]) != 0)
            return -1;
    }
    /* What the process holds beside the budget: each Lua state's heap
     * and the allocator's own figures (docs/memory.md). */
    struct membudget_lua lh;
    membudget_lua_figures(mb, &lh);
    if (metrics_put_head(b, "rmq_lua_heap_bytes", "gauge",
                         "Each Lua state's heap (collectgarbage count), as it last reported.") != 0)
        return -1;
    for (int i = 0; i < lh.n; i++) {
        struct metrics_label l = { "state", lh.state[i].name, strlen(lh.state[i].name) };
        if (metrics_put_sample(b, m, "rmq_lua_heap_bytes", &l, 1, lh.state[i].bytes) != 0)
            return -1;
    }
    struct membudget_alloc a;
    membudget_alloc_figures(mb, &a);
    const struct { const char *k; int64_t v; } av[] = {
        { "allocated", a.allocated }, { "active", a.active }, { "resident", a.resident },
        { "retained", a.retained }, { "metadata", a.metadata }, { "mapped", a.mapped },
    };
    if (metrics_put_head(b, "rmq_allocator_bytes", "gauge",
                         "The heap allocator's figures (jemalloc stats.*, or glibc's mallinfo2), by kind.") != 0)
        return -1;
    for (size_t i = 0; i < sizeof(av) / sizeof(av[0]); i++) {
        struct metrics_label l[2] = { { "kind", av[i].k, strlen(av[i].k) },
                                      { "allocator", a.name, strlen(a.name) } };
        if (metrics_put_sample(b, m, "rmq_allocator_bytes", l, 2, av[i].v) != 0)
            return -1;
    }
    if (metrics_put_head(b, "rmq_allocator_purges_total", "counter",
                         "Times freed pages were given back on the broker's own initiative (membudget_trim).") != 0 ||
        metrics_put_sample(b, m, "rmq_allocator_purges_total", NULL, 0, a.purges) != 0)
        return -1;
    return 0;
}

/* Controller mode's gauges, those that were set. */
static int
put_replica(struct buf *b, const struct metrics *m)
{
    static const struct { const char *name, *type, *help; } f[METRICS_REPLICA_COUNT] = {
        { "rmq_replica_role", "gauge", "Controller mode: this broker's role, 1 master, 0 slave." },
        { "rmq_replica_master_epoch", "gauge", "Controller mode: the broker set's master epoch." },
        { "rmq_replica_sync_state_set_size", "gauge", "Controller mode: members of the broker set's SyncStateSet." },
        { "rmq_controller_active", "gauge", "1 while this controller holds the etcd lease of the leader key." },
        { "rmq_controller_elections_total", "counter", "Masters this controller elected." },
        { "rmq_replica_fenced", "gauge", "Controller mode: 1 while this master refuses writes, cut from its controllers"
                                         " (masterLeaseTimeoutMills)." },
    };
    for (int i = 0; i < METRICS_REPLICA_COUNT; i++) {
        int64_t v = atomic_load_explicit(&((struct metrics *)m)->replica[i], memory_order_relaxed);
        if (v < 0)
            continue;
        if (metrics_put_head(b, f[i].name, f[i].type, f[i].help) != 0 ||
            metrics_put_sample(b, m, f[i].name, NULL, 0, v) != 0)
            return -1;
    }
    return 0;
}

void
metrics_replica_set(struct metrics *m, int which, int64_t v)
{
    if (m != NULL && which >= 0 && which < METRICS_REPLICA_COUNT)
        atomic_store_explicit(&m->replica[which], v, memory_order_relaxed);
}

struct metrics *
metrics_shard_registry(struct metrics_shard *s)
{
    return s != NULL ? s->reg : NULL;
}

/* gRPC auto_renew's table (grpc/renew.h), summed over the workers. */
static int
put_renew(struct buf *b, const struct metrics *m)
{
    int64_t leases = 0;
    uint64_t granted = 0;
    for (int i = 0; i < m->nshards; i++) {
        leases += atomic_load_explicit(&m->shards[i]->renew_leases, memory_order_relaxed);
        granted += atomic_load_explicit(&m->shards[i]->renew_granted, memory_order_relaxed);
    }
    if (metrics_put_head(b, "rmq_grpc_auto_renew_leases", "gauge",
                         "Messages gRPC clients received with auto_renew and hold unacknowledged, "
                         "kept invisible while they are connected.") != 0 ||
        metrics_put_sample(b, m, "rmq_grpc_auto_renew_leases", NULL, 0, leases) != 0 ||
        metrics_put_head(b, "rmq_grpc_auto_renew_renewals_total", "counter",
                         "auto_renew leases made invisible again by the broker (CHANGE_MESSAGE_INVISIBLETIME).") != 0 ||
        metrics_put_sample(b, m, "rmq_grpc_auto_renew_renewals_total", NULL, 0, (int64_t)granted) != 0)
        return -1;
    return 0;
}

void
metrics_pull_window_sends(struct metrics_shard *sh, uint64_t total)
{
    if (sh != NULL)
        atomic_store_explicit(&sh->window_sends, total, memory_order_relaxed);
}

/* The workers' pull windows (pullReadWindowBytes), summed. */
static int
put_pull_window(struct buf *b, const struct metrics *m)
{
    uint64_t sends = 0;
    for (int i = 0; i < m->nshards; i++)
        sends += atomic_load_explicit(&m->shards[i]->window_sends, memory_order_relaxed);
    if (metrics_put_head(b, "rmq_pull_window_sends_total", "counter",
                         "Pull replies whose records were handed to a send straight from the worker's read "
                         "window (pullReadWindowBytes), with no copy into the output.") != 0 ||
        metrics_put_sample(b, m, "rmq_pull_window_sends_total", NULL, 0, (int64_t)sends) != 0)
        return -1;
    return 0;
}

static int
put_process(struct buf *b, const struct metrics *m)
{
    int64_t rss = process_rss(), fds = process_fds();
    struct rlimit rl;
    int64_t max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                          ? (int64_t)rl.rlim_cur : -1;
    if (rss >= 0 && (metrics_put_head(b, "rmq_process_resident_memory_bytes", "gauge",
                                      "Resident memory of the server process, in bytes.") != 0 ||
                     metrics_put_sample(b, m, "rmq_process_resident_memory_bytes", NULL, 0, rss) != 0))
        return -1;
    if (fds >= 0 && (metrics_put_head(b, "rmq_process_open_fds", "gauge",
                                      "File descriptors the server process has open.") != 0 ||
                     metrics_put_sample(b, m, "rmq_process_open_fds", NULL, 0, fds) != 0))
        return -1;
    if (max_fds >= 0 && (metrics_put_head(b, "rmq_process_max_fds", "gauge",
                                          "The process's limit on open file descriptors (RLIMIT_NOFILE).") != 0 ||
                         metrics_put_sample(b, m, "rmq_process_max_fds", NULL, 0, max_fds) != 0))
        return -1;
    /* Lines the log's ring (logBufferBytes) had no room for (core/log.h). */
    if (metrics_put_head(b, "rmq_log_dropped_lines_total", "counter",
                         "Log lines dropped because the log file took lines slower than they came "
                         "(logBufferBytes was full).") != 0 ||
        metrics_put_sample(b, m, "rmq_log_dropped_lines_total", NULL, 0,
                           (int64_t)log_dropped_total()) != 0)
        return -1;
    if (metrics_put_head(b, "rmq_uptime_seconds", "gauge", "Seconds since the server started.") != 0 ||
        metrics_put_sample(b, m, "rmq_uptime_seconds", NULL, 0,
                           (mono_ns() - m->started_ns) / 1000000000) != 0)
        return -1;
    if (put_budget(b, m) != 0 || put_replica(b, m) != 0 || put_renew(b, m) != 0 ||
        put_pull_window(b, m) != 0)
        return -1;
    if (put_worker_gauge(b, m, offsetof(struct metrics_shard, loop_lag_ns),
                         "rmq_worker_loop_lag_seconds",
                         "How late the worker loop ran its last 1 s timer, in seconds, by worker.") != 0 ||
        put_worker_gauge(b, m, offsetof(struct metrics_shard, loop_busy_ns),
                         "rmq_worker_busy_max_seconds",
                         "The worker loop's longest stretch without reading, in its last 10 seconds "
                         "(bounds a request's wait for flow control), by worker.") != 0)
        return -1;
    return 0;
}

int
metrics_render(struct metrics *m, struct buf *out)
{
    struct merged *mg[FAM_COUNT] = { NULL };
    size_t n[FAM_COUNT] = { 0 };
    int rc = 0;
    for (int f = 0; f < FAM_COUNT && rc == 0; f++)
        rc = merge_family(m, f, &mg[f], &n[f]);
    if (rc == 0)
        rc = put_counter(out, m, FAM_IN, mg[FAM_IN], n[FAM_IN], "rocketmq_messages_in_total",
                         "Messages stored, by topic.", 0) == 0 &&
                     put_counter(out, m, FAM_IN, mg[FAM_IN], n[FAM_IN],
                                 "rocketmq_throughput_in_total",
                                 "Bytes of the messages stored (records as written), by topic.", 1) == 0 &&
                     put_counter(out, m, FAM_OUT, mg[FAM_OUT], n[FAM_OUT],
                                 "rocketmq_messages_out_total",
                                 "Messages pulled, by topic and consumer group.", 0) == 0 &&
                     put_counter(out, m, FAM_OUT, mg[FAM_OUT], n[FAM_OUT],
                                 "rocketmq_throughput_out_total",
                                 "Bytes of the messages pulled (records as stored), by topic and consumer group.", 1) == 0 &&
                     put_sizes(out, m, mg[FAM_IN], n[FAM_IN]) == 0 &&
                     put_counter(out, m, FAM_DLQ, mg[FAM_DLQ], n[FAM_DLQ],
                                 "rocketmq_send_to_dlq_messages_total",
                                 "Messages sent back past their retries into the group's DLQ, by original topic and consumer group.", 0) == 0 &&
                     put_rpc(out, m, mg[FAM_RPC], n[FAM_RPC]) == 0 &&
                     put_put_latency(out, m) == 0 && put_process(out, m) == 0
                 ? 0 : -1;
    if (rc == 0) {
        /* Under the lock: a collector's arg cannot be released while
         * it runs. */
        pthread_mutex_lock(&m->collector_lock);
        for (int i = 0; i < METRICS_SLOTS && rc == 0; i++)
            if (m->slots[i].fn != NULL)
                rc = m->slots[i].fn(m->slots[i].arg, m, out);
        pthread_mutex_unlock(&m->collector_lock);
    }
    for (int f = 0; f < FAM_COUNT; f++)
        free(mg[f]);
    return rc;
}

/* }}} */

/* {{{ Collectors */

uint64_t
metrics_requests(const struct metrics *m, int32_t request_code, int32_t response_code)
{
    unsigned char key[8];
    rpc_key(key, request_code, response_code);
    uint64_t n = 0;
    for (int i = 0; i < m->nshards; i++) {
        const struct table *t = &m->shards[i]->t[FAM_RPC];
        uint32_t k = atomic_load_explicit(&t->n, memory_order_acquire);
        for (uint32_t j = 0; j < k; j++)
            if (t->items[j]->split != RPC_LABELLED &&
                memcmp(series_key(t->items[j], FAM_RPC), key, sizeof(key)) == 0)
                n += atomic_load_explicit(&t->items[j]->v[RPC_COUNT], memory_order_relaxed);
    }
    return n;
}

int
metrics_pull_cmp(const struct metrics_pull *a, const struct metrics_pull *b)
{
    size_t n = a->tlen < b->tlen ? a->tlen : b->tlen;
    int c = memcmp(a->topic, b->topic, n);
    if (c != 0 || a->tlen != b->tlen)
        return c != 0 ? c : (a->tlen < b->tlen ? -1 : 1);
    n = a->glen < b->glen ? a->glen : b->glen;
    c = memcmp(a->group, b->group, n);
    if (c != 0 || a->glen != b->glen)
        return c != 0 ? c : (a->glen < b->glen ? -1 : 1);
    return a->qid < b->qid ? -1 : a->qid > b->qid ? 1 : 0;
}

/* By queue, the latest pull first. */
static int
pull_qsort_cmp(const void *pa, const void *pb)
{
    const struct metrics_pull *a = pa, *b = pb;
    int c = metrics_pull_cmp(a, b);
    if (c != 0)
        return c;
    return a->stamp_ns > b->stamp_ns ? -1 : a->stamp_ns < b->stamp_ns ? 1 : 0;
}

int
metrics_pull_offsets(const struct metrics *m, struct metrics_pull **out, size_t *nout)
{
    size_t total = 0;
    for (int i = 0; i < m->nshards; i++)
        total += atomic_load_explicit(&m->shards[i]->pulls.n, memory_order_acquire);
    struct metrics_pull *p = malloc((total + 1) * sizeof(*p));
    if (p == NULL)
        return -1;
    size_t n = 0;
    for (int i = 0; i < m->nshards; i++) {
        const struct pull_table *t = &m->shards[i]->pulls;
        uint32_t k = atomic_load_explicit(&t->n, memory_order_acquire);
        for (uint32_t j = 0; j < k && n < total; j++) {
            const struct pull_slot *ps = &t->items[j];
            const struct series *s = ps->out;
            const char *key = series_key(s, FAM_OUT);
            p[n] = (struct metrics_pull){
                .topic = key, .tlen = s->split, .group = key + s->split,
                .glen = s->klen - s->split, .qid = ps->qid,
                .offset = (int64_t)atomic_load_explicit(&ps->offset, memory_order_relaxed),
                .stamp_ns = (int64_t)atomic_load_explicit(&ps->stamp_ns, memory_order_relaxed),
            };
            n++;
        }
    }
    qsort(p, n, sizeof(*p), pull_qsort_cmp);
    /* The same queue in two shards (its consumer moved to a connection
     * on another worker): the latest pull wins. */
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || metrics_pull_cmp(&p[w - 1], &p[i]) != 0)
            p[w++] = p[i];
    *out = p;
    *nout = w;
    return 0;
}

void
metrics_set_collector(struct metrics *m, int slot, metrics_collect_fn fn, void *arg,
                      void (*release)(void *arg))
{
    if (slot < 0 || slot >= METRICS_SLOTS) {
        if (release != NULL)
            release(arg);
        return;
    }
    pthread_mutex_lock(&m->collector_lock);
    struct collector *c = &m->slots[slot];
    void *old = c->arg;
    void (*old_release)(void *) = c->release;
    c->fn = fn;
    c->arg = arg;
    c->release = release;
    pthread_mutex_unlock(&m->collector_lock);
    if (old_release != NULL)
        old_release(old);
}

uint32_t
metrics_max_label_sets(const struct metrics *m)
{
    return m->max_label_sets;
}

int
metrics_put_sample(struct buf *b, const struct metrics *m, const char *name,
                   const struct metrics_label *l, int nl, int64_t v)
{
    if (put_str(b, name) != 0 || put_str(b, "{") != 0 || put_str(b, m->ident) != 0)
        return -1;
    for (int i = 0; i < nl; i++)
        if (put_label(b, l[i].name, l[i].value, l[i].len) != 0)
            return -1;
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "} %lld\n", (long long)v);
    return buf_append(b, tmp, (size_t)n);
}

/* }}} */
