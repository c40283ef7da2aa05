/*
 * txdata: see txdata.h.  Entries are on two lists: the table's, in order
 * of addition (= of expiry), and their key's, oldest first.
 */
#include "grpc/txdata.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/hmap.h"
#include "core/queue.h"

/* Longest key: a topic (127 bytes at most on the wire, more refused
 * before) and a transaction id rmq issued ("32 hex digits@offset"); a
 * longer one is nothing this table added, so never found. */
#define KEY_MAX 512

struct txkey {
    struct hnode *node;          /* in t->keys */
    struct qnode entries;        /* struct txent, oldest first */
    uint32_t n;
};

struct txent {
    struct qnode all;            /* in t->all */
    struct qnode mine;           /* in its key's entries */
    struct txkey *key;
    uint64_t expire_ms;
};

struct txdata {
    struct txdata_conf conf;
    pthread_mutex_t lock;        /* everything below */
    struct hmap keys;            /* "topic@tid" -> struct txkey */
    struct qnode all;            /* every entry, oldest first */
    size_t n;
};

struct txdata *
txdata_new(const struct txdata_conf *conf)
{
    struct txdata *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        err_set("out of memory for the proxy's transaction table");
        return NULL;
    }
    if (pthread_mutex_init(&t->lock, NULL) != 0) {
        free(t);
        err_set("cannot make the proxy's transaction table's lock");
        return NULL;
    }
    t->conf = *conf;
    if (t->conf.per_key_max == 0)
        t->conf.per_key_max = 1;
    if (t->conf.max_total == 0)
        t->conf.max_total = 1;
    hmap_init(&t->keys, 16);
    q_init(&t->all);
    return t;
}

static int
make_key(char *out, const char *topic, const char *tid)
{
    size_t a = strlen(topic), b = strlen(tid);
    if (a + 1 + b >= KEY_MAX)
        return -1;
    memcpy(out, topic, a);
    out[a] = '@';
    memcpy(out + a + 1, tid, b + 1);
    return (int)(a + 1 + b);
}

/* Drops one entry (and its key with its last one). */
static void
ent_drop(struct txdata *t, struct txent *e)
{
    struct txkey *k = e->key;
    q_remove(&e->all);
    q_remove(&e->mine);
    free(e);
    t->n--;
    if (--k->n == 0) {
        hmap_remove_node(&t->keys, k->node);
        free(k);
    }
}

/* The expired entries, oldest first: the list is in order of expiry. */
static void
sweep(struct txdata *t, uint64_t now_ms)
{
    bool removed = false;
    while (!q_empty(&t->all)) {
        struct txent *e = container_of(t->all.next, struct txent, all);
        if (e->expire_ms >= now_ms)
            break;
        ent_drop(t, e);
        removed = true;
    }
    if (removed)
        hmap_compact(&t->keys);
}

static int
add_locked(struct txdata *t, const char *key, int kl, uint64_t now_ms)
{
    sweep(t, now_ms);
    if (t->n >= t->conf.max_total)
        ent_drop(t, container_of(t->all.next, struct txent, all));
    uint64_t h = hmap_hash(key, (size_t)kl);
    struct hnode *node = hmap_find(&t->keys, h, key, (size_t)kl);
    struct txkey *k = node != NULL ? node->val : NULL;
    if (k != NULL && k->n >= t->conf.per_key_max)
        ent_drop(t, container_of(k->entries.next, struct txent, mine));   /* 5.x: pollFirst */
    /* The key may have gone with its last entry just now. */
    node = hmap_find(&t->keys, h, key, (size_t)kl);
    k = node != NULL ? node->val : NULL;
    struct txent *e = malloc(sizeof(*e));
    if (e == NULL)
        return -1;
    if (k == NULL) {
        k = calloc(1, sizeof(*k));
        if (k == NULL) {
            free(e);
            return -1;
        }
        q_init(&k->entries);
        k->node = hmap_add(&t->keys, h, key, (size_t)kl, k);
        if (k->node == NULL) {
            free(k);
            free(e);
            return -1;
        }
    }
    e->key = k;
    e->expire_ms = now_ms + t->conf.expire_ms;
    /* Workers read their clocks before the lock: a later one may come
     * first.  The list stays in expiry order (sweep stops at the first
     * live entry); this one lives those few ms longer. */
    if (!q_empty(&t->all)) {
        const struct txent *last = container_of(t->all.prev, struct txent, all);
        if (last->expire_ms > e->expire_ms)
            e->expire_ms = last->expire_ms;
    }
    q_insert_tail(&t->all, &e->all);
    q_insert_tail(&k->entries, &e->mine);
    k->n++;
    t->n++;
    return 0;
}

int
txdata_add(struct txdata *t, const char *topic, const char *tid, uint64_t now_ms)
{
    char key[KEY_MAX];
    int kl = make_key(key, topic, tid);
    if (kl < 0)
        return 0;   /* never looked up either: its end is refused as unknown */
    if (pthread_mutex_lock(&t->lock) != 0)
        return -1;
    int rc = add_locked(t, key, kl, now_ms);
    (void)pthread_mutex_unlock(&t->lock);
    return rc;
}

bool
txdata_take(struct txdata *t, const char *topic, const char *tid, uint64_t now_ms)
{
    char key[KEY_MAX];
    int kl = make_key(key, topic, tid);
    if (kl < 0 || pthread_mutex_lock(&t->lock) != 0)
        return false;
    sweep(t, now_ms);
    struct txkey *k = hmap_get(&t->keys, key, (size_t)kl);
    bool had = k != NULL;
    if (had)   /* the newest (5.x: pollLast); the sweep left no expired one */
        ent_drop(t, container_of(k->entries.prev, struct txent, mine));
    (void)pthread_mutex_unlock(&t->lock);
    return had;
}

size_t
txdata_count(struct txdata *t)
{
    if (pthread_mutex_lock(&t->lock) != 0)
        return 0;
    size_t n = t->n;
    (void)pthread_mutex_unlock(&t->lock);
    return n;
}

static void
free_key(void *p)
{
    struct txkey *k = p;
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &k->entries)
        free(container_of(pos, struct txent, mine));
    free(k);
}

void
txdata_free(struct txdata *t)
{
    if (t == NULL)
        return;
    hmap_free(&t->keys, free_key);
    (void)pthread_mutex_destroy(&t->lock);
    free(t);
}
