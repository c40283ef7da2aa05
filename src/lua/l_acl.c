/*
 * l_acl: the rmq.acl module, RocketMQ ACL 1.0 signatures for Lua.
 *
 *   acl.sign(fields, body, secret) -> Signature
 *       fields {key = value} (numbers and booleans signed as their text,
 *       as the C++ and Node clients do), body a string or nil; the
 *       "Signature" key, if present, is left out
 *   acl.content(fields, body) -> the bytes that are signed
 *   acl.signature_of(cmd, secret [, skip_unique_key_query]) -> Signature
 *       cmd: an rmq.cmd userdata (a received request) or a table with
 *       ext and body (rmq.codec.decode's); skip_unique_key_query leaves
 *       _UNIQUE_KEY_QUERY out as the 4.9.8 broker does
 *   acl.hmac(secret, data) -> Base64(HmacSHA1(secret, data))
 *
 * Every string a signature reads stays referenced from the Lua stack
 * while it is computed; nothing here mallocs except the signer (once per
 * Lua state, freed by __gc) and more than ACL_SIGN_STACK_FIELDS fields.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "acl/acl_sign.h"
#include "core/err.h"
#include "lua/l_cmd.h"
#include "lua/l_modules.h"

#define SIGNER_MT "rmq.acl.signer"

struct lsigner {
    struct acl_signer *s;
};

static int
signer_gc(lua_State *L)
{
    struct lsigner *u = luaL_checkudata(L, 1, SIGNER_MT);
    acl_signer_free(u->s);
    u->s = NULL;
    return 0;
}

static struct acl_signer *
signer(lua_State *L)
{
    struct lsigner *u = lua_touserdata(L, lua_upvalueindex(1));
    if (u == NULL || u->s == NULL)
        luaL_error(L, "rmq.acl: no signer");
    return u->s;
}

/*
 * Points cmd->ext at an array (a userdata left on the stack) of the
 * table's entries at index `t`; converted strings are anchored in a table
 * also left on the stack.  Pushes 2 values.
 */
static void
table_fields(lua_State *L, int t, struct rmq_cmd *cmd)
{
    t = lua_absindex(L, t);
    uint32_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        lua_pop(L, 1);
        if (n == UINT32_MAX / sizeof(struct rmq_field))
            luaL_error(L, "too many fields");
        n++;
    }
    struct rmq_field *f =
        lua_newuserdatauv(L, n ? n * sizeof(struct rmq_field) : 1, 0);
    lua_newtable(L);
    int anchor = lua_gettop(L);
    lua_Integer nanchor = 0;
    uint32_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        if (i == n)
            luaL_error(L, "fields changed while being signed");
        size_t kl;
        size_t vl;
        const char *k;
        const char *v;
        int vt = lua_type(L, -1);
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "field names must be strings");
        if (vt != LUA_TSTRING && vt != LUA_TNUMBER && vt != LUA_TBOOLEAN)
            luaL_error(L, "field '%s' must be a string, number or boolean",
                       lua_tostring(L, -2));
        k = lua_tolstring(L, -2, &kl);
        if (vt == LUA_TSTRING) {
            v = lua_tolstring(L, -1, &vl);
        } else {
            v = luaL_tolstring(L, -1, &vl);
            lua_rawseti(L, anchor, ++nanchor);
        }
        if (kl > UINT32_MAX || vl > UINT32_MAX)
            luaL_error(L, "oversized field");
        f[i].key.p = k;
        f[i].key.len = (uint32_t)kl;
        f[i].val.p = v;
        f[i].val.len = (uint32_t)vl;
        i++;
        lua_pop(L, 1);
    }
    cmd->ext = f;
    cmd->ext_count = i;
}

static void
opt_body(lua_State *L, int idx, struct rmq_cmd *cmd)
{
    if (lua_isnoneornil(L, idx))
        return;
    size_t len;
    const char *b = luaL_checklstring(L, idx, &len);
    if (len > UINT32_MAX)
        luaL_argerror(L, idx, "body too large");
    cmd->body = (const uint8_t *)b;
    cmd->body_len = (uint32_t)len;
}

static int
push_signature(lua_State *L, const struct rmq_cmd *cmd, unsigned flags,
               int secret_idx)
{
    size_t slen;
    const char *secret = luaL_checklstring(L, secret_idx, &slen);
    char sig[ACL_SIGNATURE_LEN + 1];
    if (acl_sign_cmd(signer(L), cmd, flags, secret, slen, sig) != 0)
        return luaL_error(L, "%s", err_msg());
    lua_pushlstring(L, sig, ACL_SIGNATURE_LEN);
    return 1;
}

static int
l_sign(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkstring(L, 3);
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    opt_body(L, 2, &cmd);
    table_fields(L, 1, &cmd);
    return push_signature(L, &cmd, 0, 3);
}

static int
l_content(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    opt_body(L, 2, &cmd);
    table_fields(L, 1, &cmd);
    struct buf b;
    buf_init(&b);
    if (acl_sign_content(&cmd, 0, &b) != 0)
        return luaL_error(L, "rmq.acl.content: out of memory");
    lua_pushlstring(L, (const char *)buf_head(&b), buf_len(&b));
    buf_free(&b);
    return 1;
}

static int
l_signature_of(lua_State *L)
{
    unsigned flags = lua_toboolean(L, 3) ? ACL_SIGN_SKIP_UNIQUE_KEY_QUERY : 0;
    luaL_checkstring(L, 2);
    const struct rmq_cmd *ud = luaL_testudata(L, 1, LCMD_TYPE);
    if (ud != NULL)  /* struct lcmd starts with its struct rmq_cmd */
        return push_signature(L, ud, flags, 2);
    luaL_argexpected(L, lua_istable(L, 1), 1, "rmq.cmd or table");
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    lua_getfield(L, 1, "body");
    opt_body(L, -1, &cmd);  /* stays on the stack */
    if (lua_getfield(L, 1, "ext") == LUA_TTABLE)
        table_fields(L, -1, &cmd);
    else if (!lua_isnil(L, -1))
        return luaL_argerror(L, 1, "field 'ext' must be a table");
    return push_signature(L, &cmd, flags, 2);
}

static int
l_hmac(lua_State *L)
{
    size_t slen;
    size_t dlen;
    const char *secret = luaL_checklstring(L, 1, &slen);
    const char *data = luaL_checklstring(L, 2, &dlen);
    char sig[ACL_SIGNATURE_LEN + 1];
    if (acl_sign_data(signer(L), data, dlen, secret, slen, sig) != 0)
        return luaL_error(L, "%s", err_msg());
    lua_pushlstring(L, sig, ACL_SIGNATURE_LEN);
    return 1;
}

int
luaopen_rmq_acl(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        { "sign", l_sign },
        { "content", l_content },
        { "signature_of", l_signature_of },
        { "hmac", l_hmac },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, SIGNER_MT)) {
        lua_pushcfunction(L, signer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlibtable(L, funcs);
    struct lsigner *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->s = NULL;
    luaL_setmetatable(L, SIGNER_MT);
    u->s = acl_signer_new();
    if (u->s == NULL)
        return luaL_error(L, "rmq.acl: %s", err_msg());
    luaL_setfuncs(L, funcs, 1);
    lua_pushinteger(L, ACL_SIGNATURE_LEN);
    lua_setfield(L, -2, "SIGNATURE_LEN");
    return 1;
}
