/*
 * l_core: the rmq.core module: logging into the server's log, clocks,
 * CRC32 and zlib as RocketMQ uses them, and facts about the process.
 *
 *   core.log(level, msg)      level: "debug"|"info"|"warn"|"error"
 *   core.log_enabled(level) -> bool
 *   core.log_stats() -> {queuedBytes=, writtenBytes=, droppedLines=,
 *                        bufferBytes=}   (core/log.h: the ring's counts)
 *   core.now_ms()             wall clock, ms since the epoch
 *   core.mono_ms()            monotonic ms (float, sub-ms precision)
 *   core.crc32(s [, init])    zlib CRC32 (unmasked; RocketMQ's UtilAll.crc32
 *                             is this & 0x7FFFFFFF)
 *   core.inflate(s [, max]) -> s | nil, err    zlib stream
 *   core.deflate(s [, level]) -> s            zlib stream
 *   core.version, core.cpu_count(), core.pid(), core.hostname()
 *   core.ipv4_addresses() -> {"10.0.0.5", ...}  non-loopback IPv4 addresses
 *                             of this host (brokerIP1's default)
 *   core.total_memory() -> bytes of physical memory
 *   core.memory_budget() -> {used=, requests=, output=, console=, metrics=,
 *                             peerMax=, peers=, limit=, perPeerLimit=,
 *                             perConnectionLimit=, refusedTotal=, refusedPeer=,
 *                             refusedConnection=}   (core/membudget.h, bytes)
 *   core.memory_budget_add(kind, delta)   kind "console" | "metrics": an
 *                             unattributed figure moves by delta bytes
 *   core.memory_budget_over() -> bool    the total is at its limit
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <unistd.h>
#include <uv.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/version.h"
#include "lua/l_modules.h"

static int
lcore_log(lua_State *L)
{
    const char *lv = luaL_checkstring(L, 1);
    int level = log_level_parse(lv);
    luaL_argcheck(L, level >= 0, 1, "unknown log level");
    if (!log_enabled(level))
        return 0;
    const char *msg = luaL_tolstring(L, 2, NULL);
    log_write(level, "%s", msg);
    return 0;
}

/* core.log_stats() -> {queuedBytes=, writtenBytes=, droppedLines=,
 * bufferBytes=} (core/log.h). */
static int
lcore_log_stats(lua_State *L)
{
    struct log_stats st;
    log_stats(&st);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)st.queued_bytes);
    lua_setfield(L, -2, "queuedBytes");
    lua_pushinteger(L, (lua_Integer)st.written_bytes);
    lua_setfield(L, -2, "writtenBytes");
    lua_pushinteger(L, (lua_Integer)st.dropped_lines);
    lua_setfield(L, -2, "droppedLines");
    lua_pushinteger(L, (lua_Integer)st.ring_bytes);
    lua_setfield(L, -2, "bufferBytes");
    return 1;
}

static int
lcore_log_enabled(lua_State *L)
{
    int level = log_level_parse(luaL_checkstring(L, 1));
    luaL_argcheck(L, level >= 0, 1, "unknown log level");
    lua_pushboolean(L, log_enabled(level));
    return 1;
}

static int
lcore_now_ms(lua_State *L)
{
    lua_pushinteger(L, clock_wall_ms());
    return 1;
}

static int
lcore_mono_ms(lua_State *L)
{
    lua_pushnumber(L, (double)clock_mono_ns() / 1e6);
    return 1;
}

static int
lcore_crc32(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    uLong crc = (uLong)luaL_optinteger(L, 2, 0);
    /* zlib takes uInt lengths: feed large strings in pieces. */
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, (const Bytef *)s, chunk);
        s += chunk;
        n -= chunk;
    }
    lua_pushinteger(L, (lua_Integer)crc);
    return 1;
}

static int
lcore_inflate(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_Integer max = luaL_optinteger(L, 2, 64 * 1024 * 1024);
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit(&z) != Z_OK)
        return luaL_error(L, "inflateInit failed");
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    z.next_in = (Bytef *)(uintptr_t)s;
    z.avail_in = (uInt)n;
    int rc;
    size_t total = 0;
    do {
        char *out = luaL_prepbuffsize(&b, 16384);
        z.next_out = (Bytef *)out;
        z.avail_out = 16384;
        rc = inflate(&z, Z_NO_FLUSH);
        size_t got = 16384 - z.avail_out;
        luaL_addsize(&b, got);
        total += got;
        if (rc != Z_OK && rc != Z_STREAM_END)
            break;
        if ((lua_Integer)total > max) {
            rc = Z_BUF_ERROR;
            break;
        }
        if (rc == Z_OK && z.avail_in == 0 && got == 0)
            break;  /* truncated input */
    } while (rc != Z_STREAM_END);
    const char *why = z.msg;
    inflateEnd(&z);
    if (rc != Z_STREAM_END) {
        lua_pushnil(L);
        lua_pushfstring(L, "bad zlib data: %s",
                        (lua_Integer)total > max ? "inflated size over the limit"
                        : why ? why : "truncated");
        return 2;
    }
    luaL_pushresult(&b);
    return 1;
}

static int
lcore_deflate(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    int level = (int)luaL_optinteger(L, 2, Z_DEFAULT_COMPRESSION);
    uLong bound = compressBound((uLong)n);
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, bound);
    uLongf outlen = bound;
    int rc = compress2((Bytef *)out, &outlen, (const Bytef *)s, (uLong)n, level);
    if (rc != Z_OK)
        return luaL_error(L, "deflate failed (%d)", rc);
    luaL_pushresultsize(&b, outlen);
    return 1;
}

static int
lcore_cpu_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)uv_available_parallelism());
    return 1;
}

static int
lcore_pid(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

static int
lcore_hostname(lua_State *L)
{
    char name[256];
    size_t n = sizeof(name);
    if (uv_os_gethostname(name, &n) != 0)
        lua_pushliteral(L, "localhost");
    else
        lua_pushstring(L, name);
    return 1;
}

static int
lcore_ipv4_addresses(lua_State *L)
{
    uv_interface_address_t *ifs = NULL;
    int n = 0;
    lua_newtable(L);
    if (uv_interface_addresses(&ifs, &n) != 0)
        return 1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        char ip[INET6_ADDRSTRLEN];
        if (ifs[i].is_internal || ifs[i].address.address4.sin_family != AF_INET)
            continue;
        if (uv_ip4_name(&ifs[i].address.address4, ip, sizeof(ip)) != 0)
            continue;
        lua_pushstring(L, ip);
        lua_rawseti(L, -2, ++k);
    }
    uv_free_interface_addresses(ifs, n);
    return 1;
}

static int
lcore_total_memory(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)uv_get_total_memory());
    return 1;
}

static void
set_int(lua_State *L, const char *k, int64_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static int
lcore_memory_budget(lua_State *L)
{
    struct membudget *b = membudget_shared();
    if (b == NULL)
        return luaL_error(L, "out of memory");
    struct membudget_figures f;
    membudget_figures(b, &f);
    lua_createtable(L, 0, 14);
    set_int(L, "used", f.total);
    set_int(L, "requests", f.kind[MB_REQUESTS]);
    set_int(L, "output", f.kind[MB_OUTPUT]);
    set_int(L, "console", f.kind[MB_CONSOLE]);
    set_int(L, "metrics", f.kind[MB_METRICS]);
    set_int(L, "peerMax", f.peer_max);
    set_int(L, "peers", f.peers);
    set_int(L, "limit", f.limits.total);
    set_int(L, "perPeerLimit", f.limits.per_peer);
    set_int(L, "perConnectionLimit", f.limits.per_conn);
    set_int(L, "refusedTotal", f.refused[MB_LIMIT_TOTAL]);
    set_int(L, "refusedPeer", f.refused[MB_LIMIT_PEER]);
    set_int(L, "refusedConnection", f.refused[MB_LIMIT_CONNECTION]);
    /* What the process holds beside the budget (docs/memory.md). */
    struct membudget_alloc a;
    membudget_alloc_figures(b, &a);
    lua_pushstring(L, a.name);
    lua_setfield(L, -2, "allocator");
    set_int(L, "allocated", a.allocated);
    set_int(L, "active", a.active);
    set_int(L, "resident", a.resident);
    set_int(L, "retained", a.retained);
    set_int(L, "metadata", a.metadata);
    set_int(L, "mapped", a.mapped);
    set_int(L, "purges", a.purges);
    struct membudget_lua lh;
    membudget_lua_figures(b, &lh);
    lua_createtable(L, lh.n, 0);
    for (int i = 0; i < lh.n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, lh.state[i].name);
        lua_setfield(L, -2, "name");
        set_int(L, "bytes", lh.state[i].bytes);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "lua");
    return 1;
}

static int
lcore_memory_budget_add(lua_State *L)
{
    static const char *const kinds[] = { "console", "metrics", NULL };
    int k = luaL_checkoption(L, 1, NULL, kinds);
    lua_Integer delta = luaL_checkinteger(L, 2);
    struct membudget *b = membudget_shared();
    if (b != NULL)
        membudget_add(b, k == 0 ? MB_CONSOLE : MB_METRICS, (int64_t)delta);
    return 0;
}

static int
lcore_memory_budget_over(lua_State *L)
{
    struct membudget *b = membudget_shared();
    lua_pushboolean(L, b != NULL && membudget_over(b));
    return 1;
}

int
luaopen_rmq_core(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "log", lcore_log },
        { "log_enabled", lcore_log_enabled },
        { "log_stats", lcore_log_stats },
        { "now_ms", lcore_now_ms },
        { "mono_ms", lcore_mono_ms },
        { "crc32", lcore_crc32 },
        { "inflate", lcore_inflate },
        { "deflate", lcore_deflate },
        { "cpu_count", lcore_cpu_count },
        { "pid", lcore_pid },
        { "hostname", lcore_hostname },
        { "ipv4_addresses", lcore_ipv4_addresses },
        { "total_memory", lcore_total_memory },
        { "memory_budget", lcore_memory_budget },
        { "memory_budget_add", lcore_memory_budget_add },
        { "memory_budget_over", lcore_memory_budget_over },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    lua_pushstring(L, rmq_version);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, rmq_git_rev);
    lua_setfield(L, -2, "git_rev");
    return 1;
}
