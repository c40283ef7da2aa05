/* offset_table: see offset_table.h. */
#include "broker/offset_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/fjson.h"
#include "core/jmap.h"

struct oentry {
    uint32_t n;                /* slots in offs */
    int64_t *offs;             /* -1: not committed */
};

struct offset_table {
    pthread_rwlock_t lock;
    struct jmap map;           /* "topic@group" -> struct oentry */
    atomic_uint_fast64_t gen;
};

struct offset_table *
offset_table_new(void)
{
    struct offset_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (pthread_rwlock_init(&t->lock, NULL) != 0) {
        free(t);
        return NULL;
    }
    jmap_init(&t->map, 512);
    atomic_init(&t->gen, 1);
    return t;
}

static void
free_entry(void *p)
{
    struct oentry *e = p;
    if (e != NULL) {
        free(e->offs);
        free(e);
    }
}

void
offset_table_free(struct offset_table *t)
{
    if (t == NULL)
        return;
    jmap_free(&t->map, free_entry);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static struct offset_table *shared_table;

static void
shared_init(void)
{
    shared_table = offset_table_new();
}

struct offset_table *
offset_table_shared(void)
{
    pthread_once(&shared_once, shared_init);
    return shared_table;
}

/* Grows e to hold queue qid. Under the write lock. */
static int
ensure_slot(struct oentry *e, uint32_t qid)
{
    if (qid < e->n)
        return 0;
    uint32_t n = e->n ? e->n : 4;
    while (n <= qid)
        n *= 2;
    if (n > OFFSET_TABLE_MAX_QUEUES)
        n = OFFSET_TABLE_MAX_QUEUES;
    int64_t *o = realloc(e->offs, (size_t)n * sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    for (uint32_t i = e->n; i < n; i++)
        o[i] = -1;
    e->offs = o;
    e->n = n;
    return 0;
}

int
offset_table_commit(struct offset_table *t, const char *key, size_t klen,
                    uint32_t qid, int64_t offset)
{
    if (offset < 0 || qid >= OFFSET_TABLE_MAX_QUEUES)
        return -EINVAL;
    int rc = 0;
    pthread_rwlock_wrlock(&t->lock);
    struct oentry *e = jmap_get_str(&t->map, key, klen);
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL || jmap_put_str(&t->map, key, klen, e, NULL) == NULL) {
            free(e);
            rc = -ENOMEM;
            goto out;
        }
    }
    if ((rc = ensure_slot(e, qid)) != 0)
        goto out;
    if (e->offs[qid] != offset) {
        e->offs[qid] = offset;
        atomic_fetch_add(&t->gen, 1);
    }
out:
    pthread_rwlock_unlock(&t->lock);
    return rc;
}

int64_t
offset_table_query(struct offset_table *t, const char *key, size_t klen,
                   uint32_t qid)
{
    int64_t v = -1;
    pthread_rwlock_rdlock(&t->lock);
    struct oentry *e = jmap_get_str(&t->map, key, klen);
    if (e != NULL && qid < e->n)
        v = e->offs[qid];
    pthread_rwlock_unlock(&t->lock);
    return v;
}

/* The topic (part 0) or group (part 1) of a key. */
static void
key_part(const char *key, size_t klen, int part, const char **p, size_t *n)
{
    const char *at = memchr(key, '@', klen);
    if (at == NULL) {
        *p = key;
        *n = part == 0 ? klen : 0;
        return;
    }
    if (part == 0) {
        *p = key;
        *n = (size_t)(at - key);
    } else {
        *p = at + 1;
        *n = klen - (size_t)(at - key) - 1;
    }
}

size_t
offset_table_remove(struct offset_table *t, int part, const char *name,
                    size_t nlen)
{
    size_t removed = 0;
    pthread_rwlock_wrlock(&t->lock);
    struct jiter it;
    jmap_iter_init(&it, &t->map);
    for (struct jnode *node; (node = jmap_iter_next(&it)) != NULL;) {
        const char *p;
        size_t n;
        key_part(node->key, node->klen, part, &p, &n);
        if (n == nlen && memcmp(p, name, n) == 0) {
            void *val = NULL;
            if (jmap_remove(&t->map, node->hash, node->key, node->klen, &val)) {
                free_entry(val);
                removed++;
            }
        }
    }
    if (removed > 0)
        atomic_fetch_add(&t->gen, 1);
    pthread_rwlock_unlock(&t->lock);
    return removed;
}

void
offset_table_clear(struct offset_table *t)
{
    pthread_rwlock_wrlock(&t->lock);
    jmap_free(&t->map, free_entry);
    jmap_init(&t->map, 512);
    atomic_fetch_add(&t->gen, 1);
    pthread_rwlock_unlock(&t->lock);
}

size_t
offset_table_count(struct offset_table *t)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = t->map.size;
    pthread_rwlock_unlock(&t->lock);
    return n;
}

void
offset_table_hash_stats(struct offset_table *t, struct jmap_stats *st)
{
    pthread_rwlock_rdlock(&t->lock);
    jmap_stats(&t->map, st);
    pthread_rwlock_unlock(&t->lock);
}

uint64_t
offset_table_gen(struct offset_table *t)
{
    return atomic_load(&t->gen);
}

static size_t
align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* The highest committed queue + 1 of an entry (0: none). */
static uint32_t
used_slots(const struct oentry *e)
{
    uint32_t n = e->n;
    while (n > 0 && e->offs[n - 1] < 0)
        n--;
    return n;
}

static int
cmp_key(const void *a, const void *b)
{
    const struct offset_item *x = a, *y = b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c != 0)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

size_t
offset_table_snapshot(struct offset_table *t, void *block, size_t cap)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = 0, slots = 0, names = 0;
    struct jiter it;
    jmap_iter_init(&it, &t->map);
    for (struct jnode *node; (node = jmap_iter_next(&it)) != NULL;) {
        uint32_t used = used_slots(node->val);
        if (used == 0)
            continue;
        n++;
        slots += used;
        names += node->klen + 1;
    }
    size_t need = align8(sizeof(struct offset_snapshot)) + n * sizeof(struct offset_item) +
                  slots * sizeof(int64_t) + names;
    if (need <= cap) {
        struct offset_snapshot *s = block;
        uint8_t *p = (uint8_t *)block + align8(sizeof(*s));
        s->count = n;
        s->gen = atomic_load(&t->gen);
        s->items = (struct offset_item *)(void *)p;
        int64_t *offs = (int64_t *)(void *)(p + n * sizeof(struct offset_item));
        char *nm = (char *)(offs + slots);
        size_t i = 0;
        jmap_iter_init(&it, &t->map);
        for (struct jnode *node; (node = jmap_iter_next(&it)) != NULL;) {
            const struct oentry *e = node->val;
            uint32_t used = used_slots(e);
            if (used == 0)
                continue;
            memcpy(offs, e->offs, used * sizeof(*offs));
            memcpy(nm, node->key, node->klen);
            nm[node->klen] = '\0';
            s->items[i] = (struct offset_item){ nm, node->klen, used, offs };
            offs += used;
            nm += node->klen + 1;
            i++;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    if (need <= cap) {
        struct offset_snapshot *s = block;
        if (s->count > 1)
            qsort(s->items, s->count, sizeof(*s->items), cmp_key);
    }
    return need;
}

int
offset_table_json(struct buf *b, const struct offset_snapshot *s, bool pretty)
{
    struct fjw w;
    fjw_init(&w, b, false);
    if (s->count == 0) {
        fjw_lit(&w, pretty ? "{\n\t\"offsetTable\":{}\n}" : "{\"offsetTable\":{}}");
        return w.err;
    }
    fjw_lit(&w, pretty ? "{\n\t\"offsetTable\":{\n" : "{\"offsetTable\":{");
    for (size_t i = 0; i < s->count; i++) {
        const struct offset_item *it = &s->items[i];
        if (i > 0)
            fjw_lit(&w, pretty ? ",\n" : ",");
        if (pretty)
            fjw_lit(&w, "\t\t");
        fjw_str(&w, it->key, it->key_len);
        fjw_lit(&w, ":{");
        bool first = true;
        for (uint32_t q = 0; q < it->n; q++) {
            if (it->offs[q] < 0)
                continue;
            if (!first)
                fjw_lit(&w, ",");
            first = false;
            fjw_long_key(&w, q);   /* fastjson's bare integer key: 0:25 */
            fjw_i64(&w, it->offs[q]);
        }
        fjw_lit(&w, pretty ? "\n\t\t}" : "}");
    }
    fjw_lit(&w, pretty ? "\n\t}\n}" : "}}");
    return w.err;
}
