/*
 * commitlog: RocketMQ 4.x's commit log: every message of every topic,
 * appended as one record in one mapped file of a contiguous queue
 * (mfqueue.h).  The byte format is specified at the top of commitlog.c.
 *
 * Offsets.  A record's physical offset is its position in the whole log
 * (file start + position in the file).  `wrote` is the end of the last
 * complete record (or end-of-file blank) in the file: everything below
 * it is a valid record in the page cache, everything at or above it is
 * not yet visible.  Writers publish it with a release store after the
 * record and its consume queue entry are complete; readers load it with
 * acquire.
 *
 * Staging (transientStorePoolEnable, the default).  Records are not
 * copied into the mapping: the append encodes them into a staging buffer
 * (`staged` is its end, >= wrote) and a commit writes [wrote, staged) to
 * the file with one pwrite, then publishes the consume queue entries and
 * `wrote`.  Filling the page cache through write(2) costs no page fault
 * and no zeroing of a page about to be overwritten (docs/performance.md:
 * ~0.2 us against ~2 us per 1 KiB record here).  An append either
 * commits before it returns (the default: the put is visible and in the
 * page cache when it returns) or, with `defer`, leaves the commit to its
 * caller, who must call clog_commit() before acknowledging it: the
 * broker's send path commits once per loop pass, just before the replies
 * are written (reactor.h's gate), so a kill -9 never loses an
 * acknowledged message.  A failed commit discards what was staged
 * (nothing of it became visible; the queue offsets are reused).
 * Without staging, records are copied straight into the mapping (warmed
 * ahead of the writer, mfqueue.h) and visible when the append returns.
 *
 * MT: clog_append and clog_commit take the append lock themselves.
 * Readers (clog_pin, clog_decode on pinned bytes) need no lock.
 */
#ifndef RMQ_COMMITLOG_H
#define RMQ_COMMITLOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/mfqueue.h"
#include "store/slock.h"

#define CLOG_MAGIC 0xDAA320A7u        /* a message record */
#define CLOG_BLANK_MAGIC 0xCBD43194u  /* end-of-file blank */
#define CLOG_BLANK_MIN 8              /* a blank's size field + magic */
#define CLOG_TOPIC_MAX 127            /* 1-byte signed length in Java */
#define CLOG_PROPS_MAX 32767          /* 2-byte signed length in Java */

/* MessageSysFlag bits the store looks at (protocol.md §5.3). */
#define SYSFLAG_TX_MASK 0xC
#define SYSFLAG_TX_PREPARED 0x4
#define SYSFLAG_TX_ROLLBACK 0xC
#define SYSFLAG_BORNHOST_V6 0x10
#define SYSFLAG_STOREHOST_V6 0x20

struct cq;

/** An IPv4 or IPv6 address and port, as a record stores it. */
struct host_addr {
    uint8_t ip[16];
    uint8_t len;                /* 4 or 16 */
    int32_t port;
};

/**
 * Parses "a.b.c.d:port", "[v6]:port" or "v6:port" (the last ':' splits).
 * Returns 0, or -EINVAL with err_set().  MT: any.
 */
int host_addr_parse(const char *s, size_t n, struct host_addr *out);

#define HOST_ADDR_TEXT_MAX 56   /* "[ffff:...:ffff]:-2147483648" and a NUL */

/**
 * Formats a record's host (address bytes: 4 or 16, then the port) as
 * "a.b.c.d:port" or "[x:x:x:x:x:x:x:x]:port" (each group in lower-case
 * hex, none elided) into out (>= HOST_ADDR_TEXT_MAX bytes); returns the
 * length.  host_addr_parse() reads both back.  MT: any.
 */
size_t host_addr_format(char *out, const uint8_t *addr, size_t len, int32_t port);

/** One record to append, prepared by the caller outside the lock. */
struct clog_msg {
    const char *topic;
    uint32_t topic_len;
    int32_t qid;
    int32_t flag;
    int32_t sysflag;            /* the v6 bits are set from the hosts */
    int32_t reconsume;
    const uint8_t *body;
    uint32_t body_len;
    uint32_t body_crc;          /* rmq_body_crc(body) */
    const char *props;          /* properties, then optionally a 0x02 */
    uint32_t props_len;         /*   and props2 (a batch's own properties) */
    const char *props2;
    uint32_t props2_len;
    bool props_sep;             /* put 0x02 between props and props2 */
    int64_t born_ts;
    int64_t prep_tx_off;
    struct host_addr born;
    struct host_addr store;
    int64_t tags_code;          /* consume queue tags code */
    int64_t delay_ms;           /* > 0: tags code = store time + delay */
    struct cq *cq;              /* NULL: no queue entry (prepared/rollback) */
    uint32_t len;               /* clog_msg_len(), set by the caller */
    /* Results of clog_append. */
    int64_t phy;
    int64_t qoff;
};

/** A decoded record: pointers into the bytes given to clog_decode. */
struct clog_view {
    uint32_t size;
    uint32_t body_crc;
    int32_t qid;
    int32_t flag;
    int64_t qoff;
    int64_t phy;
    int32_t sysflag;
    int64_t born_ts;
    int64_t store_ts;
    int32_t reconsume;
    int64_t prep_tx_off;
    const uint8_t *born;        /* address bytes then 4-byte port */
    const uint8_t *storeh;
    uint8_t born_len;           /* address bytes: 4 or 16 */
    uint8_t store_len;
    const uint8_t *body;
    uint32_t body_len;
    const uint8_t *topic;
    uint32_t topic_len;
    const uint8_t *props;
    uint32_t props_len;
};

enum clog_decode_result {
    CLOG_BAD = -1,              /* not a valid record: the log ends here */
    CLOG_END = 0,               /* zeros: nothing was written here */
    CLOG_REC = 1,               /* a record (view filled) */
    CLOG_BLANK = 2,             /* end-of-file blank (view->size set) */
};

/**
 * Decodes the record at p, which has `avail` bytes to the end of its file.
 * Validity (the recovery scan's rule, see commitlog.c): magic, a size
 * that fits, field lengths that add up to the size, and with check_crc
 * the body CRC.  expect_phy >= 0 also requires PHYSICALOFFSET to equal
 * it, which rejects stale records left by an earlier generation.
 * MT: any, on pinned bytes.
 */
int clog_decode(const uint8_t *p, size_t avail, int64_t expect_phy,
                bool check_crc, struct clog_view *v);

/* The metas' buffer (indexMetaBufferBytes, struct commitlog): every
 * committed record less its body, for the index dispatch.  A send's meta
 * is ~200 bytes (198 for scripts/bench/hotpath.lua's 1 KiB send: head,
 * topic, KEYS, TAGS, UNIQ_KEY, CLUSTER), so 4 MiB holds ~19,000: ~50 ms
 * of a 400 K/s stream, five of the dispatch's 10 ms ticks, and the log
 * wakes the dispatch when half of it is used (on_metas); a dispatch
 * further behind finds it full and reads the log. */
#define CLOG_META_DEFAULT (4 << 20)

/* A meta in the buffer: int64 phy, uint32 the record's size, uint32 n,
 * then n bytes: the record less its body, its TOTALSIZE n and its body
 * length 0 (what clog_decode reads as a record with an empty body);
 * padded to 8 bytes. */
#define CLOG_META_HDR 16

/* A record's fields before its body are at most this long: the fixed
 * part with two IPv6 hosts, up to and with the body length. */
#define CLOG_HEAD_MAX 112

/**
 * Where the body of the record at p is: *off (from the record's start)
 * and *len, from its first `avail` bytes (CLOG_HEAD_MAX are always
 * enough).  0, or -1 if p is not the start of a record whose body fits
 * in its `size` bytes.  For readers that want a large record's other
 * fields without reading its body (the index dispatch).  MT: any.
 */
int clog_body_span(const uint8_t *p, size_t avail, uint32_t size,
                   size_t *off, uint32_t *len);

/** Length of the record for m (fields as set). */
uint32_t clog_msg_len(const struct clog_msg *m);

/** The store timestamp of a record, or -1 if it is not one. MT: any. */
int64_t clog_peek_store_ts(const uint8_t *p, size_t avail);

struct commitlog {
    struct mfqueue q;
    struct slock lock;          /* the append lock */
    struct mfile *cur;          /* file being written (append lock) */
    _Atomic int64_t wrote;      /* end of the valid log (see above) */
    _Atomic int64_t min;        /* first offset still on disk */
    _Atomic int64_t last_ts;    /* store time of the last record */
    /* When the append holding the lock took it (monotonic ns), 0 = none:
     * 4.9.8's CommitLog.beginTimeInLock, read without the lock by flow
     * control (clog_in_lock_ns). */
    _Atomic int64_t begin_in_lock;
    int64_t res_hi;             /* cur is reserved on disk up to here
                                 * (append lock; see clog_append) */
    size_t file_size;
    /* A slave's raw end (clog_append_raw): bytes received from the master
     * up to here, possibly ending inside a record; >= wrote.  0 = none
     * received since open (the end is then `wrote`).  Append lock. */
    int64_t raw_end;
    /* Staging (see above); all under the append lock but `staged`,
     * which others may read (clog_staged). */
    bool staging;               /* transientStorePoolEnable */
    uint8_t *stage;             /* the buffer, stage_cap bytes */
    size_t stage_cap;
    _Atomic int64_t staged;     /* end of the staged bytes; == wrote when
                                 * nothing waits for a commit */
    int wfd;                    /* cur's descriptor for pwrite, -1: none */
    struct clog_pub *pubs;      /* queue maxima to publish at the commit */
    int npubs, pubs_cap;
    int64_t staged_ts;          /* store time of the last staged record */
    _Atomic int64_t discards;   /* failed commits so far (clog_discards) */
    _Atomic int64_t generation; /* 2 x clog_set_end calls so far, odd
                                 * during one (clog_generation) */
    /* Metas (clog_metas_take): each committed record less its body, for
     * the index dispatch, which then need not copy the record out of
     * the page cache.  meta_cap: the buffer's size, 0 none (set before
     * clog_start: indexMetaBufferBytes, 0 when the index is off); the
     * buffer under meta_mu; meta_woken: on_metas was called since the
     * last take. */
    size_t meta_cap;
    struct slock meta_mu;
    uint8_t *meta;
    _Atomic size_t meta_len;    /* read without meta_mu: 0, nothing to take */
    bool meta_woken;
    bool metas_wake;            /* on_metas due once the append lock is
                                 * let go (append lock) */
    /* Called once the metas fill half of the buffer, so the dispatch
     * takes them before it is full, after the commit that did it has let
     * the log's locks go (no lock held); NULL: none. */
    void (*on_metas)(void *arg);
    void *metas_arg;
    /* Called after each publish of new records (HA's wake-up), with the
     * append lock held; NULL: none. */
    void (*on_publish)(void *arg);
    void *pub_arg;
};

/** A consume queue's new maximum, published at the commit. */
struct clog_pub {
    struct cq *cq;
    int64_t first;              /* its first staged offset (a discard's) */
    int64_t next;
};

/* Blocks are reserved this much at a time ahead of the writer, so a
 * sparse file (warmMapedFileEnable off, or a copied store) never takes a
 * SIGBUS on a full disk, and an almost empty store takes about this
 * much of its 1 GiB file. */
#define CLOG_RESERVE_CHUNK (4 << 20)

/**
 * Opens the commit log in `dir` (created if missing) and loads its
 * files; recovery then sets the end with clog_set_end().  Returns 0 or
 * -errno with err_set().
 */
int clog_open(struct commitlog *cl, const char *dir, size_t file_size);

/**
 * Starts pre-allocation of the next file; with `reserve_whole` new files
 * get all their blocks at once (warmMapedFileEnable), else they stay
 * sparse; warm_window bytes ahead of the writer are pre-faulted off the
 * put path (commitLogWarmWindowBytes, 0: none).  Returns 0 or -errno.
 */
int clog_start(struct commitlog *cl, bool reserve_whole, int64_t warm_window);

/**
 * Turns staging on with a buffer of `bytes` (at least the largest
 * append: maxMessageSize), before clog_start.  Returns 0 or -ENOMEM.
 */
int clog_set_staging(struct commitlog *cl, size_t bytes);

/**
 * Writes what is staged to the file and publishes it (see above).  On a
 * failed write what was staged is discarded: none of it ever becomes
 * visible.  Returns 0, or -errno with err_set().  MT: any thread.
 */
int clog_commit(struct commitlog *cl);

/**
 * Takes the metas committed so far: swaps the log's buffer with *buf
 * (an empty one of meta_cap bytes, allocated here when NULL) and
 * returns the bytes taken.  Stale after a clog_set_end (compare
 * clog_generation).  MT: any thread (the index dispatch).
 */
size_t clog_metas_take(struct commitlog *cl, uint8_t **buf);

/** Failed commits so far: a caller that acknowledges deferred appends
 * after its own clog_commit() checks this did not move since its last
 * one (another thread's failed commit discarded them). MT: any. */
static inline int64_t
clog_discards(struct commitlog *cl)
{
    return atomic_load_explicit(&cl->discards, memory_order_acquire);
}

/** Twice the times the log's end was set (clog_set_end: recovery, a
 * slave's truncation), odd while it is being set: bytes read before a
 * change, or during one, may have been rewritten since (struct
 * store_window). */
static inline int64_t
clog_generation(struct commitlog *cl)
{
    return atomic_load_explicit(&cl->generation, memory_order_acquire);
}

/** The end of the staged bytes: > clog_wrote() while a commit is due. */
static inline int64_t
clog_staged(struct commitlog *cl)
{
    return atomic_load_explicit(&cl->staged, memory_order_acquire);
}

/** Closes: the files stay mapped while pinned. */
void clog_close(struct commitlog *cl);

/**
 * Sets the end of valid data after recovery: files after it are deleted,
 * the current file is reserved on disk from the end for a chunk, and with `zero_tail` bytes after
 * the end in that file are zeroed.  Returns 0 or -errno.  MT: before
 * sharing.
 */
int clog_set_end(struct commitlog *cl, int64_t end, bool zero_tail);

/**
 * Appends n records as one unit under the append lock: a batch never
 * straddles a file (a BLANK fills the tail and the batch goes to the next
 * file); queue offsets are assigned from each message's cq, the records
 * are staged (or written straight into the mapping without staging),
 * then the queue entries, and only then is anything published: at once,
 * or with `defer` and staging at the caller's clog_commit().  On failure
 * nothing becomes visible (bytes already copied are zeroed, queue
 * offsets are restored).
 *
 * The store timestamp: arrived_ms (> 0: the wall clock the caller read
 * after the request arrived) or the last append's when later, so the
 * log's stamps never go back; 0 reads the clock under the lock.
 *
 * Fills msgs[i].phy / .qoff and *store_ts.  Returns 0, -E2BIG if the
 * batch cannot fit in any file, -ENOSPC (or another -errno) when a file
 * cannot be created, -EIO on a failed write; err_set() says why.
 */
int clog_append(struct commitlog *cl, struct clog_msg *msgs, int n,
                int64_t *store_ts, bool defer, int64_t arrived_ms);

/**
 * How long the append in progress has held the append lock at `now`
 * (clock_mono_ns()), 0 when none is: what 4.9.8's isOSPageCacheBusy
 * compares with osPageCacheBusyTimeOutMills.  One atomic load; MT: any
 * thread.
 */
int64_t clog_in_lock_ns(struct commitlog *cl, int64_t now);

/** Called for each complete record clog_append_raw() makes visible;
 * nonzero stops (the record is not published).  Append lock held. */
typedef int (*clog_dispatch_fn)(void *arg, const struct clog_view *v,
                                int64_t phy);

/**
 * A slave's append (HA): writes `len` bytes received from the master at
 * `phy`, which must be the raw end (clog_raw_end()), or the start of a
 * file when the log has no file yet; the bytes may not cross a file
 * boundary.  Every record completed by them is decoded and handed to
 * `dispatch` (consume queue entries), then published as with a put: the
 * visible end stays on a record boundary while the raw end may be
 * inside the next record.  Returns 0, -EINVAL (wrong offset, crossing,
 * or a record that does not decode: err_set() says which) or -errno.
 */
int clog_append_raw(struct commitlog *cl, int64_t phy, const uint8_t *data,
                    size_t len, clog_dispatch_fn dispatch, void *arg);

/** The slave's raw end: what it reports to its master. MT: any. */
int64_t clog_raw_end(struct commitlog *cl);

/**
 * Pins the file holding [phy, phy+len) if that range is inside the
 * visible log, and points *p at it.  Returns the pinned file or NULL.
 * MT: any.
 */
struct mfile *clog_pin(struct commitlog *cl, int64_t phy, size_t len,
                       const uint8_t **p);

/** The visible end (acquire). */
static inline int64_t
clog_wrote(struct commitlog *cl)
{
    return atomic_load_explicit(&cl->wrote, memory_order_acquire);
}

/** The first offset still on disk. */
static inline int64_t
clog_min(struct commitlog *cl)
{
    return atomic_load_explicit(&cl->min, memory_order_acquire);
}

/** The start of the file after the one holding `phy`. */
static inline int64_t
clog_roll_next(struct commitlog *cl, int64_t phy)
{
    return phy + (int64_t)cl->file_size - phy % (int64_t)cl->file_size;
}

/** Formats the offset message id (protocol.md §5.6), uppercase hex,
 * into out (>= 57 bytes); returns its length (32 or 56). */
size_t clog_msgid(char *out, const struct host_addr *store, int64_t phy);

#endif
