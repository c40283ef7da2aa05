/*
 * l_route: the rmq.route module, the NameServer's registry and KV config
 * (src/route/) seen from Lua.
 *
 *   route.shared() -> rt     the process-wide registry (route_shared())
 *   route.new() -> rt        a private one, freed with its handle (specs)
 *
 *   rt:register{cluster=, addr=, name=, id=, ha=, zone=, timeout=,
 *               acting=true|false|nil, dv={counter=, timestamp=, state=},
 *               topics={{name=, read=, write=, perm=, sysflag=}, ...},
 *               filters={...}|nil, conn=}
 *       -> {ignored=, first=, masterAddr=, haServerAddr=}
 *   rt:unregister(cluster, addr, name, id) -> n
 *   rt:conn_closed(conn_id) -> n          rt:scan() -> n
 *   rt:heartbeat(cluster, addr) -> bool   (5.x BROKER_HEARTBEAT)
 *   rt:query_dv(cluster, addr, dv) -> changed, stored_dv_json | nil
 *   rt:wipe_write_perm(name) -> n         rt:add_write_perm(name) -> n
 *   rt:delete_topic(topic [, cluster]) -> bool
 *   rt:route(topic, standard_json) -> body | nil      (TopicRouteData)
 *   rt:cluster_info() -> body
 *   rt:member_group(cluster, name) -> body   (5.x GET_BROKER_MEMBER_GROUP)
 *   rt:topic_list(which [, cluster]) -> body   which: all, cluster,
 *       system, unit, unit_sub, unit_sub_not_unit
 *   rt:topic_list_shared() -> rcbuf   topic_list("all"), encoded once per
 *       change of the topic set and shared (l_rcbuf.h)
 *   rt:topic_list_encodes() -> n
 *   rt:set_opt(name, value), rt:get_opt(name): orderMessageEnable,
 *       supportActingMaster (booleans), brokerChannelExpiredTime (ms)
 *   rt:counts() -> {topics=, brokers=, clusters=, live=}
 *   rt:hash_stats() -> {topics=, brokers=, clusters=, live=} chain
 *       statistics of each map (lua/l_jstats.h)
 *   rt:kv_put(ns, key, value)             rt:kv_get(ns, key) -> value | nil
 *   rt:kv_delete(ns, key) -> bool         rt:kv_list(ns) -> KVTable | nil
 *   rt:kv_dump() -> kvConfig.json text    rt:kv_persist(path) -> true | nil, err
 *   rt:kv_counts() -> namespaces, entries
 *   rt:config_set(key, text)   a run-time config change (bumps the gen)
 *   rt:config_gen() -> n       rt:config_overrides() -> KVTable JSON | nil
 *
 * Locks: every argument is read (and may raise) before the registry's
 * lock is taken; results are written under the lock into a buffer owned
 * by a Lua userdata (one per state, reused), and pushed after unlocking,
 * so a raise (out of memory) can neither hold a lock nor leak.
 */
#include <errno.h>
#include <lauxlib.h>
#include <string.h>

#include "core/buf.h"
#include "lua/l_err.h"
#include "lua/l_jstats.h"
#include "lua/l_modules.h"
#include "lua/l_rcbuf.h"
#include "lua/l_scratch.h"
#include "route/kvconfig.h"
#include "route/route.h"

#define LROUTE_TYPE "rmq.route.registry"

struct lroute {
    struct route *rt;
    bool owned;
};

/* The per-state output buffer: lua/l_scratch.h. */

static struct route *
check_rt(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lroute, rt, LROUTE_TYPE, "route registry is closed")->rt;
}

static int
nomem(lua_State *L)
{
    return luaL_error(L, "out of memory in the route registry");
}

/* {{{ Reading tables */

static const char *
field_str(lua_State *L, int t, const char *k, bool required)
{
    int ty = lua_getfield(L, t, k);
    const char *s = NULL;
    if (ty == LUA_TSTRING)
        s = lua_tostring(L, -1);
    else if (ty != LUA_TNIL || required)
        luaL_error(L, "register: field '%s' must be a string, got %s", k,
                   lua_typename(L, ty));
    lua_pop(L, 1);  /* the table keeps the string alive */
    return s;
}

static int64_t
field_int(lua_State *L, int t, const char *k, int64_t dflt, bool *present)
{
    int ty = lua_getfield(L, t, k);
    int64_t v = dflt;
    if (present != NULL)
        *present = ty != LUA_TNIL;
    if (ty != LUA_TNIL) {
        int ok = 0;
        v = (int64_t)lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "field '%s' must be an integer, got %s", k,
                       luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

static void
read_dv(lua_State *L, int t, struct route_dv *dv)
{
    memset(dv, 0, sizeof(*dv));
    if (lua_type(L, t) != LUA_TTABLE)
        return;
    dv->counter = field_int(L, t, "counter", 0, NULL);
    dv->timestamp = field_int(L, t, "timestamp", 0, NULL);
    dv->state = field_int(L, t, "state", 0, &dv->has_state);
}

/* }}} */

static int
lroute_register(lua_State *L)
{
    struct route *rt = check_rt(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct route_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.cluster = field_str(L, 2, "cluster", true);
    reg.addr = field_str(L, 2, "addr", true);
    reg.name = field_str(L, 2, "name", true);
    reg.ha = field_str(L, 2, "ha", false);
    reg.zone = field_str(L, 2, "zone", false);
    reg.id = field_int(L, 2, "id", 0, NULL);
    reg.timeout_ms = field_int(L, 2, "timeout", 0, NULL);
    reg.conn = (uint64_t)field_int(L, 2, "conn", 0, NULL);
    int ty = lua_getfield(L, 2, "acting");
    reg.acting = ty == LUA_TNIL ? -1 : lua_toboolean(L, -1) ? 1 : 0;
    lua_pop(L, 1);
    lua_getfield(L, 2, "dv");
    read_dv(L, lua_gettop(L), &reg.dv);
    lua_pop(L, 1);

    /* Arrays live in userdata on the stack: collected, never leaked. */
    if (lua_getfield(L, 2, "topics") == LUA_TTABLE) {
        int tt = lua_gettop(L);
        lua_Integer n = luaL_len(L, tt);
        struct route_topic_cfg *tc =
            lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(*tc), 0);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_rawgeti(L, tt, i) != LUA_TTABLE)
                return luaL_error(L, "register: topics[%d] must be a table", (int)i);
            int e = lua_gettop(L);
            size_t len = 0;
            /* A string only: lua_tolstring would convert a number on the
             * stack, and the copy would die with the pop. */
            if (lua_getfield(L, e, "name") != LUA_TSTRING)
                return luaL_error(L, "register: topics[%d].name must be a string", (int)i);
            const char *name = lua_tolstring(L, -1, &len);
            lua_pop(L, 1);
            tc[i - 1].name = name;  /* kept alive by the topic table */
            tc[i - 1].name_len = len;
            tc[i - 1].read = (int32_t)field_int(L, e, "read", 0, NULL);
            tc[i - 1].write = (int32_t)field_int(L, e, "write", 0, NULL);
            tc[i - 1].perm = (int32_t)field_int(L, e, "perm", 0, NULL);
            tc[i - 1].sysflag = (int32_t)field_int(L, e, "sysflag", 0, NULL);
            lua_pop(L, 1);
        }
        reg.topics = tc;
        reg.ntopics = (size_t)n;
        /* tables stay on the stack until the call returns */
    }
    if (lua_getfield(L, 2, "filters") == LUA_TTABLE) {
        int ft = lua_gettop(L);
        lua_Integer n = luaL_len(L, ft);
        const char **fl = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(char *), 0);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_rawgeti(L, ft, i) != LUA_TSTRING)
                return luaL_error(L, "register: filters[%d] must be a string", (int)i);
            fl[i - 1] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        reg.filters = fl;
        reg.nfilters = (size_t)n;
    }

    struct buf *out = l_scratch(L);
    struct route_reg_result res;
    if (route_register(rt, &reg, &res, out) != 0)
        return nomem(L);
    lua_createtable(L, 0, 4);
    lua_pushboolean(L, res.ignored);
    lua_setfield(L, -2, "ignored");
    lua_pushboolean(L, res.first);
    lua_setfield(L, -2, "first");
    if (res.master_off >= 0) {
        lua_pushstring(L, (const char *)buf_head(out) + res.master_off);
        lua_setfield(L, -2, "masterAddr");
    }
    if (res.ha_off >= 0) {
        lua_pushstring(L, (const char *)buf_head(out) + res.ha_off);
        lua_setfield(L, -2, "haServerAddr");
    }
    return 1;
}

static int
lroute_unregister(lua_State *L)
{
    struct route *rt = check_rt(L);
    const char *cluster = luaL_checkstring(L, 2);
    const char *addr = luaL_checkstring(L, 3);
    const char *name = luaL_checkstring(L, 4);
    lua_Integer id = luaL_optinteger(L, 5, 0);
    lua_pushinteger(L, route_unregister(rt, cluster, addr, name, id));
    return 1;
}

static int
lroute_conn_closed(lua_State *L)
{
    struct route *rt = check_rt(L);
    lua_Integer id = luaL_checkinteger(L, 2);
    lua_pushinteger(L, route_conn_closed(rt, (uint64_t)id));
    return 1;
}

static int
lroute_heartbeat(lua_State *L)
{
    struct route *rt = check_rt(L);
    const char *cluster = luaL_checkstring(L, 2);
    const char *addr = luaL_checkstring(L, 3);
    lua_pushboolean(L, route_heartbeat(rt, cluster, addr) > 0);
    return 1;
}

static int
lroute_scan(lua_State *L)
{
    struct route *rt = check_rt(L);
    lua_pushinteger(L, route_scan(rt, 0));
    return 1;
}

static int
lroute_query_dv(lua_State *L)
{
    struct route *rt = check_rt(L);
    const char *cluster = luaL_checkstring(L, 2);
    const char *addr = luaL_checkstring(L, 3);
    struct route_dv dv;
    read_dv(L, 4, &dv);
    struct buf *out = l_scratch(L);
    bool changed = true;
    if (route_query_dv(rt, cluster, addr, &dv, &changed, out) != 0)
        return nomem(L);
    lua_pushboolean(L, changed);
    l_scratch_push(L, out, buf_len(out) > 0);
    return 2;
}

static int
lroute_wipe(lua_State *L)
{
    struct route *rt = check_rt(L);
    lua_pushinteger(L, route_wipe_write_perm(rt, luaL_checkstring(L, 2)));
    return 1;
}

static int
lroute_add(lua_State *L)
{
    struct route *rt = check_rt(L);
    lua_pushinteger(L, route_add_write_perm(rt, luaL_checkstring(L, 2)));
    return 1;
}

static int
lroute_delete_topic(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t tl;
    const char *topic = luaL_checklstring(L, 2, &tl);
    const char *cluster = luaL_optstring(L, 3, NULL);
    lua_pushboolean(L, route_delete_topic(rt, topic, tl, cluster) > 0);
    return 1;
}

static int
lroute_route(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t tl;
    const char *topic = luaL_checklstring(L, 2, &tl);
    bool browser = lua_toboolean(L, 3);
    struct buf *out = l_scratch(L);
    int rc = route_topic_json(rt, topic, tl, browser, out);
    if (rc < 0)
        return nomem(L);
    l_scratch_push(L, out, rc > 0);
    return 1;
}

static int
lroute_cluster_info(lua_State *L)
{
    struct route *rt = check_rt(L);
    struct buf *out = l_scratch(L);
    if (route_cluster_json(rt, out) != 0)
        return nomem(L);
    l_scratch_push(L, out, true);
    return 1;
}

static int
lroute_member_group(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t cl, nl;
    const char *cluster = luaL_checklstring(L, 2, &cl);
    const char *name = luaL_checklstring(L, 3, &nl);
    struct buf *out = l_scratch(L);
    if (route_member_group_json(rt, cluster, cl, name, nl, out) != 0)
        return nomem(L);
    l_scratch_push(L, out, true);
    return 1;
}

static int
lroute_topic_list(lua_State *L)
{
    static const char *const names[] = {
        "all", "cluster", "system", "unit", "unit_sub", "unit_sub_not_unit", NULL,
    };
    static const enum route_list which[] = {
        ROUTE_LIST_ALL, ROUTE_LIST_CLUSTER, ROUTE_LIST_SYSTEM, ROUTE_LIST_UNIT,
        ROUTE_LIST_UNIT_SUB, ROUTE_LIST_UNIT_SUB_NOT_UNIT,
    };
    struct route *rt = check_rt(L);
    int w = luaL_checkoption(L, 2, NULL, names);
    const char *cluster = luaL_optstring(L, 3, NULL);
    struct buf *out = l_scratch(L);
    if (route_topic_list_json(rt, which[w], cluster, out) != 0)
        return nomem(L);
    l_scratch_push(L, out, true);
    return 1;
}

/* rt:topic_list_shared() -> rcbuf: topic_list("all")'s bytes, encoded
 * once per change of the topic set, shared (l_rcbuf.h). */
static int
lroute_topic_list_shared(lua_State *L)
{
    struct rcbuf *b = route_topic_list_all_shared(check_rt(L));
    if (b == NULL)
        return nomem(L);
    l_push_rcbuf(L, b);
    return 1;
}

/* rt:topic_list_encodes() -> n */
static int
lroute_topic_list_encodes(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)route_topic_list_encodes(check_rt(L)));
    return 1;
}

static const char *const opt_names[] = {
    "orderMessageEnable", "supportActingMaster", "brokerChannelExpiredTime", NULL,
};

static int
lroute_set_opt(lua_State *L)
{
    struct route *rt = check_rt(L);
    int o = luaL_checkoption(L, 2, NULL, opt_names);
    int64_t v;
    if (o == ROUTE_OPT_DEFAULT_TIMEOUT) {
        v = (int64_t)luaL_checkinteger(L, 3);
        luaL_argcheck(L, v > 0, 3, "must be > 0");
    } else {
        v = lua_toboolean(L, 3);
    }
    route_set_opt(rt, (enum route_opt)o, v);
    return 0;
}

static int
lroute_get_opt(lua_State *L)
{
    struct route *rt = check_rt(L);
    int o = luaL_checkoption(L, 2, NULL, opt_names);
    int64_t v = route_get_opt(rt, (enum route_opt)o);
    if (o == ROUTE_OPT_DEFAULT_TIMEOUT)
        lua_pushinteger(L, v);
    else
        lua_pushboolean(L, v != 0);
    return 1;
}

/* rt:hash_stats() -> {topics=, brokers=, clusters=, live=}, each
 * {size=, cap=, max_keyed_chain=, max_java_chain=} */
static int
lroute_hash_stats(lua_State *L)
{
    struct route *rt = check_rt(L);
    struct jmap_stats st[4];
    route_hash_stats(rt, st);
    static const char *const names[4] = { "topics", "brokers", "clusters", "live" };
    lua_createtable(L, 0, 4);
    for (int i = 0; i < 4; i++) {
        l_push_jmap_stats(L, &st[i]);
        lua_setfield(L, -2, names[i]);
    }
    return 1;
}

static int
lroute_counts(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t t, b, c, l;
    route_counts(rt, &t, &b, &c, &l);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)t);
    lua_setfield(L, -2, "topics");
    lua_pushinteger(L, (lua_Integer)b);
    lua_setfield(L, -2, "brokers");
    lua_pushinteger(L, (lua_Integer)c);
    lua_setfield(L, -2, "clusters");
    lua_pushinteger(L, (lua_Integer)l);
    lua_setfield(L, -2, "live");
    return 1;
}

/* {{{ KV config */

static int
lroute_kv_put(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t nl, kl, vl;
    const char *ns = luaL_checklstring(L, 2, &nl);
    const char *k = luaL_checklstring(L, 3, &kl);
    const char *v = luaL_checklstring(L, 4, &vl);
    if (kv_put(route_kv(rt), ns, nl, k, kl, v, vl) != 0)
        return nomem(L);
    return 0;
}

static int
lroute_kv_get(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t nl, kl;
    const char *ns = luaL_checklstring(L, 2, &nl);
    const char *k = luaL_checklstring(L, 3, &kl);
    struct buf *out = l_scratch(L);
    int rc = kv_get(route_kv(rt), ns, nl, k, kl, out);
    if (rc < 0)
        return nomem(L);
    l_scratch_push(L, out, rc > 0);
    return 1;
}

static int
lroute_kv_delete(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t nl, kl;
    const char *ns = luaL_checklstring(L, 2, &nl);
    const char *k = luaL_checklstring(L, 3, &kl);
    lua_pushboolean(L, kv_delete(route_kv(rt), ns, nl, k, kl) > 0);
    return 1;
}

static int
lroute_kv_list(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t nl;
    const char *ns = luaL_checklstring(L, 2, &nl);
    struct buf *out = l_scratch(L);
    int rc = kv_list_json(route_kv(rt), ns, nl, out);
    if (rc < 0)
        return nomem(L);
    l_scratch_push(L, out, rc > 0);
    return 1;
}

static int
lroute_kv_dump(lua_State *L)
{
    struct route *rt = check_rt(L);
    struct buf *out = l_scratch(L);
    if (kv_dump_json(route_kv(rt), out) != 0)
        return nomem(L);
    l_scratch_push(L, out, true);
    return 1;
}

static int
lroute_kv_persist(lua_State *L)
{
    struct route *rt = check_rt(L);
    const char *path = luaL_checkstring(L, 2);
    return lerr_result(L, kv_persist(route_kv(rt), path));
}

static int
lroute_kv_counts(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t ns, e;
    kv_counts(route_kv(rt), &ns, &e);
    lua_pushinteger(L, (lua_Integer)ns);
    lua_pushinteger(L, (lua_Integer)e);
    return 2;
}

static int
lroute_config_set(lua_State *L)
{
    struct route *rt = check_rt(L);
    size_t kl, vl;
    const char *k = luaL_checklstring(L, 2, &kl);
    const char *v = luaL_checklstring(L, 3, &vl);
    if (kv_put(route_overrides(rt), "namesrv", 7, k, kl, v, vl) != 0)
        return nomem(L);
    route_conf_bump(rt);
    return 0;
}

static int
lroute_config_gen(lua_State *L)
{
    struct route *rt = check_rt(L);
    lua_pushinteger(L, (lua_Integer)route_conf_gen(rt));
    return 1;
}

static int
lroute_config_overrides(lua_State *L)
{
    struct route *rt = check_rt(L);
    struct buf *out = l_scratch(L);
    int rc = kv_list_json(route_overrides(rt), "namesrv", 7, out);
    if (rc < 0)
        return nomem(L);
    l_scratch_push(L, out, rc > 0);
    return 1;
}

/* }}} */

/* {{{ Module */

static int
lroute_gc(lua_State *L)
{
    struct lroute *lr = luaL_checkudata(L, 1, LROUTE_TYPE);
    if (lr->owned && lr->rt != NULL)
        route_free(lr->rt);
    lr->rt = NULL;
    return 0;
}

static int
lroute_tostring(lua_State *L)
{
    struct lroute *lr = luaL_checkudata(L, 1, LROUTE_TYPE);
    lua_pushfstring(L, "rmq.route(%s)", lr->owned ? "private" : "shared");
    return 1;
}

static void
push_handle(lua_State *L, struct route *rt, bool owned)
{
    struct lroute *lr = lua_newuserdatauv(L, sizeof(*lr), 0);
    lr->rt = rt;
    lr->owned = owned;
    luaL_setmetatable(L, LROUTE_TYPE);
}

static int
lroute_shared(lua_State *L)
{
    struct route *rt = route_shared();
    if (rt == NULL)
        return nomem(L);
    push_handle(L, rt, false);
    return 1;
}

static int
lroute_new(lua_State *L)
{
    /* The handle first, so a raise cannot leak the registry. */
    push_handle(L, NULL, true);
    struct lroute *lr = lua_touserdata(L, -1);
    lr->rt = route_new();
    if (lr->rt == NULL)
        return nomem(L);
    return 1;
}

int
luaopen_rmq_route(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "register", lroute_register },
        { "unregister", lroute_unregister },
        { "conn_closed", lroute_conn_closed },
        { "scan", lroute_scan },
        { "heartbeat", lroute_heartbeat },
        { "query_dv", lroute_query_dv },
        { "wipe_write_perm", lroute_wipe },
        { "add_write_perm", lroute_add },
        { "delete_topic", lroute_delete_topic },
        { "route", lroute_route },
        { "cluster_info", lroute_cluster_info },
        { "member_group", lroute_member_group },
        { "topic_list", lroute_topic_list },
        { "topic_list_shared", lroute_topic_list_shared },
        { "topic_list_encodes", lroute_topic_list_encodes },
        { "set_opt", lroute_set_opt },
        { "get_opt", lroute_get_opt },
        { "counts", lroute_counts },
        { "hash_stats", lroute_hash_stats },
        { "kv_put", lroute_kv_put },
        { "kv_get", lroute_kv_get },
        { "kv_delete", lroute_kv_delete },
        { "kv_list", lroute_kv_list },
        { "kv_dump", lroute_kv_dump },
        { "kv_persist", lroute_kv_persist },
        { "kv_counts", lroute_kv_counts },
        { "config_set", lroute_config_set },
        { "config_gen", lroute_config_gen },
        { "config_overrides", lroute_config_overrides },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "shared", lroute_shared },
        { "new", lroute_new },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LROUTE_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lroute_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, lroute_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}

/* }}} */
