/*
 * listen: listening sockets shared by the workers through SO_REUSEPORT.
 * Debian 12's libuv (1.44) has no UV_TCP_REUSEPORT, so the socket is made
 * here and handed to uv_tcp_open() in the worker that owns it.
 */
#ifndef RMQ_LISTEN_H
#define RMQ_LISTEN_H

/**
 * Creates a non-blocking TCP socket with SO_REUSEADDR and SO_REUSEPORT,
 * bound to host:port and listening.  With port 0 the kernel picks one;
 * *bound_port receives the port in use, so the other workers can bind
 * the same one.  Returns the fd, or -errno with err_set().
 * MT: any thread.
 */
int listen_socket(const char *host, int port, int backlog, int *bound_port);

#endif
