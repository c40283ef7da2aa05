/* store: a consume queue entry written again below the queue's end (a
 * recovery scan, or a replicated record a master sends again) lands in
 * an earlier file, which retention may then delete.  The writer pins the
 * file it remembers between writes without the queue's lock
 * (mfile_pin_mapped), which is safe only while the queue holds that file:
 * so it must go on remembering the queue's last file, never the earlier
 * one.  Remembering the earlier one made the next write pin a file that
 * retention had deleted and freed (a use after free; a write into an
 * unmapped file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "store/consumequeue.h"
#include "tmpdir.h"

#define PER_FILE 256
#define FILE_SIZE (PER_FILE * CQ_UNIT)

static int64_t
phy_of(int64_t i)
{
    return 1000 + i * 100;
}

static void
put(struct cq *c, int64_t i)
{
    assert_int_equal(cq_write(c, i, phy_of(i), 100, i), 0);
    if (i + 1 > cq_max(c))
        cq_publish(c, i + 1);
}

static void
entry_is(struct cq *c, int64_t i)
{
    struct cq_entry e;
    assert_int_equal(cq_read(c, i, &e), 0);
    assert_int_equal(e.phy, phy_of(i));
    assert_int_equal(e.size, 100);
    assert_int_equal(e.tags, i);
}

static void
an_old_entry_then_retention(void **state)
{
    (void)state;
    static struct cqtable t;
    char root[300];
    snprintf(root, sizeof(root), "%s/consumequeue", tdir);
    assert_int_equal(cqt_init(&t, root, FILE_SIZE, 0), 0);
    struct cq *c = cqt_get(&t, "OldTopic", 8, 0);
    assert_non_null(c);
    int64_t n = 3 * PER_FILE;
    for (int64_t i = 0; i < n; i++)
        put(c, i);
    assert_int_equal(mfq_count(&c->q), 3);
    /* Entry 1 again: it is in the first file. */
    put(c, 1);
    entry_is(c, 1);
    assert_int_equal(cq_max(c), n);
    /* The writer still remembers the queue's last file. */
    assert_true(mfq_is_last(&c->q, c->cur));
    /* Retention: the first file's records are gone from the log. */
    assert_int_equal(cq_delete_expired(c, phy_of(PER_FILE)), 1);
    assert_int_equal(mfq_count(&c->q), 2);
    /* The writer goes on in its file ... */
    put(c, n);
    entry_is(c, n);
    /* ... and entry 1 once more is in a deleted part: nothing written. */
    assert_int_equal(cq_write(c, 1, phy_of(1), 100, 1), 0);
    assert_true(mfq_is_last(&c->q, c->cur));
    for (int64_t i = PER_FILE; i <= n; i++)
        entry_is(c, i);
    cqt_destroy(&t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(an_old_entry_then_retention, tdir_setup,
                                        tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
