/*
 * l_modules: see l_modules.h.  Here, not in runtime/: the host runs a
 * state it is given, and the bindings that state gets are this layer's.
 */
#include "lua/l_modules.h"

#include <lauxlib.h>
#include <lualib.h>

#include "lua/l_credentials.h"
#include "lua/l_rcbuf.h"
#include "lua/l_store.h"
#include "runtime/cmd.h"

static const struct store_slices *
records_of(lua_State *L, int idx)
{
    struct lrecords *r = luaL_testudata(L, idx, LSTORE_RECORDS_TYPE);
    return r != NULL ? &r->sl : NULL;
}

/* This layer's values in a command table (runtime/cmd.h). */
static const struct lcmd_values values = {
    .rcbuf = l_test_rcbuf,
    .records = records_of,
    .cred_find = lcred_find,
    .cred_sign = lcred_sign,
    .cred_extra_fields = LCRED_EXTRA_FIELDS,
};

void
lmodules_cmd_values(lua_State *L)
{
    lcmd_set_values(L, &values);
}

void
lmodules_preload(lua_State *L)
{
    lmodules_cmd_values(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
#define RMQ_PRELOAD(name, fn)  \
    lua_pushcfunction(L, fn);  \
    lua_setfield(L, -2, name);
    RMQ_LUA_MODULES(RMQ_PRELOAD)
#undef RMQ_PRELOAD
    lua_pop(L, 1);
}

lua_State *
lmodules_newstate(void)
{
    lua_State *L = luaL_newstate();
    if (L == NULL)
        return NULL;
    luaL_openlibs(L);
    lmodules_preload(L);
    return L;
}
