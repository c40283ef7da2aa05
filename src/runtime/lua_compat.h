/*
 * runtime/lua_compat: Lua 5.4.4 (Debian 12) vs later 5.4 releases.  lua_closethread
 * arrived in 5.4.6 and replaced lua_resetthread.
 */
#ifndef RMQ_RUNTIME_LUA_COMPAT_H
#define RMQ_RUNTIME_LUA_COMPAT_H

#include <lua.h>

#if LUA_VERSION_RELEASE_NUM < 50406
#define lua_closethread(L, from) lua_resetthread(L)
#else
#define lua_resetthread(L) lua_closethread(L, NULL)
#endif

#endif
