/*
 * httpc: one HTTP/1.1 request on a libuv loop, for talking to services
 * that speak JSON over HTTP (etcd's v3 gateway, docs/controller.md).
 *
 * Each request opens its own connection ("Connection: close") and reads
 * the answer until the peer closes it: no pooling, no pipelining, so a
 * stuck peer can hold nothing but the one request, and its timeout ends
 * it.  The answer is bounded (max_response bytes, headers included);
 * more is an error.  Hosts are IP literals (or "localhost"): no resolver
 * runs on the loop.
 *
 * The caller owns the struct (embed it); done() runs once, on the loop's
 * thread, after every handle is closed, so the caller may free it there.
 *
 * MT: the loop's thread.
 */
#ifndef RMQ_HTTPC_H
#define RMQ_HTTPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"

struct httpc;

/* status: the HTTP status (>= 100), or a negative errno / UV_* code
 * (UV_ETIMEDOUT, UV_ECONNREFUSED, UV_E2BIG for an oversized answer,
 * UV_EPROTO for a malformed one).  body/len: the decoded body (chunked
 * encoding removed), valid only during the call. */
typedef void (*httpc_done_fn)(struct httpc *h, int status, const uint8_t *body, size_t len);

struct httpc {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t write;
    struct buf out;           /* the request, as sent */
    struct buf in;            /* the answer, as read */
    size_t max_response;
    int status;               /* result, once known */
    int open_handles;         /* handles still to be closed */
    int finished;
    httpc_done_fn done;
    void *data;               /* the caller's */
};

/**
 * Starts `method path` to host:port with body (may be NULL/0) as
 * application/json.  Returns 0 (done() will run) or a negative UV_*
 * code (done() will not run; nothing to release).
 */
int httpc_start(struct httpc *h, uv_loop_t *loop, const char *host, int port,
                const char *method, const char *path, const void *body, size_t blen,
                size_t max_response, uint64_t timeout_ms, httpc_done_fn done);

/** Frees the buffers of a request whose loop was torn down under it
 * (its handles are gone with the loop; done() never ran). */
void httpc_abandon(struct httpc *h);

#endif
