/* notify: the process-wide table of who waits on which topic@queue key
 * (net/notify.h).  Its keys are names a peer chooses, so it is a keyed,
 * growing hash map (core/hmap.h): these cases check that it still does
 * what the held pulls rely on with many keys, and that every key goes
 * once its waiters have (what keys of one old FNV-1a bucket cost:
 * scripts/bench/notify_flood.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <cmocka.h>

#include "net/notify.h"

#define SLOTS 5

static void
key_of(char *k, size_t cap, const char *prefix, long i)
{
    snprintf(k, cap, "%s%ld@%ld", prefix, i, i % 8);
}

/* Each key wakes its own slot once until taken, and none after its last
 * waiter went. */
static void
check_keys(char (*keys)[48], long n)
{
    int slots[NOTIFY_MAX_SLOTS];
    for (long i = 0; i < n; i++)
        assert_int_equal(notify_interest(keys[i], strlen(keys[i]), (int)(i % SLOTS), +1), 0);
    for (long i = 0; i < n; i++) {
        size_t kl = strlen(keys[i]);
        assert_int_equal(notify_raise(keys[i], kl, slots, NOTIFY_MAX_SLOTS), 1);
        assert_int_equal(slots[0], (int)(i % SLOTS));
        /* A wake is pending: a second raise posts nothing. */
        assert_int_equal(notify_raise(keys[i], kl, slots, NOTIFY_MAX_SLOTS), 0);
        notify_taken(keys[i], kl, (int)(i % SLOTS));
        assert_int_equal(notify_raise(keys[i], kl, slots, NOTIFY_MAX_SLOTS), 1);
        notify_taken(keys[i], kl, (int)(i % SLOTS));
    }
    for (long i = 0; i < n; i++)
        assert_int_equal(notify_interest(keys[i], strlen(keys[i]), (int)(i % SLOTS), -1), 0);
    for (long i = 0; i < n; i++)
        assert_int_equal(notify_raise(keys[i], strlen(keys[i]), slots, NOTIFY_MAX_SLOTS), 0);
}

static void
many_keys(void **state)
{
    (void)state;
    long n = 20000;
    char (*keys)[48] = calloc((size_t)n, sizeof(*keys));
    assert_non_null(keys);
    for (long i = 0; i < n; i++)
        key_of(keys[i], sizeof(keys[i]), "Topic", i);
    check_keys(keys, n);
    free(keys);
}

/* Several slots on one key: each is told once; a slot whose waiters all
 * left is not told, and its pending bit does not outlive them. */
static void
slots_of_one_key(void **state)
{
    (void)state;
    const char *k = "TopicA@3";
    size_t kl = strlen(k);
    int slots[NOTIFY_MAX_SLOTS];
    assert_int_equal(notify_interest(k, kl, 1, +1), 0);
    assert_int_equal(notify_interest(k, kl, 1, +1), 0);
    assert_int_equal(notify_interest(k, kl, 4, +1), 0);
    assert_int_equal(notify_raise(k, kl, slots, NOTIFY_MAX_SLOTS), 2);
    assert_int_equal(slots[0], 1);
    assert_int_equal(slots[1], 4);
    assert_int_equal(notify_interest(k, kl, 4, -1), 0);
    notify_taken(k, kl, 1);
    assert_int_equal(notify_raise(k, kl, slots, NOTIFY_MAX_SLOTS), 1);
    assert_int_equal(slots[0], 1);
    assert_int_equal(notify_interest(k, kl, 4, +1), 0);   /* back, nothing pending */
    assert_int_equal(notify_raise(k, kl, slots, NOTIFY_MAX_SLOTS), 1);
    assert_int_equal(slots[0], 4);
    assert_int_equal(notify_interest(k, kl, 1, -1), 0);
    assert_int_equal(notify_interest(k, kl, 1, -1), 0);
    assert_int_equal(notify_interest(k, kl, 4, -1), 0);
    assert_int_equal(notify_raise(k, kl, slots, NOTIFY_MAX_SLOTS), 0);
    assert_int_equal(notify_interest(k, kl, NOTIFY_MAX_SLOTS, +1), -EINVAL);
}

/* Held POPs of a whole topic ("topic@*") are counted for the send path. */
static void
star_waiters(void **state)
{
    (void)state;
    assert_false(notify_star_waiting());
    assert_int_equal(notify_interest("T@*", 3, 0, +1), 0);
    assert_true(notify_star_waiting());
    assert_int_equal(notify_interest("T@*", 3, 0, -1), 0);
    assert_false(notify_star_waiting());
}

/* While no key at all is waited on, a raise skips the table (one load):
 * the count of keys it reads must follow every key in and out, or a
 * raise for a held pull would find nothing. */
static void
raise_with_no_waiters(void **state)
{
    (void)state;
    int slots[NOTIFY_MAX_SLOTS];
    assert_int_equal(notify_raise("A@0", 3, slots, NOTIFY_MAX_SLOTS), 0);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(notify_interest("A@0", 3, 2, +1), 0);
        assert_int_equal(notify_interest("A@0", 3, 3, +1), 0);   /* one key, two slots */
        assert_int_equal(notify_raise("B@0", 3, slots, NOTIFY_MAX_SLOTS), 0);
        assert_int_equal(notify_raise("A@0", 3, slots, NOTIFY_MAX_SLOTS), 2);
        notify_taken("A@0", 3, 2);
        notify_taken("A@0", 3, 3);
        assert_int_equal(notify_interest("A@0", 3, 2, -1), 0);
        assert_int_equal(notify_raise("A@0", 3, slots, NOTIFY_MAX_SLOTS), 1);
        notify_taken("A@0", 3, 3);
        assert_int_equal(notify_interest("A@0", 3, 3, -1), 0);
        assert_int_equal(notify_raise("A@0", 3, slots, NOTIFY_MAX_SLOTS), 0);
    }
    /* Gone and back: counted again. */
    assert_int_equal(notify_interest("B@1", 3, 1, +1), 0);
    assert_int_equal(notify_raise("B@1", 3, slots, NOTIFY_MAX_SLOTS), 1);
    assert_int_equal(slots[0], 1);
    assert_int_equal(notify_interest("B@1", 3, 1, -1), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_keys),
        cmocka_unit_test(slots_of_one_key),
        cmocka_unit_test(raise_with_no_waiters),
        cmocka_unit_test(star_waiters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
