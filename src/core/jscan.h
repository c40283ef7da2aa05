/*
 * jscan: the JSON lexing every body and header reader shares (the
 * RemotingCommand JSON header in net/codec_json.c, HeartbeatData in
 * broker/heartbeat.c): strings found eight bytes at a time with their
 * escapes checked (so unescaping can trust them), numbers checked against
 * the grammar, literals, and walking over any value with a nesting limit.
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
