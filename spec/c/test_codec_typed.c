/* The typed one-pass decode of a send's JSON header (runtime/host.c's
 * typed path: rmq_json_head, lheader_json_ext, rmq_json_tail) against the
 * generic one (rmq_cmd_decode, then lheader_decode), on the specs of
 * lua/rmq/broker/send.lua (and pull.lua's, offsets.lua's):
 *
 * - the headers the clients send (the fixtures' shapes: a Java V2 send, a
 *   batch, a V1 send with long names; escapes of every kind, values at
 *   the 16-byte step's edges) are taken, and give exactly the values and
 *   the top-level fields the generic way gives;
 * - every way not to take one (another spelling, whitespace, a value not a
 *   string, an escape it does not decode, a field or member given twice,
 *   another member, a value the spec refuses, a required field missing,
 *   too little scratch) is not taken, and the generic way then decides
 *   (the refusals keep their texts);
 * - the generic decode started after the head (rmq_cmd_decode_head, what
 *   the host runs after a look) is rmq_cmd_decode: same result, same
 *   error text;
 * - over 40,000 mutations of a Java send's header (and of a pull's and
 *   an offset query's, on pull.lua's and offsets.lua's specs), whatever
 *   the typed path takes the generic way takes with the same values, and
 *   the two generic decodes agree;
 * - the header's numbers (parse_i64, eight digits a step) read as Java's
 *   Long.parseLong reads them, on 30,000 random strings. */
#include <errno.h>
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
#include "net/codec.h"
#include "proto/header.h"

/* send.lua's send_header(n), spelled out: V1 (code 10) by Java's field
 * names, V2 (310, 320) by the one-letter ones; pull.lua's HEADER and
 * offsets.lua's HEADER_QUERY, the other specs the typed path reads. */
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
    "local pull = header.compile({\n"
    "  { 'consumerGroup', 'group', true }, { 'topic', 'topic', true },\n"
    "  { 'queueId', 'int', true }, { 'queueOffset', 'long', true },\n"
    "  { 'maxMsgNums', 'int', true }, { 'sysFlag', 'int', true },\n"
    "  { 'commitOffset', 'long', false, default = 0 },\n"
    "  { 'suspendTimeoutMillis', 'long', false, default = 0 },\n"
    "  { 'subscription', 'string', false }, { 'subVersion', 'long', false, default = 0 },\n"
    "  { 'expressionType', 'string', false },\n"
    "})\n"
    "local query = header.compile({\n"
    "  { 'consumerGroup', 'group', true }, { 'topic', 'topic', true }, { 'queueId', 'int', true },\n"
    "})\n"
    "return send_header(1), send_header(2), pull, query\n";

static lua_State *L;
static const struct hspec *V1, *V2, *PULL, *QUERY;

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
    if (lua_pcall(L, 1, 4, 0) != LUA_OK)
        return -1;
    V1 = lheader_check(L, -4);
    V2 = lheader_check(L, -3);
    PULL = lheader_check(L, -2);
    QUERY = lheader_check(L, -1);
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

/* pull-java.jsonl's and query-consumer-offset.jsonl's first headers. */
static const char JAVA_PULL[] =
    "{\"code\":11,\"extFields\":{\"queueId\":\"2\",\"maxMsgNums\":\"32\",\"sysFlag\":\"2\","
    "\"suspendTimeoutMillis\":\"15000\",\"commitOffset\":\"0\",\"bname\":\"broker-a\","
    "\"topic\":\"FxTopic\",\"queueOffset\":\"0\",\"expressionType\":\"TAG\","
    "\"subVersion\":\"1796034607842\",\"consumerGroup\":\"FxConsumerGroup\"},\"flag\":0,"
    "\"language\":\"JAVA\",\"opaque\":23,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";
static const char JAVA_QUERY[] =
    "{\"code\":14,\"extFields\":{\"queueId\":\"2\",\"bname\":\"broker-a\",\"topic\":\"FxTopic\","
    "\"consumerGroup\":\"FxConsumerGroup\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":15,"
    "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}";

#define MAXF 16
#define BODY "0123456789abcdef"

/* A frame: L, H (JSON, header length), header, body. */
static size_t
frame(uint8_t *out, const char *hdr, size_t hlen)
{
    be32_put(out, (uint32_t)(4 + hlen + sizeof(BODY) - 1));
    be32_put(out + 4, (uint32_t)hlen);
    memcpy(out + 8, hdr, hlen);
    memcpy(out + 8 + hlen, BODY, sizeof(BODY) - 1);
    return 8 + hlen + sizeof(BODY) - 1;
}

struct typed {
    struct rmq_cmd cmd;
    struct lheader_val vals[MAXF];
    uint8_t scratch[8192];
};

/* The host's typed path without the host: 1 when it takes the frame. */
static int
typed(const struct hspec *s, const uint8_t *f, size_t n, struct typed *t, size_t cap)
{
    size_t hlen = be32_get(f + 4) & 0xFFFFFF;
    struct rmq_json_head hd;
    if (!rmq_json_head(f + 8, hlen, &hd) || hd.ext_at == 0)
        return 0;
    assert_int_equal(rmq_cmd_frame(&t->cmd, f, n), 0);
    memset(t->vals, 0xA5, sizeof(t->vals));   /* nothing left from before */
    size_t end = lheader_json_ext(s, f + 8, hlen, hd.ext_at, t->vals, t->scratch, cap);
    if (end == 0 || !rmq_json_tail(f + 8, hlen, end, &t->cmd))
        return 0;
    t->cmd.code = hd.code;
    return 1;
}

struct generic {
    int rc;                    /* rmq_cmd_decode's */
    char err[256];
    struct rmq_cmd cmd;
    int refused;               /* lheader_decode's */
    char remark[512];
    struct lheader_val vals[MAXF];
    uint8_t arena[16384];
};

static void
generic(const struct hspec *s, const uint8_t *f, size_t n, struct generic *g)
{
    struct rmq_arena a = { g->arena, sizeof(g->arena), 0 };
    g->rc = rmq_cmd_decode(&g->cmd, f, n, &a);
    snprintf(g->err, sizeof(g->err), "%s", g->rc != 0 ? err_msg() : "");
    g->refused = -1;
    if (g->rc == 0)
        g->refused = lheader_decode(s, &g->cmd, g->vals, g->remark, sizeof(g->remark));
}

static void
same_top(const struct rmq_cmd *a, const struct rmq_cmd *b)
{
    assert_int_equal(a->code, b->code);
    assert_int_equal(a->language, b->language);
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->opaque, b->opaque);
    assert_int_equal(a->flag, b->flag);
    assert_int_equal(a->serialize, b->serialize);
    assert_true(a->remark.p == NULL && b->remark.p == NULL);
    assert_int_equal(a->body_len, b->body_len);
    assert_ptr_equal(a->body, b->body);
}

static void
same_vals(const struct hspec *s, const struct lheader_val *a, const struct lheader_val *b)
{
    for (int i = 0; i < lheader_nfields(s); i++) {
        assert_int_equal(a[i].set, b[i].set);
        if (!a[i].set) {
            /* as lheader_decode leaves an absent field */
            assert_null(a[i].p);
            assert_int_equal(a[i].len, 0);
            assert_true(a[i].i == 0);
            continue;
        }
        assert_int_equal(a[i].len, b[i].len);
        assert_memory_equal(a[i].p, b[i].p, a[i].len);
        assert_int_equal(a[i].p[a[i].len], '\0');
        assert_true(a[i].i == b[i].i);
    }
}

static void memo_agrees(const struct hspec *s, struct lheader_memo **m, const uint8_t *f, size_t n,
                        int *hits);

static int takes_memo_hits;    /* takes() whose header a memo answered */

/* Taken, and what the generic way gives; through a connection's memo
 * too, kept then compared (twice: the second time from the memo). */
static void
takes(const struct hspec *s, const char *hdr)
{
    uint8_t f[4096];
    size_t n = frame(f, hdr, strlen(hdr));
    static struct typed t;
    static struct generic g;
    if (!typed(s, f, n, &t, sizeof(t.scratch)))
        fail_msg("not taken: %s", hdr);
    generic(s, f, n, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.refused, 0);
    same_top(&t.cmd, &g.cmd);
    assert_null(t.cmd.ext);
    same_vals(s, t.vals, g.vals);
    struct lheader_memo *memo = NULL;
    int hits = 0;
    for (int i = 0; i < 3; i++)
        memo_agrees(s, &memo, f, n, &hits);
    takes_memo_hits += hits > 0;
    free(memo);
}

/* Not taken; the generic way's verdict is returned in *g. */
static void
leaves(const struct hspec *s, const char *hdr, struct generic *g)
{
    uint8_t f[4096];
    size_t n = frame(f, hdr, strlen(hdr));
    static struct typed t;
    if (typed(s, f, n, &t, sizeof(t.scratch)))
        fail_msg("taken: %s", hdr);
    generic(s, f, n, g);
}

static void
typed_takes_the_clients_headers(void **state)
{
    (void)state;
    takes(V2, JAVA_V2);
    takes(V2, JAVA_BATCH);
    takes(V1, JAVA_V1);
    /* Optional fields absent, l present, n left out, a value "" */
    takes(V2, "{\"code\":310,\"extFields\":{\"a\":\"\",\"b\":\"T\",\"e\":\"-1\",\"f\":\"4\","
              "\"g\":\"-9223372036854775808\",\"h\":\"2147483647\",\"l\":\"16\"},\"flag\":2,"
              "\"language\":\"JAVA\",\"opaque\":-7,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}");
    /* Values around the 16-byte step: 14, 15, 16, 17 bytes, and long */
    takes(V2, "{\"code\":310,\"extFields\":{\"a\":\"aaaaaaaaaaaaaa\",\"b\":\"bbbbbbbbbbbbbbb\","
              "\"c\":\"cccccccccccccccc\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\","
              "\"i\":\"iiiiiiiiiiiiiiiii\",\"n\":\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\"},"
              "\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":1}");
    /* Every escape the one-pass copy decodes: short ones, \u00XX, a
     * non-ASCII code point, a surrogate pair; and in a key */
    takes(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\","
              "\"i\":\"q\\\"b\\\\s\\/n\\nr\\rt\\tb\\bf\\f\\u0001\\u00e9\\u20AC\\ud83d\\ude00\","
              "\"\\u006e\":\"x\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,"
              "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}");
    /* The members after extFields in another order, some left out */
    takes(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\"},"
              "\"version\":317,\"opaque\":9,\"language\":\"JAVA\",\"flag\":0}");
    takes(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\"}}");
    /* Every one of them answered from a memo the second time, but the
     * one with a key spelled with an escape (not kept) */
    assert_int_equal(takes_memo_hits, 8 - 1);
}

static void
typed_leaves_the_rest_to_the_generic_way(void **state)
{
    (void)state;
    static struct generic g;
#define ENTRIES "\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\""
#define TAIL ",\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}"
    /* Spellings it does not take, which the generic way accepts */
    static const char *const accepted[] = {
        "{ \"code\":310,\"extFields\":{" ENTRIES "}" TAIL,            /* whitespace */
        "{\"code\": 310,\"extFields\":{" ENTRIES "}" TAIL,
        "{\"code\":310,\"extFields\":{" ENTRIES ", \"a\":\"x\"}" TAIL,
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"a\" :\"x\"}" TAIL,
        "{\"code\":310,\"extFields\":{" ENTRIES "}" TAIL " ",         /* after the object */
        "{\"code\":310,\"extFields\":{" ENTRIES "} ,\"flag\":0}",
        "{\"extFields\":{" ENTRIES "},\"code\":310" TAIL,             /* code not first */
        "{\"code\":310,\"flag\":0,\"extFields\":{" ENTRIES "}}",      /* extFields not second */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"d\":4}" TAIL,      /* a number */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"k\":false}" TAIL,  /* a boolean */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"a\":null}" TAIL,   /* null */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"x\":{\"y\":1}}" TAIL, /* an object */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"i\":\"\\ud800\"}" TAIL, /* a lone surrogate */
        "{\"code\":310,\"extFields\":{" ENTRIES ",\"b\":\"U\"}" TAIL,  /* a field twice */
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"flag\":0,\"flag\":1}", /* a member twice */
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"code\":311}",
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"extFields\":{}}",
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"remark\":\"r\"}", /* another member */
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"other\":1}",
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"language\":\"CPP\"}",
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"language\":0}",
        "{\"code\":310,\"extFields\":{" ENTRIES "},\"flag\":1.0}",
        "{\"code\":\"310\",\"extFields\":{" ENTRIES "}}",
    };
    size_t na = sizeof(accepted) / sizeof(accepted[0]);
    for (size_t i = 0; i < na; i++) {
        leaves(V2, accepted[i], &g);
        /* The last two are refused there: not plain 32-bit integers. */
        if ((g.rc != 0) != (i >= na - 2))
            fail_msg("case %zu: %s", i, g.err);
    }
    /* Values the spec refuses, a required field missing: the generic way
     * names the refusal, with its usual text */
    leaves(V2, "{\"code\":310,\"extFields\":{\"b\":\"a b\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\"}" TAIL, &g);
    assert_int_equal(g.rc, 0);
    assert_int_not_equal(g.refused, 0);
    assert_non_null(strstr(g.remark, "illegal characters"));
    leaves(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"1\"}" TAIL, &g);
    assert_int_not_equal(g.refused, 0);
    assert_string_equal(g.remark, "the custom field <h> is null");
    /* An int field out of range (queueId, "e", given once): its check */
    leaves(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"99999999999\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\"}" TAIL, &g);
    assert_int_not_equal(g.refused, 0);
    assert_non_null(strstr(g.remark, "is not an Integer"));
    leaves(V2, "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0x1\",\"f\":\"0\",\"g\":\"1\",\"h\":\"0\"}" TAIL, &g);
    assert_int_not_equal(g.refused, 0);
    assert_non_null(strstr(g.remark, "is not an Integer"));
    leaves(V2, "{\"code\":310,\"extFields\":{}" TAIL, &g);
    assert_int_not_equal(g.refused, 0);
    /* Malformed: refused by the generic way, with its message */
    leaves(V2, "{\"code\":310,\"extFields\":{" ENTRIES ",\"i\":\"\\q\"}" TAIL, &g);
    assert_int_not_equal(g.rc, 0);
    leaves(V2, "{\"code\":310,\"extFields\":{" ENTRIES, &g);
    assert_int_not_equal(g.rc, 0);
    static const char trailing[] = "{\"code\":310,\"extFields\":{" ENTRIES "}" TAIL "x";
    leaves(V2, trailing, &g);
    char want[128];
    snprintf(want, sizeof(want), "JSON header: trailing bytes after the header object at offset %zu",
             strlen(trailing) - 1);
    assert_string_equal(g.err, want);
    /* Too little scratch for the entries */
    uint8_t f[4096];
    size_t n = frame(f, JAVA_V2, strlen(JAVA_V2));
    static struct typed t;
    assert_int_equal(typed(V2, f, n, &t, 64), 0);
    assert_int_equal(typed(V2, f, n, &t, sizeof(t.scratch)), 1);
#undef ENTRIES
#undef TAIL
}

/* rmq_cmd_decode_head after rmq_json_head is rmq_cmd_decode. */
static void
same_decode(const uint8_t *f, size_t n)
{
    static uint8_t m1[16384], m2[16384];
    static char e1[256];
    struct rmq_cmd a, b;
    struct rmq_arena x = { m1, sizeof(m1), 0 }, y = { m2, sizeof(m2), 0 };
    int r1 = rmq_cmd_decode(&a, f, n, &x);
    snprintf(e1, sizeof(e1), "%s", r1 != 0 ? err_msg() : "");
    size_t hlen = be32_get(f + 4) & 0xFFFFFF;
    struct rmq_json_head hd;
    if (!rmq_json_head(f + 8, hlen, &hd))
        return;
    int r2 = rmq_cmd_decode_head(&b, f, n, &y, &hd);
    assert_int_equal(r1, r2);
    if (r1 != 0) {
        assert_string_equal(e1, err_msg());
        return;
    }
    assert_int_equal(x.used, y.used);
    assert_int_equal(a.code, b.code);
    assert_int_equal(a.language, b.language);
    assert_int_equal(a.version, b.version);
    assert_int_equal(a.opaque, b.opaque);
    assert_int_equal(a.flag, b.flag);
    assert_true((a.remark.p == NULL) == (b.remark.p == NULL));
    if (a.remark.p != NULL) {
        assert_int_equal(a.remark.len, b.remark.len);
        assert_memory_equal(a.remark.p, b.remark.p, a.remark.len);
    }
    assert_true((a.ext == NULL) == (b.ext == NULL));
    assert_int_equal(a.ext_count, b.ext_count);
    for (uint32_t i = 0; i < a.ext_count; i++) {
        assert_int_equal(a.ext[i].key.len, b.ext[i].key.len);
        assert_memory_equal(a.ext[i].key.p, b.ext[i].key.p, a.ext[i].key.len);
        assert_int_equal(a.ext[i].val.len, b.ext[i].val.len);
        assert_memory_equal(a.ext[i].val.p, b.ext[i].val.p, a.ext[i].val.len);
    }
}

static void
decode_after_the_head_is_the_decode(void **state)
{
    (void)state;
    static const char *const hdrs[] = {
        JAVA_V2, JAVA_BATCH, JAVA_V1,
        "{\"code\":34,\"flag\":0,\"language\":\"JAVA\",\"opaque\":4,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}",
        "{\"code\":105,\"extFields\":{\"topic\":\"FxTopic\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":0,"
        "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}",
        "{\"code\":310}", "{\"code\":310,\"extFields\":{}}", "{\"code\":310,\"extFields\":null}",
        "{\"code\":310,\"extFields\":{},\"extFields\":{\"a\":\"b\"}}",
        "{\"code\":310,\"code\":311}", "{\"code\":310,\"remark\":\"x\",\"flag\":1}",
        "{\"code\":310,\"extFields\":{\"a\":\"b\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":4,"
        "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409,\"flag\":3}",
        "{\"code\":310,\"extFields\":{\"a\":\"b\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":4,"
        "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409} ",
        "{\"code\":310,\"extFields\":{\"a\":\"b\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":4,"
        "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}}",
        "{\"code\":310,\"flag\":", "{\"code\":310", "{\"code\":310,", "{\"code\":310,\"extFields\":{",
    };
    uint8_t f[4096];
    for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++)
        same_decode(f, frame(f, hdrs[i], strlen(hdrs[i])));
}

/* Mutations of a Java client's header (a send's, a pull's, an offset
 * query's): a byte replaced by one of the bytes that matter to JSON (or
 * any byte), removed, or repeated; several at once; the header cut
 * short. */
/*
 * lheader_json_ext_memo on frame f against lheader_json_ext: the same
 * end and the same values.  *hits counts the headers answered from the
 * memo (values pointing outside the scratch buffer, into the memo).
 */
static void
memo_agrees(const struct hspec *s, struct lheader_memo **m, const uint8_t *f, size_t n, int *hits)
{
    size_t hlen = be32_get(f + 4) & 0xFFFFFF;
    struct rmq_json_head hd;
    if (hlen > n - 8 || !rmq_json_head(f + 8, hlen, &hd) || hd.ext_at == 0)
        return;
    static struct typed a, b;
    memset(a.vals, 0xA5, sizeof(a.vals));
    memset(b.vals, 0x5A, sizeof(b.vals));
    size_t ea = lheader_json_ext(s, f + 8, hlen, hd.ext_at, a.vals, a.scratch, sizeof(a.scratch));
    size_t eb = lheader_json_ext_memo(s, m, f + 8, hlen, hd.ext_at, b.vals, b.scratch,
                                      sizeof(b.scratch));
    assert_int_equal(ea, eb);
    if (ea == 0)
        return;
    same_vals(s, a.vals, b.vals);
    /* The members after extFields, through the memo's tail too. */
    struct rmq_cmd ca, cb;
    /* (a member left out keeps what the command had: both the same) */
    memset(&ca, 0x5A, sizeof(ca));
    memset(&cb, 0x5A, sizeof(cb));
    bool ta = rmq_json_tail(f + 8, hlen, ea, &ca);
    assert_int_equal(ta, lheader_json_tail_memo(*m, f + 8, hlen, eb, &cb));
    if (ta) {
        assert_int_equal(ca.flag, cb.flag);
        assert_int_equal(ca.language, cb.language);
        assert_int_equal(ca.opaque, cb.opaque);
        assert_int_equal(ca.version, cb.version);
    }
    bool from_memo = false;
    for (int i = 0; i < lheader_nfields(s); i++)
        if (b.vals[i].set && (b.vals[i].p < (const char *)b.scratch ||
                              b.vals[i].p >= (const char *)b.scratch + sizeof(b.scratch)))
            from_memo = true;
    if (hits != NULL && from_memo)
        (*hits)++;
}

static void
mutations_agree_on(const struct hspec *spec, const char *java)
{
    struct lheader_memo *memo = NULL;
    int memo_hits = 0;
    static const char special[] = "\"\\{}[]:,  \t0123456789-+.eEntfu\x01\xff";
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    size_t base = strlen(java);
    static char h[4096];
    uint8_t f[4200];
    static struct typed t;
    static struct generic g;
    int taken = 0, refused_typed = 0;
    for (int round = 0; round < 40000; round++) {
        memcpy(h, java, base);
        size_t n = base;
        int edits = 1 + (int)(rng % 3);
        for (int e = 0; e < edits; e++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size_t at = (size_t)(rng >> 8) % n;
            switch ((rng >> 40) % 5) {
            case 0:
            case 1:
                h[at] = special[(rng >> 20) % (sizeof(special) - 1)];
                break;
            case 2:
                h[at] = (char)(rng >> 24);
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
        if ((rng >> 50) % 16 == 0)
            n = (size_t)(rng >> 12) % n;
        size_t fl = frame(f, h, n);
        same_decode(f, fl);
        {
            /* Through the connection's memo (kept over the rounds: each
             * header compared with the last one taken, the base header
             * every other round): the same answer as without it. */
            if (round % 2 == 0) {
                uint8_t fb[4200];
                size_t bl = frame(fb, java, base);
                memo_agrees(spec, &memo, fb, bl, NULL);
            }
            memo_agrees(spec, &memo, f, fl, &memo_hits);
        }
        if (!typed(spec, f, fl, &t, sizeof(t.scratch)))
            continue;
        /* Taken: then the generic way accepts it with the same values. */
        generic(spec, f, fl, &g);
        if (g.rc != 0 || g.refused != 0) {
            refused_typed++;
            fail_msg("typed took what the generic way refuses (%s%s): %.*s", g.err, g.remark,
                     (int)n, h);
        }
        same_top(&t.cmd, &g.cmd);
        same_vals(spec, t.vals, g.vals);
        taken++;
    }
    /* The mutations are not all refused (a test that could not fail). */
    assert_true(taken > 1000);
    assert_int_equal(refused_typed, 0);
    /* Values changed in place are read from the memo, not all again. */
    assert_true(memo_hits > 1000);
    free(memo);
}

static void
mutations_agree(void **state)
{
    (void)state;
    mutations_agree_on(V2, JAVA_V2);
}

/* The pull's and the offset requests' headers take the typed path too
 * (their processors' json_spec): the same agreement on their specs,
 * whose types (group, long with defaults) a send's does not have. */
static void
mutations_agree_pull_and_offsets(void **state)
{
    (void)state;
    struct typed *t = calloc(1, sizeof(*t));
    struct generic *g = calloc(1, sizeof(*g));
    assert_non_null(t);
    assert_non_null(g);
    const char *hdrs[] = { JAVA_PULL, JAVA_QUERY };
    const struct hspec *specs[] = { PULL, QUERY };
    uint8_t f[1024];
    for (int i = 0; i < 2; i++) {
        /* The fixture itself is taken, with the generic way's values. */
        size_t fl = frame(f, hdrs[i], strlen(hdrs[i]));
        assert_int_equal(typed(specs[i], f, fl, t, sizeof(t->scratch)), 1);
        generic(specs[i], f, fl, g);
        assert_int_equal(g->rc, 0);
        assert_int_equal(g->refused, 0);
        same_top(&t->cmd, &g->cmd);
        same_vals(specs[i], t->vals, g->vals);
        mutations_agree_on(specs[i], hdrs[i]);
    }
    free(t);
    free(g);
}

/* Long.parseLong's verdict on s, by strtoll after the strict grammar
 * ([+-]?[0-9]+): 1 and *v, or 0. */
static int
java_long(const char *s, long long *v)
{
    size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    if (s[i] == '\0')
        return 0;
    for (size_t k = i; s[k] != '\0'; k++)
        if (s[k] < '0' || s[k] > '9')
            return 0;
    errno = 0;
    *v = strtoll(s, NULL, 10);
    return errno == 0;
}

/* The header's numbers (parse_i64, 8 digits a step when they are all
 * digits) read as Java reads them: random strings of 1-21 bytes, digits
 * with a sign or a stray byte, both paths. */
static void
numbers_read_as_java(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    char txt[32], hdr[512];
    uint8_t f[1024];
    static struct typed t;
    static struct generic g;
    for (int round = 0; round < 30000; round++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t len = 1 + (size_t)(rng % 21), k = 0;
        if ((rng >> 8) % 4 == 0)
            txt[k++] = (rng >> 10) % 2 ? '-' : '+';
        for (; k < len; k++)
            txt[k] = (char)('0' + (rng >> (4 + k * 2)) % 10);
        if ((rng >> 60) % 5 == 0)
            txt[(rng >> 32) % len] = (char)(0x21 + (rng >> 40) % 90);   /* printable: no escape */
        txt[len] = '\0';
        if (strchr(txt, '"') != NULL || strchr(txt, '\\') != NULL)
            continue;
        int n = snprintf(hdr, sizeof(hdr),
                         "{\"code\":310,\"extFields\":{\"b\":\"T\",\"e\":\"0\",\"f\":\"0\",\"g\":\"%s\","
                         "\"h\":\"0\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,"
                         "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}", txt);
        size_t fl = frame(f, hdr, (size_t)n);
        long long want;
        int ok = java_long(txt, &want);
        generic(V2, f, fl, &g);
        assert_int_equal(g.rc, 0);
        assert_int_equal(g.refused == 0, ok);
        assert_int_equal(typed(V2, f, fl, &t, sizeof(t.scratch)), ok);
        if (ok) {
            assert_true(g.vals[6].i == want);
            assert_true(t.vals[6].i == want);
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(typed_takes_the_clients_headers),
        cmocka_unit_test(typed_leaves_the_rest_to_the_generic_way),
        cmocka_unit_test(decode_after_the_head_is_the_decode),
        cmocka_unit_test(mutations_agree),
        cmocka_unit_test(mutations_agree_pull_and_offsets),
        cmocka_unit_test(numbers_read_as_java),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
