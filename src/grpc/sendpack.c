/*
 * sendpack: see sendpack.h.
 */
#include "grpc/sendpack.h"

#include <string.h>

/* Wire types. */
#define WT_VARINT 0
#define WT_LEN 2

/* Every field here has a number under 16: its tag is one byte. */
#define TAG(field, wt) ((uint8_t)((field) << 3 | (wt)))

static size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* A string field's bytes: absent when empty (proto3). */
static size_t
string_size(size_t len)
{
    return len == 0 ? 0 : 1 + varint_size(len) + len;
}

static uint8_t *
put_string(uint8_t *p, uint32_t field, const char *s, size_t len)
{
    if (len == 0)
        return p;
    *p++ = TAG(field, WT_LEN);
    p = put_varint(p, len);
    memcpy(p, s, len);
    return p + len;
}

/* A varint field (an enum, an int64: negative ones as ten bytes of
 * two's complement, protobuf's rule); absent when 0. */
static size_t
int_size(int64_t v)
{
    return v == 0 ? 0 : 1 + varint_size((uint64_t)v);
}

static uint8_t *
put_int(uint8_t *p, uint32_t field, int64_t v)
{
    if (v == 0)
        return p;
    *p++ = TAG(field, WT_VARINT);
    return put_varint(p, (uint64_t)v);
}

static size_t
slen(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

static size_t
status_size(const Apache__Rocketmq__V2__Status *st, size_t msg_len)
{
    return int_size((int64_t)st->code) + string_size(msg_len);
}

static uint8_t *
put_status(uint8_t *p, uint32_t field, const Apache__Rocketmq__V2__Status *st, size_t msg_len,
           size_t body)
{
    *p++ = TAG(field, WT_LEN);
    p = put_varint(p, body);
    p = put_int(p, 1, (int64_t)st->code);
    return put_string(p, 2, st->message, msg_len);
}

/* An entry: its body's size, and (out not NULL) its bytes, tag and
 * length first.  Each size is computed once, bottom up (each string's
 * strlen once): the nested size-then-bytes recursion this replaced
 * measured 1,300 instructions a send. */
static size_t
entry(uint8_t **out, const Apache__Rocketmq__V2__SendResultEntry *e)
{
    size_t sm = e->status != NULL ? slen(e->status->message) : 0;
    size_t ss = e->status != NULL ? status_size(e->status, sm) : 0;
    size_t id = slen(e->message_id), tx = slen(e->transaction_id), rh = slen(e->recall_handle);
    size_t body = (e->status != NULL ? 1 + varint_size(ss) + ss : 0) + string_size(id) +
                  string_size(tx) + int_size(e->offset) + string_size(rh);
    if (out != NULL) {
        uint8_t *p = *out;
        *p++ = TAG(2, WT_LEN);
        p = put_varint(p, body);
        if (e->status != NULL)
            p = put_status(p, 1, e->status, sm, ss);
        p = put_string(p, 2, e->message_id, id);
        p = put_string(p, 3, e->transaction_id, tx);
        p = put_int(p, 4, e->offset);
        *out = put_string(p, 5, e->recall_handle, rh);
    }
    return body;
}

size_t
sendpack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                  Apache__Rocketmq__V2__SendResultEntry *const *entries, size_t n)
{
    size_t len = 0;
    uint8_t *p = out;
    if (st != NULL) {
        size_t sm = slen(st->message), ss = status_size(st, sm);
        len += 1 + varint_size(ss) + ss;
        if (p != NULL)
            p = put_status(p, 1, st, sm, ss);
    }
    for (size_t i = 0; i < n; i++) {
        if (entries[i] == NULL)
            continue;
        size_t body = entry(p != NULL ? &p : NULL, entries[i]);
        len += 1 + varint_size(body) + body;
    }
    return len;
}
