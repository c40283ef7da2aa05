/*
 * hmap: see hmap.h.
 */
#include "broker/hmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* {{{ SipHash-1-3 (Aumasson & Bernstein), 64-bit output */

static uint64_t sip_k0, sip_k1;
static pthread_once_t sip_once = PTHREAD_ONCE_INIT;

static void
sip_init(void)
{
    uint64_t k[2];
    if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k[0] = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&ts;
        k[1] = (uint64_t)ts.tv_sec * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)(uintptr_t)k;
    }
    sip_k0 = k[0];
    sip_k1 = k[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                   \
    do {                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);  \
    } while (0)

static inline uint64_t
le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint64_t
hmap_hash(const void *key, size_t n)
{
    pthread_once(&sip_once, sip_init);
    const uint8_t *in = key;
    uint64_t v0 = 0x736f6d6570736575ull ^ sip_k0;
    uint64_t v1 = 0x646f72616e646f6dull ^ sip_k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ sip_k0;
    uint64_t v3 = 0x7465646279746573ull ^ sip_k1;
    const uint8_t *end = in + (n - n % 8);
    for (; in != end; in += 8) {
        uint64_t m = le64(in);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    switch (n & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0]; break;
    case 0: break;
    }
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* }}} */

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
