/*
 * popstore: the POP lease store (docs/pop.md).  A message handed out by
 * POP_MESSAGE is leased to its group until popTime + invisibleTime; an
 * ACK ends the lease, CHANGE_MESSAGE_INVISIBLETIME moves its deadline,
 * and a lease that passes its deadline is taken by the revive service,
 * which re-puts the message into the group's POP retry topic.
 *
 * State: per (group, topic, queueId) a sorted array of leases by queue
 * offset (tombstoned on ack, compacted when half are dead), a hash over
 * the keys and one over the groups (in-flight counts, the per-group
 * bound).  Durability: every change is appended to STORE/pop/lease.log
 * with one write(2) per request (a record: type, length, payload,
 * CRC32), so it survives kill -9 (the page cache keeps it); the revive
 * thread fdatasyncs it every second and rewrites it (live leases and
 * cursors only) when it passes its compaction size.  Opening replays it.
 *
 * MT: every function, any thread (one mutex).
 */
#ifndef RMQ_POPSTORE_H
#define RMQ_POPSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POP_NAME_MAX 255

struct popstore_conf {
    int64_t max_per_group;     /* popMaxInflightPerGroup */
    int64_t max_total;         /* popMaxInflightTotal */
    int64_t compact_bytes;     /* rewrite the log past this size */
};

/* One leased message. */
struct pop_lease {
    int64_t offset;            /* queue offset */
    int64_t phy;               /* commit log offset of the record */
    int64_t pop_time;          /* ms, wall clock: part of the receipt */
    int64_t deadline;          /* ms, wall clock; 0: acknowledged */
    int32_t size;              /* record size */
    int16_t attempts;          /* orderly: times handed out before (set by popstore_lease) */
    uint8_t order;             /* an orderly POP's: never revived, re-popped in place */
    uint8_t pad;
};

/* popstore_order_state */
enum pop_order_state {
    POP_ORDER_FREE = 0,        /* no lease: read from the group's offset */
    POP_ORDER_BLOCKED = 1,     /* a lease still runs: hand nothing out */
    POP_ORDER_EXPIRED = 2,     /* every lease ran out: re-read from the first */
};

/* A lease past its deadline, handed to the revive service. */
struct pop_due {
    char group[POP_NAME_MAX + 1];
    char topic[POP_NAME_MAX + 1];
    int32_t qid;
    struct pop_lease l;
};

struct popstore_stats {
    int64_t inflight;          /* leases outstanding */
    int64_t acked;             /* acknowledged since start */
    int64_t revived;           /* revived since start */
    int64_t changed;           /* invisible times changed since start */
    int64_t log_bytes;         /* lease log size */
};

struct popstore;

/**
 * The store of directory dir (created if missing), opened and replayed
 * the first time it is asked for and kept for the life of the process
 * (every worker's processors share it).  NULL with err_set().
 */
struct popstore *popstore_shared(const char *dir, const struct popstore_conf *c);

/** Opens (and replays) a store of its own (tests, tools). */
struct popstore *popstore_open(const char *dir, const struct popstore_conf *c);
void popstore_close(struct popstore *ps);

/** Leases the group may still take (its bound and the total's). */
int64_t popstore_room(struct popstore *ps, const char *group, size_t glen);

/**
 * A POP's claim on a queue of a group (5.x's QueueLockManager): false
 * when another POP holds it (that POP skips the queue), else held until
 * popstore_unlock.  Two workers never read and lease the same offsets.
 */
bool popstore_try_lock(struct popstore *ps, const char *group, size_t glen,
                       const char *topic, size_t tlen, int32_t qid);
void popstore_unlock(struct popstore *ps, const char *group, size_t glen,
                     const char *topic, size_t tlen, int32_t qid);

/**
 * The next offset the log says a key's POP reached before the last stop,
 * once (the caller takes it as a floor over the committed offset), or -1.
 */
int64_t popstore_take_cursor(struct popstore *ps, const char *group, size_t glen,
                             const char *topic, size_t tlen, int32_t qid);

/**
 * Records n leases of one key (offsets ascending) and the POP cursor
 * `next`; a lease on an offset leased before (an orderly re-pop) counts
 * one more attempt (v[i].attempts is set).  Returns 0, or -errno with
 * err_set() (nothing recorded).
 */
int popstore_lease(struct popstore *ps, const char *group, size_t glen,
                   const char *topic, size_t tlen, int32_t qid,
                   struct pop_lease *v, int n, int64_t next);

/**
 * Ends the lease (key, offset) taken at pop_time.  0, or -ENOENT.  For an
 * orderly lease *floor is where the group's offset now stands (the first
 * lease left, else the last POP's cursor); else -1.
 */
int popstore_ack(struct popstore *ps, const char *group, size_t glen,
                 const char *topic, size_t tlen, int32_t qid, int64_t offset,
                 int64_t pop_time, int64_t *floor);

/**
 * popstore_ack for up to 64 offsets of one key and pop time, logged in
 * one write.  Returns how many leases it ended; *floor as popstore_ack.
 */
int popstore_ack_batch(struct popstore *ps, const char *group, size_t glen,
                       const char *topic, size_t tlen, int32_t qid,
                       const int64_t *offsets, int n, int64_t pop_time, int64_t *floor);

/**
 * popstore_ack_batch that says which ended: acked[j] true when the lease
 * on offsets[j] did (acked may be NULL).  For a caller answering each
 * ack apart (a gRPC AckMessage's entries) with one log write for all.
 */
int popstore_ack_each(struct popstore *ps, const char *group, size_t glen,
                      const char *topic, size_t tlen, int32_t qid,
                      const int64_t *offsets, int n, int64_t pop_time, bool *acked,
                      int64_t *floor);

/**
 * Where an orderly POP of the key stands at `now` (ConsumerOrderInfoManager's
 * rule): *first is the first leased offset when POP_ORDER_EXPIRED.
 */
int popstore_order_state(struct popstore *ps, const char *group, size_t glen,
                         const char *topic, size_t tlen, int32_t qid, int64_t now,
                         int64_t *first);

/** True when the key has a lease on offset (any pop time). */
bool popstore_leased(struct popstore *ps, const char *group, size_t glen,
                     const char *topic, size_t tlen, int32_t qid, int64_t offset);

/**
 * Moves the lease (key, offset, pop_time) to a new pop time and deadline.
 * 0, or -ENOENT.
 */
int popstore_change(struct popstore *ps, const char *group, size_t glen,
                    const char *topic, size_t tlen, int32_t qid, int64_t offset,
                    int64_t pop_time, int64_t new_pop_time, int64_t new_deadline);

/**
 * Up to max leases (not orderly ones) whose deadline is <= now; they stay leased (marked
 * as being revived: an ACK still ends them) until popstore_revived.
 */
int popstore_due(struct popstore *ps, int64_t now, struct pop_due *out, int max);

/**
 * The revive of d is done (ok: the message was re-put, the lease ends)
 * or failed (it is tried again after retry_ms).
 */
void popstore_revived(struct popstore *ps, const struct pop_due *d, bool ok, int64_t retry_ms);

/** fdatasync, and the rewrite when the log is past its size. 0 or -errno. */
int popstore_sync(struct popstore *ps);

void popstore_get_stats(struct popstore *ps, struct popstore_stats *s);

/** Leases the key holds now. */
int64_t popstore_live(struct popstore *ps, const char *group, size_t glen,
                      const char *topic, size_t tlen, int32_t qid);

/**
 * Calls fn for each group holding leases (name, length, count), under the
 * store's lock (fn must not call back into the store).  Stops at the
 * first non-zero return, which it returns.
 */
int popstore_each_group(struct popstore *ps,
                        int (*fn)(void *arg, const char *g, size_t n, int64_t inflight),
                        void *arg);

#endif
