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
 * Puts, gets and look-ups are in access.h.
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
#include "store/readers.h"

/** Settings, named after MessageStoreConfig / BrokerConfig keys. */
struct store_conf {
    char commitlog_dir[4096];           /* storePathCommitLog ("" = root/commitlog) */
    int64_t clog_file_size;             /* mappedFileSizeCommitLog */
    int64_t cq_file_size;               /* mappedFileSizeConsumeQueue */
    int64_t cq_max_mapped;              /* maxMappedConsumeQueueFiles (rmq's;
                                           0: half of vm.max_map_count) */
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
    int recover_progress_ms;            /* recoverProgressIntervalMillis */
    bool warm_files;                    /* warmMapedFileEnable */
    int64_t warm_window;                /* commitLogWarmWindowBytes */
    bool staging;                       /* transientStorePoolEnable */
    int64_t staging_bytes;              /* commitLogStagingBytes */
    int64_t drop_cache_behind;          /* commitLogDropCacheBehindBytes: 0 keeps,
                                           -1 the accessMessageInMemoryMaxRatio span */
    int drop_cache_reader_s;            /* commitLogDropCacheReaderSeconds: 0 fixed window */
    bool index_enable;                  /* messageIndexEnable */
    int64_t index_meta_bytes;           /* indexMetaBufferBytes: 0 reads the log */
    int64_t max_hash_slots;             /* maxHashSlotNum */
    int64_t max_index_num;              /* maxIndexNum */
    int max_msgs_per_query;             /* maxMsgsNumBatch */
    int access_in_memory_ratio;         /* accessMessageInMemoryMaxRatio */
    int max_bytes_in_memory;            /* maxTransferBytesOnMessageInMemory */
    int pull_read_gap;                  /* pullReadGapBytes: < 0 copy from the mapping */
    int pull_zero_copy_min;             /* pullZeroCopyMinBytes: 0 always copy */
    int max_count_in_memory;            /* maxTransferCountOnMessageInMemory */
    int max_bytes_on_disk;              /* maxTransferBytesOnMessageInDisk */
    int max_count_on_disk;              /* maxTransferCountOnMessageInDisk */
    bool slave;                         /* brokerRole == SLAVE: no offset
                                           correction in get */
    bool sync_master;                   /* brokerRole == SYNC_MASTER */
    int slave_timeout_ms;               /* slaveTimeout: SYNC_MASTER wait */
    int64_t ha_fallbehind_max;          /* haSlaveFallbehindMax */
    int64_t delay_levels[32];           /* messageDelayLevel, ms, [1..n] */
    int ndelay_levels;
    /* Timer messages (timer.h), MessageStoreConfig's names. */
    bool timer_enable;                  /* timerWheelEnable */
    int64_t timer_max_delay_ms;         /* timerMaxDelaySec * 1000 */
    int timer_precision_ms;             /* timerPrecisionMs (100/200/500/1000) */
    int timer_flush_ms;                 /* timerFlushIntervalMs */
    int64_t timer_log_file_size;        /* mappedFileSizeTimerLog */
};

/** What the timer service has done (timer.c writes, metrics read). */
struct timer_counters {
    _Atomic int64_t pending;            /* held, not yet delivered */
    _Atomic int64_t enqueued;           /* put into the wheel (this run) */
    _Atomic int64_t delivered;          /* written to their real queue (this run) */
    _Atomic int64_t dropped;            /* could never be delivered (this run) */
    _Atomic int64_t enqueue_lag;        /* timer-topic entries not yet read */
    _Atomic int64_t dequeue_lag_ms;     /* how far delivery is behind the clock */
    _Atomic int64_t enqueue_tps_milli;  /* last second's rates, x1000 */
    _Atomic int64_t dequeue_tps_milli;
    atomic_bool running;                /* a timer service is open on the store */
};

/** RocketMQ's defaults (protocol.md §6.10). */
void store_conf_defaults(struct store_conf *c);

/** Parses messageDelayLevel ("1s 5s ... 2h") into c. Returns 0 or -EINVAL. */
int store_conf_delay_levels(struct store_conf *c, const char *spec);

struct store {
    char *root;
    struct store_conf conf;
    int lock_fd;                        /* STORE/lock, flock()ed */
    atomic_int refs;
    struct commitlog clog;
    struct cqtable cqs;
    struct index ix;
    struct flusher flusher;
    struct readers readers;             /* what consumers and slaves read lately */
    /* Service thread. */
    pthread_t svc;
    bool svc_running;
    pthread_mutex_t svc_mu;
    pthread_cond_t svc_cond;
    bool svc_stop;
    /* Writability: cleared on a failed write / full disk. */
    atomic_bool writable;
    atomic_bool closing;
    /* The role at run time (issue 24: a controller or the live console
     * switches it; conf.slave/sync_master are only the start values):
     * store_set_role. */
    atomic_bool role_slave;             /* no offset correction in get */
    atomic_bool role_sync_master;       /* a producer's put waits for HA */
    atomic_bool fenced;                 /* local puts refused */
    pthread_mutex_t state_mu;           /* readonly_why, checkpoint file */
    pthread_mutex_t retention_mu;       /* one retention run at a time */
    char readonly_why[256];
    int64_t readonly_since;
    /* Recovery facts, for logs and specs. */
    bool recovered_abnormally;
    int64_t recovered_from;             /* scan start, -1 = none */
    int64_t recovered_records;          /* records re-dispatched */
    bool torn_tail;                     /* the scan met an invalid record */
    /* Checkpoint safe points: moved up by a thorough flush round, down
     * by a slave's truncation, each under ck_mu with the checkpoint
     * write, so neither writes the other's values back out of order. */
    pthread_mutex_t ck_mu;
    int64_t cq_safe;
    int64_t index_safe;
    int64_t last_cq_thorough;
    int64_t mem_total;                  /* physical memory, bytes */
    /* HA (replica.h): the master's view of its slaves. */
    _Atomic int64_t ha_acked;           /* push2SlaveMaxOffset */
    atomic_int ha_conns;                /* slaves connected */
    atomic_int ha_wake_fd;              /* eventfd: new data for HA, -1 none */
    atomic_bool ha_wake_pending;        /* one wake-up per HA pass */
    struct timer_counters timer;        /* timer.h's figures, for metrics */
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
 * Writes what deferred puts staged (access.h's store_msg.defer) to the
 * commit log file and makes it visible; a failure makes the store
 * read-only.  Returns 0 or -errno with err_set().  MT: any.
 */
int store_commit(struct store *s);

/** SYNC_FLUSH: wakes the flusher for `end`. */
void store_request_flush(struct store *s, int64_t end);

/** Flushes the commit log now, in the caller's thread. Returns 0 or -errno. */
int store_flush(struct store *s);

/** Offsets of the commit log: first on disk, visible end, durable end. */
int64_t store_min_phy(struct store *s);
int64_t store_max_phy(struct store *s);
int64_t store_flushed(struct store *s);
/** Where the index dispatch is (everything below is indexed); the
 *  commit log's end when the index is off.  The consume queues are
 *  written with each put, so this is the store's only dispatch lag. */
int64_t store_dispatched(struct store *s);

/** How long the put in progress has held the commit log's append lock
 * at `now` (clock_mono_ns()); 0 when none: flow control's measure of put
 * latency (clog_in_lock_ns).  MT: any thread. */
int64_t store_put_in_lock_ns(struct store *s, int64_t now);
/** The store partition's used and total bytes; 0, or -1 (statvfs). */
int store_disk_usage(struct store *s, uint64_t *used, uint64_t *total);

/**
 * A put to (topic, qid) is coming: when that queue is new, asks the
 * store's maker thread to make it (cqt_request) so the caller need not
 * wait for the file system.  Returns 1 when it exists, 0 when it is
 * being made (the hook set with store_set_queue_made_hook runs then),
 * or -errno when the caller should simply put (the put makes the queue,
 * or refuses: a closing, fenced or read-only store makes none here).
 * MT: any thread.
 */
int store_request_queue(struct store *s, const char *topic, size_t tlen, int32_t qid);
void store_set_queue_made_hook(struct store *s, cqt_made_fn fn, void *arg);

/** True when (topic, qid) has a consume queue. MT: any thread. */
bool store_has_queue(struct store *s, const char *topic, size_t tlen, int32_t qid);

/** False while writes are refused; *why gets the reason. */
bool store_writable(struct store *s, char *why, size_t n);

/** Marks the store read-only for writes, logging why. */
void store_set_readonly(struct store *s, const char *why);

/**
 * Re-checks a read-only store (disk space back, no injected fault) and
 * makes it writable again if so.  Returns the new state.
 */
bool store_check_writable(struct store *s);

/**
 * The replica role at run time: `slave` (no offset correction in get),
 * `sync_master` (a waiting producer's put also waits for a slave's
 * acknowledgement) and `fenced`: every local put is refused with
 * PUT_SERVICE_NOT_AVAILABLE (a slave's log is its master's, HA appends
 * only; a master cut from its controllers must not acknowledge); a slave is always fenced.  The
 * HA append (clog_append_raw) is not a local put.  MT: any thread.
 */
void store_set_role(struct store *s, bool slave, bool sync_master, bool fenced);
bool store_role_slave(struct store *s);
bool store_role_sync_master(struct store *s);
bool store_fenced(struct store *s);

/**
 * The log was cut back to `end` (a slave's truncation): lowers the
 * checkpoint's safe points to `end` and writes the checkpoint, so a
 * crash before the next thorough round recovers from a point at or
 * before the cut, not from one inside the records that replaced the
 * removed ones.  MT: any thread.
 */
void store_log_cut(struct store *s, int64_t end);

/** Disk usage of the commit log's file system, in percent. */
double store_disk_ratio(struct store *s);

struct retention_opts;
struct retention_stats;

/** Runs retention now (retention.h), serialised with the service thread's. */
int store_retention(struct store *s, const struct retention_opts *o,
                    struct retention_stats *st);

/**
 * Empties the consume queue (topic, qid) for CLEAN_UNUSED_TOPIC: deletes
 * its files but the last (the writer's; a pinned one waits for the next
 * call) and moves its min to its max.  The queue itself stays (queues
 * live as long as the store), so a later put continues at max.  Returns
 * the files deleted, or -1 when there is no such queue.  Serialised with
 * retention.
 */
int store_empty_queue(struct store *s, const char *topic, size_t tlen, int32_t qid);

/**
 * Pre-faults the next `bytes` of the commit log's current file now, in
 * the caller's thread (the warmer does this ahead of the writer anyway;
 * this is for a benchmark that wants the put path without page faults,
 * or a broker that wants its first file warm before taking traffic).
 * Returns the bytes warmed (the current file may end sooner).
 */
int64_t store_prewarm(struct store *s, int64_t bytes);

/** Brings the index up to date with the commit log. */
void store_index_sync(struct store *s);

/**
 * Writes `data` to `path` atomically: a temp file, fsync, the old file
 * kept as path.bak, rename, fsync of the directory.  A reader sees the
 * old or the new content, never a mix.  Returns 0 or -errno.
 */
int store_write_file_atomic(const char *path, const void *data, size_t n);

/**
 * store_write_file_atomic() for files that hold secrets: with mode >= 0
 * the file keeps the permission bits it has, or gets exactly `mode` when
 * it is new (the temp is 0600 until then); mode -1 is
 * store_write_file_atomic().  The temp file's name is random and it is
 * opened O_EXCL|O_NOFOLLOW in both.
 */
int store_write_file_atomic_mode(const char *path, const void *data, size_t n, int mode);

/**
 * Appends `data` to `path` (created if missing) and makes it durable
 * (fdatasync; a new file's directory entry too).  A crash may leave a
 * prefix of the appended bytes: readers must accept a torn last record.
 * Returns 0 or -errno.
 */
int store_append_file_durable(const char *path, const void *data, size_t n);

#endif
