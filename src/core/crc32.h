/*
 * crc32: CRC-32 (IEEE 802.3, the polynomial and bit order of zlib's
 * crc32()) through libdeflate, which computes the same value 4-5x faster
 * than zlib on this machine (measured: 1 KiB in ~100 ns against ~410 ns;
 * see README's dependency note).  Every put computes one over its body.
 *
 * Inputs of 1 KiB or more on CPUs with VPCLMULQDQ and AVX-512 take a
 * fold of four 512-bit lanes at a time (crc32.c), ~3x libdeflate 1.14's
 * (not on the Intel parts whose clock 512-bit work lowers).
 *
 * RocketMQ stores BODYCRC as this value & 0x7FFFFFFF (UtilAll.crc32).
 *
 * MT: pure functions, any thread.
 */
#ifndef RMQ_CRC32_H
#define RMQ_CRC32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Continues `crc` (0 to start) over n bytes; zlib-compatible. */
uint32_t rmq_crc32(uint32_t crc, const void *p, size_t n);

/** Whether rmq_crc32 takes the wide fold on this CPU (tests say so). */
bool rmq_crc32_folds(void);

/** The same through libdeflate alone (for tests: the reference). */
uint32_t rmq_crc32_portable(uint32_t crc, const void *p, size_t n);

/** RocketMQ's body CRC: crc32 of the bytes, masked to 31 bits. */
static inline uint32_t
rmq_body_crc(const void *p, size_t n)
{
    return rmq_crc32(0, p, n) & 0x7FFFFFFFu;
}

#endif
