/*
 * hmap: a hash map from byte strings to pointers for tables whose keys
 * come from clients (group names, topics, connection ids).
 *
 * Chained buckets, a power-of-two table that doubles at load 1 (and
 * halves when it falls under 1/8, down to its first size).  The hash is
 * SipHash-1-3 keyed with a per-process random key, so that a client
 * cannot choose names that all fall into one chain (Java's
 * String.hashCode, which route/jmap keeps for its iteration order, is
 * trivially collided: "Aa" and "BB").  Iteration order is unspecified.
 *
 * Keys are copied into the node (NUL-terminated); the node, and so its
 * key, stays where it is until removed.
 *
 * MT: none; the owner locks.  hmap_hash() from any thread.
 */
#ifndef RMQ_BROKER_HMAP_H
#define RMQ_BROKER_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hnode {
    struct hnode *next;
    void *val;
    uint64_t hash;
    uint32_t klen;
    char key[];                /* klen bytes + NUL */
};

struct hmap {
    struct hnode **tab;        /* NULL until the first put */
    uint32_t cap;
    uint32_t min_cap;
    uint32_t size;
};

struct hiter {
    struct hmap *m;
    uint32_t bucket;
    struct hnode *next;        /* prefetched: the current node may go */
};

/** The keyed hash of a byte string. */
uint64_t hmap_hash(const void *key, size_t n);

/** An empty map whose table starts at (at least) `cap` buckets. */
void hmap_init(struct hmap *m, uint32_t cap);

/** Frees every node (each value through free_val when not NULL). */
void hmap_free(struct hmap *m, void (*free_val)(void *));

struct hnode *hmap_find(const struct hmap *m, uint64_t hash, const void *key, size_t n);

static inline void *
hmap_get(const struct hmap *m, const void *key, size_t n)
{
    struct hnode *node = hmap_find(m, hmap_hash(key, n), key, n);
    return node != NULL ? node->val : NULL;
}

/**
 * Adds key -> val; the key must not be in the map.  Returns the node,
 * or NULL when out of memory (map unchanged).
 */
struct hnode *hmap_add(struct hmap *m, uint64_t hash, const void *key, size_t n, void *val);

/** Removes a node of this map (safe during iteration for the node just
 *  returned; a shrink waits until no iteration is running: call
 *  hmap_compact() after one that removed). */
void hmap_remove_node(struct hmap *m, struct hnode *node);

/** Removes a key; true when it was there (its value in *val). */
bool hmap_remove(struct hmap *m, const void *key, size_t n, void **val);

/** Halves the table while it is at most 1/8 full. */
void hmap_compact(struct hmap *m);

void hmap_iter_init(struct hiter *it, struct hmap *m);
struct hnode *hmap_iter_next(struct hiter *it);

#endif
