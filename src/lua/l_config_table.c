/*
 * l_config_table: the broker's shared topic and subscription-group tables
 * (broker/config_table.h) as the Lua module `rmq.config_table`.  Thin
 * adapters: records are converted between plain Lua tables and C structs;
 * every copy out of a table is taken under its lock into memory Lua owns
 * (a userdata block), and Lua objects are built only after the lock is
 * released.  What a topic or group *means* is decided in
 * lua/rmq/broker/topics.lua and groups.lua.
 *
 *   local ct = require "rmq.config_table"
 *   local t = ct.topics()            -- or ct.groups(): the process-wide tables
 *   ct.new_topics(), ct.new_groups()  private tables (encoders for specs)
 *   t:get(name) -> cfg | nil          t:put(cfg [, if_absent [, quiet]]) -> changed
 *   t:del(name) -> bool               t:count(), t:version(), t:clear()
 *   t:removals() -> n                 (deletes and clears so far)
 *   t:journal_open(path [, valid])     the file and journal writer after a load
 *   t:journal_append() -> true, version | nil, err
 *   t:journal_save(path, force) -> true, version | nil, err
 *   t:journal_mark()                  (broker/config_journal.h: the one writer of
 *                                      PATH and PATH.journal, from any thread)
 *   t:all() -> {name = cfg}           t:names([since]) -> {name, ...}, version
 *   t:data_version() -> {counter=, timestamp=}
 *   t:set_data_version(dv)            t:bump()
 *   t:encode_wrapper() -> json        (topics.json / subscriptionGroup.json,
 *                                      GET_ALL_* bodies, Java's order)
 *   t:shared_wrapper() -> rcbuf       the same bytes, encoded once per
 *                                      table generation, shared (l_rcbuf.h)
 *   t:encodes() -> n                  encodings shared_wrapper() made
 *   topics only:
 *   t:register_body(compressed, perm, since [, offset, limit])
 *       -> body, topic count, version
 *       the REGISTER_BROKER body with the topics changed after version
 *       `since` (0: all); perm >= 0 replaces every topic's permission;
 *       offset/limit: that part of the table in its order (split
 *       registration)
 *
 * A topic cfg is {topicName=, readQueueNums=, writeQueueNums=, perm=,
 * topicFilterType="SINGLE_TAG"|"MULTI_TAG", topicSysFlag=, order=}; a
 * group cfg is SubscriptionGroupConfig's fields.  put() raises on a cfg
 * whose fields have the wrong type or range: callers normalise first.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "broker/config_journal.h"
#include "broker/config_table.h"
#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "core/buf.h"
#include "lua/l_err.h"
#include "lua/l_jstats.h"
#include "lua/l_modules.h"
#include "lua/l_rcbuf.h"
#include "lua/l_scratch.h"
#include "core/fjson.h"
#include "rmq_codes.h"

#define LCT_TYPE "rmq.config_table"

enum kind { KIND_TOPICS, KIND_GROUPS };

struct lct {
    struct config_table *t;
    struct config_journal *j;  /* its file's writer (config_journal.h) */
    enum kind kind;
    bool owned;                /* a private table (ct.new_topics()), freed by __gc */
};

static struct lct *
check_ct(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lct, t, LCT_TYPE, "the table is gone");
}

/* {{{ Records <-> tables */

static lua_Integer
int_field(lua_State *L, int idx, const char *key, lua_Integer dflt,
          lua_Integer min, lua_Integer max)
{
    int t = lua_getfield(L, idx, key);
    lua_Integer v = dflt;
    if (t != LUA_TNIL) {
        int ok = 0;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok || t != LUA_TNUMBER)
            luaL_error(L, "field %s must be an integer", key);
        if (v < min || v > max)
            luaL_error(L, "field %s out of range", key);
    }
    lua_pop(L, 1);
    return v;
}

static bool
bool_field(lua_State *L, int idx, const char *key, bool dflt)
{
    int t = lua_getfield(L, idx, key);
    bool v = t == LUA_TNIL ? dflt : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static const char *
name_field(lua_State *L, int idx, const char *key, size_t *len)
{
    if (lua_getfield(L, idx, key) != LUA_TSTRING)
        luaL_error(L, "field %s must be a string", key);
    const char *s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);  /* still referenced by the table */
    if (*len == 0)
        luaL_error(L, "field %s must not be empty", key);
    return s;
}

static void
to_topic(lua_State *L, int idx, struct topic_config *c)
{
    memset(c, 0, sizeof(*c));
    c->read_queue_nums = (int32_t)int_field(L, idx, "readQueueNums", 16, 0, INT32_MAX);
    c->write_queue_nums = (int32_t)int_field(L, idx, "writeQueueNums", 16, 0, INT32_MAX);
    c->perm = (int32_t)int_field(L, idx, "perm", RMQ_PERM_READ | RMQ_PERM_WRITE, 0, 15);
    c->topic_sys_flag = (int32_t)int_field(L, idx, "topicSysFlag", 0, INT32_MIN, INT32_MAX);
    c->order = bool_field(L, idx, "order", false);
    if (lua_getfield(L, idx, "topicFilterType") == LUA_TSTRING &&
        strcmp(lua_tostring(L, -1), "MULTI_TAG") == 0)
        c->filter_type = TOPIC_MULTI_TAG;
    lua_pop(L, 1);
    /* 5.x attributes: {["message.type"]=, ["queue.type"]=,
     * ["cleanup.policy"]=}; which values are allowed is the caller's
     * rule (rmq.broker.topics), what can be stored is this. */
    if (lua_getfield(L, idx, "attributes") == LUA_TTABLE) {
        int at = lua_gettop(L);
        size_t n;
        if (lua_getfield(L, at, "message.type") == LUA_TSTRING) {
            const char *v = lua_tolstring(L, -1, &n);
            c->message_type = topic_msg_type_parse(v, n);
            if (c->message_type == 0)
                luaL_error(L, "attribute message.type: unknown value %s", v);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, at, "queue.type") == LUA_TSTRING) {
            if (strcmp(lua_tostring(L, -1), "SimpleCQ") != 0)
                luaL_error(L, "attribute queue.type: only SimpleCQ is stored");
            c->attr_flags |= TOPIC_ATTR_SIMPLE_CQ;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, at, "cleanup.policy") == LUA_TSTRING) {
            if (strcmp(lua_tostring(L, -1), "DELETE") != 0)
                luaL_error(L, "attribute cleanup.policy: only DELETE is stored");
            c->attr_flags |= TOPIC_ATTR_CLEANUP_DELETE;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void
push_topic(lua_State *L, const char *name, size_t nlen, const struct topic_config *c)
{
    lua_createtable(L, 0, 7);
    lua_pushlstring(L, name, nlen);
    lua_setfield(L, -2, "topicName");
    lua_pushinteger(L, c->read_queue_nums);
    lua_setfield(L, -2, "readQueueNums");
    lua_pushinteger(L, c->write_queue_nums);
    lua_setfield(L, -2, "writeQueueNums");
    lua_pushinteger(L, c->perm);
    lua_setfield(L, -2, "perm");
    lua_pushstring(L, topic_filter_name(c->filter_type));
    lua_setfield(L, -2, "topicFilterType");
    lua_pushinteger(L, c->topic_sys_flag);
    lua_setfield(L, -2, "topicSysFlag");
    lua_pushboolean(L, c->order);
    lua_setfield(L, -2, "order");
    if (c->message_type != 0 || c->attr_flags != 0) {
        lua_createtable(L, 0, 3);
        const char *mt = topic_msg_type_name(c->message_type);
        if (mt != NULL) {
            lua_pushstring(L, mt);
            lua_setfield(L, -2, "message.type");
        }
        if (c->attr_flags & TOPIC_ATTR_SIMPLE_CQ) {
            lua_pushliteral(L, "SimpleCQ");
            lua_setfield(L, -2, "queue.type");
        }
        if (c->attr_flags & TOPIC_ATTR_CLEANUP_DELETE) {
            lua_pushliteral(L, "DELETE");
            lua_setfield(L, -2, "cleanup.policy");
        }
        lua_setfield(L, -2, "attributes");
    }
}

static void
to_group(lua_State *L, int idx, struct subscription_group *g)
{
    memset(g, 0, sizeof(*g));
    g->broker_id = int_field(L, idx, "brokerId", 0, INT32_MIN, INT32_MAX);
    g->retry_max_times = (int32_t)int_field(L, idx, "retryMaxTimes", 16, INT32_MIN, INT32_MAX);
    g->retry_queue_nums = (int32_t)int_field(L, idx, "retryQueueNums", 1, INT32_MIN, INT32_MAX);
    g->which_broker_when_consume_slowly =
        int_field(L, idx, "whichBrokerWhenConsumeSlowly", 1, INT32_MIN, INT32_MAX);
    g->consume_broadcast_enable = bool_field(L, idx, "consumeBroadcastEnable", true);
    g->consume_enable = bool_field(L, idx, "consumeEnable", true);
    g->consume_from_min_enable = bool_field(L, idx, "consumeFromMinEnable", true);
    g->notify_consumer_ids_changed_enable =
        bool_field(L, idx, "notifyConsumerIdsChangedEnable", true);
    /* The 5.x fields, already checked by rmq.broker.groups (normalize):
     * here only what the record can hold. */
    int t = lua_getfield(L, idx, "consumeMessageOrderly");
    if (t != LUA_TNIL) {
        g->v5 = true;
        g->consume_message_orderly = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "groupRetryPolicy") == LUA_TTABLE) {
        int rp = lua_gettop(L);
        struct group_retry_policy *r = &g->retry;
        g->v5 = true;
        if (lua_getfield(L, rp, "type") == LUA_TSTRING &&
            strcmp(lua_tostring(L, -1), "EXPONENTIAL") == 0)
            r->type = GROUP_RETRY_EXPONENTIAL;
        lua_pop(L, 1);
        if (lua_getfield(L, rp, "exponentialRetryPolicy") == LUA_TTABLE) {
            int e = lua_gettop(L);
            r->has_exponential = true;
            r->initial = int_field(L, e, "initial", 5000, 0, INT64_MAX);
            r->max = int_field(L, e, "max", 7200000, 0, INT64_MAX);
            r->multiplier = int_field(L, e, "multiplier", 2, 0, INT64_MAX);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, rp, "customizedRetryPolicy") == LUA_TTABLE) {
            int cp = lua_gettop(L);
            r->has_customized = true;
            if (lua_getfield(L, cp, "next") == LUA_TTABLE) {
                lua_Integer n = luaL_len(L, -1);
                if (n > GROUP_RETRY_NEXT_MAX)
                    luaL_error(L, "customizedRetryPolicy.next: at most %d levels",
                               GROUP_RETRY_NEXT_MAX);
                for (lua_Integer i = 1; i <= n; i++) {
                    int ok = 0;
                    lua_geti(L, -1, i);
                    lua_Integer v = lua_tointegerx(L, -1, &ok);
                    if (!ok || v < 0)
                        luaL_error(L, "customizedRetryPolicy.next: levels are milliseconds >= 0");
                    r->next[i - 1] = v;
                    lua_pop(L, 1);
                }
                r->next_count = (uint8_t)n;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void
push_retry(lua_State *L, const struct group_retry_policy *r)
{
    lua_createtable(L, 0, 3);
    lua_pushstring(L, r->type == GROUP_RETRY_EXPONENTIAL ? "EXPONENTIAL" : "CUSTOMIZED");
    lua_setfield(L, -2, "type");
    if (r->has_exponential) {
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, r->initial);
        lua_setfield(L, -2, "initial");
        lua_pushinteger(L, r->max);
        lua_setfield(L, -2, "max");
        lua_pushinteger(L, r->multiplier);
        lua_setfield(L, -2, "multiplier");
        lua_setfield(L, -2, "exponentialRetryPolicy");
    }
    if (r->has_customized) {
        lua_createtable(L, 0, 1);
        lua_createtable(L, r->next_count, 0);
        for (unsigned i = 0; i < r->next_count; i++) {
            lua_pushinteger(L, r->next[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, "next");
        lua_setfield(L, -2, "customizedRetryPolicy");
    }
}

static void
push_group(lua_State *L, const char *name, size_t nlen,
           const struct subscription_group *g)
{
    lua_createtable(L, 0, 9);
    lua_pushlstring(L, name, nlen);
    lua_setfield(L, -2, "groupName");
    lua_pushinteger(L, g->broker_id);
    lua_setfield(L, -2, "brokerId");
    lua_pushinteger(L, g->retry_max_times);
    lua_setfield(L, -2, "retryMaxTimes");
    lua_pushinteger(L, g->retry_queue_nums);
    lua_setfield(L, -2, "retryQueueNums");
    lua_pushinteger(L, g->which_broker_when_consume_slowly);
    lua_setfield(L, -2, "whichBrokerWhenConsumeSlowly");
    lua_pushboolean(L, g->consume_broadcast_enable);
    lua_setfield(L, -2, "consumeBroadcastEnable");
    lua_pushboolean(L, g->consume_enable);
    lua_setfield(L, -2, "consumeEnable");
    lua_pushboolean(L, g->consume_from_min_enable);
    lua_setfield(L, -2, "consumeFromMinEnable");
    lua_pushboolean(L, g->notify_consumer_ids_changed_enable);
    lua_setfield(L, -2, "notifyConsumerIdsChangedEnable");
    if (g->v5) {
        lua_pushboolean(L, g->consume_message_orderly);
        lua_setfield(L, -2, "consumeMessageOrderly");
        push_retry(L, &g->retry);
        lua_setfield(L, -2, "groupRetryPolicy");
    }
}

static void
push_record(lua_State *L, enum kind k, const char *name, size_t nlen, const void *rec)
{
    if (k == KIND_TOPICS)
        push_topic(L, name, nlen, rec);
    else
        push_group(L, name, nlen, rec);
}

/* }}} */

/* {{{ Snapshots into Lua-owned memory */

/* Pushes a userdata holding a snapshot of the entries changed after
 * `since` and returns it.  [-0, +1, m] */
static struct config_snapshot *
push_snapshot(lua_State *L, struct config_table *t, uint64_t since)
{
    size_t cap = config_table_snapshot(t, since, NULL, 0);
    for (;;) {
        void *block = lua_newuserdatauv(L, cap, 0);
        size_t need = config_table_snapshot(t, since, block, cap);
        if (need <= cap)
            return block;
        lua_pop(L, 1);  /* it grew meanwhile */
        cap = need + need / 8;
    }
}

/* }}} */

static int
lct_get(lua_State *L)
{
    struct lct *c = check_ct(L);
    size_t nlen;
    const char *name = luaL_checklstring(L, 2, &nlen);
    union {
        struct topic_config t;
        struct subscription_group g;
    } rec;
    if (config_table_get(c->t, name, nlen, &rec) != 0) {
        lua_pushnil(L);
        return 1;
    }
    push_record(L, c->kind, name, nlen, &rec);
    return 1;
}

static int
lct_put(lua_State *L)
{
    struct lct *c = check_ct(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    int flags = (lua_toboolean(L, 3) ? CT_IF_ABSENT : 0) |
                (lua_toboolean(L, 4) ? CT_QUIET : 0);
    size_t nlen;
    union {
        struct topic_config t;
        struct subscription_group g;
    } rec;
    const char *name;
    if (c->kind == KIND_TOPICS) {
        name = name_field(L, 2, "topicName", &nlen);
        to_topic(L, 2, &rec.t);
    } else {
        name = name_field(L, 2, "groupName", &nlen);
        to_group(L, 2, &rec.g);
    }
    int rc = config_table_put(c->t, name, nlen, &rec, flags);
    if (rc < 0)
        return luaL_error(L, "out of memory");
    lua_pushboolean(L, rc == 1);
    return 1;
}

static int
lct_del(lua_State *L)
{
    struct lct *c = check_ct(L);
    size_t nlen;
    const char *name = luaL_checklstring(L, 2, &nlen);
    lua_pushboolean(L, config_table_del(c->t, name, nlen) == 1);
    return 1;
}

static int
lct_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)config_table_count(check_ct(L)->t));
    return 1;
}

static int
lct_hash_stats(lua_State *L)
{
    struct jmap_stats st;
    config_table_hash_stats(check_ct(L)->t, &st);
    l_push_jmap_stats(L, &st);
    return 1;
}

static int
lct_version(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)config_table_gen(check_ct(L)->t));
    return 1;
}

static int
lct_removals(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)config_table_removals(check_ct(L)->t));
    return 1;
}

static int
lct_clear(lua_State *L)
{
    config_table_clear(check_ct(L)->t);
    return 0;
}

static void
push_dv(lua_State *L, struct data_version dv)
{
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, dv.counter);
    lua_setfield(L, -2, "counter");
    lua_pushinteger(L, dv.timestamp);
    lua_setfield(L, -2, "timestamp");
}

static int
lct_data_version(lua_State *L)
{
    push_dv(L, config_table_data_version(check_ct(L)->t));
    return 1;
}

static int
lct_set_data_version(lua_State *L)
{
    struct lct *c = check_ct(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct data_version dv;
    dv.counter = int_field(L, 2, "counter", 0, INT64_MIN, INT64_MAX);
    dv.timestamp = int_field(L, 2, "timestamp", 0, INT64_MIN, INT64_MAX);
    config_table_set_data_version(c->t, dv);
    return 0;
}

static int
lct_bump(lua_State *L)
{
    config_table_bump(check_ct(L)->t);
    return 0;
}

static uint64_t
opt_since(lua_State *L, int idx)
{
    lua_Integer v = luaL_optinteger(L, idx, 0);
    return v > 0 ? (uint64_t)v : 0;
}

static int
lct_all(lua_State *L)
{
    struct lct *c = check_ct(L);
    struct config_snapshot *s = push_snapshot(L, c->t, 0);
    lua_createtable(L, 0, (int)(s->count < 1u << 30 ? s->count : 0));
    for (size_t i = 0; i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        push_record(L, c->kind, it->name, it->name_len, it->rec);
        lua_setfield(L, -2, it->name);
    }
    return 1;
}

static int
lct_names(lua_State *L)
{
    struct lct *c = check_ct(L);
    uint64_t since = opt_since(L, 2);
    lua_settop(L, 1);
    struct config_snapshot *s = push_snapshot(L, c->t, since);
    lua_createtable(L, (int)(s->count < 1u << 30 ? s->count : 0), 0);
    for (size_t i = 0; i < s->count; i++) {
        lua_pushlstring(L, s->items[i].name, s->items[i].name_len);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushinteger(L, (lua_Integer)s->gen);
    return 2;
}

static const uint32_t CAP_TABLE[] = { 1024 };     /* new ConcurrentHashMap<>(1024) */
static const uint32_t CAP_COPY[] = { 1024, 0 };   /* ... copied into a default one */

static int
lct_encode_wrapper(lua_State *L)
{
    struct lct *c = check_ct(L);
    struct config_snapshot *s = push_snapshot(L, c->t, 0);
    config_snapshot_java_order(s, CAP_TABLE, 1);
    struct buf *b = l_scratch(L);
    int rc = c->kind == KIND_TOPICS ? topic_wrapper_json(b, s, -1)
                                    : subscription_group_wrapper_json(b, s);
    if (rc != 0)
        return luaL_error(L, "out of memory encoding %s", c->kind == KIND_TOPICS ? "topics" : "groups");
    l_scratch_push(L, b, true);
    return 1;
}

/* config_encode_fn of the wrapper bodies: the whole table in Java's
 * order, in a malloc'ed snapshot (runs in C, under the table's cache
 * lock, with no Lua state). */
static int
wrapper_encode(struct config_table *t, struct buf *out, uint64_t *gen, void *arg)
{
    enum kind kind = *(const enum kind *)arg;
    size_t cap = config_table_snapshot(t, 0, NULL, 0);
    void *block = NULL;
    for (;;) {
        free(block);
        block = malloc(cap);
        if (block == NULL)
            return -ENOMEM;
        size_t need = config_table_snapshot(t, 0, block, cap);
        if (need <= cap)
            break;
        cap = need + need / 8;  /* it grew meanwhile */
    }
    struct config_snapshot *s = block;
    config_snapshot_java_order(s, CAP_TABLE, 1);
    *gen = s->gen;
    int rc = kind == KIND_TOPICS ? topic_wrapper_json(out, s, -1)
                                 : subscription_group_wrapper_json(out, s);
    free(block);
    return rc;
}

/* t:shared_wrapper() -> body: encode_wrapper()'s bytes, encoded once per
 * table generation and shared among workers (a rmq.rcbuf a reply can
 * carry without a copy: l_rcbuf.h). */
static int
lct_shared_wrapper(lua_State *L)
{
    struct lct *c = check_ct(L);
    struct rcbuf *b = config_table_encoded(c->t, wrapper_encode, &c->kind);
    if (b == NULL)
        return luaL_error(L, "out of memory encoding %s", c->kind == KIND_TOPICS ? "topics" : "groups");
    l_push_rcbuf(L, b);
    return 1;
}

/* t:encodes() -> n: how many times shared_wrapper() encoded. */
static int
lct_encodes(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)config_table_encodes(check_ct(L)->t));
    return 1;
}

/* Keeps items [off, off + n) of a snapshot (the rest are not encoded). */
static void
snapshot_slice(struct config_snapshot *s, size_t off, size_t n)
{
    if (off >= s->count) {
        s->count = 0;
        return;
    }
    if (n > s->count - off)
        n = s->count - off;
    s->items += off;
    s->count = n;
}

static int
lct_register_body(lua_State *L)
{
    struct lct *c = check_ct(L);
    if (c->kind != KIND_TOPICS)
        return luaL_error(L, "register_body: not the topic table");
    bool compressed = lua_toboolean(L, 2);
    lua_Integer perm = luaL_optinteger(L, 3, -1);
    uint64_t since = opt_since(L, 4);
    lua_Integer off = luaL_optinteger(L, 5, 0), lim = luaL_optinteger(L, 6, 0);
    lua_settop(L, 1);   /* the arguments are read: the snapshot goes above them */
    struct config_snapshot *s = push_snapshot(L, c->t, since);
    if (off > 0 || lim > 0) {
        /* A part of the table (split registration): the table's order,
         * cut, then the order of the map the part is copied into. */
        config_snapshot_java_order(s, CAP_TABLE, 1);
        snapshot_slice(s, off > 0 ? (size_t)off : 0,
                       lim > 0 ? (size_t)lim : s->count);
        config_snapshot_java_order(s, CAP_COPY, 2);
    } else {
        config_snapshot_java_order(s, compressed ? CAP_COPY : CAP_TABLE, compressed ? 2 : 1);
    }
    int p = perm >= 0 && perm <= 15 ? (int)perm : -1;
    struct buf *b = l_scratch(L);
    int rc;
    if (!compressed) {
        static const char head[] = "{\"filterServerList\":[],\"topicConfigSerializeWrapper\":";
        rc = buf_append(b, head, sizeof(head) - 1);
        if (rc == 0)
            rc = topic_wrapper_json(b, s, p);
        if (rc == 0)
            rc = buf_append(b, "}", 1);
        if (rc != 0)
            return luaL_error(L, "out of memory encoding the registration");
        l_scratch_push(L, b, true);
    } else {
        rc = topic_register_records(b, s, p);
        if (rc != 0)
            return luaL_error(L, "out of memory encoding the registration");
        uLong bound = compressBound((uLong)buf_len(b));
        Bytef *z = lua_newuserdatauv(L, bound, 0);
        uLongf zlen = bound;
        if (compress2(z, &zlen, buf_head(b), (uLong)buf_len(b), 9) != Z_OK)
            return luaL_error(L, "deflate failed");
        l_scratch_done(b);
        lua_pushlstring(L, (const char *)z, zlen);
    }
    lua_pushinteger(L, (lua_Integer)s->count);
    lua_pushinteger(L, (lua_Integer)s->gen);
    return 3;
}

/* The journal's encoders of a table kind. */
static int
topic_line(struct buf *b, const char *name, size_t len, const void *rec)
{
    return topic_config_json(b, name, len, rec);
}

static int
group_line(struct buf *b, const char *name, size_t len, const void *rec)
{
    return subscription_group_json(b, name, len, rec);
}

static const enum kind KINDS[] = { KIND_TOPICS, KIND_GROUPS };

static struct config_journal_codec
codec_of(const struct lct *c)
{
    struct config_journal_codec k = {
        .line = c->kind == KIND_TOPICS ? topic_line : group_line,
        .whole = wrapper_encode,
        .arg = (void *)&KINDS[c->kind == KIND_TOPICS ? 0 : 1],
    };
    return k;
}

static struct config_journal *
check_journal(lua_State *L, struct lct *c)
{
    if (c->j == NULL)
        luaL_error(L, "out of memory: the table has no journal");
    return c->j;
}

/* t:journal_open(path, valid): see config_journal_open. -> true | nil, err */
static int
lct_journal_open(lua_State *L)
{
    struct lct *c = check_ct(L);
    const char *path = luaL_checkstring(L, 2);
    lua_Integer valid = luaL_optinteger(L, 3, -1);
    return lerr_result(L, config_journal_open(check_journal(L, c), path, (int64_t)valid));
}

/* t:journal_append() -> true, gen | nil, err: what changed since the
 * last append, into the journal now (config_journal_append). */
static int
lct_journal_append(lua_State *L)
{
    struct lct *c = check_ct(L);
    struct config_journal_codec k = codec_of(c);
    uint64_t gen = 0;
    if (config_journal_append(check_journal(L, c), &k, &gen) != 0)
        return lerr_push(L);
    lua_pushboolean(L, 1);
    lua_pushinteger(L, (lua_Integer)gen);
    return 2;
}

/* t:journal_save(path, force) -> true, gen | nil, err (config_journal_save). */
static int
lct_journal_save(lua_State *L)
{
    struct lct *c = check_ct(L);
    const char *path = luaL_checkstring(L, 2);
    bool force = lua_toboolean(L, 3);
    struct config_journal_codec k = codec_of(c);
    uint64_t gen = 0;
    if (config_journal_save(check_journal(L, c), path, force, &k, &gen) != 0)
        return lerr_push(L);
    lua_pushboolean(L, 1);
    lua_pushinteger(L, (lua_Integer)gen);
    return 2;
}

/* t:journal_mark(): the table as it is now counts as on disk. */
static int
lct_journal_mark(lua_State *L)
{
    struct lct *c = check_ct(L);
    config_journal_mark(check_journal(L, c));
    return 0;
}

static int
push_handle(lua_State *L, struct config_table *t, enum kind k)
{
    if (t == NULL)
        return luaL_error(L, "out of memory creating the broker tables");
    struct lct *c = lua_newuserdatauv(L, sizeof(*c), 0);
    c->t = t;
    c->j = k == KIND_TOPICS ? config_journal_topics() : config_journal_groups();
    c->kind = k;
    c->owned = false;
    luaL_setmetatable(L, LCT_TYPE);
    return 1;
}

/* A private table: the handle is made (not owning) before the table, so
 * a memory error leaks nothing. */
static int
push_private(lua_State *L, size_t rec_size, enum kind k)
{
    struct lct *c = lua_newuserdatauv(L, sizeof(*c), 0);
    c->t = NULL;
    c->j = NULL;
    c->kind = k;
    c->owned = false;
    luaL_setmetatable(L, LCT_TYPE);
    c->t = config_table_new(rec_size);
    if (c->t == NULL)
        return luaL_error(L, "out of memory creating a table");
    c->owned = true;
    c->j = config_journal_new(c->t);
    if (c->j == NULL)
        return luaL_error(L, "out of memory creating a table");
    return 1;
}

static int
lct_new_topics(lua_State *L)
{
    return push_private(L, sizeof(struct topic_config), KIND_TOPICS);
}

static int
lct_new_groups(lua_State *L)
{
    return push_private(L, sizeof(struct subscription_group), KIND_GROUPS);
}

static int
lct_gc(lua_State *L)
{
    struct lct *c = luaL_checkudata(L, 1, LCT_TYPE);
    if (c->owned) {
        c->owned = false;
        config_journal_free(c->j);
        c->j = NULL;
        config_table_free(c->t);
        c->t = NULL;
    }
    return 0;
}

static int
lct_topics(lua_State *L)
{
    return push_handle(L, config_table_topics(), KIND_TOPICS);
}

static int
lct_groups(lua_State *L)
{
    return push_handle(L, config_table_groups(), KIND_GROUPS);
}

int
luaopen_rmq_config_table(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "get", lct_get },
        { "put", lct_put },
        { "del", lct_del },
        { "count", lct_count },
        { "hash_stats", lct_hash_stats },
        { "version", lct_version },
        { "clear", lct_clear },
        { "removals", lct_removals },
        { "data_version", lct_data_version },
        { "set_data_version", lct_set_data_version },
        { "bump", lct_bump },
        { "all", lct_all },
        { "names", lct_names },
        { "encode_wrapper", lct_encode_wrapper },
        { "shared_wrapper", lct_shared_wrapper },
        { "encodes", lct_encodes },
        { "register_body", lct_register_body },
        { "journal_open", lct_journal_open },
        { "journal_append", lct_journal_append },
        { "journal_save", lct_journal_save },
        { "journal_mark", lct_journal_mark },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "topics", lct_topics },
        { "groups", lct_groups },
        { "new_topics", lct_new_topics },
        { "new_groups", lct_new_groups },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LCT_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lct_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
