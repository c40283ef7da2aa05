/* sendbatch: one system call for several sockets' sends (net/sendbatch.h,
 * the worker's reply flush).  Each result must say what that socket took,
 * as a write(2) of the same bytes would: all of it, part of it when its
 * buffer fills, nothing (-EAGAIN) when full, an error when the peer is
 * gone; and the bytes must arrive whole and in order.  Where the kernel
 * refuses io_uring (a seccomp profile, io_uring_disabled) sendbatch_new
 * returns NULL and the cases are skipped: the flush then writes as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/sendbatch.h"

static void
pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
}

/* Reads what the peer end holds now. */
static size_t
drain(int fd, char *out, size_t cap)
{
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, out + got, cap - got);
        if (n <= 0)
            return got;
        got += (size_t)n;
    }
}

/* Three sockets, three messages, one call: each result is its length
 * and each peer reads exactly its own bytes. */
static void
three_sockets_one_call(void **state)
{
    (void)state;
    struct sendbatch *b = sendbatch_new();
    if (b == NULL)
        skip();
    int sv[3][2];
    int fds[3];
    const void *bufs[3];
    size_t lens[3];
    ssize_t res[3];
    const char *msg[3] = { "first reply", "second, longer reply", "3" };
    for (int i = 0; i < 3; i++) {
        pair(sv[i]);
        fds[i] = sv[i][0];
        bufs[i] = msg[i];
        lens[i] = strlen(msg[i]);
    }
    assert_int_equal(sendbatch_send(b, 3, fds, bufs, lens, res), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i], (ssize_t)lens[i]);
        char got[64];
        size_t n = drain(sv[i][1], got, sizeof(got));
        assert_int_equal(n, lens[i]);
        assert_memory_equal(got, msg[i], n);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    /* The ring is used again for the next turn. */
    int sv2[2][2];
    for (int i = 0; i < 2; i++) {
        pair(sv2[i]);
        fds[i] = sv2[i][0];
    }
    assert_int_equal(sendbatch_send(b, 2, fds, bufs, lens, res), 0);
    assert_int_equal(res[0], (ssize_t)lens[0]);
    assert_int_equal(res[1], (ssize_t)lens[1]);
    for (int i = 0; i < 2; i++) {
        close(sv2[i][0]);
        close(sv2[i][1]);
    }
    sendbatch_free(b);
}

/* A socket whose buffer fills takes part of its bytes (then nothing:
 * -EAGAIN), a socket whose peer is gone reports the error, and neither
 * stops the others in the same call. */
static void
full_and_closed_sockets(void **state)
{
    (void)state;
    struct sendbatch *b = sendbatch_new();
    if (b == NULL)
        skip();
    int full[2], gone[2], ok[2];
    pair(full);
    pair(gone);
    pair(ok);
    int small = 4096;
    assert_int_equal(setsockopt(full[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    close(gone[1]);
    size_t big = 4 * 1024 * 1024;
    char *payload = malloc(big);
    assert_non_null(payload);
    for (size_t i = 0; i < big; i++)
        payload[i] = (char)(i * 7);
    int fds[3] = { full[0], gone[0], ok[0] };
    const void *bufs[3] = { payload, "lost", "kept" };
    size_t lens[3] = { big, 4, 4 };
    ssize_t res[3];
    assert_int_equal(sendbatch_send(b, 3, fds, bufs, lens, res), 0);
    assert_true(res[0] > 0 && (size_t)res[0] < big);
    assert_int_equal(res[1], -EPIPE);
    assert_int_equal(res[2], 4);
    /* The part taken arrives whole and in order. */
    char *got = malloc((size_t)res[0]);
    assert_non_null(got);
    size_t n = drain(full[1], got, (size_t)res[0]);
    assert_int_equal(n, (size_t)res[0]);
    assert_memory_equal(got, payload, n);
    /* Full again: nothing taken, nothing lost. */
    const void *rest[2] = { payload + res[0], "again" };
    size_t rlen[2] = { big - (size_t)res[0], 5 };
    int fds2[2] = { full[0], ok[0] };
    ssize_t r2[2];
    /* Fill it first, by write(2). */
    while (write(full[0], payload, 65536) > 0)
        ;
    assert_int_equal(sendbatch_send(b, 2, fds2, rest, rlen, r2), 0);
    assert_int_equal(r2[0], -EAGAIN);
    assert_int_equal(r2[1], 5);
    free(got);
    free(payload);
    close(full[0]);
    close(full[1]);
    close(gone[0]);
    close(ok[0]);
    close(ok[1]);
    sendbatch_free(b);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_sockets_one_call),
        cmocka_unit_test(full_and_closed_sockets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
