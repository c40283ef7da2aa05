/*
 * route_metrics: see route_metrics.h.
 */
#include "route/route_metrics.h"

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/metrics.h"
#include "route/route.h"
#include "rmq_codes.h"

static int
gauge(struct buf *out, const struct metrics *m, const char *name, const char *help, int64_t v)
{
    return metrics_put_head(out, name, "gauge", help) == 0 &&
                   metrics_put_sample(out, m, name, NULL, 0, v) == 0
               ? 0 : -1;
}

static int
collect(void *arg, const struct metrics *m, struct buf *out)
{
    struct route *rt = arg;
    size_t topics = 0, brokers = 0, clusters = 0, live = 0;
    route_counts(rt, &topics, &brokers, &clusters, &live);
    if (gauge(out, m, "rmq_namesrv_topics", "Topics with a route on this NameServer.",
              (int64_t)topics) != 0 ||
        gauge(out, m, "rmq_namesrv_brokers", "Broker names registered (a master and its slaves count once).",
              (int64_t)brokers) != 0 ||
        gauge(out, m, "rmq_namesrv_live_brokers", "Broker addresses registered and alive.",
              (int64_t)live) != 0 ||
        gauge(out, m, "rmq_namesrv_clusters", "Clusters registered.", (int64_t)clusters) != 0)
        return -1;
    static const char enc[] = "rmq_namesrv_topic_list_encodes_total";
    if (metrics_put_head(out, enc, "counter",
                         "GET_ALL_TOPIC_LIST_FROM_NAMESERVER bodies encoded (once per change of the topic set; "
                         "the requests in between share one).") != 0 ||
        metrics_put_sample(out, m, enc, NULL, 0, (int64_t)route_topic_list_encodes(rt)) != 0)
        return -1;
    static const char scans[] = "rmq_namesrv_scans_total";
    if (metrics_put_head(out, scans, "counter",
                         "Liveness scans run (every scanNotActiveBrokerInterval).") != 0 ||
        metrics_put_sample(out, m, scans, NULL, 0, (int64_t)route_scans(rt)) != 0)
        return -1;
    static const char name[] = "rmq_namesrv_route_lookups_total";
    struct metrics_label found = { "result", "found", 5 }, missing = { "result", "not_found", 9 };
    return metrics_put_head(out, name, "counter",
                            "GET_ROUTEINFO_BY_TOPIC requests answered, by whether the topic had a route.") == 0 &&
                   metrics_put_sample(out, m, name, &found, 1,
                                      (int64_t)metrics_requests(m, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, RMQ_RESP_SUCCESS)) == 0 &&
                   metrics_put_sample(out, m, name, &missing, 1,
                                      (int64_t)metrics_requests(m, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC,
                                                                RMQ_RESP_TOPIC_NOT_EXIST)) == 0
               ? 0 : -1;
}

void
route_metrics_watch(struct metrics *m, struct route *rt)
{
    if (m == NULL)
        return;
    /* The shared registry lives as long as the process: no reference. */
    metrics_set_collector(m, METRICS_SLOT_NAMESRV, rt != NULL ? collect : NULL, rt, NULL);
}
