/*
 * syncwait: waiting for SYNC_FLUSH group commit from Lua.  A put that
 * must be durable before it is answered waits here: in a task it yields
 * (host_wait) and the loop resumes it when the flush thread reports an
 * fsync covering it; in a plain script it runs the loop until then.
 * After syncFlushTimeout it is answered FLUSH_DISK_TIMEOUT instead.
 *
 * MT: a syncwait belongs to the thread running its Lua state's loop.
 */
#ifndef RMQ_SYNCWAIT_H
#define RMQ_SYNCWAIT_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct syncwait;
struct host;

/* How a C wait ended. */
enum syncwait_outcome {
    SYNCWAIT_DURABLE = 0,       /* an fsync covers it */
    SYNCWAIT_TIMED_OUT = 1,     /* syncFlushTimeout passed first */
    SYNCWAIT_CLOSED = 2,        /* the waiter closed (shutdown) */
    SYNCWAIT_SLAVE_TIMED_OUT = 3,       /* SYNC_MASTER: slaveTimeout passed */
    SYNCWAIT_SLAVE_NOT_AVAILABLE = 4,   /* SYNC_MASTER: no usable slave */
};

typedef void (*syncwait_fn)(void *arg, int outcome);

/**
 * A waiter for store s on L's loop (the host is created if needed), or
 * NULL when out of memory.  [-0, +0, m]
 */
struct syncwait *syncwait_new(lua_State *L, struct store *s);

/** The same on host h's loop (a C request processor's). */
struct syncwait *syncwait_new_on(struct host *h, struct store *s);

/**
 * Closes it (no Lua waits may be pending; pending C waits end with
 * SYNCWAIT_CLOSED); its memory goes when the loop has closed its handles.
 * Safe after the loop itself was torn down.
 */
void syncwait_close(struct syncwait *n);

/** True while waits are pending. */
bool syncwait_pending(struct syncwait *n);

/**
 * Waits until the store is flushed up to `end`, or timeout_ms.  The
 * caller has pushed `nvals` results; with is_put the wait is a put's
 * (SYNC_FLUSH and/or SYNC_MASTER: a slave's acknowledgement within
 * slaveTimeout) and a status string ("PUT_OK", "FLUSH_DISK_TIMEOUT",
 * "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE") is inserted before them and
 * nvals + 1 values are returned; otherwise true or nil, "timeout".
 * May yield.  [-0, +(nvals+1 | 1 | 2), e]
 */
int syncwait_wait(lua_State *L, struct syncwait *n, int64_t end,
                  int timeout_ms, int nvals, bool is_put);

/**
 * Makes n its loop's reply gate (reactor.h) for its store, unless the
 * loop has another store's: the gate writes what deferred puts staged
 * (store_commit) before any reply marked with conn_gate_output() leaves,
 * and passes a ticket from syncwait_ticket() only if no commit failed
 * since.  Returns true when puts on this loop may be deferred (the store
 * stages, and n, or another waiter of the same store, is the gate).
 */
bool syncwait_gate(struct syncwait *n);

/** The ticket of a put about to be deferred (before it is made). */
int64_t syncwait_ticket(struct syncwait *n);

/**
 * A put's wait from C (as syncwait_wait with is_put): fn(arg, outcome)
 * runs once, on the loop's thread, when the store is flushed up to `end`
 * (and with SYNC_MASTER a slave acknowledged it) or the timeout passed
 * (or the waiter closes).  Returns 0 (queued), 1 + the outcome when it is
 * known at once (1: durable already; fn is not called) or -ENOMEM.
 */
int syncwait_wait_cb(struct syncwait *n, int64_t end, int timeout_ms,
                     syncwait_fn fn, void *arg);

#endif
