/*
 * syncwait: SYNC_FLUSH waits of one Lua host (see syncwait.h).
 *
 * One waiter per Lua state and store handle, living on the state's loop.
 * The flush thread calls sub.notify (uv_async_send: safe from any
 * thread); the loop thread then completes the waits the new flushed
 * offset covers, oldest first (the puts of one loop end in increasing
 * order).  A timer completes waits whose syncFlushTimeout passed.  The
 * notifier is subscribed to the flusher, and its async handle keeps the
 * loop alive, only while waits are pending; the flush thread never
 * touches Lua or the loop's state.
 */
#include "runtime/syncwait.h"

#include <lauxlib.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/queue.h"
#include "runtime/host.h"
#include "store/replica.h"

struct syncwait {
    struct flush_sub sub;
    struct reactor_gate gate;   /* its loop's, when syncwait_gate() made it */
    struct reactor *r;
    uv_async_t async;
    uv_timer_t timer;
    struct store *s;            /* NULL once the handle is closed */
    struct qnode waits;         /* struct swait, by end offset */
    struct qnode pool;          /* free struct swait */
    int closes;                 /* handle close callbacks still to run */
    bool subscribed;
};

struct swait {
    struct waiter w;
    struct qnode link;
    struct syncwait *n;
    int64_t end;
    int64_t deadline;           /* monotonic ms: the flush's */
    int64_t replica_deadline;   /* the slave's (slaveTimeout) */
    bool timed_out;
    int nvals;                  /* results already on the stack (puts) */
    bool is_put;
    bool need_flush;            /* waits for an fsync covering end */
    int replica;                /* REPLICA_*: SYNC_MASTER's part */
    int outcome;                /* how it ended (SYNCWAIT_*) */
    syncwait_fn fn;             /* a C wait: called instead of a wake */
    void *arg;
};

enum { REPLICA_NONE, REPLICA_WAIT, REPLICA_UNAVAILABLE };

static int64_t mono_ms(void);

/* Each part of a wait is done when satisfied or past its own deadline
 * (now < 0: deadlines not checked); the wait completes when both are,
 * as RocketMQ combines the flush and the replica futures. */
static bool
flush_ok(struct syncwait *n, const struct swait *w)
{
    return !w->need_flush || store_flushed(n->s) >= w->end;
}

static bool
replica_ok(struct syncwait *n, const struct swait *w)
{
    return w->replica != REPLICA_WAIT || store_ha_acked(n->s) >= w->end;
}

static bool
covered(struct syncwait *n, const struct swait *w)
{
    return flush_ok(n, w) && replica_ok(n, w);
}

static bool
finished(struct syncwait *n, const struct swait *w, int64_t now)
{
    bool f = flush_ok(n, w) || (now >= 0 && now >= w->deadline);
    bool r = replica_ok(n, w) || (now >= 0 && now >= w->replica_deadline);
    return f && r;
}

/* When to look at w again: the earliest deadline of a part still
 * pending (now when they have all passed). */
static int64_t
next_deadline(struct syncwait *n, const struct swait *w)
{
    int64_t now = mono_ms(), d = INT64_MAX;
    if (!flush_ok(n, w) && w->deadline > now)
        d = w->deadline;
    if (!replica_ok(n, w) && w->replica_deadline > now && w->replica_deadline < d)
        d = w->replica_deadline;
    return d == INT64_MAX ? now : d;
}

/* How a finished wait ended: the replica's status wins when both
 * failed, as in RocketMQ. */
static int
outcome_of(struct syncwait *n, const struct swait *w)
{
    if (w->replica == REPLICA_UNAVAILABLE)
        return SYNCWAIT_SLAVE_NOT_AVAILABLE;
    if (!replica_ok(n, w))
        return SYNCWAIT_SLAVE_TIMED_OUT;
    if (!flush_ok(n, w))
        return SYNCWAIT_TIMED_OUT;
    return SYNCWAIT_DURABLE;
}

static int64_t
mono_ms(void)
{
    return clock_mono_ns() / 1000000;
}

static void
notify_from_flusher(struct flush_sub *sub, int64_t flushed)
{
    (void)flushed;
    struct syncwait *n = container_of(sub, struct syncwait, sub);
    (void)uv_async_send(&n->async);  /* only fails on a closing handle */
}

static void
notify_idle(struct syncwait *n)
{
    if (!q_empty(&n->waits) || n->s == NULL)
        return;
    if (n->subscribed) {
        flusher_unsubscribe(&n->s->flusher, &n->sub);
        n->subscribed = false;
    }
    uv_timer_stop(&n->timer);
    uv_unref((uv_handle_t *)&n->async);
}

static void on_timer(uv_timer_t *t);

static void
rearm(struct syncwait *n)
{
    if (q_empty(&n->waits)) {
        uv_timer_stop(&n->timer);
        return;
    }
    struct swait *w = container_of(n->waits.next, struct swait, link);
    int64_t left = next_deadline(n, w) - mono_ms();
    /* Cannot fail on an initialised timer with a callback. */
    (void)uv_timer_start(&n->timer, on_timer, left > 0 ? (uint64_t)left : 0, 0);
}

/* Completes waits: covered ones, and (with now >= 0) expired ones. */
static void
complete(struct syncwait *n, int64_t now)
{
    while (n->s != NULL && !q_empty(&n->waits)) {
        struct swait *w = container_of(n->waits.next, struct swait, link);
        if (!finished(n, w, now))
            break;
        w->outcome = outcome_of(n, w);
        w->timed_out = w->outcome != SYNCWAIT_DURABLE &&
                       w->outcome != SYNCWAIT_SLAVE_NOT_AVAILABLE;
        q_remove(&w->link);
        if (w->fn != NULL) {
            syncwait_fn fn = w->fn;
            void *arg = w->arg;
            int outcome = w->outcome;
            q_insert_tail(&n->pool, &w->link);
            fn(arg, outcome);
            continue;
        }
        /* Resumes the task now; it may put again or close the handle. */
        host_wake(&w->w);
    }
    if (n->s != NULL) {
        rearm(n);
        notify_idle(n);
    }
}

static void
on_async(uv_async_t *a)
{
    complete(a->data, -1);
}

static void
on_timer(uv_timer_t *t)
{
    complete(t->data, mono_ms());
}

static void
notify_closed(uv_handle_t *h)
{
    struct syncwait *n = h->data;
    if (--n->closes > 0)
        return;
    while (!q_empty(&n->pool)) {
        struct qnode *x = n->pool.next;
        q_remove(x);
        free(container_of(x, struct swait, link));
    }
    free(n);
}

struct syncwait *
syncwait_new(lua_State *L, struct store *s)
{
    return syncwait_new_on(host_of(L), s);
}

struct syncwait *
syncwait_new_on(struct host *h, struct store *s)
{
    struct syncwait *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->s = s;
    n->r = &h->r;
    n->sub.notify = notify_from_flusher;
    q_init(&n->sub.link);
    q_init(&n->waits);
    q_init(&n->pool);
    if (uv_async_init(&h->r.loop, &n->async, on_async) != 0) {
        free(n);
        return NULL;
    }
    n->async.data = n;
    uv_unref((uv_handle_t *)&n->async);
    if (uv_timer_init(&h->r.loop, &n->timer) != 0) {
        /* The async handle must be closed before n can go. */
        n->closes = 1;
        uv_close((uv_handle_t *)&n->async, notify_closed);
        return NULL;
    }
    n->timer.data = n;
    uv_unref((uv_handle_t *)&n->timer);
    n->closes = 2;
    return n;
}

void
syncwait_close(struct syncwait *n)
{
    /* C waits end now, unanswered (their connections are going). */
    struct qnode *x = n->waits.next;
    while (x != &n->waits) {
        struct qnode *next = x->next;
        struct swait *w = container_of(x, struct swait, link);
        if (w->fn != NULL) {
            q_remove(x);
            q_insert_tail(&n->pool, x);
            w->fn(w->arg, SYNCWAIT_CLOSED);
        }
        x = next;
    }
    if (n->subscribed)
        flusher_unsubscribe(&n->s->flusher, &n->sub);
    n->subscribed = false;
    /* A host torn down first (a server worker's loop closes before its
     * Lua state) already closed the handles with no callback, and its
     * reactor is gone. */
    bool torn_down = uv_is_closing((uv_handle_t *)&n->async);
    if (!torn_down && n->r->gate == &n->gate) {
        /* Replies still gated on it have their puts staged: commit. */
        (void)store_commit(n->s);
        n->r->gate = NULL;
    }
    n->s = NULL;
    if (torn_down) {
        notify_closed((uv_handle_t *)&n->async);
        notify_closed((uv_handle_t *)&n->timer);
        return;
    }
    uv_timer_stop(&n->timer);
    uv_close((uv_handle_t *)&n->async, notify_closed);
    uv_close((uv_handle_t *)&n->timer, notify_closed);
}

static int
swait_push(lua_State *L, struct waiter *wt)
{
    struct swait *w = container_of(wt, struct swait, w);
    struct syncwait *n = w->n;
    if (q_linked(&w->link)) {
        q_remove(&w->link);  /* host_wait refused to wait */
        if (n->s != NULL) {
            rearm(n);
            notify_idle(n);
        }
    }
    bool timed_out = w->timed_out;
    int nvals = w->nvals;
    bool is_put = w->is_put;
    int outcome = w->outcome;
    q_insert_tail(&n->pool, &w->link);
    if (is_put) {
        static const char *const status[] = {
            [SYNCWAIT_DURABLE] = "PUT_OK",
            [SYNCWAIT_TIMED_OUT] = "FLUSH_DISK_TIMEOUT",
            [SYNCWAIT_CLOSED] = "FLUSH_DISK_TIMEOUT",
            [SYNCWAIT_SLAVE_TIMED_OUT] = "FLUSH_SLAVE_TIMEOUT",
            [SYNCWAIT_SLAVE_NOT_AVAILABLE] = "SLAVE_NOT_AVAILABLE",
        };
        lua_pushstring(L, status[outcome]);
        lua_rotate(L, -(nvals + 1), 1);  /* status before the results */
        return nvals + 1;
    }
    if (timed_out) {
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}


/* The loop's gate: commit what is staged; the ticket (the failed-commit
 * count before the put) must not have moved. */
static int
gate_pass(struct reactor_gate *g, int64_t ticket)
{
    struct syncwait *n = container_of(g, struct syncwait, gate);
    if (n->s == NULL || store_commit(n->s) != 0)
        return -1;
    return clog_discards(&n->s->clog) == ticket ? 0 : -1;
}

bool
syncwait_gate(struct syncwait *n)
{
    if (n->s == NULL || !n->s->clog.staging)
        return false;
    struct reactor_gate *g = n->r->gate;
    if (g == NULL) {
        n->gate.pass = gate_pass;
        n->r->gate = &n->gate;
        return true;
    }
    /* Another waiter's gate commits the same store just as well. */
    return g->pass == gate_pass && container_of(g, struct syncwait, gate)->s == n->s;
}

int64_t
syncwait_ticket(struct syncwait *n)
{
    return clog_discards(&n->s->clog);
}

bool
syncwait_pending(struct syncwait *n)
{
    return !q_empty(&n->waits);
}

static struct swait *
swait_take(struct syncwait *n, int64_t end, int timeout_ms)
{
    struct swait *w;
    if (!q_empty(&n->pool)) {
        struct qnode *x = n->pool.next;
        q_remove(x);
        w = container_of(x, struct swait, link);
    } else {
        w = malloc(sizeof(*w));
        if (w == NULL)
            return NULL;
    }
    memset(w, 0, sizeof(*w));
    w->n = n;
    w->end = end;
    w->deadline = mono_ms() + timeout_ms;
    w->replica_deadline = w->deadline;
    w->need_flush = true;
    return w;
}

/* A put's waits: the flush with SYNC_FLUSH, a slave with SYNC_MASTER
 * (slaveTimeout, or SLAVE_NOT_AVAILABLE decided now: isSlaveOK).  The
 * role is the store's at this moment, not the conf's: in controller mode
 * a master with allAckInSyncStateSet serves as SYNC_MASTER whatever
 * brokerRole the conf names (store_set_role), and the send path decided
 * to wait by the same role (store_put_must_wait). */
static void
swait_put(struct syncwait *n, struct swait *w, int timeout_ms)
{
    const struct store_conf *c = &n->s->conf;
    w->need_flush = c->sync_flush;
    if (!store_role_sync_master(n->s))
        return;
    if (!store_slave_ok(n->s, w->end)) {
        w->replica = REPLICA_UNAVAILABLE;
        return;
    }
    w->replica = REPLICA_WAIT;
    w->replica_deadline = mono_ms() + c->slave_timeout_ms;
}

/* Queues w; false when `end` is durable already (w is back in the pool,
 * or still the caller's for a Lua wait: see below). */
static bool
swait_queue(struct syncwait *n, struct swait *w)
{
    bool first = q_empty(&n->waits);
    q_insert_tail(&n->waits, &w->link);
    if (first) {
        uv_ref((uv_handle_t *)&n->async);
        if (!n->subscribed) {
            flusher_subscribe(&n->s->flusher, &n->sub);
            n->subscribed = true;
        }
        rearm(n);
    }
    if (w->need_flush)
        store_request_flush(n->s, w->end);
    /* A flush (or an ack) that came before we subscribed told nobody. */
    if (covered(n, w)) {
        w->outcome = outcome_of(n, w);
        q_remove(&w->link);
        notify_idle(n);
        rearm(n);
        return false;
    }
    return true;
}

int
syncwait_wait_cb(struct syncwait *n, int64_t end, int timeout_ms,
                 syncwait_fn fn, void *arg)
{
    struct swait *w = swait_take(n, end, timeout_ms);
    if (w == NULL)
        return -ENOMEM;
    w->fn = fn;
    w->arg = arg;
    swait_put(n, w, timeout_ms);
    if (!swait_queue(n, w)) {
        int outcome = w->outcome;
        q_insert_tail(&n->pool, &w->link);
        return 1 + outcome;
    }
    return 0;
}

int
syncwait_wait(lua_State *L, struct syncwait *n, int64_t end, int timeout_ms,
              int nvals, bool is_put)
{
    struct swait *w = swait_take(n, end, timeout_ms);
    if (w == NULL)
        return luaL_error(L, "out of memory");
    w->w.push = swait_push;
    w->nvals = nvals;
    w->is_put = is_put;
    if (is_put)
        swait_put(n, w, timeout_ms);
    if (!swait_queue(n, w)) {
        w->w.done = true;
        return swait_push(L, &w->w);
    }
    return host_wait(L, &w->w);
}

