/*
 * post: see post.h.
 *
 * The slot table is the process-wide directory of hosts (one per thread
 * with a loop).  A poster takes its read lock for the moment it looks a
 * host up and queues mail; a host leaves under the write lock before its
 * mailbox closes, so mail never reaches a freed host.
 */
#include "runtime/post.h"

#include <errno.h>
#include <lauxlib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "net/conn.h"
#include "net/notify.h"
#include "runtime/wait.h"

static struct {
    pthread_rwlock_t lock;
    struct host_post *hosts[NOTIFY_MAX_SLOTS];
} slots = { PTHREAD_RWLOCK_INITIALIZER, { 0 } };

enum mail_kind { MAIL_SEND, MAIL_WAKE };

struct post_mail {
    struct mail m;
    struct host_post *to;      /* set by post_to, under the slot lock */
    enum mail_kind kind;
    uint64_t conn_id;
    bool expects_reply;        /* MAIL_SEND: count it in conn.replies_due */
    size_t len;
    char data[];
};

struct event_op {
    struct waiter w;
    uv_timer_t timer;
    struct qnode link;         /* in p->events while waiting */
    struct host_post *p;
    bool raised;
    post_event_fn cb;          /* a C wait (post_event_wait): no task */
    void *arg;
    size_t klen;
    char key[];
};

int
post_slot_of_conn(uint64_t conn_id)
{
    return (int)(conn_id >> CONN_ID_SLOT_SHIFT);
}

static void wake_local(struct host_post *p, const char *key, size_t klen);

static void
on_mail(struct mail *m, void *owner)
{
    struct post_mail *pm = (struct post_mail *)m;
    struct host_post *p = pm->to;
    if (pm->kind == MAIL_SEND) {
        struct qnode *pos, *tmp;
        q_foreach_safe(pos, tmp, &p->r->conns) {
            struct conn *c = container_of(pos, struct conn, link);
            if (c->id == pm->conn_id) {
                if (conn_send(c, pm->data, pm->len, NULL, 0) != 0)
                    log_debug("post to connection %s dropped: closed", c->peer);
                else if (pm->expects_reply && c->replies_due < UINT32_MAX)
                    c->replies_due++;
                break;
            }
        }
    } else {
        notify_taken(pm->data, pm->len, p->slot);
        wake_local(p, pm->data, pm->len);
    }
    free(pm);
}

int
post_attach(struct host_post *p, struct reactor *r, void *owner)
{
    q_init(&p->events);
    p->r = r;
    p->slot = r->slot;
    if (p->slot < 0 || p->slot >= NOTIFY_MAX_SLOTS) {
        err_set("host slot %d out of range", p->slot);
        return -EINVAL;
    }
    int rc = mailbox_init(&p->mb, &r->loop, owner);
    if (rc != 0) {
        err_set("mailbox: %s", uv_strerror(rc));
        return rc;
    }
    p->open = 1;
    pthread_rwlock_wrlock(&slots.lock);
    if (slots.hosts[p->slot] == NULL) {
        slots.hosts[p->slot] = p;
        p->registered = 1;
    }
    pthread_rwlock_unlock(&slots.lock);
    return 0;
}

void
post_detach(struct host_post *p)
{
    if (p->registered) {
        pthread_rwlock_wrlock(&slots.lock);
        slots.hosts[p->slot] = NULL;
        pthread_rwlock_unlock(&slots.lock);
        p->registered = 0;
    }
    if (p->open) {
        mailbox_close(&p->mb);
        p->open = 0;
    }
}

static int
post_to(int slot, struct post_mail *pm)
{
    int rc = -ENOENT;
    pthread_rwlock_rdlock(&slots.lock);
    struct host_post *p = slot >= 0 && slot < NOTIFY_MAX_SLOTS ? slots.hosts[slot] : NULL;
    if (p != NULL) {
        pm->to = p;
        rc = mailbox_post(&p->mb, &pm->m) == 0 ? 0 : -ENOENT;
    }
    pthread_rwlock_unlock(&slots.lock);
    if (rc != 0)
        free(pm);
    return rc;
}

static struct post_mail *
mail_new(enum mail_kind kind, const void *data, size_t len)
{
    struct post_mail *pm = malloc(sizeof(*pm) + len);
    if (pm == NULL)
        return NULL;
    pm->m.fn = on_mail;
    pm->kind = kind;
    pm->len = len;
    memcpy(pm->data, data, len);
    return pm;
}

int
post_send(struct host_post *from, uint64_t conn_id, const void *bytes,
          size_t len, bool expects_reply)
{
    int slot = post_slot_of_conn(conn_id);
    if (slot == from->slot) {
        /* Our own connection: no mail needed. */
        struct qnode *pos, *tmp;
        q_foreach_safe(pos, tmp, &from->r->conns) {
            struct conn *c = container_of(pos, struct conn, link);
            if (c->id == conn_id) {
                int rc = conn_send(c, bytes, len, NULL, 0);
                if (rc == 0 && expects_reply && c->replies_due < UINT32_MAX)
                    c->replies_due++;
                return rc;
            }
        }
        return -ENOENT;
    }
    struct post_mail *pm = mail_new(MAIL_SEND, bytes, len);
    if (pm == NULL)
        return -ENOMEM;
    pm->conn_id = conn_id;
    pm->expects_reply = expects_reply;
    return post_to(slot, pm);
}

int
post_raise(struct host_post *from, const char *key, size_t klen)
{
    int targets[NOTIFY_MAX_SLOTS];
    int n = notify_raise(key, klen, targets, NOTIFY_MAX_SLOTS);
    for (int i = 0; i < n; i++) {
        if (from != NULL && targets[i] == from->slot) {
            notify_taken(key, klen, targets[i]);
            wake_local(from, key, klen);
            continue;
        }
        struct post_mail *pm = mail_new(MAIL_WAKE, key, klen);
        if (pm == NULL)
            return -ENOMEM;
        (void)post_to(targets[i], pm);
    }
    return 0;
}

/* {{{ Event waits */

static void
event_timer_closed(uv_handle_t *t)
{
    membudget_burst_free(t->data);   /* an event_op (event_start) */
}

static void on_event_timeout(uv_timer_t *t);

/* A C wait's end: one-shot, op is freed once its timer has closed; the
 * callback may start a new wait on the same key. */
static void
event_fire(struct event_op *op)
{
    post_event_fn cb = op->cb;
    void *arg = op->arg;
    bool raised = op->raised;
    uv_close((uv_handle_t *)&op->timer, event_timer_closed);
    cb(arg, raised);
}

static void
event_end(struct event_op *op, bool raised)
{
    if (!q_linked(&op->link))
        return;  /* already ended */
    q_remove(&op->link);
    op->raised = raised;
    uv_timer_stop(&op->timer);
    (void)notify_interest(op->key, op->klen, op->p->slot, -1);
    if (op->cb != NULL) {
        if (raised) {
            /* Called back from the loop, never from inside post_raise:
             * its caller (a send being answered) still uses the host's
             * decode arena, which the callback may decode into. */
            if (uv_timer_start(&op->timer, on_event_timeout, 0, 0) == 0)
                return;
        }
        event_fire(op);
        return;
    }
    host_wake(&op->w);
}

static void
wake_local(struct host_post *p, const char *key, size_t klen)
{
    /* Move the matching waits out first: waking resumes tasks, which may
     * start new waits on the same key (they wait for the next raise). */
    struct qnode woken;
    q_init(&woken);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &p->events) {
        struct event_op *op = container_of(pos, struct event_op, link);
        if (op->klen == klen && memcmp(op->key, key, klen) == 0) {
            q_remove(pos);
            q_insert_tail(&woken, pos);
        }
    }
    while (!q_empty(&woken)) {
        struct event_op *op = container_of(woken.next, struct event_op, link);
        event_end(op, true);
    }
}

static void
on_event_timeout(uv_timer_t *t)
{
    struct event_op *op = t->data;
    if (op->cb != NULL && !q_linked(&op->link)) {
        event_fire(op);   /* raised before: the deferred call */
        return;
    }
    event_end(op, false);
}

static int
event_push(lua_State *L, struct waiter *w)
{
    struct event_op *op = (struct event_op *)w;
    lua_pushboolean(L, op->raised);
    uv_close((uv_handle_t *)&op->timer, event_timer_closed);
    return 1;
}

static void
event_abandon(struct waiter *w)
{
    struct event_op *op = (struct event_op *)w;
    if (q_linked(&op->link)) {
        q_remove(&op->link);
        (void)notify_interest(op->key, op->klen, op->p->slot, -1);
    }
    membudget_burst_free(op);  /* the timer was closed with the loop */
}

/* A wait on key in p's host until it is raised or timeout_ms passes:
 * cb (a C wait) or, with cb NULL, the caller's task (a Lua one).  NULL
 * with err_set(). */
static struct event_op *
event_start(struct host_post *p, const char *key, size_t klen, uint64_t timeout_ms,
            post_event_fn cb, void *arg)
{
    /* From the burst arena: a held-pull flood makes them by the thousand
     * (core/membudget.h). */
    struct event_op *op = membudget_burst_calloc(sizeof(*op) + klen);
    if (op == NULL) {
        err_set("out of memory");
        return NULL;
    }
    op->p = p;
    op->cb = cb;
    op->arg = arg;
    op->klen = klen;
    memcpy(op->key, key, klen);
    op->timer.data = op;
    q_init(&op->link);
    int rc = uv_timer_init(&p->r->loop, &op->timer);
    if (rc != 0) {
        membudget_burst_free(op);
        err_set("timer: %s", uv_strerror(rc));
        return NULL;
    }
    if (notify_interest(key, klen, p->slot, +1) != 0) {
        uv_close((uv_handle_t *)&op->timer, event_timer_closed);
        err_set("out of memory");
        return NULL;
    }
    q_insert_tail(&p->events, &op->link);
    rc = uv_timer_start(&op->timer, on_event_timeout, timeout_ms, 0);
    if (rc != 0) {
        q_remove(&op->link);
        (void)notify_interest(key, klen, p->slot, -1);
        uv_close((uv_handle_t *)&op->timer, event_timer_closed);
        err_set("timer: %s", uv_strerror(rc));
        return NULL;
    }
    return op;
}

int
post_wait_event(lua_State *L, struct host_post *p, const char *key,
                size_t klen, uint64_t timeout_ms)
{
    struct event_op *op = event_start(p, key, klen, timeout_ms, NULL, NULL);
    if (op == NULL)
        return luaL_error(L, "%s", err_msg());
    op->w.push = event_push;
    op->w.abandon = event_abandon;
    return host_wait(L, &op->w);
}

struct post_event *
post_event_wait(struct host_post *p, const char *key, size_t klen,
                uint64_t timeout_ms, post_event_fn cb, void *arg)
{
    return (struct post_event *)event_start(p, key, klen, timeout_ms, cb, arg);
}

void
post_event_cancel(struct post_event *e)
{
    struct event_op *op = (struct event_op *)e;
    if (q_linked(&op->link)) {
        q_remove(&op->link);
        (void)notify_interest(op->key, op->klen, op->p->slot, -1);
    }
    /* After the host's loop closed (host_free), its walk closed the
     * timer already: only the memory is left. */
    if (uv_is_closing((uv_handle_t *)&op->timer)) {
        membudget_burst_free(op);
        return;
    }
    uv_timer_stop(&op->timer);
    uv_close((uv_handle_t *)&op->timer, event_timer_closed);
}

/* }}} */
