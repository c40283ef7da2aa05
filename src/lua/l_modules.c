/*
 * l_modules: see l_modules.h.  Here, not in runtime/: the host runs a
 * state it is given, and the bindings that state gets are this layer's.
 */
#include "lua/l_modules.h"

#include <lauxlib.h>
#include <lualib.h>

void
lmodules_preload(lua_State *L)
{
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
#define RMQ_PRELOAD(name, fn)  \
    lua_pushcfunction(L, fn);  \
    lua_setfield(L, -2, name);
    RMQ_LUA_MODULES(RMQ_PRELOAD)
#undef RMQ_PRELOAD
    lua_pop(L, 1);
}

lua_State *
lmodules_newstate(void)
{
    lua_State *L = luaL_newstate();
    if (L == NULL)
        return NULL;
    luaL_openlibs(L);
    lmodules_preload(L);
    return L;
}
