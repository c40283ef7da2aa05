/* codec_ack_request: the hand-decoded AckMessageRequest (src/grpc/codec.h)
 * must be what protobuf-c decodes from the same bytes, or left to it
 * (NULL), never accept what protobuf-c refuses: the SDKs' shape (32
 * entries), unknown fields, a string given twice (the last wins), a
 * Resource given twice (left to protobuf-c), a string that is not UTF-8,
 * and 30,000 random mutations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/codec.h"
#include "grpc/pbcheck.h"

typedef Apache__Rocketmq__V2__AckMessageRequest Request;

/* {{{ An arena allocator: everything freed at once (as the service's). */
struct block {
    struct block *next;
    max_align_t data[];
};
static struct block *blocks;

static void *
arena_alloc(void *data, size_t n)
{
    (void)data;
    struct block *b = malloc(sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    b->next = blocks;
    blocks = b;
    return b->data;
}

static void
arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

static void
arena_reset(void)
{
    while (blocks != NULL) {
        struct block *b = blocks;
        blocks = b->next;
        free(b);
    }
}

static ProtobufCAllocator arena = { arena_alloc, arena_free, NULL };
/* }}} */

/* {{{ Bytes built by hand */
struct bytes {
    uint8_t p[65536];
    size_t n;
};

static void
put_varint(struct bytes *b, uint64_t v)
{
    while (v >= 0x80) {
        b->p[b->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->p[b->n++] = (uint8_t)v;
}

static void
put_raw(struct bytes *b, const void *p, size_t n)
{
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void
put_len(struct bytes *b, uint32_t num, const void *p, size_t n)
{
    put_varint(b, (uint64_t)num << 3 | 2);
    put_varint(b, n);
    put_raw(b, p, n);
}

static void
put_packed(struct bytes *b, const ProtobufCMessage *m)
{
    b->n += protobuf_c_message_pack(m, b->p + b->n);
}

/* Unknown fields of every wire type protobuf-c keeps. */
static void
put_unknown(struct bytes *b)
{
    put_varint(b, (uint64_t)99 << 3 | 0);
    put_varint(b, 123456789012345ULL);
    put_len(b, 100, "future", 6);
    put_varint(b, (uint64_t)101 << 3 | 5);
    put_raw(b, "abcd", 4);
    put_varint(b, (uint64_t)102 << 3 | 1);
    put_raw(b, "abcdefgh", 8);
    put_varint(b, (uint64_t)1000000 << 3 | 0);   /* a four-byte tag */
    put_varint(b, 1);
}
/* }}} */

/* {{{ The comparison */
static void
strip_unknown(ProtobufCMessage *m)
{
    m->n_unknown_fields = 0;
    m->unknown_fields = NULL;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        char *at = (char *)m + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)((char *)m + fd->quantifier_offset);
            ProtobufCMessage **v = *(ProtobufCMessage ***)at;
            for (size_t j = 0; j < n; j++)
                strip_unknown(v[j]);
        } else if (*(ProtobufCMessage **)at != NULL) {
            strip_unknown(*(ProtobufCMessage **)at);
        }
    }
}

enum outcome { SAME, LEFT_TO_PROTOBUF_C, BOTH_REFUSE };

static enum outcome
compare(const uint8_t *p, size_t n)
{
    Request *want = (Request *)protobuf_c_message_unpack(&apache__rocketmq__v2__ack_message_request__descriptor,
                                                         &arena, n, p);
    Request *got = codec_ack_request(&arena, p, n);
    enum outcome o;
    if (want == NULL) {
        assert_null(got);   /* never accepts what protobuf-c refuses */
        o = BOTH_REFUSE;
    } else if (got == NULL) {
        o = LEFT_TO_PROTOBUF_C;
    } else {
        /* What it takes has UTF-8 strings only (the service relies on it). */
        char why[128];
        assert_true(pbcheck_utf8(&got->base, why, sizeof(why)));
        strip_unknown(&want->base);
        strip_unknown(&got->base);   /* the fields protobuf-c read for it */
        size_t wn = protobuf_c_message_get_packed_size(&want->base);
        size_t gn = protobuf_c_message_get_packed_size(&got->base);
        uint8_t *wb = malloc(wn + 1), *gb = malloc(gn + 1);
        assert_non_null(wb);
        assert_non_null(gb);
        protobuf_c_message_pack(&want->base, wb);
        protobuf_c_message_pack(&got->base, gb);
        assert_int_equal(wn, gn);
        assert_memory_equal(wb, gb, wn);
        free(wb);
        free(gb);
        o = SAME;
    }
    arena_reset();
    return o;
}
/* }}} */

/* {{{ The SDKs' shape */
static struct bytes b;

static void
sdk_request(struct bytes *out, size_t n)
{
    Apache__Rocketmq__V2__Resource g = APACHE__ROCKETMQ__V2__RESOURCE__INIT, t = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    g.name = "GID_group";
    t.name = "TopicTest";
    t.resource_namespace = "";
    Apache__Rocketmq__V2__AckMessageEntry es[32], *ep[32];
    for (size_t i = 0; i < n; i++) {
        Apache__Rocketmq__V2__AckMessageEntry e = APACHE__ROCKETMQ__V2__ACK_MESSAGE_ENTRY__INIT;
        es[i] = e;
        es[i].message_id = "01C62F08AC8D395E3E683001DC3F7043EE";
        es[i].receipt_handle = "0 1764930002000 30000 0 0 broker-a 3 17 123456";
        ep[i] = &es[i];
    }
    Request rq = APACHE__ROCKETMQ__V2__ACK_MESSAGE_REQUEST__INIT;
    rq.group = &g;
    rq.topic = &t;
    rq.n_entries = n;
    rq.entries = ep;
    out->n = 0;
    put_packed(out, &rq.base);
}
/* }}} */

static void
test_sdk_shape(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 32; n += 8) {
        sdk_request(&b, n);
        assert_int_equal(SAME, compare(b.p, b.n));
    }
    put_unknown(&b);
    assert_int_equal(SAME, compare(b.p, b.n));
}

static void
test_repeats_and_refusals(void **state)
{
    (void)state;
    sdk_request(&b, 2);
    /* An entry whose receipt_handle is given twice: the last wins. */
    struct bytes sub = { .n = 0 };
    put_len(&sub, 1, "id", 2);
    put_len(&sub, 2, "first", 5);
    put_len(&sub, 2, "second", 6);
    put_len(&b, 3, sub.p, sub.n);
    assert_int_equal(SAME, compare(b.p, b.n));
    /* The group given twice: protobuf merges, left to it. */
    sdk_request(&b, 1);
    put_len(&b, 1, "\x12\x01x", 3);
    assert_int_equal(LEFT_TO_PROTOBUF_C, compare(b.p, b.n));
    /* A handle that is not UTF-8: left to protobuf-c (and the service's check). */
    sdk_request(&b, 0);
    sub.n = 0;
    put_len(&sub, 2, "\xff\xfe", 2);
    put_len(&b, 3, sub.p, sub.n);
    assert_int_equal(LEFT_TO_PROTOBUF_C, compare(b.p, b.n));
    /* Truncated: both refuse. */
    sdk_request(&b, 1);
    b.n -= 3;
    assert_int_equal(BOTH_REFUSE, compare(b.p, b.n));
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void
test_mutations(void **state)
{
    (void)state;
    static struct bytes orig;
    sdk_request(&orig, 3);
    size_t counts[3] = { 0, 0, 0 };
    for (int i = 0; i < 30000; i++) {
        memcpy(b.p, orig.p, orig.n);
        b.n = orig.n;
        int k = 1 + (int)(rnd() % 3);
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)(rnd() % b.n);
            switch (rnd() % 4) {
            case 0: b.p[at] = (uint8_t)rnd(); break;
            case 1: b.p[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
            case 2: b.n = at + 1; break;
            default:
                memmove(b.p + at + 1, b.p + at, b.n - at);
                b.p[at] = (uint8_t)rnd();
                b.n++;
            }
        }
        counts[compare(b.p, b.n)]++;
    }
    print_message("same %zu, left to protobuf-c %zu, both refuse %zu\n", counts[SAME],
                  counts[LEFT_TO_PROTOBUF_C], counts[BOTH_REFUSE]);
    assert_true(counts[SAME] > 1000);
    assert_true(counts[BOTH_REFUSE] > 1000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdk_shape),
        cmocka_unit_test(test_repeats_and_refusals),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
