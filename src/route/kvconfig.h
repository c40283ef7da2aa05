/*
 * kvconfig: the NameServer's KV config (RocketMQ's KVConfigManager):
 * namespace -> key -> value, all strings, in java.util.HashMap order.
 * Used by PUT/GET/DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE, the
 * ORDER_TOPIC_CONFIG namespace of route lookups and registrations.
 *
 * Persistence: kv_persist() writes {"configTable":{ns:{k:v}}} (the file
 * format of RocketMQ's kvConfig.json) with store_write_file_atomic (a
 * temp file, fsync, the old file kept as .bak, rename, fsync of the
 * directory, as RocketMQ's MixAll.string2File), so a crash leaves either
 * the old or the new file.  A persist mutex orders
 * writers: the snapshot taken last is the one that lands last.
 *
 * MT: every function from any thread (own rwlock, independent of the
 * route table's lock).
 */
#ifndef RMQ_KVCONFIG_H
#define RMQ_KVCONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

struct kvconfig;

/** A new, empty store; NULL when out of memory. */
struct kvconfig *kv_new(void);

/** Frees a store (NULL is fine). */
void kv_free(struct kvconfig *kv);

/** Puts ns/key = value.  Returns 0 or -ENOMEM. */
int kv_put(struct kvconfig *kv, const char *ns, size_t nslen, const char *key,
           size_t klen, const char *val, size_t vlen);

/**
 * Appends the value of ns/key to out and returns 1, or returns 0 when
 * there is none, or -ENOMEM.
 */
int kv_get(struct kvconfig *kv, const char *ns, size_t nslen, const char *key,
           size_t klen, struct buf *out);

/** Deletes ns/key (the namespace stays, possibly empty, as in Java).
 * Returns 1 when the key was there. */
int kv_delete(struct kvconfig *kv, const char *ns, size_t nslen,
              const char *key, size_t klen);

/**
 * Appends the KVTable JSON {"table":{...}} of a namespace and returns 1,
 * or returns 0 when the namespace does not exist, or -ENOMEM.
 */
int kv_list_json(struct kvconfig *kv, const char *ns, size_t nslen,
                 struct buf *out);

/** Appends the whole store as kvConfig.json. Returns 0 or -ENOMEM. */
int kv_dump_json(struct kvconfig *kv, struct buf *out);

/**
 * Writes the store to `path` atomically (see above).  Returns 0, or -1
 * with err_set() naming the failing step.
 */
int kv_persist(struct kvconfig *kv, const char *path);

/** Number of namespaces and of entries. */
void kv_counts(struct kvconfig *kv, size_t *namespaces, size_t *entries);

#endif
