/*
 * metrics_http: the Prometheus endpoint, GET /metrics, served by
 * libmicrohttpd on a thread of its own (which runs the library's loop),
 * so a scrape (or a misbehaving HTTP client) never runs on, or waits
 * for, a worker loop.  The library parses HTTP; here are only the routes
 * and the limits: at most max_connections at once (more wait in the
 * listen backlog), a connection idle timeout_s seconds is closed, and so
 * is one whose request has been arriving for timeout_s seconds however
 * busily (slowloris: the library's timeout is for idleness only, which a
 * byte a second resets; the loop thread shuts those down itself), a
 * request whose line and headers exceed max_header bytes is answered 431
 * and closed; a malformed request is answered 400 and closed by the
 * library.  Against slowloris from many connections: a request's line
 * and headers must be in within header_ms (a scraper sends them in one
 * packet), one address holds at most max_per_address connections, and
 * the addresses in `allowed` (Prometheus) have max_connections more of
 * their own, so a flood from elsewhere never keeps a scrape out.  A
 * connection past a limit is closed at accept (logged at most once a
 * second, with a count).
 *
 * The web console: GET / (and its files, web/, embedded at build time:
 * web_assets.h) and /api/... (JSON), answered by rmq.console.http in a Lua
 * state of this thread's own, which asks this server's broker port over
 * loopback with remoting requests (what mqadmin would send).  So the
 * HTTP thread never touches worker state, and a slow answer is bounded
 * by the requests' timeout.  The same state takes a snapshot every
 * sampleMillis on a sampler thread (the lag sparklines); one mutex keeps
 * the state to one caller at a time.  A request body (POST /api/send) is
 * read up to max_body bytes; larger is answered 413.
 *
 * Why libmicrohttpd: Debian's, maintained, with most of those limits
 * built in; libhttp-parser would put a hand-written server around
 * a parser on a worker loop.
 *
 * MT: start and stop on one thread; the daemon's thread only reads the
 * registry (metrics_render) and runs the console's own Lua state.
 */
#ifndef RMQ_METRICS_HTTP_H
#define RMQ_METRICS_HTTP_H

#include <stddef.h>

struct metrics;
struct metrics_http;

struct metrics_http_opts {
    const char *host;
    int port;                  /* 0: any free port */
    unsigned max_connections;
    unsigned timeout_s;
    size_t max_header;
    size_t max_body;           /* request bodies; larger: 413 */
    unsigned header_ms;        /* request line and headers within this (ms) */
    unsigned max_per_address;  /* connections at once from one address */
    const char *allowed;       /* ";"-separated IPs with a pool of their own; NULL/"": none */
    const char *console;       /* rmq.console.http settings (JSON); NULL: no console */
};

/**
 * Binds host:port (a port in use fails here, "port in use", as the
 * remoting listeners do) and starts serving m.  *bound gets the port.
 * NULL with err_set() on failure.
 */
struct metrics_http *metrics_http_start(struct metrics *m,
                                        const struct metrics_http_opts *o,
                                        int *bound);

/** Stops the thread, closes every connection and the socket.  NULL ok. */
void metrics_http_stop(struct metrics_http *mh);

#endif
