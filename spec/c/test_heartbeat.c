/* A subscription as the broker keeps it (proto/heartbeat.h hb_normalize):
 * FilterAPI.buildSubscriptionData's TAG rules, the one implementation
 * the pull and heartbeat processors share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/jstr.h"
#include "proto/heartbeat.h"

static struct hb_str
s(const char *p)
{
    return (struct hb_str){ p, p != NULL ? (uint32_t)strlen(p) : 0 };
}

/* Normalises (sub_string, expression_type) and checks the tags kept, in
 * order, NULL-terminated; want_all: the subString became "*". */
static void
check(const char *sub, const char *type, bool is_tag, bool want_all, const char *const *want)
{
    struct hb_sub hs;
    memset(&hs, 0, sizeof(hs));
    hs.topic = s("T");
    hs.sub_string = s(sub);
    hs.expression_type = s(type);
    struct hb_norm n;
    assert_int_equal(hb_normalize(&hs, &n), 0);
    assert_int_equal(n.is_tag, is_tag);
    if (want_all) {
        assert_int_equal(n.sub_string.len, 1);
        assert_memory_equal(n.sub_string.p, "*", 1);
    }
    uint32_t k = 0;
    for (; want != NULL && want[k] != NULL; k++) {
        assert_true(k < n.ntags);
        assert_int_equal(n.tags[k].len, strlen(want[k]));
        assert_memory_equal(n.tags[k].p, want[k], n.tags[k].len);
        assert_int_equal(n.codes[k], java_hash(want[k], strlen(want[k])));
    }
    assert_int_equal(n.ntags, k);
    hb_norm_free(&n);
}

static void
tags_split_trimmed_deduplicated(void **state)
{
    (void)state;
    check("TagA || TagB ||TagA", "TAG", true, false, (const char *const[]){ "TagA", "TagB", NULL });
    /* Java's split("\\|\\|"): a "|" before the end stays in the tag. */
    check("x||a|", "TAG", true, false, (const char *const[]){ "x", "a|", NULL });
    check("a|||b", NULL, true, false, (const char *const[]){ "a", "|b", NULL });
    /* "||": every part empty, nothing matches (no tags, not "*"). */
    check("||", "TAG", true, false, NULL);
}

static void
everything_forms(void **state)
{
    (void)state;
    check("*", NULL, true, true, NULL);
    check("", "", true, true, NULL);
    check(" * ", "TAG", true, true, NULL);
    check(NULL, "TAG", true, true, NULL);
}

static void
sql_kept_as_written(void **state)
{
    (void)state;
    check("a > 1", "SQL92", false, false, NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tags_split_trimmed_deduplicated),
        cmocka_unit_test(everything_forms),
        cmocka_unit_test(sql_kept_as_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
