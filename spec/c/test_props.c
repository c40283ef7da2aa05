/* Message properties (store/props.h) and the timer send rule built on
 * them (store/timer.h: classify, hold, recall handle, tags). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/buf.h"
#include "store/props.h"
#include "store/timer.h"

/* "K\1V\2..." from a C literal written with | for \2 and = for \1. */
static size_t
mk(char *out, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        out[i] = s[i] == '|' ? PROPS_SEP : s[i] == '=' ? PROPS_NAME_VALUE_SEP : s[i];
    out[n] = '\0';
    return n;
}

/* The inverse of mk() over a buffer, for comparisons. */
static void
assert_props(const struct buf *b, const char *want)
{
    char w[512];
    size_t n = mk(w, want);
    assert_int_equal(buf_len(b), n);
    assert_memory_equal(buf_head(b), w, n);
}

static void
next_skips_what_java_drops(void **state)
{
    (void)state;
    char p[256];
    /* Java's string2messageProperties keeps "k=v" segments with a
     * non-empty key and value; "=v", "k=", "junk" and "" go. */
    size_t n = mk(p, "A=1|=nokey|B=|junk||C=3=x|A=2");
    size_t pos = 0;
    struct prop kv;
    const char *want[][2] = { { "A", "1" }, { "C", "3\001x" }, { "A", "2" } };
    for (int i = 0; i < 3; i++) {
        assert_true(props_next(p, n, &pos, &kv));
        assert_int_equal(kv.klen, strlen(want[i][0]));
        assert_memory_equal(kv.k, want[i][0], kv.klen);
        assert_int_equal(kv.vlen, strlen(want[i][1]));
        assert_memory_equal(kv.v, want[i][1], kv.vlen);
    }
    assert_false(props_next(p, n, &pos, &kv));
    /* The last pair of a key wins, as in Java's map. */
    size_t vl;
    const char *v = props_find(p, n, "A", &vl);
    assert_non_null(v);
    assert_int_equal(vl, 1);
    assert_int_equal(v[0], '2');
    assert_null(props_find(p, n, "B", &vl));
    assert_null(props_find(p, n, "junk", &vl));
    /* Truncated input: a key cut before its separator is no pair. */
    for (size_t cut = 0; cut <= n; cut++) {
        pos = 0;
        int pairs = 0;
        while (props_next(p, cut, &pos, &kv)) {
            assert_true(kv.k + kv.klen <= p + cut);
            assert_true(kv.v + kv.vlen <= p + cut);
            pairs++;
        }
        assert_true(pairs <= 3);
    }
    pos = 0;
    assert_false(props_next("", 0, &pos, &kv));
}

static void
delay_levels(void **state)
{
    (void)state;
    assert_int_equal(props_delay_level("3", 1), 3);
    assert_int_equal(props_delay_level("18abc", 5), 18);
    assert_int_equal(props_delay_level("x3", 2), 0);
    assert_int_equal(props_delay_level("", 0), 0);
    /* Never overflows: a long run of digits stops growing past the cap. */
    int l = props_delay_level("99999999999999999999999999", 26);
    assert_true(l >= PROPS_DELAY_MAX && l < PROPS_DELAY_MAX * 10);
}

static void
edit_sets_removes_appends(void **state)
{
    (void)state;
    char p[256];
    size_t n = mk(p, "A=1|B=2|A=3|C=4");
    struct prop e[] = {
        { "A", 1, "x", 1 },     /* first A in place, the later A dropped */
        { "C", 1, NULL, 0 },    /* removed */
        { "D", 1, "new", 3 },   /* appended */
    };
    struct buf b;
    buf_init(&b);
    assert_int_equal(props_edit(&b, p, n, e, 3), 0);
    assert_props(&b, "A=x|B=2|D=new");
    buf_reset(&b);
    /* Refused: an empty key, a key twice, too many edits; out unchanged. */
    struct prop bad1[] = { { "", 0, "v", 1 } };
    assert_int_equal(props_edit(&b, p, n, bad1, 1), -EINVAL);
    struct prop bad2[] = { { "A", 1, "v", 1 }, { "A", 1, NULL, 0 } };
    assert_int_equal(props_edit(&b, p, n, bad2, 2), -EINVAL);
    struct prop many[PROPS_EDITS_MAX + 1];
    for (int i = 0; i <= PROPS_EDITS_MAX; i++)
        many[i] = (struct prop){ "K", 1, "v", 1 };
    assert_int_equal(props_edit(&b, p, n, many, PROPS_EDITS_MAX + 1), -EINVAL);
    assert_int_equal(buf_len(&b), 0);
    buf_free(&b);
}

static void
for_store_reads_facts(void **state)
{
    (void)state;
    char p[256];
    size_t n = mk(p, "TAGS=tagA|WAIT=false|DELAY=3|TRAN_MSG=TRUE|CLUSTER=evil|KEYS=k|TIMER_DELAY_SEC=5");
    struct buf b;
    buf_init(&b);
    struct props_send f;
    assert_int_equal(props_for_store(&b, p, n, "DefaultCluster", 14, false, &f), 0);
    assert_int_equal(f.tags_len, 4);
    assert_memory_equal(f.tags, "tagA", 4);
    assert_false(f.wait);
    assert_int_equal(f.delay, 3);
    assert_true(f.prepared);
    assert_true(f.timer);
    /* WAIT dropped, the producer's CLUSTER replaced at the end. */
    size_t vl;
    assert_null(props_find((char *)buf_head(&b), buf_len(&b), "WAIT", &vl));
    const char *v = props_find((char *)buf_head(&b), buf_len(&b), "CLUSTER", &vl);
    assert_non_null(v);
    assert_int_equal(vl, 14);
    assert_memory_equal(v, "DefaultCluster", 14);
    buf_reset(&b);
    /* No properties at all: defaults. */
    assert_int_equal(props_for_store(&b, "", 0, "C", 1, true, &f), 0);
    assert_null(f.tags);
    assert_true(f.wait);
    assert_int_equal(f.delay, 0);
    assert_false(f.prepared);
    assert_false(f.timer);
    buf_free(&b);
}

static void
timer_precision(void **state)
{
    (void)state;
    assert_int_equal(timer_precision_snap(1), 100);
    assert_int_equal(timer_precision_snap(100), 100);
    assert_int_equal(timer_precision_snap(199), 100);
    assert_int_equal(timer_precision_snap(200), 200);
    assert_int_equal(timer_precision_snap(700), 500);
    assert_int_equal(timer_precision_snap(1000), 1000);
    assert_int_equal(timer_precision_snap(INT64_MAX), 1000);
    assert_int_equal(timer_precision_snap(-5), 100);
}

static int
classify(const char *s, int64_t now, int64_t *bucket, char *why)
{
    char p[256];
    size_t n = mk(p, s);
    return timer_classify(p, n, true, 3 * 86400000LL, 1000, now, bucket, why, 256);
}

static void
timer_send_rule(void **state)
{
    (void)state;
    const int64_t now = 1700000000123LL;
    int64_t b = -1;
    char why[256];
    /* 5 s from now, 1 s buckets: the bucket below the delivery time. */
    assert_int_equal(classify("TIMER_DELAY_SEC=5", now, &b, why), TIMER_HOLD);
    assert_int_equal(b, 1700000005000LL);
    assert_true(b < now + 5000 && now + 5000 <= b + 1000);
    /* A delivery time on a bucket edge goes one bucket down. */
    assert_int_equal(classify("TIMER_DELIVER_MS=1700000010000", now, &b, why), TIMER_HOLD);
    assert_int_equal(b, 1700000009000LL);
    assert_int_equal(classify("TIMER_DELAY_MS=1500", now, &b, why), TIMER_HOLD);
    assert_int_equal(b, 1700000001000LL);
    /* SEC wins over MS, MS over DELIVER. */
    assert_int_equal(classify("TIMER_DELIVER_MS=1|TIMER_DELAY_MS=2000|TIMER_DELAY_SEC=10", now, &b, why),
                     TIMER_HOLD);
    assert_int_equal(b, 1700000010000LL);
    /* Due already: delivered at once. */
    assert_int_equal(classify("TIMER_DELAY_SEC=0", now, &b, why), TIMER_PLAIN);
    assert_int_equal(classify("TIMER_DELAY_SEC=-5", now, &b, why), TIMER_PLAIN);
    /* Not timer messages: a DELAY level, one the wheel delivered, none. */
    assert_int_equal(classify("TIMER_DELAY_SEC=5|DELAY=2", now, &b, why), TIMER_PLAIN);
    assert_int_equal(classify("TIMER_DELAY_SEC=5|TIMER_OUT_MS=1", now, &b, why), TIMER_PLAIN);
    assert_int_equal(classify("KEYS=a", now, &b, why), TIMER_PLAIN);
    /* Hostile values: not a number, overflow, beyond the maximum. */
    static const char *bad[] = {
        "TIMER_DELAY_SEC=five", "TIMER_DELAY_SEC=", "TIMER_DELAY_MS=1e3", "TIMER_DELAY_MS= 5",
        "TIMER_DELIVER_MS=99999999999999999999", "TIMER_DELAY_SEC=9223372036854775807",
        "TIMER_DELAY_SEC=259201", "TIMER_DELAY_MS=+", "TIMER_DELAY_SEC=5\xc3\x28",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* An empty value is no pair at all (Java drops it): plain. */
        int want = strcmp(bad[i], "TIMER_DELAY_SEC=") == 0 ? TIMER_PLAIN : TIMER_ILLEGAL;
        why[0] = '\0';
        assert_int_equal(classify(bad[i], now, &b, why), want);
        if (want == TIMER_ILLEGAL)
            assert_non_null(strstr(why, "timer message illegal"));
    }
    /* A recall of a time that has passed is illegal. */
    assert_int_equal(classify("TIMER_DELAY_SEC=0|TIMER_DEL_UNIQKEY=k", now, &b, why), TIMER_ILLEGAL);
    /* Disabled wheel. */
    char p[64];
    size_t n = mk(p, "TIMER_DELAY_SEC=5");
    assert_int_equal(timer_classify(p, n, false, 1000000, 1000, now, &b, why, sizeof(why)),
                     TIMER_DISABLED);
    assert_non_null(strstr(why, "timerWheelEnable"));
}

static void
timer_hold_and_tags(void **state)
{
    (void)state;
    char p[128];
    size_t n = mk(p, "KEYS=k|REAL_TOPIC=spoof|TIMER_DELAY_SEC=5");
    struct buf b;
    buf_init(&b);
    assert_int_equal(timer_hold_props(&b, p, n, 1700000005000LL, "Orders", 6, 3), 0);
    assert_props(&b, "KEYS=k|REAL_TOPIC=Orders|TIMER_DELAY_SEC=5|TIMER_OUT_MS=1700000005000|REAL_QID=3");
    int64_t tags = 0;
    assert_int_equal(timer_tags_of((char *)buf_head(&b), buf_len(&b), &tags), 0);
    assert_int_equal(tags, 1700000005000LL);
    tags = 7;
    n = mk(p, "TIMER_OUT_MS=soon");
    assert_int_equal(timer_tags_of(p, n, &tags), -1);
    assert_int_equal(tags, 7);
    buf_free(&b);
}

static void
timer_recall(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b);
    /* base64url("v1 T B 1001 U") */
    assert_int_equal(timer_recall_handle(&b, "T", 1, "B", 1, 1000, "U", 1), 0);
    const char *want = "djEgVCBCIDEwMDEgVQ==";
    assert_int_equal(buf_len(&b), strlen(want));
    assert_memory_equal(buf_head(&b), want, strlen(want));
    buf_reset(&b);
    /* Oversized: refused, nothing written. */
    static char big[1000];
    memset(big, 'x', sizeof(big));
    assert_int_equal(timer_recall_handle(&b, big, sizeof(big), "B", 1, 1, "U", 1), -EINVAL);
    assert_int_equal(buf_len(&b), 0);
    buf_free(&b);
}

/* The pair walk before it scanned 16 bytes a step (two memchr a pair):
 * the reference the fast walk must match on every string. */
static bool
next_reference(const char *p, size_t n, size_t *pos, struct prop *kv)
{
    while (*pos < n) {
        const char *seg = p + *pos;
        const char *end = memchr(seg, PROPS_SEP, n - *pos);
        size_t slen = end != NULL ? (size_t)(end - seg) : n - *pos;
        *pos += slen + 1;
        const char *sep = memchr(seg, PROPS_NAME_VALUE_SEP, slen);
        if (sep != NULL && sep > seg && (size_t)(sep - seg) + 1 < slen) {
            kv->k = seg;
            kv->klen = (size_t)(sep - seg);
            kv->v = sep + 1;
            kv->vlen = slen - kv->klen - 1;
            return true;
        }
    }
    return false;
}

/* Random strings over {a, b, 0x01, 0x02} of 0..80 bytes (so both the
 * 16-byte steps and the byte tail meet separators anywhere), each walked
 * from the front of a buffer that ends where it ends. */
static void
next_matches_reference(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    static const char alpha[4] = {'a', 'b', PROPS_NAME_VALUE_SEP, PROPS_SEP};
    for (int t = 0; t < 20000; t++) {
        char s[80];
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t n = (size_t)(x % 81);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            /* mostly letters: pairs of a few bytes */
            s[i] = (x & 7) < 5 ? alpha[x & 1] : alpha[2 + ((x >> 3) & 1)];
        }
        size_t pa = 0, pb = 0;
        struct prop ka, kb;
        for (;;) {
            bool a = props_next(s, n, &pa, &ka);
            bool b = next_reference(s, n, &pb, &kb);
            assert_int_equal(a, b);
            assert_int_equal(pa, pb);
            if (!a)
                break;
            assert_ptr_equal(ka.k, kb.k);
            assert_int_equal(ka.klen, kb.klen);
            assert_ptr_equal(ka.v, kb.v);
            assert_int_equal(ka.vlen, kb.vlen);
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(next_skips_what_java_drops),
        cmocka_unit_test(next_matches_reference),
        cmocka_unit_test(delay_levels),
        cmocka_unit_test(edit_sets_removes_appends),
        cmocka_unit_test(for_store_reads_facts),
        cmocka_unit_test(timer_precision),
        cmocka_unit_test(timer_send_rule),
        cmocka_unit_test(timer_hold_and_tags),
        cmocka_unit_test(timer_recall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
