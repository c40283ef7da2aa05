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
 * MT: runs on the calling thread's reactor, blocking until done.
 */
#ifndef RMQ_LOADGEN_H
#define RMQ_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
