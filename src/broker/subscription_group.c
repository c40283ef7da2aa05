/* subscription_group: see subscription_group.h.  Written with route/fjson. */
#include "broker/subscription_group.h"

#include "core/fjson.h"

static void
bool_field(struct fjw *w, const char *key, bool v)
{
    fjw_lit(w, key);
    fjw_lit(w, v ? "true" : "false");
}

static void
retry_json(struct fjw *w, const struct group_retry_policy *r)
{
    fjw_lit(w, "{");
    bool comma = false;
    if (r->has_customized) {
        fjw_lit(w, "\"customizedRetryPolicy\":{\"next\":[");
        for (unsigned i = 0; i < r->next_count; i++) {
            if (i > 0)
                fjw_lit(w, ",");
            fjw_i64(w, r->next[i]);
        }
        fjw_lit(w, "]}");
        comma = true;
    }
    if (r->has_exponential) {
        fjw_lit(w, comma ? ",\"exponentialRetryPolicy\":{\"initial\":"
                         : "\"exponentialRetryPolicy\":{\"initial\":");
        fjw_i64(w, r->initial);
        fjw_lit(w, ",\"max\":");
        fjw_i64(w, r->max);
        fjw_lit(w, ",\"multiplier\":");
        fjw_i64(w, r->multiplier);
        fjw_lit(w, "}");
        comma = true;
    }
    if (comma)
        fjw_lit(w, ",");
    fjw_lit(w, r->type == GROUP_RETRY_EXPONENTIAL ? "\"type\":\"EXPONENTIAL\"}"
                                                  : "\"type\":\"CUSTOMIZED\"}");
}

static void
group_json(struct fjw *w, const char *name, size_t nlen,
           const struct subscription_group *g)
{
    fjw_lit(w, "{\"brokerId\":");
    fjw_i64(w, g->broker_id);
    bool_field(w, ",\"consumeBroadcastEnable\":", g->consume_broadcast_enable);
    bool_field(w, ",\"consumeEnable\":", g->consume_enable);
    bool_field(w, ",\"consumeFromMinEnable\":", g->consume_from_min_enable);
    if (g->v5)
        bool_field(w, ",\"consumeMessageOrderly\":", g->consume_message_orderly);
    fjw_lit(w, ",\"groupName\":");
    fjw_str(w, name, nlen);
    if (g->v5) {
        fjw_lit(w, ",\"groupRetryPolicy\":");
        retry_json(w, &g->retry);
    }
    bool_field(w, ",\"notifyConsumerIdsChangedEnable\":", g->notify_consumer_ids_changed_enable);
    fjw_lit(w, ",\"retryMaxTimes\":");
    fjw_i64(w, g->retry_max_times);
    fjw_lit(w, ",\"retryQueueNums\":");
    fjw_i64(w, g->retry_queue_nums);
    fjw_lit(w, ",\"whichBrokerWhenConsumeSlowly\":");
    fjw_i64(w, g->which_broker_when_consume_slowly);
    fjw_lit(w, "}");
}

int
subscription_group_json(struct buf *b, const char *name, size_t nlen,
                        const struct subscription_group *g)
{
    struct fjw w;
    fjw_init(&w, b, false);
    group_json(&w, name, nlen, g);
    return w.err;
}

int
subscription_group_wrapper_json(struct buf *b, const struct config_snapshot *s)
{
    struct fjw w;
    fjw_init(&w, b, false);
    fjw_lit(&w, "{\"dataVersion\":{\"counter\":");
    fjw_i64(&w, s->dv.counter);
    fjw_lit(&w, ",\"timestamp\":");
    fjw_i64(&w, s->dv.timestamp);
    fjw_lit(&w, "},\"subscriptionGroupTable\":{");
    for (size_t i = 0; i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        if (i > 0)
            fjw_lit(&w, ",");
        fjw_str(&w, it->name, it->name_len);
        fjw_lit(&w, ":");
        group_json(&w, it->name, it->name_len, it->rec);
    }
    fjw_lit(&w, "}}");
    return w.err;
}
