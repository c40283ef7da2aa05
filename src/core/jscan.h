/*
 * jscan: the JSON lexing every body and header reader shares (the
 * RemotingCommand JSON header in net/codec_json.c, HeartbeatData in
 * proto/heartbeat.c): strings found eight bytes at a time with their
 * escapes checked (so unescaping can trust them), numbers checked against
 * the grammar, literals, and walking over any value with a nesting limit.
 * For the strings that matter most there is also a one-pass copy,
 * jscan_string_copy(): 16 bytes a step, escapes decoded on the way.
 *
 * The functions work on a cursor (*pp) and an end, so that each reader
 * keeps its own state and error format: on failure they return a short
 * reason ("unterminated string") and leave *pp at the offending byte; on
 * success they return NULL with *pp past what they read.
 *
 * MT: pure functions.
 */
#ifndef RMQ_JSCAN_H
#define RMQ_JSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/** The byte at p, or -1 at the end. */
static inline int
jscan_peek(const uint8_t *p, const uint8_t *end)
{
    return p < end ? *p : -1;
}

/** Skips JSON whitespace. */
static inline const uint8_t *
jscan_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static inline int
jscan_hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Eight bytes at a time: strings are most of a header or body, and most of
 * their bytes need no attention.  Classic SWAR "has a zero byte" tests; on
 * little-endian the lowest flagged bit is exactly the first such byte (the
 * borrows only run upwards). */
#define JSCAN_ONES 0x0101010101010101ull
#define JSCAN_HIGHS 0x8080808080808080ull

static inline uint64_t
jscan_load8(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t
jscan_has_zero(uint64_t v)
{
    return (v - JSCAN_ONES) & ~v & JSCAN_HIGHS;
}

/** Flags the bytes of v that are '"' or '\\'. */
static inline uint64_t
jscan_special(uint64_t v)
{
    return jscan_has_zero(v ^ (JSCAN_ONES * '"')) | jscan_has_zero(v ^ (JSCAN_ONES * '\\'));
}

/* The first byte in [p, e) that is '"' or '\\', or e. */
static inline const uint8_t *
jscan_find_special(const uint8_t *p, const uint8_t *e)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; e - p >= 8; p += 8) {
        uint64_t m = jscan_special(jscan_load8(p));
        if (m != 0)
            return p + (__builtin_ctzll(m) >> 3);
    }
#endif
    while (p < e && *p != '"' && *p != '\\')
        p++;
    return p;
}

/**
 * The string whose opening quote is at *pp: finds its end and checks its
 * escapes.  (*raw, *n) is the text between the quotes; *esc tells whether
 * it has any backslash (then jscan_unescape() decodes it).
 * Inline: a header has dozens of strings.
 */
static inline const char *
jscan_string(const uint8_t **pp, const uint8_t *end, const uint8_t **raw,
             size_t *n, bool *esc)
{
    const uint8_t *start = *pp + 1;
    const uint8_t *p = start;
    bool has_esc = false;
    for (;;) {
        p = jscan_find_special(p, end);
        if (p >= end) {
            *pp = p;
            return "unterminated string";
        }
        if (*p == '"')
            break;
        has_esc = true;
        if (end - p < 2) {
            *pp = end;
            return "unterminated string";
        }
        switch (p[1]) {
        case '"': case '\\': case '/':
        case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            break;
        case 'u':
            if (end - p < 6 || jscan_hexval(p[2]) < 0 || jscan_hexval(p[3]) < 0 ||
                jscan_hexval(p[4]) < 0 || jscan_hexval(p[5]) < 0) {
                *pp = p;
                return "bad \\u escape";
            }
            p += 6;
            break;
        default:
            *pp = p;
            return "bad escape";
        }
    }
    *raw = start;
    *n = (size_t)(p - start);
    *esc = has_esc;
    *pp = p + 1;
    return NULL;
}

/* {{{ Strings unescaped as they are scanned */

/* Hex digit values, -1 for every other byte. */
extern const int8_t jscan_hex[256];

/* What a short escape's letter stands for ('"' for '"', '\n' for 'n', ...),
 * 0 for letters that are not a short escape ('u' included). */
extern const uint8_t jscan_short_esc[256];

/** Writes code point cp (below 0x110000) as UTF-8 at w; returns its length. */
static inline size_t
jscan_utf8_put(uint8_t *w, uint32_t cp)
{
    if (cp < 0x80) {
        w[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        w[0] = (uint8_t)(0xC0 | cp >> 6);
        w[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        w[0] = (uint8_t)(0xE0 | cp >> 12);
        w[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        w[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    w[0] = (uint8_t)(0xF0 | cp >> 18);
    w[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    w[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    w[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* The four hex digits at p as a number, or -1 when one is not a digit. */
static inline int32_t
jscan_hex4(const uint8_t *p)
{
    int32_t a = jscan_hex[p[0]], b = jscan_hex[p[1]];
    int32_t c = jscan_hex[p[2]], d = jscan_hex[p[3]];
    if ((a | b | c | d) < 0)
        return -1;
    return a << 12 | b << 8 | c << 4 | d;
}

/*
 * Copies the 16 bytes at p to w and returns where the first '"' or '\\'
 * is among them (0..15), or 16.  One load serves the store and the
 * search: with two, the compiler must reload p after the store to w.
 */
static inline unsigned
jscan_copy16(uint8_t *w, const uint8_t *p)
{
#if defined(__SSE2__)
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    _mm_storeu_si128((__m128i *)(void *)w, v);
    __m128i m = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
    return (unsigned)__builtin_ctz((unsigned)_mm_movemask_epi8(m) | 0x10000u);
#else
    uint64_t a = jscan_load8(p), b = jscan_load8(p + 8);
    memcpy(w, &a, 8);
    memcpy(w + 8, &b, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t m = jscan_special(a);
    if (m != 0)
        return (unsigned)__builtin_ctzll(m) >> 3;
    m = jscan_special(b);
    if (m != 0)
        return 8 + ((unsigned)__builtin_ctzll(m) >> 3);
    return 16;
#else
    unsigned i = 0;
    while (i < 16 && w[i] != '"' && w[i] != '\\')
        i++;
    return i;
#endif
#endif
}

/**
 * The string whose opening quote is at *pp, checked and unescaped into out
 * in one pass: the path for what clients really send.  Reads stay below
 * lim (at most the end of the text) and, as decoded text is never longer
 * than its source, writes stay below out + (lim - *pp - 1): a caller with
 * less room at out passes a nearer lim.  Bytes of out past the decoded
 * string may be overwritten within that bound.  Returns the decoded length,
 * with out[length] = NUL and *pp past the closing quote; or -1 with *pp
 * unchanged when the string is not one this path takes: malformed, holding
 * a lone surrogate, or not ending before lim.  jscan_string() and
 * jscan_unescape(), which write the same bytes for a good string, then
 * tell what is wrong or take the rest.
 */
static inline __attribute__((always_inline)) ptrdiff_t
jscan_string_copy(const uint8_t **pp, const uint8_t *lim, uint8_t *out)
{
    const uint8_t *p = *pp + 1;
    uint8_t *w = out;
    for (;;) {
        if (lim - p >= 16) {
            /* Copy a whole run, then keep only the bytes before the first
             * quote or backslash. */
            unsigned k = jscan_copy16(w, p);
            p += k;
            w += k;
            if (k == 16)
                continue;
        } else {
            while (p < lim && *p != '"' && *p != '\\')
                *w++ = *p++;
            if (p >= lim)
                return -1;
        }
        if (*p == '"')
            break;
        if (lim - p >= 6 && memcmp(p, "\\u00", 4) == 0) {
            /* \u00XX: how fastjson writes the \1 and \2 separating
             * message properties, so worth its own two lookups. */
            int32_t hi = jscan_hex[p[4]], lo = jscan_hex[p[5]];
            if ((hi | lo) < 0)
                return -1;
            p += 6;
            if (hi == 0) {
                *w++ = (uint8_t)lo;   /* \u000X: one byte, no UTF-8 steps */
                continue;
            }
            w += jscan_utf8_put(w, (uint32_t)(hi << 4 | lo));
            continue;
        }
        if (lim - p < 2)
            return -1;
        if (p[1] != 'u') {
            uint8_t c = jscan_short_esc[p[1]];
            if (c == 0)
                return -1;
            *w++ = c;
            p += 2;
            continue;
        }
        int32_t cp;
        if (lim - p < 6 || (cp = jscan_hex4(p + 2)) < 0)
            return -1;
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            /* Only a well-formed pair here; jscan_unescape() spells out
             * what a lone half becomes. */
            int32_t lo;
            if (cp > 0xDBFF || lim - p < 6 || p[0] != '\\' || p[1] != 'u' ||
                (lo = jscan_hex4(p + 2)) < 0xDC00 || lo > 0xDFFF)
                return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        w += jscan_utf8_put(w, (uint32_t)cp);
    }
    *w = '\0';
    *pp = p + 1;
    return w - out;
}

/*
 * Whether the 8 bytes at p start `"k":"` with a one-letter key k (the
 * shape of every SendMessageRequestHeaderV2 entry): one masked compare
 * for the four fixed bytes.
 */
static inline __attribute__((always_inline)) bool
jscan_one_letter_key(const uint8_t *p)
{
    static const uint8_t shape[8] = {'"', 0, '"', ':', '"', 0, 0, 0};
    static const uint8_t mask[8] = {0xFF, 0, 0xFF, 0xFF, 0xFF, 0, 0, 0};
    uint64_t v, s, m;
    memcpy(&v, p, 8);
    memcpy(&s, shape, 8);
    memcpy(&m, mask, 8);
    return (v & m) == s && p[1] != '"' && p[1] != '\\';
}

/* jscan_entry_plain()'s value: the string at p (its opening quote) to
 * val, then the ',' or '}' it returns. */
static inline __attribute__((always_inline)) const uint8_t *
jscan_entry_value(const uint8_t *p, const uint8_t *end, uint8_t *val, uint32_t *vn)
{
    ptrdiff_t n = jscan_string_copy(&p, end, val);
    if (n < 0 || p >= end || (*p != ',' && *p != '}'))
        return NULL;
    *vn = (uint32_t)n;
    return p;
}

/*
 * The object entry at p when it is spelled plainly, `"key":"value"`
 * followed at once by ',' or '}' (what clients write into a header's
 * extFields): the key and the value, unescaped and each NUL-terminated,
 * go to out, the key first (*kn bytes), the value after its NUL (*vn
 * bytes at out + *kn + 1).  Returns the ',' or '}', or NULL for any other
 * spelling (whitespace, a value that is not a string, a string
 * jscan_string_copy() does not take); *kn and *vn may then hold
 * anything.  As with jscan_string_copy(), the writes stay below out +
 * (end - p): an out with that much room needs no other check.  The one
 * reader of an entry for the header codec's plain tier
 * (net/codec_json.c) and the typed one-pass decode (proto/header.c); the
 * lengths are stored where the caller keeps them (a field's own), so
 * nothing goes through the stack.
 */
static inline __attribute__((always_inline)) const uint8_t *
jscan_entry_plain(const uint8_t *p, const uint8_t *end, uint8_t *out,
                  uint32_t *kn, uint32_t *vn)
{
    if (end - p >= 24 && jscan_one_letter_key(p)) {
        out[0] = p[1];
        out[1] = '\0';
        *kn = 1;
        /* Most values are short and plain: one 16-byte run holds the
         * value, its closing quote and the ',' or '}' after it. */
        unsigned k = jscan_copy16(out + 2, p + 5);
        if (k < 16 && p[5 + k] == '"' && (p[6 + k] == ',' || p[6 + k] == '}')) {
            out[2 + k] = '\0';
            *vn = k;
            return p + 6 + k;
        }
        return jscan_entry_value(p + 4, end, out + 2, vn);
    }
    ptrdiff_t n;
    if (p >= end || *p != '"' || (n = jscan_string_copy(&p, end, out)) < 0 ||
        end - p < 2 || p[0] != ':' || p[1] != '"')
        return NULL;
    *kn = (uint32_t)n;
    return jscan_entry_value(p + 1, end, out + n + 1, vn);
}

/* }}} */

/**
 * Decodes n bytes checked by jscan_string() into out (never more than n
 * bytes); a lone surrogate becomes U+FFFD.  Returns the bytes written.
 */
size_t jscan_unescape(const uint8_t *s, size_t n, uint8_t *out);

/** A number at *pp, checked against the grammar; *is_int when it has no fraction or exponent. */
const char *jscan_number(const uint8_t **pp, const uint8_t *end, bool *is_int);

/** The literal lit (n bytes: true, false, null) at *pp. */
const char *jscan_literal(const uint8_t **pp, const uint8_t *end,
                          const char *lit, size_t n);

/**
 * Walks over any value at *pp, checking it; `depth` is the nesting of its
 * container, and containers may nest up to max_depth.
 */
const char *jscan_skip(const uint8_t **pp, const uint8_t *end, int depth,
                       int max_depth);

#endif
