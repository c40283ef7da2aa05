/*
 * flush: the commit log's flush thread (RocketMQ's FlushRealTimeService
 * and GroupCommitService in one).
 *
 * ASYNC_FLUSH: every flushIntervalCommitLog ms, sync what was written
 * since the last flush if at least flushCommitLogLeastPages 4 KiB pages
 * are dirty, and everything every flushCommitLogThoroughInterval ms.
 *
 * SYNC_FLUSH (group commit): a put that must wait asks for its end
 * offset with flusher_request(); the thread wakes, syncs everything
 * written so far -- which covers every put that arrived meanwhile, so one
 * sync serves a whole group -- publishes the new flushed offset and tells
 * its subscribers.  Without requests it still syncs every 10 ms, as
 * RocketMQ does.
 *
 * Waiting is the subscribers' business: the thread only calls each
 * subscriber's notify() after every sync, from the flush thread.  A
 * subscriber living on an event loop posts to it (uv_async_send) and
 * completes its waiters there; the flush thread never touches Lua or a
 * loop's state.
 *
 * MT: flusher_request, flusher_flushed, flusher_flush_now and the
 * subscription calls are safe from any thread.
 */
#ifndef RMQ_FLUSH_H
#define RMQ_FLUSH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/queue.h"
#include "store/commitlog.h"

/** Someone who wants to hear about flush progress. */
struct flush_sub {
    struct qnode link;
    /* Called on the flush thread after each sync (and at stop), with the
     * subscription lock held: must be quick and must not (un)subscribe. */
    void (*notify)(struct flush_sub *s, int64_t flushed);
};

struct flush_conf {
    bool sync;                  /* flushDiskType == SYNC_FLUSH */
    int interval_ms;            /* flushIntervalCommitLog */
    int least_pages;            /* flushCommitLogLeastPages */
    int thorough_ms;            /* flushCommitLogThoroughInterval */
    int64_t drop_behind;        /* commitLogDropCacheBehindBytes: 0 keeps */
    /* The lowest log offset a reader still needs (INT64_MAX: none), or
     * NULL: the window is drop_behind alone.  A reader holds at most
     * reader_max bytes below the flushed end.  Called from the flush
     * thread, only when a drop is due. */
    int64_t (*reader_floor)(void *arg);
    void *reader_arg;
    int64_t reader_max;         /* accessMessageInMemoryMaxRatio's span */
};

struct flusher {
    struct commitlog *cl;
    struct flush_conf conf;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;         /* requested, stop, sleeping */
    pthread_cond_t cond;
    bool stop;
    bool sleeping;
    int64_t requested;          /* highest end a put waits for */
    _Atomic int64_t flushed;    /* the log is durable below this */
    int64_t last_thorough;
    int64_t dropped;            /* page cache dropped below this (flush thread) */
    pthread_mutex_t subs_mu;
    struct qnode subs;
    /* Told about a failed sync (the store goes read-only). */
    void (*on_error)(void *arg, const char *why);
    void *err_arg;
};

/**
 * Starts the thread for `cl`, which is durable up to `flushed` now.
 * Returns 0 or -errno with err_set().
 */
int flusher_start(struct flusher *f, struct commitlog *cl,
                  const struct flush_conf *conf, int64_t flushed,
                  void (*on_error)(void *, const char *), void *err_arg);

/** Stops the thread after a final full flush; notifies subscribers. */
void flusher_stop(struct flusher *f);

/** SYNC_FLUSH: asks for the log to be durable up to `end`. MT: any. */
void flusher_request(struct flusher *f, int64_t end);

/** The durable end of the log. MT: any. */
static inline int64_t
flusher_flushed(struct flusher *f)
{
    return atomic_load_explicit(&f->flushed, memory_order_acquire);
}

/**
 * Syncs everything written so far, in the caller's thread.  Returns 0 or
 * -errno with err_set().  MT: any.
 */
int flusher_flush_now(struct flusher *f);

/**
 * Calls every subscriber's notify() now, without a flush: something else
 * a waiter waits for (a slave's acknowledgement, SYNC_MASTER) changed.
 * MT: any (not from notify()).
 */
void flusher_poke(struct flusher *f);

/** Adds / removes a subscriber. MT: any (not from notify()). */
void flusher_subscribe(struct flusher *f, struct flush_sub *s);
void flusher_unsubscribe(struct flusher *f, struct flush_sub *s);

#endif
