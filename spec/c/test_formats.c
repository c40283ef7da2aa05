/* The number and id formatters a send's reply is written with:
 * fjson_i64_digits (two digits a step) against printf, and clog_msgid
 * (16 bytes a step) against a byte-by-byte %02X, for IPv4 and IPv6
 * stores, on edge values and 200,000 random ones; and a pull reply's
 * header spelled in one pass (pull_reply_head) against rmq_cmd_encode's
 * for every get status and code, on edge and random numbers. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "broker/pull_processor.h"
#include "core/buf.h"
#include "core/fjson.h"
#include "net/codec.h"
#include "rmq_codes.h"
#include "store/access.h"
#include "store/commitlog.h"

static uint64_t
next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void
check_digits(int64_t v)
{
    char buf[32], want[32];
    char *e = buf + sizeof(buf);
    char *b = fjson_i64_digits(e, v);
    int n = snprintf(want, sizeof(want), "%" PRId64, v);
    assert_int_equal(e - b, n);
    assert_memory_equal(b, want, (size_t)n);
}

static void
digits_match_printf(void **state)
{
    (void)state;
    static const int64_t edge[] = {
        0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, -1, -9, -10, -99, -100, -101,
        INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, INT32_MAX, INT32_MIN,
        1234567890123LL, 10000000000000000LL,
    };
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        check_digits(edge[i]);
    uint64_t x = 88172645463325252ull;
    for (int t = 0; t < 200000; t++) {
        uint64_t r = next(&x);
        int64_t v = (int64_t)(r >> (r % 64));   /* every magnitude */
        check_digits((t & 1) ? -v : v);
    }
}

static void
msgid_matches_hex(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < 200000; t++) {
        struct host_addr h;
        memset(&h, 0, sizeof(h));
        h.len = (t & 1) ? 4 : 16;
        uint64_t r = next(&x);
        for (int i = 0; i < 16; i++)
            h.ip[i] = (uint8_t)(r >> (i * 4));
        h.port = (int32_t)(next(&x) >> 32);
        int64_t phy = (int64_t)(next(&x) >> (t % 64));
        uint8_t raw[28];
        memcpy(raw, h.ip, h.len);
        for (int i = 0; i < 4; i++)
            raw[h.len + i] = (uint8_t)((uint32_t)h.port >> (24 - 8 * i));
        for (int i = 0; i < 8; i++)
            raw[h.len + 4 + i] = (uint8_t)((uint64_t)phy >> (56 - 8 * i));
        size_t rn = h.len + 12u;
        char want[64], got[64];
        for (size_t i = 0; i < rn; i++)
            snprintf(want + 2 * i, 3, "%02X", raw[i]);
        size_t n = clog_msgid(got, &h, phy);
        assert_int_equal(n, 2 * rn);
        assert_string_equal(got, want);
    }
}

/* The header rmq_cmd_encode writes for a pull's reply (native_reply's
 * fields) against pull_reply_head's. */
static void
check_pull_head(int32_t code, const char *remark, int32_t opaque, const int64_t nums[4])
{
    char d[4][24];
    char *e[4], *b[4];
    for (int i = 0; i < 4; i++) {
        e[i] = d[i] + sizeof(d[i]);
        b[i] = fjson_i64_digits(e[i], nums[i]);
    }
    struct rmq_field ext[4] = {
        { { "suggestWhichBrokerId", 20 }, { b[0], (uint32_t)(e[0] - b[0]) } },
        { { "nextBeginOffset", 15 }, { b[1], (uint32_t)(e[1] - b[1]) } },
        { { "maxOffset", 9 }, { b[2], (uint32_t)(e[2] - b[2]) } },
        { { "minOffset", 9 }, { b[3], (uint32_t)(e[3] - b[3]) } },
    };
    struct rmq_cmd out;
    memset(&out, 0, sizeof(out));
    out.code = code;
    out.language = RMQ_LANG_JAVA;
    out.version = RMQ_VERSION_409;
    out.opaque = opaque;
    out.flag = RMQ_RPC_RESPONSE;
    out.serialize = RMQ_SER_JSON;
    out.remark.p = remark;
    out.remark.len = (uint32_t)strlen(remark);
    out.ext = ext;
    out.ext_count = 4;
    struct buf want;
    buf_init(&want);
    assert_int_equal(rmq_cmd_encode(&out, &want), 0);
    uint8_t got[400];
    memset(got, 0xAA, sizeof(got));
    size_t n = pull_reply_head(got, code, remark, strlen(remark), opaque, nums[0], nums[1],
                               nums[2], nums[3]);
    assert_true(n <= 316 + strlen(remark));
    assert_int_equal(n, buf_len(&want) - 8);
    assert_memory_equal(got, buf_head(&want) + 8, n);
    assert_int_equal(got[n], 0xAA);   /* nothing written past it */
    buf_free(&want);
}

static void
pull_head_matches_encode(void **state)
{
    (void)state;
    static const int32_t codes[] = {
        RMQ_RESP_SUCCESS, RMQ_RESP_PULL_NOT_FOUND, RMQ_RESP_PULL_RETRY_IMMEDIATELY,
        RMQ_RESP_PULL_OFFSET_MOVED, RMQ_RESP_SYSTEM_ERROR, INT32_MIN, INT32_MAX, -1,
    };
    static const int64_t edge[] = { 0, 1, 9, 10, 99, 100, -1, INT64_MAX, INT64_MIN, 1796034607842LL };
    int ne = (int)(sizeof(edge) / sizeof(edge[0]));
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int s = 0; s <= GET_NO_MESSAGE_IN_QUEUE + 1; s++) {
        const char *name = get_status_name(s);   /* the last: "UNKNOWN" */
        for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
            for (int i = 0; i < ne; i++) {
                int64_t nums[4] = { edge[i], edge[(i + 1) % ne], edge[(i + 3) % ne], edge[(i + 7) % ne] };
                check_pull_head(codes[c], name, (int32_t)edge[i], nums);
            }
            for (int t = 0; t < 2000; t++) {
                int64_t nums[4];
                for (int i = 0; i < 4; i++) {
                    uint64_t r = next(&x);
                    nums[i] = (int64_t)(r >> (r % 64));
                }
                check_pull_head(codes[c], name, (int32_t)(next(&x) >> (t % 64)), nums);
            }
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(digits_match_printf),
        cmocka_unit_test(msgid_matches_hex),
        cmocka_unit_test(pull_head_matches_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
