/*
 * l_processors: the rmq.processors module: constructors of the native
 * request processors (proto/native.h), each from the options its Lua module
 * passes.  The header specs they read are anchored in the returned value.
 *
 *   processors.send{store = st, v1 = spec, v2 = spec, cluster =, region =,
 *                   traceOn = bool, brokerPermission =, maxMessageSize =,
 *                   notAllowed = {topic, ...}, halfMessages = bool,
 *                   ip = brokerIP1,
 *                   createTopic = fn(topic, defaultTopic, defaultTopicQueueNums,
 *                   v1) -> true | false, refusal, delayLevel = fn(properties,
 *                   topic, queueId, level) -> properties, queue, dueMillis,
 *                   retry = fn(group, reconsumeTimes, maxReconsumeTimes) ->
 *                   true | dlqTopic | false, halfTopic = fn(),
 *                   checksOnly = bool (a reply message's checks)} -> np
 *   processors.pull{store = st, header = spec, brokerPermission =,
 *                   ip = brokerIP1, brokerName =, slaveReadEnable = bool, memory =,
 *                   accessMessageInMemoryMaxRatio =, longPollingEnable =,
 *                   shortPollingTimeMills =, brokerSuspendMaxTimeMillis =,
 *                   pullHoldRecheckMillis = (>= 1; 500),
 *                   filterTopics = {topic, ...}, filterSupportRetry = bool,
 *                   suggest = fn(facts) -> brokerId,
 *                   createGroup = fn(group) -> bool,
 *                   pullFilter = fn(topic, group) -> nil | fn, body, account}
 *                   -> np
 *   processors.pop{store = st, pop = spec, ack = spec, change = spec,
 *                   peek = spec, notification = spec, pollingInfo = spec,
 *                   brokerIP1 =, brokerPermission =, dir =,
 *                   popInvisibleTimeMinMillis =, popInvisibleTimeMaxMillis =,
 *                   popMaxInflightPerGroup =, popMaxInflightTotal =,
 *                   popLeaseLogCompactBytes =, popReviveIntervalMillis =,
 *                   popFromRetryProbability =,
 *                   initPopOffsetByCheckMsgInMem = bool} -> np
 *   processors.route() -> np        on the process's route tables
 *   processors.heartbeat() -> np    on the process's client registry
 *   processors.offset(kind, st, spec) -> np   kind: "query", "update",
 *                                   "max", "min"
 *   processors.admission{store = st, role = "broker", decide = fn,
 *                   osPageCacheBusyTimeOutMills =, waitTimeMillsInSendQueue =,
 *                   waitTimeMillsInPullQueue =, waitTimeMillsInHeartbeatQueue =,
 *                   waitTimeMillsInTransactionQueue =,
 *                   brokerFastFailureEnable =} -> gate
 *                                   flow control (broker/admission.h) on this
 *                                   host's listeners of that role (replacing
 *                                   the host's gate), until the value is
 *                                   collected; fn(facts) -> "admit" | "busy",
 *                                   remark
 */
#include <lauxlib.h>
#include <string.h>

#include "broker/admission.h"
#include "broker/client_registry.h"
#include "broker/heartbeat_processor.h"
#include "broker/offset_processor.h"
#include "broker/pop_processor.h"
#include "broker/pull_processor.h"
#include "broker/send_processor.h"
#include "core/err.h"
#include "proto/header.h"
#include "lua/l_modules.h"
#include "proto/native.h"
#include "lua/l_store.h"
#include "store/popstore.h"
#include "route/route.h"
#include "route/route_processor.h"
#include "runtime/host.h"
#include "runtime/wait.h"

/* A string option; the pointer stays valid while the options table holds
 * it (a number would be converted on the stack only, and freed with it). */
static const char *
opt_string(lua_State *L, int t, const char *k)
{
    if (lua_getfield(L, t, k) != LUA_TSTRING)
        luaL_error(L, "opts.%s must be a string", k);
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1);   /* still anchored by the options table */
    return s;
}

/* opts.brokerPermission: the conf's (conf.lua gives it a default). */
static int32_t
broker_permission(lua_State *L)
{
    int64_t v = lstore_opt_int(L, 1, "brokerPermission", -1);
    luaL_argcheck(L, v >= 0 && v <= 15, 1, "opts.brokerPermission must be 0..15");
    return (int32_t)v;
}

/* Pushes p, or raises with why it could not be made. */
static void
push_processor(lua_State *L, struct native_proc *p, const char *what)
{
    if (p == NULL)
        luaL_error(L, "cannot make the %s processor: %s", what, err_msg());
    native_push(L, p);
}

/* Anchors the value at idx in the native value's uservalue table. */
static void
anchor(lua_State *L, int np, int idx, int slot)
{
    lua_getiuservalue(L, np, 1);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setiuservalue(L, np, 1);
    }
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, slot);
    lua_pop(L, 1);
}

/* A decision hook, opts[key] when it is a function: a registry ref in
 * the host's state HL (the processor owns it), or LUA_NOREF. */
static int
hook_ref(lua_State *L, lua_State *HL, const char *key)
{
    if (lua_getfield(L, 1, key) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    lua_xmove(L, HL, 1);
    return luaL_ref(HL, LUA_REGISTRYINDEX);
}

static int
lprocessors_send(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct send_processor_conf c;
    memset(&c, 0, sizeof(c));
    lua_getfield(L, 1, "store");
    c.store = lstore_check(L, -1, &c.store_host);
    lua_getfield(L, 1, "v1");
    c.v1 = lheader_check(L, -1);
    lua_getfield(L, 1, "v2");
    c.v2 = lheader_check(L, -1);
    int specs = lua_gettop(L) - 1;
    c.cluster = opt_string(L, 1, "cluster");
    c.region = opt_string(L, 1, "region");
    /* Optional (timer recall handles name it): anchored by the table. */
    c.broker_name = lua_getfield(L, 1, "brokerName") == LUA_TSTRING ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);
    c.ip = lua_getfield(L, 1, "ip") == LUA_TSTRING ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);
    c.trace_on = lstore_opt_bool(L, 1, "traceOn", true);
    c.perm = broker_permission(L);
    c.max_size = lstore_opt_int(L, 1, "maxMessageSize", 4 * 1024 * 1024);
    c.halves = lstore_opt_bool(L, 1, "halfMessages", false);
    c.checks_only = lstore_opt_bool(L, 1, "checksOnly", false);
    const char *names[64];
    if (lua_getfield(L, 1, "notAllowed") == LUA_TTABLE) {
        int n = (int)luaL_len(L, -1);
        luaL_argcheck(L, n <= 64, 1, "opts.notAllowed: at most 64 topics");
        for (int i = 1; i <= n; i++) {
            if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
                return luaL_error(L, "opts.notAllowed[%d] must be a string", i);
            names[i - 1] = lua_tostring(L, -1);
            lua_pop(L, 1);   /* anchored by the list */
        }
        c.n_not_allowed = n;
    }
    c.not_allowed = names;
    /* The auto-create hook, called on the worker's thread in its state. */
    c.L = host_of(L)->L;
    c.create_ref = hook_ref(L, c.L, "createTopic");
    c.delay_ref = hook_ref(L, c.L, "delayLevel");
    c.retry_ref = hook_ref(L, c.L, "retry");
    c.half_ref = hook_ref(L, c.L, "halfTopic");
    struct native_proc *p = send_processor_new(&c);
    push_processor(L, p, "send");
    int np = lua_gettop(L);
    anchor(L, np, specs, 1);
    anchor(L, np, specs + 1, 2);
    return 1;
}

static int
lprocessors_pull(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct pull_processor_conf c;
    memset(&c, 0, sizeof(c));
    lua_getfield(L, 1, "store");
    c.store = lstore_check(L, -1, &c.store_host);
    lua_getfield(L, 1, "header");
    c.header = lheader_check(L, -1);
    int spec = lua_gettop(L);
    c.broker_name = lua_getfield(L, 1, "brokerName") == LUA_TSTRING ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);   /* anchored by the options table */
    c.perm = broker_permission(L);
    c.ip = lua_getfield(L, 1, "ip") == LUA_TSTRING ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);   /* anchored by the options table */
    c.slave_read_enable = lstore_opt_bool(L, 1, "slaveReadEnable", false);
    c.slave_read_builtin = lstore_opt_bool(L, 1, "slaveReadPolicyBuiltin", true);
    c.memory = lstore_opt_int(L, 1, "memory", 0);
    c.ratio = lstore_opt_int(L, 1, "accessMessageInMemoryMaxRatio", 40);
    luaL_argcheck(L, c.memory >= 0 && c.ratio >= 0 && c.ratio <= 100, 1,
                  "opts.memory >= 0, 0 <= opts.accessMessageInMemoryMaxRatio <= 100");
    /* filterTopics: names joined by NULs (pull_processor.h) */
    luaL_Buffer names;
    luaL_buffinit(L, &names);
    lua_getfield(L, 1, "filterTopics");
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            size_t l;
            const char *t = luaL_checklstring(L, -1, &l);
            char *dst = luaL_prepbuffsize(&names, l + 1);
            memcpy(dst, t, l);
            dst[l] = 0;
            luaL_addsize(&names, l + 1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    c.filter_support_retry = lstore_opt_bool(L, 1, "filterSupportRetry", false);
    c.enable_property_filter = lstore_opt_bool(L, 1, "enablePropertyFilter", false);
    c.sql_limits.max_len = (size_t)lstore_opt_int(L, 1, "filterExpressionMaxLength", 16384);
    c.sql_limits.max_depth = (int)lstore_opt_int(L, 1, "filterExpressionMaxDepth", 128);
    c.sql_limits.max_nodes = (int)lstore_opt_int(L, 1, "filterExpressionMaxNodes", 4096);
    /* per worker, beside filter.lua's cache of the same size */
    int64_t cache = lstore_opt_int(L, 1, "filterCompiledCacheSize", 64);
    luaL_argcheck(L, cache >= 0 && cache <= 1048576 && c.sql_limits.max_depth >= 1 &&
                  c.sql_limits.max_nodes >= 1, 1, "bad filter limits");
    c.sql_cache = (int)cache;
    /* Held pulls (the long poll), re-checked every pullHoldRecheckMillis. */
    c.long_polling = lstore_opt_bool(L, 1, "longPollingEnable", true);
    c.short_polling_ms = lstore_opt_int(L, 1, "shortPollingTimeMills", 1000);
    c.suspend_max_ms = lstore_opt_int(L, 1, "brokerSuspendMaxTimeMillis", 25000);
    c.recheck_ms = lstore_opt_int(L, 1, "pullHoldRecheckMillis", 500);
    luaL_argcheck(L, c.short_polling_ms >= 0 && c.suspend_max_ms >= 0 && c.recheck_ms >= 1, 1,
                  "opts: shortPollingTimeMills, brokerSuspendMaxTimeMillis >= 0, pullHoldRecheckMillis >= 1");
    /* One window per worker (store_window). */
    int64_t window = lstore_opt_int(L, 1, "pullReadWindowBytes", 0);
    luaL_argcheck(L, window >= 0 && window <= ((int64_t)1 << 30), 1,
                  "opts: pullReadWindowBytes 0..1 GiB");
    c.read_window = (size_t)window;
    luaL_pushresult(&names);
    c.filter_topics = lua_tolstring(L, -1, &c.filter_topics_len);
    /* The slave-read hook, called on the worker's thread in its state. */
    c.L = host_of(L)->L;
    c.suggest_ref = hook_ref(L, c.L, "suggest");
    c.group_ref = hook_ref(L, c.L, "createGroup");
    c.filter_ref = hook_ref(L, c.L, "pullFilter");
    struct native_proc *p = pull_processor_new(&c);
    lua_pop(L, 1);
    push_processor(L, p, "pull");
    anchor(L, lua_gettop(L), spec, 1);
    return 1;
}

static int
lprocessors_route(lua_State *L)
{
    struct route *rt = route_shared();
    struct native_proc *p = rt != NULL ? route_processor_new(rt) : NULL;
    push_processor(L, p, "route");
    return 1;
}

static int
lprocessors_heartbeat(lua_State *L)
{
    struct creg *reg = creg_shared();
    struct native_proc *p = reg != NULL ? heartbeat_processor_new(reg) : NULL;
    push_processor(L, p, "heartbeat");
    return 1;
}

static int
lprocessors_offset(lua_State *L)
{
    static const char *const kinds[] = { "query", "update", "max", "min", NULL };
    enum offset_request kind = (enum offset_request)luaL_checkoption(L, 1, NULL, kinds);
    struct store *st = lstore_check(L, 2, NULL);
    const struct hspec *spec = lheader_check(L, 3);
    struct native_proc *p = offset_processor_new(kind, st, spec);
    push_processor(L, p, "offset");
    anchor(L, lua_gettop(L), 3, 1);
    return 1;
}

#define LADMISSION_TYPE "rmq.admission"

struct admission_ud {
    struct admission *a;
    struct host *h;
};

static int
admission_gc(lua_State *L)
{
    struct admission_ud *u = luaL_checkudata(L, 1, LADMISSION_TYPE);
    if (u->a != NULL) {
        /* A host being freed is stopping: its gate is not called again. */
        if (!u->h->stopping && u->h->gate_arg == u->a) {
            u->h->gate = NULL;
            u->h->gate_arg = NULL;
            u->h->gate_listeners = 0;
        }
        luaL_unref(L, LUA_REGISTRYINDEX, u->a->decide_ref);
        admission_free(u->a);
        u->a = NULL;
    }
    return 0;
}

static int64_t
limit_ms(lua_State *L, const char *k, int64_t def)
{
    int64_t v = lstore_opt_int(L, 1, k, def);
    if (v < 0)
        luaL_error(L, "opts.%s must be >= 0", k);
    return v;
}

static int
lprocessors_admission(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct host *h = host_of(L);
    lua_getfield(L, 1, "store");
    struct store *st = lstore_check(L, -1, NULL);
    const char *role = opt_string(L, 1, "role");
    struct admission_limits lim = {
        .page_cache_ms = limit_ms(L, "osPageCacheBusyTimeOutMills", 1000),
        .wait_ms = {
            [ADMISSION_SEND] = limit_ms(L, "waitTimeMillsInSendQueue", 200),
            [ADMISSION_PULL] = limit_ms(L, "waitTimeMillsInPullQueue", 5000),
            [ADMISSION_HEARTBEAT] = limit_ms(L, "waitTimeMillsInHeartbeatQueue", 31000),
            [ADMISSION_TRANSACTION] = limit_ms(L, "waitTimeMillsInTransactionQueue", 3000),
        },
        .fast_failure = lstore_opt_bool(L, 1, "brokerFastFailureEnable", true),
    };
    uint32_t mask = 0;
    for (int i = 0; i < HOST_MAX_LISTENERS; i++)
        if (h->listener_roles[i] != NULL && strcmp(h->listener_roles[i], role) == 0)
            mask |= 1u << i;
    if (lua_getfield(L, 1, "decide") != LUA_TFUNCTION)
        return luaL_error(L, "opts.decide must be a function");
    struct admission_ud *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->a = NULL;
    u->h = h;
    if (luaL_newmetatable(L, LADMISSION_TYPE)) {
        lua_pushcfunction(L, admission_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -2);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    u->a = admission_new(st, &lim, h->L, ref);
    if (u->a == NULL) {
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
        return luaL_error(L, "cannot make the admission gate: %s", err_msg());
    }
    h->gate = admission_gate;
    h->gate_arg = u->a;
    h->gate_listeners = mask;
    return 1;
}

static int
lprocessors_pop(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct pop_processor_conf c;
    memset(&c, 0, sizeof(c));
    lua_getfield(L, 1, "store");
    c.store = lstore_check(L, -1, &c.store_host);
    int specs = lua_gettop(L) + 1;
    lua_getfield(L, 1, "pop");
    c.pop = lheader_check(L, -1);
    lua_getfield(L, 1, "ack");
    c.ack = lheader_check(L, -1);
    lua_getfield(L, 1, "change");
    c.change = lheader_check(L, -1);
    lua_getfield(L, 1, "peek");
    c.peek = lheader_check(L, -1);
    lua_getfield(L, 1, "notification");
    c.notify = lheader_check(L, -1);
    lua_getfield(L, 1, "pollingInfo");
    c.info = lheader_check(L, -1);
    c.broker_ip = opt_string(L, 1, "brokerIP1");
    c.dir = opt_string(L, 1, "dir");
    c.perm = broker_permission(L);
    c.invisible_min = lstore_opt_int(L, 1, "popInvisibleTimeMinMillis", 1000);
    c.invisible_max = lstore_opt_int(L, 1, "popInvisibleTimeMaxMillis", 43200000);
    c.max_per_group = lstore_opt_int(L, 1, "popMaxInflightPerGroup", 200000);
    c.max_total = lstore_opt_int(L, 1, "popMaxInflightTotal", 2000000);
    c.compact_bytes = lstore_opt_int(L, 1, "popLeaseLogCompactBytes", 64 << 20);
    c.revive_interval = lstore_opt_int(L, 1, "popReviveIntervalMillis", 200);
    c.retry_probability = (int32_t)lstore_opt_int(L, 1, "popFromRetryProbability", 20);
    c.init_by_mem = lstore_opt_bool(L, 1, "initPopOffsetByCheckMsgInMem", true);
    struct native_proc *p = pop_processor_new(&c);
    push_processor(L, p, "pop");
    int np = lua_gettop(L);
    anchor(L, np, specs, 1);
    anchor(L, np, specs + 1, 2);
    for (int i = 2; i < 6; i++)
        anchor(L, np, specs + i, i + 1);
    return 1;
}

/* processors.pop_stop(): the revive thread stops (broker shutdown). */
static int
lprocessors_pop_stop(lua_State *L)
{
    (void)L;
    pop_revive_stop();
    return 0;
}

/* processors.pop_held(key, delta): a held POP or NOTIFICATION starts
 * (+1) or ends (-1) waiting, under "topic@group@queueId". */
static int
lprocessors_pop_held(lua_State *L)
{
    size_t n;
    const char *k = luaL_checklstring(L, 1, &n);
    int delta = (int)luaL_checkinteger(L, 2);
    if (pop_held_add(k, n, delta) != 0)
        return luaL_error(L, "out of memory");
    return 0;
}

/* processors.pop_stats() -> {inflight =, acked =, revived =, changed =,
 * logBytes =} | nil (no POP processor in this process) */
static int
lprocessors_pop_stats(lua_State *L)
{
    struct popstore_stats s;
    if (!pop_stats(&s))
        return 0;
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, s.inflight);
    lua_setfield(L, -2, "inflight");
    lua_pushinteger(L, s.acked);
    lua_setfield(L, -2, "acked");
    lua_pushinteger(L, s.revived);
    lua_setfield(L, -2, "revived");
    lua_pushinteger(L, s.changed);
    lua_setfield(L, -2, "changed");
    lua_pushinteger(L, s.log_bytes);
    lua_setfield(L, -2, "logBytes");
    return 1;
}

int
luaopen_rmq_processors(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "send", lprocessors_send },
        { "pull", lprocessors_pull },
        { "pop", lprocessors_pop },
        { "pop_stats", lprocessors_pop_stats },
        { "pop_held", lprocessors_pop_held },
        { "pop_stop", lprocessors_pop_stop },
        { "route", lprocessors_route },
        { "heartbeat", lprocessors_heartbeat },
        { "offset", lprocessors_offset },
        { "admission", lprocessors_admission },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
