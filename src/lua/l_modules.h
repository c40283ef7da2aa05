/*
 * The C modules every Lua state gets: the server and `rmq` preload them
 * into package.preload; plain lua5.4 finds them in rmq.so through the
 * all-in-one loader (`require "rmq.codec"` -> luaopen_rmq_codec).  The
 * tools (load generators, benchmark loops, child processes) are listed
 * apart, in tools/l_tools.h: rmq-server does not have them.
 */
#ifndef RMQ_L_MODULES_H
#define RMQ_L_MODULES_H

#include <lua.h>

#include "proto/header.h"   /* luaopen_rmq_header */
#include "runtime/natives.h" /* luaopen_rmq_native */

int luaopen_rmq_core(lua_State *L);
int luaopen_rmq_codec(lua_State *L);
int luaopen_rmq_net(lua_State *L);
int luaopen_rmq_store(lua_State *L);
int luaopen_rmq_route(lua_State *L);
int luaopen_rmq_shared(lua_State *L);
int luaopen_rmq_config_table(lua_State *L);
int luaopen_rmq_offset_table(lua_State *L);
int luaopen_rmq_client_registry(lua_State *L);
int luaopen_rmq_processors(lua_State *L);
int luaopen_rmq_message(lua_State *L);
int luaopen_rmq_fjson(lua_State *L);
int luaopen_rmq_metrics(lua_State *L);
int luaopen_rmq_ha(lua_State *L);
int luaopen_rmq_filter(lua_State *L);
int luaopen_rmq_console_io(lua_State *L);
int luaopen_rmq_acl(lua_State *L);
int luaopen_rmq_httpc(lua_State *L);

#define RMQ_LUA_MODULES(_)       \
    _("rmq.core", luaopen_rmq_core)   \
    _("rmq.codec", luaopen_rmq_codec) \
    _("rmq.net", luaopen_rmq_net)     \
    _("rmq.route", luaopen_rmq_route) \
    _("rmq.store", luaopen_rmq_store) \
    _("rmq.shared", luaopen_rmq_shared) \
    _("rmq.config_table", luaopen_rmq_config_table) \
    _("rmq.offset_table", luaopen_rmq_offset_table) \
    _("rmq.client_registry", luaopen_rmq_client_registry) \
    _("rmq.header", luaopen_rmq_header) \
    _("rmq.native", luaopen_rmq_native) \
    _("rmq.processors", luaopen_rmq_processors) \
    _("rmq.message", luaopen_rmq_message) \
    _("rmq.fjson", luaopen_rmq_fjson) \
    _("rmq.metrics", luaopen_rmq_metrics) \
    _("rmq.ha", luaopen_rmq_ha) \
    _("rmq.filter", luaopen_rmq_filter) \
    _("rmq.console_io", luaopen_rmq_console_io) \
    _("rmq.acl", luaopen_rmq_acl) \
    _("rmq.httpc", luaopen_rmq_httpc)

/** Preloads the modules above into L's package.preload (and sets
 *  lmodules_cmd_values). */
void lmodules_preload(lua_State *L);

/** Tells the command encoder of L (runtime/cmd.h) about this layer's
 *  values: shared bodies, store records, request signing.  rmq.net's
 *  luaopen calls it too (plain lua5.4 has no preload of ours). */
void lmodules_cmd_values(lua_State *L);

/**
 * A new Lua state with the standard libraries and the modules above
 * preloaded: what a host runs (host_new(lmodules_newstate(), true, ...)).
 * NULL when Lua cannot allocate one.
 */
lua_State *lmodules_newstate(void);

#endif
