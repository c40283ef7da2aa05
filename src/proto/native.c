/*
 * proto/native: see native.h.
 */
#include "proto/native.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* True when a run of adjacent records of s is long enough to go to the
 * socket by sendfile (pullZeroCopyMinBytes).  (store_slices_run may
 * split one where a file ends.) */
static bool
has_long_run(const struct store_slices *s)
{
    if (s->zero_copy_min <= 0 || s->n == 0 || s->bytes < (size_t)s->zero_copy_min)
        return false;
    /* Records of one file spread over more than twice their bytes
     * (interleaved queues, the common case) are copied without a look
     * at each: the pull path's cost stays what it was (hotpath.sh). */
    const uint8_t *first = s->iov[0].iov_base;
    const uint8_t *last = s->iov[s->n - 1].iov_base;
    if (s->npins == 1 && (size_t)(last + s->iov[s->n - 1].iov_len - first) > 2 * s->bytes)
        return false;
    for (int i = 0; i < s->n;) {
        size_t len = s->iov[i].iov_len;
        const uint8_t *end = (const uint8_t *)s->iov[i].iov_base + len;
        for (i++; i < s->n && s->iov[i].iov_base == end; i++) {
            len += s->iov[i].iov_len;
            end += s->iov[i].iov_len;
        }
        if (len >= (size_t)s->zero_copy_min)
            return true;
    }
    return false;
}

/* Queues records [from, to) of s as bytes, copied from the files. */
static int
queue_copy(struct conn *c, const struct store_slices *s, int from, int to)
{
    if (from >= to)
        return 0;
    size_t len = 0;
    for (int i = from; i < to; i++)
        len += s->iov[i].iov_len;
    uint8_t *dst = conn_out_reserve(c, len);
    if (dst == NULL)
        return conn_send_iov(c, NULL, 0, s->iov + from, to - from);
    store_slices_read_range(s, from, to, dst);
    conn_out_commit(c, len);
    return 0;
}

/* A reply whose records hold a long run (has_long_run): each run of
 * adjacent records of at least zero_copy_min bytes goes from the commit
 * log file to the socket by sendfile, behind the header and the runs
 * before it, with no copy in this process; shorter runs are copied as
 * before (measured on loopback: a sendfile per 16 KiB record costs more
 * CPU than a copy by preadv plus the socket write, one per 35 KiB run or
 * more costs less; docs/performance.md).
 * What the kernel does not take at once (a full socket buffer, a TLS
 * connection, a write in flight) is copied into the output, in order.
 * The kernel holds the pages it took, so the caller's pins may go as soon
 * as this returns. */
static int
reply_runs(struct conn *c, const struct buf *enc, const struct store_slices *s)
{
    int rc = conn_send(c, buf_head(enc), buf_len(enc), NULL, 0);
    bool direct = true;
    int copy_from = 0;
    for (int i = 0; rc == 0 && i < s->n;) {
        struct store_run run;
        store_slices_run(s, i, &run);
        i = run.to;
        if (!direct || run.fd < 0 || run.len < (size_t)s->zero_copy_min)
            continue;
        rc = queue_copy(c, s, copy_from, run.from);
        if (rc != 0)
            break;
        copy_from = run.from;
        ssize_t n = conn_sendfile(c, run.fd, run.off, run.len);
        if (n < 0) {
            direct = false;   /* this run and the rest are copied */
            continue;
        }
        copy_from = run.to;
        if ((size_t)n == run.len)
            continue;
        /* The kernel took part of the run: the rest is copied, and so is
         * every later run (the socket is full). */
        direct = false;
        size_t rest = run.len - (size_t)n;
        uint8_t *dst = conn_out_reserve(c, rest);
        const uint8_t *from = (const uint8_t *)s->iov[run.from].iov_base + n;
        if (dst == NULL) {
            rc = conn_send(c, from, rest, NULL, 0);
        } else {
            ssize_t got = pread(run.fd, dst, rest, (off_t)(run.off + n));
            if (got != (ssize_t)rest)
                memcpy(dst, from, rest);   /* the mapping has them (store_slices_read) */
            conn_out_commit(c, rest);
        }
    }
    if (rc == 0)
        rc = queue_copy(c, s, copy_from, s->n);
    if (rc != 0 && rc != -RMQ_ECLOSED && !c->closed)
        conn_close(c, "out of memory queuing a pull reply");   /* the stream would be cut */
    return rc;
}

/* Queues the frame whose header enc holds, then its body: bytes, or the
 * records of `slices` (NULL: none). */
static int
queue_reply(struct conn *c, struct buf *enc, const uint8_t *body, size_t blen,
            const struct store_slices *slices)
{
    int rc;
    uint8_t *dst;
    struct iovec v[CONN_SEND_NOW_MAX];
    int nv;
    if (slices != NULL && has_long_run(slices)) {
        rc = reply_runs(c, enc, slices);
    } else if (slices != NULL && slices->win != NULL && conn_can_send_now(c) &&
               (nv = store_slices_window_iov(slices, v, CONN_SEND_NOW_MAX)) > 0 &&
               (rc = conn_send_now(c, buf_head(enc), buf_len(enc), v, nv)) != -EAGAIN) {
        /* Records read through the window (other queues' records between
         * them): to the socket from the window, with no copy into the
         * output; the kernel copies them once. */
    } else if (slices != NULL &&
               (dst = conn_out_reserve(c, buf_len(enc) + slices->bytes)) != NULL) {
        /* The records go from the commit log straight into the output. */
        memcpy(dst, buf_head(enc), buf_len(enc));
        store_slices_read(slices, dst + buf_len(enc));
        conn_out_commit(c, buf_len(enc) + slices->bytes);
        rc = 0;
    } else {
        rc = slices != NULL
            ? conn_send_iov(c, buf_head(enc), buf_len(enc), slices->iov, slices->n)
            : conn_send(c, buf_head(enc), buf_len(enc), body, blen);
    }
    if (rc != 0 && rc != -RMQ_ECLOSED)
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
    return rc;
}

uint8_t *
native_reply_json_begin(struct native_req *r, size_t max, size_t body_len)
{
    struct conn *c = r->c;
    if (r->oneway || c->closed || r->cmd->serialize != RMQ_SER_JSON ||
        (c->detached && c->h->on_reply != NULL) || max > 0xFFFFFF ||
        (uint64_t)4 + max + body_len > INT32_MAX)   /* Java reads L as an int */
        return NULL;
    if (body_len == 0 && (r->direct = conn_out_reserve(c, 8 + max)) != NULL)
        return r->direct + 8;
    buf_reset(r->enc);
    if (buf_reserve(r->enc, 8 + max) != 0)
        return NULL;
    return buf_tail(r->enc) + 8;
}

int
native_reply_json_end(struct native_req *r, int32_t code, size_t hlen,
                      const struct store_slices *slices)
{
    if (r->metrics != NULL)
        metrics_rpc(r->metrics, r->cmd->code, code, clock_mono_ns() - r->start_ns);
    if (r->direct != NULL) {
        /* No body (begin saw body_len 0): framed where it was spelled. */
        uint8_t *d = r->direct;
        r->direct = NULL;
        be32_put(d, (uint32_t)(4 + hlen));
        be32_put(d + 4, ((uint32_t)RMQ_SER_JSON << 24) | (uint32_t)hlen);
        conn_out_commit(r->c, 8 + hlen);
        return 0;
    }
    struct buf *enc = r->enc;
    uint8_t *dst = buf_tail(enc);
    size_t body_len = slices != NULL ? slices->bytes : 0;
    be32_put(dst, (uint32_t)(4 + hlen + body_len));
    be32_put(dst + 4, ((uint32_t)RMQ_SER_JSON << 24) | (uint32_t)hlen);
    enc->end += 8 + hlen;
    return queue_reply(r->c, enc, NULL, 0, slices);
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
    if (rc != 0) {
        log_warn("cannot queue reply to %s: %s", c->peer, strerror(-rc));
        return rc;
    }
    return queue_reply(c, enc, body, blen, slices);
}

/* }}} */

/* }}} */
