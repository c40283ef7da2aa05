/*
 * lag_metrics: see lag_metrics.h.
 */
#include "broker/lag_metrics.h"
#include "broker/pop_processor.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/offset_table.h"
#include "core/buf.h"
#include "core/metrics.h"
#include "store/access.h"
#include "store/store.h"

/* The table may grow between sizing the copy and making it: a few
 * tries, then the scrape goes without these families. */
#define SNAPSHOT_TRIES 4

static struct offset_snapshot *
snapshot(void **block)
{
    struct offset_table *t = offset_table_shared();
    size_t cap = 4096;
    for (int i = 0; i < SNAPSHOT_TRIES; i++) {
        void *b = malloc(cap);
        if (b == NULL)
            return NULL;
        size_t need = offset_table_snapshot(t, b, cap);
        if (need <= cap) {
            *block = b;
            return b;
        }
        free(b);
        cap = need + need / 4;
    }
    return NULL;
}

/* The key splits at its first '@' (offset_table.h); -1 when it has none. */
static int
split_key(const struct offset_item *it, size_t *tlen)
{
    const char *at = memchr(it->key, '@', it->key_len);
    if (at == NULL)
        return -1;
    *tlen = (size_t)(at - it->key);
    return 0;
}

bool
lag_metrics_is_system(const char *topic, size_t tlen, const char *group, size_t glen)
{
    /* TopicValidator.SYSTEM_TOPIC_SET (4.9.8). */
    static const char *const topics[] = {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    };
    if (topic != NULL) {
        if (tlen >= 8 && memcmp(topic, "rmq_sys_", 8) == 0)
            return true;
        for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++)
            if (strlen(topics[i]) == tlen && memcmp(topics[i], topic, tlen) == 0)
                return true;
    }
    static const char prefix[] = "cid_rmq_sys_";
    if (glen < sizeof(prefix) - 1)
        return false;
    for (size_t i = 0; i < sizeof(prefix) - 1; i++) {
        char c = group[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != prefix[i])
            return false;
    }
    return true;
}

static int
put_one(struct buf *out, const struct metrics *m, const char *name, const char *topic,
        size_t tlen, const char *group, size_t glen, const char *qid, int64_t v)
{
    bool retry = tlen >= 7 && memcmp(topic, "%RETRY%", 7) == 0;
    bool sys = lag_metrics_is_system(topic, tlen, group, glen);
    struct metrics_label l[5];
    int n = 0;
    l[n++] = (struct metrics_label){ "topic", topic, tlen };
    l[n++] = (struct metrics_label){ "consumer_group", group, glen };
    if (qid != NULL)
        l[n++] = (struct metrics_label){ "queue_id", qid, strlen(qid) };
    l[n++] = (struct metrics_label){ "is_retry", retry ? "true" : "false", retry ? 4u : 5u };
    l[n++] = (struct metrics_label){ "is_system", sys ? "true" : "false", sys ? 4u : 5u };
    return metrics_put_sample(out, m, name, l, n, v);
}

/* One gauge per topic@group key of the snapshot, values[i] for key i;
 * past the cap, the rest in one "overflow" series: their sum, or their
 * maximum when worst is set (an age). */
static int
put_per_key(struct buf *out, const struct metrics *m, const struct offset_snapshot *s,
            const char *name, const char *help, const int64_t *values, bool worst)
{
    if (metrics_put_head(out, name, "gauge", help) != 0)
        return -1;
    uint32_t cap = metrics_max_label_sets(m), n = 0;
    int64_t over = 0;
    bool any_over = false;
    for (size_t i = 0; i < s->count; i++) {
        const struct offset_item *it = &s->items[i];
        size_t tlen;
        if (split_key(it, &tlen) != 0)
            continue;
        if (n >= cap) {
            over = worst ? (values[i] > over ? values[i] : over) : over + values[i];
            any_over = true;
            continue;
        }
        if (put_one(out, m, name, it->key, tlen, it->key + tlen + 1, it->key_len - tlen - 1,
                    NULL, values[i]) != 0)
            return -1;
        n++;
    }
    if (any_over)
        return put_one(out, m, name, "overflow", 8, "overflow", 8, NULL, over);
    return 0;
}

/* The latest pull offset of (topic, group, qid), -1 if none recorded. */
static int64_t
pull_offset(const struct metrics_pull *p, size_t n, const char *topic, size_t tlen,
            const char *group, size_t glen, uint32_t qid)
{
    struct metrics_pull key = { .topic = topic, .tlen = tlen, .group = group, .glen = glen,
                                .qid = (int32_t)qid };
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = metrics_pull_cmp(&p[mid], &key);
        if (c == 0)
            return p[mid].offset;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int
collect(void *arg, const struct metrics *m, struct buf *out)
{
    struct store *st = arg;
    void *block = NULL;
    const struct offset_snapshot *s = snapshot(&block);
    if (s == NULL)
        return 0;   /* out of memory or a table in flux: skip, not fail */
    uint32_t cap = metrics_max_label_sets(m);
    int rc = 0;
    /* Per key (topic@group), summed over its queues as 5.x's
     * ConsumerLagCalculator does: lag = max - committed, inflight =
     * pulled - committed, ready = max - pulled (a queue with no pull
     * recorded since the start counts as pulled up to max), and the
     * store time of the oldest message not consumed (0 = none). */
    size_t nk = s->count + 1;
    int64_t *lag = calloc(nk, sizeof(*lag)), *inflight = calloc(nk, sizeof(*inflight));
    int64_t *ready = calloc(nk, sizeof(*ready)), *oldest = calloc(nk, sizeof(*oldest));
    struct metrics_pull *pulls = NULL;
    size_t npulls = 0;
    struct buf perq;
    buf_init(&perq);
    if (lag == NULL || inflight == NULL || ready == NULL || oldest == NULL ||
        metrics_pull_offsets(m, &pulls, &npulls) != 0) {
        rc = -1;
        goto out;
    }
    static const char perq_name[] = "rmq_consumer_lag_messages";
    uint32_t nperq = 0;
    int64_t perq_over = 0;
    bool any_over = false;
    for (size_t i = 0; i < s->count && rc == 0; i++) {
        const struct offset_item *it = &s->items[i];
        size_t tlen;
        if (split_key(it, &tlen) != 0)
            continue;
        const char *group = it->key + tlen + 1;
        size_t glen = it->key_len - tlen - 1;
        for (uint32_t q = 0; q < it->n && rc == 0; q++) {
            int64_t committed = it->offs[q];
            if (committed < 0)
                continue;
            int64_t max = store_max_offset(st, it->key, tlen, (int32_t)q);
            int64_t v = max > committed ? max - committed : 0;
            lag[i] += v;
            int64_t pulled = pull_offset(pulls, npulls, it->key, tlen, group, glen, q);
            if (pulled < 0 || pulled > max)
                pulled = max;   /* none since the start, or past a truncated queue */
            if (pulled > committed)
                inflight[i] += pulled - committed;
            /* POP leases: handed out, not yet acknowledged (5.x's
             * PopInflightMessageCounter in this family). */
            inflight[i] += pop_leases_of(group, glen, it->key, tlen, (int32_t)q);
            if (max > pulled)
                ready[i] += max - pulled;
            if (v > 0) {
                int64_t ts = store_time_at_offset(st, it->key, tlen, (int32_t)q, committed);
                if (ts > 0 && (oldest[i] == 0 || ts < oldest[i]))
                    oldest[i] = ts;
            }
            if (nperq >= cap) {
                perq_over += v;
                any_over = true;
                continue;
            }
            char qs[16];
            snprintf(qs, sizeof(qs), "%u", q);
            rc = put_one(&perq, m, perq_name, it->key, tlen, group, glen, qs, v);
            nperq++;
        }
    }
    if (rc == 0 && any_over)
        rc = put_one(&perq, m, perq_name, "overflow", 8, "overflow", 8, "overflow", perq_over);
    if (rc != 0 || nperq == 0)
        goto out;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    for (size_t i = 0; i < s->count; i++)
        oldest[i] = oldest[i] > 0 && now_ms > oldest[i] ? now_ms - oldest[i] : 0;
    rc = put_per_key(out, m, s, "rocketmq_consumer_lag_messages",
                     "Messages not yet consumed (broker max offset minus committed offset), by topic and consumer group.",
                     lag, false);
    if (rc == 0)
        rc = put_per_key(out, m, s, "rocketmq_consumer_inflight_messages",
                         "Messages pulled but not yet committed (pull offset minus committed offset), by topic and consumer group.",
                         inflight, false);
    if (rc == 0)
        rc = put_per_key(out, m, s, "rocketmq_consumer_ready_messages",
                         "Messages not yet pulled (broker max offset minus pull offset), by topic and consumer group.",
                         ready, false);
    if (rc == 0)
        rc = put_per_key(out, m, s, "rocketmq_consumer_lag_latency",
                         "Age of the oldest message not yet consumed, in milliseconds, by topic and consumer group (0: caught up).",
                         oldest, true);
    if (rc == 0)
        rc = metrics_put_head(out, perq_name, "gauge",
                              "Messages not yet consumed in one queue, by topic, consumer group and queue id.");
    if (rc == 0)
        rc = buf_append(out, buf_head(&perq), buf_len(&perq));
out:
    buf_free(&perq);
    free(pulls);
    free(lag);
    free(inflight);
    free(ready);
    free(oldest);
    free(block);
    return rc;
}

static void
release(void *arg)
{
    store_unref(arg);
}

void
lag_metrics_watch(struct metrics *m, struct store *store)
{
    if (m == NULL)
        return;
    if (store == NULL) {
        metrics_set_collector(m, METRICS_SLOT_LAG, NULL, NULL, NULL);
        return;
    }
    store_ref(store);
    metrics_set_collector(m, METRICS_SLOT_LAG, collect, store, release);
}
