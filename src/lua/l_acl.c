/*
 * l_acl: the rmq.acl module, RocketMQ ACL 1.0 signatures for Lua.
 *
 *   acl.sign(fields, body, secret) -> Signature
 *       fields {key = value} (every value signed as its text, as
 *       rmq.codec.encode sends it: numbers and booleans as the C++ and
 *       Node clients sign them), body a string or nil; the "Signature"
 *       key, if present, is left out
 *   acl.content(fields, body) -> the bytes that are signed
 *   acl.signature_of(cmd, secret [, skip_unique_key_query]) -> Signature
 *       cmd: an rmq.cmd userdata (a received request) or a table with
 *       ext and body (rmq.codec.decode's); skip_unique_key_query leaves
 *       _UNIQUE_KEY_QUERY out as the 4.9.8 broker does
 *   acl.hmac(secret, data) -> Base64(HmacSHA1(secret, data))
 *
 * The access check (acl/acl.h):
 *   acl.yaml_decode(text [, max_nodes]) -> value | nil, "line L column C: why"
 *       libyaml; mappings -> tables, sequences -> arrays, plain scalars
 *       true/false (YAML 1.1's spellings) -> booleans, plain null/~/empty
 *       -> acl.NULL, every other scalar a string; anchors and aliases
 *       are refused, nesting is capped at 64
 *   acl.table() -> t          an empty account table
 *   t:white(pattern) -> true | nil, err      a globalWhiteRemoteAddresses entry
 *   t:account(spec) -> true | nil, err       spec: {accessKey=, secretKey=,
 *       whiteRemoteAddress=, admin=, defaultTopicPerm=, defaultGroupPerm=,
 *       topicPerms={"T=PUB", ...}, groupPerms={...}} (strings)
 *   t:count() -> accounts
 *   t:check(cmd, peer, role) -> true | false, remark   role "broker"|"namesrv"
 *   t:bench(frame | {frames}, peer, role, n) -> ns per check, allowed (n
 *       checks in C; a list of up to 16 frames is checked in turn)
 *   acl.check_topic(accessKey | nil, peer, topic, perm) -> true | false, remark
 *       the current table's answer for one topic ("SUB" / "PUB"), white
 *       lists included, the signature not (the request's check did that)
 *   acl.publish(t | nil)      the process's current table (every worker)
 *   acl.generation() -> n     moves with each publish
 *   acl.check_address(pattern) -> true | nil, err
 *   acl.perm_valid(s) -> bool
 *   acl.file_stamp(path) -> stamp, size, mode | nil, err   (stamp changes
 *       with the file; mode its permission bits, for rmq doctor)
 *   acl.install(listener, role)  this worker checks the requests of listener
 *       (0-based, as the plan lists them) for role "broker"|"namesrv"
 *
 * Every string a signature reads stays referenced from the Lua stack
 * while it is computed; signatures use the Lua state's one signer
 * (lcred_signer, shared with the requests it signs); nothing here mallocs
 * except more than ACL_SIGN_STACK_FIELDS fields.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include <yaml.h>

#include "acl/acl.h"
#include "acl/acl_sign.h"
#include "core/err.h"
#include "runtime/cmd.h"
#include "lua/l_err.h"
#include "lua/l_codec.h"
#include "lua/l_credentials.h"
#include "lua/l_modules.h"
#include "runtime/host.h"
#include "runtime/wait.h"

#define TABLE_MT "rmq.acl.table"
#define YAML_MAX_DEPTH 64

/* The Lua state's signer: the one l_credentials signs requests with. */
static struct acl_signer *
signer(lua_State *L)
{
    struct acl_signer *s = lcred_signer(L);
    if (s == NULL)
        luaL_error(L, "rmq.acl: %s", err_msg());
    return s;
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
    lcodec_read_ext(L, 1, &cmd);
    return push_signature(L, &cmd, 0, 3);
}

static int
l_content(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    opt_body(L, 2, &cmd);
    lcodec_read_ext(L, 1, &cmd);
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
        lcodec_read_ext(L, lua_gettop(L), &cmd);
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

/* {{{ YAML */

struct yctx {
    yaml_parser_t parser;
    lua_State *L;
    size_t nodes;
    size_t max_nodes;
    char err[256];
};

static bool
yerr(struct yctx *y, const yaml_mark_t *m, const char *what)
{
    snprintf(y->err, sizeof(y->err), "line %zu column %zu: %s", m->line + 1, m->column + 1, what);
    return false;
}

static bool
ynext(struct yctx *y, yaml_event_t *ev)
{
    if (yaml_parser_parse(&y->parser, ev))
        return true;
    const char *problem = y->parser.problem ? y->parser.problem : "malformed YAML";
    if (y->parser.context != NULL) {
        snprintf(y->err, sizeof(y->err), "line %zu column %zu: %s %s",
                 y->parser.problem_mark.line + 1, y->parser.problem_mark.column + 1,
                 problem, y->parser.context);
        return false;
    }
    return yerr(y, &y->parser.problem_mark, problem);
}

static bool
plain_in(const char *s, size_t n, const char *const *set)
{
    for (; *set != NULL; set++) {
        if (strlen(*set) == n && memcmp(*set, s, n) == 0)
            return true;
    }
    return false;
}

static const char *const YAML_TRUE[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
static const char *const YAML_FALSE[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
static const char *const YAML_NULL[] = {"", "~", "null", "Null", "NULL", NULL};

/* Pushes the node that starts with ev (consumed). */
static bool
ynode(struct yctx *y, yaml_event_t *ev, int depth)
{
    lua_State *L = y->L;
    /* yaml_event_delete() zeroes the event, marks included: keep the
     * mark for the messages */
    const yaml_mark_t m = ev->start_mark;
    if (++y->nodes > y->max_nodes) {
        yaml_event_delete(ev);
        return yerr(y, &m, "too many nodes");
    }
    if (depth > YAML_MAX_DEPTH || !lua_checkstack(L, 4)) {
        yaml_event_delete(ev);
        return yerr(y, &m, "nested too deeply");
    }
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        yaml_event_delete(ev);
        return yerr(y, &m, "anchors and aliases are not supported");
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (ev->data.scalar.anchor != NULL) {
            yaml_event_delete(ev);
            return yerr(y, &m, "anchors and aliases are not supported");
        }
        if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && ev->data.scalar.tag == NULL) {
            if (plain_in(v, n, YAML_TRUE))
                lua_pushboolean(L, 1);
            else if (plain_in(v, n, YAML_FALSE))
                lua_pushboolean(L, 0);
            else if (plain_in(v, n, YAML_NULL))
                lua_pushlightuserdata(L, NULL);
            else
                lua_pushlstring(L, v, n);
        } else {
            lua_pushlstring(L, v, n);
        }
        yaml_event_delete(ev);
        return true;
    }
    case YAML_SEQUENCE_START_EVENT: {
        bool anchored = ev->data.sequence_start.anchor != NULL;
        yaml_event_delete(ev);
        if (anchored)
            return yerr(y, &m, "anchors and aliases are not supported");
        lua_newtable(L);
        for (lua_Integer i = 1;; i++) {
            yaml_event_t e;
            if (!ynext(y, &e))
                return false;
            if (e.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&e);
                return true;
            }
            if (!ynode(y, &e, depth + 1))
                return false;
            lua_rawseti(L, -2, i);
        }
    }
    case YAML_MAPPING_START_EVENT: {
        bool anchored = ev->data.mapping_start.anchor != NULL;
        yaml_event_delete(ev);
        if (anchored)
            return yerr(y, &m, "anchors and aliases are not supported");
        lua_newtable(L);
        for (;;) {
            yaml_event_t e;
            if (!ynext(y, &e))
                return false;
            if (e.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&e);
                return true;
            }
            if (e.type != YAML_SCALAR_EVENT) {
                const yaml_mark_t km = e.start_mark;
                yaml_event_delete(&e);
                return yerr(y, &km, "a mapping key must be a scalar");
            }
            lua_pushlstring(L, (const char *)e.data.scalar.value, e.data.scalar.length);
            yaml_event_delete(&e);
            if (!ynext(y, &e))
                return false;
            if (!ynode(y, &e, depth + 1))
                return false;
            lua_rawset(L, -3);
        }
    }
    default: {
        yaml_event_delete(ev);
        return yerr(y, &m, "unexpected YAML event");
    }
    }
}

/* Runs under lua_pcall (a memory error must not leak the parser). */
static int
yaml_decode_protected(lua_State *L)
{
    struct yctx *y = lua_touserdata(L, 1);
    yaml_event_t ev;
    bool ok = ynext(y, &ev);  /* STREAM_START */
    if (ok)
        yaml_event_delete(&ev);
    if (ok)
        ok = ynext(y, &ev);
    if (ok && ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        lua_pushlightuserdata(L, NULL);  /* an empty file */
        return 1;
    }
    if (ok)
        yaml_event_delete(&ev);  /* DOCUMENT_START */
    if (ok)
        ok = ynext(y, &ev);
    if (ok)
        ok = ynode(y, &ev, 1);
    if (ok) {
        ok = ynext(y, &ev);  /* DOCUMENT_END */
        if (ok)
            yaml_event_delete(&ev);
    }
    if (ok) {
        ok = ynext(y, &ev);
        if (ok) {
            if (ev.type != YAML_STREAM_END_EVENT) {
                ok = yerr(y, &ev.start_mark, "more than one document");
            }
            yaml_event_delete(&ev);
        }
    }
    if (!ok)
        return lerr_pushstr(L, y->err);
    return 1;
}

static int
l_yaml_decode(lua_State *L)
{
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    lua_Integer max_nodes = luaL_optinteger(L, 2, 10000000);
    luaL_argcheck(L, max_nodes > 0, 2, "must be positive");
    struct yctx *y = lua_newuserdatauv(L, sizeof(*y), 0);
    memset(y, 0, sizeof(*y));
    if (!yaml_parser_initialize(&y->parser))
        return luaL_error(L, "yaml: out of memory");
    yaml_parser_set_input_string(&y->parser, (const unsigned char *)text, len);
    y->L = L;
    y->max_nodes = (size_t)max_nodes;
    int top = lua_gettop(L);
    lua_pushcfunction(L, yaml_decode_protected);
    lua_pushlightuserdata(L, y);
    int rc = lua_pcall(L, 1, LUA_MULTRET, 0);
    yaml_parser_delete(&y->parser);
    if (rc != LUA_OK)
        return lua_error(L);
    return lua_gettop(L) - top;
}

/* }}} */

/* {{{ Account tables */

struct ltable {
    struct acl_table *t;
};

static struct acl_table *
check_table(lua_State *L, int idx)
{
    struct ltable *u = luaL_checkudata(L, idx, TABLE_MT);
    return u->t;
}

static int
table_gc(lua_State *L)
{
    struct ltable *u = luaL_checkudata(L, 1, TABLE_MT);
    acl_table_unref(u->t);
    u->t = NULL;
    return 0;
}

static int
l_table(lua_State *L)
{
    struct ltable *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->t = NULL;
    luaL_setmetatable(L, TABLE_MT);
    u->t = acl_table_new();
    if (u->t == NULL)
        return luaL_error(L, "%s", err_msg());
    return 1;
}

static int
t_white(lua_State *L)
{
    struct acl_table *t = check_table(L, 1);
    size_t n;
    const char *p = luaL_checklstring(L, 2, &n);
    return lerr_result(L, acl_table_add_white(t, p, n));
}

/* spec[k] as a string (NULL when absent), raising on another type. */
static const char *
opt_str(lua_State *L, int spec, const char *k, size_t *n)
{
    int ty = lua_getfield(L, spec, k);  /* left on the stack: anchors it */
    if (ty == LUA_TNIL) {
        *n = 0;
        return NULL;
    }
    if (ty != LUA_TSTRING)
        luaL_error(L, "account field '%s' must be a string", k);
    return lua_tolstring(L, -1, n);
}

static int
t_account(lua_State *L)
{
    struct acl_table *t = check_table(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct acl_account_spec s;
    memset(&s, 0, sizeof(s));
    s.access_key = opt_str(L, 2, "accessKey", &s.access_key_len);
    s.secret_key = opt_str(L, 2, "secretKey", &s.secret_key_len);
    s.white = opt_str(L, 2, "whiteRemoteAddress", &s.white_len);
    s.default_topic_perm = opt_str(L, 2, "defaultTopicPerm", &s.default_topic_perm_len);
    s.default_group_perm = opt_str(L, 2, "defaultGroupPerm", &s.default_group_perm_len);
    lua_getfield(L, 2, "admin");
    s.admin = lua_toboolean(L, -1);
    struct acl_account *a;
    if (acl_table_add_account(t, &s, &a) != 0)
        return lerr_push(L);
    static const char *const lists[2] = {"topicPerms", "groupPerms"};
    for (int k = 0; k < 2; k++) {
        int ty = lua_getfield(L, 2, lists[k]);
        if (ty == LUA_TNIL) {
            lua_pop(L, 1);
            continue;
        }
        if (ty != LUA_TTABLE)
            return luaL_error(L, "account field '%s' must be a list", lists[k]);
        lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            size_t len;
            const char *e = lua_tolstring(L, -1, &len);
            if (e == NULL)
                return luaL_error(L, "%s[%d] must be a string", lists[k], (int)i);
            if (acl_account_add_perm(a, k == 0, e, len) != 0)
                return lerr_push(L);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int
t_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)acl_table_accounts(check_table(L, 1)));
    return 1;
}

static enum acl_role
check_role(lua_State *L, int idx)
{
    static const char *const names[] = {"broker", "namesrv", NULL};
    return luaL_checkoption(L, idx, NULL, names) == 0 ? ACL_ROLE_BROKER : ACL_ROLE_NAMESRV;
}

static int
t_check(lua_State *L)
{
    struct acl_table *t = check_table(L, 1);
    const char *peer = luaL_checkstring(L, 3);
    enum acl_role role = check_role(L, 4);
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    const struct rmq_cmd *ud = luaL_testudata(L, 2, LCMD_TYPE);
    if (ud != NULL) {
        cmd = *ud;
    } else {
        luaL_argexpected(L, lua_istable(L, 2), 2, "rmq.cmd or table");
        lua_getfield(L, 2, "code");
        cmd.code = (int32_t)luaL_checkinteger(L, -1);
        lua_getfield(L, 2, "flag");
        cmd.flag = (int32_t)luaL_optinteger(L, -1, 0);
        lua_getfield(L, 2, "body");
        opt_body(L, -1, &cmd);
        if (lua_getfield(L, 2, "ext") == LUA_TTABLE)
            lcodec_read_ext(L, lua_gettop(L), &cmd);
    }
    char remark[ACL_REMARK_MAX];
    size_t rlen;
    if (acl_check(t, signer(L), role, &cmd, peer, remark, &rlen)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushlstring(L, remark, rlen);
    return 2;
}

/* t:bench(frame | {frames}, peer, role, n) -> ns per check, allowed: n
 * checks of decoded frames (scripts/bench/acl_check.lua), so the figure is
 * the check's own cost, without Lua or decoding; the thread's CPU time, so
 * that a machine shared with other work gives the same figure.  Frames of
 * a list are checked in turn (accounts alternating on one worker);
 * `allowed` is the last check's. */
#define BENCH_FRAMES 16

static int
t_bench(lua_State *L)
{
    struct acl_table *t = check_table(L, 1);
    const char *peer = luaL_checkstring(L, 3);
    enum acl_role role = check_role(L, 4);
    lua_Integer n = luaL_checkinteger(L, 5);
    luaL_argcheck(L, n > 0, 5, "must be positive");
    int nframes = 1;
    if (lua_istable(L, 2)) {
        nframes = (int)luaL_len(L, 2);
        luaL_argcheck(L, nframes >= 1 && nframes <= BENCH_FRAMES, 2, "1 to 16 frames");
    }
    luaL_checkstack(L, 2 * nframes + 4, "bench frames");
    struct rmq_cmd cmd[BENCH_FRAMES];
    for (int k = 0; k < nframes; k++) {
        if (lua_istable(L, 2))
            lua_geti(L, 2, k + 1);
        else
            lua_pushvalue(L, 2);
        size_t len;
        const uint8_t *frame = (const uint8_t *)luaL_checklstring(L, -1, &len);
        luaL_argcheck(L, len >= 8, 2, "not a frame");
        size_t need = rmq_cmd_arena_size(be32_get(frame + 4) & 0xFFFFFFu);
        /* the frame (kept on the stack) and its arena outlive the loop */
        struct rmq_arena arena = {lua_newuserdatauv(L, need, 0), need, 0};
        if (rmq_cmd_decode(&cmd[k], frame, len, &arena) != 0)
            return luaL_error(L, "%s", err_msg());
    }
    struct acl_signer *s = signer(L);
    char remark[ACL_REMARK_MAX];
    size_t rlen;
    bool ok = true;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (lua_Integer i = 0; i < n; i++)
        ok = acl_check(t, s, role, &cmd[i % nframes], peer, remark, &rlen);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    lua_pushnumber(L, ns / (double)n);
    lua_pushboolean(L, ok);
    return 2;
}

static int
l_publish(lua_State *L)
{
    acl_publish(lua_isnoneornil(L, 1) ? NULL : check_table(L, 1));
    return 0;
}

static int
l_check_topic(lua_State *L)
{
    size_t ak_len = 0, topic_len;
    const char *ak = luaL_optlstring(L, 1, NULL, &ak_len);
    const char *peer = luaL_checkstring(L, 2);
    const char *topic = luaL_checklstring(L, 3, &topic_len);
    size_t plen;
    const char *p = luaL_checklstring(L, 4, &plen);
    uint8_t perm = acl_perm_parse(p, plen);
    char remark[ACL_REMARK_MAX];
    size_t rlen;
    struct acl_table *t = acl_acquire(NULL);
    bool ok = acl_check_topic(t, peer, ak, ak_len, topic, topic_len, perm, remark, &rlen);
    acl_table_unref(t);
    lua_pushboolean(L, ok);
    if (ok)
        return 1;
    lua_pushlstring(L, remark, rlen);
    return 2;
}

static int
l_generation(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)acl_generation());
    return 1;
}

static int
l_check_address(lua_State *L)
{
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    return lerr_result(L, acl_addr_check(p, n));
}

static int
l_perm_valid(lua_State *L)
{
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    lua_pushboolean(L, acl_perm_valid(p, n));
    return 1;
}

/* A file's identity and version: changes when it is rewritten, renamed
 * over or touched (FileWatchService compares an MD5 each time; a stat is
 * cheaper and catches the same edits). */
static int
l_file_stamp(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (stat(path, &st) != 0)
        return lerr_pushstr(L, strerror(errno));
    lua_pushfstring(L, "%I:%I:%I:%I", (lua_Integer)st.st_ino, (lua_Integer)st.st_size,
                    (lua_Integer)st.st_mtim.tv_sec, (lua_Integer)st.st_mtim.tv_nsec);
    lua_pushinteger(L, (lua_Integer)st.st_size);
    lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
    return 3;
}

static int
l_install(lua_State *L)
{
    lua_Integer listener = luaL_checkinteger(L, 1);
    /* "none": the guard exists but this listener's frames are not checked
     * here (the gRPC listener: src/grpc checks its calls itself) */
    const char *rname = luaL_checkstring(L, 2);
    int role = strcmp(rname, "none") == 0 ? 0 : (int)check_role(L, 2);
    luaL_argcheck(L, listener >= 0 && listener < HOST_MAX_LISTENERS, 1, "no such listener");
    struct host *h = host_of(L);
    if (h->acl == NULL) {
        h->acl = acl_guard_new();
        if (h->acl == NULL)
            return luaL_error(L, "acl: %s", err_msg());
    }
    h->acl_roles[listener] = (uint8_t)role;
    return 0;
}

/* }}} */

int
luaopen_rmq_acl(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        { "sign", l_sign },
        { "content", l_content },
        { "signature_of", l_signature_of },
        { "hmac", l_hmac },
        { "table", l_table },
        { "check", t_check },
        { "publish", l_publish },
        { "check_topic", l_check_topic },
        { "generation", l_generation },
        { "check_address", l_check_address },
        { "perm_valid", l_perm_valid },
        { "install", l_install },
        { "file_stamp", l_file_stamp },
        { "yaml_decode", l_yaml_decode },
        { NULL, NULL },
    };
    static const luaL_Reg table_methods[] = {
        { "white", t_white },
        { "account", t_account },
        { "count", t_count },
        { "check", t_check },
        { "bench", t_bench },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, TABLE_MT)) {
        lua_pushcfunction(L, table_gc);
        lua_setfield(L, -2, "__gc");
        luaL_newlibtable(L, table_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_getmetatable(L, TABLE_MT);
    lua_getfield(L, -1, "__index");
    luaL_setfuncs(L, table_methods, 0);
    lua_pop(L, 2);
    luaL_newlib(L, funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "NULL");
    lua_pushinteger(L, ACL_SIGNATURE_LEN);
    lua_setfield(L, -2, "SIGNATURE_LEN");
    return 1;
}
