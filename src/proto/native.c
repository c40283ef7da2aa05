/*
 * proto/native: see native.h.
 */
#include "proto/native.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "runtime/host.h"
#include "proto/cmd.h"
#include "runtime/lconn.h"
#include "runtime/wait.h"
#include "store/access.h"

#define LNATIVE_TYPE "rmq.native"

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

/* {{{ Lua values */

struct native_ud {
    struct native_proc *p;
};

static int
native_gc(lua_State *L)
{
    struct native_ud *u = luaL_checkudata(L, 1, LNATIVE_TYPE);
    if (u->p != NULL) {
        struct native_proc *p = u->p;
        u->p = NULL;
        if (p->destroy != NULL)
            p->destroy(p);
    }
    return 0;
}

static int
native_tostring(lua_State *L)
{
    struct native_ud *u = luaL_checkudata(L, 1, LNATIVE_TYPE);
    lua_pushfstring(L, "rmq.native(%s)", u->p ? u->p->name : "freed");
    return 1;
}

static void
register_type(lua_State *L)
{
    if (luaL_newmetatable(L, LNATIVE_TYPE)) {
        lua_pushcfunction(L, native_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, native_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
}

void
native_push(lua_State *L, struct native_proc *p)
{
    struct native_ud *u = lua_newuserdatauv(L, sizeof(*u), 1);
    u->p = NULL;
    register_type(L);
    luaL_setmetatable(L, LNATIVE_TYPE);
    u->p = p;
}

struct native_proc *
native_test(lua_State *L, int idx)
{
    struct native_ud *u = luaL_testudata(L, idx, LNATIVE_TYPE);
    return u != NULL ? u->p : NULL;
}

/* }}} */

/* {{{ Dispatch and replies */

bool
native_dispatch(struct host *h, struct conn *c, const struct rmq_cmd *cmd)
{
    int slot = code_slot(cmd->code);
    if (c->listener < 0 || c->listener >= HOST_MAX_LISTENERS || slot < 0 ||
        (cmd->flag & RMQ_RPC_RESPONSE))
        return false;
    struct native_table *t = h->natives[c->listener];
    struct native_proc *p = t != NULL ? t->by_code[slot] : NULL;
    if (p == NULL || h->stopping)
        return false;
    struct native_req r = {
        .h = h, .c = c, .cmd = cmd, .start_ns = h->frame_ns,
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .frame = h->frame, .frame_len = h->frame_len,
    };
    return p->run(p, &r) == NATIVE_DONE;
}

int
native_reply(struct native_req *r, int32_t code, const char *remark,
             size_t rlen, const struct rmq_field *ext, uint32_t next,
             const uint8_t *body, size_t blen,
             const struct store_slices *slices)
{
    struct conn *c = r->c;
    if (r->oneway || c->closed)
        return 0;
    struct host *h = r->h;
    if (h->metrics != NULL)
        metrics_rpc(h->metrics, r->cmd->code, code, clock_mono_ns() - r->start_ns);
    struct rmq_cmd out;
    memset(&out, 0, sizeof(out));
    out.code = code;
    out.language = RMQ_LANG_JAVA;
    out.version = RMQ_VERSION_409;
    out.opaque = r->cmd->opaque;
    out.flag = RMQ_RPC_RESPONSE;
    out.serialize = r->cmd->serialize;
    if (remark != NULL) {
        out.remark.p = remark;
        out.remark.len = (uint32_t)rlen;
    }
    out.ext = (struct rmq_field *)ext;
    out.ext_count = next;
    out.body_len = (uint32_t)(slices != NULL ? slices->bytes : blen);
    if (c->detached && c->h->on_reply != NULL) {
        /* An in-process owner (the gRPC service): the fields as they
         * are, no frame to encode here and decode there.  Records are
         * gathered into one body (the copy a socket's output makes). */
        out.body = body;
        if (slices != NULL) {
            buf_reset(&h->enc);
            for (int i = 0; i < slices->n; i++)
                if (buf_append(&h->enc, slices->iov[i].iov_base, slices->iov[i].iov_len) != 0) {
                    log_warn("cannot hand a reply to %s: out of memory", c->peer);
                    return -ENOMEM;
                }
            out.body = buf_head(&h->enc);
        }
        if (out.body_len == 0)
            out.body = NULL;
        c->h->on_reply(c, &out);
        return 0;
    }
    buf_reset(&h->enc);
    int rc = rmq_cmd_encode(&out, &h->enc);
    uint8_t *dst;
    if (rc == 0 && slices != NULL &&
        (dst = conn_out_reserve(c, buf_len(&h->enc) + slices->bytes)) != NULL) {
        /* The records go from the commit log straight into the output. */
        memcpy(dst, buf_head(&h->enc), buf_len(&h->enc));
        store_slices_read(slices, dst + buf_len(&h->enc));
        conn_out_commit(c, buf_len(&h->enc) + slices->bytes);
    } else if (rc == 0) {
        rc = slices != NULL
            ? conn_send_iov(c, buf_head(&h->enc), buf_len(&h->enc), slices->iov, slices->n)
            : conn_send(c, buf_head(&h->enc), buf_len(&h->enc), body, blen);
    }
    if (rc != 0 && rc != -RMQ_ECLOSED)
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
    return rc;
}

/* }}} */

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
            if (h->natives[listener] == NULL) {
                h->natives[listener] = calloc(1, sizeof(*h->natives[listener]));
                if (h->natives[listener] == NULL) {
                    err_set("out of memory");
                    rc = -1;
                }
            }
            if (rc == 0) {
                h->natives[listener]->by_code[code_slot(code)] = p;
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

static int
lnative_is(lua_State *L)
{
    lua_pushboolean(L, native_test(L, 1) != NULL);
    return 1;
}

static int
lnative_serve(lua_State *L)
{
    struct native_proc *p = native_test(L, 1);
    luaL_argcheck(L, p != NULL, 1, "not a native processor");
    struct lconn *lc = luaL_checkudata(L, 2, LCONN_TYPE);
    const struct rmq_cmd *cmd = luaL_checkudata(L, 3, LCMD_TYPE);
    struct host *h = host_of(L);
    if (lc->c == NULL || lc->c->closed || h->stopping) {
        lua_pushboolean(L, true);   /* nobody to answer */
        return 1;
    }
    struct native_req r = {
        .h = h, .c = lc->c, .cmd = cmd, .start_ns = clock_mono_ns(),
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .lua = lua_toboolean(L, 4) ? NATIVE_LUA_FINAL : NATIVE_LUA_HOLD,
    };
    lua_pushboolean(L, p->run(p, &r) == NATIVE_DONE);
    return 1;
}

/* native.run(np, ctx, cmd) -> answered: a request its Lua entry got
 * (nativeProcessors = false, a draining worker) run in C as if it came
 * from its frame (NATIVE_LUA_NONE; a processor that holds it encodes one),
 * answered unless the processor hands it back (false). */
static int
lnative_run(lua_State *L)
{
    struct native_proc *p = native_test(L, 1);
    luaL_argcheck(L, p != NULL, 1, "not a native processor");
    struct lconn *lc = luaL_checkudata(L, 2, LCONN_TYPE);
    const struct rmq_cmd *cmd = luaL_checkudata(L, 3, LCMD_TYPE);
    struct host *h = host_of(L);
    struct native_req r = {
        .h = h, .c = lc->c, .cmd = cmd, .start_ns = clock_mono_ns(),
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0, .lua = NATIVE_LUA_NONE,
    };
    /* A closed conn: nobody to answer. */
    lua_pushboolean(L, lc->c == NULL || lc->c->closed || p->run(p, &r) == NATIVE_DONE);
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
    register_type(L);
    luaL_newlib(L, fns);
    return 1;
}

/* }}} */
