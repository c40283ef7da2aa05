/*
 * h2: the server side of gRPC over HTTP/2 on one accepted conn: HTTP/2
 * itself (frames, flow control, SETTINGS; HPACK by hpack.h) and gRPC's
 * part of it: the request headers (:path,
 * content-type, grpc-timeout, grpc-encoding), the 5-byte message framing
 * (gzip inflated where the client compressed), the response headers,
 * messages and the grpc-status / grpc-message trailers.
 *
 * The conn (net/conn.h) stays the owner of the socket, TLS, write
 * coalescing and backpressure: it hands its bytes to h2 (conn_handler
 * on_bytes) and h2 writes its frames into the conn's output.
 *
 * What one connection may make this process hold (struct h2_limits, the
 * conf keys in lua/rmq/conf.lua, docs/grpc.md):
 *   streams      at most max_streams open at once (announced in SETTINGS;
 *                the excess is refused with RST_STREAM REFUSED_STREAM)
 *   a message    at most max_message bytes (after inflating); a larger
 *                one ends its call with RESOURCE_EXHAUSTED at once, from
 *                the declared length, before the bytes arrive
 *   all streams  request bytes held for the connection's calls at most
 *                max_conn_buffer; the call that would pass it is ended
 *                with RESOURCE_EXHAUSTED; answers held because the
 *                client's flow-control window is shut: past
 *                max_conn_buffer no new call is taken (RESOURCE_EXHAUSTED)
 *                until it reads, so at most that plus the answers of the
 *                calls already open
 *   headers      at most max_header_bytes of header fields per stream
 *                (names + values; announced as SETTINGS_MAX_HEADER_LIST_SIZE)
 * and, against the process's memory budget (core/membudget.h: per
 * connection, per peer address and in total, the memoryBudget* keys),
 *   the session  H2_SESSION_BYTES charged when it starts (the h2c and
 *                its HPACK table): refused, the
 *                connection gets GOAWAY ENHANCE_YOUR_CALM and is closed
 *   each stream  H2_STREAM_BYTES while it is open (the h2s, the
 *                service's call, typical headers): refused,
 *                the call ends RESOURCE_EXHAUSTED naming the key, and
 *                after H2_BUDGET_REFUSALS_MAX of them the connection gets
 *                GOAWAY ENHANCE_YOUR_CALM (a flood, not a client)
 * so idle streams, held open over as many connections as a peer likes,
 * stop at memoryBudgetPerPeerBytes per address and memoryBudgetBytes in
 * all, whatever grpcMaxConcurrentStreams allows each connection;
 * and what it may make this process do:
 *   streams opened per second at most streams_per_sec, RST_STREAMs
 *   received per second at most resets_per_sec (the rapid-reset attack,
 *   CVE-2023-44487; the resets its stream errors make the server send
 *   count too, CVE-2025-8671), SETTINGS frames per second at most
 *   settings_per_sec, each of at most max_settings_entries settings
 *   (only the last value of each is applied, RFC 9113 6.5.3, so one
 *   frame costs the open streams once, however many INITIAL_WINDOW_SIZE
 *   it repeats): past any the connection gets GOAWAY ENHANCE_YOUR_CALM
 *   and is closed once that is written.
 * Unary and server-streaming calls whose request has not arrived whole
 * within stream_idle_ms are reset (CANCEL); bidirectional calls (the
 * Telemetry session) are exempt and bounded by max_streams.  Any call
 * whose answer waits stream_idle_ms for a flow-control window the client
 * does not move is reset (CANCEL) too.  A call with
 * grpc-timeout that is not answered by its deadline ends with
 * DEADLINE_EXCEEDED.  The server PINGs a connection it has read nothing
 * from for keepalive_ms and closes it when the PING is not answered
 * within keepalive_timeout_ms.
 *
 * MT: the thread of the conn's reactor.
 */
#ifndef RMQ_GRPC_H2_H
#define RMQ_GRPC_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/queue.h"

struct conn;
struct h2c;
struct h2s;

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum grpc_code {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
};

struct h2_limits {
    uint32_t max_streams;
    size_t max_message;
    size_t max_conn_buffer;
    size_t max_header_bytes;
    uint32_t streams_per_sec;     /* 0 = no limit */
    uint32_t resets_per_sec;      /* 0 = no limit */
    uint32_t max_settings_entries;/* in one SETTINGS frame; 0 = no limit */
    uint32_t settings_per_sec;    /* SETTINGS frames; 0 = no limit */
    uint64_t stream_idle_ms;      /* 0 = never */
    uint64_t keepalive_ms;        /* 0 = no PINGs */
    uint64_t keepalive_timeout_ms;
};

/* What the layer above (the service) is told. */
struct h2_callbacks {
    /* A call's headers arrived (h2_path() says which method).  Returns
     * GRPC_OK to take it, or a status that ends it at once (e.g.
     * UNIMPLEMENTED for an unknown method). */
    int (*on_call)(struct h2s *s);
    /* One whole request message (decompressed), valid during the call. */
    void (*on_message)(struct h2s *s, const uint8_t *p, size_t n);
    /* The client finished sending (END_STREAM). */
    void (*on_half_close)(struct h2s *s);
    /* The call is gone before the service ended it (RST_STREAM from the
     * client, its deadline, the connection closing).  Whatever the
     * service keeps for it must be dropped; s is freed after this. */
    void (*on_cancel)(struct h2s *s);
    /* The connection is closing (after every on_cancel). */
    void (*on_close)(struct h2c *c);
    /* The session is over but the socket lingers to write its last
     * frames (a GOAWAY after a connection error, the last trailers):
     * no call of it will be answered any more, so what the service keeps
     * going for it elsewhere (a held POP) should end now, not at
     * on_close up to serverChannelCloseLingerMillis later.  Optional;
     * on_close still follows. */
    void (*on_draining)(struct h2c *c);
    /* A stream whose request headers arrived is gone, however it ended
     * (answered, refused, reset, its connection closed): h2_status and
     * h2_elapsed_ns say how and how long.  Optional (per-call metrics). */
    void (*on_end)(struct h2s *s);
};

/**
 * Starts HTTP/2 on conn `cn` (its handler must route on_bytes to
 * h2_on_bytes and on_close to h2_on_conn_close; cn->ext = the h2c).
 * Sends the server's SETTINGS.  Returns the session or NULL with err_set().
 */
struct h2c *h2_new(struct conn *cn, const struct h2_limits *lim,
                   const struct h2_callbacks *cb, void *user);

/** conn_handler.on_bytes for a conn h2_new was given. */
size_t h2_on_bytes(struct conn *cn, const uint8_t *p, size_t n);

/** conn_handler.on_close's part: cancels every call, frees the session. */
void h2_on_conn_close(struct h2c *c);

/** GOAWAY (NO_ERROR): the client opens no new calls here; calls in
 * progress finish.  Idempotent. */
void h2_goaway(struct h2c *c);

void *h2_user(const struct h2c *c);
struct conn *h2_conn(const struct h2c *c);
/** The call with this stream id, or NULL when it has ended (so a late
 * answer is dropped, never written to a freed call). */
struct h2s *h2_find(struct h2c *c, int32_t stream_id);

struct h2c *h2_stream_conn(const struct h2s *s);
int32_t h2_stream_id(const struct h2s *s);
const char *h2_path(const struct h2s *s);
/** A request header's value (lower-case name), or NULL.  Only the ones
 * the server reads are kept: :path, :method, content-type, grpc-timeout,
 * grpc-encoding, authorization, x-mq-language, x-mq-client-id,
 * x-mq-date-time (any other name: NULL). */
const char *h2_header(const struct h2s *s, const char *name);
void h2_set_stream_user(struct h2s *s, void *u);
void *h2_stream_user(const struct h2s *s);

/** Mark s as a bidirectional call (exempt from stream_idle_ms). */
void h2_set_bidi(struct h2s *s);

/** Milliseconds left before s's grpc-timeout deadline (0 when passed),
 * or -1 when the client sent no grpc-timeout. */
int64_t h2_deadline_left_ms(const struct h2s *s);
/** The layer above's own result code for the call (RocketMQ's v2
 * Status.code of its last answer), kept for on_end; -1 until set. */
void h2_set_code(struct h2s *s, int32_t code);
int32_t h2_code(const struct h2s *s);

/** How the call ended: the grpc-status it was given, or CANCELLED when
 * the client reset it or its connection closed first. */
int h2_status(const struct h2s *s);

/** Nanoseconds since its request headers began to arrive. */
int64_t h2_elapsed_ns(const struct h2s *s);

/**
 * Queues one response message (the response headers go first, once).
 * Returns 0 or -1 (the call has ended, or out of memory).
 */
int h2_send(struct h2s *s, const uint8_t *msg, size_t n);

/**
 * The same without a copy: room for an n-byte message, written at the
 * pointer returned and then queued by h2_send_commit(s, n) before any
 * other h2 call on s's connection (the room may be in the connection's
 * output itself, the DATA frame written in place).  NULL when the call
 * has ended or out of memory.
 */
uint8_t *h2_send_reserve(struct h2s *s, size_t n);
int h2_send_commit(struct h2s *s, size_t n);

/**
 * Ends the call: grpc-status `code`, grpc-message `msg` (NULL: none;
 * percent-encoded here) after the messages queued.  Idempotent.
 */
void h2_finish(struct h2s *s, int code, const char *msg);

/** Frees the streams that ended and closes the connection when it must
 * (after answers given outside h2_on_bytes, e.g. from a reply that came
 * back later). */
void h2_flush(struct h2c *c);

/* {{{ Counters, for specs and /metrics */
struct h2_stats {
    uint64_t streams;             /* calls opened */
    uint64_t refused_big;         /* ended RESOURCE_EXHAUSTED */
    uint64_t resets_in;           /* RST_STREAM received */
    uint64_t deadline;            /* ended DEADLINE_EXCEEDED */
    uint64_t idle_reset;          /* reset by stream_idle_ms */
    uint64_t refused_budget;      /* refused by the memory budget */
};
const struct h2_stats *h2_stats(const struct h2c *c);
/* }}} */

#endif
