/*
 * client_registry: the broker's clients (RocketMQ's ConsumerManager with
 * its ConsumerGroupInfo, ProducerManager, and ClientHousekeepingService's
 * expiry), one table for every worker thread.
 *
 *   consumer groups   name -> settings (consumeType, messageModel,
 *                     consumeFromWhere, unitMode), subscription table
 *                     (topic -> normalised SubscriptionData), channels
 *   producer groups   name -> channels
 *   channel           one connection in one group: connection id,
 *                     clientId, language, version, addr, lastUpdate
 *   connections       connection id -> its channels, for a close
 *
 * Groups and topics are found in O(1) (hash tables); a group's channels
 * are kept in connection id order ("channel order"), found by binary
 * search.  A group exists while it has a channel: it goes (with its
 * subscriptions) with its last one.
 *
 * Rules (4.9.8): a heartbeat's channel joins a group or refreshes its
 * entry (info and lastUpdate); the settings are the last heartbeat's
 * (a field the client left out keeps the stored value); the
 * subscription table follows ConsumerGroupInfo.updateSubscription: a new
 * topic is added, a known one replaced only by a newer subVersion, a
 * topic the heartbeat does not list is dropped.  A consumer group
 * "changed" when a channel joined or its topic set changed: those are
 * the groups told with NOTIFY_CONSUMER_IDS_CHANGED.
 *
 * Bounded: struct creg_limits caps the groups of each kind, the
 * subscriptions of a group and the channels of a group (RocketMQ has no
 * such caps).  A heartbeat that would pass one is refused whole
 * (-RMQ_ETOOBIG), like one that fails to parse: nothing is applied.
 *
 * Locks: one rwlock (writer-preferring) over all the tables, so that a
 * heartbeat applies atomically.  Writers: heartbeat, unregister,
 * connection close, expiry scan, clear.  Readers copy what they return
 * into the caller's struct buf under the lock (records, below) and the
 * caller builds its values after unlocking: nothing calls out while a
 * lock is held.
 *
 * MT: every function from any thread.
 */
#ifndef RMQ_BROKER_CLIENT_REGISTRY_H
#define RMQ_BROKER_CLIENT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto/heartbeat.h"
#include "core/buf.h"

enum creg_kind {
    CREG_CONSUMER = 0,
    CREG_PRODUCER = 1,
};

struct creg_limits {
    uint32_t max_consumer_groups;   /* default 100,000 */
    uint32_t max_producer_groups;   /* default 100,000 */
    uint32_t max_subscriptions;     /* per consumer group, default 10,000 */
    uint32_t max_channels;          /* per group, default 10,000 */
};

struct creg;

/** A new empty registry, or NULL (out of memory). */
struct creg *creg_new(void);

void creg_free(struct creg *reg);

/** The process-wide registry (created on first use), or NULL. */
struct creg *creg_shared(void);

void creg_limits_default(struct creg_limits *lim);
void creg_set_limits(struct creg *reg, const struct creg_limits *lim);
void creg_get_limits(struct creg *reg, struct creg_limits *lim);

/** Parse limits that match the registry's (a heartbeat listing more
 *  groups than it may hold is refused while reading). */
void creg_parse_limits(struct creg *reg, struct hb_limits *lim);

/** Forgets every group and connection. */
void creg_clear(struct creg *reg);

/* {{{ Heartbeat */

/* The channel a heartbeat comes from. */
struct creg_client {
    const char *language;      /* e.g. "JAVA"; NULL = "" */
    const char *addr;          /* the peer, "ip:port"; NULL = "" */
    int32_t version;
    int64_t now;               /* lastUpdate, epoch ms */
};

enum {
    CREG_CHANGED = 1,          /* a channel joined or the topic set changed */
    CREG_NEW = 2,              /* the group was not in the registry */
};

struct creg_hb_result {
    /* Per consumerDataSet / producerDataSet entry; a group listed twice
     * has its flags on its first entry. */
    uint8_t *cflags;
    uint8_t *pflags;
    uint32_t nchanged, nnew, nnew_producers;
    /* 5.x heartbeat v2: the client must send its subscriptions again
     * (IS_SUB_CHANGE); see heartbeat.h hb_v2_reply(). */
    bool sub_change;
    /* For each consumer entry with CREG_CHANGED, in entry order, the
     * group's connection ids after the change: u32 n, n x u64. */
    struct buf conns;
};

/** Sizes *res for `hb`.  Returns 0, or -ENOMEM. */
int creg_hb_result_init(struct creg_hb_result *res, const struct heartbeat *hb);
void creg_hb_result_free(struct creg_hb_result *res);

/**
 * Applies a parsed heartbeat from connection `conn`.  Returns 0; or
 * -RMQ_ETOOBIG (a limit; nothing applied) or -ENOMEM, with err_set().
 * Cost: linear in the heartbeat (its groups and subscriptions), not in
 * the registry.
 */
int creg_heartbeat(struct creg *reg, uint64_t conn, const struct heartbeat *hb,
                   const struct creg_client *cl, struct creg_hb_result *res);

/**
 * The repeat heartbeat (a client sends one every 30 s): when `hb` would
 * change nothing but the channels' lastUpdate, refreshes that under the
 * read lock and returns true; else returns false, having changed nothing
 * (creg_heartbeat applies it).
 */
bool creg_heartbeat_repeat(struct creg *reg, uint64_t conn,
                           const struct heartbeat *hb,
                           const struct creg_client *cl);

/* }}} */

/* {{{ Removal */

/**
 * UNREGISTER_CLIENT: the connection leaves the producer group and the
 * consumer group (either may be NULL).  Returns a mask: 1 when it was in
 * the producer group, 2 when in the consumer group.
 */
int creg_unregister(struct creg *reg, uint64_t conn, const char *pg, size_t pgl,
                    const char *cg, size_t cgl);

/** One channel leaves one group; true when it was a member. */
bool creg_remove(struct creg *reg, enum creg_kind kind, const char *group,
                 size_t gl, uint64_t conn);

/**
 * The connection closed: it leaves every group it joined.  Writes, for
 * each consumer group it left that still has members: str group, u32 n,
 * n x u64 (the remaining connections).  Returns the number of those
 * records, the channels removed in *removed; -ENOMEM.
 */
int creg_conn_closed(struct creg *reg, uint64_t conn, struct buf *out,
                     uint32_t *removed);

/**
 * Expiry: drops every channel whose lastUpdate is more than timeout_ms
 * before now.  Writes one record per dropped channel: u8 kind, str group,
 * str clientId, str addr, i64 lastUpdate; then u32 n and n records of
 * consumer groups that lost channels and still have members: str group,
 * u32 k, k x u64.  Returns the number dropped, or -ENOMEM.  Takes the
 * write lock only when something expired.
 */
int creg_scan(struct creg *reg, int64_t now, int64_t timeout_ms, struct buf *out);

/* }}} */

/* {{{ Queries (records written into out, which is not reset) */

/*
 * Records: native-endian integers; str = u32 length + bytes.
 *
 *   SETTINGS  i8 consumeType, i8 messageModel, i8 consumeFromWhere
 *             (-1 = never sent), u8 unitMode
 *   SUB       str topic, str subString, str expressionType,
 *             i64 subVersion, u8 classFilterMode, u32 n, n x str tag,
 *             n x i32 code
 *   CHAN      u64 conn, str clientId, str language, i32 version,
 *             str addr, i64 lastUpdate
 */

/**
 * A PULL's question.  Returns 0 (no such group), 1 (the group: SETTINGS
 * written; it has no subscription of topic), 2 (SETTINGS, then SUB), or
 * -ENOMEM.
 */
int creg_subscription(struct creg *reg, const char *group, size_t gl,
                      const char *topic, size_t tl, struct buf *out);

/**
 * The consumer group's generation: it moves whenever its settings or
 * subscriptions change, never repeats (a group that goes and comes back
 * gets a new one); 0 when there is no such group.  Lets a caller keep
 * what creg_subscription() gave it until the generation moves.
 */
uint64_t creg_generation(struct creg *reg, const char *group, size_t gl);

/** A consumer group whole: SETTINGS, u32 n, n x SUB, u32 k, k x CHAN.
 *  Returns 0 (no such group), 1, or -ENOMEM. */
int creg_consumer_group(struct creg *reg, const char *group, size_t gl,
                        struct buf *out);

/** The distinct clientIds of a consumer group, in channel order
 *  (GET_CONSUMER_LIST_BY_GROUP): n x str.  Returns n or -ENOMEM. */
int creg_client_ids(struct creg *reg, const char *group, size_t gl,
                    struct buf *out);

/** A group's connection ids, in channel order: n x u64.  Returns n. */
int creg_conns(struct creg *reg, enum creg_kind kind, const char *group,
               size_t gl, struct buf *out);

/** A group's channels: n x CHAN.  Returns n or -ENOMEM. */
int creg_members(struct creg *reg, enum creg_kind kind, const char *group,
                 size_t gl, struct buf *out);

/**
 * The connection of a client by its clientId among the channels of one
 * kind (ProducerManager.findChannel: request-reply pushes the reply to
 * the requester's channel): the one heartbeating last when several.
 * A scan of every connection under the read lock, O(channels); it runs
 * once per reply message.  Returns true with *conn set, else false.
 */
bool creg_find_client(struct creg *reg, enum creg_kind kind, const char *cid,
                      size_t cl, uint64_t *conn);

/** Every group name of a kind (unordered): n x str.  Returns n. */
int creg_groups(struct creg *reg, enum creg_kind kind, struct buf *out);

struct creg_counts {
    uint32_t consumer_groups, producer_groups, connections;
    uint64_t channels, subscriptions;
};

void creg_counts(struct creg *reg, struct creg_counts *c);

/* }}} */

/* {{{ Reading records */

struct creg_rd {
    const uint8_t *p, *end;
};

static inline void
creg_rd_init(struct creg_rd *r, const struct buf *b, size_t from)
{
    r->p = buf_head(b) + from;
    r->end = buf_tail(b);
}

#define CREG_RD(name, type)                          \
    static inline type                               \
    creg_rd_##name(struct creg_rd *r)                \
    {                                                \
        type v;                                      \
        memcpy(&v, r->p, sizeof(v));                 \
        r->p += sizeof(v);                           \
        return v;                                    \
    }
CREG_RD(u8, uint8_t)
CREG_RD(i8, int8_t)
CREG_RD(u32, uint32_t)
CREG_RD(i32, int32_t)
CREG_RD(u64, uint64_t)
CREG_RD(i64, int64_t)
#undef CREG_RD

static inline const char *
creg_rd_str(struct creg_rd *r, size_t *len)
{
    uint32_t n = creg_rd_u32(r);
    const char *s = (const char *)r->p;
    r->p += n;
    *len = n;
    return s;
}

/* }}} */

#endif
