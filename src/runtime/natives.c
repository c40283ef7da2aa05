/*
 * runtime/natives: see natives.h.
 */
#include "runtime/natives.h"

#include <lauxlib.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/err.h"
#include "runtime/cmd.h"
#include "runtime/host.h"
#include "runtime/lconn.h"

static const char anchor_key = 'n';  /* registry: installed processors */

struct native_table {
    struct native_proc *by_code[NATIVE_MAX_CODE + NATIVE_HIGH_CODES];
};

/* The slot of a request code in by_code, or -1 (always Lua). */
static int
code_slot(int64_t code)
{
    if (code >= 0 && code < NATIVE_MAX_CODE)
        return (int)code;
    if (code >= NATIVE_HIGH_BASE && code < NATIVE_HIGH_BASE + NATIVE_HIGH_CODES)
        return NATIVE_MAX_CODE + (int)(code - NATIVE_HIGH_BASE);
    return -1;
}

void
native_table_free(struct native_table *t)
{
    free(t);
}

/* The one walk from (listener, code) to its entry in h's tables, for the
 * install and the lookup alike: the entry, or NULL when the listener or
 * the code is out of range, or the listener has no table yet (made here
 * when `make`; NULL with err_set() if that fails). */
static struct native_proc **
entry_of(struct host *h, int listener, int64_t code, bool make)
{
    int slot = code_slot(code);
    if (listener < 0 || listener >= HOST_MAX_LISTENERS || slot < 0)
        return NULL;
    if (h->natives[listener] == NULL && make) {
        h->natives[listener] = calloc(1, sizeof(*h->natives[listener]));
        if (h->natives[listener] == NULL)
            err_set("out of memory");
    }
    return h->natives[listener] != NULL ? &h->natives[listener]->by_code[slot] : NULL;
}

struct native_proc *
native_find(struct host *h, struct conn *c, int32_t code)
{
    struct native_proc **e = entry_of(h, c->listener, code, false);
    return e != NULL && !h->stopping ? *e : NULL;
}

void
native_req_init(struct native_req *r, struct host *h, struct conn *c, const struct rmq_cmd *cmd)
{
    *r = (struct native_req){
        .h = h, .c = c, .cmd = cmd, .start_ns = h->frame_ns,
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .frame = h->frame, .frame_len = h->frame_len,
        .metrics = h->metrics, .enc = &h->enc,
    };
}

bool
native_dispatch(struct host *h, struct conn *c, const struct rmq_cmd *cmd)
{
    if (cmd->flag & RMQ_RPC_RESPONSE)
        return false;
    struct native_proc *p = native_find(h, c, cmd->code);
    if (p == NULL)
        return false;
    struct native_req r;
    native_req_init(&r, h, c, cmd);
    return p->run(p, &r) == NATIVE_DONE;
}

/* {{{ The rmq.native module */

int
native_install(lua_State *L, struct host *h, int listener, int idx)
{
    if (listener < 0 || listener >= HOST_MAX_LISTENERS) {
        err_set("listener %d out of range", listener);
        return -1;
    }
    idx = lua_absindex(L, idx);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &anchor_key);
    }
    int anchors = lua_gettop(L);
    int rc = 0;
    lua_pushnil(L);
    while (rc == 0 && lua_next(L, idx) != 0) {
        int isnum;
        lua_Integer code = lua_tointegerx(L, -2, &isnum);
        struct native_proc *p = native_test(L, -1);
        if (!isnum || code_slot(code) < 0 || p == NULL) {
            err_set("natives[%s]: not a native processor for a code below %d or of the POP family",
                    luaL_tolstring(L, -2, NULL), NATIVE_MAX_CODE);
            lua_pop(L, 1);
            rc = -1;
        } else {
            struct native_proc **e = entry_of(h, listener, code, true);
            if (e == NULL) {
                rc = -1;   /* out of memory (listener and code are in range) */
            } else {
                *e = p;
                lua_pushvalue(L, -1);
                lua_rawsetp(L, anchors, p);   /* alive while installed */
            }
        }
        lua_pop(L, 1);
    }
    if (rc != 0)
        lua_pop(L, 1);   /* the key lua_next left */
    lua_settop(L, anchors - 1);
    return rc;
}

/* native.serve's and native.run's arguments (np, ctx, cmd: raises on a
 * wrong one) and their request, a run from Lua (no frame) coming from
 * `lua`; the processor, and into *gone whether nobody is left to answer
 * (the connection closed). */
static struct native_proc *
lua_request(lua_State *L, int lua, struct native_req *r, bool *gone)
{
    struct native_proc *p = native_test(L, 1);
    luaL_argcheck(L, p != NULL, 1, "not a native processor");
    struct lconn *lc = luaL_checkudata(L, 2, LCONN_TYPE);
    const struct rmq_cmd *cmd = luaL_checkudata(L, 3, LCMD_TYPE);
    struct host *h = host_of(L);
    *r = (struct native_req){
        .h = h, .c = lc->c, .cmd = cmd, .start_ns = clock_mono_ns(),
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0, .lua = lua,
        .metrics = h->metrics, .enc = &h->enc,
    };
    *gone = lc->c == NULL || lc->c->closed;
    return p;
}

static int
lnative_is(lua_State *L)
{
    lua_pushboolean(L, native_test(L, 1) != NULL);
    return 1;
}

static int
lnative_serve(lua_State *L)
{
    struct native_req r;
    bool gone;
    struct native_proc *p = lua_request(L, lua_toboolean(L, 4) ? NATIVE_LUA_FINAL : NATIVE_LUA_HOLD, &r, &gone);
    /* Nobody to answer: a closed conn, or a worker stopping. */
    lua_pushboolean(L, gone || r.h->stopping || p->run(p, &r) == NATIVE_DONE);
    return 1;
}

/* native.run(np, ctx, cmd) -> answered: a request its Lua entry got
 * (nativeProcessors = false, a draining worker) run in C as if it came
 * from its frame (NATIVE_LUA_NONE; a processor that holds it encodes one),
 * answered unless the processor hands it back (false). */
static int
lnative_run(lua_State *L)
{
    struct native_req r;
    bool gone;
    struct native_proc *p = lua_request(L, NATIVE_LUA_NONE, &r, &gone);
    /* A closed conn: nobody to answer. */
    lua_pushboolean(L, gone || p->run(p, &r) == NATIVE_DONE);
    return 1;
}

int
luaopen_rmq_native(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "is", lnative_is },
        { "serve", lnative_serve },
        { "run", lnative_run },
        { NULL, NULL },
    };
    native_register(L);
    luaL_newlib(L, fns);
    return 1;
}

/* }}} */
