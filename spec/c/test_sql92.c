/* The SQL92 filter's C interface (filter/sql92.h): compile limits,
 * three-valued evaluation over a callback and over a properties string,
 * hostile expressions.  (spec/unit/sql92_spec.lua has the language's
 * cases through the Lua binding.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "filter/sql92.h"

static const struct sql92_limits LIM = { .max_len = 4096, .max_depth = 64, .max_nodes = 1024 };

static struct sql92 *
compile(const char *s, char *err)
{
    return sql92_compile(s, strlen(s), &LIM, err, 256);
}

/* The callback's properties: NULL-terminated name/value pairs. */
static bool
get(void *ud, const char *name, size_t nlen, const char **v, size_t *vlen)
{
    const char **kv = ud;
    for (; kv[0] != NULL; kv += 2) {
        if (strlen(kv[0]) == nlen && memcmp(kv[0], name, nlen) == 0) {
            *v = kv[1];
            *vlen = strlen(kv[1]);
            return true;
        }
    }
    return false;
}

static enum sql92_result
eval(const char *expr, const char **props)
{
    char err[256];
    struct sql92 *f = compile(expr, err);
    assert_non_null(f);
    enum sql92_result r = sql92_eval(f, get, props);
    assert_int_equal(sql92_match(f, get, props), r == SQL92_TRUE);
    sql92_free(f);
    return r;
}

static void
three_valued(void **state)
{
    (void)state;
    const char *none[] = { NULL };
    const char *a3[] = { "a", "3", "region", "hz", NULL };
    const char *ax[] = { "a", "x", NULL };
    assert_int_equal(eval("a > 1", a3), SQL92_TRUE);
    assert_int_equal(eval("a > 5", a3), SQL92_FALSE);
    assert_int_equal(eval("a > 1", none), SQL92_NULL);
    assert_int_equal(eval("a > 1", ax), SQL92_ERROR);
    assert_int_equal(eval("a > 1 AND region = 'hz'", a3), SQL92_TRUE);
    assert_int_equal(eval("a > 1 AND b = 'hz'", a3), SQL92_NULL);
    assert_int_equal(eval("a > 9 OR region IN ('sh', 'hz')", a3), SQL92_TRUE);
    assert_int_equal(eval("b IS NULL AND a BETWEEN 3 AND 3", a3), SQL92_TRUE);
    assert_int_equal(eval("FALSE AND a > 1", ax), SQL92_FALSE);   /* short circuit */
}

static void
over_properties_string(void **state)
{
    (void)state;
    char err[256];
    struct sql92 *f = compile("a > 1 AND TAGS = 'T'", err);
    assert_non_null(f);
    static const char ok[] = "a\0012\002TAGS\001T";
    static const char no[] = "a\0010\002TAGS\001T";
    assert_true(sql92_match_props(f, ok, sizeof(ok) - 1));
    assert_false(sql92_match_props(f, no, sizeof(no) - 1));
    assert_int_equal(sql92_eval_props(f, "", 0), SQL92_NULL);
    /* Every truncation of a properties string evaluates, never reads past. */
    for (size_t n = 0; n < sizeof(ok) - 1; n++) {
        char *p = malloc(n ? n : 1);
        assert_non_null(p);
        memcpy(p, ok, n);
        enum sql92_result r = sql92_eval_props(f, p, n);
        assert_true(r == SQL92_FALSE || r == SQL92_NULL || r == SQL92_TRUE || r == SQL92_ERROR);
        assert_int_not_equal(r, SQL92_TRUE);   /* TAGS is cut: never T */
        free(p);
    }
    /* Invalid UTF-8 in a value is a string like any other: not equal. */
    static const char bad[] = "a\0012\002TAGS\001\xff\xfe";
    assert_false(sql92_match_props(f, bad, sizeof(bad) - 1));
    sql92_free(f);
}

static void
limits(void **state)
{
    (void)state;
    char err[256];
    struct sql92_limits small = { .max_len = 5, .max_depth = 64, .max_nodes = 1024 };
    assert_null(sql92_compile("a > 1 AND b > 2", 15, &small, err, sizeof(err)));
    assert_non_null(strstr(err, "longer than 5 bytes"));
    /* A nesting bomb: refused by depth, not a stack overflow. */
    size_t n = 3000;
    char *s = malloc(2 * n + 8);
    assert_non_null(s);
    memset(s, '(', n);
    memcpy(s + n, "a > 1", 5);
    memset(s + n + 5, ')', n);
    struct sql92_limits big = { .max_len = 1 << 20, .max_depth = 64, .max_nodes = 100000 };
    assert_null(sql92_compile(s, 2 * n + 5, &big, err, sizeof(err)));
    assert_non_null(strstr(err, "nested deeper than"));
    free(s);
    /* Too many terms. */
    struct sql92_limits few = { .max_len = 4096, .max_depth = 64, .max_nodes = 5 };
    const char *in = "a IN ('1','2','3','4','5','6')";
    assert_null(sql92_compile(in, strlen(in), &few, err, sizeof(err)));
    assert_non_null(strstr(err, "more than 5 terms"));
    /* A small error buffer still gets a terminated message. */
    char tiny[8];
    memset(tiny, 'z', sizeof(tiny));
    assert_null(sql92_compile("a >", 3, &LIM, tiny, sizeof(tiny)));
    assert_int_equal(tiny[sizeof(tiny) - 1], '\0');
}

static void
hostile_text(void **state)
{
    (void)state;
    char err[256];
    /* Every prefix of a good expression compiles or is refused cleanly. */
    const char *good = "(a > 1 OR b IN ('x', 'y')) AND c NOT BETWEEN 1.5 AND 2e3 AND d IS NOT NULL";
    int refused = 0;
    for (size_t n = 0; n <= strlen(good); n++) {
        struct sql92 *f = sql92_compile(good, n, &LIM, err, sizeof(err));
        if (f == NULL) {
            refused++;
            assert_true(strlen(err) > 0);
        }
        sql92_free(f);
    }
    assert_true(refused > 10);
    struct sql92 *f = compile(good, err);
    assert_non_null(f);
    assert_true(sql92_nodes(f) > 5);
    sql92_free(f);
    /* NUL and invalid UTF-8 inside the text, unterminated strings. */
    static const char *bad[] = { "a = 'x\xff\xfe'", "a\xc0 > 1", "a = 'open", "'", "\xe2\x82" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = compile(bad[i], err);
        sql92_free(f);
    }
    /* Random bytes from a fixed seed: a filter or an error, never a crash. */
    srand(27);
    char buf[64];
    static const char alphabet[] = "ab ()'<>=,.01eINOTANDRBWLS\x01\xff\"-";
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(rand() % 40);
        for (size_t j = 0; j < len; j++)
            buf[j] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
        f = sql92_compile(buf, len, &LIM, err, sizeof(err));
        if (f != NULL) {
            const char *props[] = { "a", "1", "b", "x", NULL };
            enum sql92_result r = sql92_eval(f, get, props);
            assert_true(r <= SQL92_ERROR);
            sql92_free(f);
        }
    }
    sql92_free(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_valued),
        cmocka_unit_test(over_properties_string),
        cmocka_unit_test(limits),
        cmocka_unit_test(hostile_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
