/*
 * l_metrics: the rmq.metrics module, for the Lua handlers that store or
 * return messages (the same counts as the native processors, so the
 * figures do not depend on nativeProcessors).  Each call records into
 * the calling worker's shard; with metrics off (or outside a worker) it
 * does nothing.
 *
 *   metrics.messages_in(topic, msgs, bytes [, body_bytes])   body_bytes
 *       (the bodies' total, for rocketmq_message_size) defaults to bytes
 *   metrics.messages_out(topic, group, msgs, bytes [, qid, next])   next:
 *       the reply's nextBeginOffset, the group's pull offset of the queue
 *   metrics.send_to_dlq(topic, group, msgs)   rocketmq_send_to_dlq_messages_total
 *   metrics.watch_consumer_lag(store_handle | nil)   main thread: the
 *       consumer lag families, the store's gauges and the connections
 *       at each scrape (broker/lag_metrics.h, broker/store_metrics.h)
 *
 * MT: a worker's state records into that worker's shard only.
 */
#include <lauxlib.h>

#include "broker/lag_metrics.h"
#include "broker/store_metrics.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "lua/l_modules.h"
#include "runtime/host.h"

static uint64_t
check_count(lua_State *L, int idx)
{
    lua_Integer n = luaL_checkinteger(L, idx);
    luaL_argcheck(L, n >= 0, idx, "must be >= 0");
    return (uint64_t)n;
}

static int
lmetrics_in(lua_State *L)
{
    size_t tlen;
    const char *topic = luaL_checklstring(L, 1, &tlen);
    uint64_t msgs = check_count(L, 2), bytes = check_count(L, 3);
    uint64_t body = lua_isnoneornil(L, 4) ? bytes : check_count(L, 4);
    struct host *h = host_of(L);
    if (h->metrics != NULL)
        metrics_in(h->metrics, topic, tlen, msgs, bytes, body, -1);
    return 0;
}

static int
lmetrics_dlq(lua_State *L)
{
    size_t tlen, glen;
    const char *topic = luaL_checklstring(L, 1, &tlen);
    const char *group = luaL_checklstring(L, 2, &glen);
    uint64_t msgs = check_count(L, 3);
    struct host *h = host_of(L);
    if (h->metrics != NULL)
        metrics_dlq(h->metrics, topic, tlen, group, glen, msgs);
    return 0;
}

static int
lmetrics_out(lua_State *L)
{
    size_t tlen, glen;
    const char *topic = luaL_checklstring(L, 1, &tlen);
    const char *group = luaL_checklstring(L, 2, &glen);
    uint64_t msgs = check_count(L, 3), bytes = check_count(L, 4);
    lua_Integer qid = luaL_optinteger(L, 5, -1), next = luaL_optinteger(L, 6, -1);
    luaL_argcheck(L, qid >= -1 && qid <= INT32_MAX, 5, "out of range");
    struct host *h = host_of(L);
    if (h->metrics != NULL)
        metrics_out(h->metrics, topic, tlen, group, glen, msgs, bytes, (int32_t)qid, next,
                    clock_mono_ns());
    return 0;
}

static int
lmetrics_watch_lag(lua_State *L)
{
    struct store *st = NULL;
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
        st = lua_touserdata(L, 1);
    }
    struct host *h = host_of(L);
    lag_metrics_watch(h->registry, st);   /* metrics off: nothing */
    store_metrics_watch(h->registry, st);
    return 0;
}

/* metrics.replica(name, value): a controller-mode gauge ("role",
 * "epoch", "sss", "active", "elections"), on the main thread's registry
 * or the calling worker's; nothing with metrics off. */
static int
lmetrics_replica(lua_State *L)
{
    static const char *const names[] = { "role", "epoch", "sss", "active", "elections", "fenced", NULL };
    int which = luaL_checkoption(L, 1, NULL, names);
    lua_Integer v = luaL_checkinteger(L, 2);
    struct host *h = host_of(L);
    struct metrics *m = h->registry != NULL ? h->registry : metrics_shard_registry(h->metrics);
    metrics_replica_set(m, which, (int64_t)v);
    return 0;
}

int
luaopen_rmq_metrics(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "messages_in", lmetrics_in },
        { "messages_out", lmetrics_out },
        { "send_to_dlq", lmetrics_dlq },
        { "replica", lmetrics_replica },
        { "watch_consumer_lag", lmetrics_watch_lag },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
