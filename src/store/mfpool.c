/* mfpool: a bound on mapped consume-queue files (see mfpool.h). */
#include "store/mfpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"

int
mfpool_init(struct mfpool *p, size_t limit)
{
    memset(p, 0, sizeof(*p));
    p->limit = limit;
    atomic_init(&p->mapped, 0);
    atomic_init(&p->maps, 0);
    atomic_init(&p->unmaps, 0);
    atomic_init(&p->peak, 0);
    int rc = pthread_mutex_init(&p->lock, NULL);
    if (rc != 0) {
        err_set("cannot initialise the mapped-file pool: %s", strerror(rc));
        return -rc;
    }
    return 0;
}

void
mfpool_destroy(struct mfpool *p)
{
    /* The queues removed their files first (mfq_destroy). */
    free(p->slots);
    p->slots = NULL;
    p->n = p->cap = 0;
    pthread_mutex_destroy(&p->lock);
}

/* Takes slot i out (the last slot moves into it).  Pool lock held. */
static void
slot_remove(struct mfpool *p, size_t i)
{
    p->slots[i].mf->pool_idx = -1;
    p->n--;
    if (i != p->n) {
        p->slots[i] = p->slots[p->n];
        p->slots[i].mf->pool_idx = (long)i;
    }
    atomic_store_explicit(&p->mapped, p->n, memory_order_relaxed);
}

int
mfpool_add(struct mfpool *p, struct mfile *mf, pthread_mutex_t *qlock)
{
    pthread_mutex_lock(&p->lock);
    if (mf->pool_idx >= 0) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        struct mfpool_slot *ns = realloc(p->slots, cap * sizeof(*ns));
        if (ns == NULL) {
            pthread_mutex_unlock(&p->lock);
            err_set("out of memory");
            return -ENOMEM;
        }
        p->slots = ns;
        p->cap = cap;
    }
    p->slots[p->n].mf = mf;
    p->slots[p->n].qlock = qlock;
    mf->pool_idx = (long)p->n;
    p->n++;
    atomic_store_explicit(&p->mapped, p->n, memory_order_relaxed);
    if ((int64_t)p->n > atomic_load_explicit(&p->peak, memory_order_relaxed))
        atomic_store_explicit(&p->peak, (int64_t)p->n, memory_order_relaxed);
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_add_explicit(&p->maps, 1, memory_order_relaxed);
    return 0;
}

void
mfpool_remove(struct mfpool *p, struct mfile *mf)
{
    pthread_mutex_lock(&p->lock);
    if (mf->pool_idx >= 0 && (size_t)mf->pool_idx < p->n &&
        p->slots[mf->pool_idx].mf == mf)
        slot_remove(p, (size_t)mf->pool_idx);
    pthread_mutex_unlock(&p->lock);
}

size_t
mfpool_trim(struct mfpool *p, size_t target)
{
    size_t done = 0;
    pthread_mutex_lock(&p->lock);
    /* Two passes over the set at most: the first may only clear `used`
     * bits; whatever is still pinned or busy after that stays mapped
     * (the bound is then exceeded by the files in use, no more). */
    size_t steps = 2 * p->n + 1;
    while (p->n > target && steps-- > 0) {
        if (p->hand >= p->n)
            p->hand = 0;
        struct mfpool_slot *s = &p->slots[p->hand];
        struct mfile *mf = s->mf;
        if (atomic_exchange_explicit(&mf->used, false, memory_order_relaxed)) {
            p->hand++;
            continue;
        }
        if (pthread_mutex_trylock(s->qlock) != 0) {
            p->hand++;
            continue;
        }
        /* Under the queue's lock nobody pins it through the queue; a
         * writer's lock-free pin (mfile_pin_mapped) is kept out by the
         * compare-and-swap from 1 (the queue's reference alone) to the
         * bias, given back once the mapping is gone. */
        int one = 1;
        if (!atomic_load(&mf->retired) &&
            atomic_compare_exchange_strong_explicit(&mf->refs, &one, 1 + MFILE_UNMAPPING,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
            pthread_mutex_t *ql = s->qlock;
            mfile_unmap(mf);
            atomic_fetch_sub_explicit(&mf->refs, MFILE_UNMAPPING, memory_order_release);
            slot_remove(p, p->hand);  /* the hand now points at the moved slot */
            pthread_mutex_unlock(ql);
            done++;
        } else {
            pthread_mutex_unlock(s->qlock);
            p->hand++;
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (done > 0)
        atomic_fetch_add_explicit(&p->unmaps, (int64_t)done, memory_order_relaxed);
    return done;
}

size_t
mfpool_count(struct mfpool *p)
{
    return atomic_load_explicit(&p->mapped, memory_order_relaxed);
}
