/* peertab: the sorted table of peer addresses that the loop's frame
 * fairness (net/conn.c) and the memory budget (core/membudget.c) keep
 * their per-peer figures in (core/peertab.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/peertab.h"

/* A user's entry: the table's part first, its own figures after. */
struct counted {
    struct peertab_entry e;
    uint64_t frames;
    char pad[40];
};

/* Every entry in strictly increasing address order, refs > 0. */
static void
assert_sorted(const struct peertab *t)
{
    for (size_t i = 0; i < peertab_count(t); i++) {
        assert_true(peertab_at(t, i)->refs > 0);
        if (i > 0)
            assert_true(strcmp(peertab_at(t, i - 1)->addr, peertab_at(t, i)->addr) < 0);
    }
    assert_null(peertab_at(t, peertab_count(t)));
}

/* The connections of one address share its entry whatever their port;
 * the entry goes with the last of them. */
static void
one_entry_per_address(void **state)
{
    (void)state;
    struct peertab t;
    peertab_init(&t, sizeof(struct counted), 0);
    struct peertab_entry *a = peertab_join(&t, "10.0.0.1:5000");
    struct peertab_entry *b = peertab_join(&t, "10.0.0.1:5001");
    struct peertab_entry *c = peertab_join(&t, "10.0.0.2:5000");
    assert_non_null(a);
    assert_ptr_equal(a, b);
    assert_ptr_not_equal(a, c);
    assert_string_equal(a->addr, "10.0.0.1");
    assert_int_equal(a->refs, 2);
    assert_int_equal(peertab_count(&t), 2);
    assert_ptr_equal(peertab_find(&t, "10.0.0.1:9"), a);
    assert_ptr_equal(peertab_find(&t, "10.0.0.2"), c);
    assert_null(peertab_find(&t, "10.0.0.3:1"));
    /* A prefix of another address is another address. */
    assert_null(peertab_find(&t, "10.0.0.:1"));
    assert_null(peertab_find(&t, "10.0.0.10:1"));

    /* The caller's part starts zeroed and is the caller's to keep. */
    struct counted *ca = (struct counted *)a;
    assert_int_equal(ca->frames, 0);
    ca->frames = 7;

    peertab_leave(&t, b);
    assert_int_equal(peertab_count(&t), 2);
    assert_int_equal(((struct counted *)peertab_find(&t, "10.0.0.1:1"))->frames, 7);
    peertab_leave(&t, a);
    assert_int_equal(peertab_count(&t), 1);
    assert_null(peertab_find(&t, "10.0.0.1:5000"));
    /* Joined again, it is a new entry, zeroed. */
    a = peertab_join(&t, "10.0.0.1:5002");
    assert_int_equal(((struct counted *)a)->frames, 0);
    assert_int_equal(a->refs, 1);
    peertab_leave(&t, NULL);
    assert_sorted(&t);
    peertab_free(&t);
    assert_int_equal(peertab_count(&t), 0);
}

/* The port is what follows the last colon: "[v6]:port", "v6:port" and a
 * bare address; an address longer than the entry's room is cut. */
static void
address_forms(void **state)
{
    (void)state;
    assert_int_equal(peertab_addr_len("127.0.0.1:10911"), 9);
    assert_int_equal(peertab_addr_len("[::1]:10911"), 5);
    assert_int_equal(peertab_addr_len("fe80::1:10911"), 7);
    assert_int_equal(peertab_addr_len("host"), 4);
    assert_int_equal(peertab_addr_len(""), 0);
    char longp[200];
    memset(longp, 'a', 150);
    (void)snprintf(longp + 150, sizeof(longp) - 150, ":1");
    assert_int_equal(peertab_addr_len(longp), PEERTAB_ADDR_MAX - 1);

    struct peertab t;
    peertab_init(&t, 0, 4);
    struct peertab_entry *e = peertab_join(&t, longp);
    assert_non_null(e);
    assert_int_equal(strlen(e->addr), PEERTAB_ADDR_MAX - 1);
    /* Cut alike, two long addresses with one prefix share an entry. */
    longp[140] = 'b';
    assert_ptr_equal(peertab_join(&t, longp), e);
    assert_int_equal(e->refs, 2);
    struct peertab_entry *v6 = peertab_join(&t, "[::1]:1");
    assert_string_equal(v6->addr, "[::1]");
    peertab_free(&t);   /* entries still held go with the table */
}

/* Thousands of addresses joined and left in a scrambled order: the
 * table stays sorted, counts what is held, and gives its array back
 * when they have gone (a flood does not pin its peak). */
static void
many_addresses(void **state)
{
    (void)state;
    enum { N = 5000 };
    static struct peertab_entry *held[N][2];
    struct peertab t;
    peertab_init(&t, sizeof(struct counted), 16);
    char peer[64];
    for (unsigned k = 0; k < N; k++) {
        unsigned i = (k * 7919u) % N;   /* 7919 is prime to N: a permutation */
        (void)snprintf(peer, sizeof(peer), "10.%u.%u.%u:%u", i / 65536, (i / 256) % 256,
                       i % 256, 1000 + k);
        held[i][0] = peertab_join(&t, peer);
        assert_non_null(held[i][0]);
        held[i][1] = peertab_join(&t, peer);
        assert_ptr_equal(held[i][0], held[i][1]);
    }
    assert_int_equal(peertab_count(&t), N);
    assert_sorted(&t);
    size_t peak = t.cap;
    assert_true(peak >= N);
    for (unsigned k = 0; k < N; k++) {
        unsigned i = (k * 104729u) % N;
        peertab_leave(&t, held[i][0]);
        if (k % 1000 == 0)
            assert_sorted(&t);
    }
    assert_int_equal(peertab_count(&t), N);   /* each still held once */
    for (unsigned k = 0; k < N; k++) {
        unsigned i = (k * 31u + 3) % N;
        (void)snprintf(peer, sizeof(peer), "10.%u.%u.%u:1", i / 65536, (i / 256) % 256, i % 256);
        assert_ptr_equal(peertab_find(&t, peer), held[i][1]);
        peertab_leave(&t, held[i][1]);
        assert_null(peertab_find(&t, peer));
        assert_int_equal(peertab_count(&t), N - 1 - k);
    }
    assert_true(t.cap <= 4 * 16);
    assert_true(t.cap < peak);
    peertab_free(&t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_entry_per_address),
        cmocka_unit_test(address_forms),
        cmocka_unit_test(many_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
