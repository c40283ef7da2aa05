/*
 * lag_metrics: see lag_metrics.h.
 */
#include "broker/lag_metrics.h"

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

static int64_t
queue_lag(struct store *st, const char *topic, size_t tlen, uint32_t qid, int64_t committed)
{
    int64_t max = store_max_offset(st, topic, tlen, (int32_t)qid);
    return max > committed ? max - committed : 0;
}

static int
put_one(struct buf *out, const struct metrics *m, const char *name, const char *topic,
        size_t tlen, const char *group, size_t glen, const char *qid, int64_t v)
{
    struct metrics_label l[3] = {
        { "topic", topic, tlen },
        { "consumer_group", group, glen },
        { "queue_id", qid, qid != NULL ? strlen(qid) : 0 },
    };
    return metrics_put_sample(out, m, name, l, qid != NULL ? 3 : 2, v);
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
    /* Per queue first, summing per key as it goes; the families are
     * written one after the other as the format wants. */
    int64_t *ready = calloc(s->count + 1, sizeof(*ready));
    /* Per key: the store time of the oldest message not consumed (the
     * one at the committed offset of each queue behind), 0 = none. */
    int64_t *oldest = calloc(s->count + 1, sizeof(*oldest));
    struct buf lag;
    buf_init(&lag);
    if (ready == NULL || oldest == NULL) {
        rc = -1;
        goto out;
    }
    static const char lag_name[] = "rmq_consumer_lag_messages";
    static const char ready_name[] = "rocketmq_consumer_ready_messages";
    uint32_t nlag = 0;
    int64_t lag_over = 0;
    bool any_over = false;
    for (size_t i = 0; i < s->count && rc == 0; i++) {
        const struct offset_item *it = &s->items[i];
        size_t tlen;
        if (split_key(it, &tlen) != 0)
            continue;
        const char *group = it->key + tlen + 1;
        size_t glen = it->key_len - tlen - 1;
        for (uint32_t q = 0; q < it->n && rc == 0; q++) {
            if (it->offs[q] < 0)
                continue;
            int64_t v = queue_lag(st, it->key, tlen, q, it->offs[q]);
            ready[i] += v;
            if (v > 0) {
                int64_t ts = store_time_at_offset(st, it->key, tlen, (int32_t)q, it->offs[q]);
                if (ts > 0 && (oldest[i] == 0 || ts < oldest[i]))
                    oldest[i] = ts;
            }
            if (nlag >= cap) {
                lag_over += v;
                any_over = true;
                continue;
            }
            char qs[16];
            snprintf(qs, sizeof(qs), "%u", q);
            rc = put_one(&lag, m, lag_name, it->key, tlen, group, glen, qs, v);
            nlag++;
        }
    }
    if (rc == 0 && any_over)
        rc = put_one(&lag, m, lag_name, "overflow", 8, "overflow", 8, "overflow", lag_over);
    if (rc != 0 || nlag == 0)
        goto out;
    rc = metrics_put_head(out, ready_name, "gauge",
                          "Messages not yet consumed (broker max offset minus committed offset), by topic and consumer group.");
    uint32_t nready = 0;
    int64_t ready_over = 0;
    any_over = false;
    for (size_t i = 0; i < s->count && rc == 0; i++) {
        const struct offset_item *it = &s->items[i];
        size_t tlen;
        if (split_key(it, &tlen) != 0)
            continue;
        if (nready >= cap) {
            ready_over += ready[i];
            any_over = true;
            continue;
        }
        rc = put_one(out, m, ready_name, it->key, tlen, it->key + tlen + 1,
                     it->key_len - tlen - 1, NULL, ready[i]);
        nready++;
    }
    if (rc == 0 && any_over)
        rc = put_one(out, m, ready_name, "overflow", 8, "overflow", 8, NULL, ready_over);
    /* rocketmq_consumer_lag_latency as 5.x: now minus the earliest
     * unconsumed message's store time, 0 when the group is caught up. */
    static const char lat_name[] = "rocketmq_consumer_lag_latency";
    if (rc == 0)
        rc = metrics_put_head(out, lat_name, "gauge",
                              "Age of the oldest message not yet consumed, in milliseconds, by topic and consumer group (0: caught up).");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    uint32_t nlat = 0;
    int64_t lat_over = 0;
    any_over = false;
    for (size_t i = 0; i < s->count && rc == 0; i++) {
        const struct offset_item *it = &s->items[i];
        size_t tlen;
        if (split_key(it, &tlen) != 0)
            continue;
        int64_t lat = oldest[i] > 0 && now_ms > oldest[i] ? now_ms - oldest[i] : 0;
        if (nlat >= cap) {
            if (lat > lat_over)
                lat_over = lat;   /* the worst of the rest */
            any_over = true;
            continue;
        }
        rc = put_one(out, m, lat_name, it->key, tlen, it->key + tlen + 1,
                     it->key_len - tlen - 1, NULL, lat);
        nlat++;
    }
    if (rc == 0 && any_over)
        rc = put_one(out, m, lat_name, "overflow", 8, "overflow", 8, NULL, lat_over);
    if (rc == 0)
        rc = metrics_put_head(out, lag_name, "gauge",
                              "Messages not yet consumed in one queue, by topic, consumer group and queue id.");
    if (rc == 0)
        rc = buf_append(out, buf_head(&lag), buf_len(&lag));
out:
    buf_free(&lag);
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
