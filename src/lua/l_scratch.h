/*
 * l_scratch: one output buffer per Lua state, for bindings that encode a
 * body in C and then push it as a string.  The buffer belongs to the
 * state (a registry userdata with __gc), so a raise while pushing leaks
 * nothing; a buffer that grew past SCRATCH_KEEP is released after use so
 * one huge body does not stay allocated.  One user at a time: take it,
 * fill it, push it, with no call in between that could take it again.
 */
#ifndef RMQ_L_SCRATCH_H
#define RMQ_L_SCRATCH_H

#include <lua.h>
#include <stdbool.h>

#include "core/buf.h"

#define SCRATCH_KEEP (1u << 20)

/** The state's scratch buffer, emptied.  [-0, +0, m] */
struct buf *l_scratch(lua_State *L);

/** Pushes the buffer's bytes (nil when !has), then empties it (releasing an
 * oversized one).  [-0, +1, m] */
void l_scratch_push(lua_State *L, struct buf *b, bool has);

/** Empties the buffer without pushing (releasing an oversized one). */
void l_scratch_done(struct buf *b);

#endif
