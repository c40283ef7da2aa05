/*
 * codec_json: the JSON (serialize type 0) RemotingCommand header.
 *
 * The decoder is a hand-written single pass over the header object: it
 * knows the eight RemotingCommand keys, walks over anything else, and
 * copies strings into the decode arena, unescaping them on the way.  It
 * runs in two tiers: what clients send nearly always (fastjson's spelling:
 * no whitespace, keys told by their first letter, one-letter extFields
 * keys as in SEND_MESSAGE_V2, strings copied 16 bytes a step, plain
 * integers) is read inline at about 5 instructions a header byte; at the
 * first byte that is anything else the careful readers take over the
 * member, entry or token and name what is wrong, so both tiers accept and
 * refuse the same headers with the same messages.  It accepts what real
 * clients send (protocol.md §1.4):
 * extFields values that are numbers or booleans (kept as their JSON text,
 * as fastjson turns them into strings), null values, `language` as a name
 * or an ordinal.  Bytes inside strings are not checked for valid UTF-8
 * and raw control characters are tolerated (fastjson tolerates them):
 * the header is someone else's text, we only must not misread its shape.
 *
 * The encoder writes what fastjson writes for a RemotingCommand: keys in
 * sorted order, strict JSON, control characters escaped, other bytes
 * (UTF-8 included) passed through.  It measures first and then writes,
 * so the output is sized exactly and never reallocated mid-header.  Both
 * passes first ask whether a string has anything to escape at all (16
 * bytes a step; nearly none has) and copy it whole when it has not.
 */
#include <string.h>

#include "core/err.h"
#include "core/jscan.h"
#include "net/codec_impl.h"

struct jp {
    const uint8_t *s;    /* header start, for error offsets */
    const uint8_t *p;    /* next byte to look at */
    const uint8_t *end;
};

static int
jfail(const struct jp *j, const char *what)
{
    err_set("JSON header: %s at offset %zu", what, (size_t)(j->p - j->s));
    return -RMQ_EPROTO;
}

static int
jfail_key(const struct jp *j, const char *key, const char *what)
{
    err_set("JSON header: %s %s at offset %zu", key, what,
            (size_t)(j->p - j->s));
    return -RMQ_EPROTO;
}

/* {{{ Lexing: core/jscan.h, with this file's error format */

/* The next byte, or -1 at the end of the header. */
static inline int
jpeek(const struct jp *j)
{
    return jscan_peek(j->p, j->end);
}

static inline void
skip_ws(struct jp *j)
{
    j->p = jscan_ws(j->p, j->end);
}

static int
lexed(struct jp *j, const char *why)
{
    return why == NULL ? 0 : jfail(j, why);
}

static int
scan_string(struct jp *j, const uint8_t **raw, size_t *n, bool *esc)
{
    return lexed(j, jscan_string(&j->p, j->end, raw, n, esc));
}

static int
scan_number(struct jp *j, bool *is_int)
{
    return lexed(j, jscan_number(&j->p, j->end, is_int));
}

static int
scan_literal(struct jp *j, const char *lit, size_t n)
{
    return lexed(j, jscan_literal(&j->p, j->end, lit, n));
}

static int
skip_value(struct jp *j, int depth)
{
    return lexed(j, jscan_skip(&j->p, j->end, depth, RMQ_JSON_MAX_DEPTH));
}

/* }}} */

/* Whitespace is rare between tokens: one test when there is none. */
static inline void
ws(struct jp *j)
{
    if (j->p < j->end && *j->p <= ' ')
        skip_ws(j);
}

/* Consumes byte c after any whitespace; false (j->p at what is there
 * instead) when it is not next. */
static inline bool
eat(struct jp *j, uint8_t c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* {{{ The plain spelling, inline
 *
 * What clients send has no whitespace between tokens, strings without
 * escapes (or only fastjson's \u00XX), integers without fraction or
 * exponent.  The readers in this fold take that spelling with the cursor
 * in a register and no calls; for anything else they give up having
 * committed nothing, and the careful readers after the fold start over
 * on the same bytes, taking the rest of JSON and naming what is wrong.
 * So the fast paths have no error messages of their own, and what was
 * refused before is refused the same way. */

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Moves *pp past the n bytes of lit when they come next. */
static ALWAYS_INLINE bool
take(const uint8_t **pp, const uint8_t *end, const char *lit, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, lit, n) != 0)
        return false;
    *pp += n;
    return true;
}

#define TAKE(pp, end, s) take((pp), (end), (s), sizeof(s) - 1)

/*
 * Where the int32 at p ends when it is spelled plainly (at most ten
 * digits, no leading zero, no fraction or exponent), with *out set; NULL
 * for anything else.
 */
static ALWAYS_INLINE const uint8_t *
int_plain(const uint8_t *p, const uint8_t *end, int32_t *out)
{
    bool neg = p < end && *p == '-';
    p += neg;
    if (p >= end || (unsigned)(*p - '0') > 9)
        return NULL;
    uint64_t v = (uint64_t)(*p++ - '0');
    if (v != 0) {
        const uint8_t *lim = end - p > 9 ? p + 9 : end;
        unsigned dg;
        while (p < lim && (dg = (unsigned)(*p - '0')) <= 9) {
            v = v * 10 + dg;
            p++;
        }
    }
    if (p < end && ((unsigned)(*p - '0') <= 9 || *p == '.' || *p == 'e' ||
                    *p == 'E'))
        return NULL;
    if (v > 2147483647u + (uint64_t)neg)
        return NULL;
    int64_t sv = neg ? -(int64_t)v : (int64_t)v;
    *out = (int32_t)sv;
    return p;
}

enum jkey {
    K_UNKNOWN,
    K_CODE,
    K_EXT,
    K_FLAG,
    K_LANG,
    K_OPAQUE,
    K_REMARK,
    K_VERSION,
    K_SERIALIZE,  /* serializeTypeCurrentRPC: the H word decides */
    K_READ,       /* a member whose value was read already (members()) */
};

/*
 * The top-level `"key":` at *pp, told by its first letter and then
 * compared whole: moves *pp past the ':'.  -1 (and *pp unchanged) for any
 * other key or spelling.
 */
static ALWAYS_INLINE int
key_plain(const uint8_t **pp, const uint8_t *end)
{
    if (end - *pp < 2 || **pp != '"')
        return -1;
    switch ((*pp)[1]) {
    case 'c':
        return TAKE(pp, end, "\"code\":") ? K_CODE : -1;
    case 'e':
        return TAKE(pp, end, "\"extFields\":") ? K_EXT : -1;
    case 'f':
        return TAKE(pp, end, "\"flag\":") ? K_FLAG : -1;
    case 'l':
        return TAKE(pp, end, "\"language\":") ? K_LANG : -1;
    case 'o':
        return TAKE(pp, end, "\"opaque\":") ? K_OPAQUE : -1;
    case 'r':
        return TAKE(pp, end, "\"remark\":") ? K_REMARK : -1;
    case 's':
        return TAKE(pp, end, "\"serializeTypeCurrentRPC\":") ? K_SERIALIZE
                                                               : -1;
    case 'v':
        return TAKE(pp, end, "\"version\":") ? K_VERSION : -1;
    default:
        return -1;
    }
}

/*
 * The extFields entry at p when it is `"key":"value"` followed by ',' or
 * '}' (jscan_entry_plain): both strings go to *lo and the field below
 * d->top.  Returns the ',' or '}', or NULL with nothing committed.  No
 * room checks: ext_value() calls it only when the arena can take
 * whatever the rest of the header could need.
 */
static ALWAYS_INLINE const uint8_t *
ext_entry_plain(const uint8_t *p, const uint8_t *end, uint8_t **lo,
                struct rmq_dec *d)
{
    uint8_t *key = *lo;
    struct rmq_field *f = d->top - 1;   /* free: below the fields */
    const uint8_t *q = jscan_entry_plain(p, end, key, &f->key.len, &f->val.len);
    if (q == NULL)
        return NULL;
    d->top = f;
    f->key.p = (const char *)key;
    f->val.p = (const char *)key + f->key.len + 1;
    *lo = (uint8_t *)f->val.p + f->val.len + 1;
    return q;
}

/*
 * ext_entry_plain() over the entries at p for as long as it takes them:
 * returns where it stopped, past the closing '}' (*closed) or at an entry
 * it does not take.  A loop of its own, without calls: GCC allocates
 * its registers better apart from the careful path's calls.
 */
static const uint8_t *
ext_plain_entries(const uint8_t *p, const uint8_t *end, uint8_t **lo,
                  struct rmq_dec *d, bool *closed)
{
    const uint8_t *q;
    while ((q = ext_entry_plain(p, end, lo, d)) != NULL) {
        p = q + 1;
        if (*q == '}') {
            *closed = true;
            return p;
        }
    }
    *closed = false;
    return p;
}

/* }}} */

/* Copies a scanned string into the arena, unescaping when needed. */
static int
str_to_arena(struct rmq_dec *d, const uint8_t *raw, size_t n, bool esc,
             struct rmq_str *out)
{
    uint8_t *w = dec_str_begin(d, n);
    if (w == NULL)
        return rmq_dec_nomem();
    size_t m = n;
    if (esc)
        m = jscan_unescape(raw, n, w);
    else if (n > 0)
        memcpy(w, raw, n);
    dec_str_end(d, out, m);
    return 0;
}

static int __attribute__((noinline))
arena_string_slow(struct jp *j, struct rmq_dec *d, struct rmq_str *out)
{
    const uint8_t *raw;
    size_t n;
    bool esc;
    int rc = scan_string(j, &raw, &n, &esc);
    if (rc != 0)
        return rc;
    return str_to_arena(d, raw, n, esc, out);
}

/* The string at j->p (its opening quote), unescaped into the arena. */
static int
arena_string(struct jp *j, struct rmq_dec *d, struct rmq_str *out)
{
    /* lim keeps the copy's writes, NUL included, below the fields. */
    size_t room = (size_t)((uint8_t *)d->top - d->lo);
    const uint8_t *lim = (size_t)(j->end - j->p) > room ? j->p + room : j->end;
    ptrdiff_t n = jscan_string_copy(&j->p, lim, d->lo);
    if (n < 0)
        return arena_string_slow(j, d, out);
    out->p = (const char *)d->lo;
    out->len = (uint32_t)n;
    d->lo += n + 1;
    return 0;
}

/* An integer lexeme (grammar already checked) as int32; -1 if too big. */
static int
lexeme_int32(const uint8_t *s, size_t n, int32_t *out)
{
    bool neg = s[0] == '-';
    if (neg) {
        s++;
        n--;
    }
    if (n > 10)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    if (v > (neg ? 2147483648u : 2147483647u))
        return -1;
    int64_t sv = neg ? -(int64_t)v : (int64_t)v;
    *out = (int32_t)sv;
    return 0;
}

/* A number-valued header key; null leaves the default in place. */
static int
int_value(struct jp *j, const char *key, int32_t *out)
{
    int c = jpeek(j);
    if (c == 'n')
        return scan_literal(j, "null", 4);
    if (c != '-' && (c < '0' || c > '9'))
        return jfail_key(j, key, "is not a number");
    const uint8_t *s = j->p;
    bool is_int;
    int rc = scan_number(j, &is_int);
    if (rc != 0)
        return rc;
    if (!is_int || lexeme_int32(s, (size_t)(j->p - s), out) != 0) {
        j->p = s;
        return jfail_key(j, key, "is not a 32-bit integer");
    }
    return 0;
}

static int
language_value(struct jp *j, struct rmq_dec *d, int32_t *out)
{
    int c = jpeek(j);
    if (c != '"') {
        int32_t v = *out;
        int rc = int_value(j, "language", &v);
        if (rc == 0)
            *out = rmq_lang_clamp(v);
        return rc;
    }
    const uint8_t *raw;
    size_t n;
    bool esc;
    int rc = scan_string(j, &raw, &n, &esc);
    if (rc != 0)
        return rc;
    const uint8_t *name = raw;
    if (esc) {
        /* Unescaped into free arena space that is not committed. */
        uint8_t *w = dec_str_begin(d, n);
        if (w == NULL)
            return rmq_dec_nomem();
        n = jscan_unescape(raw, n, w);
        name = w;
    }
    int32_t ord = rmq_language_ordinal((const char *)name, n);
    *out = ord < 0 ? RMQ_LANG_OTHER : ord;
    return 0;
}

static int
remark_value(struct jp *j, struct rmq_dec *d, struct rmq_str *out)
{
    int c = jpeek(j);
    if (c == 'n') {
        out->p = NULL;
        out->len = 0;
        return scan_literal(j, "null", 4);
    }
    if (c != '"')
        return jfail_key(j, "remark", "is not a string");
    return arena_string(j, d, out);
}

/* A value other than a string or null: kept as its JSON text. */
static int
ext_text_value(struct jp *j, struct rmq_dec *d, struct rmq_str *out)
{
    const uint8_t *s = j->p;
    int rc = skip_value(j, 2);
    if (rc != 0)
        return rc;
    return str_to_arena(d, s, (size_t)(j->p - s), false, out);
}

/* The ',' or '}' after a member or an entry the careful way: 0 when more
 * follow, 1 after the '}', or the error `what`. */
static int __attribute__((noinline))
sep_careful(struct jp *j, const char *what)
{
    ws(j);
    int c = jpeek(j);
    if (c == '}') {
        j->p++;
        return 1;
    }
    if (c != ',')
        return jfail(j, what);
    j->p++;
    return 0;
}

/*
 * One extFields entry the careful way, whatever its spelling, with the
 * ',' or '}' after it: returns 0 when more entries follow, 1 at the end of
 * the object.
 */
static int __attribute__((noinline))
ext_entry_careful(struct jp *j, struct rmq_dec *d)
{
    int rc;
    ws(j);
    if (jpeek(j) != '"')
        return jfail(j, "expected an extFields key");
    const uint8_t *raw;
    size_t n;
    bool esc;
    if ((rc = scan_string(j, &raw, &n, &esc)) != 0)
        return rc;
    if (!eat(j, ':'))
        return jfail(j, "expected ':'");
    ws(j);
    uint8_t *mark = d->lo;
    struct rmq_str key;
    struct rmq_str val = {NULL, 0};
    if ((rc = str_to_arena(d, raw, n, esc, &key)) != 0)
        return rc;
    int c = jpeek(j);
    if (c == '"') {
        rc = arena_string(j, d, &val);
    } else if (c == 'n') {
        rc = scan_literal(j, "null", 4);
        d->lo = mark;  /* drop the key too */
    } else {
        rc = ext_text_value(j, d, &val);
    }
    if (rc != 0)
        return rc;
    if (val.p != NULL) {
        struct rmq_field *f = dec_field_push(d);
        if (f == NULL)
            return rmq_dec_nomem();
        f->key = key;
        f->val = val;
    }
    return sep_careful(j, "expected ',' or '}' in extFields");
}

/*
 * The extFields object.  Values other than strings keep their JSON text
 * (numbers, booleans; objects/arrays too, verbatim); null values are
 * dropped together with their key.  A repeated extFields replaces the
 * earlier one, as fastjson's last-wins assignment does.
 */
static int
ext_value(struct jp *j, struct rmq_dec *d)
{
    int c = jpeek(j);
    if (c == 'n') {
        dec_fields_reset(d);
        d->has_ext = false;
        return scan_literal(j, "null", 4);
    }
    if (c != '{')
        return jfail_key(j, "extFields", "is not an object");
    dec_fields_reset(d);
    d->has_ext = true;
    j->p++;
    ws(j);
    if (jpeek(j) == '}') {
        j->p++;
        return 0;
    }
    /*
     * The plain entries skip the room checks when the arena holds the
     * worst the rest of the header could ask: all of it as string bytes
     * (a copy never outgrows its source, over-writes included), plus a
     * field for every 4 bytes (`"":0`, the shortest entry).  An arena of
     * rmq_cmd_arena_size() always does; a smaller one goes the careful
     * way, entry by entry.
     */
    const uint8_t *p = j->p;
    const uint8_t *end = j->end;
    size_t left = (size_t)(end - p);
    uint8_t *lo = d->lo;  /* d->lo is behind while the plain loop runs */
    bool roomy = (size_t)((uint8_t *)d->top - lo) >=
                 left + left / 4 * sizeof(struct rmq_field);
    for (;;) {
        if (roomy) {
            bool closed;
            p = ext_plain_entries(p, end, &lo, d, &closed);
            if (closed)
                break;
        }
        j->p = p;
        d->lo = lo;
        int rc = ext_entry_careful(j, d);
        if (rc < 0)
            return rc;
        p = j->p;
        lo = d->lo;
        if (rc == 1)
            break;
    }
    j->p = p;
    d->lo = lo;
    return 0;
}

static enum jkey
key_id(const uint8_t *k, size_t n)
{
    switch (n) {
    case 4:
        if (memcmp(k, "code", 4) == 0)
            return K_CODE;
        if (memcmp(k, "flag", 4) == 0)
            return K_FLAG;
        break;
    case 6:
        if (memcmp(k, "opaque", 6) == 0)
            return K_OPAQUE;
        if (memcmp(k, "remark", 6) == 0)
            return K_REMARK;
        break;
    case 7:
        if (memcmp(k, "version", 7) == 0)
            return K_VERSION;
        break;
    case 8:
        if (memcmp(k, "language", 8) == 0)
            return K_LANG;
        break;
    case 9:
        if (memcmp(k, "extFields", 9) == 0)
            return K_EXT;
        break;
    default:
        break;
    }
    return K_UNKNOWN;
}

/* A member's key the careful way: whitespace, the key in any spelling
 * (escapes included), ':'. */
static int __attribute__((noinline))
key_careful(struct jp *j, struct rmq_dec *d, int *id)
{
    ws(j);
    if (jpeek(j) != '"')
        return jfail(j, "expected a key");
    const uint8_t *raw;
    size_t n;
    bool esc;
    int rc = scan_string(j, &raw, &n, &esc);
    if (rc != 0)
        return rc;
    if (!eat(j, ':'))
        return jfail(j, "expected ':'");
    if (esc) {
        /* Nobody escapes key names, but it is legal JSON. */
        uint8_t *w = dec_str_begin(d, n);
        if (w == NULL)
            return rmq_dec_nomem();
        *id = (int)key_id(w, jscan_unescape(raw, n, w));
    } else {
        *id = (int)key_id(raw, n);
    }
    return 0;
}

/* A member's value the careful way (extFields and remark still copy
 * their plain strings inline). */
static int __attribute__((noinline))
value_careful(struct jp *j, struct rmq_dec *d, struct rmq_cmd *cmd, int id)
{
    ws(j);
    switch (id) {
    case K_CODE:
        return int_value(j, "code", &cmd->code);
    case K_FLAG:
        return int_value(j, "flag", &cmd->flag);
    case K_OPAQUE:
        return int_value(j, "opaque", &cmd->opaque);
    case K_VERSION:
        return int_value(j, "version", &cmd->version);
    case K_LANG:
        return language_value(j, d, &cmd->language);
    case K_REMARK:
        return remark_value(j, d, &cmd->remark);
    case K_EXT:
        return ext_value(j, d);
    default:
        return skip_value(j, 1);
    }
}

/*
 * The members the Java client writes after extFields (or after code when
 * it has none), in its order, at q (the ',' after the member before):
 * four literals around three numbers, no key told apart.  Returns the
 * byte past the object's closing '}', with flag, language, opaque and
 * version set as the member loop would set them; NULL (cmd's fields then
 * undefined: the caller reads them again) for anything else.
 */
static ALWAYS_INLINE const uint8_t *
java_tail(const uint8_t *q, const uint8_t *end, struct rmq_cmd *cmd, const uint8_t **op)
{
    if (TAKE(&q, end, ",\"flag\":") && (q = int_plain(q, end, &cmd->flag)) != NULL &&
        TAKE(&q, end, ",\"language\":\"JAVA\",\"opaque\":") && (*op = q) != NULL &&
        (q = int_plain(q, end, &cmd->opaque)) != NULL &&
        TAKE(&q, end, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") &&
        (q = int_plain(q, end, &cmd->version)) != NULL && q < end && *q == '}') {
        cmd->language = RMQ_LANG_JAVA;
        return q + 1;
    }
    return NULL;
}

/*
 * A top-level member's value in the plain tier: p at the value of member
 * id; what follows it, or NULL when the plain tier does not take it (the
 * careful one, or the generic decode, then decides).  One owner for the
 * generic members() and rmq_json_tail().
 */
static ALWAYS_INLINE const uint8_t *
member_plain(int id, const uint8_t *p, const uint8_t *end, struct rmq_cmd *cmd)
{
    switch (id) {
    case K_CODE:
        return int_plain(p, end, &cmd->code);
    case K_FLAG:
        return int_plain(p, end, &cmd->flag);
    case K_OPAQUE:
        return int_plain(p, end, &cmd->opaque);
    case K_VERSION:
        return int_plain(p, end, &cmd->version);
    case K_LANG:
        if (!TAKE(&p, end, "\"JAVA\""))
            return NULL;
        cmd->language = RMQ_LANG_JAVA;
        return p;
    case K_SERIALIZE:
        return TAKE(&p, end, "\"JSON\"") ? p : NULL;
    default:
        return NULL;   /* extFields, remark: the careful tier's */
    }
}

/*
 * The header object's members from j->p to its closing '}' (consumed):
 * j->p is at a member's key (id -1), at the value of member id whose key
 * was read, or at what follows a member read already (K_READ); the last
 * two for rmq_json_decode_from.
 */
static ALWAYS_INLINE int
members(struct jp *j, struct rmq_dec *d, struct rmq_cmd *cmd, int id)
{
    const uint8_t *end = j->end;
    const uint8_t *p = j->p;
    int rc;
    /* Each member in three steps (key, value, separator), each plain
     * or careful on its own. */
    for (;;) {
        if (id < 0) {
            id = key_plain(&p, end);
            if (id < 0) {
                j->p = p;
                if ((rc = key_careful(j, d, &id)) != 0)
                    return rc;
                p = j->p;
            }
        }
        const uint8_t *q = id == K_READ ? p : member_plain(id, p, end, cmd);
        if (q == NULL) {
            j->p = p;
            if ((rc = value_careful(j, d, cmd, id)) != 0)
                return rc;
            q = j->p;
        }
        const uint8_t *op;
        if ((id == K_EXT || id == K_CODE || id == K_READ) &&
            (p = java_tail(q, end, cmd, &op)) != NULL)
            break;
        id = -1;
        if (q < end && *q == ',') {
            p = q + 1;
            continue;
        }
        if (q < end && *q == '}') {
            p = q + 1;
            break;
        }
        j->p = q;
        if ((rc = sep_careful(j, "expected ',' or '}'")) < 0)
            return rc;
        p = j->p;
        if (rc == 1)
            break;
    }
    j->p = p;
    return 0;
}

static int
header_end(struct jp *j)
{
    ws(j);
    if (j->p != j->end)
        return jfail(j, "trailing bytes after the header object");
    return 0;
}

int
rmq_json_decode(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
                struct rmq_dec *d)
{
    struct jp j = {h, h, h + hlen};
    int rc;
    if (!eat(&j, '{'))
        return jfail(&j, "expected '{'");
    ws(&j);
    if (jpeek(&j) == '}')
        j.p++;
    else if ((rc = members(&j, d, cmd, -1)) != 0)
        return rc;
    return header_end(&j);
}

int
rmq_json_decode_from(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
                     struct rmq_dec *d, const struct rmq_json_head *hd)
{
    /* rmq_json_head read `{"code":N` and maybe `,"extFields":`, as
     * rmq_json_decode would have: on from the extFields value's '{', or
     * from what follows the code. */
    struct jp j = {h, h + (hd->ext_at != 0 ? hd->ext_at - 1 : hd->next), h + hlen};
    cmd->code = hd->code;
    int rc = members(&j, d, cmd, hd->ext_at != 0 ? K_EXT : K_READ);
    return rc != 0 ? rc : header_end(&j);
}

/* {{{ The members around a typed extFields (codec.h: rmq_json_head, _tail)
 *
 * The plain readers above, without the careful tier: what they do not
 * take is left to rmq_json_decode(), which takes or refuses it. */

bool
rmq_json_head(const uint8_t *h, size_t hlen, struct rmq_json_head *hd)
{
    const uint8_t *p = h, *end = h + hlen;
    if (!TAKE(&p, end, "{\"code\":") || (p = int_plain(p, end, &hd->code)) == NULL)
        return false;
    hd->next = (uint32_t)(p - h);
    hd->ext_at = TAKE(&p, end, ",\"extFields\":{") ? (uint32_t)(p - h) : 0;
    return true;
}

/* rmq_json_tail() when java_tail() did not take p: any other order, or
 * a member left out, member by member from the same start (what the
 * attempt set, the loop reads again from the same bytes).  code and
 * extFields were read (rmq_json_head): a second one of anything goes the
 * generic way, which knows which one wins. */
static bool
tail_any_order(const uint8_t *p, const uint8_t *end, struct rmq_cmd *cmd)
{
    unsigned seen = 1u << K_CODE | 1u << K_EXT;
    while (p < end && *p == ',') {
        p++;
        int id = key_plain(&p, end);
        if (id < 0 || (seen >> id & 1u) != 0)
            return false;
        seen |= 1u << id;
        p = member_plain(id, p, end, cmd);   /* remark: not in a Java client's requests */
        if (p == NULL)
            return false;
    }
    return end - p == 1 && *p == '}';
}

bool
rmq_json_tail(const uint8_t *h, size_t hlen, size_t at, struct rmq_cmd *cmd)
{
    const uint8_t *p = h + at, *end = h + hlen, *op;
    /* The Java client's members in its order first. */
    const uint8_t *q = java_tail(p, end, cmd, &op);
    if (q != NULL)
        return q == end;
    return tail_any_order(p, end, cmd);
}

bool
rmq_json_tail_memo(const uint8_t *h, size_t hlen, size_t at, struct rmq_cmd *cmd,
                   struct rmq_json_tail_memo *tm)
{
    const uint8_t *p = h + at, *end = h + hlen, *op;
    size_t n = hlen - at;
    if (at <= hlen && tm->len == n) {
        /* The kept tail's bytes around the opaque, then its digits read
         * as java_tail reads them, ending where the kept one's did (the
         * byte after them is the kept one's ','). */
        const uint8_t *d = p + tm->op_at;
        size_t after = tm->op_at + tm->op_len;
        if (memcmp(p, tm->bytes, tm->op_at) == 0 &&
            memcmp(p + after, tm->bytes + after, n - after) == 0 &&
            int_plain(d, end, &cmd->opaque) == d + tm->op_len) {
            cmd->flag = tm->flag;
            cmd->version = tm->version;
            cmd->language = RMQ_LANG_JAVA;
            return true;
        }
    }
    const uint8_t *q = java_tail(p, end, cmd, &op);
    if (q == NULL)
        return tail_any_order(p, end, cmd);
    if (q != end)
        return false;
    tm->len = 0;
    if (n <= sizeof(tm->bytes)) {
        const uint8_t *oe = int_plain(op, end, &cmd->opaque);
        memcpy(tm->bytes, p, n);
        tm->op_at = (uint32_t)(op - p);
        tm->op_len = (uint32_t)(oe - op);
        tm->flag = cmd->flag;
        tm->version = cmd->version;
        tm->len = (uint32_t)n;
    }
    return true;
}

/* }}} */

/* {{{ Encoder strings */

/*
 * Extra output bytes an input byte costs inside a JSON string: 1 for the
 * short escapes, 5 for \u00XX (fastjson's spelling, upper-case hex).
 */
static const uint8_t esc_extra[256] = {
    [0 ... 7] = 5, ['\b'] = 1, ['\t'] = 1, ['\n'] = 1, [0x0B] = 5,
    ['\f'] = 1, ['\r'] = 1, [0x0E ... 0x1F] = 5, ['"'] = 1, ['\\'] = 1,
};

#if defined(__SSE2__)
/* Bit i set when byte i of v needs escaping: below 0x20, '"' or '\\'. */
static inline unsigned
escapes_in(__m128i v)
{
    __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
    __m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(ctl, _mm_or_si128(q, b)));
}
#endif

/* Bit i set when byte i of the 16 at p needs escaping. */
static inline unsigned
escapes16(const uint8_t *p)
{
#if defined(__SSE2__)
    return escapes_in(_mm_loadu_si128((const __m128i *)(const void *)p));
#else
    unsigned m = 0;
    for (unsigned i = 0; i < 16; i++)
        m |= (unsigned)(esc_extra[p[i]] != 0) << i;
    return m;
#endif
}

/*
 * Whether any of the n bytes at s needs escaping.  Nearly no header
 * string does, and most are short: 16 bytes a step, the last step
 * overlapping the one before (a byte seen twice does not change an
 * any-test), and below 16 bytes two overlapping words or a byte loop.
 */
static ALWAYS_INLINE bool
needs_escape(const uint8_t *s, size_t n)
{
    if (n >= 16) {
        unsigned acc = 0;
        for (size_t i = 0; i + 16 < n; i += 16)
            acc |= escapes16(s + i);
        return (acc | escapes16(s + n - 16)) != 0;
    }
#if defined(__SSE2__)
    if (n >= 8)
        return escapes_in(_mm_set_epi64x((long long)jscan_load8(s + n - 8),
                                         (long long)jscan_load8(s))) != 0;
    if (n >= 4) {
        /* Two overlapping words, each twice: no padding byte, which
         * would look like a control character. */
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        return escapes_in(_mm_set_epi32((int)a, (int)b, (int)a, (int)b)) != 0;
    }
    /* 1-3 bytes: the first, middle and last are all of them. */
    return n > 0 && (esc_extra[s[0]] | esc_extra[s[n / 2]] | esc_extra[s[n - 1]]) != 0;
#else
    unsigned acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= esc_extra[s[i]];
    return acc != 0;
#endif
}

/* Extra bytes the escapes of the n bytes at p take. */
static uint64_t __attribute__((noinline))
escaped_extra(const uint8_t *p, size_t n)
{
    uint64_t extra = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (unsigned m = escapes16(p + i); m != 0; m &= m - 1)
            extra += esc_extra[p[i + (unsigned)__builtin_ctz(m)]];
    }
    for (; i < n; i++)
        extra += esc_extra[p[i]];
    return extra;
}

static ALWAYS_INLINE uint64_t
quoted_len(const struct rmq_str *s)
{
    const uint8_t *p = (const uint8_t *)s->p;
    uint64_t n = 2 + (uint64_t)s->len;
    return needs_escape(p, s->len) ? n + escaped_extra(p, s->len) : n;
}

/* memcpy for the short strings of a header, without the call. */
static ALWAYS_INLINE void
copy_short(uint8_t *w, const uint8_t *s, size_t n)
{
    if (n > 16) {
        memcpy(w, s, n);
    } else if (n >= 8) {
        memcpy(w, s, 8);
        memcpy(w + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(w, s, 4);
        memcpy(w + n - 4, s + n - 4, 4);
    } else if (n > 0) {
        w[0] = s[0];
        w[n / 2] = s[n / 2];
        w[n - 1] = s[n - 1];
    }
}

/* Byte c, which needs escaping, as fastjson writes it. */
static inline uint8_t *
put_escape(uint8_t *w, uint8_t c)
{
    static const char hex[] = "0123456789ABCDEF";
    *w++ = '\\';
    switch (c) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '\b': *w++ = 'b'; break;
    case '\t': *w++ = 't'; break;
    case '\n': *w++ = 'n'; break;
    case '\f': *w++ = 'f'; break;
    case '\r': *w++ = 'r'; break;
    default:
        *w++ = 'u';
        *w++ = '0';
        *w++ = '0';
        *w++ = (uint8_t)hex[c >> 4];
        *w++ = (uint8_t)hex[c & 15];
        break;
    }
    return w;
}

/* The n bytes at s, escaped, at w; returns the end. */
static uint8_t * __attribute__((noinline))
put_escaped(uint8_t *w, const uint8_t *s, size_t n)
{
    const uint8_t *e = s + n;
    for (;;) {
        if (e - s >= 16) {
            /* Copy a whole run, keep what comes before the first byte to
             * escape.  The 16 bytes written stay inside this string's
             * output, never shorter than the input left. */
            memcpy(w, s, 16);
            unsigned m = escapes16(s);
            if (m == 0) {
                s += 16;
                w += 16;
                continue;
            }
            unsigned k = (unsigned)__builtin_ctz(m);
            s += k;
            w += k;
        } else {
            while (s < e && esc_extra[*s] == 0)
                *w++ = *s++;
            if (s == e)
                return w;
        }
        w = put_escape(w, *s++);
    }
}

static ALWAYS_INLINE uint8_t *
put_quoted(uint8_t *w, const struct rmq_str *str)
{
    const uint8_t *s = (const uint8_t *)str->p;
    *w++ = '"';
    if (needs_escape(s, str->len)) {
        w = put_escaped(w, s, str->len);
    } else {
        copy_short(w, s, str->len);
        w += str->len;
    }
    *w++ = '"';
    return w;
}

/* }}} */

static size_t
int_len(int32_t v)
{
    uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    size_t n = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

/* Two digits a step, from a table: a header's numbers (code, opaque,
 * flag, version) without a division per digit. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static uint8_t *
put_int(uint8_t *w, int32_t v)
{
    uint8_t tmp[10];
    uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    size_t i = sizeof(tmp);
    if (u < 10) {
        /* code 0, flag 1, most of a reply's numbers: one digit */
        if (v < 0)
            *w++ = '-';
        *w++ = (uint8_t)('0' + u);
        return w;
    }
    if (v < 0)
        *w++ = '-';
    while (u >= 100) {
        uint32_t q = u / 100, r = u - q * 100;
        tmp[--i] = (uint8_t)digit_pairs[2 * r + 1];
        tmp[--i] = (uint8_t)digit_pairs[2 * r];
        u = q;
    }
    if (u >= 10) {
        tmp[--i] = (uint8_t)digit_pairs[2 * u + 1];
        tmp[--i] = (uint8_t)digit_pairs[2 * u];
    } else {
        tmp[--i] = (uint8_t)('0' + u);
    }
    size_t n = sizeof(tmp) - i;
    memcpy(w, tmp + i, n);
    return w + n;
}

#define LIT(s) (sizeof(s) - 1)
#define PUT(w, s) (memcpy((w), (s), LIT(s)), (w) += LIT(s))

static inline bool
field_kept(const struct rmq_field *f)
{
    return f->key.p != NULL && f->val.p != NULL;
}

int
rmq_json_size(const struct rmq_cmd *cmd, size_t *hlen)
{
    const uint64_t limit = 0xFFFFFF;
    uint64_t n = LIT("{\"code\":") + int_len(cmd->code);
    if (cmd->ext != NULL) {
        n += LIT(",\"extFields\":{}");
        bool first = true;
        for (uint32_t i = 0; i < cmd->ext_count && n <= limit; i++) {
            const struct rmq_field *f = &cmd->ext[i];
            if (!field_kept(f))
                continue;
            n += (first ? 0 : 1) + quoted_len(&f->key) + 1 +
                 quoted_len(&f->val);
            first = false;
        }
    }
    n += LIT(",\"flag\":") + int_len(cmd->flag);
    n += LIT(",\"language\":\"\"") + strlen(rmq_language_name(cmd->language));
    n += LIT(",\"opaque\":") + int_len(cmd->opaque);
    if (cmd->remark.p != NULL)
        n += LIT(",\"remark\":") + quoted_len(&cmd->remark);
    n += LIT(",\"serializeTypeCurrentRPC\":\"JSON\"");
    n += LIT(",\"version\":") + int_len(cmd->version) + 1;
    if (n > limit) {
        err_set("JSON header of %llu bytes does not fit in 24 bits",
                (unsigned long long)n);
        return -RMQ_ETOOBIG;
    }
    *hlen = (size_t)n;
    return 0;
}

int
rmq_json_bound(const struct rmq_cmd *cmd, size_t *bound)
{
    /* Every byte of a string escapes to at most 6 ("\u00XX"); the
     * fixed parts and four numbers take 156. */
    uint64_t n = 176 + (uint64_t)cmd->remark.len * 6 +
                 strlen(rmq_language_name(cmd->language));
    if (cmd->ext != NULL)
        for (uint32_t i = 0; i < cmd->ext_count; i++)
            n += 6 + ((uint64_t)cmd->ext[i].key.len + cmd->ext[i].val.len) * 6;
    if (n > 0xFFFFFF)
        return -RMQ_ETOOBIG;
    *bound = (size_t)n;
    return 0;
}

void
rmq_json_write(const struct rmq_cmd *cmd, uint8_t *dst, size_t hlen)
{
    (void)rmq_json_put(cmd, dst);
    (void)hlen;  /* == what rmq_json_put returns; sized by rmq_json_size() */
}

size_t
rmq_json_put(const struct rmq_cmd *cmd, uint8_t *dst)
{
    uint8_t *w = dst;
    PUT(w, "{\"code\":");
    w = put_int(w, cmd->code);
    if (cmd->ext != NULL) {
        PUT(w, ",\"extFields\":{");
        bool first = true;
        for (uint32_t i = 0; i < cmd->ext_count; i++) {
            const struct rmq_field *f = &cmd->ext[i];
            if (!field_kept(f))
                continue;
            if (!first)
                *w++ = ',';
            first = false;
            w = put_quoted(w, &f->key);
            *w++ = ':';
            w = put_quoted(w, &f->val);
        }
        *w++ = '}';
    }
    PUT(w, ",\"flag\":");
    w = put_int(w, cmd->flag);
    PUT(w, ",\"language\":\"");
    const char *lang = rmq_language_name(cmd->language);
    size_t ll = strlen(lang);
    memcpy(w, lang, ll);
    w += ll;
    *w++ = '"';
    PUT(w, ",\"opaque\":");
    w = put_int(w, cmd->opaque);
    if (cmd->remark.p != NULL) {
        PUT(w, ",\"remark\":");
        w = put_quoted(w, &cmd->remark);
    }
    PUT(w, ",\"serializeTypeCurrentRPC\":\"JSON\"");
    PUT(w, ",\"version\":");
    w = put_int(w, cmd->version);
    *w++ = '}';
    return (size_t)(w - dst);
}
