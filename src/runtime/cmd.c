/*
 * runtime/cmd: see cmd.h.
 *
 * A request is decoded into the host's scratch arena first, because the
 * exact size of its decoded strings is only known afterwards; then one
 * userdata of exactly that size receives the body and the arena, and the
 * pointers are moved over.  That keeps per-request garbage small.
 */
#include "runtime/cmd.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "runtime/host.h"
#include "core/rcbuf.h"
#include "store/access.h"

struct lcmd {
    struct rmq_cmd cmd;
    uint32_t arena_off;       /* where the moved arena starts in data */
    /* Lua aligns userdata to 8, as the field array in the arena needs;
     * the arena keeps its offset mod 8 from the malloc-aligned scratch. */
    _Alignas(8) uint8_t data[];  /* body, then the arena */
};

/* Uservalue slots of the userdata. */
#define UV_EXT 1
#define UV_BODY 2

static int
ensure_scratch(struct host *h, size_t need)
{
    if (h->scratch_cap >= need)
        return 0;
    size_t cap = h->scratch_cap ? h->scratch_cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(h->scratch, cap);
    if (p == NULL) {
        err_set("out of memory for a %zu-byte header", need);
        return -1;
    }
    h->scratch = p;
    h->scratch_cap = cap;
    return 0;
}

static const char *
move_ptr(const char *p, const uint8_t *from, size_t n, uint8_t *to)
{
    if (p == NULL)
        return NULL;
    const uint8_t *u = (const uint8_t *)p;
    if (u >= from && u < from + n)
        return (const char *)(to + (u - from));
    return p;  /* points into something else we copy separately */
}

int
lcmd_decode_head(struct host *h, const uint8_t *frame, size_t len,
                 struct rmq_cmd *cmd, size_t *used, const struct rmq_json_head *hd)
{
    if (len < 8) {
        err_set("frame of %zu bytes is too short", len);
        return -1;
    }
    size_t hlen = be32_get(frame + 4) & 0xFFFFFF;
    if (ensure_scratch(h, rmq_cmd_arena_size(hlen)) != 0)
        return -1;
    struct rmq_arena a = { h->scratch, h->scratch_cap, 0 };
    if (rmq_cmd_decode_head(cmd, frame, len, &a, hd) != 0)
        return -1;
    *used = a.used;
    return 0;
}

int
lcmd_decode(struct host *h, const uint8_t *frame, size_t len,
            struct rmq_cmd *cmd, size_t *used)
{
    return lcmd_decode_head(h, frame, len, cmd, used, NULL);
}

struct rmq_cmd *
lcmd_push_decoded(lua_State *L, struct host *h, const struct rmq_cmd *cmd,
                  size_t used)
{
    struct rmq_arena a = { h->scratch, h->scratch_cap, used };
    /* Align the arena copy for the field array inside it. */
    size_t off = (cmd->body_len + 7) & ~(size_t)7;
    struct lcmd *lc = lua_newuserdatauv(L, sizeof(*lc) + off + a.used, 2);
    lc->cmd = *cmd;
    lc->arena_off = (uint32_t)off;
    if (cmd->body_len > 0) {
        memcpy(lc->data, cmd->body, cmd->body_len);
        lc->cmd.body = lc->data;
    }
    uint8_t *arena = lc->data + off;
    memcpy(arena, a.p, a.used);
    lc->cmd.remark.p = move_ptr(cmd->remark.p, a.p, a.used, arena);
    if (cmd->ext != NULL) {
        lc->cmd.ext = (struct rmq_field *)(void *)move_ptr(
            (const char *)cmd->ext, a.p, a.used, arena);
        for (uint32_t i = 0; i < cmd->ext_count; i++) {
            struct rmq_field *f = &lc->cmd.ext[i];
            f->key.p = move_ptr(f->key.p, a.p, a.used, arena);
            f->val.p = move_ptr(f->val.p, a.p, a.used, arena);
        }
    }
    luaL_setmetatable(L, LCMD_TYPE);
    return &lc->cmd;
}

struct rmq_cmd *
lcmd_push_frame(lua_State *L, struct host *h, const uint8_t *frame,
                size_t len)
{
    struct rmq_cmd cmd;
    size_t used;
    if (lcmd_decode(h, frame, len, &cmd, &used) != 0)
        return NULL;
    return lcmd_push_decoded(L, h, &cmd, used);
}

static struct lcmd *
check_cmd(lua_State *L)
{
    return luaL_checkudata(L, 1, LCMD_TYPE);
}

static void
push_str(lua_State *L, const struct rmq_str *s)
{
    if (s->p == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, s->p, s->len);
}

/* cmd.ext: built once, then cached in the uservalue. [-0,+1,m] */
static void
push_ext(lua_State *L, struct lcmd *lc)
{
    if (lua_getiuservalue(L, 1, UV_EXT) == LUA_TTABLE)
        return;
    lua_pop(L, 1);
    lua_createtable(L, 0, (int)lc->cmd.ext_count);
    for (uint32_t i = 0; i < lc->cmd.ext_count; i++) {
        push_str(L, &lc->cmd.ext[i].key);
        push_str(L, &lc->cmd.ext[i].val);
        lua_rawset(L, -3);
    }
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, UV_EXT);
}

/* cmd:get(key) -> string|nil: one extField, no table. */
static int
lcmd_get(lua_State *L)
{
    struct lcmd *lc = check_cmd(L);
    size_t kl;
    const char *k = luaL_checklstring(L, 2, &kl);
    const struct rmq_str *v = rmq_cmd_field(&lc->cmd, k, kl);
    if (v == NULL)
        lua_pushnil(L);
    else
        push_str(L, v);
    return 1;
}

/* cmd:fields(k1, k2, ...) -> v1, v2, ...: several extFields in one call
 * (the send path reads a dozen; this saves building the ext table). */
static int
lcmd_fields(lua_State *L)
{
    struct lcmd *lc = check_cmd(L);
    int n = lua_gettop(L) - 1;
    luaL_checkstack(L, n, "too many fields");
    for (int i = 2; i <= n + 1; i++) {
        size_t kl;
        const char *k = luaL_checklstring(L, i, &kl);
        const struct rmq_str *v = rmq_cmd_field(&lc->cmd, k, kl);
        if (v == NULL)
            lua_pushnil(L);
        else
            push_str(L, v);
    }
    return n;
}

static int
lcmd_index(lua_State *L)
{
    struct lcmd *lc = check_cmd(L);
    const char *k = luaL_checkstring(L, 2);
    const struct rmq_cmd *c = &lc->cmd;
    switch (k[0]) {
    case 'b':
        if (strcmp(k, "body") == 0) {
            if (c->body_len == 0) {
                lua_pushnil(L);
            } else if (lua_getiuservalue(L, 1, UV_BODY) != LUA_TSTRING) {
                lua_pop(L, 1);
                lua_pushlstring(L, (const char *)c->body, c->body_len);
                lua_pushvalue(L, -1);
                lua_setiuservalue(L, 1, UV_BODY);
            }
            return 1;
        }
        if (strcmp(k, "body_len") == 0) {
            lua_pushinteger(L, c->body_len);
            return 1;
        }
        break;
    case 'c':
        if (strcmp(k, "code") == 0) {
            lua_pushinteger(L, c->code);
            return 1;
        }
        break;
    case 'e':
        if (strcmp(k, "ext") == 0) {
            push_ext(L, lc);
            return 1;
        }
        break;
    case 'f':
        if (strcmp(k, "flag") == 0) {
            lua_pushinteger(L, c->flag);
            return 1;
        }
        if (strcmp(k, "fields") == 0) {
            lua_pushcfunction(L, lcmd_fields);
            return 1;
        }
        break;
    case 'g':
        if (strcmp(k, "get") == 0) {
            lua_pushcfunction(L, lcmd_get);
            return 1;
        }
        break;
    case 'l':
        if (strcmp(k, "language") == 0) {
            lua_pushstring(L, rmq_language_name(c->language));
            return 1;
        }
        break;
    case 'o':
        if (strcmp(k, "opaque") == 0) {
            lua_pushinteger(L, c->opaque);
            return 1;
        }
        if (strcmp(k, "oneway") == 0) {
            lua_pushboolean(L, (c->flag & RMQ_RPC_ONEWAY) != 0);
            return 1;
        }
        break;
    case 'r':
        if (strcmp(k, "remark") == 0) {
            push_str(L, &c->remark);
            return 1;
        }
        if (strcmp(k, "response") == 0) {
            lua_pushboolean(L, (c->flag & RMQ_RPC_RESPONSE) != 0);
            return 1;
        }
        break;
    case 's':
        if (strcmp(k, "serialize") == 0) {
            lua_pushstring(L, c->serialize == RMQ_SER_ROCKETMQ ? "ROCKETMQ" : "JSON");
            return 1;
        }
        break;
    case 'v':
        if (strcmp(k, "version") == 0) {
            lua_pushinteger(L, c->version);
            return 1;
        }
        break;
    default:
        break;
    }
    lua_pushnil(L);
    return 1;
}

static int
lcmd_tostring(lua_State *L)
{
    struct lcmd *lc = check_cmd(L);
    lua_pushfstring(L, "rmq.cmd{code=%d, opaque=%d, flag=%d, body=%d bytes}",
                    (int)lc->cmd.code, (int)lc->cmd.opaque, (int)lc->cmd.flag,
                    (int)lc->cmd.body_len);
    return 1;
}

static void keycache_register(lua_State *L);

static const char values_key = 'v';   /* registry: the state's lcmd_values */

void
lcmd_set_values(lua_State *L, const struct lcmd_values *v)
{
    lua_pushlightuserdata(L, (void *)v);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &values_key);
}

void
lcmd_register(lua_State *L)
{
    if (luaL_newmetatable(L, LCMD_TYPE)) {
        lua_pushcfunction(L, lcmd_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lcmd_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    keycache_register(L);
}

/* {{{ Encoding tables */

/*
 * A reply table is read in one lua_next pass.  Its keys are short
 * strings, which Lua interns: the same name always has the same address,
 * so a key is recognised by comparing pointers with the names anchored
 * here, with no hashing per field.
 */
enum field_key {
    K_CODE, K_VERSION, K_FLAG, K_OPAQUE, K_SERIALIZE, K_LANGUAGE, K_REMARK,
    K_BODY, K_EXT, K_CREDENTIALS, K_COUNT
};

static const char *const field_names[K_COUNT] = {
    "code", "version", "flag", "opaque", "serialize", "language", "remark",
    "body", "ext", "credentials",
};

struct keycache {
    const char *p[K_COUNT];
};

static const char keycache_key = 'k';

/* Creates the per-state cache; the strings live in its uservalue. */
static void
keycache_register(lua_State *L)
{
    struct keycache *kc = lua_newuserdatauv(L, sizeof(*kc), 1);
    lua_createtable(L, K_COUNT, 0);
    for (int i = 0; i < K_COUNT; i++) {
        lua_pushstring(L, field_names[i]);
        kc->p[i] = lua_tostring(L, -1);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setiuservalue(L, -2, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &keycache_key);
}

static int
key_of(const struct keycache *kc, const char *k)
{
    for (int i = 0; i < K_COUNT; i++)
        if (kc->p[i] == k)
            return i;
    return -1;
}

static int
to_int32(lua_State *L, int idx, const char *name, int32_t *out)
{
    if (!lua_isinteger(L, idx)) {
        err_set("field '%s' must be an integer, got %s", name,
                luaL_typename(L, idx));
        return -1;
    }
    lua_Integer v = lua_tointeger(L, idx);
    if (v < INT32_MIN || v > INT32_MAX) {
        err_set("field '%s' out of int32 range", name);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int
to_str(lua_State *L, int idx, const char *name, struct rmq_str *out)
{
    if (lua_type(L, idx) != LUA_TSTRING) {
        err_set("field '%s' must be a string, got %s", name,
                luaL_typename(L, idx));
        return -1;
    }
    size_t n;
    out->p = lua_tolstring(L, idx, &n);
    out->len = (uint32_t)n;
    return 0;
}

/* extFields of the table at `ext` into h->fields; values converted to
 * strings stay on the stack (the caller restores the top). */
static int
read_ext(lua_State *L, int ext, struct host *h, struct rmq_cmd *c)
{
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, ext) != 0) {
        n++;
        lua_pop(L, 1);
    }
    if (n > h->fields_cap) {
        struct rmq_field *f = realloc(h->fields, n * sizeof(*f));
        if (f == NULL) {
            err_set("out of memory for %zu header fields", n);
            return -1;
        }
        h->fields = f;
        h->fields_cap = n;
    }
    if (n == 0)
        return 0;  /* c->ext already points at an empty array */
    c->ext = h->fields;
    if (!lua_checkstack(L, (int)(2 * n + 8))) {
        err_set("too many header fields (%zu)", n);
        return -1;
    }
    /* Each step leaves key and value on the stack (keeping the strings
     * alive) and pushes a copy of the key for lua_next. */
    lua_pushnil(L);
    while (lua_next(L, ext) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            err_set("ext keys must be strings, got %s", luaL_typename(L, -2));
            return -1;
        }
        int vt = lua_type(L, -1);
        if (vt == LUA_TBOOLEAN) {
            lua_pushstring(L, lua_toboolean(L, -1) ? "true" : "false");
            lua_replace(L, -2);
        } else if (vt != LUA_TSTRING && vt != LUA_TNUMBER) {
            err_set("ext value for '%s' must be a string, number or "
                    "boolean, got %s", lua_tostring(L, -2),
                    lua_typename(L, vt));
            return -1;
        }
        struct rmq_field *f = &c->ext[c->ext_count++];
        size_t kl, vl;
        f->key.p = lua_tolstring(L, -2, &kl);
        f->key.len = (uint32_t)kl;
        f->val.p = lua_tolstring(L, -1, &vl);  /* a number becomes text here */
        f->val.len = (uint32_t)vl;
        lua_pushvalue(L, -2);
    }
    return 0;
}

/* Signs request c when it has credentials of its own (cred_idx, 0: the
 * field is absent) or the state has a default: room for the fields the
 * signature adds, then lcred_sign.  The strings stay on the stack. */
static int
sign_request(lua_State *L, const struct lcmd_values *vals, int cred_idx, struct host *h,
             struct rmq_cmd *c)
{
    if (cred_idx != 0 && lua_type(L, cred_idx) == LUA_TBOOLEAN &&
        !lua_toboolean(L, cred_idx))
        return 0;  /* credentials = false */
    if (vals == NULL || vals->cred_find == NULL || vals->cred_sign == NULL) {
        if (cred_idx == 0)
            return 0;  /* nothing to sign with, nothing asked */
        err_set("this state cannot sign requests");
        return -1;
    }
    int creds = vals->cred_find(L, cred_idx);
    if (creds <= 0)
        return creds;
    size_t need = (size_t)c->ext_count + vals->cred_extra_fields;
    if (need > h->fields_cap) {
        /* c->ext is h->fields or an empty array: realloc keeps entries. */
        struct rmq_field *f = realloc(h->fields, need * sizeof(*f));
        if (f == NULL) {
            err_set("out of memory for %zu header fields", need);
            return -1;
        }
        h->fields = f;
        h->fields_cap = need;
    }
    c->ext = h->fields;
    return vals->cred_sign(L, creds, c);
}

static int encode_table(lua_State *L, int idx, struct host *h,
                        const struct rmq_cmd *base, int reply,
                        const uint8_t **body, size_t *blen,
                        const struct store_slices **slices,
                        struct rcbuf **shared);

int
lcmd_encode_table(lua_State *L, int idx, struct host *h,
                  const struct rmq_cmd *base, int reply,
                  const uint8_t **body, size_t *blen)
{
    return encode_table(L, idx, h, base, reply, body, blen, NULL, NULL);
}

const struct buf *
lcmd_encoded(struct host *h)
{
    return &h->enc;
}

int
lcmd_encode_reply(lua_State *L, int idx, struct host *h,
                  const struct rmq_cmd *base, const uint8_t **body,
                  size_t *blen, const struct store_slices **slices,
                  struct rcbuf **shared)
{
    *slices = NULL;
    *shared = NULL;
    return encode_table(L, idx, h, base, 1, body, blen, slices, shared);
}

static int
encode_table(lua_State *L, int idx, struct host *h,
             const struct rmq_cmd *base, int reply,
             const uint8_t **body, size_t *blen,
             const struct store_slices **slices, struct rcbuf **shared)
{
    idx = lua_absindex(L, idx);
    int top = lua_gettop(L);
    struct rmq_cmd c = *base;
    struct rmq_field no_fields;  /* non-NULL ext with no entries: "{}" */
    c.remark.p = NULL;
    c.remark.len = 0;
    c.ext = NULL;
    c.ext_count = 0;
    c.body = NULL;
    c.body_len = 0;
    c.language = RMQ_LANG_JAVA;
    c.version = RMQ_VERSION_409;
    int rc = -1;
    int ext_idx = 0;
    int cred_idx = 0;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &keycache_key);
    const struct keycache *kc = lua_touserdata(L, -1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &values_key);
    const struct lcmd_values *vals = lua_touserdata(L, -1);
    lua_pop(L, 2);  /* anchored in the registry; vals is a static */
    /* Values stay on the stack while the strings in them are in use. */
    if (!lua_checkstack(L, 2 * K_COUNT + 4)) {
        err_set("stack overflow encoding a command");
        goto out;
    }
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        int k = lua_type(L, -2) == LUA_TSTRING
                    ? key_of(kc, lua_tostring(L, -2)) : -1;
        int bad = 0;
        struct rmq_str s;
        switch (k) {
        case K_CODE:
            bad = to_int32(L, -1, "code", &c.code);
            break;
        case K_VERSION:
            bad = to_int32(L, -1, "version", &c.version);
            break;
        case K_FLAG:
            if (!reply)
                bad = to_int32(L, -1, "flag", &c.flag);
            break;
        case K_OPAQUE:
            if (!reply)
                bad = to_int32(L, -1, "opaque", &c.opaque);
            break;
        case K_SERIALIZE:
            if (reply)
                break;
            if ((bad = to_str(L, -1, "serialize", &s)) != 0)
                break;
            if (strcmp(s.p, "ROCKETMQ") == 0) {
                c.serialize = RMQ_SER_ROCKETMQ;
            } else if (strcmp(s.p, "JSON") == 0) {
                c.serialize = RMQ_SER_JSON;
            } else {
                err_set("serialize must be \"JSON\" or \"ROCKETMQ\"");
                bad = -1;
            }
            break;
        case K_LANGUAGE:
            if ((bad = to_str(L, -1, "language", &s)) == 0) {
                int32_t o = rmq_language_ordinal(s.p, s.len);
                c.language = o >= 0 ? o : RMQ_LANG_OTHER;
            }
            break;
        case K_REMARK:
            bad = to_str(L, -1, "remark", &c.remark);
            break;
        case K_BODY: {
            const struct store_slices *recs = slices != NULL && vals != NULL && vals->records != NULL
                ? vals->records(L, -1) : NULL;
            struct rcbuf *rb = vals != NULL && vals->rcbuf != NULL ? vals->rcbuf(L, -1) : NULL;
            if (rb != NULL) {
                /* A shared body (l_rcbuf.h): queued by reference when
                 * the caller takes it, else copied like a string. */
                if (rb->len > UINT32_MAX - 1024) {
                    err_set("body of %zu bytes is too large", rb->len);
                    bad = -1;
                    break;
                }
                c.body = rb->data;
                c.body_len = (uint32_t)rb->len;
                if (shared != NULL)
                    *shared = rb;
            } else if (recs != NULL) {
                /* Records from the store: copied once, at send time. */
                *slices = recs;
                c.body = NULL;
                c.body_len = (uint32_t)recs->bytes;
            } else if ((bad = to_str(L, -1, "body", &s)) == 0) {
                c.body = (const uint8_t *)s.p;
                c.body_len = s.len;
            }
            break;
        }
        case K_CREDENTIALS:
            /* A request's own credentials (a table), or false: unsigned
             * even when the state has a default (l_credentials.h). */
            if (reply) {
                err_set("a reply cannot carry credentials");
                bad = -1;
            } else {
                cred_idx = lua_gettop(L);
            }
            break;
        case K_EXT:
            if (lua_type(L, -1) != LUA_TTABLE) {
                err_set("field 'ext' must be a table, got %s",
                        luaL_typename(L, -1));
                bad = -1;
            } else {
                ext_idx = lua_gettop(L);
            }
            break;
        default:
            err_set("unknown command field '%s'", luaL_tolstring(L, -2, NULL));
            bad = -1;
            break;
        }
        if (bad)
            goto out;
        /* Keep the value (its string is in use), re-push the key. */
        lua_pushvalue(L, -2);
    }
    if (ext_idx != 0) {
        c.ext = &no_fields;
        if (read_ext(L, ext_idx, h, &c) != 0)
            goto out;
    }
    if (!reply && sign_request(L, vals, cred_idx, h, &c) != 0)
        goto out;
    *body = c.body;
    *blen = c.body_len;
    buf_reset(&h->enc);
    if (rmq_cmd_encode(&c, &h->enc) != 0)
        goto out;
    rc = 0;
out:
    lua_settop(L, top);
    return rc;
}

/* }}} */
