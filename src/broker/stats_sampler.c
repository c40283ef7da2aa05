/*
 * stats_sampler: see stats_sampler.h.
 */
#include "broker/stats_sampler.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/offset_table.h"
#include "core/err.h"
#include "core/hmap.h"
#include "core/smap.h"
#include "store/access.h"
#include "store/consumequeue.h"
#include "store/store.h"

/* 4.9.8's windows: samples kept, one every N base samples. */
#define NWIN 3
static const struct {
    int keep, every;
} WIN[NWIN] = { { 7, 1 }, { 7, 60 }, { 25, 360 } };

struct point {
    int64_t t, v;
};

struct item {
    uint64_t round;            /* the last sample that saw it */
    int64_t raw, base;         /* this sample's sums */
    struct point *w[NWIN];     /* oldest first, at most WIN[i].keep */
    uint8_t n[NWIN];
};

struct qbase {
    uint64_t round;
    int64_t base;
};

struct stats_sampler {
    struct store *st;
    struct offset_table *offs;
    struct smap *out;
    char *put_key, *get_key;   /* "BROKER_PUT_NUMS cluster", "BROKER_GET_NUMS cluster" */
    struct hmap items;         /* "NAME KEY" -> struct item */
    struct hmap queues;        /* "P" topic NUL qid | "G" topic@group NUL qid -> struct qbase */
    uint64_t round;
    uint64_t n;                /* samples taken */
    int64_t last;              /* the previous sample's time; 0: none */
};

static void
free_item(void *p)
{
    struct item *it = p;
    if (it != NULL)
        for (int i = 0; i < NWIN; i++)
            free(it->w[i]);
    free(it);
}

struct stats_sampler *
stats_sampler_new(struct store *st, struct offset_table *offs, struct smap *out,
                  const char *cluster)
{
    struct stats_sampler *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    size_t n = strlen(cluster) + sizeof("BROKER_PUT_NUMS ");
    s->put_key = malloc(n);
    s->get_key = malloc(n);
    if (s->put_key == NULL || s->get_key == NULL) {
        free(s->put_key);
        free(s->get_key);
        free(s);
        return NULL;
    }
    snprintf(s->put_key, n, "BROKER_PUT_NUMS %s", cluster);
    snprintf(s->get_key, n, "BROKER_GET_NUMS %s", cluster);
    hmap_init(&s->items, 64);
    hmap_init(&s->queues, 256);
    s->st = st;
    store_ref(st);
    s->offs = offs;
    s->out = out;
    return s;
}

void
stats_sampler_free(struct stats_sampler *s)
{
    if (s == NULL)
        return;
    hmap_free(&s->items, free_item);
    hmap_free(&s->queues, free);
    store_unref(s->st);
    free(s->put_key);
    free(s->get_key);
    free(s);
}

size_t
stats_sampler_items(const struct stats_sampler *s)
{
    return s->items.size;
}

size_t
stats_sampler_queues(const struct stats_sampler *s)
{
    return s->queues.size;
}

/* The item of key, made when new (seen after boot: it stood at 0 at the
 * previous sample, so what happened since counts in every window), its
 * sums reset on its first sight in this sample.  NULL on ENOMEM. */
static struct item *
item_of(struct stats_sampler *s, const char *key, size_t n, bool at_boot)
{
    uint64_t h = hmap_hash(key, n);
    struct hnode *node = hmap_find(&s->items, h, key, n);
    struct item *it = node != NULL ? node->val : NULL;
    if (it == NULL) {
        it = calloc(1, sizeof(*it));
        if (it == NULL)
            return NULL;
        if (!at_boot && s->last != 0) {
            for (int i = 0; i < NWIN; i++) {
                it->w[i] = malloc(sizeof(struct point) * (size_t)WIN[i].keep);
                if (it->w[i] == NULL) {
                    free_item(it);
                    return NULL;
                }
                it->w[i][0] = (struct point){ s->last, 0 };
                it->n[i] = 1;
            }
        }
        if (hmap_add(&s->items, h, key, n, it) == NULL) {
            free_item(it);
            return NULL;
        }
    }
    if (it->round != s->round) {
        it->round = s->round;
        it->raw = it->base = 0;
    }
    return it;
}

/* The base of one queue of an item ("P"/"G" prefix, name, qid), made
 * with `first` when new.  NULL on ENOMEM. */
static struct qbase *
qbase_of(struct stats_sampler *s, char kind, const char *name, size_t nlen, int32_t qid,
         int64_t first, bool *made)
{
    char key[1 + 512 + 1 + sizeof(qid)];
    if (nlen > 512)
        nlen = 512;   /* names are at most 127 + 1 + 255 bytes: never cut */
    key[0] = kind;
    memcpy(key + 1, name, nlen);
    key[1 + nlen] = '\0';
    memcpy(key + 2 + nlen, &qid, sizeof(qid));
    size_t n = 2 + nlen + sizeof(qid);
    uint64_t h = hmap_hash(key, n);
    struct hnode *node = hmap_find(&s->queues, h, key, n);
    *made = node == NULL;
    if (node != NULL) {
        struct qbase *q = node->val;
        q->round = s->round;
        return q;
    }
    struct qbase *q = malloc(sizeof(*q));
    if (q == NULL)
        return NULL;
    *q = (struct qbase){ s->round, first };
    if (hmap_add(&s->queues, h, key, n, q) == NULL) {
        free(q);
        return NULL;
    }
    return q;
}

struct walk {
    struct stats_sampler *s;
    bool at_boot;
    struct item *all;
    char key[600];
};

/* Under the queue table's read lock: sums and the sampler's own maps,
 * no other lock. */
static int
put_queue(struct cq *c, void *arg)
{
    struct walk *w = arg;
    struct stats_sampler *s = w->s;
    int64_t max = cq_max(c);
    int kn = snprintf(w->key, sizeof(w->key), "TOPIC_PUT_NUMS %.*s", (int)c->topic_len, c->topic);
    if (kn < 0 || (size_t)kn >= sizeof(w->key))
        return 0;   /* no topic name is that long */
    bool made;
    struct item *it = item_of(s, w->key, (size_t)kn, w->at_boot);
    struct qbase *q = it != NULL ? qbase_of(s, 'P', c->topic, c->topic_len, c->qid,
                                            w->at_boot ? max : 0, &made) : NULL;
    if (q == NULL)
        return -ENOMEM;
    it->raw += max;
    it->base += q->base;
    w->all->raw += max;
    w->all->base += q->base;
    return 0;
}

static struct offset_snapshot *
offsets_now(struct offset_table *t)
{
    size_t cap = offset_table_snapshot(t, NULL, 0);
    void *block = NULL;
    for (;;) {
        free(block);
        block = malloc(cap > 0 ? cap : 1);
        if (block == NULL)
            return NULL;
        size_t need = offset_table_snapshot(t, block, cap);
        if (need <= cap)
            return block;
        cap = need + need / 8;   /* it grew meanwhile */
    }
}

static int
got_offsets(struct stats_sampler *s, struct walk *w)
{
    struct offset_snapshot *snap = offsets_now(s->offs);
    if (snap == NULL)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < snap->count; i++) {
        const struct offset_item *oi = &snap->items[i];
        const char *at = memchr(oi->key, '@', oi->key_len);
        size_t tlen = at != NULL ? (size_t)(at - oi->key) : oi->key_len;
        int kn = snprintf(w->key, sizeof(w->key), "GROUP_GET_NUMS %.*s", (int)oi->key_len, oi->key);
        if (kn < 0 || (size_t)kn >= sizeof(w->key))
            continue;
        struct item *it = item_of(s, w->key, (size_t)kn, w->at_boot);
        if (it == NULL) {
            rc = -ENOMEM;
            break;
        }
        for (uint32_t qid = 0; qid < oi->n; qid++) {
            int64_t off = oi->offs[qid];
            if (off < 0)
                continue;
            bool made;
            struct qbase *q = qbase_of(s, 'G', oi->key, oi->key_len, (int32_t)qid, off, &made);
            if (q == NULL) {
                rc = -ENOMEM;
                break;
            }
            if (made && !w->at_boot) {
                /* Seen after boot: from the first message still stored. */
                int64_t min = store_min_offset(s->st, oi->key, tlen, (int32_t)qid);
                q->base = min > 0 ? min : 0;
            }
            it->raw += off;
            it->base += q->base;
            w->all->raw += off;
            w->all->base += q->base;
        }
    }
    free(snap);
    return rc;
}

static int
add_point(struct item *it, int win, int64_t t, int64_t v)
{
    int keep = WIN[win].keep;
    if (it->w[win] == NULL) {
        it->w[win] = malloc(sizeof(struct point) * (size_t)keep);
        if (it->w[win] == NULL)
            return -ENOMEM;
        it->n[win] = 0;
    }
    if (it->n[win] == keep) {
        memmove(it->w[win], it->w[win] + 1, sizeof(struct point) * (size_t)(keep - 1));
        it->n[win]--;
    }
    it->w[win][it->n[win]++] = (struct point){ t, v };
    return 0;
}

/* "BASE FIRST FIRST FIRST" under the item's key. */
static int
publish(struct stats_sampler *s, const char *key, size_t klen, const struct item *it)
{
    char val[256];
    int n = snprintf(val, sizeof(val), "%" PRId64, it->base);
    for (int i = 0; i < NWIN && n > 0 && (size_t)n < sizeof(val); i++) {
        if (it->n[i] > 0)
            n += snprintf(val + n, sizeof(val) - (size_t)n, " %" PRId64 ",%" PRId64,
                          it->w[i][0].t, it->w[i][0].v);
        else
            n += snprintf(val + n, sizeof(val) - (size_t)n, " -");
    }
    if (n < 0 || (size_t)n >= sizeof(val))
        return 0;   /* cannot happen: four numbers */
    return smap_set(s->out, key, klen, val, (size_t)n, 0);
}

int
stats_sampler_sample(struct stats_sampler *s, int64_t now_ms, bool at_boot)
{
    s->round++;
    struct walk w = { .s = s, .at_boot = at_boot };
    struct item *bput = item_of(s, s->put_key, strlen(s->put_key), at_boot);
    struct item *bget = item_of(s, s->get_key, strlen(s->get_key), at_boot);
    if (bput == NULL || bget == NULL) {
        err_set("out of memory sampling the broker's statistics");
        return -ENOMEM;
    }
    w.all = bput;
    int rc = cqt_foreach(&s->st->cqs, put_queue, &w);
    if (rc == 0) {
        w.all = bget;
        rc = got_offsets(s, &w);
    }
    if (rc != 0) {
        err_set("out of memory sampling the broker's statistics");
        return -ENOMEM;
    }
    /* Every item seen now takes its sample; the others (a deleted topic,
     * removed offsets) are gone. */
    struct hiter hi;
    hmap_iter_init(&hi, &s->items);
    bool removed = false;
    for (struct hnode *node; (node = hmap_iter_next(&hi)) != NULL;) {
        struct item *it = node->val;
        if (it->round != s->round) {
            smap_del(s->out, node->key, node->klen);
            hmap_remove_node(&s->items, node);
            free_item(it);
            removed = true;
            continue;
        }
        int64_t v = it->raw - it->base;
        for (int i = 0; i < NWIN && rc == 0; i++)
            if (s->n % (uint64_t)WIN[i].every == 0)
                rc = add_point(it, i, now_ms, v);
        if (rc == 0)
            rc = publish(s, node->key, node->klen, it);
        if (rc != 0)
            break;
    }
    if (removed)
        hmap_compact(&s->items);
    /* Bases of queues no longer there. */
    removed = false;
    hmap_iter_init(&hi, &s->queues);
    for (struct hnode *node; (node = hmap_iter_next(&hi)) != NULL;) {
        struct qbase *q = node->val;
        if (q->round != s->round) {
            hmap_remove_node(&s->queues, node);
            free(q);
            removed = true;
        }
    }
    if (removed)
        hmap_compact(&s->queues);
    if (rc != 0) {
        err_set("out of memory sampling the broker's statistics");
        return -ENOMEM;
    }
    char t[24];
    int tn = snprintf(t, sizeof(t), "%" PRId64, now_ms);
    (void)smap_set(s->out, "@sampled", 8, t, (size_t)tn, 0);
    s->n++;
    s->last = now_ms;
    return 0;
}
