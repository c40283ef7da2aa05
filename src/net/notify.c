/*
 * notify: see notify.h.  A chained hash of keys under one mutex; each key
 * holds per-slot waiter counts and "wake pending" bits.  Keys with no
 * waiters left are freed, so the table holds only what is waited on.
 */
#include "net/notify.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct nkey {
    struct nkey *next;
    uint32_t total;                       /* waiters over all slots */
    uint32_t count[NOTIFY_MAX_SLOTS];
    bool pending[NOTIFY_MAX_SLOTS];
    size_t klen;
    char key[];
};

#define NBUCKETS 1024

/* The one process-wide table: events cross every worker by nature. */
static struct {
    pthread_mutex_t lock;
    struct nkey *buckets[NBUCKETS];
} table = { PTHREAD_MUTEX_INITIALIZER, { 0 } };

static size_t
bucket(const char *k, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 16777619u;
    return h % NBUCKETS;
}

static struct nkey **
find(const char *k, size_t n)
{
    struct nkey **pp = &table.buckets[bucket(k, n)];
    while (*pp != NULL && !((*pp)->klen == n && memcmp((*pp)->key, k, n) == 0))
        pp = &(*pp)->next;
    return pp;
}

/* Waiters on "topic@*" keys (held POPs), all slots: while none, a store
 * of a message raises only "topic@queueId" (notify_star_waiting). */
static atomic_long star_waiters;

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
        fresh = calloc(1, sizeof(*fresh) + klen);
        if (fresh == NULL)
            return -ENOMEM;
    }
    pthread_mutex_lock(&table.lock);
    struct nkey **pp = find(key, klen);
    struct nkey *e = *pp;
    if (e == NULL && delta > 0) {
        e = fresh;
        fresh = NULL;
        memcpy(e->key, key, klen);
        e->klen = klen;
        *pp = e;
    }
    struct nkey *dead = NULL;
    bool star = klen >= 2 && key[klen - 2] == '@' && key[klen - 1] == '*';
    if (e != NULL) {
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
            *pp = e->next;
            dead = e;
        }
    }
    pthread_mutex_unlock(&table.lock);
    free(fresh);
    free(dead);
    return 0;
}

int
notify_raise(const char *key, size_t klen, int *slots, int max)
{
    int n = 0;
    pthread_mutex_lock(&table.lock);
    struct nkey *e = *find(key, klen);
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
    pthread_mutex_lock(&table.lock);
    struct nkey *e = *find(key, klen);
    if (e != NULL && slot >= 0 && slot < NOTIFY_MAX_SLOTS)
        e->pending[slot] = false;
    pthread_mutex_unlock(&table.lock);
}
