/*
 * config_table: see config_table.h.  Entries live in a jmap (name ->
 * struct entry); the jmap's own order is not used: snapshots are sorted.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* qsort_r */
#endif
#include "broker/config_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/rcbuf.h"
#include "core/jmap.h"

struct entry {
    uint64_t gen;
    _Alignas(8) uint8_t rec[];
};

/*
 * The change log: the names put last, with the generation of each put,
 * so that a snapshot of what changed after generation g (a registration
 * of new topics, a journal append) costs what changed, not the table.
 * It keeps at most CHANGELOG_MAX records; an older `since` falls back to
 * a scan of the whole table.
 */
#define CHANGELOG_MAX 65536

struct change {
    uint64_t gen;
    char *name;
    uint32_t len;
};

struct config_table {
    pthread_rwlock_t lock;
    struct jmap map;
    struct change *log;        /* oldest first */
    size_t nlog, caplog;
    uint64_t log_floor;        /* changes after this generation are all in log */
    size_t rec_size;
    struct data_version dv;    /* guarded by lock */
    atomic_uint_fast64_t gen;  /* written under the write lock */
    atomic_uint_fast64_t removals;  /* deletes and clears so far */
    /* The whole table encoded (config_table_encoded): one body per
     * generation, shared by every worker that answers with it. */
    pthread_mutex_t enc_lock;
    struct rcbuf *enc;         /* guarded by enc_lock */
    uint64_t enc_gen;          /* the generation enc was taken at */
    int64_t enc_used_ms;       /* when enc was last asked for (mono); enc_lock */
    atomic_uint_fast64_t encodes;
};

struct config_table *
config_table_new(size_t rec_size)
{
    struct config_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (pthread_rwlock_init(&t->lock, NULL) != 0) {
        free(t);
        return NULL;
    }
    if (pthread_mutex_init(&t->enc_lock, NULL) != 0) {
        pthread_rwlock_destroy(&t->lock);
        free(t);
        return NULL;
    }
    jmap_init(&t->map, 1024);
    t->rec_size = rec_size;
    t->dv.timestamp = clock_wall_ms();
    atomic_init(&t->gen, 1);
    atomic_init(&t->removals, 0);
    return t;
}

static void
log_clear(struct config_table *t)
{
    for (size_t i = 0; i < t->nlog; i++)
        free(t->log[i].name);
    t->nlog = 0;
}

/* Records a put of name at generation gen (under the write lock).  On
 * ENOMEM the log is dropped and snapshots scan the table again. */
static void
log_put(struct config_table *t, const char *name, size_t len, uint64_t gen)
{
    if (t->nlog == CHANGELOG_MAX) {
        size_t half = CHANGELOG_MAX / 2;
        for (size_t i = 0; i < half; i++)
            free(t->log[i].name);
        t->log_floor = t->log[half - 1].gen;
        memmove(t->log, t->log + half, (t->nlog - half) * sizeof(*t->log));
        t->nlog -= half;
    }
    if (t->nlog == t->caplog) {
        size_t cap = t->caplog ? t->caplog * 2 : 256;
        struct change *nl = realloc(t->log, cap * sizeof(*nl));
        if (nl == NULL)
            goto drop;
        t->log = nl;
        t->caplog = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL)
        goto drop;
    memcpy(copy, name, len);
    copy[len] = '\0';
    t->log[t->nlog++] = (struct change){ gen, copy, (uint32_t)len };
    return;
drop:
    log_clear(t);
    t->log_floor = gen;
}

void
config_table_free(struct config_table *t)
{
    if (t == NULL)
        return;
    log_clear(t);
    free(t->log);
    jmap_free(&t->map, free);
    rcbuf_unref(t->enc);
    pthread_mutex_destroy(&t->enc_lock);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

/* The two tables of a broker process.  Like the route registry, there is
 * one set per process by nature; created once, freed at exit by the OS. */
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static struct config_table *shared_topics, *shared_groups;

#include "broker/subscription_group.h"
#include "broker/topic_config.h"

static void
shared_init(void)
{
    shared_topics = config_table_new(sizeof(struct topic_config));
    shared_groups = config_table_new(sizeof(struct subscription_group));
}

struct config_table *
config_table_topics(void)
{
    pthread_once(&shared_once, shared_init);
    return shared_topics;
}

struct config_table *
config_table_groups(void)
{
    pthread_once(&shared_once, shared_init);
    return shared_groups;
}

size_t
config_table_rec_size(const struct config_table *t)
{
    return t->rec_size;
}

int
config_table_get(struct config_table *t, const char *name, size_t len,
                 void *out)
{
    int rc = -1;
    pthread_rwlock_rdlock(&t->lock);
    struct entry *e = jmap_get_str(&t->map, name, len);
    if (e != NULL) {
        memcpy(out, e->rec, t->rec_size);
        rc = 0;
    }
    pthread_rwlock_unlock(&t->lock);
    return rc;
}

/* Under the write lock. */
static uint64_t
next_gen(struct config_table *t)
{
    uint64_t g = atomic_load(&t->gen) + 1;
    atomic_store(&t->gen, g);
    return g;
}

static void
next_version(struct config_table *t)
{
    t->dv.counter++;
    t->dv.timestamp = clock_wall_ms();
}

int
config_table_put(struct config_table *t, const char *name, size_t len,
                 const void *rec, int flags)
{
    int rc = 0;
    pthread_rwlock_wrlock(&t->lock);
    struct entry *e = jmap_get_str(&t->map, name, len);
    if (e != NULL) {
        if (!(flags & CT_IF_ABSENT) && memcmp(e->rec, rec, t->rec_size) != 0) {
            memcpy(e->rec, rec, t->rec_size);
            e->gen = next_gen(t);
            log_put(t, name, len, e->gen);
            rc = 1;
        }
    } else {
        e = malloc(sizeof(*e) + t->rec_size);
        if (e == NULL) {
            rc = -ENOMEM;
        } else {
            memcpy(e->rec, rec, t->rec_size);
            if (jmap_put_str(&t->map, name, len, e, NULL) == NULL) {
                free(e);
                rc = -ENOMEM;
            } else {
                e->gen = next_gen(t);
                log_put(t, name, len, e->gen);
                rc = 1;
            }
        }
    }
    if (rc == 1 && !(flags & CT_QUIET))
        next_version(t);
    pthread_rwlock_unlock(&t->lock);
    return rc;
}

int
config_table_del(struct config_table *t, const char *name, size_t len)
{
    void *val = NULL;
    pthread_rwlock_wrlock(&t->lock);
    bool had = jmap_remove_str(&t->map, name, len, &val);
    if (had) {
        next_gen(t);
        next_version(t);
        atomic_fetch_add(&t->removals, 1);
    }
    pthread_rwlock_unlock(&t->lock);
    free(val);
    return had ? 1 : 0;
}

void
config_table_clear(struct config_table *t)
{
    pthread_rwlock_wrlock(&t->lock);
    jmap_free(&t->map, free);
    jmap_init(&t->map, 1024);
    log_clear(t);
    t->log_floor = atomic_load(&t->gen);
    t->dv.counter = 0;
    t->dv.timestamp = clock_wall_ms();
    next_gen(t);
    atomic_fetch_add(&t->removals, 1);
    pthread_rwlock_unlock(&t->lock);
}

size_t
config_table_count(struct config_table *t)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = t->map.size;
    pthread_rwlock_unlock(&t->lock);
    return n;
}

struct rcbuf *
config_table_encoded(struct config_table *t, config_encode_fn *encode, void *arg)
{
    pthread_mutex_lock(&t->enc_lock);
    t->enc_used_ms = clock_mono_ns() / 1000000;
    if (t->enc != NULL && t->enc_gen == atomic_load(&t->gen)) {
        struct rcbuf *b = rcbuf_ref(t->enc);
        pthread_mutex_unlock(&t->enc_lock);
        return b;
    }
    /* Encoded under enc_lock: a second worker asking meanwhile waits for
     * this body instead of encoding the same one again. */
    struct buf out;
    buf_init(&out);
    uint64_t gen = 0;
    struct rcbuf *b = NULL;
    if (encode(t, &out, &gen, arg) == 0 && (b = rcbuf_copy(buf_head(&out), buf_len(&out))) != NULL) {
        atomic_fetch_add(&t->encodes, 1);
        rcbuf_unref(t->enc);
        t->enc = rcbuf_ref(b);
        t->enc_gen = gen;
    }
    pthread_mutex_unlock(&t->enc_lock);
    buf_free(&out);
    return b;
}

bool
config_table_encoded_trim(struct config_table *t, int64_t idle_ms)
{
    struct rcbuf *drop = NULL;
    pthread_mutex_lock(&t->enc_lock);
    if (t->enc != NULL && clock_mono_ns() / 1000000 - t->enc_used_ms >= idle_ms) {
        drop = t->enc;
        t->enc = NULL;
    }
    pthread_mutex_unlock(&t->enc_lock);
    rcbuf_unref(drop);   /* replies still being written keep their reference */
    return drop != NULL;
}

uint64_t
config_table_encodes(struct config_table *t)
{
    return atomic_load(&t->encodes);
}

void
config_table_hash_stats(struct config_table *t, struct jmap_stats *st)
{
    pthread_rwlock_rdlock(&t->lock);
    jmap_stats(&t->map, st);
    pthread_rwlock_unlock(&t->lock);
}

uint64_t
config_table_gen(struct config_table *t)
{
    return atomic_load(&t->gen);
}

uint64_t
config_table_removals(struct config_table *t)
{
    return atomic_load(&t->removals);
}

struct data_version
config_table_data_version(struct config_table *t)
{
    pthread_rwlock_rdlock(&t->lock);
    struct data_version dv = t->dv;
    pthread_rwlock_unlock(&t->lock);
    return dv;
}

void
config_table_set_data_version(struct config_table *t, struct data_version dv)
{
    pthread_rwlock_wrlock(&t->lock);
    t->dv = dv;
    next_gen(t);
    pthread_rwlock_unlock(&t->lock);
}

void
config_table_bump(struct config_table *t)
{
    pthread_rwlock_wrlock(&t->lock);
    next_version(t);
    next_gen(t);
    pthread_rwlock_unlock(&t->lock);
}

/* {{{ Snapshots */

static size_t
align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

size_t
config_snapshot_size(size_t rec_size, size_t n, size_t names)
{
    return align8(sizeof(struct config_snapshot)) +
           n * (sizeof(struct config_item) + align8(rec_size)) + names + n;
}

/* The first log record after generation since (log gens increase). */
static size_t
log_first_after(const struct config_table *t, uint64_t since)
{
    size_t lo = 0, hi = t->nlog;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->log[mid].gen <= since)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry a log record names, when that record is its last change. */
static const struct entry *
log_entry(struct config_table *t, const struct change *c)
{
    const struct entry *e = jmap_get_str(&t->map, c->name, c->len);
    return e != NULL && e->gen == c->gen ? e : NULL;
}

/* Copies one entry into the snapshot being filled. */
static void
put_item(struct config_snapshot *s, size_t i, const char *name, uint32_t len,
         uint32_t hash, const struct entry *e, uint8_t *recs, char **nm,
         size_t rec_size)
{
    struct config_item *item = &s->items[i];
    uint8_t *r = recs + i * align8(rec_size);
    memcpy(r, e->rec, rec_size);
    memcpy(*nm, name, len);
    (*nm)[len] = '\0';
    item->name = *nm;
    item->name_len = len;
    item->hash = hash;
    item->gen = e->gen;
    item->rec = r;
    *nm += len + 1;
}

size_t
config_table_snapshot(struct config_table *t, uint64_t since, void *block,
                      size_t cap)
{
    pthread_rwlock_rdlock(&t->lock);
    /* What changed after `since` is all in the log: walk that part. */
    bool from_log = since > 0 && since >= t->log_floor;
    size_t first = from_log ? log_first_after(t, since) : 0;
    size_t n = 0, names = 0;
    struct jiter it;
    if (from_log) {
        for (size_t i = first; i < t->nlog; i++)
            if (log_entry(t, &t->log[i]) != NULL) {
                n++;
                names += t->log[i].len;
            }
    } else {
        jmap_iter_init(&it, &t->map);
        for (struct jnode *node; (node = jmap_iter_next(&it)) != NULL;) {
            const struct entry *e = node->val;
            if (e->gen > since) {
                n++;
                names += node->klen;
            }
        }
    }
    size_t need = config_snapshot_size(t->rec_size, n, names);
    if (need <= cap) {
        struct config_snapshot *s = block;
        uint8_t *p = (uint8_t *)block + align8(sizeof(*s));
        s->count = n;
        s->gen = atomic_load(&t->gen);
        s->dv = t->dv;
        s->items = (struct config_item *)(void *)p;
        uint8_t *recs = p + n * sizeof(struct config_item);
        char *nm = (char *)(recs + n * align8(t->rec_size));
        size_t i = 0;
        if (from_log) {
            for (size_t k = first; k < t->nlog; k++) {
                const struct change *c = &t->log[k];
                const struct entry *e = log_entry(t, c);
                if (e != NULL)
                    put_item(s, i++, c->name, c->len, jmap_hash_str(c->name, c->len), e,
                             recs, &nm, t->rec_size);
            }
        } else {
            jmap_iter_init(&it, &t->map);
            for (struct jnode *node; (node = jmap_iter_next(&it)) != NULL;) {
                const struct entry *e = node->val;
                if (e->gen > since)
                    put_item(s, i++, node->key, node->klen, node->hash, e, recs, &nm,
                             t->rec_size);
            }
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return need;
}

/* The bucket count of a ConcurrentHashMap built with `initial` capacity
 * (0: the default constructor) once it holds `count` entries:
 * tableSizeFor(initial * 1.5 + 1), doubled while the count reaches 3/4
 * of it. */
static uint32_t
chm_table_size(uint32_t initial, size_t count)
{
    uint64_t n = 16;
    if (initial > 0) {
        uint64_t want = (uint64_t)initial + (initial >> 1) + 1;
        n = 1;
        while (n < want)
            n <<= 1;
    }
    while (count >= n - (n >> 2) && n < (1u << 30))
        n <<= 1;
    return (uint32_t)n;
}

struct order_ctx {
    uint32_t masks[4];
    int n;
};

static int
cmp_java(const void *a, const void *b, void *arg)
{
    const struct order_ctx *order_ctx = arg;
    const struct config_item *x = a, *y = b;
    for (int i = order_ctx->n - 1; i >= 0; i--) {
        uint32_t bx = x->hash & order_ctx->masks[i];
        uint32_t by = y->hash & order_ctx->masks[i];
        if (bx != by)
            return bx < by ? -1 : 1;
    }
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c != 0)
        return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

void
config_snapshot_java_order(struct config_snapshot *s, const uint32_t *caps,
                           int ncaps)
{
    struct order_ctx ctx = { .n = ncaps > 4 ? 4 : ncaps };
    /* The last map copied into decides first: masks[n-1] is compared
     * first, earlier capacities break its ties. */
    for (int i = 0; i < ctx.n; i++)
        ctx.masks[i] = chm_table_size(caps[i], s->count) - 1;
    if (s->count > 1)
        qsort_r(s->items, s->count, sizeof(*s->items), cmp_java, &ctx);
}

/* }}} */
