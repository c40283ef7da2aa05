/* hmap (keyed hash map) and jmap (Java HashMap order, keyed lookups). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/hmap.h"
#include "core/jmap.h"

static void
hmap_add_find_remove(void **state)
{
    (void)state;
    struct hmap m;
    hmap_init(&m, 4);
    char k[32];
    static int vals[5000];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(k, sizeof(k), "key-%d", i);
        vals[i] = i;
        assert_non_null(hmap_add(&m, hmap_hash(k, (size_t)n), k, (size_t)n, &vals[i]));
    }
    assert_int_equal(m.size, 5000);
    assert_true(m.cap >= 5000 / 2);   /* it grew */
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(k, sizeof(k), "key-%d", i);
        int *v = hmap_get(&m, k, (size_t)n);
        assert_non_null(v);
        assert_int_equal(*v, i);
    }
    assert_null(hmap_get(&m, "key-5000", 8));
    assert_null(hmap_get(&m, "key-1", 4));   /* a prefix is another key */
    /* Keys are bytes: an embedded NUL is part of the key. */
    assert_non_null(hmap_add(&m, hmap_hash("a\0b", 3), "a\0b", 3, &vals[0]));
    assert_null(hmap_get(&m, "a", 1));
    assert_ptr_equal(hmap_get(&m, "a\0b", 3), &vals[0]);
    void *out;
    assert_true(hmap_remove(&m, "a\0b", 3, &out));
    assert_ptr_equal(out, &vals[0]);
    assert_false(hmap_remove(&m, "a\0b", 3, &out));
    for (int i = 0; i < 5000; i += 2) {
        int n = snprintf(k, sizeof(k), "key-%d", i);
        assert_true(hmap_remove(&m, k, (size_t)n, &out));
        assert_int_equal(*(int *)out, i);
    }
    assert_int_equal(m.size, 2500);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(k, sizeof(k), "key-%d", i);
        if (i % 2)
            assert_non_null(hmap_get(&m, k, (size_t)n));
        else
            assert_null(hmap_get(&m, k, (size_t)n));
    }
    hmap_free(&m, NULL);
}

static void
hmap_iterate_and_remove(void **state)
{
    (void)state;
    struct hmap m;
    hmap_init(&m, 8);
    char k[16];
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(k, sizeof(k), "%d", i);
        assert_non_null(hmap_add(&m, hmap_hash(k, (size_t)n), k, (size_t)n, NULL));
    }
    /* Removing the node just returned while iterating: every node is seen once. */
    struct hiter it;
    hmap_iter_init(&it, &m);
    int seen = 0;
    struct hnode *nd;
    static unsigned char hit[1000];
    while ((nd = hmap_iter_next(&it)) != NULL) {
        int i = atoi(nd->key);
        assert_int_equal(hit[i], 0);
        hit[i] = 1;
        seen++;
        hmap_remove_node(&m, nd);
    }
    assert_int_equal(seen, 1000);
    assert_int_equal(m.size, 0);
    uint32_t before = m.cap;
    hmap_compact(&m);
    assert_true(m.cap < before);
    hmap_free(&m, NULL);
}

static void
hmap_one_bucket_chain(void **state)
{
    (void)state;
    /* Every key given the same hash (what a collision attack would aim
     * for without the key): still exact answers, from one chain. */
    struct hmap m;
    hmap_init(&m, 16);
    char k[16];
    for (int i = 0; i < 200; i++) {
        int n = snprintf(k, sizeof(k), "c%d", i);
        assert_non_null(hmap_add(&m, 42, k, (size_t)n, (void *)(intptr_t)(i + 1)));
    }
    for (int i = 0; i < 200; i++) {
        int n = snprintf(k, sizeof(k), "c%d", i);
        struct hnode *nd = hmap_find(&m, 42, k, (size_t)n);
        assert_non_null(nd);
        assert_int_equal((intptr_t)nd->val, i + 1);
    }
    assert_null(hmap_find(&m, 42, "c200", 4));
    hmap_free(&m, NULL);
}

/* Java's String.hashCode spread: h ^ (h >>> 16). */
static uint32_t
spread(uint32_t h)
{
    return h ^ (h >> 16);
}

static void
jmap_java_hashes(void **state)
{
    (void)state;
    assert_int_equal(jmap_hash_str("hello", 5), spread(99162322u));   /* "hello".hashCode() */
    assert_int_equal(jmap_hash_str("", 0), 0);
    /* The classic twins collide in Java's hash. */
    assert_int_equal(jmap_hash_str("Aa", 2), jmap_hash_str("BB", 2));
    /* UTF-16 code units: é is one unit (0xE9), U+1F600 two (a surrogate pair). */
    assert_int_equal(jmap_hash_str("\xc3\xa9", 2), spread(0xE9));
    assert_int_equal(jmap_hash_str("\xf0\x9f\x98\x80", 4), spread(0xD83Du * 31u + 0xDE00u));
    /* Invalid UTF-8 counts as U+FFFD. */
    assert_int_equal(jmap_hash_str("\xff", 1), jmap_hash_str("\xef\xbf\xbd", 3));
    /* Long.hashCode: (int)(v ^ (v >>> 32)). */
    assert_int_equal(jmap_hash_long(1), spread(1));
    assert_int_equal(jmap_hash_long(-1), spread(0));
    assert_int_equal(jmap_hash_long(0x100000001LL), spread(0));
    /* HashMap's growth: 16 buckets hold 12, the 13th put doubles them. */
    assert_int_equal(jmap_grown_cap(16, 12), 16);
    assert_int_equal(jmap_grown_cap(16, 13), 32);
    assert_int_equal(jmap_grown_cap(16, 0), 16);
}

static void
jmap_java_order_and_replace(void **state)
{
    (void)state;
    struct jmap m;
    jmap_init(&m, 16);
    int a = 1, b = 2, c = 3, d = 4;
    /* Put in c, a, b order; a HashMap iterates by bucket: a(1) b(2) c(3). */
    assert_non_null(jmap_put_str(&m, "c", 1, &c, NULL));
    assert_non_null(jmap_put_str(&m, "a", 1, &a, NULL));
    assert_non_null(jmap_put_str(&m, "b", 1, &b, NULL));
    void *old = &d;
    assert_non_null(jmap_put_str(&m, "a", 1, &d, &old));
    assert_ptr_equal(old, &a);
    assert_int_equal(m.size, 3);
    const char *want = "abc";
    struct jiter it;
    jmap_iter_init(&it, &m);
    struct jnode *n;
    int i = 0;
    while ((n = jmap_iter_next(&it)) != NULL) {
        assert_int_equal(n->klen, 1);
        assert_int_equal(n->key[0], want[i]);
        i++;
    }
    assert_int_equal(i, 3);
    assert_ptr_equal(jmap_get_str(&m, "a", 1), &d);
    /* Equal Java buckets keep insertion order in their chain. */
    assert_non_null(jmap_put_str(&m, "BB", 2, &b, NULL));
    assert_non_null(jmap_put_str(&m, "Aa", 2, &a, NULL));
    jmap_iter_init(&it, &m);
    const char *prev = NULL;
    while ((n = jmap_iter_next(&it)) != NULL) {
        if (n->klen == 2) {
            if (prev == NULL)
                assert_string_equal(n->key, "BB");
            else
                assert_string_equal(n->key, "Aa");
            prev = n->key;
        }
    }
    void *v;
    assert_true(jmap_remove_str(&m, "BB", 2, &v));
    assert_ptr_equal(v, &b);
    assert_false(jmap_remove_str(&m, "BB", 2, &v));
    assert_ptr_equal(jmap_get_str(&m, "Aa", 2), &a);
    jmap_free(&m, NULL);
}

static void
jmap_twins_stay_fast(void **state)
{
    (void)state;
    /* 2^12 keys with one Java hash (strings of "Aa"/"BB" pairs): Java
     * would walk one chain; the keyed index keeps lookups short. */
    struct jmap m;
    jmap_init(&m, 16);
    char k[32];
    for (int i = 0; i < 4096; i++) {
        for (int j = 0; j < 12; j++)
            memcpy(k + 2 * j, (i >> j) & 1 ? "BB" : "Aa", 2);
        assert_non_null(jmap_put_str(&m, k, 24, (void *)(intptr_t)(i + 1), NULL));
    }
    struct jmap_stats st;
    jmap_stats(&m, &st);
    assert_int_equal(st.size, 4096);
    assert_int_equal(st.max_java_chain, 4096);
    assert_true(st.max_keyed_chain <= 16);
    for (int i = 0; i < 4096; i++) {
        for (int j = 0; j < 12; j++)
            memcpy(k + 2 * j, (i >> j) & 1 ? "BB" : "Aa", 2);
        assert_int_equal((intptr_t)jmap_get_str(&m, k, 24), i + 1);
    }
    jmap_free(&m, NULL);
}

static void
jmap_long_keys(void **state)
{
    (void)state;
    struct jmap m;
    jmap_init(&m, 16);
    int64_t keys[] = { 0, 1, -1, INT64_MAX, INT64_MIN, 0x100000001LL };
    for (size_t i = 0; i < 6; i++)
        assert_non_null(jmap_put_long(&m, keys[i], (void *)(intptr_t)(i + 1), NULL));
    for (size_t i = 0; i < 6; i++)
        assert_int_equal((intptr_t)jmap_get_long(&m, keys[i]), (intptr_t)(i + 1));
    struct jiter it;
    jmap_iter_init(&it, &m);
    struct jnode *n;
    int seen = 0;
    while ((n = jmap_iter_next(&it)) != NULL) {
        int64_t key = jmap_key_long(n);
        assert_int_equal((intptr_t)jmap_get_long(&m, key), (intptr_t)n->val);
        seen++;
    }
    assert_int_equal(seen, 6);
    assert_true(jmap_remove_long(&m, INT64_MIN, NULL));
    assert_null(jmap_get_long(&m, INT64_MIN));
    jmap_free(&m, NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hmap_add_find_remove),
        cmocka_unit_test(hmap_iterate_and_remove),
        cmocka_unit_test(hmap_one_bucket_chain),
        cmocka_unit_test(jmap_java_hashes),
        cmocka_unit_test(jmap_java_order_and_replace),
        cmocka_unit_test(jmap_twins_stay_fast),
        cmocka_unit_test(jmap_long_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
