/*
 * route_impl: the registry's private structures, shared by route.c (the
 * writers) and route_json.c (the bodies).  Not for other modules.
 */
#ifndef RMQ_ROUTE_IMPL_H
#define RMQ_ROUTE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/jmap.h"
#include "route/route.h"
#include "rmq_codes.h"      /* RMQ_PERM_* */

/* Java's capacities for the tables (RouteInfoManager's constructor) and
 * for the maps and sets created inside them (new HashMap<>() = 16). */
#define CAP_TOPICS 1024
#define CAP_BROKERS 128
#define CAP_CLUSTERS 32
#define CAP_LIVE 256
#define CAP_FILTERS 256
#define CAP_DEFAULT 16

#define SYSFLAG_UNIT 1
#define SYSFLAG_UNIT_SUB 2

struct qdata {                 /* QueueData (brokerName is its key) */
    int32_t read;
    int32_t write;
    int32_t perm;
    int32_t sysflag;
};

struct topic {
    struct jmap qds;           /* brokerName -> struct qdata* */
};

struct bdata {                 /* BrokerData */
    char *cluster;
    char *name;
    struct jmap addrs;         /* Long brokerId -> char *addr */
    char *zone;                /* 5.x zoneName, or NULL */
    bool acting;               /* 5.x enableActingMaster */
};

struct live {                  /* BrokerLiveInfo */
    char *cluster;
    char *addr;
    char *name;                /* the brokerName it registered as */
    char *ha;                  /* haServerAddr, or NULL */
    int64_t id;
    int64_t last_ms;           /* monotonic */
    int64_t timeout_ms;
    struct route_dv dv;
    uint64_t conn;
};

struct flist {                 /* filter server addresses */
    size_t n;
    char *v[];
};

struct route {
    pthread_rwlock_t lock;
    struct jmap topics;        /* topic -> struct topic* */
    struct jmap brokers;       /* brokerName -> struct bdata* */
    struct jmap clusters;      /* cluster -> struct jmap* (brokerName set) */
    struct jmap live;          /* cluster \0 addr -> struct live* */
    struct jmap filters;       /* cluster \0 addr -> struct flist* */
    _Atomic int64_t opts[ROUTE_OPT_COUNT];
    struct kvconfig *kv;
    struct kvconfig *overrides;  /* UPDATE_NAMESRV_CONFIG values */
    _Atomic uint64_t conf_gen;   /* bumped by each update */
    /* route_topic_list_all_shared's cache: the body and the topic map's
     * mods it was encoded at (guarded by list_lock, taken before lock). */
    pthread_mutex_t list_lock;
    struct rcbuf *list_all;
    uint64_t list_all_mods;
    _Atomic uint64_t list_encodes;
    _Atomic uint64_t scans;      /* route_scan calls (a signal per scan) */
};

/* Lock helpers: a failing pthread lock call is a broken invariant. */
static inline void
rt_rdlock(struct route *rt)
{
    if (pthread_rwlock_rdlock(&rt->lock) != 0)
        abort();
}

static inline void
rt_wrlock(struct route *rt)
{
    if (pthread_rwlock_wrlock(&rt->lock) != 0)
        abort();
}

static inline void
rt_unlock(struct route *rt)
{
    if (pthread_rwlock_unlock(&rt->lock) != 0)
        abort();
}

#endif
