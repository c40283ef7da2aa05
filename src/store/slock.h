/*
 * slock: a mutex for the store's short, hot critical sections (the
 * commit log's append lock and its metas' lock, taken per send and per
 * commit).  Uncontended, a lock and an unlock are one atomic instruction
 * each, inlined: a pthread mutex pair cost ~65 instructions in two
 * library calls (callgrind, docs/performance.md, branch storeops).
 * Contended, it spins a little, as PTHREAD_MUTEX_ADAPTIVE_NP did (the
 * holder is usually on the other core, about to let go), then sleeps on
 * a futex.
 *
 * The states are Drepper's ("Futexes Are Tricky", mutex 3): 0 free,
 * 1 held, 2 held and someone may sleep on it; only an unlock that finds
 * 2 makes the wake-up call.  Not recursive, no owner check, no condition
 * variables: for locks that need those, pthread.
 *
 * MT: any thread; the lock's memory must outlive every user.
 */
#ifndef RMQ_SLOCK_H
#define RMQ_SLOCK_H

#include <stdatomic.h>

struct slock {
    atomic_int v;
};

static inline void
slock_init(struct slock *l)
{
    atomic_init(&l->v, 0);
}

/** The contended half of slock_lock (slock.c). */
void slock_lock_slow(struct slock *l);

/** The half of slock_unlock that wakes a sleeper (slock.c). */
void slock_wake(struct slock *l);

static inline void
slock_lock(struct slock *l)
{
    int free = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->v, &free, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        slock_lock_slow(l);
}

static inline void
slock_unlock(struct slock *l)
{
    if (atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2)
        slock_wake(l);
}

#endif
