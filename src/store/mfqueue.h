/*
 * mfqueue: a log made of equal-size mapped files in one directory, each
 * named by the 20-digit offset of its first byte (RocketMQ's
 * MappedFileQueue).  The files are contiguous: file i starts at
 * files[0]->start + i * file_size, so finding the file of an offset is a
 * division.  New files are added at the end (roll-over); retention drops
 * them from the front; recovery truncates the back.
 *
 * Pre-allocation.  With mfq_start_allocator(), a background thread
 * creates and reserves (fallocate) the next file while the writer still
 * fills the current one, so a roll-over only swaps a pointer (RocketMQ's
 * AllocateMappedFileService).
 *
 * Warming.  The first write to a page of a fresh file takes a page fault
 * that allocates and zeroes it: measured here, 1 KiB appends run at
 * ~1-3 us each that way against ~0.3-0.4 us into pre-faulted pages.  With
 * warming on, a second thread pre-faults (MADV_POPULATE_WRITE) a window
 * of warm_window bytes ahead of the writer, following it across
 * files; the writer reports its position with mfq_writer_at(), which
 * costs one relaxed store and load per append and a wake-up every half
 * window.  It is its own thread because reserving the next file can take
 * seconds on a busy disk, and warming must not wait for that.
 * Warming a whole 1 GiB file at once instead would leave up to 1 GiB of
 * dirty zero pages for the kernel to write back -- after which every
 * page faults again -- and would make a fast writer wait for it.
 *
 * MT: the file list is guarded by the queue's mutex; finders return the
 * file pinned (see mfile.h), so it stays mapped after the lock is
 * released.  Only one thread may add files (the log's writer) and only
 * one may remove them (retention or recovery) at a time.
 */
#ifndef RMQ_MFQUEUE_H
#define RMQ_MFQUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/mfile.h"

struct mfpool;

struct mfqueue {
    char *dir;
    size_t file_size;
    pthread_mutex_t lock;       /* files[], nfiles and the allocator state */
    struct mfile **files;       /* contiguous, by start offset */
    size_t nfiles;
    size_t cap;
    /* Pre-allocation (commit log only); guarded by lock. */
    pthread_cond_t cond;        /* allocation: want / ready changed */
    pthread_cond_t warm_cond;   /* warming: the writer moved, a file came */
    pthread_t thread;           /* the allocator */
    pthread_t warm_thread;      /* the warmer (when warm) */
    bool has_thread;
    bool has_warm_thread;
    bool stop;
    bool warm;                  /* the warmer runs (warm_window > 0) */
    bool reserve_whole;         /* new files get all their blocks at once */
    int64_t warm_window;        /* pre-faulted ahead of the writer */
    bool busy;                  /* the thread is preparing `want` */
    int64_t want;               /* start offset to prepare next, -1 none */
    struct mfile *ready;        /* a prepared file, not yet in files[] */
    _Atomic int64_t writer_pos; /* where the writer is (mfq_writer_at) */
    int64_t warm_pos;           /* pre-faulted up to here (thread only) */
    _Atomic int64_t warm_kick;  /* the writer wakes the thread past this */
    /* Lazy mapping (consume queues, mfpool.h): files are mapped when
     * pinned and may be unmapped while nobody pins them.  NULL: every
     * file is mapped while open (the commit log). */
    struct mfpool *pool;
};

#define MFQ_WARM_CHUNK (4 << 20)

/**
 * Initialises an empty queue over `dir` (created if missing, with its
 * parents).  Returns 0 or -errno with err_set().
 */
int mfq_init(struct mfqueue *q, const char *dir, size_t file_size);

/**
 * Maps this queue's files lazily, counted in `pool` (mfpool.h): set
 * before mfq_load.  Finders then map a cold file before pinning it, and
 * may return NULL with errno ENOMEM (no mapping to be had).
 */
void mfq_set_pool(struct mfqueue *q, struct mfpool *pool);

/**
 * Opens every 20-digit file in the directory, sorted by offset.  Files
 * must be file_size long and contiguous; anything else is refused with a
 * message naming the file (the store must not guess).  Other names are
 * ignored.  Returns 0 or -errno with err_set().  MT: before sharing.
 */
int mfq_load(struct mfqueue *q);

/**
 * Starts the pre-allocation thread (files reserved whole on disk with
 * `reserve_whole`, else sparse) and, with warm_window > 0, the warming
 * thread that pre-faults that many bytes ahead of the writer; the writer
 * is at `pos`.  On an empty queue the first file (holding pos) is
 * prepared too.  Returns 0 or -errno.
 */
int mfq_start_allocator(struct mfqueue *q, bool reserve_whole, int64_t warm_window,
                        int64_t pos);

void mfq_kick_warmer(struct mfqueue *q, int64_t pos);

/**
 * The writer is at `pos`: wakes the warmer when it is within half a
 * window of the warmed edge.  MT: the queue's writer.
 */
static inline void
mfq_writer_at(struct mfqueue *q, int64_t pos)
{
    atomic_store_explicit(&q->writer_pos, pos, memory_order_relaxed);
    if (pos >= atomic_load_explicit(&q->warm_kick, memory_order_relaxed))
        mfq_kick_warmer(q, pos);
}

/**
 * Stops the allocator (deleting a prepared, unused file), drops the
 * queue's references and frees the list.  Pinned files stay mapped until
 * unpinned.
 */
void mfq_destroy(struct mfqueue *q);

/**
 * The file holding offset `off`, pinned; NULL with errno ENOENT if none
 * (lazy queues: another errno if it cannot be mapped now).  MT: any.
 */
struct mfile *mfq_find(struct mfqueue *q, int64_t off);

/**
 * Pins `mf`, one of the queue's files the caller knows by its queue's
 * reference (a writer's current file), mapping it first if it is cold.
 * Returns mf, or NULL with errno if it cannot be mapped.  MT: any.
 */
struct mfile *mfq_pin(struct mfqueue *q, struct mfile *mf);

/** The i-th file, pinned; NULL past the end. MT: any. */
struct mfile *mfq_at(struct mfqueue *q, size_t i);

/** The first / last file, pinned; NULL when empty. MT: any. */
struct mfile *mfq_first(struct mfqueue *q);
struct mfile *mfq_last(struct mfqueue *q);

/** Whether `mf` is the queue's last file now. MT: any (a snapshot). */
bool mfq_is_last(struct mfqueue *q, const struct mfile *mf);

/** Number of files. MT: any (a snapshot). */
size_t mfq_count(struct mfqueue *q);

/** Start of the first file, or -1 when empty. MT: any. */
int64_t mfq_min(struct mfqueue *q);

/**
 * Adds the file starting at `start` (which must be the end of the last
 * file, or anything when the queue is empty) and returns it (not pinned:
 * the queue's reference keeps it while the caller is its writer).  Uses
 * the prepared file when there is one, waits for it if it is being
 * prepared, else creates it here; then asks the allocator for the next.
 * `reserve`: fallocate it.  Returns NULL with err_set() (errno ENOSPC on
 * a full disk).  MT: the queue's writer.
 */
struct mfile *mfq_create(struct mfqueue *q, int64_t start, bool reserve);

/** Asks the allocator to prepare the file after the last one. MT: any. */
void mfq_prepare_next(struct mfqueue *q);

/**
 * Removes the first file if it is `mf` and nobody but the queue and the
 * caller (`caller_pins` pins) holds it; the file is retired (unlinked).
 * Returns true if removed.  Never removes the last file.  MT: the
 * queue's single remover.
 */
bool mfq_drop_first(struct mfqueue *q, struct mfile *mf, int caller_pins);

/**
 * Removes every file that starts after `end` (recovery: a file past the
 * end of the valid data).  The file holding `end` stays, and so does one
 * starting exactly at `end`.  A prepared next file that no longer
 * follows the last one goes too, and the new next one is prepared.
 * Returns the number of the queue's files removed.
 */
size_t mfq_truncate(struct mfqueue *q, int64_t end);

/**
 * Creates directory `path` and its parents (mkdir -p).  Returns 0 or
 * -errno with err_set().
 */
int mkdir_p(const char *path);

/** fsyncs a directory so a create/rename/unlink in it is durable. */
int fsync_dir(const char *path);

#endif
