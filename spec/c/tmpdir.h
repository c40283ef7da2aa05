/* tmpdir: a fresh directory per cmocka test or group, for the C tests that open a
 * real store (test_index_cut, test_store_trunc, test_timer_wheel,
 * test_popstore).  tdir_setup makes $TMPDIR/rmq-ctest.XXXXXX (/tmp
 * without TMPDIR) into `tdir`; tdir_teardown removes it and all in it.
 * Pass them to cmocka_unit_test_setup_teardown or cmocka_run_group_tests. */
#ifndef RMQ_SPEC_C_TMPDIR_H
#define RMQ_SPEC_C_TMPDIR_H

/* The current test's (or group's) directory: cmocka runs one at a time. */
extern char tdir[256];

int tdir_setup(void **state);
int tdir_teardown(void **state);

#endif
