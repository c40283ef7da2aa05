/*
 * index: RocketMQ's IndexFile: a hash index from "topic#key" to commit
 * log offsets, for QUERY_MESSAGE (by KEYS) and lookups by UNIQ_KEY.  The
 * byte format is at the top of index.c; it is RocketMQ's, so a store
 * written by either broker can be queried by the other.
 *
 * Files live in STORE/index/, named by their creation time
 * (yyyyMMddHHmmssSSS, local time, as RocketMQ names them).  Each holds at
 * most maxIndexNum entries; a full file is followed by a new one, and
 * retention deletes a file once every record it points to is gone, so
 * the index stays bounded by the commit log's retention.
 *
 * The index is built off the put path: a dispatcher (the store's service
 * thread, or a query that wants to see the latest messages) reads records
 * from `next` to the commit log's visible end and indexes their keys.
 *
 * MT: every function takes the index's mutex; safe from any thread.
 */
#ifndef RMQ_INDEX_H
#define RMQ_INDEX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/commitlog.h"

struct index {
    char *dir;
    uint32_t slots;             /* maxHashSlotNum */
    uint32_t max_entries;       /* maxIndexNum */
    size_t file_size;
    bool enabled;               /* messageIndexEnable */
    pthread_mutex_t lock;
    struct mfile **files;       /* by name = by time */
    size_t n;
    size_t cap;
    int64_t next;               /* next commit log offset to index */
    _Atomic int64_t next_seen;  /* how far a dispatch has read, for
                                   readers that must not wait for one */
    size_t flushed_files;       /* files before this one are fully synced */
    size_t res_hi;              /* last file: blocks reserved below this */
    bool warned;                /* a creation failure was logged */
    /* The commit log as ix_dispatch reads it: with pread into rbuf, not
     * through the mapping -- a staged log's pages are in the page cache
     * but mapped nowhere, and mapping each in (a first touch) costs more
     * than the copy (commitlog.h).  Under `lock`. */
    uint8_t *rbuf;
    size_t rb_len;              /* bytes in rbuf */
    int64_t rb_pos;             /* log offset of rbuf[0] */
    int rfd;                    /* the file read, -1: none */
    int64_t rfd_start;
    /* The log's metas taken (clog_metas_take): records less their
     * bodies, read from here instead of the log.  Under `lock`. */
    uint8_t *mq;
    size_t mq_len, mq_at;
    int64_t mq_gen;             /* clog_generation when taken */
};

/**
 * Opens the index in `dir` (created if missing) and loads its files.
 * Returns 0 or -errno with err_set().
 */
int ix_open(struct index *ix, const char *dir, uint32_t slots,
            uint32_t max_entries, bool enabled);

/** Closes (pinned files stay mapped until unpinned). */
void ix_close(struct index *ix);

/**
 * Crash recovery: deletes the files that may hold entries that were
 * never made durable: with `by_ts`, those whose end timestamp is after
 * `safe` (RocketMQ's rule with its checkpoint's indexMsgTimestamp), else
 * those whose last entry is at or after commit log offset `safe`.
 * Returns the number deleted.
 */
int ix_drop_unsafe(struct index *ix, int64_t safe, bool by_ts);

/**
 * Sets where dispatching resumes: after the last record the last file
 * indexed, or at the commit log's start when there is no file.
 */
void ix_resume(struct index *ix, struct commitlog *cl);

/**
 * Cuts the commit log at `end` (clog_set_end: a slave truncating to its
 * master's offset) with no dispatch running, and resumes dispatching at
 * `end` if it had read past it: the records after the cut are new ones,
 * from their first byte, and nothing read before the cut (the read
 * buffer, the metas taken) is used again.  The last file's end offset
 * moves back to its last entry before the cut, so ix_resume after a
 * restart also starts at or before it.  Entries already made for
 * records past the cut stay (RocketMQ's truncation leaves its index
 * alone too): a lookup by such an entry returns whatever record now
 * starts at its offset (store_query checks that a record is there, not
 * its key); clients filter by key, as 4.9.8's MQAdminImpl.queryMessage
 * does.  Unlike RocketMQ, whose IndexService.buildIndex skips records
 * below the file's endPhyOffset (so its new records below the old end
 * are never indexed), the new records are indexed.  Call with the log's
 * append lock held.  Returns clog_set_end's result.
 */
int ix_cut_log(struct index *ix, struct commitlog *cl, int64_t end, bool zero_tail);

/**
 * Indexes records from `next` up to the commit log's visible end, at
 * most `max_records` of them (0 = no limit).  Returns the number of
 * records read.
 */
int ix_dispatch(struct index *ix, struct commitlog *cl, int max_records);

/** The next commit log offset to index (everything below is done). */
int64_t ix_next(struct index *ix);

/** How far the dispatch has read the log (ix_next, or past it while a
 *  dispatch runs), without the lock (which a dispatch holds for up to
 *  a batch of records). MT: any. */
static inline int64_t
ix_next_seen(struct index *ix)
{
    return atomic_load_explicit(&ix->next_seen, memory_order_acquire);
}

/**
 * Looks up topic#key in the files overlapping [begin, end] (store time,
 * ms), newest first, RocketMQ's IndexService.queryOffset.  Writes up to
 * `cap` offsets to out (hash collisions included: the caller checks the
 * records) and the last file's end timestamp and offset.  Returns the
 * number of offsets.
 */
int ix_query(struct index *ix, const char *topic, size_t tlen,
             const char *key, size_t klen, int cap, int64_t begin,
             int64_t end, int64_t *out, int64_t *last_ts, int64_t *last_phy);

/** Makes every entry durable (msync). Returns 0 or -errno. */
int ix_flush(struct index *ix);

/**
 * Retention: deletes files (never the last) whose last entry points
 * below `clog_min`.  Returns the number deleted.
 */
int ix_delete_expired(struct index *ix, int64_t clog_min);

/** Number of files. */
size_t ix_count(struct index *ix);

#endif
