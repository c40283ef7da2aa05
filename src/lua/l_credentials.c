/*
 * l_credentials: see l_credentials.h.
 *
 * The signature is computed over the fields exactly as they are then
 * encoded (the same converted strings), so what the broker recomputes
 * from the wire is what was signed whatever the Lua types were.
 * _UNIQUE_KEY_QUERY is left out of it, as the 4.9.8 broker leaves it out
 * when it checks (PlainAccessValidator.parse; the Java client signs it,
 * so its QUERY_MESSAGE by unique key is refused by 4.9.8: protocol.md
 * §8.3): requests signed here pass a 4.9.8 broker and rmq's alike.
 */
#include "lua/l_credentials.h"

#include <lauxlib.h>
#include <string.h>

#include "acl/acl_sign.h"
#include "core/err.h"

static const char default_key = 'd';
static const char signer_key = 's';

#define SIGNER_MT "rmq.credentials.signer"

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

/* The state's signer, made on first use.  NULL with err_set(). */
static struct acl_signer *
state_signer(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &signer_key);
    struct lsigner *u = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (u != NULL)
        return u->s;
    struct acl_signer *s = acl_signer_new();
    if (s == NULL)
        return NULL;
    u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->s = s;
    if (luaL_newmetatable(L, SIGNER_MT)) {
        lua_pushcfunction(L, signer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &signer_key);
    return s;
}

/* Field `name` of the credentials table at t as a string (pushed), or
 * NULL (nil pushed) when absent and optional.  -1 with err_set() when
 * it is not a string of sane length. */
static int
cred_field(lua_State *L, int t, const char *name, bool required,
           struct rmq_str *out)
{
    int ty = lua_getfield(L, t, name);
    out->p = NULL;
    out->len = 0;
    if (ty == LUA_TNIL && !required)
        return 0;
    size_t n;
    if (ty != LUA_TSTRING) {
        err_set("credentials: %s must be a string, got %s", name,
                lua_typename(L, ty));
        return -1;
    }
    out->p = lua_tolstring(L, -1, &n);
    if (n > LCRED_MAX_LEN) {
        err_set("credentials: %s is longer than %d bytes", name, LCRED_MAX_LEN);
        return -1;
    }
    out->len = (uint32_t)n;
    return 0;
}

/* Sets extField key to val: replaces an entry with the key, else adds
 * one (the caller reserved room). */
static void
set_field(struct rmq_cmd *c, const char *key, struct rmq_str val)
{
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < c->ext_count; i++) {
        struct rmq_field *f = &c->ext[i];
        if (f->key.len == kl && memcmp(f->key.p, key, kl) == 0) {
            f->val = val;
            return;
        }
    }
    struct rmq_field *f = &c->ext[c->ext_count++];
    f->key.p = key;
    f->key.len = (uint32_t)kl;
    f->val = val;
}

int
lcred_find(lua_State *L, int idx)
{
    if (idx == 0) {
        if (lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key) != LUA_TTABLE) {
            lua_pop(L, 1);
            return 0;  /* no default: unsigned */
        }
        return lua_gettop(L);
    }
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TTABLE) {
        err_set("field 'credentials' must be a table or false, got %s",
                luaL_typename(L, idx));
        return -1;
    }
    return idx;
}

int
lcred_sign(lua_State *L, int idx, struct rmq_cmd *c)
{
    if (!lua_checkstack(L, 8)) {
        err_set("credentials: stack overflow");
        return -1;
    }
    struct rmq_str ak, sk, token;
    if (cred_field(L, idx, "accessKey", true, &ak) != 0 ||
        cred_field(L, idx, "secretKey", true, &sk) != 0 ||
        cred_field(L, idx, "securityToken", false, &token) != 0)
        return -1;
    struct acl_signer *s = state_signer(L);
    if (s == NULL)
        return -1;
    set_field(c, ACL_FIELD_ACCESS_KEY, ak);
    if (token.p != NULL)
        set_field(c, ACL_FIELD_SECURITY_TOKEN, token);
    /* The Signature lives in a Lua string pushed here, so that it lasts
     * as long as the other strings the command points at. */
    char sig[ACL_SIGNATURE_LEN + 1];
    if (acl_sign_cmd(s, c, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, sk.p, sk.len, sig) != 0)
        return -1;
    lua_pushlstring(L, sig, ACL_SIGNATURE_LEN);
    struct rmq_str v = { lua_tostring(L, -1), ACL_SIGNATURE_LEN };
    set_field(c, ACL_FIELD_SIGNATURE, v);
    return 0;
}

int
lcred_default(lua_State *L)
{
    int nargs = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key);
    if (nargs == 0)
        return 1;
    if (lua_toboolean(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_getfield(L, 1, "accessKey");
        lua_getfield(L, 1, "secretKey");
        luaL_argcheck(L, lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING,
                      1, "credentials need accessKey and secretKey strings");
        lua_pop(L, 2);
        lua_pushvalue(L, 1);
    } else {
        lua_pushnil(L);
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, &default_key);
    return 1;
}
