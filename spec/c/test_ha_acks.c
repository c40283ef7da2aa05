/* The SyncStateSet members' acknowledgements (src/ha/ha_acks.h): each
 * member counted once, by its newest live connection; contradictory or
 * oversized lists acknowledge nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ha/ha_acks.h"

static struct ha_acks *
parsed(const char *list)
{
    struct ha_acks *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    assert_int_equal(ha_acks_parse(a, list), 0);
    return a;
}

/* A connection named peer, accepted as the seq-th, that acknowledged ack. */
static void
conn(struct ha_acks *a, const char *peer, uint64_t seq, int64_t ack)
{
    ha_acks_add(a, ha_acks_member(a, peer), seq, ack);
}

/* Two live connections of one member (its old one half-open after a
 * reconnect: same host and port after a reboot) do not stand in for a
 * member that has none. */
static void
two_connections_of_one_member_are_one_member(void **state)
{
    (void)state;
    struct ha_acks *a = parsed("10.0.0.2:40000;10.0.0.3:40000");
    assert_int_equal(a->nmembers, 2);
    ha_acks_reset(a);
    conn(a, "10.0.0.2:40000", 1, 1000);
    conn(a, "10.0.0.2:40000", 2, 2000);
    assert_int_equal(ha_acks_low(a), -1);
    /* the other member connects: every member has it up to the smaller */
    conn(a, "10.0.0.3:40000", 3, 1500);
    assert_int_equal(ha_acks_low(a), 1500);
    /* the same with the member's two names in the list (two ports) */
    free(a);
    a = parsed("10.0.0.2:40001,10.0.0.2:40002;absent:3");
    ha_acks_reset(a);
    conn(a, "10.0.0.2:40001", 1, 1000);
    conn(a, "10.0.0.2:40002", 2, 2000);
    assert_int_equal(ha_acks_low(a), -1);
    free(a);
}

/* A member's ack is its newest connection's, not its best: the old
 * connection's may be of a log the member no longer has. */
static void
the_newest_connection_speaks_for_its_member(void **state)
{
    (void)state;
    struct ha_acks *a = parsed("10.0.0.2:1,10.0.0.2:2;10.0.0.3:1");
    ha_acks_reset(a);
    conn(a, "10.0.0.2:1", 1, 5000);   /* old, the best */
    conn(a, "10.0.0.3:1", 2, 4000);
    conn(a, "10.0.0.2:2", 3, 3000);   /* newest: its log ends here now */
    assert_int_equal(ha_acks_low(a), 3000);
    /* order of the connections does not matter, only their seq */
    ha_acks_reset(a);
    conn(a, "10.0.0.2:2", 3, 3000);
    conn(a, "10.0.0.3:1", 2, 4000);
    conn(a, "10.0.0.2:1", 1, 5000);
    assert_int_equal(ha_acks_low(a), 3000);
    /* a newest connection that has not reported yet holds every offset */
    ha_acks_reset(a);
    conn(a, "10.0.0.2:1", 1, 5000);
    conn(a, "10.0.0.3:1", 2, 4000);
    conn(a, "10.0.0.2:2", 3, -1);
    assert_int_equal(ha_acks_low(a), -1);
    free(a);
}

static void
every_member_or_nothing(void **state)
{
    (void)state;
    struct ha_acks *a = parsed("a:1;b:1;c:1");
    ha_acks_reset(a);
    conn(a, "a:1", 1, 300);
    conn(a, "b:1", 2, 100);
    assert_int_equal(ha_acks_low(a), -1);
    conn(a, "c:1", 3, 200);
    assert_int_equal(ha_acks_low(a), 100);
    /* a connection no member has counts for nobody */
    ha_acks_reset(a);
    conn(a, "a:1", 1, 300);
    conn(a, "b:1", 2, 300);
    conn(a, "x:1", 3, 300);
    conn(a, "x:1", 4, 300);
    assert_int_equal(ha_acks_low(a), -1);
    assert_int_equal(ha_acks_member(a, "x:1"), -1);
    assert_int_equal(ha_acks_member(a, "a:"), -1);
    assert_int_equal(ha_acks_member(a, "a:10"), -1);
    free(a);
    /* a member named only by "absent:ID" holds every offset */
    a = parsed("a:1;absent:3");
    ha_acks_reset(a);
    conn(a, "a:1", 1, 300);
    assert_int_equal(ha_acks_low(a), -1);
    free(a);
    /* no member named: nothing to count on (the caller counts instead) */
    a = parsed("");
    ha_acks_reset(a);
    assert_int_equal(a->nmembers, 0);
    assert_int_equal(ha_acks_low(a), -1);
    free(a);
}

static void
separators_spaces_and_empty_items(void **state)
{
    (void)state;
    struct ha_acks *a = parsed(" ;a:1 ,, a:2;; b:1 ;,;");
    assert_int_equal(a->nmembers, 2);
    assert_int_equal(a->nnames, 3);
    assert_int_equal(ha_acks_member(a, "a:1"), ha_acks_member(a, "a:2"));
    assert_int_not_equal(ha_acks_member(a, "a:1"), ha_acks_member(a, "b:1"));
    free(a);
}

/* One connection named for two members would count twice: refused, and
 * nothing is acknowledged until the next list. */
static void
one_connection_for_two_members_is_refused(void **state)
{
    (void)state;
    struct ha_acks *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    assert_int_equal(ha_acks_parse(a, "a:1,a:2;b:1,a:1"), -1);
    ha_acks_reset(a);
    conn(a, "a:1", 1, 100);
    conn(a, "a:2", 2, 100);
    conn(a, "b:1", 3, 100);
    assert_int_equal(ha_acks_low(a), -1);
    /* a name twice for one member is only redundant */
    assert_int_equal(ha_acks_parse(a, "a:1,a:1;b:1"), 0);
    ha_acks_reset(a);
    conn(a, "a:1", 1, 100);
    conn(a, "b:1", 2, 200);
    assert_int_equal(ha_acks_low(a), 100);
    free(a);
}

/* The bounds: members, names, bytes; past them nothing counts. */
static void
bounded(void **state)
{
    (void)state;
    struct ha_acks *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    char *list = malloc(HA_ACKS_TEXT_MAX + 16);
    assert_non_null(list);
    size_t n = 0;
    for (int i = 0; i < HA_ACKS_MEMBERS_MAX; i++)
        n += (size_t)snprintf(list + n, 16, "%s%d:1", i ? ";" : "", i);
    assert_int_equal(ha_acks_parse(a, list), 0);
    assert_int_equal(a->nmembers, HA_ACKS_MEMBERS_MAX);
    /* every member found by binary search, and counted */
    ha_acks_reset(a);
    for (int i = 0; i < HA_ACKS_MEMBERS_MAX; i++) {
        char peer[16];
        snprintf(peer, sizeof(peer), "%d:1", i);
        int m = ha_acks_member(a, peer);
        assert_true(m >= 0);
        ha_acks_add(a, m, (uint64_t)i + 1, 1000 + i);
    }
    assert_int_equal(ha_acks_low(a), 1000);
    snprintf(list + n, 16, ";x:1");
    assert_int_equal(ha_acks_parse(a, list), -1);
    ha_acks_reset(a);
    assert_int_equal(ha_acks_low(a), -1);
    /* names past HA_ACKS_NAMES_MAX (one member's) */
    n = 0;
    for (int i = 0; i <= HA_ACKS_NAMES_MAX; i++)
        n += (size_t)snprintf(list + n, 16, "%s%d", i ? "," : "", i);
    assert_int_equal(ha_acks_parse(a, list), -1);
    /* bytes past the text */
    memset(list, 'a', HA_ACKS_TEXT_MAX);
    list[HA_ACKS_TEXT_MAX] = '\0';
    assert_int_equal(ha_acks_parse(a, list), -1);
    ha_acks_reset(a);
    assert_int_equal(ha_acks_low(a), -1);
    free(list);
    free(a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_connections_of_one_member_are_one_member),
        cmocka_unit_test(the_newest_connection_speaks_for_its_member),
        cmocka_unit_test(every_member_or_nothing),
        cmocka_unit_test(separators_spaces_and_empty_items),
        cmocka_unit_test(one_connection_for_two_members_is_refused),
        cmocka_unit_test(bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
