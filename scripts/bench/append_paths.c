/*
 * append_paths: what it costs in CPU to put records into a fresh file's
 * page cache by each way a commit log could, for measurement only
 * (docs/performance.md, "Appending"; not part of rmq, not installed):
 *
 *   rmq-append-paths DIR RECORD_BYTES [MiB]
 *
 * Each way writes MiB (default 256) of RECORD_BYTES records into a new
 * file under DIR (reserved with posix_fallocate, as the commit log is),
 * then deletes it; the ways run in turn, twice, and each line gives the
 * process CPU (user + system, getrusage) per record and per MiB:
 *
 *   populate+memcpy  mmap, MADV_POPULATE_WRITE in 4 MiB steps (what the
 *                    store-warm thread does today), memcpy each record
 *   mmap-fault       mmap, memcpy each record, the write faults on demand
 *   pwrite/record    one pwrite per record (a write-through append)
 *   pwrite/64KiB     records staged in a 64 KiB buffer, one pwrite per
 *                    64 KiB of whole pages (the transientStorePool idea)
 *   pwrite/recycled  the same over a file whose pages are already in the
 *                    page cache, written and clean (what recycling a
 *                    deleted commit log file would give while its pages
 *                    are still cached)
 *   pwrite/behind    pwrite/64KiB with a write-behind: every 8 MiB,
 *                    sync_file_range starts the step's writeback, waits
 *                    for the step before and drops it (fadvise); this
 *                    way's CPU includes the writeback the others leave
 *                    to the kernel's flusher threads
 *   pwrite/batches   64 records staged, then one pwrite of all of them,
 *                    wherever they end (what the commit log does: each
 *                    write starts where the last one stopped, mid-page,
 *                    so the kernel's page cache folios are small)
 *   pwrite/willneed  pwrite/batches into a range whose page cache was
 *                    made first (POSIX_FADV_WILLNEED over the unwritten
 *                    extents: zeroed pages, clean, no disk read); the
 *                    line gives that step's CPU apart, as "ahead" (what
 *                    a thread ahead of the writer would pay)
 *   pwrite/prewritten pwrite/batches over a range pwritten with zeros
 *                    first (dirty folios, blocks delayed-allocated: what
 *                    a thread pwriting ahead of the writer would leave),
 *                    that step's CPU apart as "ahead"
 *   mapped/prewritten pwrite/prewritten's zeros, then the range mapped and
 *                    MADV_POPULATE_WRITE (page tables over folios already
 *                    cached), both ahead; the writer memcpys each record
 *                    into the mapping (no system call, no fault)
 *
 * The page cache it fills is the file's; dirty pages are written back by
 * the kernel's flusher threads, whose CPU is not counted (the same for
 * every way but pwrite/behind).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define STAGE (64u << 10)
#define BEHIND ((size_t)8 << 20)

static double
cpu_s(void)
{
    struct rusage r;
    if (getrusage(RUSAGE_SELF, &r) != 0)
        return 0;
    return (double)r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 +
           (double)r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

static void
die(const char *what)
{
    perror(what);
    exit(1);
}

static void
put_all(int fd, const char *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die("pwrite");
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
}

/* size bytes of zeros over the file, a STAGE at a time. */
static void
put_zeros(int fd, size_t size)
{
    char *z = calloc(1, STAGE);
    if (z == NULL)
        die("calloc");
    for (size_t o = 0; o < size; o += STAGE)
        put_all(fd, z, STAGE, (off_t)o);
    free(z);
}

static void
run(const char *dir, int way, size_t rec, size_t size, const char *rbuf)
{
    static const char *names[] = { "populate+memcpy", "mmap-fault", "pwrite/record", "pwrite/64KiB",
                                   "pwrite/recycled", "pwrite/behind", "pwrite/batches", "pwrite/willneed",
                                   "pwrite/prewritten", "mapped/prewritten" };
    char path[4096];
    snprintf(path, sizeof(path), "%s/append-paths.%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        die(path);
    if (ftruncate(fd, (off_t)size) != 0)
        die("ftruncate");
    int rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc != 0) {
        errno = rc;
        die("posix_fallocate");
    }
    size_t n = size / rec;
    double ahead = 0;
    if (way == 7) {
        /* The range's page cache made ahead of the writer (zeros, clean:
         * the extents are unwritten, so no disk read), its CPU apart. */
        double a0 = cpu_s();
        /* The kernel reads ahead at most its window a call (8 MiB on
         * this machine): 2 MiB steps stay under it. */
        for (size_t o = 0; o < size; o += 2u << 20)
            if (posix_fadvise(fd, (off_t)o, 2 << 20, POSIX_FADV_WILLNEED) != 0)
                die("posix_fadvise");
        ahead = cpu_s() - a0;
    }
    if (way == 8 || way == 9) {
        /* The range written with zeros first (dirty, not synced: what a
         * thread pwriting ahead of the writer would leave), its CPU
         * apart. */
        double a0 = cpu_s();
        put_zeros(fd, size);
        ahead = cpu_s() - a0;
    }
    if (way == 4) {
        /* A recycled file: its pages are in the page cache, written and
         * clean, before the records go over them. */
        put_zeros(fd, size);
        if (fdatasync(fd) != 0)
            die("fdatasync");
    }
    char *pm = NULL;
    if (way == 9) {
        /* ... then mapped for writing (page tables and page_mkwrite over
         * folios already in the page cache), still ahead of the writer. */
        double a0 = cpu_s();
        pm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (pm == MAP_FAILED)
            die("mmap");
        for (size_t o = 0; o < size; o += 4u << 20)
            if (madvise(pm + o, size - o < (4u << 20) ? size - o : 4u << 20, MADV_POPULATE_WRITE) != 0)
                die("madvise(MADV_POPULATE_WRITE)");
        ahead += cpu_s() - a0;
    }
    double t0 = cpu_s();
    if (way == 9) {
        for (size_t i = 0; i < n; i++)
            memcpy(pm + i * rec, rbuf, rec);
        if (munmap(pm, size) != 0)
            die("munmap");
    } else if (way <= 1) {
        char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            die("mmap");
        if (way == 0)
            for (size_t o = 0; o < size; o += 4u << 20)
                if (madvise(m + o, size - o < (4u << 20) ? size - o : 4u << 20, MADV_POPULATE_WRITE) != 0)
                    die("madvise(MADV_POPULATE_WRITE)");
        for (size_t i = 0; i < n; i++)
            memcpy(m + i * rec, rbuf, rec);
        if (munmap(m, size) != 0)
            die("munmap");
    } else if (way == 2) {
        for (size_t i = 0; i < n; i++)
            put_all(fd, rbuf, rec, (off_t)(i * rec));
    } else {
        /* pwrite/batches holds 64 records, more than STAGE above 1 KiB */
        char *st = malloc((64 * rec > STAGE ? 64 * rec : STAGE) + rec);
        if (st == NULL)
            die("malloc");
        size_t have = 0, base = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(st + have, rbuf, rec);
            have += rec;
            if (way >= 6 && (i + 1) % 64 == 0) {
                put_all(fd, st, have, (off_t)base);
                base += have;
                have = 0;
            } else if (way < 6 && have >= STAGE) {
                /* Whole pages only; the partial tail stays staged. */
                size_t whole = have & ~(size_t)4095;
                put_all(fd, st, whole, (off_t)base);
                if (way == 5 && (base + whole) / BEHIND != base / BEHIND) {
                    /* Write-behind: start the writeback of the step just
                     * filled, wait for the one before it and drop it. */
                    off_t step = (off_t)((base + whole) / BEHIND * BEHIND);
                    if (sync_file_range(fd, step - BEHIND, BEHIND, SYNC_FILE_RANGE_WRITE) != 0)
                        die("sync_file_range");
                    if (step >= 2 * (off_t)BEHIND) {
                        if (sync_file_range(fd, step - 2 * BEHIND, BEHIND,
                                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                                SYNC_FILE_RANGE_WAIT_AFTER) != 0)
                            die("sync_file_range");
                        (void)posix_fadvise(fd, step - 2 * BEHIND, BEHIND, POSIX_FADV_DONTNEED);
                    }
                }
                memmove(st, st + whole, have - whole);
                base += whole;
                have -= whole;
            }
        }
        if (have > 0)
            put_all(fd, st, have, (off_t)base);
        free(st);
    }
    double t = cpu_s() - t0;
    printf("%-16s %6zu B records: %7.3f us CPU/record  %8.1f us CPU/MiB", names[way], rec,
           t * 1e6 / (double)n, t * 1e6 / (double)(size >> 20));
    if (way >= 7)
        printf("  (ahead, apart: %.3f us/record)", ahead * 1e6 / (double)n);
    printf("\n");
    fflush(stdout);
    close(fd);
    if (unlink(path) != 0)
        die("unlink");
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: rmq-append-paths DIR RECORD_BYTES [MiB]\n");
        return 2;
    }
    size_t rec = (size_t)atol(argv[2]);
    size_t size = (size_t)(argc > 3 ? atol(argv[3]) : 256) << 20;
    if (rec < 16 || rec > STAGE || size < (1u << 20))
        die("bad arguments");
    char *rbuf = malloc(rec);
    if (rbuf == NULL)
        die("malloc");
    memset(rbuf, 'x', rec);
    for (int round = 0; round < 2; round++)
        for (int way = 0; way < 10; way++)
            run(argv[1], way, rec, size, rbuf);
    free(rbuf);
    return 0;
}
