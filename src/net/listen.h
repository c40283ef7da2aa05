/*
 * listen: listening sockets and the loop that accepts on them.
 *
 * One socket per listening address, bound WITHOUT SO_REUSEPORT.  With
 * SO_REUSEPORT Linux lets any process of the same user join the port's
 * group, so a second rmq-server started on a port in use came up READY
 * and took half the connections.  Without it the second bind fails with
 * EADDRINUSE and the process refuses to start ("port in use").
 * SO_REUSEADDR stays: it only lets a restart bind while connections of
 * the previous run linger in TIME_WAIT, never beside a live listener.
 *
 * Debian 12's libuv (1.44) cannot make such a socket the way we need it,
 * so it is made here; an acceptor polls it (uv_poll_t) and accepts with
 * accept4() until EAGAIN, handing each new fd to a callback that decides
 * which loop serves it (server/server.c spreads them over the workers).
 */
#ifndef RMQ_LISTEN_H
#define RMQ_LISTEN_H

#include <stdbool.h>
#include <uv.h>

/**
 * Creates a non-blocking, close-on-exec TCP socket with SO_REUSEADDR,
 * bound to host:port and listening.  With port 0 the kernel picks one;
 * *bound_port receives the port in use.  Returns the fd, or -errno with
 * err_set(); a port another socket listens on gives -EADDRINUSE and a
 * message containing "port in use" and host:port.
 * MT: any thread.
 */
int listen_socket(const char *host, int port, int backlog, int *bound_port);

struct acceptor;

/* A connection accepted: `fd` is non-blocking and close-on-exec, and the
 * callback owns it (it must close it if it cannot use it). */
typedef void (*acceptor_fn)(struct acceptor *a, int fd);

struct acceptor {
    uv_poll_t poll;            /* readable = connections wait in the backlog */
    uv_timer_t backoff;        /* restarts polling after EMFILE and the like */
    int fd;                    /* the listening socket; -1 once closed */
    acceptor_fn on_fd;
    void *data;                /* the caller's */
    char name[128];            /* "host:port", for log lines */
    bool open;                 /* handles initialised, not closed yet */
    bool warned;               /* this shortage was logged already */
};

/**
 * Starts accepting on listening socket `fd` in `loop`; `name` labels log
 * lines.  Takes ownership of fd in every case (closed on failure).
 * `a` must stay valid until the loop has run the close acceptor_close
 * starts.  Returns 0 or a libuv error (with err_set()).
 * MT: the loop's thread, as the rest.
 */
int acceptor_start(struct acceptor *a, uv_loop_t *loop, int fd,
                   const char *name, acceptor_fn on_fd, void *data);

/**
 * Stops accepting and closes the listening socket at once: new
 * connection attempts are refused from here on.  Idempotent; a no-op on
 * an acceptor that never started.
 */
void acceptor_close(struct acceptor *a);

#endif
