/*
 * store_metrics: a broker's scrape-time gauges (metrics collectors,
 * core/metrics.h) for its store and its clients, RocketMQ 5's names
 * (DefaultStoreMetricsManager, BrokerMetricsManager):
 *
 *   rocketmq_storage_size{storage_type,storage_medium}   bytes used on
 *       the store's partition (as 5.x: total - free of the store dir)
 *   rocketmq_storage_flush_behind_bytes                  written, not fsync'd
 *   rocketmq_storage_dispatch_behind_bytes               written, not indexed
 *   rocketmq_storage_message_reserve_time                now - the oldest
 *       message's store time, ms (absent with an empty store)
 *   rmq_storage_commitlog_bytes                          commit log held
 *       (max - min physical offset)
 *   rmq_storage_disk_used_ratio                          the partition's use,
 *       percent (what diskMaxUsedSpaceRatio is compared with)
 *   rocketmq_producer_connections{language,version}      channels
 *   rocketmq_consumer_connections{consumer_group,language,version,consume_mode}
 *   rmq_producer_groups, rmq_consumer_groups             groups with members
 *   the POP families (broker/pop_processor.h, pop_metrics)
 *
 * Nothing here runs between scrapes.
 *
 * MT: the collectors run on the scraping thread; the store and the
 * client registry are safe from any thread.
 */
#ifndef RMQ_STORE_METRICS_H
#define RMQ_STORE_METRICS_H

struct metrics;
struct store;

/**
 * Makes m render store's gauges and the shared client registry's
 * connections at each scrape (store == NULL: stops both).  Holds a
 * reference to the store until replaced or m is freed.
 */
void store_metrics_watch(struct metrics *m, struct store *store);

#endif
