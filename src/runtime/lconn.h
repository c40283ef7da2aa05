/*
 * lconn: the Lua face of a connection ("rmq.net.conn").  The same type
 * is the `ctx` a request handler receives (ctx.role, ctx.peer,
 * ctx:oneway(...) to push a request to that client) and what
 * rmq.net.connect returns.
 */
#ifndef RMQ_LCONN_H
#define RMQ_LCONN_H

#include <lua.h>

#include "net/conn.h"

#define LCONN_TYPE "rmq.net.conn"

struct lconn {
    struct conn *c;           /* referenced; never NULL after wrap */
    int handler_ref;          /* requests arriving on an outbound conn */
    const char *role;         /* ctx.role: the accepting listener's role
                               * (set by whoever accepted), NULL outbound */
    /* An outbound connect in progress reports here (see rmq.net.connect). */
    void (*on_connect)(struct lconn *lc, int status);
    void *connect_arg;
};

/**
 * Creates the handle for `c`, anchors it in the registry (c->owner_ref)
 * until the connection closes, and takes a reference on c.  handler_ref
 * is a registry ref to a function(ctx, cmd) or LUA_NOREF.
 * Stack: [-0, +0, m].
 */
struct lconn *lconn_wrap(lua_State *L, struct conn *c, int handler_ref);

/** Pushes c's handle. Stack: [-0, +1, -]. */
struct lconn *lconn_push(lua_State *L, struct conn *c);

/** Drops the registry anchor; called from the conn's on_close. */
void lconn_release(lua_State *L, struct conn *c);

/** Registers the metatable. Stack: [-0, +0, m]. */
void lconn_register(lua_State *L);

#endif
