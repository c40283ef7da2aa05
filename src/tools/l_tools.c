#include "tools/l_tools.h"

#include <lauxlib.h>

void
tools_open_libs(lua_State *L)
{
#define RMQ_TOOLS_REG(name, fn) { name, fn },
    static const luaL_Reg mods[] = { RMQ_TOOLS_LUA_MODULES(RMQ_TOOLS_REG) { NULL, NULL } };
#undef RMQ_TOOLS_REG
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    luaL_setfuncs(L, mods, 0);
    lua_pop(L, 1);
}
