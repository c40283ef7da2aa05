/*
 * rmq.httpc: one HTTP request from Lua (src/net/httpc.c), waiting as the
 * other rmq.net calls do (yields in a task, runs the loop elsewhere).
 *
 *   local status, body = httpc.request(host, port, method, path, body,
 *                                      timeout_ms, max_bytes)
 *   -- status: the HTTP status; or nil, "connection refused" (etc.)
 *
 * Used by rmq.controller.etcd to reach etcd's v3 JSON gateway.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "net/httpc.h"
#include "runtime/host.h"

struct httpc_op {
    struct waiter w;
    struct httpc h;
    int status;
    char *body;               /* copied out of the httpc before it freed */
    size_t blen;
};

static void
op_done(struct httpc *h, int status, const uint8_t *body, size_t len)
{
    struct httpc_op *op = h->data;
    op->status = status;
    if (status > 0 && len > 0) {
        op->body = malloc(len);
        if (op->body == NULL)
            op->status = UV_ENOMEM;
        else {
            memcpy(op->body, body, len);
            op->blen = len;
        }
    }
    buf_free(&op->h.in);
    host_wake(&op->w);
}

static int
op_push(lua_State *L, struct waiter *w)
{
    struct httpc_op *op = (struct httpc_op *)w;
    int n;
    if (op->status > 0) {
        lua_pushinteger(L, op->status);
        lua_pushlstring(L, op->body != NULL ? op->body : "", op->blen);
        n = 2;
    } else {
        lua_pushnil(L);
        lua_pushstring(L, op->status == UV_ETIMEDOUT ? "timed out" : uv_strerror(op->status));
        n = 2;
    }
    free(op->body);
    free(op);
    return n;
}

static void
op_abandon(struct waiter *w)
{
    struct httpc_op *op = (struct httpc_op *)w;
    httpc_abandon(&op->h);
    free(op->body);
    free(op);
}

static int
lhttpc_request(lua_State *L)
{
    const char *host = luaL_checkstring(L, 1);
    lua_Integer port = luaL_checkinteger(L, 2);
    const char *method = luaL_checkstring(L, 3);
    const char *path = luaL_checkstring(L, 4);
    size_t blen = 0;
    const char *body = luaL_optlstring(L, 5, "", &blen);
    lua_Integer timeout = luaL_optinteger(L, 6, 3000);
    lua_Integer max = luaL_optinteger(L, 7, 4 << 20);
    luaL_argcheck(L, port > 0 && port < 65536, 2, "bad port");
    luaL_argcheck(L, timeout > 0, 6, "must be > 0");
    luaL_argcheck(L, max > 0, 7, "must be > 0");
    luaL_argcheck(L, strpbrk(method, " \r\n") == NULL, 3, "bad method");
    luaL_argcheck(L, strpbrk(path, " \r\n") == NULL && path[0] == '/', 4, "bad path");
    struct host *hst = host_of(L);
    struct httpc_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return luaL_error(L, "out of memory");
    op->w.push = op_push;
    op->w.abandon = op_abandon;
    op->h.data = op;
    int rc = httpc_start(&op->h, &hst->r.loop, host, (int)port, method, path, body, blen,
                         (size_t)max, (uint64_t)timeout, op_done);
    if (rc != 0) {
        free(op);
        return lerr_pushstr(L, uv_strerror(rc));
    }
    return host_wait(L, &op->w);
}

int
luaopen_rmq_httpc(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "request", lhttpc_request },
        { NULL, NULL },
    };
    (void)host_of(L);
    luaL_newlib(L, fns);
    return 1;
}
