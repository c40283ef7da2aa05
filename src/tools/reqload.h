/*
 * reqload: a closed-loop request generator for benchmarks, in the style
 * of redis-benchmark without pipelining: N connections, each with one
 * request in flight; when its reply arrives the connection sends the same
 * pre-encoded frame again.  Replies are cut by their length word and
 * timed into a histogram; a reply whose JSON header does not start with
 * {"code":0, (or whose binary header's code is not 0) counts as an error.
 *
 * It runs its own libuv loop on the calling thread (no Lua, no host),
 * blocking until the time is up and every handle is closed.
 *
 * MT: any thread; one run per call.
 */
#ifndef RMQ_REQLOAD_H
#define RMQ_REQLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "tools/loadgen.h"

struct reqload_result {
    uint64_t ok;
    uint64_t errors;           /* error replies */
    int failed_connects;
    double seconds;            /* measured interval */
    struct lg_hist hist;       /* latency, microseconds */
};

/**
 * Drives `frame` (a complete request, length word included) at "ip:port"
 * over `connections` connections for `seconds`.  The first warmup_ms are
 * not counted.  Returns 0, or -1 with err_set() when the address is bad
 * or no connection could be made.
 */
int reqload_run(const char *addr, const uint8_t *frame, size_t len,
                int connections, double seconds, double warmup_ms,
                struct reqload_result *res);

#endif
