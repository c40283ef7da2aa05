/*
 * The tools' C modules: the load generators of `rmq bench` and the
 * scripts in scripts/bench/, the store's benchmark loops, and child
 * processes for specs and scripts.  They are linked into `rmq` and
 * rmq.so (plain lua5.4 finds them through the all-in-one loader), never
 * into rmq-server: a server worker has no use for them (lua/l_modules.h
 * lists what it preloads).
 */
#ifndef RMQ_L_TOOLS_H
#define RMQ_L_TOOLS_H

#include <lua.h>

int luaopen_rmq_proc(lua_State *L);
int luaopen_rmq_bench(lua_State *L);
int luaopen_rmq_store_bench(lua_State *L);
int luaopen_rmq_lineedit(lua_State *L);
int luaopen_rmq_grpc(lua_State *L);

#define RMQ_TOOLS_LUA_MODULES(_)        \
    _("rmq.proc", luaopen_rmq_proc)     \
    _("rmq.bench", luaopen_rmq_bench)   \
    _("rmq.store_bench", luaopen_rmq_store_bench) \
    _("rmq.lineedit", luaopen_rmq_lineedit) \
    _("rmq.grpc", luaopen_rmq_grpc)

/** Preloads the tools' modules into L (lmodules_preload, lua/l_modules.h, has the rest). */
void tools_open_libs(lua_State *L);

#endif
