/*
 * l_ha: the rmq.ha module, the broker's handle on replication (ha/ha.h).
 *
 *   local h = ha.start(store_handle, opts)     main thread; raises on error
 *       opts: slave (bool), bind, haListenPort, haMasterAddress,
 *             haSendHeartbeatInterval, haHousekeepingInterval,
 *             haTransferBatchSize, haMaxSlaves, haTransferFromMinOffset,
 *             haAllowedAddresses, haAllowAnyAddress, haUnknownPeerHoldMillis,
 *             haUnknownPeersMax
 *   h:port()                 the bound HA port (every broker listens)
 *   h:set_master(addr)       slave: the HA address to follow ("" none)
 *   h:set_peers("ip;ip")     the registered peers served besides
 *                            haAllowedAddresses (ha_set_peers)
 *   h:take_refresh() -> bool an unknown peer is waiting: ask again
 *   h:share()                a lightuserdata for other states (ha.stats)
 *   h:stats() / ha.stats(lud) -> {
 *       port, conns, acked (push2SlaveMaxOffset), maxPhy,
 *       slaves = { {addr, request, ack, next, behind}, ... },     master
 *       master, connected, rawEnd, masterOffset, reconnects,
 *       truncations }                                              slave
 *   h:stop()                 also at collection
 *
 * ha.stats is what other engineers' code (the `rmq` view, acting master,
 * slave-read by lag) reads: every slave's acknowledged offset against the
 * master's max offset.
 */
#include <lauxlib.h>
#include <string.h>

#include "core/err.h"
#include "ha/ha.h"
#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "lua/l_store.h"

#define LHA_TYPE "rmq.ha"
#define LHA_MAX_SHOWN 64
/* ha_set_peers's list (ha_impl.h's HA_PEERS_MAX less the ";" added). */
#define HA_PEERS_LIST_MAX 4000

struct lha {
    struct ha *h;
};

static struct lha *
check_ha(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lha, h, LHA_TYPE, "the HA service is stopped");
}

static int
lha_start(lua_State *L)
{
    struct store *s;
    if (lua_islightuserdata(L, 1))
        s = lua_touserdata(L, 1);
    else
        s = lstore_check(L, 1, NULL);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct ha_conf c;
    memset(&c, 0, sizeof(c));
    c.slave = lstore_opt_bool(L, 2, "slave", false);
    if (!lstore_opt_str(L, 2, "bind", c.bind, sizeof(c.bind)))
        strcpy(c.bind, "0.0.0.0");
    c.listen_port = (int)lstore_opt_int(L, 2, "haListenPort", 0);
    lstore_opt_str(L, 2, "haMasterAddress", c.master_addr, sizeof(c.master_addr));
    c.heartbeat_ms = (int)lstore_opt_int(L, 2, "haSendHeartbeatInterval", 5000);
    c.housekeeping_ms = (int)lstore_opt_int(L, 2, "haHousekeepingInterval", 20000);
    c.batch_size = (int)lstore_opt_int(L, 2, "haTransferBatchSize", 32768);
    c.max_slaves = (int)lstore_opt_int(L, 2, "haMaxSlaves", 16);
    c.transfer_from_min = lstore_opt_bool(L, 2, "haTransferFromMinOffset", false);
    c.allow_any = lstore_opt_bool(L, 2, "haAllowAnyAddress", false);
    c.hold_ms = (int)lstore_opt_int(L, 2, "haUnknownPeerHoldMillis", 5000);
    c.hold_max = (int)lstore_opt_int(L, 2, "haUnknownPeersMax", 8);
    /* ";a;b;" so that a peer matches as ";ip;", spaces dropped. */
    char list[sizeof(c.allowed) - 2];
    if (lstore_opt_str(L, 2, "haAllowedAddresses", list, sizeof(list))) {
        size_t n = 0;
        c.allowed[n++] = ';';
        for (const char *p = list; *p != '\0' && n < sizeof(c.allowed) - 2; p++)
            if (*p != ' ')
                c.allowed[n++] = *p;
        c.allowed[n++] = ';';
        c.allowed[n] = '\0';
    }
    if (c.heartbeat_ms < 1 || c.housekeeping_ms < 1 || c.batch_size < 1 ||
        c.max_slaves < 1 || c.listen_port < 0 || c.listen_port > 65535 || c.hold_ms < 0 ||
        c.hold_max < 0)
        return luaL_error(L, "ha.start: intervals, batch size and haMaxSlaves must be >= 1");
    struct lha *l = lua_newuserdatauv(L, sizeof(*l), 0);
    l->h = NULL;
    luaL_setmetatable(L, LHA_TYPE);
    l->h = ha_start(s, &c);
    if (l->h == NULL)
        return luaL_error(L, "%s", err_msg());
    return 1;
}

/* t[k] = v for the table on top. */
static void
set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static int
push_stats(lua_State *L, struct ha *h)
{
    struct ha_stats st;
    struct ha_slave_info sl[LHA_MAX_SHOWN];
    int n = ha_stats(h, &st, sl, LHA_MAX_SHOWN);
    if (n > LHA_MAX_SHOWN)
        n = LHA_MAX_SHOWN;
    lua_createtable(L, 0, 12);
    set_int(L, "port", st.port);
    set_int(L, "conns", st.conns);
    set_int(L, "acked", st.acked);
    set_int(L, "maxPhy", st.max_phy);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 5);
        lua_pushstring(L, sl[i].addr);
        lua_setfield(L, -2, "addr");
        set_int(L, "request", sl[i].request);
        set_int(L, "ack", sl[i].ack);
        set_int(L, "next", sl[i].next);
        set_int(L, "behind", sl[i].ack >= 0 ? st.max_phy - sl[i].ack : st.max_phy);
        set_int(L, "caughtUpAgo", sl[i].caught_up_ago);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "slaves");
    lua_pushstring(L, st.master);
    lua_setfield(L, -2, "master");
    lua_pushstring(L, st.local);
    lua_setfield(L, -2, "local");
    lua_pushboolean(L, st.connected);
    lua_setfield(L, -2, "connected");
    set_int(L, "rawEnd", st.raw_end);
    set_int(L, "masterOffset", st.master_offset);
    set_int(L, "reconnects", st.reconnects);
    set_int(L, "truncations", st.truncations);
    return 1;
}

static int
lha_stats(lua_State *L)
{
    if (lua_islightuserdata(L, 1))
        return push_stats(L, lua_touserdata(L, 1));
    return push_stats(L, check_ha(L)->h);
}

static int
lha_port(lua_State *L)
{
    struct ha_stats st;
    (void)ha_stats(check_ha(L)->h, &st, NULL, 0);
    lua_pushinteger(L, st.port);
    return 1;
}

/* h:set_ack_peers("ip:port,ip:port;ip:port" | ""): members ";", a member's
 * connections ","; see ha_set_ack_peers. */
static int
lha_set_ack_peers(lua_State *L)
{
    struct lha *l = check_ha(L);
    size_t n;
    const char *list = luaL_checklstring(L, 2, &n);
    if (n >= HA_ACK_PEERS_MAX)
        return luaL_error(L, "set_ack_peers: list longer than %d bytes", HA_ACK_PEERS_MAX - 1);
    ha_set_ack_peers(l->h, list);
    return 0;
}

/* h:set_min_acks(n): see ha_set_min_acks. */
static int
lha_set_min_acks(lua_State *L)
{
    struct lha *l = check_ha(L);
    lua_Integer n = luaL_checkinteger(L, 2);
    ha_set_min_acks(l->h, n < 0 ? 0 : n > 1024 ? 1024 : (int)n);
    return 0;
}

/* h:set_role(slave, addr, trunc): see ha_set_role (trunc -1: none). */
static int
lha_set_role(lua_State *L)
{
    struct lha *l = check_ha(L);
    bool slave = lua_toboolean(L, 2);
    const char *addr = luaL_optstring(L, 3, "");
    lua_Integer trunc = luaL_optinteger(L, 4, -1);
    ha_set_role(l->h, slave, addr, trunc < 0 ? -1 : (int64_t)trunc);
    return 0;
}

static int
lha_set_master(lua_State *L)
{
    struct lha *l = check_ha(L);
    ha_set_master(l->h, luaL_checkstring(L, 2));
    return 0;
}

static int
lha_set_peers(lua_State *L)
{
    struct lha *l = check_ha(L);
    size_t n;
    const char *list = luaL_checklstring(L, 2, &n);
    if (n >= HA_PEERS_LIST_MAX)
        return luaL_error(L, "ha: peer list of %d bytes, at most %d", (int)n, HA_PEERS_LIST_MAX - 1);
    ha_set_peers(l->h, list);
    return 0;
}

static int
lha_take_refresh(lua_State *L)
{
    lua_pushboolean(L, ha_take_refresh(check_ha(L)->h));
    return 1;
}

static int
lha_share(lua_State *L)
{
    lua_pushlightuserdata(L, check_ha(L)->h);
    return 1;
}

static int
lha_stop(lua_State *L)
{
    struct lha *l = luaL_checkudata(L, 1, LHA_TYPE);
    if (l->h != NULL) {
        ha_stop(l->h);
        l->h = NULL;
    }
    return 0;
}

int
luaopen_rmq_ha(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "port", lha_port },
        { "set_master", lha_set_master },
        { "set_role", lha_set_role },
        { "set_min_acks", lha_set_min_acks },
        { "set_ack_peers", lha_set_ack_peers },
        { "set_peers", lha_set_peers },
        { "take_refresh", lha_take_refresh },
        { "stats", lha_stats },
        { "share", lha_share },
        { "stop", lha_stop },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "start", lha_start },
        { "stats", lha_stats },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LHA_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lha_stop);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
