/*
 * store: the broker's message store, RocketMQ 4.x's DefaultMessageStore:
 * the facade over the commit log, the consume queues, the index, the
 * flush thread, recovery and retention.  Its files are RocketMQ's
 * (architecture.md "Files on disk"):
 *
 *   STORE/commitlog/<20 digits>        commitlog.c
 *   STORE/consumequeue/<topic>/<qid>/  consumequeue.c
 *   STORE/index/<yyyyMMddHHmmssSSS>    index.c
 *   STORE/checkpoint, STORE/abort      recover.c
 *   STORE/lock                         flock()ed while open
 *   STORE/config/NAME.json             written by the broker (Lua) with
 *                                      store_write_file_atomic()
 *
 * Threads.  Opening a store starts three: the commit log flusher
 * (flush.c), the file pre-allocator (mfqueue.c), and a service thread
 * that indexes new records, flushes consume queues and the index, writes
 * the checkpoint, runs retention every 10 s and re-checks a read-only
 * store.  Puts and gets run on the caller's thread.
 *
 * Status.  Puts return enum put_status and gets enum get_status, named as
 * RocketMQ names them (PutMessageStatus, GetMessageStatus), because the
 * broker puts those names in remarks.
 *
 * MT: every function is safe from any thread unless it says otherwise.
 * A store is shared through references (store_ref/store_unref); the last
 * unref closes it cleanly.
 */
#ifndef RMQ_STORE_H
#define RMQ_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "store/commitlog.h"
#include "store/consumequeue.h"
#include "store/flush.h"
#include "store/index.h"

/** Settings, named after MessageStoreConfig / BrokerConfig keys. */
struct store_conf {
    char commitlog_dir[4096];           /* storePathCommitLog ("" = root/commitlog) */
    int64_t clog_file_size;             /* mappedFileSizeCommitLog */
    int64_t cq_file_size;               /* mappedFileSizeConsumeQueue */
    bool sync_flush;                    /* flushDiskType == SYNC_FLUSH */
    int flush_interval_ms;              /* flushIntervalCommitLog */
    int flush_least_pages;              /* flushCommitLogLeastPages */
    int flush_thorough_ms;              /* flushCommitLogThoroughInterval */
    int cq_flush_interval_ms;           /* flushIntervalConsumeQueue */
    int cq_flush_least_pages;           /* flushConsumeQueueLeastPages */
    int cq_flush_thorough_ms;           /* flushConsumeQueueThoroughInterval */
    int sync_flush_timeout_ms;          /* syncFlushTimeout */
    int file_reserved_hours;            /* fileReservedTime */
    char delete_when[64];               /* deleteWhen, "04" or "04;16" */
    int disk_max_used_ratio;            /* diskMaxUsedSpaceRatio (%) */
    bool clean_forcibly;                /* cleanFileForciblyEnable */
    int64_t max_message_size;           /* maxMessageSize */
    bool check_crc_on_recover;          /* checkCRCOnRecover */
    bool warm_files;                    /* warmMapedFileEnable */
    bool index_enable;                  /* messageIndexEnable */
    int64_t max_hash_slots;             /* maxHashSlotNum */
    int64_t max_index_num;              /* maxIndexNum */
    int max_msgs_per_query;             /* maxMsgsNumBatch */
    int access_in_memory_ratio;         /* accessMessageInMemoryMaxRatio */
    int max_bytes_in_memory;            /* maxTransferBytesOnMessageInMemory */
    int max_count_in_memory;            /* maxTransferCountOnMessageInMemory */
    int max_bytes_on_disk;              /* maxTransferBytesOnMessageInDisk */
    int max_count_on_disk;              /* maxTransferCountOnMessageInDisk */
    bool slave;                         /* brokerRole == SLAVE: no offset
                                           correction in get */
    int64_t delay_levels[32];           /* messageDelayLevel, ms, [1..n] */
    int ndelay_levels;
};

/** RocketMQ's defaults (protocol.md §6.10). */
void store_conf_defaults(struct store_conf *c);

/** Parses messageDelayLevel ("1s 5s ... 2h") into c. Returns 0 or -EINVAL. */
int store_conf_delay_levels(struct store_conf *c, const char *spec);

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
};

/** Drops the pins; the slices are invalid afterwards.  Idempotent. */
void store_slices_release(struct store_slices *s);

struct store_get_result {
    int status;                 /* enum get_status */
    int64_t next;               /* nextBeginOffset */
    int64_t min;                /* the queue's min offset */
    int64_t max;                /* the queue's max offset */
    int64_t max_phy;            /* the commit log's end */
    int64_t max_phy_pulling;    /* offset of the last entry scanned */
    bool suggest_slave;         /* the data is "on disk" (§6.8) */
};

/** Called after a put made messages visible (outside the lock). */
typedef void (*store_arrival_fn)(void *arg, const char *topic, size_t tlen,
                                 int32_t qid, int64_t max_offset,
                                 int64_t tags_code, int64_t store_ts);

#define STORE_MAX_HOOKS 8

struct store {
    char *root;
    struct store_conf conf;
    int lock_fd;                        /* STORE/lock, flock()ed */
    atomic_int refs;
    struct commitlog clog;
    struct cqtable cqs;
    struct index ix;
    struct flusher flusher;
    /* Service thread. */
    pthread_t svc;
    bool svc_running;
    pthread_mutex_t svc_mu;
    pthread_cond_t svc_cond;
    bool svc_stop;
    /* Writability: cleared on a failed write / full disk. */
    atomic_bool writable;
    atomic_bool closing;
    pthread_mutex_t state_mu;           /* readonly_why, checkpoint file */
    pthread_mutex_t retention_mu;       /* one retention run at a time */
    char readonly_why[256];
    int64_t readonly_since;
    /* Arrival hooks (slots set before puts start; see store_on_arrival). */
    _Atomic(store_arrival_fn) hooks[STORE_MAX_HOOKS];
    void *hook_args[STORE_MAX_HOOKS];
    /* Recovery facts, for logs and specs. */
    bool recovered_abnormally;
    int64_t recovered_from;             /* scan start, -1 = none */
    int64_t recovered_records;          /* records re-dispatched */
    bool torn_tail;                     /* the scan met an invalid record */
    /* Checkpoint safe points (service thread). */
    int64_t cq_safe;
    int64_t index_safe;
    int64_t last_cq_thorough;
    int64_t mem_total;                  /* physical memory, bytes */
};

/**
 * Opens (creating if needed) the store rooted at `root` and recovers it:
 * quickly after a clean shutdown, with a scan after a crash (recover.c).
 * Returns the store with one reference, or NULL with err_set().
 */
struct store *store_open(const char *root, const struct store_conf *conf);

/** Takes another reference. */
void store_ref(struct store *s);

/**
 * Drops a reference; the last one stops the threads, flushes everything,
 * writes the checkpoint, removes the abort marker and closes.  Slices
 * handed out earlier stay valid until released.
 */
void store_unref(struct store *s);

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

/** SYNC_FLUSH: wakes the flusher for `end`. */
void store_request_flush(struct store *s, int64_t end);

/** Flushes the commit log now, in the caller's thread. Returns 0 or -errno. */
int store_flush(struct store *s);

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

/** The record at a physical offset (VIEW_MESSAGE_BY_ID); 0 or -ENOENT. */
int store_read_at(struct store *s, int64_t phy, struct store_slices *out);

/** Queue min / max offsets (0 when the queue does not exist). */
int64_t store_min_offset(struct store *s, const char *topic, size_t tlen,
                         int32_t qid);
int64_t store_max_offset(struct store *s, const char *topic, size_t tlen,
                         int32_t qid);

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

/** Offsets of the commit log: first on disk, visible end, durable end. */
int64_t store_min_phy(struct store *s);
int64_t store_max_phy(struct store *s);
int64_t store_flushed(struct store *s);

/**
 * Registers an arrival hook (the broker's long-poll wake-up); returns its
 * slot or -1 when full.  Register before puts start, unregister after
 * they stop: slots are read without a lock.
 */
int store_on_arrival(struct store *s, store_arrival_fn fn, void *arg);
void store_off_arrival(struct store *s, int slot);

/** False while writes are refused; *why gets the reason. */
bool store_writable(struct store *s, char *why, size_t n);

/** Marks the store read-only for writes, logging why. */
void store_set_readonly(struct store *s, const char *why);

/**
 * Re-checks a read-only store (disk space back, no injected fault) and
 * makes it writable again if so.  Returns the new state.
 */
bool store_check_writable(struct store *s);

/** Disk usage of the commit log's file system, in percent. */
double store_disk_ratio(struct store *s);

struct retention_opts;
struct retention_stats;

/** Runs retention now (retention.h), serialised with the service thread's. */
int store_retention(struct store *s, const struct retention_opts *o,
                    struct retention_stats *st);

/** Brings the index up to date with the commit log. */
void store_index_sync(struct store *s);

/**
 * Writes `data` to `path` atomically: a temp file, fsync, the old file
 * kept as path.bak, rename, fsync of the directory.  A reader sees the
 * old or the new content, never a mix.  Returns 0 or -errno.
 */
int store_write_file_atomic(const char *path, const void *data, size_t n);

#endif
