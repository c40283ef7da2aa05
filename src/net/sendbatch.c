/*
 * sendbatch: see sendbatch.h.  The ring is driven by the raw system
 * calls (no liburing): one submission of n SENDs with GETEVENTS for n
 * completions.  Every send is MSG_DONTWAIT, so each completes inside
 * the call (taken, partly taken, or -EAGAIN) and no buffer is still the
 * kernel's when sendbatch_send returns, but for a send it left unknown
 * (-EINPROGRESS: a failing io_uring_enter, not seen in practice).
 */
#include "net/sendbatch.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct sendbatch {
    int fd;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_ptr, *cq_ptr;
    size_t sq_sz, cq_sz, sqes_sz;
    int broken;
};

static int
ring_setup(unsigned entries, struct io_uring_params *p)
{
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int
ring_enter(int fd, unsigned submit, unsigned complete, unsigned flags)
{
    /* argsz (the last) is a size_t: a variadic call passes a plain 0
     * as an int. */
    return (int)syscall(__NR_io_uring_enter, fd, submit, complete, flags, NULL, (size_t)0);
}

struct sendbatch *
sendbatch_new(void)
{
    struct sendbatch *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    /* SUBMIT_ALL: a send that fails at submission (a closed descriptor)
     * must not leave the ones after it in the ring, unsubmitted, while
     * we wait for all of them to complete. */
    p.flags = IORING_SETUP_SUBMIT_ALL;
    b->fd = ring_setup(SENDBATCH_MAX, &p);
    if (b->fd < 0) {
        int e = errno;
        free(b);
        errno = e;
        return NULL;
    }
    b->sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    b->cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (b->cq_sz > b->sq_sz)
            b->sq_sz = b->cq_sz;
        b->cq_sz = b->sq_sz;
    }
    b->sq_ptr = mmap(NULL, b->sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     b->fd, IORING_OFF_SQ_RING);
    if (b->sq_ptr == MAP_FAILED)
        goto fail;
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        b->cq_ptr = b->sq_ptr;
    } else {
        b->cq_ptr = mmap(NULL, b->cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                         b->fd, IORING_OFF_CQ_RING);
        if (b->cq_ptr == MAP_FAILED) {
            b->cq_ptr = NULL;
            goto fail;
        }
    }
    b->sqes_sz = p.sq_entries * sizeof(struct io_uring_sqe);
    b->sqes = mmap(NULL, b->sqes_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   b->fd, IORING_OFF_SQES);
    if (b->sqes == MAP_FAILED) {
        b->sqes = NULL;
        goto fail;
    }
    char *sq = b->sq_ptr, *cq = b->cq_ptr;
    b->sq_head = (unsigned *)(sq + p.sq_off.head);
    b->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    b->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    b->sq_array = (unsigned *)(sq + p.sq_off.array);
    b->cq_head = (unsigned *)(cq + p.cq_off.head);
    b->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    b->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    b->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return b;
fail:;
    int e = errno;
    sendbatch_free(b);
    errno = e;
    return NULL;
}

void
sendbatch_free(struct sendbatch *b)
{
    if (b == NULL)
        return;
    if (b->sqes != NULL)
        munmap(b->sqes, b->sqes_sz);
    if (b->cq_ptr != NULL && b->cq_ptr != b->sq_ptr)
        munmap(b->cq_ptr, b->cq_sz);
    if (b->sq_ptr != NULL && b->sq_ptr != MAP_FAILED)
        munmap(b->sq_ptr, b->sq_sz);
    close(b->fd);
    free(b);
}

int
sendbatch_send(struct sendbatch *b, int n, const int *fds,
               const void *const *bufs, const size_t *lens, ssize_t *res)
{
    if (b->broken || n <= 0 || n > SENDBATCH_MAX) {
        errno = EINVAL;
        return -1;
    }
    unsigned mask = *b->sq_mask;
    unsigned tail = *b->sq_tail;
    for (int i = 0; i < n; i++) {
        unsigned idx = tail & mask;
        struct io_uring_sqe *e = &b->sqes[idx];
        memset(e, 0, sizeof(*e));
        e->opcode = IORING_OP_SEND;
        e->fd = fds[i];
        e->addr = (uint64_t)(uintptr_t)bufs[i];
        e->len = (uint32_t)lens[i];
        e->msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL;
        e->user_data = (uint64_t)i;
        b->sq_array[idx] = idx;
        tail++;
        res[i] = -EINPROGRESS;
    }
    atomic_store_explicit((_Atomic unsigned *)b->sq_tail, tail, memory_order_release);
    /* Submitting does the sends: each is MSG_DONTWAIT, so it completes
     * (taken, part taken, -EAGAIN) while it is issued. */
    int taken = ring_enter(b->fd, (unsigned)n, 0, 0);
    if (taken < 0) {
        /* Nothing taken: the ring's tail is ahead of the kernel's head
         * for good, so it is not used again (errno: io_uring_enter's). */
        b->broken = 1;
        return -1;
    }
    if (taken < n) {
        /* The rest never run (the ring is not entered again): not sent. */
        b->broken = 1;
        for (int i = taken; i < n; i++)
            res[i] = -EAGAIN;
    }
    int got = 0;
    for (;;) {
        unsigned head = *b->cq_head;
        unsigned ctail = atomic_load_explicit((_Atomic unsigned *)b->cq_tail,
                                              memory_order_acquire);
        for (; head != ctail; head++) {
            struct io_uring_cqe *c = &b->cqes[head & *b->cq_mask];
            if (c->user_data < (uint64_t)taken && res[c->user_data] == -EINPROGRESS) {
                res[c->user_data] = c->res;
                got++;
            }
        }
        atomic_store_explicit((_Atomic unsigned *)b->cq_head, head, memory_order_release);
        if (got >= taken)
            break;
        /* Not seen yet (not expected): their buffers are the kernel's
         * until they complete, so wait for them. */
        if (ring_enter(b->fd, 0, (unsigned)(taken - got), IORING_ENTER_GETEVENTS) < 0 &&
            errno != EINTR && errno != EAGAIN && errno != EBUSY) {
            b->broken = 1;   /* the rest stay -EINPROGRESS: unknown */
            break;
        }
    }
    return b->broken ? 1 : 0;
}
