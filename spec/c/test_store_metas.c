/* store: the commit log's metas' wake-up (commitlog.h on_metas).  Once
 * the commits fill half of the metas' buffer the log calls on_metas (the
 * store's metas_ready, which takes the service thread's mutex) once per
 * take, and only after it has let its own locks go: a sender must never
 * wait behind the append lock for a mutex the service thread may hold
 * while it is off the core.  Both ways a commit happens are checked: an
 * append that commits itself and clog_commit after deferred appends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/crc32.h"
#include "tmpdir.h"
#include "store/commitlog.h"

#define TOPIC "MetasTopic"
#define FILE_SIZE (1 << 20)
#define META_CAP 8192

struct fx {
    struct commitlog cl;
    int calls;
    int calls_locked;  /* calls made while a log lock was held */
};

static void
on_metas(void *arg)
{
    struct fx *f = arg;
    f->calls++;
    if (atomic_load(&f->cl.lock.v) != 0 || atomic_load(&f->cl.meta_mu.v) != 0)
        f->calls_locked++;
}

static void
fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    char p[300];
    snprintf(p, sizeof(p), "%s/commitlog", tdir);
    assert_int_equal(clog_open(&f->cl, p, FILE_SIZE), 0);
    assert_int_equal(clog_set_end(&f->cl, 0, false), 0);
    assert_int_equal(clog_set_staging(&f->cl, 1 << 20), 0);
    f->cl.meta_cap = META_CAP;
    f->cl.on_metas = on_metas;
    f->cl.metas_arg = f;
    assert_int_equal(clog_start(&f->cl, false, 0), 0);
}

/* One record of a few bytes (its meta ~100 bytes); `defer`: staged only. */
static void
put(struct fx *f, bool defer)
{
    static const uint8_t body[16] = "0123456789abcdef";
    static const char props[] = "KEYS\001k\002";
    struct clog_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = TOPIC;
    m.topic_len = (uint32_t)strlen(TOPIC);
    m.body = body;
    m.body_len = sizeof(body);
    m.body_crc = rmq_body_crc(body, sizeof(body));
    m.props = props;
    m.props_len = (uint32_t)strlen(props);
    m.born.len = 4;
    m.store.len = 4;
    m.len = clog_msg_len(&m);
    int64_t ts;
    assert_int_equal(clog_append(&f->cl, &m, 1, &ts, defer, 0), 0);
}

/* Commits until on_metas was called (bounded: a meta is > 16 bytes, so
 * META_CAP / 2 / 16 commits fill half of the buffer). */
static void
fill_half(struct fx *f, bool defer)
{
    int before = f->calls;
    for (int i = 0; f->calls == before && i < META_CAP / 16; i++) {
        put(f, defer);
        if (defer) {
            put(f, true);
            assert_int_equal(clog_commit(&f->cl), 0);
        }
    }
    assert_int_equal(f->calls, before + 1);
}

static void
wakes_after_the_locks_are_let_go(bool defer)
{
    static struct fx f;
    fx_open(&f);
    fill_half(&f, defer);
    assert_int_equal(f.calls_locked, 0);
    /* Once per take: more commits call it no more ... */
    for (int i = 0; i < 8; i++)
        put(&f, false);
    assert_int_equal(f.calls, 1);
    /* ... until the dispatch takes the metas; then again. */
    uint8_t *buf = NULL;
    assert_true(clog_metas_take(&f.cl, &buf) > 0);
    fill_half(&f, defer);
    assert_int_equal(f.calls, 2);
    assert_int_equal(f.calls_locked, 0);
    free(buf);
    clog_close(&f.cl);
}

static void
an_append_that_commits(void **state)
{
    (void)state;
    wakes_after_the_locks_are_let_go(false);
}

static void
a_commit_of_deferred_appends(void **state)
{
    (void)state;
    wakes_after_the_locks_are_let_go(true);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(an_append_that_commits, tdir_setup, tdir_teardown),
        cmocka_unit_test_setup_teardown(a_commit_of_deferred_appends, tdir_setup,
                                        tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
