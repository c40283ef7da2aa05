/*
 * client: see client.h.
 *
 * nghttp2 in its "mem" mode, as h2.c: bytes in with
 * nghttp2_session_mem_recv, bytes out with nghttp2_session_mem_send
 * copied into the conn's output.  The request (one message) is pulled by
 * nghttp2 from the call's buffer through a data provider; the response's
 * DATA is appended to the call's buffer, and the call ends (its callback
 * runs) when nghttp2 closes the stream.  Callbacks run after
 * nghttp2_session_mem_recv returns, never inside nghttp2's, so a
 * callback may start another call on the same session.
 */
#include "grpc/client.h"

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/queue.h"
#include "grpc/h2.h"
#include "net/conn.h"

#define GC_STREAM_WINDOW (1 << 20)
#define GC_CONN_WINDOW (16 << 20)

struct gcall_c {
    struct qnode link;            /* in g->calls, or g->ended */
    struct gclient *g;
    int32_t id;
    struct buf req;               /* the framed request, not yet taken */
    struct buf resp;              /* the response messages so far */
    char message[256];
    int status;                   /* -1 until grpc-status is seen */
    int http_status;
    bool cancelled;
    bool too_big;
    gclient_cb cb;
    void *arg;
};

struct gclient {
    nghttp2_session *ng;
    struct conn *cn;
    char authority[256];
    size_t max_response;
    struct qnode calls;           /* open */
    struct qnode ended;           /* closed, callback due */
    bool in_recv;
    bool in_ended;                /* run_ended is calling back */
    bool freed;                   /* the connection closed: g goes once
                                   * the callbacks have run */
};

static void
call_free(struct gcall_c *k)
{
    q_remove(&k->link);
    buf_free(&k->req);
    buf_free(&k->resp);
    free(k);
}

/* Runs the callbacks of the calls that ended (outside nghttp2's).  A
 * callback may close the connection (a Lua task resumed at once closes
 * its client): then the calls still open are called back here too, and
 * g is freed at the end.  False when it was. */
static bool
run_ended(struct gclient *g)
{
    g->in_ended = true;
    while (!q_empty(&g->ended)) {
        struct gcall_c *k = container_of(g->ended.next, struct gcall_c, link);
        q_remove(&k->link);
        q_init(&k->link);   /* off the list before its callback runs */
        if (!k->cancelled && k->cb != NULL) {
            struct gclient_result r = {
                .status = k->status, .message = k->message,
                .data = buf_head(&k->resp), .len = buf_len(&k->resp),
            };
            if (k->too_big) {
                r.status = GRPC_RESOURCE_EXHAUSTED;
                r.message = "the response is larger than the client takes";
            } else if (k->status < 0) {
                r.status = GRPC_UNAVAILABLE;
                if (k->message[0] == '\0')
                    snprintf(k->message, sizeof(k->message), "the stream ended without grpc-status (HTTP %d)",
                             k->http_status);
                r.message = k->message;
            }
            k->cb(k->arg, &r);
        }
        call_free(k);
    }
    g->in_ended = false;
    if (!g->freed)
        return true;
    nghttp2_session_del(g->ng);
    g->cn->ext = NULL;
    free(g);
    return false;
}

static void
flush(struct gclient *g)
{
    if (g->freed || g->cn->closed || g->in_recv)
        return;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(g->ng, &data);
        if (n < 0) {
            log_warn("gRPC client to %s: %s", g->cn->peer, nghttp2_strerror((int)n));
            conn_close(g->cn, "http2 error");
            return;
        }
        if (n == 0)
            break;
        if (conn_send(g->cn, data, (size_t)n, NULL, 0) != 0) {
            conn_close(g->cn, "out of memory");
            return;
        }
    }
}

static ssize_t
read_req(nghttp2_session *ng, int32_t id, uint8_t *dst, size_t len, uint32_t *flags,
         nghttp2_data_source *src, void *ud)
{
    (void)ng;
    (void)id;
    (void)ud;
    struct gcall_c *k = src->ptr;
    size_t n = buf_len(&k->req);
    if (n > len)
        n = len;
    memcpy(dst, buf_head(&k->req), n);
    buf_consume(&k->req, n);
    if (buf_len(&k->req) == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int
hex_val(uint8_t c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* grpc-message is percent-encoded (gRPC's PROTOCOL-HTTP2.md). */
static void
percent_decode(char *dst, size_t cap, const uint8_t *v, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        int hi = v[i] == '%' && i + 2 < n ? hex_val(v[i + 1]) : -1;
        int lo = hi >= 0 ? hex_val(v[i + 2]) : -1;
        if (lo >= 0) {
            dst[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            dst[o++] = (char)v[i];
        }
    }
    dst[o] = '\0';
}

static int
on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct gcall_c *k = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (k == NULL)
        return 0;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        char v[8];
        size_t m = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
        memcpy(v, value, m);
        v[m] = '\0';
        k->http_status = atoi(v);
    } else if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char v[16];
        size_t m = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
        memcpy(v, value, m);
        v[m] = '\0';
        k->status = atoi(v);
    } else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        percent_decode(k->message, sizeof(k->message), value, vlen);
    }
    return 0;
}

static int
on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
              void *ud)
{
    (void)flags;
    struct gclient *g = ud;
    struct gcall_c *k = nghttp2_session_get_stream_user_data(ng, id);
    if (k == NULL || k->too_big)
        return 0;
    if (buf_len(&k->resp) + len > g->max_response || buf_append(&k->resp, data, len) != 0) {
        k->too_big = true;
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int
on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
    struct gclient *g = ud;
    struct gcall_c *k = nghttp2_session_get_stream_user_data(ng, id);
    if (k == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    if (k->status < 0 && error_code != NGHTTP2_NO_ERROR && k->message[0] == '\0')
        snprintf(k->message, sizeof(k->message), "stream reset by the server (%s)",
                 nghttp2_http2_strerror(error_code));
    q_remove(&k->link);
    q_insert_tail(&g->ended, &k->link);
    return 0;
}

static int
on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct gclient *g = ud;
    (void)ng;
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR)
        log_info("gRPC client to %s: GOAWAY %s", g->cn->peer,
                 nghttp2_http2_strerror(f->goaway.error_code));
    return 0;
}

struct gclient *
gclient_new(struct conn *cn, const char *authority, size_t max_response)
{
    struct gclient *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        err_set("out of memory for an HTTP/2 session");
        return NULL;
    }
    g->cn = cn;
    g->max_response = max_response;
    snprintf(g->authority, sizeof(g->authority), "%s", authority);
    q_init(&g->calls);
    q_init(&g->ended);
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        free(g);
        err_set("out of memory for an HTTP/2 session");
        return NULL;
    }
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    int rc = nghttp2_session_client_new(&g->ng, cbs, g);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        free(g);
        err_set("cannot start an HTTP/2 session: %s", nghttp2_strerror(rc));
        return NULL;
    }
    nghttp2_settings_entry iv[2] = {
        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GC_STREAM_WINDOW },
        { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
    };
    rc = nghttp2_submit_settings(g->ng, NGHTTP2_FLAG_NONE, iv, 2);
    if (rc == 0)
        rc = nghttp2_session_set_local_window_size(g->ng, NGHTTP2_FLAG_NONE, 0, GC_CONN_WINDOW);
    if (rc != 0) {
        nghttp2_session_del(g->ng);
        free(g);
        err_set("cannot start an HTTP/2 session: %s", nghttp2_strerror(rc));
        return NULL;
    }
    cn->ext = g;
    flush(g);
    return g;
}

int32_t
gclient_call(struct gclient *g, const char *path, const struct gclient_header *hdrs, size_t nh,
             const uint8_t *msg, size_t n, uint64_t timeout_ms, gclient_cb cb, void *arg)
{
    if (g->freed || g->cn->closed) {
        err_set("the connection is closed");
        return -1;
    }
    /* After the server's GOAWAY nghttp2 would take the request and then
     * refuse it in the next send, ending it at once: a caller that starts
     * another call from each one's end would go round for ever. */
    if (!nghttp2_session_check_request_allowed(g->ng)) {
        err_set("the server is closing the connection (GOAWAY)");
        return -1;
    }
    if (n > UINT32_MAX || nh > 32) {
        err_set("request too large");
        return -1;
    }
    struct gcall_c *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        err_set("out of memory");
        return -1;
    }
    k->g = g;
    k->status = -1;
    k->cb = cb;
    k->arg = arg;
    buf_init(&k->req);
    buf_init(&k->resp);
    q_init(&k->link);
    uint8_t pre[5] = { 0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };
    if (buf_append(&k->req, pre, 5) != 0 || (n > 0 && buf_append(&k->req, msg, n) != 0)) {
        call_free(k);
        err_set("out of memory");
        return -1;
    }
    char to[24];
    snprintf(to, sizeof(to), "%llum", (unsigned long long)(timeout_ms > 99999999 ? 99999999 : timeout_ms));
#define NV(n_, v_) { (uint8_t *)(n_), (uint8_t *)(v_), strlen(n_), strlen(v_), NGHTTP2_NV_FLAG_NONE }
    nghttp2_nv nv[7 + 32] = {
        NV(":method", "POST"), NV(":scheme", g->cn->tls != NULL ? "https" : "http"),
        NV(":path", path), NV(":authority", g->authority),
        NV("content-type", "application/grpc"), NV("te", "trailers"),
    };
    size_t nn = 6;
    if (timeout_ms > 0)
        nv[nn++] = (nghttp2_nv)NV("grpc-timeout", to);
    for (size_t i = 0; i < nh; i++)
        nv[nn++] = (nghttp2_nv)NV(hdrs[i].name, hdrs[i].value);
#undef NV
    nghttp2_data_provider dp = { .source.ptr = k, .read_callback = read_req };
    int32_t id = nghttp2_submit_request(g->ng, NULL, nv, nn, &dp, k);
    if (id < 0) {
        call_free(k);
        err_set("cannot start the call: %s", nghttp2_strerror(id));
        return -1;
    }
    k->id = id;
    q_insert_tail(&g->calls, &k->link);
    flush(g);
    return id;
}

void
gclient_cancel(struct gclient *g, int32_t id)
{
    if (g == NULL || g->freed)
        return;
    struct gcall_c *k = nghttp2_session_get_stream_user_data(g->ng, id);
    if (k == NULL)
        return;
    k->cancelled = true;
    nghttp2_submit_rst_stream(g->ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    flush(g);
}

size_t
gclient_on_bytes(struct conn *cn, const uint8_t *p, size_t n)
{
    struct gclient *g = cn->ext;
    if (g == NULL || g->freed)
        return n;
    g->in_recv = true;
    ssize_t rc = nghttp2_session_mem_recv(g->ng, p, n);
    g->in_recv = false;
    if (rc < 0) {
        log_info("gRPC client to %s: %s; closed", cn->peer, nghttp2_strerror((int)rc));
        flush(g);
        conn_close(cn, "http2 protocol error");
        return n;
    }
    flush(g);
    if (run_ended(g) && !cn->closed)
        flush(g);   /* what the callbacks started */
    return n;
}

void
gclient_on_conn_close(struct gclient *g)
{
    if (g == NULL || g->freed)
        return;
    g->freed = true;
    while (!q_empty(&g->calls)) {
        struct gcall_c *k = container_of(g->calls.next, struct gcall_c, link);
        if (k->status < 0 && k->message[0] == '\0')
            snprintf(k->message, sizeof(k->message), "the connection closed");
        q_remove(&k->link);
        q_insert_tail(&g->ended, &k->link);
    }
    if (!g->in_ended)
        (void)run_ended(g);   /* frees g; else the run under way does */
}
