/* The number and id formatters a send's reply is written with:
 * fjson_i64_digits (two digits a step) against printf, and clog_msgid
 * (16 bytes a step) against a byte-by-byte %02X, for IPv4 and IPv6
 * stores, on edge values and 200,000 random ones. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/fjson.h"
#include "store/commitlog.h"

static uint64_t
next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void
check_digits(int64_t v)
{
    char buf[32], want[32];
    char *e = buf + sizeof(buf);
    char *b = fjson_i64_digits(e, v);
    int n = snprintf(want, sizeof(want), "%" PRId64, v);
    assert_int_equal(e - b, n);
    assert_memory_equal(b, want, (size_t)n);
}

static void
digits_match_printf(void **state)
{
    (void)state;
    static const int64_t edge[] = {
        0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, -1, -9, -10, -99, -100, -101,
        INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, INT32_MAX, INT32_MIN,
        1234567890123LL, 10000000000000000LL,
    };
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        check_digits(edge[i]);
    uint64_t x = 88172645463325252ull;
    for (int t = 0; t < 200000; t++) {
        uint64_t r = next(&x);
        int64_t v = (int64_t)(r >> (r % 64));   /* every magnitude */
        check_digits((t & 1) ? -v : v);
    }
}

static void
msgid_matches_hex(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < 200000; t++) {
        struct host_addr h;
        memset(&h, 0, sizeof(h));
        h.len = (t & 1) ? 4 : 16;
        uint64_t r = next(&x);
        for (int i = 0; i < 16; i++)
            h.ip[i] = (uint8_t)(r >> (i * 4));
        h.port = (int32_t)(next(&x) >> 32);
        int64_t phy = (int64_t)(next(&x) >> (t % 64));
        uint8_t raw[28];
        memcpy(raw, h.ip, h.len);
        for (int i = 0; i < 4; i++)
            raw[h.len + i] = (uint8_t)((uint32_t)h.port >> (24 - 8 * i));
        for (int i = 0; i < 8; i++)
            raw[h.len + 4 + i] = (uint8_t)((uint64_t)phy >> (56 - 8 * i));
        size_t rn = h.len + 12u;
        char want[64], got[64];
        for (size_t i = 0; i < rn; i++)
            snprintf(want + 2 * i, 3, "%02X", raw[i]);
        size_t n = clog_msgid(got, &h, phy);
        assert_int_equal(n, 2 * rn);
        assert_string_equal(got, want);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(digits_match_printf),
        cmocka_unit_test(msgid_matches_hex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
