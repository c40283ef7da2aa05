/*
 * l_rcbuf: see l_rcbuf.h.
 */
#include "lua/l_rcbuf.h"

#include <lauxlib.h>

static int
lrcbuf_gc(lua_State *L)
{
    struct rcbuf **p = luaL_checkudata(L, 1, LRCBUF_TYPE);
    rcbuf_unref(*p);
    *p = NULL;
    return 0;
}

static int
lrcbuf_len(lua_State *L)
{
    struct rcbuf **p = luaL_checkudata(L, 1, LRCBUF_TYPE);
    lua_pushinteger(L, *p != NULL ? (lua_Integer)(*p)->len : 0);
    return 1;
}

static int
lrcbuf_string(lua_State *L)
{
    struct rcbuf **p = luaL_checkudata(L, 1, LRCBUF_TYPE);
    if (*p == NULL)
        lua_pushliteral(L, "");
    else
        lua_pushlstring(L, (const char *)(*p)->data, (*p)->len);
    return 1;
}

/* The metatable, made on first use in each state.  [-0, +0, m] */
static void
set_meta(lua_State *L)
{
    if (luaL_newmetatable(L, LRCBUF_TYPE)) {
        lua_pushcfunction(L, lrcbuf_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, lrcbuf_len);
        lua_setfield(L, -2, "__len");
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, lrcbuf_string);
        lua_setfield(L, -2, "string");
        lua_setfield(L, -2, "__index");
    }
    lua_setmetatable(L, -2);
}

/* The part that may raise, run protected so the reference is not lost. */
static int
push_protected(lua_State *L)
{
    struct rcbuf *b = lua_touserdata(L, 1);
    struct rcbuf **p = lua_newuserdatauv(L, sizeof(*p), 0);
    *p = NULL;
    set_meta(L);
    *p = b;        /* owned by the userdata from here on */
    return 1;
}

void
l_push_rcbuf(lua_State *L, struct rcbuf *b)
{
    lua_pushcfunction(L, push_protected);
    lua_pushlightuserdata(L, b);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        rcbuf_unref(b);
        lua_error(L);
    }
}

struct rcbuf *
l_test_rcbuf(lua_State *L, int idx)
{
    struct rcbuf **p = luaL_testudata(L, idx, LRCBUF_TYPE);
    return p != NULL ? *p : NULL;
}
