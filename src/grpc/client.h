/*
 * client: the client side of gRPC over HTTP/2 on one outbound conn, with
 * nghttp2 doing the HTTP/2 (a client session) and this module gRPC's
 * part: the request headers (:path, content-type, te, grpc-timeout and
 * any the caller adds, e.g. 5.x's authorization), the 5-byte message
 * framing of the one request message, and the response's messages and
 * grpc-status / grpc-message (from the trailers, or a Trailers-Only
 * HEADERS).  What `rmq send --grpc`, `rmq consume --grpc` and the gRPC
 * benchmark use (through rmq.grpc, src/tools/l_grpc.c), with the same
 * protobuf-c messages the server decodes (service.c).
 *
 * The conn (net/conn.h) owns the socket and TLS: its handler routes
 * on_bytes to gclient_on_bytes and on_close to gclient_on_conn_close;
 * cn->ext is the gclient.  Unary and server-streaming calls: the
 * response's messages are collected until the stream ends (at most
 * max_response bytes a call; past it the call is reset and fails
 * RESOURCE_EXHAUSTED).
 *
 * MT: the thread of the conn's reactor.
 */
#ifndef RMQ_GRPC_CLIENT_H
#define RMQ_GRPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct conn;
struct gclient;

/* A call's end, as the callback sees it (valid during the callback). */
struct gclient_result {
    int status;                   /* grpc-status (h2.h enum grpc_code) */
    const char *message;          /* grpc-message, percent-decoded; "" */
    const uint8_t *data;          /* the response messages, each with its
                                   * 5-byte gRPC prefix, back to back */
    size_t len;
};

typedef void (*gclient_cb)(void *arg, const struct gclient_result *r);

struct gclient_header {
    const char *name;             /* lower case */
    const char *value;
};

/**
 * Starts an HTTP/2 client session on connected conn `cn` (sends the
 * preface and SETTINGS).  authority: the :authority of every call
 * (host:port).  Returns it or NULL with err_set().
 */
struct gclient *gclient_new(struct conn *cn, const char *authority, size_t max_response);

/**
 * Starts a call of `path` ("/pkg.Service/Method") with one request
 * message msg[0..n) and the extra headers; timeout_ms > 0 is sent as
 * grpc-timeout (the caller keeps its own clock: gclient_cancel).  cb runs
 * once, when the call ends (never from inside this function).  Returns
 * the stream id (> 0), or -1 with err_set().
 */
int32_t gclient_call(struct gclient *g, const char *path, const struct gclient_header *hdrs,
                     size_t nh, const uint8_t *msg, size_t n, uint64_t timeout_ms,
                     gclient_cb cb, void *arg);

/** Gives up on call `id` (RST_STREAM CANCEL): its cb does not run. */
void gclient_cancel(struct gclient *g, int32_t id);

/** conn_handler.on_bytes for a conn gclient_new was given. */
size_t gclient_on_bytes(struct conn *cn, const uint8_t *p, size_t n);

/** conn_handler.on_close's part: every call open ends UNAVAILABLE (its
 * cb runs), the session is freed. */
void gclient_on_conn_close(struct gclient *g);

#endif
