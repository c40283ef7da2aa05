/*
 * l_proc: child processes for scripts, specs and benchmarks (the rmq.proc
 * module).  Specs start real rmq-server processes; they need the PID to
 * end exactly what they started, and the exit status to check a clean
 * shutdown.
 *
 *   proc.spawn{file=, args={...}, stdout=path|nil, stderr=path|nil,
 *              env={"K=V", ...}|nil, cwd=|nil} -> p | nil, err
 *   p.pid
 *   p:kill([signum])             default SIGTERM; true | nil, err
 *   p:wait([timeout_ms]) -> exit_status, term_signal | nil, "timeout"
 *   p.exited, p.exit_status, p.term_signal
 *
 * stdout/stderr paths are opened for appending; nil inherits ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lua/l_err.h"
#include "runtime/host.h"
#include "tools/l_tools.h"

#define LPROC_TYPE "rmq.proc"

struct proc {
    uv_process_t handle;
    struct waiter *w;          /* a wait in progress */
    bool exited;
    bool closed;
    int64_t exit_status;
    int term_signal;
};

struct lproc {
    struct proc *p;            /* freed in the handle's close callback */
};

static void
proc_closed(uv_handle_t *h)
{
    free(h->data);
}

static void
on_exit_cb(uv_process_t *ph, int64_t status, int sig)
{
    struct proc *p = ph->data;
    p->exited = true;
    p->exit_status = status;
    p->term_signal = sig;
    if (p->closed) {
        uv_close((uv_handle_t *)ph, proc_closed);
        return;
    }
    if (p->w != NULL) {
        struct waiter *w = p->w;
        p->w = NULL;
        host_wake(w);
    }
}

static int
open_out(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static int
lproc_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct host *h = host_of(L);
    lua_getfield(L, 1, "file");
    const char *file = luaL_checkstring(L, -1);
    lua_getfield(L, 1, "args");
    int nargs = lua_istable(L, -1) ? (int)luaL_len(L, -1) : 0;
    lua_getfield(L, 1, "env");
    int nenv = lua_istable(L, -1) ? (int)luaL_len(L, -1) : 0;
    lua_getfield(L, 1, "cwd");
    const char *cwd = lua_tostring(L, -1);
    lua_getfield(L, 1, "stdout");
    const char *out = lua_tostring(L, -1);
    lua_getfield(L, 1, "stderr");
    const char *errp = lua_tostring(L, -1);
    /* argv and env arrays live in a userdata: freed by the GC even if a
     * conversion below raises. */
    char **argv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nargs + 2), 0);
    char **envp = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nenv + 1), 0);
    argv[0] = (char *)file;
    for (int i = 1; i <= nargs; i++) {
        lua_rawgeti(L, 3, i);  /* the args table */
        argv[i] = (char *)luaL_checkstring(L, -1);
        lua_pop(L, 1);  /* still referenced by the args table */
    }
    argv[nargs + 1] = NULL;
    for (int i = 1; i <= nenv; i++) {
        lua_rawgeti(L, 4, i);
        envp[i - 1] = (char *)luaL_checkstring(L, -1);
        lua_pop(L, 1);
    }
    envp[nenv] = NULL;
    uv_stdio_container_t stdio[3];
    int fds[2] = { -1, -1 };
    stdio[0].flags = UV_IGNORE;
    const char *paths[2] = { out, errp };
    for (int i = 0; i < 2; i++) {
        if (paths[i] != NULL) {
            fds[i] = open_out(paths[i]);
            if (fds[i] < 0) {
                int e = errno;
                if (fds[0] >= 0)
                    close(fds[0]);
                lua_pushnil(L);
                lua_pushfstring(L, "cannot open %s: %s", paths[i], strerror(e));
                return 2;
            }
            stdio[i + 1].flags = UV_INHERIT_FD;
            stdio[i + 1].data.fd = fds[i];
        } else {
            stdio[i + 1].flags = UV_INHERIT_FD;
            stdio[i + 1].data.fd = i + 1;
        }
    }
    struct proc *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return luaL_error(L, "out of memory");
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.file = file;
    o.args = argv;
    o.env = nenv > 0 ? envp : NULL;
    o.cwd = cwd;
    o.exit_cb = on_exit_cb;
    o.stdio_count = 3;
    o.stdio = stdio;
    p->handle.data = p;
    int rc = uv_spawn(&h->r.loop, &p->handle, &o);
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (rc != 0) {
        /* uv_spawn initialised the handle even on failure. */
        uv_close((uv_handle_t *)&p->handle, proc_closed);
        lua_pushnil(L);
        lua_pushfstring(L, "cannot start %s: %s", file, uv_strerror(rc));
        return 2;
    }
    /* A child does not keep a script's loop running by itself. */
    uv_unref((uv_handle_t *)&p->handle);
    struct lproc *lp = lua_newuserdatauv(L, sizeof(*lp), 0);
    lp->p = p;
    luaL_setmetatable(L, LPROC_TYPE);
    return 1;
}

static struct lproc *
check_proc(lua_State *L)
{
    return luaL_checkudata(L, 1, LPROC_TYPE);
}

static int
lproc_kill(lua_State *L)
{
    struct lproc *lp = check_proc(L);
    int sig = (int)luaL_optinteger(L, 2, SIGTERM);
    if (lp->p->exited)
        return lerr_pushstr(L, "exited");
    int rc = uv_process_kill(&lp->p->handle, sig);
    if (rc != 0)
        return lerr_pushstr(L, uv_strerror(rc));
    lua_pushboolean(L, 1);
    return 1;
}

struct wait_op {
    struct waiter w;
    uv_timer_t timer;
    struct proc *p;
    bool timed_out;
};

static void
wait_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void
wait_timeout(uv_timer_t *t)
{
    struct wait_op *op = t->data;
    op->timed_out = true;
    if (op->p->w == &op->w)
        op->p->w = NULL;
    host_wake(&op->w);
}

static int
wait_push(lua_State *L, struct waiter *w)
{
    struct wait_op *op = (struct wait_op *)w;
    struct proc *p = op->p;
    if (p->w == w)
        p->w = NULL;
    uv_timer_stop(&op->timer);
    uv_close((uv_handle_t *)&op->timer, wait_timer_closed);
    if (!p->exited)
        return lerr_pushstr(L, "timeout");
    lua_pushinteger(L, (lua_Integer)p->exit_status);
    lua_pushinteger(L, p->term_signal);
    return 2;
}

static void
wait_abandon(struct waiter *w)
{
    struct wait_op *op = (struct wait_op *)w;
    if (op->p->w == w)
        op->p->w = NULL;
    free(op);  /* the timer was closed with the loop */
}

static int
lproc_wait(lua_State *L)
{
    struct lproc *lp = check_proc(L);
    lua_Integer timeout = luaL_optinteger(L, 2, 10000);
    struct proc *p = lp->p;
    if (p->exited) {
        lua_pushinteger(L, (lua_Integer)p->exit_status);
        lua_pushinteger(L, p->term_signal);
        return 2;
    }
    if (p->w != NULL)
        return luaL_error(L, "another wait on this process is in progress");
    struct host *h = host_of(L);
    struct wait_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return luaL_error(L, "out of memory");
    op->w.push = wait_push;
    op->w.abandon = wait_abandon;
    op->p = p;
    op->timer.data = op;
    int rc = uv_timer_init(&h->r.loop, &op->timer);
    /* The loop's clock is from its last turn, which may be long ago (a
     * spec busy with blocking sockets): the timeout counts from now. */
    uv_update_time(&h->r.loop);
    if (rc == 0)
        rc = uv_timer_start(&op->timer, wait_timeout, (uint64_t)timeout, 0);
    if (rc != 0) {
        free(op);
        return luaL_error(L, "timer: %s", uv_strerror(rc));
    }
    p->w = &op->w;
    return host_wait(L, &op->w);
}

static int
lproc_index(lua_State *L)
{
    struct lproc *lp = check_proc(L);
    const char *k = luaL_checkstring(L, 2);
    struct proc *p = lp->p;
    if (strcmp(k, "pid") == 0)
        lua_pushinteger(L, p->handle.pid);
    else if (strcmp(k, "exited") == 0)
        lua_pushboolean(L, p->exited);
    else if (strcmp(k, "exit_status") == 0 && p->exited)
        lua_pushinteger(L, (lua_Integer)p->exit_status);
    else if (strcmp(k, "term_signal") == 0 && p->exited)
        lua_pushinteger(L, p->term_signal);
    else if (strcmp(k, "kill") == 0)
        lua_pushcfunction(L, lproc_kill);
    else if (strcmp(k, "wait") == 0)
        lua_pushcfunction(L, lproc_wait);
    else
        lua_pushnil(L);
    return 1;
}

static int
lproc_gc(lua_State *L)
{
    struct lproc *lp = check_proc(L);
    struct proc *p = lp->p;
    if (p == NULL)
        return 0;
    lp->p = NULL;
    /* A still-running child keeps its handle until it exits, so its exit
     * is reaped; an exited one is closed now. */
    p->closed = true;
    if (p->exited && !uv_is_closing((uv_handle_t *)&p->handle))
        uv_close((uv_handle_t *)&p->handle, proc_closed);
    return 0;
}

int
luaopen_rmq_proc(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "spawn", lproc_spawn },
        { NULL, NULL },
    };
    if (luaL_newmetatable(L, LPROC_TYPE)) {
        lua_pushcfunction(L, lproc_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lproc_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    (void)host_of(L);
    luaL_newlib(L, fns);
    return 1;
}
