/* pbtest's own checks: pbt_compare must handle every message shape a
 * codec test may hand it.  A oneof's members share one place in the
 * struct (protobuf-c), so only the member set (its case field) may be
 * followed: PullMessageResponse's content holds Status, Message or an
 * int64 next_offset, and with next_offset set, following "status" read
 * the number as a pointer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/codec.h"
#include "pbtest.h"

/* protobuf-c itself as the "hand" decoder: the comparison is then always
 * the same, and what is under test is pbt_compare's walk. */
static ProtobufCMessage *
decode(ProtobufCAllocator *a, const uint8_t *p, size_t n)
{
    return protobuf_c_message_unpack(&apache__rocketmq__v2__pull_message_response__descriptor, a, n, p);
}

static const struct pbt_decoder PULL = { &apache__rocketmq__v2__pull_message_response__descriptor, decode };

/* next_offset (field 3, the oneof's scalar) set to a value that is no
 * address, then unknown fields. */
static void
oneof_scalar_set(void **state)
{
    (void)state;
    struct pbt_bytes b = { .n = 0 };
    pbt_put_varint(&b, (uint64_t)3 << 3 | 0);
    pbt_put_varint(&b, 0x4141414141414141ULL);
    pbt_put_unknown(&b);
    assert_int_equal(PBT_SAME, pbt_compare(&PULL, b.p, b.n));
}

/* status (field 1, the oneof's message) set, with unknown fields inside
 * it: those are still stripped (the member set is followed). */
static void
oneof_message_set(void **state)
{
    (void)state;
    struct pbt_bytes inner = { .n = 0 };
    pbt_put_varint(&inner, (uint64_t)1 << 3 | 0);   /* code */
    pbt_put_varint(&inner, 20000);
    pbt_put_unknown(&inner);
    struct pbt_bytes b = { .n = 0 };
    pbt_put_len(&b, 1, inner.p, inner.n);
    assert_int_equal(PBT_SAME, pbt_compare(&PULL, b.p, b.n));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oneof_scalar_set),
        cmocka_unit_test(oneof_message_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
