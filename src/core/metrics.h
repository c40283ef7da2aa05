/*
 * metrics: the server's counters and histograms, rendered in the
 * Prometheus text format (RocketMQ 5's metric names and labels).
 *
 * Shards.  A registry has one shard per writer thread (a worker host);
 * only the shard's owner writes it, with plain load+store of relaxed
 * atomics (no read-modify-write, no lock, no fence on the hot path), and
 * a reader on any thread sums the shards.  A 64-bit relaxed load is never
 * torn, so a scrape sees each counter as it was at some instant.
 *
 * Series.  Each family keeps its label sets (request_code+response_code,
 * topic, topic+group) in a table of at most max_label_sets entries per
 * shard; the entries are allocated the first time a label set is seen
 * and published with a release store of the table's count, so a reader
 * walks only complete entries.  Past the cap, every new label set is
 * counted in the family's one "overflow" series.  After a label set
 * exists, recording it allocates nothing.
 *
 * New families (replication, transactions, gauges) are one more entry in
 * the family table of metrics.c and one recording function here.
 *
 * Collectors.  A family computed at scrape time rather than recorded
 * (a broker's consumer lag, the store's gauges, connections) is a
 * collector: a function the render calls last, on the scraping thread,
 * which writes its own lines with metrics_put_head/metrics_put_sample.
 * It costs nothing between scrapes.  The process's own gauges (RSS, open
 * fds, uptime, each worker's loop lag) are rendered by the registry.
 *
 * MT: metrics_rpc/in/out on the shard owner's thread only; metrics_render
 * and metrics_set_collector on any thread, concurrently with the writers
 * (the collector slot has a lock of its own); new/free alone.
 */
#ifndef RMQ_METRICS_H
#define RMQ_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

struct metrics;
struct metrics_shard;

/* The constant labels of every series this process exports. */
struct metrics_ident {
    const char *cluster;
    const char *node_type;     /* "broker", "namesrv" */
    const char *node_id;       /* brokerName, or the NameServer's address */
};

/**
 * A registry with nshards shards, each family capped at max_label_sets
 * label sets per shard (>= 1).  NULL with err_set() on failure.
 */
struct metrics *metrics_new(int nshards, uint32_t max_label_sets,
                            const struct metrics_ident *id);

void metrics_free(struct metrics *m);

/** Shard i (0 <= i < nshards), or NULL out of range. */
struct metrics_shard *metrics_shard(struct metrics *m, int i);

/** One answered request: rocketmq_rpc_latency (ms buckets), counts. */
void metrics_rpc(struct metrics_shard *s, int32_t request_code,
                 int32_t response_code, int64_t elapsed_ns);

/*
 * rocketmq_rpc_latency series of another protocol (gRPC), whose labels
 * the caller renders: `labels` is label text as it appears between the
 * braces after the constant ones, e.g.
 * `protocol_type="grpc",request_code="send_message",response_code="ok"`
 * (valid text from a bounded set: it is written out as it is).  The
 * series is made on first sight (the family's overflow series past
 * metricsMaxLabelSets) and lives as long as the registry, so a caller
 * may keep the pointer and observe it again without a lookup.
 */
struct metrics_series;
struct metrics_series *metrics_rpc_series(struct metrics_shard *s, const char *labels, size_t n);
void metrics_rpc_observe(struct metrics_series *s, int64_t elapsed_ns);

/**
 * Messages stored (one put: a message or a batch of msgs):
 * rocketmq_messages_in_total, rocketmq_throughput_in_total (bytes: the
 * records as written), rocketmq_message_size (body_bytes / msgs for each
 * message, RocketMQ 5's buckets) and rmq_storage_put_latency (put_ns,
 * the store's append; < 0: not timed, as for the Lua path).
 */
void metrics_in(struct metrics_shard *s, const char *topic, size_t tlen,
                uint64_t msgs, uint64_t bytes, uint64_t body_bytes, int64_t put_ns);

/**
 * Messages pulled from queue qid: rocketmq_messages_out_total,
 * rocketmq_throughput_out_total; and next (the reply's nextBeginOffset)
 * as the group's pull offset of that queue at time stamp_ns (monotonic),
 * for rocketmq_consumer_inflight_messages (RocketMQ 5's pullOffset).
 */
void metrics_out(struct metrics_shard *s, const char *topic, size_t tlen,
                 const char *group, size_t glen, uint64_t msgs, uint64_t bytes,
                 int32_t qid, int64_t next, int64_t stamp_ns);

/** One append timed outside metrics_in (the Lua store binding's puts):
 *  rmq_storage_put_latency. */
void metrics_put_latency(struct metrics_shard *s, int64_t put_ns);

/** A message sent back past its retries into %DLQ%group:
 *  rocketmq_send_to_dlq_messages_total (topic: the original topic). */
void metrics_dlq(struct metrics_shard *s, const char *topic, size_t tlen,
                 const char *group, size_t glen, uint64_t msgs);

/* Controller mode's gauges (docs/controller.md), any thread. */
enum {
    METRICS_REPLICA_ROLE,             /* rmq_replica_role: 1 master, 0 slave */
    METRICS_REPLICA_EPOCH,            /* rmq_replica_master_epoch */
    METRICS_REPLICA_SSS,              /* rmq_replica_sync_state_set_size */
    METRICS_CONTROLLER_ACTIVE,        /* rmq_controller_active */
    METRICS_CONTROLLER_ELECTIONS,     /* rmq_controller_elections_total */
    METRICS_REPLICA_FENCED,           /* rmq_replica_fenced: 1 while a master fenced itself */
    METRICS_REPLICA_COUNT
};

/** Sets one of them (a negative value hides it); m may be NULL. */
void metrics_replica_set(struct metrics *m, int which, int64_t v);

/** The registry a shard belongs to (NULL for NULL). */
struct metrics *metrics_shard_registry(struct metrics_shard *s);

/** The worker loop's latest timer delay: rmq_worker_loop_lag_seconds. */
void metrics_loop_lag(struct metrics_shard *s, int64_t lag_ns);

/** The worker loop's longest stretch without reading in the last period
 *  (flow control's request wait bound, net/reactor.h):
 *  rmq_worker_busy_max_seconds. */
void metrics_loop_busy(struct metrics_shard *s, int64_t busy_ns);

/** gRPC auto_renew (grpc/renew.h) on the worker's shard: the leases its
 *  connections hold changed by delta (rmq_grpc_auto_renew_leases, a gauge
 *  summed over the workers), and one renewal the broker granted
 *  (rmq_grpc_auto_renew_renewals_total).  s NULL (metrics off): nothing. */
void metrics_renew_leases(struct metrics_shard *s, int64_t delta);
void metrics_renew_granted(struct metrics_shard *s);

/** The worker's pull window sent `total` replies from it so far
 * (rmq_pull_window_sends_total; store/access.h).  MT: the shard's worker. */
void metrics_pull_window_sends(struct metrics_shard *s, uint64_t total);

/**
 * Appends every family, summed over the shards, to out in the Prometheus
 * text exposition format 0.0.4.  0, or -1 (out of memory).
 */
int metrics_render(struct metrics *m, struct buf *out);

/* {{{ Collectors */

/** Appends a family's lines to out; 0, or -1 (out of memory). */
typedef int (*metrics_collect_fn)(void *arg, const struct metrics *m, struct buf *out);

/* The collector slots, rendered in this order. */
enum metrics_slot {
    METRICS_SLOT_LAG,          /* consumer lag (broker/lag_metrics.h) */
    METRICS_SLOT_STORE,        /* the store's gauges (broker/store_metrics.h) */
    METRICS_SLOT_CLIENTS,      /* connections (broker/store_metrics.h) */
    METRICS_SLOT_NAMESRV,      /* a NameServer's tables */
    METRICS_SLOTS
};

/**
 * Installs fn(arg) as the collector of slot (a second call replaces the
 * first; fn NULL empties it).  release(arg), when not NULL, runs when
 * the collector is replaced and at metrics_free.
 */
void metrics_set_collector(struct metrics *m, int slot, metrics_collect_fn fn, void *arg,
                           void (*release)(void *arg));

/* A queue's pull offset, the latest over the shards. */
struct metrics_pull {
    const char *topic;
    size_t tlen;
    const char *group;
    size_t glen;
    int32_t qid;
    int64_t offset;
    int64_t stamp_ns;          /* when it was recorded (monotonic) */
};

/**
 * Every pull offset recorded (at most metricsMaxLabelSets queues per
 * worker; the rest are not kept), sorted by metrics_pull_cmp: *out
 * (malloc'd; the strings point into m, valid while m lives) and *n.
 * 0, or -1 (out of memory).
 */
int metrics_pull_offsets(const struct metrics *m, struct metrics_pull **out, size_t *n);

/** topic, then group, then qid. */
int metrics_pull_cmp(const struct metrics_pull *a, const struct metrics_pull *b);

/** Requests answered with request_code and response_code so far, summed
 *  over the shards (a walk of the recorded series: for collectors). */
uint64_t metrics_requests(const struct metrics *m, int32_t request_code, int32_t response_code);

/** The cap on label sets per family (metricsMaxLabelSets). */
uint32_t metrics_max_label_sets(const struct metrics *m);

struct metrics_label {
    const char *name;
    const char *value;
    size_t len;
};

/** `# HELP` and `# TYPE` lines of a family. 0 or -1. */
int metrics_put_head(struct buf *b, const char *name, const char *type, const char *help);

/** One sample: name{ident,labels} v. 0 or -1. */
int metrics_put_sample(struct buf *b, const struct metrics *m, const char *name,
                       const struct metrics_label *l, int nl, int64_t v);

/* }}} */

#endif
