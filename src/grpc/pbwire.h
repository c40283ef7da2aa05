/*
 * pbwire: the protobuf wire encoding's small parts, for the messages the
 * gRPC service packs by hand (sendpack.c, recvpack.c): varints, tags,
 * length-delimited fields, proto3's "absent when default", and Status.
 * Sizes and writes in pairs: a size function returns the bytes its put_
 * twin writes.  Header only: each is a few instructions on the hot path.
 *
 * MT: pure.
 */
#ifndef RMQ_GRPC_PBWIRE_H
#define RMQ_GRPC_PBWIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "apache/rocketmq/v2/service.pb-c.h"

#define WT_VARINT 0
#define WT_LEN 2

static inline size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* A tag's bytes: fields up to 15 take one, up to 2047 two. */
static inline size_t
tag_size(uint32_t field)
{
    return field < 16 ? 1 : 2;
}

static inline uint8_t *
put_tag(uint8_t *p, uint32_t field, uint32_t wt)
{
    return put_varint(p, (uint64_t)(field << 3 | wt));
}

static inline size_t
slen(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

/* A length-delimited field of body bytes: tag, length, body. */
static inline size_t
len_field(uint32_t field, size_t body)
{
    return tag_size(field) + varint_size(body) + body;
}

/* A singular string: absent when empty (proto3). */
static inline size_t
str_size(uint32_t field, const char *s)
{
    size_t n = slen(s);
    return n == 0 ? 0 : len_field(field, n);
}

static inline uint8_t *
put_str(uint8_t *p, uint32_t field, const char *s)
{
    size_t n = slen(s);
    if (n == 0)
        return p;
    p = put_tag(p, field, WT_LEN);
    p = put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

/* A singular string of known length: absent when empty. */
static inline size_t
strn_size(uint32_t field, size_t n)
{
    return n == 0 ? 0 : len_field(field, n);
}

static inline uint8_t *
put_strn(uint8_t *p, uint32_t field, const char *s, size_t n)
{
    if (n == 0)
        return p;
    p = put_tag(p, field, WT_LEN);
    p = put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

/* A repeated string's element: written even when empty. */
static inline uint8_t *
put_str_always(uint8_t *p, uint32_t field, const char *s)
{
    size_t n = slen(s);
    p = put_tag(p, field, WT_LEN);
    p = put_varint(p, n);
    if (n > 0)
        memcpy(p, s, n);
    return p + n;
}

/* A varint field (int32 and enums sign-extended: a negative one is ten
 * bytes, protobuf's rule); absent when 0. */
static inline size_t
int_size(uint32_t field, int64_t v)
{
    return v == 0 ? 0 : tag_size(field) + varint_size((uint64_t)v);
}

static inline uint8_t *
put_int(uint8_t *p, uint32_t field, int64_t v)
{
    if (v == 0)
        return p;
    p = put_tag(p, field, WT_VARINT);
    return put_varint(p, (uint64_t)v);
}

/* A nested message: absent when NULL, else tag, length, body (even an
 * empty one). */
static inline size_t
msg_size(uint32_t field, const void *m, size_t body)
{
    return m == NULL ? 0 : len_field(field, body);
}

static inline uint8_t *
put_msg_head(uint8_t *p, uint32_t field, size_t body)
{
    p = put_tag(p, field, WT_LEN);
    return put_varint(p, body);
}

static inline size_t
status_body(const Apache__Rocketmq__V2__Status *st, size_t ml)
{
    return int_size(1, st->code) + (ml == 0 ? 0 : len_field(2, ml));
}

static inline uint8_t *
put_status(uint8_t *p, uint32_t field, const Apache__Rocketmq__V2__Status *st, size_t ml, size_t body)
{
    p = put_msg_head(p, field, body);
    p = put_int(p, 1, st->code);
    if (ml > 0) {
        p = put_tag(p, 2, WT_LEN);
        p = put_varint(p, ml);
        memcpy(p, st->message, ml);
        p += ml;
    }
    return p;
}

#endif
