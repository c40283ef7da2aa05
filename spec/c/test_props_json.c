/* A send's properties read once (issue 25): the typed path hands the
 * properties over as their JSON text (lheader_json_raw, proto/header.c)
 * and props_json_for_store (store/props.c) unescapes and splits them into
 * the store's format in one pass.  Against the generic way (rmq_cmd_decode,
 * lheader_decode, then props_for_store of the decoded text), what reaches
 * the record must be the same: the stored properties byte for byte and the
 * facts the send path reads from them (TAGS, whose hash is the record's
 * tags code, WAIT, DELAY, TRAN_MSG, a TIMER_ key), with WAIT dropped (a
 * send) or kept (a batch):
 *
 * - the fixtures' send headers (send-java, send-batch-java, send-v1-java),
 *   and headers whose properties hit every rule and every escape;
 * - over 40,000 mutations of a Java send's header, most of them in its
 *   properties: whatever the typed path takes, the generic way takes, and
 *   both store the same;
 * - 200,000 random JSON strings of pairs, separators (escaped and not),
 *   escapes of every kind and lone surrogates: props_json_for_store is
 *   jscan_unescape then props_for_store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/jscan.h"
#include "net/codec.h"
#include "proto/header.h"
#include "store/props.h"

/* send.lua's send_header(n) (as spec/c/test_codec_typed.c spells it). */
static const char SPECS[] =
    "local header = ...\n"
    "local function send_header(n)\n"
    "  local function f(v1, v2, ty, required, extra)\n"
    "    local e = { n == 1 and v1 or v2, ty, required, as = v1 }\n"
    "    for k, v in pairs(extra or {}) do e[k] = v end\n"
    "    return e\n"
    "  end\n"
    "  local v1 = n == 1\n"
    "  return header.compile({\n"
    "    f('producerGroup', 'a', 'string', v1),\n"
    "    f('topic', 'b', 'topic', true),\n"
    "    f('defaultTopic', 'c', 'string', v1),\n"
    "    f('defaultTopicQueueNums', 'd', 'int', v1),\n"
    "    f('queueId', 'e', 'int', true),\n"
    "    f('sysFlag', 'f', 'int', true),\n"
    "    f('bornTimestamp', 'g', 'long', true),\n"
    "    f('flag', 'h', 'int', true),\n"
    "    f('properties', 'i', 'string', false),\n"
    "    f('reconsumeTimes', 'j', 'int', false, { default = 0 }),\n"
    "    f('unitMode', 'k', 'bool', false),\n"
    "    f('maxReconsumeTimes', 'l', 'int', false),\n"
    "    f('batch', 'm', 'bool', false),\n"
    "  })\n"
    "end\n"
    "return send_header(1), send_header(2)\n";

#define F_PROPS 8
#define CLUSTER "DefaultCluster"

static lua_State *L;
static const struct hspec *V1, *V2;

static int
setup(void **state)
{
    (void)state;
    L = luaL_newstate();
    if (L == NULL)
        return -1;
    luaL_openlibs(L);
    luaL_requiref(L, "rmq.header", luaopen_rmq_header, 0);
    if (luaL_loadstring(L, SPECS) != LUA_OK)
        return -1;
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK)
        return -1;
    V1 = lheader_check(L, -2);
    V2 = lheader_check(L, -1);
    /* As the send processor sets them up (map_spec). */
    if (lheader_json_raw(V1, "properties") != 0 || lheader_json_raw(V2, "properties") != 0)
        return -1;
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    lua_close(L);
    return 0;
}

/* The fixtures' headers (/work/shared/fixtures/frames: send-java,
 * send-batch-java, send-v1-java), byte for byte. */
static const char JAVA_V2[] =
    "{\"code\":310,\"extFields\":{\"a\":\"FxProducerGroup\",\"b\":\"FxTopic\",\"c\":\"TBW102\","
    "\"d\":\"4\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1796034593124\",\"h\":\"0\",\"i\":\"KEYS\\u0001"
    "fx-FxTopic-0\\u0002fxSeq\\u00010\\u0002UNIQ_KEY\\u0001C0000202110C5FFD2B27979919620000"
    "\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA\",\"j\":\"0\",\"k\":\"false\",\"m\":\"false\","
    "\"n\":\"broker-a\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":5,"
    "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";
static const char JAVA_BATCH[] =
    "{\"code\":320,\"extFields\":{\"a\":\"FxBatchGroup\",\"b\":\"FxTopic\",\"c\":\"TBW102\","
    "\"d\":\"4\",\"e\":\"3\",\"f\":\"0\",\"g\":\"1796034605283\",\"h\":\"0\",\"i\":\"WAIT\\u0001true\","
    "\"j\":\"0\",\"k\":\"false\",\"m\":\"true\",\"n\":\"broker-a\"},\"flag\":0,\"language\":\"JAVA\","
    "\"opaque\":3,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";
static const char JAVA_V1[] =
    "{\"code\":10,\"extFields\":{\"queueId\":\"0\",\"flag\":\"0\",\"sysFlag\":\"0\","
    "\"reconsumeTimes\":\"0\",\"batch\":\"false\",\"unitMode\":\"false\",\"defaultTopic\":\"TBW102\","
    "\"defaultTopicQueueNums\":\"4\",\"producerGroup\":\"FxProducerGroup\",\"bname\":\"broker-a\","
    "\"topic\":\"FxTopic\",\"bornTimestamp\":\"1796034599266\",\"properties\":\"KEYS\\u0001"
    "fx-FxTopic-0\\u0002fxSeq\\u00010\\u0002UNIQ_KEY\\u0001C000020211605FFD2B27979931610000"
    "\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":5,"
    "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";

#define MAXF 16
#define BODY "0123456789abcdef"

static size_t
frame(uint8_t *out, const char *hdr, size_t hlen)
{
    be32_put(out, (uint32_t)(4 + hlen + sizeof(BODY) - 1));
    be32_put(out + 4, (uint32_t)hlen);
    memcpy(out + 8, hdr, hlen);
    memcpy(out + 8 + hlen, BODY, sizeof(BODY) - 1);
    return 8 + hlen + sizeof(BODY) - 1;
}

/* What the send path stores from a header's properties. */
struct stored {
    struct buf props;
    struct props_send f;
    char tags[4096];           /* f.tags copied: it points into a buffer */
};

static void
stored_free(struct stored *s)
{
    buf_free(&s->props);
}

static void
store_of(const struct lheader_val *v, bool keep_wait, struct stored *s)
{
    buf_init(&s->props);
    int rc = v->json ? props_json_for_store(&s->props, v->p, v->len, CLUSTER, strlen(CLUSTER),
                                            keep_wait, &s->f)
                     : props_for_store(&s->props, v->set ? v->p : "", v->set ? v->len : 0,
                                       CLUSTER, strlen(CLUSTER), keep_wait, &s->f);
    assert_int_equal(rc, 0);
    if (s->f.tags != NULL) {
        assert_true(s->f.tags_len < sizeof(s->tags));
        memcpy(s->tags, s->f.tags, s->f.tags_len);
    }
}

static void
same_stored(const struct stored *a, const struct stored *b)
{
    assert_int_equal(buf_len(&a->props), buf_len(&b->props));
    assert_memory_equal(buf_head(&a->props), buf_head(&b->props), buf_len(&a->props));
    assert_int_equal(a->f.tags != NULL, b->f.tags != NULL);
    if (a->f.tags != NULL) {
        assert_int_equal(a->f.tags_len, b->f.tags_len);
        assert_memory_equal(a->tags, b->tags, a->f.tags_len);
    }
    assert_int_equal(a->f.wait, b->f.wait);
    assert_int_equal(a->f.delay, b->f.delay);
    assert_int_equal(a->f.prepared, b->f.prepared);
    assert_int_equal(a->f.timer, b->f.timer);
}

/* The typed path (the host's, without the host): 1 when taken. */
static int
typed(const struct hspec *s, const uint8_t *f, size_t n, struct lheader_val *vals,
      uint8_t *scratch, size_t cap)
{
    size_t hlen = be32_get(f + 4) & 0xFFFFFF;
    struct rmq_json_head hd;
    struct rmq_cmd cmd;
    if (!rmq_json_head(f + 8, hlen, &hd) || hd.ext_at == 0)
        return 0;
    assert_int_equal(rmq_cmd_frame(&cmd, f, n), 0);
    size_t end = lheader_json_ext(s, f + 8, hlen, hd.ext_at, vals, scratch, cap);
    return end != 0 && rmq_json_tail(f + 8, hlen, end, &cmd);
}

/* The generic way: 1 when it accepts the header. */
static int
generic(const struct hspec *s, const uint8_t *f, size_t n, struct lheader_val *vals,
        uint8_t *arena, size_t cap)
{
    struct rmq_arena a = { arena, cap, 0 };
    struct rmq_cmd cmd;
    char remark[512];
    return rmq_cmd_decode(&cmd, f, n, &a) == 0 &&
           lheader_decode(s, &cmd, vals, remark, sizeof(remark)) == 0;
}

static uint8_t scratch[16384], arena[32768];

/* hdr both ways: -1 when the typed path leaves it (the generic way's then
 * alone), else whether its properties came as JSON text; both store the
 * same, for a send and for a batch. */
static int
both(const struct hspec *s, const char *hdr, size_t hlen)
{
    static uint8_t f[8192];
    assert_true(hlen + 64 < sizeof(f));
    size_t n = frame(f, hdr, hlen);
    struct lheader_val tv[MAXF], gv[MAXF];
    if (!typed(s, f, n, tv, scratch, sizeof(scratch)))
        return -1;
    if (!generic(s, f, n, gv, arena, sizeof(arena)))
        fail_msg("typed took what the generic way refuses: %.*s", (int)hlen, hdr);
    assert_int_equal(tv[F_PROPS].set, gv[F_PROPS].set);
    assert_false(gv[F_PROPS].json);
    for (int keep = 0; keep < 2; keep++) {
        struct stored a, b;
        store_of(&tv[F_PROPS], keep, &a);
        store_of(&gv[F_PROPS], keep, &b);
        same_stored(&a, &b);
        stored_free(&a);
        stored_free(&b);
    }
    return tv[F_PROPS].json;
}

static void
fixtures_store_alike(void **state)
{
    (void)state;
    assert_int_equal(both(V2, JAVA_V2, strlen(JAVA_V2)), 1);
    assert_int_equal(both(V2, JAVA_BATCH, strlen(JAVA_BATCH)), 1);
    /* V1's long names: decoded as any string, as before. */
    assert_int_equal(both(V1, JAVA_V1, strlen(JAVA_V1)), 0);

    /* What the send stores from JAVA_V2, spelled out. */
    static uint8_t f[4096];
    size_t n = frame(f, JAVA_V2, strlen(JAVA_V2));
    struct lheader_val v[MAXF];
    assert_true(typed(V2, f, n, v, scratch, sizeof(scratch)));
    struct stored s;
    store_of(&v[F_PROPS], false, &s);
    static const char want[] =
        "KEYS\001fx-FxTopic-0\002fxSeq\0010\002UNIQ_KEY\001C0000202110C5FFD2B27979919620000"
        "\002TAGS\001TagA\002CLUSTER\001" CLUSTER;
    assert_int_equal(buf_len(&s.props), sizeof(want) - 1);
    assert_memory_equal(buf_head(&s.props), want, sizeof(want) - 1);
    assert_int_equal(s.f.tags_len, 4);
    assert_memory_equal(s.tags, "TagA", 4);
    assert_true(s.f.wait);
    stored_free(&s);
}

/* V2 headers with these properties (JSON text) stored alike. */
static void
rules_and_escapes_store_alike(void **state)
{
    (void)state;
    static const char *const props[] = {
        "", "\\u0002", "\\u0001", "\\u0001\\u0002", "a", "a\\u0001", "\\u0001b", "a\\u0001b",
        "a\\u0001b\\u0002", "\\u0002a\\u0001b\\u0002\\u0002c\\u0001d\\u0002",
        "a\\u0001b\\u0001c\\u0002d\\u0001\\u0001e",
        "WAIT\\u0001false", "WAIT\\u0001true\\u0002WAIT\\u0001false", "WAIT\\u0001FALSE",
        "TAGS\\u0001x\\u0002TAGS\\u0001y", "TAGS\\u0001", "TAGS\\u0001a\\u0002TAGS\\u0001",
        "DELAY\\u00013", "DELAY\\u000112345", "DELAY\\u00013x", "DELAY\\u0001x3",
        "TRAN_MSG\\u0001TRUE", "TRAN_MSG\\u0001true\\u0002TRAN_MSG\\u0001false", "TRAN_MSG\\u0001yes",
        "CLUSTER\\u0001theirs\\u0002k\\u0001v", "k\\u0001v\\u0002CLUSTER\\u0001theirs",
        "TIMER_DELIVER_MS\\u00011796034593124", "TIMER_X\\u00011", "TIMER_\\u00011",
        "TIMER_DELAY_SEC\\u00015\\u0002TAGS\\u0001t",
        /* separators as raw bytes, \u0000, short escapes, UTF-8, pairs */
        "a\x01" "b\x02" "c\x01" "d", "a\\u0000\\u0001b", "q\\\"t\\u0001\\\\\\/\\b\\f\\n\\r\\t",
        "k\\u00e9\\u0001\\u20ac\\u00ff", "emoji\\u0001\\ud83d\\ude00\\u0002TAGS\\u0001\\uD83D\\uDE00",
        "lone\\u0001\\ud800x\\u0002TAGS\\u0001\\udc00", "TAGS\\u0001a\\ud83d",
        "\\u0057AIT\\u0001true\\u0002\\u0054AGS\\u0001T",
        /* runs at the 16-byte step's edges */
        "0123456789abcde\\u00010123456789abcdef\\u00020123456789abcdef0\\u0001v",
        "KEYS\\u0001fx-FxTopic-0\\u0002fxSeq\\u00010\\u0002UNIQ_KEY\\u0001"
        "C0000202110C5FFD2B27979919620000\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA",
        "0123456789abcdef0123456789abcdef0123456789abcdef\\u0001"
        "0123456789abcdef0123456789abcdef0123456789abcdef",
    };
    char hdr[2048];
    for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++) {
        int n = snprintf(hdr, sizeof(hdr),
                         "{\"code\":310,\"extFields\":{\"a\":\"G\",\"b\":\"T\",\"e\":\"0\",\"f\":\"0\","
                         "\"g\":\"1\",\"h\":\"0\",\"i\":\"%s\",\"m\":\"false\"},\"flag\":0,"
                         "\"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\","
                         "\"version\":409}",
                         props[i]);
        if (both(V2, hdr, (size_t)n) != 1)
            fail_msg("not taken as JSON text: %s", props[i]);
    }
    /* Not spelled plainly: the generic way's, as before. */
    static const char *const left[] = {
        "\\x", "\\u12", "\\u00zz", "a\\",
    };
    for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
        int n = snprintf(hdr, sizeof(hdr),
                         "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\","
                         "\"h\":\"0\",\"i\":\"%s\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,"
                         "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}",
                         left[i]);
        if (both(V2, hdr, (size_t)n) != -1)
            fail_msg("taken: %s", left[i]);
    }
    /* Twice: the generic way decides (the last one wins there). */
    static const char twice[] =
        "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\","
        "\"i\":\"a\\u0001b\",\"i\":\"c\\u0001d\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,"
        "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";
    assert_int_equal(both(V2, twice, strlen(twice)), -1);
}

static uint64_t
next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Mutations of a Java send's header, two in three in its properties. */
static void
mutations_store_alike(void **state)
{
    (void)state;
    static const char special[] = "\"\\u0001200uDdA\x01\x02\x00\xff:,{}";
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    size_t base = strlen(JAVA_V2);
    const char *pi = strstr(JAVA_V2, "\"i\":\"") + 5;
    size_t p0 = (size_t)(pi - JAVA_V2), p1 = (size_t)(strstr(pi, "\",\"j\"") - JAVA_V2);
    static char h[4096];
    int taken = 0, json = 0;
    for (int round = 0; round < 40000; round++) {
        memcpy(h, JAVA_V2, base);
        size_t n = base;
        int edits = 1 + (int)(next(&rng) % 3);
        for (int e = 0; e < edits; e++) {
            uint64_t r = next(&rng);
            size_t at = r % 3 != 0 ? p0 + (size_t)(r >> 8) % (p1 - p0) : (size_t)(r >> 8) % n;
            if (at >= n)
                at = n - 1;
            switch ((r >> 40) % 5) {
            case 0:
            case 1:
                h[at] = special[(r >> 20) % (sizeof(special) - 1)];
                break;
            case 2:
                h[at] = (char)(r >> 24);
                break;
            case 3:
                memmove(h + at, h + at + 1, n - at - 1);
                n--;
                break;
            default:
                memmove(h + at + 1, h + at, n - at);
                n++;
                break;
            }
        }
        int rc = both(V2, h, n);
        if (rc >= 0)
            taken++;
        if (rc == 1)
            json++;
    }
    /* Not all refused: a test that could not fail. */
    assert_true(taken > 5000);
    assert_true(json > 5000);
}

/* Random JSON string text (escapes as jscan_string checks them). */
static size_t
random_json(uint64_t *rng, char *out, size_t cap)
{
    static const char *const atoms[] = {
        "\\u0001", "\\u0002", "\\u0001", "\\u0002", "\x01", "\x02", "WAIT", "TAGS", "DELAY",
        "TRAN_MSG", "CLUSTER", "TIMER_", "TIMER_X", "KEYS", "true", "false", "TRUE", "3", "12",
        "a", "b", "0123456789abcdef", "\\u0000", "\\\"", "\\\\", "\\/", "\\n", "\\t", "\\u00e9",
        "\\u20ac", "\\ud83d\\ude00", "\\ud800", "\\udc00", "\\u0057", "\\u0041", "\xc3\xa9", " ",
    };
    size_t n = 0, k = (size_t)(next(rng) % 24);
    for (size_t i = 0; i < k; i++) {
        const char *a = atoms[next(rng) % (sizeof(atoms) / sizeof(atoms[0]))];
        size_t al = strlen(a);
        if (a[0] == '\x01' || a[0] == '\x02')
            al = 1;
        if (n + al >= cap)
            break;
        memcpy(out + n, a, al);
        n += al;
    }
    return n;
}

static void
random_strings_read_once_as_twice(void **state)
{
    (void)state;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char js[512];
    uint8_t dec[512];
    for (int round = 0; round < 200000; round++) {
        size_t n = random_json(&rng, js, sizeof(js));
        bool keep = next(&rng) & 1;
        size_t m = jscan_unescape((const uint8_t *)js, n, dec);
        struct stored a, b;
        buf_init(&a.props);
        buf_init(&b.props);
        /* Appended after what the buffer holds already, sometimes. */
        if (round % 7 == 0) {
            assert_int_equal(buf_append(&a.props, "x\001y", 3), 0);
            assert_int_equal(buf_append(&b.props, "x\001y", 3), 0);
        }
        assert_int_equal(props_json_for_store(&a.props, js, n, CLUSTER, strlen(CLUSTER), keep, &a.f), 0);
        if (a.f.tags != NULL)
            memcpy(a.tags, a.f.tags, a.f.tags_len);
        assert_int_equal(props_for_store(&b.props, (const char *)dec, m, CLUSTER, strlen(CLUSTER), keep,
                                         &b.f), 0);
        if (b.f.tags != NULL)
            memcpy(b.tags, b.f.tags, b.f.tags_len);
        same_stored(&a, &b);
        stored_free(&a);
        stored_free(&b);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixtures_store_alike),
        cmocka_unit_test(rules_and_escapes_store_alike),
        cmocka_unit_test(mutations_store_alike),
        cmocka_unit_test(random_strings_read_once_as_twice),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
