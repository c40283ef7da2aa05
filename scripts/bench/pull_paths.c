/*
 * pull_paths: what it costs in CPU to send a pull reply's records from a
 * commit log file to a consumer's socket by each way a broker could, for
 * measurement only (docs/performance.md, "Pull without a copy"; not part
 * of rmq, not installed):
 *
 *   rmq-pull-paths DIR RECORD_BYTES [QUEUES]
 *
 * A 64 MiB file under DIR is filled with pwrite (its pages in the page
 * cache, mapped nowhere, as the staged commit log leaves them), holding
 * RECORD_BYTES records of QUEUES queues (default 4) in turn, so a queue's
 * records are QUEUES - 1 records apart (1: adjacent).  Each way sends
 * every queue's records, a reply of 32 records at a time (at most
 * 256 KiB, maxTransferBytesOnMessageInMemory) behind a 200-byte header,
 * to a loopback TCP connection (TCP_NODELAY) that a second thread
 * drains; the ways run in turn, twice, and each line gives the sending
 * thread's CPU (CLOCK_THREAD_CPUTIME_ID: user + system, the loopback
 * receive path included, the reader's copy not) per record:
 *
 *   preadv+write  one preadv per run of records whose gaps are at most
 *                 8 KiB (gaps read into a scratch buffer), into a reply
 *                 buffer, then one write (rmq's pull path)
 *   writev-mmap   one writev of the header and each record's slice of a
 *                 fresh read-only mapping (faults on first touch)
 *   sendfile      the header with MSG_MORE, then one sendfile per run of
 *                 adjacent records (pullZeroCopyMinBytes)
 *   splice-pipe   the header with MSG_MORE, one splice per run into a
 *                 1 MiB pipe, one splice of the pipe to the socket
 *
 * The file is removed at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES ((size_t)64 << 20)
#define HDR 200
#define MAX_GAP 8192
#define MAX_REPLY (256 * 1024)

static void
die(const char *what)
{
    perror(what);
    exit(1);
}

static void *
drain(void *arg)
{
    int fd = *(int *)arg;
    static char b[1 << 20];
    for (;;) {
        ssize_t n = read(fd, b, sizeof(b));
        if (n <= 0)
            return NULL;
    }
}

static double
thread_cpu_us(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        die("clock_gettime");
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void
write_all(int fd, const void *p, size_t n, int flags)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, flags);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("send");
        p = (const char *)p + k;
        n -= (size_t)k;
    }
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR RECORD_BYTES [QUEUES]\n", argv[0]);
        return 2;
    }
    size_t rec = strtoul(argv[2], NULL, 10);
    int queues = argc > 3 ? atoi(argv[3]) : 4;
    if (rec < 64 || rec > MAX_REPLY || queues < 1 || queues > 64) {
        fprintf(stderr, "RECORD_BYTES 64..%d, QUEUES 1..64\n", MAX_REPLY);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/pull-paths.%d", argv[1], (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die(path);
    char *block = malloc(1 << 20);
    if (block == NULL)
        die("malloc");
    memset(block, 'x', 1 << 20);
    for (size_t o = 0; o < FILE_BYTES; o += 1 << 20)
        if (pwrite(fd, block, 1 << 20, (off_t)o) != 1 << 20)
            die("pwrite");

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) != 0)
        die("listen");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("connect");
    int rfd = accept(ls, NULL, NULL), one = 1;
    if (rfd < 0 || setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        die("accept");
    pthread_t th;
    if (pthread_create(&th, NULL, drain, &rfd) != 0)
        die("pthread_create");
    int pp[2];
    /* Room for 48 KiB plus the largest record: a splice never waits. */
    if (pipe(pp) != 0 || fcntl(pp[1], F_SETPIPE_SZ, 1 << 20) < 0)
        die("pipe of 1 MiB (fs.pipe-max-size)");

    size_t per = MAX_REPLY / rec < 32 ? MAX_REPLY / rec : 32;
    size_t nrec = FILE_BYTES / (rec * (size_t)queues);
    char *out = malloc(HDR + per * rec), hdr[HDR];
    static char gap[MAX_GAP];
    if (out == NULL)
        die("malloc");
    memset(hdr, 'h', sizeof(hdr));
    static const char *names[] = { "preadv+write", "writev-mmap", "sendfile", "splice-pipe" };
    for (int round = 1; round <= 2; round++) {
        for (int way = 0; way < 4; way++) {
            char *map = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED)
                die("mmap");
            double t0 = thread_cpu_us();
            size_t msgs = 0;
            for (int q = 0; q < queues; q++) {
                for (size_t i = 0; i < nrec; i += per) {
                    size_t n = nrec - i < per ? nrec - i : per;
#define AT(k) ((off_t)(((i + (k)) * (size_t)queues + (size_t)q) * rec))
                    if (way == 0) {
                        memcpy(out, hdr, HDR);
                        char *d = out + HDR;
                        struct iovec v[64];
                        int nv = 0;
                        off_t off = AT(0), end = AT(0);
                        for (size_t k = 0; k < n; k++) {
                            off_t p = AT(k);
                            if (k > 0 && (p - end > MAX_GAP || nv + 2 > 64)) {
                                if (preadv(fd, v, nv, off) < 0)
                                    die("preadv");
                                nv = 0;
                                off = end = p;
                            }
                            if (p > end) {
                                v[nv].iov_base = gap;
                                v[nv++].iov_len = (size_t)(p - end);
                            }
                            v[nv].iov_base = d;
                            v[nv++].iov_len = rec;
                            d += rec;
                            end = p + (off_t)rec;
                        }
                        if (preadv(fd, v, nv, off) < 0)
                            die("preadv");
                        write_all(s, out, (size_t)(d - out), 0);
                    } else if (way == 1) {
                        struct iovec v[33];
                        v[0].iov_base = hdr;
                        v[0].iov_len = HDR;
                        for (size_t k = 0; k < n; k++) {
                            v[k + 1].iov_base = map + AT(k);
                            v[k + 1].iov_len = rec;
                        }
                        ssize_t w = writev(s, v, (int)n + 1);
                        if (w != (ssize_t)(HDR + n * rec))
                            die("writev (short)");
                    } else {
                        write_all(s, hdr, HDR, MSG_MORE);
                        size_t inpipe = 0;
                        for (size_t k = 0; k < n;) {
                            off_t p = AT(k);
                            size_t left = rec;
                            for (k++; queues == 1 && k < n; k++)
                                left += rec;     /* adjacent: one run */
                            while (left > 0) {
                                ssize_t w = way == 2
                                    ? sendfile(s, fd, &p, left)
                                    : splice(fd, &p, pp[1], NULL, left, SPLICE_F_MORE);
                                if (w <= 0)
                                    die(way == 2 ? "sendfile" : "splice");
                                left -= (size_t)w;
                                if (way == 3)
                                    inpipe += (size_t)w;
                            }
                            /* A full pipe goes to the socket first. */
                            while (way == 3 && inpipe > (size_t)(48 << 10)) {
                                ssize_t w = splice(pp[0], NULL, s, NULL, inpipe, SPLICE_F_MORE);
                                if (w <= 0)
                                    die("splice");
                                inpipe -= (size_t)w;
                            }
                        }
                        while (inpipe > 0) {
                            ssize_t w = splice(pp[0], NULL, s, NULL, inpipe, 0);
                            if (w <= 0)
                                die("splice");
                            inpipe -= (size_t)w;
                        }
                    }
#undef AT
                    msgs += n;
                }
            }
            double t1 = thread_cpu_us();
            if (munmap(map, FILE_BYTES) != 0)
                die("munmap");
            printf("record %zu B, %d queue(s), round %d: %-13s %.3f us/record (%zu records)\n",
                   rec, queues, round, names[way], (t1 - t0) / (double)msgs, msgs);
            fflush(stdout);
        }
    }
    if (unlink(path) != 0)
        die("unlink");
    return 0;
}
