/*
 * pop_processor: RocketMQ 5's POP consumption in C (docs/pop.md):
 * POP_MESSAGE (200050), ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151),
 * CHANGE_MESSAGE_INVISIBLETIME (200053), PEEK_MESSAGE (200052),
 * NOTIFICATION (200054) and POLLING_INFO (200055), answered as a 5.x broker
 * answers them (PopMessageProcessor, AckMessageProcessor,
 * ChangeInvisibleTimeProcessor: fields, codes, texts), over the lease
 * store (store/popstore.h), and the revive service: a thread that re-puts
 * each lease past its deadline into the group's POP retry topic
 * (%RETRY%group_topic, 5.x's name with retry v2 off, its default) with
 * reconsumeTimes + 1, or into %DLQ%group once the group's
 * retryMaxTimes is reached.
 *
 * What goes to the Lua handler (lua/rmq/broker/pop.lua), before anything
 * changes: a POP whose group is unknown here (Lua may auto-create it) or
 * whose retry topic has no config yet (Lua creates it: a decision), and a
 * POP that found nothing and may wait (pollTime > 0): Lua holds it on the
 * event "topic@*" and runs it here again (native_req.lua), the last time
 * with NATIVE_LUA_FINAL, when it must answer.
 *
 * MT: one processor per worker; the lease store and the revive thread are
 * process-wide.
 */
#ifndef RMQ_POP_PROCESSOR_H
#define RMQ_POP_PROCESSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/native.h"
#include "store/commitlog.h"

struct store;
struct hspec;
struct metrics_shard;

struct pop_processor_conf {
    struct store *store;            /* a reference is taken */
    struct host_addr store_host;
    const struct hspec *pop, *ack, *change;   /* pop.lua's headers */
    const struct hspec *peek, *notify, *info;
    const char *broker_ip;          /* brokerIP1, for remarks */
    int32_t perm;                   /* brokerPermission at start */
    const char *dir;                /* the lease store's directory */
    int64_t invisible_min, invisible_max;     /* popInvisibleTime{Min,Max}Millis */
    int64_t max_per_group, max_total;         /* popMaxInflight{PerGroup,Total} */
    int64_t compact_bytes;          /* popLeaseLogCompactBytes */
    int64_t revive_interval;        /* popReviveIntervalMillis */
    int32_t retry_probability;      /* popFromRetryProbability */
    bool init_by_mem;               /* initPopOffsetByCheckMsgInMem */
};

/** A new processor (the lease store opened, the revive thread started
 * the first time), or NULL with err_set(). */
struct native_proc *pop_processor_new(const struct pop_processor_conf *c);

/** True when p is a POP processor (pop_processor_new's). */
bool pop_processor_is(const struct native_proc *p);

/** One lease an ack names (a receipt handle's fields, parsed). */
struct pop_ack_entry {
    const char *topic;              /* as stored: the retry topic for a redelivery */
    size_t tlen;
    int32_t qid;
    int64_t offset, pop_time;
};

/**
 * ACK_MESSAGE for each of e[0..n) of group, typed (a gRPC AckMessage's
 * entries, service.c: no remoting header written and parsed per entry),
 * with the same checks and answers: fail(arg, i, code, remark, len) for
 * each entry the broker refuses (code RMQ_RESP_*, the remark the
 * remoting answer carries; who: the peer for the remarks), nothing for
 * one acknowledged.  A run of entries of one queue and pop time is
 * checked against its queue once and logged in one write.  False (and
 * nothing done) on a slave: the remoting path answers that.
 *
 * Each entry is counted in metrics (NULL: none) as one ACK_MESSAGE with
 * its code, timed from start_ns (clock_mono_ns), as the remoting ACK
 * would be (rocketmq_rpc_latency, rmq_requests_total): on a slave too,
 * each as REQUEST_CODE_NOT_SUPPORTED.
 */
bool pop_processor_ack(struct native_proc *p, const char *who, const char *group, size_t gl,
                       struct pop_ack_entry *e, size_t n,
                       void (*fail)(void *arg, size_t i, int32_t code, const char *remark, size_t len),
                       void *arg, struct metrics_shard *metrics, int64_t start_ns);

/**
 * Counts a POP held by Lua (+1 when it starts waiting, -1 when it ends)
 * under "topic@group@queueId", for POLLING_INFO.  0 or -ENOMEM.
 */
int pop_held_add(const char *key, size_t n, int delta);

/** Stops the revive thread (at shutdown: the lease log synced); waits
 * for its current pass. */
void pop_revive_stop(void);

struct popstore_stats;

/** The process's lease store figures; false when no POP processor exists. */
bool pop_stats(struct popstore_stats *s);

struct metrics;
struct buf;

/** POP leases of a group on one queue (0 without a POP processor):
 * lag_metrics adds them to rocketmq_consumer_inflight_messages, as 5.x
 * counts POP in flight there. */
int64_t pop_leases_of(const char *group, size_t glen, const char *topic, size_t tlen,
                      int32_t qid);

/**
 * Appends the POP families (RocketMQ 5's names where it has them; the
 * leases are also in rocketmq_consumer_inflight_messages, lag_metrics.h):
 *   rmq_pop_inflight_messages{consumer_group}            leases held
 *   rocketmq_pop_revive_retry_messages_total             leases revived
 *   rmq_pop_ack_messages_total                           leases acknowledged
 *   rmq_pop_changed_total                                invisible times changed
 *   rmq_pop_lease_log_bytes                              the lease log's size
 * Nothing when this process serves no POP.  0, or -1 (out of memory).
 */
int pop_metrics(const struct metrics *m, struct buf *out);

#endif
