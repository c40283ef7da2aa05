/*
 * replica: what HA replication (src/ha/) needs from the store.
 *
 * Slave side: the commit log grows by raw bytes from the master, at the
 * master's offsets, and every record they complete gets its consume
 * queue entry as if it had been put here (the index follows the log on
 * the service thread as usual), so the slave's files are byte for byte
 * the master's and its queues serve pulls.
 *
 * Master side: the offsets the slaves acknowledged (RocketMQ's
 * push2SlaveMaxOffset and connection count), which SYNC_MASTER puts wait
 * for (syncwait.c), and a wake-up the put path gives the HA thread when
 * there is new data to send.
 *
 * MT: every function is safe from any thread.
 */
#ifndef RMQ_REPLICA_H
#define RMQ_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/** Slave: the end of the bytes received (its offset report). */
int64_t store_replica_end(struct store *s);

/**
 * Slave: appends bytes received from the master at `phy` (see
 * clog_append_raw()).  Returns 0 or -errno with err_set().
 */
int store_replica_append(struct store *s, int64_t phy, const uint8_t *data,
                         size_t len);

/**
 * Slave: drops everything at and after `end` (a log ahead of its new
 * master): commit log files and bytes, consume queue entries.  `end` must
 * be a record boundary of this log, >= its first offset.  Returns 0 or
 * -EINVAL with err_set().
 */
int store_replica_truncate(struct store *s, int64_t end);

/** Master: a slave acknowledged `off`; wakes SYNC_MASTER waiters. */
void store_ha_ack(struct store *s, int64_t off);

/** Master: the largest offset any slave acknowledged. */
int64_t store_ha_acked(struct store *s);

/** Master: a slave connected (+1) or went (-1). */
void store_ha_conns_add(struct store *s, int delta);

/** Master: slaves connected now. */
int store_ha_conns(struct store *s);

/**
 * RocketMQ's isSlaveOK(end): a slave is connected and no further behind
 * than haSlaveFallbehindMax.
 */
bool store_slave_ok(struct store *s, int64_t end);

/**
 * The HA thread's wake-up for new data: an eventfd the store owns (made
 * on the first call, closed with the store, so a put never signals a
 * freed handle).  Returns the fd or -errno.
 */
int store_ha_wake_fd(struct store *s);

/** The HA thread drained the fd: the next append signals it again. */
void store_ha_woken(struct store *s);

/** Put path: new data is in the log (at most one signal per HA pass,
 * none while no slave is connected). */
void store_ha_signal(struct store *s);

#include "store/store.h"

static inline void
store_ha_appended(struct store *s)
{
    if (atomic_load_explicit(&s->ha_conns, memory_order_relaxed) > 0 &&
        !atomic_load_explicit(&s->ha_wake_pending, memory_order_relaxed))
        store_ha_signal(s);
}

#endif
