/* store/slock.h: the commit log's append lock.  Threads that take it
 * for a plain read-modify-write of shared words lose none of them
 * (mutual exclusion, and the holder's writes seen by the next holder),
 * including when the holder sleeps inside (others then wait in the futex
 * and must be woken by the unlock, or the test never ends). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "store/slock.h"

#define THREADS 4
#define ROUNDS 100000

static struct slock lock;
static uint64_t a, b;          /* under lock; always equal there */
static int broken;

static void *
worker(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < ROUNDS; i++) {
        slock_lock(&lock);
        if (a != b)
            broken = 1;
        a++;
        /* Now and then the holder sleeps: the others spin out and sleep
         * on the futex; only the unlock's wake-up lets them on. */
        if (i % 5000 == (int)id * 1000) {
            struct timespec d = { 0, 200000 };
            nanosleep(&d, NULL);
        }
        b++;
        slock_unlock(&lock);
    }
    return NULL;
}

static void
no_update_is_lost(void **state)
{
    (void)state;
    slock_init(&lock);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(broken, 0);
    assert_int_equal(a, (uint64_t)THREADS * ROUNDS);
    assert_int_equal(b, (uint64_t)THREADS * ROUNDS);
    /* Free again: no waiter mark left behind. */
    assert_int_equal(atomic_load(&lock.v), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_update_is_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
