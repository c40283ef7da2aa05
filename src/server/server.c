/*
 * server: see server.h.  What the Lua side decides (the plan, each
 * worker's dispatch functions, the roles' hooks) comes through
 * lua/l_roles.h; this file is the process and its threads.
 *
 * Threads.  The main thread loads the conf, makes one listening socket
 * per listener (a port in use fails here, before anything else starts:
 * see listen.h for why there is no SO_REUSEPORT), starts the workers and
 * waits until each has its Lua state ready.  Then it runs the roles' main
 * hooks (timers, registration) as a task, starts accepting and prints the
 * READY line.  Each worker thread owns a host: one loop, one Lua state.
 *
 * Connections.  The main thread's loop accepts on every listener and
 * hands each new socket to the next worker in turn, through that
 * worker's mailbox; the worker makes it a conn (conn_adopt) and serves it
 * for its whole life.  Round-robin spreads a burst (the benchmark's 128
 * connects at once) evenly, where loops racing for one socket let
 * whichever wakes first take the whole burst.  The main thread rather
 * than worker 0 accepts because it is nearly idle (main hooks, timers)
 * while worker 0 serves its share of the requests, so an accept never
 * waits behind a request; and because the thread that closes the
 * acceptors at shutdown is the one that accepts, no socket is handed
 * to a worker after it was told to stop.
 *
 * Shutdown.  SIGINT/SIGTERM: the main thread closes the listening
 * sockets first, then tells every worker to stop; a worker keeps
 * serving the requests already in flight for at most
 * shutdownAwaitMillis, then closes its connections and ends.  Meanwhile
 * the main thread runs the roles' shutdown hooks.  The process exits 0
 * once both are done.
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <pthread.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "core/version.h"
#include "broker/config_table.h"
#include "grpc/service.h"
#include "grpc/txdata.h"
#include "lua/l_modules.h"
#include "lua/l_roles.h"
#include "net/listen.h"
#include "net/tls.h"
#include "route/route.h"
#include "route/route_metrics.h"
#include "runtime/host.h"
#include "runtime/lconn.h"
#include "runtime/lua_source.h"
#include "server/metrics_http.h"
#include "server/sd_notify.h"

struct server;

/* A Lua state's heap as the reclaim tick sees it (lua_watch_tick). */
struct lua_watch {
    int slot;                  /* membudget_lua_slot; -1: not reported */
    int64_t settled_kb;        /* the heap after the last finished cycle */
    int64_t peak_kb;           /* the most since then */
    bool again;                /* that cycle freed much: one more */
    bool cycling;              /* a cycle the watch started is not finished */
    int64_t last_kb;           /* the heap at the previous tick */
    int quiet;                 /* ticks the heap moved less than 1 MiB */
    bool settled_quiet;        /* a cycle finished since the heap last grew */
};

/* rmq_worker_busy_max_seconds covers the last this many lag ticks (10 s):
 * a scrape, every 10-15 s as Prometheus is usually set, sees a stretch
 * however soon after its end the tick came (one second's was missed by
 * any scrape not within that second). */
#define BUSY_WINDOW_TICKS 10

struct worker {
    struct server *s;
    int id;
    uv_thread_t thread;
    uv_async_t stop_async;     /* on the worker's loop */
    uv_timer_t drain_timer;
    uv_timer_t lag_timer;      /* metrics on: measures the loop's delay */
    uv_timer_t reclaim_timer;  /* gives memory back after a flood (host_reclaim) */
    uint64_t lag_due_ns;       /* when lag_timer should fire next */
    int64_t busy_ticks[BUSY_WINDOW_TICKS];  /* each tick's longest stretch unread */
    unsigned busy_at;          /* the next slot of busy_ticks */
    struct lua_watch lw;
    struct host *h;
    struct grpc_server *grpc;  /* grpcServerPort set: its calls here */
    uint64_t drain_deadline;
    bool stop_ready;           /* stop_async initialised */
    bool draining;             /* told to stop: sockets still handed to it
                                * are closed, not served */
};

struct server {
    struct plan plan;
    const char *conf_path;
    char **overrides;
    int noverrides;
    struct worker *workers;
    struct host *main;
    uv_timer_t main_reclaim;   /* the main state's lua_watch_tick */
    struct lua_watch main_lw;
    struct metrics *metrics;   /* NULL: metricsExporterType DISABLE */
    struct metrics_http *http;
    struct tls_ctx *tls;       /* the remoting ports' TLS; NULL: none */
    struct txdata *tx;         /* role proxy: the transactions it may end,
                                * one table for every worker (txdata.h) */
    int listen_fds[HOST_MAX_LISTENERS];  /* until an acceptor owns them; -1 */
    char bound_host[HOST_MAX_LISTENERS][64];  /* >= INET6_ADDRSTRLEN, plan.bind */  /* for READY */
    struct acceptor acceptors[HOST_MAX_LISTENERS];  /* on the main loop */
    unsigned next_worker;      /* round-robin of accepted sockets */
    uv_async_t events;         /* workers -> main: ready, failed, exited */
    uv_signal_t sigint, sigterm;
    uv_mutex_t lock;
    int ready, failed, exited; /* guarded by lock */
    int started;               /* worker threads created */
    bool stopping;
    bool stop_hook_done;
};

/* {{{ Workers */

static void
post_event(struct server *s, int kind)
{
    uv_mutex_lock(&s->lock);
    if (kind == 0)
        s->ready++;
    else if (kind == 1)
        s->failed++;
    else
        s->exited++;
    uv_mutex_unlock(&s->lock);
    uv_async_send(&s->events);
}

/* A socket accepted by the main thread, on its way to a worker. */
struct accepted {
    struct mail m;
    struct worker *w;
    int fd;
    int listener;              /* index in plan.listeners */
};

/* On the worker's thread (its mailbox).  Also runs from host_free's
 * mailbox drain, when the host is stopping: then the socket is closed. */
static void
on_accepted(struct mail *m, void *owner)
{
    struct accepted *a = (struct accepted *)m;
    struct host *h = owner;
    struct worker *w = a->w;
    int fd = a->fd, idx = a->listener;
    free(a);
    if (w->draining || h->stopping) {
        close(fd);
        return;
    }
    if (w->s->plan.listeners[idx].grpc) {
        grpc_server_accept(w->grpc, fd);
        return;
    }
    struct conn *c = conn_adopt(&h->r, fd, &host_server_handler, h, idx);
    if (c == NULL) {
        log_warn("cannot accept a connection: %s", err_msg());
        return;
    }
    lconn_wrap(h->L, c, LUA_NOREF)->role = w->s->plan.roles[idx];
    log_debug("connection from %s on %s", c->peer, w->s->plan.listeners[idx].name);
}

/* On the main thread: acceptor `acc` (of server acc->data) took fd. */
static void
hand_off(struct acceptor *acc, int fd)
{
    struct server *s = acc->data;
    int idx = (int)(acc - s->acceptors);
    struct worker *w = &s->workers[s->next_worker++ % (unsigned)s->plan.workers];
    struct accepted *a = malloc(sizeof(*a));
    if (a == NULL) {
        log_warn("out of memory for a new connection on %s; closed", acc->name);
        close(fd);
        return;
    }
    a->m.fn = on_accepted;
    a->w = w;
    a->fd = fd;
    a->listener = idx;
    /* Every worker's host lives until it was told to stop, and stop comes
     * only after the acceptors closed (begin_shutdown): the post reaches
     * a live mailbox.  A refused post is still handled. */
    if (mailbox_post(&w->h->post.mb, &a->m) != 0) {
        close(fd);
        free(a);
    }
}

static int
start_accepting(struct server *s)
{
    struct plan *p = &s->plan;
    long limit = 0;
    int cap = listen_fd_cap(p->fd_reserve, &limit);
    if (cap > 0)
        log_info("descriptors: RLIMIT_NOFILE %ld; accepted connections use those below %d, "
                 "the rest are kept for persistence and the store (serverReservedDescriptors)",
                 limit, cap);
    for (int l = 0; l < p->nlisteners; l++) {
        char name[128];  /* listener name (32) + bindAddress (64) + port */
        snprintf(name, sizeof(name), "%s %s:%d", p->listeners[l].name, p->bind,
                 p->listeners[l].port);
        int fd = s->listen_fds[l];
        s->listen_fds[l] = -1;  /* the acceptor owns it, even on failure */
        if (acceptor_start(&s->acceptors[l], &s->main->r.loop, fd, name,
                           hand_off, s) != 0) {
            log_error("%s", err_msg());
            return -1;
        }
        acceptor_set_fd_cap(&s->acceptors[l], cap);
    }
    return 0;
}

static void
close_acceptors(struct server *s)
{
    for (int l = 0; l < HOST_MAX_LISTENERS; l++)
        acceptor_close(&s->acceptors[l]);
}

static void
on_drain_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    struct host *h = w->h;
    bool in_time = uv_now(&h->r.loop) < w->drain_deadline;
    if (h->requests_live > 0 && in_time)
        return;
    /* Replies just produced may still sit in output buffers: write them
     * before the connections close. */
    conn_flush_dirty(&h->r);
    if (in_time && reactor_output_pending(&h->r))
        return;
    if (h->requests_live > 0)
        log_warn("%zu requests still in flight after shutdownAwaitMillis; "
                 "closing their connections", h->requests_live);
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    uv_close((uv_handle_t *)&w->stop_async, NULL);
    if (h->metrics != NULL)
        uv_close((uv_handle_t *)&w->lag_timer, NULL);
    uv_close((uv_handle_t *)&w->reclaim_timer, NULL);
    h->stopping = true;
    reactor_close_conns(&h->r, "server shutting down");
}

static void
on_stop(uv_async_t *a)
{
    struct worker *w = a->data;
    if (uv_is_active((uv_handle_t *)&w->drain_timer))
        return;
    w->draining = true;
    w->h->draining = true;   /* held pulls answer at their next re-check */
    /* gRPC clients are told first (GOAWAY), while their calls finish. */
    grpc_server_goaway(w->grpc);
    w->drain_deadline = uv_now(&w->h->r.loop) + w->s->plan.shutdown_ms;
    uv_timer_start(&w->drain_timer, on_drain_tick, 0, 10);
}

/* The loop lag probe's period: a second, as a scrape interval is
 * seconds; the cost is one timer callback a second per worker. */
#define LOOP_LAG_PERIOD_MS 1000

static void
on_lag_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = uv_hrtime();
    metrics_loop_lag(w->h->metrics, (int64_t)(now - w->lag_due_ns));
    w->busy_ticks[w->busy_at++ % BUSY_WINDOW_TICKS] = reactor_take_busy_max(&w->h->r);
    int64_t busy = 0;
    for (unsigned i = 0; i < BUSY_WINDOW_TICKS; i++)
        busy = w->busy_ticks[i] > busy ? w->busy_ticks[i] : busy;
    metrics_loop_busy(w->h->metrics, busy);
    w->lag_due_ns = now + LOOP_LAG_PERIOD_MS * 1000000;
}

/* Freed memory goes back to the system within about a second of a
 * flood's end; the tick costs a compare when nothing was freed. */
#define RECLAIM_PERIOD_MS 1000

/* Garbage left in a Lua state stays there until the state allocates
 * again: the incremental collector runs only as it allocates.  A worker
 * whose requests are now all answered in C (sends, pulls) allocates
 * nothing in Lua, so what 26,000 UPDATE_AND_CREATE_TOPIC requests left
 * (32 MB in a worker, 15 MB in the main state) stayed for ever
 * (docs/memory.md has the figures).  Each tick, while the heap is an
 * eighth and 1 MiB above what the last finished cycle left, the
 * collector does the work of a quarter of the heap's allocation (at
 * least 4 MiB: a cycle ends within a few ticks; at 4 MiB a 45 MB heap
 * took longer than the attacks' 15 s); a cycle that freed
 * more than 1 MiB is followed by one more (what the first could not
 * free because it was made while it ran), then the allocator is asked
 * to give the pages back.  The work per tick is bounded, so a worker's
 * other requests wait at most one step. */
#define LUA_WATCH_STEP_KB 4096   /* the least work per step, KiB */

/* A state whose heap stopped moving (less than 1 MiB a tick for this
 * many ticks) after it grew gets one cycle, in the same steps, even
 * below the eighth: Lua lets a heap reach twice its live size before its
 * next cycle (the pause), so the main state that had 16 MB live after
 * 26,000 topic creations kept 30 MB 75 s after them (docs/memory.md). */
#define LUA_WATCH_QUIET_TICKS 3

static void
lua_watch_tick(lua_State *L, struct lua_watch *lw, struct membudget *b)
{
    int64_t kb = lua_gc(L, LUA_GCCOUNT);
    if (kb > lw->last_kb + 1024)
        lw->settled_quiet = false;   /* it grew: settle again once quiet */
    lw->quiet = kb > lw->last_kb + 1024 || kb + 1024 < lw->last_kb ? 0 : lw->quiet + 1;
    lw->last_kb = kb;
    bool settle = !lw->settled_quiet && lw->quiet >= LUA_WATCH_QUIET_TICKS;
    if (kb > lw->peak_kb)
        lw->peak_kb = kb;
    if (lw->settled_kb == 0 || (kb < lw->settled_kb && !lw->again && !lw->cycling && !settle)) {
        lw->settled_kb = lw->peak_kb = kb;   /* the state's own cycles keep up */
    } else if (!(lw->again || lw->cycling || settle || kb > lw->settled_kb + lw->settled_kb / 8 + 1024)) {
        /* nothing to do */
    } else if (lua_gc(L, LUA_GCSTEP, (int)(kb / 4 > LUA_WATCH_STEP_KB ? kb / 4 : LUA_WATCH_STEP_KB)) == 0) {
        lw->cycling = true;   /* go on next tick, whatever the heap does meanwhile */
    } else {
        lw->cycling = false;
        lw->settled_quiet = true;
        int64_t after = lua_gc(L, LUA_GCCOUNT);
        bool freed = after + 1024 < lw->peak_kb;
        if (freed && !lw->again) {
            lw->again = true;
        } else {
            lw->again = false;
            if (b != NULL && freed)
                (void)membudget_trim(b, 0, RECLAIM_PERIOD_MS);
            lw->peak_kb = after;
        }
        lw->settled_kb = kb = after;
    }
    if (b != NULL)
        membudget_lua_report(b, lw->slot, kb * 1024 + lua_gc(L, LUA_GCCOUNTB));
}

static void
lua_watch_init(lua_State *L, struct lua_watch *lw, struct membudget *b, const char *name)
{
    lw->settled_kb = lw->peak_kb = lw->last_kb = 0;
    lw->again = lw->cycling = lw->settled_quiet = false;
    lw->quiet = 0;
    lw->slot = b != NULL ? membudget_lua_slot(b, name) : -1;
    lua_watch_tick(L, lw, b);   /* the figure from the start */
}

static void
on_reclaim_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    (void)host_reclaim(w->h);
    lua_watch_tick(w->h->L, &w->lw, w->h->r.budget);
}

/* The encoded GET_ALL_TOPIC_CONFIG / GET_ALL_SUBSCRIPTIONGROUP_CONFIG
 * bodies are kept while asked for; this long unasked, they go (4 MB at
 * 26,000 topics; docs/memory.md).  Longer than a console's sample
 * period (consoleSampleSeconds, 5 s by default), shorter than the 15 s
 * an attack's memory has to come back in. */
#define CONFIG_ENCODED_IDLE_MS 10000

static void
on_main_reclaim_tick(uv_timer_t *t)
{
    struct server *s = t->data;
    lua_watch_tick(s->main->L, &s->main_lw, membudget_shared());
    bool dropped = config_table_encoded_trim(config_table_topics(), CONFIG_ENCODED_IDLE_MS);
    if (config_table_encoded_trim(config_table_groups(), CONFIG_ENCODED_IDLE_MS) || dropped)
        (void)membudget_trim(membudget_shared(), 0, 0);
}

static int
worker_setup(struct worker *w)
{
    struct server *s = w->s;
    struct plan *p = &s->plan;
    w->h = host_new(lmodules_newstate(), true, p->max_frame, p->idle_ms, w->id);
    if (w->h == NULL) {
        log_error("worker %d: %s", w->id, err_msg());
        return -1;
    }
    struct host *h = w->h;
    lua_State *L = h->L;
    h->r.budget = membudget_shared();
    if (reactor_set_limits(&h->r, &p->limits) != 0 ||
        reactor_set_tls_server(&h->r, s->tls, p->tls.mode, p->tls.handshake_ms) != 0) {
        log_error("worker %d: %s", w->id, err_msg());
        return -1;
    }
    host_set_lua_path(L);
    h->metrics = metrics_shard(s->metrics, w->id);
    if (roles_worker(h, s->conf_path, s->overrides, s->noverrides, w->id, p) != 0)
        return -1;
    if (p->grpc_on) {
        struct grpc_conf gc = p->grpc;
        gc.port = p->listeners[gc.listener].port;  /* bound: port 0 resolved */
        gc.tx_table = s->tx;
        w->grpc = grpc_server_new(h, &gc);
        if (w->grpc == NULL) {
            log_error("worker %d: %s", w->id, err_msg());
            return -1;
        }
    }
    uv_loop_t *loop = &h->r.loop;
    if (uv_async_init(loop, &w->stop_async, on_stop) != 0 ||
        uv_timer_init(loop, &w->drain_timer) != 0)
        return -1;
    w->stop_async.data = w;
    w->drain_timer.data = w;
    w->stop_ready = true;
    if (uv_timer_init(loop, &w->reclaim_timer) != 0)
        return -1;
    w->reclaim_timer.data = w;
    char name[16];
    (void)snprintf(name, sizeof(name), "worker%d", w->id);
    lua_watch_init(L, &w->lw, h->r.budget, name);
    uv_timer_start(&w->reclaim_timer, on_reclaim_tick, RECLAIM_PERIOD_MS, RECLAIM_PERIOD_MS);
    uv_unref((uv_handle_t *)&w->reclaim_timer);
    if (h->metrics != NULL) {
        /* A loop busy with one long callback runs its timers late: how
         * late is rmq_worker_loop_lag_microseconds. */
        if (uv_timer_init(loop, &w->lag_timer) != 0)
            return -1;
        w->lag_timer.data = w;
        w->lag_due_ns = uv_hrtime() + LOOP_LAG_PERIOD_MS * 1000000;
        uv_timer_start(&w->lag_timer, on_lag_tick, LOOP_LAG_PERIOD_MS, LOOP_LAG_PERIOD_MS);
        uv_unref((uv_handle_t *)&w->lag_timer);
    }
    return 0;
}

static void
worker_main(void *arg)
{
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "w%d", w->id);
    log_set_thread_name(name);
    char os_name[16];
    snprintf(os_name, sizeof(os_name), "rmq-w%d", w->id);
    pthread_setname_np(pthread_self(), os_name);  /* top -H, perf, ceiling.sh --threads */
    if (worker_setup(w) != 0) {
        post_event(w->s, 1);
        if (w->h != NULL) {
            host_free(w->h);
            w->h = NULL;
        }
        grpc_server_free(w->grpc);
        w->grpc = NULL;
        return;
    }
    post_event(w->s, 0);
    reactor_run(&w->h->r, UV_RUN_DEFAULT);
    host_free(w->h);
    w->h = NULL;
    grpc_server_free(w->grpc);
    w->grpc = NULL;
    post_event(w->s, 2);
}

/* The address a listening socket is bound to, as the kernel has it (the
 * READY line must say 0.0.0.0 when every interface is served). */
static void
bound_host(int fd, const char *fallback, char *out, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    const void *a = NULL;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            a = &((struct sockaddr_in *)&ss)->sin_addr;
        else if (ss.ss_family == AF_INET6)
            a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    }
    if (a == NULL || inet_ntop(ss.ss_family, a, out, (socklen_t)n) == NULL)
        snprintf(out, n, "%s", fallback);
}

/* One socket per listener, listening from here on: connections made
 * before READY wait in the backlog until the acceptors start. */
static int
open_sockets(struct server *s)
{
    struct plan *p = &s->plan;
    for (int l = 0; l < p->nlisteners; l++) {
        int bound = 0;
        int fd = listen_socket(p->bind, p->listeners[l].port, 1024, &bound);
        if (fd < 0) {
            log_error("%s", err_msg());
            /* With a log file the line above is not on the terminal. */
            if (p->log_file[0] != '\0')
                fprintf(stderr, "rmq-server: %s\n", err_msg());
            return -1;
        }
        s->listen_fds[l] = fd;
        p->listeners[l].port = bound;  /* port 0 resolved */
        bound_host(fd, p->bind, s->bound_host[l], sizeof(s->bound_host[l]));
    }
    return 0;
}

static void
close_sockets(struct server *s)
{
    for (int l = 0; l < HOST_MAX_LISTENERS; l++) {
        if (s->listen_fds[l] >= 0)
            close(s->listen_fds[l]);
        s->listen_fds[l] = -1;
    }
}

/* }}} */

/* {{{ Main thread */

/* The registry (one shard per worker) and its endpoint, before the
 * workers start; a port in use fails the start as a listener's does. */
static int
start_metrics(struct server *s)
{
    struct metrics_plan *mp = &s->plan.metrics;
    if (!mp->on)
        return 0;
    char addr[96];
    if (mp->node_id[0] == '\0') {
        snprintf(addr, sizeof(addr), "%s:%d", s->plan.bind, s->plan.listeners[0].port);
        snprintf(mp->node_id, sizeof(mp->node_id), "%s", addr);
    }
    struct metrics_ident id = {
        .cluster = mp->cluster, .node_type = mp->node_type, .node_id = mp->node_id,
    };
    s->metrics = metrics_new(s->plan.workers, mp->max_label_sets, &id);
    if (s->metrics == NULL) {
        log_error("%s", err_msg());
        return -1;
    }
    struct metrics_http_opts o = {
        .host = mp->host, .port = mp->port, .max_connections = mp->max_connections,
        .timeout_s = mp->timeout_s, .max_header = mp->max_header,
        .max_body = mp->max_body, .header_ms = mp->header_ms,
        .max_per_address = mp->max_per_address, .allowed = mp->allowed,
    };
    /* The console's settings (JSON, or nil for a NameServer), from the
     * main state now that the ports are bound. */
    lua_State *L = s->main->L;
    int top = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.server");
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
        lua_getfield(L, -1, "console_settings");
        if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1))
            o.console = lua_tostring(L, -1);   /* copied by metrics_http_start */
        else if (!lua_isnil(L, -1))
            log_error("console settings: %s", lua_tostring(L, -1));
    }
    int bound = 0;
    s->http = metrics_http_start(s->metrics, &o, &bound);
    lua_settop(L, top);
    if (s->http == NULL) {
        log_error("%s", err_msg());
        if (s->plan.log_file[0] != '\0')
            fprintf(stderr, "rmq-server: %s\n", err_msg());
        return -1;
    }
    mp->port = bound;
    s->main->registry = s->metrics;
    /* A NameServer's figures (a standalone's too) on the same endpoint. */
    for (int l = 0; l < s->plan.nlisteners; l++)
        if (strcmp(s->plan.listeners[l].role, "namesrv") == 0)
            route_metrics_watch(s->metrics, route_shared());
    return 0;
}

static void
stop_metrics(struct server *s)
{
    metrics_http_stop(s->http);
    s->http = NULL;
    s->main->registry = NULL;
    metrics_free(s->metrics);
    s->metrics = NULL;
}

static void
maybe_finish(struct server *s)
{
    uv_mutex_lock(&s->lock);
    int gone = s->exited + s->failed;
    uv_mutex_unlock(&s->lock);
    if (s->stopping && s->stop_hook_done && gone == s->started)
        uv_stop(&s->main->r.loop);
}

static void
on_events(uv_async_t *a)
{
    maybe_finish(a->data);
}

static void
stop_hook_done(void *arg)
{
    struct server *s = arg;
    s->stop_hook_done = true;
    maybe_finish(s);
}

static void
begin_shutdown(struct server *s, const char *why)
{
    if (s->stopping)
        return;
    s->stopping = true;
    log_info("%s: shutting down", why);
    if (sd_notify_send("STOPPING=1") < 0)
        log_warn("%s", err_msg());
    /* No new connections first; then the workers finish what they have. */
    close_acceptors(s);
    for (int i = 0; i < s->plan.workers; i++)
        uv_async_send(&s->workers[i].stop_async);
    /* The roles' shutdown hooks run as a task (they may wait on the
     * network, e.g. to unregister from the NameServers). */
    roles_main_stop(s->main, stop_hook_done, s);
}

static void
on_signal(uv_signal_t *sig, int signum)
{
    struct server *s = sig->data;
    begin_shutdown(s, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: rmq-server [-t] CONF [--KEY=VALUE ...]\n"
            "       rmq-server --diff|--apply CONF [--KEY=VALUE ...]\n"
            "       rmq-server --version | --help\n"
            "\n"
            "  CONF           a Lua file returning a table of RocketMQ-named keys\n"
            "                 (conf/namesrv.lua, conf/broker-a.lua, conf/standalone.lua)\n"
            "  --KEY=VALUE    overrides KEY from CONF (e.g. --listenPort=0)\n"
            "  -t             check CONF and exit (0 = valid)\n"
            "  --diff CONF    show what differs between CONF and the server running it\n"
            "                 (over its live console, conf `console`)\n"
            "  --apply CONF   apply what can change live, list what needs a restart\n"
            "\n"
            "Once it accepts connections it prints one line to stdout:\n"
            "  READY role=ROLE listen=HOST:PORT [NAME=HOST:PORT ...]\n");
}

static void
print_ready(struct server *s)
{
    struct plan *p = &s->plan;
    /* The addresses bound, 0.0.0.0 included: a READY line saying
     * 127.0.0.1 for a port open to every interface hid the exposure. */
    printf("READY role=%s", p->role);
    for (int i = 0; i < p->nlisteners; i++)
        printf(" %s=%s:%d", p->listeners[i].name, s->bound_host[i], p->listeners[i].port);
    if (s->http != NULL)
        printf(" metrics=%s:%d", p->metrics.host, p->metrics.port);
    char extra[256];
    roles_ready_fields(s->main->L, extra, sizeof(extra));
    printf("%s pid=%d\n", extra, (int)getpid());
    fflush(stdout);
    /* systemd (Type=notify): ready at the moment the READY line is out. */
    char state[128];
    snprintf(state, sizeof(state), "READY=1\nMAINPID=%d\nSTATUS=serving: role %s",
             (int)getpid(), p->role);
    if (sd_notify_send(state) < 0)
        log_warn("%s", err_msg());
}

/* The remoting ports' TLS context, shared by every worker. */
static struct tls_ctx *
make_tls(const struct tls_plan *t)
{
    struct tls_server_opts o = {
        .cert_path = t->cert,
        .key_path = t->key[0] ? t->key : NULL,
        .key_password = t->password[0] ? t->password : NULL,
        .trust_cert_path = t->trust[0] ? t->trust : NULL,
        .need_client_auth = (enum tls_client_auth)t->need_client_auth,
        .auth_client = t->auth_client,
    };
    return tls_ctx_server(&o);
}

static int
run(struct server *s)
{
    struct plan *p = &s->plan;
    struct host *m = s->main;
    uv_loop_t *loop = &m->r.loop;
    for (int l = 0; l < HOST_MAX_LISTENERS; l++)
        s->listen_fds[l] = -1;
    if (uv_mutex_init(&s->lock) != 0 ||
        uv_async_init(loop, &s->events, on_events) != 0 ||
        uv_signal_init(loop, &s->sigint) != 0 ||
        uv_signal_init(loop, &s->sigterm) != 0)
        return 1;
    s->events.data = s;
    s->sigint.data = s->sigterm.data = s;
    if (uv_signal_start(&s->sigint, on_signal, SIGINT) != 0 ||
        uv_signal_start(&s->sigterm, on_signal, SIGTERM) != 0)
        return 1;
    s->workers = calloc((size_t)p->workers, sizeof(*s->workers));
    if (s->workers == NULL)
        return 1;
    for (int i = 0; i < p->workers; i++) {
        s->workers[i].s = s;
        s->workers[i].id = i;
    }
    if (p->grpc_on && p->grpc.cluster && (s->tx = txdata_new(&p->grpc.tx)) == NULL) {
        log_error("%s", err_msg());
        free(s->workers);
        s->workers = NULL;
        return 1;
    }
    /* The plan's ports are known now: tell the Lua side (the broker
     * registers the address it actually listens on; roles' main_init
     * hooks run there and may refuse to start). */
    lua_State *L = m->L;
    int rc = open_sockets(s);
    if (rc == 0)
        rc = roles_bound(L, p);
    if (rc == 0)
        rc = start_metrics(s);
    if (rc != 0) {
        stop_metrics(s);
        close_sockets(s);
        free(s->workers);
        s->workers = NULL;
        txdata_free(s->tx);
        s->tx = NULL;
        return 1;
    }
    int started = 0;
    s->started = 0;
    for (int i = 0; i < p->workers; i++) {
        if (uv_thread_create(&s->workers[i].thread, worker_main, &s->workers[i]) != 0) {
            log_error("cannot start worker thread %d", i);
            break;
        }
        started++;
        s->started = started;
    }
    /* Wait until every worker is ready or one failed. */
    for (;;) {
        uv_mutex_lock(&s->lock);
        int ready = s->ready, failed = s->failed;
        uv_mutex_unlock(&s->lock);
        if (failed > 0 || started < p->workers || ready == p->workers)
            break;
        reactor_run(&m->r, UV_RUN_ONCE);
    }
    uv_mutex_lock(&s->lock);
    bool ok = s->failed == 0 && started == p->workers;
    uv_mutex_unlock(&s->lock);
    int code = 0;
    if (!ok) {
        log_error("start-up failed");
        code = 1;
        s->stopping = true;
        s->stop_hook_done = true;
        for (int i = 0; i < started; i++)
            if (s->workers[i].stop_ready)
                uv_async_send(&s->workers[i].stop_async);
    } else {
        /* Accept before the main hooks: they may talk to this very
         * process (a standalone broker registers with its own NameServer
         * before READY), and connections wait in the workers only for as
         * long as the hooks run. */
        int n = start_accepting(s) == 0 && roles_main_start(m) == 0 ? 1 : 0;
        if (n == 0) {
            code = 1;
            close_acceptors(s);
            s->stopping = true;
            s->stop_hook_done = true;
            for (int i = 0; i < p->workers; i++)
                uv_async_send(&s->workers[i].stop_async);
        } else if (!s->stopping) {
            print_ready(s);
            /* Ready: a log file that takes nothing no longer stops this
             * thread's admin requests, handlers and console (core/log.h);
             * what failed before here was written at once. */
            log_route_self();
            log_info("rmq-server %s ready: role %s, %d workers", rmq_version,
                     p->role, p->workers);
            static const char *const modes[] = { "disabled", "permissive", "enforcing" };
            log_info("remoting ports: TLS %s", !p->tls.on ? "off (no tls.server.certPath)"
                                                          : modes[p->tls.mode]);
        }
    }
    maybe_finish(s);
    bool main_reclaim = uv_timer_init(loop, &s->main_reclaim) == 0;
    if (main_reclaim) {
        s->main_reclaim.data = s;
        lua_watch_init(s->main->L, &s->main_lw, membudget_shared(), "main");
        uv_timer_start(&s->main_reclaim, on_main_reclaim_tick, RECLAIM_PERIOD_MS, RECLAIM_PERIOD_MS);
        uv_unref((uv_handle_t *)&s->main_reclaim);
    }
    uv_run(loop, UV_RUN_DEFAULT);
    if (main_reclaim)
        uv_close((uv_handle_t *)&s->main_reclaim, NULL);
    for (int i = 0; i < started; i++)
        uv_thread_join(&s->workers[i].thread);
    /* The workers are gone: nothing can change the roles' state any more,
     * so what they write last (consumer offsets, the broker's tables)
     * includes every request that was answered during the drain. */
    if (code == 0)
        (void)roles_after_workers(L);
    close_acceptors(s);  /* already, unless start-up failed */
    close_sockets(s);
    stop_metrics(s);     /* the workers, its writers, are gone */
    uv_close((uv_handle_t *)&s->events, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    free(s->workers);
    txdata_free(s->tx);   /* after the workers: their servers used it */
    s->tx = NULL;
    uv_mutex_destroy(&s->lock);
    if (code == 0)
        log_info("stopped");
    return code;
}

/* --diff / --apply: rmq.console_live.diff talks to the running server;
 * nothing is started here. */
static int
live_diff(lua_State *L, const char *mode, struct server *s)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.console_live.diff");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        fprintf(stderr, "rmq-server: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    lua_getfield(L, -1, "main");
    lua_pushstring(L, mode);
    lua_pushstring(L, s->conf_path);
    lua_createtable(L, s->noverrides, 0);
    for (int i = 0; i < s->noverrides; i++) {
        lua_pushstring(L, s->overrides[i]);
        lua_rawseti(L, -2, i + 1);
    }
    int code = 1;
    if (lua_pcall(L, 3, 1, 0) != LUA_OK)
        fprintf(stderr, "rmq-server: %s\n", lua_tostring(L, -1));
    else
        code = (int)luaL_optinteger(L, -1, 1);
    lua_pop(L, 2);
    return code;
}

int
server_main(int argc, char **argv)
{
    struct server s;
    memset(&s, 0, sizeof(s));
    bool check = false;
    const char *live_mode = NULL;  /* "diff" | "apply": conf as code */
    char **overrides = calloc((size_t)argc + 1, sizeof(char *));
    if (overrides == NULL)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--version") == 0) {
            printf("rmq-server %s (git %s; RocketMQ 4.x remoting protocol)\n", rmq_version,
                   rmq_git_rev);
            free(overrides);
            return 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            free(overrides);
            return 0;
        } else if (strcmp(a, "-t") == 0) {
            check = true;
        } else if (strcmp(a, "--diff") == 0 || strcmp(a, "--apply") == 0) {
            live_mode = a + 2;
        } else if (strncmp(a, "--", 2) == 0) {
            overrides[s.noverrides++] = argv[i] + 2;
        } else if (s.conf_path == NULL) {
            s.conf_path = a;
        } else {
            fprintf(stderr, "rmq-server: unexpected argument '%s'\n", a);
            usage(stderr);
            free(overrides);
            return 1;
        }
    }
    s.overrides = overrides;
    if (s.conf_path == NULL) {
        usage(stderr);
        free(overrides);
        return 1;
    }
    if (lua_source_check_override() != 0) {
        fprintf(stderr, "rmq-server: %s\n", err_msg());
        free(overrides);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    s.main = host_new(lmodules_newstate(), true, RMQ_DEFAULT_MAX_FRAME, 0, -1);
    if (s.main == NULL) {
        fprintf(stderr, "rmq-server: %s\n", err_msg());
        free(overrides);
        return 1;
    }
    lua_State *L = s.main->L;
    host_set_lua_path(L);
    int code = 1;
    if (live_mode != NULL) {
        code = live_diff(L, live_mode, &s);
        goto out;
    }
    if (roles_prepare(L, s.conf_path, s.overrides, s.noverrides, &s.plan) != 0)
        goto out;
    /* The process's memory budget (core/membudget.h), before any
     * worker accepts. */
    struct membudget *budget = membudget_shared();
    if (budget == NULL) {
        fprintf(stderr, "rmq-server: out of memory\n");
        goto out;
    }
    membudget_set_limits(budget, &s.plan.budget);
    /* Before -t answers: a certificate that does not load is a bad conf. */
    if (s.plan.tls.on && (s.tls = make_tls(&s.plan.tls)) == NULL) {
        fprintf(stderr, "rmq-server: %s: %s\n", s.conf_path, err_msg());
        goto out;
    }
    if (check) {
        printf("rmq-server: %s: configuration ok (role %s)\n", s.conf_path,
               s.plan.role);
        code = 0;
        goto out;
    }
    int level = log_level_parse(s.plan.log_level);
    if (log_open(s.plan.log_file[0] ? s.plan.log_file : NULL,
                 level < 0 ? LOG_INFO : (enum log_level)level) != 0) {
        fprintf(stderr, "rmq-server: %s\n", err_msg());
        goto out;
    }
    /* Before any other thread: from here on their lines never wait for
     * the log file (core/log.h). */
    if (log_start_async(s.plan.log_buffer) != 0)
        log_warn("%s; log lines are written synchronously", err_msg());
    code = run(&s);
out:
    host_free(s.main);
    tls_ctx_unref(s.tls);
    log_close();
    free(overrides);
    return code;
}

/* }}} */
