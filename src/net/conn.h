/*
 * conn: one TCP connection carrying RemotingCommand frames, either
 * accepted by a listener or opened by us.  Both directions can originate
 * requests (the broker pushes NOTIFY_CONSUMER_IDS_CHANGED to clients), so
 * every connection has a table of our outstanding requests keyed by opaque
 * and hands every other frame to its owner's on_frame.
 *
 * Lifetime: a conn is reference counted.  The libuv handle holds one
 * reference, dropped in its close callback; anyone who keeps a pointer
 * across a loop turn (a Lua handle, a request task) holds another.  After
 * conn_close() the struct stays valid, `closed` set, until the last
 * reference goes.
 *
 * MT: the thread that runs the conn's reactor.
 */
#ifndef RMQ_CONN_H
#define RMQ_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <uv.h>

#include "core/buf.h"
#include "core/queue.h"
#include "net/reactor.h"

struct conn;
struct call;

struct conn_handler {
    /* A request frame (or a response nobody waits for: then the owner
     * should log and drop it).  `frame` (4 + L bytes) is valid only during
     * the call; the conn may be closed when it returns. */
    void (*on_frame)(struct conn *c, const uint8_t *frame, size_t len);
    /* The connection closed (after pending calls failed).  Optional. */
    void (*on_close)(struct conn *c);
    /* An outbound connect finished: status 0 or a libuv error.  Optional. */
    void (*on_connect)(struct conn *c, int status);
};

struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    struct reactor *r;
    const struct conn_handler *h;
    void *owner;               /* the handler's context */
    int owner_ref;             /* owner's bookkeeping (a Lua registry ref) */
    int listener;              /* index of the accepting listener; -1 outbound */
    struct qnode link;         /* in r->conns */
    struct qnode dirty_link;   /* in r->dirty while output waits */
    struct buf in;             /* bytes read, not yet cut into frames */
    struct buf out;            /* frames queued for the next write */
    struct buf wbuf;           /* the frames of the write in flight */
    struct call **pending;     /* our outstanding requests, by opaque */
    size_t pending_cap;        /* buckets, a power of two (0 = none yet) */
    size_t pending_count;
    uint64_t last_active_ms;   /* uv_now() of the last read or write */
    uint64_t stray;            /* responses that matched no pending call */
    uint64_t id;               /* unique in the process, never 0 */
    int refs;
    bool connected;
    bool writing;
    bool closed;
    bool detached;             /* no socket (conn_new_detached) */
    char peer[64];             /* "ip:port" of the other side */
    char close_reason[96];
};

/** An outstanding request; see conn_call(). */
struct call {
    struct call *next;         /* bucket chain */
    struct conn *conn;         /* referenced while pending */
    uv_timer_t timer;
    int32_t opaque;
    bool linked;
    /* Called once: status 0 with the response frame (valid during the
     * call only), or -RMQ_ETIMEDOUT / -RMQ_ECLOSED with frame NULL.  The
     * call struct is freed after this returns. */
    void (*done)(struct call *call, int status, const uint8_t *frame,
                 size_t len);
    void *arg;
};

/**
 * Accepts a pending connection on `server` into a new conn owned by `h`.
 * Returns the conn (one reference, held by its handle) or NULL.
 */
struct conn *conn_accept(struct reactor *r, uv_stream_t *server,
                         const struct conn_handler *h, void *owner,
                         int listener);

/**
 * Makes a conn of a socket accepted elsewhere (another thread's acceptor,
 * see listen.h): `fd` is a connected, non-blocking TCP socket.  The conn
 * is set up as conn_accept sets one up (peer name, TCP_NODELAY, reading).
 * Takes ownership of fd in every case (closed on failure).  Returns the
 * conn (one reference, held by its handle) or NULL with err_set().
 */
struct conn *conn_adopt(struct reactor *r, int fd, const struct conn_handler *h,
                        void *owner, int listener);

/**
 * Starts connecting to "host:port" (an IPv4 or IPv6 literal, or a name
 * resolved synchronously).  h->on_connect reports the result.  Returns the
 * conn, or NULL with err_set() when the address is unusable.
 */
struct conn *conn_connect(struct reactor *r, const char *addr,
                          const struct conn_handler *h, void *owner);

/**
 * Queues header bytes and body bytes (either may be empty) as output.
 * They are copied; the write happens after this loop iteration's
 * callbacks.  Returns 0, -RMQ_ECLOSED or -ENOMEM.
 */
int conn_send(struct conn *c, const void *hdr, size_t hlen,
              const void *body, size_t blen);

/**
 * Like conn_send, with the body given as slices (e.g. records in mapped
 * commit log files): each is copied once, straight into the output.
 */
int conn_send_iov(struct conn *c, const void *hdr, size_t hlen,
                  const struct iovec *iov, int n);

/**
 * Sends a request frame (already encoded, opaque inside it = `opaque`)
 * and waits for the response with that opaque, at most timeout_ms.
 * `call` must be malloc'ed and zeroed except done/arg; conn_call owns it
 * from here on and frees it after done() runs.  Returns 0, or a negative
 * error (-RMQ_ECLOSED, -ENOMEM, a libuv error): then done() is never
 * called and `call` is freed already.
 */
int conn_call(struct conn *c, struct call *call, int32_t opaque,
              const void *hdr, size_t hlen, const void *body, size_t blen,
              uint64_t timeout_ms);

/**
 * A connection with no socket: output accumulates in `out` and is never
 * written.  For measuring the dispatch path without the network.
 */
struct conn *conn_new_detached(struct reactor *r, const struct conn_handler *h,
                               void *owner, int listener);

/** Closes the connection (idempotent).  Pending calls fail with ECLOSED. */
void conn_close(struct conn *c, const char *reason);

void conn_ref(struct conn *c);
void conn_unref(struct conn *c);

/** Writes every dirty connection's output. Called by the reactor. */
void conn_flush_dirty(struct reactor *r);

/** Closes inbound connections idle for longer than r->idle_ms. */
void conn_sweep_idle(struct reactor *r);

#endif
