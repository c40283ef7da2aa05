/*
 * codec: see codec.h.
 *
 * Each message is read field by field with next(), which takes only the
 * forms protobuf-c reads the same way (a tag in at most four bytes, a
 * varint in at most ten, a length in at most five and at most INT_MAX);
 * anything else is "leave it to protobuf-c" (NULL up the chain).  Each
 * message is read once; a repeated field's array grows by doubling in the
 * arena (protobuf-c counts first, in a scan of its own).  Scalars
 * given twice take the last value, repeated fields append, as protobuf
 * says; a message field given twice would be merged: left to protobuf-c.
 */
#include "grpc/codec.h"

#include <limits.h>
#include <string.h>

#include "grpc/pbcheck.h"

typedef Apache__Rocketmq__V2__SendMessageRequest Request;
typedef Apache__Rocketmq__V2__Message Message;
typedef Apache__Rocketmq__V2__Message__UserPropertiesEntry Entry;
typedef Apache__Rocketmq__V2__SystemProperties SysProps;
typedef Apache__Rocketmq__V2__Resource Resource;
typedef Apache__Rocketmq__V2__Digest Digest;
typedef Google__Protobuf__Timestamp Timestamp;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

struct field {
    uint32_t num;
    uint32_t wt;
    uint64_t v;                  /* WT_VARINT's value */
    const uint8_t *p;            /* WT_LEN's bytes */
    size_t len;
};

/* The field at *pp (before end) into f, *pp moved past it.  1: a field,
 * 0: the end, -1: a form left to protobuf-c. */
static inline int
next(const uint8_t **pp, const uint8_t *end, struct field *f)
{
    const uint8_t *p = *pp;
    if (p == end)
        return 0;
    uint32_t tag;
    if (*p < 0x80) {
        tag = *p++;   /* fields 1 to 15: one byte */
    } else {
        tag = 0;
        for (unsigned i = 0;; i++) {
            if (p == end || i == 4)
                return -1;
            uint8_t b = *p++;
            tag |= (uint32_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80))
                break;
        }
    }
    f->num = tag >> 3;
    f->wt = tag & 7;
    if (f->num == 0)
        return -1;
    switch (f->wt) {
    case WT_VARINT: {
        if (p < end && *p < 0x80) {
            f->v = *p++;
            break;
        }
        uint64_t v = 0;
        for (unsigned i = 0;; i++) {
            if (p == end || i == 10)
                return -1;
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80))
                break;
        }
        f->v = v;
        break;
    }
    case WT_I64:
        if (end - p < 8)
            return -1;
        p += 8;
        break;
    case WT_I32:
        if (end - p < 4)
            return -1;
        p += 4;
        break;
    case WT_LEN: {
        uint64_t len = 0;
        if (p < end && *p < 0x80)
            len = *p++;
        else for (unsigned i = 0;; i++) {
            if (p == end || i == 5)
                return -1;
            uint8_t b = *p++;
            len |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80))
                break;
        }
        if (len > INT_MAX || len > (uint64_t)(end - p))
            return -1;
        f->p = p;
        f->len = (size_t)len;
        p += len;
        break;
    }
    default:
        return -1;   /* groups (3, 4) and the undefined 6, 7 */
    }
    *pp = p;
    return 1;
}

static void *
alloc(ProtobufCAllocator *a, size_t n)
{
    return a->alloc(a->allocator_data, n);
}

/* proto3 strings are UTF-8 (pbcheck.h).  Checked here as they are
 * copied, ASCII 8 bytes at a time, so that the service need not walk the
 * decoded message again (pbcheck_utf8 was 1,000 instructions of a 1 KiB
 * send); a string that is not is left to protobuf-c, whose answer the
 * service checks and refuses naming the field. */
static bool
utf8_ok(const uint8_t *p, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= p[i];
    return (acc & 0x8080808080808080ull) == 0 || pbcheck_utf8_bytes(p, n);
}

/* A string field's value, NUL-terminated as protobuf-c gives it; NULL
 * when out of memory or not UTF-8. */
static char *
str(ProtobufCAllocator *a, const struct field *f)
{
    if (!utf8_ok(f->p, f->len))
        return NULL;
    char *s = alloc(a, f->len + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, f->p, f->len);
    s[f->len] = '\0';
    return s;
}

/* Array v (n elements of elem bytes, room for *cap) with room for one
 * more: grown by doubling in the arena (the old one is the arena's to
 * free).  NULL when out of memory. */
static void *
grow(ProtobufCAllocator *a, void *v, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return v;
    size_t c = *cap ? *cap * 2 : 4;
    void *nv = alloc(a, c * elem);
    if (nv == NULL)
        return NULL;
    if (n > 0)
        memcpy(nv, v, n * elem);
    *cap = c;
    return nv;
}

/* A message field read by protobuf-c itself (those no SDK sends with a
 * message: durations, the dead letter queue). */
static void *
generic(ProtobufCAllocator *a, const ProtobufCMessageDescriptor *d, const struct field *f)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, a, f->len, f->p);
    char why[64];
    return m != NULL && pbcheck_utf8(m, why, sizeof(why)) ? m : NULL;   /* as str() */
}

/* Field f must have wire type wt, a message field be given once (bit
 * num of *seen): else NULL from the caller. */
#define WANT(wt_) do { if (f.wt != (wt_)) return NULL; } while (0)
#define ONCE() do { if (*seen & ((uint64_t)1 << f.num)) return NULL; *seen |= (uint64_t)1 << f.num; } while (0)
#define STR(dst) do { WANT(WT_LEN); if (((dst) = str(a, &f)) == NULL) return NULL; } while (0)
#define SUB(dst, expr) do { WANT(WT_LEN); ONCE(); if (((dst) = (expr)) == NULL) return NULL; } while (0)

static Timestamp *
timestamp(ProtobufCAllocator *a, const struct field *in)
{
    Timestamp *t = alloc(a, sizeof(*t));
    if (t == NULL)
        return NULL;
    google__protobuf__timestamp__init(t);
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num == 1) {
            WANT(WT_VARINT);
            t->seconds = (int64_t)f.v;
        } else if (f.num == 2) {
            WANT(WT_VARINT);
            t->nanos = (int32_t)(uint32_t)f.v;
        }
    }
    return rc < 0 ? NULL : t;
}

static Digest *
digest(ProtobufCAllocator *a, const struct field *in)
{
    Digest *d = alloc(a, sizeof(*d));
    if (d == NULL)
        return NULL;
    apache__rocketmq__v2__digest__init(d);
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num == 1) {
            WANT(WT_VARINT);
            d->type = (Apache__Rocketmq__V2__DigestType)(int32_t)(uint32_t)f.v;
        } else if (f.num == 2) {
            STR(d->checksum);
        }
    }
    return rc < 0 ? NULL : d;
}

static Resource *
resource(ProtobufCAllocator *a, const struct field *in)
{
    Resource *r = alloc(a, sizeof(*r));
    if (r == NULL)
        return NULL;
    apache__rocketmq__v2__resource__init(r);
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num == 1)
            STR(r->resource_namespace);
        else if (f.num == 2)
            STR(r->name);
    }
    return rc < 0 ? NULL : r;
}

static Entry *
entry(ProtobufCAllocator *a, const struct field *in)
{
    Entry *e = alloc(a, sizeof(*e));
    if (e == NULL)
        return NULL;
    apache__rocketmq__v2__message__user_properties_entry__init(e);
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num == 1)
            STR(e->key);
        else if (f.num == 2)
            STR(e->value);
    }
    return rc < 0 ? NULL : e;
}

static SysProps *
sysprops(ProtobufCAllocator *a, const struct field *in)
{
    SysProps *s = alloc(a, sizeof(*s));
    if (s == NULL)
        return NULL;
    apache__rocketmq__v2__system_properties__init(s);
    size_t cap = 0;
    uint64_t seen0 = 0, *seen = &seen0;
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        switch (f.num) {
        case 1: STR(s->tag); break;
        case 2:
            if ((s->keys = grow(a, s->keys, s->n_keys, &cap, sizeof(*s->keys))) == NULL)
                return NULL;
            STR(s->keys[s->n_keys]);
            s->n_keys++;
            break;
        case 3: STR(s->message_id); break;
        case 4: SUB(s->body_digest, digest(a, &f)); break;
        case 5: WANT(WT_VARINT); s->body_encoding = (Apache__Rocketmq__V2__Encoding)(int32_t)(uint32_t)f.v; break;
        case 6: WANT(WT_VARINT); s->message_type = (Apache__Rocketmq__V2__MessageType)(int32_t)(uint32_t)f.v; break;
        case 7: SUB(s->born_timestamp, timestamp(a, &f)); break;
        case 8: STR(s->born_host); break;
        case 9: SUB(s->store_timestamp, timestamp(a, &f)); break;
        case 10: STR(s->store_host); break;
        case 11: SUB(s->delivery_timestamp, timestamp(a, &f)); break;
        case 12: STR(s->receipt_handle); break;
        case 13: WANT(WT_VARINT); s->queue_id = (int32_t)(uint32_t)f.v; break;
        case 14: WANT(WT_VARINT); s->queue_offset = (int64_t)f.v; break;
        case 15: SUB(s->invisible_duration, generic(a, &google__protobuf__duration__descriptor, &f)); break;
        case 16: WANT(WT_VARINT); s->delivery_attempt = (int32_t)(uint32_t)f.v; break;
        case 17: STR(s->message_group); break;
        case 18: STR(s->trace_context); break;
        case 19:
            SUB(s->orphaned_transaction_recovery_duration,
                generic(a, &google__protobuf__duration__descriptor, &f));
            break;
        case 20:
            SUB(s->dead_letter_queue, generic(a, &apache__rocketmq__v2__dead_letter_queue__descriptor, &f));
            break;
        case 21: STR(s->lite_topic); break;
        case 22: WANT(WT_VARINT); s->priority = (int32_t)(uint32_t)f.v; break;
        default: break;   /* unknown: skipped */
        }
    }
    return rc < 0 ? NULL : s;
}

static Message *
message(ProtobufCAllocator *a, const struct field *in)
{
    Message *m = alloc(a, sizeof(*m));
    if (m == NULL)
        return NULL;
    apache__rocketmq__v2__message__init(m);
    size_t cap = 0;
    uint64_t seen0 = 0, *seen = &seen0;
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        switch (f.num) {
        case 1: SUB(m->topic, resource(a, &f)); break;
        case 2:
            WANT(WT_LEN);
            if ((m->user_properties = grow(a, m->user_properties, m->n_user_properties, &cap,
                                           sizeof(*m->user_properties))) == NULL ||
                (m->user_properties[m->n_user_properties] = entry(a, &f)) == NULL)
                return NULL;
            m->n_user_properties++;
            break;
        case 3: SUB(m->system_properties, sysprops(a, &f)); break;
        case 4:
            /* Not copied (codec.h); protobuf-c leaves an empty one NULL. */
            WANT(WT_LEN);
            m->body.data = f.len > 0 ? (uint8_t *)f.p : NULL;
            m->body.len = f.len;
            break;
        default: break;
        }
    }
    return rc < 0 ? NULL : m;
}

Request *
codec_send_request(ProtobufCAllocator *a, const uint8_t *p, size_t n)
{
    if (n > INT_MAX)
        return NULL;
    Request *rq = alloc(a, sizeof(*rq));
    if (rq == NULL)
        return NULL;
    apache__rocketmq__v2__send_message_request__init(rq);
    size_t cap = 0;
    const uint8_t *end = p + n;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num != 1)
            continue;
        WANT(WT_LEN);
        if ((rq->messages = grow(a, rq->messages, rq->n_messages, &cap, sizeof(*rq->messages))) == NULL ||
            (rq->messages[rq->n_messages] = message(a, &f)) == NULL)
            return NULL;
        rq->n_messages++;
    }
    return rc < 0 ? NULL : rq;
}

typedef Apache__Rocketmq__V2__AckMessageRequest AckRequest;
typedef Apache__Rocketmq__V2__AckMessageEntry AckEntry;

static AckEntry *
ack_entry(ProtobufCAllocator *a, const struct field *in)
{
    AckEntry *e = alloc(a, sizeof(*e));
    if (e == NULL)
        return NULL;
    apache__rocketmq__v2__ack_message_entry__init(e);
    const uint8_t *p = in->p, *end = in->p + in->len;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        if (f.num == 1)
            STR(e->message_id);
        else if (f.num == 2)
            STR(e->receipt_handle);
        else if (f.num == 3)
            STR(e->lite_topic);
    }
    return rc < 0 ? NULL : e;
}

AckRequest *
codec_ack_request(ProtobufCAllocator *a, const uint8_t *p, size_t n)
{
    if (n > INT_MAX)
        return NULL;
    AckRequest *rq = alloc(a, sizeof(*rq));
    if (rq == NULL)
        return NULL;
    apache__rocketmq__v2__ack_message_request__init(rq);
    size_t cap = 0;
    uint64_t seen0 = 0, *seen = &seen0;
    const uint8_t *end = p + n;
    struct field f;
    int rc;
    while ((rc = next(&p, end, &f)) == 1) {
        switch (f.num) {
        case 1: SUB(rq->group, resource(a, &f)); break;
        case 2: SUB(rq->topic, resource(a, &f)); break;
        case 3:
            WANT(WT_LEN);
            if ((rq->entries = grow(a, rq->entries, rq->n_entries, &cap, sizeof(*rq->entries))) == NULL ||
                (rq->entries[rq->n_entries] = ack_entry(a, &f)) == NULL)
                return NULL;
            rq->n_entries++;
            break;
        default: break;
        }
    }
    return rc < 0 ? NULL : rq;
}
