/*
 * err: a per-thread "last error" message, Tarantool-diag style.  A
 * fallible function returns a negative code and leaves the reason here;
 * the caller (usually a Lua binding) decides whether to raise it, return
 * it as `nil, msg`, or log it.
 */
#ifndef RMQ_ERR_H
#define RMQ_ERR_H

enum {
    RMQ_EPROTO = 1000,  /* malformed frame or header */
    RMQ_ETOOBIG,        /* a configured limit was exceeded */
    RMQ_ECLOSED,        /* the connection is gone */
    RMQ_ETIMEDOUT,      /* a deadline passed */
};

/** Records a printf-style message for the calling thread. MT: any thread. */
void err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** The calling thread's last message ("" if none). MT: any thread. */
const char *err_msg(void);

#endif
