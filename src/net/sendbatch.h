/*
 * sendbatch: the replies of one loop pass, handed to the kernel for
 * several sockets in one system call (io_uring IORING_OP_SEND, each
 * MSG_DONTWAIT: what a write(2) would do, nothing left in flight).
 *
 * Why: on loopback, each reply write wakes the peer, and a waker that
 * keeps running is preempted at the write's return; one write per
 * connection meant one wake-up and two context switches per connection
 * a pass.  One call for all of them wakes the peer once.
 *
 * MT: one per reactor (thread).
 */
#ifndef RMQ_SENDBATCH_H
#define RMQ_SENDBATCH_H

#include <stddef.h>
#include <sys/types.h>

struct sendbatch;

/** The most sends one sendbatch_send takes. */
#define SENDBATCH_MAX 64

/** A ring for batched sends; NULL with errno set when the kernel
 * refuses it (then the caller writes as before): ENOSYS / EPERM where
 * io_uring is off or filtered, EINVAL before Linux 5.18
 * (IORING_SETUP_SUBMIT_ALL), EMFILE / ENOMEM for want of resources. */
struct sendbatch *sendbatch_new(void);

void sendbatch_free(struct sendbatch *b);

/**
 * Sends bufs[i] (lens[i] bytes) on fds[i] for i < n (n <= SENDBATCH_MAX),
 * without waiting for room; res[i] is the bytes taken or -errno
 * (-EAGAIN: none; -EINPROGRESS: unknown, the kernel did not say, which
 * only a failing io_uring_enter leaves; that buffer may still be the
 * kernel's: the caller must not free it).  Returns 0; 1 when the ring is
 * not to be used again (res[] still holds what is known: the kernel took
 * only some of the sends, the rest -EAGAIN; with no res[i] -EINPROGRESS
 * no buffer is the kernel's and the ring may be freed); -1 with errno
 * set when nothing could be submitted (nothing was sent and no buffer is
 * the kernel's, so the ring may be freed; not used again): EAGAIN,
 * ENOMEM, EBUSY or EINTR from io_uring_enter pass (the kernel out of
 * memory for the requests, a signal), anything else does not.
 */
int sendbatch_send(struct sendbatch *b, int n, const int *fds,
                   const void *const *bufs, const size_t *lens, ssize_t *res);

#endif
