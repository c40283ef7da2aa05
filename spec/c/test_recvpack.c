/* recvpack: the hand-packed ReceiveMessageResponse{message} (src/grpc/
 * recvpack.h) must be byte for byte what protobuf-c packs from the same
 * structures: a received message as service.c builds it, every field at
 * its default and not, negative numbers (ten bytes), fields past 15 (two-
 * byte tags), repeated keys with an empty one, properties with an empty
 * key or value, bodies needing one to three length bytes, no body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/recvpack.h"
#include "pbtest.h"

typedef Apache__Rocketmq__V2__Message Msg;
typedef Apache__Rocketmq__V2__SystemProperties Sp;
typedef Apache__Rocketmq__V2__Message__UserPropertiesEntry Ent;

struct received {
    Msg *m;
    struct recvpack_sizes z;   /* recvpack_size's, for recvpack_write */
};

static size_t
pack_received(uint8_t *out, void *arg)
{
    struct received *r = arg;
    return out == NULL ? recvpack_size(r->m, &r->z) : recvpack_write(out, r->m, &r->z);
}

static void
same_as_protobuf_c(Msg *m)
{
    Apache__Rocketmq__V2__ReceiveMessageResponse rs = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    rs.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_MESSAGE;
    rs.message = m;
    pbt_assert_packs_as(&rs.base, pack_received, &(struct received){ .m = m });
}

/* A message as service.c's receive builds one. */
struct fixture {
    Msg m;
    Sp sp;
    Apache__Rocketmq__V2__Resource topic;
    Apache__Rocketmq__V2__Digest dg;
    Google__Protobuf__Timestamp born, store;
    Google__Protobuf__Duration inv;
    Ent ents[3];
    Ent *ep[3];
    char *keys[3];
    uint8_t body[70000];
};

static struct fixture *
fixture_new(void)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    Msg m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    Sp sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Resource r = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    Apache__Rocketmq__V2__Digest dg = APACHE__ROCKETMQ__V2__DIGEST__INIT;
    Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
    f->m = m;
    f->sp = sp;
    f->topic = r;
    f->dg = dg;
    f->born = ts;
    f->store = ts;
    f->inv = d;
    for (int i = 0; i < 3; i++) {
        Ent e = APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT;
        f->ents[i] = e;
        f->ep[i] = &f->ents[i];
    }
    f->topic.name = "TopicTest";
    f->dg.type = APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32;
    f->dg.checksum = "6F8DB599";
    f->born.seconds = 1764930000;
    f->born.nanos = 123000000;
    f->store.seconds = 1764930001;
    f->store.nanos = 0;
    f->inv.seconds = 30;
    f->sp.tag = "TagA";
    f->sp.message_id = "01C62F08AC8D395E3E683001DC3F7043EE";
    f->sp.body_digest = &f->dg;
    f->sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    f->sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    f->sp.born_timestamp = &f->born;
    f->sp.born_host = "127.0.0.1";
    f->sp.store_timestamp = &f->store;
    f->sp.receipt_handle = "0 1764930002000 30000 0 0 broker-a 3 17 123456";
    f->sp.queue_id = 3;
    f->sp.queue_offset = 17;
    f->sp.invisible_duration = &f->inv;
    f->sp.delivery_attempt = 1;
    f->sp.message_group = "";
    f->ents[0].key = "k1";
    f->ents[0].value = "v1";
    f->m.topic = &f->topic;
    f->m.system_properties = &f->sp;
    f->m.n_user_properties = 1;
    f->m.user_properties = f->ep;
    memset(f->body, 'a', sizeof(f->body));
    f->m.body.data = f->body;
    f->m.body.len = 1024;
    return f;
}

static void
test_received(void **state)
{
    (void)state;
    struct fixture *f = fixture_new();
    same_as_protobuf_c(&f->m);
    f->keys[0] = "key1";
    f->keys[1] = "";
    f->keys[2] = "key3";
    f->sp.keys = f->keys;
    f->sp.n_keys = 3;
    f->sp.message_group = "group-1";
    f->sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO;
    f->sp.delivery_attempt = 17;   /* field 16: a two-byte tag */
    same_as_protobuf_c(&f->m);
    free(f);
}

static void
test_defaults_and_negatives(void **state)
{
    (void)state;
    struct fixture *f = fixture_new();
    f->sp.queue_id = 0;
    f->sp.queue_offset = 0;
    f->sp.tag = "";
    f->sp.message_id = NULL;
    f->sp.born_host = "";
    f->store.seconds = 0;        /* an empty Timestamp is still written */
    f->born.seconds = -5;
    f->born.nanos = -1;
    f->sp.delivery_attempt = -2;
    f->sp.body_encoding = 0;
    f->m.n_user_properties = 0;
    same_as_protobuf_c(&f->m);
    f->sp.body_digest = NULL;
    f->sp.born_timestamp = NULL;
    f->sp.invisible_duration = NULL;
    f->m.body.len = 0;
    same_as_protobuf_c(&f->m);
    f->m.system_properties = NULL;
    f->m.topic = NULL;
    same_as_protobuf_c(&f->m);
    free(f);
}

static void
test_properties(void **state)
{
    (void)state;
    struct fixture *f = fixture_new();
    f->ents[0].key = "";
    f->ents[0].value = "only-a-value";
    f->ents[1].key = "only-a-key";
    f->ents[1].value = "";
    f->ents[2].key = "k";
    f->ents[2].value = "v";
    f->m.n_user_properties = 3;
    same_as_protobuf_c(&f->m);
    free(f);
}

static void
test_every_field_and_sizes(void **state)
{
    (void)state;
    struct fixture *f = fixture_new();
    Google__Protobuf__Timestamp dt = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Duration od = GOOGLE__PROTOBUF__DURATION__INIT;
    Apache__Rocketmq__V2__DeadLetterQueue dlq = APACHE__ROCKETMQ__V2__DEAD_LETTER_QUEUE__INIT;
    dt.seconds = 1764930005;
    od.seconds = 5;
    od.nanos = 500000000;
    dlq.topic = "%DLQ%g";
    dlq.message_id = "ABC";
    f->topic.resource_namespace = "ns";
    f->sp.store_host = "10.0.0.1:10911";
    f->sp.delivery_timestamp = &dt;
    f->sp.trace_context = "trace";
    f->sp.orphaned_transaction_recovery_duration = &od;
    f->sp.dead_letter_queue = &dlq;
    f->sp.lite_topic = "lite";
    f->sp.priority = 9;
    f->sp.queue_offset = -1;
    same_as_protobuf_c(&f->m);
    static const size_t lens[] = { 1, 127, 128, 16383, 16384, 70000 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        f->m.body.len = lens[i];
        same_as_protobuf_c(&f->m);
    }
    free(f);
}

struct ack {
    Apache__Rocketmq__V2__Status *st;
    Apache__Rocketmq__V2__AckMessageResultEntry **e;
    size_t n;
};

static size_t
pack_ack(uint8_t *out, void *arg)
{
    struct ack *a = arg;
    return recvpack_ack_response(out, a->st, a->e, a->n);
}

static void
same_ack_as_protobuf_c(Apache__Rocketmq__V2__Status *st, Apache__Rocketmq__V2__AckMessageResultEntry **e, size_t n)
{
    Apache__Rocketmq__V2__AckMessageResponse rs = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESPONSE__INIT;
    rs.status = st;
    rs.n_entries = n;
    rs.entries = e;
    pbt_assert_packs_as(&rs.base, pack_ack, &(struct ack){ st, e, n });
}

static void
test_ack_response(void **state)
{
    (void)state;
    Apache__Rocketmq__V2__Status ok = APACHE__ROCKETMQ__V2__STATUS__INIT, bad = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__Status st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    ok.code = APACHE__ROCKETMQ__V2__CODE__OK;
    ok.message = "OK";
    bad.code = APACHE__ROCKETMQ__V2__CODE__INVALID_RECEIPT_HANDLE;
    char long_msg[300];
    memset(long_msg, 'x', sizeof(long_msg) - 1);
    long_msg[sizeof(long_msg) - 1] = '\0';
    bad.message = long_msg;          /* a two-byte length */
    Apache__Rocketmq__V2__AckMessageResultEntry es[40], *ep[40];
    for (int i = 0; i < 40; i++) {
        Apache__Rocketmq__V2__AckMessageResultEntry e = APACHE__ROCKETMQ__V2__ACK_MESSAGE_RESULT_ENTRY__INIT;
        es[i] = e;
        es[i].message_id = i % 5 == 0 ? "" : "01C62F08AC8D395E3E683001DC3F7043EE";
        es[i].receipt_handle = i % 7 == 0 ? NULL : "0 1764930002000 30000 0 0 broker-a 3 17 123456";
        es[i].status = i % 3 == 0 ? &bad : i % 11 == 0 ? NULL : &ok;
        ep[i] = &es[i];
    }
    st = ok;
    same_ack_as_protobuf_c(&st, ep, 40);
    st.code = APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS;
    st.message = "acks have different results";
    same_ack_as_protobuf_c(&st, ep, 1);
    same_ack_as_protobuf_c(&st, ep, 0);
    same_ack_as_protobuf_c(NULL, ep, 3);
    st.code = 0;                     /* at its default: an empty Status */
    st.message = "";
    same_ack_as_protobuf_c(&st, ep, 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_received),
        cmocka_unit_test(test_defaults_and_negatives),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_every_field_and_sizes),
        cmocka_unit_test(test_ack_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
