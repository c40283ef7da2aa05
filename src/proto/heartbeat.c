/*
 * heartbeat: see heartbeat.h.
 *
 * One pass over the body, recursive descent over the shapes HeartbeatData
 * has (root object, consumer and producer arrays, consumer objects,
 * subscription arrays and objects, tag and code arrays); anything else is
 * walked over by skip_value().  The lexing is core/jscan.h's, shared
 * with the header codec: strings eight bytes at a time, escapes checked
 * on the way so that unescaping can trust them.  Elements of an array
 * are gathered in a scratch vector and copied into the arena when the
 * array closes, so every array is one contiguous block.
 */
#include "proto/heartbeat.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/jscan.h"
#include "core/jstr.h"

/* {{{ Arena */

struct hb_block {
    struct hb_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define BLOCK_MIN (64 * 1024)

static void *
arena_alloc(struct heartbeat *hb, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct hb_block *b = hb->blocks;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
        b = malloc(sizeof(*b) + cap);
        if (b == NULL)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = hb->blocks;
        hb->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void
heartbeat_free(struct heartbeat *hb)
{
    struct hb_block *b = hb->blocks;
    while (b != NULL) {
        struct hb_block *next = b->next;
        free(b);
        b = next;
    }
    memset(hb, 0, sizeof(*hb));
}

/* }}} */

/* {{{ Scratch vectors */

struct vec {
    void *p;
    size_t n, cap, elem;
};

static void *
vec_push(struct vec *v)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        void *p = realloc(v->p, cap * v->elem);
        if (p == NULL)
            return NULL;
        v->p = p;
        v->cap = cap;
    }
    void *e = (char *)v->p + v->n * v->elem;
    v->n++;
    return e;
}

/* Copies elements [from, n) into the arena (NULL when none). */
static int
vec_settle(struct heartbeat *hb, struct vec *v, size_t from, void **out)
{
    size_t k = v->n - from;
    *out = NULL;
    if (k > 0) {
        void *p = arena_alloc(hb, k * v->elem);
        if (p == NULL)
            return -ENOMEM;
        memcpy(p, (char *)v->p + from * v->elem, k * v->elem);
        *out = p;
    }
    v->n = from;
    return 0;
}

/* }}} */

/* {{{ Parser state and errors */

enum sect { S_ROOT, S_CONSUMER, S_SUB, S_PRODUCER };

struct hp {
    const uint8_t *s, *p, *end;
    struct heartbeat *hb;
    const struct hb_limits *lim;
    enum sect sect;
    const char *field;        /* the key being read, or NULL */
    uint32_t ci, si, pi;      /* indices for the path */
    struct vec consumers, producers, subs, tags, codes;
};

/* The path of what is being read, e.g. consumerDataSet[3].groupName. */
static void
path_of(const struct hp *j, char *out, size_t n)
{
    int k = 0;
    switch (j->sect) {
    case S_ROOT:
        k = snprintf(out, n, "%s", j->field ? j->field : "");
        return;
    case S_CONSUMER:
        k = snprintf(out, n, "consumerDataSet[%u]", j->ci);
        break;
    case S_SUB:
        k = snprintf(out, n, "consumerDataSet[%u].subscriptionDataSet[%u]", j->ci, j->si);
        break;
    case S_PRODUCER:
        k = snprintf(out, n, "producerDataSet[%u]", j->pi);
        break;
    }
    if (j->field != NULL && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, ".%s", j->field);
}

static int
fail(const struct hp *j, const char *what)
{
    char path[128];
    path_of(j, path, sizeof(path));
    if (path[0] != '\0')
        err_set("HeartbeatData: %s at offset %zu (%s)", what, (size_t)(j->p - j->s), path);
    else
        err_set("HeartbeatData: %s at offset %zu", what, (size_t)(j->p - j->s));
    return -RMQ_EPROTO;
}

static int
nomem(void)
{
    err_set("out of memory reading a heartbeat");
    return -ENOMEM;
}

/* A name as shown in an error: quoted-safe, at most 64 bytes. */
static void
show_name(const char *s, size_t n, char *out, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n && w + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 64) {
            memcpy(out + w, "...", 3);
            w += 3;
            break;
        }
        if (c < 0x20 || c == 0x7F || c == '"' || c == '\\')
            w += (size_t)snprintf(out + w, cap - w, "\\x%02X", c);
        else
            out[w++] = (char)c;
    }
    out[w] = '\0';
}

/* }}} */

/* {{{ Lexing: core/jscan.h, with this reader's error format */

static inline int
jpeek(const struct hp *j)
{
    return jscan_peek(j->p, j->end);
}

static inline void
skip_ws(struct hp *j)
{
    j->p = jscan_ws(j->p, j->end);
}

static int
lexed(struct hp *j, const char *why)
{
    return why == NULL ? 0 : fail(j, why);
}

static int
scan_string(struct hp *j, const uint8_t **raw, size_t *n, bool *esc)
{
    return lexed(j, jscan_string(&j->p, j->end, raw, n, esc));
}

static int
scan_number(struct hp *j, bool *is_int)
{
    return lexed(j, jscan_number(&j->p, j->end, is_int));
}

static int
scan_literal(struct hp *j, const char *lit, size_t n)
{
    return lexed(j, jscan_literal(&j->p, j->end, lit, n));
}

/* Walks over any value, checking it; `depth` is that of its container. */
static int
skip_value(struct hp *j, uint32_t depth)
{
    const char *why = jscan_skip(&j->p, j->end, (int)depth, (int)j->lim->max_depth);
    if (why != NULL && strcmp(why, "unexpected end") == 0)
        why = "unexpected end of the body";
    return lexed(j, why);
}

static int
is_null(struct hp *j)
{
    return jpeek(j) == 'n';
}

/*
 * A checked number lexeme as an int64: an integer exactly, a fraction
 * or exponent rounded down (as rmq.broker.filter's math.floor); 1 when
 * out of range.
 */
static int
lexeme_i64(const uint8_t *s, size_t n, bool is_int, int64_t *out)
{
    if (is_int) {
        bool neg = s[0] == '-';
        size_t i = neg ? 1 : 0;
        uint64_t v = 0;
        uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (; i < n; i++) {
            uint64_t d = (uint64_t)(s[i] - '0');
            if (v > (lim - d) / 10)
                return 1;
            v = v * 10 + d;
        }
        *out = neg ? (int64_t)(0 - v) : (int64_t)v;
        return 0;
    }
    char tmp[64];
    if (n >= sizeof(tmp))
        return 1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    double d = floor(strtod(tmp, NULL));
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return 1;
    *out = (int64_t)d;
    return 0;
}

/* }}} */

/* {{{ Typed values */

static int
read_str(struct hp *j, struct hb_str *out)
{
    int c = jpeek(j);
    if (c == 'n') {
        out->p = NULL;
        out->len = 0;
        return scan_literal(j, "null", 4);
    }
    if (c != '"')
        return fail(j, "expected a string");
    const uint8_t *start = j->p;
    const uint8_t *raw;
    size_t n;
    bool esc;
    int rc = scan_string(j, &raw, &n, &esc);
    if (rc != 0)
        return rc;
    if (n > j->lim->max_string) {
        j->p = start;
        char what[96];
        snprintf(what, sizeof(what), "string of %zu bytes, more than %u", n,
                 j->lim->max_string);
        return fail(j, what);
    }
    if (!esc) {
        out->p = (const char *)raw;
        out->len = (uint32_t)n;
        return 0;
    }
    uint8_t *w = arena_alloc(j->hb, n > 0 ? n : 1);
    if (w == NULL)
        return nomem();
    out->p = (const char *)w;
    out->len = (uint32_t)jscan_unescape(raw, n, w);
    return 0;
}

static int
read_bool(struct hp *j, bool *out)
{
    switch (jpeek(j)) {
    case 't':
        *out = true;
        return scan_literal(j, "true", 4);
    case 'f':
        *out = false;
        return scan_literal(j, "false", 5);
    case 'n':
        *out = false;
        return scan_literal(j, "null", 4);
    default:
        return fail(j, "expected true or false");
    }
}

/* An integer, as a JSON number or (rocketmq-client-cpp) a string
 * holding one; null leaves *out. */
static int
read_i64(struct hp *j, int64_t *out)
{
    int c = jpeek(j);
    if (c == 'n')
        return scan_literal(j, "null", 4);
    const uint8_t *start = j->p;
    bool is_int;
    int rc;
    if (c == '"') {
        const uint8_t *raw;
        size_t n;
        bool esc;
        if ((rc = scan_string(j, &raw, &n, &esc)) != 0)
            return rc;
        struct hp sub = *j;
        sub.s = j->s;
        sub.p = raw;
        sub.end = raw + n;
        if (esc || n == 0 || scan_number(&sub, &is_int) != 0 || sub.p != sub.end) {
            j->p = start;
            return fail(j, "expected a number in the string");
        }
        if (lexeme_i64(raw, n, is_int, out) != 0) {
            j->p = start;
            return fail(j, "number out of the 64-bit range");
        }
        return 0;
    }
    if (c != '-' && (c < '0' || c > '9'))
        return fail(j, "expected a number");
    if ((rc = scan_number(j, &is_int)) != 0)
        return rc;
    if (lexeme_i64(start, (size_t)(j->p - start), is_int, out) != 0) {
        j->p = start;
        return fail(j, "number out of the 64-bit range");
    }
    return 0;
}

static const char *const consume_types[] = {
    "CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP", NULL,
};
static const char *const message_models[] = {
    "BROADCASTING", "CLUSTERING", NULL,
};
static const char *const consume_froms[] = {
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
    NULL,
};
static const char *const *const enum_names[] = {
    consume_types, message_models, consume_froms,
};
static const char *const enum_types[] = {
    "ConsumeType", "MessageModel", "ConsumeFromWhere",
};

const char *
hb_enum_name(enum hb_enum which, int ordinal)
{
    if ((unsigned)which > HB_ENUM_CONSUME_FROM_WHERE || ordinal < 0)
        return NULL;
    const char *const *names = enum_names[which];
    for (int i = 0; names[i] != NULL; i++)
        if (i == ordinal)
            return names[i];
    return NULL;
}

/* An enum as its name or its ordinal (number or numeric string). */
static int
read_enum(struct hp *j, enum hb_enum which, int8_t *out)
{
    int c = jpeek(j);
    const uint8_t *start = j->p;
    if (c == 'n') {
        *out = -1;
        return scan_literal(j, "null", 4);
    }
    int64_t ord = -1;
    if (c == '"') {
        struct hb_str s;
        int rc = read_str(j, &s);
        if (rc != 0)
            return rc;
        const char *const *names = enum_names[which];
        for (int i = 0; names[i] != NULL; i++) {
            if (strlen(names[i]) == s.len && memcmp(names[i], s.p, s.len) == 0) {
                *out = (int8_t)i;
                return 0;
            }
        }
        /* "1": an ordinal in a string. */
        bool digits = s.len > 0 && s.len < 4;
        int64_t v = 0;
        for (uint32_t i = 0; i < s.len && digits; i++) {
            digits = s.p[i] >= '0' && s.p[i] <= '9';
            v = v * 10 + (s.p[i] - '0');
        }
        if (digits)
            ord = v;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        int rc = read_i64(j, &ord);
        if (rc != 0)
            return rc;
    } else {
        return fail(j, "expected an enum name or ordinal");
    }
    if (hb_enum_name(which, (int)(ord >= 0 && ord < 64 ? ord : -1)) == NULL) {
        j->p = start;
        char what[64];
        snprintf(what, sizeof(what), "not a %s", enum_types[which]);
        return fail(j, what);
    }
    *out = (int8_t)ord;
    return 0;
}

/* }}} */

/* {{{ Containers */

/*
 * Opens an array value.  Returns 1 positioned at the first element, 0
 * when there is none (null, [], or lua-cjson's {} for an empty table),
 * or an error.  `depth` is the array's own depth.
 */
static int
arr_open(struct hp *j, uint32_t depth)
{
    int c = jpeek(j);
    if (c == 'n') {
        int rc = scan_literal(j, "null", 4);
        return rc != 0 ? rc : 0;
    }
    if (c == '{') {
        const uint8_t *start = j->p;
        j->p++;
        skip_ws(j);
        if (jpeek(j) == '}') {
            j->p++;
            return 0;
        }
        j->p = start;
        return fail(j, "expected an array");
    }
    if (c != '[')
        return fail(j, "expected an array");
    if (depth > j->lim->max_depth)
        return fail(j, "nesting too deep");
    j->p++;
    skip_ws(j);
    if (jpeek(j) == ']') {
        j->p++;
        return 0;
    }
    return 1;
}

/* After an element or member of a container that `close` ends: 1 when
 * another follows, 0 at the end. */
static int
seq_next(struct hp *j, int close)
{
    skip_ws(j);
    int c = jpeek(j);
    if (c == close) {
        j->p++;
        return 0;
    }
    if (c != ',')
        return fail(j, c < 0 ? "unexpected end of the body"
                             : close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
    j->p++;
    skip_ws(j);
    return 1;
}

static int
arr_next(struct hp *j)
{
    return seq_next(j, ']');
}

/* Opens an object (depth is its own); 1 when a key follows, 0 if empty. */
static int
obj_open(struct hp *j, uint32_t depth, const char *what)
{
    if (jpeek(j) != '{')
        return fail(j, what);
    if (depth > j->lim->max_depth)
        return fail(j, "nesting too deep");
    j->p++;
    skip_ws(j);
    if (jpeek(j) == '}') {
        j->p++;
        return 0;
    }
    return 1;
}

/*
 * Reads the next key into buf (unescaped; keys longer than the buffer
 * are reported as "" so that they are skipped) and the colon.
 */
static int
obj_key(struct hp *j, char *buf, size_t cap, size_t *klen)
{
    if (jpeek(j) != '"')
        return fail(j, jpeek(j) < 0 ? "unexpected end of the body" : "expected a key");
    const uint8_t *raw;
    size_t n;
    bool esc;
    int rc = scan_string(j, &raw, &n, &esc);
    if (rc != 0)
        return rc;
    *klen = 0;
    if (n < cap) {
        if (esc) {
            *klen = jscan_unescape(raw, n, (uint8_t *)buf);
        } else {
            memcpy(buf, raw, n);
            *klen = n;
        }
    }
    buf[*klen] = '\0';
    skip_ws(j);
    if (jpeek(j) != ':')
        return fail(j, "expected ':'");
    j->p++;
    skip_ws(j);
    return 0;
}

static int
obj_next(struct hp *j)
{
    return seq_next(j, '}');
}

static int
too_many(struct hp *j, const char *what, uint32_t max)
{
    char m[96];
    snprintf(m, sizeof(m), "more than %u %s", max, what);
    return fail(j, m);
}

static int
check_name(struct hp *j, const struct hb_str *s, const char *field, bool topic)
{
    j->field = field;
    char path[128], shown[96];
    if (s->p == NULL) {
        path_of(j, path, sizeof(path));
        err_set("%s is missing (object ending at offset %zu)", path,
                (size_t)(j->p - j->s));
        return -RMQ_EPROTO;
    }
    const char *why = hb_check_name(s->p, s->len, topic);
    if (why == NULL) {
        j->field = NULL;
        return 0;
    }
    path_of(j, path, sizeof(path));
    show_name(s->p, s->len, shown, sizeof(shown));
    err_set("%s \"%s\" %s", path, shown, why);
    return -RMQ_EPROTO;
}

#define KEY(k, lit) (klen == sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)

static int
read_tags(struct hp *j, struct hb_sub *sub)
{
    struct vec *v = &j->tags;
    size_t from = v->n;
    int rc = arr_open(j, 6);
    while (rc == 1) {
        if (v->n - from >= j->lim->max_tags)
            return too_many(j, "tags", j->lim->max_tags);
        struct hb_str *t = vec_push(v);
        if (t == NULL)
            return nomem();
        if (jpeek(j) != '"')
            return fail(j, "expected a string");
        if ((rc = read_str(j, t)) != 0)
            return rc;
        rc = arr_next(j);
    }
    if (rc < 0)
        return rc;
    sub->ntags = (uint32_t)(v->n - from);
    void *p;
    if (vec_settle(j->hb, v, from, &p) != 0)
        return nomem();
    sub->tags = p;
    return 0;
}

static int
read_codes(struct hp *j, struct hb_sub *sub)
{
    struct vec *v = &j->codes;
    size_t from = v->n;
    sub->has_codes = !is_null(j);
    int rc = arr_open(j, 6);
    while (rc == 1) {
        if (v->n - from >= j->lim->max_tags)
            return too_many(j, "codes", j->lim->max_tags);
        const uint8_t *start = j->p;
        int c = jpeek(j);
        if (c != '-' && (c < '0' || c > '9'))
            return fail(j, "expected a number");
        int64_t x = 0;
        if ((rc = read_i64(j, &x)) != 0)
            return rc;
        if (x < INT32_MIN || x > INT32_MAX) {
            j->p = start;
            return fail(j, "not a 32-bit integer");
        }
        int32_t *e = vec_push(v);
        if (e == NULL)
            return nomem();
        *e = (int32_t)x;
        rc = arr_next(j);
    }
    if (rc < 0)
        return rc;
    sub->ncodes = (uint32_t)(v->n - from);
    void *p;
    if (vec_settle(j->hb, v, from, &p) != 0)
        return nomem();
    sub->codes = p;
    return 0;
}

static int
read_sub(struct hp *j, struct hb_sub *sub)
{
    memset(sub, 0, sizeof(*sub));
    char key[64];
    size_t klen;
    int rc = obj_open(j, 5, "expected a SubscriptionData object");
    while (rc == 1) {
        if ((rc = obj_key(j, key, sizeof(key), &klen)) != 0)
            return rc;
        j->field = key;
        if (KEY(key, "topic"))
            rc = read_str(j, &sub->topic);
        else if (KEY(key, "subString"))
            rc = read_str(j, &sub->sub_string);
        else if (KEY(key, "expressionType"))
            rc = read_str(j, &sub->expression_type);
        else if (KEY(key, "subVersion"))
            rc = read_i64(j, &sub->sub_version);
        else if (KEY(key, "classFilterMode"))
            rc = read_bool(j, &sub->class_filter_mode);
        else if (KEY(key, "tagsSet"))
            rc = read_tags(j, sub);
        else if (KEY(key, "codeSet"))
            rc = read_codes(j, sub);
        else
            rc = skip_value(j, 5);
        if (rc != 0)
            return rc;
        j->field = NULL;
        rc = obj_next(j);
    }
    if (rc < 0)
        return rc;
    return check_name(j, &sub->topic, "topic", true);
}

static int
read_subs(struct hp *j, struct hb_consumer *cd)
{
    struct vec *v = &j->subs;
    size_t from = v->n;
    int rc = arr_open(j, 4);
    j->si = 0;
    while (rc == 1) {
        if (v->n - from >= j->lim->max_subs)
            return too_many(j, "subscriptions in one consumer", j->lim->max_subs);
        if (j->hb->nsubs_total >= j->lim->max_subs_total)
            return too_many(j, "subscriptions in one heartbeat", j->lim->max_subs_total);
        struct hb_sub *s = vec_push(v);
        if (s == NULL)
            return nomem();
        j->sect = S_SUB;
        j->field = NULL;
        if ((rc = read_sub(j, s)) != 0)
            return rc;
        j->sect = S_CONSUMER;
        j->field = "subscriptionDataSet";
        j->hb->nsubs_total++;
        j->si++;
        rc = arr_next(j);
    }
    if (rc < 0)
        return rc;
    cd->nsubs = (uint32_t)(v->n - from);
    void *p;
    if (vec_settle(j->hb, v, from, &p) != 0)
        return nomem();
    cd->subs = p;
    return 0;
}

static int
read_consumer(struct hp *j, struct hb_consumer *cd)
{
    memset(cd, 0, sizeof(*cd));
    cd->consume_type = cd->message_model = cd->consume_from_where = -1;
    char key[64];
    size_t klen;
    int rc = obj_open(j, 3, "expected a ConsumerData object");
    while (rc == 1) {
        if ((rc = obj_key(j, key, sizeof(key), &klen)) != 0)
            return rc;
        j->field = key;
        if (KEY(key, "groupName"))
            rc = read_str(j, &cd->group);
        else if (KEY(key, "consumeType"))
            rc = read_enum(j, HB_ENUM_CONSUME_TYPE, &cd->consume_type);
        else if (KEY(key, "messageModel"))
            rc = read_enum(j, HB_ENUM_MESSAGE_MODEL, &cd->message_model);
        else if (KEY(key, "consumeFromWhere"))
            rc = read_enum(j, HB_ENUM_CONSUME_FROM_WHERE, &cd->consume_from_where);
        else if (KEY(key, "unitMode"))
            rc = read_bool(j, &cd->unit_mode);
        else if (KEY(key, "subscriptionDataSet")) {
            j->field = "subscriptionDataSet";
            /* A repeated key: the last one counts. */
            j->hb->nsubs_total -= cd->nsubs;
            rc = read_subs(j, cd);
        } else
            rc = skip_value(j, 3);
        if (rc != 0)
            return rc;
        j->field = NULL;
        rc = obj_next(j);
    }
    if (rc < 0)
        return rc;
    return check_name(j, &cd->group, "groupName", false);
}

static int
read_producer(struct hp *j, struct hb_producer *pd)
{
    memset(pd, 0, sizeof(*pd));
    char key[64];
    size_t klen;
    int rc = obj_open(j, 3, "expected a ProducerData object");
    while (rc == 1) {
        if ((rc = obj_key(j, key, sizeof(key), &klen)) != 0)
            return rc;
        j->field = key;
        if (KEY(key, "groupName"))
            rc = read_str(j, &pd->group);
        else
            rc = skip_value(j, 3);
        if (rc != 0)
            return rc;
        j->field = NULL;
        rc = obj_next(j);
    }
    if (rc < 0)
        return rc;
    return check_name(j, &pd->group, "groupName", false);
}

static int
read_consumers(struct hp *j)
{
    struct vec *v = &j->consumers;
    v->n = 0;  /* a repeated key: the last one counts */
    j->hb->nsubs_total = 0;
    int rc = arr_open(j, 2);
    j->ci = 0;
    while (rc == 1) {
        if (v->n >= j->lim->max_consumers)
            return too_many(j, "consumer groups", j->lim->max_consumers);
        struct hb_consumer *cd = vec_push(v);
        if (cd == NULL)
            return nomem();
        j->sect = S_CONSUMER;
        j->field = NULL;
        if ((rc = read_consumer(j, cd)) != 0)
            return rc;
        j->sect = S_ROOT;
        j->field = "consumerDataSet";
        j->ci++;
        rc = arr_next(j);
    }
    return rc < 0 ? rc : 0;
}

static int
read_producers(struct hp *j)
{
    struct vec *v = &j->producers;
    v->n = 0;
    int rc = arr_open(j, 2);
    j->pi = 0;
    while (rc == 1) {
        if (v->n >= j->lim->max_producers)
            return too_many(j, "producer groups", j->lim->max_producers);
        struct hb_producer *pd = vec_push(v);
        if (pd == NULL)
            return nomem();
        j->sect = S_PRODUCER;
        j->field = NULL;
        if ((rc = read_producer(j, pd)) != 0)
            return rc;
        j->sect = S_ROOT;
        j->field = "producerDataSet";
        j->pi++;
        rc = arr_next(j);
    }
    return rc < 0 ? rc : 0;
}

static int
read_root(struct hp *j)
{
    char key[64];
    size_t klen;
    skip_ws(j);
    if (j->p == j->end)
        return fail(j, "empty body");
    int rc = obj_open(j, 1, "expected a HeartbeatData object");
    while (rc == 1) {
        if ((rc = obj_key(j, key, sizeof(key), &klen)) != 0)
            return rc;
        j->field = key;
        if (KEY(key, "clientID")) {
            rc = read_str(j, &j->hb->client_id);
        } else if (KEY(key, "consumerDataSet")) {
            j->field = "consumerDataSet";
            rc = read_consumers(j);
        } else if (KEY(key, "producerDataSet")) {
            j->field = "producerDataSet";
            rc = read_producers(j);
        } else if (KEY(key, "heartbeatFingerprint")) {
            /* 5.x heartbeat v2: a Java int (a hash of the rest). */
            int64_t v = 0;
            rc = read_i64(j, &v);
            if (rc == 0 && (v < INT32_MIN || v > INT32_MAX))
                return fail(j, "heartbeatFingerprint is not an int");
            j->hb->fingerprint = (int32_t)v;
        } else if (KEY(key, "withoutSub")) {
            rc = read_bool(j, &j->hb->without_sub);
        } else {
            rc = skip_value(j, 1);
        }
        if (rc != 0)
            return rc;
        j->sect = S_ROOT;
        j->field = NULL;
        rc = obj_next(j);
    }
    if (rc < 0)
        return rc;
    skip_ws(j);
    if (j->p != j->end)
        return fail(j, "unexpected text after the object");
    return 0;
}

/* }}} */

bool
hb_v2_reply(const struct heartbeat *hb, int32_t version, bool sub_change, bool *out)
{
    if (hb->fingerprint == 0 && !hb->without_sub) {
        *out = true;
        return version >= HB_V5_0_0;
    }
    *out = sub_change;
    return true;
}

void
hb_limits_default(struct hb_limits *lim)
{
    lim->max_consumers = 100000;
    lim->max_producers = 100000;
    lim->max_subs = 10000;
    lim->max_subs_total = 1000000;
    lim->max_tags = 65536;
    lim->max_string = 256 * 1024;
    lim->max_depth = 16;
}

int
heartbeat_parse(struct heartbeat *hb, const char *body, size_t len,
                const struct hb_limits *lim)
{
    struct hb_limits dflt;
    if (lim == NULL) {
        hb_limits_default(&dflt);
        lim = &dflt;
    }
    memset(hb, 0, sizeof(*hb));
    struct hp j;
    memset(&j, 0, sizeof(j));
    j.s = j.p = (const uint8_t *)(body != NULL ? body : "");
    j.end = j.s + (body != NULL ? len : 0);
    j.hb = hb;
    j.lim = lim;
    j.consumers.elem = sizeof(struct hb_consumer);
    j.producers.elem = sizeof(struct hb_producer);
    j.subs.elem = sizeof(struct hb_sub);
    j.tags.elem = sizeof(struct hb_str);
    j.codes.elem = sizeof(int32_t);
    int rc = read_root(&j);
    if (rc == 0) {
        void *p;
        hb->nconsumers = (uint32_t)j.consumers.n;
        hb->nproducers = (uint32_t)j.producers.n;
        if (vec_settle(hb, &j.consumers, 0, &p) != 0)
            rc = nomem();
        hb->consumers = p;
        if (rc == 0 && vec_settle(hb, &j.producers, 0, &p) != 0)
            rc = nomem();
        hb->producers = p;
    }
    free(j.consumers.p);
    free(j.producers.p);
    free(j.subs.p);
    free(j.tags.p);
    free(j.codes.p);
    if (rc != 0) {
        struct hb_block *blocks = hb->blocks;
        memset(hb, 0, sizeof(*hb));
        hb->blocks = blocks;  /* heartbeat_free() releases them */
    }
    return rc;
}

/* {{{ Names */

static bool
name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '%' || c == '|' || c == '_' || c == '-';
}

const char *
hb_check_name(const char *s, size_t n, bool is_topic)
{
    bool blank = true;
    for (size_t i = 0; i < n && blank; i++)
        blank = s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r');
    if (blank)
        return "is blank";
    for (size_t i = 0; i < n; i++)
        if (!name_char((unsigned char)s[i]))
            return "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$";
    if (is_topic && n > HB_TOPIC_MAX_LEN)
        return "is longer than 127 characters";
    if (!is_topic && n > HB_GROUP_MAX_LEN)
        return "is longer than 255 characters";
    return NULL;
}

/* }}} */

/* {{{ Normalisation */

static bool
lua_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static struct hb_str
trim(const char *p, size_t n)
{
    while (n > 0 && lua_space(p[0])) {
        p++;
        n--;
    }
    while (n > 0 && lua_space(p[n - 1]))
        n--;
    return (struct hb_str){ p, (uint32_t)n };
}

static bool
str_eq(struct hb_str a, struct hb_str b)
{
    return a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
}

/* The next "||"-separated part starting at *pos (advanced past it);
 * false when there is none. */
static bool
next_part(const char *s, size_t n, size_t *pos, bool *done, struct hb_str *out)
{
    if (*done)
        return false;
    size_t i = *pos;
    const char *bar = NULL;
    for (size_t k = i; k + 1 < n; k++) {
        if (s[k] == '|' && s[k + 1] == '|') {
            bar = s + k;
            break;
        }
    }
    if (bar == NULL) {
        *out = (struct hb_str){ s + i, (uint32_t)(n - i) };
        *done = true;
        return true;
    }
    *out = (struct hb_str){ s + i, (uint32_t)(bar - (s + i)) };
    *pos = (size_t)(bar - s) + 2;
    return true;
}

int
hb_normalize(const struct hb_sub *sub, struct hb_norm *out)
{
    memset(out, 0, sizeof(*out));
    out->tags = out->tags_small;
    out->codes = out->codes_small;
    struct hb_str et = sub->expression_type;
    static const struct hb_str TAG = { "TAG", 3 };
    static const struct hb_str ALL = { "*", 1 };
    out->is_tag = et.p == NULL || et.len == 0 || str_eq(et, TAG);
    out->expression_type = out->is_tag ? TAG : et;
    out->sub_string = sub->sub_string.p != NULL ? sub->sub_string : ALL;
    if (!out->is_tag)
        return 0;
    const char *s = out->sub_string.p;
    size_t n = out->sub_string.len;
    if (n == 0 || str_eq(trim(s, n), ALL)) {
        out->sub_string = ALL;
        return 0;
    }
    /* Parts: at most one more than the "||" in s. */
    size_t parts = 1;
    for (size_t k = 0; k + 1 < n; k++)
        if (s[k] == '|' && s[k + 1] == '|') {
            parts++;
            k++;
        }
    uint32_t *slots = NULL;
    size_t nslots = 0;
    if (parts > 8) {
        nslots = 16;
        while (nslots < parts * 2)
            nslots *= 2;
        size_t bytes = parts * (sizeof(struct hb_str) + sizeof(int32_t)) +
                       nslots * sizeof(uint32_t);
        char *heap = malloc(bytes);
        if (heap == NULL)
            return -ENOMEM;
        out->heap = heap;
        out->tags = (struct hb_str *)heap;
        slots = (uint32_t *)(heap + parts * sizeof(struct hb_str));
        out->codes = (int32_t *)(slots + nslots);
        memset(slots, 0xFF, nslots * sizeof(uint32_t));
    }
    size_t pos = 0;
    bool done = false;
    struct hb_str part;
    while (next_part(s, n, &pos, &done, &part)) {
        struct hb_str tag = trim(part.p, part.len);
        if (tag.len == 0)
            continue;
        int32_t code = java_hash(tag.p, tag.len);
        bool seen = false;
        if (slots == NULL) {
            for (uint32_t k = 0; k < out->ntags && !seen; k++)
                seen = str_eq(out->tags[k], tag);
        } else {
            size_t mask = nslots - 1;
            size_t h = ((uint32_t)code * 2654435761u) & mask;
            for (;; h = (h + 1) & mask) {
                uint32_t k = slots[h];
                if (k == UINT32_MAX) {
                    slots[h] = out->ntags;
                    break;
                }
                if (str_eq(out->tags[k], tag)) {
                    seen = true;
                    break;
                }
            }
        }
        if (seen)
            continue;
        out->tags[out->ntags] = tag;
        out->codes[out->ntags] = code;
        out->ntags++;
    }
    return 0;
}

void
hb_norm_free(struct hb_norm *n)
{
    free(n->heap);
    n->heap = NULL;
}

/* }}} */
