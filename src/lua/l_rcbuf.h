/*
 * l_rcbuf: a shared read-only byte buffer (core/rcbuf.h) as a Lua value,
 * so that a handler can answer with a body encoded once and shared (the
 * reply encoder, proto/cmd.c, queues it by reference: net/conn.h
 * conn_send_shared).  #b is its length; b:string() copies it into a Lua
 * string.  The userdata holds one reference, dropped by __gc.
 */
#ifndef RMQ_L_RCBUF_H
#define RMQ_L_RCBUF_H

#include <lua.h>

#include "core/rcbuf.h"

#define LRCBUF_TYPE "rmq.rcbuf"

/** Pushes b as a userdata that takes over one reference the caller holds
 *  (dropped here if the push raises).  [-0, +1, m] */
void l_push_rcbuf(lua_State *L, struct rcbuf *b);

/** The buffer at idx, or NULL when it is not one. */
struct rcbuf *l_test_rcbuf(lua_State *L, int idx);

#endif
