/* subscription_group: see subscription_group.h. */
#include "broker/subscription_group.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "broker/topic_config.h"

static const char *
tf(bool v)
{
    return v ? "true" : "false";
}

int
subscription_group_json(struct buf *b, const char *name, size_t nlen,
                        const struct subscription_group *g)
{
    char tmp[200];
    int n = snprintf(tmp, sizeof(tmp),
                     "{\"brokerId\":%" PRId64 ",\"consumeBroadcastEnable\":%s,"
                     "\"consumeEnable\":%s,\"consumeFromMinEnable\":%s,\"groupName\":",
                     g->broker_id, tf(g->consume_broadcast_enable),
                     tf(g->consume_enable), tf(g->consume_from_min_enable));
    int rc = buf_append(b, tmp, (size_t)n);
    if (rc == 0)
        rc = json_put_string(b, name, nlen);
    if (rc != 0)
        return rc;
    n = snprintf(tmp, sizeof(tmp),
                 ",\"notifyConsumerIdsChangedEnable\":%s,\"retryMaxTimes\":%d,"
                 "\"retryQueueNums\":%d,\"whichBrokerWhenConsumeSlowly\":%" PRId64 "}",
                 tf(g->notify_consumer_ids_changed_enable), (int)g->retry_max_times,
                 (int)g->retry_queue_nums, g->which_broker_when_consume_slowly);
    return buf_append(b, tmp, (size_t)n);
}

int
subscription_group_wrapper_json(struct buf *b, const struct config_snapshot *s)
{
    static const char head[] = "{\"dataVersion\":";
    static const char mid[] = ",\"subscriptionGroupTable\":{";
    int rc = buf_append(b, head, sizeof(head) - 1);
    if (rc == 0)
        rc = json_put_data_version(b, s->dv);
    if (rc == 0)
        rc = buf_append(b, mid, sizeof(mid) - 1);
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        if (i > 0)
            rc = buf_append(b, ",", 1);
        if (rc == 0)
            rc = json_put_string(b, it->name, it->name_len);
        if (rc == 0)
            rc = buf_append(b, ":", 1);
        if (rc == 0)
            rc = subscription_group_json(b, it->name, it->name_len, it->rec);
    }
    if (rc == 0)
        rc = buf_append(b, "}}", 2);
    return rc;
}
