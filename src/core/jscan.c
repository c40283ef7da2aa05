/* jscan: see jscan.h. */
#include "core/jscan.h"

#define NO16 -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1
const int8_t jscan_hex[256] = {
    NO16, NO16, NO16,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1, -1, -1, -1, -1,           /* 0x30 */
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, /* 0x40 */
    NO16,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, /* 0x60 */
    NO16, NO16, NO16, NO16, NO16, NO16, NO16, NO16, NO16,
};
#undef NO16

const uint8_t jscan_short_esc[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* Four hex digits already checked by jscan_string(). */
static inline uint32_t
hex4(const uint8_t *p)
{
    return (uint32_t)jscan_hex4(p);
}

size_t
jscan_unescape(const uint8_t *s, size_t n, uint8_t *out)
{
    /* Every escape is at least as long as what it decodes to (\uXXXX is
     * 6 bytes for at most 3; a surrogate pair 12 for 4). */
    const uint8_t *e = s + n;
    uint8_t *w = out;
    while (s < e) {
        const uint8_t *bs = memchr(s, '\\', (size_t)(e - s));
        if (bs == NULL)
            bs = e;
        memcpy(w, s, (size_t)(bs - s));
        w += bs - s;
        if (bs == e)
            break;
        uint8_t c = bs[1];
        s = bs + 2;
        switch (c) {
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            uint32_t cp = hex4(s);
            s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && e - s >= 6 && s[0] == '\\' &&
                s[1] == 'u') {
                uint32_t lo = hex4(s + 2);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            w += jscan_utf8_put(w, cp);
            break;
        }
        default:  /* '"', '\\', '/' */
            *w++ = c;
            break;
        }
    }
    return (size_t)(w - out);
}

static const uint8_t *
digits(const uint8_t *p, const uint8_t *e)
{
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    return p;
}

const char *
jscan_number(const uint8_t **pp, const uint8_t *end, bool *is_int)
{
    const uint8_t *p = *pp;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        p = digits(p, end);
    } else {
        *pp = p;
        return "bad number";
    }
    *is_int = true;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') {
            *pp = p;
            return "bad number fraction";
        }
        p = digits(p, end);
        *is_int = false;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9') {
            *pp = p;
            return "bad number exponent";
        }
        p = digits(p, end);
        *is_int = false;
    }
    *pp = p;
    return NULL;
}

const char *
jscan_literal(const uint8_t **pp, const uint8_t *end, const char *lit, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, lit, n) != 0)
        return "bad literal";
    *pp += n;
    return NULL;
}

const char *
jscan_skip(const uint8_t **pp, const uint8_t *end, int depth, int max_depth)
{
    int c = jscan_peek(*pp, end);
    const uint8_t *raw;
    size_t n;
    bool flag;
    const char *why;
    switch (c) {
    case '"':
        return jscan_string(pp, end, &raw, &n, &flag);
    case 't':
        return jscan_literal(pp, end, "true", 4);
    case 'f':
        return jscan_literal(pp, end, "false", 5);
    case 'n':
        return jscan_literal(pp, end, "null", 4);
    case '{':
    case '[': {
        if (depth + 1 > max_depth)
            return "nesting too deep";
        int close = c == '{' ? '}' : ']';
        *pp = jscan_ws(*pp + 1, end);
        if (jscan_peek(*pp, end) == close) {
            (*pp)++;
            return NULL;
        }
        for (;;) {
            if (c == '{') {
                if (jscan_peek(*pp, end) != '"')
                    return "expected a key";
                if ((why = jscan_string(pp, end, &raw, &n, &flag)) != NULL)
                    return why;
                *pp = jscan_ws(*pp, end);
                if (jscan_peek(*pp, end) != ':')
                    return "expected ':'";
                *pp = jscan_ws(*pp + 1, end);
            }
            if ((why = jscan_skip(pp, end, depth + 1, max_depth)) != NULL)
                return why;
            *pp = jscan_ws(*pp, end);
            int d = jscan_peek(*pp, end);
            if (d != ',' && d != close)
                return c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            (*pp)++;
            if (d == close)
                return NULL;
            *pp = jscan_ws(*pp, end);
        }
    }
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return jscan_number(pp, end, &flag);
        if (c < 0)
            return "unexpected end";
        return "expected a value";
    }
}
