/*
 * server: the rmq-server process: arguments, the conf (through the Lua
 * module rmq.server), listening sockets, worker threads, the READY line,
 * signals and orderly shutdown.
 */
#ifndef RMQ_SERVER_H
#define RMQ_SERVER_H

#include <lua.h>

/** Runs rmq-server; returns the process exit code. */
int server_main(int argc, char **argv);

/**
 * Points package.path at rmq's lua/ tree: $RMQ_LUA_DIR, else lua/ beside
 * the executable's parent directory (the build tree), else the source
 * tree this binary was built from.
 */
void server_set_lua_path(lua_State *L);

#endif
