/* listen: see listen.h. */
#include "net/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"

/* Connections taken per wake-up.  The burst of a benchmark (128 connects
 * at once) fits in one; past it the poll, level-triggered, fires again
 * after the loop has run its other handles. */
#define ACCEPT_BATCH 256

/* How long to stop accepting when descriptors or memory run out.  The
 * pending connections wait in the kernel's backlog meanwhile; polling
 * on would wake the loop at once, forever (the backlog stays readable). */
#define ACCEPT_BACKOFF_MS 100

int
listen_socket(const char *host, int port, int backlog, int *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        len = sizeof(*a4);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        len = sizeof(*a6);
    } else {
        err_set("bindAddress '%s' is not an IPv4 or IPv6 address", host);
        return -EINVAL;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        err_set("socket: %s", strerror(e));
        return -e;
    }
    /* SO_REUSEADDR only, never SO_REUSEPORT: see listen.h. */
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        int e = errno;
        err_set("setsockopt: %s", strerror(e));
        close(fd);
        return -e;
    }
    /* listen() can also report EADDRINUSE (an ephemeral port taken
     * between bind and listen): both read the same to the operator. */
    const char *step = "bind";
    int rc = bind(fd, (struct sockaddr *)&ss, len);
    if (rc == 0) {
        step = "listen";
        rc = listen(fd, backlog);
    }
    if (rc != 0) {
        int e = errno;
        if (e == EADDRINUSE)
            err_set("cannot listen on %s:%d: port in use (another process "
                    "listens there; stop it or choose another port)", host, port);
        else
            err_set("cannot listen on %s:%d: %s: %s", host, port, step, strerror(e));
        close(fd);
        return -e;
    }
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        int e = errno;
        err_set("getsockname: %s", strerror(e));
        close(fd);
        return -e;
    }
    *bound_port = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return fd;
}

/* {{{ Acceptor */

static void on_readable(uv_poll_t *p, int status, int events);

static void
on_backoff(uv_timer_t *t)
{
    struct acceptor *a = t->data;
    int rc = uv_poll_start(&a->poll, UV_READABLE, on_readable);
    if (rc != 0) {
        /* Cannot happen on a live fd; retry rather than go deaf. */
        log_error("accept on %s: poll: %s", a->name, uv_strerror(rc));
        (void)uv_timer_start(&a->backoff, on_backoff, ACCEPT_BACKOFF_MS, 0);
    }
}

/* Stops polling for a while.  Logged once per shortage: while it lasts
 * the loop retries every ACCEPT_BACKOFF_MS, and a line each time would
 * fill the log exactly when the machine is short of resources. */
static void
pause_accepting(struct acceptor *a, const char *why)
{
    if (!a->warned) {
        log_warn("accept on %s: %s; retrying every %d ms until it clears "
                 "(new connections wait in the backlog)", a->name, why,
                 ACCEPT_BACKOFF_MS);
        a->warned = true;
    }
    (void)uv_poll_stop(&a->poll);  /* only fails on a closing handle */
    int rc = uv_timer_start(&a->backoff, on_backoff, ACCEPT_BACKOFF_MS, 0);
    if (rc != 0)
        log_error("accept on %s: timer: %s", a->name, uv_strerror(rc));
}

/* Errors of one connection, not of the listener: Linux's accept4 passes
 * on pending network errors of the new socket (accept(2), "Error
 * handling"); the next one in the backlog may be fine. */
static bool
accept_error_transient(int e)
{
    switch (e) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
#ifdef ENONET
    case ENONET:
#endif
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EPERM:  /* a firewall rule refused this one */
        return true;
    default:
        return false;
    }
}

int
listen_fd_cap(int reserve, long *limit)
{
    struct rlimit rl;
    *limit = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT_MAX)
        return 0;
    *limit = (long)rl.rlim_cur;
    if (reserve <= 0)
        return 0;
    long r = reserve;
    if (r > *limit / 4)
        r = *limit / 4;
    return (int)(*limit - r);
}

void
acceptor_set_fd_cap(struct acceptor *a, int cap)
{
    a->fd_cap = cap > 0 ? cap : 0;
}

/* An accepted fd in the reserved range: closed at once (listen.h). */
static void
refuse_reserved(struct acceptor *a, int fd)
{
    a->refused++;
    if (!a->cap_warned) {
        log_warn("accept on %s: descriptor %d is one of the last kept for "
                 "persistence and the store (serverReservedDescriptors): "
                 "connection closed; refusing new ones until descriptors "
                 "free up", a->name, fd);
        a->cap_warned = true;
    }
    close(fd);
}

static void
on_readable(uv_poll_t *p, int status, int events)
{
    (void)events;
    struct acceptor *a = p->data;
    if (status != 0) {
        pause_accepting(a, uv_strerror(status));
        return;
    }
    for (int n = 0; n < ACCEPT_BATCH && a->fd >= 0; n++) {
        int fd = accept4(a->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (a->fd_cap > 0 && fd >= a->fd_cap) {
                refuse_reserved(a, fd);
                continue;
            }
            if (a->cap_warned) {
                log_info("accept on %s: descriptors free again (%llu "
                         "connections refused meanwhile)", a->name,
                         (unsigned long long)a->refused);
                a->cap_warned = false;
            }
            if (a->warned) {
                log_info("accept on %s: accepting again", a->name);
                a->warned = false;
            }
            /* May close the acceptor (a->fd becomes -1): checked above. */
            a->on_fd(a, fd);
            continue;
        }
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return;
        if (accept_error_transient(e))
            continue;
        /* EMFILE, ENFILE, ENOBUFS, ENOMEM: nothing can be accepted until
         * something is freed.  Anything else would repeat as well. */
        pause_accepting(a, strerror(e));
        return;
    }
}

int
acceptor_start(struct acceptor *a, uv_loop_t *loop, int fd, const char *name,
               acceptor_fn on_fd, void *data)
{
    memset(a, 0, sizeof(*a));
    a->fd = -1;
    a->on_fd = on_fd;
    a->data = data;
    snprintf(a->name, sizeof(a->name), "%s", name);
    int rc = uv_timer_init(loop, &a->backoff);
    if (rc != 0) {
        err_set("accept on %s: timer: %s", name, uv_strerror(rc));
        close(fd);
        return rc;
    }
    a->backoff.data = a;
    rc = uv_poll_init_socket(loop, &a->poll, fd);
    if (rc != 0) {
        err_set("accept on %s: poll: %s", name, uv_strerror(rc));
        uv_close((uv_handle_t *)&a->backoff, NULL);
        close(fd);
        return rc;
    }
    a->poll.data = a;
    a->fd = fd;
    a->open = true;
    rc = uv_poll_start(&a->poll, UV_READABLE, on_readable);
    if (rc != 0) {
        err_set("accept on %s: poll: %s", name, uv_strerror(rc));
        acceptor_close(a);
        return rc;
    }
    return 0;
}

void
acceptor_close(struct acceptor *a)
{
    if (!a->open)
        return;
    a->open = false;
    /* uv_close stops the poll at once, so the fd is no longer watched
     * when it closes (libuv's rule for uv_poll_t). */
    uv_close((uv_handle_t *)&a->poll, NULL);
    uv_close((uv_handle_t *)&a->backoff, NULL);
    if (close(a->fd) != 0)
        log_warn("close listener %s: %s", a->name, strerror(errno));
    a->fd = -1;
}

/* }}} */
