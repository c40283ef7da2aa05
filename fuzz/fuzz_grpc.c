/*
 * fuzz_grpc: the gRPC layer's input side (src/grpc/h2.c): HTTP/2 frames
 * (our reader: CONTINUATION, padding, windows, resets), HPACK
 * (src/grpc/hpack.c: tables, Huffman), the gRPC message framing (length
 * prefixes, the compressed flag, gzip), grpc-timeout, the stream limits,
 * and every request message of MessagingService through protobuf-c.  The input
 * follows the client preface; its first byte cuts it into reads of 1 to
 * 256 bytes (how a socket might deliver it).  Each call is answered: a
 * request that unpacks as its method's message gets a response (packed,
 * sent, trailers), others a status.  Output goes to a detached conn and is
 * dropped.  A finding is a sanitizer report, or memory still held after
 * the connection closed (LeakSanitizer at exit).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "grpc/h2.h"
#include "grpc/metrics.h"
#include "grpc/pbcheck.h"
#include "net/conn.h"
#include "net/reactor.h"

static struct reactor r;
static bool ready;

static const struct {
    const char *path;
    const ProtobufCMessageDescriptor *req;
} METHODS[] = {
    { "/apache.rocketmq.v2.MessagingService/QueryRoute", &apache__rocketmq__v2__query_route_request__descriptor },
    { "/apache.rocketmq.v2.MessagingService/Heartbeat", &apache__rocketmq__v2__heartbeat_request__descriptor },
    { "/apache.rocketmq.v2.MessagingService/SendMessage", &apache__rocketmq__v2__send_message_request__descriptor },
    { "/apache.rocketmq.v2.MessagingService/QueryAssignment",
      &apache__rocketmq__v2__query_assignment_request__descriptor },
    { "/apache.rocketmq.v2.MessagingService/Telemetry", &apache__rocketmq__v2__telemetry_command__descriptor },
    { "/apache.rocketmq.v2.MessagingService/EndTransaction",
      &apache__rocketmq__v2__end_transaction_request__descriptor },
    { "/apache.rocketmq.v2.MessagingService/NotifyClientTermination",
      &apache__rocketmq__v2__notify_client_termination_request__descriptor },
};

static int
on_call(struct h2s *s)
{
    const char *p = h2_path(s);
    for (size_t i = 0; i < sizeof(METHODS) / sizeof(METHODS[0]); i++) {
        if (strcmp(p, METHODS[i].path) == 0) {
            h2_set_stream_user(s, (void *)&METHODS[i]);
            if (i == 4)
                h2_set_bidi(s);
            (void)h2_header(s, "x-mq-client-id");
            return GRPC_OK;
        }
    }
    return GRPC_UNIMPLEMENTED;
}

static void
on_message(struct h2s *s, const uint8_t *p, size_t n)
{
    const ProtobufCMessageDescriptor *d = ((const __typeof__(METHODS[0]) *)h2_stream_user(s))->req;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
    char why[128];
    if (m != NULL && !pbcheck_utf8(m, why, sizeof(why))) {   /* the service's check */
        protobuf_c_message_free_unpacked(m, NULL);
        m = NULL;
    }
    if (m == NULL) {
        h2_finish(s, GRPC_INVALID_ARGUMENT, "does not parse");
        return;
    }
    h2_set_code(s, grpc_metrics_status_of(m));
    /* Pack it back as the answer: every field the parser made is read. */
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(len + 1);
    if (b != NULL) {
        protobuf_c_message_pack(m, b);
        (void)h2_send(s, b, len);
        free(b);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    if (d != &apache__rocketmq__v2__telemetry_command__descriptor)
        h2_finish(s, GRPC_OK, NULL);
}

static void
on_half_close(struct h2s *s)
{
    h2_finish(s, GRPC_OK, NULL);
}

static void
on_cancel(struct h2s *s)
{
    (void)s;
}

/* What the service's metrics read when a stream ends. */
static void
on_end(struct h2s *s)
{
    if (h2_status(s) < 0 || h2_elapsed_ns(s) < -1 || h2_path(s) == NULL)
        abort();
    (void)h2_code(s);
}

static const struct h2_callbacks CB = {
    .on_call = on_call, .on_message = on_message, .on_half_close = on_half_close,
    .on_cancel = on_cancel, .on_end = on_end,
};

static size_t
on_bytes(struct conn *c, const uint8_t *p, size_t n)
{
    return h2_on_bytes(c, p, n);
}

static void
on_close(struct conn *c)
{
    h2_on_conn_close(c->ext);
}

static const struct conn_handler H = { .on_bytes = on_bytes, .on_close = on_close };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ready) {
        if (reactor_init(&r, 1 << 20, 0) != 0)
            abort();
        ready = true;
    }
    struct conn *c = conn_new_detached(&r, &H, NULL, 0);
    if (c == NULL)
        return 0;
    struct h2_limits lim = {
        .max_streams = 8, .max_message = 4096, .max_conn_buffer = 16384, .max_header_bytes = 2048,
        .streams_per_sec = 64, .resets_per_sec = 16, .max_settings_entries = 32,
        .settings_per_sec = 16, .stream_idle_ms = 1000,
        .keepalive_ms = 1000, .keepalive_timeout_ms = 100,
    };
    if (h2_new(c, &lim, &CB, NULL) == NULL) {
        conn_close(c, "fuzz");
        reactor_run(&r, UV_RUN_NOWAIT);
        return 0;
    }
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    (void)h2_on_bytes(c, (const uint8_t *)preface, sizeof(preface) - 1);
    /* As conn.c does: what h2 did not take (a frame cut short) stays and
     * is handed in again with the next read. */
    struct buf in;
    buf_init(&in);
    size_t chunk = size > 0 ? (size_t)data[0] + 1 : 1;
    for (size_t off = size > 0 ? 1 : 0; off < size && !c->closed; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (buf_append(&in, data + off, n) != 0)
            break;
        size_t used = h2_on_bytes(c, buf_head(&in), buf_len(&in));
        if (used > buf_len(&in))
            abort();
        buf_consume(&in, used);
        buf_reset(&c->out);
    }
    buf_free(&in);
    conn_close(c, "fuzz");
    /* The close callbacks (the conn's handle, h2's timer) free the rest. */
    reactor_run(&r, UV_RUN_NOWAIT);
    return 0;
}
