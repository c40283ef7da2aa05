/*
 * client_registry: see client_registry.h.
 *
 * Structures:
 *
 *   reg->groups[kind]   hmap name -> struct group (its name is the
 *                       node's key, stable while the group is listed)
 *   group->subs         hmap topic -> struct sub (consumers only)
 *   group->chans        array of struct chan *, sorted by connection id
 *   reg->conns          hmap connection id -> struct cconn, whose array
 *                       lists the connection's channels in every group;
 *                       each channel knows its slot there, so leaving a
 *                       group is O(log channels + 1), not O(groups)
 *
 * A channel is one allocation (the struct and its three strings).
 */
#include "broker/client_registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/hmap.h"

/* {{{ Structures */

struct cconn;
struct group;

struct chan {
    struct group *g;
    struct cconn *conn;
    uint32_t conn_slot;        /* index in conn->chans */
    int32_t version;
    uint64_t conn_id;
    int64_t last_update;       /* atomic: a repeat heartbeat stores it
                                * under the read lock */
    uint32_t cid_len, lang_len, addr_len;
    char *client_id, *language, *addr;   /* into data, NUL-terminated */
    char data[];
};

struct sub_tag {
    const char *p;
    uint32_t len;
};

struct sub {
    int64_t sub_version;
    uint64_t stamp;            /* the last update that listed it */
    uint32_t topic_len, ss_len, et_len, ntags;
    bool class_filter_mode;
    const char *topic, *sub_string, *expression_type;
    struct sub_tag *tags;
    int32_t *codes;
    _Alignas(8) char data[];
};

struct group {
    const char *name;          /* the hmap node's key */
    uint32_t name_len;
    int8_t kind;               /* enum creg_kind */
    int8_t consume_type, message_model, consume_from_where;
    bool unit_mode;
    struct hmap subs;
    struct chan **chans;
    uint32_t nchans, cap;
    uint64_t gen;              /* moves when settings or subscriptions do */
    uint64_t hb_seq;           /* the last heartbeat that listed it */
    int32_t fingerprint;       /* 5.x heartbeat v2: of the last full heartbeat */
    bool has_fingerprint;      /* ... once a full heartbeat listed it */
    uint32_t hb_idx;           /* ... at this entry */
    bool lost;                 /* scan: lost a channel in this pass */
};

struct cconn {
    uint64_t id;
    struct chan **chans;
    uint32_t n, cap;
};

struct creg {
    pthread_rwlock_t lock;
    struct hmap groups[2];
    struct hmap conns;
    struct creg_limits lim;
    uint64_t seq;              /* heartbeats applied */
    uint64_t stamp;            /* subscription updates */
    uint64_t gen;              /* group generations handed out */
    uint64_t nchans, nsubs;
};

#define GROUPS_CAP 1024        /* ConsumerManager's consumerTable(1024) */
#define CONNS_CAP 64
#define SUBS_CAP 8

/* }}} */

/* {{{ Locks */

static void
rdlock(struct creg *reg)
{
    if (pthread_rwlock_rdlock(&reg->lock) != 0)
        abort();
}

static void
wrlock(struct creg *reg)
{
    if (pthread_rwlock_wrlock(&reg->lock) != 0)
        abort();
}

static void
unlock(struct creg *reg)
{
    if (pthread_rwlock_unlock(&reg->lock) != 0)
        abort();
}

/* }}} */

/* {{{ Record writers (sticky error) */

struct w {
    struct buf *b;
    int err;
};

static void
w_raw(struct w *w, const void *p, size_t n)
{
    if (w->err == 0 && buf_append(w->b, p, n) != 0)
        w->err = -ENOMEM;
}

#define W_INT(name, type)                      \
    static void                                \
    w_##name(struct w *w, type v)              \
    {                                          \
        w_raw(w, &v, sizeof(v));               \
    }
W_INT(u8, uint8_t)
W_INT(i8, int8_t)
W_INT(u32, uint32_t)
W_INT(i32, int32_t)
W_INT(u64, uint64_t)
W_INT(i64, int64_t)
#undef W_INT

static void
w_str(struct w *w, const char *s, size_t n)
{
    w_u32(w, (uint32_t)n);
    if (n > 0)
        w_raw(w, s, n);
}

/* }}} */

/* {{{ Life cycle */

void
creg_limits_default(struct creg_limits *lim)
{
    lim->max_consumer_groups = 100000;
    lim->max_producer_groups = 100000;
    lim->max_subscriptions = 10000;
    lim->max_channels = 10000;
}

struct creg *
creg_new(void)
{
    struct creg *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return NULL;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* A heartbeat must not wait behind an endless stream of PULLs. */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&reg->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        free(reg);
        return NULL;
    }
    hmap_init(&reg->groups[CREG_CONSUMER], GROUPS_CAP);
    hmap_init(&reg->groups[CREG_PRODUCER], GROUPS_CAP);
    hmap_init(&reg->conns, CONNS_CAP);
    creg_limits_default(&reg->lim);
    return reg;
}

static void
free_group(void *p)
{
    struct group *g = p;
    if (g == NULL)
        return;
    for (uint32_t i = 0; i < g->nchans; i++)
        free(g->chans[i]);
    free(g->chans);
    hmap_free(&g->subs, free);
    free(g);
}

static void
free_conn(void *p)
{
    struct cconn *c = p;
    if (c == NULL)
        return;
    free(c->chans);
    free(c);
}

static void
clear_locked(struct creg *reg)
{
    for (int k = 0; k < 2; k++)
        hmap_free(&reg->groups[k], free_group);
    hmap_free(&reg->conns, free_conn);
    reg->nchans = reg->nsubs = 0;
}

void
creg_free(struct creg *reg)
{
    if (reg == NULL)
        return;
    clear_locked(reg);
    pthread_rwlock_destroy(&reg->lock);
    free(reg);
}

void
creg_clear(struct creg *reg)
{
    wrlock(reg);
    clear_locked(reg);
    unlock(reg);
}

static struct creg *shared_reg;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void
shared_init(void)
{
    shared_reg = creg_new();
}

struct creg *
creg_shared(void)
{
    if (pthread_once(&shared_once, shared_init) != 0)
        return NULL;
    return shared_reg;
}

void
creg_set_limits(struct creg *reg, const struct creg_limits *lim)
{
    wrlock(reg);
    reg->lim = *lim;
    if (reg->lim.max_channels == 0)
        reg->lim.max_channels = 1;
    unlock(reg);
}

void
creg_get_limits(struct creg *reg, struct creg_limits *lim)
{
    rdlock(reg);
    *lim = reg->lim;
    unlock(reg);
}

void
creg_parse_limits(struct creg *reg, struct hb_limits *lim)
{
    struct creg_limits l;
    creg_get_limits(reg, &l);
    hb_limits_default(lim);
    lim->max_consumers = l.max_consumer_groups;
    lim->max_producers = l.max_producer_groups;
    lim->max_subs = l.max_subscriptions;
}

/* }}} */

/* {{{ Groups and channels */

static inline int64_t
get_last(const struct chan *ch)
{
    return __atomic_load_n(&ch->last_update, __ATOMIC_RELAXED);
}

static inline void
set_last(struct chan *ch, int64_t v)
{
    __atomic_store_n(&ch->last_update, v, __ATOMIC_RELAXED);
}

static struct group *
group_get(struct creg *reg, enum creg_kind kind, const char *name, size_t n)
{
    return hmap_get(&reg->groups[kind], name, n);
}

static struct group *
group_add(struct creg *reg, enum creg_kind kind, const char *name, size_t n)
{
    struct group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->kind = (int8_t)kind;
    g->consume_type = g->message_model = g->consume_from_where = -1;
    hmap_init(&g->subs, SUBS_CAP);
    struct hnode *node = hmap_add(&reg->groups[kind], hmap_hash(name, n), name, n, g);
    if (node == NULL) {
        free(g);
        return NULL;
    }
    g->name = node->key;
    g->name_len = node->klen;
    return g;
}

/* The index of conn in g->chans, or where it would go (*found false). */
static uint32_t
chan_find(const struct group *g, uint64_t conn, bool *found)
{
    uint32_t lo = 0, hi = g->nchans;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t id = g->chans[mid]->conn_id;
        if (id == conn) {
            *found = true;
            return mid;
        }
        if (id < conn)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static int
grow(void *pp, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 4;
    while (c < need)
        c *= 2;
    void *p = realloc(*(void **)pp, (size_t)c * elem);
    if (p == NULL)
        return -ENOMEM;
    *(void **)pp = p;
    *cap = c;
    return 0;
}

/* A channel's block with its strings (not linked anywhere). */
static struct chan *
chan_make(const char *cid, size_t cl, const char *lang, size_t ll,
          const char *addr, size_t al)
{
    struct chan *ch = malloc(sizeof(*ch) + cl + ll + al + 3);
    if (ch == NULL)
        return NULL;
    memset(ch, 0, sizeof(*ch));
    char *d = ch->data;
    ch->client_id = d;
    memcpy(d, cid, cl);
    d[cl] = '\0';
    d += cl + 1;
    ch->language = d;
    memcpy(d, lang, ll);
    d[ll] = '\0';
    d += ll + 1;
    ch->addr = d;
    memcpy(d, addr, al);
    d[al] = '\0';
    ch->cid_len = (uint32_t)cl;
    ch->lang_len = (uint32_t)ll;
    ch->addr_len = (uint32_t)al;
    return ch;
}

static bool
chan_same(const struct chan *ch, const char *cid, size_t cl, const char *lang,
          size_t ll, const char *addr, size_t al)
{
    return ch->cid_len == cl && ch->lang_len == ll && ch->addr_len == al &&
           memcmp(ch->client_id, cid, cl) == 0 &&
           memcmp(ch->language, lang, ll) == 0 &&
           memcmp(ch->addr, addr, al) == 0;
}

/* Removes channel idx of g (and g itself when it was the last). */
static void
chan_remove(struct creg *reg, struct group *g, uint32_t idx)
{
    struct chan *ch = g->chans[idx];
    memmove(g->chans + idx, g->chans + idx + 1,
            (size_t)(g->nchans - idx - 1) * sizeof(*g->chans));
    g->nchans--;
    struct cconn *c = ch->conn;
    struct chan *last = c->chans[c->n - 1];
    c->chans[ch->conn_slot] = last;
    last->conn_slot = ch->conn_slot;
    c->n--;
    if (c->n == 0) {
        hmap_remove(&reg->conns, &c->id, sizeof(c->id), NULL);
        free_conn(c);
    }
    free(ch);
    reg->nchans--;
    if (g->nchans == 0) {
        reg->nsubs -= g->subs.size;
        hmap_remove(&reg->groups[g->kind], g->name, g->name_len, NULL);
        free_group(g);
    }
}

/* Shrinks the tables after removals (never during an iteration). */
static void
compact(struct creg *reg)
{
    hmap_compact(&reg->groups[CREG_CONSUMER]);
    hmap_compact(&reg->groups[CREG_PRODUCER]);
    hmap_compact(&reg->conns);
}

/*
 * The connection's channel in g: added (1), or refreshed (0); -ENOMEM.
 */
static int
chan_upsert(struct creg *reg, struct group *g, uint64_t conn,
            const struct hb_str *cid, const struct creg_client *cl,
            size_t ll, size_t al)
{
    const char *lang = cl->language ? cl->language : "";
    const char *addr = cl->addr ? cl->addr : "";
    const char *cidp = cid->p ? cid->p : "";
    bool found;
    uint32_t idx = chan_find(g, conn, &found);
    if (found) {
        struct chan *ch = g->chans[idx];
        if (!chan_same(ch, cidp, cid->len, lang, ll, addr, al)) {
            /* Java: "[BUG] consumer channel exist in broker, but
             * clientId not equal": the new info replaces the old. */
            struct chan *n = chan_make(cidp, cid->len, lang, ll, addr, al);
            if (n == NULL)
                return -ENOMEM;
            n->g = ch->g;
            n->conn = ch->conn;
            n->conn_slot = ch->conn_slot;
            n->conn_id = ch->conn_id;
            n->conn->chans[n->conn_slot] = n;
            g->chans[idx] = n;
            free(ch);
            ch = n;
        }
        ch->version = cl->version;
        set_last(ch, cl->now);
        return 0;
    }
    struct cconn *c = hmap_get(&reg->conns, &conn, sizeof(conn));
    bool new_conn = c == NULL;
    if (new_conn) {
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            return -ENOMEM;
        c->id = conn;
    }
    struct chan *ch = chan_make(cidp, cid->len, lang, ll, addr, al);
    if (ch == NULL || grow(&g->chans, &g->cap, g->nchans + 1, sizeof(*g->chans)) != 0 ||
        grow(&c->chans, &c->cap, c->n + 1, sizeof(*c->chans)) != 0 ||
        (new_conn && hmap_add(&reg->conns, hmap_hash(&conn, sizeof(conn)), &conn,
                              sizeof(conn), c) == NULL)) {
        free(ch);
        if (new_conn)
            free_conn(c);
        return -ENOMEM;
    }
    ch->g = g;
    ch->conn = c;
    ch->conn_id = conn;
    ch->version = cl->version;
    set_last(ch, cl->now);
    ch->conn_slot = c->n;
    c->chans[c->n++] = ch;
    memmove(g->chans + idx + 1, g->chans + idx,
            (size_t)(g->nchans - idx) * sizeof(*g->chans));
    g->chans[idx] = ch;
    g->nchans++;
    reg->nchans++;
    return 1;
}

/* }}} */

/* {{{ Subscriptions */

static struct sub *
sub_make(const struct hb_sub *s)
{
    struct hb_norm nm;
    if (hb_normalize(s, &nm) != 0)
        return NULL;
    size_t tagbytes = 0;
    for (uint32_t i = 0; i < nm.ntags; i++)
        tagbytes += nm.tags[i].len + 1;
    size_t bytes = sizeof(struct sub) +
                   (size_t)nm.ntags * (sizeof(struct sub_tag) + sizeof(int32_t)) +
                   s->topic.len + 1 + nm.sub_string.len + 1 +
                   nm.expression_type.len + 1 + tagbytes;
    struct sub *sub = malloc(bytes);
    if (sub == NULL) {
        hb_norm_free(&nm);
        return NULL;
    }
    memset(sub, 0, sizeof(*sub));
    char *d = sub->data;
    sub->tags = (struct sub_tag *)d;
    d += (size_t)nm.ntags * sizeof(struct sub_tag);
    sub->codes = (int32_t *)d;
    d += (size_t)nm.ntags * sizeof(int32_t);
#define PUT(field, lenfield, p_, n_)   \
    do {                               \
        sub->field = d;                \
        sub->lenfield = (n_);          \
        memcpy(d, (p_), (n_));         \
        d[(n_)] = '\0';                \
        d += (n_) + 1;                 \
    } while (0)
    PUT(topic, topic_len, s->topic.p, s->topic.len);
    PUT(sub_string, ss_len, nm.sub_string.p, nm.sub_string.len);
    PUT(expression_type, et_len, nm.expression_type.p, nm.expression_type.len);
#undef PUT
    for (uint32_t i = 0; i < nm.ntags; i++) {
        sub->tags[i].p = d;
        sub->tags[i].len = nm.tags[i].len;
        memcpy(d, nm.tags[i].p, nm.tags[i].len);
        d[nm.tags[i].len] = '\0';
        d += nm.tags[i].len + 1;
        sub->codes[i] = nm.codes[i];
    }
    sub->ntags = nm.ntags;
    sub->sub_version = s->sub_version;
    sub->class_filter_mode = s->class_filter_mode;
    hb_norm_free(&nm);
    return sub;
}

/* ConsumerGroupInfo.updateSubscription.  1 when the topic set changed,
 * 0, or -ENOMEM. */
static int
update_subs(struct creg *reg, struct group *g, const struct hb_consumer *cd)
{
    uint64_t stamp = ++reg->stamp;
    int changed = 0;
    uint32_t listed = 0;   /* distinct topics of the list */
    for (uint32_t i = 0; i < cd->nsubs; i++) {
        const struct hb_sub *s = &cd->subs[i];
        uint64_t h = hmap_hash(s->topic.p, s->topic.len);
        struct hnode *node = hmap_find(&g->subs, h, s->topic.p, s->topic.len);
        struct sub *old = node ? node->val : NULL;
        if (old != NULL && old->stamp != stamp)
            listed++;
        if (old != NULL && s->sub_version <= old->sub_version) {
            old->stamp = stamp;
            continue;
        }
        struct sub *n = sub_make(s);
        if (n == NULL)
            return -ENOMEM;
        n->stamp = stamp;
        g->gen = ++reg->gen;
        if (old != NULL) {
            node->val = n;     /* a newer subVersion: replaced in place */
            free(old);
            continue;
        }
        if (hmap_add(&g->subs, h, s->topic.p, s->topic.len, n) == NULL) {
            free(n);
            return -ENOMEM;
        }
        reg->nsubs++;
        listed++;
        changed = 1;
    }
    if (g->subs.size == listed)
        return changed;   /* every topic was listed */
    struct hiter it;
    hmap_iter_init(&it, &g->subs);
    for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;) {
        struct sub *s = node->val;
        if (s->stamp != stamp) {
            hmap_remove_node(&g->subs, node);
            free(s);
            reg->nsubs--;
            changed = 1;
            g->gen = ++reg->gen;
        }
    }
    hmap_compact(&g->subs);
    return changed;
}

/* }}} */

/* {{{ Heartbeat */

int
creg_hb_result_init(struct creg_hb_result *res, const struct heartbeat *hb)
{
    memset(res, 0, sizeof(*res));
    buf_init(&res->conns);
    res->cflags = calloc(hb->nconsumers + hb->nproducers + 1, 1);
    if (res->cflags == NULL)
        return -ENOMEM;
    res->pflags = res->cflags + hb->nconsumers;
    return 0;
}

void
creg_hb_result_free(struct creg_hb_result *res)
{
    free(res->cflags);
    res->cflags = res->pflags = NULL;
    buf_free(&res->conns);
}

static void
show(const struct hb_str *s, char *out, size_t cap)
{
    size_t n = s->len < cap - 1 ? s->len : cap - 1;
    memcpy(out, s->p, n);
    out[n] = '\0';
}

/* Refuses a heartbeat past a limit (checked before anything changes). */
static int
check_limits(struct creg *reg, uint64_t conn, const struct heartbeat *hb)
{
    const struct creg_limits *lim = &reg->lim;
    char name[HB_GROUP_MAX_LEN + 1];
    uint64_t fresh = 0;
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        const struct hb_consumer *cd = &hb->consumers[i];
        if (cd->nsubs > lim->max_subscriptions) {
            show(&cd->group, name, sizeof(name));
            err_set("consumerDataSet[%u] (group %s) lists %u subscriptions, more than "
                    "clientMaxSubscriptionsPerGroup (%u)", i, name, cd->nsubs,
                    lim->max_subscriptions);
            return -RMQ_ETOOBIG;
        }
        struct group *g = group_get(reg, CREG_CONSUMER, cd->group.p, cd->group.len);
        if (g == NULL) {
            fresh++;   /* a group listed twice counts twice: a bound, not a count */
            continue;
        }
        bool found;
        chan_find(g, conn, &found);
        if (!found && g->nchans >= lim->max_channels) {
            show(&cd->group, name, sizeof(name));
            err_set("consumer group %s has %u channels already, "
                    "clientMaxChannelsPerGroup (%u)", name, g->nchans, lim->max_channels);
            return -RMQ_ETOOBIG;
        }
    }
    if (reg->groups[CREG_CONSUMER].size + fresh > lim->max_consumer_groups) {
        err_set("the heartbeat adds up to %llu consumer groups to %u, more than "
                "clientMaxConsumerGroups (%u)", (unsigned long long)fresh,
                reg->groups[CREG_CONSUMER].size, lim->max_consumer_groups);
        return -RMQ_ETOOBIG;
    }
    fresh = 0;
    for (uint32_t i = 0; i < hb->nproducers; i++) {
        const struct hb_producer *pd = &hb->producers[i];
        struct group *g = group_get(reg, CREG_PRODUCER, pd->group.p, pd->group.len);
        if (g == NULL) {
            fresh++;
            continue;
        }
        bool found;
        chan_find(g, conn, &found);
        if (!found && g->nchans >= lim->max_channels) {
            show(&pd->group, name, sizeof(name));
            err_set("producer group %s has %u channels already, "
                    "clientMaxChannelsPerGroup (%u)", name, g->nchans, lim->max_channels);
            return -RMQ_ETOOBIG;
        }
    }
    if (reg->groups[CREG_PRODUCER].size + fresh > lim->max_producer_groups) {
        err_set("the heartbeat adds up to %llu producer groups to %u, more than "
                "clientMaxProducerGroups (%u)", (unsigned long long)fresh,
                reg->groups[CREG_PRODUCER].size, lim->max_producer_groups);
        return -RMQ_ETOOBIG;
    }
    return 0;
}

static int
apply(struct creg *reg, uint64_t conn, const struct heartbeat *hb,
      const struct creg_client *cl, struct creg_hb_result *res)
{
    uint64_t seq = ++reg->seq;
    size_t ll = cl->language ? strlen(cl->language) : 0;
    size_t al = cl->addr ? strlen(cl->addr) : 0;
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        const struct hb_consumer *cd = &hb->consumers[i];
        struct group *g = group_get(reg, CREG_CONSUMER, cd->group.p, cd->group.len);
        if (g == NULL) {
            g = group_add(reg, CREG_CONSUMER, cd->group.p, cd->group.len);
            if (g == NULL)
                return -ENOMEM;
            g->hb_seq = seq;
            g->hb_idx = i;
            res->cflags[i] |= CREG_NEW;
            res->nnew++;
        } else if (g->hb_seq != seq) {
            g->hb_seq = seq;
            g->hb_idx = i;
        }
        int8_t ct = cd->consume_type >= 0 ? cd->consume_type : g->consume_type;
        int8_t mm = cd->message_model >= 0 ? cd->message_model : g->message_model;
        int8_t cf = cd->consume_from_where >= 0 ? cd->consume_from_where : g->consume_from_where;
        if (g->gen == 0 || ct != g->consume_type || mm != g->message_model ||
            cf != g->consume_from_where || cd->unit_mode != g->unit_mode) {
            g->consume_type = ct;
            g->message_model = mm;
            g->consume_from_where = cf;
            g->unit_mode = cd->unit_mode;
            g->gen = ++reg->gen;
        }
        int joined = chan_upsert(reg, g, conn, &hb->client_id, cl, ll, al);
        if (joined < 0)
            return joined;
        /* 5.x heartbeat v2 (ClientManageProcessor.heartBeatV2): a heartbeat
         * without subscriptions keeps the group's; it is a change of
         * subscriptions (the client then sends them) when its fingerprint
         * is not the one of the group's last full heartbeat -- also when
         * there was none (5.x says "unchanged" then, and a broker that
         * restarted would never get the subscriptions back). */
        int resub = 0;
        if (hb->without_sub) {
            if (!g->has_fingerprint || g->fingerprint != hb->fingerprint)
                res->sub_change = true;
        } else {
            if (hb->fingerprint != 0 && g->has_fingerprint && g->fingerprint != hb->fingerprint)
                res->sub_change = true;
            g->fingerprint = hb->fingerprint;
            g->has_fingerprint = true;
            resub = update_subs(reg, g, cd);
        }
        if (resub < 0)
            return resub;
        if ((joined || resub) && !(res->cflags[g->hb_idx] & CREG_CHANGED)) {
            res->cflags[g->hb_idx] |= CREG_CHANGED;
            res->nchanged++;
        }
    }
    for (uint32_t i = 0; i < hb->nproducers; i++) {
        const struct hb_producer *pd = &hb->producers[i];
        struct group *g = group_get(reg, CREG_PRODUCER, pd->group.p, pd->group.len);
        if (g == NULL) {
            g = group_add(reg, CREG_PRODUCER, pd->group.p, pd->group.len);
            if (g == NULL)
                return -ENOMEM;
            res->pflags[i] |= CREG_NEW;
            res->nnew_producers++;
        }
        int rc = chan_upsert(reg, g, conn, &hb->client_id, cl, ll, al);
        if (rc < 0)
            return rc;
    }
    /* The members of every changed group, for the notification. */
    struct w w = { &res->conns, 0 };
    for (uint32_t i = 0; i < hb->nconsumers && res->nchanged > 0; i++) {
        if (!(res->cflags[i] & CREG_CHANGED))
            continue;
        const struct hb_consumer *cd = &hb->consumers[i];
        struct group *g = group_get(reg, CREG_CONSUMER, cd->group.p, cd->group.len);
        uint32_t n = g ? g->nchans : 0;
        w_u32(&w, n);
        for (uint32_t k = 0; k < n; k++)
            w_u64(&w, g->chans[k]->conn_id);
    }
    return w.err;
}

/*
 * A repeat heartbeat (the usual one: every 30 s from every client) that
 * would change nothing but lastUpdate.  Read lock only: PULLs on other
 * workers do not wait behind it.  Conservative: false sends the
 * heartbeat down the writing path, which decides exactly.
 */
static bool
chan_unchanged(const struct group *g, uint64_t conn, const struct hb_str *cid,
               const struct creg_client *cl, size_t ll, size_t al)
{
    bool found;
    uint32_t idx = chan_find(g, conn, &found);
    if (!found)
        return false;
    const struct chan *ch = g->chans[idx];
    return ch->version == cl->version &&
           chan_same(ch, cid->p ? cid->p : "", cid->len, cl->language ? cl->language : "", ll,
                     cl->addr ? cl->addr : "", al);
}

static bool
subs_unchanged(const struct group *g, const struct hb_consumer *cd)
{
    if (cd->nsubs != g->subs.size || cd->nsubs > 16)
        return false;
    for (uint32_t i = 0; i < cd->nsubs; i++) {
        const struct hb_sub *s = &cd->subs[i];
        const struct sub *old = hmap_get(&g->subs, s->topic.p, s->topic.len);
        if (old == NULL || s->sub_version > old->sub_version)
            return false;
        /* A topic listed twice leaves another one out: it would go. */
        for (uint32_t k = 0; k < i; k++)
            if (cd->subs[k].topic.len == s->topic.len &&
                memcmp(cd->subs[k].topic.p, s->topic.p, s->topic.len) == 0)
                return false;
    }
    return true;
}

static bool
unchanged(struct creg *reg, uint64_t conn, const struct heartbeat *hb,
          const struct creg_client *cl, size_t ll, size_t al)
{
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        const struct hb_consumer *cd = &hb->consumers[i];
        const struct group *g = group_get(reg, CREG_CONSUMER, cd->group.p, cd->group.len);
        if (g == NULL || !chan_unchanged(g, conn, &hb->client_id, cl, ll, al) ||
            (cd->consume_type >= 0 && cd->consume_type != g->consume_type) ||
            (cd->message_model >= 0 && cd->message_model != g->message_model) ||
            (cd->consume_from_where >= 0 && cd->consume_from_where != g->consume_from_where) ||
            cd->unit_mode != g->unit_mode)
            return false;
        /* v2: the fingerprint must be the group's (the writing path
         * stores a new one, or answers a change of subscriptions). */
        if ((hb->fingerprint != 0 || hb->without_sub) &&
            (!g->has_fingerprint || g->fingerprint != hb->fingerprint))
            return false;
        if (!hb->without_sub && !subs_unchanged(g, cd))
            return false;
    }
    for (uint32_t i = 0; i < hb->nproducers; i++) {
        const struct hb_producer *pd = &hb->producers[i];
        const struct group *g = group_get(reg, CREG_PRODUCER, pd->group.p, pd->group.len);
        if (g == NULL || !chan_unchanged(g, conn, &hb->client_id, cl, ll, al))
            return false;
    }
    return true;
}

/* Stores lastUpdate of the connection's channels in the heartbeat's
 * groups (all known: unchanged() said so). */
static void
touch(struct creg *reg, uint64_t conn, const struct heartbeat *hb, int64_t now)
{
    for (uint32_t i = 0; i < hb->nconsumers + hb->nproducers; i++) {
        bool consumer = i < hb->nconsumers;
        const struct hb_str *name = consumer ? &hb->consumers[i].group
                                             : &hb->producers[i - hb->nconsumers].group;
        struct group *g = group_get(reg, consumer ? CREG_CONSUMER : CREG_PRODUCER,
                                    name->p, name->len);
        bool found;
        uint32_t idx = chan_find(g, conn, &found);
        set_last(g->chans[idx], now);
    }
}

bool
creg_heartbeat_repeat(struct creg *reg, uint64_t conn, const struct heartbeat *hb,
                      const struct creg_client *cl)
{
    size_t ll = cl->language ? strlen(cl->language) : 0;
    size_t al = cl->addr ? strlen(cl->addr) : 0;
    rdlock(reg);
    bool same = unchanged(reg, conn, hb, cl, ll, al);
    if (same)
        touch(reg, conn, hb, cl->now);
    unlock(reg);
    return same;
}

int
creg_heartbeat(struct creg *reg, uint64_t conn, const struct heartbeat *hb,
               const struct creg_client *cl, struct creg_hb_result *res)
{
    if (creg_heartbeat_repeat(reg, conn, hb, cl))
        return 0;
    wrlock(reg);
    int rc = check_limits(reg, conn, hb);
    if (rc == 0)
        rc = apply(reg, conn, hb, cl, res);
    unlock(reg);
    if (rc == -ENOMEM)
        err_set("out of memory in the client registry");
    return rc;
}

/* }}} */

/* {{{ Removal */

static bool
remove_locked(struct creg *reg, enum creg_kind kind, const char *group,
              size_t gl, uint64_t conn)
{
    struct group *g = group_get(reg, kind, group, gl);
    if (g == NULL)
        return false;
    bool found;
    uint32_t idx = chan_find(g, conn, &found);
    if (!found)
        return false;
    chan_remove(reg, g, idx);
    return true;
}

bool
creg_remove(struct creg *reg, enum creg_kind kind, const char *group,
            size_t gl, uint64_t conn)
{
    wrlock(reg);
    bool r = remove_locked(reg, kind, group, gl, conn);
    compact(reg);
    unlock(reg);
    return r;
}

int
creg_unregister(struct creg *reg, uint64_t conn, const char *pg, size_t pgl,
                const char *cg, size_t cgl)
{
    int mask = 0;
    wrlock(reg);
    if (pg != NULL && remove_locked(reg, CREG_PRODUCER, pg, pgl, conn))
        mask |= 1;
    if (cg != NULL && remove_locked(reg, CREG_CONSUMER, cg, cgl, conn))
        mask |= 2;
    compact(reg);
    unlock(reg);
    return mask;
}

static void
write_conns(struct w *w, const struct group *g)
{
    w_str(w, g->name, g->name_len);
    w_u32(w, g->nchans);
    for (uint32_t k = 0; k < g->nchans; k++)
        w_u64(w, g->chans[k]->conn_id);
}

int
creg_conn_closed(struct creg *reg, uint64_t conn, struct buf *out, uint32_t *removed)
{
    struct w w = { out, 0 };
    int groups = 0;
    uint32_t n = 0;
    wrlock(reg);
    struct cconn *c = hmap_get(&reg->conns, &conn, sizeof(conn));
    while (c != NULL) {
        struct chan *ch = c->chans[c->n - 1];
        bool last = c->n == 1;
        struct group *g = ch->g;
        bool found;
        uint32_t idx = chan_find(g, conn, &found);
        if (g->kind == CREG_CONSUMER && g->nchans > 1) {
            /* The members left after this one. */
            w_str(&w, g->name, g->name_len);
            w_u32(&w, g->nchans - 1);
            for (uint32_t k = 0; k < g->nchans; k++)
                if (k != idx)
                    w_u64(&w, g->chans[k]->conn_id);
            groups++;
        }
        chan_remove(reg, g, idx);  /* c goes with its last channel */
        n++;
        if (last)
            break;
    }
    compact(reg);
    unlock(reg);
    if (removed != NULL)
        *removed = n;
    return w.err != 0 ? w.err : groups;
}

static bool
any_expired(struct creg *reg, int64_t deadline)
{
    for (int k = 0; k < 2; k++) {
        struct hiter it;
        hmap_iter_init(&it, &reg->groups[k]);
        for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;) {
            struct group *g = node->val;
            for (uint32_t i = 0; i < g->nchans; i++)
                if (get_last(g->chans[i]) < deadline)
                    return true;
        }
    }
    return false;
}

int
creg_scan(struct creg *reg, int64_t now, int64_t timeout_ms, struct buf *out)
{
    int64_t deadline = now - timeout_ms;
    rdlock(reg);
    bool any = any_expired(reg, deadline);
    unlock(reg);
    struct w w = { out, 0 };
    if (!any) {
        w_u32(&w, 0);
        return w.err;
    }
    int dropped = 0;
    wrlock(reg);
    for (int k = 0; k < 2; k++) {
        struct hiter it;
        hmap_iter_init(&it, &reg->groups[k]);
        for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;) {
            struct group *g = node->val;
            g->lost = false;
            for (uint32_t i = g->nchans; i-- > 0;) {
                struct chan *ch = g->chans[i];
                if (get_last(ch) >= deadline)
                    continue;
                w_u8(&w, (uint8_t)k);
                w_str(&w, g->name, g->name_len);
                w_str(&w, ch->client_id, ch->cid_len);
                w_str(&w, ch->addr, ch->addr_len);
                w_i64(&w, get_last(ch));
                dropped++;
                if (g->nchans == 1) {
                    chan_remove(reg, g, i);  /* g is gone */
                    g = NULL;
                    break;
                }
                chan_remove(reg, g, i);
                g->lost = true;
            }
        }
    }
    /* Consumer groups that lost members and still have some. */
    uint32_t lost = 0;
    struct hiter it;
    hmap_iter_init(&it, &reg->groups[CREG_CONSUMER]);
    for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;)
        lost += ((struct group *)node->val)->lost;
    w_u32(&w, lost);
    hmap_iter_init(&it, &reg->groups[CREG_CONSUMER]);
    for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;) {
        struct group *g = node->val;
        if (g->lost) {
            write_conns(&w, g);
            g->lost = false;
        }
    }
    compact(reg);
    unlock(reg);
    return w.err != 0 ? w.err : dropped;
}

/* }}} */

/* {{{ Queries */

static void
write_settings(struct w *w, const struct group *g)
{
    w_i8(w, g->consume_type);
    w_i8(w, g->message_model);
    w_i8(w, g->consume_from_where);
    w_u8(w, g->unit_mode);
}

static void
write_sub(struct w *w, const struct sub *s)
{
    w_str(w, s->topic, s->topic_len);
    w_str(w, s->sub_string, s->ss_len);
    w_str(w, s->expression_type, s->et_len);
    w_i64(w, s->sub_version);
    w_u8(w, s->class_filter_mode);
    w_u32(w, s->ntags);
    for (uint32_t i = 0; i < s->ntags; i++)
        w_str(w, s->tags[i].p, s->tags[i].len);
    if (s->ntags > 0)
        w_raw(w, s->codes, (size_t)s->ntags * sizeof(int32_t));
}

static void
write_chan(struct w *w, const struct chan *ch)
{
    w_u64(w, ch->conn_id);
    w_str(w, ch->client_id, ch->cid_len);
    w_str(w, ch->language, ch->lang_len);
    w_i32(w, ch->version);
    w_str(w, ch->addr, ch->addr_len);
    w_i64(w, get_last(ch));
}

int
creg_subscription(struct creg *reg, const char *group, size_t gl,
                  const char *topic, size_t tl, struct buf *out)
{
    struct w w = { out, 0 };
    int rc = 0;
    rdlock(reg);
    struct group *g = group_get(reg, CREG_CONSUMER, group, gl);
    if (g != NULL) {
        write_settings(&w, g);
        rc = 1;
        struct sub *s = hmap_get(&g->subs, topic, tl);
        if (s != NULL) {
            write_sub(&w, s);
            rc = 2;
        }
    }
    unlock(reg);
    return w.err != 0 ? w.err : rc;
}

uint64_t
creg_generation(struct creg *reg, const char *group, size_t gl)
{
    rdlock(reg);
    struct group *g = group_get(reg, CREG_CONSUMER, group, gl);
    uint64_t gen = g != NULL ? g->gen : 0;
    unlock(reg);
    return gen;
}

int
creg_consumer_group(struct creg *reg, const char *group, size_t gl, struct buf *out)
{
    struct w w = { out, 0 };
    int rc = 0;
    rdlock(reg);
    struct group *g = group_get(reg, CREG_CONSUMER, group, gl);
    if (g != NULL) {
        write_settings(&w, g);
        w_u32(&w, g->subs.size);
        struct hiter it;
        hmap_iter_init(&it, &g->subs);
        for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;)
            write_sub(&w, node->val);
        w_u32(&w, g->nchans);
        for (uint32_t i = 0; i < g->nchans; i++)
            write_chan(&w, g->chans[i]);
        rc = 1;
    }
    unlock(reg);
    return w.err != 0 ? w.err : rc;
}

int
creg_client_ids(struct creg *reg, const char *group, size_t gl, struct buf *out)
{
    struct w w = { out, 0 };
    int n = 0;
    uint32_t *slots = NULL;
    rdlock(reg);
    struct group *g = group_get(reg, CREG_CONSUMER, group, gl);
    uint32_t nslots = 0;
    if (g != NULL && g->nchans > 16) {
        nslots = 64;
        while (nslots < g->nchans * 2)
            nslots *= 2;
        slots = malloc(nslots * sizeof(*slots));
        if (slots == NULL) {
            unlock(reg);
            return -ENOMEM;
        }
        memset(slots, 0xFF, nslots * sizeof(*slots));
    }
    for (uint32_t i = 0; g != NULL && i < g->nchans; i++) {
        const struct chan *ch = g->chans[i];
        bool seen = false;
        if (slots == NULL) {
            for (uint32_t k = 0; k < i && !seen; k++)
                seen = g->chans[k]->cid_len == ch->cid_len &&
                       memcmp(g->chans[k]->client_id, ch->client_id, ch->cid_len) == 0;
        } else {
            uint32_t h = (uint32_t)hmap_hash(ch->client_id, ch->cid_len) & (nslots - 1);
            for (;; h = (h + 1) & (nslots - 1)) {
                uint32_t k = slots[h];
                if (k == UINT32_MAX) {
                    slots[h] = i;
                    break;
                }
                if (g->chans[k]->cid_len == ch->cid_len &&
                    memcmp(g->chans[k]->client_id, ch->client_id, ch->cid_len) == 0) {
                    seen = true;
                    break;
                }
            }
        }
        if (!seen) {
            w_str(&w, ch->client_id, ch->cid_len);
            n++;
        }
    }
    unlock(reg);
    free(slots);
    return w.err != 0 ? w.err : n;
}

int
creg_conns(struct creg *reg, enum creg_kind kind, const char *group, size_t gl,
           struct buf *out)
{
    struct w w = { out, 0 };
    int n = 0;
    rdlock(reg);
    struct group *g = group_get(reg, kind, group, gl);
    for (uint32_t i = 0; g != NULL && i < g->nchans; i++, n++)
        w_u64(&w, g->chans[i]->conn_id);
    unlock(reg);
    return w.err != 0 ? w.err : n;
}

int
creg_members(struct creg *reg, enum creg_kind kind, const char *group, size_t gl,
             struct buf *out)
{
    struct w w = { out, 0 };
    int n = 0;
    rdlock(reg);
    struct group *g = group_get(reg, kind, group, gl);
    for (uint32_t i = 0; g != NULL && i < g->nchans; i++, n++)
        write_chan(&w, g->chans[i]);
    unlock(reg);
    return w.err != 0 ? w.err : n;
}

bool
creg_find_client(struct creg *reg, enum creg_kind kind, const char *cid,
                 size_t cl, uint64_t *conn)
{
    bool found = false;
    int64_t best = INT64_MIN;
    rdlock(reg);
    struct hiter it;
    hmap_iter_init(&it, &reg->conns);
    for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL;) {
        struct cconn *cc = node->val;
        for (uint32_t i = 0; i < cc->n; i++) {
            struct chan *ch = cc->chans[i];
            if (ch->g->kind != (int8_t)kind || ch->cid_len != cl ||
                memcmp(ch->client_id, cid, cl) != 0)
                continue;
            int64_t lu = get_last(ch);
            if (!found || lu > best) {
                found = true;
                best = lu;
                *conn = ch->conn_id;
            }
        }
    }
    unlock(reg);
    return found;
}

int
creg_groups(struct creg *reg, enum creg_kind kind, struct buf *out)
{
    struct w w = { out, 0 };
    int n = 0;
    rdlock(reg);
    struct hiter it;
    hmap_iter_init(&it, &reg->groups[kind]);
    for (struct hnode *node; (node = hmap_iter_next(&it)) != NULL; n++)
        w_str(&w, node->key, node->klen);
    unlock(reg);
    return w.err != 0 ? w.err : n;
}

void
creg_counts(struct creg *reg, struct creg_counts *c)
{
    rdlock(reg);
    c->consumer_groups = reg->groups[CREG_CONSUMER].size;
    c->producer_groups = reg->groups[CREG_PRODUCER].size;
    c->connections = reg->conns.size;
    c->channels = reg->nchans;
    c->subscriptions = reg->nsubs;
    unlock(reg);
}

/* }}} */
