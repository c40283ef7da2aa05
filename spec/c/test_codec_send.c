/* codec: the hand-decoded SendMessageRequest (src/grpc/codec.h) must be
 * what protobuf-c unpacks from the same bytes, compared by packing both
 * results again (unknown fields aside: the codec skips them): the shapes
 * the SDKs send (every field, a batch, none), unknown fields of each wire
 * type at each level, a scalar given twice (the last wins), negative
 * int32s (ten-byte varints), bytes that are not UTF-8; and where it
 * leaves the bytes to protobuf-c (a message field given twice, which
 * protobuf merges; malformed input) it must never accept what protobuf-c
 * refuses: 30,000 random mutations of a full request check that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/codec.h"
#include "pbtest.h"

typedef Apache__Rocketmq__V2__SendMessageRequest Request;
typedef Apache__Rocketmq__V2__Message Message;
typedef Apache__Rocketmq__V2__SystemProperties SysProps;

/* The hand decoder against protobuf-c's. */
static ProtobufCMessage *
decode(ProtobufCAllocator *a, const uint8_t *p, size_t n)
{
    Request *r = codec_send_request(a, p, n);
    return r != NULL ? &r->base : NULL;
}

static const struct pbt_decoder SEND = { &apache__rocketmq__v2__send_message_request__descriptor, decode };

static enum pbt_outcome
compare(const uint8_t *p, size_t n)
{
    return pbt_compare(&SEND, p, n);
}

/* {{{ The shapes the SDKs send */
static uint8_t body[1024];

static Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
static Google__Protobuf__Timestamp deliver = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
static Google__Protobuf__Duration invisible = GOOGLE__PROTOBUF__DURATION__INIT;
static Apache__Rocketmq__V2__Digest dg = APACHE__ROCKETMQ__V2__DIGEST__INIT;
static Apache__Rocketmq__V2__DeadLetterQueue dlq = APACHE__ROCKETMQ__V2__DEAD_LETTER_QUEUE__INIT;
static Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
static Apache__Rocketmq__V2__Message__UserPropertiesEntry up[2] = {
    APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT,
    APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT,
};
static Apache__Rocketmq__V2__Message__UserPropertiesEntry *upp[2] = { &up[0], &up[1] };
static char *keys[2] = { "key-1", "key-2" };

/* Every field of a message set (as a FIFO + delay message with all the
 * rest would have them). */
static void
full_message(Message *m, SysProps *sp)
{
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 7);
    born.seconds = 1764892800;
    born.nanos = 123000000;
    deliver.seconds = 1764892860;
    invisible.seconds = 30;
    dg.type = APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32;
    dg.checksum = "1A2B3C4D";
    dlq.topic = "%DLQ%g";
    dlq.message_id = "m";
    topic.resource_namespace = "ns";
    topic.name = "BenchTopic";
    up[0].key = "color";
    up[0].value = "red";
    up[1].key = "size";
    up[1].value = "";
    apache__rocketmq__v2__system_properties__init(sp);
    sp->tag = "TagA";
    sp->n_keys = 2;
    sp->keys = keys;
    sp->message_id = "01C62F08AC8D395E3E683001DC3F7043EE";
    sp->body_digest = &dg;
    sp->body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp->message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO;
    sp->born_timestamp = &born;
    sp->born_host = "10.0.0.7";
    sp->store_timestamp = &born;
    sp->store_host = "10.0.0.8:10911";
    sp->delivery_timestamp = &deliver;
    sp->receipt_handle = "handle";
    sp->queue_id = -1;                 /* a ten-byte varint */
    sp->queue_offset = 1234567890123;
    sp->invisible_duration = &invisible;
    sp->delivery_attempt = 2;
    sp->message_group = "group-7";
    sp->trace_context = "00-abc-def-01";
    sp->orphaned_transaction_recovery_duration = &invisible;
    sp->dead_letter_queue = &dlq;
    sp->lite_topic = "lite";
    sp->priority = 3;
    apache__rocketmq__v2__message__init(m);
    m->topic = &topic;
    m->n_user_properties = 2;
    m->user_properties = upp;
    m->system_properties = sp;
    m->body.data = body;
    m->body.len = sizeof(body);
}

static size_t
pack_request(struct pbt_bytes *b, Message **ms, size_t n)
{
    Request rq = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT;
    rq.n_messages = n;
    rq.messages = ms;
    b->n = 0;
    pbt_put_packed(b, &rq.base);
    return b->n;
}
/* }}} */

static struct pbt_bytes b, sub, sub2;

static void
test_sdk_shapes(void **state)
{
    (void)state;
    Message m[3];
    SysProps sp[3];
    Message *ms[3] = { &m[0], &m[1], &m[2] };
    full_message(&m[0], &sp[0]);
    pack_request(&b, ms, 1);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);

    /* What the Java and Node SDKs send for a normal message. */
    apache__rocketmq__v2__system_properties__init(&sp[1]);
    sp[1].tag = "TagA";
    sp[1].message_id = "01C62F08AC8D395E3E683001DC3F7043EF";
    sp[1].body_digest = &dg;
    sp[1].body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp[1].message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    sp[1].born_timestamp = &born;
    sp[1].born_host = "host";
    apache__rocketmq__v2__message__init(&m[1]);
    m[1].topic = &topic;
    m[1].system_properties = &sp[1];
    m[1].body.data = body;
    m[1].body.len = 16;
    pack_request(&b, &ms[1], 1);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);

    /* Empty: no system properties, no body, no topic. */
    apache__rocketmq__v2__message__init(&m[2]);
    pack_request(&b, ms, 3);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);
    pack_request(&b, ms, 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);

    /* Bytes that are not UTF-8 in a string: protobuf-c takes them (the
     * service's pbcheck_utf8 then refuses), the hand decoder leaves them
     * to it; valid multi-byte UTF-8 it takes. */
    sp[1].tag = "\xff\xfe";
    pack_request(&b, &ms[1], 1);
    assert_int_equal(compare(b.p, b.n), PBT_LEFT_TO_PROTOBUF_C);
    sp[1].tag = "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
    pack_request(&b, &ms[1], 1);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);
}

static void
test_unknown_and_repeated_scalars(void **state)
{
    (void)state;
    Message m;
    SysProps sp;
    full_message(&m, &sp);
    /* SystemProperties with unknown fields, then a tag and a queue id
     * again: the last wins. */
    sub.n = 0;
    pbt_put_packed(&sub, &sp.base);
    pbt_put_unknown(&sub);
    pbt_put_len(&sub, 1, "TagB", 4);
    pbt_put_varint(&sub, 13 << 3 | 0);
    pbt_put_varint(&sub, 5);
    /* The Message around it: unknown fields, the body given twice. */
    m.system_properties = NULL;
    sub2.n = 0;
    pbt_put_packed(&sub2, &m.base);
    pbt_put_unknown(&sub2);
    pbt_put_len(&sub2, 3, sub.p, sub.n);
    pbt_put_len(&sub2, 4, "second body", 11);
    b.n = 0;
    pbt_put_unknown(&b);
    pbt_put_len(&b, 1, sub2.p, sub2.n);
    pbt_put_unknown(&b);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);
    /* A non-canonical tag (field 1 in two bytes) reads as protobuf-c
     * reads it. */
    b.n = 0;
    pbt_put_raw(&b, "\x8a\x00", 2);
    pbt_put_varint(&b, sub2.n);
    pbt_put_raw(&b, sub2.p, sub2.n);
    assert_int_equal(compare(b.p, b.n), PBT_SAME);
}

static void
test_left_to_protobuf_c(void **state)
{
    (void)state;
    Message m;
    SysProps sp;
    full_message(&m, &sp);
    m.system_properties = NULL;
    sub.n = 0;
    pbt_put_packed(&sub, &m.base);
    /* system_properties twice: protobuf merges them. */
    SysProps a = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT, c = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    a.tag = "A";
    c.message_id = "id";
    sub2.n = 0;
    pbt_put_packed(&sub2, &a.base);
    pbt_put_len(&sub, 3, sub2.p, sub2.n);
    sub2.n = 0;
    pbt_put_packed(&sub2, &c.base);
    pbt_put_len(&sub, 3, sub2.p, sub2.n);
    b.n = 0;
    pbt_put_len(&b, 1, sub.p, sub.n);
    assert_int_equal(compare(b.p, b.n), PBT_LEFT_TO_PROTOBUF_C);
    /* A group (wire type 3), a wrong wire type on a known field, a
     * truncated message: protobuf-c's answer, whatever it is. */
    b.n = 0;
    pbt_put_varint(&b, 7 << 3 | 3);
    assert_int_not_equal(compare(b.p, b.n), PBT_SAME);
    b.n = 0;
    pbt_put_varint(&b, 1 << 3 | 0);
    pbt_put_varint(&b, 1);
    assert_int_equal(compare(b.p, b.n), PBT_BOTH_REFUSE);
    b.n = 0;
    pbt_put_len(&b, 1, sub.p, sub.n);
    assert_int_equal(compare(b.p, b.n - 1), PBT_BOTH_REFUSE);
}

static void
test_mutations(void **state)
{
    (void)state;
    Message m[2];
    SysProps sp[2];
    Message *ms[2] = { &m[0], &m[1] };
    full_message(&m[0], &sp[0]);
    full_message(&m[1], &sp[1]);
    m[0].body.len = 40;    /* small bodies: the mutations land on fields */
    m[1].body.len = 3;
    static struct pbt_bytes orig;
    pack_request(&orig, ms, 2);
    size_t counts[3] = { 0, 0, 0 };
    pbt_mutations(&SEND, &orig, 30000, counts);
    /* Every outcome was exercised. */
    assert_true(counts[PBT_SAME] > 1000);
    assert_true(counts[PBT_BOTH_REFUSE] > 1000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdk_shapes),
        cmocka_unit_test(test_unknown_and_repeated_scalars),
        cmocka_unit_test(test_left_to_protobuf_c),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
