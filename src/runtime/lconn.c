/*
 * lconn: see lconn.h.  Methods:
 *
 *   conn:call(cmd [, timeout_ms]) -> reply | nil, "timeout"|"closed"|msg
 *       sends a request and waits for the response (yields in a task)
 *   conn:oneway(cmd)     -> true | nil, msg      flag RPC_ONEWAY, no reply
 *   conn:send_raw(bytes) -> true | nil, msg      bytes as they are (specs)
 *   conn:call_raw(frame [, timeout_ms]) -> reply, reply_bytes | nil, err
 *       sends a complete encoded request frame as it is (a captured one)
 *       and waits for the response with the frame's opaque; returns it
 *       decoded and as the bytes received (specs compare them)
 *   conn:close()
 *   conn.peer, conn.role (listener role, nil for outbound), conn.closed,
 *   conn.id (unique in the process: what the NameServer remembers of the
 *   connection a broker registered through),
 *   conn.close_reason, conn.pending (outstanding calls), conn.stray
 *   (responses that matched no outstanding call: late or unasked-for)
 */
#include "runtime/lconn.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "runtime/cmd.h"
#include "runtime/wait.h"

struct lconn *
lconn_wrap(lua_State *L, struct conn *c, int handler_ref)
{
    struct lconn *lc = lua_newuserdatauv(L, sizeof(*lc), 0);
    lc->c = c;
    lc->handler_ref = handler_ref;
    lc->role = NULL;
    conn_ref(c);
    luaL_setmetatable(L, LCONN_TYPE);
    c->owner_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return lc;
}

struct lconn *
lconn_push(lua_State *L, struct conn *c)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->owner_ref);
    return lua_touserdata(L, -1);
}

void
lconn_release(lua_State *L, struct conn *c)
{
    if (c->owner_ref >= 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, c->owner_ref);
        c->owner_ref = -1;
    }
}

static struct lconn *
check_conn(lua_State *L)
{
    return luaL_checkudata(L, 1, LCONN_TYPE);
}

static int
lconn_gc(lua_State *L)
{
    struct lconn *lc = luaL_checkudata(L, 1, LCONN_TYPE);
    if (lc->c != NULL) {
        struct conn *c = lc->c;
        lc->c = NULL;
        if (lc->handler_ref >= 0)
            luaL_unref(L, LUA_REGISTRYINDEX, lc->handler_ref);
        conn_unref(c);
    }
    return 0;
}

/* {{{ call */

struct call_op {
    struct waiter w;
    int status;
    uint8_t *frame;
    size_t len;
    bool raw;                 /* call_raw: also return the frame's bytes */
};

static void
call_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct call_op *op = call->arg;
    op->status = status;
    if (status == 0) {
        op->frame = malloc(len);
        if (op->frame == NULL) {
            op->status = -ENOMEM;
        } else {
            memcpy(op->frame, frame, len);
            op->len = len;
        }
    }
    host_wake(&op->w);
}

static int
call_push(lua_State *L, struct waiter *w)
{
    struct call_op *op = (struct call_op *)w;
    int n;
    if (op->status == 0) {
        struct host *h = host_of(L);
        if (lcmd_push_frame(L, h, op->frame, op->len) != NULL) {
            n = 1;
            if (op->raw) {
                lua_pushlstring(L, (const char *)op->frame, op->len);
                n = 2;
            }
        } else {
            lua_pushnil(L);
            lua_pushfstring(L, "bad response: %s", err_msg());
            n = 2;
        }
    } else {
        lua_pushnil(L);
        if (op->status == -RMQ_ETIMEDOUT)
            lua_pushliteral(L, "timeout");
        else if (op->status == -RMQ_ECLOSED)
            lua_pushliteral(L, "closed");
        else
            lua_pushstring(L, strerror(-op->status));
        n = 2;
    }
    free(op->frame);
    free(op);
    return n;
}

/* Closing the connection fails its calls, so this is only for a call
 * whose connection outlived the loop. */
static void
call_abandon(struct waiter *w)
{
    struct call_op *op = (struct call_op *)w;
    free(op->frame);
    free(op);
}

/* Encodes the table at 2 as a request for c (lcmd_encoded(h) has it);
 * returns the opaque. */
static int32_t
encode_request(lua_State *L, struct host *h, struct conn *c, int oneway,
               const uint8_t **body, size_t *blen)
{
    luaL_checktype(L, 2, LUA_TTABLE);
    struct rmq_cmd base;
    memset(&base, 0, sizeof(base));
    base.opaque = reactor_opaque(c->r);
    base.flag = oneway ? RMQ_RPC_ONEWAY : 0;
    base.serialize = RMQ_SER_JSON;
    if (lcmd_encode_table(L, 2, h, &base, 0, body, blen) != 0)
        luaL_error(L, "bad command: %s", err_msg());
    /* The table may set its own opaque (specs reproducing captures). */
    lua_getfield(L, 2, "opaque");
    int32_t opaque = lua_isinteger(L, -1) ? (int32_t)lua_tointeger(L, -1)
                                          : base.opaque;
    lua_pop(L, 1);
    return opaque;
}

static int
lconn_call(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    lua_Integer timeout = luaL_optinteger(L, 3, 3000);
    luaL_argcheck(L, timeout > 0, 3, "timeout must be positive");
    struct host *h = host_of(L);
    struct conn *c = lc->c;
    if (c->closed) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    const uint8_t *body;
    size_t blen;
    int32_t opaque = encode_request(L, h, c, 0, &body, &blen);
    struct call_op *op = calloc(1, sizeof(*op));
    struct call *call = calloc(1, sizeof(*call));
    if (op == NULL || call == NULL) {
        free(op);
        free(call);
        return luaL_error(L, "out of memory");
    }
    op->w.push = call_push;
    op->w.abandon = call_abandon;
    call->done = call_done;
    call->arg = op;
    const struct buf *head = lcmd_encoded(h);
    int rc = conn_call(c, call, opaque, buf_head(head), buf_len(head),
                       body, blen, (uint64_t)timeout);
    if (rc != 0) {
        free(op);  /* conn_call has disposed of `call` */
        lua_pushnil(L);
        lua_pushstring(L, rc == -RMQ_ECLOSED ? "closed" : "cannot send");
        return 2;
    }
    return host_wait(L, &op->w);
}

static int
lconn_call_raw(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    size_t len;
    const uint8_t *frame = (const uint8_t *)luaL_checklstring(L, 2, &len);
    lua_Integer timeout = luaL_optinteger(L, 3, 3000);
    luaL_argcheck(L, timeout > 0, 3, "timeout must be positive");
    struct conn *c = lc->c;
    if (c->closed) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    /* The opaque to wait for is the one inside the frame. */
    luaL_argcheck(L, len >= 8, 2, "not a frame");
    size_t need = rmq_cmd_arena_size(be32_get(frame + 4) & 0xFFFFFF);
    void *arena_mem = lua_newuserdatauv(L, need, 0);
    struct rmq_arena a = { arena_mem, need, 0 };
    struct rmq_cmd cmd;
    if (rmq_cmd_decode(&cmd, frame, len, &a) != 0)
        return luaL_error(L, "call_raw: %s", err_msg());
    lua_pop(L, 1);
    struct call_op *op = calloc(1, sizeof(*op));
    struct call *call = calloc(1, sizeof(*call));
    if (op == NULL || call == NULL) {
        free(op);
        free(call);
        return luaL_error(L, "out of memory");
    }
    op->w.push = call_push;
    op->w.abandon = call_abandon;
    op->raw = true;
    call->done = call_done;
    call->arg = op;
    int rc = conn_call(c, call, cmd.opaque, frame, len, NULL, 0, (uint64_t)timeout);
    if (rc != 0) {
        free(op);
        lua_pushnil(L);
        lua_pushstring(L, rc == -RMQ_ECLOSED ? "closed" : "cannot send");
        return 2;
    }
    return host_wait(L, &op->w);
}

static int
lconn_oneway(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    struct host *h = host_of(L);
    const uint8_t *body;
    size_t blen;
    (void)encode_request(L, h, lc->c, 1, &body, &blen);
    const struct buf *head = lcmd_encoded(h);
    int rc = conn_send(lc->c, buf_head(head), buf_len(head), body, blen);
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushstring(L, rc == -RMQ_ECLOSED ? "closed" : "cannot send");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int
lconn_send_raw(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    int rc = conn_send(lc->c, s, n, NULL, 0);
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushstring(L, rc == -RMQ_ECLOSED ? "closed" : "cannot send");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int
lconn_close(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    conn_close(lc->c, "closed by us");
    return 0;
}

/* }}} */

static int
lconn_index(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    const char *k = luaL_checkstring(L, 2);
    struct conn *c = lc->c;
    if (strcmp(k, "peer") == 0) {
        lua_pushstring(L, c->peer);
    } else if (strcmp(k, "closed") == 0) {
        lua_pushboolean(L, c->closed);
    } else if (strcmp(k, "close_reason") == 0) {
        if (c->closed)
            lua_pushstring(L, c->close_reason);
        else
            lua_pushnil(L);
    } else if (strcmp(k, "id") == 0) {
        lua_pushinteger(L, (lua_Integer)c->id);
    } else if (strcmp(k, "stray") == 0) {
        lua_pushinteger(L, (lua_Integer)c->stray);
    } else if (strcmp(k, "pending") == 0) {
        lua_pushinteger(L, (lua_Integer)c->pending_count);
    } else if (strcmp(k, "role") == 0) {
        if (lc->role != NULL)
            lua_pushstring(L, lc->role);
        else
            lua_pushnil(L);
    } else {
        /* methods */
        lua_getmetatable(L, 1);
        lua_getfield(L, -1, "methods");
        lua_getfield(L, -1, k);
    }
    return 1;
}

static int
lconn_tostring(lua_State *L)
{
    struct lconn *lc = check_conn(L);
    lua_pushfstring(L, "rmq.net.conn(%s%s)", lc->c->peer,
                    lc->c->closed ? ", closed" : "");
    return 1;
}

void
lconn_register(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "call", lconn_call },
        { "oneway", lconn_oneway },
        { "send_raw", lconn_send_raw },
        { "call_raw", lconn_call_raw },
        { "close", lconn_close },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LCONN_TYPE)) {
        lua_pushcfunction(L, lconn_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lconn_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, lconn_tostring);
        lua_setfield(L, -2, "__tostring");
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "methods");
    }
    lua_pop(L, 1);
}
