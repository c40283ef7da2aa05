/*
 * l_grpc: the rmq.grpc module, a gRPC client for `rmq send --grpc`,
 * `rmq consume --grpc` and scripts/bench/grpc.lua, over src/grpc/client.h
 * (nghttp2) and the protobuf-c messages the server uses (proto/, built
 * into build/gen).
 *
 *   grpc.connect(addr [, {timeout=ms, tls=bool, max_response=bytes}])
 *       -> client | nil, err    tls: absent = as net.tls set for this
 *       host (the CLI's --tls), false = plaintext, true = TLS with the
 *       host's settings (or no verification)
 *   client:call(method, request_bytes [, headers [, timeout_ms]])
 *       -> {status=, message=, messages={bytes, ...}} | nil, err
 *       method: "SendMessage" (apache.rocketmq.v2.MessagingService's) or
 *       a full "/pkg.Service/Method"; headers: {name = value}; err only
 *       when the call could not start or timed out (timeout_ms, default
 *       30000: then it is reset)
 *   client:close()
 *   grpc.encode(type, table) -> bytes   type: a request or response of
 *       MessagingService by its short name ("SendMessageRequest")
 *   grpc.decode(type, bytes) -> table | nil, err
 *       Fields by their .proto names; enums as numbers (encode also
 *       takes their names); map<,> fields as {key = value}; bytes as
 *       Lua strings; a oneof member is present when it is set.
 *   grpc.hmac_sha1_hex(secret, data) -> hex   5.x's request signature
 *
 * Every waiting call yields inside a task and blocks outside the loop
 * (runtime/wait.h), as rmq.net's.
 */
#include <lauxlib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "core/err.h"
#include "lua/l_err.h"
#include "grpc/client.h"
#include "grpc/h2.h"
#include "net/conn.h"
#include "runtime/host.h"
#include "runtime/wait.h"
#include "tools/l_tools.h"

#define LGRPC_TYPE "rmq.grpc.client"
#define SERVICE "/apache.rocketmq.v2.MessagingService/"
#define DEFAULT_MAX_RESPONSE (64u << 20)

/* {{{ Messages */

static const ProtobufCMessageDescriptor *const TYPES[] = {
    &apache__rocketmq__v2__query_route_request__descriptor,
    &apache__rocketmq__v2__query_route_response__descriptor,
    &apache__rocketmq__v2__heartbeat_request__descriptor,
    &apache__rocketmq__v2__heartbeat_response__descriptor,
    &apache__rocketmq__v2__send_message_request__descriptor,
    &apache__rocketmq__v2__send_message_response__descriptor,
    &apache__rocketmq__v2__query_assignment_request__descriptor,
    &apache__rocketmq__v2__query_assignment_response__descriptor,
    &apache__rocketmq__v2__receive_message_request__descriptor,
    &apache__rocketmq__v2__receive_message_response__descriptor,
    &apache__rocketmq__v2__ack_message_request__descriptor,
    &apache__rocketmq__v2__ack_message_response__descriptor,
    &apache__rocketmq__v2__change_invisible_duration_request__descriptor,
    &apache__rocketmq__v2__change_invisible_duration_response__descriptor,
    &apache__rocketmq__v2__end_transaction_request__descriptor,
    &apache__rocketmq__v2__end_transaction_response__descriptor,
    &apache__rocketmq__v2__notify_client_termination_request__descriptor,
    &apache__rocketmq__v2__notify_client_termination_response__descriptor,
    &apache__rocketmq__v2__get_offset_request__descriptor,
    &apache__rocketmq__v2__get_offset_response__descriptor,
    &apache__rocketmq__v2__update_offset_request__descriptor,
    &apache__rocketmq__v2__update_offset_response__descriptor,
    &apache__rocketmq__v2__query_offset_request__descriptor,
    &apache__rocketmq__v2__query_offset_response__descriptor,
    /* Telemetry's both ways: scripts/bench/grpc.lua registers its consumer's
     * settings with a 5.x proxy, which answers ReceiveMessage only for a
     * client whose settings it holds. */
    &apache__rocketmq__v2__telemetry_command__descriptor,
};

static const ProtobufCMessageDescriptor *
type_of(lua_State *L, int idx)
{
    const char *name = luaL_checkstring(L, idx);
    for (size_t i = 0; i < sizeof(TYPES) / sizeof(TYPES[0]); i++)
        if (strcmp(TYPES[i]->short_name, name) == 0)
            return TYPES[i];
    luaL_argerror(L, idx, lua_pushfstring(L, "no MessagingService message named %s", name));
    return NULL;
}

static size_t
elem_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* A map<,> field: repeated entries of a message with key and value. */
static bool
is_map(const ProtobufCFieldDescriptor *f)
{
    if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE)
        return false;
    const ProtobufCMessageDescriptor *d = f->descriptor;
    size_t n = strlen(d->short_name);
    return n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 && d->n_fields == 2 &&
           strcmp(d->fields[0].name, "key") == 0 && strcmp(d->fields[1].name, "value") == 0;
}

static void decode_msg(lua_State *L, const ProtobufCMessage *m);

/* Pushes one value of field f at p. */
static void
push_value(lua_State *L, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        lua_pushinteger(L, *(const int32_t *)p); break;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        lua_pushinteger(L, *(const uint32_t *)p); break;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        lua_pushinteger(L, *(const int64_t *)p); break;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        lua_pushinteger(L, (lua_Integer) * (const uint64_t *)p); break;
    case PROTOBUF_C_TYPE_FLOAT: lua_pushnumber(L, *(const float *)p); break;
    case PROTOBUF_C_TYPE_DOUBLE: lua_pushnumber(L, *(const double *)p); break;
    case PROTOBUF_C_TYPE_BOOL: lua_pushboolean(L, *(const protobuf_c_boolean *)p); break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        lua_pushstring(L, s != NULL ? s : "");
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        lua_pushlstring(L, (const char *)b->data, b->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        if (m != NULL)
            decode_msg(L, m);
        else
            lua_pushnil(L);
        break;
    }
    }
}

static void
decode_msg(lua_State *L, const ProtobufCMessage *m)
{
    luaL_checkstack(L, 8, "message too deep");
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    lua_createtable(L, 0, (int)d->n_fields);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            if (is_map(f)) {
                lua_createtable(L, 0, (int)n);
                for (size_t j = 0; j < n; j++) {
                    const ProtobufCMessage *e = ((ProtobufCMessage *const *)arr)[j];
                    const ProtobufCMessageDescriptor *ed = e->descriptor;
                    push_value(L, &ed->fields[0], (const char *)e + ed->fields[0].offset);
                    push_value(L, &ed->fields[1], (const char *)e + ed->fields[1].offset);
                    lua_settable(L, -3);
                }
            } else {
                lua_createtable(L, (int)n, 0);
                for (size_t j = 0; j < n; j++) {
                    push_value(L, f, arr + j * elem_size(f));
                    lua_rawseti(L, -2, (lua_Integer)j + 1);
                }
            }
            lua_setfield(L, -2, f->name);
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
                   f->type != PROTOBUF_C_TYPE_STRING &&
                   !*(const protobuf_c_boolean *)(base + f->quantifier_offset)) {
            continue;
        }
        if (f->type == PROTOBUF_C_TYPE_STRING && *(char *const *)p == NULL)
            continue;   /* an optional string not set */
        push_value(L, f, p);
        lua_setfield(L, -2, f->name);
    }
}

/* Memory for a message being built: Lua userdata anchored in the table
 * at index `anchor` (collected with it, also when an error is raised). */
static void *
enc_alloc(lua_State *L, int anchor, size_t n)
{
    void *p = lua_newuserdatauv(L, n > 0 ? n : 1, 0);
    memset(p, 0, n > 0 ? n : 1);
    lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);
    return p;
}

static ProtobufCMessage *encode_msg(lua_State *L, int anchor, const ProtobufCMessageDescriptor *d,
                                    int idx);

/* Stores the Lua value at idx as one value of field f at p. */
static void
set_value(lua_State *L, int anchor, const ProtobufCFieldDescriptor *f, void *p, int idx)
{
    idx = lua_absindex(L, idx);
    switch (f->type) {
    case PROTOBUF_C_TYPE_ENUM:
        if (lua_type(L, idx) == LUA_TSTRING) {
            const ProtobufCEnumValue *v =
                protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, lua_tostring(L, idx));
            if (v == NULL)
                luaL_error(L, "%s: no %s named %s", f->name,
                           ((const ProtobufCEnumDescriptor *)f->descriptor)->short_name, lua_tostring(L, idx));
            *(int32_t *)p = v->value;
            break;
        }
        /* fallthrough */
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
        if (!lua_isinteger(L, idx) && !lua_isnumber(L, idx))
            luaL_error(L, "%s: a number is needed", f->name);
        *(int32_t *)p = (int32_t)lua_tointeger(L, idx);
        break;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        *(uint32_t *)p = (uint32_t)lua_tointeger(L, idx);
        break;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        *(int64_t *)p = (int64_t)lua_tointeger(L, idx);
        break;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        *(uint64_t *)p = (uint64_t)lua_tointeger(L, idx);
        break;
    case PROTOBUF_C_TYPE_FLOAT: *(float *)p = (float)lua_tonumber(L, idx); break;
    case PROTOBUF_C_TYPE_DOUBLE: *(double *)p = lua_tonumber(L, idx); break;
    case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)p = lua_toboolean(L, idx); break;
    case PROTOBUF_C_TYPE_STRING:
        if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
            luaL_error(L, "%s: a string is needed", f->name);
        /* The string stays referenced by the table being encoded. */
        *(const char **)p = lua_tostring(L, idx);
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        if (s == NULL)
            luaL_error(L, "%s: a string is needed", f->name);
        ((ProtobufCBinaryData *)p)->data = (uint8_t *)s;
        ((ProtobufCBinaryData *)p)->len = n;
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        *(ProtobufCMessage **)p = encode_msg(L, anchor, f->descriptor, idx);
        break;
    }
}

static ProtobufCMessage *
encode_msg(lua_State *L, int anchor, const ProtobufCMessageDescriptor *d, int idx)
{
    luaL_checkstack(L, 8, "message too deep");
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: a table is needed", d->short_name);
    ProtobufCMessage *m = enc_alloc(L, anchor, d->sizeof_message);
    protobuf_c_message_init(d, m);
    char *base = (char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (lua_getfield(L, idx, f->name) == LUA_TNIL) {
            lua_pop(L, 1);
            continue;
        }
        int v = lua_gettop(L);
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (!lua_istable(L, v))
                luaL_error(L, "%s: a table is needed", f->name);
            size_t n = 0;
            if (is_map(f)) {
                for (lua_pushnil(L); lua_next(L, v) != 0; lua_pop(L, 1))
                    n++;
                ProtobufCMessage **arr = enc_alloc(L, anchor, n * sizeof(*arr));
                const ProtobufCMessageDescriptor *ed = f->descriptor;
                size_t j = 0;
                for (lua_pushnil(L); lua_next(L, v) != 0; lua_pop(L, 1), j++) {
                    ProtobufCMessage *e = enc_alloc(L, anchor, ed->sizeof_message);
                    protobuf_c_message_init(ed, e);
                    set_value(L, anchor, &ed->fields[0], (char *)e + ed->fields[0].offset, -2);
                    set_value(L, anchor, &ed->fields[1], (char *)e + ed->fields[1].offset, -1);
                    arr[j] = e;
                }
                *(void **)(base + f->offset) = arr;
            } else {
                n = lua_rawlen(L, v);
                char *arr = enc_alloc(L, anchor, n * elem_size(f));
                for (size_t j = 0; j < n; j++) {
                    lua_rawgeti(L, v, (lua_Integer)j + 1);
                    set_value(L, anchor, f, arr + j * elem_size(f), -1);
                    lua_pop(L, 1);
                }
                *(void **)(base + f->offset) = arr;
            }
            *(size_t *)(base + f->quantifier_offset) = n;
        } else {
            set_value(L, anchor, f, base + f->offset, v);
            if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
                *(uint32_t *)(base + f->quantifier_offset) = f->id;
            else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
                     f->type != PROTOBUF_C_TYPE_STRING)
                *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
        }
        lua_settop(L, v - 1);
    }
    return m;
}

static int
lgrpc_encode(lua_State *L)
{
    const ProtobufCMessageDescriptor *d = type_of(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    lua_newtable(L);   /* 3: the anchor */
    ProtobufCMessage *m = encode_msg(L, 3, d, 2);
    size_t n = protobuf_c_message_get_packed_size(m);
    luaL_Buffer b;
    uint8_t *out = (uint8_t *)luaL_buffinitsize(L, &b, n);
    protobuf_c_message_pack(m, out);
    luaL_pushresultsize(&b, n);
    return 1;
}

static int
lgrpc_decode(lua_State *L)
{
    const ProtobufCMessageDescriptor *d = type_of(L, 1);
    size_t n;
    const uint8_t *p = (const uint8_t *)luaL_checklstring(L, 2, &n);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
    if (m == NULL) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s does not parse", d->short_name);
        return 2;
    }
    /* Raises only on memory: then m leaks with the failing state. */
    decode_msg(L, m);
    protobuf_c_message_free_unpacked(m, NULL);
    return 1;
}

static int
lgrpc_hmac(lua_State *L)
{
    size_t kn, dn;
    const char *k = luaL_checklstring(L, 1, &kn);
    const char *d = luaL_checklstring(L, 2, &dn);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int ml = 0;
    if (HMAC(EVP_sha1(), k, (int)kn, (const unsigned char *)d, dn, mac, &ml) == NULL)
        return luaL_error(L, "HMAC-SHA1 failed");
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned i = 0; i < ml; i++)
        snprintf(hex + 2 * i, 3, "%02X", mac[i]);
    lua_pushlstring(L, hex, 2 * ml);
    return 1;
}

/* }}} */

/* {{{ Connections */

/* What a connection's Lua handle and its conn share; freed by whichever
 * of the two goes last (the handle's __gc closes the conn first). */
struct lgc {
    struct conn *c;               /* one reference held while the handle lives */
    struct connect_wait *connecting;
    char authority[256];
    size_t max_response;
};

struct lgc_ud {
    struct lgc *p;
};

struct connect_wait {
    struct waiter w;
    uv_timer_t timer;
    struct lgc *g;                /* NULL once reported */
    int status;
    char err[256];
    int ref;                      /* the handle, in the registry */
};

static void
timer_freed(uv_handle_t *h)
{
    free(h->data);
}

static void
connect_report(struct connect_wait *cw, int status, const char *why)
{
    if (cw->g == NULL)
        return;
    cw->g->connecting = NULL;
    cw->g = NULL;
    cw->status = status;
    if (why != NULL)
        snprintf(cw->err, sizeof(cw->err), "%s", why);
    uv_timer_stop(&cw->timer);
    host_wake(&cw->w);
}

static void
gc_on_connect(struct conn *c, int status)
{
    struct lgc *g = c->owner;
    if (g == NULL || g->connecting == NULL)
        return;
    if (status != 0) {
        connect_report(g->connecting, -1, uv_strerror(status));
        return;
    }
    if (gclient_new(c, g->authority, g->max_response) == NULL) {
        connect_report(g->connecting, -1, err_msg());
        conn_close(c, "no HTTP/2 session");
        return;
    }
    connect_report(g->connecting, 0, NULL);
}

static size_t
gc_on_bytes(struct conn *c, const uint8_t *p, size_t n)
{
    return gclient_on_bytes(c, p, n);
}

static void
gc_on_close(struct conn *c)
{
    struct lgc *g = c->owner;
    gclient_on_conn_close(c->ext);
    if (g != NULL && g->connecting != NULL)
        connect_report(g->connecting, -1, "connection closed");
}

static const struct conn_handler GC_HANDLER = {
    .on_connect = gc_on_connect,
    .on_bytes = gc_on_bytes,
    .on_close = gc_on_close,
};

static void
connect_timeout(uv_timer_t *t)
{
    struct connect_wait *cw = t->data;
    struct lgc *g = cw->g;
    connect_report(cw, -1, "connect timed out");
    if (g != NULL)
        conn_close(g->c, "connect timed out");
}

static int
connect_push(lua_State *L, struct waiter *w)
{
    struct connect_wait *cw = (struct connect_wait *)w;
    int status = cw->status;
    char err[256];
    snprintf(err, sizeof(err), "%s", cw->err);
    int ref = cw->ref;
    uv_close((uv_handle_t *)&cw->timer, timer_freed);
    if (status != 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
        return lerr_pushstr(L, err);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    return 1;
}

static int
lgrpc_connect(lua_State *L)
{
    const char *addr = luaL_checkstring(L, 1);
    struct host *h = host_of(L);
    lua_Integer timeout = 3000;
    size_t max_response = DEFAULT_MAX_RESPONSE;
    struct tls_ctx *tls = h->r.tls_client;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL)
            timeout = luaL_checkinteger(L, -1);
        if (lua_getfield(L, 2, "max_response") != LUA_TNIL)
            max_response = (size_t)luaL_checkinteger(L, -1);
        if (lua_getfield(L, 2, "tls") == LUA_TBOOLEAN && !lua_toboolean(L, -1))
            tls = NULL;
        else if (lua_toboolean(L, -1) && tls == NULL)
            return luaL_argerror(L, 2, "tls = true needs net.tls() set first (the CLI's --tls)");
        lua_pop(L, 3);
    }
    luaL_argcheck(L, timeout > 0, 2, "timeout must be positive");
    struct lgc *g = calloc(1, sizeof(*g));
    struct connect_wait *cw = calloc(1, sizeof(*cw));
    if (g == NULL || cw == NULL) {
        free(g);
        free(cw);
        return luaL_error(L, "out of memory");
    }
    snprintf(g->authority, sizeof(g->authority), "%s", addr);
    g->max_response = max_response;
    struct conn *c = conn_connect_tls(&h->r, addr, &GC_HANDLER, g, tls);
    if (c == NULL) {
        free(g);
        free(cw);
        return lerr_push(L);
    }
    conn_ref(c);
    g->c = c;
    struct lgc_ud *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->p = g;
    luaL_setmetatable(L, LGRPC_TYPE);
    cw->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    cw->w.push = connect_push;
    cw->w.abandon = NULL;   /* the host is going: nothing waits any more */
    cw->g = g;
    g->connecting = cw;
    cw->timer.data = cw;
    if (!h->r.in_loop)
        uv_update_time(&h->r.loop);
    int rc = uv_timer_init(&h->r.loop, &cw->timer);
    if (rc == 0)
        rc = uv_timer_start(&cw->timer, connect_timeout, (uint64_t)timeout, 0);
    if (rc != 0)
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    return host_wait(L, &cw->w);
}

static struct lgc *
check_client(lua_State *L)
{
    struct lgc_ud *u = luaL_checkudata(L, 1, LGRPC_TYPE);
    if (u->p == NULL)
        luaL_error(L, "the gRPC client is closed");
    return u->p;
}

static void
client_close(struct lgc_ud *u)
{
    struct lgc *g = u->p;
    if (g == NULL)
        return;
    u->p = NULL;
    if (!g->c->closed)
        conn_close(g->c, "closed by its user");
    g->c->owner = NULL;
    conn_unref(g->c);
    free(g);
}

static int
lgrpc_close(lua_State *L)
{
    client_close(luaL_checkudata(L, 1, LGRPC_TYPE));
    return 0;
}

/* }}} */

/* {{{ Calls */

struct call_wait {
    struct waiter w;
    uv_timer_t timer;
    struct conn *c;               /* a reference held */
    int32_t id;
    bool ended;
    bool timed_out;
    int status;
    char message[256];
    struct buf data;
};

static void
call_freed(uv_handle_t *h)
{
    struct call_wait *cw = h->data;
    buf_free(&cw->data);
    free(cw);
}

static void
call_ended(void *arg, const struct gclient_result *r)
{
    struct call_wait *cw = arg;
    if (cw->ended)
        return;
    cw->ended = true;
    cw->status = r->status;
    snprintf(cw->message, sizeof(cw->message), "%s", r->message != NULL ? r->message : "");
    if (r->len > 0 && buf_append(&cw->data, r->data, r->len) != 0) {
        cw->status = GRPC_RESOURCE_EXHAUSTED;
        snprintf(cw->message, sizeof(cw->message), "out of memory for the response");
    }
    uv_timer_stop(&cw->timer);
    host_wake(&cw->w);
}

static void
call_timeout(uv_timer_t *t)
{
    struct call_wait *cw = t->data;
    if (cw->ended)
        return;
    cw->ended = true;
    cw->timed_out = true;
    if (!cw->c->closed)
        gclient_cancel(cw->c->ext, cw->id);
    host_wake(&cw->w);
}

static int
call_push(lua_State *L, struct waiter *w)
{
    struct call_wait *cw = (struct call_wait *)w;
    int rets;
    if (cw->timed_out) {
        lua_pushnil(L);
        lua_pushliteral(L, "the call timed out");
        rets = 2;
    } else {
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, cw->status);
        lua_setfield(L, -2, "status");
        lua_pushstring(L, cw->message);
        lua_setfield(L, -2, "message");
        lua_newtable(L);
        const uint8_t *p = buf_head(&cw->data);
        size_t left = buf_len(&cw->data);
        lua_Integer i = 0;
        while (left >= 5) {
            uint32_t len = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) | p[4];
            if (left - 5 < len)
                break;
            lua_pushlstring(L, (const char *)p + 5, len);
            lua_rawseti(L, -2, ++i);
            p += 5 + len;
            left -= 5 + len;
        }
        lua_setfield(L, -2, "messages");
        rets = 1;
    }
    conn_unref(cw->c);
    uv_close((uv_handle_t *)&cw->timer, call_freed);
    return rets;
}

static int
lgrpc_call(lua_State *L)
{
    struct lgc *g = check_client(L);
    const char *method = luaL_checkstring(L, 2);
    size_t n;
    const uint8_t *msg = (const uint8_t *)luaL_checklstring(L, 3, &n);
    lua_Integer timeout = luaL_optinteger(L, 5, 30000);
    luaL_argcheck(L, timeout > 0, 5, "timeout must be positive");
    struct gclient_header hdrs[32];
    size_t nh = 0;
    if (!lua_isnoneornil(L, 4)) {
        luaL_checktype(L, 4, LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, 4) != 0; lua_pop(L, 1)) {
            if (nh == sizeof(hdrs) / sizeof(hdrs[0]))
                return luaL_argerror(L, 4, "too many headers");
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_argerror(L, 4, "headers are {name = value} strings");
            /* Both stay referenced by the table at 4 during the call. */
            hdrs[nh].name = lua_tostring(L, -2);
            hdrs[nh].value = lua_tostring(L, -1);
            nh++;
        }
    }
    if (g->c->closed || g->c->ext == NULL)
        return lerr_pushstr(L, "the connection is closed");
    char path[256];
    snprintf(path, sizeof(path), "%s%s", method[0] == '/' ? "" : SERVICE, method);
    struct host *h = host_of(L);
    struct call_wait *cw = calloc(1, sizeof(*cw));
    if (cw == NULL)
        return luaL_error(L, "out of memory");
    buf_init(&cw->data);
    cw->w.push = call_push;
    cw->w.abandon = NULL;   /* the host is going: nothing waits any more */
    cw->timer.data = cw;
    int rc = uv_timer_init(&h->r.loop, &cw->timer);
    if (rc != 0) {
        free(cw);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    int32_t id = gclient_call(g->c->ext, path, hdrs, nh, msg, n, (uint64_t)timeout, call_ended, cw);
    if (id < 0) {
        uv_close((uv_handle_t *)&cw->timer, call_freed);
        return lerr_push(L);
    }
    cw->id = id;
    cw->c = g->c;
    conn_ref(g->c);
    if (!h->r.in_loop)
        uv_update_time(&h->r.loop);
    uv_timer_start(&cw->timer, call_timeout, (uint64_t)timeout, 0);
    return host_wait(L, &cw->w);
}

static int
lgrpc_gc(lua_State *L)
{
    client_close(luaL_checkudata(L, 1, LGRPC_TYPE));
    return 0;
}

/* }}} */

int
luaopen_rmq_grpc(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "call", lgrpc_call },
        { "close", lgrpc_close },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "connect", lgrpc_connect },
        { "encode", lgrpc_encode },
        { "decode", lgrpc_decode },
        { "hmac_sha1_hex", lgrpc_hmac },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LGRPC_TYPE)) {
        lua_pushcfunction(L, lgrpc_gc);
        lua_setfield(L, -2, "__gc");
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
