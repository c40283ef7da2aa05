/*
 * filter/record_match: see record_match.h.
 */
#include "filter/record_match.h"

#include <lauxlib.h>
#include <string.h>
#include <time.h>

#include "store/commitlog.h"
#include "store/props.h"

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

void
record_match_lua(struct record_match *m, lua_State *L, int idx, bool body)
{
    memset(m, 0, sizeof(*m));
    m->L = L;
    lua_pushvalue(L, idx);
    lua_pushcclosure(L, call_filter, 1);
    m->fn = lua_gettop(L);
    m->body = body;
}

void
record_match_sql(struct record_match *m, const struct sql92 *sql)
{
    memset(m, 0, sizeof(*m));
    m->sql = sql;
}

bool
record_match(void *ud, const uint8_t *rec, size_t len)
{
    struct record_match *m = ud;
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
