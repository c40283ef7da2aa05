/*
 * config_table: a broker table of named configuration records shared by
 * every worker: RocketMQ's TopicConfigManager.topicConfigTable and
 * SubscriptionGroupManager.subscriptionGroupTable, each with its
 * DataVersion.  A record is a fixed-size plain struct (topic_config.h,
 * subscription_group.h); the table copies it in and out whole, so a
 * reader never sees half an update.
 *
 * Every change moves the table's generation, and each entry remembers
 * the generation that last changed it: a registration can send only the
 * topics changed since the last round (RocketMQ's
 * registerIncrementBrokerData), and a Lua state can cache what it read
 * until the generation moves.
 *
 * Snapshots list entries in the order a Java broker's ConcurrentHashMap
 * iterates them (by bucket of the spread String hash for the table size
 * a map of that capacity has at that count; ties by name), so bodies
 * built from them are byte-identical to a 4.9.8 broker's.
 *
 * MT: every function, from any thread (one rwlock per table; no callback
 * runs under it).
 */
#ifndef RMQ_CONFIG_TABLE_H
#define RMQ_CONFIG_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** RocketMQ's DataVersion: counter, and the wall time of the last change. */
struct data_version {
    int64_t counter;
    int64_t timestamp;
};

struct config_table;

/** One entry of a snapshot; `name` is NUL-terminated, `rec` is rec_size bytes. */
struct config_item {
    const char *name;
    uint32_t name_len;
    uint32_t hash;             /* spread String.hashCode of the name */
    uint64_t gen;              /* generation of its last change */
    const void *rec;
};

/** A copy of (part of) a table, laid out in one caller-provided block. */
struct config_snapshot {
    size_t count;
    uint64_t gen;              /* the table's generation when copied */
    struct data_version dv;
    struct config_item *items;
};

enum {
    CT_IF_ABSENT = 1,          /* leave an existing entry alone */
    CT_QUIET = 2,              /* do not move the DataVersion */
};

/** An empty table of rec_size-byte records; NULL on ENOMEM. */
struct config_table *config_table_new(size_t rec_size);

void config_table_free(struct config_table *t);

/** The process-wide topic and subscription-group tables (created on first use). */
struct config_table *config_table_topics(void);
struct config_table *config_table_groups(void);

size_t config_table_rec_size(const struct config_table *t);

/** Copies the record of `name` into out. Returns 0, or -1 when absent. */
int config_table_get(struct config_table *t, const char *name, size_t len,
                     void *out);

/**
 * Stores rec under name.  Returns 1 when the table changed (a new entry,
 * or different bytes), 0 when it did not (same record, or CT_IF_ABSENT
 * and present), -ENOMEM.  A change moves the generation and, unless
 * CT_QUIET, the DataVersion (counter + 1, timestamp now).
 */
int config_table_put(struct config_table *t, const char *name, size_t len,
                     const void *rec, int flags);

/** Removes name (moving the DataVersion). Returns 1 if it was there, else 0. */
int config_table_del(struct config_table *t, const char *name, size_t len);

/** Removes everything and resets the DataVersion to {0, now}. */
void config_table_clear(struct config_table *t);

size_t config_table_count(struct config_table *t);

struct jmap_stats;

/** Chain statistics of the name index (core/jmap.h): what a lookup walks. */
void config_table_hash_stats(struct config_table *t, struct jmap_stats *st);

/** Moves on every change; cheap (no lock). */
uint64_t config_table_gen(struct config_table *t);

/**
 * Counts deletes and clears: a persister that writes only what changed
 * (config_table_snapshot since a generation) sees additions and updates
 * there, and removals by this count moving.
 */
uint64_t config_table_removals(struct config_table *t);

struct data_version config_table_data_version(struct config_table *t);
void config_table_set_data_version(struct config_table *t,
                                   struct data_version dv);

/** DataVersion.nextVersion(): counter + 1, timestamp = now (moves the generation). */
void config_table_bump(struct config_table *t);

/**
 * Copies the entries changed after generation `since` (0: all) into
 * block (cap bytes) as a config_snapshot at its start.  Returns the bytes
 * needed; when that is more than cap nothing usable was written: call
 * again with a block that large (the table may grow meanwhile).
 */
size_t config_table_snapshot(struct config_table *t, uint64_t since,
                             void *block, size_t cap);

/**
 * Sorts a snapshot's items into a ConcurrentHashMap's iteration order:
 * for each capacity in `caps` (the Java initial capacities of the maps the
 * items passed through, innermost last), the items are ordered by bucket
 * in a map of that capacity holding them all; ties by the previous
 * capacities, then by name.
 */
void config_snapshot_java_order(struct config_snapshot *s,
                                const uint32_t *caps, int ncaps);

struct buf;
struct rcbuf;

/**
 * Writes the body of the whole table into out (0, or -ENOMEM) and the
 * table generation its snapshot was taken at into *gen.
 */
typedef int config_encode_fn(struct config_table *t, struct buf *out,
                             uint64_t *gen, void *arg);

/**
 * The table's body as `encode` writes it, encoded once per generation
 * (every change, and so every DataVersion, moves it) and shared: the
 * caller gets a reference (rcbuf_unref when done), or NULL on ENOMEM.
 * One encoder per table (the cache has one slot).  GET_ALL_TOPIC_CONFIG
 * and GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer with it.
 */
struct rcbuf *config_table_encoded(struct config_table *t, config_encode_fn *encode,
                                   void *arg);

/**
 * Drops the body config_table_encoded keeps when nobody asked for it in
 * idle_ms: at 26,000 topics it is 4 MB that an attack (the console's
 * samples, a GET_ALL_TOPIC_CONFIG loop) left behind for good
 * (docs/memory.md).  True when it dropped one.  The next ask encodes
 * again.
 */
bool config_table_encoded_trim(struct config_table *t, int64_t idle_ms);

/** How many times config_table_encoded encoded (runtime info). */
uint64_t config_table_encodes(struct config_table *t);

/** Bytes of a snapshot block able to hold n entries with names of total length names. */
size_t config_snapshot_size(size_t rec_size, size_t n, size_t names);

#endif
