/*
 * h2: see h2.h.
 *
 * nghttp2 in its "mem" mode: bytes in with nghttp2_session_mem_recv,
 * bytes out with nghttp2_session_mem_send (copied into the conn's output,
 * which coalesces one loop iteration's writes).  Window updates are
 * nghttp2's automatic ones: a request's DATA is consumed as it arrives
 * (into the call's buffer, bounded as h2.h says), so the client's window
 * reopens at once and the bounds above are what limits memory, not the
 * window.  A response is pulled by nghttp2 from the call's output buffer
 * through a data provider, which says DEFERRED while the buffer is empty
 * and the call not ended (streaming calls), and submits the trailers
 * when it is empty and the call ended.
 */
#include "grpc/h2.h"

#include <ctype.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "net/conn.h"

/* The client's per-stream window we announce: large enough that a 4 MiB
 * message does not wait for round trips, small against max_conn_buffer. */
#define H2_STREAM_WINDOW (1 << 20)
#define H2_CONN_WINDOW (4 << 20)

#define NV_CONST (NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE)

/* What the memory budget is charged (h2.h).  Measured on a 1-worker
 * standalone (RSS from /proc, 50 connections from one address, then 100
 * idle Telemetry streams on each): 27,000 bytes a connection (the socket's
 * conn, its shadow, the session, nghttp2's session and HPACK tables) and
 * 3,300 a stream (the h2s and its headers, nghttp2's stream, the
 * service's call); rounded up, so the budget errs on the safe side. */
#define H2_STREAM_BYTES 4096
#define H2_SESSION_BYTES 32768

/* Streams a connection may have refused by the memory budget before it
 * is closed (GOAWAY ENHANCE_YOUR_CALM): a client told RESOURCE_EXHAUSTED
 * backs off; one that keeps opening streams is flooding, and answering
 * each of a million refusals would keep the worker from everyone else
 * (measured: scripts/bench/grpc_idle.lua, docs/grpc.md). */
#define H2_BUDGET_REFUSALS_MAX 64

/* The request headers every call looks at, found once as they arrive
 * (on_header) instead of by a scan of every header per lookup. */
enum { HK_PATH, HK_METHOD, HK_CONTENT_TYPE, HK_TIMEOUT, HK_ENCODING, H2_KNOWN };
static const struct {
    const char *name;
    size_t len;
} KNOWN[H2_KNOWN] = {
    { ":path", 5 }, { ":method", 7 }, { "content-type", 12 }, { "grpc-timeout", 12 },
    { "grpc-encoding", 13 },
};

struct h2s {
    struct qnode link;           /* in c->streams */
    struct h2c *c;
    int32_t id;
    void *user;
    struct buf hdrs;             /* "name\0value\0" pairs */
    uint32_t known[H2_KNOWN];    /* offset + 1 in hdrs of the value of the
                                  * headers every call looks at; 0: absent */
    struct buf in;               /* request bytes not yet cut into messages */
    struct buf out;              /* response messages not yet taken by nghttp2 */
    uint64_t deadline_ms;        /* uv_now() at which it expires; 0 = none */
    uint64_t opened_ms;
    int64_t start_ns;            /* clock_mono_ns() at its first header */
    int64_t charged;             /* bytes of the memory budget held */
    int32_t code;                /* h2_set_code; -1: none */
    int refused_by;              /* the budget limit that refused it + 1; 0: none */
    char status_msg[256];
    char status_code[16];        /* the trailers' grpc-status value */
    int status;
    bool gzip;                   /* grpc-encoding: gzip */
    bool bidi;
    bool accepted;               /* on_call took it */
    bool headers_sent;           /* response headers submitted */
    bool finished;               /* h2_finish called */
    bool remote_closed;          /* END_STREAM received */
    bool discard;                /* refused: drop further DATA, RST once answered */
    bool cancelled_told;
    bool headers_done;           /* its request headers were taken (on_end is due) */
};

struct h2c {
    nghttp2_session *ng;
    struct conn *cn;
    struct h2_limits lim;
    const struct h2_callbacks *cb;
    void *user;
    struct qnode streams;
    size_t nstreams;
    size_t buffered;             /* sum of the streams' `in` */
    size_t out_bytes;            /* sum of the streams' `out` (answers not
                                  * yet taken by nghttp2: a client whose
                                  * window stays shut leaves them here) */
    uv_timer_t timer;
    uint64_t window_start_ms;    /* the rate window's start */
    uint32_t opened_in_window;
    uint32_t resets_in_window;
    uint64_t last_read_ms;
    uint64_t ping_sent_ms;       /* 0: no PING outstanding */
    uint64_t timer_due_ms;       /* 0: not armed */
    struct h2_stats stats;
    int64_t charged;             /* the session's own share of the memory budget */
    struct h2s *hdr_s;           /* the stream whose header block is being
                                  * read (on_begin_headers): on_header's
                                  * stream without a map lookup per field */
    bool goaway_sent;
    bool closing;                /* ENHANCE_YOUR_CALM sent: close once written */
    bool over_budget;            /* ... because of the memory budget */
    uint32_t budget_refused;     /* streams refused by the budget */
    bool freed;
    bool in_recv;
    /* Nothing is written before the client's first bytes: they say
     * whether the socket speaks TLS (conn.c sniffs them), and our
     * SETTINGS must not go out as plaintext before a ClientHello. */
    bool heard;
};

static uint64_t
now_ms(struct h2c *c)
{
    return uv_now(&c->cn->r->loop);
}

/* {{{ The memory budget (h2.h): charged to the socket's account */

static bool
budget_charge(struct h2c *c, int64_t bytes, int *refused_by)
{
    struct conn *cn = c->cn;
    if (!cn->mb_open || cn->r->budget == NULL)
        return true;
    enum membudget_limit which;
    if (membudget_charge(cn->r->budget, &cn->mb, bytes, &which))
        return true;
    *refused_by = (int)which + 1;
    return false;
}

static void
budget_release(struct h2c *c, int64_t bytes)
{
    if (bytes > 0 && c->cn->mb_open && c->cn->r->budget != NULL)
        membudget_release(c->cn->r->budget, &c->cn->mb, bytes);
}

/* }}} */

/* {{{ Streams */

static struct h2s *
stream_new(struct h2c *c, int32_t id)
{
    struct h2s *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->c = c;
    s->id = id;
    buf_init(&s->hdrs);
    buf_init(&s->in);
    buf_init(&s->out);
    s->opened_ms = now_ms(c);
    s->start_ns = clock_mono_ns();
    s->code = -1;
    /* Refused, it is still made (uncharged) so that it can be answered
     * RESOURCE_EXHAUSTED once its headers are in (headers_done). */
    if (budget_charge(c, H2_STREAM_BYTES, &s->refused_by))
        s->charged = H2_STREAM_BYTES;
    q_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    return s;
}

static void
stream_free(struct h2s *s)
{
    struct h2c *c = s->c;
    if (s->headers_done && c->cb->on_end != NULL)
        c->cb->on_end(s);
    budget_release(c, s->charged);
    if (c->hdr_s == s)
        c->hdr_s = NULL;
    c->buffered -= buf_len(&s->in);
    c->out_bytes -= buf_len(&s->out);
    q_remove(&s->link);
    c->nstreams--;
    buf_free(&s->hdrs);
    buf_free(&s->in);
    buf_free(&s->out);
    free(s);
}

/* The service is told once that a call it took is gone. */
static void
stream_cancel(struct h2s *s)
{
    if (s->accepted && !s->finished && !s->cancelled_told) {
        s->cancelled_told = true;
        if (s->c->cb->on_cancel != NULL)
            s->c->cb->on_cancel(s);
    }
}

/* }}} */

/* {{{ Timer: deadlines, idle requests, keepalive */

static void arm_timer(struct h2c *c);

static void
on_timer(uv_timer_t *t)
{
    struct h2c *c = t->data;
    c->timer_due_ms = 0;
    uint64_t now = now_ms(c);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &c->streams) {
        struct h2s *s = container_of(pos, struct h2s, link);
        if (s->finished)
            continue;
        if (s->deadline_ms != 0 && now >= s->deadline_ms) {
            c->stats.deadline++;
            stream_cancel(s);
            s->discard = true;
            h2_finish(s, GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
        } else if (!s->bidi && !s->remote_closed && c->lim.stream_idle_ms != 0 &&
                   now - s->opened_ms >= c->lim.stream_idle_ms) {
            /* A request that never completes holds its buffer and a
             * stream slot: reset it (the client sees CANCELLED). */
            c->stats.idle_reset++;
            stream_cancel(s);
            s->finished = true;
            s->status = GRPC_CANCELLED;
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        }
    }
    if (c->lim.keepalive_ms != 0) {
        if (c->ping_sent_ms != 0) {
            if (now - c->ping_sent_ms >= c->lim.keepalive_timeout_ms) {
                log_info("gRPC connection %s: keepalive PING not answered in %llu ms; closed",
                         c->cn->peer, (unsigned long long)c->lim.keepalive_timeout_ms);
                conn_close(c->cn, "keepalive timeout");
                return;
            }
        } else if (now - c->last_read_ms >= c->lim.keepalive_ms) {
            if (nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, NULL) == 0)
                c->ping_sent_ms = now;
        }
    }
    h2_flush(c);
    if (!c->cn->closed)
        arm_timer(c);
}

/* Arms the timer for the earliest thing due. */
static void
arm_timer(struct h2c *c)
{
    uint64_t now = now_ms(c), due = UINT64_MAX;
    struct qnode *pos;
    struct qnode *tmp;
    q_foreach_safe(pos, tmp, &c->streams) {
        struct h2s *s = container_of(pos, struct h2s, link);
        if (s->finished)
            continue;
        if (s->deadline_ms != 0 && s->deadline_ms < due)
            due = s->deadline_ms;
        if (!s->bidi && !s->remote_closed && c->lim.stream_idle_ms != 0 &&
            s->opened_ms + c->lim.stream_idle_ms < due)
            due = s->opened_ms + c->lim.stream_idle_ms;
    }
    if (c->lim.keepalive_ms != 0) {
        uint64_t k = c->ping_sent_ms != 0 ? c->ping_sent_ms + c->lim.keepalive_timeout_ms
                                          : c->last_read_ms + c->lim.keepalive_ms;
        if (k < due)
            due = k;
    }
    if (due == UINT64_MAX)
        return;
    if (c->timer_due_ms != 0 && c->timer_due_ms <= due)
        return;
    c->timer_due_ms = due;
    uv_timer_start(&c->timer, on_timer, due > now ? due - now : 0, 0);
}

/* }}} */

/* {{{ Output */

void
h2_flush(struct h2c *c)
{
    if (c->freed || c->cn->closed || c->in_recv || !c->heard)
        return;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->ng, &data);
        if (n < 0) {
            log_warn("gRPC connection %s: %s", c->cn->peer, nghttp2_strerror((int)n));
            conn_close(c->cn, "http2 error");
            return;
        }
        if (n == 0)
            break;
        if (conn_send(c->cn, data, (size_t)n, NULL, 0) != 0) {
            conn_close(c->cn, "out of memory");
            return;
        }
    }
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng))
        conn_close(c->cn, c->over_budget ? "memory budget reached (GOAWAY ENHANCE_YOUR_CALM)"
                          : c->closing ? "http2 flood (GOAWAY ENHANCE_YOUR_CALM)" : "http2 session ended");
}

/* grpc-status's value: a code's decimal digits (0-16, or any int a
 * service passes), without snprintf's cost on every call's trailers. */
static void
status_digits(char out[16], int code)
{
    if (code >= 0 && code < 10) {
        out[0] = (char)('0' + code);
        out[1] = '\0';
    } else if (code >= 10 && code < 100) {
        out[0] = (char)('0' + code / 10);
        out[1] = (char)('0' + code % 10);
        out[2] = '\0';
    } else {
        snprintf(out, 16, "%d", code);
    }
}

static ssize_t
read_out(nghttp2_session *ng, int32_t id, uint8_t *dst, size_t len, uint32_t *flags,
         nghttp2_data_source *src, void *ud)
{
    (void)ng;
    (void)src;
    struct h2c *c = ud;
    struct h2s *s = nghttp2_session_get_stream_user_data(c->ng, id);
    if (s == NULL) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    size_t n = buf_len(&s->out);
    if (n > len)
        n = len;
    memcpy(dst, buf_head(&s->out), n);
    buf_consume(&s->out, n);
    c->out_bytes -= n;
    if (buf_len(&s->out) == 0) {
        if (s->finished) {
            *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
            /* The values live in s until the stream closes, after the
             * trailers went out: not copied either. */
            status_digits(s->status_code, s->status);
            nghttp2_nv nv[2] = {
                { (uint8_t *)"grpc-status", (uint8_t *)s->status_code, 11, strlen(s->status_code), NV_CONST },
                { (uint8_t *)"grpc-message", (uint8_t *)s->status_msg, 12, strlen(s->status_msg), NV_CONST },
            };
            int rc = nghttp2_submit_trailer(c->ng, id, nv, s->status_msg[0] ? 2 : 1);
            if (rc != 0)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        } else if (n == 0) {
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return (ssize_t)n;
}

static int
submit_headers(struct h2s *s)
{
    if (s->headers_sent)
        return 0;
    s->headers_sent = true;
    /* Constants: nghttp2 need not copy them (they are HPACK-indexed
     * after the first call of a connection either way). */
    nghttp2_nv nv[3] = {
        { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NV_CONST },
        { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NV_CONST },
        { (uint8_t *)"grpc-accept-encoding", (uint8_t *)"identity,gzip", 20, 13, NV_CONST },
    };
    nghttp2_data_provider dp = { .source.ptr = s, .read_callback = read_out };
    return nghttp2_submit_response(s->c->ng, s->id, nv, 3, &dp);
}

uint8_t *
h2_send_reserve(struct h2s *s, size_t n)
{
    if (s->finished || n > UINT32_MAX || buf_reserve(&s->out, 5 + n) != 0)
        return NULL;
    return buf_tail(&s->out) + 5;
}

int
h2_send_commit(struct h2s *s, size_t n)
{
    uint8_t *pre = buf_tail(&s->out);
    pre[0] = 0;
    pre[1] = (uint8_t)(n >> 24);
    pre[2] = (uint8_t)(n >> 16);
    pre[3] = (uint8_t)(n >> 8);
    pre[4] = (uint8_t)n;
    s->out.end += 5 + n;
    s->c->out_bytes += 5 + n;
    if (!s->headers_sent) {
        if (submit_headers(s) != 0)
            return -1;
    } else {
        nghttp2_session_resume_data(s->c->ng, s->id);
    }
    return 0;
}

int
h2_send(struct h2s *s, const uint8_t *msg, size_t n)
{
    uint8_t *p = h2_send_reserve(s, n);
    if (p == NULL)
        return -1;
    if (n > 0)
        memcpy(p, msg, n);
    return h2_send_commit(s, n);
}

/* grpc-message is percent-encoded (gRPC's PROTOCOL-HTTP2.md): bytes
 * outside 0x20-0x7E and '%' itself. */
static void
percent_encode(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 4 < cap; p++) {
        if (*p >= 0x20 && *p <= 0x7E && *p != '%') {
            dst[o++] = (char)*p;
        } else {
            dst[o++] = '%';
            dst[o++] = hex[*p >> 4];
            dst[o++] = hex[*p & 15];
        }
    }
    dst[o] = '\0';
}

void
h2_finish(struct h2s *s, int code, const char *msg)
{
    if (s->finished)
        return;
    s->finished = true;
    s->status = code;
    percent_encode(s->status_msg, sizeof(s->status_msg), msg != NULL ? msg : "");
    struct h2c *c = s->c;
    if (!s->headers_sent) {
        /* Trailers-Only: one HEADERS frame with the status. */
        s->headers_sent = true;
        char cs[16];
        snprintf(cs, sizeof(cs), "%d", code);
        nghttp2_nv nv[4] = {
            { (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
            { (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
              NGHTTP2_NV_FLAG_NONE },
            { (uint8_t *)"grpc-status", (uint8_t *)cs, 11, strlen(cs), NGHTTP2_NV_FLAG_NONE },
            { (uint8_t *)"grpc-message", (uint8_t *)s->status_msg, 12, strlen(s->status_msg),
              NGHTTP2_NV_FLAG_NONE },
        };
        if (nghttp2_submit_response(c->ng, s->id, nv, s->status_msg[0] ? 4 : 3, NULL) != 0)
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else {
        nghttp2_session_resume_data(c->ng, s->id);
    }
}

/* }}} */

/* {{{ Input */

/* RFC 9113 8.2.1's rest for a value: no CR or LF, no leading or
 * trailing blank (nghttp2 drops such a field). */
static bool
value_ok(const char *v)
{
    size_t n = strlen(v);
    if (n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        return false;
    return strpbrk(v, "\r\n") == NULL;
}

static const char *
hdr_get(const struct buf *b, const char *name)
{
    const char *p = (const char *)buf_head(b), *end = p + buf_len(b);
    while (p < end) {
        const char *v = p + strlen(p) + 1;
        if (v >= end)
            break;
        if (strcmp(p, name) == 0)
            return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

static const char *
known_get(const struct h2s *s, int k)
{
    return s->known[k] != 0 ? (const char *)buf_head(&s->hdrs) + s->known[k] - 1 : NULL;
}

const char *
h2_header(const struct h2s *s, const char *name)
{
    const char *v = NULL;
    int i;
    for (i = 0; i < H2_KNOWN; i++)
        if (strcmp(name, KNOWN[i].name) == 0) {
            v = known_get(s, i);
            break;
        }
    if (i == H2_KNOWN)
        v = hdr_get(&s->hdrs, name);
    return v != NULL && value_ok(v) ? v : NULL;
}

const char *
h2_path(const struct h2s *s)
{
    const char *p = known_get(s, HK_PATH);
    return p != NULL ? p : "";
}

/* grpc-timeout: at most 8 digits and a unit (H M S m u n); ms, 0 = bad. */
static uint64_t
parse_timeout(const char *v)
{
    size_t n = strlen(v);
    if (n < 2 || n > 9)
        return 0;
    uint64_t x = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (!isdigit((unsigned char)v[i]))
            return 0;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H': return x * 3600000;
    case 'M': return x * 60000;
    case 'S': return x * 1000;
    case 'm': return x;
    case 'u': return x / 1000 + 1;
    case 'n': return x / 1000000 + 1;
    default: return 0;
    }
}

/* Refuses a call with a status, dropping what it still sends. */
static void
refuse(struct h2s *s, int code, const char *msg)
{
    stream_cancel(s);
    s->discard = true;
    s->c->buffered -= buf_len(&s->in);
    buf_free(&s->in);
    h2_finish(s, code, msg);
}

/* Hands up the whole gRPC messages at the start of p[0..n) and returns
 * the bytes they took (a message cut short stays for later).  Stops
 * when the call is refused or ended. */
static size_t
take_messages(struct h2s *s, const uint8_t *p, size_t n)
{
    struct h2c *c = s->c;
    size_t used = 0;
    while (!s->discard && !s->finished && n - used >= 5) {
        const uint8_t *m = p + used;
        uint32_t len = ((uint32_t)m[1] << 24) | ((uint32_t)m[2] << 16) |
                       ((uint32_t)m[3] << 8) | m[4];
        if (m[0] > 1) {
            refuse(s, GRPC_INTERNAL, "bad gRPC message flag");
            break;
        }
        if (len > c->lim.max_message) {
            char why[128];
            snprintf(why, sizeof(why), "received message larger than max (%u vs. %zu)", len,
                     c->lim.max_message);
            c->stats.refused_big++;
            refuse(s, GRPC_RESOURCE_EXHAUSTED, why);
            break;
        }
        if (n - used < 5 + (size_t)len)
            break;
        used += 5 + (size_t)len;
        if (m[0] == 0) {
            c->cb->on_message(s, m + 5, len);
            continue;
        }
        if (!s->gzip) {
            refuse(s, GRPC_UNIMPLEMENTED,
                   "compressed message without a supported grpc-encoding (identity, gzip)");
            break;
        }
        /* Inflate at most max_message bytes: a small bomb stays small. */
        uint8_t *out = malloc(c->lim.max_message + 1);
        if (out == NULL) {
            refuse(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
            break;
        }
        z_stream z;
        memset(&z, 0, sizeof(z));
        int zr = inflateInit2(&z, 16 + MAX_WBITS);
        size_t got = 0;
        if (zr == Z_OK) {
            z.next_in = (Bytef *)(m + 5);
            z.avail_in = len;
            z.next_out = out;
            z.avail_out = (uInt)(c->lim.max_message + 1);
            zr = inflate(&z, Z_FINISH);
            got = z.total_out;
            inflateEnd(&z);
        }
        if (zr != Z_STREAM_END) {
            free(out);
            if (got > c->lim.max_message) {
                c->stats.refused_big++;
                refuse(s, GRPC_RESOURCE_EXHAUSTED, "inflated message larger than max");
            } else {
                refuse(s, GRPC_INTERNAL, "gzip message does not inflate");
            }
            break;
        }
        c->cb->on_message(s, out, got);
        free(out);
    }
    return used;
}

/* Cuts whole gRPC messages out of s->in and hands them up. */
static void
deliver(struct h2s *s)
{
    size_t n = buf_len(&s->in);
    if (n == 0)
        return;
    size_t used = take_messages(s, buf_head(&s->in), n);
    if (s->discard)
        return;   /* refuse() has dropped the buffer */
    buf_consume(&s->in, used);
    s->c->buffered -= used;
}

static int
on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct h2c *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    uint64_t now = now_ms(c);
    if (now - c->window_start_ms >= 1000) {
        c->window_start_ms = now;
        c->opened_in_window = 0;
        c->resets_in_window = 0;
    }
    if (c->lim.streams_per_sec != 0 && ++c->opened_in_window > c->lim.streams_per_sec &&
        !c->closing) {
        log_warn("gRPC connection %s opened more than %u streams in a second (grpcMaxStreamsPerSecond); "
                 "GOAWAY", c->cn->peer, c->lim.streams_per_sec);
        c->closing = true;
        nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
        return 0;
    }
    struct h2s *s = stream_new(c, f->hd.stream_id);
    if (s == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    c->stats.streams++;
    c->hdr_s = s;
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, s);
    return 0;
}

/* RFC 9113 8.2.1 / RFC 9110 5.6.2: a field name is lower-case token
 * characters (a pseudo-header's after its ':').  NAME_OK[c] = 1 for a
 * name character. */
static const uint8_t NAME_OK[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

/* A field as it arrives: 0 good; 1 a bad regular field (dropped, as
 * nghttp2 ignores one); -1 the stream is reset (an upper-case name, a
 * bad pseudo-header).  A value is only checked for NUL here (it is
 * stored NUL-terminated); CR, LF and edge blanks are checked when a
 * value is looked up (value_ok), for the few a call reads, not the
 * eight or so every call carries. */
static int
field_check(const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    bool pseudo = nlen > 0 && name[0] == ':';
    size_t i = pseudo ? 1 : 0;
    if (nlen == i)
        return pseudo ? -1 : 1;
    uint8_t ok = 1;
    for (; i < nlen; i++)
        ok &= NAME_OK[name[i]];
    if (!ok) {
        if (pseudo)
            return -1;
        for (size_t j = 0; j < nlen; j++)
            if (name[j] >= 'A' && name[j] <= 'Z')
                return -1;
        return 1;
    }
    if (vlen > 0 && memchr(value, '\0', vlen) != NULL)
        return pseudo ? -1 : 1;
    return 0;
}

static int
on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags;
    struct h2c *c = ud;
    struct h2s *s = c->hdr_s != NULL && c->hdr_s->id == f->hd.stream_id
                        ? c->hdr_s : nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (s == NULL || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;   /* request trailers: nothing gRPC needs */
    if (buf_len(&s->hdrs) + nlen + vlen + 2 > s->c->lim.max_header_bytes)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  /* RST_STREAM */
    /* nghttp2's HTTP messaging checks are off (h2_new): the field rules
     * of RFC 9113 8.2.1 are checked here (field_check) and at lookup
     * (value_ok).  So names and values stored are NUL-free. */
    int bad = field_check(name, nlen, value, vlen);
    if (bad < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (bad > 0)
        return 0;
    if (buf_reserve(&s->hdrs, nlen + vlen + 2) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    uint8_t *t = buf_tail(&s->hdrs);
    memcpy(t, name, nlen);
    t[nlen] = '\0';
    memcpy(t + nlen + 1, value, vlen);
    t[nlen + 1 + vlen] = '\0';
    /* Which known header, by its length and a letter first (most
     * headers are none of them and leave after a compare or two). */
    int k = -1;
    switch (nlen) {
    case 5: k = HK_PATH; break;
    case 7: k = HK_METHOD; break;
    case 12: k = name[0] == 'c' ? HK_CONTENT_TYPE : HK_TIMEOUT; break;
    case 13: k = HK_ENCODING; break;
    default: break;
    }
    if (k >= 0 && memcmp(name, KNOWN[k].name, nlen) == 0 && s->known[k] == 0)
        s->known[k] = (uint32_t)(buf_len(&s->hdrs) + nlen + 1 + 1);   /* the first, as hdr_get finds it */
    s->hdrs.end += nlen + vlen + 2;
    return 0;
}

static void
headers_done(struct h2c *c, struct h2s *s)
{
    const char *ct = known_get(s, HK_CONTENT_TYPE);
    const char *method = known_get(s, HK_METHOD);
    if (method == NULL || strcmp(method, "POST") != 0 || ct == NULL ||
        strncmp(ct, "application/grpc", 16) != 0 || (ct[16] != '\0' && ct[16] != '+' && ct[16] != ';')) {
        /* Not gRPC: HTTP 415 as gRPC servers answer it (a gRPC client
         * reads that as UNKNOWN). */
        s->discard = true;
        s->finished = true;
        s->status = GRPC_UNKNOWN;
        s->headers_done = true;
        s->headers_sent = true;
        nghttp2_nv nv[1] = { { (uint8_t *)":status", (uint8_t *)"415", 7, 3, NGHTTP2_NV_FLAG_NONE } };
        nghttp2_submit_response(c->ng, s->id, nv, 1, NULL);
        return;
    }
    s->headers_done = true;
    if (s->refused_by != 0) {
        /* An open stream holds memory whether or not its request ever
         * comes: past the budget no new one, as a remoting request past
         * it is answered SYSTEM_BUSY (docs/memory.md). */
        c->stats.refused_big++;
        c->stats.refused_budget++;
        char why[200];
        struct membudget_figures f;
        membudget_figures(c->cn->r->budget, &f);
        enum membudget_limit which = (enum membudget_limit)(s->refused_by - 1);
        int64_t lim = which == MB_LIMIT_CONNECTION ? f.limits.per_conn
                    : which == MB_LIMIT_PEER ? f.limits.per_peer : f.limits.total;
        snprintf(why, sizeof(why), "[MEMORY_BUDGET] %s=%lld reached: no new call on this connection until "
                 "others end, try again later", membudget_limit_key(which), (long long)lim);
        refuse(s, GRPC_RESOURCE_EXHAUSTED, why);
        if (++c->budget_refused == H2_BUDGET_REFUSALS_MAX && !c->closing) {
            log_info("gRPC connection %s kept opening streams past %s (%u refused); GOAWAY", c->cn->peer,
                     membudget_limit_key(which), c->budget_refused);
            c->closing = true;
            c->over_budget = true;
            nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        return;
    }
    const char *to = known_get(s, HK_TIMEOUT);
    if (to != NULL) {
        uint64_t ms = parse_timeout(to);
        if (ms == 0) {
            refuse(s, GRPC_INTERNAL, "bad grpc-timeout");
            return;
        }
        s->deadline_ms = now_ms(c) + ms;
    }
    const char *enc = known_get(s, HK_ENCODING);
    s->gzip = enc != NULL && strcmp(enc, "gzip") == 0;
    /* Answers the client has not taken (its flow-control window shut)
     * count against the same bound as requests: no new call until it
     * reads. */
    if (c->out_bytes > c->lim.max_conn_buffer) {
        c->stats.refused_big++;
        s->discard = true;
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED,
                  "the connection holds too many unread answers (grpcMaxConnectionBufferBytes)");
        return;
    }
    int rc = c->cb->on_call(s);
    if (rc != GRPC_OK) {
        s->discard = true;
        h2_finish(s, rc, rc == GRPC_UNIMPLEMENTED ? "method not implemented" : "refused");
        return;
    }
    s->accepted = true;
    arm_timer(c);
}

static int
on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    struct h2c *c = ud;
    switch (f->hd.type) {
    case NGHTTP2_RST_STREAM: {
        c->stats.resets_in++;
        uint64_t now = now_ms(c);
        if (now - c->window_start_ms >= 1000) {
            c->window_start_ms = now;
            c->opened_in_window = 0;
            c->resets_in_window = 0;
        }
        if (c->lim.resets_per_sec != 0 && ++c->resets_in_window > c->lim.resets_per_sec &&
            !c->closing) {
            log_warn("gRPC connection %s reset more than %u streams in a second "
                     "(grpcMaxResetsPerSecond, rapid reset); GOAWAY", c->cn->peer,
                     c->lim.resets_per_sec);
            c->closing = true;
            nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        return 0;
    }
    case NGHTTP2_PING:
        if (f->hd.flags & NGHTTP2_FLAG_ACK)
            c->ping_sent_ms = 0;
        return 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA: {
        struct h2s *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
        if (s == NULL)
            return 0;
        if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
            headers_done(c, s);
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
            s->remote_closed = true;
            if (!s->discard && !s->finished) {
                deliver(s);
                if (!s->discard && !s->finished) {
                    if (buf_len(&s->in) != 0)
                        refuse(s, GRPC_INTERNAL, "request ends inside a message");
                    else if (c->cb->on_half_close != NULL)
                        c->cb->on_half_close(s);
                }
            }
        }
        return 0;
    }
    default:
        return 0;
    }
}

static int
on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
              void *ud)
{
    (void)flags;
    struct h2c *c = ud;
    struct h2s *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s == NULL || s->discard || s->finished)
        return 0;
    /* The common case, a chunk holding whole messages and nothing
     * buffered before it: hand them up from nghttp2's buffer, uncopied. */
    if (buf_len(&s->in) == 0) {
        size_t used = take_messages(s, data, len);
        if (s->discard || s->finished)
            return 0;
        data += used;
        len -= used;
        if (len == 0)
            return 0;
    }
    if (c->buffered + len > c->lim.max_conn_buffer) {
        c->stats.refused_big++;
        refuse(s, GRPC_RESOURCE_EXHAUSTED,
               "the connection holds too many request bytes (grpcMaxConnectionBufferBytes)");
        return 0;
    }
    if (buf_append(&s->in, data, len) != 0) {
        refuse(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return 0;
    }
    c->buffered += len;
    deliver(s);
    return 0;
}

static int
on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    /* A refused call whose answer has gone out while the client still
     * sends: tell it to stop (RST_STREAM NO_ERROR, as grpc-go does). */
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct h2s *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
        if (s != NULL && s->discard && !s->remote_closed)
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    }
    return 0;
}

static int
on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
    (void)error_code;
    (void)ud;
    struct h2s *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s == NULL)
        return 0;
    stream_cancel(s);
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    stream_free(s);
    return 0;
}

size_t
h2_on_bytes(struct conn *cn, const uint8_t *p, size_t n)
{
    struct h2c *c = cn->ext;
    if (c == NULL || c->freed)
        return n;
    c->last_read_ms = now_ms(c);
    c->heard = true;
    c->in_recv = true;
    ssize_t rc = nghttp2_session_mem_recv(c->ng, p, n);
    c->in_recv = false;
    if (rc < 0) {
        log_info("gRPC connection %s: %s; closed", cn->peer, nghttp2_strerror((int)rc));
        /* nghttp2 has queued a GOAWAY for protocol errors: send it. */
        h2_flush(c);
        conn_close(cn, "http2 protocol error");
        return n;
    }
    h2_flush(c);
    if (!cn->closed)
        arm_timer(c);
    return n;
}

/* }}} */

/* {{{ Life cycle */

static void
timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void
h2_on_conn_close(struct h2c *c)
{
    if (c == NULL || c->freed)
        return;
    c->freed = true;
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &c->streams) {
        struct h2s *s = container_of(pos, struct h2s, link);
        stream_cancel(s);
    }
    if (c->cb->on_close != NULL)
        c->cb->on_close(c);
    q_foreach_safe(pos, tmp, &c->streams) {
        struct h2s *s = container_of(pos, struct h2s, link);
        nghttp2_session_set_stream_user_data(c->ng, s->id, NULL);
        stream_free(s);
    }
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    budget_release(c, c->charged);
    c->charged = 0;
    c->cn->ext = NULL;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, timer_closed);
}

struct h2c *
h2_new(struct conn *cn, const struct h2_limits *lim, const struct h2_callbacks *cb, void *user)
{
    struct h2c *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        err_set("out of memory for an HTTP/2 session");
        return NULL;
    }
    c->cn = cn;
    c->lim = *lim;
    c->cb = cb;
    c->user = user;
    q_init(&c->streams);
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        free(c);
        err_set("out of memory for an HTTP/2 session");
        return NULL;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_option *opt;
    int rc = nghttp2_option_new(&opt);
    if (rc == 0) {
        /* Past max_streams nghttp2 answers RST_STREAM REFUSED_STREAM by
         * itself (the client may not have seen our SETTINGS yet). */
        nghttp2_option_set_max_reserved_remote_streams(opt, 0);
        nghttp2_option_set_max_send_header_block_length(opt, 65536);
        nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
        /* nghttp2's HTTP messaging rules (pseudo-header sets, content-length,
         * each field's characters through a per-header token lookup) were
         * 2.3k instructions of a 1 KiB SendMessage's 34k: on_header checks
         * the fields in one table pass, headers_done what gRPC needs
         * (POST, application/grpc, a :path). */
        nghttp2_option_set_no_http_messaging(opt, 1);
        rc = nghttp2_session_server_new2(&c->ng, cbs, c, opt);
        nghttp2_option_del(opt);
    }
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        free(c);
        err_set("cannot start an HTTP/2 session: %s", nghttp2_strerror(rc));
        return NULL;
    }
    /* NO_RFC7540_PRIORITIES (RFC 9218): no gRPC client sends RFC 7540
     * priorities, and without them nghttp2 keeps no priority tree, no
     * closed streams for it, and schedules output round robin. */
    nghttp2_settings_entry iv[5] = {
        { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, lim->max_streams },
        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW },
        { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)lim->max_header_bytes },
        { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
        { NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
    };
    rc = nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 5);
    if (rc == 0)
        rc = nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
    if (rc != 0 || uv_timer_init(&cn->r->loop, &c->timer) != 0) {
        nghttp2_session_del(c->ng);
        free(c);
        err_set("cannot start an HTTP/2 session");
        return NULL;
    }
    c->timer.data = c;
    c->last_read_ms = now_ms(c);
    c->window_start_ms = c->last_read_ms;
    cn->ext = c;
    int refused_by = 0;
    if (budget_charge(c, H2_SESSION_BYTES, &refused_by)) {
        c->charged = H2_SESSION_BYTES;
    } else {
        /* Past the budget no new session: GOAWAY once the client has
         * spoken (heard), then closed. */
        log_debug("gRPC connection %s refused: %s reached", cn->peer,
                  membudget_limit_key((enum membudget_limit)(refused_by - 1)));
        c->closing = true;
        c->over_budget = true;
        nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
    }
    h2_flush(c);
    arm_timer(c);
    return c;
}

void
h2_goaway(struct h2c *c)
{
    if (c->freed || c->goaway_sent)
        return;
    c->goaway_sent = true;
    nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->ng),
                          NGHTTP2_NO_ERROR, NULL, 0);
    h2_flush(c);
}

void *h2_user(const struct h2c *c) { return c->user; }
struct conn *h2_conn(const struct h2c *c) { return c->cn; }
struct h2s *
h2_find(struct h2c *c, int32_t id)
{
    if (c->freed)
        return NULL;
    struct h2s *s = nghttp2_session_get_stream_user_data(c->ng, id);
    return s != NULL && !s->finished ? s : NULL;
}
struct h2c *h2_stream_conn(const struct h2s *s) { return s->c; }
int32_t h2_stream_id(const struct h2s *s) { return s->id; }
void h2_set_stream_user(struct h2s *s, void *u) { s->user = u; }
void *h2_stream_user(const struct h2s *s) { return s->user; }
void h2_set_bidi(struct h2s *s) { s->bidi = true; }
int64_t
h2_deadline_left_ms(const struct h2s *s)
{
    if (s->deadline_ms == 0)
        return -1;
    uint64_t now = now_ms(s->c);
    return now >= s->deadline_ms ? 0 : (int64_t)(s->deadline_ms - now);
}
void h2_set_code(struct h2s *s, int32_t code) { s->code = code; }
int32_t h2_code(const struct h2s *s) { return s->code; }
int h2_status(const struct h2s *s) { return s->finished ? s->status : GRPC_CANCELLED; }
int64_t h2_elapsed_ns(const struct h2s *s) { return clock_mono_ns() - s->start_ns; }
const struct h2_stats *h2_stats(const struct h2c *c) { return &c->stats; }

/* }}} */
