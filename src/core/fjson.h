/*
 * fjson: JSON output the way fastjson 1.2.69 writes it, for the bodies a
 * RocketMQ NameServer sends (protocol.md §1.11).  Two modes:
 *
 *   default      what JSON.toJSONString(obj) writes: UTF-8 passes through;
 *                ", \ and the control characters (U+0000-U+001F,
 *                U+007F-U+009F) are escaped.
 *   browser      SerializerFeature.BrowserCompatible: additionally '/'
 *                becomes \/ and every non-ASCII character \uXXXX (UTF-16
 *                units), so the body is pure ASCII.
 *
 * The writer keeps the first error (out of memory) and ignores further
 * writes, so a body is built without checking every call.
 *
 * MT: none (a writer belongs to its caller).
 */
#ifndef RMQ_FJSON_H
#define RMQ_FJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/buf.h"

struct fjw {
    struct buf *b;
    int err;                   /* 0 or -ENOMEM, sticky */
    bool browser;
};

/**
 * Writes the decimal digits of v so that they end just before `end` and
 * returns where they start (at most 20 bytes before).
 */
char *fjson_i64_digits(char *end, int64_t v);

/**
 * True when fastjson writes s between quotes as it is, in default mode:
 * printable ASCII other than " and \ (every valid topic or group name).
 */
bool fjson_plain(const char *s, size_t n);

/** A writer appending to `b`. */
void fjw_init(struct fjw *w, struct buf *b, bool browser);

/** Appends bytes as they are. */
void fjw_raw(struct fjw *w, const char *s, size_t n);

/** Appends a NUL-terminated literal as it is. */
static inline void
fjw_lit(struct fjw *w, const char *s)
{
    fjw_raw(w, s, strlen(s));
}

/** Appends a quoted, escaped string. */
void fjw_str(struct fjw *w, const char *s, size_t n);

/** Appends a decimal integer. */
void fjw_i64(struct fjw *w, int64_t v);

/** Appends a Long map key: bare (default) or quoted (browser mode). */
void fjw_long_key(struct fjw *w, int64_t v);

#endif
