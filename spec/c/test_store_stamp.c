/* store: a stored message's store timestamp never precedes its arrival.
 * The send path stages a loop pass's appends and commits them once; a
 * request whose frame was read after another request's staged record was
 * stamped must not take that earlier stamp (RocketMQ 4.9.8 reads the
 * clock per putMessage: a message is stamped after it arrived, and with
 * a producer on the broker's clock never before its bornTimestamp).
 * Here: a record staged, then the wall clock moves on by a millisecond
 * (the next request "arrives"), then that request's append.  Its stamp is
 * no earlier than the arrival, in every one of the rounds; rounds where
 * the coarse clock did not tick in between are counted, as that is when
 * a stamp shared within a coarse tick showed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/crc32.h"
#include "tmpdir.h"
#include "store/commitlog.h"

#define TOPIC "StampTopic"
#define ROUNDS 200

static int64_t
put_at(struct commitlog *cl, bool defer, int64_t arrived_ms)
{
    static const uint8_t body[16] = "0123456789abcdef";
    struct clog_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = TOPIC;
    m.topic_len = (uint32_t)strlen(TOPIC);
    m.body = body;
    m.body_len = sizeof(body);
    m.body_crc = rmq_body_crc(body, sizeof(body));
    m.born.len = 4;
    m.store.len = 4;
    m.len = clog_msg_len(&m);
    int64_t ts;
    assert_int_equal(clog_append(cl, &m, 1, &ts, defer, arrived_ms), 0);
    return ts;
}

static int64_t
put(struct commitlog *cl, bool defer)
{
    return put_at(cl, defer, 0);
}

/* An empty staged log of 1 MiB files in the test's directory. */
static void
open_log(struct commitlog *cl)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/commitlog", tdir);
    assert_int_equal(clog_open(cl, p, 1 << 20), 0);
    assert_int_equal(clog_set_end(cl, 0, false), 0);
    assert_int_equal(clog_set_staging(cl, 1 << 20), 0);
    assert_int_equal(clog_start(cl, false, 0), 0);
}

static void
a_later_request_is_stamped_after_it_arrived(void **state)
{
    (void)state;
    static struct commitlog cl;
    open_log(&cl);
    int same_tick = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int64_t coarse = clock_mono_coarse_ns();
        int64_t first = put(&cl, true);
        int64_t arrived;
        while ((arrived = clock_wall_ms()) <= first)
            ;
        if (clock_mono_coarse_ns() == coarse)
            same_tick++;
        int64_t second = put(&cl, true);
        assert_true(second >= arrived);
        assert_int_equal(clog_commit(&cl), 0);
    }
    print_message("%d of %d rounds within one coarse tick\n", same_tick, ROUNDS);
    clog_close(&cl);
}

/* The send path's own clock read (arrived_ms: read after its frames
 * arrived, once for a read's) is the stamp, unless the log's last stamp
 * is later: a log's stamps never go back, whatever order workers read
 * their clocks in. */
static void
a_callers_arrival_time_is_the_stamp_never_below_the_last(void **state)
{
    (void)state;
    static struct commitlog cl;
    open_log(&cl);
    int64_t now = clock_wall_ms();
    assert_int_equal(put_at(&cl, true, now + 5000), now + 5000);
    assert_int_equal(put_at(&cl, true, now + 6000), now + 6000);
    /* Read earlier by another worker, appended after: the last stamp. */
    assert_int_equal(put_at(&cl, true, now + 5500), now + 6000);
    /* No time given: the clock, and here that goes back (the log keeps
     * what 4.9.8 keeps: the clock's reading). */
    int64_t t = put(&cl, true);
    assert_true(t >= now && t < now + 5000);
    assert_int_equal(clog_commit(&cl), 0);
    clog_close(&cl);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_later_request_is_stamped_after_it_arrived, tdir_setup,
                                        tdir_teardown),
        cmocka_unit_test_setup_teardown(a_callers_arrival_time_is_the_stamp_never_below_the_last,
                                        tdir_setup, tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
