/*
 * reactor: one libuv loop and what every connection on it shares: the
 * list of connections (for the idle sweep and for closing them all at
 * shutdown), the output flush that coalesces a loop iteration's replies
 * into one write per connection, and the opaque counter for requests we
 * originate.  One reactor per thread; nothing here is locked.
 *
 * MT: a reactor and its connections belong to the thread running its loop.
 */
#ifndef RMQ_REACTOR_H
#define RMQ_REACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/peertab.h"
#include "core/queue.h"

struct membudget;

/**
 * A reply gate: output marked with conn_gate_output(c, ticket) leaves
 * for the socket only after pass(g, ticket) answered 0, just before the
 * write.  The broker's send path stages its appends and answers at once;
 * its gate writes the staged appends to the commit log file
 * (store_commit), so a reply never reaches a producer before its message
 * reaches the page cache: the first pass of a flush commits every put of
 * the loop pass, the others find nothing left to write.  The ticket says
 * what the output depends on (for the store: the failed-commit count
 * before the put); pass() nonzero means that did not happen, and the
 * connection is closed instead (its replies claim what is not so).
 */
struct reactor_gate {
    int (*pass)(struct reactor_gate *g, int64_t ticket);
};

/* The idle sweep runs every quarter of the shortest of the idle, write
 * and TLS handshake timeouts, and at most this often: a timeout is late
 * by at most a quarter of it or a second.  (The close linger is not among
 * them: draining connections have their own timer.) */
#define REACTOR_SWEEP_MAX_MS 1000

struct reactor {
    uv_loop_t loop;
    uv_check_t flush_check;   /* writes dirty connections after each poll */
    uv_idle_t flush_idle;     /* keeps poll from blocking while any are dirty */
    uv_timer_t sweep;         /* idle-connection sweep (REACTOR_SWEEP_MAX_MS) */
    /* Connections draining (conn_close_drained), oldest first: they all
     * linger close_linger_ms, so that is their drain_due_ms order; the
     * linger timer closes each at its due time, without a sweep. */
    struct qnode draining;
    uv_timer_t linger;
    /* The loop's stretches without reading (busy_ns, for the
     * rmq_worker_busy_max_seconds gauge): the prepare handle stamps the
     * loop's entry into its poll; libuv's loop time (uv_now) is the
     * poll's return until the iteration's check handle, which keeps it. */
    uv_prepare_t busy_prepare;
    int64_t poll_out_ns;      /* the last poll returned (ms precision); -1: none yet */
    int64_t busy_ns;          /* the stretch before the last poll: previous return to its start */
    int64_t busy_max_ns;      /* the longest since reactor_take_busy_max */
    struct qnode conns;       /* every open connection */
    struct qnode dirty;       /* connections with unsent output */
    struct qnode resume;      /* paused connections that may read again */
    uint64_t idle_ms;         /* close inbound connections idle this long; 0 = never */
    /* Backpressure on accepted connections (conn.h); 0 = no limit.  Set
     * by reactor_set_limits; a new reactor has none. */
    size_t out_high;          /* stop reading above this much queued output */
    size_t out_low;           /* resume at or below this */
    uint64_t write_timeout_ms;/* close when above out_high this long */
    uint64_t close_linger_ms; /* conn_close_drained's bound; 0 = close at once */
    uint32_t max_inflight;    /* stop reading at this many requests in flight */
    /* Fairness (conn.h): frames one accepted connection, and all the
     * accepted connections of one peer address on this loop, dispatch in
     * one loop turn; 0 = no limit.  `turn` counts the turns (the check
     * handle starts one).  `peers`: this loop's peer addresses with an
     * accepted connection open (entries are conn.c's struct conn_peer);
     * resume_served: connections that
     * had frames this turn and wait for the next, behind those that had
     * none (r->resume). */
    uint32_t conn_frames_per_turn;
    uint32_t peer_frames_per_turn;
    uint64_t turn;
    struct peertab peers;
    struct qnode resume_served;
    size_t max_frame;         /* frame limit for every connection */
    /* The process's memory budget (core/membudget.h): accepted
     * connections' requests and output count against it.  NULL: none. */
    struct membudget *budget;
    /* TLS (tls.h, conn.h).  Set by reactor_set_tls; a new reactor serves
     * plaintext only and dials plaintext. */
    struct tls_ctx *tls_server;  /* accepted connections; NULL: no certificate */
    int tls_mode;             /* enum tls_mode of accepted connections */
    uint64_t tls_handshake_ms;/* close an accepted handshake unfinished by then */
    struct tls_ctx *tls_client;  /* outbound connections; NULL: plaintext */
    struct tls_ctx *tls_plain_client; /* TLS without verification or
                                       * certificate, made when first asked
                                       * for (net.connect's tls = true) */
    uint8_t *tls_rbuf;        /* ciphertext read buffer, shared: one read at a time */
    int32_t next_opaque;      /* for requests this side originates */
    size_t nconns;
    int slot;                 /* the host's slot (runtime/post.h): in conn ids */
    struct reactor_gate *gate;/* NULL: none (conn_gate_output passes) */
    /* Batched sends (net/sendbatch.h, serverBatchWriteEnable): made at
     * the first flush with two connections to write; batch_off: turned
     * off (a new reactor: its owner turns it on), or io_uring refused;
     * batch_retry_ms: no ring before this loop time (a ring refused for
     * want of descriptors or memory is tried again). */
    struct sendbatch *batch;
    bool batch_off;
    uint64_t batch_retry_ms;
    bool in_loop;             /* inside uv_run: blocking waits are refused */
};

/**
 * How long a frame handled at `now` (clock_mono_ns(), inside a callback
 * of the loop's poll phase) has waited at least: the time since this
 * iteration's poll returned its connection as readable, i.e. the frames
 * handled before it in this iteration, on any connection.  A lower
 * bound: its bytes may have arrived during the stretch before that poll
 * (busy_ns), but the kernel does not say when, and charging the whole
 * stretch would refuse a client's next request after any long one.  No
 * clock read: the poll's return is libuv's loop time (ms, the monotonic
 * clock).
 */
static inline int64_t
reactor_wait_ns(const struct reactor *r, int64_t now)
{
    int64_t out = (int64_t)uv_now(&r->loop) * 1000000;
    return now > out ? now - out : 0;
}

/** The longest busy stretch since the last call (for a gauge). */
static inline int64_t
reactor_take_busy_max(struct reactor *r)
{
    int64_t v = r->busy_max_ns;
    r->busy_max_ns = 0;
    return v;
}

/** Initialises the loop and the shared handles. Returns 0 or -errno. */
int reactor_init(struct reactor *r, size_t max_frame, uint64_t idle_ms);

/** The backpressure limits of accepted connections (see conn.h). */
struct reactor_limits {
    size_t out_high, out_low;
    uint64_t write_timeout_ms;
    uint64_t close_linger_ms;  /* serverChannelCloseLingerMillis (conn_close_drained) */
    uint32_t max_inflight;
    /* serverChannelMaxFramesPerTurn / serverPeerMaxFramesPerTurn (conn.h) */
    uint32_t conn_frames_per_turn, peer_frames_per_turn;
    bool batch_write;          /* serverBatchWriteEnable (net/sendbatch.h) */
};

/** Sets the limits (low is clamped to high) and restarts the sweep timer
 * so that it also runs for the write timeout.  Returns 0 or a libuv
 * error. */
int reactor_set_limits(struct reactor *r, const struct reactor_limits *lim);

struct tls_ctx;

/** The TLS of accepted connections: ctx (referenced; NULL = none), the
 * mode and the handshake timeout.  Restarts the sweep. 0 or libuv error. */
int reactor_set_tls_server(struct reactor *r, struct tls_ctx *ctx, int mode,
                           uint64_t handshake_ms);

/** The TLS of connections opened from now on (referenced; NULL = none). */
void reactor_set_tls_client(struct reactor *r, struct tls_ctx *ctx);

/**
 * Closes every connection and handle and runs the loop until they are
 * gone, then closes the loop.  Returns 0 or -errno (handles leaked).
 */
int reactor_close(struct reactor *r);

/** Runs the loop (UV_RUN_DEFAULT / ONCE / NOWAIT) with in_loop set. */
int reactor_run(struct reactor *r, uv_run_mode mode);

/** Closes every open connection (reason is logged at debug level). */
void reactor_close_conns(struct reactor *r, const char *reason);

/** True while any connection has output queued or a write in flight. */
bool reactor_output_pending(struct reactor *r);

/** Makes sure dirty connections are written this loop iteration. */
void reactor_want_flush(struct reactor *r);

/** A fresh opaque for a request we send; never negative. */
int32_t reactor_opaque(struct reactor *r);

#endif
