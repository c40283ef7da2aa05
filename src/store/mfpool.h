/*
 * mfpool: a bound on how many lazily mapped files (the consume queues')
 * are mapped at once.
 *
 * Why.  Every mapping is a VMA, and the kernel allows a process
 * vm.max_map_count of them (65,530 by default).  A broker with 16,000
 * topics of 4 queues, each holding a message, would otherwise keep 64,000
 * consume-queue files mapped, and then the commit log could not map its
 * next file: every send failed with CREATE_MAPEDFILE_FAILED.  RocketMQ
 * has the same ceiling and no setting for it; here
 * maxMappedConsumeQueueFiles caps the consume queues' share and leaves
 * the rest (commit log, index, libraries, thread stacks, the allocator)
 * its reserve.
 *
 * How.  A consume-queue file is opened without a mapping (mfile.h,
 * MF_LAZY) and mapped the first time a reader or the writer pins it
 * through its queue (mfqueue.c); the pool then counts it.  Past the cap,
 * mfpool_trim() unmaps cold files, chosen by the CLOCK approximation of
 * least recently used: each pin sets the file's `used` bit (one relaxed
 * store, no lock), the hand clears it on its first pass and unmaps a
 * file whose bit is still clear on the next.  A file is unmapped only
 * with its queue's lock held and its reference count at 1 (the queue's
 * own reference: no reader holds a pin, and the writer pins the file it
 * writes), so nobody can be holding a pointer into it; a later pin maps
 * it again.  Dirty pages of an unmapped file stay in the page cache and
 * a later msync of a new mapping of the file still writes them (Linux
 * syncs the file's range, not the mapping's), so flushing and recovery
 * are unchanged.
 *
 * Lock order: a queue's lock, then the pool's.  The trimmer holds the
 * pool's lock and only tries (trylock) a queue's: a queue busy mapping a
 * file (and so waiting for the pool's lock) is skipped, never waited for.
 *
 * MT: every call from any thread.
 */
#ifndef RMQ_MFPOOL_H
#define RMQ_MFPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/mfile.h"

struct mfpool_slot {
    struct mfile *mf;
    pthread_mutex_t *qlock;     /* the owning queue's lock */
};

struct mfpool {
    pthread_mutex_t lock;
    struct mfpool_slot *slots;  /* the mapped files, in no order */
    size_t n, cap;
    _Atomic size_t mapped;      /* n, for readers without the lock */
    size_t limit;               /* 0: no bound */
    size_t hand;                /* the clock's position in slots[] */
    _Atomic int64_t maps;       /* files mapped (lazily) since open */
    _Atomic int64_t unmaps;     /* cold files unmapped by the trimmer */
    _Atomic int64_t peak;       /* most files mapped at once */
};

/** Initialises a pool of at most `limit` mapped files (0: unbounded). */
int mfpool_init(struct mfpool *p, size_t limit);

void mfpool_destroy(struct mfpool *p);

/**
 * Counts a newly mapped file.  Returns 0, or -ENOMEM (the file stays
 * mapped and uncounted: it is unmapped when freed).  MT: the caller holds
 * `qlock`, the file's queue's lock.
 */
int mfpool_add(struct mfpool *p, struct mfile *mf, pthread_mutex_t *qlock);

/** Forgets a file (its queue lets it go).  MT: the caller holds its queue's lock. */
void mfpool_remove(struct mfpool *p, struct mfile *mf);

/**
 * Unmaps cold files until at most `target` are mapped (or no cold file
 * is left).  Returns the number unmapped.  MT: the caller may hold one
 * queue's lock (that queue's files then stay).
 */
size_t mfpool_trim(struct mfpool *p, size_t target);

/** Files mapped now.  MT: any (a snapshot). */
size_t mfpool_count(struct mfpool *p);

/** True when more than `limit` files are mapped. */
static inline int
mfpool_over(struct mfpool *p)
{
    return p->limit > 0 &&
           atomic_load_explicit(&p->mapped, memory_order_relaxed) > p->limit;
}

#endif
