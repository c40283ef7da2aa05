/*
 * renew: see renew.h.
 */
#include "grpc/renew.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/clock.h"
#include "core/hmap.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "net/codec.h"
#include "net/conn.h"
#include "rmq_codes.h"

/* What a lease costs: the struct below, its two map nodes and keys. */
#define RENEW_LEASE_BYTES ((int64_t)sizeof(struct lease) + 512)

/* A renewal whose reply has not come this long is taken as lost and
 * tried again at the next tick. */
#define RENEW_REPLY_LOST_MS 60000

/* 5.x's RenewStrategyPolicy: the invisible time of renewal n. */
static const int64_t RENEW_STEPS_MS[] = { 60000, 180000, 300000, 600000, 1800000, 3600000 };
#define RENEW_NSTEPS ((int32_t)(sizeof(RENEW_STEPS_MS) / sizeof(RENEW_STEPS_MS[0])))

struct lease {
    struct renew_lease pub;
    struct hnode *node;            /* in r->leases */
    int64_t visible_at_ms;         /* wall clock: popTime + invisibleTime */
    int64_t first_ms;              /* wall clock: when it was received */
    int64_t sent_ms;               /* the renewal in flight's; 0: none */
    int32_t opaque;                /* the renewal in flight's; 0: none */
    int32_t renew_times;
    int32_t retries;
    bool answered;                 /* its reply came inside send */
    bool dead;                     /* ... and ended it: on_tick drops it */
};

struct renew {
    uv_timer_t timer;              /* every period_ms while leases exist */
    struct renew_conf conf;
    struct conn *account;
    struct metrics_shard *metrics;   /* NULL: not counted */
    renew_send_fn send;
    void *arg;
    struct hmap leases;            /* "group\nmsg_id" -> lease */
    struct hmap inflight;          /* the renewal's opaque (4 bytes) -> lease */
    struct lease *sending;         /* during send: a reply that comes inside
                                    * it (a processor answering at once) is
                                    * this lease's, its opaque not known yet */
    bool armed;
};

/* popTime + invisibleTime of a handle ("ck popTime invisibleTime ..."),
 * or -1. */
static int64_t
visible_at(const char *handle)
{
    long long ck, pt, it;
    if (sscanf(handle, "%lld %lld %lld", &ck, &pt, &it) != 3 || pt < 0 || it < 0)
        return -1;
    return (int64_t)(pt + it);
}

static size_t
lease_key(char *out, size_t cap, const char *group, const char *msg_id)
{
    int n = snprintf(out, cap, "%s\n%s", group, msg_id);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

static void
charge_release(struct renew *r)
{
    struct conn *cn = r->account;
    if (cn->mb_open && cn->r->budget != NULL)
        membudget_release(cn->r->budget, &cn->mb, RENEW_LEASE_BYTES);
}

static void
inflight_drop(struct renew *r, struct lease *l)
{
    if (l->opaque != 0) {
        void *v;
        (void)hmap_remove(&r->inflight, &l->opaque, sizeof(l->opaque), &v);
        l->opaque = 0;
        l->sent_ms = 0;
    }
}

/* Removes l (its node from r->leases: the caller's iteration, if any,
 * has just returned it) and frees it. */
static void
lease_drop(struct renew *r, struct lease *l)
{
    inflight_drop(r, l);
    hmap_remove_node(&r->leases, l->node);
    charge_release(r);
    metrics_renew_leases(r->metrics, -1);
    free(l);
}

static void
disarm_if_empty(struct renew *r)
{
    if (r->armed && r->leases.size == 0) {
        uv_timer_stop(&r->timer);
        r->armed = false;
    }
}

static void
on_tick(uv_timer_t *t)
{
    struct renew *r = t->data;
    int64_t now = clock_wall_ms();
    struct hiter it;
    hmap_iter_init(&it, &r->leases);
    bool removed = false;
    struct hnode *node;
    while ((node = hmap_iter_next(&it)) != NULL) {
        struct lease *l = node->val;
        if (l->opaque != 0) {
            if (now - l->sent_ms < RENEW_REPLY_LOST_MS)
                continue;
            inflight_drop(r, l);
        }
        if (l->visible_at_ms - now > r->conf.ahead_ms)
            continue;
        if (now - l->first_ms >= r->conf.max_ms) {
            /* Renewed long enough: it comes back when its time runs out. */
            log_info("gRPC auto-renew: message of group %s held past renewMaxTimeMillis (%lld ms); "
                     "renewed no more", l->pub.group, (long long)r->conf.max_ms);
            lease_drop(r, l);
            removed = true;
            continue;
        }
        int32_t step = l->renew_times < RENEW_NSTEPS ? l->renew_times : RENEW_NSTEPS - 1;
        r->sending = l;
        l->answered = false;
        int32_t op = r->send(r->arg, &l->pub, RENEW_STEPS_MS[step]);
        r->sending = NULL;
        if (l->dead) {
            lease_drop(r, l);
            removed = true;
            continue;
        }
        if (l->answered)
            continue;
        if (op == 0) {
            if (++l->retries >= r->conf.max_retry) {
                lease_drop(r, l);
                removed = true;
            }
            continue;
        }
        l->opaque = op;
        l->sent_ms = now;
        if (hmap_add(&r->inflight, hmap_hash(&op, sizeof(op)), &op, sizeof(op), l) == NULL)
            l->opaque = 0;   /* its reply will be ignored; tried again */
    }
    if (removed)
        hmap_compact(&r->leases);
    disarm_if_empty(r);
}

struct renew *
renew_new(struct uv_loop_s *loop, const struct renew_conf *conf, struct conn *account,
          struct metrics_shard *metrics, renew_send_fn send, void *arg)
{
    struct renew *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    if (uv_timer_init(loop, &r->timer) != 0) {
        free(r);
        return NULL;
    }
    r->timer.data = r;
    r->conf = *conf;
    if (r->conf.period_ms < 1)
        r->conf.period_ms = 1;
    if (r->conf.max_retry < 1)
        r->conf.max_retry = 1;
    r->account = account;
    r->metrics = metrics;
    r->send = send;
    r->arg = arg;
    hmap_init(&r->leases, 16);
    hmap_init(&r->inflight, 16);
    return r;
}

static void
timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void
renew_free(struct renew *r)
{
    if (r == NULL)
        return;
    struct hiter it;
    hmap_iter_init(&it, &r->leases);
    struct hnode *node;
    size_t cleared = 0;
    while ((node = hmap_iter_next(&it)) != NULL) {
        struct lease *l = node->val;
        /* Replies to these find no table (the session is gone) and are
         * dropped by the caller. */
        if (r->send(r->arg, &l->pub, r->conf.clear_ms) != 0)
            cleared++;
        inflight_drop(r, l);
        charge_release(r);
        metrics_renew_leases(r->metrics, -1);
        free(l);
    }
    if (cleared > 0)
        log_debug("gRPC auto-renew: client gone, %zu message(s) visible again in %lld ms", cleared,
                  (long long)r->conf.clear_ms);
    hmap_free(&r->leases, NULL);
    hmap_free(&r->inflight, NULL);
    uv_timer_stop(&r->timer);
    uv_close((uv_handle_t *)&r->timer, timer_closed);
}

bool
renew_add(struct renew *r, const char *group, const char *topic, const char *msg_id,
          const char *handle, const char *ak, size_t ak_len)
{
    char key[512];
    size_t kl = lease_key(key, sizeof(key), group, msg_id);
    int64_t vis = visible_at(handle);
    if (kl == 0 || vis < 0 || strlen(handle) >= sizeof(((struct lease *)0)->pub.handle) ||
        ak_len >= sizeof(((struct lease *)0)->pub.ak))
        return false;
    struct conn *cn = r->account;
    enum membudget_limit which;
    if (cn->mb_open && cn->r->budget != NULL &&
        !membudget_charge(cn->r->budget, &cn->mb, RENEW_LEASE_BYTES, &which))
        return false;
    uint64_t h = hmap_hash(key, kl);
    struct hnode *old = hmap_find(&r->leases, h, key, kl);
    if (old != NULL) {
        /* The same message again (its lease ran out meanwhile): the new
         * lease replaces the old. */
        struct lease *ol = old->val;
        lease_drop(r, ol);
    }
    struct lease *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        charge_release(r);
        return false;
    }
    snprintf(l->pub.group, sizeof(l->pub.group), "%s", group);
    snprintf(l->pub.topic, sizeof(l->pub.topic), "%s", topic);
    snprintf(l->pub.handle, sizeof(l->pub.handle), "%s", handle);
    memcpy(l->pub.ak, ak, ak_len);
    l->pub.ak_len = ak_len;
    l->visible_at_ms = vis;
    l->first_ms = clock_wall_ms();
    l->node = hmap_add(&r->leases, h, key, kl, l);
    if (l->node == NULL) {
        charge_release(r);
        free(l);
        return false;
    }
    metrics_renew_leases(r->metrics, 1);
    if (!r->armed) {
        uv_timer_start(&r->timer, on_tick, (uint64_t)r->conf.period_ms, (uint64_t)r->conf.period_ms);
        r->armed = true;
    }
    return true;
}

bool
renew_take(struct renew *r, const char *group, const char *msg_id, char *out, size_t cap)
{
    char key[512];
    size_t kl = lease_key(key, sizeof(key), group, msg_id);
    if (kl == 0)
        return false;
    struct hnode *node = hmap_find(&r->leases, hmap_hash(key, kl), key, kl);
    if (node == NULL)
        return false;
    struct lease *l = node->val;
    snprintf(out, cap, "%s", l->pub.handle);
    lease_drop(r, l);
    hmap_compact(&r->leases);
    disarm_if_empty(r);
    return true;
}

bool
renew_reply(struct renew *r, const struct rmq_cmd *cmd)
{
    if (r->inflight.size == 0 && r->sending == NULL)
        return false;
    void *v;
    int32_t op = cmd->opaque;
    struct lease *l;
    if (hmap_remove(&r->inflight, &op, sizeof(op), &v)) {
        l = v;
    } else if (r->sending != NULL && !r->sending->answered) {
        l = r->sending;
        l->answered = true;
    } else {
        return false;
    }
    l->opaque = 0;
    l->sent_ms = 0;
    const struct rmq_str *pt = rmq_cmd_field(cmd, "popTime", 7);
    const struct rmq_str *it = rmq_cmd_field(cmd, "invisibleTime", 13);
    if (cmd->code == RMQ_RESP_SUCCESS && pt != NULL && pt->p != NULL && it != NULL && it->p != NULL) {
        /* The new handle: the old one's fields with the new popTime and
         * invisibleTime (the 2nd and 3rd), as ChangeInvisibleDuration
         * answers. */
        const char *h = l->pub.handle;
        const char *sp1 = strchr(h, ' ');
        const char *sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
        const char *sp3 = sp2 != NULL ? strchr(sp2 + 1, ' ') : NULL;
        char nh[sizeof(l->pub.handle)];
        int n = sp3 != NULL ? snprintf(nh, sizeof(nh), "%.*s %.*s %.*s%s", (int)(sp1 - h), h, (int)pt->len,
                                       pt->p, (int)it->len, it->p, sp3)
                            : -1;
        int64_t vis = n > 0 && (size_t)n < sizeof(nh) ? visible_at(nh) : -1;
        if (vis >= 0) {
            memcpy(l->pub.handle, nh, (size_t)n + 1);
            l->visible_at_ms = vis;
            l->renew_times++;
            l->retries = 0;
            metrics_renew_granted(r->metrics);
            return true;
        }
    }
    /* The broker no longer has the lease (acked, or its time ran out),
     * or the renewal failed too often: renewed no more. */
    if (cmd->code == RMQ_RESP_NO_MESSAGE || cmd->code == RMQ_RESP_SUCCESS || ++l->retries >= r->conf.max_retry) {
        log_info("gRPC auto-renew: renewing a message of group %s failed (%d): %.*s; renewed no more",
                 l->pub.group, cmd->code,
                 cmd->remark.p != NULL ? (int)(cmd->remark.len < 200 ? cmd->remark.len : 200) : 0,
                 cmd->remark.p != NULL ? cmd->remark.p : "");
        if (l == r->sending) {
            l->dead = true;   /* on_tick still holds it */
        } else {
            lease_drop(r, l);
            hmap_compact(&r->leases);
            disarm_if_empty(r);
        }
    }
    return true;
}

size_t
renew_count(const struct renew *r)
{
    return r != NULL ? r->leases.size : 0;
}
