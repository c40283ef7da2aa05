/* l_scratch: see l_scratch.h. */
#include "lua/l_scratch.h"

#include <lauxlib.h>

static const char scratch_key = 's';

static int
scratch_gc(lua_State *L)
{
    buf_free(lua_touserdata(L, 1));
    return 0;
}

struct buf *
l_scratch(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &scratch_key);
    struct buf *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (b == NULL) {
        b = lua_newuserdatauv(L, sizeof(*b), 0);
        buf_init(b);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, scratch_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &scratch_key);
    }
    buf_reset(b);
    return b;
}

void
l_scratch_done(struct buf *b)
{
    if (b->cap > SCRATCH_KEEP)
        buf_free(b);
    else
        buf_reset(b);
}

void
l_scratch_push(lua_State *L, struct buf *b, bool has)
{
    if (has)
        lua_pushlstring(L, (const char *)buf_head(b), buf_len(b));
    else
        lua_pushnil(L);
    l_scratch_done(b);
}
