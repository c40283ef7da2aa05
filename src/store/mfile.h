/*
 * mfile: one fixed-size file mapped read-write (MAP_SHARED) in full, the
 * unit the commit log, the consume queues and the index are made of.
 * RocketMQ calls it MappedFile; like there, a file is named by the offset
 * of its first byte in the whole log (20 digits) and never changes size.
 *
 * Life cycle.  A file has a reference count.  Its queue holds one; every
 * reader that hands out pointers into the mapping (a get's record slices,
 * a flush, a scan) pins it with mfile_pin() and drops the pin with
 * mfile_unpin().  Retention or truncation "retires" a file: it is unlinked
 * at once and the queue's reference is dropped, but the mapping stays
 * valid until the last pin goes, so a reader never faults on an unmapped
 * page.  The file is unmapped and closed by whoever drops the last
 * reference.
 *
 * Space.  Blocks are reserved with fallocate() before anything is
 * written through the mapping -- a commit log file whole when it is
 * created (and when an old sparse file becomes the write target), consume
 * queue and index files chunk by chunk ahead of their writer -- so a
 * store on a full disk gets a clean error from the reservation instead
 * of a SIGBUS on a page fault in the middle of a record.
 *
 * Also here: big-endian 64-bit helpers for the on-disk formats (buf.h has
 * the 16- and 32-bit ones).
 *
 * MT: pin/unpin from any thread; the other calls need the owner's
 * exclusion (the queue's lock or its single writer), stated per function.
 */
#ifndef RMQ_MFILE_H
#define RMQ_MFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"

struct mfile {
    int64_t start;        /* offset of byte 0 in the log = the file name */
    size_t size;          /* mapped length = file length */
    uint8_t *base;        /* the mapping; NULL while a lazy file is cold */
    atomic_int refs;      /* queue reference + pins */
    atomic_bool retired;  /* unlinked; unmapped when refs reaches 0 */
    char *path;
    /* Lazily mapped files only (MF_LAZY, mfpool.h): base changes under
     * the owning queue's lock, never while a pin is held, and is stored
     * atomically then (mfile_pin_mapped reads it without the lock). */
    atomic_bool used;     /* pinned since the pool's clock hand passed */
    long pool_idx;        /* slot in the pool, -1 when not counted */
    /* A read-only descriptor for pread (mfile_read_fd), opened on the
     * first read and closed with the mapping; -1 until then. */
    atomic_int rfd;
    /* The file's identity when opened: what mfile_read_fd opens by path
     * later must be this file, not one made under its name after it was
     * retired (a slave truncates its commit log, then replication writes
     * the same offsets, so the same names, again). */
    dev_t dev;
    ino_t ino;
};

enum {
    MF_CREATE = 1,        /* create the file (it must not exist) */
    MF_RESERVE = 2,       /* fallocate the whole file (writable target) */
    MF_LAZY = 4,          /* an existing file, not mapped yet (mfile_map) */
};

/**
 * Opens (or with MF_CREATE creates) `path` as a mapped file of `size`
 * bytes starting at log offset `start`.  An existing file of another size
 * is refused: RocketMQ does the same, and guessing would misplace every
 * offset after it.  Returns the file with one reference, or NULL with
 * err_set() (errno preserved: ENOSPC for a full disk).
 */
struct mfile *mfile_open(const char *path, int64_t start, size_t size,
                         int flags);

/**
 * Maps a file opened with MF_LAZY (or unmapped by mfile_unmap); a mapped
 * file is left alone.  Returns 0 or -errno with err_set() (ENOMEM when
 * the process is out of mappings).  Only a file still in its queue is
 * mapped again (an unmapped file has no pins: retired, it is freed at
 * once), so the name is still its own.  MT: the owning queue's lock.
 */
int mfile_map(struct mfile *mf);

/**
 * Unmaps a file nobody but its queue holds (refs 1); it stays open by
 * name and mfile_map() maps it again.  MT: the owning queue's lock.
 */
void mfile_unmap(struct mfile *mf);

/** Adds a pin. MT: any thread, while the caller holds a reference. */
static inline void
mfile_pin(struct mfile *mf)
{
    atomic_fetch_add_explicit(&mf->refs, 1, memory_order_relaxed);
}

/*
 * What the pool's trimmer adds to refs while it unmaps a lazy file
 * (mfpool.c): it moves refs from 1 (the queue's reference alone) to
 * 1 + MFILE_UNMAPPING with one compare-and-swap and takes it back after
 * the munmap, so a lock-free pin (mfile_pin_mapped) that lands in
 * between sees a negative count and backs off.
 */
#define MFILE_UNMAPPING (-(1 << 29))

/**
 * Pins a file without its queue's lock when it is mapped and no trimmer
 * is unmapping it; false (nothing held) otherwise: the caller then pins
 * under the lock (mfq_pin), which maps it again.  For a writer that keeps
 * a pointer to its current file between writes (consume queues) and
 * knows the queue still holds it: two atomic operations against a lock
 * and an unlock per entry.  Either the pin's increment comes first (refs
 * > 1: the trimmer's compare-and-swap from 1 fails, the file stays
 * mapped) or the trimmer's does (the pin sees it and backs off); a file
 * unmapped before the pin has base NULL, published before the trimmer
 * gives the count back.  MT: any thread, while its queue holds it.
 */
static inline bool
mfile_pin_mapped(struct mfile *mf)
{
    if (atomic_fetch_add_explicit(&mf->refs, 1, memory_order_acquire) > 0 &&
        __atomic_load_n(&mf->base, __ATOMIC_ACQUIRE) != NULL) {
        /* The pool's clock: in use since its hand passed (pin_locked). */
        if (!atomic_load_explicit(&mf->used, memory_order_relaxed))
            atomic_store_explicit(&mf->used, true, memory_order_relaxed);
        return true;
    }
    /* Never the last reference: the queue's is held (or the trimmer's
     * bias is in the count). */
    atomic_fetch_sub_explicit(&mf->refs, 1, memory_order_release);
    return false;
}

/** What the last reference's mfile_unpin does: unmaps, closes, frees. */
void mfile_free_last(struct mfile *mf);

/** Drops a reference; the last one unmaps, closes and frees. MT: any.
 *  Inlined: every entry written and every record read drops one. */
static inline void
mfile_unpin(struct mfile *mf)
{
    if (atomic_fetch_sub_explicit(&mf->refs, 1, memory_order_acq_rel) == 1)
        mfile_free_last(mf);
}

/** References held now (1 = only the queue's). MT: any (a snapshot). */
static inline int
mfile_refs(struct mfile *mf)
{
    return atomic_load_explicit(&mf->refs, memory_order_acquire);
}

/**
 * Reserves disk blocks for the whole file (fallocate, keeping the size).
 * Returns 0 or -errno with err_set().  MT: any.
 */
int mfile_reserve(struct mfile *mf);

/**
 * Reserves disk blocks for bytes [from, from+len): for files written in
 * order but mostly sparse (consume queues, index entries), reserved a
 * chunk ahead of the writer rather than all at once.  Returns 0 or
 * -errno with err_set().  MT: any.
 */
int mfile_reserve_range(struct mfile *mf, size_t from, size_t len);

/**
 * Pre-faults bytes [from, from+len) writable (MADV_POPULATE_WRITE) so the
 * writer takes no page fault there.  Kernels before 5.14 lack it: then a
 * read per page brings the pages in (a write may race with the writer,
 * so none is done).  Never changes the file's content.  Returns 0 or
 * -errno.  MT: any thread holding a pin.
 */
int mfile_warm(struct mfile *mf, size_t from, size_t len);

/**
 * Makes bytes [from, to) of the file durable (msync MS_SYNC on the pages
 * covering them).  Returns 0 or -errno with err_set().  MT: any thread
 * holding a pin.
 */
int mfile_sync(struct mfile *mf, size_t from, size_t to);

/**
 * Unmaps the pages wholly inside [from, to) from this process's page
 * tables (MADV_DONTNEED; the page cache and its dirty state stay).  Call
 * it on data the writer has left behind, just before syncing it: writing
 * back a page that is still mapped writable must write-protect it, one
 * TLB shoot-down IPI to the writer's CPU per page, which measured here
 * costs more than the append itself.  A reader touching the range maps it
 * again with a minor fault.  MT: any thread holding a pin.
 */
void mfile_drop_pages(struct mfile *mf, size_t from, size_t to);

/**
 * Zeroes bytes [from, size) cheaply so stale bytes past a recovered end
 * can never be mistaken for records: with keep_blocks the range stays
 * reserved (FALLOC_FL_ZERO_RANGE, else a hole punched and re-reserved),
 * else it becomes a hole (the caller reserves what it writes next);
 * memset when the file system has neither.  Returns 0 or -errno.
 * MT: the file's writer only.
 */
int mfile_zero_tail(struct mfile *mf, size_t from, bool keep_blocks);

/**
 * Opens the file for pwrite (a writer that fills the page cache through
 * write(2) rather than the mapping: commitlog.h's staging).  Returns the
 * descriptor (the caller closes it) or -errno with err_set().  MT: any.
 */
int mfile_open_fd(struct mfile *mf);

/**
 * A read-only descriptor kept for the file's life, for readers that copy
 * records out with pread rather than through the mapping (a pull's reply:
 * access.h's store_slices_read).  Opened on the first call, so only the
 * files something reads this way hold one (commit log files, a few);
 * closed when the last reference goes.  Returns it, or -errno with
 * err_set(): -ENOENT once the file was retired (unlinked) before its
 * first such read, -ESTALE when another file has its name by then; the
 * reader copies from the mapping instead (its pin keeps that valid).
 * MT: any thread holding a pin.
 */
int mfile_read_fd(struct mfile *mf);

/**
 * Drops the page cache of [from, to) of the file (posix_fadvise
 * DONTNEED, through mfile_read_fd's descriptor): clean pages not mapped
 * anywhere are freed; dirty or mapped ones stay.  Readers of that range
 * read from the disk again.  Best effort: a failure is logged at debug.
 * MT: any thread holding a pin.
 */
void mfile_drop_cache(struct mfile *mf, size_t from, size_t to);

/** Sets the file's modification time (ms since the epoch). */
int mfile_set_mtime(struct mfile *mf, int64_t ms);

/** The file's modification time in ms, or -1 with err_set(). */
int64_t mfile_mtime(struct mfile *mf);

/**
 * Unlinks the file and drops the caller's (the queue's) reference; the
 * mapping lives on until the last pin is dropped.  MT: the owner, once.
 */
void mfile_retire(struct mfile *mf);

/** Big-endian 64-bit load / store, for the on-disk formats. */
static inline uint64_t
be64_get(const uint8_t *p)
{
    return ((uint64_t)be32_get(p) << 32) | be32_get(p + 4);
}

static inline void
be64_put(uint8_t *p, uint64_t v)
{
    be32_put(p, (uint32_t)(v >> 32));
    be32_put(p + 4, (uint32_t)v);
}

/** Formats a 20-digit file name for offset `start` into buf (>= 21). */
void mfile_name(char *buf, int64_t start);

#endif
