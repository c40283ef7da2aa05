/*
 * l_client_registry: the rmq.client_registry module, the broker's client
 * registry (src/broker/client_registry.h) and heartbeat reader
 * (src/proto/heartbeat.h) seen from Lua.
 *
 *   creg.shared() -> reg      the process-wide registry (creg_shared())
 *   creg.new() -> reg         a private one, freed with its handle (specs)
 *   creg.parse(body [, limits]) -> HeartbeatData table | nil, err
 *       what the reader made of a body, as sent (enum fields as Java
 *       names; limits: {maxConsumers=, maxProducers=, maxSubscriptions=,
 *       maxSubscriptionsTotal=, maxTags=, maxString=, maxDepth=})
 *
 * Mutators:
 *   reg:heartbeat(conn, body, language, version, addr [, now_ms])
 *       -> {changed = {group, ...}, conns = {{conn, ...}, ...},
 *           new = {group, ...}, newProducers = {group, ...}}
 *        | nil, remark, "parse" | "limit" | "memory"
 *       one call reads the body and applies it; `conns[i]` are the
 *       members of `changed[i]` after the change
 *   reg:unregister(conn, producerGroup|nil, consumerGroup|nil)
 *       -> was_producer, was_consumer
 *   reg:remove("consumer"|"producer", group, conn) -> bool
 *   reg:conn_closed(conn) -> groups, conns, removed
 *       consumer groups it left that still have members, and theirs
 *   reg:scan(now_ms, timeout_ms) -> dropped, groups, conns
 *       dropped = {{kind=, group=, clientId=, addr=, lastUpdate=}, ...}
 *   reg:set_limits{maxConsumerGroups=, maxProducerGroups=,
 *                  maxSubscriptionsPerGroup=, maxChannelsPerGroup=}
 *   reg:clear()
 *
 * Read-only views (plain tables built from a copy taken under the lock):
 *   reg:subscription(group, topic) -> sub | nil, settings | nil
 *       sub = {topic=, subString=, expressionType=, tagsSet={...},
 *              codeSet={...}, subVersion=, classFilterMode=}
 *       settings = {consumeType=, messageModel=, consumeFromWhere=,
 *                   unitMode=}; nil, nil when the group is unknown
 *   reg:generation(group) -> n | nil   moves when the group's settings or
 *       subscriptions change (for caching subscription() results)
 *   reg:consumer_group(group) -> settings + {subscriptionTable =
 *       {topic -> sub}, members = {[conn] = info}} | nil
 *       info = {clientId=, language=, version=, addr=, lastUpdate=}
 *   reg:client_ids(group) -> {clientId, ...}   channel order, distinct
 *   reg:conns(group [, kind]) -> {conn, ...}
 *   reg:members(kind, group) -> {[conn] = info}
 *   reg:find_client(kind, clientId) -> conn | nil   its newest channel
 *   reg:groups(kind) -> {name, ...} sorted
 *   reg:limits() -> table      reg:counts() -> {consumerGroups=,
 *       producerGroups=, connections=, channels=, subscriptions=}
 *
 * Locks: arguments are read before the registry's lock is taken; the
 * registry copies results into a buffer owned by a Lua userdata (one per
 * state) under its lock, and tables are built after it is released.  A
 * heartbeat's parse lives in a userdata too, so a raise leaks nothing.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "broker/client_registry.h"
#include "proto/heartbeat.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "lua/l_scratch.h"

#define LCREG_TYPE "rmq.client_registry"
#define LHB_TYPE "rmq.client_registry.heartbeat"

struct lcreg {
    struct creg *reg;
    bool owned;
};

/* {{{ Helpers (the output buffer is lua/l_scratch.h) */

static struct creg *
check_reg(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lcreg, reg, LCREG_TYPE, "client registry is closed")->reg;
}

static int
nomem(lua_State *L)
{
    return luaL_error(L, "out of memory in the client registry");
}

static enum creg_kind
check_kind(lua_State *L, int idx)
{
    static const char *const names[] = { "consumer", "producer", NULL };
    return (enum creg_kind)luaL_checkoption(L, idx, "consumer", names);
}

static void
set_str(lua_State *L, const char *k, const char *s, size_t n)
{
    lua_pushlstring(L, s, n);
    lua_setfield(L, -2, k);
}

static void
set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void
set_bool(lua_State *L, const char *k, bool v)
{
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

static void
set_enum(lua_State *L, const char *k, enum hb_enum which, int ord)
{
    const char *name = hb_enum_name(which, ord);
    if (name != NULL) {
        lua_pushstring(L, name);
        lua_setfield(L, -2, k);
    }
}

/* }}} */

/* {{{ Records -> tables */

static void
push_settings(lua_State *L, struct creg_rd *r, int extra)
{
    int8_t ct = creg_rd_i8(r), mm = creg_rd_i8(r), cf = creg_rd_i8(r);
    bool unit = creg_rd_u8(r) != 0;
    lua_createtable(L, 0, 4 + extra);
    set_enum(L, "consumeType", HB_ENUM_CONSUME_TYPE, ct);
    set_enum(L, "messageModel", HB_ENUM_MESSAGE_MODEL, mm);
    set_enum(L, "consumeFromWhere", HB_ENUM_CONSUME_FROM_WHERE, cf);
    set_bool(L, "unitMode", unit);
}

static void
push_sub(lua_State *L, struct creg_rd *r)
{
    size_t n;
    const char *s;
    lua_createtable(L, 0, 7);
    s = creg_rd_str(r, &n);
    set_str(L, "topic", s, n);
    s = creg_rd_str(r, &n);
    set_str(L, "subString", s, n);
    s = creg_rd_str(r, &n);
    set_str(L, "expressionType", s, n);
    set_int(L, "subVersion", creg_rd_i64(r));
    set_bool(L, "classFilterMode", creg_rd_u8(r) != 0);
    uint32_t nt = creg_rd_u32(r);
    lua_createtable(L, (int)nt, 0);
    for (uint32_t i = 0; i < nt; i++) {
        s = creg_rd_str(r, &n);
        lua_pushlstring(L, s, n);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "tagsSet");
    lua_createtable(L, (int)nt, 0);
    for (uint32_t i = 0; i < nt; i++) {
        lua_pushinteger(L, creg_rd_i32(r));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "codeSet");
}

/* A CHAN record: pushes the info table, returns the connection id. */
static uint64_t
push_chan(lua_State *L, struct creg_rd *r)
{
    size_t n;
    const char *s;
    uint64_t conn = creg_rd_u64(r);
    lua_createtable(L, 0, 5);
    s = creg_rd_str(r, &n);
    set_str(L, "clientId", s, n);
    s = creg_rd_str(r, &n);
    set_str(L, "language", s, n);
    set_int(L, "version", creg_rd_i32(r));
    s = creg_rd_str(r, &n);
    set_str(L, "addr", s, n);
    set_int(L, "lastUpdate", creg_rd_i64(r));
    return conn;
}

static void
push_u64s(lua_State *L, struct creg_rd *r, uint32_t n)
{
    lua_createtable(L, (int)n, 0);
    for (uint32_t i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)creg_rd_u64(r));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* n records of (str group, u32 k, k x u64): pushes groups, conns. */
static void
push_group_conns(lua_State *L, struct creg_rd *r, uint32_t n)
{
    lua_createtable(L, (int)n, 0);
    lua_createtable(L, (int)n, 0);
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *s = creg_rd_str(r, &len);
        lua_pushlstring(L, s, len);
        lua_rawseti(L, -3, (lua_Integer)i + 1);
        push_u64s(L, r, creg_rd_u32(r));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* }}} */

/* {{{ The heartbeat holder */

struct lhb {
    struct heartbeat hb;
    struct creg_hb_result res;
    bool parsed, has_res;
};

static void
lhb_release(struct lhb *h)
{
    if (h->parsed)
        heartbeat_free(&h->hb);
    if (h->has_res)
        creg_hb_result_free(&h->res);
    h->parsed = h->has_res = false;
}

static int
lhb_gc(lua_State *L)
{
    lhb_release(luaL_checkudata(L, 1, LHB_TYPE));
    return 0;
}

static struct lhb *
push_holder(lua_State *L)
{
    struct lhb *h = lua_newuserdatauv(L, sizeof(*h), 0);
    memset(h, 0, sizeof(*h));
    luaL_setmetatable(L, LHB_TYPE);
    return h;
}

static void
push_hbstr(lua_State *L, const struct hb_str *s)
{
    if (s->p == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, s->p, s->len);
}

static void
push_parsed(lua_State *L, const struct heartbeat *hb)
{
    lua_createtable(L, 0, 3);
    push_hbstr(L, &hb->client_id);
    lua_setfield(L, -2, "clientID");
    lua_createtable(L, (int)hb->nconsumers, 0);
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        const struct hb_consumer *cd = &hb->consumers[i];
        lua_createtable(L, 0, 6);
        push_hbstr(L, &cd->group);
        lua_setfield(L, -2, "groupName");
        set_enum(L, "consumeType", HB_ENUM_CONSUME_TYPE, cd->consume_type);
        set_enum(L, "messageModel", HB_ENUM_MESSAGE_MODEL, cd->message_model);
        set_enum(L, "consumeFromWhere", HB_ENUM_CONSUME_FROM_WHERE, cd->consume_from_where);
        set_bool(L, "unitMode", cd->unit_mode);
        lua_createtable(L, (int)cd->nsubs, 0);
        for (uint32_t k = 0; k < cd->nsubs; k++) {
            const struct hb_sub *s = &cd->subs[k];
            lua_createtable(L, 0, 7);
            push_hbstr(L, &s->topic);
            lua_setfield(L, -2, "topic");
            push_hbstr(L, &s->sub_string);
            lua_setfield(L, -2, "subString");
            push_hbstr(L, &s->expression_type);
            lua_setfield(L, -2, "expressionType");
            set_int(L, "subVersion", s->sub_version);
            set_bool(L, "classFilterMode", s->class_filter_mode);
            lua_createtable(L, (int)s->ntags, 0);
            for (uint32_t t = 0; t < s->ntags; t++) {
                push_hbstr(L, &s->tags[t]);
                lua_rawseti(L, -2, (lua_Integer)t + 1);
            }
            lua_setfield(L, -2, "tagsSet");
            if (s->has_codes) {
                lua_createtable(L, (int)s->ncodes, 0);
                for (uint32_t t = 0; t < s->ncodes; t++) {
                    lua_pushinteger(L, s->codes[t]);
                    lua_rawseti(L, -2, (lua_Integer)t + 1);
                }
                lua_setfield(L, -2, "codeSet");
            }
            lua_rawseti(L, -2, (lua_Integer)k + 1);
        }
        lua_setfield(L, -2, "subscriptionDataSet");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "consumerDataSet");
    lua_createtable(L, (int)hb->nproducers, 0);
    for (uint32_t i = 0; i < hb->nproducers; i++) {
        lua_createtable(L, 0, 1);
        push_hbstr(L, &hb->producers[i].group);
        lua_setfield(L, -2, "groupName");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "producerDataSet");
}

static uint32_t
opt_u32(lua_State *L, int t, const char *k, uint32_t dflt)
{
    lua_Integer v = dflt;
    if (lua_getfield(L, t, k) != LUA_TNIL) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < 1 || v > UINT32_MAX)
            luaL_error(L, "%s must be a positive integer", k);
    }
    lua_pop(L, 1);
    return (uint32_t)v;
}

static int
lcreg_parse(lua_State *L)
{
    size_t len;
    const char *body = luaL_checklstring(L, 1, &len);
    struct hb_limits lim;
    hb_limits_default(&lim);
    if (lua_type(L, 2) == LUA_TTABLE) {
        lim.max_consumers = opt_u32(L, 2, "maxConsumers", lim.max_consumers);
        lim.max_producers = opt_u32(L, 2, "maxProducers", lim.max_producers);
        lim.max_subs = opt_u32(L, 2, "maxSubscriptions", lim.max_subs);
        lim.max_subs_total = opt_u32(L, 2, "maxSubscriptionsTotal", lim.max_subs_total);
        lim.max_tags = opt_u32(L, 2, "maxTags", lim.max_tags);
        lim.max_string = opt_u32(L, 2, "maxString", lim.max_string);
        lim.max_depth = opt_u32(L, 2, "maxDepth", lim.max_depth);
    }
    struct lhb *h = push_holder(L);
    h->parsed = true;
    if (heartbeat_parse(&h->hb, body, len, &lim) != 0) {
        lhb_release(h);
        return lerr_push(L);
    }
    push_parsed(L, &h->hb);
    lhb_release(h);
    return 1;
}

/* }}} */

/* {{{ Mutators */

static int
lcreg_heartbeat(lua_State *L)
{
    struct creg *reg = check_reg(L);
    uint64_t conn = (uint64_t)luaL_checkinteger(L, 2);
    size_t len;
    const char *body = luaL_optlstring(L, 3, "", &len);
    struct creg_client cl;
    cl.language = luaL_optstring(L, 4, "");
    cl.version = (int32_t)luaL_optinteger(L, 5, 0);
    cl.addr = luaL_optstring(L, 6, "");
    cl.now = lua_isnoneornil(L, 7) ? clock_wall_ms() : (int64_t)luaL_checkinteger(L, 7);

    struct lhb *h = push_holder(L);
    struct hb_limits lim;
    creg_parse_limits(reg, &lim);
    h->parsed = true;
    if (heartbeat_parse(&h->hb, body, len, &lim) != 0) {
        lhb_release(h);
        lerr_push(L);
        lua_pushliteral(L, "parse");
        return 3;
    }
    h->has_res = true;
    int rc = creg_hb_result_init(&h->res, &h->hb);
    if (rc == 0)
        rc = creg_heartbeat(reg, conn, &h->hb, &cl, &h->res);
    if (rc != 0) {
        lhb_release(h);
        lerr_push(L);
        if (rc == -RMQ_ETOOBIG)
            lua_pushliteral(L, "limit");
        else
            lua_pushliteral(L, "memory");
        return 3;
    }
    const struct heartbeat *hb = &h->hb;
    const struct creg_hb_result *res = &h->res;
    lua_createtable(L, 0, 5);
    bool sub_change;
    if (hb_v2_reply(hb, cl.version, res->sub_change, &sub_change)) {
        /* 5.x heartbeat v2: the reply's fields (heartbeat.h) */
        lua_createtable(L, 0, 2);
        lua_pushliteral(L, "true");
        lua_setfield(L, -2, "IS_SUPPORT_HEART_BEAT_V2");
        lua_pushstring(L, sub_change ? "true" : "false");
        lua_setfield(L, -2, "IS_SUB_CHANGE");
        lua_setfield(L, -2, "v2");
    }
    /* changed + conns */
    lua_createtable(L, (int)res->nchanged, 0);
    lua_createtable(L, (int)res->nchanged, 0);
    struct creg_rd r;
    creg_rd_init(&r, &res->conns, 0);
    lua_Integer k = 0;
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        if (!(res->cflags[i] & CREG_CHANGED))
            continue;
        k++;
        push_hbstr(L, &hb->consumers[i].group);
        lua_rawseti(L, -3, k);
        push_u64s(L, &r, creg_rd_u32(&r));
        lua_rawseti(L, -2, k);
    }
    lua_setfield(L, -3, "conns");
    lua_setfield(L, -2, "changed");
    lua_createtable(L, (int)res->nnew, 0);
    k = 0;
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        if (res->cflags[i] & CREG_NEW) {
            push_hbstr(L, &hb->consumers[i].group);
            lua_rawseti(L, -2, ++k);
        }
    }
    lua_setfield(L, -2, "new");
    lua_createtable(L, (int)res->nnew_producers, 0);
    k = 0;
    for (uint32_t i = 0; i < hb->nproducers; i++) {
        if (res->pflags[i] & CREG_NEW) {
            push_hbstr(L, &hb->producers[i].group);
            lua_rawseti(L, -2, ++k);
        }
    }
    lua_setfield(L, -2, "newProducers");
    set_int(L, "consumers", hb->nconsumers);
    set_int(L, "producers", hb->nproducers);
    lhb_release(h);
    return 1;
}

static int
lcreg_unregister(lua_State *L)
{
    struct creg *reg = check_reg(L);
    uint64_t conn = (uint64_t)luaL_checkinteger(L, 2);
    size_t pl = 0, cl = 0;
    const char *pg = luaL_optlstring(L, 3, NULL, &pl);
    const char *cg = luaL_optlstring(L, 4, NULL, &cl);
    int mask = creg_unregister(reg, conn, pg, pl, cg, cl);
    lua_pushboolean(L, mask & 1);
    lua_pushboolean(L, mask & 2);
    return 2;
}

static int
lcreg_remove(lua_State *L)
{
    struct creg *reg = check_reg(L);
    enum creg_kind kind = check_kind(L, 2);
    size_t gl;
    const char *g = luaL_checklstring(L, 3, &gl);
    uint64_t conn = (uint64_t)luaL_checkinteger(L, 4);
    lua_pushboolean(L, creg_remove(reg, kind, g, gl, conn));
    return 1;
}

static int
lcreg_conn_closed(lua_State *L)
{
    struct creg *reg = check_reg(L);
    uint64_t conn = (uint64_t)luaL_checkinteger(L, 2);
    struct buf *out = l_scratch(L);
    uint32_t removed = 0;
    int n = creg_conn_closed(reg, conn, out, &removed);
    if (n < 0)
        return nomem(L);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    push_group_conns(L, &r, (uint32_t)n);
    lua_pushinteger(L, removed);
    l_scratch_done(out);
    return 3;
}

static int
lcreg_scan(lua_State *L)
{
    struct creg *reg = check_reg(L);
    int64_t now = (int64_t)luaL_checkinteger(L, 2);
    int64_t timeout = (int64_t)luaL_checkinteger(L, 3);
    struct buf *out = l_scratch(L);
    int n = creg_scan(reg, now, timeout, out);
    if (n < 0)
        return nomem(L);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *s;
        uint8_t kind = creg_rd_u8(&r);
        lua_createtable(L, 0, 5);
        lua_pushstring(L, kind == CREG_CONSUMER ? "consumer" : "producer");
        lua_setfield(L, -2, "kind");
        s = creg_rd_str(&r, &len);
        set_str(L, "group", s, len);
        s = creg_rd_str(&r, &len);
        set_str(L, "clientId", s, len);
        s = creg_rd_str(&r, &len);
        set_str(L, "addr", s, len);
        set_int(L, "lastUpdate", creg_rd_i64(&r));
        lua_rawseti(L, -2, i + 1);
    }
    push_group_conns(L, &r, creg_rd_u32(&r));
    l_scratch_done(out);
    return 3;
}

static int
lcreg_set_limits(lua_State *L)
{
    struct creg *reg = check_reg(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct creg_limits lim;
    creg_get_limits(reg, &lim);
    lim.max_consumer_groups = opt_u32(L, 2, "maxConsumerGroups", lim.max_consumer_groups);
    lim.max_producer_groups = opt_u32(L, 2, "maxProducerGroups", lim.max_producer_groups);
    lim.max_subscriptions = opt_u32(L, 2, "maxSubscriptionsPerGroup", lim.max_subscriptions);
    lim.max_channels = opt_u32(L, 2, "maxChannelsPerGroup", lim.max_channels);
    creg_set_limits(reg, &lim);
    return 0;
}

static int
lcreg_limits(lua_State *L)
{
    struct creg *reg = check_reg(L);
    struct creg_limits lim;
    creg_get_limits(reg, &lim);
    lua_createtable(L, 0, 4);
    set_int(L, "maxConsumerGroups", lim.max_consumer_groups);
    set_int(L, "maxProducerGroups", lim.max_producer_groups);
    set_int(L, "maxSubscriptionsPerGroup", lim.max_subscriptions);
    set_int(L, "maxChannelsPerGroup", lim.max_channels);
    return 1;
}

static int
lcreg_clear(lua_State *L)
{
    creg_clear(check_reg(L));
    return 0;
}

/* }}} */

/* {{{ Views */

static int
lcreg_subscription(lua_State *L)
{
    struct creg *reg = check_reg(L);
    size_t gl, tl;
    const char *g = luaL_checklstring(L, 2, &gl);
    const char *t = luaL_checklstring(L, 3, &tl);
    struct buf *out = l_scratch(L);
    int rc = creg_subscription(reg, g, gl, t, tl, out);
    if (rc < 0)
        return nomem(L);
    if (rc == 0) {
        buf_reset(out);
        lua_pushnil(L);
        lua_pushnil(L);
        return 2;
    }
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    push_settings(L, &r, 0);
    if (rc == 2)
        push_sub(L, &r);
    else
        lua_pushnil(L);
    lua_insert(L, -2);  /* sub, settings */
    l_scratch_done(out);
    return 2;
}

static int
lcreg_generation(lua_State *L)
{
    struct creg *reg = check_reg(L);
    size_t gl;
    const char *g = luaL_checklstring(L, 2, &gl);
    uint64_t gen = creg_generation(reg, g, gl);
    if (gen == 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)gen);
    return 1;
}

static int
lcreg_consumer_group(lua_State *L)
{
    struct creg *reg = check_reg(L);
    size_t gl;
    const char *g = luaL_checklstring(L, 2, &gl);
    struct buf *out = l_scratch(L);
    int rc = creg_consumer_group(reg, g, gl, out);
    if (rc < 0)
        return nomem(L);
    if (rc == 0) {
        lua_pushnil(L);
        return 1;
    }
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    push_settings(L, &r, 2);
    uint32_t ns = creg_rd_u32(&r);
    lua_createtable(L, 0, (int)ns);
    for (uint32_t i = 0; i < ns; i++) {
        push_sub(L, &r);
        lua_getfield(L, -1, "topic");
        lua_insert(L, -2);
        lua_rawset(L, -3);
    }
    lua_setfield(L, -2, "subscriptionTable");
    uint32_t nc = creg_rd_u32(&r);
    lua_createtable(L, 0, (int)nc);
    for (uint32_t i = 0; i < nc; i++) {
        uint64_t conn = push_chan(L, &r);
        lua_rawseti(L, -2, (lua_Integer)conn);
    }
    lua_setfield(L, -2, "members");
    l_scratch_done(out);
    return 1;
}

static int
lcreg_client_ids(lua_State *L)
{
    struct creg *reg = check_reg(L);
    size_t gl;
    const char *g = luaL_checklstring(L, 2, &gl);
    struct buf *out = l_scratch(L);
    int n = creg_client_ids(reg, g, gl, out);
    if (n < 0)
        return nomem(L);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *s = creg_rd_str(&r, &len);
        lua_pushlstring(L, s, len);
        lua_rawseti(L, -2, i + 1);
    }
    l_scratch_done(out);
    return 1;
}

/* reg:find_client(kind, clientId) -> connId | nil */
static int
lcreg_find_client(lua_State *L)
{
    struct creg *reg = check_reg(L);
    enum creg_kind kind = check_kind(L, 2);
    size_t cl;
    const char *cid = luaL_checklstring(L, 3, &cl);
    uint64_t conn;
    if (creg_find_client(reg, kind, cid, cl, &conn))
        lua_pushinteger(L, (lua_Integer)conn);
    else
        lua_pushnil(L);
    return 1;
}

static int
lcreg_conns(lua_State *L)
{
    struct creg *reg = check_reg(L);
    size_t gl;
    const char *g = luaL_checklstring(L, 2, &gl);
    enum creg_kind kind = lua_isnoneornil(L, 3) ? CREG_CONSUMER : check_kind(L, 3);
    struct buf *out = l_scratch(L);
    int n = creg_conns(reg, kind, g, gl, out);
    if (n < 0)
        return nomem(L);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    push_u64s(L, &r, (uint32_t)n);
    l_scratch_done(out);
    return 1;
}

static int
lcreg_members(lua_State *L)
{
    struct creg *reg = check_reg(L);
    enum creg_kind kind = check_kind(L, 2);
    size_t gl;
    const char *g = luaL_checklstring(L, 3, &gl);
    struct buf *out = l_scratch(L);
    int n = creg_members(reg, kind, g, gl, out);
    if (n < 0)
        return nomem(L);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        uint64_t conn = push_chan(L, &r);
        lua_rawseti(L, -2, (lua_Integer)conn);
    }
    l_scratch_done(out);
    return 1;
}

struct name {
    const char *p;
    size_t n;
};

static int
name_cmp(const void *a, const void *b)
{
    const struct name *x = a, *y = b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, m);
    if (c != 0)
        return c;
    return x->n < y->n ? -1 : x->n > y->n;
}

static int
lcreg_groups(lua_State *L)
{
    struct creg *reg = check_reg(L);
    enum creg_kind kind = check_kind(L, 2);
    struct buf *out = l_scratch(L);
    int n = creg_groups(reg, kind, out);
    if (n < 0)
        return nomem(L);
    struct name *names = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(*names), 0);
    struct creg_rd r;
    creg_rd_init(&r, out, 0);
    for (int i = 0; i < n; i++)
        names[i].p = creg_rd_str(&r, &names[i].n);
    qsort(names, (size_t)n, sizeof(*names), name_cmp);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushlstring(L, names[i].p, names[i].n);
        lua_rawseti(L, -2, i + 1);
    }
    l_scratch_done(out);
    return 1;
}

static int
lcreg_counts(lua_State *L)
{
    struct creg *reg = check_reg(L);
    struct creg_counts c;
    creg_counts(reg, &c);
    lua_createtable(L, 0, 5);
    set_int(L, "consumerGroups", c.consumer_groups);
    set_int(L, "producerGroups", c.producer_groups);
    set_int(L, "connections", c.connections);
    set_int(L, "channels", (lua_Integer)c.channels);
    set_int(L, "subscriptions", (lua_Integer)c.subscriptions);
    return 1;
}

/* }}} */

/* {{{ Module */

static int
lcreg_gc(lua_State *L)
{
    struct lcreg *lc = luaL_checkudata(L, 1, LCREG_TYPE);
    if (lc->owned && lc->reg != NULL)
        creg_free(lc->reg);
    lc->reg = NULL;
    return 0;
}

static int
lcreg_tostring(lua_State *L)
{
    struct lcreg *lc = luaL_checkudata(L, 1, LCREG_TYPE);
    lua_pushfstring(L, "rmq.client_registry(%s)", lc->owned ? "private" : "shared");
    return 1;
}

static void
push_handle(lua_State *L, struct creg *reg, bool owned)
{
    struct lcreg *lc = lua_newuserdatauv(L, sizeof(*lc), 0);
    lc->reg = reg;
    lc->owned = owned;
    luaL_setmetatable(L, LCREG_TYPE);
}

static int
lcreg_shared(lua_State *L)
{
    struct creg *reg = creg_shared();
    if (reg == NULL)
        return nomem(L);
    push_handle(L, reg, false);
    return 1;
}

static int
lcreg_new(lua_State *L)
{
    push_handle(L, NULL, true);
    struct lcreg *lc = lua_touserdata(L, -1);
    lc->reg = creg_new();
    if (lc->reg == NULL)
        return nomem(L);
    return 1;
}

int
luaopen_rmq_client_registry(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "heartbeat", lcreg_heartbeat },
        { "unregister", lcreg_unregister },
        { "remove", lcreg_remove },
        { "conn_closed", lcreg_conn_closed },
        { "scan", lcreg_scan },
        { "set_limits", lcreg_set_limits },
        { "limits", lcreg_limits },
        { "clear", lcreg_clear },
        { "subscription", lcreg_subscription },
        { "generation", lcreg_generation },
        { "consumer_group", lcreg_consumer_group },
        { "client_ids", lcreg_client_ids },
        { "conns", lcreg_conns },
        { "find_client", lcreg_find_client },
        { "members", lcreg_members },
        { "groups", lcreg_groups },
        { "counts", lcreg_counts },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "shared", lcreg_shared },
        { "new", lcreg_new },
        { "parse", lcreg_parse },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LCREG_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lcreg_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, lcreg_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, LHB_TYPE)) {
        lua_pushcfunction(L, lhb_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}

/* }}} */
