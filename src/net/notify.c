/*
 * notify: see notify.h.  A hash map of keys under one mutex; each key
 * holds per-slot waiter counts and "wake pending" bits.  Keys with no
 * waiters left are freed, so the table holds only what is waited on.
 * The keys are topic@queue names a peer chooses (a consumer holds pulls
 * on them), so the map is core/hmap's: keyed SipHash, a table that
 * grows with the keys (docs/hardening-tables.md).
 */
#include "net/notify.h"

#include "core/hmap.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct nkey {
    uint32_t total;                       /* waiters over all slots */
    uint32_t count[NOTIFY_MAX_SLOTS];
    bool pending[NOTIFY_MAX_SLOTS];
};

/* The one process-wide table: events cross every worker by nature.  The
 * map starts at 1024 buckets (a power of two, as hmap_init would set). */
static struct {
    pthread_mutex_t lock;
    struct hmap keys;                     /* key -> struct nkey * */
} table = { PTHREAD_MUTEX_INITIALIZER, { .min_cap = 1024 } };

/* Waiters on "topic@*" keys (held POPs), all slots: while none, a store
 * of a message raises only "topic@queueId" (notify_star_waiting). */
static atomic_long star_waiters;

/* Keys in the table by a cheap tag of the key (key_tag): a raise whose
 * tag has no key (no held pull or POP on it anywhere, e.g. a producer-
 * only broker, whose own services wait on event keys of other names) is
 * one relaxed load, not a keyed hash and the lock.  A tag is a filter,
 * never the look-up: keys sharing one (a peer may choose them to) only
 * send each other's raises to the table, which is as before.  A raise
 * that reads 0 while a wait is being registered is the race every wait
 * already has between its read and its registration: the waiter's
 * re-check covers both. */
#define NOTIFY_TAGS 1024
static atomic_uint live_tags[NOTIFY_TAGS];

/* The key's tag: its length and its first and last 8 bytes (a topic and
 * a queue id, for topic@queueId), mixed by two multiplications. */
static inline unsigned
key_tag(const char *key, size_t klen)
{
    uint64_t a = klen, b = 0;
    if (klen >= 8) {
        memcpy(&b, key, 8);
        uint64_t c;
        memcpy(&c, key + klen - 8, 8);
        a ^= c;
    } else {
        for (size_t i = 0; i < klen; i++)
            b = b << 8 | (unsigned char)key[i];
    }
    uint64_t h = (a * 0x9E3779B97F4A7C15u) ^ (b * 0xC2B2AE3D27D4EB4Fu);
    return (unsigned)(h >> 54);  /* 10 bits: NOTIFY_TAGS */
}

bool
notify_star_waiting(void)
{
    return atomic_load_explicit(&star_waiters, memory_order_relaxed) > 0;
}

int
notify_interest(const char *key, size_t klen, int slot, int delta)
{
    if (slot < 0 || slot >= NOTIFY_MAX_SLOTS)
        return -EINVAL;
    struct nkey *fresh = NULL;
    if (delta > 0) {
        fresh = calloc(1, sizeof(*fresh));
        if (fresh == NULL)
            return -ENOMEM;
    }
    uint64_t hash = hmap_hash(key, klen);
    pthread_mutex_lock(&table.lock);
    struct hnode *node = hmap_find(&table.keys, hash, key, klen);
    if (node == NULL && delta > 0) {
        node = hmap_add(&table.keys, hash, key, klen, fresh);
        if (node == NULL) {
            pthread_mutex_unlock(&table.lock);
            free(fresh);
            return -ENOMEM;
        }
        fresh = NULL;
        atomic_fetch_add_explicit(&live_tags[key_tag(key, klen)], 1, memory_order_relaxed);
    }
    struct nkey *dead = NULL;
    bool star = klen >= 2 && key[klen - 2] == '@' && key[klen - 1] == '*';
    if (node != NULL) {
        struct nkey *e = node->val;
        if (star)
            atomic_fetch_add_explicit(&star_waiters, delta > 0 ? 1 : -1, memory_order_relaxed);
        if (delta > 0) {
            e->count[slot] += (uint32_t)delta;
            e->total += (uint32_t)delta;
        } else if (e->count[slot] >= (uint32_t)-delta) {
            e->count[slot] -= (uint32_t)-delta;
            e->total -= (uint32_t)-delta;
            if (e->count[slot] == 0)
                e->pending[slot] = false;
        }
        if (e->total == 0) {
            hmap_remove_node(&table.keys, node);
            hmap_compact(&table.keys);
            atomic_fetch_sub_explicit(&live_tags[key_tag(key, klen)], 1, memory_order_relaxed);
            dead = e;
        }
    }
    pthread_mutex_unlock(&table.lock);
    free(fresh);
    free(dead);
    return 0;
}

/* The key's entry, or NULL; under table.lock. */
static struct nkey *
find(const char *key, size_t klen, uint64_t hash)
{
    struct hnode *node = hmap_find(&table.keys, hash, key, klen);
    return node != NULL ? node->val : NULL;
}

int
notify_raise(const char *key, size_t klen, int *slots, int max)
{
    int n = 0;
    if (atomic_load_explicit(&live_tags[key_tag(key, klen)], memory_order_relaxed) == 0)
        return 0;
    uint64_t hash = hmap_hash(key, klen);
    pthread_mutex_lock(&table.lock);
    struct nkey *e = find(key, klen, hash);
    if (e != NULL) {
        for (int s = 0; s < NOTIFY_MAX_SLOTS && n < max; s++) {
            if (e->count[s] > 0 && !e->pending[s]) {
                e->pending[s] = true;
                slots[n++] = s;
            }
        }
    }
    pthread_mutex_unlock(&table.lock);
    return n;
}

void
notify_taken(const char *key, size_t klen, int slot)
{
    uint64_t hash = hmap_hash(key, klen);
    pthread_mutex_lock(&table.lock);
    struct nkey *e = find(key, klen, hash);
    if (e != NULL && slot >= 0 && slot < NOTIFY_MAX_SLOTS)
        e->pending[slot] = false;
    pthread_mutex_unlock(&table.lock);
}
