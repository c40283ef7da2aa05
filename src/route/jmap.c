/*
 * jmap: see jmap.h.  The algorithms are java.util.HashMap's (putVal,
 * resize, removeNode) without the tree bins.
 */
#include "route/jmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/jstr.h"

static uint32_t
table_size_for(uint32_t c)
{
    uint32_t n = 1;
    while (n < c && n < (1u << 30))
        n <<= 1;
    return n;
}

static uint32_t
threshold(uint32_t cap)
{
    return (uint32_t)(((uint64_t)cap * 3) / 4);
}

void
jmap_init(struct jmap *m, uint32_t java_capacity)
{
    m->tab = NULL;
    m->cap = 0;
    m->init_cap = table_size_for(java_capacity);
    m->size = 0;
}

void
jmap_free(struct jmap *m, void (*free_val)(void *))
{
    if (m->tab != NULL) {
        for (uint32_t i = 0; i < m->cap; i++) {
            struct jnode *n = m->tab[i];
            while (n != NULL) {
                struct jnode *next = n->next;
                if (free_val != NULL)
                    free_val(n->val);
                free(n);
                n = next;
            }
        }
        free(m->tab);
    }
    m->tab = NULL;
    m->cap = 0;
    m->size = 0;
}

static uint32_t
spread(uint32_t h)
{
    return h ^ (h >> 16);
}

uint32_t
jmap_hash_str(const char *str, size_t len)
{
    return spread((uint32_t)java_hash(str, len));
}

uint32_t
jmap_hash_long(int64_t v)
{
    uint64_t u = (uint64_t)v;
    return spread((uint32_t)(u ^ (u >> 32)));
}

uint32_t
jmap_grown_cap(uint32_t java_capacity, size_t n)
{
    uint32_t cap = table_size_for(java_capacity);
    while (n > threshold(cap) && cap < (1u << 30))
        cap <<= 1;
    return cap;
}

struct jnode *
jmap_find(const struct jmap *m, uint32_t hash, const char *key, size_t klen)
{
    if (m->tab == NULL)
        return NULL;
    for (struct jnode *n = m->tab[jmap_bucket(hash, m->cap)]; n != NULL; n = n->next)
        if (n->hash == hash && n->klen == klen && memcmp(n->key, key, klen) == 0)
            return n;
    return NULL;
}

void *
jmap_get_str(const struct jmap *m, const char *key, size_t klen)
{
    struct jnode *n = jmap_find(m, jmap_hash_str(key, klen), key, klen);
    return n != NULL ? n->val : NULL;
}

void *
jmap_get_long(const struct jmap *m, int64_t key)
{
    struct jnode *n = jmap_find(m, jmap_hash_long(key), (const char *)&key,
                                sizeof(key));
    return n != NULL ? n->val : NULL;
}

/* Doubles the table; each chain splits into lo (same index) and hi
 * (index + old cap), both in their old relative order. */
static int
grow(struct jmap *m)
{
    uint32_t oldcap = m->cap;
    uint32_t newcap = oldcap == 0 ? m->init_cap : oldcap * 2;
    struct jnode **nt = calloc(newcap, sizeof(*nt));
    if (nt == NULL)
        return -1;
    for (uint32_t j = 0; j < oldcap; j++) {
        struct jnode *lo_h = NULL, *lo_t = NULL, *hi_h = NULL, *hi_t = NULL;
        struct jnode *n = m->tab[j];
        while (n != NULL) {
            struct jnode *next = n->next;
            n->next = NULL;
            if ((n->hash & oldcap) == 0) {
                if (lo_t == NULL)
                    lo_h = n;
                else
                    lo_t->next = n;
                lo_t = n;
            } else {
                if (hi_t == NULL)
                    hi_h = n;
                else
                    hi_t->next = n;
                hi_t = n;
            }
            n = next;
        }
        nt[j] = lo_h;
        nt[j + oldcap] = hi_h;
    }
    free(m->tab);
    m->tab = nt;
    m->cap = newcap;
    return 0;
}

struct jnode *
jmap_put(struct jmap *m, uint32_t hash, const char *key, size_t klen,
         void *val, void **old)
{
    if (old != NULL)
        *old = NULL;
    struct jnode *found = jmap_find(m, hash, key, klen);
    if (found != NULL) {
        if (old != NULL)
            *old = found->val;
        found->val = val;
        return found;
    }
    if (klen > UINT32_MAX - 1)
        return NULL;
    if (m->tab == NULL && grow(m) != 0)
        return NULL;
    /* Java grows after linking the node; growing first when the new size
     * would pass the threshold gives the same chains (see jmap.h). */
    if (m->size + 1 > threshold(m->cap) && m->cap < (1u << 30) && grow(m) != 0)
        return NULL;
    struct jnode *n = malloc(sizeof(*n) + klen + 1);
    if (n == NULL)
        return NULL;
    n->next = NULL;
    n->val = val;
    n->hash = hash;
    n->klen = (uint32_t)klen;
    memcpy(n->key, key, klen);
    n->key[klen] = '\0';
    struct jnode **pp = &m->tab[jmap_bucket(hash, m->cap)];
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = n;
    m->size++;
    return n;
}

struct jnode *
jmap_put_str(struct jmap *m, const char *key, size_t klen, void *val,
             void **old)
{
    return jmap_put(m, jmap_hash_str(key, klen), key, klen, val, old);
}

struct jnode *
jmap_put_long(struct jmap *m, int64_t key, void *val, void **old)
{
    return jmap_put(m, jmap_hash_long(key), (const char *)&key, sizeof(key),
                    val, old);
}

bool
jmap_remove(struct jmap *m, uint32_t hash, const char *key, size_t klen,
            void **val)
{
    if (m->tab == NULL)
        return false;
    struct jnode **pp = &m->tab[jmap_bucket(hash, m->cap)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        struct jnode *n = *pp;
        if (n->hash == hash && n->klen == klen && memcmp(n->key, key, klen) == 0) {
            *pp = n->next;
            if (val != NULL)
                *val = n->val;
            free(n);
            m->size--;
            return true;
        }
    }
    return false;
}

bool
jmap_remove_str(struct jmap *m, const char *key, size_t klen, void **val)
{
    return jmap_remove(m, jmap_hash_str(key, klen), key, klen, val);
}

bool
jmap_remove_long(struct jmap *m, int64_t key, void **val)
{
    return jmap_remove(m, jmap_hash_long(key), (const char *)&key, sizeof(key),
                       val);
}

int64_t
jmap_key_long(const struct jnode *n)
{
    int64_t v;
    memcpy(&v, n->key, sizeof(v));
    return v;
}

void
jmap_iter_init(struct jiter *it, const struct jmap *m)
{
    it->m = m;
    it->bucket = 0;
    it->next = NULL;
    if (m->tab == NULL)
        return;
    while (it->bucket < m->cap && m->tab[it->bucket] == NULL)
        it->bucket++;
    if (it->bucket < m->cap)
        it->next = m->tab[it->bucket];
}

struct jnode *
jmap_iter_next(struct jiter *it)
{
    struct jnode *n = it->next;
    if (n == NULL)
        return NULL;
    if (n->next != NULL) {
        it->next = n->next;
    } else {
        const struct jmap *m = it->m;
        it->bucket++;
        while (it->bucket < m->cap && m->tab[it->bucket] == NULL)
            it->bucket++;
        it->next = it->bucket < m->cap ? m->tab[it->bucket] : NULL;
    }
    return n;
}

struct jnode *
jmap_first(const struct jmap *m)
{
    struct jiter it;
    jmap_iter_init(&it, m);
    return jmap_iter_next(&it);
}
