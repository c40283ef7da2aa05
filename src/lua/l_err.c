/* l_err: see l_err.h. */
#include "lua/l_err.h"

#include <lauxlib.h>
#include <string.h>

#include "core/err.h"

int
lerr_push(lua_State *L)
{
    return lerr_pushstr(L, err_msg());
}

int
lerr_pushstr(lua_State *L, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
}

int
lerr_result(lua_State *L, int rc)
{
    if (rc != 0)
        return lerr_push(L);
    lua_pushboolean(L, 1);
    return 1;
}

void *
lerr_checkopen(lua_State *L, int idx, const char *tname, size_t ptr_at,
               const char *closed)
{
    char *ud = luaL_checkudata(L, idx, tname);
    /* Copied out rather than read through a void ** (the member is some
     * struct's pointer: an lvalue of another type would break aliasing). */
    void *obj;
    memcpy(&obj, ud + ptr_at, sizeof(obj));
    if (obj == NULL)
        luaL_error(L, "%s", closed);
    return ud;
}
