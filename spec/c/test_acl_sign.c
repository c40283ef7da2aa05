/* ACL 1.0 request signatures (acl/acl_sign.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "acl/acl_sign.h"
#include "core/buf.h"
#include "net/codec.h"

#define S(lit) { lit, sizeof(lit) - 1 }

static void
hmac_sha1_vectors(void **state)
{
    (void)state;
    struct acl_signer *s = acl_signer_new();
    assert_non_null(s);
    char out[ACL_SIGNATURE_LEN + 1];
    /* RFC 2202 test case 2: HMAC-SHA1("Jefe", "what do ya want for nothing?"). */
    const char *d = "what do ya want for nothing?";
    assert_int_equal(acl_sign_data(s, d, strlen(d), "Jefe", 4, out), 0);
    assert_string_equal(out, "7/zfauXrL6LSdBbV8YTfnCWafHk=");
    /* Empty data and empty secret still give 28 characters. */
    assert_int_equal(acl_sign_data(s, "", 0, "", 0, out), 0);
    assert_int_equal(strlen(out), ACL_SIGNATURE_LEN);
    /* A secret longer than the SHA-1 block is hashed first (RFC 2104). */
    char key[200];
    memset(key, 'k', sizeof(key));
    char out2[ACL_SIGNATURE_LEN + 1];
    assert_int_equal(acl_sign_data(s, d, strlen(d), key, sizeof(key), out2), 0);
    assert_string_not_equal(out, out2);
    acl_signer_free(s);
    acl_signer_free(NULL);
}

static void
content_is_sorted_values_then_body(void **state)
{
    (void)state;
    struct rmq_field ext[] = {
        { S("topic"), S("T") },
        { S("Signature"), S("ignored") },
        { S("AccessKey"), S("ak") },
        { S("_UNIQUE_KEY_QUERY"), S("u") },
        { S("b"), S("2") },
    };
    struct rmq_cmd c = { .code = 10, .ext = ext, .ext_count = 5,
                         .body = (const uint8_t *)"BODY", .body_len = 4 };
    struct buf b;
    buf_init(&b);
    /* Java String order: upper case before lower, '_' (0x5f) between. */
    assert_int_equal(acl_sign_content(&c, 0, &b), 0);
    assert_int_equal(buf_len(&b), strlen("aku2TBODY"));
    assert_memory_equal(buf_head(&b), "aku2TBODY", buf_len(&b));
    buf_reset(&b);
    assert_int_equal(acl_sign_content(&c, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, &b), 0);
    assert_memory_equal(buf_head(&b), "ak2TBODY", buf_len(&b));
    /* The signature is the HMAC of exactly that content. */
    struct acl_signer *s = acl_signer_new();
    assert_non_null(s);
    char a[ACL_SIGNATURE_LEN + 1], want[ACL_SIGNATURE_LEN + 1];
    assert_int_equal(acl_sign_cmd(s, &c, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, "secret", 6, a), 0);
    assert_int_equal(acl_sign_data(s, buf_head(&b), buf_len(&b), "secret", 6, want), 0);
    assert_string_equal(a, want);
    /* Changing any signed byte changes the signature. */
    ext[4].val.p = "3";
    assert_int_equal(acl_sign_cmd(s, &c, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, "secret", 6, want), 0);
    assert_string_not_equal(a, want);
    acl_signer_free(s);
    buf_free(&b);
}

static void
many_fields_and_no_fields(void **state)
{
    (void)state;
    /* More fields than fit the stack: one allocation, same rule. */
    enum { N = 300 };
    static struct rmq_field ext[N];
    static char keys[N][8], vals[N][8];
    for (int i = 0; i < N; i++) {
        int j = N - 1 - i;   /* given in reverse order */
        snprintf(keys[i], sizeof(keys[i]), "k%03d", j);
        snprintf(vals[i], sizeof(vals[i]), "%03d", j);
        ext[i] = (struct rmq_field){ { keys[i], 4 }, { vals[i], 3 } };
    }
    struct rmq_cmd c = { .code = 10, .ext = ext, .ext_count = N };
    struct buf b;
    buf_init(&b);
    assert_int_equal(acl_sign_content(&c, 0, &b), 0);
    assert_int_equal(buf_len(&b), 3 * N);
    for (int i = 0; i < N; i++) {
        char want[4];
        snprintf(want, sizeof(want), "%03d", i);
        assert_memory_equal(buf_head(&b) + 3 * i, want, 3);
    }
    buf_reset(&b);
    struct rmq_cmd none = { .code = 10 };
    assert_int_equal(acl_sign_content(&none, 0, &b), 0);
    assert_int_equal(buf_len(&b), 0);
    buf_free(&b);
}

static void
java_string_order(void **state)
{
    (void)state;
    /* U+E000 (EE 80 80) against U+10000 (F0 90 80 80): bytes say E000
     * first, UTF-16 says the surrogate D800 first. */
    assert_true(acl_java_strcmp("\xee\x80\x80", 3, "\xf0\x90\x80\x80", 4) > 0);
    assert_true(acl_java_strcmp("a", 1, "b", 1) < 0);
    assert_true(acl_java_strcmp("ab", 2, "a", 1) > 0);
    assert_int_equal(acl_java_strcmp("same", 4, "same", 4), 0);
    assert_true(acl_java_strcmp("Z", 1, "a", 1) < 0);
    /* Malformed UTF-8: each bad byte is U+FFFD, as in the String the
     * Java broker decodes, so two different bad bytes compare equal and
     * a cut sequence sorts after any BMP character below U+FFFD. */
    assert_int_equal(acl_java_strcmp("a\xff", 2, "a\xfe", 2), 0);
    assert_true(acl_java_strcmp("\xe2\x82", 2, "\xe2\x82\xac", 3) > 0);
    assert_true(acl_java_strcmp("\xff", 1, "\xef\xbf\xbd", 3) == 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hmac_sha1_vectors),
        cmocka_unit_test(content_is_sorted_values_then_body),
        cmocka_unit_test(many_fields_and_no_fields),
        cmocka_unit_test(java_string_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
