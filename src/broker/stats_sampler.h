/*
 * stats_sampler: the broker's statistics samples (BrokerStatsManager's
 * StatsItem for VIEW_BROKER_STATS_DATA, mqadmin statsAll and
 * brokerConsumeStats, the console), taken in C so that the main Lua
 * state builds nothing per consume queue on its timer (it built a table
 * per queue and per committed offset every brokerStatsSampleMillis: 30.6
 * MB of main state after scripts/bench/attacks.lua against 19.4 at
 * start; docs/memory.md).
 *
 * Each sample adds up, per item, the raw cumulative figure and its base:
 *   TOPIC_PUT_NUMS topic        its consume queues' max offsets
 *   GROUP_GET_NUMS topic@group  the group's committed offsets on it
 *   BROKER_PUT_NUMS cluster     every queue's max offset
 *   BROKER_GET_NUMS cluster     every committed offset
 * A queue's base is its figure at the first sample that saw it: at boot
 * its value then; later a put queue's 0 and a committed offset's queue
 * min offset (what the group committed since the first message still
 * stored counts as consumed).  Each item keeps the samples (time, raw -
 * base) of the last minute (7, every sample), hour (7, every 60th) and
 * day (25, every 360th), as 4.9.8 does, and publishes "BASE FIRST FIRST
 * FIRST" (each window's oldest sample "ms,value", or "-") under "NAME
 * KEY" in the shared map the readers use (lua/rmq/broker/admin_store.lua
 * computes a window from its oldest sample to the value now), and
 * "@sampled" = the time.  An item whose queues or offsets are all gone
 * is dropped.
 *
 * MT: one thread (the main thread's timer) owns a sampler; it reads the
 * store and the offset table under their own locks.
 */
#ifndef RMQ_STATS_SAMPLER_H
#define RMQ_STATS_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;
struct offset_table;
struct smap;
struct stats_sampler;

/**
 * A sampler of store st (a reference is taken) and offset table offs,
 * publishing into out, the broker items keyed by `cluster`.  NULL on
 * ENOMEM.
 */
struct stats_sampler *stats_sampler_new(struct store *st, struct offset_table *offs,
                                        struct smap *out, const char *cluster);

void stats_sampler_free(struct stats_sampler *s);

/**
 * One sample at now_ms (at_boot: the first, whose queues start from
 * their values now).  Returns 0, or -ENOMEM (err_set; the samples taken
 * so far stay).
 */
int stats_sampler_sample(struct stats_sampler *s, int64_t now_ms, bool at_boot);

/** Items and queue bases held (runtime info, specs). */
size_t stats_sampler_items(const struct stats_sampler *s);
size_t stats_sampler_queues(const struct stats_sampler *s);

#endif
