/*
 * route: see route.h.  The writers: registration, unregistration (one
 * batch routine behind UNREGISTER_BROKER, a closed connection and the
 * liveness scan), write permissions and topic deletion.
 *
 * Rules, with where they come from (RouteInfoManager @4.9.8 unless said):
 *  - A registration whose brokerId already maps to another address, whose
 *    live entry has a newer stateVersion, is ignored (5.x).  It is checked
 *    before anything changes, so an ignored one leaves no trace.
 *  - The same address under another brokerId is dropped first (a slave
 *    promoted to master).
 *  - Topic configs are taken from the master (id 0), and (5.x) from the
 *    prime slave -- the lowest id of a group with no master -- of a 5.x
 *    broker (it sends enableActingMaster), with PERM_WRITE wiped when
 *    acting master is enabled.  They are applied only when the broker's
 *    DataVersion differs from the stored one or it registered first; a
 *    registration only adds or updates queue data, never removes.
 *  - A slave's result carries its master's address and haServerAddr when
 *    the master is registered and alive.
 *  - Unregistering drops the broker's live and filter entries and its
 *    address from its BrokerData (matched by address, as 5.x does); a
 *    BrokerData with no address left goes, with its name in the cluster
 *    set (and the cluster when empty) and its queue data in every topic
 *    (and the topic when empty).  A group that keeps some address keeps
 *    its queue data; with acting master on and no master left, its
 *    queues lose PERM_WRITE (5.x).  Several brokers go in one batch.
 *  - The scan drops every broker silent longer than its timeout (5.x:
 *    heartbeatTimeoutMillis from the registration, else the default).
 */
#include "route/route.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/rcbuf.h"
#include "route/kvconfig.h"
#include "route/route_impl.h"
#include "rmq_codes.h"

/* {{{ Small helpers */

static char *
dupstr(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static int64_t
now_ms(void)
{
    return clock_mono_ns() / 1000000;
}

/* The key of brokerLiveTable / filterServerTable: cluster \0 addr. */
struct lkey {
    char *p;
    size_t n;
    char small[256];
};

static int
lkey_make(struct lkey *k, const char *cluster, const char *addr)
{
    size_t cl = strlen(cluster), al = strlen(addr);
    k->n = cl + 1 + al;
    k->p = k->n <= sizeof(k->small) ? k->small : malloc(k->n);
    if (k->p == NULL)
        return -ENOMEM;
    memcpy(k->p, cluster, cl);
    k->p[cl] = '\0';
    memcpy(k->p + cl + 1, addr, al);
    return 0;
}

static void
lkey_free(struct lkey *k)
{
    if (k->p != k->small)
        free(k->p);
    k->p = NULL;
}

static void
free_qdata(void *p)
{
    free(p);
}

static void
free_topic(void *p)
{
    struct topic *t = p;
    if (t == NULL)
        return;
    jmap_free(&t->qds, free_qdata);
    free(t);
}

static void
free_bdata(void *p)
{
    struct bdata *b = p;
    if (b == NULL)
        return;
    jmap_free(&b->addrs, free);
    free(b->cluster);
    free(b->name);
    free(b->zone);
    free(b);
}

static void
free_set(void *p)
{
    struct jmap *s = p;
    if (s == NULL)
        return;
    jmap_free(s, NULL);
    free(s);
}

static void
free_live(void *p)
{
    struct live *l = p;
    if (l == NULL)
        return;
    free(l->cluster);
    free(l->addr);
    free(l->name);
    free(l->ha);
    free(l);
}

static void
free_flist(void *p)
{
    struct flist *f = p;
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i]);
    free(f);
}

static bool
dv_equal(const struct route_dv *a, const struct route_dv *b)
{
    return a->counter == b->counter && a->timestamp == b->timestamp &&
           a->state == b->state;
}

/* The smallest brokerId of a group; false when it has none. */
static bool
min_id(const struct bdata *b, int64_t *out)
{
    bool any = false;
    struct jiter it;
    jmap_iter_init(&it, &b->addrs);
    for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;) {
        int64_t id = jmap_key_long(n);
        if (!any || id < *out)
            *out = id;
        any = true;
    }
    return any;
}

/* }}} */

/* {{{ Life cycle */

struct route *
route_new(void)
{
    struct route *rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return NULL;
    if (pthread_rwlock_init(&rt->lock, NULL) != 0) {
        free(rt);
        return NULL;
    }
    if (pthread_mutex_init(&rt->list_lock, NULL) != 0) {
        pthread_rwlock_destroy(&rt->lock);
        free(rt);
        return NULL;
    }
    rt->kv = kv_new();
    rt->overrides = kv_new();
    if (rt->kv == NULL || rt->overrides == NULL) {
        kv_free(rt->kv);
        kv_free(rt->overrides);
        pthread_mutex_destroy(&rt->list_lock);
        pthread_rwlock_destroy(&rt->lock);
        free(rt);
        return NULL;
    }
    jmap_init(&rt->topics, CAP_TOPICS);
    jmap_init(&rt->brokers, CAP_BROKERS);
    jmap_init(&rt->clusters, CAP_CLUSTERS);
    jmap_init(&rt->live, CAP_LIVE);
    jmap_init(&rt->filters, CAP_FILTERS);
    atomic_store(&rt->opts[ROUTE_OPT_ORDER_MESSAGE], 0);
    atomic_store(&rt->opts[ROUTE_OPT_ACTING_MASTER], 0);
    atomic_store(&rt->opts[ROUTE_OPT_DEFAULT_TIMEOUT], 120000);
    return rt;
}

void
route_free(struct route *rt)
{
    if (rt == NULL)
        return;
    jmap_free(&rt->topics, free_topic);
    jmap_free(&rt->brokers, free_bdata);
    jmap_free(&rt->clusters, free_set);
    jmap_free(&rt->live, free_live);
    jmap_free(&rt->filters, free_flist);
    kv_free(rt->kv);
    kv_free(rt->overrides);
    rcbuf_unref(rt->list_all);
    pthread_mutex_destroy(&rt->list_lock);
    pthread_rwlock_destroy(&rt->lock);
    free(rt);
}

static struct route *shared_rt;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void
shared_init(void)
{
    shared_rt = route_new();
}

struct route *
route_shared(void)
{
    if (pthread_once(&shared_once, shared_init) != 0)
        return NULL;
    return shared_rt;
}

struct kvconfig *
route_kv(struct route *rt)
{
    return rt->kv;
}

struct kvconfig *
route_overrides(struct route *rt)
{
    return rt->overrides;
}

uint64_t
route_conf_gen(struct route *rt)
{
    return atomic_load(&rt->conf_gen);
}

void
route_conf_bump(struct route *rt)
{
    atomic_fetch_add(&rt->conf_gen, 1);
}

void
route_set_opt(struct route *rt, enum route_opt opt, int64_t v)
{
    if (opt >= 0 && opt < ROUTE_OPT_COUNT)
        atomic_store(&rt->opts[opt], v);
}

int64_t
route_get_opt(struct route *rt, enum route_opt opt)
{
    if (opt < 0 || opt >= ROUTE_OPT_COUNT)
        return 0;
    return atomic_load(&rt->opts[opt]);
}

/* }}} */

/* {{{ Registration */

/* createAndUpdateQueueData: upserts topic/brokerName. */
static int
upsert_queue(struct route *rt, const char *bname, const struct route_topic_cfg *tc,
             int32_t perm)
{
    struct qdata nq = { tc->read, tc->write, perm, tc->sysflag };
    struct topic *t = jmap_get_str(&rt->topics, tc->name, tc->name_len);
    if (t == NULL) {
        t = malloc(sizeof(*t));
        struct qdata *q = malloc(sizeof(*q));
        if (t == NULL || q == NULL) {
            free(t);
            free(q);
            return -ENOMEM;
        }
        jmap_init(&t->qds, CAP_DEFAULT);
        *q = nq;
        if (jmap_put_str(&t->qds, bname, strlen(bname), q, NULL) == NULL) {
            free(q);
            free_topic(t);
            return -ENOMEM;
        }
        if (jmap_put_str(&rt->topics, tc->name, tc->name_len, t, NULL) == NULL) {
            free_topic(t);
            return -ENOMEM;
        }
        log_info("new topic registered, %.*s %s", (int)tc->name_len, tc->name, bname);
        return 0;
    }
    struct qdata *q = jmap_get_str(&t->qds, bname, strlen(bname));
    if (q != NULL) {
        if (memcmp(q, &nq, sizeof(nq)) != 0)
            log_info("topic changed, %.*s %s: perm %d -> %d, queues r%d/w%d -> r%d/w%d",
                     (int)tc->name_len, tc->name, bname, q->perm, nq.perm, q->read,
                     q->write, nq.read, nq.write);
        *q = nq;
        return 0;
    }
    q = malloc(sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    *q = nq;
    if (jmap_put_str(&t->qds, bname, strlen(bname), q, NULL) == NULL) {
        free(q);
        return -ENOMEM;
    }
    return 0;
}

static struct jmap *
cluster_set(struct route *rt, const char *cluster, bool create)
{
    struct jmap *set = jmap_get_str(&rt->clusters, cluster, strlen(cluster));
    if (set != NULL || !create)
        return set;
    set = malloc(sizeof(*set));
    if (set == NULL)
        return NULL;
    jmap_init(set, CAP_DEFAULT);
    if (jmap_put_str(&rt->clusters, cluster, strlen(cluster), set, NULL) == NULL) {
        free(set);
        return NULL;
    }
    return set;
}

static long
append_str(struct buf *out, const char *s)
{
    if (s == NULL)
        return -1;
    size_t off = buf_len(out);
    if (buf_append(out, s, strlen(s) + 1) != 0)
        return -2;
    return (long)off;
}

static int
register_locked(struct route *rt, const struct route_reg *reg,
                const struct lkey *key, struct route_reg_result *res,
                struct buf *out)
{
    struct bdata *bd = jmap_get_str(&rt->brokers, reg->name, strlen(reg->name));
    struct live *lv = jmap_get_str(&rt->live, key->p, key->n);

    /* 5.x: the id is taken by another address with a newer stateVersion. */
    if (bd != NULL) {
        const char *old = jmap_get_long(&bd->addrs, reg->id);
        if (old != NULL && strcmp(old, reg->addr) != 0) {
            struct lkey ok;
            if (lkey_make(&ok, reg->cluster, old) != 0)
                return -ENOMEM;
            const struct live *ol = jmap_get_str(&rt->live, ok.p, ok.n);
            lkey_free(&ok);
            if (ol != NULL && ol->dv.state > reg->dv.state) {
                log_warn("registering broker conflicts with the existing one, ignored: "
                         "cluster %s, broker %s, id %lld, old address %s (stateVersion "
                         "%lld), new address %s (stateVersion %lld)",
                         reg->cluster, reg->name, (long long)reg->id, old,
                         (long long)ol->dv.state, reg->addr, (long long)reg->dv.state);
                res->ignored = true;
                return 0;
            }
        }
    }

    struct jmap *set = cluster_set(rt, reg->cluster, true);
    if (set == NULL || jmap_put_str(set, reg->name, strlen(reg->name), NULL, NULL) == NULL)
        return -ENOMEM;

    bool first = false;
    if (bd == NULL) {
        bd = calloc(1, sizeof(*bd));
        if (bd == NULL)
            return -ENOMEM;
        bd->cluster = dupstr(reg->cluster);
        bd->name = dupstr(reg->name);
        jmap_init(&bd->addrs, CAP_DEFAULT);
        if (bd->cluster == NULL || bd->name == NULL ||
            jmap_put_str(&rt->brokers, reg->name, strlen(reg->name), bd, NULL) == NULL) {
            free_bdata(bd);
            return -ENOMEM;
        }
        first = true;
    }
    bd->acting = reg->acting == 1;
    free(bd->zone);
    bd->zone = dupstr(reg->zone);

    /* A slave promoted to master: the address leaves its old id. */
    struct jiter it;
    jmap_iter_init(&it, &bd->addrs);
    for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;) {
        int64_t id = jmap_key_long(n);
        if (id != reg->id && strcmp(n->val, reg->addr) == 0) {
            void *gone = NULL;
            jmap_remove_long(&bd->addrs, id, &gone);
            log_info("broker %s: address %s moves from id %lld to id %lld", reg->name,
                     reg->addr, (long long)id, (long long)reg->id);
            free(gone);
        }
    }
    char *addr = dupstr(reg->addr);
    void *old_addr = NULL;
    if (addr == NULL || jmap_put_long(&bd->addrs, reg->id, addr, &old_addr) == NULL) {
        free(addr);
        return -ENOMEM;
    }
    if (reg->id == 0 && (old_addr == NULL || strcmp(old_addr, addr) != 0))
        log_info("cluster %s broker %s: master address %s -> %s", bd->cluster, bd->name,
                 old_addr != NULL ? (char *)old_addr : "(none)", addr);
    first = first || old_addr == NULL;
    free(old_addr);

    bool master = reg->id == 0;
    int64_t lowest = reg->id;
    bool prime = reg->acting >= 0 && !master && min_id(bd, &lowest) && lowest == reg->id;
    if (master || prime) {
        bool changed = lv == NULL || !dv_equal(&lv->dv, &reg->dv);
        if (changed || first) {
            for (size_t i = 0; i < reg->ntopics; i++) {
                const struct route_topic_cfg *tc = &reg->topics[i];
                int32_t perm = prime && bd->acting ? tc->perm & ~RMQ_PERM_WRITE : tc->perm;
                if (upsert_queue(rt, reg->name, tc, perm) != 0)
                    return -ENOMEM;
            }
        }
    }

    if (lv == NULL) {
        lv = calloc(1, sizeof(*lv));
        if (lv == NULL)
            return -ENOMEM;
        lv->cluster = dupstr(reg->cluster);
        lv->addr = dupstr(reg->addr);
        if (lv->cluster == NULL || lv->addr == NULL ||
            jmap_put_str(&rt->live, key->p, key->n, lv, NULL) == NULL) {
            free_live(lv);
            return -ENOMEM;
        }
        res->first = true;
        log_info("new broker registered, %s (cluster %s, %s id %lld) HAServer: %s", reg->addr,
                 reg->cluster, reg->name, (long long)reg->id, reg->ha ? reg->ha : "");
    }
    char *name = dupstr(reg->name);
    char *ha = dupstr(reg->ha);
    if (name == NULL || (reg->ha != NULL && ha == NULL)) {
        free(name);
        free(ha);
        return -ENOMEM;
    }
    free(lv->name);
    lv->name = name;
    free(lv->ha);
    lv->ha = ha;
    lv->id = reg->id;
    lv->last_ms = now_ms();
    lv->timeout_ms = reg->timeout_ms > 0 ? reg->timeout_ms
                                         : atomic_load(&rt->opts[ROUTE_OPT_DEFAULT_TIMEOUT]);
    lv->dv = reg->dv;
    lv->conn = reg->conn;

    if (reg->filters != NULL) {
        void *gone = NULL;
        if (reg->nfilters == 0) {
            jmap_remove_str(&rt->filters, key->p, key->n, &gone);
        } else {
            struct flist *f = calloc(1, sizeof(*f) + reg->nfilters * sizeof(char *));
            if (f == NULL)
                return -ENOMEM;
            f->n = reg->nfilters;
            for (size_t i = 0; i < f->n; i++) {
                f->v[i] = dupstr(reg->filters[i]);
                if (f->v[i] == NULL) {
                    free_flist(f);
                    return -ENOMEM;
                }
            }
            if (jmap_put_str(&rt->filters, key->p, key->n, f, &gone) == NULL) {
                free_flist(f);
                return -ENOMEM;
            }
        }
        free_flist(gone);
    }

    if (!master) {
        const char *maddr = jmap_get_long(&bd->addrs, 0);
        if (maddr != NULL) {
            struct lkey mk;
            if (lkey_make(&mk, reg->cluster, maddr) != 0)
                return -ENOMEM;
            const struct live *ml = jmap_get_str(&rt->live, mk.p, mk.n);
            lkey_free(&mk);
            if (ml != NULL) {
                res->master_off = append_str(out, maddr);
                res->ha_off = append_str(out, ml->ha);
                if (res->master_off == -2 || res->ha_off == -2)
                    return -ENOMEM;
            }
        }
    }
    return 0;
}

int
route_register(struct route *rt, const struct route_reg *reg,
               struct route_reg_result *res, struct buf *out)
{
    memset(res, 0, sizeof(*res));
    res->master_off = res->ha_off = -1;
    struct lkey key;
    if (lkey_make(&key, reg->cluster, reg->addr) != 0) {
        err_set("out of memory registering a broker");
        return -ENOMEM;
    }
    rt_wrlock(rt);
    int rc = register_locked(rt, reg, &key, res, out);
    rt_unlock(rt);
    lkey_free(&key);
    if (rc != 0)
        err_set("out of memory registering broker %s (%s)", reg->name, reg->addr);
    return rc;
}

/* }}} */

/* {{{ Unregistration: one batch routine */

struct unreg {
    const char *cluster;
    const char *addr;
    const char *name;
};

static bool
no_master(const struct bdata *b)
{
    int64_t lo = 0;
    return !min_id(b, &lo) || lo > 0;
}

/* Drops each broker of u[0..n); `removed` has room for n pointers. */
static void
unregister_locked(struct route *rt, const struct unreg *u, size_t n,
                  struct bdata **removed, struct bdata **reduced)
{
    size_t nrem = 0, nred = 0;
    for (size_t i = 0; i < n; i++) {
        struct lkey key;
        if (lkey_make(&key, u[i].cluster, u[i].addr) == 0) {
            void *gone = NULL;
            if (jmap_remove_str(&rt->live, key.p, key.n, &gone))
                free_live(gone);
            gone = NULL;
            if (jmap_remove_str(&rt->filters, key.p, key.n, &gone))
                free_flist(gone);
            lkey_free(&key);
        }

        struct bdata *bd = jmap_get_str(&rt->brokers, u[i].name, strlen(u[i].name));
        if (bd == NULL)
            continue;
        struct jiter it;
        jmap_iter_init(&it, &bd->addrs);
        for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL;) {
            if (strcmp(nd->val, u[i].addr) == 0) {
                void *a = NULL;
                int64_t id = jmap_key_long(nd);
                jmap_remove_long(&bd->addrs, id, &a);
                log_info("unregister broker %s id %lld address %s", bd->name,
                         (long long)id, (char *)a);
                free(a);
            }
        }
        if (bd->addrs.size > 0) {
            bool seen = false;
            for (size_t k = 0; k < nred; k++)
                seen = seen || reduced[k] == bd;
            if (!seen)
                reduced[nred++] = bd;
            continue;
        }
        jmap_remove_str(&rt->brokers, bd->name, strlen(bd->name), NULL);
        log_info("unregister broker name %s: no address left", bd->name);
        /* Its name leaves the cluster of the request and the cluster it
         * was created in (the same, unless it moved). */
        const char *clusters[2] = { u[i].cluster, bd->cluster };
        for (int c = 0; c < 2; c++) {
            if (c == 1 && strcmp(clusters[0], clusters[1]) == 0)
                break;
            struct jmap *set = cluster_set(rt, clusters[c], false);
            if (set != NULL && jmap_remove_str(set, bd->name, strlen(bd->name), NULL) &&
                set->size == 0) {
                jmap_remove_str(&rt->clusters, clusters[c], strlen(clusters[c]), NULL);
                free_set(set);
                log_info("unregister cluster %s: no broker left", clusters[c]);
            }
        }
        for (size_t k = 0; k < nred; k++)
            if (reduced[k] == bd)
                reduced[k] = reduced[--nred];
        removed[nrem++] = bd;
    }
    if (nrem == 0 && nred == 0)
        return;
    struct jiter it;
    jmap_iter_init(&it, &rt->topics);
    for (struct jnode *tn; (tn = jmap_iter_next(&it)) != NULL;) {
        struct topic *t = tn->val;
        for (size_t k = 0; k < nrem; k++) {
            void *q = NULL;
            if (jmap_remove_str(&t->qds, removed[k]->name, strlen(removed[k]->name), &q))
                free_qdata(q);
        }
        if (t->qds.size == 0) {
            log_info("remove topic %s: no queue left", tn->key);
            jmap_remove(&rt->topics, tn->hash, tn->key, tn->klen, NULL);
            free_topic(t);
            continue;
        }
        for (size_t k = 0; k < nred; k++) {
            if (!reduced[k]->acting || !no_master(reduced[k]))
                continue;
            struct qdata *q = jmap_get_str(&t->qds, reduced[k]->name,
                                           strlen(reduced[k]->name));
            if (q != NULL)
                q->perm &= ~RMQ_PERM_WRITE;
        }
    }
    for (size_t k = 0; k < nrem; k++)
        free_bdata(removed[k]);
}

int
route_unregister(struct route *rt, const char *cluster, const char *addr,
                 const char *name, int64_t id)
{
    (void)id;  /* 5.x matches by address: a promoted slave is not hit */
    struct unreg u = { cluster, addr, name };
    struct bdata *removed[1], *reduced[1];
    rt_wrlock(rt);
    size_t before = rt->live.size;
    unregister_locked(rt, &u, 1, removed, reduced);
    size_t after = rt->live.size;
    rt_unlock(rt);
    return before > after ? 1 : 0;
}

/* Collects the live entries `pick` selects and drops them in one batch.
 * `what` names the reason in the log. */
static int
drop_live_where(struct route *rt, bool (*pick)(const struct live *, const void *),
                const void *arg, const char *what)
{
    rt_wrlock(rt);
    size_t cap = rt->live.size;
    if (cap == 0) {
        rt_unlock(rt);
        return 0;
    }
    struct unreg *u = malloc(cap * sizeof(*u));
    struct bdata **removed = malloc(cap * sizeof(*removed));
    struct bdata **reduced = malloc(cap * sizeof(*reduced));
    struct live **lives = malloc(cap * sizeof(*lives));
    size_t n = 0;
    if (u == NULL || removed == NULL || reduced == NULL || lives == NULL) {
        rt_unlock(rt);
        free(u);
        free(removed);
        free(reduced);
        free(lives);
        log_error("out of memory dropping brokers (%s); retried later", what);
        return 0;
    }
    struct jiter it;
    jmap_iter_init(&it, &rt->live);
    for (struct jnode *nd; (nd = jmap_iter_next(&it)) != NULL;) {
        struct live *lv = nd->val;
        if (!pick(lv, arg))
            continue;
        lives[n] = lv;
        u[n].cluster = lv->cluster;
        u[n].addr = lv->addr;
        u[n].name = lv->name != NULL ? lv->name : "";
        n++;
    }
    /* The unreg entries point into the live entries, which the batch
     * frees: detach them from the table first and free them after. */
    for (size_t i = 0; i < n; i++) {
        struct lkey key;
        if (lkey_make(&key, lives[i]->cluster, lives[i]->addr) == 0) {
            jmap_remove_str(&rt->live, key.p, key.n, NULL);
            lkey_free(&key);
        }
        log_warn("broker %s (%s, cluster %s, id %lld) %s", lives[i]->addr,
                 lives[i]->name ? lives[i]->name : "?", lives[i]->cluster,
                 (long long)lives[i]->id, what);
    }
    unregister_locked(rt, u, n, removed, reduced);
    rt_unlock(rt);
    for (size_t i = 0; i < n; i++)
        free_live(lives[i]);
    free(u);
    free(removed);
    free(reduced);
    free(lives);
    return (int)n;
}

static bool
pick_conn(const struct live *lv, const void *arg)
{
    return lv->conn == *(const uint64_t *)arg;
}

int
route_conn_closed(struct route *rt, uint64_t conn)
{
    return drop_live_where(rt, pick_conn, &conn,
                           "unregistered: its connection closed");
}

static bool
pick_expired(const struct live *lv, const void *arg)
{
    int64_t now = *(const int64_t *)arg;
    return lv->last_ms + lv->timeout_ms < now;
}

int
route_scan(struct route *rt, int64_t now)
{
    if (now <= 0)
        now = now_ms();
    int n = drop_live_where(rt, pick_expired, &now,
                            "expired: no registration within its heartbeat timeout");
    atomic_fetch_add_explicit(&rt->scans, 1, memory_order_relaxed);
    return n;
}

uint64_t
route_scans(struct route *rt)
{
    return atomic_load_explicit(&rt->scans, memory_order_relaxed);
}

/* }}} */

/* {{{ Data version, permissions, topics */

int
route_query_dv(struct route *rt, const char *cluster, const char *addr,
               const struct route_dv *dv, bool *changed, struct buf *out)
{
    struct lkey key;
    if (lkey_make(&key, cluster, addr) != 0)
        return -ENOMEM;
    int rc = 0;
    rt_wrlock(rt);
    struct live *lv = jmap_get_str(&rt->live, key.p, key.n);
    *changed = lv == NULL || !dv_equal(&lv->dv, dv);
    if (lv != NULL) {
        if (!*changed)
            lv->last_ms = now_ms();
        char tmp[160];
        int k;
        if (lv->dv.has_state)
            k = snprintf(tmp, sizeof(tmp), "{\"counter\":%lld,\"stateVersion\":%lld,"
                         "\"timestamp\":%lld}", (long long)lv->dv.counter,
                         (long long)lv->dv.state, (long long)lv->dv.timestamp);
        else
            k = snprintf(tmp, sizeof(tmp), "{\"counter\":%lld,\"timestamp\":%lld}",
                         (long long)lv->dv.counter, (long long)lv->dv.timestamp);
        if (buf_append(out, tmp, (size_t)k) != 0)
            rc = -ENOMEM;
    }
    rt_unlock(rt);
    lkey_free(&key);
    return rc;
}

int
route_heartbeat(struct route *rt, const char *cluster, const char *addr)
{
    struct lkey key;
    if (lkey_make(&key, cluster, addr) != 0)
        return 0;
    rt_wrlock(rt);
    struct live *lv = jmap_get_str(&rt->live, key.p, key.n);
    if (lv != NULL)
        lv->last_ms = now_ms();
    rt_unlock(rt);
    lkey_free(&key);
    return lv != NULL ? 1 : 0;
}

static int
operate_write_perm(struct route *rt, const char *name, bool wipe)
{
    int count = 0;
    size_t nl = strlen(name);
    uint32_t h = jmap_hash_str(name, nl);
    rt_wrlock(rt);
    struct jiter it;
    jmap_iter_init(&it, &rt->topics);
    for (struct jnode *tn; (tn = jmap_iter_next(&it)) != NULL;) {
        struct topic *t = tn->val;
        struct jnode *qn = jmap_find(&t->qds, h, name, nl);
        if (qn == NULL)
            continue;
        struct qdata *q = qn->val;
        q->perm = wipe ? q->perm & ~RMQ_PERM_WRITE : RMQ_PERM_READ | RMQ_PERM_WRITE;
        count++;
    }
    rt_unlock(rt);
    return count;
}

int
route_wipe_write_perm(struct route *rt, const char *name)
{
    return operate_write_perm(rt, name, true);
}

int
route_add_write_perm(struct route *rt, const char *name)
{
    return operate_write_perm(rt, name, false);
}

int
route_delete_topic(struct route *rt, const char *topic, size_t tlen,
                   const char *cluster)
{
    int done = 0;
    rt_wrlock(rt);
    struct topic *t = jmap_get_str(&rt->topics, topic, tlen);
    if (t != NULL && (cluster == NULL || cluster[0] == '\0')) {
        jmap_remove_str(&rt->topics, topic, tlen, NULL);
        free_topic(t);
        done = 1;
    } else if (t != NULL) {
        struct jmap *set = cluster_set(rt, cluster, false);
        struct jiter it;
        if (set != NULL)
            jmap_iter_init(&it, set);
        for (struct jnode *bn; set != NULL && (bn = jmap_iter_next(&it)) != NULL;) {
            void *q = NULL;
            if (jmap_remove(&t->qds, bn->hash, bn->key, bn->klen, &q)) {
                free_qdata(q);
                done = 1;
            }
        }
        if (t->qds.size == 0) {
            jmap_remove_str(&rt->topics, topic, tlen, NULL);
            free_topic(t);
        }
    }
    rt_unlock(rt);
    return done;
}

void
route_hash_stats(struct route *rt, struct jmap_stats *out)
{
    rt_rdlock(rt);
    jmap_stats(&rt->topics, &out[0]);
    jmap_stats(&rt->brokers, &out[1]);
    jmap_stats(&rt->clusters, &out[2]);
    jmap_stats(&rt->live, &out[3]);
    rt_unlock(rt);
}

void
route_counts(struct route *rt, size_t *topics, size_t *brokers,
             size_t *clusters, size_t *live)
{
    rt_rdlock(rt);
    *topics = rt->topics.size;
    *brokers = rt->brokers.size;
    *clusters = rt->clusters.size;
    *live = rt->live.size;
    rt_unlock(rt);
}

/* }}} */
