/* pbcheck: the UTF-8 check of every string field of a gRPC request
 * (src/grpc/pbcheck.h).  The byte check against a reference written from
 * the Unicode standard's table of well-formed byte sequences (3.9, table
 * 3-7), over every sequence of one to three bytes and the 4-byte ones
 * around each range's edges, each also inside ASCII runs at every offset
 * of the 8-byte fast path: overlongs, surrogates, past U+10FFFF,
 * truncated.  The message walk: a bad string anywhere (nested, repeated,
 * a map's key or value, a oneof's set member) is found and named, and
 * bytes fields are not checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/grpc/pbcheck.c"
#include "apache/rocketmq/v2/service.pb-c.h"

/* Table 3-7: the second byte's range for each first byte, then 80..BF. */
static bool
ref_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c <= 0x7F) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c == 0xE0) {
            len = 3, lo = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            len = 3;
        } else if (c == 0xED) {
            len = 3, hi = 0x9F;
        } else if (c == 0xF0) {
            len = 4, lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            len = 4;
        } else if (c == 0xF4) {
            len = 4, hi = 0x8F;
        } else {
            return false;
        }
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi)
            return false;
        for (size_t k = 2; k < len; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF)
                return false;
        i += len;
    }
    return true;
}

/* s (n bytes) with `before` ASCII bytes ahead of it and `after` behind:
 * the same answer as s alone, wherever the 8-byte steps fall. */
static void
check_padded(const unsigned char *s, size_t n, bool want)
{
    unsigned char buf[64];
    for (size_t before = 0; before <= 17; before++) {
        for (size_t after = 0; after <= 9; after += 3) {
            memset(buf, 'a', sizeof(buf));
            memcpy(buf + before, s, n);
            assert_int_equal(want, pbcheck_utf8_bytes(buf, before + n + after));
        }
    }
}

static void
every_short_sequence(void **state)
{
    (void)state;
    unsigned char s[3];
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (unsigned char)a;
        assert_int_equal(ref_valid(s, 1), pbcheck_utf8_bytes(s, 1));
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (unsigned char)b;
            assert_int_equal(ref_valid(s, 2), pbcheck_utf8_bytes(s, 2));
            for (unsigned c = 0; c < 256; c++) {
                s[2] = (unsigned char)c;
                bool want = ref_valid(s, 3);
                if (want != pbcheck_utf8_bytes(s, 3))
                    fail_msg("%02x %02x %02x: want %d", a, b, c, want);
            }
        }
    }
}

/* The bytes where a range starts or ends, and one of each kind. */
static const unsigned char EDGES[] = { 0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0,
                                       0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF };

static void
four_byte_edges(void **state)
{
    (void)state;
    unsigned char s[4];
    for (unsigned a = 0xE0; a < 256; a++) {
        s[0] = (unsigned char)a;
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (unsigned char)b;
            for (size_t c = 0; c < sizeof(EDGES); c++) {
                s[2] = EDGES[c];
                for (size_t d = 0; d < sizeof(EDGES); d++) {
                    s[3] = EDGES[d];
                    bool want = ref_valid(s, 4);
                    if (want != pbcheck_utf8_bytes(s, 4))
                        fail_msg("%02x %02x %02x %02x: want %d", a, b, s[2], s[3], want);
                }
            }
        }
    }
}

static void
named_cases_at_every_offset(void **state)
{
    (void)state;
    static const struct { const char *s; bool valid; } CASES[] = {
        { "", true },
        { "\xC2\x80", true },              /* U+0080, the first 2-byte */
        { "\xDF\xBF", true },              /* U+07FF */
        { "\xE0\xA0\x80", true },          /* U+0800, the first 3-byte */
        { "\xED\x9F\xBF", true },          /* U+D7FF, below the surrogates */
        { "\xEE\x80\x80", true },          /* U+E000, above them */
        { "\xEF\xBF\xBF", true },          /* U+FFFF */
        { "\xF0\x90\x80\x80", true },      /* U+10000, the first 4-byte */
        { "\xF0\x9F\x98\x80", true },      /* U+1F600 */
        { "\xF4\x8F\xBF\xBF", true },      /* U+10FFFF, the last */
        { "\xC0\x80", false },             /* overlong NUL */
        { "\xC1\xBF", false },             /* overlong U+007F */
        { "\xE0\x80\x80", false },         /* overlong 3-byte */
        { "\xE0\x9F\xBF", false },         /* overlong U+07FF */
        { "\xF0\x80\x80\x80", false },     /* overlong 4-byte */
        { "\xF0\x8F\xBF\xBF", false },     /* overlong U+FFFF */
        { "\xED\xA0\x80", false },         /* U+D800, a surrogate */
        { "\xED\xBF\xBF", false },         /* U+DFFF */
        { "\xED\xA0\x80\xED\xB0\x80", false },   /* a surrogate pair (CESU-8) */
        { "\xF4\x90\x80\x80", false },     /* U+110000 */
        { "\xF5\x80\x80\x80", false },
        { "\xFF", false },
        { "\x80", false },                 /* a lone continuation */
        { "\xBF\xBF", false },
        { "\xC2", false },                 /* truncated */
        { "\xE0\xA0", false },
        { "\xF0\x90\x80", false },
        { "\xC2" "A", false },             /* cut short by ASCII */
        { "\xE0\xA0" "A", false },
        { "\xF0\x90\x80" "A", false },
        { "\xC3\xA9t\xC3\xA9", true },     /* "été" */
    };
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        const unsigned char *s = (const unsigned char *)CASES[i].s;
        size_t n = strlen(CASES[i].s);
        assert_int_equal(CASES[i].valid, ref_valid(s, n));
        check_padded(s, n, CASES[i].valid);
    }
    /* A NUL is valid UTF-8 (U+0000), inside the fast path too. */
    check_padded((const unsigned char *)"\0", 1, true);
}

/* {{{ Messages */

typedef Apache__Rocketmq__V2__SendMessageRequest Request;

/* A SendMessageRequest as the SDKs send it (strings, maps, keys, a
 * digest, timestamps), its fields pointing into *f. */
struct fixture {
    Request rq;
    Apache__Rocketmq__V2__Message msg, *msgs[1];
    Apache__Rocketmq__V2__Resource topic;
    Apache__Rocketmq__V2__SystemProperties sp;
    Apache__Rocketmq__V2__Digest digest;
    Apache__Rocketmq__V2__DeadLetterQueue dlq;
    Google__Protobuf__Timestamp born;
    Apache__Rocketmq__V2__Message__UserPropertiesEntry props[2], *prop_list[2];
    char *keys[3];
    uint8_t body[4];
};

static void
fixture_init(struct fixture *f)
{
    *f = (struct fixture){
        .rq = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT,
        .msg = APACHE__ROCKETMQ__V2__MESSAGE__INIT,
        .topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT,
        .sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT,
        .digest = APACHE__ROCKETMQ__V2__DIGEST__INIT,
        .dlq = APACHE__ROCKETMQ__V2__DEAD_LETTER_QUEUE__INIT,
        .born = GOOGLE__PROTOBUF__TIMESTAMP__INIT,
        .props = { APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT,
                   APACHE__ROCKETMQ__V2__MESSAGE__USER_PROPERTIES_ENTRY__INIT },
    };
    f->topic.name = "Topic\xC3\xA9";
    f->props[0].key = "color";
    f->props[0].value = "green";
    f->props[1].key = "size";
    f->props[1].value = "L";
    f->prop_list[0] = &f->props[0];
    f->prop_list[1] = &f->props[1];
    f->keys[0] = "k1";
    f->keys[1] = "k2";
    f->keys[2] = "k3";
    f->digest.checksum = "1B2C3D4E";
    f->dlq.topic = "%DLQ%G";
    f->dlq.message_id = "01";
    f->born.seconds = 1700000000;
    f->sp.tag = "TagA";
    f->sp.keys = f->keys;
    f->sp.n_keys = 3;
    f->sp.message_id = "01ABCDEF";
    f->sp.body_digest = &f->digest;
    f->sp.born_timestamp = &f->born;
    f->sp.born_host = "host-1";
    f->sp.dead_letter_queue = &f->dlq;
    memcpy(f->body, "\xFF\xFE\xC0\x80", 4);   /* bytes: not text, not checked */
    f->msg.topic = &f->topic;
    f->msg.user_properties = f->prop_list;
    f->msg.n_user_properties = 2;
    f->msg.system_properties = &f->sp;
    f->msg.body.data = f->body;
    f->msg.body.len = 4;
    f->msgs[0] = &f->msg;
    f->rq.messages = f->msgs;
    f->rq.n_messages = 1;
}

static bool
check_msg(const ProtobufCMessage *m, char *why, size_t cap)
{
    why[0] = '\0';
    return pbcheck_utf8(m, why, cap);
}

static void
send_request(void **state)
{
    (void)state;
    struct fixture f;
    char why[128];
    fixture_init(&f);
    assert_true(check_msg(&f.rq.base, why, sizeof(why)));

    /* A bad string wherever one can be: named in why. */
    static const char *const BAD[] = { "\x80", "\xC0\xAF", "ok\xED\xA0\x80", "12345678\xF4\x90\x80\x80", "\xE2\x82" };
    struct { char **at; const char *name; } places[] = {
        { &f.topic.name, "name" }, { &f.props[1].value, "value" }, { &f.props[0].key, "key" },
        { &f.keys[2], "keys" }, { &f.sp.tag, "tag" }, { &f.sp.message_id, "message_id" },
        { &f.digest.checksum, "checksum" }, { &f.dlq.message_id, "message_id" },
        { &f.sp.born_host, "born_host" }, { &f.sp.lite_topic, "lite_topic" },
        { &f.sp.trace_context, "trace_context" }, { &f.sp.message_group, "message_group" },
    };
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        for (size_t b = 0; b < sizeof(BAD) / sizeof(BAD[0]); b++) {
            fixture_init(&f);
            *places[i].at = (char *)BAD[b];
            assert_false(check_msg(&f.rq.base, why, sizeof(why)));
            char want[96];
            snprintf(want, sizeof(want), "string field %s is not valid UTF-8", places[i].name);
            assert_string_equal(want, why);
        }
    }
}

/* The set member of a oneof is checked, by its own type; an unset
 * oneof is not read. */
static void
oneof_members(void **state)
{
    (void)state;
    char why[128];
    Apache__Rocketmq__V2__TelemetryCommand cmd = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    assert_true(check_msg(&cmd.base, why, sizeof(why)));

    Apache__Rocketmq__V2__ThreadStackTrace st = APACHE__ROCKETMQ__V2__THREAD_STACK_TRACE__INIT;
    st.nonce = "n\xFF";
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_THREAD_STACK_TRACE;
    cmd.thread_stack_trace = &st;
    assert_false(check_msg(&cmd.base, why, sizeof(why)));
    assert_string_equal("string field nonce is not valid UTF-8", why);

    Apache__Rocketmq__V2__Resource topics[2] = { APACHE__ROCKETMQ__V2__RESOURCE__INIT,
                                                 APACHE__ROCKETMQ__V2__RESOURCE__INIT };
    Apache__Rocketmq__V2__Resource *tl[2] = { &topics[0], &topics[1] };
    topics[0].name = "A";
    topics[1].name = "B\xED\xBF\xBF";
    Apache__Rocketmq__V2__Publishing pub = APACHE__ROCKETMQ__V2__PUBLISHING__INIT;
    pub.topics = tl;
    pub.n_topics = 2;
    Apache__Rocketmq__V2__Settings settings = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    settings.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING;
    settings.publishing = &pub;
    cmd.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    cmd.settings = &settings;
    assert_false(check_msg(&cmd.base, why, sizeof(why)));
    assert_string_equal("string field name is not valid UTF-8", why);
    topics[1].name = "B";
    assert_true(check_msg(&cmd.base, why, sizeof(why)));
}

/* }}} */

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_short_sequence),
        cmocka_unit_test(four_byte_edges),
        cmocka_unit_test(named_cases_at_every_offset),
        cmocka_unit_test(send_request),
        cmocka_unit_test(oneof_members),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
