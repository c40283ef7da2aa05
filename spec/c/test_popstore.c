/* The POP lease structure (store/popstore.h): leases, bounds, ack,
 * invisible-time changes, revive, orderly state, and the lease log's
 * replay (a torn tail is cut, the rest kept). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "store/popstore.h"
#include "tmpdir.h"

#define G "group", 5
#define T "topic", 5

static const struct popstore_conf CONF = { .max_per_group = 10, .max_total = 15,
                                           .compact_bytes = 1 << 20 };

static struct pop_lease
lease(int64_t off, int64_t pop_time, int64_t deadline)
{
    return (struct pop_lease){ .offset = off, .phy = off * 100, .pop_time = pop_time,
                               .deadline = deadline, .size = 100 };
}

static void
lease_ack_change_revive(void **state)
{
    (void)state;
    struct popstore *ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    assert_int_equal(popstore_room(ps, G), 10);
    struct pop_lease v[3] = { lease(0, 1000, 61000), lease(1, 1000, 61000), lease(2, 1000, 61000) };
    assert_int_equal(popstore_lease(ps, G, T, 0, v, 3, 3), 0);
    assert_int_equal(popstore_room(ps, G), 7);
    assert_int_equal(popstore_live(ps, G, T, 0), 3);
    assert_true(popstore_leased(ps, G, T, 0, 1));
    assert_false(popstore_leased(ps, G, T, 1, 1));   /* another queue */
    int64_t floor;
    /* An ack with the wrong pop time (a stale receipt) ends nothing. */
    assert_int_equal(popstore_ack(ps, G, T, 0, 1, 999, &floor), -ENOENT);
    assert_int_equal(popstore_ack(ps, G, T, 0, 1, 1000, &floor), 0);
    assert_int_equal(popstore_ack(ps, G, T, 0, 1, 1000, &floor), -ENOENT);   /* twice */
    assert_false(popstore_leased(ps, G, T, 0, 1));
    /* Offset 0 gets a longer invisible time: only offset 2 is due at 61000. */
    assert_int_equal(popstore_change(ps, G, T, 0, 0, 1000, 2000, 120000), 0);
    assert_int_equal(popstore_change(ps, G, T, 0, 0, 1000, 3000, 1), -ENOENT);   /* old receipt */
    struct pop_due due[4];
    assert_int_equal(popstore_due(ps, 60999, due, 4), 0);
    assert_int_equal(popstore_due(ps, 61000, due, 4), 1);
    assert_int_equal(due[0].l.offset, 2);
    assert_string_equal(due[0].group, "group");
    assert_string_equal(due[0].topic, "topic");
    /* Being revived: not handed out again, but an ACK still ends it. */
    assert_int_equal(popstore_due(ps, 61000, due + 1, 3), 0);
    popstore_revived(ps, &due[0], true, 0);
    assert_false(popstore_leased(ps, G, T, 0, 2));
    struct popstore_stats st;
    popstore_get_stats(ps, &st);
    assert_int_equal(st.inflight, 1);
    assert_int_equal(st.acked, 1);
    assert_int_equal(st.revived, 1);
    assert_int_equal(st.changed, 1);
    /* A failed revive is tried again after retry_ms. */
    assert_int_equal(popstore_due(ps, 120000, due, 4), 1);
    popstore_revived(ps, &due[0], false, 125000);   /* retry at (absolute) */
    assert_int_equal(popstore_due(ps, 124999, due, 4), 0);
    assert_int_equal(popstore_due(ps, 125000, due, 4), 1);
    popstore_close(ps);
}

static void
bounds_and_locks(void **state)
{
    (void)state;
    struct popstore *ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    struct pop_lease v[10];
    for (int i = 0; i < 10; i++)
        v[i] = lease(100 + i, 5, 100000);
    assert_int_equal(popstore_lease(ps, G, T, 3, v, 10, 110), 0);
    assert_int_equal(popstore_room(ps, G), 0);
    /* Another group is held by the total (15) once this one has 10 in
     * flight (and whatever the previous test left). */
    int64_t other = popstore_room(ps, "other", 5);
    assert_true(other >= 0 && other <= 5);
    /* The queue lock: one POP at a time per (group, topic, queue). */
    assert_true(popstore_try_lock(ps, G, T, 3));
    assert_false(popstore_try_lock(ps, G, T, 3));
    assert_true(popstore_try_lock(ps, G, T, 4));
    popstore_unlock(ps, G, T, 3);
    assert_true(popstore_try_lock(ps, G, T, 3));
    popstore_unlock(ps, G, T, 3);
    popstore_unlock(ps, G, T, 4);
    /* A batch ack ends exactly the leases named. */
    int64_t offs[] = { 100, 101, 999, 102 };
    int64_t floor;
    assert_int_equal(popstore_room(ps, G), 0);   /* over the bound: 0, not negative */
    assert_int_equal(popstore_ack_batch(ps, G, T, 3, offs, 4, 5, &floor), 3);
    assert_int_equal(popstore_live(ps, G, T, 3), 7);
    assert_int_equal(popstore_room(ps, G), CONF.max_per_group - popstore_live(ps, G, T, 0) -
                                               popstore_live(ps, G, T, 3));
    /* A name longer than POP_NAME_MAX is refused, not truncated. */
    char big[POP_NAME_MAX + 2];
    memset(big, 'g', sizeof(big));
    struct pop_lease one = lease(1, 5, 100000);
    assert_int_not_equal(popstore_lease(ps, big, sizeof(big), T, 0, &one, 1, 2), 0);
    popstore_close(ps);
}

static void
log_replays_and_cuts_torn_tail(void **state)
{
    (void)state;
    /* What the earlier tests left is replayed on open. */
    struct popstore *ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    assert_int_equal(popstore_live(ps, G, T, 0), 1);   /* offset 0 (changed) */
    assert_true(popstore_leased(ps, G, T, 0, 0));
    assert_int_equal(popstore_live(ps, G, T, 3), 7);
    struct popstore_stats st;
    popstore_get_stats(ps, &st);
    int64_t inflight = st.inflight;
    /* One more lease, then its write torn after 3 bytes (a crash
     * mid-write): the replay cuts the log back to where it was. */
    char p[300];
    snprintf(p, sizeof(p), "%s/lease.log", tdir);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    off_t before = sb.st_size;
    struct pop_lease x = lease(500, 7, 100000);
    assert_int_equal(popstore_lease(ps, G, T, 9, &x, 1, 501), 0);
    popstore_close(ps);
    assert_int_equal(stat(p, &sb), 0);
    assert_true(sb.st_size > before + 3);
    assert_int_equal(truncate(p, before + 3), 0);
    ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    assert_false(popstore_leased(ps, G, T, 9, 500));
    popstore_get_stats(ps, &st);
    assert_int_equal(st.inflight, inflight);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, before);
    /* Garbage appended: cut too, the store still opens and serves. */
    popstore_close(ps);
    int fd = open(p, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    static const char junk[64] = "\xff\xff\xff\x7f garbage that is no record";
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    assert_int_equal(popstore_live(ps, G, T, 3), 7);
    assert_int_equal(popstore_lease(ps, G, T, 9, &x, 1, 501), 0);
    assert_true(popstore_leased(ps, G, T, 9, 500));
    popstore_close(ps);
}

static void
orderly_state(void **state)
{
    (void)state;
    struct popstore *ps = popstore_open(tdir, &CONF);
    assert_non_null(ps);
    int64_t first = -1;
    assert_int_equal(popstore_order_state(ps, "og", 2, T, 0, 1000, &first), POP_ORDER_FREE);
    struct pop_lease v[2] = { lease(10, 1000, 2000), lease(11, 1000, 2000) };
    v[0].order = v[1].order = 1;
    assert_int_equal(popstore_lease(ps, "og", 2, T, 0, v, 2, 12), 0);
    assert_int_equal(popstore_order_state(ps, "og", 2, T, 0, 1500, &first), POP_ORDER_BLOCKED);
    assert_int_equal(popstore_order_state(ps, "og", 2, T, 0, 2000, &first), POP_ORDER_EXPIRED);
    assert_int_equal(first, 10);
    /* Re-popped in place: one more attempt counted. */
    struct pop_lease again[2] = { lease(10, 2000, 3000), lease(11, 2000, 3000) };
    again[0].order = again[1].order = 1;
    assert_int_equal(popstore_lease(ps, "og", 2, T, 0, again, 2, 12), 0);
    assert_int_equal(again[0].attempts, 1);
    /* Orderly leases are never revived. */
    struct pop_due due[4];
    int n = popstore_due(ps, 10000000, due, 4);
    for (int i = 0; i < n; i++)
        assert_string_not_equal(due[i].group, "og");
    int64_t floor = -1;
    assert_int_equal(popstore_ack(ps, "og", 2, T, 0, 10, 2000, &floor), 0);
    assert_int_equal(floor, 11);
    popstore_close(ps);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lease_ack_change_revive),
        cmocka_unit_test(bounds_and_locks),
        cmocka_unit_test(log_replays_and_cuts_torn_tail),
        cmocka_unit_test(orderly_state),
    };
    return cmocka_run_group_tests(tests, tdir_setup, tdir_teardown);
}
