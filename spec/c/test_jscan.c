/* jscan: JSON lexing of headers and bodies (core/jscan.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/jscan.h"

#define U8(s) ((const uint8_t *)(s))

/* Scans the string at s (opening quote first); returns the error or NULL. */
static const char *
scan(const char *s, size_t n, const uint8_t **raw, size_t *rn, bool *esc, size_t *used)
{
    const uint8_t *p = U8(s);
    const char *e = jscan_string(&p, U8(s) + n, raw, rn, esc);
    *used = (size_t)(p - U8(s));
    return e;
}

static void
string_plain_and_escaped(void **state)
{
    (void)state;
    const uint8_t *raw;
    size_t rn, used;
    bool esc;
    const char *s = "\"hello world, a longer string than 8\" tail";
    assert_null(scan(s, strlen(s), &raw, &rn, &esc, &used));
    assert_int_equal(rn, strlen("hello world, a longer string than 8"));
    assert_memory_equal(raw, "hello world", 11);
    assert_false(esc);
    assert_int_equal(used, rn + 2);

    s = "\"a\\\"b\\\\c\\u00e9\\n\"";
    assert_null(scan(s, strlen(s), &raw, &rn, &esc, &used));
    assert_true(esc);
    uint8_t out[64];
    size_t w = jscan_unescape(raw, rn, out);
    assert_int_equal(w, 8);   /* a " b \ c é(2) \n */
    assert_memory_equal(out, "a\"b\\c\xc3\xa9\n", 8);
}

static void
string_hostile(void **state)
{
    (void)state;
    const uint8_t *raw;
    size_t rn, used;
    bool esc;
    /* Truncated: no closing quote, at every length of a real string. */
    const char *full = "\"0123456789abcdef\\u0041xyz\"";
    for (size_t n = 1; n < strlen(full); n++)
        assert_non_null(scan(full, n, &raw, &rn, &esc, &used));
    /* A backslash as the last byte. */
    assert_string_equal(scan("\"ab\\", 4, &raw, &rn, &esc, &used), "unterminated string");
    /* Bad escapes. */
    assert_string_equal(scan("\"\\x\"", 4, &raw, &rn, &esc, &used), "bad escape");
    assert_string_equal(scan("\"\\u12g4\"", 8, &raw, &rn, &esc, &used), "bad \\u escape");
    assert_string_equal(scan("\"\\u12\"", 6, &raw, &rn, &esc, &used), "bad \\u escape");
    /* A raw control byte inside a string: fastjson (the Java side)
     * takes it, so jscan does too, byte for byte. */
    assert_null(scan("\"a\nb\"", 5, &raw, &rn, &esc, &used));
    assert_int_equal(rn, 3);
    /* Invalid UTF-8 (a lone continuation byte, an overlong NUL, a cut
     * 3-byte sequence) is not JSON's business here: the bytes pass
     * through unchanged and the string still ends at its quote. */
    const char *bad = "\"\x80\xc0\x80\xe2\x82\" ";
    assert_null(scan(bad, strlen(bad), &raw, &rn, &esc, &used));
    assert_int_equal(rn, 5);
    assert_memory_equal(raw, "\x80\xc0\x80\xe2\x82", 5);
    assert_int_equal(used, 7);
}

static void
unescape_lone_surrogate(void **state)
{
    (void)state;
    uint8_t out[32];
    /* A lone high half becomes U+FFFD (EF BF BD). */
    size_t w = jscan_unescape(U8("\\ud800x"), 7, out);
    assert_int_equal(w, 4);
    assert_memory_equal(out, "\xef\xbf\xbdx", 4);
    /* A pair becomes one 4-byte character (U+1F600). */
    w = jscan_unescape(U8("\\ud83d\\ude00"), 12, out);
    assert_int_equal(w, 4);
    assert_memory_equal(out, "\xf0\x9f\x98\x80", 4);
}

static void
string_copy_matches_unescape(void **state)
{
    (void)state;
    static const char *cases[] = {
        "\"plain\"",
        "\"a string of more than sixteen bytes with \\u0001 and \\u0002 in it\"",
        "\"tab\\there \\/ \\b\\f\\r\"",
        "\"\\ud83d\\ude00 smile\"",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *s = cases[i];
        size_t n = strlen(s);
        uint8_t a[128], b[128];
        const uint8_t *p = U8(s);
        ptrdiff_t w = jscan_string_copy(&p, U8(s) + n, a);
        assert_true(w >= 0);
        assert_ptr_equal(p, U8(s) + n);
        const uint8_t *raw;
        size_t rn, used;
        bool esc;
        assert_null(scan(s, n, &raw, &rn, &esc, &used));
        size_t w2 = esc ? jscan_unescape(raw, rn, b) : (memcpy(b, raw, rn), rn);
        assert_int_equal((size_t)w, w2);
        assert_memory_equal(a, b, w2);
    }
    /* Not taken: lone surrogate, truncation. *pp stays. */
    uint8_t out[64];
    const char *lone = "\"\\udc00\"";
    const uint8_t *p = U8(lone);
    assert_int_equal(jscan_string_copy(&p, U8(lone) + strlen(lone), out), -1);
    assert_ptr_equal(p, U8(lone));
    const char *cut = "\"abcdefghijklmnopqrstuvwxyz";
    p = U8(cut);
    assert_int_equal(jscan_string_copy(&p, U8(cut) + strlen(cut), out), -1);
}

static void
numbers(void **state)
{
    (void)state;
    static const struct { const char *s; bool ok; bool is_int; size_t used; } cases[] = {
        { "0", true, true, 1 },        { "-12,", true, true, 3 },
        { "3.25}", true, false, 4 },   { "1e9", true, false, 3 },
        { "-0.5E-3", true, false, 7 }, { "01", true, true, 1 },  /* 0, then "1" is the caller's */
        { "-", false, false, 0 },      { "1.", false, false, 0 },
        { "1e", false, false, 0 },     { "+1", false, false, 0 },
        { ".5", false, false, 0 },     { "1e+", false, false, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint8_t *p = U8(cases[i].s);
        bool is_int = false;
        const char *e = jscan_number(&p, p + strlen(cases[i].s), &is_int);
        if (cases[i].ok) {
            assert_null(e);
            assert_int_equal(is_int, cases[i].is_int);
            assert_int_equal((size_t)(p - U8(cases[i].s)), cases[i].used);
        } else {
            assert_non_null(e);
        }
    }
}

static void
literals(void **state)
{
    (void)state;
    const uint8_t *p = U8("true,");
    assert_null(jscan_literal(&p, p + 5, "true", 4));
    assert_int_equal(*p, ',');
    p = U8("tru");
    assert_non_null(jscan_literal(&p, p + 3, "true", 4));
    p = U8("nul!");
    assert_non_null(jscan_literal(&p, p + 4, "null", 4));
}

static const char *
skipv(const char *s, int max_depth, size_t *used)
{
    const uint8_t *p = U8(s);
    const char *e = jscan_skip(&p, U8(s) + strlen(s), 0, max_depth);
    *used = (size_t)(p - U8(s));
    return e;
}

static void
skip_values_and_depth(void **state)
{
    (void)state;
    size_t used;
    const char *v = "{\"a\":[1,2.5,{\"b\":null}],\"c\":\"x\\\"y\",\"d\":true}";
    assert_null(skipv(v, 8, &used));
    assert_int_equal(used, strlen(v));
    assert_null(skipv("[ ] ,", 8, &used));
    assert_int_equal(used, 3);

    /* Nesting: 3 levels pass with 3, fail with 2. */
    assert_null(skipv("[[[1]]]", 3, &used));
    assert_non_null(skipv("[[[1]]]", 2, &used));
    /* A deep bomb is refused, not a stack overflow. */
    char bomb[100001];
    memset(bomb, '[', sizeof(bomb) - 1);
    bomb[sizeof(bomb) - 1] = '\0';
    assert_non_null(skipv(bomb, 64, &used));

    /* Truncated, trailing comma, missing colon, bare word. */
    static const char *bad[] = { "{\"a\":1", "[1,2,]", "{\"a\" 1}", "{a:1}", "[1 2]", "", "}" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_non_null(skipv(bad[i], 8, &used));
    /* Every prefix of a good value is refused. */
    char buf[128];
    for (size_t n = 0; n < strlen(v); n++) {
        memcpy(buf, v, n);
        buf[n] = '\0';
        assert_non_null(skipv(buf, 8, &used));
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(string_plain_and_escaped),
        cmocka_unit_test(string_hostile),
        cmocka_unit_test(unescape_lone_surrogate),
        cmocka_unit_test(string_copy_matches_unescape),
        cmocka_unit_test(numbers),
        cmocka_unit_test(literals),
        cmocka_unit_test(skip_values_and_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
