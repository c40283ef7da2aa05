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
 * Backpressure (accepted connections only; see struct reactor's limits).
 * A peer that sends requests but does not read its replies must slow
 * itself down, not grow the server.  So before each frame is cut from
 * `in` and dispatched, conn checks two things:
 *
 *   queued output   bytes of `out` plus what libuv has not yet handed to
 *                   the kernel of the write in flight (write_queue_size):
 *                   what this process holds for the peer.  Over
 *                   r->out_high, conn first tries a non-blocking write of
 *                   `out` (uv_try_write); still over, it stops.
 *   in-flight       requests dispatched to the owner and not answered
 *                   yet (held long-poll pulls included): at
 *                   r->max_inflight it stops.
 *
 * Stopping = uv_read_stop and no further frame dispatched, including
 * frames already read into `in` (they wait there).  Requests already
 * dispatched still answer, so their replies may push the output past the
 * mark: the mark gates reading, never a reply, and one reply larger than
 * the mark is sent whole.  Reading resumes once the output is at or below
 * r->out_low and in-flight is below the limit: on_written and
 * conn_request_done() queue the conn on r->resume, and the reactor's
 * check handle resumes it (dispatching the frames waiting in `in` first)
 * before it flushes output, so resuming never runs handlers from inside
 * another request's reply.  A connection whose queued output stays above
 * r->out_high for r->write_timeout_ms is closed with a warning naming the
 * peer (the idle sweep checks, about once a second).  While stopped, a
 * peer's close is noticed only when a write to it fails, by that timeout,
 * or by the idle sweep.  So what one connection makes this process hold
 * is bounded by out_high, plus the replies of the requests it has in
 * flight (at most max_inflight), plus one read chunk (or one frame of up
 * to frameMaxLength) in `in`.
 *
 * Fairness: in one loop turn (from one run of the reactor's check handle
 * to the next) an accepted connection dispatches at most
 * r->conn_frames_per_turn frames (serverChannelMaxFramesPerTurn, 16), and
 * all the accepted connections of one peer IP address on this loop
 * together at most r->peer_frames_per_turn
 * (serverPeerMaxFramesPerTurn, 64).  A connection past either waits
 * with its frames in `in`, reading stopped, on the resume queue; the
 * check handle gives it the next turn's share, those that had none this
 * turn first.  So one peer pipelining thousands of requests, or one
 * address opening hundreds of connections that each do, takes a bounded
 * share of each turn and another peer's request waits at most a turn's
 * worth of its frames, not all of them (docs/memory.md).
 *
 * The conf keys and their defaults (lua/rmq/conf.lua):
 *   writeBufferHighWaterMark / writeBufferLowWaterMark: 64 KiB / 32 KiB.
 *       RocketMQ's names (NettyServerConfig, 4.9.3+), whose default 0
 *       leaves Netty's 64 KiB / 32 KiB, counted like Netty's outbound
 *       buffer: bytes the kernel has not taken.  A client that reads at
 *       all keeps this near 0, the socket buffers (MBs on loopback) take
 *       the bursts; RocketMQ 5 likewise turns auto-read off on
 *       un-writable channels.
 *   serverChannelWriteTimeoutMillis: 30 s, the longest any RocketMQ
 *       client waits for a reply (consumerTimeoutMillisWhenSuspend):
 *       past it every reply still queued answers a request its client
 *       has given up on, while a slow but live reader (a GC pause, a
 *       thin link draining one 256 KiB pull reply) gets far below it.
 *   serverChannelMaxInFlight: 1024.  One client instance shares a
 *       connection per broker among all its consumers, with one pull per
 *       queue held up to 15-25 s, so the limit must sit well above the
 *       queues one client long-polls on one broker, or its sends and
 *       heartbeats would wait behind its own held pulls.  A handler that
 *       waits for a response from its own, paused, peer waits for it
 *       too: at that limit its call times out.
 *
 * Shared bodies (conn_send_shared): a large reply body encoded once and
 * shared among connections (core/rcbuf.h: GET_ALL_TOPIC_CONFIG, topic
 * lists) is not copied whole into `out`.  It waits in `segs`, holding a
 * reference, and is fed into `out` a chunk at a time (up to
 * writeBufferHighWaterMark, at least CONN_FEED_MIN) each time the write
 * before it completed: one 3 MB reply is a series of bounded writes
 * between which the worker serves its other connections, and what it
 * costs this connection is a chunk, not a copy of the body.  Replies
 * queued behind one wait in `segs` too, so the byte order holds; its
 * bytes count as queued output for the backpressure above.
 *
 * Memory: after a write completes, a write buffer that grew past
 * CONN_KEEP_BYTES is freed rather than kept for reuse, and when the
 * handle has closed every buffer is freed at once, even while request
 * tasks still hold a reference to the struct.  (Blocks that large are
 * mmapped by malloc and go back to the system when freed: RSS falls
 * without malloc_trim, see spec/integration/backpressure_spec.lua.)
 * Connections we open
 * (listener < 0) are never paused: a client that stopped reading
 * responses while the server stopped reading its requests would deadlock.
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
#include "core/membudget.h"
#include "core/queue.h"
#include "net/reactor.h"
#include "net/tls.h"

struct conn;
struct call;
struct rcbuf;
struct rmq_cmd;

/** A part of the output waiting behind a shared body (conn.h). */
struct conn_seg {
    struct conn_seg *next;
    struct rcbuf *b;           /* one reference held */
    size_t off;                /* bytes of b already fed into out */
};

/* A connection id: the owning reactor's slot above CONN_ID_SLOT_SHIFT
 * (16 bits, so any thread can route bytes to the connection: runtime/post.c),
 * a process-wide counter below it. */
#define CONN_ID_SLOT_SHIFT 48
#define CONN_ID_SEQ_MASK ((UINT64_C(1) << CONN_ID_SLOT_SHIFT) - 1)

struct conn_handler {
    /* A request frame (or a response nobody waits for: then the owner
     * should log and drop it).  `frame` (4 + L bytes) is valid only during
     * the call; the conn may be closed when it returns. */
    void (*on_frame)(struct conn *c, const uint8_t *frame, size_t len);
    /* The connection closed (after pending calls failed).  Optional. */
    void (*on_close)(struct conn *c);
    /* An outbound connect finished: status 0 or a libuv error.  Optional. */
    void (*on_connect)(struct conn *c, int status);
    /* Optional: a byte-stream protocol (gRPC's HTTP/2, src/grpc/) instead
     * of RemotingCommand frames.  Handed every byte read (after TLS), in
     * order; returns how many it consumed (the rest stays in `in` for the
     * next call).  Backpressure applies as to frames: no call while the
     * conn must wait.  on_frame is then unused. */
    size_t (*on_bytes)(struct conn *c, const uint8_t *p, size_t n);
    /* Optional, detached conns only: called once per loop iteration when
     * output was queued on it (conn_flush_dirty), so an in-process owner
     * can take the frames out of `out`. */
    void (*on_output)(struct conn *c);
    /* Optional, detached conns only: a native processor's reply
     * (proto/native.h native_reply) handed over as the command itself,
     * body included and never encoded, instead of a frame in `out` that
     * on_output would decode again (src/grpc/ takes the fields it needs).
     * The command and everything it points to are valid during the call. */
    void (*on_reply)(struct conn *c, const struct rmq_cmd *reply);
};

/* Fairness (above): one peer address on one loop, an entry of the
 * reactor's r->peers (core/peertab.h, which finds it by binary search:
 * peer-chosen addresses never make it slower than O(log n)). */
struct conn_peer {
    struct peertab_entry e;    /* first: the table's part */
    uint64_t turn;             /* the turn `frames` counts */
    uint32_t frames;           /* dispatched in that turn, all connections */
};

struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    struct reactor *r;
    const struct conn_handler *h;
    void *owner;               /* the handler's context */
    void *ext;                 /* a layer wrapping the owner (src/grpc/) */
    void *owner_memo;          /* the owner's per-connection state, one
                                * allocation freed with the conn (free();
                                * runtime/host.c: the typed decode's memo) */
    int owner_ref;             /* owner's bookkeeping (a Lua registry ref) */
    int listener;              /* index of the accepting listener; -1 outbound */
    struct qnode link;         /* in r->conns */
    struct qnode dirty_link;   /* in r->dirty while output waits */
    struct qnode resume_link;  /* in r->resume while a resume is due */
    struct qnode drain_link;   /* in r->draining while draining */
    struct buf in;             /* bytes read, not yet cut into frames */
    struct buf out;            /* frames queued for the next write */
    struct buf wbuf;           /* the frames of the write in flight */
    struct conn_seg *segs;     /* output waiting to be fed into out, in order */
    struct conn_seg **segs_last;
    size_t seg_bytes;          /* bytes of segs not fed yet */
    struct call **pending;     /* our outstanding requests, by opaque */
    size_t pending_cap;        /* buckets, a power of two (0 = none yet) */
    size_t pending_count;
    uint64_t last_active_ms;   /* uv_now() of the last read or write */
    /* The wall clock (ms) read while the frames being handed up are
     * handled, after all of them arrived: 0 at the start of each
     * dispatch, read by the first handler that needs it and kept for the
     * others (a send's store timestamp, store_msg.arrived_ms: one clock
     * read for a read's frames, not one per message, and none for a
     * dispatch that needs none). */
    int64_t dispatch_ms;
    uint64_t stray;            /* responses that matched no pending call */
    uint32_t replies_due;      /* requests sent to it with net.send_to that
                                * expect an answer (host_on_response) */
    uint64_t id;               /* unique in the process, never 0 */
    uint64_t over_since_ms;    /* uv_now() when queued output was first
                                * seen above r->out_high; 0 = it is not */
    uint32_t inflight;         /* requests dispatched, not answered yet */
    uint32_t holds;            /* conn_hold: no frame dispatched while > 0 */
    /* Fairness (above): the peer address's entry on this loop (accepted
     * connections; NULL: none, or no memory for one), and the frames this
     * connection dispatched in turn `turn` of its loop. */
    struct conn_peer *fair;
    uint64_t turn;
    uint32_t turn_frames;
    /* Accepted connections with r->budget: what it holds, counted per
     * connection, per peer address and in total (core/membudget.h).
     * Output is updated when a write starts and ends (not per reply). */
    struct mb_account mb;
    bool mb_open;
    int refs;
    bool connected;
    bool writing;
    bool closed;
    /* conn_close_drained: no more output taken, what the peer sends is
     * discarded; `shut`: our side's FIN is sent (or on its way). */
    bool draining;
    bool shut;
    uint64_t drain_due_ms;     /* uv_now() by which it closes anyway */
    uv_shutdown_t shutdown_req;
    bool paused;               /* backpressure: reading stopped */
    bool detached;             /* no socket (conn_new_detached) */
    bool gated;                /* output waits for r->gate (reactor.h) */
    int64_t gate_ticket;       /* the earliest ticket of the gated output */
    /* Detached: the socket conn that carries this one's replies (a gRPC
     * connection's shadow, src/grpc/service.c), whose output is gated in
     * its stead; NULL: none.  Whoever sets it clears it before that
     * conn goes. */
    struct conn *gate_to;
    /* TLS (tls.h).  An accepted connection starts undecided (`sniff`):
     * its first byte says TLS or plaintext, and r->tls_mode whether that
     * is served.  With a session, `in` and `out` hold plaintext and
     * tls_out the ciphertext waiting for the socket. */
    bool sniff;
    bool tls_reported;         /* outbound: on_connect told (after the handshake) */
    struct tls_session *tls;   /* NULL: plaintext */
    struct buf tls_out;
    uint64_t tls_since_ms;     /* uv_now() at accept / TCP connect: the
                                * handshake timeout counts from it */
    char peer[64];             /* "ip:port" of the other side */
    char close_reason[160];
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

/** "ip:port" of a TCP handle's peer ("?:0" if unknown) into out. */
void conn_peer_name(const uv_tcp_t *tcp, char *out, size_t n);

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
 * conn_connect with TLS on ctx (NULL: plaintext); conn_connect uses
 * r->tls_client.  With TLS, h->on_connect reports once the handshake has
 * completed, or UV_EPROTO with the reason in close_reason when it failed;
 * what is sent before waits until then.
 */
struct conn *conn_connect_tls(struct reactor *r, const char *addr,
                              const struct conn_handler *h, void *owner,
                              struct tls_ctx *ctx);

/** True when c carries TLS and its handshake has completed. */
bool conn_tls_ready(const struct conn *c);

/**
 * Queues header bytes and body bytes (either may be empty) as output.
 * They are copied; the write happens after this loop iteration's
 * callbacks.  Returns 0, -RMQ_ECLOSED or -ENOMEM.
 */
int conn_send(struct conn *c, const void *hdr, size_t hlen,
              const void *body, size_t blen);

/**
 * The output queued so far must not reach the socket before the
 * reactor's gate passes `ticket` (reactor.h: a reply to a staged put).
 * A detached conn with gate_to gates that conn's output: its replies
 * were written there.
 */
static inline void
conn_gate_output(struct conn *c, int64_t ticket)
{
    if (c->detached && c->gate_to != NULL)
        c = c->gate_to;
    if (!c->gated || ticket < c->gate_ticket)
        c->gate_ticket = ticket;
    c->gated = true;
}

/**
 * Room for `len` bytes at the end of the output, for a caller that fills
 * them itself (a pull's records read straight from the commit log into
 * the reply); conn_out_commit(c, len) queues them.  NULL when output is
 * waiting behind a shared body (segs: use conn_send or conn_send_iov,
 * which keep the order), when closed, or out of memory.
 */
uint8_t *conn_out_reserve(struct conn *c, size_t len);
void conn_out_commit(struct conn *c, size_t len);

/** The most iovecs conn_send_now takes. */
#define CONN_SEND_NOW_MAX 256

/**
 * Whether conn_send_now can send on c now (it is connected, plain TCP,
 * no write in flight, no shared body waiting, and its output not held
 * by the gate (reactor.h): a gated output waits for the loop's one
 * commit, and sending now would commit early).  Asked before building
 * what it would send.
 */
bool conn_can_send_now(const struct conn *c);

/**
 * Sends hdr and then the n buffers of iov now, behind everything queued
 * so far (one sendmsg(2) for all of it): for bytes that are not to stay
 * valid until the next flush, so they go to the kernel without a copy
 * into the output first (a pull's records straight from the window they
 * were read into).  Whatever the kernel does not take now is copied into
 * the output, in order.  Returns 0; -EAGAIN, having done nothing, when
 * this connection cannot write now (TLS or not yet known, not connected,
 * a write in flight, a shared body waiting, its output gated (see
 * conn_can_send_now), n over CONN_SEND_NOW_MAX): then queue as usual
 * (conn_send...); -ENOMEM when the rest could not be queued (the
 * connection is closed: its stream would be cut).
 */
int conn_send_now(struct conn *c, const void *hdr, size_t hlen, const struct iovec *iov, int n);

/**
 * Sends up to `len` bytes of file `fd` from `off` straight to the socket
 * with sendfile(2), behind everything queued so far, which is handed to
 * the kernel first (a pull's large records go from the commit log to the
 * socket with no copy in this process; the kernel holds the pages it
 * sends, so the caller may drop its pins as soon as this returns).
 * Returns the bytes of the file the kernel took now (0..len: 0 when the
 * socket buffer is full), or a negative error when this connection
 * cannot take a file now: TLS (or not yet known), no socket, not
 * connected, a write in flight, a shared body waiting, the queued output
 * not all taken, or its gate (reactor.h) not passed yet.  Whatever it
 * did not take, the caller queues as bytes (conn_send...), in order.
 */
ssize_t conn_sendfile(struct conn *c, int fd, int64_t off, size_t len);

/**
 * Like conn_send, with the body given as slices (e.g. records in mapped
 * commit log files): each is copied once, straight into the output.
 */
int conn_send_iov(struct conn *c, const void *hdr, size_t hlen,
                  const struct iovec *iov, int n);

/**
 * Like conn_send, with a shared read-only body: a reference is taken and
 * the body is fed into the output in bounded chunks as earlier writes
 * complete (see "Shared bodies" above) instead of copied whole now.  A
 * body of at most CONN_FEED_MIN bytes is copied as conn_send does.
 */
int conn_send_shared(struct conn *c, const void *hdr, size_t hlen,
                     struct rcbuf *body);

/** The smallest chunk a shared body is fed in (and the copy threshold). */
#define CONN_FEED_MIN (64 * 1024)

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

/** Closes the connection (idempotent).  Pending calls fail with ECLOSED.
 * What is queued and not yet written is dropped: after a final answer
 * use conn_close_drained. */
void conn_close(struct conn *c, const char *reason);

/**
 * Closes c once the output queued so far has reached the peer, so that a
 * final answer (an HTTP/2 GOAWAY with its error code and last stream id,
 * an error reply) is not dropped with the socket, as conn_close drops it.
 * From this call on c takes no more output (conn_send and the others
 * fail as on a closed conn, conn_out_reserve gives NULL: the bytes held
 * for the peer are bounded by what was queued), dispatches nothing more,
 * and what the peer still sends is read and discarded (reading is
 * resumed if backpressure had paused it): bytes left unread at the close
 * would make the kernel answer with a TCP RST, and the peer's kernel may
 * then drop our answer before its application has read it.  Once the
 * output is written our side is shut (FIN); c is closed (conn_close with
 * `reason`) when the peer closes its side, or r->close_linger_ms after
 * this call whatever is left (serverChannelCloseLingerMillis: a peer
 * that neither reads nor closes holds nothing longer), or at once when
 * close_linger_ms is 0 or c has no socket.  Idempotent; conn_close ends
 * it early.
 */
void conn_close_drained(struct conn *c, const char *reason);

/** False once c is closed or draining (conn_close_drained): output
 * would be refused. */
static inline bool
conn_writable(const struct conn *c)
{
    return !c->closed && !c->draining;
}

void conn_ref(struct conn *c);
void conn_unref(struct conn *c);

/**
 * The owner dispatched a request from c (conn_request_begin) or finished
 * one (conn_request_done: its reply, if any, is queued already).  They
 * keep c->inflight, which may pause and resume reading (see above).
 */
static inline void conn_request_begin(struct conn *c) { c->inflight++; }
void conn_request_done(struct conn *c);

/**
 * Stops dispatching c's frames until as many conn_release() calls: a
 * request the owner holds that must be answered before the peer's next
 * one runs (a send waiting for its new queue: the sends after it on the
 * connection stay behind it, in order).  Reading stops as for the
 * in-flight limit (above).
 */
static inline void conn_hold(struct conn *c) { c->holds++; }
void conn_release(struct conn *c);

/** Bytes queued for the peer and not yet in the kernel: with TLS, the
 * plaintext not yet encrypted plus the ciphertext not yet written (the
 * two differ by the records' overhead, under 1%). */
static inline size_t
conn_queued(const struct conn *c)
{
    return buf_len(&c->out) + buf_len(&c->tls_out) + c->tcp.write_queue_size +
           c->seg_bytes;
}

/** Resumes reading on connections queued on r->resume. Called by the
 * reactor before conn_flush_dirty. */
void conn_resume_due(struct reactor *r);

/** Writes every dirty connection's output. Called by the reactor. */
void conn_flush_dirty(struct reactor *r);

/** Closes inbound connections idle for longer than r->idle_ms, those
 * whose queued output stayed above r->out_high for r->write_timeout_ms,
 * and, when TLS is offered, those that sent nothing or did not finish
 * their handshake within r->tls_handshake_ms of connecting. */
void conn_sweep_idle(struct reactor *r);

#endif
