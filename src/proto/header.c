/*
 * proto/header: see header.h.
 *
 * A compiled spec is one userdata: the field array (wire name, type,
 * limits) and, in its uservalue table, the strings and defaults it points
 * at: [i] = the key of field i in the typed table, [n + i] = its default,
 * [2n + i] = its wire name (anchoring the char * the lookups use; Lua
 * strings never move).  spec:read does one lookup per field in the
 * command's decoded extFields (no Lua strings made for the look-up, no
 * pattern matching), parses in C and fills one table.
 */
#include "proto/header.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/buf.h"
#include "core/jscan.h"
#include "rmq_codes.h"

#define LHEADER_TYPE "rmq.header.spec"

#define TOPIC_MAX 127
#define GROUP_MAX 255
#define SHOW_MAX 64   /* bytes of a bad value shown in a remark */

enum ftype { T_STRING, T_INT, T_LONG, T_BOOL, T_TOPIC, T_GROUP };

static const char *const type_names[] = {
    "string", "int", "long", "bool", "topic", "group", NULL,
};

struct hfield {
    const char *name;      /* wire name, anchored in the uservalue */
    uint32_t name_len;
    uint8_t type;
    bool required;
    bool has_default;
    bool aliased;          /* the typed key differs from the wire name */
    const char *alias;     /* the typed key (when aliased) */
    int64_t min, max;      /* int/long; defaults: the type's range */
    uint32_t max_len;      /* string: 0 = unlimited */
};

#define MAX_FIELDS LHEADER_MAX_FIELDS

/* Slots of the longer names' table (struct hspec.by_name). */
#define NAME_SLOTS 128
#define SLOT_SHARED 255

struct hspec {
    int n;
    int nlong;                 /* fields with names longer than 1 byte */
    uint64_t required;         /* bit i: field i is required */
    /* 1-byte names (V2's a..n): field index + 1, by the byte (128-255
     * stay 0: no field has such a name), so a key is one load. */
    uint8_t by1[256];
    /* The longer names by name_slot(): field index + 1, 0 for none,
     * SLOT_SHARED when two share the slot (then longs[] is walked).  A
     * key is then one table load and one compare, not a walk over the
     * spec's names (a pull's eleven). */
    uint8_t by_name[NAME_SLOTS];
    uint8_t longs[MAX_FIELDS]; /* the others' indexes */
    struct hfield f[];
};

/* A name of n >= 2 bytes to its slot: its length and three of its
 * bytes (no two of a pull's or a heartbeat's names share one). */
static inline unsigned
name_slot(const char *p, size_t n)
{
    return ((unsigned)n * 37 + (unsigned char)p[0] * 5 + (unsigned char)p[n - 1] * 3 +
            (unsigned char)p[n / 2]) & (NAME_SLOTS - 1);
}

/* {{{ Name rules (TopicValidator / Validators, 4.9.8) */

/* ^[%|a-zA-Z0-9_-]+$ as 256 bits, one per byte value: '%' '-' '0'-'9'
 * in the first word; 'A'-'Z' '_' 'a'-'z' '|' in the second.  One load
 * and test per character of every topic a send names. */
static const uint64_t valid_bits[4] = {
    UINT64_C(0x3ff202000000000), UINT64_C(0x17fffffe87fffffe), 0, 0,
};

static inline bool
valid_char(unsigned char c)
{
    return (valid_bits[c >> 6] >> (c & 63) & 1) != 0;
}

/* Java's Character.isWhitespace for the ASCII range. */
static bool
java_space(unsigned char c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
}

static bool
blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!java_space((unsigned char)p[i]))
            return false;
    return true;
}

#if defined(__SSE2__)
/* The lanes of x that are in ^[%|a-zA-Z0-9_-]$ (valid_bits' set, by
 * ranges: a letter with its case bit set is 'a'..'z'; unsigned "in
 * range" is a saturating subtract that leaves 0). */
static inline unsigned
valid_lanes(__m128i x)
{
    const __m128i z = _mm_setzero_si128();
    __m128i t = _mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
    __m128i ok = _mm_cmpeq_epi8(_mm_subs_epu8(t, _mm_set1_epi8(25)), z);
    t = _mm_sub_epi8(x, _mm_set1_epi8('0'));
    ok = _mm_or_si128(ok, _mm_cmpeq_epi8(_mm_subs_epu8(t, _mm_set1_epi8(9)), z));
    ok = _mm_or_si128(ok, _mm_cmpeq_epi8(x, _mm_set1_epi8('_')));
    ok = _mm_or_si128(ok, _mm_cmpeq_epi8(x, _mm_set1_epi8('-')));
    ok = _mm_or_si128(ok, _mm_cmpeq_epi8(x, _mm_set1_epi8('%')));
    ok = _mm_or_si128(ok, _mm_cmpeq_epi8(x, _mm_set1_epi8('|')));
    return (unsigned)_mm_movemask_epi8(ok);
}
#endif

/* Whether any byte of p[0, n) is outside valid_bits' set.  A send names
 * a topic, a group and a default topic (topic and group checked on every
 * request of a dozen kinds): 8 or 16 bytes a step, the last step
 * overlapping the one before it so that no load leaves the name. */
static bool
illegal(const char *p, size_t n)
{
#if defined(__SSE2__)
    if (n >= 16) {
        size_t i = 0;
        for (; n - i > 16; i += 16)
            if (valid_lanes(_mm_loadu_si128((const __m128i *)(const void *)(p + i))) != 0xFFFFu)
                return true;
        return valid_lanes(_mm_loadu_si128((const __m128i *)(const void *)(p + n - 16))) != 0xFFFFu;
    }
    if (n >= 8) {
        __m128i x = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p),
                                       _mm_loadl_epi64((const __m128i *)(const void *)(p + n - 8)));
        return valid_lanes(x) != 0xFFFFu;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        if (!valid_char((unsigned char)p[i]))
            return true;
    }
    return false;
}

static const char *
topic_reason(const char *p, size_t n)
{
    if (blank(p, n))
        return "The specified topic is blank.";
    if (illegal(p, n))
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$";
    if (n > TOPIC_MAX)
        return "The specified topic is longer than topic max length.";
    return NULL;
}

/* The value as a remark may show it: at most SHOW_MAX bytes, printable
 * ASCII except '"' and '\\' (others become '?'), "..." when cut. */
static void
show(char *out, size_t cap, const char *p, size_t n)
{
    size_t k = 0;
    size_t lim = n > SHOW_MAX ? SHOW_MAX : n;
    for (size_t i = 0; i < lim && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        out[k++] = (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') ? (char)c : '?';
    }
    if (n > lim)
        for (int i = 0; i < 3 && k + 1 < cap; i++)
            out[k++] = '.';
    out[k] = '\0';
}

/* Writes the reason a group name is refused into out and returns 1, or
 * returns 0. */
static int
group_reason(const char *p, size_t n, char *out, size_t cap)
{
    if (blank(p, n)) {
        snprintf(out, cap, "the specified group is blank");
        return 1;
    }
    if (n > GROUP_MAX) {
        snprintf(out, cap, "the specified group is longer than group max length 255.");
        return 1;
    }
    if (illegal(p, n)) {
        char v[SHOW_MAX + 8];
        show(v, sizeof(v), p, n);
        snprintf(out, cap, "the specified group[%s] contains illegal characters, "
                           "allowing only ^[%%|a-zA-Z0-9_-]+$", v);
        return 1;
    }
    return 0;
}

static int
lheader_topic(lua_State *L)
{
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    const char *why = topic_reason(p, n);
    if (why == NULL)
        lua_pushnil(L);
    else
        lua_pushstring(L, why);
    return 1;
}

static int
lheader_group(lua_State *L)
{
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    char why[512];
    if (group_reason(p, n, why, sizeof(why)))
        lua_pushstring(L, why);
    else
        lua_pushnil(L);
    return 1;
}

/* }}} */

/* {{{ Numbers */

/* The 8 bytes at p as a number when they are all digits (the first the
 * most significant): a millisecond timestamp's 13 digits in one step and
 * five, not thirteen.  Every byte's high nibble must be 3 and stay 3
 * when 6 is added (0x30-0x39 only); then pairs, quads and the eight by
 * multiplication (the fast_float way). */
static inline bool
digits8(const char *p, uint64_t *out)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t hi = UINT64_C(0xF0F0F0F0F0F0F0F0);
    if (((v & hi) | (((v + UINT64_C(0x0606060606060606)) & hi) >> 4)) !=
        UINT64_C(0x3333333333333333))
        return false;
    v -= UINT64_C(0x3030303030303030);
    v = v * 10 + (v >> 8);
    v = ((v & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32)) +
         ((v >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32))) >> 32;
    *out = v;
    return true;
#else
    (void)out;
    return false;
#endif
}

/* Long.parseLong, strictly: [+-]?[0-9]+ within int64.  0, or -1 when
 * it is not a number, -2 when it does not fit. */
static int
parse_i64(const char *p, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (n > 0 && (p[0] == '+' || p[0] == '-')) {
        neg = p[0] == '-';
        i = 1;
    }
    if (i == n)
        return -1;
    if (n - i <= 18) {
        /* 18 digits fit in int64 whatever they are: no overflow test,
         * no division (a send's header has five numbers; this is them). */
        uint64_t v = 0, d8;
        if (n - i >= 8 && digits8(p + i, &d8)) {
            v = d8;
            i += 8;
            if (n - i >= 8 && digits8(p + i, &d8)) {
                v = v * 100000000 + d8;
                i += 8;
            }
        }
        for (; i < n; i++) {
            unsigned d = (unsigned)((unsigned char)p[i] - '0');
            if (d > 9)
                return -1;
            v = v * 10 + d;
        }
        *out = neg ? -(int64_t)v : (int64_t)v;
        return 0;
    }
    const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    bool over = false;
    for (; i < n; i++) {
        unsigned d = (unsigned)((unsigned char)p[i] - '0');
        if (d > 9)
            return -1;
        if (!over && v > (lim - d) / 10)
            over = true;
        if (!over)
            v = v * 10 + d;
    }
    if (over)
        return -2;
    if (!neg)
        *out = (int64_t)v;
    else if (v == (uint64_t)INT64_MAX + 1)
        *out = INT64_MIN;
    else
        *out = -(int64_t)v;
    return 0;
}

/* }}} */

/* {{{ compile */

static struct hspec *
check_spec(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, LHEADER_TYPE);
}

static int64_t
opt_i64(lua_State *L, int t, const char *key, int64_t dflt, int i)
{
    int ty = lua_getfield(L, t, key);
    int64_t v = dflt;
    if (ty != LUA_TNIL) {
        int ok;
        lua_Integer x = lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "header field %d: %s must be an integer", i, key);
        v = x;
    }
    lua_pop(L, 1);
    return v;
}

/* header.compile{ {name, type, required, as=, min=, max=, max_len=,
 * default=}, ... } -> spec */
static int
lheader_compile(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    luaL_argcheck(L, n >= 1 && n <= MAX_FIELDS, 1, "a header spec has 1..64 fields");
    struct hspec *s = lua_newuserdatauv(L, sizeof(*s) + (size_t)n * sizeof(s->f[0]), 1);
    memset(s, 0, sizeof(*s) + (size_t)n * sizeof(s->f[0]));
    s->n = n;
    luaL_setmetatable(L, LHEADER_TYPE);
    int ud = lua_gettop(L);
    lua_createtable(L, 3 * n, 0);
    int uv = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        struct hfield *f = &s->f[i - 1];
        if (lua_rawgeti(L, 1, i) != LUA_TTABLE)
            return luaL_error(L, "header field %d must be a table {name, type, required}", i);
        int t = lua_gettop(L);
        size_t nl;
        lua_rawgeti(L, t, 1);
        const char *name = lua_tolstring(L, -1, &nl);
        if (name == NULL || nl == 0)
            return luaL_error(L, "header field %d has no name", i);
        for (int j = 0; j < i - 1; j++)
            if (s->f[j].name_len == nl && memcmp(s->f[j].name, name, nl) == 0)
                return luaL_error(L, "header field %s is declared twice", name);
        f->name = name;
        f->name_len = (uint32_t)nl;
        if (nl == 1 && (unsigned char)name[0] < 128) {
            s->by1[(unsigned char)name[0]] = (uint8_t)i;
        } else {
            s->longs[s->nlong++] = (uint8_t)(i - 1);
            if (nl >= 2) {
                uint8_t *slot = &s->by_name[name_slot(name, nl)];
                *slot = *slot == 0 ? (uint8_t)i : SLOT_SHARED;
            }
        }
        lua_rawseti(L, uv, 2 * n + i);   /* anchors name */
        lua_rawgeti(L, t, 2);
        const char *ty = lua_tostring(L, -1);
        int k = 0;
        while (ty != NULL && type_names[k] != NULL && strcmp(type_names[k], ty) != 0)
            k++;
        if (ty == NULL || type_names[k] == NULL)
            return luaL_error(L, "header field %s: unknown type %s", name,
                              ty ? ty : "(none)");
        f->type = (uint8_t)k;
        lua_pop(L, 1);
        lua_rawgeti(L, t, 3);
        f->required = lua_toboolean(L, -1);
        if (f->required)
            s->required |= UINT64_C(1) << (i - 1);
        lua_pop(L, 1);
        /* The typed key: `as`, else the wire name. */
        if (lua_getfield(L, t, "as") == LUA_TSTRING) {
            f->alias = lua_tostring(L, -1);
            f->aliased = strcmp(f->alias, name) != 0;
        } else {
            lua_pop(L, 1);
            lua_pushlstring(L, name, nl);
            f->alias = name;
        }
        lua_rawseti(L, uv, i);
        if (lua_getfield(L, t, "default") != LUA_TNIL) {
            f->has_default = true;
            lua_rawseti(L, uv, n + i);
        } else {
            lua_pop(L, 1);
        }
        int64_t lo = f->type == T_INT ? INT32_MIN : INT64_MIN;
        int64_t hi = f->type == T_INT ? INT32_MAX : INT64_MAX;
        f->min = opt_i64(L, t, "min", lo, i);
        f->max = opt_i64(L, t, "max", hi, i);
        if (f->min < lo || f->max > hi || f->min > f->max)
            return luaL_error(L, "header field %s: bad range", name);
        int64_t ml = opt_i64(L, t, "max_len", 0, i);
        if (ml < 0 || ml > UINT32_MAX)
            return luaL_error(L, "header field %s: bad max_len", name);
        f->max_len = (uint32_t)ml;
        lua_settop(L, uv);
    }
    lua_setiuservalue(L, ud, 1);
    return 1;
}

/* }}} */

/* {{{ read */

/* "<name>" or "<name> (alias)" into buf. */
static void
field_label(char *buf, size_t cap, const struct hfield *f)
{
    if (f->aliased)
        snprintf(buf, cap, "<%s> (%s)", f->name, f->alias);
    else
        snprintf(buf, cap, "<%s>", f->name);
}

static int
refuse_value(const struct hfield *f, const char *what, const char *p,
             size_t n, char *remark, size_t cap)
{
    char label[160], v[SHOW_MAX + 8];
    field_label(label, sizeof(label), f);
    show(v, sizeof(v), p, n);
    snprintf(remark, cap, "the custom field %s %s: \"%s\"", label, what, v);
    return RMQ_RESP_SYSTEM_ERROR;
}

static bool
java_true(const char *p, size_t n)
{
    return n == 4 && (p[0] | 0x20) == 't' && (p[1] | 0x20) == 'r' &&
           (p[2] | 0x20) == 'u' && (p[3] | 0x20) == 'e';
}

/* The index of the field whose wire name is the kl bytes at kp, or -1. */
static inline int
field_of(const struct hspec *s, const char *kp, uint32_t kl)
{
    if (__builtin_expect(kl == 1, 1))
        /* SEND_MESSAGE_V2's keys, and any other one-byte name. */
        return (int)s->by1[(unsigned char)kp[0]] - 1;
    if (kl == 0)
        return -1;
    unsigned slot = name_slot(kp, kl);
    if (s->by_name[slot] != SLOT_SHARED) {
        int t = s->by_name[slot] - 1;
        return t >= 0 && s->f[t].name_len == kl && bytes_eq(s->f[t].name, kp, kl) ? t : -1;
    }
    for (int j = 0; j < s->nlong; j++) {
        const struct hfield *f = &s->f[s->longs[j]];
        if (f->name_len == kl && f->name[0] == kp[0] && bytes_eq(f->name, kp, kl))
            return s->longs[j];
    }
    return -1;
}

/*
 * Whether value v passes field f's checks, and v->i for a number or a
 * bool: the same verdict as check_values(), without its messages.  A
 * topic or group passes when it is not empty, not too long and made of
 * valid characters only (none of which is blank), which is exactly when
 * none of the name rules refuses it.
 */
static inline __attribute__((always_inline)) bool
value_ok(const struct hfield *f, struct lheader_val *v)
{
    switch (f->type) {
    case T_STRING:
        return f->max_len == 0 || v->len <= f->max_len;
    case T_INT:
    case T_LONG: {
        /* min..max lies inside the type's range (compile checks it).
         * Most of a header's numbers are one digit (queue ids, flags,
         * counts): those without the call. */
        int64_t x;
        unsigned d0;
        if (v->len == 1 && (d0 = (unsigned)((unsigned char)v->p[0] - '0')) <= 9)
            x = (int64_t)d0;
        else if (parse_i64(v->p, v->len, &x) != 0)
            return false;
        if (x < f->min || x > f->max)
            return false;
        v->i = x;
        return true;
    }
    case T_BOOL:
        v->i = java_true(v->p, v->len);
        return true;
    case T_TOPIC:
        return v->len > 0 && v->len <= TOPIC_MAX && !illegal(v->p, v->len);
    case T_GROUP:
        return v->len > 0 && v->len <= GROUP_MAX && !illegal(v->p, v->len);
    default:
        return false;
    }
}

/*
 * The value of every field of s in the command's extFields, typed and
 * checked in the same pass over them (a later duplicate wins, as in
 * Java's HashMap, and so does its verdict).  True when every field
 * passed and every required one is there; false leaves the refusal to
 * check_values(), which names the first bad field in declaration order.
 */
static bool
collect(const struct hspec *s, const struct rmq_cmd *c, struct lheader_val *vals)
{
    uint64_t set = 0, bad = 0;
    uint32_t n = c->ext_count;
    const struct rmq_field *ext = c->ext;
    for (uint32_t i = 0; i < n; i++) {
        const struct rmq_field *e = &ext[i];
        if (e->key.p == NULL || e->val.p == NULL)
            continue;
        int fi = field_of(s, e->key.p, e->key.len);
        if (fi < 0)
            continue;
        struct lheader_val *v = &vals[fi];
        uint64_t bit = UINT64_C(1) << fi;
        v->p = e->val.p;
        v->len = e->val.len;
        v->set = true;
        set |= bit;
        /* A later duplicate's verdict replaces the earlier one's. */
        bad = value_ok(&s->f[fi], v) ? bad & ~bit : bad | bit;
    }
    return bad == 0 && (s->required & ~set) == 0;
}

/* Types and checks every collected value; the first bad field refuses. */
static int
check_values(const struct hspec *s, struct lheader_val *vals, char *remark,
             size_t cap)
{
    for (int i = 0; i < s->n; i++) {
        const struct hfield *f = &s->f[i];
        struct lheader_val *v = &vals[i];
        if (!v->set) {
            if (f->required) {
                snprintf(remark, cap, "the custom field <%s> is null", f->name);
                return RMQ_RESP_SYSTEM_ERROR;
            }
            continue;
        }
        const char *p = v->p;
        size_t len = v->len;
        switch (f->type) {
        case T_STRING:
            if (f->max_len != 0 && len > f->max_len) {
                char what[64];
                snprintf(what, sizeof(what), "is longer than %u bytes", f->max_len);
                return refuse_value(f, what, p, len, remark, cap);
            }
            break;
        case T_INT:
        case T_LONG: {
            int64_t x;
            int rc = parse_i64(p, len, &x);
            if (rc == 0 && f->type == T_INT && (x < INT32_MIN || x > INT32_MAX))
                rc = -2;
            if (rc != 0)
                return refuse_value(f, f->type == T_INT ? "is not an Integer"
                                                        : "is not a Long",
                                    p, len, remark, cap);
            if (x < f->min || x > f->max) {
                char what[96];
                bool lo = f->min == (f->type == T_INT ? INT32_MIN : INT64_MIN);
                bool hi = f->max == (f->type == T_INT ? INT32_MAX : INT64_MAX);
                if (hi)
                    snprintf(what, sizeof(what), "must be >= %lld", (long long)f->min);
                else if (lo)
                    snprintf(what, sizeof(what), "must be <= %lld", (long long)f->max);
                else
                    snprintf(what, sizeof(what), "is out of range %lld..%lld",
                             (long long)f->min, (long long)f->max);
                return refuse_value(f, what, p, len, remark, cap);
            }
            v->i = x;
            break;
        }
        case T_BOOL:
            v->i = java_true(p, len);
            break;
        case T_TOPIC: {
            const char *why = topic_reason(p, len);
            if (why != NULL) {
                snprintf(remark, cap, "%s", why);
                return RMQ_RESP_SYSTEM_ERROR;
            }
            break;
        }
        case T_GROUP:
            if (group_reason(p, len, remark, cap))
                return RMQ_RESP_SYSTEM_ERROR;
            break;
        default:
            snprintf(remark, cap, "corrupt header spec");
            return RMQ_RESP_SYSTEM_ERROR;
        }
    }
    return 0;
}

/* An entry's value as the memo keeps it: the offsets of its quotes in
 * the header, and the field it fills (-1: a key s does not declare). */
struct memo_span {
    uint32_t q0, q1;
    int fi;
};

#define MEMO_SPANS 32          /* a header with more entries is not kept */

struct lheader_memo {
    const struct hspec *spec;  /* NULL: nothing kept */
    uint32_t at, hlen, end;    /* lheader_json_ext's arguments and answer */
    uint32_t cap;              /* bytes hdr and text hold (text: + 1) */
    uint32_t seen;             /* the length of the last header not kept */
    int nspan;
    struct memo_span span[MEMO_SPANS];
    struct lheader_val vals[MAX_FIELDS]; /* as taken; p into text */
    struct rmq_json_tail_memo tail;      /* the members after extFields */
    /* cap bytes of the header, then cap + 1 of text: each value
     * unescaped, NUL-terminated, at its raw offset (never longer than
     * raw); one allocation. */
    uint8_t bytes[];
};

static inline uint8_t *
memo_text(struct lheader_memo *m)
{
    return m->bytes + m->cap;
}

/*
 * The extFields pass of lheader_json_ext; with spans non-NULL it also
 * records where each entry's value is, *nspan = -1 when it cannot (a key
 * spelled with an escape, too many entries).
 */
static inline __attribute__((always_inline)) size_t
ext_pass(const struct hspec *s, const uint8_t *h, size_t hlen, size_t at,
         struct lheader_val *vals, uint8_t *scratch, size_t cap,
         struct memo_span *spans, int *nspan)
{
    const uint8_t *p = h + at, *end = h + hlen;
    /* jscan_entry_plain writes below scratch + (end - p) for all the
     * entries together (a copy never outgrows its source). */
    if (at >= hlen || cap < hlen - at)
        return 0;
    memset(vals, 0, (size_t)s->n * sizeof(*vals));
    uint64_t set = 0;
    uint8_t *w = scratch;
    if (*p == '}')
        p++;
    else
        for (;;) {
            uint32_t kn, vn;
            const uint8_t *q = jscan_entry_plain(p, end, w, &kn, &vn);
            if (q == NULL)
                return 0;
            int fi = field_of(s, (const char *)w, kn);
            if (spans != NULL && *nspan >= 0) {
                /* `"key":"`, the key as written (no escape), then the
                 * value up to the quote before q. */
                if (*nspan < MEMO_SPANS && p[kn + 1] == '"' && p[kn + 2] == ':' &&
                    p[kn + 3] == '"' && memcmp(p + 1, w, kn) == 0)
                    spans[(*nspan)++] = (struct memo_span){
                        (uint32_t)(p + kn + 3 - h), (uint32_t)(q - 1 - h), fi };
                else
                    *nspan = -1;
            }
            if (fi >= 0) {
                /* collect()'s steps, one entry at a time; a repeated
                 * field, a refused value: the generic way decides. */
                uint64_t bit = UINT64_C(1) << fi;
                struct lheader_val *v = &vals[fi];
                v->p = (const char *)w + kn + 1;
                v->len = vn;
                v->set = true;
                if ((set & bit) != 0 || !value_ok(&s->f[fi], v))
                    return 0;
                set |= bit;
            }
            w += kn + vn + 2;
            p = q + 1;
            if (*q == '}')
                break;
        }
    if ((s->required & ~set) != 0)
        return 0;
    return (size_t)(p - h);
}

size_t
lheader_json_ext(const struct hspec *s, const uint8_t *h, size_t hlen, size_t at,
                 struct lheader_val *vals, uint8_t *scratch, size_t cap)
{
    return ext_pass(s, h, hlen, at, vals, scratch, cap, NULL, NULL);
}

/* The header just taken (end != 0) kept in *mp (made or grown to hold
 * it: the caller's vals point into its scratch, not the memo), when it
 * fits. */
static void
memo_keep(struct lheader_memo **mp, const struct hspec *s, const uint8_t *h, size_t hlen,
          size_t at, size_t end, const struct lheader_val *vals,
          const struct memo_span *spans, int nspan)
{
    struct lheader_memo *m = *mp;
    if (nspan < 0 || hlen > LHEADER_MEMO_MAX)
        return;   /* the one kept, if any, is still good */
    if (m == NULL || m->cap < hlen) {
        uint32_t cap = (uint32_t)(hlen < 256 ? 256 : hlen);
        bool fresh = m == NULL;
        m = realloc(m, sizeof(*m) + 2 * (size_t)cap + 1);
        if (m == NULL)
            return;   /* no memory: *mp as it was, nothing kept */
        if (fresh)
            m->tail.len = 0;
        m->cap = cap;
        *mp = m;
    }
    memcpy(m->bytes, h, hlen);
    memcpy(m->vals, vals, (size_t)s->n * sizeof(*vals));
    for (int i = 0; i < nspan; i++) {
        const struct memo_span *sp = &spans[i];
        if (sp->fi < 0)
            continue;
        struct lheader_val *v = &m->vals[sp->fi];
        uint8_t *t = memo_text(m) + sp->q0 + 1;
        memcpy(t, v->p, v->len);
        t[v->len] = '\0';
        v->p = (const char *)t;
    }
    memcpy(m->span, spans, (size_t)nspan * sizeof(spans[0]));
    m->nspan = nspan;
    m->seen = (uint32_t)hlen;
    m->at = (uint32_t)at;
    m->hlen = (uint32_t)hlen;
    m->end = (uint32_t)end;
    m->spec = s;
}

/* The bytes at i + each set bit of diff differ from the kept header's:
 * marks the entries whose values hold them in *dirty (si: the entry to
 * look from, the bytes come in order); false when one is not inside a
 * value. */
static inline bool
memo_dirty(const struct lheader_memo *m, uint32_t i, unsigned diff, int *si, uint64_t *dirty)
{
    while (diff != 0) {
        uint32_t pos = i + (uint32_t)__builtin_ctz(diff);
        diff &= diff - 1;
        while (*si < m->nspan && m->span[*si].q1 <= pos)
            (*si)++;
        if (*si == m->nspan || pos <= m->span[*si].q0)
            return false;   /* a key, a quote, a separator: not the same shape */
        *dirty |= UINT64_C(1) << *si;
    }
    return true;
}

/*
 * The header against the one m keeps (same spec, length and extFields
 * start): the entries whose value bytes differ are read again, the others
 * keep their typed values.  0 when it is not that header with other
 * values (a byte outside a value differs, a value no longer ends where it
 * did, or one s refuses): the full pass decides then.
 */
static size_t
memo_pass(struct lheader_memo *m, const struct hspec *s, const uint8_t *h,
          struct lheader_val *vals)
{
    const uint8_t *o = m->bytes;
    uint32_t i = m->at, hi = m->end;
    uint64_t dirty = 0;
    int si = 0;
#if defined(__SSE2__)
    /* 16 bytes a step, most of them equal; the last step overlaps the
     * one before it, the lanes already compared shifted out. */
    for (; hi - i >= 16; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(h + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(o + i));
        unsigned diff = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) ^ 0xFFFFu;
        if (diff != 0 && !memo_dirty(m, i, diff, &si, &dirty))
            return 0;
    }
    if (i < hi && hi - m->at >= 16) {
        uint32_t j = hi - 16;
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(h + j));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(o + j));
        unsigned diff = ((unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) ^ 0xFFFFu) >> (i - j);
        if (diff != 0 && !memo_dirty(m, i, diff, &si, &dirty))
            return 0;
        i = hi;
    }
#endif
    for (; i < hi; i += 16) {
        uint32_t step = hi - i < 16 ? hi - i : 16;
        unsigned diff = 0;
        for (uint32_t k = 0; k < step; k++)
            diff |= (unsigned)(h[i + k] != o[i + k]) << k;
        if (diff != 0 && !memo_dirty(m, i, diff, &si, &dirty))
            return 0;
    }
    memcpy(vals, m->vals, (size_t)s->n * sizeof(*vals));
    for (uint64_t d = dirty; d != 0; d &= d - 1) {
        struct memo_span *sp = &m->span[__builtin_ctzll(d)];
        const uint8_t *q = h + sp->q0;
        uint8_t *t = memo_text(m) + sp->q0 + 1;
        /* The value again, to the same closing quote: its writes stay in
         * its own raw span of text (jscan_string_copy's bound). */
        ptrdiff_t n = jscan_string_copy(&q, h + sp->q1 + 1, t);
        if (n < 0 || q != h + sp->q1 + 1) {
            m->spec = NULL;
            return 0;
        }
        if (sp->fi < 0)
            continue;
        struct lheader_val *v = &vals[sp->fi];
        v->p = (const char *)t;
        v->len = (uint32_t)n;
        if (!value_ok(&s->f[sp->fi], v)) {
            m->spec = NULL;
            return 0;
        }
        m->vals[sp->fi] = *v;
    }
    for (uint64_t d = dirty; d != 0; d &= d - 1) {
        const struct memo_span *sp = &m->span[__builtin_ctzll(d)];
        memcpy(m->bytes + sp->q0 + 1, h + sp->q0 + 1, sp->q1 - sp->q0 - 1);
    }
    return m->end;
}

size_t
lheader_json_ext_memo(const struct hspec *s, struct lheader_memo **mp, const uint8_t *h,
                      size_t hlen, size_t at, struct lheader_val *vals,
                      uint8_t *scratch, size_t cap)
{
    struct lheader_memo *m = *mp;
    if (m != NULL && m->spec == s && m->hlen == hlen && m->at == at) {
        size_t end = memo_pass(m, s, h, vals);
        if (end != 0)
            return end;
    }
    struct memo_span spans[MEMO_SPANS];
    int nspan = 0;
    size_t end = ext_pass(s, h, hlen, at, vals, scratch, cap, spans, &nspan);
    if (end == 0)
        return 0;
    /* Kept when its length came twice in a row (a client whose headers
     * all differ in length pays no copy a request); the one kept stays
     * good for the headers of its shape meanwhile. */
    if (m != NULL && m->seen != hlen) {
        m->seen = (uint32_t)hlen;
        return end;
    }
    memo_keep(mp, s, h, hlen, at, end, vals, spans, nspan);
    return end;
}

bool
lheader_json_tail_memo(struct lheader_memo *m, const uint8_t *h, size_t hlen, size_t at,
                       struct rmq_cmd *cmd)
{
    return m != NULL ? rmq_json_tail_memo(h, hlen, at, cmd, &m->tail)
                     : rmq_json_tail(h, hlen, at, cmd);
}

int
lheader_decode(const struct hspec *s, const struct rmq_cmd *c,
               struct lheader_val *vals, char *remark, size_t cap)
{
    memset(vals, 0, (size_t)s->n * sizeof(*vals));
    if (collect(s, c, vals))
        return 0;
    return check_values(s, vals, remark, cap);
}

bool
lheader_typed_ok(const struct hspec *s, const struct lheader_val *vals)
{
    for (int i = 0; i < s->n; i++) {
        const struct hfield *f = &s->f[i];
        const struct lheader_val *v = &vals[i];
        if (!v->set) {
            if (f->required)
                return false;
            continue;
        }
        switch (f->type) {
        case T_STRING:
            if (f->max_len != 0 && v->len > f->max_len)
                return false;
            break;
        case T_INT:
        case T_LONG:
            /* min..max lies inside the type's range (compile checks it). */
            if (v->i < f->min || v->i > f->max)
                return false;
            break;
        case T_BOOL:
            if (v->i != 0 && v->i != 1)
                return false;
            break;
        case T_TOPIC:
        case T_GROUP:
            if (v->p == NULL || v->len == 0 || v->len > (f->type == T_TOPIC ? TOPIC_MAX : GROUP_MAX) ||
                illegal(v->p, v->len))
                return false;
            break;
        default:
            return false;
        }
    }
    return true;
}

const struct hspec *
lheader_check(lua_State *L, int idx)
{
    return check_spec(L, idx);
}

int
lheader_nfields(const struct hspec *s)
{
    return s->n;
}

int
lheader_field(const struct hspec *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->f[i].alias, key) == 0)
            return i;
    return -1;
}

/*
 * A table command's extFields (numbers and booleans as Java would have
 * written them) into vals; the strings stay on the stack until the
 * caller's lua_settop.
 */
static void
collect_table(lua_State *L, const struct hspec *s, int ext,
              struct lheader_val *vals)
{
    for (int i = 0; i < s->n; i++) {
        const struct hfield *f = &s->f[i];
        int ty = lua_getfield(L, ext, f->name);
        if (ty == LUA_TBOOLEAN) {
            bool b = lua_toboolean(L, -1);
            lua_pop(L, 1);
            lua_pushstring(L, b ? "true" : "false");
        } else if (ty != LUA_TSTRING && ty != LUA_TNUMBER) {
            lua_pop(L, 1);
            continue;
        }
        size_t n;
        vals[i].p = lua_tolstring(L, -1, &n);
        vals[i].len = (uint32_t)n;
        vals[i].set = true;
    }
}

/* spec:read(cmd) -> h | nil, code, remark */
static int
lheader_read(lua_State *L)
{
    struct hspec *s = check_spec(L, 1);
    /* An rmq.cmd userdata starts with its struct rmq_cmd (runtime/cmd.c's
     * struct lcmd), which is what the codec's field lookup takes. */
    const struct rmq_cmd *c = luaL_testudata(L, 2, LCMD_TYPE);
    struct lheader_val vals[MAX_FIELDS];
    memset(vals, 0, sizeof(vals));
    bool ok = false;
    if (c != NULL) {
        ok = collect(s, c, vals);
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "ext") == LUA_TTABLE)
            collect_table(L, s, lua_gettop(L), vals);
    }
    char remark[512];
    if (!ok && check_values(s, vals, remark, sizeof(remark)) != 0) {
        lua_pushnil(L);
        lua_pushinteger(L, RMQ_RESP_SYSTEM_ERROR);
        lua_pushstring(L, remark);
        return 3;
    }
    lua_getiuservalue(L, 1, 1);
    int uv = lua_gettop(L);
    lua_createtable(L, 0, s->n);
    int h = lua_gettop(L);
    int n = s->n;
    for (int i = 0; i < n; i++) {
        const struct hfield *f = &s->f[i];
        const struct lheader_val *v = &vals[i];
        if (!v->set) {
            if (f->has_default) {
                lua_rawgeti(L, uv, i + 1);
                lua_rawgeti(L, uv, n + i + 1);
                lua_rawset(L, h);
            }
            continue;
        }
        lua_rawgeti(L, uv, i + 1);   /* the key */
        switch (f->type) {
        case T_INT:
        case T_LONG:
            lua_pushinteger(L, (lua_Integer)v->i);
            break;
        case T_BOOL:
            lua_pushboolean(L, v->i != 0);
            break;
        default:
            lua_pushlstring(L, v->p, v->len);
            break;
        }
        lua_rawset(L, h);
    }
    return 1;
}

/* Field names, for introspection and error messages. */
static int
lheader_tostring(lua_State *L)
{
    struct hspec *s = check_spec(L, 1);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "rmq.header{");
    for (int i = 0; i < s->n; i++) {
        if (i > 0)
            luaL_addstring(&b, ", ");
        luaL_addlstring(&b, s->f[i].name, s->f[i].name_len);
        luaL_addchar(&b, ':');
        luaL_addstring(&b, type_names[s->f[i].type]);
        if (s->f[i].required)
            luaL_addchar(&b, '!');
    }
    luaL_addchar(&b, '}');
    luaL_pushresult(&b);
    return 1;
}

static int
lheader_is(lua_State *L)
{
    lua_pushboolean(L, luaL_testudata(L, 1, LHEADER_TYPE) != NULL);
    return 1;
}

/* }}} */

/* {{{ Scrubbing error texts for replies */

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool
path_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
           c == '/' || c == '.' || c == '_' || c == '-' || c == '~' ||
           c == '+' || c == '@' || c == '%';
}

/* Length of a "chunk:line:" position at p (and the blanks after it), or 0.
 * Chunks: a file name, or [string "..."] / [C]. */
static size_t
position_len(const char *p, size_t n)
{
    size_t j = 0;
    if (n > 8 && memcmp(p, "[string \"", 9) == 0) {
        const char *e = memmem(p, n, "\"]", 2);
        if (e == NULL)
            return 0;
        j = (size_t)(e - p) + 2;
    } else if (n >= 3 && memcmp(p, "[C]", 3) == 0) {
        j = 3;
    } else {
        while (j < n && p[j] != ':' && p[j] != ' ' && p[j] != '\n')
            j++;
    }
    if (j == 0 || j + 2 >= n || p[j] != ':' || !is_digit(p[j + 1]))
        return 0;
    j++;
    while (j < n && is_digit(p[j]))
        j++;
    if (j >= n || p[j] != ':')
        return 0;
    j++;
    while (j < n && p[j] == ' ')
        j++;
    return j;
}

size_t
lheader_scrub(const char *msg, size_t len, char *out, size_t cap)
{
    size_t k = 0;
    if (cap == 0)
        return 0;
    size_t i = 0;
    for (;;) {
        size_t pl = position_len(msg + i, len - i);
        if (pl == 0)
            break;
        i += pl;
    }
    static const char repl[] = "<path>";
    while (i < len && k + 1 < cap) {
        char c = msg[i];
        if (!path_char(c)) {
            out[k++] = (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
            i++;
            continue;
        }
        size_t j = i;
        bool slash = false;
        while (j < len && path_char(msg[j])) {
            slash = slash || msg[j] == '/';
            j++;
        }
        bool url = i > 0 && msg[i - 1] == ':' && j - i >= 2 && msg[i] == '/' && msg[i + 1] == '/';
        bool lua = j - i >= 4 && memcmp(msg + j - 4, ".lua", 4) == 0;
        if ((slash && !url) || lua) {
            /* A path, and a ":line" right after it. */
            if (j + 1 < len && msg[j] == ':' && is_digit(msg[j + 1])) {
                j++;
                while (j < len && is_digit(msg[j]))
                    j++;
            }
            for (size_t r = 0; r < sizeof(repl) - 1 && k + 1 < cap; r++)
                out[k++] = repl[r];
        } else {
            for (size_t r = i; r < j && k + 1 < cap; r++)
                out[k++] = msg[r];
        }
        i = j;
    }
    out[k] = '\0';
    return k;
}

static int
lheader_scrub_l(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    char buf[1024];
    size_t k = lheader_scrub(s, n, buf, sizeof(buf));
    lua_pushlstring(L, buf, k);
    return 1;
}

/* }}} */

int
luaopen_rmq_header(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "read", lheader_read },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "compile", lheader_compile },
        { "is_spec", lheader_is },
        { "topic", lheader_topic },
        { "group", lheader_group },
        { "scrub", lheader_scrub_l },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LHEADER_TYPE)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lheader_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
