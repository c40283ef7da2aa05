/*
 * l_fjson: the rmq.fjson module: Lua values written as fastjson 1.2.69
 * writes the Java objects they stand for (core/fjson.h's escapes, in
 * default mode), so the Lua processors build their bodies and files with
 * the C writer the NameServer's bodies use instead of concatenating
 * text.  rmq.fastjson (lua/rmq/fastjson.lua) is its face.
 *
 *   fjson.encode(v [, pretty]) -> text
 *   fjson.array_mt            metatable of a table written as a list
 *                             (needed only for an empty one)
 *   fjson.map_mt              metatable of a table with integer keys
 *                             written as a Map<Integer|Long, V>
 *
 * How a value is written:
 *   string                    quoted, escaped as fastjson escapes
 *   integer, integral float   decimal digits (other floats are refused:
 *                             nothing we write has one)
 *   boolean                   true / false
 *   table with t[1] ~= nil, or array_mt    [v1,v2,...]
 *   table with map_mt         {k:v,...}: integer keys, bare, ascending (a
 *                             HashMap of small non-negative keys iterates
 *                             so)
 *   other table               {"k":v,...}: string keys in String
 *                             .compareTo order (a JavaBean under
 *                             fastjson's SortField, or a sorted map)
 *
 * pretty = SerializerFeature.PrettyFormat for objects: a tab per level,
 * each string-keyed entry on its own line, a Map with integer keys on
 * one line with its closing brace on the next; lists are refused there
 * (no file we write has one).
 *
 * Errors: a value that cannot be written raises, saying what it is.
 */
#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jstr.h"
#include "lua/l_modules.h"
#include "lua/l_scratch.h"
#include "core/fjson.h"

#define FJSON_ARRAY_MT "rmq.fjson.array"
#define FJSON_MAP_MT "rmq.fjson.map"
#define DEPTH_MAX 32   /* deeper is a cycle or a mistake */

struct enc {
    lua_State *L;
    struct fjw w;
    bool pretty;
    int indent;
    char err[160];             /* set on the first failure */
};

struct key {
    const char *s;             /* a string key (kept alive by the table) */
    size_t len;
    lua_Integer i;             /* an integer key (map_mt) */
};

static bool
fail(struct enc *e, const char *what)
{
    if (e->err[0] == '\0')
        snprintf(e->err, sizeof(e->err), "fastjson.encode: %s", what);
    return false;
}

static void
newline(struct enc *e)
{
    fjw_raw(&e->w, "\n", 1);
    for (int i = 0; i < e->indent; i++)
        fjw_raw(&e->w, "\t", 1);
}

static bool
has_mt(lua_State *L, int idx, const char *name)
{
    if (!lua_getmetatable(L, idx))
        return false;
    luaL_getmetatable(L, name);
    bool same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same;
}

static int
cmp_str(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    return java_compare(x->s, x->len, y->s, y->len);
}

static int
cmp_int(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    return (x->i > y->i) - (x->i < y->i);
}

static bool write_value(struct enc *e, int idx, int depth);

static bool
write_array(struct enc *e, int t, int depth)
{
    if (e->pretty)
        return fail(e, "a list in pretty mode");
    lua_State *L = e->L;
    lua_Integer n = (lua_Integer)lua_rawlen(L, t);
    lua_Integer keys = 0;
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        lua_pop(L, 1);
        keys++;
    }
    if (keys != n)
        return fail(e, "a list with holes or other keys");
    fjw_raw(&e->w, "[", 1);
    for (lua_Integer i = 1; i <= n; i++) {
        if (i > 1)
            fjw_raw(&e->w, ",", 1);
        lua_rawgeti(L, t, i);
        bool ok = write_value(e, lua_gettop(L), depth + 1);
        lua_pop(L, 1);
        if (!ok)
            return false;
    }
    fjw_raw(&e->w, "]", 1);
    return true;
}

/* An object: the keys collected into a userdata (left on the stack until
 * the caller's settop), sorted, then each entry written. */
static bool
write_object(struct enc *e, int t, int depth)
{
    lua_State *L = e->L;
    bool int_keys = has_mt(L, t, FJSON_MAP_MT);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        lua_pop(L, 1);
        bool ok = int_keys ? lua_isinteger(L, -1) : lua_type(L, -1) == LUA_TSTRING;
        if (!ok) {
            lua_pop(L, 1);
            return fail(e, int_keys ? "a map key that is not an integer"
                                    : "an object key that is not a string");
        }
        n++;
    }
    struct key *ks = lua_newuserdatauv(L, sizeof(*ks) * (n > 0 ? n : 1), 0);
    /* The same traversal again (nothing changed the table): n keys. */
    size_t k = 0;
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        lua_pop(L, 1);
        if (k < n) {
            if (int_keys)
                ks[k].i = lua_tointeger(L, -1);
            else
                ks[k].s = lua_tolstring(L, -1, &ks[k].len);
            k++;
        }
    }
    qsort(ks, k, sizeof(*ks), int_keys ? cmp_int : cmp_str);
    fjw_raw(&e->w, "{", 1);
    e->indent++;
    for (size_t i = 0; i < k; i++) {
        if (i > 0)
            fjw_raw(&e->w, ",", 1);
        if (int_keys) {
            fjw_long_key(&e->w, (int64_t)ks[i].i);
            lua_rawgeti(L, t, ks[i].i);
        } else {
            if (e->pretty)
                newline(e);
            fjw_str(&e->w, ks[i].s, ks[i].len);
            fjw_raw(&e->w, ":", 1);
            lua_pushlstring(L, ks[i].s, ks[i].len);
            lua_rawget(L, t);
        }
        bool ok = write_value(e, lua_gettop(L), depth + 1);
        lua_pop(L, 1);
        if (!ok)
            return false;
    }
    e->indent--;
    if (e->pretty && k > 0)
        newline(e);
    fjw_raw(&e->w, "}", 1);
    return true;
}

static bool
write_value(struct enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    if (depth > DEPTH_MAX)
        return fail(e, "nested too deep (a cycle?)");
    if (!lua_checkstack(L, 8))
        return fail(e, "out of stack");
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        fjw_str(&e->w, s, n);
        return true;
    }
    case LUA_TNUMBER: {
        if (lua_isinteger(L, idx)) {
            fjw_i64(&e->w, (int64_t)lua_tointeger(L, idx));
            return true;
        }
        lua_Number d = lua_tonumber(L, idx);
        /* An integral float (cjson decodes every number as one). */
        if (d != floor(d) || !(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
            return fail(e, "a number that is not an integer");
        fjw_i64(&e->w, (int64_t)d);
        return true;
    }
    case LUA_TBOOLEAN:
        fjw_lit(&e->w, lua_toboolean(L, idx) ? "true" : "false");
        return true;
    case LUA_TTABLE: {
        int top = lua_gettop(L);
        bool ok;
        lua_rawgeti(L, idx, 1);
        bool list = !lua_isnil(L, -1) || has_mt(L, idx, FJSON_ARRAY_MT);
        lua_pop(L, 1);
        if (list && !has_mt(L, idx, FJSON_MAP_MT))
            ok = write_array(e, idx, depth);
        else
            ok = write_object(e, idx, depth);
        lua_settop(L, top);
        return ok;
    }
    default: {
        char what[64];
        snprintf(what, sizeof(what), "a %s value", lua_typename(L, lua_type(L, idx)));
        return fail(e, what);
    }
    }
}

/* fjson.encode(v [, pretty]) -> text                         [-2, +1, e] */
static int
lfjson_encode(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_settop(L, 2);
    struct enc e = { .L = L, .pretty = lua_toboolean(L, 2), .indent = 0, .err = "" };
    struct buf *b = l_scratch(L);
    fjw_init(&e.w, b, false);
    bool ok = write_value(&e, 1, 0);
    if (!ok || e.w.err != 0) {
        l_scratch_done(b);
        return luaL_error(L, "%s", ok ? "fastjson.encode: out of memory" : e.err);
    }
    l_scratch_push(L, b, true);
    return 1;
}

int
luaopen_rmq_fjson(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "encode", lfjson_encode },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    luaL_newmetatable(L, FJSON_ARRAY_MT);
    lua_setfield(L, -2, "array_mt");
    luaL_newmetatable(L, FJSON_MAP_MT);
    lua_setfield(L, -2, "map_mt");
    return 1;
}
