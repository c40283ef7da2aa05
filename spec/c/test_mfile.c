/* mfile: a created file appears whole under its name; and what a reader opens by the file's name later (mfile_read_fd's
 * descriptor) is the file it was opened as, not
 * one made under that name after it was retired: a slave truncates its
 * commit log and replication writes the same offsets, so the same file
 * names, again (store/mfile.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "store/mfile.h"

#define SIZE 65536

static char dir[64];
static char path[128];

static int
setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/rmq-test-mfile.XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/00000000000000000000", dir);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    (void)unlink(path);
    return rmdir(dir);
}

/* A file written through its mapping, with `byte` everywhere. */
static struct mfile *
made(uint8_t byte)
{
    struct mfile *mf = mfile_open(path, 0, SIZE, MF_CREATE);
    assert_non_null(mf);
    memset(mf->base, byte, SIZE);
    return mf;
}

/* Retired (unlinked) before its first pread, pinned by a reader, with a
 * new file under its name: the descriptor is refused, and the reader's
 * mapping still has the old bytes. */
static void
read_fd_is_never_another_file(void **state)
{
    (void)state;
    struct mfile *old = made('o');
    mfile_pin(old);                       /* a reader's pin */
    assert_int_equal(unlink(path), 0);    /* retired */
    assert_int_equal(mfile_read_fd(old), -ENOENT);
    struct mfile *now = made('n');        /* the same offsets written again */
    assert_int_equal(mfile_read_fd(old), -ESTALE);
    assert_int_equal(old->base[100], 'o');
    int fd = mfile_read_fd(now);
    assert_true(fd >= 0);
    uint8_t b = 0;
    assert_int_equal(pread(fd, &b, 1, 100), 1);
    assert_int_equal(b, 'n');
    mfile_unpin(old);
    mfile_unpin(old);
    mfile_unpin(now);
}

/* Opened before it was retired, the descriptor stays the file's own. */
static void
read_fd_opened_before_stays(void **state)
{
    (void)state;
    struct mfile *old = made('o');
    int fd = mfile_read_fd(old);
    assert_true(fd >= 0);
    assert_int_equal(mfile_read_fd(old), fd);
    assert_int_equal(unlink(path), 0);
    struct mfile *now = made('n');
    uint8_t b = 0;
    assert_int_equal(pread(mfile_read_fd(old), &b, 1, 100), 1);
    assert_int_equal(b, 'o');
    mfile_unpin(old);
    mfile_unpin(now);
}

/* A created file appears whole under its name (a kill -9 mid-create
 * left a 0-byte file the next start refused): sized when it is first
 * seen, nothing else left in the directory, and a second create of the
 * name refused with EEXIST, the first file untouched. */
static void
create_is_whole_and_exclusive(void **state)
{
    (void)state;
    struct mfile *mf = made('w');
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, SIZE);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int entries = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            entries++;
    closedir(d);
    assert_int_equal(entries, 1);
    errno = 0;
    assert_null(mfile_open(path, 0, SIZE, MF_CREATE));
    assert_int_equal(errno, EEXIST);
    assert_int_equal(mf->base[SIZE - 1], 'w');
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, SIZE);
    mfile_unpin(mf);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(read_fd_is_never_another_file, setup, teardown),
        cmocka_unit_test_setup_teardown(read_fd_opened_before_stays, setup, teardown),
        cmocka_unit_test_setup_teardown(create_is_whole_and_exclusive, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
