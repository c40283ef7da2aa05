/*
 * l_message: the rmq.message module: RocketMQ's message formats for Lua,
 * the same C the store and the broker use (core/jstr.h for Java's
 * String rules, store/props.h for the properties string, commitlog.h for
 * the record), so the broker, the client library and the specs agree
 * with the store byte for byte.
 *
 *   message.java_hash(s) -> int32        String.hashCode over UTF-16 units
 *                                        (the consume queue's tags code)
 *
 * Properties (protocol.md 5.4; Java's string2messageProperties rules):
 *   message.decode_properties(s) -> {k = v}
 *   message.encode_properties({k = v}) -> s    keys sorted (String
 *       .compareTo), so the string is deterministic; empty values skipped
 *       (Java drops them on parse)
 *   message.property(s, key) -> value | nil
 *   message.edit_properties(s, {k1, v1, k2, v2, ...}) -> s'   sets each
 *       key (v a string) in place or appended in edit order, or removes
 *       it (v false); the other pairs stay as stored
 *   message.send_properties(props, cluster, keep_wait) -> stored, tags,
 *       wait, delay   one pass over a send's properties: the string a
 *       4.9.8 broker stores (empty values and, unless keep_wait, WAIT
 *       dropped; CLUSTER appended), the TAGS value (or nil), whether the
 *       producer waits for the flush (WAIT ~= "false"), the DELAY level
 *
 * Records (protocol.md 5.1, 5.6):
 *   message.decode_record(bytes [, pos]) -> rec, next | nil, err
 *       the commit log record at byte pos (1-based, default 1) under the
 *       store's validity rules (no CRC check); next is the position after
 *       it.  rec = {storeSize=, bodyCRC=, queueId=, flag=, queueOffset=,
 *       commitLogOffset=, sysFlag=, bornTimestamp=, bornHost="ip:port",
 *       storeTimestamp=, storeHost=, reconsumeTimes=,
 *       preparedTransactionOffset=, body= (as stored: compressed stays
 *       compressed), topic=, propertiesString=, properties={k = v},
 *       offsetMsgId=}
 *   message.offset_msg_id(storeHost, commitLogOffset) -> id
 *
 * Errors: misuse raises; a malformed record returns nil, err.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/jstr.h"
#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "lua/l_scratch.h"
#include "store/commitlog.h"
#include "store/props.h"

/* message.java_hash(s) -> int32                              [-1, +1, -] */
static int
lmsg_java_hash(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, java_hash(s, n));
    return 1;
}

/* {{{ Properties */

/* Pushes {k = v} of a properties string.                     [-0, +1, m] */
static void
push_props(lua_State *L, const char *p, size_t n)
{
    lua_createtable(L, 0, 4);
    size_t pos = 0;
    struct prop kv;
    while (props_next(p, n, &pos, &kv)) {
        lua_pushlstring(L, kv.k, kv.klen);
        lua_pushlstring(L, kv.v, kv.vlen);
        lua_rawset(L, -3);   /* a later duplicate wins, as in Java */
    }
}

/* message.decode_properties(s) -> {k = v}                    [-1, +1, m] */
static int
lmsg_decode_properties(lua_State *L)
{
    size_t n = 0;
    const char *p = luaL_optlstring(L, 1, "", &n);
    push_props(L, p, n);
    return 1;
}

/* message.property(s, key) -> value | nil                    [-2, +1, m] */
static int
lmsg_property(lua_State *L)
{
    size_t n, kl, vl;
    const char *p = luaL_checklstring(L, 1, &n);
    const char *k = luaL_checklstring(L, 2, &kl);
    const char *v = props_findn(p, n, k, kl, &vl);
    if (v != NULL)
        lua_pushlstring(L, v, vl);
    else
        lua_pushnil(L);
    return 1;
}

static int
cmp_keys(const void *a, const void *b)
{
    const struct prop *x = a, *y = b;
    return java_compare(x->k, x->klen, y->k, y->klen);
}

/* message.encode_properties({k = v}) -> s                    [-1, +1, m] */
static int
lmsg_encode_properties(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    /* Values as tostring() writes them, kept in a table so the pointers
     * below stay valid; the pairs themselves in a userdata (collected if
     * anything raises). */
    lua_newtable(L);                                       /* t vals */
    int count = 0;
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {                          /* t vals k v */
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_error(L, "property names must be strings");
        luaL_tolstring(L, -1, NULL);                       /* t vals k v s */
        lua_pushvalue(L, -3);                              /* t vals k v s k */
        lua_insert(L, -2);                                 /* t vals k v k s */
        lua_rawset(L, 2);                                  /* t vals k v */
        lua_pop(L, 1);
        count++;
    }
    struct prop *kv = lua_newuserdatauv(L, sizeof(*kv) * (size_t)(count > 0 ? count : 1), 0);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {                          /* t vals ud k s */
        size_t vl;
        const char *v = lua_tolstring(L, -1, &vl);
        lua_pop(L, 1);
        if (vl == 0)
            continue;  /* Java skips a null and drops an empty value */
        kv[n].k = lua_tolstring(L, -1, &kv[n].klen);
        kv[n].v = v;
        kv[n].vlen = vl;
        n++;
    }
    qsort(kv, (size_t)n, sizeof(*kv), cmp_keys);
    struct buf *b = l_scratch(L);
    for (int i = 0; i < n; i++) {
        if (props_put(b, kv[i].k, kv[i].klen, kv[i].v, kv[i].vlen) != 0) {
            l_scratch_done(b);
            return luaL_error(L, "out of memory");
        }
    }
    l_scratch_push(L, b, true);
    return 1;
}

/* message.edit_properties(s, {k1, v1|false, ...}) -> s'      [-2, +1, m] */
static int
lmsg_edit_properties(lua_State *L)
{
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer len = luaL_len(L, 2);
    if (len % 2 != 0)
        return luaL_argerror(L, 2, "edits are key, value pairs");
    if (len / 2 > PROPS_EDITS_MAX)
        return luaL_argerror(L, 2, "too many edits");
    struct prop edits[PROPS_EDITS_MAX];
    int ne = (int)(len / 2);
    for (int i = 0; i < ne; i++) {
        /* The strings stay referenced by the edits table. */
        if (lua_rawgeti(L, 2, 2 * i + 1) != LUA_TSTRING)
            return luaL_error(L, "edit %d: the property name is not a string", i + 1);
        edits[i].k = lua_tolstring(L, -1, &edits[i].klen);
        int t = lua_rawgeti(L, 2, 2 * i + 2);
        if (t == LUA_TSTRING) {
            edits[i].v = lua_tolstring(L, -1, &edits[i].vlen);
        } else if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
            edits[i].v = NULL;
            edits[i].vlen = 0;
        } else {
            return luaL_error(L, "edit %d (%s): the value must be a string or false",
                              i + 1, edits[i].k);
        }
        lua_pop(L, 2);
    }
    struct buf *b = l_scratch(L);
    int rc = props_edit(b, p, n, edits, ne);
    if (rc != 0) {
        l_scratch_done(b);
        return luaL_error(L, "%s", rc == -EINVAL ? err_msg() : "out of memory");
    }
    l_scratch_push(L, b, true);
    return 1;
}

/* message.send_properties(props, cluster, keep_wait)
 *     -> stored, tags | nil, wait, delay                     [-3, +4, m] */
static int
lmsg_send_properties(lua_State *L)
{
    size_t n, cl;
    const char *p = luaL_checklstring(L, 1, &n);
    const char *cluster = luaL_checklstring(L, 2, &cl);
    bool keep_wait = lua_toboolean(L, 3);
    struct buf *b = l_scratch(L);
    struct props_send f;
    if (props_for_store(b, p, n, cluster, cl, keep_wait, &f) != 0) {
        l_scratch_done(b);
        return luaL_error(L, "out of memory");
    }
    l_scratch_push(L, b, true);
    if (f.tags != NULL)
        lua_pushlstring(L, f.tags, f.tags_len);
    else
        lua_pushnil(L);
    lua_pushboolean(L, f.wait);
    lua_pushinteger(L, f.delay);
    return 4;
}

/* }}} */

/* {{{ Records */

static void
set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void
set_str(lua_State *L, const char *k, const void *p, size_t n)
{
    lua_pushlstring(L, p, n);
    lua_setfield(L, -2, k);
}

/* Sets rec[k] = "ip:port" of a record's host (address bytes, port). */
static void
set_host(lua_State *L, const char *k, const uint8_t *h, uint8_t len)
{
    char text[HOST_ADDR_TEXT_MAX];
    size_t n = host_addr_format(text, h, len, (int32_t)be32_get(h + len));
    set_str(L, k, text, n);
}

/* message.decode_record(bytes [, pos]) -> rec, next | nil, err  [-2, +2, m] */
static int
lmsg_decode_record(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_Integer pos = luaL_optinteger(L, 2, 1);
    luaL_argcheck(L, pos >= 1 && (size_t)pos <= n + 1, 2, "position out of range");
    const uint8_t *p = (const uint8_t *)s + pos - 1;
    size_t avail = n - (size_t)(pos - 1);
    struct clog_view v;
    if (clog_decode(p, avail, -1, false, &v) != CLOG_REC) {
        char why[96];
        if (avail < 8)
            snprintf(why, sizeof(why), "truncated record at byte %lld", (long long)(pos - 1));
        else
            snprintf(why, sizeof(why), "not a commit log record at byte %lld (size %d, magic %08X)",
                     (long long)(pos - 1), (int)be32_get(p), (unsigned)be32_get(p + 4));
        return lerr_pushstr(L, why);
    }
    lua_createtable(L, 0, 20);
    set_int(L, "storeSize", v.size);
    set_int(L, "bodyCRC", (int32_t)v.body_crc);
    set_int(L, "queueId", v.qid);
    set_int(L, "flag", v.flag);
    set_int(L, "queueOffset", v.qoff);
    set_int(L, "commitLogOffset", v.phy);
    set_int(L, "sysFlag", v.sysflag);
    set_int(L, "bornTimestamp", v.born_ts);
    set_host(L, "bornHost", v.born, v.born_len);
    set_int(L, "storeTimestamp", v.store_ts);
    set_host(L, "storeHost", v.storeh, v.store_len);
    set_int(L, "reconsumeTimes", v.reconsume);
    set_int(L, "preparedTransactionOffset", v.prep_tx_off);
    set_str(L, "body", v.body, v.body_len);
    set_str(L, "topic", v.topic, v.topic_len);
    set_str(L, "propertiesString", v.props, v.props_len);
    push_props(L, (const char *)v.props, v.props_len);
    lua_setfield(L, -2, "properties");
    struct host_addr sh;
    memcpy(sh.ip, v.storeh, v.store_len);
    sh.len = v.store_len;
    sh.port = (int32_t)be32_get(v.storeh + v.store_len);
    char id[64];
    set_str(L, "offsetMsgId", id, clog_msgid(id, &sh, v.phy));
    lua_pushinteger(L, pos + (lua_Integer)v.size);
    return 2;
}

/* message.offset_msg_id(storeHost, commitLogOffset) -> id    [-2, +1, m] */
static int
lmsg_offset_msg_id(lua_State *L)
{
    size_t n;
    const char *h = luaL_checklstring(L, 1, &n);
    struct host_addr a;
    if (host_addr_parse(h, n, &a) != 0)
        return luaL_error(L, "%s", err_msg());
    char id[64];
    size_t idn = clog_msgid(id, &a, (int64_t)luaL_checkinteger(L, 2));
    lua_pushlstring(L, id, idn);
    return 1;
}

/* }}} */

int
luaopen_rmq_message(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "java_hash", lmsg_java_hash },
        { "decode_properties", lmsg_decode_properties },
        { "encode_properties", lmsg_encode_properties },
        { "property", lmsg_property },
        { "edit_properties", lmsg_edit_properties },
        { "send_properties", lmsg_send_properties },
        { "decode_record", lmsg_decode_record },
        { "offset_msg_id", lmsg_offset_msg_id },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
