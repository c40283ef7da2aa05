/*
 * renew: ReceiveMessageRequest.auto_renew, as RocketMQ 5's proxy does it
 * (ReceiptHandleProcessor, DefaultReceiptHandleManager): the messages a
 * client received with auto_renew and has not acknowledged are kept
 * invisible while the client is connected, and handed back soon after
 * it goes.
 *
 *   receive     with auto_renew the POP asks for defaultInvisibleTimeMills
 *               (not the request's duration), and each message's lease is
 *               kept here by (group, message id): its newest receipt handle
 *               and when it becomes visible (popTime + invisibleTime)
 *   renew       every renewSchedulePeriodMillis, a lease that becomes
 *               visible within renewAheadTimeMillis is made invisible
 *               again for the next of 5.x's RenewStrategyPolicy steps
 *               (1, 3, 5, 10, 30 min, then 1 h each time), through the
 *               broker's CHANGE_MESSAGE_INVISIBLETIME; the broker's answer
 *               gives its new handle.  A lease first received more than
 *               renewMaxTimeMillis ago is renewed no more (it comes back
 *               when its time runs out: 5.x instead sets its group's
 *               retry delay); a renewal that fails maxRenewRetryTimes
 *               times in a row, or whose lease the broker no longer has,
 *               ends it
 *   ack, nack   AckMessage, ChangeInvisibleDuration and
 *               ForwardMessageToDeadLetterQueue of a leased message take
 *               its lease: the newest handle is used in place of the one
 *               the client holds (which a renewal has replaced)
 *   client gone when the connection closes, every lease it still holds
 *               is made visible again in invisibleTimeMillisWhenClear
 *               (5.x's clearGroup when its client unregisters)
 *
 * Memory: a lease is charged RENEW_LEASE_BYTES to the connection's
 * account of the memory budget (per connection, per peer address, in
 * total); past it the message is delivered without auto-renew (it keeps
 * its defaultInvisibleTimeMills).  Group and message id are looked up in
 * a keyed hash map (core/hmap.h), O(1) whatever names a client chooses.
 *
 * The module keeps the table and decides; the caller (service.c) sends
 * the broker requests through `send` and hands their replies back.
 *
 * MT: a session's table on its worker's thread.
 */
#ifndef RMQ_GRPC_RENEW_H
#define RMQ_GRPC_RENEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conn;
struct metrics_shard;
struct rmq_cmd;
struct uv_loop_s;

struct renew_conf {
    bool enabled;                  /* enableProxyAutoRenew */
    int64_t default_invisible_ms;  /* defaultInvisibleTimeMills */
    int64_t ahead_ms;              /* renewAheadTimeMillis */
    int64_t max_ms;                /* renewMaxTimeMillis */
    int64_t period_ms;             /* renewSchedulePeriodMillis */
    int64_t clear_ms;              /* invisibleTimeMillisWhenClear */
    int32_t max_retry;             /* maxRenewRetryTimes */
};

/* One leased message, as `send` sees it. */
struct renew_lease {
    char group[256];
    char topic[256];               /* the topic the client received from */
    char handle[512];              /* the newest receipt handle */
    char ak[128];                  /* aclEnable: the account that received it */
    size_t ak_len;
};

/* Sends CHANGE_MESSAGE_INVISIBLETIME for l with invisible_ms; returns
 * the request's opaque (its reply goes to renew_reply), or 0 when it
 * could not be sent. */
typedef int32_t (*renew_send_fn)(void *arg, const struct renew_lease *l, int64_t invisible_ms);

struct renew;

/** A session's table; account: the socket conn whose memory budget
 * account leases are charged to; metrics: the worker's shard the leases
 * and renewals are counted in (core/metrics.h; NULL: none).  NULL when
 * out of memory. */
struct renew *renew_new(struct uv_loop_s *loop, const struct renew_conf *conf, struct conn *account,
                        struct metrics_shard *metrics, renew_send_fn send, void *arg);

/** The client is gone: every lease is made visible again in clear_ms
 * (through send; the replies are not waited for), then freed. */
void renew_free(struct renew *r);

/** Keeps the lease of a message just received; false when it cannot
 * (no memory, the budget, a handle that does not parse). */
bool renew_add(struct renew *r, const char *group, const char *topic, const char *msg_id,
               const char *handle, const char *ak, size_t ak_len);

/** Takes the lease of (group, msg_id) out of the table, renewing it no
 * more: its newest handle is copied to out.  False when there is none. */
bool renew_take(struct renew *r, const char *group, const char *msg_id, char *out, size_t cap);

/** A reply from the broker: true when it answered one of the table's
 * renewals (consumed here). */
bool renew_reply(struct renew *r, const struct rmq_cmd *cmd);

/** Leases held (for specs and the log). */
size_t renew_count(const struct renew *r);

#endif
