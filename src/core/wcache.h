/*
 * wcache: a bounded cache of entries by string key (a topic, a group)
 * that requests may wait on until the entry is filled: the proxy's
 * route cache and its group-config cache (grpc/upstream.c) are two of
 * them (they were two copies of this shape).
 *
 * What an entry holds is the caller's: it embeds struct wcache_ent as
 * the first member of its own struct and gives the cache that struct's
 * size; a waiter likewise embeds struct wcache_waiter.  The cache keeps:
 *
 *   the map       key -> entry (core/hmap.h: SipHash-keyed, so names a
 *                 client chooses do not make a lookup slow);
 *   use order     entries nothing waits on are in `idle`, least recently
 *                 used first (wcache_touch moves one to the end): the
 *                 one evicted when the cache is full, the ones expired
 *                 when unused too long (wcache_expire);
 *   waiters       entries with waiters are in `waited` instead, in no
 *                 order, and are never evicted nor expired; the waiters
 *                 of an entry stay in the order they came;
 *   busy          the caller's ops->busy says an entry is being filled
 *                 (a fetch in flight whose answer comes back to it): it
 *                 is passed over by eviction and expiry too.
 *
 * Bounds: at most `max` entries (full of entries that are waited on or
 * busy, a new key is refused: NULL); `nwaiting` counts the waiters of
 * every entry, for the caller's own limit on them.
 *
 * MT: none; a cache belongs to one thread.
 */
#ifndef RMQ_WCACHE_H
#define RMQ_WCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/hmap.h"
#include "core/queue.h"

struct wcache_waiter {
    struct wcache_waiter *next;
};

struct wcache_ent {
    struct hnode *node;        /* in the map; node->key is the key */
    struct qnode link;         /* in idle or, while waited on, waited */
    struct wcache_waiter *waiters, **wtail;
    uint64_t used_ms;          /* wcache_touch's `now` */
};

struct wcache_ops {
    /* Being filled: not evicted, not expired.  NULL: never. */
    bool (*busy)(const struct wcache_ent *e);
    /* Frees what the caller's part of e holds (not e itself), when e
     * leaves the cache.  NULL: nothing to free. */
    void (*clear)(struct wcache_ent *e);
};

struct wcache {
    struct hmap map;
    struct qnode idle;         /* nothing waits: least recently used first */
    struct qnode waited;       /* entries with waiters */
    size_t max;                /* entries at most (at least 1) */
    size_t ent_size;           /* the caller's struct, wcache_ent first */
    uint32_t nwaiting;         /* waiters of every entry */
    const struct wcache_ops *ops;
};

/** An empty cache of at most `max` entries (0 counts as 1) of
 * `ent_size` bytes each; the map starts at `cap` buckets. */
void wcache_init(struct wcache *c, size_t ent_size, size_t max, uint32_t cap,
                 const struct wcache_ops *ops);

/** Frees every entry (their waiters must have been taken). */
void wcache_free(struct wcache *c);

/** The entry of key, or NULL; its use is not counted. */
struct wcache_ent *wcache_get(const struct wcache *c, const char *key);

/**
 * The entry of key, made (zeroed) when new.  Full, the least recently
 * used entry neither waited on nor busy goes first.  NULL when the
 * cache is full of entries that are, or out of memory.  A new entry
 * counts as the most recently used, with used_ms 0.
 */
struct wcache_ent *wcache_find_or_add(struct wcache *c, const char *key);

/** e was used at `now`: its used_ms, and the most recently used when
 * nothing waits on it. */
void wcache_touch(struct wcache *c, struct wcache_ent *e, uint64_t now);

/** Appends a waiter to e (taken back with wcache_take_waiters); e is
 * then not evicted nor expired. */
void wcache_wait(struct wcache *c, struct wcache_ent *e, struct wcache_waiter *w);

/**
 * e's waiters, in the order they came, taken off e (which goes back
 * among the idle, as the most recently used, when it had any); NULL
 * when none.  Each still counts in nwaiting until wcache_pop hands it
 * out: what is done with one (sent on again, and so waiting again)
 * meets the same limit as before it was taken.
 */
struct wcache_waiter *wcache_take_waiters(struct wcache *c, struct wcache_ent *e);

/** The first waiter of a list from wcache_take_waiters, taken off it
 * and no longer counted; NULL at its end. */
struct wcache_waiter *wcache_pop(struct wcache *c, struct wcache_waiter **list);

/** Removes e (nothing may wait on it) and frees it. */
void wcache_remove(struct wcache *c, struct wcache_ent *e);

/** Removes the entries unused (used_ms) for `max_idle_ms` or longer at
 * `now`, oldest first, busy ones passed over; returns how many. */
size_t wcache_expire(struct wcache *c, uint64_t now, uint64_t max_idle_ms);

/** The key of e (NUL-terminated). */
static inline const char *
wcache_key(const struct wcache_ent *e)
{
    return e->node->key;
}

/** The number of entries. */
static inline size_t
wcache_size(const struct wcache *c)
{
    return c->map.size;
}

#endif
