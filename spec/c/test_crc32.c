/* CRC-32 (core/crc32.h): the wide fold against libdeflate alone, for
 * every length around its thresholds and steps, unaligned, chained. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/crc32.h"

static uint8_t *
random_bytes(size_t n, unsigned seed)
{
    uint8_t *b = malloc(n);
    assert_non_null(b);
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)x;
    }
    return b;
}

static void
known_values(void **state)
{
    (void)state;
    /* zlib's crc32("123456789") and of nothing. */
    assert_int_equal(rmq_crc32(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(rmq_crc32(0, "", 0), 0u);
    /* 64 KiB of 'x': long enough for the fold, against the reference. */
    uint8_t *b = malloc(65536);
    assert_non_null(b);
    memset(b, 'x', 65536);
    assert_int_equal(rmq_crc32(0, b, 65536), rmq_crc32_portable(0, b, 65536));
    free(b);
}

static void
every_length_and_alignment(void **state)
{
    (void)state;
    if (!rmq_crc32_folds())
        skip();   /* no wide fold on this CPU: it would hold libdeflate to itself */
    size_t max = 5000;
    uint8_t *b = random_bytes(max + 64, 7);
    for (size_t off = 0; off < 64; off += 13)
        for (size_t n = 0; n <= max; n++)
            assert_int_equal(rmq_crc32(0, b + off, n), rmq_crc32_portable(0, b + off, n));
    free(b);
}

static void
large_and_chained(void **state)
{
    (void)state;
    size_t sizes[] = { 16384, 16500, 65536 + 255, 1 << 20, (4 << 20) + 3 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint8_t *b = random_bytes(n, (unsigned)i + 100);
        uint32_t whole = rmq_crc32_portable(0, b, n);
        assert_int_equal(rmq_crc32(0, b, n), whole);
        /* A CRC continued from an earlier one (the state goes into the
         * fold's first bytes): split at a few points. */
        size_t cuts[] = { 1, 1000, 1024, 4097, n / 2, n - 1 };
        for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
            uint32_t part = rmq_crc32(0, b, cuts[c]);
            assert_int_equal(rmq_crc32(part, b + cuts[c], n - cuts[c]), whole);
        }
        assert_int_equal(rmq_body_crc(b, n), whole & 0x7FFFFFFFu);
        free(b);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_values),
        cmocka_unit_test(every_length_and_alignment),
        cmocka_unit_test(large_and_chained),
    };
    printf("test_crc32: the wide fold %s\n",
           rmq_crc32_folds() ? "runs on this CPU" : "is not used on this CPU (its comparison skipped)");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
