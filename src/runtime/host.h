/*
 * host: a thread's runtime for Lua: one reactor (libuv loop) and one
 * lua_State, plus the machinery that lets Lua code wait without blocking
 * the thread.
 *
 * Tasks.  Every request handler, spawned function and timer callback runs
 * in a coroutine owned by a task.  Tasks live in slots; a slot keeps its
 * coroutine (reset after an error), so dispatching a request creates no
 * Lua thread, except past HOST_KEEP_IDLE_TASKS idle ones: then a released
 * slot drops its task and coroutine (a flood's thousands of held
 * requests leave nothing behind; host_reclaim collects them).  host_task_run() is the one resume loop.
 *
 * Waiting: struct waiter, host_wait() and host_wake(), declared in
 * wait.h for the modules that need nothing else of a host.
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
#include "runtime/wait.h"

struct native_table;
struct acl_guard;
struct metrics;
struct metrics_shard;

/* Listening sockets one server serves (a standalone has three: its
 * NameServer's, the broker's and the broker's VIP port); a host keeps a
 * dispatch and a close hook per listener index. */
#define HOST_MAX_LISTENERS 8

struct task {
    struct host *host;
    lua_State *co;            /* this slot's coroutine */
    struct conn *conn;        /* request tasks: where the reply goes */
    int32_t opaque;
    int32_t code;
    int64_t start_ns;         /* the request's arrival (metrics on) */
    uint8_t serialize;
    bool is_request;
    bool oneway;
    bool waiting;             /* yielded through host_wait */
    bool joined;              /* someone collects the results (run) */
    bool done;
    int status;               /* lua_resume status once done */
    int nres;
    uint32_t slot;
    int64_t charged;          /* bytes counted against the memory budget
                               * (core/membudget.h) until it answers */
};

/* Idle task slots that keep their coroutine; past this many, a released
 * slot drops its coroutine (the Lua GC frees it), so a flood of held
 * requests does not leave its coroutines behind once it is over. */
/* 64, not 512: after a held-pull flood, 512 idle coroutines per worker
 * kept about 5 MB (RssAnon 11 -> 21 MB 15 s after the attack with 512,
 * 18 MB with 64, 16 MB with 16; scripts/bench/attacks.lua heldpull);
 * a request beyond them makes a coroutine (lua_newthread, ~1 us). */
#define HOST_KEEP_IDLE_TASKS 64

struct host {
    struct reactor r;
    lua_State *L;
    lua_State *running;       /* coroutine being resumed, NULL at top */
    int threads_ref;          /* registry: table slot -> coroutine */
    /* function(ctx, cmd) per listener index */
    int dispatch_refs[HOST_MAX_LISTENERS];
    /* per listener index: the request codes served in C (proto/native.h) */
    struct native_table *natives[HOST_MAX_LISTENERS];
    /* function(ctx) per listener index, run as a task when an accepted
     * connection closes (LUA_NOREF: none); see host_server_handler */
    int close_refs[HOST_MAX_LISTENERS];
    /* ACL (acl/acl.h): the requests of a listener whose acl_roles entry
     * is not 0 (an enum acl_role) are checked with `acl` first */
    struct acl_guard *acl;
    uint8_t acl_roles[HOST_MAX_LISTENERS];
    struct task **tasks;      /* task slots (NULL: none made yet, or dropped) */
    uint32_t *task_next;      /* per slot: the next free slot */
    uint32_t ntasks;
    uint32_t free_head;       /* free slot list, UINT32_MAX = empty */
    size_t tasks_kept;        /* slots with a coroutine (live or idle) */
    size_t requests_live;     /* request tasks not yet answered */
    size_t tasks_live;
    size_t tasks_dropped;     /* coroutines dropped since the last
                               * host_reclaim (HOST_KEEP_IDLE_TASKS) */
    uint8_t *scratch;         /* decode arena */
    size_t scratch_cap;
    struct rmq_field *fields; /* encode scratch */
    size_t fields_cap;
    struct buf enc;           /* encode scratch */
    int worker_id;            /* -1: main thread or a plain script */
    /* This thread's metrics shard (core/metrics.h), NULL: metrics off;
     * frame_ns: when the frame being dispatched arrived (set only then). */
    struct metrics_shard *metrics;
    /* The main thread's: the whole registry (for the roles' main hooks
     * to install collectors), NULL elsewhere and with metrics off. */
    struct metrics *registry;
    int64_t frame_ns;
    /* The frame being dispatched to a native processor (NULL otherwise):
     * one that holds the request keeps a copy (native_req.frame). */
    const uint8_t *frame;
    size_t frame_len;
    /* The role each listener index serves (the plan's names; NULL: none
     * known), and the gate run before any processor, C or Lua, for the
     * listeners in gate_listeners (flow control, broker/admission.h):
     * true = it answered the request. */
    const char *listener_roles[HOST_MAX_LISTENERS];
    bool (*gate)(void *arg, struct host *h, struct conn *c, const struct rmq_cmd *cmd);
    void *gate_arg;
    uint32_t gate_listeners;
    /* Stray responses dropped (no relay due on their connection), and
     * when that was last logged: one line per 10 s at most. */
    uint64_t strays_dropped;
    int64_t strays_logged_ns;
    /* ACL refusals in the current one-second window, and its start: the
     * log gets a line for the first few only (host.c acl_admit). */
    uint64_t acl_refused;
    int64_t acl_refused_window_ns;
    /* Likewise for memory budget refusals (host.c budget_refuse). */
    uint64_t budget_refused;
    int64_t budget_refused_window_ns;
    struct host_post post;    /* slot, mailbox, event waits (post.h) */
    /* struct waiter.link: the waits tasks are suspended in; those left
     * when the host is freed are abandoned (wait.h) */
    struct qnode waits;
    bool stopping;            /* no new requests are dispatched */
    bool draining;            /* shutting down: requests held in C (held
                               * pulls) answer at their next re-check */
    bool owns_L;
};

/**
 * Creates a host with a new loop, running L (a state the caller made
 * with its modules, lmodules_newstate() for rmq's; NULL is refused, so
 * a failed allocation can be passed straight in).  own: the host closes
 * L when it is freed, and even when host_new fails.  Returns NULL with
 * err_set() on failure.
 */
struct host *host_new(lua_State *L, bool own, size_t max_frame, uint64_t idle_ms,
                      int worker_id);

/** Closes connections, runs pending closes, frees.  Closes L if owned. */
void host_free(struct host *h);

/**
 * After task coroutines were dropped (a flood of held requests ended):
 * a full Lua collection, then the budget's malloc_trim, so RSS falls.
 * Cheap when nothing was dropped (the worker's timer calls it each
 * second).  Returns true when it collected.
 */
bool host_reclaim(struct host *h);

/**
 * A request a native processor held (a long-poll pull) that its Lua
 * handler must finish after all: the frame is decoded again and run as
 * host_on_frame runs a request it has no native processor for (a task,
 * charged to the memory budget or refused past it).  start_ns: its
 * arrival.  Returns 0, or -1 with err_set() (the frame does not decode).
 */
int host_request_to_lua(struct host *h, struct conn *c, const uint8_t *frame, size_t len,
                        int64_t start_ns);

/**
 * Charges cost bytes of a request held in C to c's memory budget
 * (core/membudget.h), as a request waiting in a task is charged.  False:
 * a limit refused it, and the request was answered SYSTEM_BUSY naming
 * the limit's conf key.  host_budget_release gives the bytes back.
 */
bool host_budget_charge(struct host *h, struct conn *c, const struct rmq_cmd *cmd, int64_t cost);
void host_budget_release(struct conn *c, int64_t cost);

/** Registers `h` as L's host (host_new does this). */
void host_bind(lua_State *L, struct host *h);

/**
 * Lets L require rmq's Lua modules: those compiled into the binary, or
 * with $RMQ_LUA_DIR set, that lua/ tree's first (runtime/lua_source.h).
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

/** Handlers for accepted connections (requests go to dispatch_ref) and
 * for connections we open (requests go to the handle's handler_ref).
 * When an accepted connection closes and its listener has a close hook
 * (close_refs), the hook runs as a detached task with the connection's
 * handle (ctx.closed is true; ctx.id, ctx.peer still readable); not
 * while the host is stopping. */
extern const struct conn_handler host_server_handler;

/* Registry field of a host's Lua state: function(ctx, cmd) run for every
 * response that matches no outstanding call (net.on_response). */
#define HOST_RESPONSE_HOOK "rmq.host.response_hook"
extern const struct conn_handler host_client_handler;

#endif
