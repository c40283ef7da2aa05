/* siphash: SipHash-1-3 with the process's key (core/siphash.h).  The
 * module is included whole so that the test can set the key: a
 * byte-at-a-time reference SipHash-c-d, itself checked against the
 * paper's SipHash-2-4 vector, must agree with it at every length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/core/siphash.c"

static uint64_t
rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static void
round_(uint64_t v[4])
{
    v[0] += v[1]; v[1] = rotl(v[1], 13); v[1] ^= v[0]; v[0] = rotl(v[0], 32);
    v[2] += v[3]; v[3] = rotl(v[3], 16); v[3] ^= v[2];
    v[0] += v[3]; v[3] = rotl(v[3], 21); v[3] ^= v[0];
    v[2] += v[1]; v[1] = rotl(v[1], 17); v[1] ^= v[2]; v[2] = rotl(v[2], 32);
}

/* SipHash-c-d as the paper states it, one little-endian word at a time. */
static uint64_t
ref(int c, int d, uint64_t k0, uint64_t k1, const uint8_t *m, size_t n)
{
    uint64_t v[4] = { k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
                      k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull };
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = w << 8 | m[i + (size_t)j];
        v[3] ^= w;
        for (int r = 0; r < c; r++)
            round_(v);
        v[0] ^= w;
    }
    uint64_t last = (uint64_t)(n & 0xff) << 56;
    for (size_t j = 0; j < n % 8; j++)
        last |= (uint64_t)m[n - n % 8 + j] << (8 * j);
    v[3] ^= last;
    for (int r = 0; r < c; r++)
        round_(v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for (int r = 0; r < d; r++)
        round_(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

static const uint64_t K0 = 0x0706050403020100ull, K1 = 0x0f0e0d0c0b0a0908ull;

static void
reference_matches_paper(void **state)
{
    (void)state;
    uint8_t m[15];
    for (int i = 0; i < 15; i++)
        m[i] = (uint8_t)i;
    /* SipHash-2-4, key 00..0f, message 00..0e (the paper's appendix A). */
    assert_int_equal(ref(2, 4, K0, K1, m, 15), 0xa129ca6149be45e5ull);
}

static void
module_is_siphash13(void **state)
{
    (void)state;
    uint64_t saved0 = sip_k0, saved1 = sip_k1;
    sip_k0 = K0;
    sip_k1 = K1;
    uint8_t m[200];
    for (int i = 0; i < 200; i++)
        m[i] = (uint8_t)(i * 7 + 3);
    for (size_t n = 0; n <= sizeof(m); n++)
        assert_int_equal(siphash_bytes(m, n), ref(1, 3, K0, K1, m, n));
    sip_k0 = saved0;
    sip_k1 = saved1;
}

static void
process_key_is_random(void **state)
{
    (void)state;
    /* The constructor drew a key: it is not the all-zero one, so a
     * peer cannot compute our hashes from the algorithm alone. */
    assert_false(sip_k0 == 0 && sip_k1 == 0);
    const char *s = "TopicTest";
    assert_int_not_equal(siphash_bytes(s, strlen(s)), ref(1, 3, 0, 0, (const uint8_t *)s, strlen(s)));
    /* Stable within the process; Java's twins differ. */
    assert_int_equal(siphash_bytes(s, 9), siphash_bytes(s, 9));
    assert_int_not_equal(siphash_bytes("Aa", 2), siphash_bytes("BB", 2));
    /* One flipped bit anywhere changes about half the output bits. */
    uint8_t m[64] = { 0 };
    uint64_t h0 = siphash_bytes(m, sizeof(m));
    int total = 0;
    for (int bit = 0; bit < 512; bit++) {
        m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        total += __builtin_popcountll(h0 ^ siphash_bytes(m, sizeof(m)));
        m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    double avg = (double)total / 512.0;
    assert_true(avg > 28.0 && avg < 36.0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_matches_paper),
        cmocka_unit_test(module_is_siphash13),
        cmocka_unit_test(process_key_is_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
