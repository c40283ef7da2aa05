/*
 * subscription_group: RocketMQ's SubscriptionGroupConfig as a
 * config_table record, and its JSON as fastjson writes it (properties
 * sorted by name):
 *
 *   {"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,
 *    "consumeFromMinEnable":true,"groupName":"G",
 *    "notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,
 *    "retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}
 *
 * A group given a 5.x field (consumeMessageOrderly, groupRetryPolicy) is
 * written with both, in their sorted places, as 5.x writes them:
 *   ..."consumeFromMinEnable":true,"consumeMessageOrderly":true,
 *   "groupName":"G","groupRetryPolicy":{"customizedRetryPolicy":
 *   {"next":[1000,5000]},"type":"CUSTOMIZED"},"notify...
 * a group without them exactly as 4.9.8 (fixtures check those bytes).
 *
 * and the SubscriptionGroupWrapper (subscriptionGroup.json,
 * GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
 *   {"dataVersion":{...},"subscriptionGroupTable":{"G":{...},...}}
 */
#ifndef RMQ_SUBSCRIPTION_GROUP_H
#define RMQ_SUBSCRIPTION_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/config_table.h"
#include "core/buf.h"

/* The most levels a customizedRetryPolicy.next keeps (records are fixed
 * size; 5.x's default has 18, one per delay level). */
#define GROUP_RETRY_NEXT_MAX 32

enum group_retry_type { GROUP_RETRY_CUSTOMIZED = 0, GROUP_RETRY_EXPONENTIAL = 1 };

/* 5.x's GroupRetryPolicy: the type, and each policy present or not
 * (5.x writes only the ones set; GroupRetryPolicy.getRetryPolicy falls
 * back to the default customized levels when the chosen one is absent). */
struct group_retry_policy {
    int64_t initial, max, multiplier;     /* exponentialRetryPolicy */
    int64_t next[GROUP_RETRY_NEXT_MAX];   /* customizedRetryPolicy.next */
    uint8_t type;                         /* enum group_retry_type */
    bool has_exponential;
    bool has_customized;
    uint8_t next_count;
    uint8_t pad[4];                       /* zeroed */
};

struct subscription_group {
    int64_t broker_id;
    int32_t retry_max_times;
    int32_t retry_queue_nums;
    int64_t which_broker_when_consume_slowly;
    bool consume_broadcast_enable;
    bool consume_enable;
    bool consume_from_min_enable;
    bool notify_consumer_ids_changed_enable;
    bool v5;                   /* written with the 5.x fields below */
    bool consume_message_orderly;
    uint8_t pad[2];            /* zeroed: records are compared bytewise */
    struct group_retry_policy retry;
};

/** One SubscriptionGroupConfig object. Returns 0 or -ENOMEM. */
int subscription_group_json(struct buf *b, const char *name, size_t nlen,
                            const struct subscription_group *g);

/** The wrapper of a snapshot, items in their order. Returns 0 or -ENOMEM. */
int subscription_group_wrapper_json(struct buf *b,
                                    const struct config_snapshot *s);

#endif
