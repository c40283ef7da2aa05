/*
 * l_roles: see l_roles.h.
 */
#include "lua/l_roles.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "core/err.h"
#include "core/log.h"
#include "proto/native.h"
#include "runtime/natives.h"
#include "net/tls.h"

/* {{{ The plan: what rmq.server.prepare() decided */

/* The plan's string `key` into out; `name` is what the message calls it
 * (the conf key).  A value that does not fit is refused, not cut: a cut
 * path names another file, a cut password another key. */
static int
plan_str_as(lua_State *L, int idx, const char *key, const char *name, char *out,
            size_t cap, const char *dflt)
{
    lua_getfield(L, idx, key);
    size_t n = 0;
    const char *s = dflt;
    if (lua_isstring(L, -1))
        s = lua_tolstring(L, -1, &n);
    else if (s != NULL)
        n = strlen(s);
    int rc = 0;
    if (s == NULL) {
        fprintf(stderr, "rmq-server: plan is missing '%s'\n", key);
        rc = -1;
    } else if (n >= cap || strlen(s) != n) {
        fprintf(stderr, "rmq-server: key '%s' is %s (%zu bytes; at most %zu)\n", name,
                n >= cap ? "too long" : "not a string without NUL bytes", n, cap - 1);
        rc = -1;
    } else {
        memcpy(out, s, n + 1);
    }
    lua_pop(L, 1);
    return rc;
}

static int
plan_str(lua_State *L, int idx, const char *key, char *out, size_t cap,
         const char *dflt)
{
    return plan_str_as(L, idx, key, key, out, cap, dflt);
}

/* The plan's integer `key`.  The plan is rmq.server.prepare's, built
 * from a conf that holds every key's default (lua/rmq/conf.lua, their one
 * owner): a key missing here is a bug on the Lua side, refused at start
 * (*bad), not covered by a second default in C. */
static lua_Integer
plan_int(lua_State *L, int idx, const char *key, bool *bad)
{
    lua_getfield(L, idx, key);
    lua_Integer v = 0;
    if (lua_isinteger(L, -1)) {
        v = lua_tointeger(L, -1);
    } else {
        fprintf(stderr, "rmq-server: plan is missing '%s'\n", key);
        *bad = true;
    }
    lua_pop(L, 1);
    return v;
}

static int
plan_metrics(lua_State *L, int idx, struct metrics_plan *m)
{
    if (lua_getfield(L, idx, "metrics") != LUA_TTABLE) {
        lua_pop(L, 1);
        return 0;   /* off */
    }
    int t = lua_gettop(L);
    bool bad = false;
    int rc = plan_str(L, t, "host", m->host, sizeof(m->host), NULL) != 0 ||
                     plan_str(L, t, "cluster", m->cluster, sizeof(m->cluster), "") != 0 ||
                     plan_str(L, t, "nodeType", m->node_type, sizeof(m->node_type), "") != 0 ||
                     plan_str(L, t, "nodeId", m->node_id, sizeof(m->node_id), "") != 0 ||
                     plan_str_as(L, t, "allowedAddresses", "metricsAllowedAddresses", m->allowed, sizeof(m->allowed), "") != 0
                 ? -1 : 0;
    m->on = true;
    m->port = (int)plan_int(L, t, "port", &bad);
    m->max_label_sets = (uint32_t)plan_int(L, t, "maxLabelSets", &bad);
    m->max_connections = (unsigned)plan_int(L, t, "maxConnections", &bad);
    m->timeout_s = (unsigned)plan_int(L, t, "timeoutSeconds", &bad);
    m->header_ms = (unsigned)plan_int(L, t, "headerTimeoutMillis", &bad);
    m->max_per_address = (unsigned)plan_int(L, t, "maxConnectionsPerAddress", &bad);
    m->max_header = (size_t)plan_int(L, t, "maxHeaderBytes", &bad);
    m->max_body = (size_t)plan_int(L, t, "maxBodyBytes", &bad);
    lua_pop(L, 1);
    return bad ? -1 : rc;
}

static int
plan_tls(lua_State *L, int idx, struct tls_plan *t)
{
    if (lua_getfield(L, idx, "tls") != LUA_TTABLE) {
        lua_pop(L, 1);
        return 0;
    }
    int i = lua_gettop(L);
    char mode[16], auth[16];
    bool bad = false;
    int rc = plan_str(L, i, "mode", mode, sizeof(mode), NULL) != 0 ||
                     plan_str_as(L, i, "certPath", "tls.server.certPath", t->cert,
                                 sizeof(t->cert), "") != 0 ||
                     plan_str_as(L, i, "keyPath", "tls.server.keyPath", t->key,
                                 sizeof(t->key), "") != 0 ||
                     plan_str_as(L, i, "keyPassword", "tls.server.keyPassword", t->password,
                                 sizeof(t->password), "") != 0 ||
                     plan_str_as(L, i, "trustCertPath", "tls.server.trustCertPath", t->trust,
                                 sizeof(t->trust), "") != 0 ||
                     plan_str(L, i, "needClientAuth", auth, sizeof(auth), NULL) != 0
                 ? -1 : 0;
    t->mode = strcmp(mode, "disabled") == 0    ? TLS_MODE_DISABLED
            : strcmp(mode, "enforcing") == 0   ? TLS_MODE_ENFORCING
                                               : TLS_MODE_PERMISSIVE;
    t->need_client_auth = strcmp(auth, "require") == 0    ? TLS_CLIENT_AUTH_REQUIRE
                        : strcmp(auth, "optional") == 0   ? TLS_CLIENT_AUTH_OPTIONAL
                                                          : TLS_CLIENT_AUTH_NONE;
    lua_getfield(L, i, "authClient");
    t->auth_client = lua_toboolean(L, -1);
    lua_pop(L, 1);
    t->handshake_ms = (uint64_t)plan_int(L, i, "handshakeTimeoutMillis", &bad);
    t->on = t->cert[0] != '\0';
    lua_pop(L, 1);
    return bad ? -1 : rc;
}

/* The gRPC keys (the listener itself is in `listeners`). */
static int
plan_grpc(lua_State *L, int idx, struct plan *p)
{
    if (lua_getfield(L, idx, "grpc") != LUA_TTABLE) {
        lua_pop(L, 1);
        return 0;
    }
    int t = lua_gettop(L);
    struct grpc_conf *g = &p->grpc;
    bool bad = false;
    int rc = plan_str(L, t, "brokerName", g->broker_name, sizeof(g->broker_name), "") != 0 ||
                     plan_str(L, t, "host", g->host, sizeof(g->host), NULL) != 0
                 ? -1 : 0;
    g->lim.max_message = (size_t)plan_int(L, t, "maxInboundMessageSize", &bad);
    g->lim.max_conn_buffer = (size_t)plan_int(L, t, "maxConnectionBufferBytes", &bad);
    g->lim.max_streams = (uint32_t)plan_int(L, t, "maxConcurrentStreams", &bad);
    g->lim.max_header_bytes = (size_t)plan_int(L, t, "maxInboundMetadataSize", &bad);
    g->lim.streams_per_sec = (uint32_t)plan_int(L, t, "maxStreamsPerSecond", &bad);
    g->lim.resets_per_sec = (uint32_t)plan_int(L, t, "maxResetsPerSecond", &bad);
    g->lim.max_settings_entries = (uint32_t)plan_int(L, t, "maxSettingsEntries", &bad);
    g->lim.settings_per_sec = (uint32_t)plan_int(L, t, "maxSettingsPerSecond", &bad);
    g->lim.stream_idle_ms = (uint64_t)plan_int(L, t, "requestTimeoutMillis", &bad);
    g->lim.keepalive_ms = (uint64_t)plan_int(L, t, "keepAliveTimeMillis", &bad);
    g->lim.keepalive_timeout_ms = (uint64_t)plan_int(L, t, "keepAliveTimeoutMillis", &bad);
    g->max_body = (int32_t)plan_int(L, t, "maxMessageSize", &bad);
    g->auth_window_ms = plan_int(L, t, "authDateTimeWindowMillis", &bad);
    g->invisible_min_ms = plan_int(L, t, "popInvisibleTimeMinMillis", &bad);
    g->poll_min_ms = plan_int(L, t, "minLongPollingMillis", &bad);
    g->poll_max_ms = plan_int(L, t, "maxLongPollingMillis", &bad);
    g->recv_invisible_min_ms = plan_int(L, t, "minInvisibleTimeMillsForRecv", &bad);
    g->invisible_max_ms = plan_int(L, t, "maxInvisibleTimeMills", &bad);
    g->max_producer_topics = (uint32_t)plan_int(L, t, "maxProducerTopics", &bad);
    lua_getfield(L, t, "enableProxyAutoRenew");
    g->renew.enabled = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 1);
    g->renew.default_invisible_ms = plan_int(L, t, "defaultInvisibleTimeMills", &bad);
    g->renew.ahead_ms = plan_int(L, t, "renewAheadTimeMillis", &bad);
    g->renew.max_ms = plan_int(L, t, "renewMaxTimeMillis", &bad);
    g->renew.period_ms = plan_int(L, t, "renewSchedulePeriodMillis", &bad);
    g->renew.max_retry = (int32_t)plan_int(L, t, "maxRenewRetryTimes", &bad);
    g->renew.clear_ms = plan_int(L, t, "invisibleTimeMillisWhenClear", &bad);
    lua_getfield(L, t, "aclEnable");
    g->acl = lua_toboolean(L, -1);
    lua_pop(L, 1);
    /* Cluster mode (role proxy): the brokers are reached over remoting. */
    lua_getfield(L, t, "cluster");
    g->cluster = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (g->cluster) {
        struct upstream_conf *u = &g->up;
        if (plan_str(L, t, "namesrvAddr", u->namesrv, sizeof(u->namesrv), "") != 0)
            rc = -1;
        u->route_refresh_ms = (uint64_t)plan_int(L, t, "routeRefreshMillis", &bad);
        u->route_expire_ms = (uint64_t)plan_int(L, t, "routeExpireMillis", &bad);
        u->route_max = (uint32_t)plan_int(L, t, "routeMax", &bad);
        u->max_conns = (uint32_t)plan_int(L, t, "maxBrokerConnections", &bad);
        u->max_waiting = (uint32_t)plan_int(L, t, "maxWaitingRequests", &bad);
        u->call_timeout_ms = (uint64_t)plan_int(L, t, "brokerCallTimeoutMillis", &bad);
        u->cfg_refresh_ms = (uint64_t)plan_int(L, t, "topicConfigRefreshMillis", &bad);
        u->group_refresh_ms = (uint64_t)plan_int(L, t, "groupConfigRefreshMillis", &bad);
        u->group_expire_ms = (uint64_t)plan_int(L, t, "groupConfigExpireMillis", &bad);
        u->group_max = (uint32_t)plan_int(L, t, "groupConfigMax", &bad);
        g->tx.expire_ms = (uint64_t)plan_int(L, t, "transactionDataExpireMillis", &bad);
        g->tx.per_key_max = (uint32_t)plan_int(L, t, "transactionDataMaxNum", &bad);
        g->tx.max_total = (uint32_t)plan_int(L, t, "proxyMaxTransactionData", &bad);
    }
    p->grpc_on = true;
    lua_pop(L, 1);
    return bad ? -1 : rc;
}

static int
plan_read(lua_State *L, int idx, struct plan *p)
{
    memset(p, 0, sizeof(*p));
    bool bad = false;
    if (plan_str(L, idx, "role", p->role, sizeof(p->role), NULL) != 0 ||
        plan_str(L, idx, "bindAddress", p->bind, sizeof(p->bind), NULL) != 0 ||
        plan_str(L, idx, "logLevel", p->log_level, sizeof(p->log_level), NULL) != 0 ||
        plan_str(L, idx, "logFile", p->log_file, sizeof(p->log_file), "") != 0)
        return -1;
    p->log_buffer = (size_t)plan_int(L, idx, "logBufferBytes", &bad);
    p->workers = (int)plan_int(L, idx, "workers", &bad);
    if (p->workers <= 0) {
        /* One core is left to the store's threads (dispatch, flush, the
         * warmer), which every send wakes: on 2 cores one worker beat
         * two in CPU per message at every size (docs/performance.md). */
        unsigned cores = uv_available_parallelism();
        p->workers = cores > 1 ? (int)cores - 1 : 1;
    }
    if (p->workers > ROLES_MAX_WORKERS)
        p->workers = ROLES_MAX_WORKERS;
    p->max_frame = (size_t)plan_int(L, idx, "frameMaxLength", &bad);
    p->idle_ms = (uint64_t)plan_int(L, idx, "serverChannelMaxIdleTimeSeconds", &bad) * 1000;
    p->shutdown_ms = (uint64_t)plan_int(L, idx, "shutdownAwaitMillis", &bad);
    p->fd_reserve = (int)plan_int(L, idx, "serverReservedDescriptors", &bad);
    p->limits.out_high = (size_t)plan_int(L, idx, "writeBufferHighWaterMark", &bad);
    p->limits.out_low = (size_t)plan_int(L, idx, "writeBufferLowWaterMark", &bad);
    p->limits.write_timeout_ms = (uint64_t)plan_int(L, idx, "serverChannelWriteTimeoutMillis", &bad);
    p->limits.close_linger_ms = (uint64_t)plan_int(L, idx, "serverChannelCloseLingerMillis", &bad);
    p->limits.max_inflight = (uint32_t)plan_int(L, idx, "serverChannelMaxInFlight", &bad);
    p->limits.conn_frames_per_turn = (uint32_t)plan_int(L, idx, "serverChannelMaxFramesPerTurn", &bad);
    p->limits.peer_frames_per_turn = (uint32_t)plan_int(L, idx, "serverPeerMaxFramesPerTurn", &bad);
    lua_getfield(L, idx, "serverBatchWriteEnable");
    p->limits.batch_write = lua_toboolean(L, -1);
    lua_pop(L, 1);
    p->budget.total = (int64_t)plan_int(L, idx, "memoryBudgetBytes", &bad);
    p->budget.per_peer = (int64_t)plan_int(L, idx, "memoryBudgetPerPeerBytes", &bad);
    p->budget.per_conn = (int64_t)plan_int(L, idx, "memoryBudgetPerConnectionBytes", &bad);
    lua_getfield(L, idx, "listeners");
    int n = (int)luaL_len(L, -1);
    if (n < 1 || n > HOST_MAX_LISTENERS) {
        fprintf(stderr, "rmq-server: plan has %d listeners\n", n);
        lua_pop(L, 1);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        struct listener_plan *lp = &p->listeners[i];
        if (plan_str(L, -1, "name", lp->name, sizeof(lp->name), NULL) != 0 ||
            plan_str(L, -1, "role", lp->role, sizeof(lp->role), NULL) != 0) {
            lua_pop(L, 2);
            return -1;
        }
        lp->port = (int)plan_int(L, -1, "port", &bad);
        char proto[16];
        if (plan_str(L, -1, "protocol", proto, sizeof(proto), "remoting") != 0) {
            lua_pop(L, 2);
            return -1;
        }
        lp->grpc = strcmp(proto, "grpc") == 0;
        if (lp->grpc) {
            p->grpc.listener = i;
            p->grpc.role = lp->role;
        }
        p->roles[i] = lp->role;
        lua_pop(L, 1);
    }
    p->nlisteners = n;
    lua_pop(L, 1);
    if (bad || plan_tls(L, idx, &p->tls) != 0 || plan_grpc(L, idx, p) != 0)
        return -1;
    return plan_metrics(L, idx, &p->metrics);
}

/* Calls rmq.server[fn](args...) in L; leaves results; returns 0 or -1
 * after printing the error. */
static int
call_server(lua_State *L, const char *fn, int nargs, int nres)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.server");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        log_error("cannot load rmq.server: %s", lua_tostring(L, -1));
        lua_pop(L, nargs + 1);
        return -1;
    }
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    lua_insert(L, -(nargs + 1));
    if (lua_pcall(L, nargs, nres, 0) != LUA_OK) {
        log_error("rmq.server.%s: %s", fn, lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    return 0;
}

static void
push_args(lua_State *L, const char *conf_path, char **overrides, int noverrides)
{
    lua_pushstring(L, conf_path);
    lua_createtable(L, noverrides, 0);
    for (int i = 0; i < noverrides; i++) {
        lua_pushstring(L, overrides[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* {ports by listener name}: what the sockets are really bound to. */
static void
push_ports(lua_State *L, const struct plan *p)
{
    lua_createtable(L, 0, p->nlisteners);
    for (int i = 0; i < p->nlisteners; i++) {
        lua_pushinteger(L, p->listeners[i].port);
        lua_setfield(L, -2, p->listeners[i].name);
    }
}

int
roles_prepare(lua_State *L, const char *conf_path, char **overrides,
              int noverrides, struct plan *p)
{
    int top = lua_gettop(L);
    push_args(L, conf_path, overrides, noverrides);
    int rc = call_server(L, "prepare", 2, 2);
    if (rc == 0 && lua_isnil(L, -2)) {
        fprintf(stderr, "rmq-server: %s\n", lua_tostring(L, -1));
        rc = -1;
    }
    if (rc == 0) {
        lua_pop(L, 1);
        rc = plan_read(L, -1, p);
    }
    lua_settop(L, top);
    return rc;
}

int
roles_bound(lua_State *L, const struct plan *p)
{
    push_ports(L, p);
    return call_server(L, "bound", 1, 0);
}

int
roles_worker(struct host *h, const char *conf_path, char **overrides,
             int noverrides, int worker_id, const struct plan *p)
{
    lua_State *L = h->L;
    for (int i = 0; i < p->nlisteners; i++)
        h->listener_roles[i] = p->listeners[i].role;   /* the plan outlives the host */
    push_args(L, conf_path, overrides, noverrides);
    lua_pushinteger(L, worker_id);
    push_ports(L, p);
    if (call_server(L, "worker", 4, 3) != 0)
        return -1;
    /* One dispatch function per listener, chosen by its role, the role's
     * optional close hook (a table of them is the second result) and its
     * native processors (the third: {[role] = {[code] = np}}). */
    for (int i = 0; i < p->nlisteners; i++) {
        lua_getfield(L, -3, p->listeners[i].role);
        if (!lua_isfunction(L, -1)) {
            log_error("rmq.server.worker gave no dispatch function for "
                      "role %s", p->listeners[i].role);
            lua_pop(L, 4);
            return -1;
        }
        h->dispatch_refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        if (lua_istable(L, -2)) {
            lua_getfield(L, -2, p->listeners[i].role);
            if (lua_isfunction(L, -1))
                h->close_refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
            else
                lua_pop(L, 1);
        }
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, p->listeners[i].role);
            if (lua_istable(L, -1) && native_install(L, h, i, -1) != 0) {
                log_error("role %s: %s", p->listeners[i].role, err_msg());
                lua_pop(L, 4);
                return -1;
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 3);
    return 0;
}

/* host_collect may raise: run it under lua_pcall. */
static int
collect_protected(lua_State *L)
{
    struct task *t = lua_touserdata(L, 1);
    struct host *h = host_of(L);
    int n = host_collect(h, t, L);
    lua_settop(L, lua_gettop(L) - n);
    lua_pushboolean(L, 1);
    return 1;
}

/* Pushes rmq.server[fn] for a main hook task; prepare has loaded the
 * module already, so the require cannot fail. */
static void
push_hook(lua_State *L, const char *fn)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.server");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
}

int
roles_main_start(struct host *m)
{
    lua_State *L = m->L;
    /* Roles' main hooks, as a task: they may wait. */
    push_hook(L, "main_start");
    struct task *t = host_spawn_joined(m, L, 0);
    if (t == NULL)
        return -1;
    while (!t->done)
        reactor_run(&m->r, UV_RUN_ONCE);
    int rc = 0;
    lua_pushcfunction(L, collect_protected);
    lua_pushlightuserdata(L, t);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        log_error("start-up failed: %s", lua_tostring(L, -1));
        rc = -1;
    }
    lua_pop(L, 1);
    return rc;
}

void
roles_ready_fields(lua_State *L, char *buf, size_t n)
{
    buf[0] = '\0';
    push_hook(L, "ready_fields");
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        log_warn("READY fields: %s", lua_tostring(L, -1));
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        snprintf(buf, n, "%s", lua_tostring(L, -1));
    }
    lua_pop(L, 1);
}

/* The done() rmq.server.main_stop calls: the C callback it stands for. */
struct stop_done {
    void (*fn)(void *arg);
    void *arg;
};

static int
stop_hook_done(lua_State *L)
{
    struct stop_done *d = lua_touserdata(L, lua_upvalueindex(1));
    d->fn(d->arg);
    return 0;
}

void
roles_main_stop(struct host *m, void (*done)(void *arg), void *arg)
{
    lua_State *L = m->L;
    push_hook(L, "main_stop");
    struct stop_done *d = lua_newuserdatauv(L, sizeof(*d), 0);
    d->fn = done;
    d->arg = arg;
    lua_pushcclosure(L, stop_hook_done, 1);
    if (host_spawn(m, L, 1) == NULL)
        done(arg);
}

int
roles_after_workers(lua_State *L)
{
    return call_server(L, "after_workers", 0, 0);
}
