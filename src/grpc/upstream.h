/*
 * upstream: the backend of the gRPC service in cluster mode (`role =
 * "proxy"`, conf/proxy.lua): where a local-mode call hands its remoting
 * request to the broker's own processors through the session's shadow
 * conn, a proxy sends it over a pooled remoting client connection to the
 * broker it is for, and passes the broker's reply back to the shadow conn
 * as if the local broker had answered (service.c reads it there, so every
 * RPC keeps one code path in both modes).
 *
 * Which broker (as RocketMQ 5's proxy in cluster mode picks):
 *   GET_ROUTEINFO_BY_TOPIC     answered from the route cache (QueryRoute,
 *                              QueryAssignment)
 *   SEND_MESSAGE_V2            a message group: hashed over every writable
 *                              queue of every broker (one queue per group);
 *                              else round robin over writable brokers
 *   POP_MESSAGE, offsets       the broker the request names (`bname`, as
 *                              5.x's RpcRequestHeader), else round robin
 *                              over readable brokers (offsets: the first
 *                              broker holding the queue)
 *   ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME
 *                              the broker named in the receipt handle
 *   END_TRANSACTION            the half message's broker, from the store
 *                              host in its offset message id
 *   HEART_BEAT                 every master broker in the route cache
 * A broker is its master (brokerId 0) address from the NameServers'
 * TopicRouteData (GET_ROUTEINFO_BY_TOPIC), fetched on first use, kept
 * topicRouteServiceCacheRefreshSeconds before it is fetched again (the
 * stale route serving meanwhile), dropped when not used for
 * topicRouteServiceCacheExpiredSeconds, at most topicRouteServiceCacheMaxNum
 * topics (5.x ProxyConfig's keys).  Requests waiting for a route are
 * bounded (proxyMaxWaitingRequests); broker connections too
 * (proxyMaxBrokerConnections per worker).  With its route, a topic's
 * config (its message.type) from one of its brokers (GET_TOPIC_CONFIG,
 * as 5.x's ClusterMetadataService): QueryRoute and SEND_MESSAGE_V2 wait
 * for both the first time; it is asked again every
 * topicConfigCacheRefreshSeconds, and lives as long as the route.  A
 * send of another type than the topic's is answered here
 * UPSTREAM_RESP_TYPE_CONFLICT.  A consumer group's consumeMessageOrderly
 * likewise from a broker (GET_SUBSCRIPTIONGROUP_CONFIG, its own cache:
 * subscriptionGroupConfigCache* keys): a POP of an orderly group is sent
 * orderly, and GET_SUBSCRIPTIONGROUP_CONFIG from service.c (a consumer's
 * Settings: fifo, retry policy) is answered from it, the parts read
 * written back as a broker writes them.  Nothing else is kept: a restart loses caches only.
 *
 * A broker's CHECK_TRANSACTION_STATE (to the producer of group
 * CLIENT_INNER_PRODUCER this connection registered as) is handed to
 * on_check, which relays it to a gRPC producer over Telemetry.
 *
 * MT: one upstream per worker, used on that worker's thread.
 */
#ifndef RMQ_GRPC_UPSTREAM_H
#define RMQ_GRPC_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

struct reactor;
struct conn;
struct upstream;

/* The most brokers one route may name (more are ignored, with a log). */
#define UPSTREAM_MAX_BROKERS 64

struct upstream_conf {
    char namesrv[512];          /* namesrvAddr: "host:port;host:port" */
    uint64_t route_refresh_ms;  /* topicRouteServiceCacheRefreshSeconds */
    uint64_t route_expire_ms;   /* topicRouteServiceCacheExpiredSeconds */
    uint32_t route_max;         /* topicRouteServiceCacheMaxNum */
    uint32_t max_conns;         /* proxyMaxBrokerConnections */
    uint32_t max_waiting;       /* proxyMaxWaitingRequests */
    uint64_t call_timeout_ms;   /* proxyBrokerCallTimeoutMillis (POP: + its poll time) */
    uint64_t cfg_refresh_ms;    /* topicConfigCacheRefreshSeconds */
    uint64_t group_refresh_ms;  /* subscriptionGroupConfigCacheRefreshSeconds */
    uint64_t group_expire_ms;   /* subscriptionGroupConfigCacheExpiredSeconds */
    uint32_t group_max;         /* subscriptionGroupConfigCacheMaxNum */
};

/* The reply code of a send whose message type is not the topic's
 * message.type (made here, no RocketMQ ResponseCode has one): the v2
 * Code MESSAGE_PROPERTY_CONFLICT_WITH_TYPE itself. */
#define UPSTREAM_RESP_TYPE_CONFLICT 40014

/* One broker of a topic's route. */
struct upstream_broker {
    char name[128];
    char addr[64];              /* the master's (brokerId 0) */
    int32_t perm, read_queues, write_queues;
};

struct upstream_route {
    uint32_t n;
    struct upstream_broker b[UPSTREAM_MAX_BROKERS];
};

/**
 * A TopicRouteData body (JSON, fastjson's bare integer keys included) as
 * the brokers with a master and queues.  0, or -1 when it does not parse.
 */
int upstream_route_parse(const uint8_t *json, size_t len, struct upstream_route *out);

/**
 * A TopicConfig JSON body's message.type attribute: TOPIC_MSG_* (see
 * broker/topic_config.h), 0 when it has none, -1 when it does not parse.
 */
int upstream_topic_type_parse(const uint8_t *json, size_t len);

struct subscription_group;

/**
 * A SubscriptionGroupConfig JSON body (a broker's answer to
 * GET_SUBSCRIPTIONGROUP_CONFIG) as what a consumer's Settings take from
 * it: retryMaxTimes (16 when absent), consumeMessageOrderly and
 * groupRetryPolicy (v5 set when either is there), as rmq's own group
 * table holds them.  0, or -1 when it does not parse.
 */
int upstream_group_parse(const uint8_t *json, size_t len, struct subscription_group *out);

/** A worker's upstream, or NULL with err_set(). */
struct upstream *upstream_new(struct reactor *r, const struct upstream_conf *conf,
                              void (*on_check)(void *arg, const uint8_t *frame, size_t len),
                              void *arg);

/**
 * Sends the request `frame` (an encoded RemotingCommand, opaque inside)
 * to the broker it is for; the reply, with the same opaque, is queued on
 * reply_to (conn_send) when it comes: the broker's, or one made here
 * (SYSTEM_ERROR naming the broker when it cannot be reached, SYSTEM_BUSY
 * when too many requests wait, the NameServer's refusal of the route).
 * reply_to is referenced until then.  0, or -1 when nothing will come.
 */
int upstream_forward(struct upstream *up, struct conn *reply_to, const uint8_t *frame, size_t len);

/** Stops the timers and closes the broker connections (the worker stops). */
void upstream_stop(struct upstream *up);

/** Frees it (after the loop ended). */
void upstream_free(struct upstream *up);

#endif
