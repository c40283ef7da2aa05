/*
 * l_bench: the rmq.bench module: tight loops over the real code paths,
 * for the scripts in scripts/bench/.  Each returns nanoseconds per operation.
 *
 *   bench.decode(frame, n)         rmq_cmd_decode of one frame, n times
 *   bench.encode(frame, n)         decode once, rmq_cmd_encode n times
 *   bench.dispatch(frame, n, fn)   the server's request path without the
 *       network: frame -> command userdata -> task -> fn(ctx, cmd) ->
 *       reply encoded into the connection's output, n times
 *   bench.produce(opts) -> summary  the load generator of `rmq bench
 *       produce` (see tools/loadgen.h); opts: targets = {{addr=,
 *       brokerName=, queueId=}, ...}, topic, group, size, concurrency,
 *       connections (per broker), seconds, timeout (ms), serialize,
 *       tick = function(sec) called every second with that second's
 *       summary, credentials = {accessKey=, secretKey=[, securityToken=]}
 *       (every request signed as ACL 1.0 clients sign), uniq_key,
 *       rate (sends a second at most), grpc = true (gRPC SendMessage
 *       to the targets' addr, a gRPC endpoint), headers = {name = value}
 *       (gRPC: sent with every call; a value a string or a number).  A summary:
 *       {elapsed, ok, failed, busy, tps, avg_ms, p50_ms, p99_ms, p999_ms,
 *       max_ms, cpu_s (produce's: the generator's own CPU over the run, user
 *       + system: near elapsed, the generator and not the server set the
 *       pace), sleeps, preempted (its thread's voluntary and involuntary
 *       context switches over the run)}.
 *   bench.requests(opts) -> summary  redis-benchmark style closed loop
 *       (tools/reqload.h): opts: addr, frame (a complete request),
 *       connections (64), seconds (10), warmup_ms (500), credentials
 *       (the frame signed once, as ACL 1.0 clients sign).  A summary:
 *       {seconds, ok, errors, failed_connects, rps, avg_us, p50_us,
 *       p99_us, p999_us, max_us}.
 *   bench.tally(reply, now_ms) -> n, sum_b2c, sum_s2c, max_b2c, max_s2c
 *       `rmq bench consume`'s per-record look at a PULL reply's body (its
 *       records' born and store timestamps against now_ms)
 */
#include <lauxlib.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/err.h"
#include "lua/l_err.h"
#include "lua/l_credentials.h"
#include "proto/header.h"   /* LCMD_TYPE */
#include "runtime/host.h"
#include "runtime/lconn.h"
#include "tools/l_tools.h"
#include "tools/loadgen.h"
#include "tools/reqload.h"

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

static void
push_summary(lua_State *L, const struct lg_stats *st, double seconds)
{
    const struct lg_hist *hi = &st->hist;
    lua_createtable(L, 0, 9);
    lua_pushnumber(L, seconds);
    lua_setfield(L, -2, "elapsed");
    lua_pushinteger(L, (lua_Integer)st->ok);
    lua_setfield(L, -2, "ok");
    lua_pushinteger(L, (lua_Integer)st->failed);
    lua_setfield(L, -2, "failed");
    lua_pushinteger(L, (lua_Integer)st->busy);
    lua_setfield(L, -2, "busy");
    lua_pushnumber(L, seconds > 0 ? (double)st->ok / seconds : 0);
    lua_setfield(L, -2, "tps");
    lua_pushnumber(L, hi->count ? (double)hi->sum_us / (double)hi->count / 1000.0 : 0);
    lua_setfield(L, -2, "avg_ms");
    lua_pushnumber(L, (double)lg_hist_quantile(hi, 0.5) / 1000.0);
    lua_setfield(L, -2, "p50_ms");
    lua_pushnumber(L, (double)lg_hist_quantile(hi, 0.99) / 1000.0);
    lua_setfield(L, -2, "p99_ms");
    lua_pushnumber(L, (double)lg_hist_quantile(hi, 0.999) / 1000.0);
    lua_setfield(L, -2, "p999_ms");
    lua_pushnumber(L, (double)hi->max_us / 1000.0);
    lua_setfield(L, -2, "max_ms");
}

struct tick_ctx {
    lua_State *L;
    int fn;                    /* stack index of the tick function, or 0 */
    double last;
};

static void
produce_tick(void *arg, double elapsed, const struct lg_stats *sec)
{
    struct tick_ctx *tc = arg;
    double span = elapsed - tc->last;
    tc->last = elapsed;
    if (tc->fn == 0)
        return;
    lua_State *L = tc->L;
    lua_pushvalue(L, tc->fn);
    push_summary(L, sec, span);
    lua_pushnumber(L, elapsed);
    lua_setfield(L, -2, "at");
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        fprintf(stderr, "bench tick: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

static const char *
opt_str(lua_State *L, const char *k, const char *dflt)
{
    lua_getfield(L, 1, k);
    const char *s = lua_isnil(L, -1) ? dflt : luaL_checkstring(L, -1);
    lua_pop(L, 1);  /* the string stays referenced by the options table */
    return s;
}

static lua_Number
opt_num(lua_State *L, const char *k, lua_Number dflt)
{
    lua_getfield(L, 1, k);
    lua_Number v = lua_isnil(L, -1) ? dflt : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int
lbench_produce(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct host *h = host_of(L);
    struct loadgen_opts o;
    memset(&o, 0, sizeof(o));
    o.topic = opt_str(L, "topic", "BenchmarkTest");
    o.group = opt_str(L, "group", "benchmark_producer");
    o.body_size = (size_t)opt_num(L, "size", 1024);
    o.concurrency = (int)opt_num(L, "concurrency", 64);
    o.connections_per_broker = (int)opt_num(L, "connections", 4);
    o.seconds = opt_num(L, "seconds", 10);
    o.timeout_ms = (uint64_t)opt_num(L, "timeout", 3000);
    o.binary_header = strcmp(opt_str(L, "serialize", "JSON"), "ROCKETMQ") == 0;
    lua_getfield(L, 1, "uniq_key");
    o.uniq_key = lua_toboolean(L, -1);
    lua_getfield(L, 1, "grpc");
    o.grpc = lua_toboolean(L, -1);
    lua_pop(L, 2);
    o.rate = opt_num(L, "rate", 0);
    luaL_argcheck(L, o.rate >= 0, 1, "rate must be >= 0");
    if (lua_getfield(L, 1, "headers") == LUA_TTABLE) {
        /* The names stay referenced by the headers table; a value given
         * as a number is a string made here (luaL_checkstring converts
         * the stack slot, not the table's value), kept in the userdata's
         * table for as long as the run: popped, it was garbage and its
         * bytes could be reused under the sends. */
        struct gclient_header *hs = lua_newuserdatauv(L, 32 * sizeof(*hs), 1);
        lua_createtable(L, 0, 0);
        lua_setiuservalue(L, -2, 1);
        lua_getiuservalue(L, -1, 1);   /* the keep table */
        lua_pushnil(L);
        while (lua_next(L, -4) != 0) {
            luaL_argcheck(L, o.grpc_nheaders < 32, 1, "at most 32 headers");
            luaL_argcheck(L, lua_type(L, -2) == LUA_TSTRING, 1, "header names must be strings");
            hs[o.grpc_nheaders].name = lua_tostring(L, -2);
            luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER, 1,
                          "header values must be strings or numbers");
            lua_pushvalue(L, -1);
            hs[o.grpc_nheaders].value = lua_tostring(L, -1);   /* the copy becomes a string */
            lua_rawseti(L, -4, o.grpc_nheaders + 1);              /* kept */
            o.grpc_nheaders++;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);                 /* the keep table (the userdata holds it) */
        o.grpc_headers = hs;
        lua_rotate(L, -2, 1);   /* the userdata below the table: kept */
    } else if (!lua_isnil(L, -1)) {
        return luaL_argerror(L, 1, "headers must be a table");
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "credentials") == LUA_TTABLE) {
        /* The strings stay referenced by the credentials table. */
        lua_getfield(L, -1, "accessKey");
        lua_getfield(L, -2, "secretKey");
        lua_getfield(L, -3, "securityToken");
        o.access_key = luaL_checkstring(L, -3);
        o.secret_key = luaL_checkstring(L, -2);
        o.security_token = luaL_optstring(L, -1, NULL);
        lua_pop(L, 3);
    } else if (!lua_isnil(L, -1)) {
        return luaL_argerror(L, 1, "credentials must be a table");
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "targets");
    luaL_checktype(L, -1, LUA_TTABLE);
    int n = (int)luaL_len(L, -1);
    luaL_argcheck(L, n > 0, 1, "targets is empty");
    struct lg_target *t = lua_newuserdatauv(L, sizeof(*t) * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -2, i + 1);
        lua_getfield(L, -1, "addr");
        lua_getfield(L, -2, "brokerName");
        lua_getfield(L, -3, "queueId");
        snprintf(t[i].addr, sizeof(t[i].addr), "%s", luaL_checkstring(L, -3));
        snprintf(t[i].broker_name, sizeof(t[i].broker_name), "%s",
                 luaL_optstring(L, -2, "broker"));
        t[i].queue_id = (int)luaL_optinteger(L, -1, 0);
        lua_pop(L, 4);
    }
    o.targets = t;
    o.ntargets = n;
    struct tick_ctx tc = { L, 0, 0 };
    lua_getfield(L, 1, "tick");
    if (lua_isfunction(L, -1))
        tc.fn = lua_gettop(L);
    o.tick = produce_tick;
    o.arg = &tc;
    struct lg_stats *total = lua_newuserdatauv(L, sizeof(*total), 0);
    struct rusage ru0, ru1;
    int have_ru = getrusage(RUSAGE_THREAD, &ru0) == 0;
    int64_t t0 = clock_mono_ns();
    int rc = loadgen_run(&h->r, &o, total);
    double secs = (double)(clock_mono_ns() - t0) / 1e9;
    if (rc != 0)
        return lerr_push(L);
    push_summary(L, total, o.seconds < secs ? o.seconds : secs);
    /* The generator runs on this thread: its CPU, not the process's. */
    if (have_ru && getrusage(RUSAGE_THREAD, &ru1) == 0) {
        double us = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1e6 +
                    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
                    (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e6 +
                    (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
        lua_pushnumber(L, us / 1e6);
        lua_setfield(L, -2, "cpu_s");
        /* Its sleeps (waits for replies) and preemptions: how the
         * generator and a server on the same cores take turns
         * (scripts/bench/ceiling.sh --threads). */
        lua_pushinteger(L, (lua_Integer)(ru1.ru_nvcsw - ru0.ru_nvcsw));
        lua_setfield(L, -2, "sleeps");
        lua_pushinteger(L, (lua_Integer)(ru1.ru_nivcsw - ru0.ru_nivcsw));
        lua_setfield(L, -2, "preempted");
    }
    return 1;
}

/* With opts.credentials, the frame decoded, signed and encoded again
 * (pushed as a string, *frame and *len pointing at it): the same bytes
 * are then sent every time, as reqload does. */
static void
sign_frame(lua_State *L, const uint8_t **frame, size_t *len)
{
    if (lua_getfield(L, 1, "credentials") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    int creds = lcred_find(L, -1);
    if (creds < 0)
        luaL_error(L, "bench.requests: %s", err_msg());
    luaL_argcheck(L, *len >= 8, 1, "frame: not a frame");
    size_t cap = rmq_cmd_arena_size(be32_get(*frame + 4) & 0xFFFFFF);
    struct rmq_arena a = { lua_newuserdatauv(L, cap, 0), cap, 0 };
    struct rmq_cmd cmd;
    if (rmq_cmd_decode(&cmd, *frame, *len, &a) != 0)
        luaL_error(L, "bench.requests: frame: %s", err_msg());
    struct rmq_field *f = lua_newuserdatauv(
        L, ((size_t)cmd.ext_count + LCRED_EXTRA_FIELDS) * sizeof(*f), 0);
    if (cmd.ext_count > 0)
        memcpy(f, cmd.ext, cmd.ext_count * sizeof(*f));
    cmd.ext = f;
    if (lcred_sign(L, creds, &cmd) != 0)
        luaL_error(L, "bench.requests: %s", err_msg());
    struct buf b;
    buf_init(&b);
    if (rmq_cmd_encode(&cmd, &b) != 0 ||
        (cmd.body_len > 0 && buf_append(&b, cmd.body, cmd.body_len) != 0)) {
        buf_free(&b);
        luaL_error(L, "bench.requests: cannot encode the signed frame");
    }
    lua_pushlstring(L, (const char *)buf_head(&b), buf_len(&b));
    buf_free(&b);
    *frame = (const uint8_t *)lua_tolstring(L, -1, len);
}

static int
lbench_requests(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *addr = opt_str(L, "addr", NULL);
    luaL_argcheck(L, addr != NULL, 1, "addr is missing");
    lua_getfield(L, 1, "frame");
    size_t len;
    const uint8_t *frame = (const uint8_t *)luaL_checklstring(L, -1, &len);
    int conns = (int)opt_num(L, "connections", 64);
    double seconds = opt_num(L, "seconds", 10);
    double warmup = opt_num(L, "warmup_ms", 500);
    luaL_argcheck(L, conns > 0 && conns <= 10000, 1, "connections must be 1..10000");
    luaL_argcheck(L, seconds > 0, 1, "seconds must be > 0");
    sign_frame(L, &frame, &len);
    /* In a userdata: collected even if a push below raises. */
    struct reqload_result *res = lua_newuserdatauv(L, sizeof(*res), 0);
    if (reqload_run(addr, frame, len, conns, seconds, warmup, res) != 0)
        return lerr_push(L);
    lua_createtable(L, 0, 10);
    lua_pushnumber(L, res->seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, (lua_Integer)res->ok);
    lua_setfield(L, -2, "ok");
    lua_pushinteger(L, (lua_Integer)res->errors);
    lua_setfield(L, -2, "errors");
    lua_pushinteger(L, res->failed_connects);
    lua_setfield(L, -2, "failed_connects");
    lua_pushnumber(L, res->seconds > 0 ? (double)res->ok / res->seconds : 0);
    lua_setfield(L, -2, "rps");
    lua_pushnumber(L, res->hist.count ? (double)res->hist.sum_us / (double)res->hist.count : 0);
    lua_setfield(L, -2, "avg_us");
    lua_pushinteger(L, (lua_Integer)lg_hist_quantile(&res->hist, 0.5));
    lua_setfield(L, -2, "p50_us");
    lua_pushinteger(L, (lua_Integer)lg_hist_quantile(&res->hist, 0.99));
    lua_setfield(L, -2, "p99_us");
    lua_pushinteger(L, (lua_Integer)lg_hist_quantile(&res->hist, 0.999));
    lua_setfield(L, -2, "p999_us");
    lua_pushinteger(L, (lua_Integer)res->hist.max_us);
    lua_setfield(L, -2, "max_us");
    return 1;
}

static int64_t
be_i64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* bench.tally(reply, now_ms) -> n, sum_b2c, sum_s2c, max_b2c, max_s2c:
 * `rmq bench consume`'s look at a PULL body's records (their born and
 * store timestamps against now_ms), in C: at a million records a second
 * the consumer's own loop was its ceiling.  Stops at the first record
 * that does not fit. */
static int
lbench_tally(lua_State *L)
{
    /* The reply itself: its body is read where it is, no string made
     * (a 32-record pull is 33 KiB of garbage a call otherwise). */
    const struct rmq_cmd *rep = luaL_checkudata(L, 1, LCMD_TYPE);
    const uint8_t *b = rep->body;
    size_t len = rep->body != NULL ? rep->body_len : 0;
    lua_Integer now = luaL_checkinteger(L, 2);
    lua_Integer n = 0, sb = 0, ss = 0, mb = 0, ms = 0;
    size_t at = 0;
    while (len - at > 64) {
        uint32_t size = (uint32_t)b[at] << 24 | (uint32_t)b[at + 1] << 16 |
                        (uint32_t)b[at + 2] << 8 | b[at + 3];
        uint8_t sysflag = b[at + 39];
        size_t store_at = at + 48 + ((sysflag & 0x10) != 0 ? 20 : 8);
        if (size == 0 || size > len - at || store_at + 8 > len)
            break;
        lua_Integer b2c = now - (lua_Integer)be_i64(b + at + 40);
        lua_Integer s2c = now - (lua_Integer)be_i64(b + store_at);
        n++;
        sb += b2c;
        ss += s2c;
        if (b2c > mb)
            mb = b2c;
        if (s2c > ms)
            ms = s2c;
        at += size;
    }
    lua_pushinteger(L, n);
    lua_pushinteger(L, sb);
    lua_pushinteger(L, ss);
    lua_pushinteger(L, mb);
    lua_pushinteger(L, ms);
    return 5;
}

int
luaopen_rmq_bench(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "decode", lbench_decode },
        { "encode", lbench_encode },
        { "dispatch", lbench_dispatch },
        { "produce", lbench_produce },
        { "requests", lbench_requests },
        { "tally", lbench_tally },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
