/*
 * l_bench: the rmq.bench module: tight loops over the real code paths,
 * for the scripts in scripts/bench/.  Each returns nanoseconds per operation.
 *
 *   bench.decode(frame, n)         rmq_cmd_decode of one frame, n times
 *   bench.encode(frame, n)         decode once, rmq_cmd_encode n times
 *   bench.dispatch(frame, n, fn)   the server's request path without the
 *       network: frame -> command userdata -> task -> fn(ctx, cmd) ->
 *       reply encoded into the connection's output, n times
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/err.h"
#include "lua/l_conn.h"
#include "lua/l_host.h"
#include "lua/l_modules.h"

static int
lbench_decode(lua_State *L)
{
    size_t len;
    const uint8_t *f = (const uint8_t *)luaL_checklstring(L, 1, &len);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, len >= 8, 1, "not a frame");
    size_t cap = rmq_cmd_arena_size(be32_get(f + 4) & 0xFFFFFF);
    uint8_t *mem = lua_newuserdatauv(L, cap, 0);
    struct rmq_cmd cmd;
    int64_t t0 = clock_mono_ns();
    for (lua_Integer i = 0; i < n; i++) {
        struct rmq_arena a = { mem, cap, 0 };
        if (rmq_cmd_decode(&cmd, f, len, &a) != 0)
            return luaL_error(L, "decode: %s", err_msg());
    }
    int64_t t1 = clock_mono_ns();
    lua_pushnumber(L, (double)(t1 - t0) / (double)n);
    return 1;
}

static int
lbench_encode(lua_State *L)
{
    size_t len;
    const uint8_t *f = (const uint8_t *)luaL_checklstring(L, 1, &len);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, len >= 8, 1, "not a frame");
    size_t cap = rmq_cmd_arena_size(be32_get(f + 4) & 0xFFFFFF);
    uint8_t *mem = lua_newuserdatauv(L, cap, 0);
    struct rmq_cmd cmd;
    struct rmq_arena a = { mem, cap, 0 };
    if (rmq_cmd_decode(&cmd, f, len, &a) != 0)
        return luaL_error(L, "decode: %s", err_msg());
    struct buf out;
    buf_init(&out);
    int64_t t0 = clock_mono_ns();
    for (lua_Integer i = 0; i < n; i++) {
        buf_reset(&out);
        if (rmq_cmd_encode(&cmd, &out) != 0) {
            buf_free(&out);
            return luaL_error(L, "encode failed");
        }
    }
    int64_t t1 = clock_mono_ns();
    buf_free(&out);
    lua_pushnumber(L, (double)(t1 - t0) / (double)n);
    return 1;
}

static int
lbench_dispatch(lua_State *L)
{
    size_t len;
    const uint8_t *f = (const uint8_t *)luaL_checklstring(L, 1, &len);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    struct host *h = host_of(L);
    struct conn *c = conn_new_detached(&h->r, &host_server_handler, h, 0);
    if (c == NULL)
        return luaL_error(L, "%s", err_msg());
    lconn_wrap(L, c, LUA_NOREF);
    int saved = h->dispatch_refs[0];
    lua_pushvalue(L, 3);
    h->dispatch_refs[0] = luaL_ref(L, LUA_REGISTRYINDEX);
    size_t bytes = 0;
    int64_t t0 = clock_mono_ns();
    for (lua_Integer i = 0; i < n; i++) {
        host_server_handler.on_frame(c, f, len);
        bytes += buf_len(&c->out);
        buf_reset(&c->out);
    }
    int64_t t1 = clock_mono_ns();
    luaL_unref(L, LUA_REGISTRYINDEX, h->dispatch_refs[0]);
    h->dispatch_refs[0] = saved;
    conn_close(c, "bench done");
    lua_pushnumber(L, (double)(t1 - t0) / (double)n);
    lua_pushinteger(L, (lua_Integer)(bytes / (size_t)(n > 0 ? n : 1)));
    return 2;
}

int
luaopen_rmq_bench(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "decode", lbench_decode },
        { "encode", lbench_encode },
        { "dispatch", lbench_dispatch },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
