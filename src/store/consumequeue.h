/*
 * consumequeue: one (topic, queueId)'s index into the commit log: 20-byte
 * entries, entry n at byte n * 20 of a contiguous queue of files in
 * STORE/consumequeue/<topic>/<queueId>/ (format at the top of
 * consumequeue.c).  A queue's logical offsets run from `min` (first entry
 * still backed by the commit log) to `max` (the next offset to assign;
 * "max offset" in every RocketMQ reply).
 *
 * The table (struct cqtable) maps (topic, queueId) to its queue.  Queues
 * are created on the first put and live until the store closes.
 *
 * MT: entries are written only under the commit log's append lock
 * (cq_write, then cq_publish after the record is complete); readers load
 * `max` with acquire and read entries below it without a lock.  The
 * table has its own rwlock.  Flush, recovery and retention functions
 * belong to one thread each, as stated.
 */
#ifndef RMQ_CONSUMEQUEUE_H
#define RMQ_CONSUMEQUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "store/mfpool.h"
#include "store/mfqueue.h"

#define CQ_UNIT 20
#define CQ_RESERVE_CHUNK (64 << 10)  /* reserved ahead of the writer */

struct cq {
    char *topic;                /* NUL-terminated copy */
    uint32_t topic_len;
    int32_t qid;
    uint32_t hash;
    struct cq *chain;           /* table bucket chain */
    struct mfqueue q;
    _Atomic int64_t max;        /* entries visible to readers */
    _Atomic int64_t min;        /* first entry still served */
    int64_t next;               /* writer's next offset (append lock) */
    struct mfile *cur;          /* writer's file (append lock) */
    int64_t res_lo, res_hi;     /* bytes whose blocks are reserved (writer) */
    int64_t flushed;            /* entries made durable (flush thread) */
    /* The lowest commit log offset a consumer read this queue at in each
     * of the last two epochs, INT64_MAX none (store/readers.h). */
    _Atomic int64_t rd[2];
};

/** One entry, decoded. */
struct cq_entry {
    int64_t phy;
    int32_t size;
    int64_t tags;
};

/** cq_write's path that finds, makes and reserves files (consumequeue.c). */
int cq_write_slow(struct cq *c, int64_t idx, int64_t phy, int32_t size,
                  int64_t tags);

/* An entry's 20 bytes (CQ_UNIT): the record's offset, size and tags
 * code, big-endian, as 4.9.8's ConsumeQueue writes them. */
static inline void
cq_entry_put(uint8_t *p, int64_t phy, int32_t size, int64_t tags)
{
    be64_put(p, (uint64_t)phy);
    be32_put(p + 8, (uint32_t)size);
    be64_put(p + 12, (uint64_t)tags);
}

/**
 * Writes entry `idx` (creating files as needed) without publishing it.
 * Returns 0 or -errno with err_set().  MT: append lock (or recovery).
 * The common case is inlined into the append: the entry is in the
 * reserved span of the writer's file (only ever cur's: a new cur starts
 * with none), which is mapped; the pin keeps the pool from unmapping it
 * under the write (mfile_pin_mapped).
 */
static inline int
cq_write(struct cq *c, int64_t idx, int64_t phy, int32_t size, int64_t tags)
{
    int64_t byte = idx * CQ_UNIT;
    struct mfile *f = c->cur;
    if (__builtin_expect(f == NULL || byte < c->res_lo || byte + CQ_UNIT > c->res_hi ||
                             !mfile_pin_mapped(f),
                         0))
        return cq_write_slow(c, idx, phy, size, tags);
    cq_entry_put(f->base + (byte - f->start), phy, size, tags);
    mfile_unpin(f);
    return 0;
}

/** Zeroes entry idx if its file exists (rollback). MT: append lock. */
void cq_clear(struct cq *c, int64_t idx);

/** Makes entries below `max` visible (release). MT: append lock. */
static inline void
cq_publish(struct cq *c, int64_t max)
{
    atomic_store_explicit(&c->max, max, memory_order_release);
}

static inline int64_t
cq_max(struct cq *c)
{
    return atomic_load_explicit(&c->max, memory_order_acquire);
}

static inline int64_t
cq_min(struct cq *c)
{
    return atomic_load_explicit(&c->min, memory_order_acquire);
}

/**
 * Reads entry idx (min <= idx < max expected).  Returns 0, or -ENOENT if
 * its file is gone.  MT: any.
 */
int cq_read(struct cq *c, int64_t idx, struct cq_entry *e);

/**
 * Pins the file holding entry `idx` and returns a pointer to it in *p and
 * the number of entries from idx to the end of that file or to `max`,
 * whichever is first, in *n.  Returns the pinned file, or NULL with errno
 * ENOENT if the file is gone (RocketMQ's OFFSET_FOUND_NULL), another
 * errno if it cannot be mapped now (out of mappings: try again).  MT: any.
 */
struct mfile *cq_span(struct cq *c, int64_t idx, int64_t max,
                      const uint8_t **p, int64_t *n);

/** First offset of the file after the one holding idx. */
int64_t cq_roll_next(struct cq *c, int64_t idx);

/**
 * Makes entries durable: syncs everything written since the last flush
 * if at least `least_pages` 4 KiB pages are dirty (0 = always).  Returns
 * 1 if the queue is now fully flushed up to `upto`, 0 if skipped, or
 * -errno.  MT: the flush thread.
 */
int cq_flush(struct cq *c, int least_pages, int64_t upto);

/** Entries written but not flushed yet (flush thread). */
static inline int64_t
cq_unflushed(struct cq *c)
{
    return cq_max(c) - c->flushed;
}

/**
 * Records that entries below `upto` are on disk: a sync of the whole
 * file system (syncfs) wrote them.  Flush thread.
 */
static inline void
cq_mark_flushed(struct cq *c, int64_t upto)
{
    if (upto > c->flushed)
        c->flushed = upto;
}

/**
 * Recovery: finds `max` by scanning the last files for the first invalid
 * entry (size 0), as RocketMQ does.  MT: before sharing.
 */
void cq_recover_max(struct cq *c);

/**
 * Recovery: drops entries whose record is not entirely below `clog_end`
 * (from the back), zeroes what follows `max` in its file when
 * `zero_tail`, and deletes later files.  MT: before sharing.
 */
void cq_truncate(struct cq *c, int64_t clog_end, bool zero_tail);

/**
 * Sets `min` to the first entry whose record starts at or after
 * `clog_min` (RocketMQ's correctMinOffset).  MT: retention or recovery.
 */
void cq_correct_min(struct cq *c, int64_t clog_min);

/**
 * Retention: deletes leading files whose last entry points below
 * `clog_min` (never the last file, never a pinned one), then corrects
 * min.  Returns the number of files deleted.  MT: retention thread.
 */
int cq_delete_expired(struct cq *c, int64_t clog_min);

/* A queue to make off the serving threads (cqt_request). */
struct cq_make {
    struct cq_make *next;
    int32_t qid;
    uint32_t tlen;
    char topic[];
};

/* Called on the maker thread once a requested queue exists (ok) or its
 * creation failed (!ok, logged). */
typedef void (*cqt_made_fn)(void *arg, const char *topic, size_t tlen, int32_t qid, bool ok);

/** The table of queues. */
struct cqtable {
    pthread_rwlock_t lock;
    struct cq **buckets;
    size_t nbuckets;            /* power of two */
    size_t count;
    char *root;                 /* STORE/consumequeue */
    size_t file_size;           /* bytes per file, a multiple of 20 */
    uint64_t gen;               /* unique per table, for the lookup cache */
    struct mfpool pool;         /* the queues' files are mapped lazily */
    /* New queues' directories and files are made outside `lock` (sends
     * to other queues must not wait for a mkdir), one queue at a time:
     * two threads making the same queue would share its files. */
    pthread_mutex_t make_lock;
    /* The maker thread (cqt_request), started on first use; mk_mu guards
     * the list, the hook and the thread's state. */
    pthread_mutex_t mk_mu;
    pthread_cond_t mk_cond;
    struct cq_make *mk_head, *mk_tail;
    size_t mk_len;
    bool mk_started, mk_stop;
    pthread_t mk_thread;
    cqt_made_fn made;
    void *made_arg;
};

/**
 * Initialises an empty table whose queues keep at most `max_mapped`
 * files mapped at once (maxMappedConsumeQueueFiles; 0: no bound; see
 * mfpool.h).  Returns 0 or -errno.
 */
int cqt_init(struct cqtable *t, const char *root, size_t file_size,
             size_t max_mapped);

/**
 * Loads every queue under root (<topic>/<qid>/files), recovering each
 * one's max.  Returns 0 or -errno with err_set().  MT: before sharing.
 */
int cqt_load(struct cqtable *t);

/** Frees every queue. */
void cqt_destroy(struct cqtable *t);

/**
 * The queue for (topic, qid), or NULL.  A small per-thread cache answers
 * repeated look-ups without the table's lock (whose reader count would
 * otherwise bounce between the cores of concurrent producers); it is
 * keyed by the table's generation, and queues live as long as the table.
 * MT: any.
 */
struct cq *cqt_find(struct cqtable *t, const char *topic, size_t tlen,
                    int32_t qid);

/**
 * The queue for (topic, qid), created (with its directory) if missing.
 * Returns NULL with err_set() on failure.  MT: any.
 */
struct cq *cqt_get(struct cqtable *t, const char *topic, size_t tlen,
                   int32_t qid);

/**
 * cqt_get for a master's put path, where a new queue starts at offset 0:
 * a queue made here gets its first file and page before anyone can
 * write to it, off the append lock.  MT: any.
 */
struct cq *cqt_get_for_put(struct cqtable *t, const char *topic, size_t tlen,
                           int32_t qid);

/**
 * Asks the maker thread ("store-cqmake") to make (topic, qid) as
 * cqt_get_for_put would, so that a thread serving clients does not wait
 * for the file system (a new queue's mkdir, create and first page took
 * up to 110 ms each on a busy disk, and every connection that thread
 * serves waited with it).  Returns 1 when the queue exists already, 0
 * when it is asked for (the made hook runs once it exists or failed;
 * asking twice is harmless), or -errno when it cannot be asked (a bad
 * name, no memory, too many waiting, no thread): then the caller makes
 * it itself with cqt_get_for_put, which answers the error if any.
 * MT: any.
 */
int cqt_request(struct cqtable *t, const char *topic, size_t tlen, int32_t qid);

/** Sets the hook the maker thread calls (one per table). MT: any. */
void cqt_set_made_hook(struct cqtable *t, cqt_made_fn fn, void *arg);

/**
 * Copies the table's queue pointers into a new array (*out, free() it);
 * queues live until the table is destroyed, so the array may be used
 * without the lock (flush, retention).  Returns the count, or -ENOMEM.
 */
int cqt_snapshot(struct cqtable *t, struct cq ***out);

/**
 * Calls fn for every queue (under the read lock: fn must not create
 * queues).  Stops early when fn returns non-zero, and returns that.
 */
int cqt_foreach(struct cqtable *t, int (*fn)(struct cq *, void *), void *arg);

#endif
