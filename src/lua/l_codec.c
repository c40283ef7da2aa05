/*
 * l_codec: `rmq.codec`, the RemotingCommand codec for Lua.
 *
 *   decode(frame)          -> {code=, language="JAVA", version=, opaque=,
 *                              flag=, serialize="JSON"|"ROCKETMQ",
 *                              remark=, ext={k=v}, body=} | nil, err
 *   encode(t)              -> frame (L, H, header and body)
 *   peek(bytes[, max])     -> frame length | 0 (need more) | nil, err
 *   MAX_FRAME              Netty's default frame limit (peek's default)
 *
 * Nothing here mallocs: the decode arena is a C stack block or a userdata,
 * encode writes into a luaL_Buffer, and the strings an encoded command
 * points at stay referenced from the Lua stack.  So a Lua error (bad
 * argument, out of memory, a raising __tostring) can never leak.
 *
 * encode sorts extFields by key so that a given table always yields the
 * same bytes (Lua's table order is not stable across runs).
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/err.h"
#include "lua/l_err.h"
#include "lua/l_codec.h"
#include "lua/l_modules.h"
#include "net/codec.h"

/* Headers up to about 900 bytes decode without a userdata. */
#define STACK_ARENA 8192

static const char *const ser_names[] = {"JSON", "ROCKETMQ"};

static void
set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static int
l_decode(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const uint8_t *frame = (const uint8_t *)s;
    /* Size the arena only from a header length the frame can hold. */
    if (len < 8 || (be32_get(frame + 4) & 0xFFFFFFu) > len - 8)
        return lerr_pushstr(L, len < 8 ? "frame shorter than 8 bytes"
                                       : "header length exceeds the frame");
    size_t need = rmq_cmd_arena_size(be32_get(frame + 4) & 0xFFFFFFu);
    union {
        uint8_t b[STACK_ARENA];
        struct rmq_field f;  /* alignment */
    } stack;
    struct rmq_arena arena = {stack.b, sizeof(stack.b), 0};
    if (need > sizeof(stack.b)) {
        arena.p = lua_newuserdatauv(L, need, 0);
        arena.cap = need;
    }
    struct rmq_cmd cmd;
    if (rmq_cmd_decode(&cmd, frame, len, &arena) != 0)
        return lerr_push(L);

    lua_createtable(L, 0, 10);
    set_int(L, "code", cmd.code);
    lua_pushstring(L, rmq_language_name(cmd.language));
    lua_setfield(L, -2, "language");
    set_int(L, "version", cmd.version);
    set_int(L, "opaque", cmd.opaque);
    set_int(L, "flag", cmd.flag);
    lua_pushstring(L, ser_names[cmd.serialize]);
    lua_setfield(L, -2, "serialize");
    if (cmd.remark.p != NULL) {
        lua_pushlstring(L, cmd.remark.p, cmd.remark.len);
        lua_setfield(L, -2, "remark");
    }
    if (cmd.ext != NULL) {
        lua_createtable(L, 0, (int)cmd.ext_count);
        for (uint32_t i = 0; i < cmd.ext_count; i++) {
            lua_pushlstring(L, cmd.ext[i].key.p, cmd.ext[i].key.len);
            lua_pushlstring(L, cmd.ext[i].val.p, cmd.ext[i].val.len);
            lua_rawset(L, -3);
        }
        lua_setfield(L, -2, "ext");
    }
    if (cmd.body != NULL) {
        lua_pushlstring(L, (const char *)cmd.body, cmd.body_len);
        lua_setfield(L, -2, "body");
    }
    return 1;
}

/* t[k] as an int32, or dflt when nil; raises on anything else. */
static int32_t
opt_int32(lua_State *L, const char *k, int32_t dflt)
{
    int isnum;
    lua_Integer v;
    int t = lua_getfield(L, 1, k);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return dflt;
    }
    v = lua_tointegerx(L, -1, &isnum);
    if (t != LUA_TNUMBER || !isnum || v < INT32_MIN || v > INT32_MAX) {
        lua_pushfstring(L, "field '%s' must be a 32-bit integer", k);
        luaL_argerror(L, 1, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    return (int32_t)v;
}

static int
field_cmp(const void *a, const void *b)
{
    const struct rmq_str *x = &((const struct rmq_field *)a)->key;
    const struct rmq_str *y = &((const struct rmq_field *)b)->key;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n > 0 ? memcmp(x->p, y->p, n) : 0;
    if (c != 0)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/*
 * Fills cmd->ext from the table at index `ext`.  The array is a userdata
 * and every converted string goes into an anchor table, both left on the
 * stack, so the pointers stay valid until encode is done.
 */
void
lcodec_read_ext(lua_State *L, int ext, struct rmq_cmd *cmd)
{
    uint32_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, ext) != 0) {
        lua_pop(L, 1);
        if (n == UINT32_MAX / sizeof(struct rmq_field))
            luaL_argerror(L, 1, "field 'ext' has too many entries");
        n++;
    }
    struct rmq_field *f =
        lua_newuserdatauv(L, n ? n * sizeof(struct rmq_field) : 1, 0);
    lua_createtable(L, (int)(n < 1024 ? 2 * n : 2048), 0);
    int anchor = lua_gettop(L);
    lua_Integer nanchor = 0;
    uint32_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, ext) != 0) {
        /* A __tostring may have added keys since the count. */
        if (i == n)
            luaL_argerror(L, 1, "field 'ext' changed while being encoded");
        size_t kl;
        size_t vl;
        const char *k;
        const char *v;
        if (lua_type(L, -2) == LUA_TSTRING) {
            k = lua_tolstring(L, -2, &kl);
        } else {
            k = luaL_tolstring(L, -2, &kl);
            lua_rawseti(L, anchor, ++nanchor);
        }
        if (lua_type(L, -1) == LUA_TSTRING) {
            v = lua_tolstring(L, -1, &vl);
        } else {
            v = luaL_tolstring(L, -1, &vl);
            lua_rawseti(L, anchor, ++nanchor);
        }
        if (kl > UINT32_MAX || vl > UINT32_MAX)
            luaL_argerror(L, 1, "field 'ext' has an oversized string");
        f[i].key.p = k;
        f[i].key.len = (uint32_t)kl;
        f[i].val.p = v;
        f[i].val.len = (uint32_t)vl;
        i++;
        lua_pop(L, 1);
    }
    qsort(f, i, sizeof(*f), field_cmp);
    cmd->ext = f;
    cmd->ext_count = i;
}

static int
l_encode(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.code = opt_int32(L, "code", 0);
    cmd.version = opt_int32(L, "version", RMQ_VERSION_409);
    cmd.opaque = opt_int32(L, "opaque", 0);
    cmd.flag = opt_int32(L, "flag", 0);

    /* From here on the values stay on the stack: cmd points into them. */
    size_t n = 0;
    const char *s;
    int t = lua_getfield(L, 1, "serialize");
    if (t == LUA_TNIL) {
        cmd.serialize = RMQ_SER_JSON;
    } else {
        s = t == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
        if (s != NULL && n == 4 && memcmp(s, "JSON", 4) == 0)
            cmd.serialize = RMQ_SER_JSON;
        else if (s != NULL && n == 8 && memcmp(s, "ROCKETMQ", 8) == 0)
            cmd.serialize = RMQ_SER_ROCKETMQ;
        else
            luaL_argerror(L, 1, "field 'serialize' must be \"JSON\" or "
                                "\"ROCKETMQ\"");
    }

    t = lua_getfield(L, 1, "language");
    if (t == LUA_TNIL) {
        cmd.language = RMQ_LANG_JAVA;
    } else if (t == LUA_TSTRING) {
        s = lua_tolstring(L, -1, &n);
        cmd.language = rmq_language_ordinal(s, n);
        if (cmd.language < 0)
            luaL_argerror(L, 1, "field 'language' is not a LanguageCode");
    } else {
        int isnum;
        lua_Integer v = lua_tointegerx(L, -1, &isnum);
        if (t != LUA_TNUMBER || !isnum || v < 0 || v >= RMQ_LANG_COUNT)
            luaL_argerror(L, 1, "field 'language' is not a LanguageCode");
        cmd.language = (int32_t)v;
    }

    t = lua_getfield(L, 1, "remark");
    if (t != LUA_TNIL) {
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_argerror(L, 1, "field 'remark' must be a string");
        s = lua_tolstring(L, -1, &n);
        if (n > UINT32_MAX)
            luaL_argerror(L, 1, "field 'remark' is too long");
        cmd.remark.p = s;
        cmd.remark.len = (uint32_t)n;
    }

    t = lua_getfield(L, 1, "body");
    if (t != LUA_TNIL) {
        if (t != LUA_TSTRING)
            luaL_argerror(L, 1, "field 'body' must be a string");
        s = lua_tolstring(L, -1, &n);
        if (n > UINT32_MAX)
            luaL_argerror(L, 1, "field 'body' is too long");
        if (n > 0) {
            cmd.body = (const uint8_t *)s;
            cmd.body_len = (uint32_t)n;
        }
    }

    t = lua_getfield(L, 1, "ext");
    if (t != LUA_TNIL) {
        if (t != LUA_TTABLE)
            luaL_argerror(L, 1, "field 'ext' must be a table");
        lcodec_read_ext(L, lua_gettop(L), &cmd);
    }

    size_t hdr;
    if (rmq_cmd_encoded_len(&cmd, &hdr) != 0)
        luaL_argerror(L, 1, err_msg());
    luaL_Buffer b;
    uint8_t *dst = (uint8_t *)luaL_buffinitsize(L, &b, hdr + cmd.body_len);
    rmq_cmd_encode_to(&cmd, dst, hdr);
    if (cmd.body_len > 0)
        memcpy(dst + hdr, cmd.body, cmd.body_len);
    luaL_pushresultsize(&b, hdr + cmd.body_len);
    return 1;
}

static int
l_peek(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_Integer max = luaL_optinteger(L, 2, RMQ_DEFAULT_MAX_FRAME);
    luaL_argcheck(L, max > 0, 2, "max_frame must be positive");
    size_t flen = 0;
    int rc = rmq_frame_peek((const uint8_t *)s, len, (size_t)max, &flen);
    if (rc < 0)
        return lerr_push(L);
    lua_pushinteger(L, rc == 1 ? (lua_Integer)flen : 0);
    return 1;
}

/** Opens `rmq.codec`: a table with decode, encode and peek. */
int
luaopen_rmq_codec(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"decode", l_decode},
        {"encode", l_encode},
        {"peek", l_peek},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_pushinteger(L, RMQ_DEFAULT_MAX_FRAME);
    lua_setfield(L, -2, "MAX_FRAME");
    return 1;
}
