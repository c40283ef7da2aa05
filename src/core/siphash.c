/*
 * siphash: see siphash.h.
 */
#include "core/siphash.h"

#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

/* SipHash-1-3, 64-bit output */

/* The process's key, drawn before main() (and when rmq.so is loaded): a
 * constructor rather than a once-check on every hash, which runs on every
 * send (config, consume queue and metrics lookups). */
static uint64_t sip_k0, sip_k1;

__attribute__((constructor)) static void
sip_init(void)
{
    uint64_t k[2];
    if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k[0] = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&ts;
        k[1] = (uint64_t)ts.tv_sec * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)(uintptr_t)k;
    }
    sip_k0 = k[0];
    sip_k1 = k[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                   \
    do {                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);  \
    } while (0)

static inline uint64_t
le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint64_t
siphash_bytes(const void *key, size_t n)
{
    const uint8_t *in = key;
    uint64_t v0 = 0x736f6d6570736575ull ^ sip_k0;
    uint64_t v1 = 0x646f72616e646f6dull ^ sip_k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ sip_k0;
    uint64_t v3 = 0x7465646279746573ull ^ sip_k1;
    const uint8_t *end = in + (n - n % 8);
    for (; in != end; in += 8) {
        uint64_t m = le64(in);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    switch (n & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0]; break;
    case 0: break;
    }
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
