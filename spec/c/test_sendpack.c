/* sendpack: the hand-packed SendMessageResponse (src/grpc/sendpack.h)
 * must be byte for byte what protobuf-c packs from the same structures:
 * one entry and several, every field at its default and not, a negative
 * offset (ten bytes), long strings (two-byte lengths), no entries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/sendpack.h"
#include "pbtest.h"

typedef Apache__Rocketmq__V2__Status Status;
typedef Apache__Rocketmq__V2__SendResultEntry Entry;

struct response {
    Status *st;
    Entry **e;
    size_t n;
};

static size_t
pack(uint8_t *out, void *arg)
{
    struct response *r = arg;
    return sendpack_response(out, r->st, r->e, r->n);
}

static void
same_as_protobuf_c(Status *st, Entry **e, size_t n)
{
    Apache__Rocketmq__V2__SendMessageResponse rs = APACHE__ROCKETMQ__V2__SEND_MESSAGE_RESPONSE__INIT;
    rs.status = st;
    rs.n_entries = n;
    rs.entries = e;
    pbt_assert_packs_as(&rs.base, pack, &(struct response){ st, e, n });
}

static void
test_one_entry(void **state)
{
    (void)state;
    Status est = APACHE__ROCKETMQ__V2__STATUS__INIT, st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    est.code = APACHE__ROCKETMQ__V2__CODE__OK;
    est.message = "OK";
    st = est;
    Entry e = APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT;
    e.status = &est;
    e.message_id = "01C62F08AC8D395E3E683001DC3F7043EE";
    e.transaction_id = "7F000001000085B10000000000000000@0";
    e.offset = 12345678901;
    Entry *ep[1] = { &e };
    same_as_protobuf_c(&st, ep, 1);
    e.offset = 0;               /* at its default: not written */
    e.transaction_id = "";
    e.recall_handle = NULL;
    same_as_protobuf_c(&st, ep, 1);
    e.offset = -1;              /* ten bytes */
    e.recall_handle = "handle";
    same_as_protobuf_c(&st, ep, 1);
    e.status = NULL;
    same_as_protobuf_c(&st, ep, 1);
}

static void
test_many_and_none(void **state)
{
    (void)state;
    char big[400];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    Status st = APACHE__ROCKETMQ__V2__STATUS__INIT, a = APACHE__ROCKETMQ__V2__STATUS__INIT,
           b = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = APACHE__ROCKETMQ__V2__CODE__MULTIPLE_RESULTS;
    st.message = "messages have different results";
    a.code = APACHE__ROCKETMQ__V2__CODE__OK;
    a.message = "OK";
    b.code = APACHE__ROCKETMQ__V2__CODE__MESSAGE_BODY_TOO_LARGE;
    b.message = big;            /* a two-byte length */
    Entry e[3] = { APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT, APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT,
                   APACHE__ROCKETMQ__V2__SEND_RESULT_ENTRY__INIT };
    e[0].status = &a;
    e[0].message_id = "m0";
    e[0].offset = 1;
    e[1].status = &b;
    e[1].message_id = big;
    e[2].status = &a;
    e[2].offset = 300;
    Entry *ep[3] = { &e[0], &e[1], &e[2] };
    same_as_protobuf_c(&st, ep, 3);
    st.code = APACHE__ROCKETMQ__V2__CODE__BAD_REQUEST;
    st.message = "no message to send";
    same_as_protobuf_c(&st, NULL, 0);
    Status empty = APACHE__ROCKETMQ__V2__STATUS__INIT;
    same_as_protobuf_c(&empty, NULL, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_entry),
        cmocka_unit_test(test_many_and_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
