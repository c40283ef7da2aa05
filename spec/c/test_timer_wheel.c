/* The timer wheel (store/timer.c) over a real store in a temp dir:
 * bucket-by-bucket delivery at the clock it is given (never early), the
 * wake list, a record it cannot deliver dropped (not retried forever),
 * and a reopen that delivers nothing twice. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/buf.h"
#include "tmpdir.h"
#include "store/access.h"
#include "store/props.h"
#include "store/store.h"
#include "store/timer.h"

static struct store *
open_store(void)
{
    struct store_conf c;
    store_conf_defaults(&c);
    c.clog_file_size = 1 << 20;
    c.cq_file_size = 20 * 1000;
    c.timer_enable = true;
    c.timer_precision_ms = 1000;
    c.timer_max_delay_ms = 3LL * 86400 * 1000;
    c.timer_log_file_size = 1 << 20;
    struct store *s = store_open(tdir, &c);
    assert_non_null(s);
    return s;
}

/* Puts one message for topic FxT queue 0 due at `due` through the send
 * rule, as the send processor does: into the timer topic, held. */
static void
hold(struct store *s, int64_t now, int64_t due, const char *body)
{
    char p[128];
    int n = snprintf(p, sizeof(p), "TIMER_DELIVER_MS\001%lld\002UNIQ_KEY\001U%s", (long long)due, body);
    int64_t bucket = -1;
    char why[256];
    assert_int_equal(timer_classify(p, (size_t)n, true, 86400000, 1000, now, &bucket, why, sizeof(why)),
                     TIMER_HOLD);
    struct buf props;
    buf_init(&props);
    assert_int_equal(timer_hold_props(&props, p, (size_t)n, bucket, "FxT", 3, 0), 0);
    struct store_msg m = { .topic = TIMER_TOPIC, .topic_len = strlen(TIMER_TOPIC), .qid = 0,
                           .body = (const uint8_t *)body, .body_len = strlen(body),
                           .props = (const char *)buf_head(&props), .props_len = buf_len(&props),
                           .born_ts = now, .has_tags_code = true, .tags_code = bucket };
    m.born.len = m.store.len = 4;
    m.born.ip[0] = m.store.ip[0] = 127;
    m.store.ip[3] = m.born.ip[3] = 1;
    m.store.port = 10911;
    struct store_put_result r;
    assert_int_equal(store_put(s, &m, &r), PUT_OK);
    buf_free(&props);
}

/* Ticks until idle; returns the wake list. */
static void
run(struct timer_store *t, int64_t now, struct buf *wake)
{
    buf_reset(wake);
    for (int i = 0; i < 1000; i++) {
        int rc = timer_tick(t, now, 10000, wake);
        if (rc == 0)
            return;
        if (rc < 0)
            usleep(10000);
    }
    fail_msg("the timer service never went idle");
}

/* The service reads the timer topic's consume queue, which the store's
 * service thread builds: wait for it to catch up with the puts. */
static void
dispatched(struct store *s)
{
    for (int i = 0; i < 1000 && store_dispatched(s) < store_max_phy(s); i++)
        usleep(10000);
    assert_true(store_dispatched(s) >= store_max_phy(s));
}

static void
delivers_by_bucket_never_early(void **state)
{
    (void)state;
    struct store *s = open_store();
    struct timer_store *t = timer_open(s, tdir);
    assert_non_null(t);
    const int64_t now = (timer_now_ms() / 1000 + 10) * 1000;   /* a whole second ahead */
    char body[16];
    for (int i = 1; i <= 20; i++) {
        snprintf(body, sizeof(body), "m%d", i);
        hold(s, now, now + i * 1000, body);   /* due 1..20 s from now */
    }
    dispatched(s);
    struct buf wake;
    buf_init(&wake);
    run(t, now, &wake);
    struct timer_info info;
    timer_info(t, &info);
    assert_int_equal(info.pending, 20);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 0);
    /* Due at now + i s means bucket now + (i-1) s: at now + 10 s, ten
     * are due, the eleventh (due now + 11 s) is not. */
    run(t, now + 10000 - 1, &wake);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 9);
    run(t, now + 10000, &wake);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 10);
    assert_int_equal(buf_len(&wake), strlen("FxT@0\n"));
    assert_memory_equal(buf_head(&wake), "FxT@0\n", buf_len(&wake));
    timer_info(t, &info);
    assert_int_equal(info.pending, 10);
    assert_int_equal(info.delivered, 10);
    /* Close and reopen: the ten delivered stay delivered once. */
    timer_close(t);
    t = timer_open(s, tdir);
    assert_non_null(t);
    run(t, now + 10000, &wake);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 10);
    run(t, now + 20000, &wake);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 20);
    timer_info(t, &info);
    assert_int_equal(info.pending, 0);
    /* Far in the future: nothing more. */
    run(t, now + 3600000, &wake);
    assert_int_equal(store_max_offset(s, "FxT", 3, 0), 20);
    assert_int_equal(buf_len(&wake), 0);
    buf_free(&wake);
    timer_close(t);
    store_unref(s);
}

static void
drops_what_it_cannot_deliver(void **state)
{
    (void)state;
    struct store *s = open_store();
    struct timer_store *t = timer_open(s, tdir);
    assert_non_null(t);
    struct timer_info before, after;
    timer_info(t, &before);
    /* A timer-topic record without REAL_TOPIC (a hostile or broken
     * writer): held by its tags code, then dropped when due. */
    int64_t due = (timer_now_ms() / 1000 + 5) * 1000;
    char props[96];
    snprintf(props, sizeof(props), "TIMER_OUT_MS\001%lld\002UNIQ_KEY\001bad", (long long)due);
    struct store_msg m = { .topic = TIMER_TOPIC, .topic_len = strlen(TIMER_TOPIC), .qid = 0,
                           .body = (const uint8_t *)"x", .body_len = 1, .props = props,
                           .props_len = strlen(props), .born_ts = 1, .has_tags_code = true,
                           .tags_code = due };
    m.born.len = m.store.len = 4;
    m.store.port = 10911;
    struct store_put_result r;
    assert_int_equal(store_put(s, &m, &r), PUT_OK);
    dispatched(s);
    struct buf wake;
    buf_init(&wake);
    run(t, due + 60000, &wake);
    timer_info(t, &after);
    assert_int_equal(after.dropped, before.dropped + 1);
    assert_int_equal(after.pending, 0);
    buf_free(&wake);
    timer_close(t);
    store_unref(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(delivers_by_bucket_never_early),
        cmocka_unit_test(drops_what_it_cannot_deliver),
    };
    return cmocka_run_group_tests(tests, tdir_setup, tdir_teardown);
}
