/*
 * route: the NameServer's route registry (RocketMQ's RouteInfoManager),
 * shared by every worker thread of the process.
 *
 * Tables (protocol.md §3.0), all java.util.HashMap-ordered (jmap.h) so
 * the JSON bodies list keys as a Java NameServer does:
 *
 *   topicQueueTable    topic -> brokerName -> QueueData
 *   brokerAddrTable    brokerName -> BrokerData {cluster, brokerId -> addr}
 *   clusterAddrTable   cluster -> set of brokerName
 *   brokerLiveTable    (cluster, addr) -> {last update, heartbeat timeout,
 *                      DataVersion, connection id, haServerAddr}
 *   filterServerTable  (cluster, addr) -> filter server addresses
 *
 * They sit under ONE pthread rwlock: registrations, unregistrations, the
 * liveness scan and the admin writes take it for writing, lookups for
 * reading.  Nothing here calls Lua; results are written into a caller's
 * struct buf, so the Lua binding never raises while a lock is held.
 *
 * Semantics follow RocketMQ 4.9.8 with the 5.x additions the NameServer
 * issue asks for (stateVersion, per-broker heartbeat timeout, prime slave
 * and acting master); see route.c for each rule.
 *
 * The process-wide instance (route_shared()) is the one intentional
 * process-global handle of rmq: created once (pthread_once), before the
 * workers start when the NameServer role is loaded, never freed (it lives
 * as long as the process; everything stays reachable from it).
 *
 * MT: every function may be called from any thread.
 */
#ifndef RMQ_ROUTE_H
#define RMQ_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

struct route;
struct kvconfig;

/* RocketMQ's DataVersion: {counter, timestamp} (+ stateVersion in 5.x). */
struct route_dv {
    int64_t counter;
    int64_t timestamp;
    int64_t state;
    bool has_state;            /* the broker sent stateVersion */
};

/* One TopicConfig of a registration. */
struct route_topic_cfg {
    const char *name;
    size_t name_len;
    int32_t read;
    int32_t write;
    int32_t perm;
    int32_t sysflag;
};

/* A REGISTER_BROKER, decoded.  Strings are NUL-terminated. */
struct route_reg {
    const char *cluster;
    const char *addr;
    const char *name;
    const char *ha;            /* haServerAddr; may be NULL */
    const char *zone;          /* 5.x zoneName; may be NULL */
    int64_t id;
    int64_t timeout_ms;        /* heartbeatTimeoutMillis; <= 0: the default */
    int acting;                /* enableActingMaster: -1 absent (4.x), 0, 1 */
    struct route_dv dv;
    const struct route_topic_cfg *topics;
    size_t ntopics;
    const char *const *filters;  /* filterServerList; NULL = absent */
    size_t nfilters;
    uint64_t conn;             /* the registering connection's id */
};

/* What a registration produced; strings are offsets into the caller's
 * buffer (-1 = none). */
struct route_reg_result {
    bool ignored;              /* an older stateVersion: nothing changed */
    bool first;                /* new in brokerLiveTable */
    long master_off;
    long ha_off;
};

/* Run-time switches (NamesrvConfig), readable without the lock. */
enum route_opt {
    ROUTE_OPT_ORDER_MESSAGE = 0,    /* orderMessageEnable */
    ROUTE_OPT_ACTING_MASTER,        /* supportActingMaster */
    ROUTE_OPT_DEFAULT_TIMEOUT,      /* brokerChannelExpiredTime, ms */
    ROUTE_OPT_COUNT
};

/* Topic list queries (protocol.md §3.7). */
enum route_list {
    ROUTE_LIST_ALL = 0,
    ROUTE_LIST_CLUSTER,
    ROUTE_LIST_SYSTEM,
    ROUTE_LIST_UNIT,
    ROUTE_LIST_UNIT_SUB,
    ROUTE_LIST_UNIT_SUB_NOT_UNIT,
};

/** A new, empty registry (own KV config included).  NULL when out of memory. */
struct route *route_new(void);

/** Frees a registry made by route_new(). */
void route_free(struct route *rt);

/**
 * The process-wide registry, created on first use.  NULL only when the
 * first creation ran out of memory.
 */
struct route *route_shared(void);

/** The registry's KV config store (kvconfig.h). */
struct kvconfig *route_kv(struct route *rt);

/**
 * Run-time configuration changes (UPDATE_NAMESRV_CONFIG), shared by the
 * workers: key -> value text in namespace "namesrv" of this store.
 */
struct kvconfig *route_overrides(struct route *rt);

/** The generation of those changes: a worker re-reads them when it moved. */
uint64_t route_conf_gen(struct route *rt);

/** Bumps the generation after a change. */
void route_conf_bump(struct route *rt);

/** Sets a run-time switch (atomic; lookups see it at once). */
void route_set_opt(struct route *rt, enum route_opt opt, int64_t v);

/** Reads a run-time switch. */
int64_t route_get_opt(struct route *rt, enum route_opt opt);

/**
 * REGISTER_BROKER.  Returns 0 and fills *res (strings appended to out),
 * or -ENOMEM with err_set() (the tables stay consistent).
 */
int route_register(struct route *rt, const struct route_reg *reg,
                   struct route_reg_result *res, struct buf *out);

/**
 * UNREGISTER_BROKER: drops the broker at (cluster, addr) of brokerName.
 * Returns how many brokers were removed (0 or 1).
 */
int route_unregister(struct route *rt, const char *cluster, const char *addr,
                     const char *name, int64_t id);

/**
 * Drops, in one batch, every broker registered through connection `conn`.
 * Returns how many.
 */
int route_conn_closed(struct route *rt, uint64_t conn);

/**
 * Drops, in one batch, every broker silent for longer than its heartbeat
 * timeout at monotonic time now_ms.  Returns how many.
 */
int route_scan(struct route *rt, int64_t now_ms);

/**
 * QUERY_DATA_VERSION: *changed = the stored DataVersion of (cluster, addr)
 * differs from dv or there is none; when unchanged the broker's last update
 * is refreshed.  The stored version's JSON goes to out (nothing when none).
 * Returns 0 or -ENOMEM.
 */
int route_query_dv(struct route *rt, const char *cluster, const char *addr,
                   const struct route_dv *dv, bool *changed, struct buf *out);

/**
 * 5.x BROKER_HEARTBEAT: refreshes the last update of (cluster, addr).
 * Returns 1, or 0 when that broker is not registered.
 */
int route_heartbeat(struct route *rt, const char *cluster, const char *addr);

/** WIPE_WRITE_PERM_OF_BROKER: clears PERM_WRITE of the broker's queues;
 * returns the number of topics touched. */
int route_wipe_write_perm(struct route *rt, const char *name);

/** ADD_WRITE_PERM_OF_BROKER: sets the broker's queues to PERM_READ |
 * PERM_WRITE; returns the number of topics touched. */
int route_add_write_perm(struct route *rt, const char *name);

/**
 * DELETE_TOPIC_IN_NAMESRV: the whole topic (cluster NULL or empty) or the
 * queues of that cluster's brokers.  Returns 1 when something was removed.
 */
int route_delete_topic(struct route *rt, const char *topic, size_t tlen,
                       const char *cluster);

/**
 * GET_ROUTEINFO_BY_TOPIC: appends the TopicRouteData JSON to out and
 * returns 1, or returns 0 when the topic has no route (TOPIC_NOT_EXIST),
 * or -ENOMEM.  browser: the "standard JSON" form (request version >= 401 or
 * acceptStandardJsonOnly).  orderTopicConf comes from the KV namespace
 * ORDER_TOPIC_CONFIG when ROUTE_OPT_ORDER_MESSAGE is set.
 */
int route_topic_json(struct route *rt, const char *topic, size_t tlen,
                     bool browser, struct buf *out);

/** GET_BROKER_CLUSTER_INFO body.  Returns 0 or -ENOMEM. */
int route_cluster_json(struct route *rt, struct buf *out);

/** 5.x GET_BROKER_MEMBER_GROUP: {"brokerMemberGroup":{brokerAddrs, brokerName,
 * cluster}} of a broker name (no addresses when unknown).  0 or -ENOMEM. */
int route_member_group_json(struct route *rt, const char *cluster, size_t clen,
                            const char *name, size_t nlen, struct buf *out);

/** A TopicList body; `cluster` for ROUTE_LIST_CLUSTER.  0 or -ENOMEM. */
int route_topic_list_json(struct route *rt, enum route_list which,
                          const char *cluster, struct buf *out);

struct rcbuf;

/**
 * The ROUTE_LIST_ALL body (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), encoded
 * once per change of the topic set and shared among workers: a reference
 * (rcbuf_unref when done), or NULL on ENOMEM.
 */
struct rcbuf *route_topic_list_all_shared(struct route *rt);

/** How many times route_topic_list_all_shared encoded. */
uint64_t route_topic_list_encodes(struct route *rt);

/** How many liveness scans (route_scan) have run. */
uint64_t route_scans(struct route *rt);

/* {{{ Introspection for specs and logs */

/** Counts: topics, broker names, clusters, live brokers. */
struct jmap_stats;

/** Chain statistics of the topic, broker, cluster and live-broker maps
 *  (out[0..3]): what a lookup walks (core/jmap.h). */
void route_hash_stats(struct route *rt, struct jmap_stats *out);

void route_counts(struct route *rt, size_t *topics, size_t *brokers,
                  size_t *clusters, size_t *live);

/* }}} */

#endif
