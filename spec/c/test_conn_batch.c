/* conn.c's batched reply flush (flush_batched, serverBatchWriteEnable):
 * a loop turn's output for every connection goes to the kernel in one
 * io_uring call (net/sendbatch.h).  A socket that takes only part of its
 * output (its peer not reading, small socket buffers) must leave the rest
 * to the ordinary write path, in order: the peer reads every byte once,
 * in the order queued, and the connection keeps serving after.  Real
 * loopback TCP connections, adopted by a real reactor (conn_adopt, as a
 * worker adopts the acceptor's sockets); the peers are plain sockets of
 * this test.  Where the kernel refuses io_uring the cases are skipped:
 * the flush then writes as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "net/conn.h"
#include "net/reactor.h"
#include "net/sendbatch.h"

/* Refusals on demand: sendbatch.c drives io_uring through syscall(3),
 * and this program's syscall() is linked in place of the C library's,
 * for libuv too (a shared library: libuv >= 1.45 has an io_uring ring
 * of its own for epoll_ctl, and aborts if a submission to it fails).
 * So only sendbatch's ring is touched: the one made with
 * IORING_SETUP_SUBMIT_ALL, which libuv never sets.  The next such
 * io_uring_setup, or the next io_uring_enter that submits on that ring,
 * fails once with the errno set here (or, with submit_takes set, hands
 * the kernel only that many of the sends queued: the rest are not taken,
 * as when the kernel runs short of memory part way); those calls are
 * counted.  The
 * arguments are read with the types their callers pass (variadic: any
 * other read is undefined), so only the calls made here go on to the C
 * library's syscall() (sendbatch's io_uring calls, libuv's io_uring and
 * close); any other stops the test, saying which. */
static int setup_fails_with, submit_fails_with;
static unsigned submit_takes;
static int setups, submits;
static int batch_ring = -1;

long
syscall(long nr, ...)
{
    static long (*real)(long, ...);
    if (real == NULL) {
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
        if (real == NULL)
            abort();
    }
    va_list ap;
    va_start(ap, nr);
    long rc;
    if (nr == __NR_io_uring_setup) {
        /* sendbatch: (unsigned, struct io_uring_params *); libuv: (int
         * entries > 0, its own copy of the struct). */
        unsigned entries = va_arg(ap, unsigned);
        struct io_uring_params *p = va_arg(ap, struct io_uring_params *);
        va_end(ap);
        int ours = p != NULL && (p->flags & IORING_SETUP_SUBMIT_ALL) != 0;
        if (ours) {
            setups++;
            if (setup_fails_with != 0) {
                errno = setup_fails_with;
                setup_fails_with = 0;
                return -1;
            }
        }
        rc = real(nr, entries, p);
        if (ours && rc >= 0)
            batch_ring = (int)rc;
        else if (rc == batch_ring)
            batch_ring = -1;   /* a freed ring's number, now libuv's */
        return rc;
    }
    if (nr == __NR_io_uring_enter) {
        /* Both pass (int, unsigned, unsigned, unsigned, NULL, a zero
         * size: sendbatch (size_t)0, libuv 0L). */
        int fd = va_arg(ap, int);
        unsigned to_submit = va_arg(ap, unsigned);
        unsigned min_complete = va_arg(ap, unsigned);
        unsigned flags = va_arg(ap, unsigned);
        void *arg = va_arg(ap, void *);
        size_t argsz = va_arg(ap, size_t);
        va_end(ap);
        if (fd == batch_ring && to_submit > 0) {
            submits++;
            if (submit_fails_with != 0) {
                errno = submit_fails_with;
                submit_fails_with = 0;
                return -1;
            }
            if (submit_takes != 0 && submit_takes < to_submit) {
                to_submit = submit_takes;
                submit_takes = 0;
            }
        }
        return real(nr, fd, to_submit, min_complete, flags, arg, argsz);
    }
    if (nr == __NR_io_uring_register) {
        /* libuv's (>= 1.45): (int, unsigned, void *, unsigned). */
        int fd = va_arg(ap, int);
        unsigned opcode = va_arg(ap, unsigned);
        void *arg = va_arg(ap, void *);
        unsigned nr_args = va_arg(ap, unsigned);
        va_end(ap);
        return real(nr, fd, opcode, arg, nr_args);
    }
    if (nr == __NR_close) {
        /* libuv's close without a cancellation point: (int). */
        int fd = va_arg(ap, int);
        va_end(ap);
        return real(nr, fd);
    }
    va_end(ap);
    fprintf(stderr, "test_conn_batch: syscall(%ld): its argument types are not known here, "
            "add them to this test's syscall()\n", nr);
    abort();
}

/* Echoes what its peer sends: "the connection keeps serving". */
static size_t
echo(struct conn *c, const uint8_t *p, size_t n)
{
    assert_int_equal(conn_send(c, p, n, NULL, 0), 0);
    return n;
}

static const struct conn_handler ECHOER = { .on_bytes = echo };

/* A small buffer on both ends, so that one send takes a small part of a
 * large output.  (The kernel doubles it and keeps a floor.) */
#define SMALL_BUF 8192

/* A connected loopback TCP pair: *srv non-blocking (for conn_adopt),
 * *cli the test's end, non-blocking too. */
static void
tcp_pair(int *srv, int *cli)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c >= 0);
    int small = SMALL_BUF;
    /* Before connect: the window it offers follows it. */
    assert_int_equal(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
    int s = accept(l, NULL, NULL);
    assert_true(s >= 0);
    close(l);
    assert_int_equal(setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    assert_int_equal(fcntl(s, F_SETFL, O_NONBLOCK), 0);
    assert_int_equal(fcntl(c, F_SETFL, O_NONBLOCK), 0);
    *srv = s;
    *cli = c;
}

/* What one peer has read so far. */
struct peer {
    int fd;
    uint8_t *got;
    size_t len, cap;
};

static void
peer_read(struct peer *p)
{
    for (;;) {
        if (p->len == p->cap) {
            p->cap = p->cap ? p->cap * 2 : 65536;
            p->got = realloc(p->got, p->cap);
            assert_non_null(p->got);
        }
        ssize_t n = read(p->fd, p->got + p->len, p->cap - p->len);
        if (n > 0) {
            p->len += (size_t)n;
            continue;
        }
        assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        return;
    }
}

/* Waits (up to 100 ms) for fd to be readable. */
static int
poll_in(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, 100);
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Turns the loop and reads the peers whose `reading` is set until each
 * of those has want[i] bytes (a generous bound: the machine may be
 * loaded; nothing here is timed). */
static void
pump_until(struct reactor *r, struct peer *ps, const size_t *want, const int *reading, int n)
{
    double until = now_s() + 60;
    for (;;) {
        int done = 1;
        for (int i = 0; i < n; i++) {
            if (!reading[i])
                continue;
            peer_read(&ps[i]);
            assert_true(ps[i].len <= want[i]);   /* nothing twice */
            if (ps[i].len < want[i])
                done = 0;
        }
        if (done)
            return;
        assert_true(now_s() < until);
        (void)reactor_run(r, UV_RUN_NOWAIT);
    }
}

/* Bytes no two connections' outputs share, and no offset within one
 * repeats before 251 * 256: a lost or repeated chunk shows. */
static uint8_t *
pattern(size_t len, int salt)
{
    uint8_t *p = malloc(len);
    assert_non_null(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)((i % 251) + (i / 251) * 7 + (size_t)salt * 31);
    return p;
}

static void
reactor_up(struct reactor *r)
{
    assert_int_equal(reactor_init(r, 16 * 1024 * 1024, 0), 0);
    struct reactor_limits lim = { .batch_write = true };
    assert_int_equal(reactor_set_limits(r, &lim), 0);
}

#define NCONN 3

/* A reactor that batches its sends; the case is skipped where the
 * kernel has no io_uring for sendbatch. */
static void
batching_reactor_up(struct reactor *r)
{
    struct sendbatch *probe = sendbatch_new();
    if (probe == NULL)
        skip();
    sendbatch_free(probe);
    reactor_up(r);
}

/* Two connections with 1 MiB each (far more than a send takes) and one
 * with a short reply, queued in one turn: one batched call sends a part
 * of each large output and all of the short one.  The large ones' rest
 * goes by the ordinary write path, and what is queued while it waits
 * goes after it; the peers, one of which reads nothing until the other
 * has all of its bytes, read every byte once, in order; then each
 * connection answers a request and another large reply the same way. */
static void
partly_taken_sends_continue_in_order(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct peer ps[NCONN];
    struct conn *cs[NCONN];
    size_t lens[NCONN] = { 1 << 20, 1 << 20, 200 };
    uint8_t *pat[NCONN];
    for (int i = 0; i < NCONN; i++) {
        int s;
        memset(&ps[i], 0, sizeof(ps[i]));
        tcp_pair(&s, &ps[i].fd);
        cs[i] = conn_adopt(&r, s, &ECHOER, NULL, 0);
        assert_non_null(cs[i]);
        pat[i] = pattern(lens[i], i);
    }
    /* Queued in three pieces each, as replies are, but for a tail. */
    size_t first[NCONN];
    for (int i = 0; i < NCONN; i++) {
        size_t a = lens[i] / 3, b = lens[i] / 2;
        first[i] = lens[i] - lens[i] / 8;
        assert_int_equal(conn_send(cs[i], pat[i], a, pat[i] + a, b - a), 0);
        assert_int_equal(conn_send(cs[i], pat[i] + b, first[i] - b, NULL, 0), 0);
    }
    /* One turn: the flush hands all three to the ring. */
    (void)reactor_run(&r, UV_RUN_NOWAIT);
    assert_non_null(r.batch);       /* a batched call was made */
    assert_false(r.batch_off);
    /* The large outputs were taken in part only: the rest waits, in a
     * write of the ordinary path. */
    assert_true(conn_queued(cs[0]) > 0 && cs[0]->writing);
    assert_true(conn_queued(cs[1]) > 0 && cs[1]->writing);
    /* The tails, queued while that write waits, go after it (never in a
     * batched call of their own: they would overtake it). */
    for (int i = 0; i < NCONN; i++)
        assert_int_equal(conn_send(cs[i], pat[i] + first[i], lens[i] - first[i], NULL, 0), 0);
    /* Peer 0 reads all of its bytes while peer 1 reads nothing. */
    int only0[NCONN] = { 1, 0, 1 };
    pump_until(&r, ps, lens, only0, NCONN);
    assert_true(conn_queued(cs[1]) > 0);
    int all[NCONN] = { 1, 1, 1 };
    pump_until(&r, ps, lens, all, NCONN);
    for (int i = 0; i < NCONN; i++) {
        assert_int_equal(ps[i].len, lens[i]);
        assert_memory_equal(ps[i].got, pat[i], lens[i]);
    }
    /* Still serving: a request each, answered after what came before,
     * and another large reply each, all in one turn again. */
    size_t want[NCONN];
    for (int i = 0; i < NCONN; i++) {
        char req[32];
        int n = snprintf(req, sizeof(req), "ping %d", i);
        assert_int_equal(write(ps[i].fd, req, (size_t)n), n);
        want[i] = lens[i] + (size_t)n;
    }
    /* The echoes are queued as the requests are read (one turn or more:
     * each peer's bytes arrive when they do). */
    double until = now_s() + 60;
    for (int queued = 0; queued < NCONN;) {
        assert_true(now_s() < until);
        (void)reactor_run(&r, UV_RUN_NOWAIT);
        for (int i = 0; i < NCONN; i++)
            peer_read(&ps[i]);
        queued = 0;
        for (int i = 0; i < NCONN; i++)
            queued += ps[i].len == want[i];
    }
    for (int i = 0; i < NCONN; i++) {
        char req[32];
        int n = snprintf(req, sizeof(req), "ping %d", i);
        assert_memory_equal(ps[i].got + lens[i], req, (size_t)n);
        assert_int_equal(conn_send(cs[i], pat[i], lens[i], NULL, 0), 0);
        want[i] += lens[i];
    }
    pump_until(&r, ps, want, all, NCONN);
    for (int i = 0; i < NCONN; i++) {
        size_t off = want[i] - lens[i];
        assert_memory_equal(ps[i].got + off, pat[i], lens[i]);
        close(ps[i].fd);
        free(ps[i].got);
        free(pat[i]);
    }
    assert_int_equal(reactor_close(&r), 0);
}

/* Queues `len` bytes of pattern(salt) on each of n connections, turns
 * the loop once (one flush) and reads until every peer has them all,
 * in order. */
static void
round_trip(struct reactor *r, struct conn **cs, struct peer *ps, int n, size_t len, int salt)
{
    uint8_t *pat = pattern(len, salt);
    size_t want[NCONN];
    int all[NCONN];
    for (int i = 0; i < n; i++) {
        ps[i].len = 0;
        want[i] = len;
        all[i] = 1;
        assert_int_equal(conn_send(cs[i], pat, len, NULL, 0), 0);
    }
    (void)reactor_run(r, UV_RUN_NOWAIT);
    pump_until(r, ps, want, all, n);
    for (int i = 0; i < n; i++)
        assert_memory_equal(ps[i].got, pat, len);
    free(pat);
}

/* After a refusal: no ring and batching not off for good; none before
 * 10 s from t0 (the loop's time before the round). */
static void
ring_gone_for_10s(const struct reactor *r, uint64_t t0)
{
    assert_false(r->batch_off);
    assert_null(r->batch);
    assert_true(r->batch_retry_ms >= t0 + 10000);
}

/* 10 s on (the retry time moved to now): a ring again, used. */
static void
ring_made_again(struct reactor *r, struct conn **cs, struct peer *ps, int tag,
                int submits_at_least)
{
    r->batch_retry_ms = uv_now(&r->loop);
    round_trip(r, cs, ps, 2, 300 * 1000, tag);
    assert_int_equal(setups, 2);
    assert_true(submits >= submits_at_least);
    assert_non_null(r->batch);
    assert_false(r->batch_off);
}

static void
pairs_up(struct reactor *r, struct conn **cs, struct peer *ps, int n)
{
    for (int i = 0; i < n; i++) {
        int s;
        memset(&ps[i], 0, sizeof(ps[i]));
        tcp_pair(&s, &ps[i].fd);
        cs[i] = conn_adopt(r, s, &ECHOER, NULL, 0);
        assert_non_null(cs[i]);
    }
}

static void
pairs_down(struct reactor *r, struct peer *ps, int n)
{
    for (int i = 0; i < n; i++) {
        close(ps[i].fd);
        free(ps[i].got);
    }
    assert_int_equal(reactor_close(r), 0);
}

/* io_uring_enter refusing a submission for want of memory (EAGAIN:
 * nothing submitted) passes like a ring refused at setup: the replies go
 * by write(2), nothing lost, and a ring is made again 10 s later, not
 * batching turned off for the worker's life. */
static void
submission_refused_for_want_of_memory_is_retried(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct peer ps[2];
    struct conn *cs[2];
    pairs_up(&r, cs, ps, 2);
    setups = submits = 0;
    submit_fails_with = EAGAIN;
    /* The flush's loop time is t0 or later, whatever the round takes. */
    uint64_t t0 = uv_now(&r.loop);
    round_trip(&r, cs, ps, 2, 300 * 1000, 1);
    assert_int_equal(setups, 1);
    assert_int_equal(submits, 1);      /* the refused one */
    ring_gone_for_10s(&r, t0);
    /* Not before 10 s: a round now writes without a ring. */
    round_trip(&r, cs, ps, 2, 1000, 2);
    assert_int_equal(setups, 1);
    ring_made_again(&r, cs, ps, 3, 2);
    pairs_down(&r, ps, 2);
}

/* A submission the kernel takes only part of (short of memory part
 * way: io_uring_enter says how many it took) leaves nothing of ours in
 * flight once those completed: like a refused one, the ring goes, the
 * rest go by write(2), and a ring is made again 10 s later, not batching
 * turned off for the worker's life. */
static void
submission_partly_taken_is_retried(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct peer ps[2];
    struct conn *cs[2];
    pairs_up(&r, cs, ps, 2);
    setups = submits = 0;
    submit_takes = 1;
    uint64_t t0 = uv_now(&r.loop);
    round_trip(&r, cs, ps, 2, 300 * 1000, 8);
    assert_int_equal(submit_takes, 0);  /* it was used */
    assert_int_equal(setups, 1);
    assert_int_equal(submits, 1);
    ring_gone_for_10s(&r, t0);
    ring_made_again(&r, cs, ps, 9, 2);
    pairs_down(&r, ps, 2);
}

/* The same for a ring refused at setup for want of descriptors. */
static void
ring_refused_for_want_of_descriptors_is_retried(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct peer ps[2];
    struct conn *cs[2];
    pairs_up(&r, cs, ps, 2);
    setups = submits = 0;
    setup_fails_with = EMFILE;
    uint64_t t0 = uv_now(&r.loop);
    round_trip(&r, cs, ps, 2, 300 * 1000, 4);
    assert_int_equal(setups, 1);
    assert_int_equal(submits, 0);
    ring_gone_for_10s(&r, t0);
    ring_made_again(&r, cs, ps, 5, 1);
    assert_int_equal(submits, 1);
    pairs_down(&r, ps, 2);
}

/* A submission refused for good (EINVAL: not a memory shortage) turns
 * batching off for this reactor; the replies still arrive. */
static void
submission_refused_for_good_turns_batching_off(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct peer ps[2];
    struct conn *cs[2];
    pairs_up(&r, cs, ps, 2);
    setups = submits = 0;
    submit_fails_with = EINVAL;
    round_trip(&r, cs, ps, 2, 300 * 1000, 6);
    assert_true(r.batch_off);
    assert_null(r.batch);
    round_trip(&r, cs, ps, 2, 300 * 1000, 7);
    assert_int_equal(setups, 1);
    assert_int_equal(submits, 1);
    pairs_down(&r, ps, 2);
}

/* The refusals above touch sendbatch's ring only: a ring of libuv's own
 * (>= 1.45: epoll_ctl batching, made without SUBMIT_ALL; libuv aborts
 * when a submission to it fails) goes through untouched, uncounted. */
static void
other_rings_are_not_refused(void **state)
{
    (void)state;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    int fd = (int)syscall(__NR_io_uring_setup, 4u, &p);
    if (fd < 0)
        skip();
    setups = submits = 0;
    submit_fails_with = EAGAIN;
    /* Nothing queued: the kernel takes none and says 0. */
    assert_int_equal(syscall(__NR_io_uring_enter, fd, 1u, 0u, 0u, NULL, (size_t)0), 0);
    assert_int_equal(submits, 0);
    submit_fails_with = 0;
    assert_int_equal(close(fd), 0);
}

/* A peer read by a thread of its own, as a client process reads: the
 * socket's room changes between the loop's write and its flush. */
struct reader {
    int fd;
    uint8_t *got;
    size_t cap;
    _Atomic size_t len;
    _Atomic int done;
};

static void *
reader_main(void *arg)
{
    struct reader *rd = arg;
    for (;;) {
        size_t len = atomic_load(&rd->len);
        if (len == rd->cap)
            break;
        ssize_t n = read(rd->fd, rd->got + len, rd->cap - len > 4096 ? 4096 : rd->cap - len);
        if (n > 0)
            atomic_store(&rd->len, len + (size_t)n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            break;
        else
            (void)poll_in(rd->fd);
    }
    atomic_store(&rd->done, 1);
    return NULL;
}

#define CHUNK (64 * 1024)
#define CHUNKS 48

/* Replies queued turn after turn on two connections whose peers read
 * all the while: whenever a connection's earlier output waits in a write
 * of the ordinary path, what is queued after it must not leave in a
 * batched call of its own (it would overtake what waits).  Each peer
 * reads the whole stream once, in order. */
static void
output_behind_a_waiting_write_stays_behind(void **state)
{
    (void)state;
    struct reactor r;
    batching_reactor_up(&r);
    struct reader rd[2];
    struct conn *cs[2];
    pthread_t th[2];
    size_t total = (size_t)CHUNK * CHUNKS;
    uint8_t *pat[2];
    for (int i = 0; i < 2; i++) {
        int s;
        memset(&rd[i], 0, sizeof(rd[i]));
        tcp_pair(&s, &rd[i].fd);
        cs[i] = conn_adopt(&r, s, &ECHOER, NULL, 0);
        assert_non_null(cs[i]);
        pat[i] = pattern(total, 20 + i);
        rd[i].cap = total;
        rd[i].got = malloc(total);
        assert_non_null(rd[i].got);
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
    }
    for (int k = 0; k < CHUNKS; k++) {
        for (int i = 0; i < 2; i++)
            assert_int_equal(conn_send(cs[i], pat[i] + (size_t)k * CHUNK, CHUNK, NULL, 0), 0);
        (void)reactor_run(&r, UV_RUN_NOWAIT);
    }
    double until = now_s() + 60;
    while (!atomic_load(&rd[0].done) || !atomic_load(&rd[1].done)) {
        assert_true(now_s() < until);
        (void)reactor_run(&r, UV_RUN_NOWAIT);
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(atomic_load(&rd[i].len), total);
        assert_memory_equal(rd[i].got, pat[i], total);
        close(rd[i].fd);
        free(rd[i].got);
        free(pat[i]);
    }
    assert_non_null(r.batch);
    assert_int_equal(reactor_close(&r), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(partly_taken_sends_continue_in_order),
        cmocka_unit_test(output_behind_a_waiting_write_stays_behind),
        cmocka_unit_test(submission_refused_for_want_of_memory_is_retried),
        cmocka_unit_test(submission_partly_taken_is_retried),
        cmocka_unit_test(ring_refused_for_want_of_descriptors_is_retried),
        cmocka_unit_test(submission_refused_for_good_turns_batching_off),
        cmocka_unit_test(other_rings_are_not_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
