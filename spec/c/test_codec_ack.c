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
#include "pbtest.h"

typedef Apache__Rocketmq__V2__AckMessageRequest Request;

/* The hand decoder against protobuf-c's. */
static ProtobufCMessage *
decode(ProtobufCAllocator *a, const uint8_t *p, size_t n)
{
    Request *r = codec_ack_request(a, p, n);
    return r != NULL ? &r->base : NULL;
}

static const struct pbt_decoder ACK = { &apache__rocketmq__v2__ack_message_request__descriptor, decode };

static enum pbt_outcome
compare(const uint8_t *p, size_t n)
{
    return pbt_compare(&ACK, p, n);
}

/* {{{ The SDKs' shape */
static struct pbt_bytes b;

static void
sdk_request(struct pbt_bytes *out, size_t n)
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
    pbt_put_packed(out, &rq.base);
}
/* }}} */

static void
test_sdk_shape(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 32; n += 8) {
        sdk_request(&b, n);
        assert_int_equal(PBT_SAME, compare(b.p, b.n));
    }
    pbt_put_unknown(&b);
    assert_int_equal(PBT_SAME, compare(b.p, b.n));
}

static void
test_repeats_and_refusals(void **state)
{
    (void)state;
    sdk_request(&b, 2);
    /* An entry whose receipt_handle is given twice: the last wins. */
    struct pbt_bytes sub = { .n = 0 };
    pbt_put_len(&sub, 1, "id", 2);
    pbt_put_len(&sub, 2, "first", 5);
    pbt_put_len(&sub, 2, "second", 6);
    pbt_put_len(&b, 3, sub.p, sub.n);
    assert_int_equal(PBT_SAME, compare(b.p, b.n));
    /* The group given twice: protobuf merges, left to it. */
    sdk_request(&b, 1);
    pbt_put_len(&b, 1, "\x12\x01x", 3);
    assert_int_equal(PBT_LEFT_TO_PROTOBUF_C, compare(b.p, b.n));
    /* A handle that is not UTF-8: left to protobuf-c (and the service's check). */
    sdk_request(&b, 0);
    sub.n = 0;
    pbt_put_len(&sub, 2, "\xff\xfe", 2);
    pbt_put_len(&b, 3, sub.p, sub.n);
    assert_int_equal(PBT_LEFT_TO_PROTOBUF_C, compare(b.p, b.n));
    /* Truncated: both refuse. */
    sdk_request(&b, 1);
    b.n -= 3;
    assert_int_equal(PBT_BOTH_REFUSE, compare(b.p, b.n));
}

static void
test_mutations(void **state)
{
    (void)state;
    static struct pbt_bytes orig;
    sdk_request(&orig, 3);
    size_t counts[3] = { 0, 0, 0 };
    pbt_mutations(&ACK, &orig, 30000, counts);
    assert_true(counts[PBT_SAME] > 1000);
    assert_true(counts[PBT_BOTH_REFUSE] > 1000);
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
