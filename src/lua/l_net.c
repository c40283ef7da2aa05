/*
 * l_net: the rmq.net module, the waiting half of the runtime.
 *
 *   net.connect(addr [, {timeout=ms, on_request=fn, tls=...}]) -> conn | nil, err
 *       tls: absent = as net.tls set for this host; false = plaintext;
 *       true = TLS (the host's settings, or no verification); a table
 *       = TLS with those settings (as net.tls takes)
 *   net.tls(opts | false) -> true | nil, err   every connection this host
 *       opens from now on (net.connect, net.call's pool, the load
 *       generator) uses TLS with opts = {authServer=bool,
 *       trustCertPath=, certPath=, keyPath=, keyPassword=} (4.9.8's
 *       tls.client.* keys; {} = TLS without verifying the server, as
 *       4.9.8's default); false = plaintext again
 *   net.call(addr, cmd [, timeout_ms]) -> reply | nil, err
 *       through a per-host pool of connections keyed by address
 *   net.oneway(addr, cmd) -> true | nil, err
 *   net.sleep(ms)
 *   net.spawn(fn, ...)             run fn as a task; errors are logged
 *   net.run(fn, ...) -> ...        run fn as a task, drive the loop until
 *                                  it ends, return its results (scripts)
 *   net.timer(after_ms, every_ms, fn) -> timer   fn runs as a task each
 *                                  time; timer:stop(); every_ms 0 = once
 *   net.worker_id() -> n | nil
 *   net.send_to(conn_id, cmd) -> true | nil, err   a oneway request (or
 *                                  any command table) to the connection
 *                                  with that ctx.id, in whichever worker
 *   net.wait_event(key, timeout_ms) -> true (raised) | false (timed out)
 *   net.raise(key)                 wakes every task of every worker that
 *                                  waits on key (cheap when none does)
 *   net.on_response(fn | nil)      fn(ctx, cmd) runs as a task for each
 *                                  response of this host's connections
 *                                  that no call waits for (a request
 *                                  sent with send_to and flag 0)
 *   net.credentials([creds | nil]) -> previous   the default credentials
 *                                  this state signs its requests with
 *                                  (l_credentials.h); no argument: get
 *
 * Every waiting call yields inside a task and blocks outside the loop;
 * see runtime/host.h.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "runtime/cmd.h"
#include "lua/l_err.h"
#include "lua/l_credentials.h"
#include "lua/l_modules.h"
#include "runtime/host.h"
#include "runtime/lconn.h"
#include "runtime/post.h"
#include "net/tls.h"

static const char pool_key = 'p';

/* {{{ sleep */

struct sleep_op {
    struct waiter w;
    uv_timer_t timer;
};

static void
sleep_closed(uv_handle_t *h)
{
    free(h->data);
}

static void
sleep_fired(uv_timer_t *t)
{
    struct sleep_op *op = t->data;
    host_wake(&op->w);
}

static int
sleep_push(lua_State *L, struct waiter *w)
{
    (void)L;
    struct sleep_op *op = (struct sleep_op *)w;
    uv_close((uv_handle_t *)&op->timer, sleep_closed);
    return 0;
}

static void
sleep_abandon(struct waiter *w)
{
    free((struct sleep_op *)w);  /* the timer was closed with the loop */
}

static int
lnet_sleep(lua_State *L)
{
    lua_Integer ms = luaL_checkinteger(L, 1);
    luaL_argcheck(L, ms >= 0, 1, "must be >= 0");
    struct host *h = host_of(L);
    struct sleep_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return luaL_error(L, "out of memory");
    op->w.push = sleep_push;
    op->w.abandon = sleep_abandon;
    op->timer.data = op;
    int rc = uv_timer_init(&h->r.loop, &op->timer);
    if (rc != 0) {
        free(op);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    if (!h->r.in_loop)
        uv_update_time(&h->r.loop);   /* as in do_connect */
    rc = uv_timer_start(&op->timer, sleep_fired, (uint64_t)ms, 0);
    if (rc != 0) {
        uv_close((uv_handle_t *)&op->timer, sleep_closed);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    return host_wait(L, &op->w);
}

/* }}} */

/* {{{ connect */

struct connect_op {
    struct waiter w;
    uv_timer_t timer;
    struct conn *c;           /* referenced until push */
    int status;
    bool finished;
};

static void
connect_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void
connect_finish(struct connect_op *op, int status)
{
    if (op->finished)
        return;
    op->finished = true;
    op->status = status;
    uv_timer_stop(&op->timer);
    host_wake(&op->w);
}

static void
connect_reported(struct lconn *lc, int status)
{
    connect_finish(lc->connect_arg, status);
}

static void
connect_timeout(uv_timer_t *t)
{
    struct connect_op *op = t->data;
    connect_finish(op, UV_ETIMEDOUT);
}

static int
connect_push(lua_State *L, struct waiter *w)
{
    struct connect_op *op = (struct connect_op *)w;
    struct conn *c = op->c;
    int n;
    if (op->status == 0) {
        lconn_push(L, c);
        n = 1;
    } else {
        /* Stop a late report from reaching a freed op. */
        if (c->owner_ref >= 0) {
            struct lconn *lc = lconn_push(L, c);
            lc->on_connect = NULL;
            lua_pop(L, 1);
        }
        /* A failed TLS handshake left its reason (conn.h). */
        char why[sizeof(c->close_reason)];
        snprintf(why, sizeof(why), "%s",
                 op->status == UV_ETIMEDOUT                      ? "timeout"
                 : op->status == UV_EPROTO && c->close_reason[0] ? c->close_reason
                                                                 : uv_strerror(op->status));
        conn_close(c, "connect failed");
        lua_pushnil(L);
        lua_pushfstring(L, "cannot connect to %s: %s", c->peer, why);
        n = 2;
    }
    conn_unref(c);
    uv_close((uv_handle_t *)&op->timer, connect_timer_closed);
    return n;
}

/* The connection was closed with the loop, the timer too. */
static void
connect_abandon(struct waiter *w)
{
    struct connect_op *op = (struct connect_op *)w;
    conn_unref(op->c);
    free(op);
}

/* {{{ TLS settings */

static const char *
opt_str(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    const char *v = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);   /* the table keeps the string alive */
    return v;
}

/* A client context from the table at idx (net.tls's opts; idx 0 or
 * anything else: no verification, no certificate), or NULL with
 * err_set(). */
static struct tls_ctx *
client_ctx_of(lua_State *L, int idx)
{
    struct tls_client_opts o = { 0 };
    if (idx != 0 && lua_istable(L, idx)) {
        lua_getfield(L, idx, "authServer");
        o.auth_server = lua_toboolean(L, -1);
        lua_pop(L, 1);
        o.trust_cert_path = opt_str(L, idx, "trustCertPath");
        o.cert_path = opt_str(L, idx, "certPath");
        o.key_path = opt_str(L, idx, "keyPath");
        o.key_password = opt_str(L, idx, "keyPassword");
    }
    return tls_ctx_client(&o);
}

static int
lnet_tls(lua_State *L)
{
    struct host *h = host_of(L);
    if (lua_isnoneornil(L, 1) || (lua_isboolean(L, 1) && !lua_toboolean(L, 1))) {
        reactor_set_tls_client(&h->r, NULL);
        lua_pushboolean(L, 1);
        return 1;
    }
    if (!lua_istable(L, 1) && !lua_isboolean(L, 1))
        return luaL_argerror(L, 1, "a table of settings, true or false");
    struct tls_ctx *ctx = client_ctx_of(L, 1);
    if (ctx == NULL)
        return lerr_push(L);
    reactor_set_tls_client(&h->r, ctx);
    tls_ctx_unref(ctx);
    lua_pushboolean(L, 1);
    return 1;
}

/* }}} */

/* Pushes conn or nil, err.  handler_ref is consumed.  tls: the context
 * to dial with (NULL: plaintext); own: one made for this call (or NULL),
 * released here. */
static int
do_connect(lua_State *L, const char *addr, lua_Integer timeout,
           int handler_ref, struct tls_ctx *tls, struct tls_ctx *own)
{
    struct host *h = host_of(L);
    struct conn *c = conn_connect_tls(&h->r, addr, &host_client_handler, h, tls);
    /* A session holds OpenSSL's own reference to its context. */
    tls_ctx_unref(own);
    if (c == NULL) {
        if (handler_ref >= 0)
            luaL_unref(L, LUA_REGISTRYINDEX, handler_ref);
        return lerr_push(L);
    }
    struct lconn *lc = lconn_wrap(L, c, handler_ref);
    struct connect_op *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        conn_close(c, "out of memory");
        return luaL_error(L, "out of memory");
    }
    op->w.push = connect_push;
    op->w.abandon = connect_abandon;
    op->c = c;
    conn_ref(c);
    op->timer.data = op;
    lc->on_connect = connect_reported;
    lc->connect_arg = op;
    int rc = uv_timer_init(&h->r.loop, &op->timer);
    /* Outside the loop (a blocking call) the loop's clock is as old as
     * its last run: a script that slept or worked in between would see
     * the timeout expire at once. */
    if (!h->r.in_loop)
        uv_update_time(&h->r.loop);
    if (rc == 0)
        rc = uv_timer_start(&op->timer, connect_timeout, (uint64_t)timeout, 0);
    if (rc != 0)
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    return host_wait(L, &op->w);
}

static int
lnet_connect(lua_State *L)
{
    const char *addr = luaL_checkstring(L, 1);
    lua_Integer timeout = 3000;
    int handler_ref = LUA_NOREF;
    struct host *h = host_of(L);
    struct tls_ctx *tls = h->r.tls_client;
    struct tls_ctx *own = NULL;    /* made for this call only */
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        int kind = lua_getfield(L, 2, "tls");
        if (kind == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
            tls = NULL;
        } else if (kind == LUA_TBOOLEAN && tls == NULL) {
            /* Made once per host: a context costs far more than a
             * handshake (OpenSSL 3 loads its providers for it). */
            if (h->r.tls_plain_client == NULL)
                h->r.tls_plain_client = client_ctx_of(L, 0);
            tls = h->r.tls_plain_client;
            if (tls == NULL)
                return lerr_push(L);
        } else if (kind == LUA_TTABLE) {
            own = tls = client_ctx_of(L, lua_gettop(L));
            if (own == NULL)
                return lerr_push(L);
        } else if (kind != LUA_TNIL && kind != LUA_TBOOLEAN) {
            return luaL_argerror(L, 2, "tls must be a boolean or a table");
        }
        lua_pop(L, 1);
        lua_getfield(L, 2, "timeout");
        if (!lua_isnil(L, -1))
            timeout = luaL_checkinteger(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, 2, "on_request");
        if (lua_isfunction(L, -1))
            handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        else
            lua_pop(L, 1);
    }
    if (timeout <= 0) {
        tls_ctx_unref(own);
        return luaL_argerror(L, 2, "timeout must be positive");
    }
    return do_connect(L, addr, timeout, handler_ref, tls, own);
}

/* }}} */

/* {{{ pooled call */

/*
 * net.call and net.oneway may have to connect first.  Both waits (the
 * connect and the call) can yield, and a C function that yields resumes
 * in its continuation, so each step is a lua_callk with one continuation
 * that knows the step from its context.
 *
 * Stack while running: 1 addr, 2 cmd, 3 timeout, 4 method name, then
 * the step's values.
 */
enum { STEP_CONNECTED = 1, STEP_DONE = 2 };

static void
pool_push(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &pool_key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &pool_key);
    }
}

static int pooled_k(lua_State *L, int status, lua_KContext step);

/* The pool's key for the address at 1: a plaintext and a TLS connection
 * to one address are different connections (net.tls may change between
 * calls). */
static void
pool_key_push(lua_State *L)
{
    if (host_of(L)->r.tls_client != NULL)
        lua_pushfstring(L, "tls %s", lua_tostring(L, 1));
    else
        lua_pushvalue(L, 1);
}

/* With the open conn at 5: conn[method](conn, cmd, timeout). */
static int
pooled_invoke(lua_State *L)
{
    lua_getfield(L, 5, lua_tostring(L, 4));
    lua_pushvalue(L, 5);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_callk(L, 3, LUA_MULTRET, STEP_DONE, pooled_k);
    return pooled_k(L, LUA_OK, STEP_DONE);
}

static int
pooled_k(lua_State *L, int status, lua_KContext step)
{
    (void)status;
    if (step == STEP_DONE)
        return lua_gettop(L) - 5;
    /* STEP_CONNECTED: 5 = conn | nil, 6 = err */
    if (lua_isnil(L, 5))
        return 2;
    lua_settop(L, 5);
    pool_push(L);
    pool_key_push(L);
    /* Tasks that found no connection connect side by side: the first one
     * back is pooled, the others close theirs and use it (unpooled, each
     * would stay open until collected: a descriptor per task per
     * reconnect). */
    lua_pushvalue(L, 7);
    lua_gettable(L, 6);
    struct lconn *lc = luaL_testudata(L, 8, LCONN_TYPE);
    if (lc != NULL && !lc->c->closed) {
        lua_getfield(L, 5, "close");
        lua_pushvalue(L, 5);
        lua_call(L, 1, 0);
        lua_replace(L, 5);
        lua_settop(L, 5);
        return pooled_invoke(L);
    }
    lua_pop(L, 1);
    lua_pushvalue(L, 5);
    lua_settable(L, -3);
    lua_pop(L, 1);
    return pooled_invoke(L);
}

static int
pooled(lua_State *L, const char *method)
{
    luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer timeout = luaL_optinteger(L, 3, 3000);
    lua_settop(L, 2);
    lua_pushinteger(L, timeout);
    lua_pushstring(L, method);
    pool_push(L);
    pool_key_push(L);
    lua_gettable(L, -2);
    lua_remove(L, -2);
    struct lconn *lc = luaL_testudata(L, 5, LCONN_TYPE);
    if (lc != NULL && !lc->c->closed)
        return pooled_invoke(L);
    lua_settop(L, 4);
    lua_pushcfunction(L, lnet_connect);
    lua_pushvalue(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, 3);
    lua_setfield(L, -2, "timeout");
    lua_callk(L, 2, 2, STEP_CONNECTED, pooled_k);
    return pooled_k(L, LUA_OK, STEP_CONNECTED);
}

static int
lnet_call(lua_State *L)
{
    return pooled(L, "call");
}

static int
lnet_oneway(lua_State *L)
{
    lua_settop(L, 2);
    return pooled(L, "oneway");
}

/* }}} */

/* {{{ tasks and timers */

static int
lnet_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    struct host *h = host_of(L);
    int nargs = lua_gettop(L) - 1;
    if (host_spawn(h, L, nargs) == NULL)
        return luaL_error(L, "cannot start a task");
    return 0;
}

static int
lnet_run(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    struct host *h = host_of(L);
    if (h->r.in_loop)
        return luaL_error(L, "net.run: already inside the loop; call the "
                             "function directly or use net.spawn");
    int nargs = lua_gettop(L) - 1;
    struct task *t = host_spawn_joined(h, L, nargs);
    if (t == NULL)
        return luaL_error(L, "cannot start a task");
    while (!t->done)
        reactor_run(&h->r, UV_RUN_ONCE);
    return host_collect(h, t, L);
}

struct ltimer {
    uv_timer_t timer;
    struct host *h;
    int fn_ref;
    bool stopped;
};

#define LTIMER_TYPE "rmq.net.timer"

static void
ltimer_closed(uv_handle_t *hd)
{
    free(hd->data);
}

static void
ltimer_fired(uv_timer_t *t)
{
    struct ltimer *lt = t->data;
    lua_State *L = lt->h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, lt->fn_ref);
    if (host_spawn(lt->h, L, 0) == NULL)
        log_error("timer: cannot start a task");
}

static int
ltimer_stop(lua_State *L)
{
    struct ltimer **p = luaL_checkudata(L, 1, LTIMER_TYPE);
    struct ltimer *lt = *p;
    if (lt != NULL && !lt->stopped) {
        lt->stopped = true;
        uv_timer_stop(&lt->timer);
        luaL_unref(L, LUA_REGISTRYINDEX, lt->fn_ref);
        uv_close((uv_handle_t *)&lt->timer, ltimer_closed);
        *p = NULL;
    }
    return 0;
}

static int
lnet_timer(lua_State *L)
{
    lua_Integer after = luaL_checkinteger(L, 1);
    lua_Integer every = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    luaL_argcheck(L, after >= 0, 1, "must be >= 0");
    luaL_argcheck(L, every >= 0, 2, "must be >= 0");
    struct host *h = host_of(L);
    struct ltimer **p = lua_newuserdatauv(L, sizeof(*p), 0);
    *p = NULL;
    if (luaL_newmetatable(L, LTIMER_TYPE)) {
        lua_newtable(L);
        lua_pushcfunction(L, ltimer_stop);
        lua_setfield(L, -2, "stop");
        lua_setfield(L, -2, "__index");
    }
    lua_setmetatable(L, -2);
    struct ltimer *lt = calloc(1, sizeof(*lt));
    if (lt == NULL)
        return luaL_error(L, "out of memory");
    lt->h = h;
    lt->timer.data = lt;
    int rc = uv_timer_init(&h->r.loop, &lt->timer);
    if (rc != 0) {
        free(lt);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    lua_pushvalue(L, 3);
    lt->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    rc = uv_timer_start(&lt->timer, ltimer_fired, (uint64_t)after,
                        (uint64_t)every);
    if (rc != 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, lt->fn_ref);
        uv_close((uv_handle_t *)&lt->timer, ltimer_closed);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    /* A timer does not keep a script's loop alive by itself. */
    uv_unref((uv_handle_t *)&lt->timer);
    *p = lt;
    return 1;
}

static int
lnet_send_to(lua_State *L)
{
    lua_Integer id = luaL_checkinteger(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct host *h = host_of(L);
    struct rmq_cmd base;
    memset(&base, 0, sizeof(base));
    base.opaque = reactor_opaque(&h->r);
    base.flag = RMQ_RPC_ONEWAY;
    /* A request without the oneway bit is answered: the connection's
     * owner lets that many answers through to the response hook. */
    lua_getfield(L, 2, "flag");
    lua_Integer flag = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : RMQ_RPC_ONEWAY;
    lua_pop(L, 1);
    bool expects_reply = (flag & (RMQ_RPC_ONEWAY | RMQ_RPC_RESPONSE)) == 0;
    const uint8_t *body;
    size_t blen;
    if (lcmd_encode_table(L, 2, h, &base, 0, &body, &blen) != 0)
        return luaL_error(L, "bad command: %s", err_msg());
    /* One contiguous frame: header then body. */
    if (blen > 0 && buf_append(&h->enc, body, blen) != 0)
        return luaL_error(L, "out of memory");
    int rc = post_send(&h->post, (uint64_t)id, buf_head(&h->enc), buf_len(&h->enc),
                       expects_reply);
    if (rc != 0)
        return lerr_pushstr(L, rc == -ENOENT ? "no such connection" : strerror(-rc));
    lua_pushboolean(L, 1);
    return 1;
}

static int
lnet_wait_event(lua_State *L)
{
    size_t kl;
    const char *k = luaL_checklstring(L, 1, &kl);
    lua_Integer timeout = luaL_checkinteger(L, 2);
    luaL_argcheck(L, timeout >= 0, 2, "must be >= 0");
    return post_wait_event(L, &host_of(L)->post, k, kl, (uint64_t)timeout);
}

static int
lnet_raise(lua_State *L)
{
    size_t kl;
    const char *k = luaL_checklstring(L, 1, &kl);
    if (post_raise(&host_of(L)->post, k, kl) != 0)
        return luaL_error(L, "out of memory");
    return 0;
}

static int
lnet_on_response(lua_State *L)
{
    (void)host_of(L);
    if (!lua_isnoneornil(L, 1))
        luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, HOST_RESPONSE_HOOK);
    return 0;
}

static int
lnet_worker_id(lua_State *L)
{
    struct host *h = host_of(L);
    if (h->worker_id < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, h->worker_id);
    return 1;
}

/* }}} */

int
luaopen_rmq_net(lua_State *L)
{
    lmodules_cmd_values(L);
    static const luaL_Reg fns[] = {
        { "connect", lnet_connect },
        { "tls", lnet_tls },
        { "call", lnet_call },
        { "oneway", lnet_oneway },
        { "sleep", lnet_sleep },
        { "spawn", lnet_spawn },
        { "run", lnet_run },
        { "timer", lnet_timer },
        { "worker_id", lnet_worker_id },
        { "send_to", lnet_send_to },
        { "wait_event", lnet_wait_event },
        { "raise", lnet_raise },
        { "on_response", lnet_on_response },
        { "credentials", lcred_default },
        { NULL, NULL },
    };
    (void)host_of(L);
    luaL_newlib(L, fns);
    return 1;
}
