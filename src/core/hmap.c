/*
 * hmap: see hmap.h.
 */
#include "core/hmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/siphash.h"

uint64_t
hmap_hash(const void *key, size_t n)
{
    return siphash_bytes(key, n);
}

static uint32_t
pow2_at_least(uint32_t n)
{
    uint32_t c = 8;
    while (c < n && c < (1u << 30))
        c <<= 1;
    return c;
}

void
hmap_init(struct hmap *m, uint32_t cap)
{
    m->tab = NULL;
    m->cap = 0;
    m->size = 0;
    m->min_cap = pow2_at_least(cap);
}

void
hmap_free(struct hmap *m, void (*free_val)(void *))
{
    for (uint32_t i = 0; m->tab != NULL && i < m->cap; i++) {
        struct hnode *n = m->tab[i];
        while (n != NULL) {
            struct hnode *next = n->next;
            if (free_val != NULL)
                free_val(n->val);
            free(n);
            n = next;
        }
    }
    free(m->tab);
    m->tab = NULL;
    m->cap = 0;
    m->size = 0;
}

struct hnode *
hmap_find(const struct hmap *m, uint64_t hash, const void *key, size_t n)
{
    if (m->tab == NULL)
        return NULL;
    for (struct hnode *e = m->tab[hash & (m->cap - 1)]; e != NULL; e = e->next)
        if (e->hash == hash && e->klen == n && memcmp(e->key, key, n) == 0)
            return e;
    return NULL;
}

static int
resize(struct hmap *m, uint32_t cap)
{
    struct hnode **nt = calloc(cap, sizeof(*nt));
    if (nt == NULL)
        return -1;
    for (uint32_t i = 0; m->tab != NULL && i < m->cap; i++) {
        struct hnode *e = m->tab[i];
        while (e != NULL) {
            struct hnode *next = e->next;
            struct hnode **slot = &nt[e->hash & (cap - 1)];
            e->next = *slot;
            *slot = e;
            e = next;
        }
    }
    free(m->tab);
    m->tab = nt;
    m->cap = cap;
    return 0;
}

struct hnode *
hmap_add(struct hmap *m, uint64_t hash, const void *key, size_t n, void *val)
{
    if (n > UINT32_MAX - 1)
        return NULL;
    if (m->tab == NULL && resize(m, m->min_cap) != 0)
        return NULL;
    if (m->size >= m->cap && m->cap < (1u << 30))
        (void)resize(m, m->cap * 2);  /* a failed growth only lengthens chains */
    struct hnode *e = malloc(sizeof(*e) + n + 1);
    if (e == NULL)
        return NULL;
    e->val = val;
    e->hash = hash;
    e->klen = (uint32_t)n;
    memcpy(e->key, key, n);
    e->key[n] = '\0';
    struct hnode **slot = &m->tab[hash & (m->cap - 1)];
    e->next = *slot;
    *slot = e;
    m->size++;
    return e;
}

void
hmap_remove_node(struct hmap *m, struct hnode *node)
{
    struct hnode **pp = &m->tab[node->hash & (m->cap - 1)];
    while (*pp != node)
        pp = &(*pp)->next;
    *pp = node->next;
    free(node);
    m->size--;
}

bool
hmap_remove(struct hmap *m, const void *key, size_t n, void **val)
{
    struct hnode *e = hmap_find(m, hmap_hash(key, n), key, n);
    if (e == NULL)
        return false;
    if (val != NULL)
        *val = e->val;
    hmap_remove_node(m, e);
    return true;
}

void
hmap_compact(struct hmap *m)
{
    if (m->tab == NULL)
        return;
    if (m->size == 0) {
        free(m->tab);
        m->tab = NULL;
        m->cap = 0;
        return;
    }
    uint32_t cap = m->cap;
    while (cap > m->min_cap && m->size <= cap / 8)
        cap /= 2;
    if (cap != m->cap)
        (void)resize(m, cap);  /* a failed shrink keeps the bigger table */
}

void
hmap_iter_init(struct hiter *it, struct hmap *m)
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

struct hnode *
hmap_iter_next(struct hiter *it)
{
    struct hnode *n = it->next;
    if (n == NULL)
        return NULL;
    if (n->next != NULL) {
        it->next = n->next;
    } else {
        struct hmap *m = it->m;
        it->bucket++;
        while (it->bucket < m->cap && m->tab[it->bucket] == NULL)
            it->bucket++;
        it->next = it->bucket < m->cap ? m->tab[it->bucket] : NULL;
    }
    return n;
}
