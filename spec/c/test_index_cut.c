/* The index dispatch across a cut of the commit log (ix_cut_log: a
 * slave truncating to its master's offset).  The dispatch has read
 * past the cut and holds the metas of records that the cut removed;
 * new records then take their offsets.  The index must find every new
 * record by its key, at its offset, and none of the removed records it
 * had not indexed before the cut: nothing read before the cut (the
 * metas held, the read buffer, the position) is used after it. */
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

#include "core/crc32.h"
#include "tmpdir.h"
#include "store/commitlog.h"
#include "store/index.h"

#define TOPIC "CutTopic"
#define FILE_SIZE (1 << 20)

struct fx {
    struct commitlog cl;
    struct index ix;
};

/* The log (its end at `end`: 0 for a new one) and the index, resumed. */
static void
fx_open(struct fx *f, int64_t end)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/commitlog", tdir);
    assert_int_equal(clog_open(&f->cl, p, FILE_SIZE), 0);
    assert_int_equal(clog_set_end(&f->cl, end, false), 0);
    assert_int_equal(clog_set_staging(&f->cl, 1 << 20), 0);
    f->cl.meta_cap = 1 << 20;
    assert_int_equal(clog_start(&f->cl, false, 0), 0);
    snprintf(p, sizeof(p), "%s/index", tdir);
    assert_int_equal(ix_open(&f->ix, p, 101, 1000, true), 0);
    ix_resume(&f->ix, &f->cl);
}

static void
fx_close(struct fx *f)
{
    ix_close(&f->ix);
    clog_close(&f->cl);
}

/* One record with KEYS `key` and a body of `blen` bytes, committed;
 * returns its offset. */
static int64_t
put(struct fx *f, const char *key, uint32_t blen)
{
    static uint8_t body[4096];
    memset(body, 'b', sizeof(body));
    char props[64];
    int pl = snprintf(props, sizeof(props), "KEYS\001%s\002", key);
    struct clog_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = TOPIC;
    m.topic_len = (uint32_t)strlen(TOPIC);
    m.body = body;
    m.body_len = blen;
    m.body_crc = rmq_body_crc(body, blen);
    m.props = props;
    m.props_len = (uint32_t)pl;
    m.born.len = 4;
    m.store.len = 4;
    m.len = clog_msg_len(&m);
    int64_t ts;
    assert_int_equal(clog_append(&f->cl, &m, 1, &ts, false, 0), 0);
    return m.phy;
}

/* The offsets the index has for `key`: n of them into out. */
static int
lookup(struct fx *f, const char *key, int64_t *out)
{
    int64_t lts, lphy;
    return ix_query(&f->ix, TOPIC, strlen(TOPIC), key, strlen(key), 8, 0, INT64_MAX / 2,
                    out, &lts, &lphy);
}

/* The cut, then new records of `new_blen` bytes at the removed ones'
 * offsets (the same size: the metas held name those very offsets;
 * another size: the old position falls inside a new record). */
static void
cut_then_new(uint32_t new_blen)
{
    struct fx f;
    fx_open(&f, 0);
    int64_t old[5];
    char k[32];
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof(k), "old-%d", i);
        old[i] = put(&f, k, 1000);
    }
    /* Two records indexed; the metas of all five taken and held. */
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 2), 2);
    assert_true(f.ix.mq_len > f.ix.mq_at);
    assert_true(ix_next(&f.ix) > old[1]);
    slock_lock(&f.cl.lock);
    assert_int_equal(ix_cut_log(&f.ix, &f.cl, old[1], true), 0);
    slock_unlock(&f.cl.lock);
    assert_int_equal(ix_next(&f.ix), old[1]);
    int64_t nw[4];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        nw[i] = put(&f, k, new_blen);
    }
    assert_int_equal(nw[0], old[1]);
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 0), 4);
    assert_int_equal(ix_next(&f.ix), clog_wrote(&f.cl));
    int64_t got[8];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        assert_int_equal(lookup(&f, k, got), 1);
        assert_int_equal(got[0], nw[i]);
    }
    /* Removed before the index reached them: never indexed. */
    for (int i = 2; i < 5; i++) {
        snprintf(k, sizeof(k), "old-%d", i);
        assert_int_equal(lookup(&f, k, got), 0);
    }
    assert_int_equal(lookup(&f, "old-0", got), 1);
    assert_int_equal(got[0], old[0]);
    fx_close(&f);
}

/* A cut, new records, then a close with none of them indexed (a crash
 * between the cut and the next dispatch; the index's files as the cut
 * left them): the reopened index resumes at or before the cut and finds
 * every new record.  The header's end offset left past the cut made it
 * resume inside a new record and skip the rest of the file. */
static void
cut_then_reopen(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    int64_t old[5];
    char k[32];
    for (int i = 0; i < 5; i++) {
        snprintf(k, sizeof(k), "old-%d", i);
        old[i] = put(&f, k, 1000);
    }
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 0), 5);
    slock_lock(&f.cl.lock);
    assert_int_equal(ix_cut_log(&f.ix, &f.cl, old[1], true), 0);
    slock_unlock(&f.cl.lock);
    int64_t nw[8];
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        nw[i] = put(&f, k, 333);
    }
    int64_t end = clog_wrote(&f.cl);
    fx_close(&f);

    fx_open(&f, end);
    assert_true(ix_next(&f.ix) <= old[1]);
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 0), 8);
    assert_int_equal(ix_next(&f.ix), end);
    int64_t got[8];
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        assert_int_equal(lookup(&f, k, got), 1);
        assert_int_equal(got[0], nw[i]);
    }
    assert_int_equal(lookup(&f, "old-0", got), 1);
    assert_int_equal(got[0], old[0]);
    fx_close(&f);
}

/* A cut of a log whose every indexed record it removes: the reopened
 * index starts at the log's first record. */
static void
cut_all_then_reopen(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    char k[32];
    int64_t first = -1;
    for (int i = 0; i < 3; i++) {
        snprintf(k, sizeof(k), "old-%d", i);
        int64_t at = put(&f, k, 1000);
        if (first < 0)
            first = at;
    }
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 0), 3);
    slock_lock(&f.cl.lock);
    assert_int_equal(ix_cut_log(&f.ix, &f.cl, first, true), 0);
    slock_unlock(&f.cl.lock);
    int64_t nw[4];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        nw[i] = put(&f, k, 333);
    }
    int64_t end = clog_wrote(&f.cl);
    fx_close(&f);

    fx_open(&f, end);
    assert_int_equal(ix_next(&f.ix), first);
    assert_int_equal(ix_dispatch(&f.ix, &f.cl, 0), 4);
    int64_t got[8];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        assert_int_equal(lookup(&f, k, got), 1);
        assert_int_equal(got[0], nw[i]);
    }
    fx_close(&f);
}

static void
cut_same_sizes(void **state)
{
    (void)state;
    cut_then_new(1000);
}

static void
cut_other_sizes(void **state)
{
    (void)state;
    cut_then_new(333);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(cut_same_sizes, tdir_setup, tdir_teardown),
        cmocka_unit_test_setup_teardown(cut_other_sizes, tdir_setup, tdir_teardown),
        cmocka_unit_test_setup_teardown(cut_then_reopen, tdir_setup, tdir_teardown),
        cmocka_unit_test_setup_teardown(cut_all_then_reopen, tdir_setup, tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
