/*
 * l_filter: the rmq.filter module.
 *
 *   filter.compile(expr [, maxLength, maxDepth, maxNodes]) -> f | nil, err
 *       RocketMQ's SQL92 (filter/sql92.h); err is the reason as a 4.9.8
 *       broker words it (the exception's toString())
 *   f:eval(props) -> "TRUE" | "FALSE" | "NULL" | "ERROR"   props {k = v}
 *   f:match(propertiesString) -> bool
 *   f:nodes() -> n
 *
 * st:get(..., filter) takes f, or a function called per record as
 * fn(properties, tags, bodySize [, body]) -> keep (lfilter_match below):
 * it runs under lua_pcall, so an error in it leaves no pin behind; the
 * record is then kept (nothing a consumer asked for is lost to a broken
 * filter) and the first error is handed back to the caller to log.
 */
#include "lua/l_filter.h"

#include <lauxlib.h>
#include <string.h>
#include <time.h>

#include "store/commitlog.h"
#include "store/props.h"

#define FILTER_MT "rmq.filter.sql92"

struct lsql92 {
    struct sql92 *f;
};

struct sql92 *
lfilter_test(lua_State *L, int idx)
{
    struct lsql92 *u = luaL_testudata(L, idx, FILTER_MT);
    return u != NULL ? u->f : NULL;
}

static struct sql92 *
check(lua_State *L)
{
    struct lsql92 *u = luaL_checkudata(L, 1, FILTER_MT);
    luaL_argcheck(L, u->f != NULL, 1, "freed filter");
    return u->f;
}

static int
lfilter_compile(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    struct sql92_limits lim = {
        .max_len = (size_t)luaL_optinteger(L, 2, 65536),
        .max_depth = (int)luaL_optinteger(L, 3, 128),
        .max_nodes = (int)luaL_optinteger(L, 4, 4096),
    };
    luaL_argcheck(L, lim.max_depth >= 1 && lim.max_depth <= 10000, 3, "maxDepth must be 1..10000");
    luaL_argcheck(L, lim.max_nodes >= 1, 4, "maxNodes must be >= 1");
    struct lsql92 *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->f = NULL;
    luaL_setmetatable(L, FILTER_MT);
    char err[512];
    u->f = sql92_compile(s, len, &lim, err, sizeof(err));
    if (u->f == NULL) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    return 1;
}

static bool
table_get(void *ud, const char *name, size_t nlen, const char **v, size_t *vlen)
{
    lua_State *L = ud;
    /* lua_rawget with a string key raises only on memory errors */
    lua_pushlstring(L, name, nlen);
    lua_rawget(L, 2);
    bool ok = lua_type(L, -1) == LUA_TSTRING;
    if (ok) {
        *v = lua_tolstring(L, -1, vlen);
        /* the string stays referenced by the table: safe after the pop */
    }
    lua_pop(L, 1);
    return ok;
}

static int
lfilter_eval(lua_State *L)
{
    struct sql92 *f = check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const names[] = { "FALSE", "TRUE", "NULL", "ERROR" };
    lua_pushstring(L, names[sql92_eval(f, table_get, L)]);
    return 1;
}

static int
lfilter_lmatch(lua_State *L)
{
    struct sql92 *f = check(L);
    size_t n;
    const char *p = luaL_checklstring(L, 2, &n);
    lua_pushboolean(L, sql92_match_props(f, p, n));
    return 1;
}

static int
lfilter_nodes(lua_State *L)
{
    lua_pushinteger(L, sql92_nodes(check(L)));
    return 1;
}

static int
lfilter_gc(lua_State *L)
{
    struct lsql92 *u = luaL_checkudata(L, 1, FILTER_MT);
    sql92_free(u->f);
    u->f = NULL;
    return 0;
}

/* Under lua_pcall: fn(properties, tags, bodySize [, body]). */
static int
call_filter(lua_State *L)
{
    const struct clog_view *v = lua_touserdata(L, 1);
    bool body = lua_toboolean(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_createtable(L, 0, 8);
    const char *tags = NULL;
    size_t tlen = 0, pos = 0;
    struct prop kv;
    while (props_next((const char *)v->props, v->props_len, &pos, &kv)) {
        lua_pushlstring(L, kv.k, kv.klen);
        lua_pushlstring(L, kv.v, kv.vlen);
        lua_rawset(L, -3);
        if (kv.klen == 4 && memcmp(kv.k, "TAGS", 4) == 0) {
            tags = kv.v;
            tlen = kv.vlen;
        }
    }
    if (tags != NULL)
        lua_pushlstring(L, tags, tlen);
    else
        lua_pushnil(L);
    lua_pushinteger(L, v->body_len);
    if (body)
        lua_pushlstring(L, (const char *)v->body, v->body_len);
    lua_call(L, body ? 4 : 3, 1);
    return 1;
}

bool
lfilter_matcher(lua_State *L, int idx, bool body, struct lfilter_match *m)
{
    memset(m, 0, sizeof(*m));
    m->sql = lfilter_test(L, idx);
    if (m->sql != NULL)
        return true;
    if (lua_type(L, idx) != LUA_TFUNCTION)
        return false;
    m->L = L;
    /* The closure is made here, before any record is pinned: calling it
     * per record then allocates nothing outside lua_pcall. */
    lua_pushvalue(L, idx);
    lua_pushcclosure(L, call_filter, 1);
    m->fn = lua_gettop(L);
    m->body = body;
    return true;
}

bool
lfilter_match(void *ud, const uint8_t *rec, size_t len)
{
    struct lfilter_match *m = ud;
    struct clog_view v;
    if (clog_decode(rec, len, -1, false, &v) != CLOG_REC)
        return true;            /* not for a filter to judge: as stored */
    if (m->sql != NULL) {
        bool ok = sql92_match_props(m->sql, (const char *)v.props, v.props_len);
        m->calls++;
        if (!ok)
            m->dropped++;
        return ok;
    }
    lua_State *L = m->L;
    if (!lua_checkstack(L, 8))
        return true;
    lua_pushvalue(L, m->fn);
    lua_pushlightuserdata(L, &v);
    lua_pushboolean(L, m->body);
    m->calls++;
    struct timespec t0, t1;
    (void)clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = lua_pcall(L, 2, 1, 0);
    (void)clock_gettime(CLOCK_MONOTONIC, &t1);
    m->nanos += (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    if (rc != LUA_OK) {
        m->errors++;
        if (m->err[0] == 0) {
            const char *e = lua_tostring(L, -1);
            strncpy(m->err, e != NULL ? e : "(error object is not a string)", sizeof(m->err) - 1);
        }
        lua_pop(L, 1);
        return true;
    }
    bool keep = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!keep)
        m->dropped++;
    return keep;
}

int
luaopen_rmq_filter(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "eval", lfilter_eval },
        { "match", lfilter_lmatch },
        { "nodes", lfilter_nodes },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, FILTER_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lfilter_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {
        { "compile", lfilter_compile },
        { NULL, NULL },
    };
    luaL_newlib(L, funcs);
    return 1;
}
