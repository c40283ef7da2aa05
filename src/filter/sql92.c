/*
 * sql92: see sql92.h.  A recursive-descent parser that follows
 * SelectorParser.jj production by production (JavaCC reads tokens on
 * demand, and so does this lexer: text after a complete expression is
 * never looked at, as in Java), building nodes in one array; a
 * recursive evaluator over it whose depth the tree height limit bounds.
 */
#include "filter/sql92.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/props.h"

#define PARSE_EXC "org.apache.rocketmq.filter.parser.ParseException: "
#define TOKEN_ERR "org.apache.rocketmq.filter.parser.TokenMgrError: "
#define RUNTIME_EXC "java.lang.RuntimeException: "
#define NUMBER_EXC "java.lang.NumberFormatException: "

/* {{{ Values and nodes */

enum vt { V_NULL, V_BOOL, V_INT, V_LONG, V_DBL, V_STR, V_ERR };

struct val {
    uint8_t t;
    bool b;
    int64_t i;
    double d;
    const char *s;
    size_t n;
};

enum kind {
    K_CONST, K_PROP, K_NEG, K_NOT, K_BCAST, K_AND, K_OR,
    K_EQ, K_GT, K_GE, K_LT, K_LE, K_IN
};

struct node {
    uint8_t kind;
    bool bool_const;            /* a BooleanConstantExpression (TRUE FALSE NULL) */
    bool in_not;
    int a, b;                   /* children; IN: first item, item count */
    int height;
    struct val v;               /* K_CONST's value; K_PROP's name in s/n */
};

struct item {
    const char *s;
    size_t n;
};

struct sql92 {
    struct node *nodes;
    int n, cap;
    struct item *items;
    int nitems, icap;
    char *pool;                 /* decoded strings and names; never moves */
    size_t pool_len;
    int root;
};

/* }}} */

/* {{{ Lexer */

enum tok {
    T_EOF, T_NOT, T_AND, T_OR, T_BETWEEN, T_IN, T_TRUE, T_FALSE, T_NULL, T_IS,
    T_DEC, T_FLT, T_STR, T_ID, T_EQ, T_NE, T_GT, T_GE, T_LT, T_LE, T_LP,
    T_COMMA, T_RP, T_PLUS, T_MINUS, T_LEXERR
};

struct token {
    enum tok t;
    size_t pos, len;
};

struct parser {
    const char *s;
    size_t len, pos;            /* lexer position */
    struct token la[2];         /* look-ahead */
    int nla;
    struct sql92 *f;
    const struct sql92_limits *lim;
    int depth;
    char *err;
    size_t errlen;
    bool failed;
};

static bool
is_id_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$';
}

static bool
is_id_part(unsigned char c)
{
    return is_id_start(c) || (c >= '0' && c <= '9');
}

static bool
is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static void
fail(struct parser *p, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = true;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
}

static void
line_col(const struct parser *p, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->s[i] == '\n' || (p->s[i] == '\r' && !(i + 1 < p->len && p->s[i + 1] == '\n'))) {
            (*line)++;
            *col = 1;
        } else if (p->s[i] != '\r') {
            (*col)++;
        }
    }
}

/* Length of a FLOATING_POINT_LITERAL starting at i (0: none). */
static size_t
float_len(const char *s, size_t n, size_t i)
{
    size_t j = i, best = 0;
    size_t d = 0;
    while (j < n && is_digit((unsigned char)s[j])) {
        j++;
        d++;
    }
    bool dot = j < n && s[j] == '.';
    if (dot) {
        j++;
        size_t frac = 0;
        while (j < n && is_digit((unsigned char)s[j])) {
            j++;
            frac++;
        }
        if (d == 0 && frac == 0)
            return 0;
        best = j;
    } else if (d == 0) {
        return 0;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < n && (s[k] == '+' || s[k] == '-'))
            k++;
        size_t e = 0;
        while (k < n && is_digit((unsigned char)s[k])) {
            k++;
            e++;
        }
        if (e > 0)
            best = k;
    }
    return best > i ? best - i : 0;
}

static const struct {
    const char *w;
    enum tok t;
} keywords[] = {
    { "NOT", T_NOT }, { "AND", T_AND }, { "OR", T_OR }, { "BETWEEN", T_BETWEEN },
    { "IN", T_IN }, { "TRUE", T_TRUE }, { "FALSE", T_FALSE }, { "NULL", T_NULL },
    { "IS", T_IS },
};

static bool
word_eq(const char *s, size_t n, const char *w)
{
    size_t wl = strlen(w);
    if (wl != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        if (c != w[i])
            return false;
    }
    return true;
}

/* The next token from p->pos (JavaCC's longest match, keywords first). */
static struct token
lex(struct parser *p)
{
    const char *s = p->s;
    size_t n = p->len;
    for (;;) {
        while (p->pos < n && (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' ||
                              s[p->pos] == '\r' || s[p->pos] == '\f'))
            p->pos++;
        if (p->pos + 1 < n && s[p->pos] == '-' && s[p->pos + 1] == '-') {
            /* A line comment needs its line end (the .jj's rule). */
            size_t j = p->pos + 2;
            while (j < n && s[j] != '\n' && s[j] != '\r')
                j++;
            if (j >= n)
                break;      /* "-" then: lexed as MINUS below */
            p->pos = j + 1;
            continue;
        }
        if (p->pos + 1 < n && s[p->pos] == '/' && s[p->pos + 1] == '*') {
            const char *end = NULL;
            for (size_t j = p->pos + 2; j + 1 < n; j++)
                if (s[j] == '*' && s[j + 1] == '/') {
                    end = s + j + 2;
                    break;
                }
            if (end == NULL)
                break;      /* unterminated: "/" is a lexical error */
            p->pos = (size_t)(end - s);
            continue;
        }
        break;
    }
    struct token t = { T_EOF, p->pos, 0 };
    if (p->pos >= n)
        return t;
    size_t i = p->pos;
    unsigned char c = (unsigned char)s[i];
    size_t l = 0;
    if (is_id_start(c)) {
        l = 1;
        while (i + l < n && is_id_part((unsigned char)s[i + l]))
            l++;
        t.t = T_ID;
        for (size_t k = 0; k < sizeof(keywords) / sizeof(keywords[0]); k++)
            if (word_eq(s + i, l, keywords[k].w)) {
                t.t = keywords[k].t;
                break;
            }
    } else if (is_digit(c) || (c == '.' && i + 1 < n && is_digit((unsigned char)s[i + 1]))) {
        size_t dl = 0;
        if (c == '0') {
            dl = 1;
        } else if (is_digit(c)) {
            dl = 1;
            while (i + dl < n && is_digit((unsigned char)s[i + dl]))
                dl++;
            if (i + dl < n && (s[i + dl] == 'l' || s[i + dl] == 'L'))
                dl++;
        }
        size_t fl = float_len(s, n, i);
        if (fl > dl) {
            t.t = T_FLT;
            l = fl;
        } else {
            t.t = T_DEC;
            l = dl;
        }
    } else if (c == '\'') {
        size_t j = i + 1;
        for (;;) {
            if (j >= n) {
                l = 0;
                break;
            }
            if (s[j] == '\'') {
                if (j + 1 < n && s[j + 1] == '\'') {
                    j += 2;
                    continue;
                }
                l = j + 1 - i;
                break;
            }
            j++;
        }
        t.t = l ? T_STR : T_LEXERR;
    } else {
        char c2 = i + 1 < n ? s[i + 1] : 0;
        switch (c) {
        case '=': t.t = T_EQ; l = 1; break;
        case '<':
            if (c2 == '>') { t.t = T_NE; l = 2; }
            else if (c2 == '=') { t.t = T_LE; l = 2; }
            else { t.t = T_LT; l = 1; }
            break;
        case '>':
            if (c2 == '=') { t.t = T_GE; l = 2; }
            else { t.t = T_GT; l = 1; }
            break;
        case '(': t.t = T_LP; l = 1; break;
        case ')': t.t = T_RP; l = 1; break;
        case ',': t.t = T_COMMA; l = 1; break;
        case '+': t.t = T_PLUS; l = 1; break;
        case '-': t.t = T_MINUS; l = 1; break;
        default: t.t = T_LEXERR; break;
        }
    }
    if (t.t == T_LEXERR) {
        int line, col;
        line_col(p, i, &line, &col);
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            fail(p, TOKEN_ERR "Lexical error at line %d, column %d.  Encountered: \"%c\" (%d), after : \"\"",
                 line, col, c, c);
        else
            fail(p, TOKEN_ERR "Lexical error at line %d, column %d.  Encountered: \"\\u%04x\" (%d), after : \"\"",
                 line, col, c, c);
        p->pos = n;
        return t;
    }
    t.len = l;
    p->pos = i + l;
    return t;
}

static const struct token *
peek(struct parser *p, int k)
{
    while (p->nla <= k) {
        p->la[p->nla] = p->failed ? (struct token){ T_LEXERR, p->len, 0 } : lex(p);
        p->nla++;
    }
    return &p->la[k];
}

static struct token
next(struct parser *p)
{
    struct token t = *peek(p, 0);
    p->la[0] = p->la[1];
    p->nla--;
    return t;
}

static void
unexpected(struct parser *p, const struct token *t)
{
    if (t->t == T_LEXERR)
        return;             /* the lexer said why */
    int line, col;
    line_col(p, t->pos, &line, &col);
    if (t->t == T_EOF)
        fail(p, PARSE_EXC "Encountered \"<EOF>\" at line %d, column %d.", line, col);
    else
        fail(p, PARSE_EXC "Encountered \"%.*s\" at line %d, column %d.", (int)(t->len > 64 ? 64 : t->len),
             p->s + t->pos, line, col);
}

static bool
expect(struct parser *p, enum tok t)
{
    const struct token *k = peek(p, 0);
    if (k->t != t) {
        unexpected(p, k);
        return false;
    }
    (void)next(p);
    return true;
}

/* }}} */

/* {{{ Building nodes */

static int
add_node(struct parser *p, enum kind kind, int a, int b)
{
    if (p->failed)
        return -1;
    struct sql92 *f = p->f;
    if (f->n + f->nitems >= p->lim->max_nodes) {
        fail(p, RUNTIME_EXC "the expression has more than %d terms (filterExpressionMaxNodes)",
             p->lim->max_nodes);
        return -1;
    }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 16;
        struct node *nn = realloc(f->nodes, sizeof(*nn) * (size_t)cap);
        if (nn == NULL) {
            fail(p, RUNTIME_EXC "out of memory");
            return -1;
        }
        f->nodes = nn;
        f->cap = cap;
    }
    struct node *nd = &f->nodes[f->n];
    memset(nd, 0, sizeof(*nd));
    nd->kind = (uint8_t)kind;
    nd->a = a;
    nd->b = b;
    int h = 0;
    if (kind != K_CONST && kind != K_PROP && kind != K_IN && a >= 0)
        h = f->nodes[a].height;
    if ((kind == K_AND || kind == K_OR || kind >= K_EQ) && kind != K_IN && b >= 0 &&
        f->nodes[b].height > h)
        h = f->nodes[b].height;
    if (kind == K_IN)
        h = 1;
    nd->height = h + 1;
    if (nd->height > p->lim->max_depth) {
        fail(p, RUNTIME_EXC "the expression is nested deeper than %d (filterExpressionMaxDepth)",
             p->lim->max_depth);
        return -1;
    }
    return f->n++;
}

static int
add_const(struct parser *p, struct val v, bool bool_const)
{
    int i = add_node(p, K_CONST, -1, -1);
    if (i >= 0) {
        p->f->nodes[i].v = v;
        p->f->nodes[i].bool_const = bool_const;
    }
    return i;
}

static bool
is_boolean(const struct sql92 *f, int i)
{
    const struct node *nd = &f->nodes[i];
    switch (nd->kind) {
    case K_CONST: return nd->bool_const;
    case K_PROP: case K_NEG: return false;
    default: return true;
    }
}

/* Java's toString() of an expression, for the messages (truncated). */
struct sbuf {
    char *p;
    size_t n, cap;
};

static void
sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->n + 1 >= b->cap)
        return;
    size_t room = b->cap - 1 - b->n;
    if (n > room)
        n = room;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void
sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* Double.toString, closely enough: the shortest digits that read back. */
static void
java_double(char *out, size_t cap, double d)
{
    if (isnan(d)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(out, cap, d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    double a = fabs(d);
    char tmp[64];
    if (a == 0 || (a >= 1e-3 && a < 1e7)) {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof(tmp), "%.*f", prec, d);
            if (strtod(tmp, NULL) == d)
                break;
        }
        /* trim trailing zeros but keep one digit after the point */
        size_t l = strlen(tmp);
        while (l > 2 && tmp[l - 1] == '0' && tmp[l - 2] != '.')
            tmp[--l] = 0;
        snprintf(out, cap, "%s", tmp);
        return;
    }
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    char *e = strchr(tmp, 'e');
    if (e == NULL) {
        snprintf(out, cap, "%s", tmp);
        return;
    }
    *e = 0;
    int exp = atoi(e + 1);
    snprintf(out, cap, "%s%sE%d", tmp, strchr(tmp, '.') ? "" : ".0", exp);
}

static void
to_string(const struct sql92 *f, int i, struct sbuf *b, int depth)
{
    if (depth > 16) {
        sb_str(b, "...");
        return;
    }
    const struct node *nd = &f->nodes[i];
    char num[96];
    static const char *const sym[] = {
        [K_AND] = "&&", [K_OR] = "||", [K_EQ] = "==", [K_GT] = ">", [K_GE] = ">=",
        [K_LT] = "<", [K_LE] = "<=",
    };
    switch (nd->kind) {
    case K_CONST:
        switch (nd->v.t) {
        case V_NULL: sb_str(b, "NULL"); break;
        case V_BOOL: sb_str(b, nd->v.b ? "TRUE" : "FALSE"); break;
        case V_INT: case V_LONG:
            snprintf(num, sizeof(num), "%lld", (long long)nd->v.i);
            sb_str(b, num);
            break;
        case V_DBL:
            java_double(num, sizeof(num), nd->v.d);
            sb_str(b, num);
            break;
        case V_STR:
            sb_str(b, "'");
            for (size_t k = 0; k < nd->v.n; k++) {
                if (nd->v.s[k] == '\'')
                    sb_str(b, "'");
                sb_add(b, nd->v.s + k, 1);
            }
            sb_str(b, "'");
            break;
        default: break;
        }
        break;
    case K_PROP:
        sb_add(b, nd->v.s, nd->v.n);
        break;
    case K_BCAST:
        to_string(f, nd->a, b, depth + 1);
        break;
    case K_NEG: case K_NOT:
        sb_str(b, nd->kind == K_NEG ? "(- " : "(NOT ");
        to_string(f, nd->a, b, depth + 1);
        sb_str(b, ")");
        break;
    case K_IN:
        /* nd->a indexes items; the property's node is in its first slot */
        to_string(f, (int)f->items[nd->a].n, b, depth + 1);
        sb_str(b, nd->in_not ? " NOT IN ( " : " IN ( ");
        for (int k = 0; k < nd->b; k++) {
            if (k)
                sb_str(b, ", ");
            sb_add(b, f->items[nd->a + 1 + k].s, f->items[nd->a + 1 + k].n);
        }
        sb_str(b, " )");
        break;
    default:
        sb_str(b, "(");
        to_string(f, nd->a, b, depth + 1);
        sb_str(b, " ");
        sb_str(b, sym[nd->kind]);
        sb_str(b, " ");
        to_string(f, nd->b, b, depth + 1);
        sb_str(b, ")");
        break;
    }
}

static const char *
describe(struct parser *p, int i, char *buf, size_t cap)
{
    struct sbuf b = { buf, 0, cap };
    buf[0] = 0;
    if (i >= 0)
        to_string(p->f, i, &b, 0);
    return buf;
}

static int
as_boolean(struct parser *p, int i)
{
    if (i < 0 || p->failed)
        return -1;
    if (is_boolean(p->f, i))
        return i;
    if (p->f->nodes[i].kind == K_PROP)
        return add_node(p, K_BCAST, i, -1);
    char d[256];
    fail(p, PARSE_EXC "Expression will not result in a boolean value: %s", describe(p, i, d, sizeof(d)));
    return -1;
}

static bool
check_less_than_operand(struct parser *p, int i)
{
    const struct node *nd = &p->f->nodes[i];
    bool bad = false;
    if (nd->kind == K_CONST)
        bad = !(nd->v.t == V_INT || nd->v.t == V_LONG || nd->v.t == V_DBL);
    else
        bad = is_boolean(p->f, i);
    if (bad) {
        char d[256];
        fail(p, RUNTIME_EXC "Value '%s' cannot be compared.", describe(p, i, d, sizeof(d)));
    }
    return !bad;
}

static int
create_cmp(struct parser *p, enum kind k, int l, int r)
{
    if (l < 0 || r < 0 || !check_less_than_operand(p, l) || !check_less_than_operand(p, r))
        return -1;
    return add_node(p, k, l, r);
}

static int
create_equal(struct parser *p, int l, int r)
{
    if (l < 0 || r < 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        const struct node *nd = &p->f->nodes[k ? r : l];
        if (nd->kind == K_CONST && nd->v.t == V_NULL) {
            fail(p, RUNTIME_EXC "'NULL' cannot be compared.");
            return -1;
        }
    }
    const struct node *ln = &p->f->nodes[l], *rn = &p->f->nodes[r];
    if (ln->kind == K_CONST && rn->kind == K_CONST && ln->bool_const && !rn->bool_const) {
        char d1[128], d2[128];
        fail(p, RUNTIME_EXC "'%s' cannot be compared with '%s'", describe(p, l, d1, sizeof(d1)),
             describe(p, r, d2, sizeof(d2)));
        return -1;
    }
    return add_node(p, K_EQ, l, r);
}

static int jcompare(const struct val *lv, const struct val *rv, int *out);

static int
create_between(struct parser *p, int v, int lo, int hi, bool not)
{
    if (v < 0 || lo < 0 || hi < 0)
        return -1;
    if (!not) {
        const struct node *ln = &p->f->nodes[lo], *hn = &p->f->nodes[hi];
        if (ln->kind == K_CONST && hn->kind == K_CONST) {
            if (ln->v.t == V_NULL || hn->v.t == V_NULL) {
                fail(p, RUNTIME_EXC "Illegal values of between, values can not be null!");
                return -1;
            }
            int c;
            if (jcompare(&hn->v, &ln->v, &c) != 0) {
                fail(p, RUNTIME_EXC "java.lang.NumberFormatException: a bound of between is not a number");
                return -1;
            }
            if (c < 0) {
                char d1[128], d2[128];
                fail(p, RUNTIME_EXC "Illegal values of between, left value(%s) must less than or equal to right value(%s)",
                     describe(p, lo, d1, sizeof(d1)), describe(p, hi, d2, sizeof(d2)));
                return -1;
            }
        }
        int ge = create_cmp(p, K_GE, v, lo);
        int le = create_cmp(p, K_LE, v, hi);
        return ge < 0 || le < 0 ? -1 : add_node(p, K_AND, ge, le);
    }
    int lt = create_cmp(p, K_LT, v, lo);
    int gt = create_cmp(p, K_GT, v, hi);
    return lt < 0 || gt < 0 ? -1 : add_node(p, K_OR, lt, gt);
}

/* A STRING_LITERAL's value ('' -> '), into the pool. */
static bool
decode_string(struct parser *p, const struct token *t, const char **s, size_t *n)
{
    char *out = p->f->pool + p->f->pool_len;
    size_t k = 0;
    for (size_t i = t->pos + 1; i + 1 < t->pos + t->len; i++) {
        char c = p->s[i];
        if (c == '\'')
            i++;
        out[k++] = c;
    }
    p->f->pool_len += k;
    *s = out;
    *n = k;
    return true;
}

static bool
add_item(struct parser *p, const char *s, size_t n)
{
    struct sql92 *f = p->f;
    if (f->n + f->nitems >= p->lim->max_nodes) {
        fail(p, RUNTIME_EXC "the expression has more than %d terms (filterExpressionMaxNodes)",
             p->lim->max_nodes);
        return false;
    }
    if (f->nitems == f->icap) {
        int cap = f->icap ? f->icap * 2 : 8;
        struct item *ni = realloc(f->items, sizeof(*ni) * (size_t)cap);
        if (ni == NULL) {
            fail(p, RUNTIME_EXC "out of memory");
            return false;
        }
        f->items = ni;
        f->icap = cap;
    }
    f->items[f->nitems++] = (struct item){ s, n };
    return true;
}

/* }}} */

/* {{{ Productions */

static int or_expr(struct parser *p);

static bool
enter(struct parser *p)
{
    if (++p->depth > p->lim->max_depth) {
        fail(p, RUNTIME_EXC "the expression is nested deeper than %d (filterExpressionMaxDepth)",
             p->lim->max_depth);
        return false;
    }
    return true;
}

static int
literal_or_primary(struct parser *p)
{
    const struct token *k = peek(p, 0);
    struct token t = *k;
    struct val v;
    memset(&v, 0, sizeof(v));
    switch (t.t) {
    case T_STR: {
        (void)next(p);
        v.t = V_STR;
        (void)decode_string(p, &t, &v.s, &v.n);
        return add_const(p, v, false);
    }
    case T_DEC: {
        (void)next(p);
        size_t l = t.len;
        const char *s = p->s + t.pos;
        if (s[l - 1] == 'l' || s[l - 1] == 'L')
            l--;
        int64_t x = 0;
        for (size_t i = 0; i < l; i++) {
            int dg = s[i] - '0';
            if (x > (INT64_MAX - dg) / 10) {
                fail(p, NUMBER_EXC "For input string: \"%.*s\"", (int)l, s);
                return -1;
            }
            x = x * 10 + dg;
        }
        v.t = x <= INT32_MAX ? V_INT : V_LONG;
        v.i = x;
        return add_const(p, v, false);
    }
    case T_FLT: {
        (void)next(p);
        char buf[128];
        if (t.len >= sizeof(buf)) {
            fail(p, NUMBER_EXC "For input string: \"%.*s...\"", 32, p->s + t.pos);
            return -1;
        }
        memcpy(buf, p->s + t.pos, t.len);
        buf[t.len] = 0;
        double d = strtod(buf, NULL);
        if (d > 1.7976931348623157e308) {
            fail(p, RUNTIME_EXC "%s is greater than 1.7976931348623157E308", buf);
            return -1;
        }
        if (d < 4.9e-324) {
            fail(p, RUNTIME_EXC "%s is less than 4.9E-324", buf);
            return -1;
        }
        v.t = V_DBL;
        v.d = d;
        return add_const(p, v, false);
    }
    case T_TRUE: case T_FALSE:
        (void)next(p);
        v.t = V_BOOL;
        v.b = t.t == T_TRUE;
        return add_const(p, v, true);
    case T_NULL:
        (void)next(p);
        v.t = V_NULL;
        return add_const(p, v, true);
    case T_ID: {
        (void)next(p);
        int i = add_node(p, K_PROP, -1, -1);
        if (i >= 0) {
            char *out = p->f->pool + p->f->pool_len;
            memcpy(out, p->s + t.pos, t.len);
            p->f->pool_len += t.len;
            p->f->nodes[i].v.s = out;
            p->f->nodes[i].v.n = t.len;
        }
        return i;
    }
    case T_LP: {
        (void)next(p);
        int e = or_expr(p);
        if (e < 0 || !expect(p, T_RP))
            return -1;
        return e;
    }
    default:
        unexpected(p, k);
        return -1;
    }
}

static int
unary_expr(struct parser *p)
{
    if (!enter(p))
        return -1;
    int r;
    const struct token *k = peek(p, 0);
    if (k->t == T_PLUS) {
        (void)next(p);
        r = unary_expr(p);
    } else if (k->t == T_MINUS) {
        (void)next(p);
        r = unary_expr(p);
        r = r < 0 ? -1 : add_node(p, K_NEG, r, -1);
    } else if (k->t == T_NOT) {
        (void)next(p);
        r = as_boolean(p, unary_expr(p));
        r = r < 0 ? -1 : add_node(p, K_NOT, r, -1);
    } else {
        r = literal_or_primary(p);
    }
    p->depth--;
    return p->failed ? -1 : r;
}

static int
in_list(struct parser *p, int left, bool not)
{
    if (!expect(p, T_LP))
        return -1;
    int first = p->f->nitems;
    /* items[first] is a slot for the list's own bookkeeping */
    if (!add_item(p, NULL, 0))
        return -1;
    int count = 0;
    for (;;) {
        const struct token *k = peek(p, 0);
        if (k->t != T_STR) {
            unexpected(p, k);
            return -1;
        }
        struct token t = next(p);
        const char *s;
        size_t n;
        (void)decode_string(p, &t, &s, &n);
        if (!add_item(p, s, n))
            return -1;
        count++;
        if (peek(p, 0)->t == T_COMMA) {
            (void)next(p);
            continue;
        }
        if (!expect(p, T_RP))
            return -1;
        break;
    }
    if (p->f->nodes[left].kind != K_PROP) {
        char d[256];
        fail(p, RUNTIME_EXC "Expected a property for In expression, got: %s", describe(p, left, d, sizeof(d)));
        return -1;
    }
    int i = add_node(p, K_IN, first, count);
    if (i >= 0) {
        p->f->nodes[i].in_not = not;
        /* the property: kept in the bookkeeping slot */
        p->f->items[first].n = (size_t)left;
    }
    return i;
}

static int
comparison_expr(struct parser *p)
{
    int l = unary_expr(p);
    while (l >= 0 && !p->failed) {
        enum tok t = peek(p, 0)->t;
        if (t == T_GT || t == T_GE || t == T_LT || t == T_LE) {
            (void)next(p);
            int r = unary_expr(p);
            enum kind k = t == T_GT ? K_GT : t == T_GE ? K_GE : t == T_LT ? K_LT : K_LE;
            l = r < 0 ? -1 : create_cmp(p, k, l, r);
        } else if (t == T_BETWEEN || (t == T_NOT && peek(p, 1)->t == T_BETWEEN)) {
            bool not = t == T_NOT;
            (void)next(p);
            if (not)
                (void)next(p);
            int lo = unary_expr(p);
            if (lo < 0 || !expect(p, T_AND))
                return -1;
            int hi = unary_expr(p);
            l = hi < 0 ? -1 : create_between(p, l, lo, hi, not);
        } else if (t == T_IN || (t == T_NOT && peek(p, 1)->t == T_IN)) {
            bool not = t == T_NOT;
            (void)next(p);
            if (not)
                (void)next(p);
            l = in_list(p, l, not);
        } else if (t == T_NOT) {
            unexpected(p, peek(p, 1));
            return -1;
        } else {
            break;
        }
    }
    return p->failed ? -1 : l;
}

static int
equality_expr(struct parser *p)
{
    int l = comparison_expr(p);
    while (l >= 0 && !p->failed) {
        enum tok t = peek(p, 0)->t;
        if (t == T_EQ || t == T_NE) {
            (void)next(p);
            int r = comparison_expr(p);
            l = create_equal(p, l, r);
            if (t == T_NE && l >= 0)
                l = add_node(p, K_NOT, l, -1);
        } else if (t == T_IS) {
            (void)next(p);
            bool not = false;
            if (peek(p, 0)->t == T_NOT) {
                (void)next(p);
                not = true;
            }
            if (!expect(p, T_NULL))
                return -1;
            struct val v;
            memset(&v, 0, sizeof(v));
            int nul = add_const(p, v, true);
            l = nul < 0 ? -1 : add_node(p, K_EQ, l, nul);
            if (not && l >= 0)
                l = add_node(p, K_NOT, l, -1);
        } else {
            break;
        }
    }
    return p->failed ? -1 : l;
}

static int
and_expr(struct parser *p)
{
    int l = equality_expr(p);
    while (l >= 0 && !p->failed && peek(p, 0)->t == T_AND) {
        (void)next(p);
        int r = equality_expr(p);
        int a = as_boolean(p, l);
        int b = as_boolean(p, r);
        l = a < 0 || b < 0 ? -1 : add_node(p, K_AND, a, b);
    }
    return p->failed ? -1 : l;
}

static int
or_expr(struct parser *p)
{
    if (!enter(p))
        return -1;
    int l = and_expr(p);
    while (l >= 0 && !p->failed && peek(p, 0)->t == T_OR) {
        (void)next(p);
        int r = and_expr(p);
        int a = as_boolean(p, l);
        int b = as_boolean(p, r);
        l = a < 0 || b < 0 ? -1 : add_node(p, K_OR, a, b);
    }
    p->depth--;
    return p->failed ? -1 : l;
}

/* }}} */

void
sql92_free(struct sql92 *f)
{
    if (f == NULL)
        return;
    free(f->nodes);
    free(f->items);
    free(f->pool);
    free(f);
}

struct sql92 *
sql92_compile(const char *text, size_t len, const struct sql92_limits *lim, char *err,
              size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    err[0] = 0;
    if (len > lim->max_len) {
        snprintf(err, errlen, RUNTIME_EXC "the expression is longer than %zu bytes (filterExpressionMaxLength)",
                 lim->max_len);
        return NULL;
    }
    struct sql92 *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->pool = malloc(len + 1)) == NULL) {
        sql92_free(f);
        snprintf(err, errlen, RUNTIME_EXC "out of memory");
        return NULL;
    }
    struct parser p = { .s = text, .len = len, .f = f, .lim = lim, .err = err, .errlen = errlen };
    int root = or_expr(&p);
    if (root >= 0 && !p.failed)
        root = as_boolean(&p, root);
    if (root < 0 || p.failed) {
        if (!p.failed)
            snprintf(err, errlen, PARSE_EXC "invalid expression");
        /* one line: control bytes of the text (a string literal's
         * newline) are not copied into a reply or a log line */
        for (char *c = err; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = ' ';
        sql92_free(f);
        return NULL;
    }
    f->root = root;
    return f;
}

int
sql92_nodes(const struct sql92 *f)
{
    return f->n + f->nitems;
}

/* {{{ Evaluation */

/* Integer.valueOf / Long.valueOf: [+-]digits within range. */
static bool
java_parse_long(const char *s, size_t n, int64_t min, int64_t max, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i >= n)
        return false;
    /* accumulate negatively: the minimum has no positive counterpart */
    int64_t x = 0;
    for (; i < n; i++) {
        if (!is_digit((unsigned char)s[i]))
            return false;
        int dg = s[i] - '0';
        if (x < (INT64_MIN + dg) / 10)
            return false;
        x = x * 10 - dg;
    }
    if (!neg) {
        if (x == INT64_MIN)
            return false;
        x = -x;
    }
    if (x < min || x > max)
        return false;
    *out = x;
    return true;
}

/* Double.valueOf's decimal forms (hexadecimal ones are not read). */
static bool
java_parse_double(const char *s, size_t n, double *out)
{
    while (n > 0 && (unsigned char)s[0] <= ' ') {
        s++;
        n--;
    }
    while (n > 0 && (unsigned char)s[n - 1] <= ' ')
        n--;
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    if (n - i == 3 && memcmp(s + i, "NaN", 3) == 0) {
        *out = NAN;
        return true;
    }
    if (n - i == 8 && memcmp(s + i, "Infinity", 8) == 0) {
        *out = neg ? -INFINITY : INFINITY;
        return true;
    }
    size_t start = i, digits = 0;
    while (i < n && is_digit((unsigned char)s[i])) {
        i++;
        digits++;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit((unsigned char)s[i])) {
            i++;
            digits++;
        }
    }
    if (digits == 0)
        return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e = 0;
        while (i < n && is_digit((unsigned char)s[i])) {
            i++;
            e++;
        }
        if (e == 0)
            return false;
    }
    size_t end = i;
    if (i < n && (s[i] == 'f' || s[i] == 'F' || s[i] == 'd' || s[i] == 'D'))
        i++;
    if (i != n)
        return false;
    char buf[128];
    char *b = buf;
    size_t l = end - start;
    if (l + 2 > sizeof(buf) && (b = malloc(l + 2)) == NULL)
        return false;
    memcpy(b, s + start, l);
    b[l] = 0;
    double d = strtod(b, NULL);
    if (b != buf)
        free(b);
    *out = neg ? -d : d;
    return true;
}

static int
cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Double.compare: NaN above everything, -0.0 below 0.0. */
static int
cmp_dbl(double a, double b)
{
    if (a < b)
        return -1;
    if (a > b)
        return 1;
    int64_t x, y;
    if (isnan(a))
        a = NAN;
    if (isnan(b))
        b = NAN;
    memcpy(&x, &a, sizeof(x));
    memcpy(&y, &b, sizeof(y));
    return x == y ? 0 : (x < y ? -1 : 1);
}

static int
cmp_str(const struct val *a, const struct val *b)
{
    size_t n = a->n < b->n ? a->n : b->n;
    int c = n ? memcmp(a->s, b->s, n) : 0;
    if (c != 0)
        return c < 0 ? -1 : 1;
    return cmp_i64((int64_t)a->n, (int64_t)b->n);
}

static bool
java_bool(const struct val *s)
{
    return s->n == 4 && (s->s[0] | 0x20) == 't' && (s->s[1] | 0x20) == 'r' &&
           (s->s[2] | 0x20) == 'u' && (s->s[3] | 0x20) == 'e';
}

/*
 * ComparisonExpression.__compare with convertStringExpressions (the
 * parser sets it): *out is lv.compareTo(rv) after Java's conversions.
 * Returns -1 where Java throws (a string that is not a number, the
 * ClassCastException of Boolean against String).
 */
static int
jcompare(const struct val *lv, const struct val *rv, int *out)
{
    uint8_t lc = lv->t, rc = rv->t;
    if (lc == rc) {
        switch (lc) {
        case V_BOOL: *out = cmp_i64(lv->b, rv->b); return 0;
        case V_INT: case V_LONG: *out = cmp_i64(lv->i, rv->i); return 0;
        case V_DBL: *out = cmp_dbl(lv->d, rv->d); return 0;
        case V_STR: *out = cmp_str(lv, rv); return 0;
        default: *out = -1; return 0;
        }
    }
    int64_t x;
    double d;
    switch (lc) {
    case V_BOOL:
        if (rc == V_STR)
            return -1;      /* Boolean.valueOf((String) lv): ClassCastException */
        *out = -1;
        return 0;
    case V_INT: case V_LONG:
        if (rc == V_INT || rc == V_LONG) {
            *out = cmp_i64(lv->i, rv->i);
        } else if (rc == V_DBL) {
            *out = cmp_dbl((double)lv->i, rv->d);
        } else if (rc == V_STR) {
            if (!java_parse_long(rv->s, rv->n, lc == V_INT ? INT32_MIN : INT64_MIN,
                                 lc == V_INT ? INT32_MAX : INT64_MAX, &x))
                return -1;
            *out = cmp_i64(lv->i, x);
        } else {
            *out = -1;
        }
        return 0;
    case V_DBL:
        if (rc == V_INT || rc == V_LONG) {
            *out = cmp_dbl(lv->d, (double)rv->i);
        } else if (rc == V_STR) {
            if (!java_parse_double(rv->s, rv->n, &d))
                return -1;
            *out = cmp_dbl(lv->d, d);
        } else {
            *out = -1;
        }
        return 0;
    case V_STR:
        switch (rc) {
        case V_BOOL: *out = cmp_i64(java_bool(lv), rv->b); return 0;
        case V_INT: case V_LONG:
            if (!java_parse_long(lv->s, lv->n, rc == V_INT ? INT32_MIN : INT64_MIN,
                                 rc == V_INT ? INT32_MAX : INT64_MAX, &x))
                return -1;
            *out = cmp_i64(x, rv->i);
            return 0;
        case V_DBL:
            if (!java_parse_double(lv->s, lv->n, &d))
                return -1;
            *out = cmp_dbl(d, rv->d);
            return 0;
        default: *out = -1; return 0;
        }
    default:
        *out = -1;
        return 0;
    }
}

struct ectx {
    const struct sql92 *f;
    sql92_get_fn get;
    void *ud;
};

static struct val
mk(uint8_t t)
{
    struct val v;
    memset(&v, 0, sizeof(v));
    v.t = t;
    return v;
}

static struct val
mk_bool(bool b)
{
    struct val v = mk(V_BOOL);
    v.b = b;
    return v;
}

static struct val
eval(const struct ectx *c, int i)
{
    const struct node *nd = &c->f->nodes[i];
    struct val l, r;
    int cmp;
    switch (nd->kind) {
    case K_CONST:
        return nd->v;
    case K_PROP: {
        const char *v;
        size_t n;
        if (!c->get(c->ud, nd->v.s, nd->v.n, &v, &n))
            return mk(V_NULL);
        l = mk(V_STR);
        l.s = v;
        l.n = n;
        return l;
    }
    case K_NEG:
        l = eval(c, nd->a);
        switch (l.t) {
        case V_ERR: return l;
        case V_INT: l.i = (int64_t)(int32_t)(0u - (uint32_t)l.i); return l;
        case V_LONG: l.i = (int64_t)(0ull - (uint64_t)l.i); return l;
        case V_DBL: l.d = -l.d; return l;
        default: return mk(V_NULL);
        }
    case K_NOT:
        l = eval(c, nd->a);
        if (l.t == V_BOOL)
            l.b = !l.b;
        else if (l.t != V_ERR)
            l = mk(V_NULL);
        return l;
    case K_BCAST:
        l = eval(c, nd->a);
        if (l.t == V_ERR || l.t == V_NULL || l.t == V_BOOL)
            return l;
        return mk_bool(false);
    case K_AND: case K_OR: {
        bool stop = nd->kind == K_OR;   /* the value that decides alone */
        l = eval(c, nd->a);
        if (l.t == V_ERR)
            return l;
        if (l.t == V_BOOL && l.b == stop)
            return mk_bool(stop);
        r = eval(c, nd->b);
        if (r.t == V_ERR)
            return r;
        if (r.t == V_BOOL && r.b == stop)
            return mk_bool(stop);
        if (l.t != V_BOOL || r.t != V_BOOL)
            return mk(V_NULL);
        return mk_bool(!stop);
    }
    case K_EQ:
        l = eval(c, nd->a);
        if (l.t == V_ERR)
            return l;
        r = eval(c, nd->b);
        if (r.t == V_ERR)
            return r;
        if ((l.t == V_NULL) != (r.t == V_NULL))
            return l.t == V_NULL ? mk(V_NULL) : mk_bool(false);
        if (l.t == V_NULL)
            return mk_bool(true);
        if (jcompare(&l, &r, &cmp) != 0)
            return mk(V_ERR);
        return mk_bool(cmp == 0);
    case K_GT: case K_GE: case K_LT: case K_LE:
        l = eval(c, nd->a);
        if (l.t == V_ERR || l.t == V_NULL)
            return l;
        r = eval(c, nd->b);
        if (r.t == V_ERR || r.t == V_NULL)
            return r;
        if (l.t == V_STR && r.t == V_STR) {
            double x, y;
            if (!java_parse_double(l.s, l.n, &x) || !java_parse_double(r.s, r.n, &y))
                return mk(V_ERR);
            cmp = cmp_dbl(x, y);
        } else if (jcompare(&l, &r, &cmp) != 0) {
            return mk(V_ERR);
        }
        switch (nd->kind) {
        case K_GT: return mk_bool(cmp > 0);
        case K_GE: return mk_bool(cmp >= 0);
        case K_LT: return mk_bool(cmp < 0);
        default: return mk_bool(cmp <= 0);
        }
    case K_IN: {
        const struct item *it = &c->f->items[nd->a];
        l = eval(c, (int)it->n);
        if (l.t != V_STR)
            return l.t == V_ERR ? l : mk(V_NULL);
        bool found = false;
        for (int k = 1; k <= nd->b && !found; k++)
            found = it[k].n == l.n && (l.n == 0 || memcmp(it[k].s, l.s, l.n) == 0);
        return mk_bool(found != nd->in_not);
    }
    default:
        return mk(V_ERR);
    }
}

enum sql92_result
sql92_eval(const struct sql92 *f, sql92_get_fn get, void *ud)
{
    struct ectx c = { f, get, ud };
    struct val v = eval(&c, f->root);
    switch (v.t) {
    case V_BOOL: return v.b ? SQL92_TRUE : SQL92_FALSE;
    case V_ERR: return SQL92_ERROR;
    default: return SQL92_NULL;
    }
}

bool
sql92_match(const struct sql92 *f, sql92_get_fn get, void *ud)
{
    return sql92_eval(f, get, ud) == SQL92_TRUE;
}

struct props_ud {
    const char *p;
    size_t n;
};

static bool
props_get(void *ud, const char *name, size_t nlen, const char **v, size_t *vlen)
{
    const struct props_ud *u = ud;
    *v = props_findn(u->p, u->n, name, nlen, vlen);
    return *v != NULL;
}

enum sql92_result
sql92_eval_props(const struct sql92 *f, const char *props, size_t n)
{
    struct props_ud u = { props, n };
    return sql92_eval(f, props_get, &u);
}

bool
sql92_match_props(const struct sql92 *f, const char *props, size_t n)
{
    return sql92_eval_props(f, props, n) == SQL92_TRUE;
}

/* }}} */
