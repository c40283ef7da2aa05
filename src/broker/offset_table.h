/*
 * offset_table: RocketMQ's ConsumerOffsetManager.offsetTable, shared by
 * every worker: "topic@group" -> queue id -> committed offset, under one
 * rwlock, with a generation that moves on every change (persist when it
 * moved).  Queue offsets of one key live in one array indexed by queue
 * id, so a commit is a hash lookup and a store.
 *
 * consumerOffset.json as ConsumerOffsetManager.encode(prettyFormat)
 * writes it, keys sorted, bare integer queue keys (fastjson):
 *   {"offsetTable":{"T@g":{0:5,1:7}}}
 *   {\n\t"offsetTable":{\n\t\t"T@g":{0:5,1:7\n\t\t}\n\t}\n}
 *
 * Topic and group names cannot hold '@' (TopicValidator, group rules),
 * so the key splits at its first '@'.
 *
 * MT: every function, from any thread.
 */
#ifndef RMQ_OFFSET_TABLE_H
#define RMQ_OFFSET_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/** Queue ids above this are refused (a topic has at most 65535 queues). */
#define OFFSET_TABLE_MAX_QUEUES 65536

struct offset_table;

/** One "topic@group" key of a snapshot: n offsets, -1 where none was committed. */
struct offset_item {
    const char *key;
    uint32_t key_len;
    uint32_t n;
    const int64_t *offs;
};

struct offset_snapshot {
    size_t count;
    uint64_t gen;
    struct offset_item *items;  /* sorted by key */
};

struct offset_table *offset_table_new(void);
void offset_table_free(struct offset_table *t);

/** The process-wide table (created on first use). */
struct offset_table *offset_table_shared(void);

/**
 * Stores offset (>= 0) for queue qid of key.  Returns 0, -EINVAL for a
 * negative offset or a qid out of range, -ENOMEM.
 */
int offset_table_commit(struct offset_table *t, const char *key, size_t klen,
                        uint32_t qid, int64_t offset);

/** The committed offset, or -1 when none. */
int64_t offset_table_query(struct offset_table *t, const char *key, size_t klen,
                           uint32_t qid);

/** Removes the keys whose topic (part == 0) or group (part == 1) is name. Returns how many. */
size_t offset_table_remove(struct offset_table *t, int part, const char *name,
                           size_t nlen);

void offset_table_clear(struct offset_table *t);

/** Keys held. */
size_t offset_table_count(struct offset_table *t);

struct jmap_stats;

/** Chain statistics of the "topic@group" index (core/jmap.h). */
void offset_table_hash_stats(struct offset_table *t, struct jmap_stats *st);

/** Moves on every change (no lock). */
uint64_t offset_table_gen(struct offset_table *t);

/**
 * Copies the table into block (cap bytes) as an offset_snapshot at its
 * start, keys sorted.  Returns the bytes needed; more than cap means
 * nothing usable was written (call again with that much).
 */
size_t offset_table_snapshot(struct offset_table *t, void *block, size_t cap);

/** consumerOffset.json (pretty) or the GET_ALL_CONSUMER_OFFSET body. Returns 0 or -ENOMEM. */
int offset_table_json(struct buf *b, const struct offset_snapshot *s, bool pretty);

#endif
