/*
 * retention: deleting old commit log files and what points into them
 * (RocketMQ's CleanCommitLogService and CleanConsumeQueueService).
 *
 * Policy (MessageStoreConfig, protocol.md §5.10):
 *  - a commit log file is expired when its last write (mtime) is older
 *    than fileReservedTime hours;
 *  - expired files are deleted at the hours listed in deleteWhen, or at
 *    once when the disk is fuller than diskMaxUsedSpaceRatio percent;
 *  - when the disk is fuller than 85 % and cleanFileForciblyEnable is
 *    on, the oldest files go even if not expired;
 *  - the file being written is never deleted, and neither is a file a
 *    reader has pinned (a pull in flight, a flush): it waits for the next
 *    run;  files go strictly oldest first, so the log stays contiguous;
 *  - at most 10 commit log files per run (deleteFileBatchMax);
 *  - then consume queue files whose entries all point below the new
 *    commit log minimum, and index files likewise; each queue's min
 *    offset moves to its first surviving record.  A reader asking for an
 *    offset below it gets OFFSET_TOO_SMALL and the new minimum.
 *
 * MT: one run at a time (the service thread, or a caller that knows the
 * service thread is idle: store_retention() serialises them).
 */
#ifndef RMQ_RETENTION_H
#define RMQ_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

struct store;

struct retention_opts {
    int64_t now_ms;             /* wall clock to age files against */
    int64_t reserved_ms;        /* < 0: fileReservedTime from the conf */
    bool at_once;               /* ignore deleteWhen (a manual run) */
    bool force;                 /* delete unexpired files too */
    int max_files;              /* commit log files per run; <= 0: 10 */
};

struct retention_stats {
    int clog_files;             /* commit log files deleted */
    int cq_files;
    int index_files;
    int pinned;                 /* expired files skipped: in use */
    bool ran;                   /* the policy allowed deleting now */
    double disk_ratio;
};

/** True when `hour` (0-23) is listed in deleteWhen ("04", "04;16"). */
bool retention_hour_matches(const char *delete_when, int hour);

/** Runs the policy once. Returns the number of commit log files deleted. */
int retention_run(struct store *s, const struct retention_opts *o,
                  struct retention_stats *st);

#endif
