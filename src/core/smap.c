/*
 * smap: see smap.h.  Open hashing with chains; the table doubles when it
 * holds more keys than buckets.  Values are replaced, never edited in
 * place, so a copy taken under the read lock is always whole.
 */
#include "core/smap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/siphash.h"

struct sentry {
    struct sentry *next;
    uint64_t hash;
    size_t klen;
    size_t vlen;
    char *val;
    char key[];
};

struct smap {
    struct smap *next_map;     /* registry chain */
    pthread_rwlock_t lock;
    struct sentry **buckets;
    size_t nbuckets;           /* a power of two */
    size_t count;
    atomic_uint_fast64_t version;
    char name[];
};

static struct {
    pthread_mutex_t lock;
    struct smap *maps;
} registry = { PTHREAD_MUTEX_INITIALIZER, NULL };

/* Keyed (siphash.h): the keys are topic and group names a peer chooses. */
static uint64_t
hash_bytes(const char *p, size_t n)
{
    return siphash_bytes(p, n);
}

struct smap *
smap_named(const char *name)
{
    pthread_mutex_lock(&registry.lock);
    struct smap *m = registry.maps;
    while (m != NULL && strcmp(m->name, name) != 0)
        m = m->next_map;
    if (m == NULL) {
        size_t n = strlen(name);
        m = calloc(1, sizeof(*m) + n + 1);
        if (m != NULL) {
            memcpy(m->name, name, n + 1);
            m->nbuckets = 64;
            m->buckets = calloc(m->nbuckets, sizeof(*m->buckets));
            if (m->buckets == NULL || pthread_rwlock_init(&m->lock, NULL) != 0) {
                free(m->buckets);
                free(m);
                m = NULL;
            } else {
                m->next_map = registry.maps;
                registry.maps = m;
            }
        }
    }
    pthread_mutex_unlock(&registry.lock);
    return m;
}

uint64_t
smap_version(struct smap *m)
{
    return atomic_load(&m->version);
}

static struct sentry **
find(struct smap *m, const char *key, size_t klen, uint64_t h)
{
    struct sentry **pp = &m->buckets[h & (m->nbuckets - 1)];
    while (*pp != NULL &&
           !((*pp)->hash == h && (*pp)->klen == klen &&
             memcmp((*pp)->key, key, klen) == 0))
        pp = &(*pp)->next;
    return pp;
}

static void
grow(struct smap *m)
{
    size_t n = m->nbuckets * 2;
    struct sentry **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;  /* longer chains, still correct */
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct sentry *e = m->buckets[i];
        while (e != NULL) {
            struct sentry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
}

int
smap_set(struct smap *m, const char *key, size_t klen, const char *val,
         size_t vlen, int if_absent)
{
    uint64_t h = hash_bytes(key, klen);
    /* Allocate outside the lock. */
    char *v = malloc(vlen + 1);
    struct sentry *fresh = malloc(sizeof(*fresh) + klen + 1);
    if (v == NULL || fresh == NULL) {
        free(v);
        free(fresh);
        return -ENOMEM;
    }
    memcpy(v, val, vlen);
    v[vlen] = '\0';
    pthread_rwlock_wrlock(&m->lock);
    struct sentry **pp = find(m, key, klen, h);
    int rc = 0;
    if (*pp != NULL) {
        if (if_absent) {
            rc = 1;
        } else {
            char *old = (*pp)->val;
            (*pp)->val = v;
            (*pp)->vlen = vlen;
            v = old;  /* freed below */
            atomic_fetch_add(&m->version, 1);
        }
    } else {
        fresh->next = NULL;
        fresh->hash = h;
        fresh->klen = klen;
        memcpy(fresh->key, key, klen);
        fresh->key[klen] = '\0';
        fresh->val = v;
        fresh->vlen = vlen;
        *pp = fresh;
        fresh = NULL;
        v = NULL;
        m->count++;
        if (m->count > m->nbuckets)
            grow(m);
        atomic_fetch_add(&m->version, 1);
    }
    pthread_rwlock_unlock(&m->lock);
    free(v);
    free(fresh);
    return rc;
}

int
smap_del(struct smap *m, const char *key, size_t klen)
{
    uint64_t h = hash_bytes(key, klen);
    pthread_rwlock_wrlock(&m->lock);
    struct sentry **pp = find(m, key, klen, h);
    struct sentry *e = *pp;
    if (e != NULL) {
        *pp = e->next;
        m->count--;
        atomic_fetch_add(&m->version, 1);
    }
    pthread_rwlock_unlock(&m->lock);
    if (e == NULL)
        return 0;
    free(e->val);
    free(e);
    return 1;
}

long
smap_get(struct smap *m, const char *key, size_t klen, char *buf, size_t cap)
{
    uint64_t h = hash_bytes(key, klen);
    pthread_rwlock_rdlock(&m->lock);
    struct sentry *e = *find(m, key, klen, h);
    long n = -1;
    if (e != NULL) {
        n = (long)e->vlen;
        if (e->vlen <= cap)
            memcpy(buf, e->val, e->vlen);
    }
    pthread_rwlock_unlock(&m->lock);
    return n;
}

size_t
smap_dump(struct smap *m, char *buf, size_t cap, size_t *count)
{
    pthread_rwlock_rdlock(&m->lock);
    size_t need = 0;
    for (size_t i = 0; i < m->nbuckets; i++)
        for (struct sentry *e = m->buckets[i]; e != NULL; e = e->next)
            need += 8 + e->klen + e->vlen;
    *count = m->count;
    if (need <= cap) {
        char *w = buf;
        for (size_t i = 0; i < m->nbuckets; i++) {
            for (struct sentry *e = m->buckets[i]; e != NULL; e = e->next) {
                uint32_t kl = (uint32_t)e->klen, vl = (uint32_t)e->vlen;
                memcpy(w, &kl, 4);
                memcpy(w + 4, e->key, e->klen);
                w += 4 + e->klen;
                memcpy(w, &vl, 4);
                memcpy(w + 4, e->val, e->vlen);
                w += 4 + e->vlen;
            }
        }
    }
    pthread_rwlock_unlock(&m->lock);
    return need;
}

size_t
smap_count(struct smap *m)
{
    pthread_rwlock_rdlock(&m->lock);
    size_t n = m->count;
    pthread_rwlock_unlock(&m->lock);
    return n;
}

size_t
smap_max_chain(struct smap *m, size_t *nbuckets)
{
    pthread_rwlock_rdlock(&m->lock);
    size_t longest = 0;
    for (size_t i = 0; i < m->nbuckets; i++) {
        size_t n = 0;
        for (const struct sentry *e = m->buckets[i]; e != NULL; e = e->next)
            n++;
        if (n > longest)
            longest = n;
    }
    *nbuckets = m->nbuckets;
    pthread_rwlock_unlock(&m->lock);
    return longest;
}

void
smap_clear(struct smap *m)
{
    pthread_rwlock_wrlock(&m->lock);
    struct sentry *all = NULL;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct sentry *e = m->buckets[i];
        while (e != NULL) {
            struct sentry *next = e->next;
            e->next = all;
            all = e;
            e = next;
        }
        m->buckets[i] = NULL;
    }
    m->count = 0;
    atomic_fetch_add(&m->version, 1);
    pthread_rwlock_unlock(&m->lock);
    while (all != NULL) {
        struct sentry *next = all->next;
        free(all->val);
        free(all);
        all = next;
    }
}
