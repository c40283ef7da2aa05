/*
 * rmq: the command line (send, consume, bench, admin, repl).  The same
 * runtime as the server, running lua/rmq/cli.lua's main(args).
 */
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>

#include "core/err.h"
#include "lua/l_modules.h"
#include "runtime/host.h"
#include "runtime/lua_source.h"
#include "tools/l_tools.h"

/* cli.main(args): commands call rmq.net in blocking mode (no task is
 * needed outside the loop), or net.run where they want concurrency. */
static int
cli_run(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.cli");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "main");
    lua_remove(L, -2);
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_call(L, 1, 1);
    return 1;
}

int
main(int argc, char **argv)
{
    if (lua_source_check_override() != 0) {
        fprintf(stderr, "rmq: %s\n", err_msg());
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct host *h = host_new(lmodules_newstate(), true, RMQ_DEFAULT_MAX_FRAME, 0, -1);
    if (h == NULL) {
        fprintf(stderr, "rmq: %s\n", err_msg());
        return 1;
    }
    lua_State *L = h->L;
    tools_open_libs(L);
    host_set_lua_path(L);
    lua_pushcfunction(L, cli_run);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int code;
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        fprintf(stderr, "rmq: %s\n", lua_tostring(L, -1));
        code = 1;
    } else {
        code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    }
    lua_pop(L, 1);
    host_free(h);
    return code;
}
