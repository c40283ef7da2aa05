/*
 * h2: see h2.h.
 *
 * The server side of HTTP/2 (RFC 9113) is ours: a frame reader over the
 * bytes the conn hands in (whole frames are taken, a partial one stays in
 * the conn's `in` until the rest arrives), and frames written straight to
 * the conn's output; HPACK decoding is hpack.c's (one decoder per
 * connection: every header block goes through it, in order, so its
 * dynamic table stays the client's).  nghttp2's session did this work in
 * about 10,400 instructions of a 1 KiB SendMessage's 29,000 (callgrind,
 * scripts/bench/grpc_callgrind.lua): a frame queue, a priority/scheduling
 * layer, a map of streams, callbacks per frame and per field, its output
 * assembled and then copied again into the conn.  gRPC needs none of that.
 *
 * What is served: SETTINGS (ours sent first, the client's applied and
 * acknowledged), HEADERS + CONTINUATION (padding, priority fields skipped),
 * DATA (padding), WINDOW_UPDATE, PING, RST_STREAM, GOAWAY (both ways),
 * PRIORITY (ignored, as RFC 9218 servers may), unknown types (ignored);
 * PUSH_PROMISE from a client is a PROTOCOL_ERROR.  Connection errors
 * (RFC 9113 5.4.1) send GOAWAY with the code, end every stream, and
 * close once the GOAWAY is written (conn_close_drained: a close at once
 * would drop it, and the client would never learn why); stream errors
 * send RST_STREAM.  Malformed requests (RFC 9113 8.1.1: pseudo-headers
 * out of order, repeated, unknown or missing, connection-specific
 * fields) are stream errors PROTOCOL_ERROR.
 *
 * Flow control: a request's DATA is consumed as it arrives (into the
 * call's buffer, bounded as h2.h says), so the windows we grant are
 * replenished (WINDOW_UPDATE) once half of them is used, and a peer that
 * sends past them is a FLOW_CONTROL_ERROR.  Answers are written as far as
 * the client's connection and stream windows allow; the rest waits in the
 * call's `out` and is written when a WINDOW_UPDATE (or a larger
 * SETTINGS_INITIAL_WINDOW_SIZE) opens them.
 *
 * HPACK encoding needs no table: our header blocks are literals "without
 * indexing" of a few constant fields (precomputed), so our encoder's
 * dynamic table is always empty.  After the client changes
 * SETTINGS_HEADER_TABLE_SIZE the next block starts with a table size
 * update to 0 (RFC 7541 4.2), which any setting allows.
 *
 * Streams are kept in a sorted array of their ids (client ids only grow:
 * a new one is appended), looked up by binary search: a peer choosing ids
 * cannot make a lookup slower than O(log n).  A stream that ends is taken
 * out of the array at once but freed later (reap), at the end of the read
 * or flush, so that the service may still use its pointer in the call
 * that ended it.
 */
#include "grpc/h2.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "grpc/hpack.h"
#include "net/conn.h"

/* The client's per-stream window we announce: large enough that a 4 MiB
 * message does not wait for round trips, small against max_conn_buffer. */
#define H2_STREAM_WINDOW (1 << 20)
#define H2_CONN_WINDOW (4 << 20)
#define H2_DEFAULT_WINDOW 65535
#define H2_MAX_WINDOW 0x7fffffff

/* The largest frame we take: SETTINGS_MAX_FRAME_SIZE's default, which we
 * do not raise (a gRPC client's DATA frames are 16 KiB anyway). */
#define H2_MAX_FRAME 16384

/* What the memory budget is charged (h2.h).  Measured on a 1-worker
 * standalone (RSS from /proc, 50 connections from one address, then 100
 * idle Telemetry streams on each), with nghttp2's session then: 27,000
 * bytes a connection (the socket's conn, its shadow, the session and its
 * HPACK tables) and 3,300 a stream (the h2s and its headers, nghttp2's
 * stream, the service's call); ours hold less (no nghttp2 session or
 * stream), so the budget errs further on the safe side. */
#define H2_STREAM_BYTES 4096
/* Bytes of known header values a stream holds without an allocation. */
#define H2_HVAL_INLINE 192
#define H2_SESSION_BYTES 32768

/* Streams a connection may have refused by the memory budget before it
 * is closed (GOAWAY ENHANCE_YOUR_CALM): a client told RESOURCE_EXHAUSTED
 * backs off; one that keeps opening streams is flooding, and answering
 * each of a million refusals would keep the worker from everyone else
 * (measured: scripts/bench/grpc_idle.lua, docs/grpc.md). */
#define H2_BUDGET_REFUSALS_MAX 64

/* Frame types, flags and error codes (RFC 9113 6, 7). */
enum { F_DATA = 0, F_HEADERS = 1, F_PRIORITY = 2, F_RST_STREAM = 3, F_SETTINGS = 4, F_PUSH_PROMISE = 5,
       F_PING = 6, F_GOAWAY = 7, F_WINDOW_UPDATE = 8, F_CONTINUATION = 9 };
enum { FL_END_STREAM = 0x1, FL_ACK = 0x1, FL_END_HEADERS = 0x4, FL_PADDED = 0x8, FL_PRIORITY = 0x20 };
enum { E_NO_ERROR = 0, E_PROTOCOL = 1, E_INTERNAL = 2, E_FLOW_CONTROL = 3, E_STREAM_CLOSED = 5,
       E_FRAME_SIZE = 6, E_REFUSED_STREAM = 7, E_CANCEL = 8, E_COMPRESSION = 9, E_CALM = 11 };

static const uint8_t PREFACE[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* The request headers the server reads (h2 itself and the service:
 * h2_header), the only ones a stream keeps, found once as they arrive
 * (on_field); the others (:scheme, :authority, te, user-agent, the SDKs'
 * x-mq-* ids and versions) are checked and counted, never copied. */
enum { HK_PATH, HK_METHOD, HK_CONTENT_TYPE, HK_TIMEOUT, HK_ENCODING, HK_LANGUAGE, HK_CLIENT_ID,
       HK_AUTHORIZATION, HK_DATE_TIME, H2_KNOWN };
static const struct {
    const char *name;
    size_t len;
} KNOWN[H2_KNOWN] = {
    { ":path", 5 }, { ":method", 7 }, { "content-type", 12 }, { "grpc-timeout", 12 },
    { "grpc-encoding", 13 }, { "x-mq-language", 13 }, { "x-mq-client-id", 14 },
    { "authorization", 13 }, { "x-mq-date-time", 14 },
};

struct h2s {
    struct qnode link;           /* in c->streams; in c->dead once closed */
    struct qnode wlink;          /* in c->blocked while `out` waits for a window */
    struct h2c *c;
    int32_t id;
    void *user;
    struct buf hdrs;             /* the known headers' values past hval's room */
    uint32_t known[H2_KNOWN];    /* offset + 1 of the value of a known header
                                  * (its first) in hval, then hdrs; 0: absent */
    uint32_t hval_used;
    size_t hdr_bytes;            /* names + values + 2 of its fields, kept or not */
    struct buf in;               /* request bytes not yet cut into messages */
    struct buf out;              /* response bytes the client's window has not let out */
    int64_t send_win;            /* the client's window for this stream */
    int64_t recv_win;            /* what the client may still send us */
    uint32_t recv_unacked;       /* received since our last WINDOW_UPDATE */
    uint64_t deadline_ms;        /* uv_now() at which it expires; 0 = none */
    uint64_t opened_ms;
    uint64_t stall_ms;           /* since when `out` waits for a window the
                                    client has not moved; 0 = not waiting */
    int64_t start_ns;            /* clock_mono_ns() at its first header */
    int64_t charged;             /* bytes of the memory budget held */
    int32_t code;                /* h2_set_code; -1: none */
    int refused_by;              /* the budget limit that refused it + 1; 0: none */
    int status;
    bool gzip;                   /* grpc-encoding: gzip */
    bool bidi;
    bool accepted;               /* on_call took it */
    bool headers_sent;           /* response headers written */
    bool finished;               /* h2_finish called */
    bool remote_closed;          /* END_STREAM received */
    bool local_closed;           /* END_STREAM sent */
    bool closed;                 /* gone from the map (reset or both ends closed) */
    bool discard;                /* refused: drop further DATA, RST once answered */
    bool cancelled_told;
    bool headers_done;           /* its request headers were taken (on_end is due) */
    bool direct;                 /* h2_send_reserve's room is in the conn's output */
    /* Not zeroed when reused (stream_new): */
    struct h2s *spare_next;      /* in c->spare */
    char status_msg[256];
    /* The known headers' values, "value\0" each, while they fit (those
     * of a call without aclEnable do): no allocation per stream. */
    char hval[H2_HVAL_INLINE];
};

/* Streams freed kept per connection for its next ones (a client keeps a
 * few calls in flight): no allocation and no zeroing of status_msg per
 * call, and the header buffer kept. */
#define H2_STREAM_SPARES 16

/* How the fields of the header block being read are used. */
enum hmode { HM_DROP, HM_REQUEST, HM_TRAILERS };

struct h2c {
    struct conn *cn;
    struct hpack_dec hp;         /* the client's header blocks, decoded */
    struct buf hb;               /* a header block cut into CONTINUATIONs */
    struct h2_limits lim;
    const struct h2_callbacks *cb;
    void *user;
    struct qnode streams;        /* open, in id order */
    struct qnode dead;           /* closed, to be freed by reap() */
    struct qnode blocked;        /* answers waiting for a window */
    size_t nstreams;
    /* id -> stream: ids ascending; a closed stream's slot is NULL until
     * compacted (map_del) */
    int32_t *map_ids;
    struct h2s **map_s;
    size_t map_n, map_cap, map_holes;
    int32_t last_id;             /* the highest stream id the client opened */
    /* Ids below last_id the client skipped, never used (gap_lo[i] ..
     * gap_hi[i], odd, ascending; the newest H2_GAPS): a HEADERS on one
     * opens a stream below one already open, a PROTOCOL_ERROR (RFC 9113
     * 5.1.1), where one on an id that was used may be trailers racing
     * our reset, and is dropped.  Clients number streams without gaps;
     * past H2_GAPS the oldest are forgotten (their HEADERS then dropped,
     * as nghttp2 drops any on an id it no longer knows). */
    int32_t gap_lo[8], gap_hi[8];
    uint8_t ngaps;
    size_t buffered;             /* sum of the streams' `in` */
    size_t out_bytes;            /* sum of the streams' `out` (answers not
                                  * yet written: a client whose window
                                  * stays shut leaves them here) */
    int64_t send_win;            /* the client's connection window */
    int64_t recv_win;            /* what the client may still send on the connection */
    uint32_t recv_unacked;
    uint32_t peer_initial_win;   /* its SETTINGS_INITIAL_WINDOW_SIZE */
    uint32_t peer_max_frame;     /* its SETTINGS_MAX_FRAME_SIZE */
    /* The header block being read (HEADERS, then CONTINUATIONs). */
    int32_t hb_id;               /* 0: none */
    struct h2s *hb_s;
    enum hmode hb_mode;
    bool hb_end_stream;
    size_t hb_bytes;
    uint8_t hb_pseudo;           /* HP_* seen in the request block */
    bool hb_regular;             /* a regular field seen in it */
    uv_timer_t timer;
    uint64_t window_start_ms;    /* the rate window's start */
    uint32_t opened_in_window;
    uint32_t resets_in_window;
    uint32_t settings_in_window;
    uint64_t last_read_ms;
    uint64_t ping_sent_ms;       /* 0: no PING outstanding */
    uint64_t timer_due_ms;       /* 0: not armed */
    struct h2_stats stats;
    struct h2s *spare;           /* streams freed, for the next (stream_new) */
    size_t nspare;               /* at most H2_STREAM_SPARES */
    int64_t charged;             /* the session's own share of the memory budget */
    const char *close_why;       /* set: GOAWAY written, close at the next flush */
    bool preface_done;
    bool settings_seen;          /* the client's first SETTINGS (its preface's end) */
    bool table_update_due;       /* our next header block starts with a size update */
    bool goaway_sent;
    bool goaway_due;             /* h2_goaway before the client spoke */
    bool peer_goaway;
    bool closing;                /* ENHANCE_YOUR_CALM sent: close once written */
    bool final_sent;             /* an error's GOAWAY written: nothing after it */
    bool over_budget;            /* ... because of the memory budget */
    bool failed;                 /* out of memory writing: close at the next flush */
    uint32_t budget_refused;     /* streams refused by the budget */
    bool freed;
    bool in_recv;
    bool in_draining;            /* inside the service's on_draining (draining()) */
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

/* {{{ The stream map */

static size_t
map_pos(const struct h2c *c, int32_t id)
{
    size_t lo = 0, hi = c->map_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->map_ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct h2s *
map_get(const struct h2c *c, int32_t id)
{
    /* The newest stream first: most frames are for it. */
    if (c->map_n > 0 && c->map_ids[c->map_n - 1] == id)
        return c->map_s[c->map_n - 1];
    size_t i = map_pos(c, id);
    return i < c->map_n && c->map_ids[i] == id ? c->map_s[i] : NULL;
}

/* Appends (ids only grow).  -1 when out of memory. */
static int
map_add(struct h2c *c, int32_t id, struct h2s *s)
{
    if (c->map_n == c->map_cap) {
        size_t cap = c->map_cap ? c->map_cap * 2 : 8;
        int32_t *ids = realloc(c->map_ids, cap * sizeof(*ids));
        if (ids == NULL)
            return -1;
        c->map_ids = ids;
        struct h2s **ss = realloc(c->map_s, cap * sizeof(*ss));
        if (ss == NULL)
            return -1;
        c->map_s = ss;
        c->map_cap = cap;
    }
    c->map_ids[c->map_n] = id;
    c->map_s[c->map_n] = s;
    c->map_n++;
    return 0;
}

/* Leaves a hole; compacts once holes are half the array (amortised O(1)). */
static void
map_del(struct h2c *c, int32_t id)
{
    size_t i = map_pos(c, id);
    if (i >= c->map_n || c->map_ids[i] != id || c->map_s[i] == NULL)
        return;
    c->map_s[i] = NULL;
    c->map_holes++;
    while (c->map_n > 0 && c->map_s[c->map_n - 1] == NULL) {
        c->map_n--;
        c->map_holes--;
    }
    if (c->map_holes > 8 && c->map_holes * 2 > c->map_n) {
        size_t o = 0;
        for (size_t k = 0; k < c->map_n; k++) {
            if (c->map_s[k] != NULL) {
                c->map_ids[o] = c->map_ids[k];
                c->map_s[o] = c->map_s[k];
                o++;
            }
        }
        c->map_n = o;
        c->map_holes = 0;
    }
}

/* }}} */

/* {{{ Writing frames */

static void
frame_header(uint8_t *h, size_t n, uint8_t type, uint8_t flags, int32_t id)
{
    h[0] = (uint8_t)(n >> 16);
    h[1] = (uint8_t)(n >> 8);
    h[2] = (uint8_t)n;
    h[3] = type;
    h[4] = flags;
    h[5] = (uint8_t)((uint32_t)id >> 24);
    h[6] = (uint8_t)((uint32_t)id >> 16);
    h[7] = (uint8_t)((uint32_t)id >> 8);
    h[8] = (uint8_t)id;
}

/* A frame, written in place at the end of the conn's output (one reserve,
 * where conn_send's appends measured 200 instructions a frame). */
static void
put_frame(struct h2c *c, uint8_t type, uint8_t flags, int32_t id, const void *p, size_t n)
{
    if (c->failed || c->final_sent || !conn_writable(c->cn))
        return;
    uint8_t *o = conn_out_reserve(c->cn, 9 + n);
    if (o != NULL) {
        frame_header(o, n, type, flags, id);
        if (n > 0)
            memcpy(o + 9, p, n);
        conn_out_commit(c->cn, 9 + n);
        return;
    }
    uint8_t h[9];
    frame_header(h, n, type, flags, id);
    if (conn_send(c->cn, h, 9, p, n) != 0)
        c->failed = true;   /* closed at the next flush, outside any callback */
}

static void
put_rst(struct h2c *c, int32_t id, uint32_t code)
{
    uint8_t p[4] = { (uint8_t)(code >> 24), (uint8_t)(code >> 16), (uint8_t)(code >> 8), (uint8_t)code };
    put_frame(c, F_RST_STREAM, 0, id, p, 4);
}

static void
put_window_update(struct h2c *c, int32_t id, uint32_t inc)
{
    uint8_t p[4] = { (uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc };
    put_frame(c, F_WINDOW_UPDATE, 0, id, p, 4);
}

static void
put_goaway(struct h2c *c, uint32_t code)
{
    uint32_t last = (uint32_t)c->last_id;
    uint8_t p[8] = { (uint8_t)(last >> 24), (uint8_t)(last >> 16), (uint8_t)(last >> 8), (uint8_t)last,
                     (uint8_t)(code >> 24), (uint8_t)(code >> 16), (uint8_t)(code >> 8), (uint8_t)code };
    put_frame(c, F_GOAWAY, 0, 0, p, 8);
}

/* The GOAWAY of a connection error or a flood: the last frame written
 * (h2_flush then closes once it has reached the client). */
static void
put_final_goaway(struct h2c *c, uint32_t code)
{
    put_goaway(c, code);
    c->final_sent = true;
}

/* Our SETTINGS and the connection window, once the client has spoken.
 * NO_RFC7540_PRIORITIES (RFC 9218): no gRPC client sends priorities. */
static void
put_preamble(struct h2c *c)
{
    const uint32_t set[5][2] = {
        { 3, c->lim.max_streams },               /* MAX_CONCURRENT_STREAMS */
        { 4, H2_STREAM_WINDOW },                 /* INITIAL_WINDOW_SIZE */
        { 6, (uint32_t)c->lim.max_header_bytes },/* MAX_HEADER_LIST_SIZE */
        { 2, 0 },                                /* ENABLE_PUSH */
        { 9, 1 },                                /* NO_RFC7540_PRIORITIES */
    };
    uint8_t p[30];
    for (int i = 0; i < 5; i++) {
        uint8_t *q = p + 6 * i;
        q[0] = (uint8_t)(set[i][0] >> 8);
        q[1] = (uint8_t)set[i][0];
        q[2] = (uint8_t)(set[i][1] >> 24);
        q[3] = (uint8_t)(set[i][1] >> 16);
        q[4] = (uint8_t)(set[i][1] >> 8);
        q[5] = (uint8_t)set[i][1];
    }
    put_frame(c, F_SETTINGS, 0, 0, p, sizeof(p));
    put_window_update(c, 0, H2_CONN_WINDOW - H2_DEFAULT_WINDOW);
}

/* A connection error (RFC 9113 5.4.1): GOAWAY with its code; nothing
 * more is read, and the connection is closed at the next flush. */
static void
conn_fail(struct h2c *c, uint32_t code, const char *why)
{
    if (c->close_why != NULL)
        return;
    log_info("gRPC connection %s: %s; closed", c->cn->peer, why);
    put_final_goaway(c, code);
    c->goaway_sent = true;
    c->close_why = "http2 protocol error";
}

/* GOAWAY ENHANCE_YOUR_CALM: a peer past a limit. */
static void
conn_calm(struct h2c *c)
{
    if (c->close_why != NULL)
        return;
    c->closing = true;
    if (c->heard)
        put_final_goaway(c, E_CALM);
    c->goaway_sent = true;
    c->close_why = c->over_budget ? "memory budget reached (GOAWAY ENHANCE_YOUR_CALM)"
                                  : "http2 flood (GOAWAY ENHANCE_YOUR_CALM)";
}

/* HPACK (RFC 7541) blocks of literals without indexing, so the client's
 * table is never touched: 0x88 = :status 200 (static index 8). */
#define HP_STATUS_200 "\x88"
#define HP_CONTENT_TYPE "\x0f\x10\x10" "application/grpc"      /* name: static 31 */
#define HP_ACCEPT_ENC "\x00\x14" "grpc-accept-encoding" "\x0d" "identity,gzip"
#define HP_STATUS_415 "\x08\x03" "415"                          /* name: static 8 */

/* An HPACK integer with an n-bit prefix (RFC 7541 5.1) at p; its length. */
static size_t
hp_int(uint8_t *p, uint8_t first, int nbits, size_t v)
{
    size_t max = ((size_t)1 << nbits) - 1;
    if (v < max) {
        p[0] = (uint8_t)(first | v);
        return 1;
    }
    size_t o = 0;
    p[o++] = (uint8_t)(first | max);
    v -= max;
    while (v >= 128) {
        p[o++] = (uint8_t)((v & 127) | 128);
        v >>= 7;
    }
    p[o++] = (uint8_t)v;
    return o;
}

/* A literal field without indexing, new name. */
static size_t
hp_literal(uint8_t *p, const char *name, size_t nlen, const char *value, size_t vlen)
{
    size_t o = 0;
    p[o++] = 0;
    o += hp_int(p + o, 0, 7, nlen);
    memcpy(p + o, name, nlen);
    o += nlen;
    o += hp_int(p + o, 0, 7, vlen);
    memcpy(p + o, value, vlen);
    return o + vlen;
}

static size_t
hp_start(struct h2c *c, uint8_t *p)
{
    if (!c->table_update_due)
        return 0;
    c->table_update_due = false;
    p[0] = 0x20;   /* dynamic table size update: 0 */
    return 1;
}

static void stream_close(struct h2s *s);

/* After our END_STREAM: the stream is closed when the client's side is;
 * a refused call whose client still sends is told to stop (RST_STREAM
 * NO_ERROR, as grpc-go does). */
static void
after_local_end(struct h2s *s)
{
    s->local_closed = true;
    if (s->remote_closed) {
        stream_close(s);
    } else if (s->discard) {
        put_rst(s->c, s->id, E_NO_ERROR);
        stream_close(s);
    }
}

/* grpc-status's value: a code's decimal digits (0-16, or any int a
 * service passes), without snprintf's cost on every call's trailers. */
static size_t
status_digits(char out[16], int code)
{
    if (code >= 0 && code < 10) {
        out[0] = (char)('0' + code);
        return 1;
    }
    if (code >= 10 && code < 100) {
        out[0] = (char)('0' + code / 10);
        out[1] = (char)('0' + code % 10);
        return 2;
    }
    return (size_t)snprintf(out, 16, "%d", code);
}

/* The trailers (or, with `head`, a Trailers-Only answer): END_STREAM. */
static void
put_trailers(struct h2s *s, bool head)
{
    struct h2c *c = s->c;
    uint8_t b[1 + 64 + 16 + 32 + 3 * sizeof(s->status_msg)];
    size_t o = hp_start(c, b);
    if (head) {
        memcpy(b + o, HP_STATUS_200 HP_CONTENT_TYPE, sizeof(HP_STATUS_200 HP_CONTENT_TYPE) - 1);
        o += sizeof(HP_STATUS_200 HP_CONTENT_TYPE) - 1;
    }
    char cs[16];
    size_t cl = status_digits(cs, s->status);
    o += hp_literal(b + o, "grpc-status", 11, cs, cl);
    size_t ml = strlen(s->status_msg);
    if (ml > 0)
        o += hp_literal(b + o, "grpc-message", 12, s->status_msg, ml);
    put_frame(c, F_HEADERS, FL_END_HEADERS | FL_END_STREAM, s->id, b, o);
    after_local_end(s);
}

static void
put_headers(struct h2s *s)
{
    struct h2c *c = s->c;
    static const char H[] = HP_STATUS_200 HP_CONTENT_TYPE HP_ACCEPT_ENC;
    uint8_t b[1 + sizeof(H)];
    size_t o = hp_start(c, b);
    memcpy(b + o, H, sizeof(H) - 1);
    put_frame(c, F_HEADERS, FL_END_HEADERS, s->id, b, o + sizeof(H) - 1);
    s->headers_sent = true;
}

static void arm_timer(struct h2c *c);

/* Writes what the windows let out of s->out, then the trailers once it
 * is empty and the call finished. */
static void
send_out(struct h2s *s)
{
    struct h2c *c = s->c;
    if (s->closed || s->local_closed)
        return;
    bool moved = false;
    while (buf_len(&s->out) > 0) {
        int64_t w = c->send_win < s->send_win ? c->send_win : s->send_win;
        if (w <= 0)
            break;
        size_t k = buf_len(&s->out);
        if ((int64_t)k > w)
            k = (size_t)w;
        if (k > c->peer_max_frame)
            k = c->peer_max_frame;
        put_frame(c, F_DATA, 0, s->id, buf_head(&s->out), k);
        buf_consume(&s->out, k);
        c->out_bytes -= k;
        c->send_win -= (int64_t)k;
        s->send_win -= (int64_t)k;
        moved = true;
    }
    if (buf_len(&s->out) > 0) {
        /* A client that never opens its window would hold the answer and
         * the stream slot for ever: the timer resets it once it waited
         * stream_idle_ms without progress. */
        if (moved || s->stall_ms == 0)
            s->stall_ms = now_ms(c);
        if (!q_linked(&s->wlink)) {
            q_insert_tail(&c->blocked, &s->wlink);
            arm_timer(c);
        }
        return;
    }
    s->stall_ms = 0;
    buf_reset(&s->out);
    if (q_linked(&s->wlink))
        q_remove(&s->wlink);
    if (s->finished)
        put_trailers(s, false);
}

/* A window opened: the blocked streams, in the order they blocked. */
static void
send_blocked(struct h2c *c)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &c->blocked) {
        if (c->send_win <= 0)
            break;
        send_out(container_of(pos, struct h2s, wlink));
    }
}

/* }}} */

/* {{{ Streams */

/* s, whose buffers but hdrs are freed, kept for the next stream_new with
 * its share of the memory budget (H2_STREAM_BYTES covers the stream, its
 * header room and the service's call, which are kept too): memory kept
 * for reuse is memory held.  One the budget refused is freed. */
static void
stream_drop(struct h2c *c, struct h2s *s)
{
    if (c->nspare < H2_STREAM_SPARES && !c->freed && s->hdrs.cap <= 1024 && s->charged > 0) {
        buf_reset(&s->hdrs);
        s->spare_next = c->spare;
        c->spare = s;
        c->nspare++;
        return;
    }
    budget_release(c, s->charged);
    buf_free(&s->hdrs);
    free(s);
}

static struct h2s *
stream_new(struct h2c *c, int32_t id)
{
    struct h2s *s = c->spare;
    struct buf hdrs;
    int64_t held = 0;
    if (s != NULL) {
        c->spare = s->spare_next;
        c->nspare--;
        hdrs = s->hdrs;   /* its room kept */
        held = s->charged;   /* and its share of the budget (stream_drop) */
    } else if ((s = malloc(sizeof(*s))) == NULL) {
        return NULL;
    } else {
        buf_init(&hdrs);
    }
    memset(s, 0, offsetof(struct h2s, spare_next));
    s->status_msg[0] = '\0';
    s->hdrs = hdrs;
    s->charged = held;
    if (map_add(c, id, s) != 0) {
        stream_drop(c, s);
        return NULL;
    }
    s->c = c;
    s->id = id;
    q_init(&s->wlink);
    buf_init(&s->in);
    buf_init(&s->out);
    s->send_win = c->peer_initial_win;
    s->recv_win = H2_STREAM_WINDOW;
    s->opened_ms = now_ms(c);
    s->start_ns = clock_mono_ns();
    s->code = -1;
    /* Refused, it is still made (uncharged) so that it can be answered
     * RESOURCE_EXHAUSTED once its headers are in (headers_done). */
    if (s->charged == 0 && budget_charge(c, H2_STREAM_BYTES, &s->refused_by))
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
    c->buffered -= buf_len(&s->in);
    c->out_bytes -= buf_len(&s->out);
    q_remove(&s->link);
    if (q_linked(&s->wlink))
        q_remove(&s->wlink);
    buf_free(&s->in);
    buf_free(&s->out);
    stream_drop(c, s);
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

/* The stream is gone from the connection: the service is told (when it
 * had not ended the call), and the stream freed by the next reap(). */
static void
stream_close(struct h2s *s)
{
    if (s->closed)
        return;
    struct h2c *c = s->c;
    s->closed = true;
    map_del(c, s->id);
    if (c->hb_s == s)
        c->hb_s = NULL;
    q_remove(&s->link);
    q_insert_tail(&c->dead, &s->link);
    if (q_linked(&s->wlink))
        q_remove(&s->wlink);
    c->nstreams--;
    stream_cancel(s);
}

/* A stream error (RFC 9113 5.4.2): RST_STREAM, and the stream is gone. */
static void
stream_reset(struct h2s *s, uint32_t code)
{
    if (s->closed)
        return;
    put_rst(s->c, s->id, code);
    stream_close(s);
}

static void
reap(struct h2c *c)
{
    while (!q_empty(&c->dead))
        stream_free(container_of(c->dead.next, struct h2s, link));
}

/* }}} */

/* {{{ Timer: deadlines, idle requests, stalled answers, keepalive */

static void
on_timer(uv_timer_t *t)
{
    struct h2c *c = t->data;
    c->timer_due_ms = 0;
    uint64_t now = now_ms(c);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &c->streams) {
        struct h2s *s = container_of(pos, struct h2s, link);
        if (s->stall_ms != 0 && !s->closed && c->lim.stream_idle_ms != 0 &&
            now - s->stall_ms >= c->lim.stream_idle_ms) {
            /* Its answer waited that long for a window the client never
             * opened: the slot and the bytes are given back (CANCEL). */
            c->stats.idle_reset++;
            if (!s->finished) {
                stream_cancel(s);
                s->finished = true;
                s->status = GRPC_CANCELLED;
            }
            stream_reset(s, E_CANCEL);
            continue;
        }
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
            stream_reset(s, E_CANCEL);
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
            static const uint8_t zero[8];
            if (c->heard)
                put_frame(c, F_PING, 0, 0, zero, 8);
            c->ping_sent_ms = now;
        }
    }
    h2_flush(c);
    if (!c->cn->closed && !c->freed)
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
        if (s->stall_ms != 0 && !s->closed && c->lim.stream_idle_ms != 0 &&
            s->stall_ms + c->lim.stream_idle_ms < due)
            due = s->stall_ms + c->lim.stream_idle_ms;
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

/* The service's on_draining, with flushes from inside it (a reply it
 * answers at once, e.g. a lease given back) left to the drain that
 * follows: a nested flush would close the connection (at once with no
 * linger), and with it the session the callback still walks. */
static void
draining(struct h2c *c)
{
    if (c->cb->on_draining == NULL)
        return;
    c->in_draining = true;
    c->cb->on_draining(c);
    c->in_draining = false;
}

void
h2_flush(struct h2c *c)
{
    if (c->freed || c->cn->closed || c->in_recv || c->in_draining)
        return;
    reap(c);
    if (c->cn->draining)
        return;
    if (c->failed) {
        conn_close(c->cn, "out of memory");
        return;
    }
    if (!c->heard)
        return;
    if (c->close_why != NULL) {
        /* A connection error: its streams end now (the service stops
         * working for them) and are freed with their share of the
         * memory budget, as a close frees them, and the socket closes
         * once the GOAWAY has been written, so the client reads its
         * code and last stream id (conn_close would drop it).  The
         * close_why is set while reading, and this is the flush at the
         * end of that read: nobody holds a stream's pointer. */
        while (!q_empty(&c->streams))
            stream_close(container_of(c->streams.next, struct h2s, link));
        reap(c);
        draining(c);
        conn_close_drained(c->cn, c->close_why);
    } else if ((c->goaway_sent || c->peer_goaway) && c->nstreams == 0) {
        /* The last answers (trailers) may still be queued. */
        draining(c);
        conn_close_drained(c->cn, "http2 session ended");
    }
}

uint8_t *
h2_send_reserve(struct h2s *s, size_t n)
{
    if (s->finished || s->closed || n > UINT32_MAX)
        return NULL;
    struct h2c *c = s->c;
    s->direct = false;
    /* A message that can go out at once (nothing of the call waiting,
     * the client's windows open for all of it, one frame) is written in
     * place: room in the conn's output for the DATA frame, the message
     * packed straight into it by the caller (h2.h: nothing else is
     * written before the commit). */
    if (buf_len(&s->out) == 0 && !s->local_closed && !c->failed && !c->cn->closed &&
        5 + n <= c->peer_max_frame && (int64_t)(5 + n) <= c->send_win &&
        (int64_t)(5 + n) <= s->send_win) {
        if (!s->headers_sent)
            put_headers(s);
        uint8_t *o = conn_out_reserve(c->cn, 9 + 5 + n);
        if (o != NULL) {
            s->direct = true;
            return o + 9 + 5;
        }
    }
    if (buf_reserve(&s->out, 5 + n) != 0)
        return NULL;
    return buf_tail(&s->out) + 5;
}

int
h2_send_commit(struct h2s *s, size_t n)
{
    struct h2c *c = s->c;
    if (s->direct) {
        s->direct = false;
        uint8_t *o = buf_tail(&c->cn->out);   /* where conn_out_reserve's room starts */
        frame_header(o, 5 + n, F_DATA, 0, s->id);
        o[9] = 0;
        o[10] = (uint8_t)(n >> 24);
        o[11] = (uint8_t)(n >> 16);
        o[12] = (uint8_t)(n >> 8);
        o[13] = (uint8_t)n;
        conn_out_commit(c->cn, 9 + 5 + n);
        c->send_win -= (int64_t)(5 + n);
        s->send_win -= (int64_t)(5 + n);
        return 0;
    }
    uint8_t *pre = buf_tail(&s->out);
    pre[0] = 0;
    pre[1] = (uint8_t)(n >> 24);
    pre[2] = (uint8_t)(n >> 16);
    pre[3] = (uint8_t)(n >> 8);
    pre[4] = (uint8_t)n;
    s->out.end += 5 + n;
    s->c->out_bytes += 5 + n;
    if (!s->headers_sent)
        put_headers(s);
    send_out(s);
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
    if (s->finished || s->closed)
        return;
    s->finished = true;
    s->status = code;
    if (msg == NULL || msg[0] == '\0')
        s->status_msg[0] = '\0';
    else
        percent_encode(s->status_msg, sizeof(s->status_msg), msg);
    if (!s->headers_sent) {
        /* Trailers-Only: one HEADERS frame with the status. */
        s->headers_sent = true;
        put_trailers(s, true);
    } else {
        send_out(s);
    }
}

/* }}} */

/* {{{ Input: gRPC's part */

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
known_get(const struct h2s *s, int k)
{
    if (s->known[k] == 0)
        return NULL;
    uint32_t off = s->known[k] - 1;
    return off < H2_HVAL_INLINE ? s->hval + off : (const char *)buf_head(&s->hdrs) + (off - H2_HVAL_INLINE);
}

const char *
h2_header(const struct h2s *s, const char *name)
{
    const char *v = NULL;
    size_t n = strlen(name);
    for (int i = 0; i < H2_KNOWN; i++)
        if (KNOWN[i].len == n && memcmp(name, KNOWN[i].name, n) == 0) {
            v = known_get(s, i);
            break;
        }
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
    while (!s->discard && !s->finished && !s->closed && n - used >= 5) {
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
        if (zr != Z_STREAM_END || got > c->lim.max_message) {
            /* The room is max_message + 1 bytes: a message that fills it
             * exactly has ended (Z_STREAM_END) one byte past the limit. */
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

/* A request's DATA payload (padding removed). */
static void
data_chunk(struct h2c *c, struct h2s *s, const uint8_t *data, size_t len)
{
    if (s->discard || s->finished)
        return;
    /* The common case, a frame holding whole messages and nothing
     * buffered before it: hand them up from the conn's buffer, uncopied. */
    if (buf_len(&s->in) == 0) {
        size_t used = take_messages(s, data, len);
        if (s->discard || s->finished || s->closed)
            return;
        data += used;
        len -= used;
        if (len == 0)
            return;
    }
    if (c->buffered + len > c->lim.max_conn_buffer) {
        c->stats.refused_big++;
        refuse(s, GRPC_RESOURCE_EXHAUSTED,
               "the connection holds too many request bytes (grpcMaxConnectionBufferBytes)");
        return;
    }
    if (buf_append(&s->in, data, len) != 0) {
        refuse(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    c->buffered += len;
    deliver(s);
}

/* The client's END_STREAM. */
static void
remote_end(struct h2s *s)
{
    s->remote_closed = true;
    if (!s->discard && !s->finished) {
        deliver(s);
        if (!s->discard && !s->finished && !s->closed) {
            if (buf_len(&s->in) != 0)
                refuse(s, GRPC_INTERNAL, "request ends inside a message");
            else if (s->c->cb->on_half_close != NULL)
                s->c->cb->on_half_close(s);
        }
    }
    if (s->local_closed)
        stream_close(s);
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

/* The request pseudo-headers (RFC 9113 8.3.1) as bits; 0: not one. */
enum { HP_METHOD = 1, HP_SCHEME = 2, HP_PATH = 4, HP_AUTHORITY = 8 };

static uint8_t
pseudo_bit(const uint8_t *name, size_t nlen)
{
    switch (nlen) {
    case 5: return memcmp(name, ":path", 5) == 0 ? HP_PATH : 0;
    case 7: return memcmp(name, ":method", 7) == 0 ? HP_METHOD
                 : memcmp(name, ":scheme", 7) == 0 ? HP_SCHEME : 0;
    case 10: return memcmp(name, ":authority", 10) == 0 ? HP_AUTHORITY : 0;
    default: return 0;
    }
}

/* A connection-specific field (RFC 9113 8.2.2): connection, keep-alive,
 * proxy-connection, transfer-encoding, upgrade, and te with any value
 * but "trailers" make a request malformed. */
static bool
connection_specific(const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    switch (nlen) {
    case 2: return memcmp(name, "te", 2) == 0 && (vlen != 8 || strncasecmp((const char *)value, "trailers", 8) != 0);
    case 7: return memcmp(name, "upgrade", 7) == 0;
    case 10: return memcmp(name, "connection", 10) == 0 || memcmp(name, "keep-alive", 10) == 0;
    case 16: return memcmp(name, "proxy-connection", 16) == 0;
    case 17: return memcmp(name, "transfer-encoding", 17) == 0;
    default: return false;
    }
}

/* A field as it arrives: 0 good; 1 a bad regular field (dropped, as
 * nghttp2 ignores one); -1 the request is malformed and its stream is
 * reset PROTOCOL_ERROR (RFC 9113 8.1.1): an upper-case name, a
 * pseudo-header no request has or an empty :path (8.3.1), a
 * connection-specific field (8.2.2).  A value is only checked for NUL
 * here (it is stored NUL-terminated); CR, LF and edge blanks are checked
 * when a value is looked up (value_ok), for the few a call reads, not
 * the eight or so every call carries.  What depends on the block, not
 * the field (order, duplicates, those missing), is on_hfield's. */
static int
field_check(const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    bool pseudo = nlen > 0 && name[0] == ':';
    size_t i = pseudo ? 1 : 0;
    if (nlen == i)
        return pseudo ? -1 : 1;
    if (pseudo) {
        uint8_t b = pseudo_bit(name, nlen);
        if (b == 0 || (b == HP_PATH && vlen == 0))
            return -1;
    } else if (connection_specific(name, nlen, value, vlen)) {
        return -1;
    }
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

/* Which known header a field name is (HK_*), or -1: by its length and a
 * letter (most headers are none of them and leave after a compare or
 * two), then the name itself. */
static int
known_of(const uint8_t *name, size_t nlen)
{
    int k = -1;
    switch (nlen) {
    case 5: k = HK_PATH; break;
    case 7: k = HK_METHOD; break;
    case 12: k = name[0] == 'c' ? HK_CONTENT_TYPE : HK_TIMEOUT; break;
    case 13: k = name[0] == 'g' ? HK_ENCODING : name[0] == 'a' ? HK_AUTHORIZATION : HK_LANGUAGE; break;
    case 14: k = name[5] == 'd' ? HK_DATE_TIME : HK_CLIENT_ID; break;
    default: break;
    }
    return k >= 0 && memcmp(name, KNOWN[k].name, nlen) == 0 ? k : -1;
}

/* One request header field whose field_check() said `bad`, known header
 * k (known_of): 0, or -1 when the stream must be reset.  Every good field
 * counts against max_header_bytes; only the known ones are kept (their
 * values). */
static int
on_field(struct h2s *s, size_t nlen, const uint8_t *value, size_t vlen, int bad, int k)
{
    if (s->hdr_bytes + nlen + vlen + 2 > s->c->lim.max_header_bytes)
        return -1;
    if (bad < 0)
        return -1;
    if (bad > 0)
        return 0;
    s->hdr_bytes += nlen + vlen + 2;
    if (k < 0 || s->known[k] != 0)
        return 0;   /* not read, or a repeat (the first is the one read) */
    if (vlen < H2_HVAL_INLINE - s->hval_used) {
        memcpy(s->hval + s->hval_used, value, vlen);
        s->hval[s->hval_used + vlen] = '\0';
        s->known[k] = s->hval_used + 1;
        s->hval_used += (uint32_t)vlen + 1;
        return 0;
    }
    if (buf_avail(&s->hdrs) < vlen + 1 && buf_reserve(&s->hdrs, vlen + 1) != 0)
        return -1;
    uint8_t *t = buf_tail(&s->hdrs);
    memcpy(t, value, vlen);
    t[vlen] = '\0';
    s->known[k] = (uint32_t)(H2_HVAL_INLINE + buf_len(&s->hdrs) + 1);
    s->hdrs.end += vlen + 1;
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
        uint8_t b[8];
        size_t o = hp_start(c, b);
        memcpy(b + o, HP_STATUS_415, sizeof(HP_STATUS_415) - 1);
        put_frame(c, F_HEADERS, FL_END_HEADERS | FL_END_STREAM, s->id, b, o + sizeof(HP_STATUS_415) - 1);
        after_local_end(s);
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
            c->over_budget = true;
            conn_calm(c);
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
}

/* }}} */

/* {{{ Input: frames */

static void
rate_window(struct h2c *c)
{
    uint64_t now = now_ms(c);
    if (now - c->window_start_ms >= 1000) {
        c->window_start_ms = now;
        c->opened_in_window = 0;
        c->resets_in_window = 0;
        c->settings_in_window = 0;
    }
}

/* One stream reset the peer caused, counted toward grpcMaxResetsPerSecond.
 * by_peer: its own RST_STREAM; else a frame we answer with one (WINDOW_UPDATE
 * of 0, DATA after END_STREAM...): those count too, or a client has the
 * server do its rapid reset for it ("MadeYouReset", CVE-2025-8671). */
static void
count_reset(struct h2c *c, bool by_peer)
{
    rate_window(c);
    if (c->lim.resets_per_sec != 0 && ++c->resets_in_window > c->lim.resets_per_sec &&
        !c->closing) {
        log_warn("gRPC connection %s %s more than %u streams in a second "
                 "(grpcMaxResetsPerSecond, rapid reset); GOAWAY", c->cn->peer,
                 by_peer ? "reset" : "had the server reset", c->lim.resets_per_sec);
        conn_calm(c);
    }
}

/* A stream error the peer's frame caused: reset, and counted. */
static void
stream_fault(struct h2s *s, uint32_t code)
{
    if (s->closed)
        return;
    struct h2c *c = s->c;
    stream_reset(s, code);
    count_reset(c, false);
}

/* A field of the header block being read.  Its field_check() verdict
 * (+ 2) and which known header it is (+ 1, shifted by 2) are kept with
 * it in the HPACK table, as the mark: a client sends the same fields by
 * index on every call, checked and named once. */
static uint8_t
on_hfield(void *ud, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen, uint8_t mark)
{
    struct h2c *c = ud;
    struct h2s *s = c->hb_s;
    int bad, k;
    if (mark == HPACK_MARK_NEW) {
        bad = field_check(name, nlen, value, vlen);
        k = known_of(name, nlen);
    } else if (mark == HPACK_MARK_STATIC) {
        /* Of the static table's whole fields only :status (a response's)
         * and transfer-encoding may not be in a request. */
        bad = (nlen == 7 && name[0] == ':' && name[2] == 't') || (nlen == 17 && name[0] == 't') ? -1 : 0;
        k = known_of(name, nlen);
    } else {
        bad = (int)(mark & 3) - 2;
        k = (int)(mark >> 2) - 1;
    }
    uint8_t verdict = (uint8_t)((bad + 2) | (k + 1) << 2);   /* at most 3 | 9 << 2: never NEW nor STATIC */
    if (c->hb_mode == HM_DROP || s == NULL || s->closed)
        return verdict;
    bool pseudo = nlen > 0 && name[0] == ':';
    bool malformed = bad < 0;
    if (c->hb_mode == HM_TRAILERS) {
        malformed |= pseudo;   /* no pseudo-header in trailers (8.1) */
    } else if (pseudo) {
        /* Each once, all before the first regular field (8.3). */
        uint8_t b = pseudo_bit(name, nlen);
        malformed |= c->hb_regular || (c->hb_pseudo & b) != 0;
        c->hb_pseudo |= b;
    } else {
        c->hb_regular = true;
    }
    if (malformed) {
        /* A malformed request: its stream is reset PROTOCOL_ERROR (the
         * block is still decoded to its end, for the HPACK table). */
        stream_fault(s, E_PROTOCOL);
        c->hb_mode = HM_DROP;
    } else if (c->hb_mode == HM_REQUEST && on_field(s, nlen, value, vlen, bad, k) != 0) {
        /* Too many header bytes (grpcMaxInboundMetadataSize), or no
         * memory for them. */
        stream_fault(s, E_INTERNAL);
        c->hb_mode = HM_DROP;
    }
    return verdict;
}

/* A fragment of the header block being read (`end`: its last).  The
 * block is decoded whole, whatever becomes of its fields: the HPACK table
 * must follow every block.  One in a single HEADERS frame (every gRPC
 * client's) is decoded where it lies; one cut into CONTINUATIONs is put
 * together first. */
static void
block_fragment(struct h2c *c, const uint8_t *p, size_t n, bool end)
{
    /* A block is bounded however its fields are used: a CONTINUATION
     * flood (CVE-2024-27316 class) is a flood. */
    c->hb_bytes += n;
    if (c->hb_bytes > 4 * c->lim.max_header_bytes + H2_MAX_FRAME) {
        log_warn("gRPC connection %s sent a header block over %zu bytes; GOAWAY", c->cn->peer,
                 4 * c->lim.max_header_bytes + H2_MAX_FRAME);
        conn_calm(c);
        return;
    }
    if (!end || buf_len(&c->hb) > 0) {
        if (buf_append(&c->hb, p, n) != 0) {
            c->failed = true;
            return;
        }
        if (!end)
            return;
        p = buf_head(&c->hb);
        n = buf_len(&c->hb);
    }
    int rc = hpack_decode(&c->hp, p, n, on_hfield, c);
    if (c->hb.cap > 2 * H2_MAX_FRAME)
        buf_free(&c->hb);
    else
        buf_reset(&c->hb);
    if (rc != 0) {
        conn_fail(c, E_COMPRESSION, err_msg());
        return;
    }
    struct h2s *s = c->hb_s;
    enum hmode mode = c->hb_mode;
    bool es = c->hb_end_stream;
    c->hb_id = 0;
    c->hb_s = NULL;
    if (s == NULL || s->closed || mode == HM_DROP)
        return;
    if (mode == HM_REQUEST && (c->hb_pseudo & (HP_METHOD | HP_SCHEME | HP_PATH)) !=
                                  (HP_METHOD | HP_SCHEME | HP_PATH)) {
        /* :method, :scheme and :path are required (8.3.1; no CONNECT
         * is served). */
        stream_fault(s, E_PROTOCOL);
        return;
    }
    if (mode == HM_REQUEST)
        headers_done(c, s);
    if (es && !s->closed)
        remote_end(s);
}

#define H2_GAPS 8

/* The client opened `id`, above last_id: the odd ids it skipped are a gap. */
static void
gap_note(struct h2c *c, int32_t id)
{
    int32_t lo = c->last_id == 0 ? 1 : c->last_id + 2;
    if (id <= lo)
        return;
    if (c->ngaps == H2_GAPS) {
        memmove(c->gap_lo, c->gap_lo + 1, (H2_GAPS - 1) * sizeof(c->gap_lo[0]));
        memmove(c->gap_hi, c->gap_hi + 1, (H2_GAPS - 1) * sizeof(c->gap_hi[0]));
        c->ngaps--;
    }
    c->gap_lo[c->ngaps] = lo;
    c->gap_hi[c->ngaps] = id - 2;
    c->ngaps++;
}

static bool
gap_has(const struct h2c *c, int32_t id)
{
    for (unsigned i = 0; i < c->ngaps; i++)   /* H2_GAPS at most */
        if (id >= c->gap_lo[i] && id <= c->gap_hi[i])
            return true;
    return false;
}

static void
on_headers(struct h2c *c, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (id == 0) {
        conn_fail(c, E_PROTOCOL, "HEADERS on stream 0");
        return;
    }
    size_t pad = 0;
    if (flags & FL_PADDED) {
        if (n < 1) {
            conn_fail(c, E_FRAME_SIZE, "HEADERS too short for its padding");
            return;
        }
        pad = p[0];
        p++;
        n--;
    }
    if (flags & FL_PRIORITY) {
        if (n < 5) {
            conn_fail(c, E_FRAME_SIZE, "HEADERS too short for its priority");
            return;
        }
        p += 5;
        n -= 5;
    }
    if (pad > n) {
        conn_fail(c, E_PROTOCOL, "HEADERS padding longer than the frame");
        return;
    }
    n -= pad;
    c->hb_id = id;
    c->hb_s = NULL;
    c->hb_mode = HM_DROP;
    c->hb_end_stream = (flags & FL_END_STREAM) != 0;
    c->hb_bytes = 0;
    c->hb_pseudo = 0;
    c->hb_regular = false;
    struct h2s *s = map_get(c, id);
    if (s != NULL) {
        /* Trailers: they must end the stream; gRPC needs none of them. */
        if (s->remote_closed)
            stream_fault(s, E_STREAM_CLOSED);
        else if (!(flags & FL_END_STREAM))
            stream_fault(s, E_PROTOCOL);
        else {
            c->hb_mode = HM_TRAILERS;
            c->hb_s = s;
        }
    } else if ((id & 1) == 0) {
        conn_fail(c, E_PROTOCOL, "a client stream with an even id");
        return;
    } else if (id > c->last_id) {
        gap_note(c, id);
        c->last_id = id;
        if (c->goaway_sent) {
            /* After our GOAWAY a new stream is ignored (RFC 9113 6.8). */
        } else if (c->nstreams >= c->lim.max_streams) {
            /* The client may not have seen our SETTINGS yet.  Not counted
             * as opened: each refusal is written back, so a client that
             * does not read is stopped by its own unread output. */
            put_rst(c, id, E_REFUSED_STREAM);
        } else if (rate_window(c), c->lim.streams_per_sec != 0 &&
                   ++c->opened_in_window > c->lim.streams_per_sec) {
            log_warn("gRPC connection %s opened more than %u streams in a second (grpcMaxStreamsPerSecond); "
                     "GOAWAY", c->cn->peer, c->lim.streams_per_sec);
            conn_calm(c);
            return;
        } else if ((s = stream_new(c, id)) == NULL) {
            put_rst(c, id, E_REFUSED_STREAM);
        } else {
            c->stats.streams++;
            c->hb_mode = HM_REQUEST;
            c->hb_s = s;
        }
    } else if (gap_has(c, id)) {
        conn_fail(c, E_PROTOCOL, "HEADERS on a stream id below one already opened");
        return;
    }
    /* else: a stream that has closed; its block is only decoded. */
    block_fragment(c, p, n, (flags & FL_END_HEADERS) != 0);
}

static void
on_data(struct h2c *c, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (id == 0) {
        conn_fail(c, E_PROTOCOL, "DATA on stream 0");
        return;
    }
    size_t flen = n;   /* flow control counts the padding too */
    if (flags & FL_PADDED) {
        if (n < 1 || p[0] >= n) {
            conn_fail(c, E_PROTOCOL, "DATA padding longer than the frame");
            return;
        }
        n -= 1 + (size_t)p[0];
        p++;
    }
    if ((int64_t)flen > c->recv_win) {
        conn_fail(c, E_FLOW_CONTROL, "DATA past the connection's window");
        return;
    }
    c->recv_win -= (int64_t)flen;
    c->recv_unacked += (uint32_t)flen;
    if (c->recv_unacked >= H2_CONN_WINDOW / 2) {
        put_window_update(c, 0, c->recv_unacked);
        c->recv_win += c->recv_unacked;
        c->recv_unacked = 0;
    }
    struct h2s *s = map_get(c, id);
    if (s == NULL) {
        if (id > c->last_id)
            conn_fail(c, E_PROTOCOL, "DATA on an idle stream");
        return;   /* a stream that has closed (we reset it): dropped */
    }
    if (s->remote_closed) {
        stream_fault(s, E_STREAM_CLOSED);
        return;
    }
    if ((int64_t)flen > s->recv_win) {
        stream_fault(s, E_FLOW_CONTROL);
        return;
    }
    s->recv_win -= (int64_t)flen;
    s->recv_unacked += (uint32_t)flen;
    if (!(flags & FL_END_STREAM) && s->recv_unacked >= H2_STREAM_WINDOW / 2) {
        put_window_update(c, id, s->recv_unacked);
        s->recv_win += s->recv_unacked;
        s->recv_unacked = 0;
    }
    if (n > 0)
        data_chunk(c, s, p, n);
    if ((flags & FL_END_STREAM) && !s->closed)
        remote_end(s);
}

/* The client's SETTINGS.  Every value is checked in order, but only the
 * last of each identifier is applied (RFC 9113 6.5.3 leaves the end
 * state the same; nghttp2 keeps the last too): a frame that repeats
 * INITIAL_WINDOW_SIZE thousands of times moves the open streams' windows
 * once, not once per entry.  Frames and entries are bounded
 * (grpcMaxSettingsPerSecond, grpcMaxSettingsEntries): each frame is
 * acknowledged and may walk every open stream. */
static void
on_settings(struct h2c *c, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (id != 0) {
        conn_fail(c, E_PROTOCOL, "SETTINGS on a stream");
        return;
    }
    if (flags & FL_ACK) {
        if (n != 0)
            conn_fail(c, E_FRAME_SIZE, "SETTINGS ACK with a payload");
        return;
    }
    if (n % 6 != 0) {
        conn_fail(c, E_FRAME_SIZE, "SETTINGS length not a multiple of 6");
        return;
    }
    rate_window(c);
    if (c->lim.settings_per_sec != 0 && ++c->settings_in_window > c->lim.settings_per_sec) {
        log_warn("gRPC connection %s sent more than %u SETTINGS frames in a second "
                 "(grpcMaxSettingsPerSecond); GOAWAY", c->cn->peer, c->lim.settings_per_sec);
        conn_calm(c);
        return;
    }
    if (c->lim.max_settings_entries != 0 && n / 6 > c->lim.max_settings_entries) {
        log_warn("gRPC connection %s sent a SETTINGS frame of %zu settings (grpcMaxSettingsEntries %u); "
                 "GOAWAY", c->cn->peer, n / 6, c->lim.max_settings_entries);
        conn_calm(c);
        return;
    }
    bool window_set = false, frame_set = false;
    uint32_t window = 0, frame = 0;
    for (size_t i = 0; i < n; i += 6) {
        uint16_t k = be16_get(p + i);
        uint32_t v = be32_get(p + i + 2);
        switch (k) {
        case 1:   /* HEADER_TABLE_SIZE: ours shrinks to 0 (we never index) */
            c->table_update_due = true;
            break;
        case 2:   /* ENABLE_PUSH */
            if (v > 1) {
                conn_fail(c, E_PROTOCOL, "SETTINGS_ENABLE_PUSH not 0 or 1");
                return;
            }
            break;
        case 4:   /* INITIAL_WINDOW_SIZE */
            if (v > H2_MAX_WINDOW) {
                conn_fail(c, E_FLOW_CONTROL, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1");
                return;
            }
            window = v;
            window_set = true;
            break;
        case 5:   /* MAX_FRAME_SIZE */
            if (v < 16384 || v > 16777215) {
                conn_fail(c, E_PROTOCOL, "SETTINGS_MAX_FRAME_SIZE out of range");
                return;
            }
            frame = v;
            frame_set = true;
            break;
        default:
            break;
        }
    }
    if (frame_set)
        c->peer_max_frame = frame;
    bool opened = false;
    if (window_set && window != c->peer_initial_win) {
        /* Every open stream's window moves by the difference (6.9.2). */
        int64_t delta = (int64_t)window - (int64_t)c->peer_initial_win;
        c->peer_initial_win = window;
        struct qnode *pos, *tmp;
        q_foreach_safe(pos, tmp, &c->streams) {
            struct h2s *s = container_of(pos, struct h2s, link);
            s->send_win += delta;
            if (s->send_win > H2_MAX_WINDOW) {
                conn_fail(c, E_FLOW_CONTROL, "a stream's window over 2^31-1");
                return;
            }
        }
        opened = delta > 0;
    }
    put_frame(c, F_SETTINGS, FL_ACK, 0, NULL, 0);
    if (opened)
        send_blocked(c);
}

static void
on_window_update(struct h2c *c, int32_t id, const uint8_t *p, size_t n)
{
    if (n != 4) {
        conn_fail(c, E_FRAME_SIZE, "WINDOW_UPDATE not 4 bytes");
        return;
    }
    uint32_t inc = be32_get(p) & 0x7fffffffu;
    if (id == 0) {
        if (inc == 0) {
            conn_fail(c, E_PROTOCOL, "WINDOW_UPDATE of 0");
            return;
        }
        c->send_win += inc;
        if (c->send_win > H2_MAX_WINDOW) {
            conn_fail(c, E_FLOW_CONTROL, "connection window over 2^31-1");
            return;
        }
        send_blocked(c);
        return;
    }
    struct h2s *s = map_get(c, id);
    if (s == NULL) {
        if (id > c->last_id)
            conn_fail(c, E_PROTOCOL, "WINDOW_UPDATE on an idle stream");
        return;
    }
    if (inc == 0) {
        stream_fault(s, E_PROTOCOL);
        return;
    }
    s->send_win += inc;
    if (s->send_win > H2_MAX_WINDOW) {
        stream_fault(s, E_FLOW_CONTROL);
        return;
    }
    if (buf_len(&s->out) > 0)
        send_out(s);
}

static void
on_rst_stream(struct h2c *c, int32_t id, const uint8_t *p, size_t n)
{
    (void)p;
    if (n != 4) {
        conn_fail(c, E_FRAME_SIZE, "RST_STREAM not 4 bytes");
        return;
    }
    if (id == 0 || id > c->last_id) {
        conn_fail(c, E_PROTOCOL, "RST_STREAM on an idle stream");
        return;
    }
    c->stats.resets_in++;
    count_reset(c, true);
    struct h2s *s = map_get(c, id);
    if (s != NULL)
        stream_close(s);
}

/* One whole frame. */
static void
on_frame(struct h2c *c, uint8_t type, uint8_t flags, int32_t id, const uint8_t *p, size_t n)
{
    if (c->hb_id != 0 && (type != F_CONTINUATION || id != c->hb_id)) {
        conn_fail(c, E_PROTOCOL, "a header block not followed by its CONTINUATION");
        return;
    }
    if (!c->settings_seen) {
        if (type != F_SETTINGS || (flags & FL_ACK)) {
            conn_fail(c, E_PROTOCOL, "the client preface does not end with SETTINGS");
            return;
        }
        c->settings_seen = true;
    }
    switch (type) {
    case F_DATA:
        on_data(c, flags, id, p, n);
        break;
    case F_HEADERS:
        on_headers(c, flags, id, p, n);
        break;
    case F_CONTINUATION:
        if (c->hb_id == 0) {
            conn_fail(c, E_PROTOCOL, "CONTINUATION without HEADERS");
            return;
        }
        block_fragment(c, p, n, (flags & FL_END_HEADERS) != 0);
        break;
    case F_PRIORITY:
        if (id == 0)
            conn_fail(c, E_PROTOCOL, "PRIORITY on stream 0");
        else if (n != 5)
            conn_fail(c, E_FRAME_SIZE, "PRIORITY not 5 bytes");
        break;
    case F_RST_STREAM:
        on_rst_stream(c, id, p, n);
        break;
    case F_SETTINGS:
        on_settings(c, flags, id, p, n);
        break;
    case F_PUSH_PROMISE:
        conn_fail(c, E_PROTOCOL, "PUSH_PROMISE from a client");
        break;
    case F_PING:
        if (id != 0)
            conn_fail(c, E_PROTOCOL, "PING on a stream");
        else if (n != 8)
            conn_fail(c, E_FRAME_SIZE, "PING not 8 bytes");
        else if (flags & FL_ACK)
            c->ping_sent_ms = 0;
        else
            put_frame(c, F_PING, FL_ACK, 0, p, 8);
        break;
    case F_GOAWAY:
        if (id != 0)
            conn_fail(c, E_PROTOCOL, "GOAWAY on a stream");
        else if (n < 8)
            conn_fail(c, E_FRAME_SIZE, "GOAWAY shorter than 8 bytes");
        else
            c->peer_goaway = true;
        break;
    case F_WINDOW_UPDATE:
        on_window_update(c, id, p, n);
        break;
    default:
        break;   /* unknown types are ignored (RFC 9113 5.5) */
    }
}

size_t
h2_on_bytes(struct conn *cn, const uint8_t *p, size_t n)
{
    struct h2c *c = cn->ext;
    if (c == NULL || c->freed)
        return n;
    c->last_read_ms = now_ms(c);
    if (!c->heard) {
        c->heard = true;
        put_preamble(c);
        if (c->closing)
            put_final_goaway(c, E_CALM);   /* refused by the budget in h2_new */
        else if (c->goaway_due)
            put_goaway(c, E_NO_ERROR);
    }
    size_t off = 0;
    c->in_recv = true;
    if (!c->preface_done && c->close_why == NULL) {
        size_t k = n < sizeof(PREFACE) ? n : sizeof(PREFACE);
        if (memcmp(p, PREFACE, k) != 0) {
            log_info("gRPC connection %s: not an HTTP/2 client preface; closed", cn->peer);
            c->close_why = "http2 protocol error";
        } else if (k == sizeof(PREFACE)) {
            c->preface_done = true;
            off = k;
        }
    }
    while (c->preface_done && c->close_why == NULL && !cn->closed && n - off >= 9) {
        const uint8_t *h = p + off;
        size_t len = ((size_t)h[0] << 16) | ((size_t)h[1] << 8) | h[2];
        if (len > H2_MAX_FRAME) {
            conn_fail(c, E_FRAME_SIZE, "a frame larger than SETTINGS_MAX_FRAME_SIZE");
            break;
        }
        if (n - off < 9 + len)
            break;
        int32_t id = (int32_t)(be32_get(h + 5) & 0x7fffffffu);
        on_frame(c, h[3], h[4], id, h + 9, len);
        off += 9 + len;
    }
    c->in_recv = false;
    bool done = c->close_why != NULL || cn->closed;
    h2_flush(c);
    if (!cn->closed && !c->freed)
        arm_timer(c);
    /* After a connection error nothing more is read: all of it taken. */
    return done ? n : off;
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
        stream_free(container_of(pos, struct h2s, link));
    }
    reap(c);
    while (c->spare != NULL) {
        struct h2s *s = c->spare;
        c->spare = s->spare_next;
        budget_release(c, s->charged);
        buf_free(&s->hdrs);
        free(s);
    }
    free(c->map_ids);
    free(c->map_s);
    c->map_ids = NULL;
    c->map_s = NULL;
    c->map_n = c->map_cap = 0;
    hpack_dec_free(&c->hp);
    buf_free(&c->hb);
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
    q_init(&c->dead);
    q_init(&c->blocked);
    c->send_win = H2_DEFAULT_WINDOW;
    c->recv_win = H2_CONN_WINDOW;
    c->peer_initial_win = H2_DEFAULT_WINDOW;
    c->peer_max_frame = 16384;
    hpack_dec_init(&c->hp);
    buf_init(&c->hb);
    if (uv_timer_init(&cn->r->loop, &c->timer) != 0) {
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
        c->over_budget = true;
        conn_calm(c);
    }
    arm_timer(c);
    return c;
}

void
h2_goaway(struct h2c *c)
{
    if (c->freed || c->goaway_sent)
        return;
    c->goaway_sent = true;
    if (c->heard)
        put_goaway(c, E_NO_ERROR);
    else
        c->goaway_due = true;
    h2_flush(c);
}

void *h2_user(const struct h2c *c) { return c->user; }
struct conn *h2_conn(const struct h2c *c) { return c->cn; }
struct h2s *
h2_find(struct h2c *c, int32_t id)
{
    if (c->freed)
        return NULL;
    struct h2s *s = map_get(c, id);
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
