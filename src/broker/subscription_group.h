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

struct subscription_group {
    int64_t broker_id;
    int32_t retry_max_times;
    int32_t retry_queue_nums;
    int64_t which_broker_when_consume_slowly;
    bool consume_broadcast_enable;
    bool consume_enable;
    bool consume_from_min_enable;
    bool notify_consumer_ids_changed_enable;
    uint8_t pad[4];            /* zeroed: records are compared bytewise */
};

/** One SubscriptionGroupConfig object. Returns 0 or -ENOMEM. */
int subscription_group_json(struct buf *b, const char *name, size_t nlen,
                            const struct subscription_group *g);

/** The wrapper of a snapshot, items in their order. Returns 0 or -ENOMEM. */
int subscription_group_wrapper_json(struct buf *b,
                                    const struct config_snapshot *s);

#endif
