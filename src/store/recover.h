/*
 * recover: the checkpoint file, the abort marker, and bringing a store
 * back to a consistent state when it opens.  The checkpoint format and
 * the recovery procedure are at the top of recover.c.
 *
 * MT: everything here runs in store_open() / store_unref(), before the
 * store's threads start or after they stop, except ckpt_write(), which
 * the service thread also calls (one writer at a time).
 */
#ifndef RMQ_RECOVER_H
#define RMQ_RECOVER_H

#include <stdbool.h>
#include <stdint.h>

struct store;
struct clog_view;

/**
 * Writes the consume queue entry of record v at phy, as the put that
 * stored it did (nothing for prepared / rollback transaction records);
 * the queue's maximum grows to cover it.  Recovery's re-dispatch, and a
 * slave's for replicated records.  Returns 0 or -errno.  MT: the append
 * lock (or recovery).
 */
int store_redispatch(struct store *s, const struct clog_view *v, int64_t phy);

struct checkpoint {
    /* RocketMQ's StoreCheckpoint fields (store times, ms). */
    int64_t phys_ts;
    int64_t logic_ts;
    int64_t index_ts;
    /* rmq's extension; valid only when `ext`. */
    bool ext;
    int64_t clog_flushed;       /* commit log durable below this */
    int64_t cq_safe;            /* queue entries durable for records below */
    int64_t index_safe;         /* index entries durable for records below */
    int64_t clean_end;          /* log end at a clean close; -1 running */
    int64_t clog_min;
};

/** Reads root/checkpoint; a missing file reads as all zeros. 0 or -errno. */
int ckpt_read(const char *root, struct checkpoint *c);

/** Writes root/checkpoint in place and syncs it. 0 or -errno. */
int ckpt_write(const char *root, const struct checkpoint *c);

/** The abort marker: present while a store is open (a crash leaves it). */
bool abort_exists(const char *root);
int abort_create(const char *root);
int abort_remove(const char *root);

/**
 * Recovers a freshly loaded store (commit log files, consume queues and
 * index files opened, nothing started): finds the end of the valid log,
 * truncates what follows, rebuilds consume queue entries after a crash,
 * drops unsafe index files and sets where indexing resumes.  Records
 * what it did in the store's recovered_* fields.  Returns 0 or -errno
 * with err_set().
 */
int store_recover(struct store *s);

#endif
