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
 * fn(properties, tags, bodySize [, body]) -> keep (filter/record_match.h,
 * the one place a record is shown to Lua); the first error is handed
 * back to the caller to log.
 */
#include "lua/l_err.h"
#include "lua/l_filter.h"

#include <lauxlib.h>
#include <string.h>


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
    if (u->f == NULL)
        return lerr_pushstr(L, err);
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

bool
lfilter_matcher(lua_State *L, int idx, bool body, struct record_match *m)
{
    struct sql92 *sql = lfilter_test(L, idx);
    if (sql != NULL) {
        record_match_sql(m, sql);
        return true;
    }
    if (lua_type(L, idx) != LUA_TFUNCTION)
        return false;
    record_match_lua(m, L, idx, body);
    return true;
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
