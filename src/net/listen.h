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
 *
 * Descriptors held back (serverReservedDescriptors): accepted connections
 * never keep one of the last R descriptors of RLIMIT_NOFILE, so that a
 * connection flood cannot leave persistence (topics.json, offsets, delay
 * offsets), the store's files and the log without one ("Too many open
 * files"), as Redis holds back descriptors from maxclients.  Linux hands
 * out the lowest free descriptor, so an accepted fd at or above
 * limit - R means every descriptor below it is taken: that connection is
 * closed at once (logged once per shortage, then counted), and the range
 * stays for what opens files.  Outbound connections (registration, HA)
 * may use it: they are few and ours.
 */
#ifndef RMQ_LISTEN_H
#define RMQ_LISTEN_H

#include <stdbool.h>
#include <stdint.h>
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
    int fd_cap;                /* accepted fds >= this are closed; 0: none */
    bool cap_warned;           /* a refusal of this shortage was logged */
    uint64_t refused;          /* connections closed for the reserve */
};

/**
 * The first descriptor number accepted connections must not keep:
 * RLIMIT_NOFILE's soft limit minus `reserve` (at most a quarter of the
 * limit, so a small limit still serves), 0 when there is no limit to
 * speak of (RLIM_INFINITY or beyond INT_MAX) or reserve is 0.  *limit
 * receives the soft limit (0 if unknown).
 */
int listen_fd_cap(int reserve, long *limit);

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

/** Sets a's descriptor cap (listen_fd_cap; 0: none). */
void acceptor_set_fd_cap(struct acceptor *a, int cap);

#endif
