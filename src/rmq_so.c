/*
 * rmq.so entry.  The module links the whole core and tools archives, so
 * every luaopen_rmq_* in src/lua/ and src/tools/ is exported from here and
 * plain lua5.4 (busted specs, scripts) loads the same C code the server
 * runs.  It carries the Lua modules too: `require "rmq"` adds a searcher
 * for them after the others, so a lua/ tree on package.path (the specs')
 * still wins.
 */
#include "lua/l_modules.h"
#include "runtime/lua_source.h"
#include "tools/l_tools.h"

/* `require "rmq"` alone: a table naming the submodules. */
int
luaopen_rmq(lua_State *L)
{
    lua_source_install(L, LUA_SOURCE_LAST);
    lua_newtable(L);
#define RMQ_MOD_NAME(name, fn) \
    lua_pushboolean(L, 1);     \
    lua_setfield(L, -2, name);
    RMQ_LUA_MODULES(RMQ_MOD_NAME)
    RMQ_TOOLS_LUA_MODULES(RMQ_MOD_NAME)
#undef RMQ_MOD_NAME
    return 1;
}
