/* store: a consume queue writer's lock-free pin (mfile_pin_mapped) against
 * the mapped-file pool's trimmer, which unmaps files only its queue holds
 * (mfpool.c).  While one thread writes through pins taken without the
 * queue's lock and another trims the pool to nothing as fast as it can,
 * every write lands in a mapped file (a write into a file unmapped under
 * the writer is a SIGSEGV, a lost write a wrong value read back), the file
 * is unmapped and mapped again many times, and the pin falls back to the
 * locked path when the file is cold. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "store/mfpool.h"
#include "store/mfqueue.h"
#include "tmpdir.h"

#define FILE_SIZE 65536
#define SLOTS (FILE_SIZE / 4)
#define WRITES 200000       /* at least; more until the pool unmapped enough */
/* Each unmap is one chance for a write to hit the window between the
 * trimmer's check and its unmap, when both threads are on a core (on a
 * loaded 2-core host, seldom): a trimmer without the compare-and-swap
 * failed 5 runs in 10 at 50 unmaps. */
#define UNMAPS 1000
#define WRITES_MAX 100000000

struct run {
    struct mfqueue q;
    struct mfpool pool;
    struct mfile *mf;
    atomic_bool done;
    bool pin_failed;    /* a locked pin failed: the writer stopped */
    long fast, slow;
    uint32_t writes;
    atomic_size_t unmaps;
};

static void *
writer(void *arg)
{
    struct run *r = arg;
    uint32_t i;
    /* Until the trimmer has unmapped the file often enough (it needs
     * the core now and then: a yield each 1024 writes), bounded. */
    for (i = 1; i <= WRITES || (atomic_load(&r->unmaps) < UNMAPS && i < WRITES_MAX); i++) {
        if (i % 1024 == 0)
            sched_yield();
        if (mfile_pin_mapped(r->mf)) {
            r->fast++;
        } else {
            /* Cold (or being unmapped): the locked pin maps it again. */
            struct mfile *p = mfq_pin(&r->q, r->mf);
            if (p == NULL) {
                r->pin_failed = true;
                break;
            }
            r->slow++;
        }
        uint32_t *w = (uint32_t *)(void *)r->mf->base;
        w[i % SLOTS] = i;
        mfile_unpin(r->mf);
    }
    r->writes = i - 1;
    atomic_store(&r->done, true);
    return NULL;
}

static void *
trimmer(void *arg)
{
    struct run *r = arg;
    while (!atomic_load(&r->done))
        atomic_fetch_add(&r->unmaps, mfpool_trim(&r->pool, 0));
    return NULL;
}

static void
writes_land_while_the_pool_unmaps(void **state)
{
    (void)state;
    static struct run r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(mfpool_init(&r.pool, 1000), 0);
    assert_int_equal(mfq_init(&r.q, tdir, FILE_SIZE), 0);
    mfq_set_pool(&r.q, &r.pool);
    r.mf = mfq_create(&r.q, 0, false);
    assert_non_null(r.mf);
    pthread_t tw, tt;
    assert_int_equal(pthread_create(&tt, NULL, trimmer, &r), 0);
    assert_int_equal(pthread_create(&tw, NULL, writer, &r), 0);
    assert_int_equal(pthread_join(tw, NULL), 0);
    assert_int_equal(pthread_join(tt, NULL), 0);
    /* Every pin was taken, one way or the other (a locked one maps the
     * file again; the pool's bound is far above one file). */
    assert_false(r.pin_failed);
    assert_int_equal(r.fast + r.slow, r.writes);
    /* The race was run: the file went cold and came back. */
    assert_true(atomic_load(&r.unmaps) >= UNMAPS);
    assert_true(r.slow > 0);
    assert_true(r.fast > 0);
    /* And only the queue's reference is left. */
    struct mfile *p = mfq_pin(&r.q, r.mf);
    assert_non_null(p);
    assert_int_equal(mfile_refs(p), 2);
    /* The last value of each slot is in the file (a write to a mapping
     * being taken away would be lost, or fault). */
    const uint32_t *w = (const uint32_t *)(const void *)p->base;
    for (uint32_t s = 0; s < SLOTS; s++) {
        uint32_t last = r.writes - ((r.writes - s) % SLOTS);
        if (last == 0)
            continue;
        assert_int_equal(w[s], last);
    }
    mfile_unpin(p);
    print_message("pins: %ld lock-free, %ld locked; the pool unmapped the file %zu times\n",
                  r.fast, r.slow, atomic_load(&r.unmaps));
    mfq_destroy(&r.q);
    mfpool_destroy(&r.pool);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(writes_land_while_the_pool_unmaps, tdir_setup,
                                        tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
