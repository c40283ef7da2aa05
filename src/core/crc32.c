/* crc32: zlib-compatible CRC-32 (see crc32.h): libdeflate's, and for
 * long inputs on CPUs with VPCLMULQDQ and AVX-512 our own fold. */
#include "core/crc32.h"

#include <stdbool.h>

#include <libdeflate.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define RMQ_CRC_FOLD 1
#endif

#ifdef RMQ_CRC_FOLD
/*
 * Why: a 16 KiB message's body CRC took ~1.7 us of the broker's CPU in
 * libdeflate 1.14 (128-bit PCLMULQDQ, ~10 GB/s here), 12 % of a send's.
 * VPCLMULQDQ folds four 512-bit lanes of input per step instead.
 *
 * The standard fold (Intel, "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ"), bit-reflected as zlib's CRC is: four
 * accumulators hold the first 256 bytes (the incoming CRC state XORed
 * into the first 4); each step multiplies every 128-bit lane forward by
 * D = 2048 bits (lo 64 bits by x^(D+31) mod G, hi by x^(D-33) mod G;
 * the -1 is the reflected product's one-bit shift) and XORs in the next
 * 256 bytes.  The invariant: the raw CRC (state 0, no final XOR) of
 * "the accumulators' 256 bytes, then the input not yet folded" is the
 * raw CRC of the whole input.  So instead of a Barrett reduction the
 * last 256 bytes of state and the tail (< 256 bytes) go to libdeflate,
 * which also keeps one implementation of the CRC's definition.
 * spec/c/test_crc32.c checks it against libdeflate alone.
 */
#define FOLD_MIN 1024  /* below it the set-up is not worth it */
#define POLY_LE 0xEDB88320u

/* x^d mod G, bit-reflected (bit 31 is x^0). */
static uint32_t
xd_mod_g(unsigned d)
{
    uint32_t r = 0x80000000u;
    for (unsigned i = 0; i < d; i++)
        r = (r >> 1) ^ ((r & 1u) ? POLY_LE : 0u);
    return r;
}

__attribute__((target("avx512f,vpclmulqdq"))) static uint32_t
crc32_fold512(uint32_t crc, const uint8_t *p, size_t n, uint64_t k_lo,
              uint64_t k_hi)
{
    const __m512i k = _mm512_set_epi64((long long)k_hi, (long long)k_lo,
                                       (long long)k_hi, (long long)k_lo,
                                       (long long)k_hi, (long long)k_lo,
                                       (long long)k_hi, (long long)k_lo);
    __m512i a0 = _mm512_loadu_si512((const void *)p);
    __m512i a1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i a2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i a3 = _mm512_loadu_si512((const void *)(p + 192));
    /* The state (~crc, as libdeflate keeps it) into the first 4 bytes. */
    a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    p += 256;
    n -= 256;
#define FOLD(a, off)                                                          \
    a = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),       \
                                  _mm512_clmulepi64_epi128(a, k, 0x11),       \
                                  _mm512_loadu_si512((const void *)(p + off)), \
                                  0x96)
    while (n >= 256) {
        FOLD(a0, 0);
        FOLD(a1, 64);
        FOLD(a2, 128);
        FOLD(a3, 192);
        p += 256;
        n -= 256;
    }
#undef FOLD
    uint8_t state[256] __attribute__((aligned(64)));
    _mm512_store_si512((void *)state, a0);
    _mm512_store_si512((void *)(state + 64), a1);
    _mm512_store_si512((void *)(state + 128), a2);
    _mm512_store_si512((void *)(state + 192), a3);
    /* Raw CRC from state 0: libdeflate's with crc ~0 (its state ~crc). */
    uint32_t c = libdeflate_crc32(0xFFFFFFFFu, state, sizeof(state));
    return libdeflate_crc32(c, p, n);
}

/* 0: not decided yet, 1: fold, -1: libdeflate only.  Read and written
 * with __atomic builtins (a plain int: clang refuses them on _Atomic). */
static int fold_ok;
static uint64_t fold_k_lo, fold_k_hi;

/* Intel parts on which 512-bit instructions lower the core's clock for
 * everything else it runs (Skylake-SP / Cascade Lake, Ice Lake, Tiger
 * Lake): the fold is left to libdeflate there, as libdeflate 1.19+ does
 * (its list).  Later Intel parts and AMD's run them at full clock. */
static bool
zmm_slows_clock(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return true;
    /* "GenuineIntel" in ebx, edx, ecx */
    if (b != 0x756e6547u || d != 0x49656e69u || c != 0x6c65746eu)
        return false;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return true;
    unsigned family = (a >> 8) & 0xfu, model = (a >> 4) & 0xfu;
    if (family == 6 || family == 15)
        model += ((a >> 16) & 0xfu) << 4;
    if (family != 6)
        return false;
    switch (model) {
    case 85:            /* Skylake-SP, Cascade Lake, Cooper Lake */
    case 106: case 108: /* Ice Lake server */
    case 126:           /* Ice Lake client */
    case 140: case 141: /* Tiger Lake */
        return true;
    default:
        return false;
    }
}

static bool
fold_usable(void)
{
    int ok = __atomic_load_n(&fold_ok, __ATOMIC_ACQUIRE);
    if (ok != 0)
        return ok > 0;
    /* Idempotent: racing threads compute and store the same values. */
    __builtin_cpu_init();
    ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") && !zmm_slows_clock() ? 1 : -1;
    if (ok > 0) {
        __atomic_store_n(&fold_k_lo, (uint64_t)xd_mod_g(2048 + 31), __ATOMIC_RELAXED);
        __atomic_store_n(&fold_k_hi, (uint64_t)xd_mod_g(2048 - 33), __ATOMIC_RELAXED);
    }
    __atomic_store_n(&fold_ok, ok, __ATOMIC_RELEASE);
    return ok > 0;
}
#endif

uint32_t
rmq_crc32(uint32_t crc, const void *p, size_t n)
{
#ifdef RMQ_CRC_FOLD
    if (n >= FOLD_MIN && fold_usable())
        return crc32_fold512(crc, p, n, __atomic_load_n(&fold_k_lo, __ATOMIC_RELAXED),
                             __atomic_load_n(&fold_k_hi, __ATOMIC_RELAXED));
#endif
    return libdeflate_crc32(crc, p, n);
}

bool
rmq_crc32_folds(void)
{
#ifdef RMQ_CRC_FOLD
    return fold_usable();
#else
    return false;
#endif
}

uint32_t
rmq_crc32_portable(uint32_t crc, const void *p, size_t n)
{
    return libdeflate_crc32(crc, p, n);
}
