/*
 * host: a thread's runtime for Lua: one reactor (libuv loop) and one
 * lua_State, plus the machinery that lets Lua code wait without blocking
 * the thread.
 *
 * Tasks.  Every request handler, spawned function and timer callback runs
 * in a coroutine owned by a task.  Tasks live in a slab; each slot keeps
 * its coroutine for life (reset after an error), so dispatching a request
 * creates no Lua thread.  host_task_run() is the one resume loop.
 *
 * Waiting.  An API that must wait (sleep, an outbound call) fills a
 * struct waiter and calls host_wait().  Inside a task it yields and the
 * event resumes the task (host_wake); outside any task and outside the
 * loop (a script, a busted spec, the CLI) it runs the loop until the event
 * comes, so the same call works in both places.  Inside the loop but not
 * in a task (a __gc, a sort comparator) waiting is an error.
 *
 * MT: a host belongs to the thread that runs its loop.
 */
#ifndef RMQ_HOST_H
#define RMQ_HOST_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "net/codec.h"
#include "net/conn.h"
#include "net/reactor.h"
#include "runtime/post.h"

struct host;
struct task;

/* Listening sockets one server serves (a standalone has three: its
 * NameServer's, the broker's and the broker's VIP port); a host keeps a
 * dispatch and a close hook per listener index. */
#define HOST_MAX_LISTENERS 8

struct waiter {
    struct task *task;        /* NULL while blocking outside the loop */
    struct host *blocking;    /* the host whose loop blocks on it, or NULL */
    bool done;
    /* Pushes the results onto L and releases the wait's resources;
     * returns the number of results.  Runs exactly once. */
    int (*push)(lua_State *L, struct waiter *w);
};

struct task {
    struct host *host;
    lua_State *co;            /* this slot's coroutine */
    struct conn *conn;        /* request tasks: where the reply goes */
    int32_t opaque;
    int32_t code;
    uint8_t serialize;
    bool is_request;
    bool oneway;
    bool waiting;             /* yielded through host_wait */
    bool joined;              /* someone collects the results (run) */
    bool done;
    int status;               /* lua_resume status once done */
    int nres;
    uint32_t slot;
    uint32_t next_free;
};

struct host {
    struct reactor r;
    lua_State *L;
    lua_State *running;       /* coroutine being resumed, NULL at top */
    int threads_ref;          /* registry: table slot -> coroutine */
    /* function(ctx, cmd) per listener index */
    int dispatch_refs[HOST_MAX_LISTENERS];
    /* function(ctx) per listener index, run as a task when an accepted
     * connection closes (LUA_NOREF: none); see host_server_handler */
    int close_refs[HOST_MAX_LISTENERS];
    struct task **tasks;      /* slab of task slots */
    uint32_t ntasks;
    uint32_t free_head;       /* free slot list, UINT32_MAX = empty */
    size_t requests_live;     /* request tasks not yet answered */
    size_t tasks_live;
    uint8_t *scratch;         /* decode arena */
    size_t scratch_cap;
    struct rmq_field *fields; /* encode scratch */
    size_t fields_cap;
    struct buf enc;           /* encode scratch */
    const char **listener_roles;  /* role name of each listener index */
    int nlisteners;
    int worker_id;            /* -1: main thread or a plain script */
    struct host_post post;    /* slot, mailbox, event waits (post.h) */
    bool stopping;            /* no new requests are dispatched */
    bool owns_L;
};

/**
 * Creates a host with a new loop.  When L is NULL a new state is created
 * (with the standard libraries and rmq's modules preloaded) and owned by
 * the host; otherwise the host attaches to L.  Returns NULL with
 * err_set() on failure.
 */
struct host *host_new(lua_State *L, size_t max_frame, uint64_t idle_ms,
                      int worker_id);

/** Closes connections, runs pending closes, frees.  Closes L if owned. */
void host_free(struct host *h);

/** The host of a Lua state, creating one for a plain lua5.4 state. [-0,+0,m] */
struct host *host_of(lua_State *L);

/** Registers `h` as L's host (host_new does this). */
void host_bind(lua_State *L, struct host *h);

/** Preloads rmq's C modules (lua/l_modules.h). */
void host_open_libs(lua_State *L);

/**
 * Points package.path at rmq's lua/ tree: $RMQ_LUA_DIR, else lua/ beside
 * the executable's parent directory (the build tree), else the source
 * tree this binary was built from.
 */
void host_set_lua_path(lua_State *L);

/**
 * Starts a function as a detached task: errors are logged.  The function
 * is below its nargs arguments at the top of L's stack; all are popped.
 * Returns the task (which may already have finished) or NULL.
 * Stack: [-(nargs+1), +0, m].
 */
struct task *host_spawn(struct host *h, lua_State *L, int nargs);

/**
 * Like host_spawn, but the task's results are kept for host_collect(),
 * which must be called once the task is done (t->done).
 */
struct task *host_spawn_joined(struct host *h, lua_State *L, int nargs);

/**
 * Moves a joined task's results onto L and frees the task; re-raises its
 * error (with traceback) if it failed.  Returns the number of results.
 */
int host_collect(struct host *h, struct task *t, lua_State *L);

/** Waits for w (see above). Returns what w->push returns, or raises. */
int host_wait(lua_State *L, struct waiter *w);

/** Marks w done and resumes its task, if any. */
void host_wake(struct waiter *w);

/** Handlers for accepted connections (requests go to dispatch_ref) and
 * for connections we open (requests go to the handle's handler_ref).
 * When an accepted connection closes and its listener has a close hook
 * (close_refs), the hook runs as a detached task with the connection's
 * handle (ctx.closed is true; ctx.id, ctx.peer still readable); not
 * while the host is stopping. */
extern const struct conn_handler host_server_handler;
extern const struct conn_handler host_client_handler;

#endif
