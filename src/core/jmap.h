/*
 * jmap: a hash map whose iteration order is exactly java.util.HashMap's
 * (JDK 8+), so that JSON bodies built from it list keys in the order a
 * RocketMQ NameServer's fastjson output does, and whose lookups cannot be
 * slowed down by the names a peer chooses.
 *
 * Two structures share the nodes.  The order is HashMap's own: a
 * power-of-two table of buckets, each a chain in insertion order; the
 * hash is Java's (String.hashCode over UTF-16 code units, or
 * Long.hashCode) spread with h ^ (h >>> 16); the table starts at
 * tableSizeFor(initialCapacity) on the first put and doubles when size
 * exceeds 3/4 of it, splitting each chain into a low and a high half that
 * keep their order; it never shrinks.  Iteration walks the buckets in
 * index order.  (Java turns a chain of 8+ colliding keys into a tree when
 * the table has 64+ buckets; jmap keeps chains, so only that
 * pathological case may order differently.)  The chains are doubly
 * linked (a head's prev is its tail), so a put appends and a remove
 * unlinks in O(1) however long a chain is.
 *
 * Lookups never walk those chains: Java's hash is trivially collided
 * ("Aa" and "BB": 2^n names of n such pairs share one), and every topic,
 * group and broker name here is chosen by a peer.  A second table of the
 * same size chains the nodes by a keyed SipHash (core/siphash.h), which a
 * peer cannot aim; find, put and remove go through it, so each costs
 * O(1) expected whatever the names (docs/hardening-tables.md).
 *
 * Keys are byte strings (copied into the node, NUL-terminated); a Long key
 * is its 8 bytes in host order with jmap_hash_long() as hash.  Values are
 * opaque pointers the caller owns.
 *
 * MT: none; the owner locks.
 */
#ifndef RMQ_JMAP_H
#define RMQ_JMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jnode {
    struct jnode *next;        /* Java bucket chain (the order) */
    struct jnode *prev;        /* Java bucket chain; a head's is its tail */
    struct jnode *knext;       /* keyed index chain (lookups) */
    void *val;
    uint64_t khash;            /* keyed hash of the key */
    uint32_t hash;             /* spread Java hash */
    uint32_t klen;
    char key[];                /* klen bytes + NUL */
};

struct jmap {
    struct jnode **tab;        /* Java buckets; NULL until the first put */
    struct jnode **kidx;       /* keyed buckets (same block as tab) */
    uint32_t cap;              /* buckets (power of two) once allocated */
    uint32_t init_cap;         /* buckets of the first table */
    uint32_t size;
    uint64_t mods;             /* keys added or removed since jmap_init: a
                                * cache of what the key set encodes to is
                                * valid while this stays */
};

struct jiter {
    const struct jmap *m;
    uint32_t bucket;
    struct jnode *next;        /* prefetched: the current node may be removed */
};

/** An empty map sized like `new HashMap<>(java_capacity)` (16 = default). */
void jmap_init(struct jmap *m, uint32_t java_capacity);

/** Frees every node (and each value through free_val, when not NULL). */
void jmap_free(struct jmap *m, void (*free_val)(void *));

/** spread(String.hashCode()) of UTF-8 bytes (invalid bytes count as U+FFFD). */
uint32_t jmap_hash_str(const char *s, size_t len);

/** spread(Long.hashCode(v)). */
uint32_t jmap_hash_long(int64_t v);

/** The table size a HashMap/HashSet has after `n` puts into a new one. */
uint32_t jmap_grown_cap(uint32_t java_capacity, size_t n);

/** Bucket index of a spread hash in a table of `cap` buckets. */
static inline uint32_t
jmap_bucket(uint32_t hash, uint32_t cap)
{
    return hash & (cap - 1);
}

/** The node for a key, or NULL.  `hash` is not needed for the lookup
 *  (the keyed index is used); it is kept for the callers' symmetry. */
struct jnode *jmap_find(const struct jmap *m, uint32_t hash, const char *key,
                        size_t klen);

/** The node of m whose key is n's (a node of any jmap: the keyed hash is
 *  the process's, so n's is reused, not computed again), or NULL. */
struct jnode *jmap_find_like(const struct jmap *m, const struct jnode *n);

/** Value for a string key, or NULL (hash computed here). */
void *jmap_get_str(const struct jmap *m, const char *key, size_t klen);

/** Value for a Long key, or NULL. */
void *jmap_get_long(const struct jmap *m, int64_t key);

/**
 * Puts key -> val.  An existing key keeps its place and gets the new
 * value (the old one in *old when old is not NULL; else *old = NULL).
 * Returns the node, or NULL when out of memory (map unchanged).
 */
struct jnode *jmap_put(struct jmap *m, uint32_t hash, const char *key,
                       size_t klen, void *val, void **old);

/** jmap_put() with the String hash of key. */
struct jnode *jmap_put_str(struct jmap *m, const char *key, size_t klen,
                           void *val, void **old);

/** jmap_put() of a Long key. */
struct jnode *jmap_put_long(struct jmap *m, int64_t key, void *val,
                            void **old);

/**
 * Removes a key.  Returns true when it was there (its value in *val when
 * val is not NULL).  Safe during iteration for the node just returned.
 */
bool jmap_remove(struct jmap *m, uint32_t hash, const char *key, size_t klen,
                 void **val);

/** jmap_remove() with the String hash of key. */
bool jmap_remove_str(struct jmap *m, const char *key, size_t klen, void **val);

/** jmap_remove() of a Long key. */
bool jmap_remove_long(struct jmap *m, int64_t key, void **val);

/** The Long key of a node made by jmap_put_long. */
int64_t jmap_key_long(const struct jnode *n);

/** Starts an iteration in Java order.  No puts while iterating. */
void jmap_iter_init(struct jiter *it, const struct jmap *m);

/** The next node, or NULL at the end. */
struct jnode *jmap_iter_next(struct jiter *it);

/** The first node in Java order, or NULL. */
struct jnode *jmap_first(const struct jmap *m);

/** Chain lengths, for specs and benchmarks: what a lookup may walk
 *  (keyed) next to what it would walk by Java's hash. */
struct jmap_stats {
    uint32_t size;
    uint32_t cap;
    uint32_t max_keyed_chain;  /* the longest chain a lookup walks */
    uint32_t max_java_chain;   /* the longest chain of equal Java buckets */
};

void jmap_stats(const struct jmap *m, struct jmap_stats *st);

#endif
