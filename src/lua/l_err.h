/*
 * l_err: the two shapes every binding repeats, said once.
 *
 * An expected failure returns `nil, message` to Lua (style.md, "two
 * error channels"): lerr_push() takes the message from the core's error
 * contract (core/err.h: the calling thread's last err_set()), as
 * Tarantool's luaT_push_nil_and_error does; lerr_pushstr() takes one the
 * binding made itself.  Both return 2, so a binding ends with
 * `return lerr_push(L);`; lerr_result() is `true | nil, err` from a
 * return code, as luaL_fileresult is from errno.
 *
 * A handle is a userdata whose object can go before the userdata does
 * (closed, stopped, freed: the member pointing to it is NULL then), as
 * liolib's file handles can.  LERR_CHECKOPEN() checks the metatable and
 * raises the binding's own message for a closed one.
 */
#ifndef RMQ_L_ERR_H
#define RMQ_L_ERR_H

#include <lua.h>
#include <stddef.h>

/** Pushes nil and err_msg(); returns 2.  [-0, +2, m] */
int lerr_push(lua_State *L);

/** Pushes nil and msg; returns 2.  [-0, +2, m] */
int lerr_pushstr(lua_State *L, const char *msg);

/** For a fallible call's return code (core/err.h: 0, or a failure whose
 *  reason err_msg() holds): pushes true and returns 1 when rc is 0, else
 *  as lerr_push.  [-0, +1|2, m] */
int lerr_result(lua_State *L, int rc);

/**
 * luaL_checkudata(L, idx, tname), then raises `closed` when the object
 * pointer stored `ptr_at` bytes into the userdata is NULL.  The message
 * is the one the binding raised itself before: a C helper is no level of
 * the Lua stack, so luaL_error prefixes the same position (that of the
 * Lua code calling the binding).  Call it through LERR_CHECKOPEN.
 * [-0, +0, v]
 */
void *lerr_checkopen(lua_State *L, int idx, const char *tname, size_t ptr_at,
                     const char *closed);

/*
 * The `type` userdata at idx (metatable tname) whose object pointer
 * `member` is not NULL; raises `closed` otherwise.  The unevaluated
 * comparison with NULL makes a member that is not a pointer a compile
 * error (-Werror), as lerr_checkopen reads a pointer there.
 */
#define LERR_CHECKOPEN(L, idx, type, member, tname, closed)                 \
    ((void)sizeof(((type *)0)->member == NULL),                             \
     (type *)lerr_checkopen((L), (idx), (tname), offsetof(type, member),   \
                            (closed)))

#endif
