/*
 * gen_codes: writes the C header of RocketMQ's numbers from the one table
 * that defines them, lua/rmq/codes.lua (docs/request-codes.md), at build
 * time, as Redis makes commands.def:
 *
 *   gen_codes lua/rmq/codes.lua build/gen/rmq_codes.h
 *
 * The table is run by the Lua the server embeds (it is plain Lua with
 * its own consistency checks: a number given two names fails here, so it
 * fails the build).  The header is written only when its text changes,
 * so touching codes.lua without changing a number recompiles nothing.
 *
 * Output, every list sorted by number then name:
 *   enum rmq_request_code  { RMQ_REQ_<NAME> = n }      codes.request
 *   enum rmq_response_code { RMQ_RESP_<NAME> = n }     codes.response,
 *                                                      codes.response_v5
 *   enum rmq_perm          { RMQ_<NAME> = n }          codes.perm
 *   enum rmq_mq_version    { RMQ_MQVERSION_<NAME> = n } codes.version
 *   rmq_request_name(code), rmq_response_name(code) -> name | NULL
 *   RMQ_PUT_STATUS_CODES(X), RMQ_GET_STATUS_CODES(X)    codes.put_status,
 *       codes.get_status (with codes.put_stored, codes.get_scanned):
 *       X(store status constant, RMQ_RESP_<code>, flag) per status
 *
 * A host tool, not part of rmq: it exits non-zero with a message on any
 * problem, and writes nothing then.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *name;
    lua_Integer code;
};

struct list {
    struct entry *v;
    size_t n, cap;
};

struct out {
    char *p;
    size_t n, cap;
};

static void
die(const char *what, const char *detail)
{
    fprintf(stderr, "gen_codes: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
put(struct out *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0)
            die("vsnprintf failed", NULL);
        if ((size_t)k < o->cap - o->n) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = (o->cap + (size_t)k + 1) * 2;
        char *p = realloc(o->p, cap);
        if (p == NULL)
            die("out of memory", NULL);
        o->p = p;
        o->cap = cap;
    }
}

static int
by_code(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->code != y->code)
        return x->code < y->code ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Appends the string -> integer pairs of codes[field] to l. */
static void
collect(lua_State *L, int codes, const char *field, struct list *l)
{
    if (lua_getfield(L, codes, field) != LUA_TTABLE)
        die("codes.lua returns no table", field);
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
        int isint = 0;
        lua_Integer code = lua_tointegerx(L, -1, &isint);
        if (lua_type(L, -2) != LUA_TSTRING || !isint)
            die("an entry is not NAME = integer in", field);
        const char *name = lua_tostring(L, -2);
        for (const char *c = name; *c; c++)
            if (!((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_'))
                die("a name is not a C identifier in upper case", name);
        if (l->n == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 64;
            l->v = realloc(l->v, l->cap * sizeof(*l->v));
            if (l->v == NULL)
                die("out of memory", NULL);
        }
        l->v[l->n].name = strdup(name);
        if (l->v[l->n].name == NULL)
            die("out of memory", NULL);
        l->v[l->n++].code = code;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    qsort(l->v, l->n, sizeof(*l->v), by_code);
}

static void
emit_enum(struct out *o, const char *type, const char *prefix,
                      const struct list *l, const char *comment)
{
    put(o, "/* %s */\nenum %s {\n", comment, type);
    for (size_t i = 0; i < l->n; i++)
        put(o, "    %s%s = %lld,\n", prefix, l->v[i].name, (long long)l->v[i].code);
    put(o, "};\n\n");
}

/* name(code): l's name of each number, then those of `aliases` (5.x
 * names) whose number l does not name. */
static void
emit_names(struct out *o, const char *fn, const struct list *l,
                       const struct list *aliases)
{
    put(o, "static inline const char *%s(int32_t code)\n{\n    switch (code) {\n", fn);
    for (size_t i = 0; i < l->n; i++)
        put(o, "    case %lld: return \"%s\";\n", (long long)l->v[i].code, l->v[i].name);
    for (size_t i = 0; aliases != NULL && i < aliases->n; i++) {
        int taken = 0;
        for (size_t j = 0; j < l->n && !taken; j++)
            taken = l->v[j].code == aliases->v[i].code;
        if (!taken)
            put(o, "    case %lld: return \"%s\";\n", (long long)aliases->v[i].code,
                aliases->v[i].name);
    }
    put(o, "    default: return NULL;\n    }\n}\n\n");
}

/* Whether codes[set][name] is true (a set of status names). */
static int
in_set(lua_State *L, int codes, const char *set, const char *name)
{
    if (lua_getfield(L, codes, set) != LUA_TTABLE)
        die("codes.lua returns no table", set);
    lua_getfield(L, -1, name);
    int t = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return t;
}

/* A store status table as an X-macro: X(enum constant, reply code, flag),
 * the constant being `prefix` + the name unless the name has it (PUT_OK);
 * the flag is the status's membership of codes[set]. */
static void
emit_status(struct out *o, lua_State *L, int codes, const char *macro, const char *prefix,
            const struct list *st, const struct list *resp, const char *set)
{
    put(o, "#define %s(X) \\\n", macro);
    for (size_t i = 0; i < st->n; i++) {
        const char *rname = NULL;
        for (size_t j = 0; j < resp->n && rname == NULL; j++)
            if (resp->v[j].code == st->v[i].code)
                rname = resp->v[j].name;
        if (rname == NULL)
            die("a status maps to no response code", st->v[i].name);
        int has = strncmp(st->v[i].name, prefix, strlen(prefix)) == 0;
        put(o, "    X(%s%s, RMQ_RESP_%s, %d)%s\n", has ? "" : prefix, st->v[i].name, rname,
            in_set(L, codes, set, st->v[i].name), i + 1 < st->n ? " \\" : "");
    }
    put(o, "\n");
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    struct out o = {0};
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (o.n + k + 1 > o.cap) {
            o.cap = (o.n + k + 1) * 2;
            o.p = realloc(o.p, o.cap);
            if (o.p == NULL)
                die("out of memory", NULL);
        }
        memcpy(o.p + o.n, chunk, k);
        o.n += k;
    }
    fclose(f);
    *len = o.n;
    return o.p ? o.p : strdup("");
}

int
main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: gen_codes CODES.lua OUT.h", NULL);
    lua_State *L = luaL_newstate();
    if (L == NULL)
        die("out of memory", NULL);
    luaL_openlibs(L);
    if (luaL_loadfile(L, argv[1]) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
        die("codes.lua does not load", lua_tostring(L, -1));
    if (!lua_istable(L, -1))
        die("codes.lua returns no table", NULL);
    int codes = lua_gettop(L);

    struct list req = {0}, resp = {0}, resp5 = {0}, perm = {0}, ver = {0}, puts = {0}, gets = {0};
    collect(L, codes, "request", &req);
    collect(L, codes, "response", &resp);
    collect(L, codes, "response_v5", &resp5);
    collect(L, codes, "perm", &perm);
    collect(L, codes, "version", &ver);
    collect(L, codes, "put_status", &puts);
    collect(L, codes, "get_status", &gets);

    struct list resp_all = {0};
    resp_all.n = resp_all.cap = resp.n + resp5.n;
    resp_all.v = malloc(resp_all.cap * sizeof(*resp_all.v));
    if (resp_all.v == NULL)
        die("out of memory", NULL);
    memcpy(resp_all.v, resp.v, resp.n * sizeof(*resp.v));
    memcpy(resp_all.v + resp.n, resp5.v, resp5.n * sizeof(*resp5.v));
    qsort(resp_all.v, resp_all.n, sizeof(*resp_all.v), by_code);

    struct out o = {0};
    put(&o, "/* generated by cmake/gen_codes.c from lua/rmq/codes.lua: do not edit.\n"
            " * RocketMQ's request and response codes, PermName bits and MQVersion\n"
            " * ordinals: the one table, docs/request-codes.md. */\n"
            "#ifndef RMQ_CODES_H\n#define RMQ_CODES_H\n\n#include <stddef.h>\n"
            "#include <stdint.h>\n\n");
    emit_enum(&o, "rmq_request_code", "RMQ_REQ_", &req, "RequestCode (codes.request)");
    emit_enum(&o, "rmq_response_code", "RMQ_RESP_", &resp_all,
              "ResponseCode (codes.response, then codes.response_v5: 5.x names of\n"
              " * numbers 4.9.8 gives another meaning)");
    emit_enum(&o, "rmq_perm", "RMQ_", &perm, "PermName bits (codes.perm)");
    emit_enum(&o, "rmq_mq_version", "RMQ_MQVERSION_", &ver,
              "MQVersion.Version ordinals (codes.version)");
    put(&o, "/* The name of a request code, or NULL. */\n");
    emit_names(&o, "rmq_request_name", &req, NULL);
    put(&o, "/* The name of a response code (the 4.9.8 one where 5.x reuses the\n"
            " * number), or NULL. */\n");
    emit_names(&o, "rmq_response_name", &resp, &resp5);
    put(&o, "/* The store's put statuses -> a SEND's reply code, and whether the\n"
            " * message is stored (codes.put_status, codes.put_stored): X(enum\n"
            " * put_status constant, reply code, stored).  Others: SYSTEM_ERROR. */\n");
    emit_status(&o, L, codes, "RMQ_PUT_STATUS_CODES", "PUT_", &puts, &resp, "put_stored");
    put(&o, "/* The store's get statuses -> a PULL's reply code, and whether the read\n"
            " * scanned consume queue entries (codes.get_status, codes.get_scanned):\n"
            " * X(enum get_status constant, reply code, scanned).  The others answer\n"
            " * by the pull's offset (codes.lua says how). */\n");
    emit_status(&o, L, codes, "RMQ_GET_STATUS_CODES", "GET_", &gets, &resp, "get_scanned");
    put(&o, "#endif\n");
    lua_close(L);

    size_t old_len = 0;
    char *old = slurp(argv[2], &old_len);
    if (old != NULL && old_len == o.n && memcmp(old, o.p, o.n) == 0)
        return 0;
    free(old);
    size_t tl = strlen(argv[2]) + 5;
    char *tmp = malloc(tl);
    if (tmp == NULL)
        die("out of memory", NULL);
    snprintf(tmp, tl, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(o.p, 1, o.n, f) != o.n || fclose(f) != 0)
        die("cannot write", tmp);
    if (rename(tmp, argv[2]) != 0)
        die("cannot rename to", argv[2]);
    return 0;
}
