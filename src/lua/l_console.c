/*
 * l_console: the rmq.console_io module, the byte half of the live console
 * (lua/rmq/console_live/): a line-oriented listener on the calling host's
 * loop (the server's main thread, never a worker), SIGHUP, the metrics
 * text, and a blocking client for `rmq console` and `rmq-server --diff`.
 *
 *   cio.listen{path= | host=, port=, maxSessions=, maxLineBytes=,
 *              maxPendingBytes=, on_open=fn, on_line=fn, on_close=fn}
 *       -> listener | nil, err
 *       path: a unix socket, created mode 0600 (before listen(), so no
 *       one else can ever connect); a stale socket file nobody serves is
 *       replaced, a live one is "in use".  Each peer's uid (SO_PEERCRED)
 *       must also be the server's own or root's, whatever the file's
 *       mode became (a chmod, a shared directory): others are answered
 *       an error and closed, logged at most once a second.  host/port:
 *       TCP (the Lua side decides which hosts are allowed).  Each callback runs as a task
 *       on the host: on_open(sid), on_line(sid, line) (line without its
 *       "\n"; false when a line passed maxLineBytes: C stops reading the
 *       session, Lua answers and ends it), on_close(sid).  Past
 *       maxSessions a connection is closed at once.
 *   l:address() -> "unix:/path" | "HOST:PORT"
 *   l:write(sid, text) -> true | nil (gone, or past maxPendingBytes of
 *       unsent output: then the session is closed)
 *   l:end_session(sid)   close once what was written is sent
 *   l:close()            every session, the listener, the socket file
 *   cio.on_signal(name, fn) -> handle   fn runs as a task on each signal
 *       ("HUP" only); handle:stop()
 *   cio.host_stopping() -> bool   the calling host is shutting down
 *   cio.metrics_text() -> text | nil   the Prometheus text of the
 *       process's registry (main thread; nil with metrics off)
 *   cio.connect(addr, timeout_ms) -> client | nil, err   blocking
 *   c:send(text) -> true | nil, err
 *   c:read_line(max) -> line | nil, err      c:read(n) -> bytes | nil, err
 *   c:close()
 *
 * MT: a listener belongs to the host that made it.
 */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <uv.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/metrics.h"
#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "runtime/host.h"

#define LISTENER_TYPE "rmq.console_io.listener"
#define SIGNAL_TYPE "rmq.console_io.signal"
#define CLIENT_TYPE "rmq.console_io.client"

struct session;

struct clistener {
    struct host *h;
    lua_State *L;              /* the host's main state */
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
        uv_stream_t stream;
        uv_handle_t handle;
    } u;
    bool is_pipe;
    bool open;                 /* the listening handle is live */
    bool closed;               /* l:close() ran */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char address[160];
    int refs[3];               /* on_open, on_line, on_close */
    size_t max_sessions, max_line, max_pending;
    size_t nsessions;
    uint64_t next_sid;
    struct session *sessions;  /* list */
    int pending_frees;         /* handles closing: the listener waits */
    uint64_t refused_log_ms;   /* last "peer uid refused" log line */
    uint64_t refused_quiet;    /* refusals not logged since */
};

struct session {
    struct clistener *l;
    struct session *next;
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
        uv_stream_t stream;
        uv_handle_t handle;
    } u;
    uint64_t sid;
    char *line;                /* the partial line */
    size_t len;
    bool closing;
    bool overflow;             /* a line too long: ignore until closed */
};

enum { CB_OPEN, CB_LINE, CB_CLOSE };

static void listener_free_if_done(struct clistener *l);

/* {{{ Sessions */

static struct session *
find_session(struct clistener *l, uint64_t sid)
{
    for (struct session *s = l->sessions; s != NULL; s = s->next)
        if (s->sid == sid)
            return s;
    return NULL;
}

/* Runs callback `which` as a task with sid and (for CB_LINE) a line. */
static void
run_callback(struct clistener *l, int which, uint64_t sid, const char *line, size_t len,
             bool has_line)
{
    lua_State *L = l->L;
    if (l->refs[which] == LUA_NOREF)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, l->refs[which]);
    lua_pushinteger(L, (lua_Integer)sid);
    int nargs = 1;
    if (which == CB_LINE) {
        if (has_line)
            lua_pushlstring(L, line, len);
        else
            lua_pushboolean(L, 0);
        nargs = 2;
    }
    if (host_spawn(l->h, L, nargs) == NULL)
        log_error("console: cannot start a task");
}

static void
on_session_closed(uv_handle_t *hd)
{
    struct session *s = hd->data;
    struct clistener *l = s->l;
    free(s->line);
    free(s);
    l->pending_frees--;
    listener_free_if_done(l);
}

static void
session_close(struct session *s)
{
    if (s->closing)
        return;
    s->closing = true;
    struct clistener *l = s->l;
    for (struct session **p = &l->sessions; *p != NULL; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    l->nsessions--;
    if (!l->closed)
        run_callback(l, CB_CLOSE, s->sid, NULL, 0, false);
    l->pending_frees++;
    uv_close(&s->u.handle, on_session_closed);
}

static void
on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    (void)hd;
    (void)suggested;
    /* Small reads: a console line is short and the copy goes into the
     * session's bounded line buffer anyway. */
    static const size_t n = 4096;
    b->base = malloc(n);
    b->len = b->base != NULL ? n : 0;
}

static void
on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct session *s = st->data;
    struct clistener *l = s->l;
    if (nread < 0) {
        free(b->base);
        session_close(s);
        return;
    }
    for (ssize_t i = 0; i < nread && !s->closing && !s->overflow; i++) {
        char c = b->base[i];
        if (c == '\n') {
            size_t n = s->len;
            if (n > 0 && s->line[n - 1] == '\r')
                n--;
            run_callback(l, CB_LINE, s->sid, s->line != NULL ? s->line : "", n, true);
            s->len = 0;
            continue;
        }
        if (s->len >= l->max_line) {
            /* The Lua side answers and ends the session; what follows
             * the overlong line is not read. */
            s->overflow = true;
            uv_read_stop(st);
            run_callback(l, CB_LINE, s->sid, NULL, 0, false);
            break;
        }
        if (s->line == NULL) {
            s->line = malloc(l->max_line);
            if (s->line == NULL) {
                free(b->base);
                session_close(s);
                return;
            }
        }
        s->line[s->len++] = c;
    }
    free(b->base);
}

/* Answers an error frame (the client's "err LEN\nTEXT\n") to a session
 * not yet opened and closes it. */
static void
refuse(struct session *s, const char *text)
{
    char msg[256];  /* uv_try_write copies or fails: no lifetime issue */
    int n = snprintf(msg, sizeof(msg), "err %zu\n%s\n", strlen(text) + 1, text);
    if (n > 0 && (size_t)n < sizeof(msg)) {
        uv_buf_t b = uv_buf_init(msg, (unsigned)n);
        (void)uv_try_write(&s->u.stream, &b, 1);
    }
    s->closing = true;
    uv_close(&s->u.handle, on_session_closed);
}

/*
 * A unix socket's peer must run as the server's uid, or root (who can
 * read the store and ptrace the server anyway).  The socket file is made
 * 0600, but a file mode is one chmod or one shared directory away from
 * open; the kernel's record of who connected is not.  false: the
 * session was refused and closed.
 */
static bool
peer_allowed(struct clistener *l, struct session *s)
{
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    bool known = uv_fileno(&s->u.handle, &fd) == 0 &&
                 getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred);
    if (known && (cred.uid == geteuid() || cred.uid == 0))
        return true;
    uint64_t now = uv_now(&l->h->r.loop);
    if (l->refused_log_ms == 0 || now - l->refused_log_ms >= 1000) {
        char who[64];
        if (known)
            snprintf(who, sizeof(who), "uid %u pid %d", (unsigned)cred.uid, (int)cred.pid);
        else
            snprintf(who, sizeof(who), "unknown credentials");
        log_warn("console %s: refused a peer (%s; the server's uid is %u)%s", l->address, who,
                 (unsigned)geteuid(), l->refused_quiet > 0 ? "; more refused since the last line" : "");
        l->refused_log_ms = now;
        l->refused_quiet = 0;
    } else {
        l->refused_quiet++;
    }
    refuse(s, "console: refused: the peer is not the server's user (or root)");
    return false;
}

static void
on_connection(uv_stream_t *server, int status)
{
    struct clistener *l = server->data;
    if (status < 0 || l->closed)
        return;
    struct session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return;
    s->l = l;
    int rc = l->is_pipe ? uv_pipe_init(&l->h->r.loop, &s->u.pipe, 0)
                        : uv_tcp_init(&l->h->r.loop, &s->u.tcp);
    if (rc != 0) {
        free(s);
        return;
    }
    s->u.handle.data = s;
    l->pending_frees++;
    if (uv_accept(server, &s->u.stream) != 0) {
        s->closing = true;
        uv_close(&s->u.handle, on_session_closed);
        return;
    }
    if (l->is_pipe && !peer_allowed(l, s))
        return;
    if (l->nsessions >= l->max_sessions) {
        log_warn("console: %zu sessions open (consoleMaxSessions): connection refused", l->nsessions);
        refuse(s, "console busy: consoleMaxSessions reached");
        return;
    }
    l->pending_frees--;
    s->sid = ++l->next_sid;
    s->next = l->sessions;
    l->sessions = s;
    l->nsessions++;
    if (uv_read_start(&s->u.stream, on_alloc, on_read) != 0) {
        session_close(s);
        return;
    }
    run_callback(l, CB_OPEN, s->sid, NULL, 0, false);
}

struct wreq {
    uv_write_t w;
    char data[];
};

static void
on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w);
}

static int
llistener_write(lua_State *L)
{
    struct clistener *l = *(struct clistener **)luaL_checkudata(L, 1, LISTENER_TYPE);
    lua_Integer sid = luaL_checkinteger(L, 2);
    size_t len;
    const char *text = luaL_checklstring(L, 3, &len);
    struct session *s = l != NULL ? find_session(l, (uint64_t)sid) : NULL;
    if (s == NULL || s->closing) {
        lua_pushnil(L);
        return 1;
    }
    if (uv_stream_get_write_queue_size(&s->u.stream) + len > l->max_pending) {
        /* A client that does not read its answers is dropped rather than
         * buffered for without bound. */
        log_warn("console: session %llu does not read its output; closed", (unsigned long long)sid);
        session_close(s);
        lua_pushnil(L);
        return 1;
    }
    struct wreq *w = malloc(sizeof(*w) + len);
    if (w == NULL)
        return luaL_error(L, "out of memory");
    memcpy(w->data, text, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->w, &s->u.stream, &b, 1, on_written) != 0) {
        free(w);
        session_close(s);
        lua_pushnil(L);
        return 1;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    struct session *s = req->handle->data;
    free(req);
    session_close(s);
}

static int
llistener_end_session(lua_State *L)
{
    struct clistener *l = *(struct clistener **)luaL_checkudata(L, 1, LISTENER_TYPE);
    lua_Integer sid = luaL_checkinteger(L, 2);
    struct session *s = l != NULL ? find_session(l, (uint64_t)sid) : NULL;
    if (s == NULL || s->closing)
        return 0;
    /* The shutdown completes after the queued writes: the last answer
     * reaches the client before the close. */
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (req == NULL || uv_shutdown(req, &s->u.stream, on_shutdown) != 0) {
        free(req);
        session_close(s);
    }
    return 0;
}

/* }}} */

/* {{{ The listener */

static void
listener_free_if_done(struct clistener *l)
{
    if (l->closed && !l->open && l->pending_frees == 0 && l->sessions == NULL)
        free(l);
}

static void
on_listener_closed(uv_handle_t *hd)
{
    struct clistener *l = hd->data;
    l->open = false;
    listener_free_if_done(l);
}

static void
listener_close(lua_State *L, struct clistener *l)
{
    if (l->closed)
        return;
    l->closed = true;
    while (l->sessions != NULL)
        session_close(l->sessions);
    for (int i = 0; i < 3; i++) {
        luaL_unref(L, LUA_REGISTRYINDEX, l->refs[i]);
        l->refs[i] = LUA_NOREF;
    }
    if (l->is_pipe && l->path[0] != '\0')
        (void)unlink(l->path);
    if (l->open)
        uv_close(&l->u.handle, on_listener_closed);
    else
        listener_free_if_done(l);
}

static int
llistener_close(lua_State *L)
{
    struct clistener **p = luaL_checkudata(L, 1, LISTENER_TYPE);
    if (*p != NULL) {
        listener_close(L, *p);
        *p = NULL;
    }
    return 0;
}

static int
llistener_address(lua_State *L)
{
    struct clistener *l = *(struct clistener **)luaL_checkudata(L, 1, LISTENER_TYPE);
    if (l == NULL)
        return 0;
    lua_pushstring(L, l->address);
    return 1;
}

static size_t
opt_size(lua_State *L, int t, const char *k, size_t def, size_t min)
{
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? (lua_Integer)def : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    if (v < (lua_Integer)min)
        luaL_error(L, "console: %s must be >= %d", k, (int)min);
    return (size_t)v;
}

/* A socket file left by a server that died: nobody accepts on it. */
static bool
unix_socket_live(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return live;
}

static int
fail(lua_State *L, struct clistener *l, const char *fmt, const char *a, const char *b)
{
    if (l->open) {
        l->closed = true;
        uv_close(&l->u.handle, on_listener_closed);
    } else {
        free(l);
    }
    lua_pushnil(L);
    lua_pushfstring(L, fmt, a, b);
    return 2;
}

static int
lcio_listen(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct host *h = host_of(L);
    struct clistener **p = lua_newuserdatauv(L, sizeof(*p), 0);
    *p = NULL;
    luaL_setmetatable(L, LISTENER_TYPE);
    struct clistener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return luaL_error(L, "out of memory");
    l->h = h;
    l->L = h->L;
    for (int i = 0; i < 3; i++)
        l->refs[i] = LUA_NOREF;
    l->max_sessions = opt_size(L, 1, "maxSessions", 4, 1);
    l->max_line = opt_size(L, 1, "maxLineBytes", 65536, 16);
    l->max_pending = opt_size(L, 1, "maxPendingBytes", 4 << 20, 1024);
    lua_getfield(L, 1, "path");
    const char *path = lua_tostring(L, -1);
    lua_getfield(L, 1, "host");
    const char *hostname = lua_tostring(L, -1);
    lua_getfield(L, 1, "port");
    lua_Integer port = luaL_optinteger(L, -1, 0);
    uv_loop_t *loop = &h->r.loop;
    int rc;
    if (path != NULL) {
        if (strlen(path) >= sizeof(l->path))
            return fail(L, l, "console socket path too long (max %s bytes): %s", "107", path);
        if (access(path, F_OK) == 0) {
            struct stat st;
            if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
                return fail(L, l, "console socket %s exists and is not a socket%s", path, "");
            if (unix_socket_live(path))
                return fail(L, l, "console socket %s in use (another server serves it)%s", path, "");
            (void)unlink(path);
        }
        l->is_pipe = true;
        if ((rc = uv_pipe_init(loop, &l->u.pipe, 0)) != 0)
            return fail(L, l, "console: %s%s", uv_strerror(rc), "");
        l->open = true;
        l->u.handle.data = l;
        if ((rc = uv_pipe_bind(&l->u.pipe, path)) != 0)
            return fail(L, l, "console socket %s: %s", path, uv_strerror(rc));
        memcpy(l->path, path, strlen(path) + 1);
        /* Before listen(): no one can connect while it is wider. */
        if (chmod(path, 0600) != 0) {
            (void)unlink(path);
            return fail(L, l, "console socket %s: chmod: %s", path, strerror(errno));
        }
        snprintf(l->address, sizeof(l->address), "unix:%s", path);
    } else {
        if (hostname == NULL || port < 0 || port > 65535)
            return luaL_error(L, "console: give path, or host and port");
        struct sockaddr_storage ss;
        if (uv_ip4_addr(hostname, (int)port, (struct sockaddr_in *)&ss) != 0 &&
            uv_ip6_addr(hostname, (int)port, (struct sockaddr_in6 *)&ss) != 0)
            return fail(L, l, "console: '%s' is not an IP address%s", hostname, "");
        if ((rc = uv_tcp_init(loop, &l->u.tcp)) != 0)
            return fail(L, l, "console: %s%s", uv_strerror(rc), "");
        l->open = true;
        l->u.handle.data = l;
        if ((rc = uv_tcp_bind(&l->u.tcp, (struct sockaddr *)&ss, 0)) != 0)
            return fail(L, l, "console %s: %s", hostname, uv_strerror(rc));
        struct sockaddr_storage bound;
        int blen = sizeof(bound);
        if ((rc = uv_tcp_getsockname(&l->u.tcp, (struct sockaddr *)&bound, &blen)) != 0)
            return fail(L, l, "console %s: %s", hostname, uv_strerror(rc));
        int bport = ntohs(bound.ss_family == AF_INET6
                              ? ((struct sockaddr_in6 *)&bound)->sin6_port
                              : ((struct sockaddr_in *)&bound)->sin_port);
        snprintf(l->address, sizeof(l->address), strchr(hostname, ':') ? "[%s]:%d" : "%s:%d",
                 hostname, bport);
    }
    if ((rc = uv_listen(&l->u.stream, 16, on_connection)) != 0) {
        if (l->is_pipe)
            (void)unlink(l->path);
        return fail(L, l, "console %s: %s", l->address, uv_strerror(rc));
    }
    /* The server stops its loop itself; a console does not hold it. */
    uv_unref(&l->u.handle);
    static const char *const names[3] = { "on_open", "on_line", "on_close" };
    for (int i = 0; i < 3; i++) {
        lua_getfield(L, 1, names[i]);
        if (lua_isfunction(L, -1))
            l->refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        else
            lua_pop(L, 1);
    }
    lua_pop(L, 3);  /* path, host, port */
    *p = l;
    return 1;
}

static int
llistener_gc(lua_State *L)
{
    return llistener_close(L);
}

/* }}} */

/* {{{ Signals */

struct csignal {
    uv_signal_t sig;
    struct host *h;
    int ref;
};

static void
on_sig_closed(uv_handle_t *hd)
{
    free(hd->data);
}

static void
on_sig(uv_signal_t *sig, int signum)
{
    (void)signum;
    struct csignal *cs = sig->data;
    lua_State *L = cs->h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, cs->ref);
    if (host_spawn(cs->h, L, 0) == NULL)
        log_error("signal: cannot start a task");
}

static int
lsignal_stop(lua_State *L)
{
    struct csignal **p = luaL_checkudata(L, 1, SIGNAL_TYPE);
    if (*p != NULL) {
        uv_signal_stop(&(*p)->sig);
        luaL_unref(L, LUA_REGISTRYINDEX, (*p)->ref);
        uv_close((uv_handle_t *)&(*p)->sig, on_sig_closed);
        *p = NULL;
    }
    return 0;
}

static int
lcio_on_signal(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_argcheck(L, strcmp(name, "HUP") == 0, 1, "only HUP");
    struct host *h = host_of(L);
    struct csignal **p = lua_newuserdatauv(L, sizeof(*p), 0);
    *p = NULL;
    luaL_setmetatable(L, SIGNAL_TYPE);
    struct csignal *cs = calloc(1, sizeof(*cs));
    if (cs == NULL)
        return luaL_error(L, "out of memory");
    cs->h = h;
    int rc = uv_signal_init(&h->r.loop, &cs->sig);
    if (rc != 0) {
        free(cs);
        return luaL_error(L, "signal: %s", uv_strerror(rc));
    }
    cs->sig.data = cs;
    rc = uv_signal_start(&cs->sig, on_sig, SIGHUP);
    if (rc != 0) {
        uv_close((uv_handle_t *)&cs->sig, on_sig_closed);
        return luaL_error(L, "signal: %s", uv_strerror(rc));
    }
    uv_unref((uv_handle_t *)&cs->sig);
    lua_pushvalue(L, 2);
    cs->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    *p = cs;
    return 1;
}

/* }}} */

/* A worker's participant task ends with its host (rmq.console_live.swap):
 * its waits would otherwise hold a stopping loop open. */
static int
lcio_host_stopping(lua_State *L)
{
    lua_pushboolean(L, host_of(L)->stopping);
    return 1;
}

static int
lcio_metrics_text(lua_State *L)
{
    struct host *h = host_of(L);
    if (h->registry == NULL)
        return 0;
    struct buf b;
    buf_init(&b);
    if (metrics_render(h->registry, &b) != 0) {
        buf_free(&b);
        return luaL_error(L, "out of memory");
    }
    lua_pushlstring(L, (const char *)b.data + b.start, b.end - b.start);
    buf_free(&b);
    return 1;
}

/* {{{ The blocking client */

struct cclient {
    int fd;
    char buf[4096];
    size_t start, end;         /* buffered, unread bytes */
};

static int
lcio_connect(lua_State *L)
{
    const char *addr = luaL_checkstring(L, 1);
    lua_Integer timeout = luaL_optinteger(L, 2, 5000);
    struct sockaddr_storage ss;
    socklen_t slen;
    memset(&ss, 0, sizeof(ss));
    const char *path = NULL;
    if (strncmp(addr, "unix:", 5) == 0)
        path = addr + 5;
    else if (addr[0] == '/' || addr[0] == '.')
        path = addr;
    int fd;
    if (path != NULL) {
        struct sockaddr_un *sa = (struct sockaddr_un *)&ss;
        if (strlen(path) >= sizeof(sa->sun_path))
            return lerr_pushstr(L, "socket path too long");
        sa->sun_family = AF_UNIX;
        memcpy(sa->sun_path, path, strlen(path) + 1);
        slen = sizeof(*sa);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    } else {
        char host[128];
        const char *colon = strrchr(addr, ':');
        if (colon == NULL || (size_t)(colon - addr) >= sizeof(host))
            return lerr_pushstr(L, "address must be HOST:PORT or a socket path");
        size_t hl = (size_t)(colon - addr);
        const char *hp = addr;
        if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
            hp++;
            hl -= 2;
        }
        memcpy(host, hp, hl);
        host[hl] = '\0';
        if (strcmp(host, "localhost") == 0)
            strcpy(host, "127.0.0.1");
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end != '\0' || port <= 0 || port > 65535)
            return lerr_pushstr(L, "bad port");
        if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&ss) == 0)
            slen = sizeof(struct sockaddr_in);
        else if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&ss) == 0)
            slen = sizeof(struct sockaddr_in6);
        else
            return lerr_pushstr(L, "host must be an IP address");
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    if (fd < 0)
        return lerr_pushstr(L, strerror(errno));
    struct timeval tv = { .tv_sec = timeout / 1000, .tv_usec = (timeout % 1000) * 1000 };
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        connect(fd, (struct sockaddr *)&ss, slen) != 0) {
        int e = errno;
        close(fd);
        return lerr_pushstr(L, strerror(e));
    }
    struct cclient *c = lua_newuserdatauv(L, sizeof(*c), 0);
    c->fd = fd;
    c->start = c->end = 0;
    luaL_setmetatable(L, CLIENT_TYPE);
    return 1;
}

static struct cclient *
check_client(lua_State *L)
{
    struct cclient *c = luaL_checkudata(L, 1, CLIENT_TYPE);
    if (c->fd < 0)
        luaL_error(L, "console connection closed");
    return c;
}

static int
lclient_send(lua_State *L)
{
    struct cclient *c = check_client(L);
    size_t len;
    const char *p = luaL_checklstring(L, 2, &len);
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return lerr_pushstr(L, n < 0 ? strerror(errno) : "closed");
        p += n;
        len -= (size_t)n;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* Refills the buffer; 0 ok, or pushes nil, err and returns 2. */
static int
fill(lua_State *L, struct cclient *c)
{
    if (c->start == c->end)
        c->start = c->end = 0;
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->end, sizeof(c->buf) - c->end, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return lerr_pushstr(L, (errno == EAGAIN || errno == EWOULDBLOCK) ? "timeout" : strerror(errno));
        if (n == 0)
            return lerr_pushstr(L, "closed");
        c->end += (size_t)n;
        return 0;
    }
}

static int
lclient_read_line(lua_State *L)
{
    struct cclient *c = check_client(L);
    lua_Integer max = luaL_optinteger(L, 2, 65536);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t got = 0;
    for (;;) {
        char *nl = memchr(c->buf + c->start, '\n', c->end - c->start);
        size_t take = nl != NULL ? (size_t)(nl - (c->buf + c->start)) : c->end - c->start;
        luaL_addlstring(&b, c->buf + c->start, take);
        got += take;
        c->start += take;
        if (nl != NULL) {
            c->start++;
            luaL_pushresult(&b);
            return 1;
        }
        if ((lua_Integer)got > max)
            return lerr_pushstr(L, "line too long");
        if (c->start == c->end && sizeof(c->buf) == c->end)
            c->start = c->end = 0;
        int r = fill(L, c);
        if (r != 0)
            return r;
    }
}

static int
lclient_read(lua_State *L)
{
    struct cclient *c = check_client(L);
    lua_Integer want = luaL_checkinteger(L, 2);
    luaL_argcheck(L, want >= 0, 2, "must be >= 0");
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t left = (size_t)want;
    while (left > 0) {
        if (c->start == c->end) {
            int r = fill(L, c);
            if (r != 0)
                return r;
        }
        size_t take = c->end - c->start < left ? c->end - c->start : left;
        luaL_addlstring(&b, c->buf + c->start, take);
        c->start += take;
        left -= take;
    }
    luaL_pushresult(&b);
    return 1;
}

static int
lclient_close(lua_State *L)
{
    struct cclient *c = luaL_checkudata(L, 1, CLIENT_TYPE);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    return 0;
}

/* }}} */

int
luaopen_rmq_console_io(lua_State *L)
{
    static const luaL_Reg lmethods[] = {
        { "write", llistener_write },
        { "end_session", llistener_end_session },
        { "address", llistener_address },
        { "close", llistener_close },
        { NULL, NULL },
    };
    static const luaL_Reg cmethods[] = {
        { "send", lclient_send },
        { "read_line", lclient_read_line },
        { "read", lclient_read },
        { "close", lclient_close },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "listen", lcio_listen },
        { "on_signal", lcio_on_signal },
        { "metrics_text", lcio_metrics_text },
        { "host_stopping", lcio_host_stopping },
        { "connect", lcio_connect },
        { NULL, NULL },
    };
    luaL_newmetatable(L, LISTENER_TYPE);
    luaL_newlib(L, lmethods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, llistener_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, SIGNAL_TYPE);
    lua_newtable(L);
    lua_pushcfunction(L, lsignal_stop);
    lua_setfield(L, -2, "stop");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, CLIENT_TYPE);
    luaL_newlib(L, cmethods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, lclient_close);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    return 1;
}
