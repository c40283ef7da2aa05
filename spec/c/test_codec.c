/* The remoting codec: frame cutting, header decode/encode (net/codec.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/err.h"
#include "net/codec.h"

/* A frame: L, H (serialize << 24 | header length), header, body. */
static size_t
frame(uint8_t *out, uint8_t ser, const void *hdr, size_t hlen, const void *body, size_t blen)
{
    be32_put(out, (uint32_t)(4 + hlen + blen));
    be32_put(out + 4, (uint32_t)ser << 24 | (uint32_t)hlen);
    memcpy(out + 8, hdr, hlen);
    if (blen)
        memcpy(out + 8 + hlen, body, blen);
    return 8 + hlen + blen;
}

static int
decode(struct rmq_cmd *cmd, const uint8_t *f, size_t len, uint8_t *mem, size_t cap)
{
    struct rmq_arena a = { mem, cap, 0 };
    return rmq_cmd_decode(cmd, f, len, &a);
}

static void
peek_cuts_whole_frames_only(void **state)
{
    (void)state;
    uint8_t f[256];
    const char *h = "{\"code\":10,\"opaque\":7}";
    size_t n = frame(f, RMQ_SER_JSON, h, strlen(h), "body", 4);
    size_t fl = 0;
    for (size_t avail = 0; avail < n; avail++)
        assert_int_equal(rmq_frame_peek(f, avail, RMQ_DEFAULT_MAX_FRAME, &fl), 0);
    assert_int_equal(rmq_frame_peek(f, n, RMQ_DEFAULT_MAX_FRAME, &fl), 1);
    assert_int_equal(fl, n);
    /* Two frames back to back: the first is cut at its own length. */
    memcpy(f + n, f, n);
    assert_int_equal(rmq_frame_peek(f, 2 * n, RMQ_DEFAULT_MAX_FRAME, &fl), 1);
    assert_int_equal(fl, n);
}

static void
peek_refuses_bad_frames_early(void **state)
{
    (void)state;
    uint8_t f[16];
    size_t fl;
    /* Oversized: refused from the L word alone, before the body comes. */
    be32_put(f, 0x7ffffff0u);
    be32_put(f + 4, 10);
    assert_int_equal(rmq_frame_peek(f, 8, RMQ_DEFAULT_MAX_FRAME, &fl), -RMQ_ETOOBIG);
    be32_put(f, 1024);
    assert_int_equal(rmq_frame_peek(f, 8, 512, &fl), -RMQ_ETOOBIG);
    /* L too small for the H word. */
    be32_put(f, 2);
    assert_int_equal(rmq_frame_peek(f, 8, RMQ_DEFAULT_MAX_FRAME, &fl), -RMQ_EPROTO);
    /* Header longer than the frame. */
    be32_put(f, 20);
    be32_put(f + 4, 100);
    assert_int_equal(rmq_frame_peek(f, 8, RMQ_DEFAULT_MAX_FRAME, &fl), -RMQ_EPROTO);
    /* Unknown serialize type (2). */
    be32_put(f, 20);
    be32_put(f + 4, 2u << 24 | 4);
    assert_int_equal(rmq_frame_peek(f, 8, RMQ_DEFAULT_MAX_FRAME, &fl), -RMQ_EPROTO);
}

static void
json_header_decodes(void **state)
{
    (void)state;
    const char *h = "{\"code\":310,\"extFields\":{\"topic\":\"T\\u00e9\",\"queueId\":3,"
                    "\"flag\":true,\"gone\":null},\"flag\":0,\"language\":\"CPP\","
                    "\"opaque\":-5,\"remark\":\"hi\",\"unknown\":[1,{\"x\":2}],"
                    "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";
    uint8_t f[512];
    size_t n = frame(f, RMQ_SER_JSON, h, strlen(h), "xyz", 3);
    uint8_t mem[4096];
    struct rmq_cmd c;
    assert_int_equal(decode(&c, f, n, mem, sizeof(mem)), 0);
    assert_int_equal(c.code, 310);
    assert_int_equal(c.opaque, -5);
    assert_int_equal(c.version, 409);
    assert_int_equal(c.language, rmq_language_ordinal("CPP", 3));
    assert_int_equal(c.remark.len, 2);
    assert_memory_equal(c.remark.p, "hi", 2);
    assert_int_equal(c.ext_count, 3);  /* null dropped */
    const struct rmq_str *v = rmq_cmd_field(&c, "topic", 5);
    assert_non_null(v);
    assert_int_equal(v->len, 3);
    assert_memory_equal(v->p, "T\xc3\xa9", 3);
    v = rmq_cmd_field(&c, "queueId", 7);
    assert_non_null(v);
    assert_memory_equal(v->p, "3", 1);
    v = rmq_cmd_field(&c, "flag", 4);
    assert_non_null(v);
    assert_memory_equal(v->p, "true", 4);
    assert_null(rmq_cmd_field(&c, "gone", 4));
    assert_int_equal(c.body_len, 3);
    assert_memory_equal(c.body, "xyz", 3);
}

static void
json_header_hostile(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{\"code\":10",                          /* truncated */
        "{\"code\":\"ten\"}",                    /* wrong type */
        "{\"code\":10,\"extFields\":[1]}",       /* extFields not an object */
        "[1,2]",                                 /* not an object */
        "{\"code\":10,\"remark\":\"\\q\"}",      /* bad escape */
        "{\"code\":10} trailing",                /* bytes after the header */
        "",
    };
    uint8_t f[512], mem[4096];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = frame(f, RMQ_SER_JSON, bad[i], strlen(bad[i]), NULL, 0);
        struct rmq_cmd c;
        struct rmq_arena a = { mem, sizeof(mem), 0 };
        int rc = rmq_cmd_decode(&c, f, n, &a);
        assert_int_equal(rc, -RMQ_EPROTO);
        assert_int_equal(a.used, 0);   /* nothing kept on failure */
    }
    /* A nested value in extFields is kept as its JSON text, as
     * fastjson's Map<String,String> would. */
    const char *nested = "{\"code\":10,\"extFields\":{\"a\":{\"b\":[1]}}}";
    size_t nn = frame(f, RMQ_SER_JSON, nested, strlen(nested), NULL, 0);
    struct rmq_cmd cn;
    assert_int_equal(decode(&cn, f, nn, mem, sizeof(mem)), 0);
    const struct rmq_str *v = rmq_cmd_field(&cn, "a", 1);
    assert_non_null(v);
    assert_int_equal(v->len, 9);
    assert_memory_equal(v->p, "{\"b\":[1]}", 9);
    /* An arena too small: -RMQ_ETOOBIG, never an overrun. */
    const char *h = "{\"code\":10,\"extFields\":{\"k1\":\"v1\",\"k2\":\"v2\"}}";
    size_t n = frame(f, RMQ_SER_JSON, h, strlen(h), NULL, 0);
    struct rmq_cmd c;
    assert_int_equal(decode(&c, f, n, mem, 8), -RMQ_ETOOBIG);
    assert_int_equal(decode(&c, f, n, mem, rmq_cmd_arena_size(strlen(h))), 0);
}

/* The decoded fields are in header order whatever room the arena has:
 * reversed on the way down when the fields fit below their stack, in
 * place first when they do not (many short numbers with empty keys in
 * an arena of exactly rmq_cmd_arena_size). */
static void
json_fields_in_order(void **state)
{
    (void)state;
    char h[1200];
    size_t hl = (size_t)snprintf(h, sizeof(h), "{\"code\":10,\"extFields\":{");
    for (int i = 0; i < 150; i++)
        hl += (size_t)snprintf(h + hl, sizeof(h) - hl, "%s\"\":%d", i ? "," : "", i % 10);
    hl += (size_t)snprintf(h + hl, sizeof(h) - hl, ",\"k\":\"v\"}}");
    static uint8_t f[1400], mem[65536];
    size_t n = frame(f, RMQ_SER_JSON, h, hl, NULL, 0);
    size_t caps[2] = { rmq_cmd_arena_size(hl), sizeof(mem) };
    for (int t = 0; t < 2; t++) {
        struct rmq_cmd c;
        assert_int_equal(decode(&c, f, n, mem, caps[t]), 0);
        assert_int_equal(c.ext_count, 151);
        for (uint32_t i = 0; i < 150; i++) {
            assert_int_equal(c.ext[i].key.len, 0);
            assert_int_equal(c.ext[i].val.len, 1);
            assert_int_equal(c.ext[i].val.p[0], '0' + (int)(i % 10));
        }
        assert_int_equal(c.ext[150].key.len, 1);
        assert_memory_equal(c.ext[150].val.p, "v", 1);
    }
}

static void
roundtrip(uint8_t ser)
{
    struct rmq_field ext[3] = {
        { { "topic", 5 }, { "TopicTest", 9 } },
        { { "a", 1 }, { "\x01\x02\"\\\xe4\xb8\xad", 7 } },  /* separators, quote, CJK */
        { { "empty", 5 }, { "x", 1 } },
    };
    struct rmq_cmd in = { .code = 11, .language = RMQ_LANG_JAVA, .version = 409, .opaque = 99,
                          .flag = RMQ_RPC_RESPONSE, .serialize = ser, .remark = { "bad \"x\"", 7 },
                          .ext = ext, .ext_count = 3, .body = (const uint8_t *)"BODY", .body_len = 4 };
    struct buf b;
    buf_init(&b);
    assert_int_equal(rmq_cmd_encode(&in, &b), 0);
    size_t len;
    assert_int_equal(rmq_cmd_encoded_len(&in, &len), 0);
    assert_int_equal(buf_len(&b), len);
    assert_int_equal(buf_append(&b, "BODY", 4), 0);
    size_t fl;
    assert_int_equal(rmq_frame_peek(buf_head(&b), buf_len(&b), RMQ_DEFAULT_MAX_FRAME, &fl), 1);
    assert_int_equal(fl, buf_len(&b));
    uint8_t mem[4096];
    struct rmq_cmd out;
    assert_int_equal(decode(&out, buf_head(&b), fl, mem, sizeof(mem)), 0);
    assert_int_equal(out.code, 11);
    assert_int_equal(out.opaque, 99);
    assert_int_equal(out.flag, RMQ_RPC_RESPONSE);
    assert_int_equal(out.serialize, ser);
    assert_int_equal(out.remark.len, 7);
    assert_memory_equal(out.remark.p, "bad \"x\"", 7);
    assert_int_equal(out.ext_count, 3);
    for (int i = 0; i < 3; i++) {
        const struct rmq_str *v = rmq_cmd_field(&out, ext[i].key.p, ext[i].key.len);
        assert_non_null(v);
        assert_int_equal(v->len, ext[i].val.len);
        assert_memory_equal(v->p, ext[i].val.p, v->len);
    }
    assert_int_equal(out.body_len, 4);
    assert_memory_equal(out.body, "BODY", 4);
    /* Every truncation of the header is refused, never read past. */
    for (size_t cut = 8; cut < len; cut++) {
        uint8_t *t = malloc(cut);
        assert_non_null(t);
        memcpy(t, buf_head(&b), cut);
        be32_put(t, (uint32_t)(cut - 4));
        struct rmq_cmd x;
        struct rmq_arena a = { mem, sizeof(mem), 0 };
        assert_int_equal(rmq_cmd_decode(&x, t, cut, &a), -RMQ_EPROTO);
        free(t);
    }
    buf_free(&b);
}

static void
json_roundtrip(void **state)
{
    (void)state;
    roundtrip(RMQ_SER_JSON);
}

static void
binary_roundtrip(void **state)
{
    (void)state;
    roundtrip(RMQ_SER_ROCKETMQ);
}

/* A ROCKETMQ (binary) header: code, language, version, opaque, flag,
 * remark length + remark, ext length + (key length 2, key, value length
 * 4, value)... (protocol.md 1.4). */
static size_t
binhdr(uint8_t *h, uint32_t remark_len, const char *remark, uint32_t ext_len, const uint8_t *ext,
       size_t ext_bytes)
{
    size_t n = 0;
    be16_put(h + n, 10); n += 2;
    h[n++] = 0;
    be16_put(h + n, 409); n += 2;
    be32_put(h + n, 1); n += 4;
    be32_put(h + n, 0); n += 4;
    be32_put(h + n, remark_len); n += 4;
    if (remark) {
        memcpy(h + n, remark, strlen(remark));
        n += strlen(remark);
    }
    be32_put(h + n, ext_len); n += 4;
    memcpy(h + n, ext, ext_bytes);
    return n + ext_bytes;
}

static void
binary_header_hostile(void **state)
{
    (void)state;
    uint8_t h[256], f[300], mem[4096];
    struct rmq_cmd c;
    /* A good one first: the builder is right. */
    uint8_t ext[] = { 0, 1, 'k', 0, 0, 0, 1, 'v' };
    size_t n = binhdr(h, 2, "hi", sizeof(ext), ext, sizeof(ext));
    size_t fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), 0);
    assert_int_equal(c.code, 10);
    const struct rmq_str *v = rmq_cmd_field(&c, "k", 1);
    assert_non_null(v);
    assert_memory_equal(v->p, "v", 1);
    /* Lengths that point past the header: remark, ext, a key, a value. */
    n = binhdr(h, 0x7fffffffu, "hi", sizeof(ext), ext, sizeof(ext));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), -RMQ_EPROTO);
    n = binhdr(h, 2, "hi", 0xffffffffu, ext, sizeof(ext));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), -RMQ_EPROTO);
    uint8_t badkey[] = { 0xff, 0xff, 'k', 0, 0, 0, 1, 'v' };
    n = binhdr(h, 2, "hi", sizeof(badkey), badkey, sizeof(badkey));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), -RMQ_EPROTO);
    uint8_t badval[] = { 0, 1, 'k', 0x7f, 0xff, 0xff, 0xff, 'v' };
    n = binhdr(h, 2, "hi", sizeof(badval), badval, sizeof(badval));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), -RMQ_EPROTO);
    /* An ext length that says more than its entries hold. */
    n = binhdr(h, 2, "hi", sizeof(ext) + 4, ext, sizeof(ext));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), -RMQ_EPROTO);
    /* Invalid UTF-8 in a key and value: bytes, kept as sent. */
    uint8_t utf[] = { 0, 2, 0xc3, 0x28, 0, 0, 0, 3, 0xe2, 0x82, 0xff };
    n = binhdr(h, 0, NULL, sizeof(utf), utf, sizeof(utf));
    fl = frame(f, RMQ_SER_ROCKETMQ, h, n, NULL, 0);
    assert_int_equal(decode(&c, f, fl, mem, sizeof(mem)), 0);
    v = rmq_cmd_field(&c, "\xc3\x28", 2);
    assert_non_null(v);
    assert_int_equal(v->len, 3);
    assert_memory_equal(v->p, "\xe2\x82\xff", 3);
}

static void
encode_limits(void **state)
{
    (void)state;
    size_t len;
    /* A ROCKETMQ code must fit a short. */
    struct rmq_cmd c = { .code = 70000, .serialize = RMQ_SER_ROCKETMQ };
    assert_int_equal(rmq_cmd_encoded_len(&c, &len), -RMQ_ETOOBIG);
    /* A key over 65535 bytes cannot be written in the binary header. */
    char *k = malloc(70000);
    assert_non_null(k);
    memset(k, 'k', 70000);
    struct rmq_field f = { { k, 70000 }, { "v", 1 } };
    struct rmq_cmd d = { .code = 1, .serialize = RMQ_SER_ROCKETMQ, .ext = &f, .ext_count = 1 };
    assert_int_equal(rmq_cmd_encoded_len(&d, &len), -RMQ_ETOOBIG);
    free(k);
    struct rmq_cmd e = { .code = 1, .serialize = 9 };
    struct buf b;
    buf_init(&b);
    assert_int_equal(rmq_cmd_encode(&e, &b), -RMQ_EPROTO);
    assert_int_equal(buf_len(&b), 0);
    buf_free(&b);
}

static void
languages(void **state)
{
    (void)state;
    assert_string_equal(rmq_language_name(RMQ_LANG_JAVA), "JAVA");
    assert_string_equal(rmq_language_name(-1), "OTHER");
    assert_string_equal(rmq_language_name(1000), "OTHER");
    assert_int_equal(rmq_language_ordinal("JAVA", 4), RMQ_LANG_JAVA);
    assert_int_equal(rmq_language_ordinal("java", 4), -1);
    assert_int_equal(rmq_language_ordinal("JAVAX", 5), -1);
    for (int32_t i = 0; i < RMQ_LANG_COUNT; i++) {
        const char *n = rmq_language_name(i);
        assert_int_equal(rmq_language_ordinal(n, strlen(n)), i);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peek_cuts_whole_frames_only),
        cmocka_unit_test(peek_refuses_bad_frames_early),
        cmocka_unit_test(json_header_decodes),
        cmocka_unit_test(json_header_hostile),
        cmocka_unit_test(json_fields_in_order),
        cmocka_unit_test(json_roundtrip),
        cmocka_unit_test(binary_roundtrip),
        cmocka_unit_test(binary_header_hostile),
        cmocka_unit_test(encode_limits),
        cmocka_unit_test(languages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
