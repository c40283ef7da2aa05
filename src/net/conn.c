/*
 * conn: see conn.h.
 *
 * Reading: libuv reads into the tail of `in`; every complete frame is cut
 * and handed to on_frame (requests) or to the matching call (responses),
 * then consumed.  A frame that breaks the limits (rmq_frame_peek) closes
 * this connection only, with a warning naming the peer, because after a
 * bad length word the byte stream cannot be resynchronised.
 *
 * Writing: conn_send() appends to `out`; the reactor's check handle swaps
 * `out` and `wbuf` and writes `wbuf` in one uv_write, so frames queued
 * while a write is in flight go out together in the next one.
 *
 * Backpressure (conn.h): dispatch_frames() asks must_wait() before each
 * frame, a few integer compares unless the output is over the mark; the
 * sends themselves are not checked.
 *
 * TLS (tls.h): a connection with a session reads ciphertext into the
 * reactor's tls_rbuf and hands it to the session, which appends the
 * plaintext to `in`, so the frame cutting above it is unchanged.  On the
 * way out, `out` stays plaintext until the flush seals it into tls_out,
 * which is what gets written (wbuf then holds ciphertext).  Handshake
 * bytes go to tls_out as they are produced.  An accepted connection's
 * first read decides (sniff_first_read): 0x16 starts a server session,
 * anything else is plaintext, each refused where tls.server.mode says.
 */
#include "net/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "core/rcbuf.h"
#include "net/codec.h"
#include "net/sendbatch.h"

/* How much to ask libuv to read into at a time. */
#define CONN_READ_CHUNK 65536

/* A write buffer larger than this is freed once written instead of kept
 * for the next write: one burst must not pin its peak for the life of
 * the connection. */
#define CONN_KEEP_BYTES (1024 * 1024)

static void on_close(uv_handle_t *h);
static void pending_fail_all(struct conn *c);
static void mark_dirty(struct conn *c);
static int tls_seal_out(struct conn *c);

/* Connection ids: unique across the process's threads. */
static _Atomic uint64_t next_conn_id = 1;

static struct conn *
conn_new(struct reactor *r, const struct conn_handler *h, void *owner,
         int listener)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        err_set("out of memory for a connection");
        return NULL;
    }
    c->r = r;
    c->h = h;
    c->owner = owner;
    c->owner_ref = -1;
    c->listener = listener;
    c->refs = 1;
    c->id = ((uint64_t)r->slot << CONN_ID_SLOT_SHIFT) |
            (atomic_fetch_add(&next_conn_id, 1) & CONN_ID_SEQ_MASK);
    q_init(&c->link);
    q_init(&c->dirty_link);
    q_init(&c->resume_link);
    q_init(&c->drain_link);
    buf_init(&c->in);
    buf_init(&c->out);
    buf_init(&c->wbuf);
    buf_init(&c->tls_out);
    c->segs_last = &c->segs;
    int rc = uv_tcp_init(&r->loop, &c->tcp);
    if (rc != 0) {
        err_set("uv_tcp_init: %s", uv_strerror(rc));
        free(c);
        return NULL;
    }
    c->tcp.data = c;
    q_insert_tail(&r->conns, &c->link);
    r->nconns++;
    c->last_active_ms = uv_now(&r->loop);
    return c;
}

struct conn *
conn_new_detached(struct reactor *r, const struct conn_handler *h,
                  void *owner, int listener)
{
    struct conn *c = conn_new(r, h, owner, listener);
    if (c == NULL)
        return NULL;
    /* conn_new initialised a TCP handle; it never gets a socket. */
    c->detached = true;
    /* A plausible peer: handlers may parse it (bornHost). */
    snprintf(c->peer, sizeof(c->peer), "127.0.0.1:0");
    return c;
}

void
conn_peer_name(const uv_tcp_t *tcp, char *out, size_t n)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof(ip));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof(ip));
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(out, n, "%s:%d", ip, port);
}

static void
format_peer(struct conn *c)
{
    conn_peer_name(&c->tcp, c->peer, sizeof(c->peer));
}

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *out)
{
    (void)hint;
    struct conn *c = h->data;
    if (c->tls != NULL || c->sniff || c->draining) {
        /* Ciphertext (or the first bytes, still undecided, or bytes a
         * draining conn drops): read into the reactor's buffer; the
         * session decides what reaches `in`. */
        struct reactor *r = c->r;
        if (r->tls_rbuf == NULL)
            r->tls_rbuf = malloc(CONN_READ_CHUNK);
        out->base = (char *)r->tls_rbuf;
        out->len = r->tls_rbuf != NULL ? CONN_READ_CHUNK : 0;
        return;
    }
    size_t want = CONN_READ_CHUNK;
    /* A frame larger than the chunk: make room for all of it at once. */
    if (c->h->on_bytes == NULL && buf_len(&c->in) >= 4) {
        size_t need = 4 + (size_t)be32_get(buf_head(&c->in));
        if (need <= c->r->max_frame && need > buf_len(&c->in) &&
            need - buf_len(&c->in) > want)
            want = need - buf_len(&c->in);
    }
    if (buf_reserve(&c->in, want) != 0) {
        out->base = NULL;
        out->len = 0;  /* libuv reports UV_ENOBUFS; we close */
        return;
    }
    out->base = (char *)buf_tail(&c->in);
    out->len = buf_avail(&c->in);
}

static void
call_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Unlinks `call` from its connection's table; the caller finishes it. */
static void
pending_unlink(struct conn *c, struct call *call)
{
    if (!call->linked)
        return;
    size_t b = (uint32_t)call->opaque & (c->pending_cap - 1);
    struct call **pp = &c->pending[b];
    while (*pp != NULL && *pp != call)
        pp = &(*pp)->next;
    if (*pp == call)
        *pp = call->next;
    call->linked = false;
    c->pending_count--;
}

static void
call_finish(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct conn *c = call->conn;
    pending_unlink(c, call);
    uv_timer_stop(&call->timer);
    call->done(call, status, frame, len);
    call->timer.data = call;
    uv_close((uv_handle_t *)&call->timer, call_timer_closed);
    conn_unref(c);
}

static struct call *
pending_find(struct conn *c, int32_t opaque)
{
    if (c->pending_cap == 0)
        return NULL;
    struct call *call = c->pending[(uint32_t)opaque & (c->pending_cap - 1)];
    while (call != NULL && call->opaque != opaque)
        call = call->next;
    return call;
}

static void
handle_frame(struct conn *c, const uint8_t *frame, size_t len)
{
    /* Responses carry flag bit 0.  Its position differs by serialize
     * type, so decode the header cheaply through the codec's peek of the
     * flag: a full decode is needed anyway for requests (owner) and for
     * the waiter (which decodes the frame it is handed). */
    uint32_t hword = be32_get(frame + 4);
    const uint8_t *hdr = frame + 8;
    size_t hlen = hword & 0xFFFFFF;
    int32_t opaque = 0;
    bool response = false;
    if ((hword >> 24) == RMQ_SER_ROCKETMQ) {
        if (hlen >= 13) {
            opaque = (int32_t)be32_get(hdr + 5);
            response = (be32_get(hdr + 9) & RMQ_RPC_RESPONSE) != 0;
        }
    } else if (c->pending_count > 0) {
        /* JSON: only worth decoding when we have calls outstanding. */
        struct rmq_cmd cmd;
        uint8_t small[4096];
        size_t need = rmq_cmd_arena_size(hlen);
        uint8_t *mem = need <= sizeof(small) ? small : malloc(need);
        if (mem != NULL) {
            struct rmq_arena a = { mem, need, 0 };
            if (rmq_cmd_decode(&cmd, frame, len, &a) == 0) {
                opaque = cmd.opaque;
                response = (cmd.flag & RMQ_RPC_RESPONSE) != 0;
            }
            if (mem != small)
                free(mem);
        }
    }
    if (response) {
        struct call *call = pending_find(c, opaque);
        if (call != NULL) {
            call_finish(call, 0, frame, len);
            return;
        }
    }
    c->h->on_frame(c, frame, len);
}

/* {{{ Backpressure (conn.h) */

/* The gate (reactor.h) for c's output: true when it may be written.  A
 * failed pass stays failed for this output (its ticket does not move). */
static bool
gate_open(struct conn *c)
{
    if (!c->gated)
        return true;
    struct reactor_gate *g = c->r->gate;
    if (g != NULL && g->pass(g, c->gate_ticket) != 0)
        return false;
    c->gated = false;
    return true;
}

/* Hands as much of `out` to the kernel as it takes now, without waiting.
 * Only when nothing of an earlier write is still waiting in libuv, so the
 * byte order holds (uv_try_write refuses otherwise).  Gated output waits
 * for the next flush if the gate does not pass (the flush closes it). */
static void
try_write_out(struct conn *c)
{
    if (!c->connected || c->closed || c->detached || !gate_open(c))
        return;
    if (c->tls != NULL && tls_seal_out(c) != 0)
        return;
    struct buf *wire = c->tls != NULL ? &c->tls_out : &c->out;
    if (!c->connected || c->closed || c->detached || buf_len(wire) == 0 ||
        c->tcp.write_queue_size > 0)
        return;
    uv_buf_t b = uv_buf_init((char *)buf_head(wire), (unsigned)buf_len(wire));
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n > 0) {
        buf_consume(wire, (size_t)n);
        c->last_active_ms = uv_now(&c->r->loop);
    }
    /* Errors: the regular write reports them. */
}

/* Output over writeBufferHighWaterMark even after handing the kernel what
 * it takes now; then over_since_ms is set (serverChannelWriteTimeoutMillis
 * counts from it). */
static bool
over_high(struct conn *c)
{
    struct reactor *r = c->r;
    if (r->out_high == 0 || conn_queued(c) <= r->out_high)
        return false;
    try_write_out(c);
    if (conn_queued(c) <= r->out_high)
        return false;
    if (c->over_since_ms == 0)
        c->over_since_ms = uv_now(&r->loop);
    return true;
}

/* True when c must not dispatch another frame now. */
static bool
must_wait(struct conn *c)
{
    struct reactor *r = c->r;
    if (c->listener < 0 || c->detached)
        return false;
    if (c->holds > 0)
        return true;
    if (r->max_inflight > 0 && c->inflight >= r->max_inflight)
        return true;
    return over_high(c);
}

static void
pause_reading(struct conn *c)
{
    c->paused = true;
    (void)uv_read_stop((uv_stream_t *)&c->tcp);
    log_debug("connection from %s paused: %zu bytes of output queued, "
              "%u requests in flight", c->peer, conn_queued(c),
              (unsigned)c->inflight);
}

/* Queues a paused conn for conn_resume_due once both limits allow. */
static void
maybe_resume(struct conn *c)
{
    struct reactor *r = c->r;
    if (!c->paused || c->closed || q_linked(&c->resume_link))
        return;
    if (c->holds > 0)
        return;
    if (r->max_inflight > 0 && c->inflight >= r->max_inflight)
        return;
    if (r->out_high > 0 && conn_queued(c) > r->out_low)
        return;
    q_insert_tail(&r->resume, &c->resume_link);
    reactor_want_flush(r);
}

void
conn_release(struct conn *c)
{
    if (c->holds > 0)
        c->holds--;
    if (c->paused)
        maybe_resume(c);
}

void
conn_request_done(struct conn *c)
{
    if (c->inflight > 0)
        c->inflight--;
    if (c->paused)
        maybe_resume(c);
}

/* }}} */

/* {{{ Fairness between peers (conn.h)
 *
 * libuv reads a readable socket up to 32 times 64 KiB in one callback
 * run, so a peer that pipelines thousands of requests (a held-pull flood)
 * would keep the loop on its frames for hundreds of ms while every other
 * connection of the worker waits.  A cap per connection alone is not
 * enough: 200 connections of one flooding address x 16 frames still made
 * a turn of 3,200 frames (tens of ms) that another client's send waited
 * behind.  So the frames of one turn are also counted per peer address,
 * over all its connections on this loop. */

/* An accepted connection joins its address's entry (made when it is the
 * first).  Out of memory, it goes without: only its own cap applies. */
static void
fair_open(struct conn *c)
{
    struct reactor *r = c->r;
    if (c->fair != NULL || c->listener < 0 || c->detached)
        return;
    struct peertab_entry *e = peertab_join(&r->peers, c->peer);
    if (e == NULL)
        return;
    c->fair = container_of(e, struct conn_peer, e);
    if (e->refs == 1)
        c->fair->turn = r->turn;
}

/* The connection's handle closed: it leaves its address's entry, the
 * last one frees it. */
static void
fair_close(struct conn *c)
{
    struct conn_peer *p = c->fair;
    if (p == NULL)
        return;
    c->fair = NULL;
    peertab_leave(&c->r->peers, &p->e);
}

/* True when c may dispatch one more frame in this turn, and counts it
 * for c and its address; false when either had its share. */
static bool
fair_take(struct conn *c)
{
    struct reactor *r = c->r;
    if (c->listener < 0 || c->detached)
        return true;
    if (c->turn != r->turn) {
        c->turn = r->turn;
        c->turn_frames = 0;
    }
    if (r->conn_frames_per_turn > 0 && c->turn_frames >= r->conn_frames_per_turn)
        return false;
    struct conn_peer *p = c->fair;
    if (p != NULL && r->peer_frames_per_turn > 0) {
        if (p->turn != r->turn) {
            p->turn = r->turn;
            p->frames = 0;
        }
        if (p->frames >= r->peer_frames_per_turn)
            return false;
        p->frames++;
    }
    c->turn_frames++;
    return true;
}

/* c had its share of this turn: reading stops and it waits for the next
 * turn's share (conn_resume_due); one that had none this turn waits
 * ahead of those that had some, so an address's connections take its
 * share in rotation. */
static void
fair_defer(struct conn *c)
{
    struct reactor *r = c->r;
    c->paused = true;
    (void)uv_read_stop((uv_stream_t *)&c->tcp);
    if (!q_linked(&c->resume_link))
        q_insert_tail(c->turn == r->turn && c->turn_frames > 0 ? &r->resume_served : &r->resume,
                      &c->resume_link);
    reactor_want_flush(r);
}

/* Moves every node of `from` to the tail of `to`. */
static void
q_splice_tail(struct qnode *to, struct qnode *from)
{
    if (q_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    q_init(from);
}

/* }}} */

/* Cuts and dispatches every complete frame in `in`, unless backpressure
 * says wait (then reading stops and the rest stays in `in`), or the
 * connection had its turn (then it continues next turn). */
static void
dispatch_frames(struct conn *c)
{
    if (c->draining)
        return;   /* conn_close_drained: nothing more is handed up */
    conn_ref(c);
    if (c->h->on_bytes != NULL) {
        if (!c->closed && buf_len(&c->in) > 0) {
            if (must_wait(c)) {
                pause_reading(c);
            } else {
                size_t used = c->h->on_bytes(c, buf_head(&c->in), buf_len(&c->in));
                if (!c->closed)
                    buf_consume(&c->in, used);
            }
        }
        conn_unref(c);
        return;
    }
    c->dispatch_ms = 0;   /* (conn.h) */
    while (!c->closed) {
        size_t flen = 0;
        int rc = rmq_frame_peek(buf_head(&c->in), buf_len(&c->in),
                                c->r->max_frame, &flen);
        if (rc == 0)
            break;
        if (rc < 0) {
            log_warn("closing connection from %s: %s", c->peer, err_msg());
            conn_close(c, "bad frame");
            break;
        }
        if (must_wait(c)) {
            pause_reading(c);
            break;
        }
        if (!fair_take(c)) {
            fair_defer(c);
            break;
        }
        handle_frame(c, buf_head(&c->in), flen);
        buf_consume(&c->in, flen);
    }
    if (!c->closed && buf_len(&c->in) == 0 && c->in.cap > 4 * CONN_READ_CHUNK)
        buf_free(&c->in);  /* give back the room a large frame needed */
    conn_unref(c);
}

/* {{{ TLS */

bool
conn_tls_ready(const struct conn *c)
{
    return c->tls != NULL && tls_session_ready(c->tls);
}

/* Best effort: hands tls_out (a final alert) to the kernel before a close,
 * so the peer learns why. */
static void
tls_flush_alert(struct conn *c)
{
    if (c->writing || c->tcp.write_queue_size > 0 || buf_len(&c->tls_out) == 0)
        return;
    uv_buf_t b = uv_buf_init((char *)buf_head(&c->tls_out),
                             (unsigned)buf_len(&c->tls_out));
    (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
}

/* An outbound connection's handshake ended: tell the owner now (its
 * connect waited for this).  status 0, or UV_EPROTO and why it failed. */
static void
tls_report_connect(struct conn *c, int status, const char *why)
{
    if (c->listener >= 0 || c->tls_reported)
        return;
    c->tls_reported = true;
    if (status != 0)
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", why);
    if (c->h->on_connect != NULL)
        c->h->on_connect(c, status);
}

static void
tls_failed(struct conn *c)
{
    char why[160];
    snprintf(why, sizeof(why), "%s", err_msg());
    tls_flush_alert(c);
    if (c->listener >= 0)
        log_warn("closing connection from %s: %s", c->peer, why);
    else
        log_debug("connection to %s: %s", c->peer, why);
    conn_ref(c);
    tls_report_connect(c, UV_EPROTO, why);
    conn_close(c, why);
    conn_unref(c);
}

/* Ciphertext read: plaintext into `in`, replies into tls_out. */
static void
tls_read(struct conn *c, const uint8_t *p, size_t n)
{
    bool was_ready = tls_session_ready(c->tls);
    int rc = tls_session_input(c->tls, p, n, &c->in, &c->tls_out);
    if (rc == 1 && was_ready) {
        conn_close(c, "closed by peer");
        return;
    }
    if (rc != 0) {
        tls_failed(c);
        return;
    }
    if (buf_len(&c->tls_out) > 0) {
        mark_dirty(c);
        /* Output TLS makes itself (KeyUpdate answers, no_renegotiation
         * alerts) needs no frame: a peer that never reads would grow
         * tls_out without bound if only dispatch_frames() paused. */
        if (c->listener >= 0 && !c->detached && !c->paused && over_high(c))
            pause_reading(c);
    }
    if (!was_ready && tls_session_ready(c->tls)) {
        char what[96];
        tls_session_describe(c->tls, what, sizeof(what));
        log_debug("connection %s: TLS established (%s)", c->peer, what);
        if (buf_len(&c->out) > 0)
            mark_dirty(c);  /* requests queued while the handshake ran */
        conn_ref(c);
        tls_report_connect(c, 0, NULL);
        bool gone = c->closed;
        conn_unref(c);
        if (gone)
            return;
    }
    dispatch_frames(c);
}

/* An accepted connection's first bytes (in the reactor's buffer): TLS or
 * plaintext, as 4.9.8's HandshakeHandler tells them apart, and whether
 * this port serves that. */
static void
sniff_first_read(struct conn *c, const uint8_t *p, size_t n)
{
    struct reactor *r = c->r;
    c->sniff = false;
    if (p[0] == TLS_HANDSHAKE_BYTE) {
        if (r->tls_mode == TLS_MODE_DISABLED || r->tls_server == NULL) {
            log_warn("closing connection from %s: it starts a TLS handshake but "
                     "this port serves plaintext only (%s)", c->peer,
                     r->tls_server == NULL ? "no tls.server.certPath"
                                           : "tls.server.mode disabled");
            conn_close(c, "TLS not served");
            return;
        }
        c->tls = tls_session_new(r->tls_server);
        if (c->tls == NULL) {
            log_warn("closing connection from %s: %s", c->peer, err_msg());
            conn_close(c, "TLS session failed");
            return;
        }
        tls_read(c, p, n);   /* tls_since_ms: the accept's time stays */
        return;
    }
    if (r->tls_mode == TLS_MODE_ENFORCING) {
        log_warn("closing connection from %s: plaintext refused "
                 "(tls.server.mode enforcing)", c->peer);
        conn_close(c, "plaintext refused");
        return;
    }
    if (buf_append(&c->in, p, n) != 0) {
        conn_close(c, "out of memory");
        return;
    }
    dispatch_frames(c);
}

/* Seals the plaintext queued in `out` into tls_out once the handshake is
 * done (before that it waits).  0, or -1 after closing c. */
static int
tls_seal_out(struct conn *c)
{
    if (buf_len(&c->out) == 0 || !tls_session_ready(c->tls))
        return 0;
    if (tls_session_seal(c->tls, buf_head(&c->out), buf_len(&c->out),
                         &c->tls_out) != 0) {
        tls_failed(c);
        return -1;
    }
    if (c->out.cap > CONN_KEEP_BYTES)
        buf_free(&c->out);
    else
        buf_reset(&c->out);
    return 0;
}

/* }}} */

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = s->data;
    if (nread == 0)
        return;  /* EAGAIN */
    if (c->draining) {
        /* Read and dropped (conn_close_drained); the peer's close ends
         * the drain, for the reason it started. */
        if (nread < 0)
            conn_close(c, c->close_reason);
        return;
    }
    if (nread < 0) {
        conn_close(c, nread == UV_EOF ? "closed by peer" : uv_strerror((int)nread));
        return;
    }
    c->last_active_ms = uv_now(&c->r->loop);
    if (c->sniff) {
        sniff_first_read(c, (const uint8_t *)b->base, (size_t)nread);
        return;
    }
    if (c->tls != NULL) {
        tls_read(c, (const uint8_t *)b->base, (size_t)nread);
        return;
    }
    c->in.end += (size_t)nread;
    dispatch_frames(c);
}

void
conn_resume_due(struct reactor *r)
{
    /* A new turn (conn.h "Fairness").  The connections due now: those
     * that had no frame in the last turn, then those that had; one that
     * uses up its share again goes back (fair_defer), for the next. */
    r->turn++;
    q_splice_tail(&r->resume, &r->resume_served);
    if (q_empty(&r->resume))
        return;
    struct qnode due;
    due.next = r->resume.next;
    due.prev = r->resume.prev;
    due.next->prev = &due;
    due.prev->next = &due;
    q_init(&r->resume);
    while (!q_empty(&due)) {
        struct conn *c = container_of(due.next, struct conn, resume_link);
        q_remove(&c->resume_link);
        if (c->closed || !c->paused)
            continue;
        conn_ref(c);
        c->paused = false;
        c->over_since_ms = 0;
        log_debug("connection from %s resumed", c->peer);
        /* Frames read before the pause first: they may pause it again. */
        dispatch_frames(c);
        if (!c->closed && !c->paused) {
            int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
            if (rc != 0)
                conn_close(c, uv_strerror(rc));
        }
        conn_unref(c);
    }
}

static int
start_reading(struct conn *c)
{
    format_peer(c);
    if (c->listener >= 0 && c->r->budget != NULL && !c->mb_open) {
        membudget_open(c->r->budget, &c->mb, c->peer);
        c->mb_open = true;
    }
    fair_open(c);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        err_set("uv_read_start: %s", uv_strerror(rc));
        return rc;
    }
    (void)uv_tcp_nodelay(&c->tcp, 1);
    c->connected = true;
    c->sniff = c->listener >= 0;
    c->tls_since_ms = uv_now(&c->r->loop);  /* the first bytes are due from here */
    return 0;
}

struct conn *
conn_accept(struct reactor *r, uv_stream_t *server,
            const struct conn_handler *h, void *owner, int listener)
{
    struct conn *c = conn_new(r, h, owner, listener);
    if (c == NULL)
        return NULL;
    int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc != 0 || start_reading(c) != 0) {
        if (rc != 0)
            err_set("uv_accept: %s", uv_strerror(rc));
        conn_close(c, "accept failed");
        return NULL;
    }
    return c;
}

struct conn *
conn_adopt(struct reactor *r, int fd, const struct conn_handler *h,
           void *owner, int listener)
{
    struct conn *c = conn_new(r, h, owner, listener);
    if (c == NULL) {
        close(fd);
        return NULL;
    }
    int rc = uv_tcp_open(&c->tcp, (uv_os_sock_t)fd);
    if (rc != 0) {
        /* The handle did not take the fd: closing it is ours. */
        err_set("uv_tcp_open: %s", uv_strerror(rc));
        close(fd);
        conn_close(c, "adopt failed");
        return NULL;
    }
    if (start_reading(c) != 0) {
        conn_close(c, "adopt failed");
        return NULL;
    }
    return c;
}

static void
on_connected(uv_connect_t *req, int status)
{
    struct conn *c = req->data;
    if (status == 0 && !c->closed && start_reading(c) != 0)
        status = UV_EIO;
    if (status == 0 && c->tls != NULL) {
        /* on_connect waits for the handshake (tls_report_connect). */
        c->tls_since_ms = uv_now(&c->r->loop);
        if (tls_session_start(c->tls, &c->tls_out) != 0)
            tls_failed(c);
        else
            mark_dirty(c);
        conn_unref(c);
        return;
    }
    if (status == 0 && buf_len(&c->out) > 0)
        mark_dirty(c);
    if (c->h->on_connect != NULL)
        c->h->on_connect(c, status);
    if (status != 0)
        conn_close(c, uv_strerror(status));
    conn_unref(c);  /* the connect request's reference */
}

/* "host:port", "[v6]:port" or "v6:port" (last colon). */
static int
parse_addr(const char *addr, struct sockaddr_storage *ss)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || strlen(colon + 1) == 0) {
        err_set("bad address '%s': expected host:port", addr);
        return -EINVAL;
    }
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= sizeof(host)) {
        err_set("bad address '%s': host too long", addr);
        return -EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) {
        err_set("bad address '%s': bad port", addr);
        return -EINVAL;
    }
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        err_set("cannot resolve '%s': %s", host, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

struct conn *
conn_connect(struct reactor *r, const char *addr,
             const struct conn_handler *h, void *owner)
{
    return conn_connect_tls(r, addr, h, owner, r->tls_client);
}

struct conn *
conn_connect_tls(struct reactor *r, const char *addr,
                 const struct conn_handler *h, void *owner,
                 struct tls_ctx *ctx)
{
    struct sockaddr_storage ss;
    if (parse_addr(addr, &ss) != 0)
        return NULL;
    struct conn *c = conn_new(r, h, owner, -1);
    if (c == NULL)
        return NULL;
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    if (ctx != NULL && (c->tls = tls_session_new(ctx)) == NULL) {
        conn_close(c, "TLS session failed");
        return NULL;
    }
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp,
                            (const struct sockaddr *)&ss, on_connected);
    if (rc != 0) {
        err_set("connect to %s: %s", addr, uv_strerror(rc));
        conn_close(c, "connect failed");
        return NULL;
    }
    conn_ref(c);  /* held by the connect request until on_connected */
    return c;
}

/* {{{ Shared bodies (conn.h) */

/* Queues b (its reference passes to the conn) behind what waits. */
static void
seg_push(struct conn *c, struct rcbuf *b)
{
    struct conn_seg *s = malloc(sizeof(*s));
    if (s == NULL) {
        /* Cannot queue it in order: the reply stream would be cut. */
        rcbuf_unref(b);
        conn_close(c, "out of memory");
        return;
    }
    s->next = NULL;
    s->b = b;
    s->off = 0;
    *c->segs_last = s;
    c->segs_last = &s->next;
    c->seg_bytes += b->len;
}

/* Queues a copy of the bytes behind what waits; 0 or -ENOMEM. */
static int
seg_push_copy(struct conn *c, const void *hdr, size_t hlen, const struct iovec *iov,
              int n)
{
    size_t total = hlen;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    struct rcbuf *b = rcbuf_new(total);
    if (b == NULL)
        return -ENOMEM;
    size_t at = 0;
    if (hlen > 0)
        memcpy(b->data, hdr, hlen);
    at = hlen;
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_len > 0)
            memcpy(b->data + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    seg_push(c, b);
    return c->closed ? -ENOMEM : 0;
}

static void
segs_free(struct conn *c)
{
    while (c->segs != NULL) {
        struct conn_seg *s = c->segs;
        c->segs = s->next;
        rcbuf_unref(s->b);
        free(s);
    }
    c->segs_last = &c->segs;
    c->seg_bytes = 0;
}

/* Moves waiting bytes into `out` until it holds one chunk. */
static void
segs_feed(struct conn *c)
{
    size_t chunk = c->r->out_high > CONN_FEED_MIN ? c->r->out_high : CONN_FEED_MIN;
    while (c->segs != NULL && buf_len(&c->out) < chunk) {
        struct conn_seg *s = c->segs;
        size_t n = s->b->len - s->off;
        if (n > chunk - buf_len(&c->out))
            n = chunk - buf_len(&c->out);
        if (buf_append(&c->out, s->b->data + s->off, n) != 0)
            return;  /* out of memory now: the next flush tries again */
        s->off += n;
        c->seg_bytes -= n;
        if (s->off == s->b->len) {
            c->segs = s->next;
            if (c->segs == NULL)
                c->segs_last = &c->segs;
            rcbuf_unref(s->b);
            free(s);
        }
    }
}

int
conn_send_shared(struct conn *c, const void *hdr, size_t hlen,
                 struct rcbuf *body)
{
    if (!conn_writable(c))
        return -RMQ_ECLOSED;
    if (body->len <= CONN_FEED_MIN || c->detached)
        return conn_send(c, hdr, hlen, body->data, body->len);
    if (c->segs == NULL) {
        int rc = buf_append(&c->out, hdr, hlen);
        if (rc != 0)
            return rc;
    } else {
        int rc = seg_push_copy(c, hdr, hlen, NULL, 0);
        if (rc != 0)
            return rc;
    }
    seg_push(c, rcbuf_ref(body));
    if (c->closed)
        return -ENOMEM;
    mark_dirty(c);
    return 0;
}

/* }}} */

int
conn_send(struct conn *c, const void *hdr, size_t hlen, const void *body,
          size_t blen)
{
    if (!conn_writable(c))
        return -RMQ_ECLOSED;
    if (c->segs != NULL) {
        /* Behind a shared body still waiting: in order, after it. */
        struct iovec v = { .iov_base = (void *)body, .iov_len = blen };
        int rc = seg_push_copy(c, hdr, hlen, &v, 1);
        if (rc == 0)
            mark_dirty(c);
        return rc;
    }
    int rc = buf_reserve(&c->out, hlen + blen);
    if (rc != 0)
        return rc;
    if (hlen > 0)
        (void)buf_append(&c->out, hdr, hlen);
    if (blen > 0)
        (void)buf_append(&c->out, body, blen);
    mark_dirty(c);
    return 0;
}

static void
mark_dirty(struct conn *c)
{
    if (!q_linked(&c->dirty_link)) {
        q_insert_tail(&c->r->dirty, &c->dirty_link);
        reactor_want_flush(c->r);
    }
}

uint8_t *
conn_out_reserve(struct conn *c, size_t len)
{
    if (!conn_writable(c) || c->segs != NULL || buf_reserve(&c->out, len) != 0)
        return NULL;
    return buf_tail(&c->out);
}

void
conn_out_commit(struct conn *c, size_t len)
{
    c->out.end += len;
    mark_dirty(c);
}

ssize_t
conn_sendfile(struct conn *c, int fd, int64_t off, size_t len)
{
    uv_os_fd_t sock;
    if (!conn_writable(c) || c->detached || !c->connected || c->sniff || c->tls != NULL ||
        c->writing || c->tcp.write_queue_size > 0 || c->segs != NULL ||
        uv_fileno((const uv_handle_t *)&c->tcp, &sock) != 0 || !gate_open(c))
        return -EAGAIN;
    /* What is queued goes first, marked as followed by more (MSG_MORE),
     * so a reply's header leaves in one segment with its records. */
    while (buf_len(&c->out) > 0) {
        ssize_t n = send(sock, buf_head(&c->out), buf_len(&c->out), MSG_MORE | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EAGAIN;  /* full, or an error the regular write reports */
        buf_consume(&c->out, (size_t)n);
    }
    if (c->mb_open && c->mb.out != 0)
        membudget_set_output(c->r->budget, &c->mb, (int64_t)conn_queued(c));
    size_t done = 0;
    while (done < len) {
        off_t o = (off_t)off + (off_t)done;
        ssize_t n = sendfile(sock, fd, &o, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;   /* full (EAGAIN), or an error: the rest is copied */
        done += (size_t)n;
    }
    if (done > 0)
        c->last_active_ms = uv_now(&c->r->loop);
    return (ssize_t)done;
}

bool
conn_can_send_now(const struct conn *c)
{
    return conn_writable(c) && !c->detached && c->connected && !c->sniff && c->tls == NULL &&
           !c->writing && c->tcp.write_queue_size == 0 && c->segs == NULL && !c->gated;
}

int
conn_send_now(struct conn *c, const void *hdr, size_t hlen, const struct iovec *iov, int n)
{
    uv_os_fd_t sock;
    if (!conn_can_send_now(c) || n < 0 || n > CONN_SEND_NOW_MAX ||
        uv_fileno((const uv_handle_t *)&c->tcp, &sock) != 0)
        return -EAGAIN;
    /* What is queued goes first, in the same call: the replies of one
     * read still leave together. */
    struct iovec v[CONN_SEND_NOW_MAX + 2];
    int nv = 0;
    size_t queued = buf_len(&c->out), total = queued + hlen;
    if (queued > 0)
        v[nv++] = (struct iovec){ buf_head(&c->out), queued };
    int first = nv;   /* the caller's bytes start here */
    if (hlen > 0)
        v[nv++] = (struct iovec){ (void *)(uintptr_t)hdr, hlen };
    for (int i = 0; i < n; i++) {
        v[nv++] = iov[i];
        total += iov[i].iov_len;
    }
    struct msghdr m = { .msg_iov = v, .msg_iovlen = (size_t)nv };
    ssize_t sent;
    do
        sent = sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (sent < 0 && errno == EINTR);
    if (sent < 0)
        sent = 0;   /* full, or an error the regular write reports */
    if (sent > 0)
        c->last_active_ms = uv_now(&c->r->loop);
    size_t took = (size_t)sent < queued ? (size_t)sent : queued;
    buf_consume(&c->out, took);
    if ((size_t)sent < total) {
        /* The rest is copied behind what is left of the queue, in order
         * (reserved first: nothing half-appended on no memory). */
        size_t skip = (size_t)sent - took;
        if (buf_reserve(&c->out, total - (size_t)sent) != 0) {
            conn_close(c, "out of memory queuing a reply");   /* the stream would be cut */
            return -ENOMEM;
        }
        for (int i = first; i < nv; i++) {
            size_t len = v[i].iov_len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            (void)buf_append(&c->out, (const uint8_t *)v[i].iov_base + skip, len - skip);
            skip = 0;
        }
        mark_dirty(c);
    } else if (c->mb_open && c->mb.out != 0) {
        membudget_set_output(c->r->budget, &c->mb, (int64_t)conn_queued(c));
    }
    return 0;
}

int
conn_send_iov(struct conn *c, const void *hdr, size_t hlen,
              const struct iovec *iov, int n)
{
    size_t total = hlen;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (!conn_writable(c))
        return -RMQ_ECLOSED;
    if (c->segs != NULL) {
        int rc = seg_push_copy(c, hdr, hlen, iov, n);
        if (rc == 0)
            mark_dirty(c);
        return rc;
    }
    int rc = buf_reserve(&c->out, total);
    if (rc != 0)
        return rc;
    if (hlen > 0)
        (void)buf_append(&c->out, hdr, hlen);
    for (int i = 0; i < n; i++)
        (void)buf_append(&c->out, iov[i].iov_base, iov[i].iov_len);
    return conn_send(c, NULL, 0, NULL, 0);
}

static void
pending_grow(struct conn *c)
{
    size_t ncap = c->pending_cap ? c->pending_cap * 2 : 16;
    struct call **nb = calloc(ncap, sizeof(*nb));
    if (nb == NULL)
        return;  /* keep the longer chains */
    for (size_t i = 0; i < c->pending_cap; i++) {
        struct call *call = c->pending[i];
        while (call != NULL) {
            struct call *next = call->next;
            size_t b = (uint32_t)call->opaque & (ncap - 1);
            call->next = nb[b];
            nb[b] = call;
            call = next;
        }
    }
    free(c->pending);
    c->pending = nb;
    c->pending_cap = ncap;
}

static void
on_call_timeout(uv_timer_t *t)
{
    struct call *call = t->data;
    call_finish(call, -RMQ_ETIMEDOUT, NULL, 0);
}

int
conn_call(struct conn *c, struct call *call, int32_t opaque, const void *hdr,
          size_t hlen, const void *body, size_t blen, uint64_t timeout_ms)
{
    if (!conn_writable(c)) {
        free(call);
        return -RMQ_ECLOSED;
    }
    if (c->pending_count >= c->pending_cap)
        pending_grow(c);
    int rc = c->pending_cap == 0 ? -ENOMEM
                                 : uv_timer_init(&c->r->loop, &call->timer);
    if (rc != 0) {
        free(call);
        return rc;
    }
    call->timer.data = call;
    rc = conn_send(c, hdr, hlen, body, blen);
    /* A blocking caller (outside the loop) may not have run the loop for
     * a while: from its stale clock the timeout would be due at once. */
    if (!c->r->in_loop)
        uv_update_time(&c->r->loop);
    if (rc == 0)
        rc = uv_timer_start(&call->timer, on_call_timeout, timeout_ms, 0);
    if (rc != 0) {
        /* An initialised handle is freed only after it has closed. */
        uv_close((uv_handle_t *)&call->timer, call_timer_closed);
        return rc;
    }
    call->conn = c;
    call->opaque = opaque;
    size_t b = (uint32_t)opaque & (c->pending_cap - 1);
    call->next = c->pending[b];
    c->pending[b] = call;
    call->linked = true;
    c->pending_count++;
    conn_ref(c);
    return 0;
}

static void
pending_fail_all(struct conn *c)
{
    for (size_t i = 0; i < c->pending_cap; i++) {
        while (c->pending[i] != NULL)
            call_finish(c->pending[i], -RMQ_ECLOSED, NULL, 0);
    }
}

void
conn_close(struct conn *c, const char *reason)
{
    if (c->closed)
        return;
    /* Closed during its TLS handshake (the peer hung up): the owner
     * still waits for its connect. */
    if (c->tls != NULL && c->connected && !c->tls_reported) {
        char why[sizeof(c->close_reason)];
        snprintf(why, sizeof(why), "TLS handshake: %s", reason);
        conn_ref(c);
        tls_report_connect(c, UV_EPROTO, why);
        bool gone = c->closed;
        conn_unref(c);
        if (gone)
            return;
    }
    c->closed = true;
    if (reason != c->close_reason)   /* the drain's own, kept there */
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
    log_debug("connection %s closed: %s", c->peer, reason);
    if (q_linked(&c->dirty_link))
        q_remove(&c->dirty_link);
    if (q_linked(&c->resume_link))
        q_remove(&c->resume_link);
    if (q_linked(&c->drain_link))
        q_remove(&c->drain_link);
    conn_ref(c);
    pending_fail_all(c);
    if (c->h->on_close != NULL)
        c->h->on_close(c);
    uv_close((uv_handle_t *)&c->tcp, on_close);
    conn_unref(c);
}

/* {{{ Close once drained (conn.h) */

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (status != 0 && status != UV_ECANCELED && !c->closed)
        conn_close(c, c->close_reason);
    conn_unref(c);
}

/* A draining conn whose output has all been handed to libuv: our FIN
 * follows it (uv_shutdown waits for the writes in flight). */
static void
drain_check(struct conn *c)
{
    if (!c->draining || c->shut || c->closed || buf_len(&c->out) > 0 ||
        buf_len(&c->tls_out) > 0 || c->segs != NULL)
        return;
    c->shut = true;
    c->shutdown_req.data = c;
    int rc = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown);
    if (rc != 0) {
        conn_close(c, c->close_reason);
        return;
    }
    conn_ref(c);   /* until on_shutdown */
}

/* r->linger: closes the draining connections whose linger is over (their
 * final output not taken, or the peer not closing, by
 * serverChannelCloseLingerMillis), then waits for the next one's. */
static void
on_linger(uv_timer_t *h)
{
    struct reactor *r = h->data;
    uint64_t now = uv_now(&r->loop);
    while (q_linked(&r->draining)) {
        struct conn *c = container_of(r->draining.next, struct conn, drain_link);
        if (c->drain_due_ms > now) {
            (void)uv_timer_start(&r->linger, on_linger, c->drain_due_ms - now, 0);
            return;
        }
        q_remove(&c->drain_link);
        log_debug("connection %s: %s; closed after %llu ms with %zu bytes unsent "
                  "(serverChannelCloseLingerMillis)", c->peer, c->close_reason,
                  (unsigned long long)c->r->close_linger_ms, conn_queued(c));
        conn_close(c, c->close_reason);
    }
}

void
conn_close_drained(struct conn *c, const char *reason)
{
    if (c->closed || c->draining)
        return;
    if (c->detached || !c->connected || c->r->close_linger_ms == 0) {
        conn_close(c, reason);
        return;
    }
    c->draining = true;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
    c->drain_due_ms = uv_now(&c->r->loop) + c->r->close_linger_ms;
    /* Behind every earlier one: the same linger, so in due order. */
    q_insert_tail(&c->r->draining, &c->drain_link);
    if (!uv_is_active((uv_handle_t *)&c->r->linger) &&
        uv_timer_start(&c->r->linger, on_linger, c->r->close_linger_ms, 0) != 0) {
        conn_close(c, reason);
        return;
    }
    log_debug("connection %s closing once its output is written: %s", c->peer, reason);
    if (q_linked(&c->resume_link))
        q_remove(&c->resume_link);
    if (c->paused) {
        /* Backpressure had stopped reading: read again, to drop. */
        c->paused = false;
        int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc != 0) {
            conn_close(c, reason);
            return;
        }
    }
    /* The flush writes what is queued, then drain_check shuts our side. */
    mark_dirty(c);
}

/* }}} */

static void
on_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    q_remove(&c->link);
    c->r->nconns--;
    /* Writes were cancelled before this callback: nothing points into the
     * buffers any more, and request tasks may keep the struct for long. */
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->wbuf);
    buf_free(&c->tls_out);
    segs_free(c);
    tls_session_free(c->tls);
    c->tls = NULL;
    if (c->mb_open)
        membudget_set_output(c->r->budget, &c->mb, 0);
    fair_close(c);
    conn_unref(c);
}

void
conn_ref(struct conn *c)
{
    c->refs++;
}

void
conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    /* Request tasks gave back their bytes before dropping their
     * references: what is left is the peer entry. */
    if (c->mb_open)
        membudget_close(c->r->budget, &c->mb);
    fair_close(c);
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->wbuf);
    buf_free(&c->tls_out);
    segs_free(c);
    tls_session_free(c->tls);
    free(c->pending);
    free(c->owner_memo);
    free(c);
}

static void
on_written(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    c->writing = false;
    if (c->mb_open && c->mb.out != 0 && !c->closed)
        membudget_set_output(c->r->budget, &c->mb,
                             (int64_t)(buf_len(&c->out) + buf_len(&c->tls_out)));
    if (c->wbuf.cap > CONN_KEEP_BYTES)
        buf_free(&c->wbuf);
    else
        buf_reset(&c->wbuf);
    if (status != 0) {
        if (status != UV_ECANCELED)
            conn_close(c, uv_strerror(status));
    } else if (!c->closed) {
        if (buf_len(&c->out) > 0 || buf_len(&c->tls_out) > 0 || c->segs != NULL)
            mark_dirty(c);
        if (c->paused)
            maybe_resume(c);
        drain_check(c);
    }
    conn_unref(c);
}

/* What a write that took all of c's output leaves to do. */
static void
written_all(struct conn *c)
{
    struct reactor *r = c->r;
    if (c->mb_open && c->mb.out != 0)
        membudget_set_output(r->budget, &c->mb, (int64_t)conn_queued(c));
    if (c->out.cap > CONN_KEEP_BYTES && buf_len(&c->out) == 0)
        buf_free(&c->out);
    if (c->paused)
        maybe_resume(c);
}

/* The plain connections of r->dirty with output to write now, handed to
 * the kernel in one call (net/sendbatch.h) when there are two or more.
 * Whatever is left (a part the kernel did not take, an error, a
 * connection not eligible) the flush below writes as before. */
static void
flush_batched(struct reactor *r)
{
    struct conn *cs[SENDBATCH_MAX];
    int fds[SENDBATCH_MAX];
    const void *bufs[SENDBATCH_MAX];
    size_t lens[SENDBATCH_MAX];
    ssize_t res[SENDBATCH_MAX];
    int n = 0;
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &r->dirty) {
        struct conn *c = container_of(pos, struct conn, dirty_link);
        if (c->closed || c->writing || !c->connected || c->detached || c->tls != NULL ||
            c->segs != NULL || c->tcp.write_queue_size > 0 || buf_len(&c->out) == 0)
            continue;
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
            continue;
        if (!gate_open(c))
            continue;   /* the flush closes it */
        cs[n] = c;
        fds[n] = fd;
        bufs[n] = buf_head(&c->out);
        lens[n] = buf_len(&c->out);
        if (++n == SENDBATCH_MAX)
            break;
    }
    if (n < 2)
        return;
    if (r->batch == NULL) {
        uint64_t now = uv_now(&r->loop);
        if (now < r->batch_retry_ms)
            return;
        r->batch = sendbatch_new();
        if (r->batch == NULL) {
            int e = errno;
            /* Out of descriptors or memory (a connection flood) passes:
             * try again later.  Anything else (ENOSYS, EPERM from a
             * seccomp filter, EINVAL before Linux 5.18) is for good. */
            if (e == EMFILE || e == ENFILE || e == ENOMEM || e == EAGAIN) {
                r->batch_retry_ms = now + 10000;
                log_info("replies are written one connection at a time for 10 s: "
                         "no io_uring ring (%s)", strerror(e));
            } else {
                r->batch_off = true;
                log_info("replies are written one connection at a time: "
                         "io_uring refused (%s)", strerror(e));
            }
            return;
        }
    }
    int rc = sendbatch_send(r->batch, n, fds, bufs, lens, res);
    if (rc < 0) {
        int e = errno;
        /* Nothing was submitted, so no buffer is the kernel's: the ring
         * goes, and the flush below writes everything.  The kernel short
         * of memory for the requests, or a signal, passes: a ring is made
         * again after 10 s, as when one is refused at setup (this turned
         * batching off for good, silently). */
        sendbatch_free(r->batch);
        r->batch = NULL;
        if (e == EAGAIN || e == ENOMEM || e == EBUSY || e == EINTR) {
            r->batch_retry_ms = uv_now(&r->loop) + 10000;
            log_info("replies are written one connection at a time for 10 s: "
                     "a batched send was refused (%s)", strerror(e));
        } else {
            r->batch_off = true;
            log_warn("replies are written one connection at a time from now on: "
                     "a batched send was refused (%s)", strerror(e));
        }
        return;
    }
    if (rc > 0) {
        bool unknown = false;
        for (int i = 0; i < n; i++)
            unknown = unknown || res[i] == -EINPROGRESS;
        if (unknown) {
            /* Some sends may still be the kernel's: the ring is kept
             * (and freed with the reactor), never used again. */
            r->batch_off = true;
            log_warn("replies are written one connection at a time from now on: "
                     "the io_uring ring failed part way through a batched send");
        } else {
            /* The kernel took only some (short of memory part way) and
             * they completed: no buffer is its, so the ring goes, as
             * when it takes none. */
            sendbatch_free(r->batch);
            r->batch = NULL;
            r->batch_retry_ms = uv_now(&r->loop) + 10000;
            log_info("replies are written one connection at a time for 10 s: "
                     "a batched send was taken only in part");
        }
    }
    for (int i = 0; i < n; i++) {
        struct conn *c = cs[i];
        if (res[i] == -EINPROGRESS) {
            /* How much of its output left is unknown: the stream
             * cannot go on.  The kernel may still read the buffer, so it
             * is left to it, not freed (at most once a worker: the ring
             * is not used again). */
            c->out = (struct buf){0};
            conn_close(c, "reply write failed");
            continue;
        }
        if (res[i] <= 0)
            continue;   /* EAGAIN, or an error the write below reports */
        buf_consume(&c->out, (size_t)res[i]);
        c->last_active_ms = uv_now(&r->loop);
        if (buf_len(&c->out) == 0)
            written_all(c);
    }
}

void
conn_flush_dirty(struct reactor *r)
{
    struct qnode *pos, *tmp;
    if (!r->batch_off)
        flush_batched(r);
    q_foreach_safe(pos, tmp, &r->dirty) {
        struct conn *c = container_of(pos, struct conn, dirty_link);
        q_remove(&c->dirty_link);
        if (c->detached && c->h->on_output != NULL && !c->closed) {
            c->h->on_output(c);
            continue;
        }
        if (c->writing || !c->connected || c->detached)
            continue;  /* on_written / on_connected requeue it */
        if (!gate_open(c)) {
            conn_close(c, "the store could not write the messages its replies acknowledge");
            continue;
        }
        if (c->segs != NULL)
            segs_feed(c);
        if (c->tls != NULL && tls_seal_out(c) != 0)
            continue;
        struct buf *wire = c->tls != NULL ? &c->tls_out : &c->out;
        if (buf_len(wire) == 0) {
            drain_check(c);
            continue;
        }
        /* The kernel usually takes it all at once: write(2) it straight.
         * A uv_write that completes at once still costs a deferred
         * callback and, when libuv drops POLLOUT in it, an epoll_ctl
         * before the next poll: one per flush, one per read under load
         * (strace).  Only the rest, if any, goes through uv_write.  Not
         * while a shared reply is being fed (c->segs): its next chunk is
         * fed from on_written, which a write done here never calls. */
        if (c->tcp.write_queue_size == 0 && c->segs == NULL) {
            uv_buf_t b0 = uv_buf_init((char *)buf_head(wire), (unsigned)buf_len(wire));
            int n = uv_try_write((uv_stream_t *)&c->tcp, &b0, 1);
            if (n > 0) {
                buf_consume(wire, (size_t)n);
                c->last_active_ms = uv_now(&r->loop);
            }
            /* Errors but EAGAIN: uv_write below reports them. */
            if (buf_len(wire) == 0) {
                written_all(c);
                drain_check(c);
                continue;
            }
        }
        struct buf t = c->wbuf;
        c->wbuf = *wire;
        *wire = t;
        uv_buf_t b = uv_buf_init((char *)buf_head(&c->wbuf),
                                 (unsigned)buf_len(&c->wbuf));
        c->write_req.data = c;
        int rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1,
                          on_written);
        if (rc != 0) {
            buf_reset(&c->wbuf);
            conn_close(c, uv_strerror(rc));
            continue;
        }
        c->writing = true;
        c->last_active_ms = uv_now(&r->loop);
        /* What the kernel did not take at once is held for the peer:
         * counted (a compare only while nothing is held). */
        if (c->mb_open && (c->tcp.write_queue_size > 0 || c->mb.out != 0))
            membudget_set_output(r->budget, &c->mb, (int64_t)conn_queued(c));
        conn_ref(c);
        drain_check(c);   /* segs: fed from on_written, checked again then */
    }
}

void
conn_sweep_idle(struct reactor *r)
{
    uint64_t now = uv_now(&r->loop);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &r->conns) {
        struct conn *c = container_of(pos, struct conn, link);
        if (c->closed)
            continue;
        if (c->draining)
            continue;   /* r->linger closes it (on_linger) */
        if (c->listener < 0)
            continue;
        /* With TLS offered, a peer must also start (plaintext or a
         * hello) within the handshake timeout: every RocketMQ client
         * speaks first. */
        if (r->tls_server != NULL && r->tls_handshake_ms > 0 &&
            (c->sniff || (c->tls != NULL && !tls_session_ready(c->tls))) &&
            now - c->tls_since_ms >= r->tls_handshake_ms) {
            log_warn("closing connection from %s: %s after %llu ms "
                     "(tls.server.handshakeTimeoutMillis)", c->peer,
                     c->sniff ? "nothing received" : "TLS handshake not finished",
                     (unsigned long long)(now - c->tls_since_ms));
            conn_close(c, "TLS handshake timeout");
            continue;
        }
        /* A detached conn (a gRPC connection's shadow) reads nothing:
         * its socket's own idleness closes both. */
        if (r->idle_ms > 0 && !c->detached && now - c->last_active_ms >= r->idle_ms) {
            log_info("closing connection from %s: idle for %llu s",
                     c->peer, (unsigned long long)(r->idle_ms / 1000));
            conn_close(c, "idle");
            continue;
        }
        if (r->write_timeout_ms == 0 || r->out_high == 0 || c->detached)
            continue;
        size_t queued = conn_queued(c);
        if (queued <= r->out_high) {
            c->over_since_ms = 0;
        } else if (c->over_since_ms == 0) {
            c->over_since_ms = now;
        } else if (now - c->over_since_ms >= r->write_timeout_ms) {
            log_warn("closing connection from %s: %zu bytes of replies "
                     "unread for %llu ms (serverChannelWriteTimeoutMillis)",
                     c->peer, queued,
                     (unsigned long long)(now - c->over_since_ms));
            conn_close(c, "write timeout");
        }
    }
}
