/*
 * route_metrics: a NameServer's figures on its /metrics, computed at each
 * scrape (a metrics collector, core/metrics.h) from the route registry
 * and the request counters:
 *
 *   rmq_namesrv_topics           topics with a route
 *   rmq_namesrv_brokers          broker names (a master and its slaves: one)
 *   rmq_namesrv_live_brokers     broker addresses registered and alive
 *   rmq_namesrv_clusters         clusters
 *   rmq_namesrv_topic_list_encodes_total
 *                                GET_ALL_TOPIC_LIST_FROM_NAMESERVER bodies
 *                                encoded (route_topic_list_all_shared)
 *   rmq_namesrv_scans_total      liveness scans run (route_scan)
 *   rmq_namesrv_route_lookups_total{result="found"|"not_found"}
 *                                GET_ROUTEINFO_BY_TOPIC answered
 *
 * RocketMQ 5 exports no NameServer families: these are rmq's.
 *
 * MT: the collector runs on the scraping thread; the registry locks.
 */
#ifndef RMQ_ROUTE_METRICS_H
#define RMQ_ROUTE_METRICS_H

struct metrics;
struct route;

/** Makes m render rt's figures at each scrape (rt == NULL: stops). */
void route_metrics_watch(struct metrics *m, struct route *rt);

#endif
