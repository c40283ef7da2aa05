/*
 * route_json: the registry's reply bodies, built under the read lock,
 * byte for byte as a RocketMQ 4.9.8 NameServer writes them when its
 * state is the same (protocol.md §3.4, §3.5, §3.7; fixtures route*.jsonl,
 * cluster-info.jsonl):
 *
 *  - TopicRouteData: properties sorted (brokerDatas, filterServerTable,
 *    orderTopicConf, queueDatas); queueDatas in the topic's HashMap order;
 *    brokerDatas in the order of the HashSet of broker names Java builds
 *    from it; brokerAddrs in the BrokerData HashMap's order with bare
 *    Long keys {0:"..."} (default fastjson), or -- the "standard JSON"
 *    mode -- sorted, with quoted keys {"0":"..."} and BrowserCompatible
 *    escaping.
 *  - ClusterInfo: always default fastjson, maps in their HashMap order.
 *  - TopicList: the HashSet order of the topics, brokerAddr first.
 */
#include <errno.h>
#include <string.h>

#include "core/rcbuf.h"
#include "core/fjson.h"
#include "route/kvconfig.h"
#include "route/route_impl.h"
#include "rmq_codes.h"

#define SMALL 16
#define ORDER_NS "ORDER_TOPIC_CONFIG"
#define SYNC_MEMBER_PREFIX "rmq_sys_SYNC_BROKER_MEMBER_"

struct ord {
    uint32_t bucket;
    uint32_t seq;
    int64_t id;                /* brokerAddrs: the brokerId */
    const void *p;
};

/* Stable order by (bucket, seq): the iteration order of a HashMap whose
 * keys went in in seq order. */
static int
cmp_bucket(const void *a, const void *b)
{
    const struct ord *x = a, *y = b;
    if (x->bucket != y->bucket)
        return x->bucket < y->bucket ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int
cmp_id(const void *a, const void *b)
{
    const struct ord *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void
sort_ords(struct ord *o, size_t n, int (*cmp)(const void *, const void *))
{
    /* Insertion sort: n is a handful of brokers or ids. */
    if (n > 32) {
        qsort(o, n, sizeof(*o), cmp);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        struct ord v = o[i];
        size_t j = i;
        while (j > 0 && cmp(&o[j - 1], &v) > 0) {
            o[j] = o[j - 1];
            j--;
        }
        o[j] = v;
    }
}

/* {{{ brokerAddrs */

/* Writes a BrokerData's brokerAddrs.  acting: show the smallest id as
 * master (id 0), as the 5.x NameServer does for an acting master. */
static int
write_addrs(struct fjw *w, const struct bdata *bd, bool acting)
{
    struct ord small[SMALL + 1];
    size_t n = bd->addrs.size;
    struct ord *o = n + 1 <= SMALL + 1 ? small : malloc((n + 1) * sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    struct jiter it;
    jmap_iter_init(&it, &bd->addrs);
    size_t k = 0;
    for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL; k++) {
        o[k].id = jmap_key_long(nd);
        o[k].seq = (uint32_t)k;
        o[k].bucket = jmap_bucket(nd->hash, bd->addrs.cap);
        o[k].p = nd->val;
    }
    if (acting && n > 0) {
        size_t lo = 0;
        for (size_t i = 1; i < n; i++)
            if (o[i].id < o[lo].id)
                lo = i;
        const void *addr = o[lo].p;
        memmove(&o[lo], &o[lo + 1], (n - lo - 1) * sizeof(*o));
        o[n - 1].id = 0;
        o[n - 1].seq = (uint32_t)n;
        o[n - 1].bucket = jmap_bucket(jmap_hash_long(0), bd->addrs.cap);
        o[n - 1].p = addr;
    }
    sort_ords(o, n, w->browser ? cmp_id : cmp_bucket);
    fjw_raw(w, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            fjw_raw(w, ",", 1);
        fjw_long_key(w, o[i].id);
        fjw_str(w, o[i].p, strlen(o[i].p));
    }
    fjw_raw(w, "}", 1);
    if (o != small)
        free(o);
    return 0;
}

static int
write_broker_data(struct fjw *w, const struct bdata *bd, bool acting)
{
    fjw_lit(w, "{\"brokerAddrs\":");
    if (write_addrs(w, bd, acting) != 0)
        return -ENOMEM;
    fjw_lit(w, ",\"brokerName\":");
    fjw_str(w, bd->name, strlen(bd->name));
    fjw_lit(w, ",\"cluster\":");
    fjw_str(w, bd->cluster, strlen(bd->cluster));
    fjw_raw(w, "}", 1);
    return 0;
}

/* }}} */

/* {{{ filterServerTable of a route */

static int
cmp_key(const void *a, const void *b)
{
    const struct jnode *x = ((const struct ord *)a)->p;
    const struct jnode *y = ((const struct ord *)b)->p;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c != 0)
        return c;
    return x->klen < y->klen ? -1 : x->klen > y->klen;
}

/* filterServerMap: brokerAddr -> filter servers of the brokers shown. */
static int
write_filters(struct route *rt, struct fjw *w, struct bdata *const *bds, size_t nb)
{
    if (rt->filters.size == 0) {
        fjw_lit(w, "{}");
        return 0;
    }
    struct jmap fm;
    jmap_init(&fm, CAP_DEFAULT);
    int rc = 0;
    for (size_t i = 0; i < nb && rc == 0; i++) {
        struct jiter it;
        jmap_iter_init(&it, &bds[i]->addrs);
        for (struct jnode *an; (an = jmap_iter_next(&it)) != NULL;) {
            const char *addr = an->val;
            size_t cl = strlen(bds[i]->cluster), al = strlen(addr);
            char *key = malloc(cl + 1 + al);
            if (key == NULL) {
                rc = -ENOMEM;
                break;
            }
            memcpy(key, bds[i]->cluster, cl);
            key[cl] = '\0';
            memcpy(key + cl + 1, addr, al);
            struct flist *f = jmap_get_str(&rt->filters, key, cl + 1 + al);
            free(key);
            if (f != NULL && jmap_put_str(&fm, addr, al, f, NULL) == NULL) {
                rc = -ENOMEM;
                break;
            }
        }
    }
    struct ord *o = rc == 0 && fm.size > 0 ? malloc(fm.size * sizeof(*o)) : NULL;
    if (rc == 0 && fm.size > 0 && o == NULL)
        rc = -ENOMEM;
    if (rc == 0) {
        size_t n = 0;
        struct jiter it;
        jmap_iter_init(&it, &fm);
        for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL; n++) {
            o[n].seq = (uint32_t)n;
            o[n].p = nd;
        }
        if (w->browser)
            sort_ords(o, n, cmp_key);  /* MapSortField */
        fjw_raw(w, "{", 1);
        for (size_t i = 0; i < n; i++) {
            const struct jnode *nd = o[i].p;
            const struct flist *f = nd->val;
            if (i > 0)
                fjw_raw(w, ",", 1);
            fjw_str(w, nd->key, nd->klen);
            fjw_lit(w, ":[");
            for (size_t k = 0; k < f->n; k++) {
                if (k > 0)
                    fjw_raw(w, ",", 1);
                fjw_str(w, f->v[k], strlen(f->v[k]));
            }
            fjw_raw(w, "]", 1);
        }
        fjw_raw(w, "}", 1);
    }
    free(o);
    jmap_free(&fm, NULL);
    return rc;
}

/* }}} */

/* {{{ TopicRouteData */

static int
topic_json_locked(struct route *rt, const struct topic *t, const char *topic,
                  size_t tlen, struct fjw *w, const struct buf *order_conf)
{
    size_t n = t->qds.size;
    struct ord small[SMALL];
    struct bdata *small_bds[SMALL];
    bool small_acting[SMALL];
    const struct jnode *small_q[SMALL];
    struct ord *o = small;
    struct bdata **bds = small_bds;
    bool *acting = small_acting;
    const struct jnode **qn = small_q;
    if (n > SMALL) {
        o = malloc(n * sizeof(*o));
        bds = malloc(n * sizeof(*bds));
        acting = malloc(n * sizeof(*acting));
        qn = malloc(n * sizeof(*qn));
    }
    int rc = 0;
    if (o == NULL || bds == NULL || acting == NULL || qn == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    /* queueDatas: the topic map's values; brokerNameSet: a HashSet of
     * its keys, which orders them by its own table. */
    uint32_t set_cap = jmap_grown_cap(CAP_DEFAULT, n);
    struct jiter it;
    jmap_iter_init(&it, &t->qds);
    size_t k = 0;
    for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL; k++) {
        qn[k] = nd;
        o[k].bucket = jmap_bucket(nd->hash, set_cap);
        o[k].seq = (uint32_t)k;
        o[k].p = nd;
    }
    sort_ords(o, n, cmp_bucket);
    size_t nb = 0;
    bool need_acting = false;
    for (size_t i = 0; i < n; i++) {
        const struct jnode *bn = o[i].p;
        struct jnode *bdn = jmap_find_like(&rt->brokers, bn);
        if (bdn == NULL)
            continue;
        struct bdata *bd = bdn->val;
        bds[nb] = bd;
        acting[nb] = false;
        if (bd->addrs.size > 0 && jmap_get_long(&bd->addrs, 0) == NULL)
            need_acting = true;
        nb++;
    }
    if (nb == 0)
        goto out;  /* rc 0: no route */
    /* 5.x acting master: a group without master whose queue is
     * read-only shows its smallest id as the master. */
    if (need_acting && atomic_load(&rt->opts[ROUTE_OPT_ACTING_MASTER]) != 0 &&
        !(tlen >= strlen(SYNC_MEMBER_PREFIX) &&
          memcmp(topic, SYNC_MEMBER_PREFIX, strlen(SYNC_MEMBER_PREFIX)) == 0)) {
        for (size_t i = 0; i < nb; i++) {
            const struct bdata *bd = bds[i];
            if (bd->addrs.size == 0 || jmap_get_long(&bd->addrs, 0) != NULL || !bd->acting)
                continue;
            const struct qdata *q = jmap_get_str(&t->qds, bd->name, strlen(bd->name));
            acting[i] = q != NULL && (q->perm & RMQ_PERM_WRITE) == 0;
        }
    }
    fjw_lit(w, "{\"brokerDatas\":[");
    for (size_t i = 0; i < nb; i++) {
        if (i > 0)
            fjw_raw(w, ",", 1);
        if (write_broker_data(w, bds[i], acting[i]) != 0) {
            rc = -ENOMEM;
            goto out;
        }
    }
    fjw_lit(w, "],\"filterServerTable\":");
    if (write_filters(rt, w, bds, nb) != 0) {
        rc = -ENOMEM;
        goto out;
    }
    if (order_conf != NULL) {
        fjw_lit(w, ",\"orderTopicConf\":");
        fjw_str(w, (const char *)buf_head(order_conf), buf_len(order_conf));
    }
    fjw_lit(w, ",\"queueDatas\":[");
    for (size_t i = 0; i < n; i++) {
        const struct qdata *q = qn[i]->val;
        if (i > 0)
            fjw_raw(w, ",", 1);
        fjw_lit(w, "{\"brokerName\":");
        fjw_str(w, qn[i]->key, qn[i]->klen);
        fjw_lit(w, ",\"perm\":");
        fjw_i64(w, q->perm);
        fjw_lit(w, ",\"readQueueNums\":");
        fjw_i64(w, q->read);
        fjw_lit(w, ",\"topicSysFlag\":");
        fjw_i64(w, q->sysflag);
        fjw_lit(w, ",\"writeQueueNums\":");
        fjw_i64(w, q->write);
        fjw_raw(w, "}", 1);
    }
    fjw_lit(w, "]}");
    rc = w->err != 0 ? w->err : 1;
out:
    if (o != small) {
        free(o);
        free(bds);
        free(acting);
        free(qn);
    }
    return rc;
}

int
route_topic_json(struct route *rt, const char *topic, size_t tlen, bool browser,
                 struct buf *out)
{
    /* orderTopicConf first: the KV store has its own lock. */
    struct buf oc;
    buf_init(&oc);
    int has_oc = 0;
    if (atomic_load(&rt->opts[ROUTE_OPT_ORDER_MESSAGE]) != 0) {
        has_oc = kv_get(rt->kv, ORDER_NS, strlen(ORDER_NS), topic, tlen, &oc);
        if (has_oc < 0) {
            buf_free(&oc);
            return -ENOMEM;
        }
    }
    size_t mark = buf_len(out);
    struct fjw w;
    fjw_init(&w, out, browser);
    rt_rdlock(rt);
    const struct topic *t = jmap_get_str(&rt->topics, topic, tlen);
    int rc = t != NULL ? topic_json_locked(rt, t, topic, tlen, &w, has_oc > 0 ? &oc : NULL)
                       : 0;
    rt_unlock(rt);
    buf_free(&oc);
    if (rc <= 0)
        out->end = out->start + mark;  /* nothing half-written */
    return rc;
}

/* }}} */

/* {{{ ClusterInfo */

int
route_cluster_json(struct route *rt, struct buf *out)
{
    struct fjw w;
    fjw_init(&w, out, false);
    int rc = 0;
    rt_rdlock(rt);
    fjw_lit(&w, "{\"brokerAddrTable\":{");
    struct jiter it;
    jmap_iter_init(&it, &rt->brokers);
    bool first = true;
    for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL;) {
        if (!first)
            fjw_raw(&w, ",", 1);
        first = false;
        fjw_str(&w, nd->key, nd->klen);
        fjw_raw(&w, ":", 1);
        if (write_broker_data(&w, nd->val, false) != 0) {
            rc = -ENOMEM;
            break;
        }
    }
    fjw_lit(&w, "},\"clusterAddrTable\":{");
    jmap_iter_init(&it, &rt->clusters);
    first = true;
    for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL;) {
        if (!first)
            fjw_raw(&w, ",", 1);
        first = false;
        fjw_str(&w, nd->key, nd->klen);
        fjw_lit(&w, ":[");
        struct jiter si;
        jmap_iter_init(&si, nd->val);
        bool f2 = true;
        for (struct jnode *bn; (bn = jmap_iter_next(&si)) != NULL;) {
            if (!f2)
                fjw_raw(&w, ",", 1);
            f2 = false;
            fjw_str(&w, bn->key, bn->klen);
        }
        fjw_raw(&w, "]", 1);
    }
    fjw_lit(&w, "}}");
    rt_unlock(rt);
    return rc != 0 ? rc : w.err;
}

/* }}} */

/* {{{ GetBrokerMemberGroupResponseBody (5.x GET_BROKER_MEMBER_GROUP) */

int
route_member_group_json(struct route *rt, const char *cluster, size_t clen,
                        const char *name, size_t nlen, struct buf *out)
{
    struct fjw w;
    fjw_init(&w, out, false);
    int rc = 0;
    rt_rdlock(rt);
    /* 5.x builds the group from the request's names and copies the
     * addresses of the broker name, whatever its cluster. */
    fjw_lit(&w, "{\"brokerMemberGroup\":{\"brokerAddrs\":");
    const struct bdata *bd = jmap_get_str(&rt->brokers, name, nlen);
    if (bd == NULL)
        fjw_lit(&w, "{}");
    else if (write_addrs(&w, bd, false) != 0)
        rc = -ENOMEM;
    fjw_lit(&w, ",\"brokerName\":");
    fjw_str(&w, name, nlen);
    fjw_lit(&w, ",\"cluster\":");
    fjw_str(&w, cluster, clen);
    fjw_lit(&w, "}}");
    rt_unlock(rt);
    return rc != 0 ? rc : w.err;
}

/* {{{ TopicList */

static bool
set_add(struct jmap *set, const struct jnode *n, int *err)
{
    if (jmap_put(set, n->hash, n->key, n->klen, NULL, NULL) == NULL) {
        *err = -ENOMEM;
        return false;
    }
    return true;
}

/* The first QueueData of a topic in its map's order. */
static const struct qdata *
first_qdata(const struct topic *t)
{
    const struct jnode *n = jmap_first(&t->qds);
    return n != NULL ? n->val : NULL;
}

static bool
unit_pick(enum route_list which, const struct qdata *q)
{
    if (q == NULL)
        return false;
    bool unit = (q->sysflag & SYSFLAG_UNIT) != 0;
    bool sub = (q->sysflag & SYSFLAG_UNIT_SUB) != 0;
    switch (which) {
    case ROUTE_LIST_UNIT: return unit;
    case ROUTE_LIST_UNIT_SUB: return sub;
    case ROUTE_LIST_UNIT_SUB_NOT_UNIT: return sub && !unit;
    default: return false;
    }
}

int
route_topic_list_json(struct route *rt, enum route_list which,
                      const char *cluster, struct buf *out)
{
    struct jmap set;
    jmap_init(&set, CAP_DEFAULT);
    int err = 0;
    const char *baddr = NULL;
    struct fjw w;
    fjw_init(&w, out, false);
    rt_rdlock(rt);
    struct jiter it;
    switch (which) {
    case ROUTE_LIST_ALL:
        jmap_iter_init(&it, &rt->topics);
        for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL && set_add(&set, n, &err);)
            ;
        break;
    case ROUTE_LIST_CLUSTER: {
        const struct jmap *names = cluster != NULL
                                       ? jmap_get_str(&rt->clusters, cluster, strlen(cluster))
                                       : NULL;
        struct jiter ni;
        if (names != NULL)
            jmap_iter_init(&ni, names);
        for (struct jnode *bn; names != NULL && err == 0 && (bn = jmap_iter_next(&ni)) != NULL;) {
            jmap_iter_init(&it, &rt->topics);
            for (struct jnode *tn; err == 0 && (tn = jmap_iter_next(&it)) != NULL;) {
                const struct topic *t = tn->val;
                if (jmap_find_like(&t->qds, bn) != NULL)
                    set_add(&set, tn, &err);
            }
        }
        break;
    }
    case ROUTE_LIST_SYSTEM: {
        jmap_iter_init(&it, &rt->clusters);
        for (struct jnode *cn; err == 0 && (cn = jmap_iter_next(&it)) != NULL;) {
            set_add(&set, cn, &err);
            struct jiter ni;
            jmap_iter_init(&ni, cn->val);
            for (struct jnode *bn; err == 0 && (bn = jmap_iter_next(&ni)) != NULL;)
                set_add(&set, bn, &err);
        }
        jmap_iter_init(&it, &rt->brokers);
        for (struct jnode *bn; (bn = jmap_iter_next(&it)) != NULL;) {
            const struct bdata *bd = bn->val;
            const struct jnode *an = jmap_first(&bd->addrs);
            if (an != NULL) {
                baddr = an->val;
                break;
            }
        }
        break;
    }
    default:
        jmap_iter_init(&it, &rt->topics);
        for (struct jnode *tn; err == 0 && (tn = jmap_iter_next(&it)) != NULL;)
            if (unit_pick(which, first_qdata(tn->val)))
                set_add(&set, tn, &err);
        break;
    }
    if (err == 0) {
        fjw_raw(&w, "{", 1);
        if (baddr != NULL) {
            fjw_lit(&w, "\"brokerAddr\":");
            fjw_str(&w, baddr, strlen(baddr));
            fjw_raw(&w, ",", 1);
        }
        fjw_lit(&w, "\"topicList\":[");
        jmap_iter_init(&it, &set);
        bool first = true;
        for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;) {
            if (!first)
                fjw_raw(&w, ",", 1);
            first = false;
            fjw_str(&w, n->key, n->klen);
        }
        fjw_lit(&w, "]}");
    }
    rt_unlock(rt);
    jmap_free(&set, NULL);
    return err != 0 ? err : w.err;
}

/* }}} */

/* {{{ Shared topic list */

struct rcbuf *
route_topic_list_all_shared(struct route *rt)
{
    pthread_mutex_lock(&rt->list_lock);
    rt_rdlock(rt);
    uint64_t mods = rt->topics.mods;
    rt_unlock(rt);
    if (rt->list_all != NULL && rt->list_all_mods == mods) {
        struct rcbuf *b = rcbuf_ref(rt->list_all);
        pthread_mutex_unlock(&rt->list_lock);
        return b;
    }
    /* The body may see changes made after `mods` was read: then the next
     * call finds the count moved and encodes again (never a stale one). */
    struct buf out;
    buf_init(&out);
    struct rcbuf *b = NULL;
    if (route_topic_list_json(rt, ROUTE_LIST_ALL, NULL, &out) == 0 &&
        (b = rcbuf_copy(buf_head(&out), buf_len(&out))) != NULL) {
        atomic_fetch_add(&rt->list_encodes, 1);
        rcbuf_unref(rt->list_all);
        rt->list_all = rcbuf_ref(b);
        rt->list_all_mods = mods;
    }
    pthread_mutex_unlock(&rt->list_lock);
    buf_free(&out);
    return b;
}

uint64_t
route_topic_list_encodes(struct route *rt)
{
    return atomic_load(&rt->list_encodes);
}

/* }}} */
