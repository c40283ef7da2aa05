/*
 * access: the store's data path: put (one message or a batch), get (a
 * pull), and the look-ups of RocketMQ's DefaultMessageStore (by physical
 * offset, queue min/max, by time, earliest time, by key through the
 * index).  store.h opens and closes the store; this is what runs on
 * every request.
 *
 * Status.  Puts return enum put_status and gets enum get_status, named as
 * RocketMQ names them (PutMessageStatus, GetMessageStatus), because the
 * broker puts those names in remarks.
 *
 * Records handed out by get/look-ups are slices of the mapped commit log
 * files, pinned (struct store_slices) until released: no copy, and no
 * file can be unmapped under a reader.
 *
 * MT: every function is safe from any thread, concurrently.
 */
#ifndef RMQ_ACCESS_H
#define RMQ_ACCESS_H

#include "store/store.h"

enum put_status {
    PUT_OK = 0,
    PUT_FLUSH_DISK_TIMEOUT,
    PUT_FLUSH_SLAVE_TIMEOUT,
    PUT_SLAVE_NOT_AVAILABLE,
    PUT_SERVICE_NOT_AVAILABLE,
    PUT_CREATE_MAPEDFILE_FAILED,
    PUT_MESSAGE_ILLEGAL,
    PUT_PROPERTIES_SIZE_EXCEEDED,
    PUT_OS_PAGECACHE_BUSY,
    PUT_UNKNOWN_ERROR,
};

/** RocketMQ's name for a put status ("PUT_OK", ...). */
const char *put_status_name(int s);

enum get_status {
    GET_FOUND = 0,
    GET_NO_MATCHED_MESSAGE,
    GET_MESSAGE_WAS_REMOVING,
    GET_OFFSET_FOUND_NULL,
    GET_OFFSET_OVERFLOW_BADLY,
    GET_OFFSET_OVERFLOW_ONE,
    GET_OFFSET_TOO_SMALL,
    GET_NO_MATCHED_LOGIC_QUEUE,
    GET_NO_MESSAGE_IN_QUEUE,
};

/** RocketMQ's name for a get status ("FOUND", ...). */
const char *get_status_name(int s);

/** A message to put: what the broker built from a SEND request. */
struct store_msg {
    const char *topic;
    size_t topic_len;
    int32_t qid;
    int32_t flag;
    int32_t sysflag;
    int32_t reconsume;
    const uint8_t *body;        /* a batch put: the batch encoding (§5.8) */
    size_t body_len;
    const char *props;          /* encoded properties (a batch: its own) */
    size_t props_len;
    int64_t born_ts;
    int64_t prep_tx_off;
    struct host_addr born;
    struct host_addr store;
    bool has_tags_code;         /* else taken from the TAGS property */
    int64_t tags_code;
    /* Stage only (commitlog.h): the put is neither visible nor in the
     * page cache when it returns; the caller acknowledges it only after
     * its own store_commit() (and a clog_discards() that did not move). */
    bool defer;
    /* > 0: the wall clock (ms) read after the request arrived, once for
     * many (net/conn.h's dispatch_ms): the store timestamp is that, or
     * the log's last when later, instead of a clock read per append.  0:
     * the clock is read under the lock. */
    int64_t arrived_ms;
};

struct store_put_result {
    int status;                 /* enum put_status */
    int64_t phy;                /* first record's offset */
    int64_t qoff;               /* first record's queue offset */
    int64_t store_ts;
    int64_t wrote;              /* bytes written (all records) */
    int64_t end;                /* phy + wrote: what a sync flush must cover */
    int count;                  /* records written */
};

/**
 * Byte slices of records in mapped files, each file pinned until
 * store_slices_release().  The caller provides the arrays (cap entries
 * each); nothing is allocated.
 */
struct store_slices {
    int cap;
    int n;                      /* records */
    size_t bytes;
    struct iovec *iov;          /* one per record */
    int npins;
    struct mfile **pins;        /* at most one per record */
    /* How store_slices_read copies the records (set by a get from
     * pullReadGapBytes): < 0 through the mapping; else with preadv from
     * the file, one call per run of records whose gaps are at most this
     * many bytes (read into a scratch buffer and dropped). */
    int32_t read_gap;
    /* Runs of adjacent records of at least this many bytes may reach a
     * socket straight from the file (store_slices_run; set by a get from
     * pullZeroCopyMinBytes); 0: always copied. */
    int32_t zero_copy_min;
    /* In (the caller sets it): a consumer group's read (a pull, a POP),
     * whose position keeps the commit log's page cache (store/readers.h);
     * false for the broker's own services. */
    bool consumer;
    /* A window over the log the reads keep (struct store_window), or
     * NULL: set by the caller after a get (a get clears it). */
    struct store_window *win;
};

/** The window's block (struct store_window). */
#define STORE_WINDOW_BLOCK ((size_t)65536)

/**
 * One thread's window over the commit log (pullReadWindowBytes): blocks
 * of STORE_WINDOW_BLOCK bytes its reads of spread runs took from the
 * files (records and the gaps between them), each in the ring's slot its
 * log offset maps to.  The consumers of a topic's queues pull the same
 * stretches of the log, each queue's records in the others' gaps, so
 * the next pulls of those stretches copy from here: the page cache is
 * read once instead of once per queue, and with no call.  A run of
 * adjacent records is read as before, straight into the output.  Every
 * byte it holds was committed when read; a truncation of the log
 * (clog_generation) empties it.  MT: one thread.
 */
struct store_window {
    uint8_t *buf;               /* nblocks blocks, allocated at the first fill */
    int64_t *tag;               /* per slot: the log offset of the block held; -1 */
    uint32_t *held;             /* per slot: bytes of the block held */
    size_t nblocks;             /* 0: no window */
    int64_t gen;                /* the log's clog_generation when read; odd:
                                 * a truncation in progress, no use */
    int64_t limit;              /* the log's end at store_window_sync: no
                                 * byte past it is read into the window */
    /* Whether it pays: bytes read into it, record bytes copied out of
     * it, and bytes of spread runs read past it since it stopped filling
     * (store_slices_read_range). */
    uint64_t filled, served, skipped;
    /* Replies whose records store_slices_window_iov handed out of the
     * window for a send (no copy into the output), since start. */
    uint64_t sends;
};

/** A window of cap bytes, rounded down to whole blocks (fewer than 4:
 * none); nothing is allocated yet. */
void store_window_init(struct store_window *w, size_t cap);

/** Empties w when s's log was truncated since w was filled.  Call before
 * handing w to a read (store_slices.win). */
void store_window_sync(struct store_window *w, struct store *s);

/** Frees w's buffer; w is empty (and may be used again). */
void store_window_free(struct store_window *w);

/** Drops the pins; the slices are invalid afterwards.  Idempotent. */
void store_slices_release(struct store_slices *s);

/** The largest pullReadGapBytes: a gap is read into a stack buffer. */
#define STORE_READ_GAP_MAX 16384

/**
 * Copies the records of `s` (s->bytes in all) to `dst`, in order: by
 * preadv from the files (the page cache, with no page mapped into this
 * process: a pull no longer takes first-touch faults on pages the
 * writer filled with pwrite), or through the mapping when s->read_gap
 * is negative or a read fails.  MT: the thread holding the pins.
 */
void store_slices_read(const struct store_slices *s, uint8_t *dst);

/** store_slices_read for records [from, to) of s only. */
void store_slices_read_range(const struct store_slices *s, int from, int to,
                             uint8_t *dst);

/**
 * The records of s as they lie in its window (s->win), for one writev:
 * each spread run of them (records with gaps between: other queues'
 * records) is made to lie in the window as store_slices_read would (one
 * preadv for the blocks it lacks), and v[0..ret) then points at the
 * records, in order, in the window's ring, which saves copying them into
 * the output.  Returns the entries written, or -1 when the records are
 * not all taken that way (no window, a run of adjacent records, a run the
 * window does not take, more than cap entries): then store_slices_read
 * as usual (blocks read here stay for it).  While the window is not
 * filling (it did not pay), blocks it holds still serve; only a run that
 * lacks one is refused.  The pointers hold until the
 * window's next fill: a later read on this thread.  MT: the thread
 * holding the pins and the window.
 */
int store_slices_window_iov(const struct store_slices *s, struct iovec *v, int cap);

/** Records [from, to) of a store_slices, adjacent in one file. */
struct store_run {
    int from, to;
    int fd;                     /* the file's read descriptor; < 0 none */
    int64_t off;                /* where record `from` starts in it */
    size_t len;                 /* bytes of records [from, to) */
};

/**
 * The run of records starting at record `from` (< s->n): as many as
 * follow each other in one file with no gap, so one sendfile(2) of
 * [off, off + len) carries them.  run->fd < 0 when the file cannot be
 * opened for reading (then copy).  MT: the thread holding the pins.
 */
void store_slices_run(const struct store_slices *s, int from, struct store_run *run);

struct store_get_result {
    int status;                 /* enum get_status */
    int64_t next;               /* nextBeginOffset */
    int64_t min;                /* the queue's min offset */
    int64_t max;                /* the queue's max offset */
    int64_t max_phy;            /* the commit log's end */
    int64_t max_phy_pulling;    /* offset of the last entry scanned */
    bool suggest_slave;         /* the data is "on disk" (§6.8) */
};

/**
 * Appends one message.  Validation (sizes, topic, properties) happens
 * before the append lock; the record is written straight into the
 * mapped file.  Does not wait for a flush: in SYNC_FLUSH mode the caller
 * waits for flusher_flushed() >= r->end (store_request_flush()).
 * Returns r->status (PUT_OK or an error, with err_set()).
 */
int store_put(struct store *s, const struct store_msg *m,
              struct store_put_result *r);

/**
 * Appends a batch (m->body is the batch encoding, protocol.md §5.8) as
 * consecutive records with consecutive queue offsets, in one file.
 * `work` is caller-provided space for `cap` records; on PUT_OK,
 * work[i].phy is each record's offset and work[i].len its size.
 * Use store_batch_count() to size it.  Returns r->status.
 */
int store_put_batch(struct store *s, const struct store_msg *m,
                    struct clog_msg *work, int cap,
                    struct store_put_result *r);

/** Number of messages in a batch encoding, or -1 if malformed. */
int store_batch_count(const uint8_t *body, size_t len);

/**
 * The work space store_put_batch needs for this body: its message count,
 * at least 1 (a malformed body is refused by the put itself).
 */
int store_batch_cap(const uint8_t *body, size_t len);

/**
 * SYNC_FLUSH's rule: the reply to a put that ended at `end` waits for the
 * flush when the store flushes synchronously, the producer waits for it
 * (its WAIT property is not "false") and no fsync covers `end` yet.
 * SYNC_MASTER's likewise for a slave's acknowledgement (the wait answers
 * SLAVE_NOT_AVAILABLE at once when no slave is usable).
 */
bool store_put_must_wait(struct store *s, bool producer_waits, int64_t end);

/**
 * RocketMQ's getMessage: reads up to max_count records of (topic, qid)
 * from `offset`, filtered by tag codes (codes == NULL: everything),
 * within the pull transfer limits.  Slices go to out (cap = the most
 * records wanted).  Fills r.  Returns r->status.
 */
int store_get(struct store *s, const char *topic, size_t tlen, int32_t qid,
              int64_t offset, int max_count, const int32_t *codes,
              int ncodes, struct store_slices *out,
              struct store_get_result *r);

/**
 * A commit log filter (ExpressionMessageFilter.isMatchedByCommitLog): the
 * record (pinned, `len` bytes) is returned only when it answers true.
 */
typedef bool (*store_match_fn)(void *ud, const uint8_t *rec, size_t len);

/** store_get() with a commit log filter (match may be NULL). */
int store_get_match(struct store *s, const char *topic, size_t tlen,
                    int32_t qid, int64_t offset, int max_count,
                    const int32_t *codes, int ncodes, store_match_fn match,
                    void *match_ud, struct store_slices *out,
                    struct store_get_result *r);

/**
 * The most records one store_get can return, whatever max_count asks:
 * the larger of the pull transfer count limits (in memory, on disk).
 */
int store_get_max_records(struct store *s);

/** The record at a physical offset (VIEW_MESSAGE_BY_ID); 0 or -ENOENT. */
int store_read_at(struct store *s, int64_t phy, struct store_slices *out);

/** Queue min / max offsets (0 when the queue does not exist). */
int64_t store_min_offset(struct store *s, const char *topic, size_t tlen,
                         int32_t qid);
int64_t store_max_offset(struct store *s, const char *topic, size_t tlen,
                         int32_t qid);

/**
 * 5.x's checkInMemByConsumeOffset(topic, qid, offset, 1): the queue's
 * message at offset lies in the part of the commit log treated as in
 * memory: at most accessMessageInMemoryMaxRatio % of physical memory
 * behind the log's end, the line a get draws between in-memory and
 * on-disk batches (5.x asks mincore of the mapped page; rmq keeps one
 * deterministic notion of "in memory" for every use).  False when the
 * queue has no message at offset or it is gone.
 */
bool store_in_memory(struct store *s, const char *topic, size_t tlen, int32_t qid,
                     int64_t offset);

/** SEARCH_OFFSET_BY_TIMESTAMP (protocol.md §4.8); 0 if nothing. */
int64_t store_offset_by_time(struct store *s, const char *topic,
                             size_t tlen, int32_t qid, int64_t ts);

/** Store time of the queue's first message, -1 if none. */
int64_t store_earliest_time(struct store *s, const char *topic, size_t tlen,
                            int32_t qid);

/** Store time of the first message in the commit log, -1 if none. */
int64_t store_earliest_time_all(struct store *s);

/** Store time of the record at phy, -1 if none. */
int64_t store_time_at(struct store *s, int64_t phy, int32_t size);

/** Store time of the queue's message at offset, -1 if none (gone or
 *  not written yet). */
int64_t store_time_at_offset(struct store *s, const char *topic, size_t tlen,
                             int32_t qid, int64_t offset);

/**
 * QUERY_MESSAGE: records whose topic#key is in the index within the
 * store-time window, newest first, at most `max` (and maxMsgsNumBatch);
 * records that are gone are skipped.  The index is brought up to date
 * first.  *last_ts / *last_phy: the index's last update.  Returns the
 * number of records in out.
 */
int store_query(struct store *s, const char *topic, size_t tlen,
                const char *key, size_t klen, int max, int64_t begin,
                int64_t end, struct store_slices *out, int64_t *last_ts,
                int64_t *last_phy);

#endif
