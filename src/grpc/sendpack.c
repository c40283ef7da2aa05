/*
 * sendpack: see sendpack.h.
 */
#include "grpc/sendpack.h"

#include <string.h>

/* Wire types. */
#define WT_VARINT 0
#define WT_LEN 2

/* Writes v at out (when not NULL); returns the bytes it takes. */
static size_t
put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        if (out != NULL)
            out[n] = (uint8_t)(v | 0x80);
        v >>= 7;
        n++;
    }
    if (out != NULL)
        out[n] = (uint8_t)v;
    return n + 1;
}

static uint8_t *
at(uint8_t *out, size_t off)
{
    return out != NULL ? out + off : NULL;
}

/* A string field: absent when NULL or empty (proto3). */
static size_t
put_string(uint8_t *out, uint32_t field, const char *s)
{
    if (s == NULL || s[0] == '\0')
        return 0;
    size_t len = strlen(s);
    size_t n = put_varint(out, (uint64_t)field << 3 | WT_LEN);
    n += put_varint(at(out, n), len);
    if (out != NULL)
        memcpy(out + n, s, len);
    return n + len;
}

/* A varint field (an enum, an int64: negative ones as ten bytes of
 * two's complement, protobuf's rule); absent when 0. */
static size_t
put_int(uint8_t *out, uint32_t field, int64_t v)
{
    if (v == 0)
        return 0;
    size_t n = put_varint(out, (uint64_t)field << 3 | WT_VARINT);
    return n + put_varint(at(out, n), (uint64_t)v);
}

static size_t
status_body(uint8_t *out, const Apache__Rocketmq__V2__Status *st)
{
    size_t n = put_int(out, 1, (int64_t)st->code);
    return n + put_string(at(out, n), 2, st->message);
}

static size_t
entry_body(uint8_t *out, const Apache__Rocketmq__V2__SendResultEntry *e);

/* A message field: its tag, its length, its body; absent when NULL. */
static size_t
put_message(uint8_t *out, uint32_t field, const void *m,
            size_t (*body)(uint8_t *, const void *))
{
    if (m == NULL)
        return 0;
    size_t len = body(NULL, m);
    size_t n = put_varint(out, (uint64_t)field << 3 | WT_LEN);
    n += put_varint(at(out, n), len);
    if (out != NULL)
        body(out + n, m);
    return n + len;
}

static size_t
status_any(uint8_t *out, const void *m)
{
    return status_body(out, m);
}

static size_t
entry_any(uint8_t *out, const void *m)
{
    return entry_body(out, m);
}

static size_t
entry_body(uint8_t *out, const Apache__Rocketmq__V2__SendResultEntry *e)
{
    size_t n = put_message(out, 1, e->status, status_any);
    n += put_string(at(out, n), 2, e->message_id);
    n += put_string(at(out, n), 3, e->transaction_id);
    n += put_int(at(out, n), 4, e->offset);
    n += put_string(at(out, n), 5, e->recall_handle);
    return n;
}

size_t
sendpack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                  Apache__Rocketmq__V2__SendResultEntry *const *entries, size_t n)
{
    size_t len = put_message(out, 1, st, status_any);
    for (size_t i = 0; i < n; i++)
        len += put_message(at(out, len), 2, entries[i], entry_any);
    return len;
}
