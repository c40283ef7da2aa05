/*
 * l_offset_table: the broker's consumer offsets (broker/offset_table.h)
 * as the Lua module `rmq.offset_table`.  Copies out are taken under the
 * table's lock into a userdata block; Lua values are built after.
 *
 *   local ot = require "rmq.offset_table"
 *   local t = ot.shared()             -- the process-wide table; ot.new(): a private one
 *   t:commit(topic, group, qid, offset) -> true | nil, err
 *   t:query(topic, group, qid) -> offset | nil
 *   t:remove_group(group) -> n        t:remove_topic(topic) -> n
 *   t:all() -> {["topic@group"] = {[qid] = offset}}
 *   t:encode(pretty) -> json          t:version(), t:count(), t:clear()
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <string.h>

#include "broker/offset_table.h"
#include "core/buf.h"
#include "lua/l_err.h"
#include "lua/l_jstats.h"
#include "lua/l_modules.h"
#include "lua/l_scratch.h"

#define LOT_TYPE "rmq.offset_table"

struct lot {
    struct offset_table *t;
    bool owned;
};

static struct offset_table *
check_ot(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lot, t, LOT_TYPE, "the offset table is gone")->t;
}

/* "topic@group" in a Lua-owned block. [-0, +1, m] */
static const char *
push_key(lua_State *L, int ti, int gi, size_t *len)
{
    size_t tl, gl;
    const char *topic = luaL_checklstring(L, ti, &tl);
    const char *group = luaL_checklstring(L, gi, &gl);
    char *k = lua_newuserdatauv(L, tl + gl + 1, 0);
    memcpy(k, topic, tl);
    k[tl] = '@';
    memcpy(k + tl + 1, group, gl);
    *len = tl + gl + 1;
    return k;
}

static uint32_t
check_qid(lua_State *L, int idx)
{
    lua_Integer q = luaL_checkinteger(L, idx);
    luaL_argcheck(L, q >= 0 && q < OFFSET_TABLE_MAX_QUEUES, idx, "queue id out of range");
    return (uint32_t)q;
}

static int
lot_commit(lua_State *L)
{
    struct offset_table *t = check_ot(L);
    uint32_t qid = check_qid(L, 4);
    lua_Integer off = luaL_checkinteger(L, 5);
    size_t klen;
    const char *key = push_key(L, 2, 3, &klen);
    int rc = offset_table_commit(t, key, klen, qid, off);
    if (rc == -ENOMEM)
        return luaL_error(L, "out of memory");
    if (rc != 0)
        return lerr_pushstr(L, "offset must be >= 0");
    lua_pushboolean(L, 1);
    return 1;
}

static int
lot_query(lua_State *L)
{
    struct offset_table *t = check_ot(L);
    uint32_t qid = check_qid(L, 4);
    size_t klen;
    const char *key = push_key(L, 2, 3, &klen);
    int64_t v = offset_table_query(t, key, klen, qid);
    if (v < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, v);
    return 1;
}

static int
remove_part(lua_State *L, int part)
{
    struct offset_table *t = check_ot(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    lua_pushinteger(L, (lua_Integer)offset_table_remove(t, part, name, n));
    return 1;
}

static int
lot_remove_topic(lua_State *L)
{
    return remove_part(L, 0);
}

static int
lot_remove_group(lua_State *L)
{
    return remove_part(L, 1);
}

/* [-0, +1, m] */
static struct offset_snapshot *
push_snapshot(lua_State *L, struct offset_table *t)
{
    size_t cap = offset_table_snapshot(t, NULL, 0);
    for (;;) {
        void *block = lua_newuserdatauv(L, cap, 0);
        size_t need = offset_table_snapshot(t, block, cap);
        if (need <= cap)
            return block;
        lua_pop(L, 1);
        cap = need + need / 8;
    }
}

static int
lot_all(lua_State *L)
{
    struct offset_table *t = check_ot(L);
    struct offset_snapshot *s = push_snapshot(L, t);
    lua_createtable(L, 0, s->count < (1u << 30) ? (int)s->count : 0);
    for (size_t i = 0; i < s->count; i++) {
        const struct offset_item *it = &s->items[i];
        lua_pushlstring(L, it->key, it->key_len);
        lua_createtable(L, 0, (int)it->n);
        for (uint32_t q = 0; q < it->n; q++) {
            if (it->offs[q] < 0)
                continue;
            lua_pushinteger(L, it->offs[q]);
            lua_rawseti(L, -2, q);
        }
        lua_rawset(L, -3);
    }
    return 1;
}

static int
lot_encode(lua_State *L)
{
    struct offset_table *t = check_ot(L);
    bool pretty = lua_toboolean(L, 2);
    lua_settop(L, 1);
    struct offset_snapshot *s = push_snapshot(L, t);
    struct buf *b = l_scratch(L);
    if (offset_table_json(b, s, pretty) != 0)
        return luaL_error(L, "out of memory encoding consumer offsets");
    l_scratch_push(L, b, true);
    return 1;
}

static int
lot_version(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)offset_table_gen(check_ot(L)));
    return 1;
}

static int
lot_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)offset_table_count(check_ot(L)));
    return 1;
}

static int
lot_hash_stats(lua_State *L)
{
    struct jmap_stats st;
    offset_table_hash_stats(check_ot(L), &st);
    l_push_jmap_stats(L, &st);
    return 1;
}

static int
lot_clear(lua_State *L)
{
    offset_table_clear(check_ot(L));
    return 0;
}

static int
lot_gc(lua_State *L)
{
    struct lot *o = luaL_checkudata(L, 1, LOT_TYPE);
    if (o->owned) {
        o->owned = false;
        offset_table_free(o->t);
        o->t = NULL;
    }
    return 0;
}

static struct lot *
push_handle(lua_State *L)
{
    struct lot *o = lua_newuserdatauv(L, sizeof(*o), 0);
    o->t = NULL;
    o->owned = false;
    luaL_setmetatable(L, LOT_TYPE);
    return o;
}

static int
lot_shared(lua_State *L)
{
    struct lot *o = push_handle(L);
    o->t = offset_table_shared();
    if (o->t == NULL)
        return luaL_error(L, "out of memory creating the offset table");
    return 1;
}

static int
lot_new(lua_State *L)
{
    struct lot *o = push_handle(L);
    o->t = offset_table_new();
    if (o->t == NULL)
        return luaL_error(L, "out of memory creating an offset table");
    o->owned = true;
    return 1;
}

int
luaopen_rmq_offset_table(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "commit", lot_commit },
        { "query", lot_query },
        { "remove_group", lot_remove_group },
        { "remove_topic", lot_remove_topic },
        { "all", lot_all },
        { "encode", lot_encode },
        { "version", lot_version },
        { "count", lot_count },
        { "hash_stats", lot_hash_stats },
        { "clear", lot_clear },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "shared", lot_shared },
        { "new", lot_new },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LOT_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lot_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
