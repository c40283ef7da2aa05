/*
 * loadgen: the engine of `rmq bench produce`: keeps CONCURRENCY
 * SEND_MESSAGE_V2 requests in flight over a few connections, in C, so
 * that the benchmark is never the bottleneck.  Each request is the same
 * pre-encoded frame with its opaque (and queue id) patched in place; each
 * reply is matched by opaque and timed into a latency histogram.  With
 * credentials each target's frame is signed once (ACL 1.0, acl_sign):
 * the opaque is not part of the signature, so patching it keeps the
 * frame valid, and signing costs nothing per request.
 *
 * With `grpc` the same slots drive RocketMQ 5's gRPC SendMessage
 * instead (`rmq bench produce --grpc`): one HTTP/2 stream a slot over
 * the same few connections (src/grpc/client.h, nghttp2), each request
 * one pre-encoded SendMessageRequest of one message with its queue_id
 * and a message_id (a counter patched in place, as UNIQ_KEY's), the
 * headers a 5.x SDK sends (given by the caller, signed or not) and
 * grpc-timeout.  A reply counts as stored when its grpc-status is 0 and
 * its Status code is OK.  Either way the connection's output goes out
 * in one write a loop turn (net/conn.h), so both protocols are driven by
 * one design at the same concurrency.
 *
 * `rate` > 0 caps the sends a second: a slot whose reply comes back when
 * the run is ahead of rate x elapsed waits (a 1 ms timer lets it go), so
 * both protocols can be offered the same load.
 *
 * MT: runs on the calling thread's reactor, blocking until done.
 */
#ifndef RMQ_LOADGEN_H
#define RMQ_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc/client.h"
#include "net/reactor.h"

/* Log-linear latency histogram: 1 us resolution below 1 ms, then 64
 * sub-buckets per power of two, up to about 70 s. */
#define LG_HIST_BUCKETS 2048

struct lg_hist {
    uint64_t count;
    uint64_t sum_us;
    uint64_t max_us;
    uint64_t buckets[LG_HIST_BUCKETS];
};

void lg_hist_add(struct lg_hist *h, uint64_t us);
/** The value (us) below which `q` (0..1) of the samples fall. */
uint64_t lg_hist_quantile(const struct lg_hist *h, double q);
void lg_hist_merge(struct lg_hist *into, const struct lg_hist *from);

struct lg_target {
    char addr[64];             /* broker "ip:port" */
    char broker_name[64];
    int queue_id;
};

struct lg_stats {
    uint64_t ok;
    uint64_t failed;           /* error replies, timeouts, closed */
    uint64_t busy;             /* SYSTEM_BUSY replies (flow control), not in failed */
    struct lg_hist hist;
};

struct loadgen_opts {
    const struct lg_target *targets;
    int ntargets;
    const char *topic;
    const char *group;
    size_t body_size;
    int concurrency;           /* requests in flight */
    int connections_per_broker;
    double seconds;
    uint64_t timeout_ms;
    bool binary_header;        /* ROCKETMQ serialization instead of JSON */
    bool uniq_key;             /* a UNIQ_KEY per message, as Java producers set */
    /* gRPC SendMessage instead of SEND_MESSAGE_V2 (targets' addr: the
     * gRPC endpoint); grpc_headers[0..n): sent with every call besides
     * the protocol's own (x-mq-client-id, authorization, ...). */
    bool grpc;
    const struct gclient_header *grpc_headers;
    int grpc_nheaders;
    double rate;               /* sends a second at most; 0: as fast as replies come */
    /* ACL credentials; access_key NULL: unsigned.  security_token may be
     * NULL. */
    const char *access_key;
    const char *secret_key;
    const char *security_token;
    /* Called every second with that second's stats; may print. */
    void (*tick)(void *arg, double elapsed, const struct lg_stats *sec);
    void *arg;
};

/**
 * Runs the load for opts->seconds and fills *total.  Returns 0, or a
 * negative error with err_set() when it could not start (no connection).
 */
int loadgen_run(struct reactor *r, const struct loadgen_opts *opts,
                struct lg_stats *total);

#endif
