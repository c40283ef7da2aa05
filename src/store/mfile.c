/* mfile: one mapped file (see mfile.h). */
#include "store/mfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14; glibc 2.36 has it */
#endif

void
mfile_name(char *buf, int64_t start)
{
    snprintf(buf, 21, "%020" PRId64, start);
}

static int
reserve_at(int fd, const char *path, off_t off, off_t len)
{
    if (ERRINJ(ERRINJ_ALLOC_FAIL)) {
        err_set("cannot reserve %s: %s (injected)", path, strerror(ENOSPC));
        errno = ENOSPC;
        return -ENOSPC;
    }
    /* posix_fallocate returns the error instead of setting errno. */
    int rc = posix_fallocate(fd, off, len);
    if (rc != 0) {
        err_set("cannot reserve %lld bytes for %s: %s", (long long)len, path,
                strerror(rc));
        errno = rc;
        return -rc;
    }
    return 0;
}

static int
reserve_fd(int fd, const char *path, off_t len)
{
    return reserve_at(fd, path, 0, len);
}

/*
 * No descriptor is kept once a file is mapped: the mapping needs none
 * (msync works on it), and a broker with 20,000 consume queues would
 * otherwise hold 20,000 descriptors and hit the process limit, which
 * failed the next file it created.  The few operations a mapping cannot
 * do (reserve, zero a range, set the time) open the file for their call.
 * Returns the descriptor, or -errno with err_set().
 */
static int
open_for(struct mfile *mf)
{
    int fd = open(mf->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        err_set("cannot open %s: %s", mf->path, strerror(e));
        return -e;
    }
    return fd;
}

/* Creates path (it must not exist) and sizes it, in that order: a crash
 * between the two leaves a 0-byte file.  The descriptor, or -errno with
 * err_set() and nothing left under path. */
static int
create_named(const char *path, size_t size)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        int e = errno;
        err_set("cannot open %s: %s", path, strerror(e));
        return -e;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        err_set("cannot size %s to %zu bytes: %s", path, size, strerror(e));
        (void)unlink(path);
        close(fd);
        return -e;
    }
    return fd;
}

/*
 * Creates path at size bytes, appearing under its name only whole: a
 * kill -9 between a create and its ftruncate left a 0-byte file that the
 * next start refused as a size mismatch (a consume queue's, seen in
 * store_recovery_spec).  The file is made unnamed (O_TMPFILE) in path's
 * directory, sized, then linked to path, which fails with EEXIST when
 * path exists (O_EXCL's rule).  Where the file system has no O_TMPFILE,
 * or /proc is not mounted (the link goes through /proc/self/fd: linking
 * the descriptor itself needs CAP_DAC_READ_SEARCH), it is created under
 * its name and sized after, as before (create_named).  Returns the
 * descriptor, or -errno with err_set() and nothing left under path.
 */
static int
create_sized(const char *path, size_t size)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t dl = slash == NULL ? 1 : (slash == path ? 1 : (size_t)(slash - path));
    if (dl >= sizeof(dir)) {
        err_set("cannot create %s: %s", path, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    memcpy(dir, slash == NULL ? "." : path, dl);
    dir[dl] = '\0';
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)
            return create_named(path, size);
        int e = errno;
        err_set("cannot create %s: %s", path, strerror(e));
        return -e;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        err_set("cannot size %s to %zu bytes: %s", path, size, strerror(e));
        close(fd);
        return -e;
    }
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0) {
        int e = errno;
        close(fd);
        if (e == ENOENT && access("/proc/self/fd", F_OK) != 0)
            return create_named(path, size);
        err_set("cannot open %s: %s", path, strerror(e));
        return -e;
    }
    return fd;
}

struct mfile *
mfile_open(const char *path, int64_t start, size_t size, int flags)
{
    int fd;
    if (flags & MF_CREATE) {
        fd = create_sized(path, size);
        if (fd < 0) {
            errno = -fd;
            return NULL;
        }
    } else {
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            err_set("cannot open %s: %s", path, strerror(e));
            errno = e;
            return NULL;
        }
    }
    int e = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        e = errno;
        err_set("cannot stat %s: %s", path, strerror(e));
        if (flags & MF_CREATE)
            goto fail_unlink;
        goto fail;
    }
    if (!(flags & MF_CREATE)) {
        if ((size_t)st.st_size != size) {
            e = EINVAL;
            err_set("%s is %lld bytes, expected %zu (mappedFileSize "
                    "changed? restore the setting the store was written "
                    "with)", path, (long long)st.st_size, size);
            goto fail;
        }
    }
    if (flags & MF_RESERVE) {
        int rc = reserve_fd(fd, path, (off_t)size);
        if (rc != 0) {
            e = -rc;
            if (flags & MF_CREATE)
                goto fail_unlink;
            goto fail;
        }
    }
    void *base = NULL;
    if (!(flags & MF_LAZY))
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        e = errno;
        err_set("cannot map %s: %s", path, strerror(e));
        if (flags & MF_CREATE)
            goto fail_unlink;
        goto fail;
    }
    struct mfile *mf = calloc(1, sizeof(*mf));
    char *p = strdup(path);
    if (mf == NULL || p == NULL) {
        free(mf);
        free(p);
        if (base != NULL)
            munmap(base, size);
        e = ENOMEM;
        err_set("out of memory opening %s", path);
        if (flags & MF_CREATE)
            goto fail_unlink;
        goto fail;
    }
    mf->start = start;
    mf->size = size;
    mf->base = base;
    mf->path = p;
    mf->dev = st.st_dev;
    mf->ino = st.st_ino;
    close(fd);  /* the mapping stays; see open_for() */
    atomic_init(&mf->refs, 1);
    atomic_init(&mf->retired, false);
    atomic_init(&mf->used, true);
    atomic_init(&mf->rfd, -1);
    mf->pool_idx = -1;
    return mf;

fail_unlink:
    (void)unlink(path);
fail:
    close(fd);
    errno = e;
    return NULL;
}

void
mfile_free_last(struct mfile *mf)
{
    if (mf->base != NULL && munmap(mf->base, mf->size) != 0)
        log_warn("munmap %s: %s", mf->path, strerror(errno));
    int rfd = atomic_load_explicit(&mf->rfd, memory_order_acquire);
    if (rfd >= 0)
        (void)close(rfd);
    free(mf->path);
    free(mf);
}

/* 0 when fd is the file mf was opened as; else -ESTALE (another file
 * was made under its name after it was retired) or -errno, with
 * err_set().  The inode number tells them apart because mf's mapping,
 * which its reader's pin keeps, keeps its inode from being reused. */
static int
same_file(const struct mfile *mf, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        err_set("cannot stat %s: %s", mf->path, strerror(e));
        return -e;
    }
    if (st.st_dev != mf->dev || st.st_ino != mf->ino) {
        err_set("%s is another file now (this one was retired)", mf->path);
        return -ESTALE;
    }
    return 0;
}

int
mfile_read_fd(struct mfile *mf)
{
    int fd = atomic_load_explicit(&mf->rfd, memory_order_acquire);
    if (fd >= 0)
        return fd;
    fd = open(mf->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* A retired file is unlinked: its readers keep the mapping. */
        int e = errno;
        err_set("cannot open %s: %s", mf->path, strerror(e));
        return -e;
    }
    int rc = same_file(mf, fd);
    if (rc != 0) {
        (void)close(fd);
        return rc;
    }
    int none = -1;
    if (!atomic_compare_exchange_strong_explicit(&mf->rfd, &none, fd, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        (void)close(fd);   /* another reader opened it first */
        return none;
    }
    return fd;
}

int
mfile_map(struct mfile *mf)
{
    if (mf->base != NULL)
        return 0;
    int fd = open_for(mf);
    if (fd < 0)
        return fd;
    void *base = mmap(NULL, mf->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = base == MAP_FAILED ? errno : 0;
    close(fd);
    if (e != 0) {
        err_set("cannot map %s: %s", mf->path, strerror(e));
        return -e;
    }
    __atomic_store_n(&mf->base, (uint8_t *)base, __ATOMIC_RELEASE);
    return 0;
}

void
mfile_unmap(struct mfile *mf)
{
    if (mf->base == NULL)
        return;
    if (munmap(mf->base, mf->size) != 0)
        log_warn("munmap %s: %s", mf->path, strerror(errno));
    __atomic_store_n(&mf->base, NULL, __ATOMIC_RELEASE);
}

int
mfile_reserve(struct mfile *mf)
{
    int fd = open_for(mf);
    if (fd < 0)
        return fd;
    int rc = reserve_fd(fd, mf->path, (off_t)mf->size);
    close(fd);
    return rc;
}

int
mfile_reserve_range(struct mfile *mf, size_t from, size_t len)
{
    if (from >= mf->size)
        return 0;
    if (len > mf->size - from)
        len = mf->size - from;
    int fd = open_for(mf);
    if (fd < 0)
        return fd;
    int rc = reserve_at(fd, mf->path, (off_t)from, (off_t)len);
    close(fd);
    return rc;
}

int
mfile_warm(struct mfile *mf, size_t from, size_t len)
{
    if (from >= mf->size)
        return 0;
    if (len > mf->size - from)
        len = mf->size - from;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t a = from & ~(pg - 1);
    len += from - a;
    if (madvise(mf->base + a, len, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL) {
        int e = errno;
        err_set("cannot pre-fault %s: %s", mf->path, strerror(e));
        return -e;
    }
    uint8_t sink = 0;
    for (size_t off = a; off < a + len; off += pg)
        sink ^= ((volatile uint8_t *)mf->base)[off];
    (void)sink;
    return 0;
}

int
mfile_sync(struct mfile *mf, size_t from, size_t to)
{
    if (to > mf->size)
        to = mf->size;
    if (from >= to)
        return 0;
    if (ERRINJ(ERRINJ_FSYNC_FAIL)) {
        err_set("cannot sync %s: %s (injected)", mf->path, strerror(EIO));
        return -EIO;
    }
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t a = from & ~(pg - 1);
    if (msync(mf->base + a, to - a, MS_SYNC) != 0) {
        int e = errno;
        err_set("cannot sync %s: %s", mf->path, strerror(e));
        return -e;
    }
    return 0;
}

void
mfile_drop_pages(struct mfile *mf, size_t from, size_t to)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t a = (from + pg - 1) & ~(pg - 1);
    size_t b = (to > mf->size ? mf->size : to) & ~(pg - 1);
    if (b > a && madvise(mf->base + a, b - a, MADV_DONTNEED) != 0)
        log_debug("madvise(DONTNEED) %s: %s", mf->path, strerror(errno));
}

void
mfile_drop_cache(struct mfile *mf, size_t from, size_t to)
{
    if (to > mf->size)
        to = mf->size;
    if (from >= to)
        return;
    int fd = mfile_read_fd(mf);
    int rc = fd < 0 ? -fd : posix_fadvise(fd, (off_t)from, (off_t)(to - from), POSIX_FADV_DONTNEED);
    if (rc != 0)
        log_debug("fadvise(DONTNEED) %s: %s", mf->path, strerror(rc));
}

int
mfile_zero_tail(struct mfile *mf, size_t from, bool keep_blocks)
{
    if (from >= mf->size)
        return 0;
    off_t off = (off_t)from, len = (off_t)(mf->size - from);
    int fd = open_for(mf);
    if (fd < 0) {
        memset(mf->base + from, 0, mf->size - from);
        return 0;
    }
    int rc = 0;
    /* ZERO_RANGE keeps the blocks allocated (no SIGBUS risk later) and
     * updates the page cache, so the mapping reads zeros at once.  A
     * hole reads zeros too, and gives the blocks back: a sparse commit
     * log file stays sparse (its writer reserves ahead of itself). */
    if (!keep_blocks &&
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0)
        rc = 0;
    else if (fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len) == 0)
        rc = 0;
    else if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0)
        rc = keep_blocks ? reserve_fd(fd, mf->path, (off_t)mf->size) : 0;
    else
        memset(mf->base + from, 0, mf->size - from);
    close(fd);
    return rc;
}

int
mfile_open_fd(struct mfile *mf)
{
    return open_for(mf);
}

int
mfile_set_mtime(struct mfile *mf, int64_t ms)
{
    struct timespec ts[2];
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = (time_t)(ms / 1000);
    ts[1].tv_nsec = (long)(ms % 1000) * 1000000L;
    if (utimensat(AT_FDCWD, mf->path, ts, 0) != 0) {
        int e = errno;
        err_set("cannot set the time of %s: %s", mf->path, strerror(e));
        return -e;
    }
    return 0;
}

int64_t
mfile_mtime(struct mfile *mf)
{
    struct stat st;
    if (stat(mf->path, &st) != 0) {
        err_set("cannot stat %s: %s", mf->path, strerror(errno));
        return -1;
    }
    return (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
}

void
mfile_retire(struct mfile *mf)
{
    bool was = atomic_exchange(&mf->retired, true);
    if (!was && unlink(mf->path) != 0 && errno != ENOENT)
        log_warn("cannot delete %s: %s", mf->path, strerror(errno));
    mfile_unpin(mf);
}
