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
#include "net/conn.h"
#include "store/access.h"

#define LNATIVE_TYPE "rmq.native"

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

void
native_register(lua_State *L)
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
    native_register(L);
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

/* {{{ Replies */

uint8_t *
native_reply_json_begin(struct native_req *r, size_t max)
{
    struct conn *c = r->c;
    if (r->oneway || c->closed || r->cmd->serialize != RMQ_SER_JSON ||
        (c->detached && c->h->on_reply != NULL))
        return NULL;
    buf_reset(r->enc);
    if (buf_reserve(r->enc, 8 + max) != 0)
        return NULL;
    return buf_tail(r->enc) + 8;
}

int
native_reply_json_end(struct native_req *r, int32_t code, size_t hlen)
{
    struct conn *c = r->c;
    if (r->metrics != NULL)
        metrics_rpc(r->metrics, r->cmd->code, code, clock_mono_ns() - r->start_ns);
    struct buf *enc = r->enc;
    uint8_t *dst = buf_tail(enc);
    be32_put(dst, (uint32_t)(4 + hlen));
    be32_put(dst + 4, ((uint32_t)RMQ_SER_JSON << 24) | (uint32_t)hlen);
    enc->end += 8 + hlen;
    int rc = conn_send(c, buf_head(enc), buf_len(enc), NULL, 0);
    if (rc != 0 && rc != -RMQ_ECLOSED)
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
    return rc;
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
    if (r->metrics != NULL)
        metrics_rpc(r->metrics, r->cmd->code, code, clock_mono_ns() - r->start_ns);
    struct buf *enc = r->enc;
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
            buf_reset(enc);
            for (int i = 0; i < slices->n; i++)
                if (buf_append(enc, slices->iov[i].iov_base, slices->iov[i].iov_len) != 0) {
                    log_warn("cannot hand a reply to %s: out of memory", c->peer);
                    return -ENOMEM;
                }
            out.body = buf_head(enc);
        }
        if (out.body_len == 0)
            out.body = NULL;
        c->h->on_reply(c, &out);
        return 0;
    }
    buf_reset(enc);
    int rc = rmq_cmd_encode(&out, enc);
    uint8_t *dst;
    if (rc == 0 && slices != NULL &&
        (dst = conn_out_reserve(c, buf_len(enc) + slices->bytes)) != NULL) {
        /* The records go from the commit log straight into the output. */
        memcpy(dst, buf_head(enc), buf_len(enc));
        store_slices_read(slices, dst + buf_len(enc));
        conn_out_commit(c, buf_len(enc) + slices->bytes);
    } else if (rc == 0) {
        rc = slices != NULL
            ? conn_send_iov(c, buf_head(enc), buf_len(enc), slices->iov, slices->n)
            : conn_send(c, buf_head(enc), buf_len(enc), body, blen);
    }
    if (rc != 0 && rc != -RMQ_ECLOSED)
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
    return rc;
}

/* }}} */

/* }}} */
