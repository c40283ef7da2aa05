/*
 * store_metrics: see store_metrics.h.
 */
#include "broker/store_metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/client_registry.h"
#include "broker/lag_metrics.h"
#include "broker/pop_processor.h"
#include "core/buf.h"
#include "core/metrics.h"
#include "store/access.h"
#include "store/store.h"

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
gauge(struct buf *out, const struct metrics *m, const char *name, const char *help,
      const struct metrics_label *l, int nl, int64_t v)
{
    return metrics_put_head(out, name, "gauge", help) == 0 &&
                   metrics_put_sample(out, m, name, l, nl, v) == 0
               ? 0 : -1;
}

static int
counter(struct buf *out, const struct metrics *m, const char *name, const char *help, int64_t v)
{
    return metrics_put_head(out, name, "counter", help) == 0 &&
                   metrics_put_sample(out, m, name, NULL, 0, v) == 0
               ? 0 : -1;
}

/* Timer messages (store/timer.h), DefaultStoreMetricsConstant's names;
 * the counters are this run's. */
static int
collect_timer(struct timer_counters *t, const struct metrics *m, struct buf *out)
{
    int rc = gauge(out, m, "rocketmq_timer_message_snapshot",
                   "Timer messages held, not yet delivered.", NULL, 0, atomic_load(&t->pending));
    if (rc == 0)
        rc = counter(out, m, "rocketmq_timer_enqueue_total",
                     "Timer messages put into the timer wheel.", atomic_load(&t->enqueued));
    if (rc == 0)
        rc = counter(out, m, "rocketmq_timer_dequeue_total",
                     "Timer messages delivered to their topic.", atomic_load(&t->delivered));
    if (rc == 0)
        rc = gauge(out, m, "rocketmq_timer_enqueue_lag",
                   "Timer-topic messages not yet read into the wheel.", NULL, 0,
                   atomic_load(&t->enqueue_lag));
    if (rc == 0)
        rc = gauge(out, m, "rocketmq_timer_dequeue_lag",
                   "How far delivery is behind the timer clock, in milliseconds.", NULL, 0,
                   atomic_load(&t->dequeue_lag_ms));
    if (rc == 0)
        rc = counter(out, m, "rmq_timer_dropped_total",
                     "Timer messages that could never be delivered (logged).", atomic_load(&t->dropped));
    return rc;
}

static int
collect_store(void *arg, const struct metrics *m, struct buf *out)
{
    struct store *st = arg;
    static const struct metrics_label local[2] = {
        { "storage_type", "local", 5 }, { "storage_medium", "disk", 4 },
    };
    int64_t max = store_max_phy(st), min = store_min_phy(st);
    int64_t flushed = store_flushed(st), dispatched = store_dispatched(st);
    uint64_t used = 0, total = 0;
    int rc = 0;
    if (store_disk_usage(st, &used, &total) == 0)
        rc = gauge(out, m, "rocketmq_storage_size", "Bytes used on the store's partition.",
                   local, 2, (int64_t)used);
    if (rc == 0)
        rc = gauge(out, m, "rocketmq_storage_flush_behind_bytes",
                   "Commit log bytes written but not yet flushed to disk.", local, 2,
                   max > flushed ? max - flushed : 0);
    if (rc == 0)
        rc = gauge(out, m, "rocketmq_storage_dispatch_behind_bytes",
                   "Commit log bytes written but not yet dispatched to the index.", local, 2,
                   max > dispatched ? max - dispatched : 0);
    int64_t earliest = store_earliest_time_all(st);
    if (rc == 0 && earliest > 0) {
        int64_t age = now_ms() - earliest;
        rc = gauge(out, m, "rocketmq_storage_message_reserve_time",
                   "Age of the oldest message in the store, in milliseconds.", local, 2,
                   age > 0 ? age : 0);
    }
    if (rc == 0)
        rc = gauge(out, m, "rmq_storage_commitlog_bytes",
                   "Bytes the commit log holds (max minus min physical offset).", NULL, 0,
                   max > min ? max - min : 0);
    if (rc == 0 && total > 0)
        rc = gauge(out, m, "rmq_storage_disk_used_ratio",
                   "Used space of the store's partition, in percent.", NULL, 0,
                   (int64_t)(100.0 * (double)used / (double)total + 0.5));
    if (rc == 0 && atomic_load(&st->timer.running))
        rc = collect_timer(&st->timer, m, out);
    return rc;
}

/* MQVersion's name for a version ordinal, lower case as 5.x labels it:
 * from V4_0_0_SNAPSHOT (212) on, two ordinals per release (SNAPSHOT,
 * release), ten patches a minor, ten minors a major, to V5_9_9 (611);
 * HIGHER_VERSION past it.  Earlier (3.x) ordinals are irregular: the
 * number itself. */
static size_t
version_desc(int32_t v, char *out, size_t cap)
{
    int n;
    if (v >= 612) {
        n = snprintf(out, cap, "higher_version");
    } else if (v >= 212) {
        int k = v - 212, rel = k / 2;
        n = snprintf(out, cap, "v%d_%d_%d%s", 4 + rel / 100, rel / 10 % 10, rel % 10,
                     k % 2 == 0 ? "_snapshot" : "");
    } else {
        n = snprintf(out, cap, "%d", v);
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* One counted label set of a connections family. */
struct conn_key {
    char lang[24];
    char ver[24];
    int8_t mode;
    int64_t n;
};

static void
lower(char *dst, size_t cap, const char *s, size_t n)
{
    size_t i = 0;
    for (; i < n && i + 1 < cap; i++)
        dst[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    dst[i] = '\0';
}

/* Adds c to the keys k[0..*nk) (room for cap): counted with its equal,
 * else appended; past cap, counted in the last key, relabelled
 * "overflow" as the recorded families' overflow series. */
static void
count_key(struct conn_key *k, size_t *nk, size_t cap, const struct conn_key *c)
{
    for (size_t j = 0; j < *nk; j++)
        if (k[j].mode == c->mode && strcmp(k[j].lang, c->lang) == 0 &&
            strcmp(k[j].ver, c->ver) == 0) {
            k[j].n += c->n;
            return;
        }
    if (*nk < cap) {
        k[(*nk)++] = *c;
        return;
    }
    struct conn_key *last = &k[cap - 1];
    snprintf(last->lang, sizeof(last->lang), "overflow");
    snprintf(last->ver, sizeof(last->ver), "overflow");
    last->n += c->n;
}

/* Counts the CHAN records of one group by (language, version). */
static void
count_chans(const struct buf *b, uint32_t nchan, int8_t mode, struct conn_key *k, size_t *nk,
            size_t cap)
{
    struct creg_rd r;
    creg_rd_init(&r, b, 0);
    for (uint32_t i = 0; i < nchan; i++) {
        size_t l;
        (void)creg_rd_u64(&r);
        (void)creg_rd_str(&r, &l);                 /* clientId */
        const char *lang = creg_rd_str(&r, &l);
        struct conn_key c = { .mode = mode, .n = 1 };
        lower(c.lang, sizeof(c.lang), lang, l);
        int32_t ver = creg_rd_i32(&r);
        if (version_desc(ver, c.ver, sizeof(c.ver)) == 0)
            c.ver[0] = '\0';
        (void)creg_rd_str(&r, &l);                 /* addr */
        (void)creg_rd_i64(&r);
        count_key(k, nk, cap, &c);
    }
}

static int
put_conns(struct buf *out, const struct metrics *m, const char *name, const char *group,
          size_t glen, const struct conn_key *k)
{
    static const char *modes[] = { "pull", "push", "pop" };
    struct metrics_label l[6];
    int nl = 0;
    if (group != NULL)
        l[nl++] = (struct metrics_label){ "consumer_group", group, glen };
    l[nl++] = (struct metrics_label){ "language", k->lang, strlen(k->lang) };
    l[nl++] = (struct metrics_label){ "version", k->ver, strlen(k->ver) };
    if (group != NULL) {
        const char *md = k->mode >= 0 && k->mode < 3 ? modes[k->mode] : "unknown";
        l[nl++] = (struct metrics_label){ "consume_mode", md, strlen(md) };
    }
    l[nl++] = (struct metrics_label){ "protocol_type", "remoting", 8 };
    if (group != NULL) {
        bool sys = lag_metrics_is_system(NULL, 0, group, glen);
        l[nl++] = (struct metrics_label){ "is_system", sys ? "true" : "false", sys ? 4u : 5u };
    }
    return metrics_put_sample(out, m, name, l, nl, k->n);
}

/* Consumers: one series per group and (language, version, mode), at
 * most metricsMaxLabelSets in all.  Producers: summed over their groups
 * by (language, version), as 5.x labels them. */
static int
collect_kind(struct creg *reg, enum creg_kind kind, const struct metrics *m, struct buf *out)
{
    const bool consumer = kind == CREG_CONSUMER;
    const char *name = consumer ? "rocketmq_consumer_connections" : "rocketmq_producer_connections";
    size_t cap = metrics_max_label_sets(m);
    struct buf groups, chans;
    buf_init(&groups);
    buf_init(&chans);
    int ng = creg_groups(reg, kind, &groups);
    int rc = ng < 0 ? -1 : 0;
    struct conn_key *all = consumer ? NULL : calloc(cap, sizeof(*all));
    if (!consumer && all == NULL)
        rc = -1;
    size_t nall = 0, shown = 0;
    bool head = false;
    struct creg_rd r;
    creg_rd_init(&r, &groups, 0);
    for (int g = 0; g < ng && rc == 0; g++) {
        size_t glen;
        const char *group = creg_rd_str(&r, &glen);
        buf_reset(&chans);
        int8_t mode = -1;
        if (consumer) {
            /* The group's SETTINGS come first: its consumeType. */
            if (creg_consumer_group(reg, group, glen, &chans) != 1)
                continue;
            struct creg_rd st;
            creg_rd_init(&st, &chans, 0);
            mode = creg_rd_i8(&st);
            buf_reset(&chans);
        }
        int nchan = creg_members(reg, kind, group, glen, &chans);
        if (nchan <= 0)
            continue;
        if (!consumer) {
            count_chans(&chans, (uint32_t)nchan, mode, all, &nall, cap);
            continue;
        }
        /* A group's channels are bounded by clientMaxChannelsPerGroup. */
        struct conn_key *k = calloc((size_t)nchan, sizeof(*k));
        if (k == NULL) {
            rc = -1;
            break;
        }
        size_t nk = 0;
        count_chans(&chans, (uint32_t)nchan, mode, k, &nk, (size_t)nchan);
        for (size_t i = 0; i < nk && rc == 0 && shown < cap; i++, shown++) {
            if (!head)
                rc = metrics_put_head(out, name, "gauge",
                                      "Consumer connections, by group, client language, version and consume mode.");
            head = true;
            if (rc == 0)
                rc = put_conns(out, m, name, group, glen, &k[i]);
        }
        free(k);
    }
    if (rc == 0 && nall > 0) {
        rc = metrics_put_head(out, name, "gauge", "Producer connections, by client language and version.");
        for (size_t i = 0; i < nall && rc == 0; i++)
            rc = put_conns(out, m, name, NULL, 0, &all[i]);
    }
    free(all);
    buf_free(&groups);
    buf_free(&chans);
    return rc;
}

static int
collect_clients(void *arg, const struct metrics *m, struct buf *out)
{
    (void)arg;
    struct creg *reg = creg_shared();
    if (reg == NULL)
        return 0;
    struct creg_counts c;
    creg_counts(reg, &c);
    int rc = collect_kind(reg, CREG_PRODUCER, m, out);
    if (rc == 0)
        rc = collect_kind(reg, CREG_CONSUMER, m, out);
    if (rc == 0)
        rc = pop_metrics(m, out);   /* POP leases (pop_processor.h) */
    if (rc == 0)
        rc = gauge(out, m, "rmq_producer_groups", "Producer groups with at least one member.",
                   NULL, 0, c.producer_groups);
    if (rc == 0)
        rc = gauge(out, m, "rmq_consumer_groups", "Consumer groups with at least one member.",
                   NULL, 0, c.consumer_groups);
    return rc;
}

static void
release(void *arg)
{
    store_unref(arg);
}

void
store_metrics_watch(struct metrics *m, struct store *store)
{
    if (m == NULL)
        return;
    if (store == NULL) {
        metrics_set_collector(m, METRICS_SLOT_STORE, NULL, NULL, NULL);
        metrics_set_collector(m, METRICS_SLOT_CLIENTS, NULL, NULL, NULL);
        return;
    }
    store_ref(store);
    metrics_set_collector(m, METRICS_SLOT_STORE, collect_store, store, release);
    metrics_set_collector(m, METRICS_SLOT_CLIENTS, collect_clients, NULL, NULL);
}
