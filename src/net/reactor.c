/*
 * reactor: see reactor.h.  Replies produced while handling one read are
 * appended to their connection's output buffer and the connection is
 * marked dirty; the check handle then writes each dirty connection once
 * per loop iteration, which turns pipelined requests into batched writes.
 * The idle handle only exists to stop the poll phase from sleeping while
 * output produced by a timer callback is waiting.  Before the flush, the
 * check handle resumes connections whose backpressure has cleared
 * (conn.h), so the replies to the requests they then dispatch go out in
 * the same flush.
 */
#include "net/reactor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "net/conn.h"
#include "net/sendbatch.h"
#include "net/tls.h"

/* The loop is about to poll: the stretch since the last poll returned
 * was time nothing was read. */
static void
on_busy_prepare(uv_prepare_t *h)
{
    struct reactor *r = container_of(h, struct reactor, busy_prepare);
    int64_t now = clock_mono_ns();
    r->busy_ns = r->poll_out_ns >= 0 && now > r->poll_out_ns ? now - r->poll_out_ns : 0;
    if (r->busy_ns > r->busy_max_ns)
        r->busy_max_ns = r->busy_ns;
}

static void
on_flush_check(uv_check_t *h)
{
    struct reactor *r = container_of(h, struct reactor, flush_check);
    /* Still the poll's return: only a caller outside the loop updates it. */
    r->poll_out_ns = (int64_t)uv_now(&r->loop) * 1000000;
    conn_resume_due(r);
    conn_flush_dirty(r);
    if (q_empty(&r->dirty) && q_empty(&r->resume) && q_empty(&r->resume_served))
        uv_idle_stop(&r->flush_idle);
}

static void
on_flush_idle(uv_idle_t *h)
{
    (void)h;  /* the check handle does the work */
}

static void
on_sweep(uv_timer_t *h)
{
    struct reactor *r = container_of(h, struct reactor, sweep);
    conn_sweep_idle(r);
}

/* Sweep often enough for every timeout (the idle, write and TLS
 * handshake ones): a quarter of the shortest, at most every
 * REACTOR_SWEEP_MAX_MS.  The close linger is not one of them (it was:
 * with its default 2 s every loop walked its connections every 500 ms);
 * draining connections are closed by r->linger (conn.c). */
static int
start_sweep(struct reactor *r)
{
    uint64_t t = r->idle_ms;
    if (r->write_timeout_ms > 0 && (t == 0 || r->write_timeout_ms < t))
        t = r->write_timeout_ms;
    if (r->tls_server != NULL && r->tls_handshake_ms > 0 &&
        (t == 0 || r->tls_handshake_ms < t))
        t = r->tls_handshake_ms;
    uv_timer_stop(&r->sweep);
    if (t == 0)
        return 0;
    uint64_t every = t / 4 > REACTOR_SWEEP_MAX_MS ? REACTOR_SWEEP_MAX_MS : (t / 4 ? t / 4 : 1);
    int rc = uv_timer_start(&r->sweep, on_sweep, every, every);
    if (rc != 0)
        err_set("sweep timer: %s", uv_strerror(rc));
    return rc;
}

int
reactor_set_limits(struct reactor *r, const struct reactor_limits *lim)
{
    r->out_high = lim->out_high;
    r->out_low = lim->out_low < lim->out_high ? lim->out_low : lim->out_high;
    r->write_timeout_ms = lim->write_timeout_ms;
    r->close_linger_ms = lim->close_linger_ms;
    r->max_inflight = lim->max_inflight;
    r->conn_frames_per_turn = lim->conn_frames_per_turn;
    r->peer_frames_per_turn = lim->peer_frames_per_turn;
    if (!lim->batch_write) {
        r->batch_off = true;
    } else if (r->batch_off && r->batch == NULL) {
        r->batch_off = false;   /* made at the first flush that needs it */
    }
    return start_sweep(r);
}

int
reactor_set_tls_server(struct reactor *r, struct tls_ctx *ctx, int mode,
                       uint64_t handshake_ms)
{
    if (ctx != NULL)
        tls_ctx_ref(ctx);
    tls_ctx_unref(r->tls_server);
    r->tls_server = ctx;
    r->tls_mode = mode;
    r->tls_handshake_ms = handshake_ms;
    return start_sweep(r);
}

void
reactor_set_tls_client(struct reactor *r, struct tls_ctx *ctx)
{
    if (ctx != NULL)
        tls_ctx_ref(ctx);
    tls_ctx_unref(r->tls_client);
    r->tls_client = ctx;
}

int
reactor_init(struct reactor *r, size_t max_frame, uint64_t idle_ms)
{
    memset(r, 0, sizeof(*r));
    q_init(&r->conns);
    q_init(&r->dirty);
    q_init(&r->resume);
    q_init(&r->resume_served);
    q_init(&r->draining);
    peertab_init(&r->peers, sizeof(struct conn_peer), 16);
    /* The defaults of serverChannelMaxFramesPerTurn and
     * serverPeerMaxFramesPerTurn, for loops whose owner sets no limits. */
    r->conn_frames_per_turn = 16;
    r->peer_frames_per_turn = 64;
    r->max_frame = max_frame;
    r->idle_ms = idle_ms;
    r->poll_out_ns = -1;   /* no poll has returned yet: no busy stretch */
    /* Clients (rmq bench produce among them) write as before; the
     * server's workers take serverBatchWriteEnable (reactor_set_limits). */
    r->batch_off = true;
    int rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        err_set("uv_loop_init: %s", uv_strerror(rc));
        return rc;
    }
    if ((rc = uv_check_init(&r->loop, &r->flush_check)) != 0 ||
        (rc = uv_idle_init(&r->loop, &r->flush_idle)) != 0 ||
        (rc = uv_timer_init(&r->loop, &r->sweep)) != 0 ||
        (rc = uv_timer_init(&r->loop, &r->linger)) != 0 ||
        (rc = uv_check_start(&r->flush_check, on_flush_check)) != 0 ||
        (rc = uv_prepare_init(&r->loop, &r->busy_prepare)) != 0 ||
        (rc = uv_prepare_start(&r->busy_prepare, on_busy_prepare)) != 0) {
        err_set("reactor init: %s", uv_strerror(rc));
        return rc;
    }
    /* The shared handles must not keep a loop alive on their own. */
    uv_unref((uv_handle_t *)&r->flush_check);
    uv_unref((uv_handle_t *)&r->busy_prepare);
    uv_unref((uv_handle_t *)&r->sweep);
    uv_unref((uv_handle_t *)&r->linger);
    r->linger.data = r;   /* started by conn_close_drained (conn.c) */
    return start_sweep(r);
}

void
reactor_want_flush(struct reactor *r)
{
    if (!uv_is_active((uv_handle_t *)&r->flush_idle))
        (void)uv_idle_start(&r->flush_idle, on_flush_idle);
}

int
reactor_run(struct reactor *r, uv_run_mode mode)
{
    bool was = r->in_loop;
    r->in_loop = true;
    int rc = uv_run(&r->loop, mode);
    r->in_loop = was;
    return rc;
}

void
reactor_close_conns(struct reactor *r, const char *reason)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &r->conns) {
        struct conn *c = container_of(pos, struct conn, link);
        conn_close(c, reason);
    }
}

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int
reactor_close(struct reactor *r)
{
    reactor_close_conns(r, "shutting down");
    /* Let connection close callbacks and final writes run. */
    reactor_run(r, UV_RUN_NOWAIT);
    uv_walk(&r->loop, close_walk, NULL);
    reactor_run(r, UV_RUN_DEFAULT);
    reactor_set_tls_client(r, NULL);
    tls_ctx_unref(r->tls_plain_client);
    r->tls_plain_client = NULL;
    tls_ctx_unref(r->tls_server);
    r->tls_server = NULL;
    free(r->tls_rbuf);
    r->tls_rbuf = NULL;
    sendbatch_free(r->batch);
    r->batch = NULL;
    /* Every connection has closed: its peer entry went with it. */
    peertab_free(&r->peers);
    int rc = uv_loop_close(&r->loop);
    if (rc != 0) {
        log_warn("event loop closed with handles still open: %s",
                 uv_strerror(rc));
        return rc;
    }
    return 0;
}

bool
reactor_output_pending(struct reactor *r)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &r->conns) {
        struct conn *c = container_of(pos, struct conn, link);
        if (!c->closed && (c->writing || buf_len(&c->out) > 0 ||
                           buf_len(&c->tls_out) > 0))
            return true;
    }
    return false;
}

int32_t
reactor_opaque(struct reactor *r)
{
    int32_t o = r->next_opaque;
    r->next_opaque = (o == INT32_MAX) ? 0 : o + 1;
    return o;
}
