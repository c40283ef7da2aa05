/*
 * host: see host.h.  This file is the only place that resumes
 * coroutines (host_task_run) and the only place that turns a handler's
 * result into a reply.
 */
#include "runtime/host.h"
#include "runtime/lua_source.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl/acl.h"
#include "broker/admission.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "runtime/cmd.h"
#include "runtime/lua_compat.h"
#include "store/access.h"
#include "runtime/lconn.h"
#include "proto/header.h"
#include "proto/native.h"
#include "runtime/natives.h"
#include "rmq_codes.h"

static const char host_key = 'h';  /* registry key: address is unique */

#define NO_SLOT UINT32_MAX

/* {{{ Tasks */

static struct task *
task_alloc(struct host *h)
{
    if (h->free_head == NO_SLOT) {
        uint32_t n = h->ntasks ? h->ntasks * 2 : 64;
        struct task **nt = realloc(h->tasks, n * sizeof(*nt));
        if (nt == NULL)
            return NULL;
        h->tasks = nt;
        uint32_t *nn = realloc(h->task_next, n * sizeof(*nn));
        if (nn == NULL)
            return NULL;
        h->task_next = nn;
        for (uint32_t i = h->ntasks; i < n; i++) {
            nt[i] = NULL;        /* made on first use */
            nn[i] = h->free_head;
            h->free_head = i;
        }
        h->ntasks = n;
    }
    uint32_t slot = h->free_head;
    struct task *t = h->tasks[slot];
    if (t == NULL) {
        t = calloc(1, sizeof(*t));
        if (t == NULL)
            return NULL;
        t->host = h;
        t->slot = slot;
        h->tasks[slot] = t;
    }
    if (t->co == NULL) {
        /* First use of the slot: its coroutine lives in threads[slot]. */
        lua_State *L = h->L;
        lua_rawgeti(L, LUA_REGISTRYINDEX, h->threads_ref);
        t->co = lua_newthread(L);
        lua_rawseti(L, -2, (lua_Integer)t->slot + 1);
        lua_pop(L, 1);
        *(struct task **)lua_getextraspace(t->co) = t;
        h->tasks_kept++;
    }
    h->free_head = h->task_next[slot];
    t->conn = NULL;
    t->is_request = t->oneway = t->waiting = t->joined = t->done = false;
    t->status = LUA_OK;
    t->nres = 0;
    t->charged = 0;
    h->tasks_live++;
    return t;
}

static void
task_release(struct task *t)
{
    struct host *h = t->host;
    if (t->status != LUA_OK && t->status != LUA_YIELD)
        (void)lua_resetthread(t->co);
    lua_settop(t->co, 0);
    if (t->conn != NULL) {
        conn_unref(t->conn);
        t->conn = NULL;
    }
    uint32_t slot = t->slot;
    h->task_next[slot] = h->free_head;
    h->free_head = slot;
    h->tasks_live--;
    if (h->tasks_kept - h->tasks_live > HOST_KEEP_IDLE_TASKS) {
        /* Rare: only after more than HOST_KEEP_IDLE_TASKS ran at once.
         * The slot stays on the free list, empty. */
        lua_State *L = h->L;
        lua_rawgeti(L, LUA_REGISTRYINDEX, h->threads_ref);
        lua_pushnil(L);
        lua_rawseti(L, -2, (lua_Integer)slot + 1);
        lua_pop(L, 1);
        h->tasks[slot] = NULL;
        free(t);
        h->tasks_kept--;
        h->tasks_dropped++;
    }
}

bool
host_reclaim(struct host *h)
{
    struct membudget *b = h->r.budget;
    bool collected = false;
    if (h->tasks_dropped > 0) {
        h->tasks_dropped = 0;
        int before = lua_gc(h->L, LUA_GCCOUNT);
        (void)lua_gc(h->L, LUA_GCCOLLECT);
        log_debug("idle task coroutines dropped: Lua heap %d -> %d KiB", before,
                  lua_gc(h->L, LUA_GCCOUNT));
        collected = true;
    }
    /* After a collection at once (what it freed is what a trim gives
     * back); else when any worker's connections released 4 MiB since
     * the last trim (output buffers, process-wide). */
    if (b != NULL)
        (void)membudget_trim(b, collected ? 0 : 4 << 20, collected ? 0 : 1000);
    return collected;
}

/* Queues the reply for a request task whose coroutine returned (or
 * failed). */
static void
reply_send(struct task *t, int status, int nres)
{
    struct host *h = t->host;
    lua_State *co = t->co;
    struct conn *c = t->conn;
    if (t->oneway || c == NULL || c->closed)
        return;
    struct rmq_cmd base;
    memset(&base, 0, sizeof(base));
    base.opaque = t->opaque;
    base.serialize = t->serialize;
    base.flag = RMQ_RPC_RESPONSE;
    const struct store_slices *slices = NULL;
    struct rcbuf *shared = NULL;
    const uint8_t *body = NULL;
    size_t blen = 0;
    if (status == LUA_OK) {
        if (nres == 0 || lua_isnil(co, -1))
            return;  /* the handler chose not to answer */
        int idx = lua_gettop(co);
        if (lua_type(co, idx) != LUA_TTABLE) {
            lua_pushfstring(co, "handler returned a %s, not a reply table",
                            luaL_typename(co, idx));
            log_error("request code %d: %s", t->code, lua_tostring(co, -1));
            status = LUA_ERRRUN;
        } else if (lcmd_encode_reply(co, idx, h, &base, &body, &blen, &slices,
                                     &shared) != 0) {
            lua_pushfstring(co, "bad reply: %s", err_msg());
            log_error("request code %d: %s", t->code, lua_tostring(co, -1));
            status = LUA_ERRRUN;
        }
    }
    if (status != LUA_OK) {
        /* The log has the whole text and the traceback (task_finish);
         * the peer gets the message without its "file:line:" position
         * and without anything that looks like a server path. */
        size_t mlen = 0;
        const char *msg = lua_tolstring(co, -1, &mlen);
        char remark[1024];
        size_t rlen = msg ? lheader_scrub(msg, mlen, remark, sizeof(remark)) : 0;
        if (rlen == 0)
            rlen = (size_t)snprintf(remark, sizeof(remark), "internal error");
        struct rmq_cmd e = base;
        e.code = RMQ_RESP_SYSTEM_ERROR;
        e.language = RMQ_LANG_JAVA;
        e.version = RMQ_VERSION_409;
        e.remark.p = remark;
        e.remark.len = (uint32_t)rlen;
        buf_reset(&h->enc);
        body = NULL;
        blen = 0;
        slices = NULL;
        shared = NULL;
        if (rmq_cmd_encode(&e, &h->enc) != 0)
            return;
    }
    if (h->metrics != NULL) {
        int32_t code = RMQ_RESP_SYSTEM_ERROR;   /* as answered above */
        if (status == LUA_OK) {
            /* Raw, as the encoder read it: no metamethod runs here. */
            lua_pushliteral(co, "code");
            lua_rawget(co, -2);
            code = (int32_t)lua_tointeger(co, -1);
            lua_pop(co, 1);
        }
        metrics_rpc(h->metrics, t->code, code, clock_mono_ns() - t->start_ns);
    }
    /* The reply table (and any records in it) is still on co's stack. */
    int rc = slices != NULL
        ? conn_send_iov(c, buf_head(&h->enc), buf_len(&h->enc), slices->iov, slices->n)
        : shared != NULL
        ? conn_send_shared(c, buf_head(&h->enc), buf_len(&h->enc), shared)
        : conn_send(c, buf_head(&h->enc), buf_len(&h->enc), body, blen);
    if (rc != 0 && rc != -RMQ_ECLOSED)
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
}

/* A request task ended: its reply (if any) is queued, then the
 * connection's in-flight count drops (which may let it read again). */
static void
task_reply(struct task *t, int status, int nres)
{
    t->host->requests_live--;
    reply_send(t, status, nres);
    if (t->conn != NULL) {
        if (t->charged != 0 && t->conn->mb_open) {
            membudget_release(t->conn->r->budget, &t->conn->mb, t->charged);
            t->charged = 0;
        }
        conn_request_done(t->conn);
    }
}

static void
task_finish(struct task *t, int status, int nres)
{
    lua_State *co = t->co;
    t->done = true;
    t->status = status;
    t->nres = nres;
    if (status != LUA_OK) {
        /* The traceback must be taken now, while the coroutine's frames
         * are still there.  Stack: err -> msg, traceback. */
        const char *msg = luaL_tolstring(co, -1, NULL);
        lua_remove(co, -2);
        luaL_traceback(co, co, msg, 0);
        if (t->is_request)
            log_error("request code %d failed: %s", t->code, lua_tostring(co, -1));
        else if (!t->joined)
            log_error("task failed: %s", lua_tostring(co, -1));
        if (t->is_request)
            lua_pop(co, 1);  /* the reply carries the message only */
        else
            lua_remove(co, -2);  /* a joiner re-raises with the traceback */
    }
    if (t->is_request)
        task_reply(t, status, status == LUA_OK ? nres : 1);
    if (!t->joined)
        task_release(t);
    else if (t->host->r.in_loop)
        uv_stop(&t->host->r.loop);   /* the joiner's UV_RUN_ONCE: see host_wake */
}

/* The one resume loop. */
static void
task_run(struct task *t, int nargs)
{
    struct host *h = t->host;
    lua_State *prev = h->running;
    int nres = 0;
    h->running = t->co;
    int status = lua_resume(t->co, NULL, nargs, &nres);
    h->running = prev;
    if (status == LUA_YIELD) {
        if (t->waiting)
            return;  /* an rmq wait holds the task; host_wake resumes it */
        lua_settop(t->co, 0);
        lua_pushliteral(t->co, "coroutine yielded outside an rmq wait "
                               "(use rmq.net APIs to wait)");
        status = LUA_ERRRUN;
        /* A suspended coroutine cannot be resumed into an error; reset. */
        t->status = LUA_ERRRUN;
    }
    task_finish(t, status, nres);
}

struct task *
host_spawn(struct host *h, lua_State *L, int nargs)
{
    struct task *t = task_alloc(h);
    if (t == NULL) {
        lua_pop(L, nargs + 1);
        return NULL;
    }
    lua_xmove(L, t->co, nargs + 1);
    task_run(t, nargs);
    return t;
}

struct task *
host_spawn_joined(struct host *h, lua_State *L, int nargs)
{
    struct task *t = task_alloc(h);
    if (t == NULL) {
        lua_pop(L, nargs + 1);
        return NULL;
    }
    t->joined = true;
    lua_xmove(L, t->co, nargs + 1);
    task_run(t, nargs);
    return t;
}

int
host_collect(struct host *h, struct task *t, lua_State *L)
{
    (void)h;
    lua_State *co = t->co;
    if (t->status != LUA_OK) {
        lua_pushstring(L, lua_tostring(co, -1));
        task_release(t);
        return lua_error(L);
    }
    int n = t->nres;
    if (!lua_checkstack(L, n + 1)) {
        task_release(t);
        return luaL_error(L, "too many results");
    }
    lua_xmove(co, L, n);
    task_release(t);
    return n;
}

/* }}} */

/* {{{ Waiting */

static int
wait_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct waiter *w = (struct waiter *)ctx;
    if (w->task != NULL)
        w->task->waiting = false;
    q_remove(&w->link);       /* host_wait linked it before yielding */
    return w->push(L, w);
}

int
host_wait(lua_State *L, struct waiter *w)
{
    struct host *h = host_of(L);
    /* Only our task coroutines are ever h->running, and only theirs have
     * a task pointer in the extra space (other threads' is garbage). */
    struct task *t = h->running == L ? *(struct task **)lua_getextraspace(L)
                                     : NULL;
    if (t != NULL && lua_isyieldable(L)) {
        w->task = t;
        w->blocking = NULL;
        t->waiting = true;
        q_insert_tail(&h->waits, &w->link);
        return lua_yieldk(L, 0, (lua_KContext)w, wait_k);
    }
    if (h->r.in_loop) {
        /* Waiting here would need a nested uv_run. */
        w->task = NULL;
        w->blocking = NULL;
        w->done = true;
        w->push(L, w);
        return luaL_error(L, "cannot wait here: not in an rmq task "
                             "(a __gc, an iterator, or a C callback)");
    }
    w->task = NULL;
    w->blocking = h;
    while (!w->done)
        reactor_run(&h->r, UV_RUN_ONCE);
    return w->push(L, w);
}

void
host_wake(struct waiter *w)
{
    w->done = true;
    if (w->task != NULL)
        task_run(w->task, 0);
    else if (w->blocking != NULL && w->blocking->r.in_loop)
        /* libuv (1.44) runs due timers at the top of a UV_RUN_ONCE pass
         * and then polls without a timeout when no timer is left: a wait
         * a timer ends there would block until unrelated I/O.  Stopping
         * the loop makes that poll return at once.  (Only from inside
         * uv_run: outside, the flag would stop the next run unasked.) */
        uv_stop(&w->blocking->r.loop);
}

/* }}} */

/* {{{ Frames arriving on any connection of this host */

/*
 * A response no call of ours waits for: handed to the hook Lua set under
 * HOST_RESPONSE_HOOK (function(ctx, cmd), run as a detached task), so a
 * request sent with net.send_to to a connection of this host (e.g. a
 * broker asking a client for its running info on behalf of an admin
 * connected to another worker) can have its answer relayed.  Returns
 * false when there is no hook (the caller drops the response).
 */
static bool
host_on_response(struct host *h, struct conn *c, const struct rmq_cmd *decoded,
                 size_t used)
{
    lua_State *L = h->L;
    if (h->stopping || c->owner_ref < 0 || !lua_checkstack(L, 3))
        return false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, HOST_RESPONSE_HOOK) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return false;
    }
    /* Only answers to requests we sent it (net.send_to) reach Lua: a
     * peer writing response frames of its own would otherwise make one
     * task each.  The rest are dropped: a late answer to one of our own
     * calls quietly, an accepted peer's with one log line per 10 s. */
    if (c->replies_due == 0) {
        lua_pop(L, 1);
        c->stray++;
        if (c->listener < 0) {
            log_debug("response with unknown opaque %d from %s dropped (timed out?)",
                      decoded->opaque, c->peer);
            return true;
        }
        h->strays_dropped++;
        int64_t now = clock_mono_ns();
        if (h->strays_logged_ns == 0 || now - h->strays_logged_ns >= 10 * (int64_t)1000000000) {
            log_warn("dropped %llu response frame(s) no request waits for (late answers, or a peer "
                     "answering what it was not asked; last from %s, opaque %d)",
                     (unsigned long long)h->strays_dropped, c->peer, decoded->opaque);
            h->strays_dropped = 0;
            h->strays_logged_ns = now;
        }
        return true;
    }
    c->replies_due--;
    c->stray++;
    lconn_push(L, c);
    lcmd_push_decoded(L, h, decoded, used);
    if (host_spawn(h, L, 2) == NULL)
        log_error("out of memory relaying a response from %s", c->peer);
    return true;
}

#define ACL_REFUSED_LINES 10

/* At most this many budget refusals are logged a second (then a count). */
#define BUDGET_REFUSED_LINES 5

/*
 * A request the memory budget refuses: SYSTEM_BUSY (2), as RocketMQ
 * answers when it sheds load, with the limit's conf key in the remark so
 * an operator knows which one to raise.
 */
static void
budget_refuse(struct host *h, struct conn *c, const struct rmq_cmd *cmd,
              enum membudget_limit which)
{
    struct membudget_figures f;
    membudget_figures(c->r->budget, &f);
    int64_t limit = which == MB_LIMIT_CONNECTION ? f.limits.per_conn
                    : which == MB_LIMIT_PEER ? f.limits.per_peer : f.limits.total;
    int64_t held = which == MB_LIMIT_CONNECTION ? c->mb.bytes
                   : which == MB_LIMIT_PEER ? f.peer_max : f.total;
    char remark[256];
    int n = snprintf(remark, sizeof(remark),
                     "[MEMORY_BUDGET]broker busy, %s=%lld reached (%lld bytes held), "
                     "request code %d refused, try again later",
                     membudget_limit_key(which), (long long)limit, (long long)held, cmd->code);
    if (n < 0)
        n = 0;
    if (n >= (int)sizeof(remark))
        n = (int)sizeof(remark) - 1;
    int64_t now = clock_mono_ns();
    if (now - h->budget_refused_window_ns >= 1000000000) {
        if (h->budget_refused > BUDGET_REFUSED_LINES)
            log_info("%llu more requests refused by the memory budget",
                     (unsigned long long)(h->budget_refused - BUDGET_REFUSED_LINES));
        h->budget_refused = 0;
        h->budget_refused_window_ns = now;
    }
    if (++h->budget_refused <= BUDGET_REFUSED_LINES)
        log_warn("request code %d from %s refused: %s", cmd->code, c->peer, remark);
    struct native_req r = {
        .h = h, .c = c, .cmd = cmd, .start_ns = h->frame_ns,
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .metrics = h->metrics, .enc = &h->enc,
    };
    (void)native_reply(&r, RMQ_RESP_SYSTEM_BUSY, remark, (size_t)n, NULL, 0, NULL, 0, NULL);
}

bool
host_budget_charge(struct host *h, struct conn *c, const struct rmq_cmd *cmd, int64_t cost)
{
    enum membudget_limit which;
    if (!c->mb_open || membudget_charge(c->r->budget, &c->mb, cost, &which))
        return true;
    budget_refuse(h, c, cmd, which);
    return false;
}

void
host_budget_release(struct conn *c, int64_t cost)
{
    if (cost != 0 && c->mb_open)
        membudget_release(c->r->budget, &c->mb, cost);
}

/*
 * The ACL check of a request on a listener that has one, before any
 * processor (C or Lua) sees it.  Returns false when it was refused: the
 * reply (unless oneway) went out here, as 4.9.8's SYSTEM_ERROR.
 */
static bool
acl_admit(struct host *h, struct conn *c, const struct rmq_cmd *cmd)
{
    char remark[ACL_REMARK_MAX];
    size_t rlen;
    if (acl_guard_check(h->acl, (enum acl_role)h->acl_roles[c->listener], cmd, c->peer,
                        remark, &rlen))
        return true;
    /* At most ACL_REFUSED_LINES lines a second, then a count: a peer
     * sending unsigned requests in a loop must not fill the log. */
    int64_t now = clock_mono_ns();
    if (now - h->acl_refused_window_ns >= 1000000000) {
        if (h->acl_refused > ACL_REFUSED_LINES)
            log_info("%llu more requests refused by ACL (at most %d are logged a second)",
                     (unsigned long long)(h->acl_refused - ACL_REFUSED_LINES), ACL_REFUSED_LINES);
        h->acl_refused = 0;
        h->acl_refused_window_ns = now;
    }
    if (++h->acl_refused <= ACL_REFUSED_LINES)
        log_info("request code %d from %s refused: %.*s", cmd->code, c->peer, (int)rlen, remark);
    struct native_req r = {
        .h = h, .c = c, .cmd = cmd, .start_ns = h->frame_ns,
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .metrics = h->metrics, .enc = &h->enc,
    };
    (void)native_reply(&r, RMQ_RESP_SYSTEM_ERROR, remark, rlen, NULL, 0, NULL, 0, NULL);
    return false;
}

static void lua_dispatch(struct host *h, struct conn *c, const struct rmq_cmd *dec,
                         size_t used, size_t len);

/* The extFields through the connection's memo (conn.h owner_memo: freed
 * with the conn, so vals stay good if the processor closes it). */
static inline size_t
typed_ext(struct host *h, struct conn *c, const struct hspec *spec, const uint8_t *hdr,
          size_t hlen, size_t at, struct lheader_val *vals)
{
    struct lheader_memo *m = c->owner_memo;
    size_t end = lheader_json_ext_memo(spec, &m, hdr, hlen, at, vals, h->scratch, h->scratch_cap);
    c->owner_memo = m;
    return end;
}

/*
 * The typed one-pass path for the requests clients send most (a send):
 * when the frame's JSON header starts as the Java client writes it, its
 * code has a native processor with a header spec (native_proc.json_spec)
 * and nothing before the processor needs the extFields as fields (no ACL
 * on the listener; the gate, if any, admits without asking its policy),
 * the header is read once, its extFields typed as they are read, and the
 * processor runs with the values.  Returns true when the frame was
 * served here; false, having done nothing a peer can see, for the
 * generic decode: whatever this path does not take (another spelling, a
 * value the spec refuses, a field given twice, ...) is accepted or
 * refused there, with the same reply or close as always.
 */
static bool __attribute__((noinline))
typed_frame(struct host *h, struct conn *c, const uint8_t *frame, size_t len,
            const struct rmq_json_head *hd, struct native_proc *p, const struct hspec *spec)
{
    int listener = c->listener;
    if (h->acl != NULL && h->acl_roles[listener] != 0)
        return false;
    /* Before the decode: a crossed limit (the broker already behind) must
     * not pay for a decode thrown away. */
    if (h->gate != NULL && (h->gate_listeners >> listener & 1u) != 0 &&
        (h->gate != admission_gate || !admission_quiet(h->gate_arg, h, hd->code)))
        return false;   /* the gate sees it whole, decoded */
    const uint8_t *hdr = frame + 8;
    size_t hlen = be32_get(frame + 4) & 0xFFFFFFu;
    struct rmq_cmd cmd;
    struct lheader_val vals[LHEADER_MAX_FIELDS];
    size_t end;
    if (rmq_cmd_frame(&cmd, frame, len) != 0 ||
        (end = typed_ext(h, c, spec, hdr, hlen, hd->ext_at, vals)) == 0 ||
        !lheader_json_tail_memo(c->owner_memo, hdr, hlen, end, &cmd) ||
        (cmd.flag & RMQ_RPC_RESPONSE) != 0)
        return false;
    cmd.code = hd->code;
    h->frame = frame;
    h->frame_len = len;
    struct native_req r;
    native_req_init(&r, h, c, &cmd);
    int rc = p->run_typed(p, &r, vals);
    h->frame = NULL;
    h->frame_len = 0;
    if (rc != NATIVE_DONE) {
        /* Handed to its Lua handler, which reads the fields. */
        size_t used;
        struct rmq_cmd decoded;
        if (lcmd_decode_head(h, frame, len, &decoded, &used, hd) != 0) {
            log_warn("closing connection from %s: %s", c->peer, err_msg());
            conn_close(c, "bad header");
        } else {
            lua_dispatch(h, c, &decoded, used, len);
        }
    }
    return true;
}

static void
host_on_frame(struct conn *c, const uint8_t *frame, size_t len)
{
    struct host *h = c->owner;
    struct rmq_cmd decoded;
    size_t used;
    if (h->metrics != NULL)
        h->frame_ns = clock_mono_ns();
    /* A JSON header's code, as the Java client writes it (first), is read
     * once: for the typed path's look, and by the generic decode after. */
    struct rmq_json_head head;
    const struct rmq_json_head *hd = NULL;
    if (len >= 8 && frame[4] == RMQ_SER_JSON) {
        size_t hlen = be32_get(frame + 4) & 0xFFFFFFu;
        if (hlen <= len - 8 && rmq_json_head(frame + 8, hlen, &head)) {
            hd = &head;
            struct native_proc *p;
            const struct hspec *spec;
            if (head.ext_at != 0 && c->listener >= 0 && c->listener < HOST_MAX_LISTENERS &&
                (p = native_find(h, c, head.code)) != NULL && p->json_spec != NULL &&
                (spec = p->json_spec(p, head.code)) != NULL &&
                typed_frame(h, c, frame, len, hd, p, spec))
                return;
        }
    }
    if (lcmd_decode_head(h, frame, len, &decoded, &used, hd) != 0) {
        log_warn("closing connection from %s: %s", c->peer, err_msg());
        conn_close(c, "bad header");
        return;
    }
    /* Flow control first, as 4.9.8's rejectRequest comes before the
     * processor and its RPC hooks (the ACL check is one). */
    if (h->gate != NULL && c->listener >= 0 && c->listener < HOST_MAX_LISTENERS &&
        (h->gate_listeners >> c->listener & 1u) != 0 && !h->stopping &&
        !(decoded.flag & RMQ_RPC_RESPONSE) && h->gate(h->gate_arg, h, c, &decoded))
        return;
    if (h->acl != NULL && !(decoded.flag & RMQ_RPC_RESPONSE) && c->listener >= 0 &&
        c->listener < HOST_MAX_LISTENERS && h->acl_roles[c->listener] != 0 &&
        !acl_admit(h, c, &decoded))
        return;
    /* The common requests are answered in C, without a task. */
    h->frame = frame;
    h->frame_len = len;
    bool answered = native_dispatch(h, c, &decoded);
    h->frame = NULL;
    h->frame_len = 0;
    if (answered)
        return;
    if ((decoded.flag & RMQ_RPC_RESPONSE) && host_on_response(h, c, &decoded, used))
        return;
    lua_dispatch(h, c, &decoded, used, len);
}

int
host_request_to_lua(struct host *h, struct conn *c, const uint8_t *frame, size_t len,
                    int64_t start_ns)
{
    struct rmq_cmd decoded;
    size_t used;
    if (lcmd_decode(h, frame, len, &decoded, &used) != 0)
        return -1;
    int64_t saved = h->frame_ns;
    h->frame_ns = start_ns;
    lua_dispatch(h, c, &decoded, used, len);
    h->frame_ns = saved;
    return 0;
}

/* A request for its listener's Lua dispatch: a task of its own. */
static void
lua_dispatch(struct host *h, struct conn *c, const struct rmq_cmd *dec, size_t used,
             size_t len)
{
    struct rmq_cmd decoded = *dec;
    /* A request that waits in a task holds memory until it answers:
     * counted, or refused past a limit (core/membudget.h). */
    int64_t cost = 0;
    if (c->mb_open && !(decoded.flag & RMQ_RPC_RESPONSE)) {
        cost = (int64_t)len + MEMBUDGET_TASK_BYTES;
        enum membudget_limit which;
        if (!membudget_charge(c->r->budget, &c->mb, cost, &which)) {
            budget_refuse(h, c, &decoded, which);
            return;
        }
    }
    struct task *t = task_alloc(h);
    if (t != NULL)
        t->charged = cost;
    else if (cost != 0)
        membudget_release(c->r->budget, &c->mb, cost);
    if (t == NULL) {
        log_error("out of memory dispatching a request from %s", c->peer);
        conn_close(c, "out of memory");
        return;
    }
    lua_State *co = t->co;
    struct lconn *lc = lconn_push(co, c);
    int ref = c->listener >= 0 && c->listener < HOST_MAX_LISTENERS
                  ? h->dispatch_refs[c->listener] : lc->handler_ref;
    lua_rawgeti(co, LUA_REGISTRYINDEX, ref);
    lua_insert(co, -2);
    struct rmq_cmd *cmd = lcmd_push_decoded(co, h, &decoded, used);
    if (cmd->flag & RMQ_RPC_RESPONSE) {
        c->stray++;
        log_debug("response with unknown opaque %d from %s dropped (timed out?)",
                  cmd->opaque, c->peer);
        lua_settop(co, 0);
        task_release(t);
        return;
    }
    if (t->charged != 0 && (ref == LUA_NOREF || ref == LUA_REFNIL || h->stopping)) {
        membudget_release(c->r->budget, &c->mb, t->charged);
        t->charged = 0;
    }
    bool oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0;
    if (ref == LUA_NOREF || ref == LUA_REFNIL || h->stopping) {
        if (!oneway && !h->stopping)
            log_info("request code %d from %s: no handler on this connection",
                     cmd->code, c->peer);
        lua_settop(co, 0);
        task_release(t);
        return;
    }
    t->is_request = true;
    t->conn = c;
    conn_ref(c);
    t->opaque = cmd->opaque;
    t->code = cmd->code;
    t->start_ns = h->frame_ns;
    t->serialize = cmd->serialize;
    t->oneway = oneway;
    h->requests_live++;
    conn_request_begin(c);
    task_run(t, 2);
}

static void
host_on_close(struct conn *c)
{
    struct host *h = c->owner;
    lua_State *L = h->L;
    int ref = c->listener >= 0 && c->listener < HOST_MAX_LISTENERS
                  ? h->close_refs[c->listener] : LUA_NOREF;
    if (ref != LUA_NOREF && !h->stopping && c->owner_ref >= 0 &&
        lua_checkstack(L, 2)) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        lconn_push(L, c);
        if (host_spawn(h, L, 1) == NULL)
            log_error("out of memory running the close hook of %s", c->peer);
    }
    lconn_release(L, c);
}

static void
host_on_connect(struct conn *c, int status)
{
    struct host *h = c->owner;
    struct lconn *lc = lconn_push(h->L, c);
    lua_pop(h->L, 1);  /* anchored in the registry while c is open */
    if (lc != NULL && lc->on_connect != NULL) {
        void (*cb)(struct lconn *, int) = lc->on_connect;
        lc->on_connect = NULL;
        cb(lc, status);
    }
}

const struct conn_handler host_server_handler = {
    .on_frame = host_on_frame,
    .on_close = host_on_close,
    .on_connect = NULL,
};

const struct conn_handler host_client_handler = {
    .on_frame = host_on_frame,
    .on_close = host_on_close,
    .on_connect = host_on_connect,
};

/* }}} */

/* {{{ Life cycle */

void
host_set_lua_path(lua_State *L)
{
    lua_source_install(L, LUA_SOURCE_FIRST);
}

void
host_bind(lua_State *L, struct host *h)
{
    lua_pushlightuserdata(L, h);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &host_key);
}

static int
host_init_lua(struct host *h)
{
    lua_State *L = h->L;
    lua_newtable(L);
    h->threads_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    for (int i = 0; i < HOST_MAX_LISTENERS; i++)
        h->dispatch_refs[i] = h->close_refs[i] = LUA_NOREF;
    lconn_register(L);
    lcmd_register(L);
    host_bind(L, h);
    return 0;
}

struct host *
host_new(lua_State *L, bool own, size_t max_frame, uint64_t idle_ms, int worker_id)
{
    if (L == NULL) {
        err_set("cannot create a Lua state");
        return NULL;
    }
    struct host *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        err_set("out of memory for a host");
        if (own)
            lua_close(L);
        return NULL;
    }
    h->free_head = NO_SLOT;
    h->worker_id = worker_id;
    q_init(&h->waits);
    buf_init(&h->enc);
    if (reactor_init(&h->r, max_frame, idle_ms) != 0) {
        free(h);
        if (own)
            lua_close(L);
        return NULL;
    }
    h->r.slot = worker_id + 1;
    h->owns_L = own;
    h->L = L;
    host_init_lua(h);
    if (post_attach(&h->post, &h->r, h) != 0)
        log_warn("host slot %d: cross-worker posts unavailable: %s",
                 h->r.slot, err_msg());
    return h;
}

void
host_free(struct host *h)
{
    h->stopping = true;
    post_detach(&h->post);
    (void)reactor_close(&h->r);
    /* Tasks still suspended (a sleep, a connect, an event wait) will
     * never be resumed: their waits' handles were closed with the loop,
     * so only their memory is left to free. */
    while (!q_empty(&h->waits)) {
        struct waiter *w = container_of(h->waits.next, struct waiter, link);
        q_remove(&w->link);
        if (w->abandon != NULL)
            w->abandon(w);
    }
    if (h->owns_L)
        lua_close(h->L);
    for (int i = 0; i < HOST_MAX_LISTENERS; i++)
        native_table_free(h->natives[i]);
    acl_guard_free(h->acl);
    for (uint32_t i = 0; i < h->ntasks; i++)
        free(h->tasks[i]);
    free(h->tasks);
    free(h->task_next);
    free(h->scratch);
    free(h->fields);
    buf_free(&h->enc);
    free(h);
}

/* A plain lua5.4 state owns its host through this userdata's __gc. */
static int
host_gc(lua_State *L)
{
    struct host **hp = lua_touserdata(L, 1);
    if (*hp != NULL) {
        struct host *h = *hp;
        *hp = NULL;
        h->owns_L = false;
        host_free(h);
    }
    return 0;
}

struct host *
host_of(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &host_key);
    struct host *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (h != NULL)
        return h;
    /* Plain lua5.4 (busted, scripts): attach a host to the main state. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *main = lua_tothread(L, -1);
    lua_pop(L, 1);
    h = host_new(main, false, RMQ_DEFAULT_MAX_FRAME, 0, -1);
    if (h == NULL)
        luaL_error(L, "cannot start the rmq runtime: %s", err_msg());
    struct host **hp = lua_newuserdatauv(L, sizeof(*hp), 0);
    *hp = h;
    lua_newtable(L);
    lua_pushcfunction(L, host_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    /* Anchored in the registry: collected when the state closes. */
    luaL_ref(L, LUA_REGISTRYINDEX);
    return h;
}

/* }}} */
