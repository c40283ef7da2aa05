/*
 * jstr: Java's String rules over the UTF-8 bytes rmq keeps: the code
 * points Java's UTF-8 decoder reads from them, their UTF-16 code units,
 * and String.hashCode over those units.  Every place that orders or
 * matches names as a Java broker does (consume queue tag codes, index
 * keys, HashMap iteration order, fastjson's \u escapes) goes through
 * here, so that a non-ASCII name gets the same hash everywhere.
 *
 * Malformed UTF-8 (a bad lead byte, a missing continuation, an overlong
 * form, a surrogate, a code point past U+10FFFF, a truncated tail)
 * decodes to U+FFFD one byte at a time.  A JDK's decoder folds some
 * broken sequences into one U+FFFD (by rules that changed between JDK 8
 * and 17), so the hash of malformed text may differ from a Java
 * broker's; well-formed text, all a Java client can send, hashes the same.
 *
 * MT: pure functions, any thread.
 */
#ifndef RMQ_JSTR_H
#define RMQ_JSTR_H

#include <stddef.h>
#include <stdint.h>

#define JSTR_REPLACEMENT 0xFFFDu   /* U+FFFD, for each malformed byte */

/**
 * The code point of the UTF-8 sequence at s[*i] (i < n), advancing *i
 * past it (by one byte for a malformed one, which yields U+FFFD).
 */
uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i);

/** The UTF-16 code units of code point cp into u[0..1]; returns 1 or 2. */
static inline int
utf16_units(uint32_t cp, uint16_t u[2])
{
    if (cp < 0x10000) {
        u[0] = (uint16_t)cp;
        return 1;
    }
    cp -= 0x10000;
    u[0] = (uint16_t)(0xD800 + (cp >> 10));
    u[1] = (uint16_t)(0xDC00 + (cp & 0x3FF));
    return 2;
}

/**
 * Java's a.compareTo(b) of two UTF-8 texts (negative, 0 or positive):
 * UTF-16 code unit order, which is byte order but for supplementary
 * characters, whose surrogates sort below U+E000-U+FFFF.  fastjson's
 * SortField orders names so.
 */
int java_compare(const char *a, size_t an, const char *b, size_t bn);

/** Java's String.hashCode of UTF-8 text, over its UTF-16 code units. */
int32_t java_hash(const char *s, size_t n);

/** Continues a String.hashCode over more text (h = the hash so far). */
int32_t java_hash_more(int32_t h, const char *s, size_t n);

#endif
