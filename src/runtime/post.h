/*
 * post: how hosts reach each other.  Every host has a slot (0 for the
 * main thread or a plain script, worker_id + 1 for a worker) in a
 * process-wide table and a mailbox; connection ids carry the slot of the
 * host that owns them, so any thread can:
 *
 *   - send bytes to a connection another worker owns (post_send), e.g.
 *     NOTIFY_CONSUMER_IDS_CHANGED to a consumer connected elsewhere;
 *   - wake every task, in every worker, that waits on an event key
 *     (post_raise), e.g. held pulls when a message is stored.
 *
 * A host embeds its struct host_post and attaches it to its reactor;
 * nothing here needs the rest of the host (see host.h).
 *
 * MT: post_* from any thread; the rest on the host's own thread.
 */
#ifndef RMQ_POST_H
#define RMQ_POST_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/queue.h"
#include "net/mailbox.h"

struct reactor;

struct host_post {
    struct reactor *r;         /* the host's: its slot, loop, connections */
    struct mailbox mb;
    struct qnode events;       /* this host's event waits (struct event_op) */
    int slot;
    int registered;
    int open;                  /* the mailbox is initialised */
};

/**
 * Registers p in the slot of reactor r (r->slot) and opens its mailbox
 * on r's loop; every mail on p->mb (post's own, and others', e.g. the
 * server's accepted sockets) gets `owner` (the host).  Returns 0 or
 * -errno.
 */
int post_attach(struct host_post *p, struct reactor *r, void *owner);

/** Leaves the slot and closes the mailbox (queued mail still runs). */
void post_detach(struct host_post *p);

/** The slot a connection id belongs to. */
int post_slot_of_conn(uint64_t conn_id);

/**
 * Queues bytes for connection conn_id, on whichever host owns it.
 * expects_reply: the bytes are a request the peer answers; its owner
 * counts it (conn.replies_due), so that answer, and only as many
 * answers as were asked for, reach the response hook.
 * Returns 0, or -ENOENT when no host has that slot, -ENOMEM.
 */
int post_send(struct host_post *from, uint64_t conn_id, const void *bytes,
              size_t len, bool expects_reply);

/** Wakes the waiters of key in every host (from: the calling host, or
 * NULL from a thread of no host).  Returns 0 or -ENOMEM. */
int post_raise(struct host_post *from, const char *key, size_t klen);

/**
 * Waits (see host_wait) until key is raised in p's host or timeout_ms
 * passes; pushes true (raised) or false (timed out).  p is the post of
 * L's host.  Stack: [-0, +1, e].
 */
int post_wait_event(lua_State *L, struct host_post *p, const char *key,
                    size_t klen, uint64_t timeout_ms);

/* A C wait's callback: raised, or timed out (false). */
typedef void (*post_event_fn)(void *arg, bool raised);
struct post_event;

/**
 * post_wait_event for C (a held request with no task): calls cb(arg,
 * raised) once, on p's thread, when key is raised in p's host or
 * timeout_ms passes; the wait is gone when cb runs.  Returns the wait, to
 * cancel, or NULL with err_set().
 */
struct post_event *post_event_wait(struct host_post *p, const char *key, size_t klen,
                                   uint64_t timeout_ms, post_event_fn cb, void *arg);

/** Ends a wait whose callback has not run; the callback never runs.
 * Also after the host's loop closed (its handles are closed then). */
void post_event_cancel(struct post_event *e);

#endif
