/*
 * mailbox: how one thread hands work to another thread's loop.  A mutex
 * guards the queue; a uv_async_t wakes the owning loop, which moves the
 * whole queue out under the lock and runs each item outside it (libuv's
 * uv__work_done pattern: uv_async_send coalesces, so the drain must take
 * everything).
 *
 * Used to reach a connection owned by another worker (a broker pushing
 * NOTIFY_CONSUMER_IDS_CHANGED, a send waking a long poll held elsewhere),
 * to hand a socket the main thread accepted to the worker that will
 * serve it (server/server.c), and to tell workers to stop.
 *
 * MT: mailbox_post() from any thread; the rest on the owning loop's thread.
 */
#ifndef RMQ_MAILBOX_H
#define RMQ_MAILBOX_H

#include <stdbool.h>
#include <uv.h>

#include "core/queue.h"

struct mail;

/* Runs on the owning loop's thread; owns `m` (free it or reuse it). */
typedef void (*mail_fn)(struct mail *m, void *owner);

struct mail {
    struct qnode link;
    mail_fn fn;
};

struct mailbox {
    uv_async_t async;
    uv_mutex_t lock;
    struct qnode items;        /* guarded by lock */
    void *owner;               /* passed to every mail_fn */
    bool closed;               /* guarded by lock: posts are refused */
};

/**
 * Initialises the mailbox on `loop`.  The async handle does not keep the
 * loop alive by itself.  Returns 0 or a libuv error.
 */
int mailbox_init(struct mailbox *mb, uv_loop_t *loop, void *owner);

/**
 * Queues `m` for the owning loop.  Returns 0, or -1 when the mailbox is
 * closed (the caller still owns `m`).  MT: any thread.
 */
int mailbox_post(struct mailbox *mb, struct mail *m);

/**
 * Refuses further posts, runs what is queued, and closes the async
 * handle (its memory must stay valid until the loop has run the close).
 */
void mailbox_close(struct mailbox *mb);

#endif
