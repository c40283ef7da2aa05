/*
 * jmap: see jmap.h.  The order is java.util.HashMap's (putVal, resize,
 * removeNode, without the tree bins); lookups go through the keyed index.
 */
#include "core/jmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/jstr.h"
#include "core/siphash.h"

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
    m->kidx = NULL;
    m->cap = 0;
    m->init_cap = table_size_for(java_capacity);
    m->size = 0;
    m->mods = 0;
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
        free(m->tab);   /* and kidx: one block */
    }
    m->tab = NULL;
    m->kidx = NULL;
    m->cap = 0;
    m->size = 0;
    m->mods++;
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

/* The keyed chain link that points at the node of key (or the chain's
 * end: *result == NULL when absent). */
static struct jnode **
kfind(const struct jmap *m, uint64_t kh, const char *key, size_t klen)
{
    struct jnode **pp = &m->kidx[kh & (m->cap - 1)];
    for (; *pp != NULL; pp = &(*pp)->knext) {
        const struct jnode *n = *pp;
        if (n->khash == kh && n->klen == klen && memcmp(n->key, key, klen) == 0)
            break;
    }
    return pp;
}

struct jnode *
jmap_find(const struct jmap *m, uint32_t hash, const char *key, size_t klen)
{
    (void)hash;
    if (m->tab == NULL)
        return NULL;
    return *kfind(m, siphash_bytes(key, klen), key, klen);
}

struct jnode *
jmap_find_like(const struct jmap *m, const struct jnode *n)
{
    if (m->tab == NULL)
        return NULL;
    return *kfind(m, n->khash, n->key, n->klen);
}

void *
jmap_get_str(const struct jmap *m, const char *key, size_t klen)
{
    struct jnode *n = jmap_find(m, 0, key, klen);   /* no Java hash needed */
    return n != NULL ? n->val : NULL;
}

void *
jmap_get_long(const struct jmap *m, int64_t key)
{
    struct jnode *n = jmap_find(m, jmap_hash_long(key), (const char *)&key,
                                sizeof(key));
    return n != NULL ? n->val : NULL;
}

/* Appends n to a Java chain (doubly linked; the head's prev is the tail). */
static void
chain_append(struct jnode **head, struct jnode *n)
{
    n->next = NULL;
    if (*head == NULL) {
        n->prev = n;
        *head = n;
    } else {
        struct jnode *tail = (*head)->prev;
        tail->next = n;
        n->prev = tail;
        (*head)->prev = n;
    }
}

/* Doubles the table; each Java chain splits into lo (same index) and hi
 * (index + old cap), both in their old relative order.  The keyed index
 * is rebuilt at the new size. */
static int
grow(struct jmap *m)
{
    uint32_t oldcap = m->cap;
    uint32_t newcap = oldcap == 0 ? m->init_cap : oldcap * 2;
    struct jnode **nt = calloc((size_t)newcap * 2, sizeof(*nt));
    if (nt == NULL)
        return -1;
    struct jnode **nk = nt + newcap;
    for (uint32_t j = 0; j < oldcap; j++) {
        struct jnode *n = m->tab[j];
        while (n != NULL) {
            struct jnode *next = n->next;
            chain_append(&nt[j + ((n->hash & oldcap) != 0 ? oldcap : 0)], n);
            struct jnode **kb = &nk[n->khash & (newcap - 1)];
            n->knext = *kb;
            *kb = n;
            n = next;
        }
    }
    free(m->tab);
    m->tab = nt;
    m->kidx = nk;
    m->cap = newcap;
    return 0;
}

struct jnode *
jmap_put(struct jmap *m, uint32_t hash, const char *key, size_t klen,
         void *val, void **old)
{
    if (old != NULL)
        *old = NULL;
    uint64_t kh = siphash_bytes(key, klen);
    struct jnode *found = m->tab != NULL ? *kfind(m, kh, key, klen) : NULL;
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
    n->val = val;
    n->hash = hash;
    n->khash = kh;
    n->klen = (uint32_t)klen;
    memcpy(n->key, key, klen);
    n->key[klen] = '\0';
    chain_append(&m->tab[jmap_bucket(hash, m->cap)], n);
    struct jnode **kb = &m->kidx[kh & (m->cap - 1)];
    n->knext = *kb;
    *kb = n;
    m->size++;
    m->mods++;
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
    (void)hash;
    if (m->tab == NULL)
        return false;
    struct jnode **kp = kfind(m, siphash_bytes(key, klen), key, klen);
    struct jnode *n = *kp;
    if (n == NULL)
        return false;
    *kp = n->knext;
    struct jnode **head = &m->tab[jmap_bucket(n->hash, m->cap)];
    if (n == *head) {
        *head = n->next;
        if (n->next != NULL)
            n->next->prev = n->prev;   /* the tail */
    } else {
        n->prev->next = n->next;
        if (n->next != NULL)
            n->next->prev = n->prev;
        else
            (*head)->prev = n->prev;   /* n was the tail */
    }
    if (val != NULL)
        *val = n->val;
    free(n);
    m->size--;
    m->mods++;
    return true;
}

bool
jmap_remove_str(struct jmap *m, const char *key, size_t klen, void **val)
{
    return jmap_remove(m, 0, key, klen, val);   /* no Java hash needed */
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

void
jmap_stats(const struct jmap *m, struct jmap_stats *st)
{
    st->size = m->size;
    st->cap = m->cap;
    st->max_keyed_chain = 0;
    st->max_java_chain = 0;
    for (uint32_t i = 0; m->tab != NULL && i < m->cap; i++) {
        uint32_t k = 0, j = 0;
        for (const struct jnode *n = m->kidx[i]; n != NULL; n = n->knext)
            k++;
        for (const struct jnode *n = m->tab[i]; n != NULL; n = n->next)
            j++;
        if (k > st->max_keyed_chain)
            st->max_keyed_chain = k;
        if (j > st->max_java_chain)
            st->max_java_chain = j;
    }
}
