/*
 * siphash: SipHash-1-3 (Aumasson & Bernstein) with one random key per
 * process, the hash of every table keyed by names a peer chooses (topics,
 * groups, client ids, offsets keys, the NameServer's routes).  Java's
 * String.hashCode, which the wire formats need for their key order, is
 * trivially collided ("Aa" and "BB", so any string of n such pairs has
 * 2^n twins); with a secret key a peer cannot aim names at one bucket, so
 * chains stay O(1) long on average whatever the names (docs/hardening-
 * tables.md).
 *
 * The key comes from getrandom() when the program (or rmq.so) is loaded,
 * before main (the clock and addresses when that fails).
 *
 * MT: any thread.
 */
#ifndef RMQ_SIPHASH_H
#define RMQ_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/** The keyed 64-bit hash of n bytes. */
uint64_t siphash_bytes(const void *key, size_t n);

#endif
