/*
 * readers: where the commit log is being read, for the page cache drop
 * window (commitLogDropCacheBehindBytes, flush.c).  The flush thread
 * drops the log's page cache behind its flushed end so that the writer
 * gets pages back hot; what a reader still has ahead of it must stay, or
 * it comes back from the disk.  The readers are a consumer group's pull
 * or POP of a queue (the broker marks those gets, store_slices.consumer)
 * and a slave's HA transfer; the store's own services (schedule,
 * transaction checks, look-ups by id or key) are not: each reads a
 * record once, and a delay level two hours behind would otherwise keep
 * two hours of log.
 *
 * A read keeps the log from its position up for between keep_ms and
 * twice that (commitLogDropCacheReaderSeconds): every queue, and the HA
 * transfer, keeps the lowest position read in each of two epochs of
 * keep_ms, the current one and the one before; a new epoch forgets the
 * older.  So an active reader -- a group that pulled in the last
 * keep_ms, caught up or lagging -- is protected from where it stood at
 * the start of the previous epoch, and one that stopped reading is
 * forgotten after at most two epochs.  Groups are not told apart: a
 * queue's slot holds the lowest of its groups' reads.
 *
 * MT: readers_note and readers_note_ha from any thread (a load and,
 * only when lower, a CAS on the queue's own slot: the read path shares
 * nothing); readers_floor from the flush thread only.
 */
#ifndef RMQ_READERS_H
#define RMQ_READERS_H

#include <stdatomic.h>
#include <stdint.h>

#include "store/consumequeue.h"

struct readers {
    struct cqtable *cqs;
    int64_t keep_ms;            /* commitLogDropCacheReaderSeconds * 1000; 0: off */
    _Atomic uint32_t epoch;     /* slots [epoch & 1] take the reads */
    _Atomic int64_t ha[2];      /* the master's HA transfer, as a queue's rd */
    _Atomic int64_t floor;      /* the last answer of readers_floor */
    atomic_bool below;          /* a read went below it since */
    /* Flush thread only. */
    int64_t epoch_ms;           /* when the current epoch began */
    int64_t floor_ms;           /* when the floor was computed, 0: never */
};

/** Starts with no reads. keep_ms 0: nothing is tracked, the floor is none. */
void readers_init(struct readers *r, struct cqtable *cqs, int64_t keep_ms);

/* Lowers *slot to phy; a read below the floor the flush thread last
 * computed makes its next readers_floor walk at once (a new slowest
 * reader), not up to READERS_EVERY_MS later. */
static inline void
readers_lower(struct readers *r, _Atomic int64_t *slot, int64_t phy)
{
    int64_t cur = atomic_load_explicit(slot, memory_order_relaxed);
    while (phy < cur) {
        if (atomic_compare_exchange_weak_explicit(slot, &cur, phy, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            if (phy < atomic_load_explicit(&r->floor, memory_order_relaxed))
                atomic_store_explicit(&r->below, true, memory_order_relaxed);
            return;
        }
    }
}

/** A consumer read queue c from commit log offset phy on. */
static inline void
readers_note(struct readers *r, struct cq *c, int64_t phy)
{
    if (r->keep_ms > 0)
        readers_lower(r, &c->rd[atomic_load_explicit(&r->epoch, memory_order_relaxed) & 1], phy);
}

/** A slave's HA transfer read the log from phy on. */
static inline void
readers_note_ha(struct readers *r, int64_t phy)
{
    if (r->keep_ms > 0)
        readers_lower(r, &r->ha[atomic_load_explicit(&r->epoch, memory_order_relaxed) & 1], phy);
}

/**
 * The lowest commit log offset read in the current and the previous
 * epoch (INT64_MAX: none, or tracking is off), starting a new epoch when
 * the current one is keep_ms old.  Walks every queue, so at most once a
 * second (READERS_EVERY_MS) unless a read went below the last figure;
 * in between it answers that figure.  A walk counts every read noted
 * since the walk before it, however long ago (an epoch ends only at a
 * walk).  MT: the flush thread.
 */
int64_t readers_floor(struct readers *r, int64_t now_ms);

#define READERS_EVERY_MS 1000

#endif
