/*
 * lag_metrics: a broker's consumer lag, computed when /metrics is
 * scraped (a metrics collector, core/metrics.h), so the send and pull
 * paths pay nothing for it.  For every "topic@group" of the shared
 * offset table (offset_table_shared()) and every queue with a committed
 * offset, with max the queue's max offset in the store and pulled the
 * group's latest pull offset of the queue (the nextBeginOffset of its
 * last pull that returned messages, recorded by metrics_out; max when
 * there was none since the start), as RocketMQ 5's ConsumerLagCalculator
 * defines them for 4.x-style pull consumers, summed over queues:
 *
 *   rocketmq_consumer_lag_messages{topic,consumer_group}       max - committed
 *   rocketmq_consumer_inflight_messages{topic,consumer_group}  pulled - committed,
 *       plus the group's POP leases on the topic (pop_processor.h)
 *   rocketmq_consumer_ready_messages{topic,consumer_group}     max - pulled
 *   rocketmq_consumer_lag_latency{topic,consumer_group}   ms since the
 *       store time of the oldest unconsumed message (the one at the
 *       committed offset of each queue behind); 0 when caught up
 *   rmq_consumer_lag_messages{topic,consumer_group,queue_id}   max - committed
 *
 * (each difference 0 when negative), each also labelled is_retry (a
 * %RETRY% topic) and is_system (lag_metrics_is_system) as 5.x labels
 * its lag families.
 *
 * Each family holds at most metricsMaxLabelSets series; the rest is
 * summed into one series labelled "overflow", as the recorded families do
 * (the lag latency's overflow is the worst of the rest).
 *
 * MT: lag_metrics_collect on any thread: the offset table is copied under
 * its own lock, and the store's look-ups are safe from any thread.
 */
#ifndef RMQ_LAG_METRICS_H
#define RMQ_LAG_METRICS_H

#include <stdbool.h>
#include <stddef.h>

struct metrics;
struct store;

/**
 * Makes m compute the lag of store's queues at each scrape (store == NULL:
 * stops).  The collector holds a reference to the store until it is
 * replaced or m is freed.
 */
void lag_metrics_watch(struct metrics *m, struct store *store);

/**
 * 5.x's is_system label: a system topic (TopicValidator's set, or the
 * rmq_sys_ prefix; topic NULL: none) or a system group (the
 * CID_RMQ_SYS_ prefix, any case).
 */
bool lag_metrics_is_system(const char *topic, size_t tlen, const char *group, size_t glen);

#endif
