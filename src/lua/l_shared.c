/*
 * l_shared: the rmq.shared module over core/smap: maps of string ->
 * string that every worker's Lua state sees (see smap.h).
 *
 *   local m = shared.map("broker.topics")
 *   m:get(k) -> string | nil        m:set(k, v [, if_absent]) -> true | false
 *   m:del(k) -> bool                m:all() -> {k = v}
 *   m:version() -> n                m:count() -> n      m:clear()
 *   m:hash_stats() -> {size=, cap=, max_chain=}   (the hashing spec)
 *
 *   shared.setting(key, value) -> true | false   sets a run-time broker
 *       setting C reads, typed (broker/bsettings.h: brokerPermission,
 *       slaveReadEnable, ...); false for a key C does not read; raises on
 *       a wrong type or range
 *   shared.settings() -> {key = value}   shared.settings_clear()
 *
 *   shared.put_handle(name, lightuserdata)   shared.get_handle(name) -> lud
 *       hands a C object (e.g. st:share() of a store opened by the main
 *       thread) to other threads' Lua states by name; the object's own
 *       refcount decides its lifetime, not this directory
 *
 * Values are copied out under the map's read lock into Lua-owned buffers;
 * no Lua call runs while a lock is held.
 */
#include <lauxlib.h>
#include <string.h>

#include "broker/bsettings.h"
#include "core/err.h"
#include "core/smap.h"
#include "lua/l_modules.h"

#define LSHARED_TYPE "rmq.shared.map"

static struct smap *
check_map(lua_State *L)
{
    struct smap **p = luaL_checkudata(L, 1, LSHARED_TYPE);
    return *p;
}

/*
 * Values are copied out under the map's read lock into a userdata that Lua
 * owns (a raise leaks nothing), then turned into a string.  The copy is
 * retried with a larger block when the value grew in between.  No
 * luaL_Buffer here: dropping one with lua_settop while it is live corrupts
 * the stack (Lua 5.4.4 keeps a box on it once it outgrows its initial
 * space).
 */
static void *
scratch(lua_State *L, size_t cap)
{
    return lua_newuserdatauv(L, cap > 0 ? cap : 1, 0);
}

static int
lmap_get(lua_State *L)
{
    struct smap *m = check_map(L);
    size_t kl;
    const char *k = luaL_checklstring(L, 2, &kl);
    size_t cap = 256;
    for (;;) {
        char *p = scratch(L, cap);
        long n = smap_get(m, k, kl, p, cap);
        if (n < 0) {
            lua_pushnil(L);
            return 1;
        }
        if ((size_t)n <= cap) {
            lua_pushlstring(L, p, (size_t)n);
            return 1;
        }
        lua_pop(L, 1);  /* the value grew: again, with room for it */
        cap = (size_t)n;
    }
}

static int
lmap_set(lua_State *L)
{
    struct smap *m = check_map(L);
    size_t kl, vl;
    const char *k = luaL_checklstring(L, 2, &kl);
    const char *v = luaL_checklstring(L, 3, &vl);
    int rc = smap_set(m, k, kl, v, vl, lua_toboolean(L, 4));
    if (rc < 0)
        return luaL_error(L, "out of memory");
    lua_pushboolean(L, rc == 0);
    return 1;
}

static int
lmap_del(lua_State *L)
{
    struct smap *m = check_map(L);
    size_t kl;
    const char *k = luaL_checklstring(L, 2, &kl);
    lua_pushboolean(L, smap_del(m, k, kl));
    return 1;
}

static int
lmap_all(lua_State *L)
{
    struct smap *m = check_map(L);
    size_t count = 0;
    size_t cap = smap_dump(m, NULL, 0, &count);
    const char *s;
    size_t len;
    for (;;) {
        char *p = scratch(L, cap);
        size_t need = smap_dump(m, p, cap, &count);
        if (need <= cap) {
            s = p;
            len = need;
            break;
        }
        lua_pop(L, 1);  /* it grew meanwhile */
        cap = need + need / 4;
    }
    lua_createtable(L, 0, (int)count);
    size_t pos = 0;
    while (pos + 8 <= len) {
        uint32_t kl, vl;
        memcpy(&kl, s + pos, 4);
        lua_pushlstring(L, s + pos + 4, kl);
        pos += 4 + kl;
        memcpy(&vl, s + pos, 4);
        lua_pushlstring(L, s + pos + 4, vl);
        pos += 4 + vl;
        lua_rawset(L, -3);
    }
    return 1;
}

static int
lmap_version(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)smap_version(check_map(L)));
    return 1;
}

static int
lmap_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)smap_count(check_map(L)));
    return 1;
}

/* m:hash_stats() -> {size=, cap=, max_chain=}: what a lookup may walk. */
static int
lmap_hash_stats(lua_State *L)
{
    struct smap *m = check_map(L);
    size_t nb = 0;
    size_t longest = smap_max_chain(m, &nb);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)smap_count(m));
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)nb);
    lua_setfield(L, -2, "cap");
    lua_pushinteger(L, (lua_Integer)longest);
    lua_setfield(L, -2, "max_chain");
    return 1;
}

static int
lmap_clear(lua_State *L)
{
    smap_clear(check_map(L));
    return 0;
}

static int
lshared_map(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    struct smap *m = smap_named(name);
    if (m == NULL)
        return luaL_error(L, "out of memory creating shared map %s", name);
    struct smap **p = lua_newuserdatauv(L, sizeof(*p), 0);
    *p = m;
    luaL_setmetatable(L, LSHARED_TYPE);
    return 1;
}

static int
lshared_put_handle(lua_State *L)
{
    size_t nl;
    const char *name = luaL_checklstring(L, 1, &nl);
    luaL_checktype(L, 2, LUA_TLIGHTUSERDATA);
    void *p = lua_touserdata(L, 2);
    struct smap *m = smap_named("rmq.handles");
    if (m == NULL || smap_set(m, name, nl, (const char *)&p, sizeof(p), 0) < 0)
        return luaL_error(L, "out of memory");
    return 0;
}

static int
lshared_get_handle(lua_State *L)
{
    size_t nl;
    const char *name = luaL_checklstring(L, 1, &nl);
    struct smap *m = smap_named("rmq.handles");
    void *p = NULL;
    if (m == NULL || smap_get(m, name, nl, (char *)&p, sizeof(p)) != (long)sizeof(p))
        lua_pushnil(L);
    else
        lua_pushlightuserdata(L, p);
    return 1;
}

/* {{{ Typed settings (broker/bsettings.h) */

/* shared.setting(key, value) -> true | false (a key C does not read).
 * Raises on a value of the wrong type or out of the key's range. */
static int
lshared_setting(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    int k = bsettings_key(name);
    if (k < 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    int64_t v;
    if (bsettings_type((enum bset_key)k) == BSET_BOOL) {
        luaL_argexpected(L, lua_isboolean(L, 2), 2, "boolean");
        v = lua_toboolean(L, 2);
    } else {
        int isint = 0;
        lua_Integer i = lua_tointegerx(L, 2, &isint);
        luaL_argexpected(L, isint && lua_type(L, 2) == LUA_TNUMBER, 2, "integer");
        v = (int64_t)i;
    }
    if (bsettings_set((enum bset_key)k, v) != 0)
        return luaL_error(L, "%s", err_msg());
    lua_pushboolean(L, 1);
    return 1;
}

/* shared.settings() -> {key = value} of the keys set (for the console and
 * the specs). */
static int
lshared_settings(lua_State *L)
{
    struct bsettings_view view = { 0 };
    (void)bsettings_refresh(&view);
    lua_createtable(L, 0, BSET_NKEYS);
    for (int k = 0; k < BSET_NKEYS; k++) {
        if (!((view.v.set >> k) & 1u))
            continue;
        if (bsettings_type((enum bset_key)k) == BSET_BOOL)
            lua_pushboolean(L, view.v.val[k] != 0);
        else
            lua_pushinteger(L, (lua_Integer)view.v.val[k]);
        lua_setfield(L, -2, bsettings_name((enum bset_key)k));
    }
    return 1;
}

static int
lshared_settings_clear(lua_State *L)
{
    (void)L;
    bsettings_clear();
    return 0;
}

/* }}} */

int
luaopen_rmq_shared(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "get", lmap_get },
        { "set", lmap_set },
        { "del", lmap_del },
        { "all", lmap_all },
        { "version", lmap_version },
        { "count", lmap_count },
        { "hash_stats", lmap_hash_stats },
        { "clear", lmap_clear },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "map", lshared_map },
        { "put_handle", lshared_put_handle },
        { "get_handle", lshared_get_handle },
        { "setting", lshared_setting },
        { "settings", lshared_settings },
        { "settings_clear", lshared_settings_clear },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LSHARED_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
