#include "tools/l_tools.h"

#include <lauxlib.h>

void
tools_open_libs(lua_State *L)
{
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
#define RMQ_PRELOAD(name, fn)  \
    lua_pushcfunction(L, fn);  \
    lua_setfield(L, -2, name);
    RMQ_TOOLS_LUA_MODULES(RMQ_PRELOAD)
#undef RMQ_PRELOAD
    lua_pop(L, 1);
}
