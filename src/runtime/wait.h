/*
 * wait: what a module needs from a host to wait without blocking the
 * thread, and nothing else (post, the connection handle and the bindings
 * include this, not host.h; host.c implements it).
 *
 * An API that must wait (sleep, an outbound call) fills a struct waiter
 * and calls host_wait().  Inside a task it yields and the event resumes
 * the task (host_wake); outside any task and outside the loop (a script,
 * a busted spec, the CLI) it runs the loop until the event comes, so the
 * same call works in both places.  Inside the loop but not in a task (a
 * __gc, a sort comparator) waiting is an error.
 *
 * MT: the host's own thread.
 */
#ifndef RMQ_WAIT_H
#define RMQ_WAIT_H

#include <lua.h>
#include <stdbool.h>

#include "core/queue.h"

struct host;
struct task;

struct waiter {
    struct task *task;        /* NULL while blocking outside the loop */
    struct host *blocking;    /* the host whose loop blocks on it, or NULL */
    bool done;
    /* Pushes the results onto L and releases the wait's resources;
     * returns the number of results.  Runs exactly once. */
    int (*push)(lua_State *L, struct waiter *w);
    /* Frees what the wait holds when its host goes away while a task
     * still waits on it (host_free, once the loop is closed: the wait's
     * handles are closed and none of its callbacks will run again);
     * push never runs then.  NULL: the wait owns nothing to free. */
    void (*abandon)(struct waiter *w);
    struct qnode link;        /* in the host's waits while a task waits */
};

/** The host of a Lua state, creating one for a plain lua5.4 state. [-0,+0,m] */
struct host *host_of(lua_State *L);

/** Waits for w (see above). Returns what w->push returns, or raises.
 * A task's wait still pending when the host is freed is abandoned. */
int host_wait(lua_State *L, struct waiter *w);

/** Marks w done and resumes its task, if any. */
void host_wake(struct waiter *w);

#endif
