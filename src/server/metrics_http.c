/*
 * metrics_http: see metrics_http.h.
 */
#include "server/metrics_http.h"

#include <lauxlib.h>
#include <lua.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
#include <uv.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "net/codec.h"
#include "net/listen.h"
#include "lua/l_modules.h"
#include "runtime/host.h"
#include "server/web_assets.h"

/* At most this many query arguments reach the console (?a=&b=...). */
#define CONSOLE_MAX_ARGS 16

/* 413 (Payload Too Large): its name differs between library versions. */
#define HTTP_TOO_LARGE 413

/* At most this many metricsAllowedAddresses (conf.lua bounds the text). */
#define MAX_ALLOWED 128

/* Per connection: since when it has been sending its current request.
 * The library's own timeout is for idleness, which a byte a second
 * resets; this one bounds a request (line, headers, body) as a whole,
 * and its line and headers sooner.  Linked on the loop thread only. */
struct track {
    struct track *prev, *next;
    MHD_socket fd;
    uint64_t since_ms;
    struct in6_addr addr;      /* the peer (IPv4 as ::ffff:a.b.c.d) */
    bool allowed;              /* in metricsAllowedAddresses: the other pool */
    bool waiting;              /* a request is being received */
    bool headers_in;           /* its line and headers are (on_request ran) */
    bool shut;
};

struct metrics_http {
    struct MHD_Daemon *d;
    struct metrics *m;
    size_t max_body;
    uint64_t request_ms;       /* a whole request within this */
    uint64_t header_ms;        /* its line and headers within this */
    unsigned max_conn;         /* per pool (others; allowed addresses) */
    unsigned max_per_address;  /* others, per address */
    unsigned nopen[2];         /* tracked connections: [0] others, [1] allowed */
    struct in6_addr allowed[MAX_ALLOWED];
    unsigned nallowed;
    uint64_t refused_log_ms;   /* the last "refused" log line, and since: */
    uint64_t refused_quiet;
    uv_thread_t loop;
    atomic_bool loop_stop;
    struct track conns;        /* list head (loop thread) */
    /* The console (NULL: none): its Lua state and loop, used under lock
     * by the daemon's thread and the sampler. */
    struct host *console;
    uv_mutex_t lock;
    uv_cond_t wake;
    uv_thread_t sampler;
    bool sampler_on;
    bool stopping;             /* under lock */
    uint64_t sample_ms;
    int lua_slot;              /* the console state's heap (membudget_lua_slot) */
};

/* Per request: the body read so far. */
struct request {
    struct buf body;
    bool too_big;
};

static uint64_t
mono_ms(void)
{
    return (uint64_t)(clock_mono_ns() / 1000000);
}

static const char text_type[] = "text/plain; version=0.0.4; charset=utf-8";
static const char json_type[] = "application/json; charset=utf-8";

static enum MHD_Result
answer(struct MHD_Connection *conn, unsigned status, const char *type,
       const char *body, size_t len, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;   /* the library closes the connection */
    enum MHD_Result rc = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (rc == MHD_YES && allow != NULL)
        rc = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    /* POST /api/send behind consolePassword: the browser asks for it. */
    if (rc == MHD_YES && status == MHD_HTTP_UNAUTHORIZED)
        rc = MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                     "Basic realm=\"rmq console\", charset=\"UTF-8\"");
    /* The page and its API are same-origin only; nothing is framed. */
    if (rc == MHD_YES)
        rc = MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (rc == MHD_YES)
        rc = MHD_add_response_header(r, "Cache-Control", "no-store");
    if (rc == MHD_YES)
        rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci != NULL && ci->socket_context != NULL)
        ((struct track *)ci->socket_context)->waiting = false;
    return rc;
}

static enum MHD_Result
answer_text(struct MHD_Connection *conn, unsigned status, const char *msg, const char *allow)
{
    return answer(conn, status, "text/plain", msg, strlen(msg), allow);
}

/* {{{ Console */

struct args {
    lua_State *L;
    int n;
};

static enum MHD_Result
push_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct args *a = cls;
    if (key == NULL || a->n >= CONSOLE_MAX_ARGS)
        return MHD_YES;
    a->n++;
    lua_pushstring(a->L, value != NULL ? value : "");
    lua_setfield(a->L, -2, key);
    return MHD_YES;
}

/* require("rmq.console.http")[fn] onto L's stack, or false. */
static bool
console_fn(lua_State *L, const char *fn)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rmq.console.http");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        return false;
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    return true;
}

/* The client's IP address (no port: a wrong password delays the host, not one
 * of its connections), or nil when the library does not know it. */
static void
push_peer(lua_State *L, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char ip[INET6_ADDRSTRLEN];
    const void *src = NULL;
    int family = AF_UNSPEC;
    if (ci != NULL && ci->client_addr != NULL) {
        family = ci->client_addr->sa_family;
        if (family == AF_INET)
            src = &((const struct sockaddr_in *)(const void *)ci->client_addr)->sin_addr;
        else if (family == AF_INET6)
            src = &((const struct sockaddr_in6 *)(const void *)ci->client_addr)->sin6_addr;
    }
    if (src != NULL && inet_ntop(family, src, ip, sizeof(ip)) != NULL)
        lua_pushstring(L, ip);
    else
        lua_pushnil(L);
}

/* Runs handle(method, url, args, body, authorization, peer) and queues what it returns.  A
 * Lua error is logged and answered 500 without its text (which may name
 * server paths). */
/* Content-Type: application/json (parameters such as charset allowed). */
static bool
json_content(struct MHD_Connection *conn)
{
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    static const char want[] = "application/json";
    if (ct == NULL || strncasecmp(ct, want, sizeof(want) - 1) != 0)
        return false;
    char after = ct[sizeof(want) - 1];
    return after == '\0' || after == ';' || after == ' ';
}

static enum MHD_Result
console_answer(struct metrics_http *mh, struct MHD_Connection *conn, const char *method,
               const char *url, const struct buf *body)
{
    lua_State *L = mh->console->L;
    uv_mutex_lock(&mh->lock);
    int top = lua_gettop(L);
    enum MHD_Result rc;
    if (!console_fn(L, "handle")) {
        log_error("console: %s", lua_tostring(L, -1));
        rc = MHD_NO;
        goto out;
    }
    lua_pushstring(L, method);
    lua_pushstring(L, url);
    lua_createtable(L, 0, 4);
    struct args a = { .L = L, .n = 0 };
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, push_arg, &a);
    if (buf_len(body) > 0)
        lua_pushlstring(L, (const char *)buf_head(body), buf_len(body));
    else
        lua_pushnil(L);
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth != NULL)
        lua_pushstring(L, auth);
    else
        lua_pushnil(L);
    push_peer(L, conn);
    if (lua_pcall(L, 6, 3, 0) != LUA_OK) {
        log_error("console %s %s: %s", method, url, lua_tostring(L, -1));
        static const char msg[] = "{\"error\":\"internal error (the server's log has it)\"}\n";
        rc = answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, json_type, msg, sizeof(msg) - 1, NULL);
        goto out;
    }
    lua_Integer status = lua_tointeger(L, -3);
    const char *type = lua_tostring(L, -2);
    size_t len = 0;
    const char *text = lua_tolstring(L, -1, &len);
    if (status < 100 || status > 599 || type == NULL || text == NULL) {
        log_error("console %s %s: handle gave no status, type and text", method, url);
        rc = MHD_NO;
        goto out;
    }
    rc = answer(conn, (unsigned)status, type, text, len, NULL);
out:
    lua_settop(L, top);
    uv_mutex_unlock(&mh->lock);
    return rc;
}

/* Snapshots for the sparklines, every sample_ms until stop. */
static void
sampler_main(void *arg)
{
    struct metrics_http *mh = arg;
    lua_State *L = mh->console->L;
    uint64_t ns = mh->sample_ms * 1000000u;
    uv_mutex_lock(&mh->lock);
    while (!mh->stopping) {
        int rc = uv_cond_timedwait(&mh->wake, &mh->lock, ns);
        if (mh->stopping)
            break;
        if (rc != UV_ETIMEDOUT)
            continue;
        int top = lua_gettop(L);
        if (!console_fn(L, "sample") || lua_pcall(L, 0, 0, 0) != LUA_OK)
            log_warn("console sample: %s", lua_tostring(L, -1));
        lua_settop(L, top);
        struct membudget *b = membudget_shared();
        if (b != NULL)
            membudget_lua_report(b, mh->lua_slot,
                                 (int64_t)lua_gc(L, LUA_GCCOUNT) * 1024 + lua_gc(L, LUA_GCCOUNTB));
    }
    uv_mutex_unlock(&mh->lock);
}

static int
console_start(struct metrics_http *mh, const char *settings)
{
    mh->console = host_new(lmodules_newstate(), true, RMQ_DEFAULT_MAX_FRAME, 0, -1);
    if (mh->console == NULL)
        return -1;   /* err_set by host_new */
    lua_State *L = mh->console->L;
    struct membudget *b = membudget_shared();
    mh->lua_slot = b != NULL ? membudget_lua_slot(b, "console") : -1;
    host_set_lua_path(L);
    if (!console_fn(L, "init")) {
        err_set("console: %s", lua_tostring(L, -1));
        return -1;
    }
    lua_pushstring(L, settings);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        err_set("console: %s", lua_tostring(L, -1));
        return -1;
    }
    lua_Integer ms = lua_tointeger(L, -1);
    lua_settop(L, 0);
    if (b != NULL)
        membudget_lua_report(b, mh->lua_slot, (int64_t)lua_gc(L, LUA_GCCOUNT) * 1024 + lua_gc(L, LUA_GCCOUNTB));
    if (uv_mutex_init(&mh->lock) != 0 || uv_cond_init(&mh->wake) != 0) {
        err_set("console: cannot make a lock");
        return -1;
    }
    mh->sample_ms = ms > 0 ? (uint64_t)ms : 5000;
    if (uv_thread_create(&mh->sampler, sampler_main, mh) != 0) {
        err_set("console: cannot start the sampler thread");
        return -1;
    }
    mh->sampler_on = true;
    return 0;
}

static void
console_stop(struct metrics_http *mh)
{
    if (mh->console == NULL)
        return;
    if (mh->sampler_on) {
        uv_mutex_lock(&mh->lock);
        mh->stopping = true;
        uv_cond_signal(&mh->wake);
        uv_mutex_unlock(&mh->lock);
        uv_thread_join(&mh->sampler);
        uv_cond_destroy(&mh->wake);
        uv_mutex_destroy(&mh->lock);
    }
    host_free(mh->console);
    mh->console = NULL;
}

/* }}} */

static const struct web_asset *
find_asset(const char *url)
{
    if (strcmp(url, "/") == 0)
        url = "/index.html";
    for (size_t i = 0; i < web_assets_count; i++)
        if (strcmp(web_assets[i].path, url) == 0)
            return &web_assets[i];
    return NULL;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
           const char *method, const char *version, const char *upload_data,
           size_t *upload_size, void **con_cls)
{
    struct metrics_http *mh = cls;
    (void)version;
    struct request *rq = *con_cls;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    bool head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    bool api = strncmp(url, "/api/", 5) == 0;
    if (rq == NULL) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci != NULL && ci->socket_context != NULL)
            ((struct track *)ci->socket_context)->headers_in = true;
        /* Headers are in: refuse what needs no body before reading one. */
        if (!get && !head && !(post && api))
            return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n",
                               api ? "GET, HEAD, POST" : "GET, HEAD");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > mh->max_body)
            return answer_text(conn, HTTP_TOO_LARGE, "request body too large\n", NULL);
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        buf_init(&rq->body);
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size != 0) {
        /* A chunked body has no Content-Length: count it here. */
        if (!rq->too_big && buf_len(&rq->body) + *upload_size <= mh->max_body) {
            if (buf_append(&rq->body, upload_data, *upload_size) != 0)
                return MHD_NO;
        } else {
            rq->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return answer_text(conn, HTTP_TOO_LARGE, "request body too large\n", NULL);
    if (api) {
        if (mh->console == NULL)
            return answer_text(conn, MHD_HTTP_NOT_FOUND,
                               "not found: the console is served by brokers; try /metrics\n", NULL);
        if (post && !json_content(conn))
            /* A page of another site can POST text/plain or a form without
             * asking; application/json needs a CORS preflight (OPTIONS,
             * answered 405 here), so a browser cannot send it cross-site. */
            return answer_text(conn, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                               "POST /api/* takes Content-Type: application/json\n", NULL);
        return console_answer(mh, conn, method, url, &rq->body);
    }
    if (strcmp(url, "/metrics") != 0) {
        const struct web_asset *a = mh->console != NULL ? find_asset(url) : NULL;
        if (a == NULL)
            return answer_text(conn, MHD_HTTP_NOT_FOUND,
                               mh->console != NULL ? "not found: try /, /api/cluster or /metrics\n"
                                                   : "not found: try /metrics\n",
                               NULL);
        return answer(conn, MHD_HTTP_OK, a->type, (const char *)a->data, a->len, NULL);
    }
    struct buf b;
    buf_init(&b);
    enum MHD_Result rc;
    if (metrics_render(mh->m, &b) != 0) {
        rc = answer_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
    } else {
        rc = answer(conn, MHD_HTTP_OK, text_type, (const char *)buf_head(&b),
                    buf_len(&b), NULL);
    }
    buf_free(&b);
    return rc;
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    /* A kept-alive connection's next request has the same bound. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci != NULL && ci->socket_context != NULL) {
        struct track *t = ci->socket_context;
        t->since_ms = mono_ms();
        t->waiting = true;
        t->headers_in = false;
    }
    struct request *rq = *con_cls;
    if (rq == NULL)
        return;
    buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

/* The peer's address as IPv6 (IPv4 mapped), for comparing; false for
 * another family. */
static bool
addr_of(const struct sockaddr *sa, struct in6_addr *out)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET6) {
        *out = ((const struct sockaddr_in6 *)sa)->sin6_addr;
        return true;
    }
    if (sa->sa_family == AF_INET) {
        memset(out, 0, sizeof(*out));
        out->s6_addr[10] = 0xff;
        out->s6_addr[11] = 0xff;
        memcpy(&out->s6_addr[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    return false;
}

static bool
is_allowed(const struct metrics_http *mh, const struct in6_addr *a)
{
    for (unsigned i = 0; i < mh->nallowed; i++)
        if (memcmp(&mh->allowed[i], a, sizeof(*a)) == 0)
            return true;
    return false;
}

/* ";ip;ip" (conf.lua checked each) into mh->allowed. */
static int
parse_allowed(struct metrics_http *mh, const char *list)
{
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ';');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        while (n > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n > 0) {
            char ip[INET6_ADDRSTRLEN];
            struct sockaddr_in v4;
            struct sockaddr_in6 v6;
            memset(&v4, 0, sizeof(v4));
            memset(&v6, 0, sizeof(v6));
            if (n >= sizeof(ip) || mh->nallowed >= MAX_ALLOWED) {
                err_set("metricsAllowedAddresses: at most %d addresses", MAX_ALLOWED);
                return -1;
            }
            memcpy(ip, p, n);
            ip[n] = '\0';
            const struct sockaddr *sa = NULL;
            if (inet_pton(AF_INET, ip, &v4.sin_addr) == 1) {
                v4.sin_family = AF_INET;
                sa = (const struct sockaddr *)&v4;
            } else if (inet_pton(AF_INET6, ip, &v6.sin6_addr) == 1) {
                v6.sin6_family = AF_INET6;
                sa = (const struct sockaddr *)&v6;
            }
            if (sa == NULL || !addr_of(sa, &mh->allowed[mh->nallowed])) {
                err_set("metricsAllowedAddresses: %s is not an IP address", ip);
                return -1;
            }
            mh->nallowed++;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

/* A refused connection's log line, at most one a second (a flood would
 * otherwise write one per connection). */
static void
log_refused(struct metrics_http *mh, const struct in6_addr *a, const char *why)
{
    uint64_t now = mono_ms();
    if (mh->refused_log_ms != 0 && now - mh->refused_log_ms < 1000) {
        mh->refused_quiet++;
        return;
    }
    char ip[INET6_ADDRSTRLEN];
    if (IN6_IS_ADDR_V4MAPPED(a))
        inet_ntop(AF_INET, &a->s6_addr[12], ip, sizeof(ip));
    else
        inet_ntop(AF_INET6, a, ip, sizeof(ip));
    log_warn("metrics endpoint: refused a connection from %s (%s)%s", ip, why,
             mh->refused_quiet > 0 ? "; more refused in the last second(s), not logged" : "");
    mh->refused_log_ms = now;
    mh->refused_quiet = 0;
}

/* At accept (the loop thread, before NOTIFY_STARTED of the same
 * connection): the pools and the per-address limit.  A linear scan of
 * the open connections: at most 2 x metricsHttpMaxConnections. */
static enum MHD_Result
on_accept(void *cls, const struct sockaddr *sa, socklen_t len)
{
    struct metrics_http *mh = cls;
    (void)len;
    struct in6_addr a;
    if (!addr_of(sa, &a))
        return MHD_YES;   /* not IP (never, on a TCP listener) */
    bool allowed = is_allowed(mh, &a);
    if (mh->nopen[allowed] >= mh->max_conn) {
        log_refused(mh, &a, allowed ? "metricsHttpMaxConnections for metricsAllowedAddresses"
                                    : "metricsHttpMaxConnections");
        return MHD_NO;
    }
    if (allowed)
        return MHD_YES;
    unsigned from = 0;
    for (struct track *t = mh->conns.next; t != &mh->conns; t = t->next)
        if (memcmp(&t->addr, &a, sizeof(a)) == 0)
            from++;
    if (from >= mh->max_per_address) {
        log_refused(mh, &a, "metricsHttpMaxConnectionsPerAddress");
        return MHD_NO;
    }
    return MHD_YES;
}

static void
on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
              enum MHD_ConnectionNotificationCode code)
{
    struct metrics_http *mh = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct track *t = calloc(1, sizeof(*t));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (t == NULL || ci == NULL) {
            free(t);   /* untracked: the idle timeout still holds */
            return;
        }
        t->fd = ci->connect_fd;
        if (ai != NULL && addr_of(ai->client_addr, &t->addr))
            t->allowed = is_allowed(mh, &t->addr);
        t->since_ms = mono_ms();
        t->waiting = true;
        t->next = mh->conns.next;
        t->prev = &mh->conns;
        mh->conns.next->prev = t;
        mh->conns.next = t;
        mh->nopen[t->allowed]++;
        *socket_context = t;
    } else if (*socket_context != NULL) {
        struct track *t = *socket_context;
        t->prev->next = t->next;
        t->next->prev = t->prev;
        mh->nopen[t->allowed]--;
        free(t);
        *socket_context = NULL;
    }
}

/* Shuts the connections whose request has taken longer than allowed; the
 * library sees the end of the stream and closes them.  On the loop
 * thread, so no fd here has been closed (and reused) behind our back. */
static void
reap_slow(struct metrics_http *mh)
{
    uint64_t now = mono_ms();
    for (struct track *t = mh->conns.next; t != &mh->conns; t = t->next) {
        if (!t->waiting || t->shut)
            continue;
        uint64_t limit = t->headers_in ? mh->request_ms : mh->header_ms;
        if (now - t->since_ms > limit) {
            t->shut = true;
            log_debug("metrics endpoint: closing a connection whose request %s took over %llu ms",
                      t->headers_in ? "" : "line and headers", (unsigned long long)limit);
            (void)shutdown(t->fd, SHUT_RDWR);
        }
    }
}

/* The daemon's loop: the library's work, then the request deadlines. */
static void
loop_main(void *arg)
{
    struct metrics_http *mh = arg;
    while (!atomic_load(&mh->loop_stop)) {
        (void)MHD_run_wait(mh->d, 100);
        reap_slow(mh);
    }
}

static void
on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_debug("metrics endpoint: %s", msg);
}

/* Undoes a partial start, keeping the reason err_set() holds. */
static void
abandon(struct metrics_http *mh)
{
    char why[256];
    snprintf(why, sizeof(why), "%s", err_msg());
    console_stop(mh);
    free(mh);
    err_set("%s", why);
}

struct metrics_http *
metrics_http_start(struct metrics *m, const struct metrics_http_opts *o, int *bound)
{
    struct metrics_http *mh = calloc(1, sizeof(*mh));
    if (mh == NULL) {
        err_set("out of memory for the metrics endpoint");
        return NULL;
    }
    mh->m = m;
    mh->max_body = o->max_body;
    mh->request_ms = (uint64_t)o->timeout_s * 1000u;
    /* The headers' deadline is the request's at most. */
    mh->header_ms = o->header_ms > 0 && o->header_ms < mh->request_ms ? o->header_ms : mh->request_ms;
    mh->max_conn = o->max_connections;
    mh->max_per_address = o->max_per_address > 0 ? o->max_per_address : o->max_connections;
    mh->conns.next = mh->conns.prev = &mh->conns;
    if (parse_allowed(mh, o->allowed) != 0) {
        free(mh);
        return NULL;
    }
    atomic_init(&mh->loop_stop, false);
    int fd = listen_socket(o->host, o->port, 64, bound);
    if (fd < 0) {
        free(mh);
        return NULL;   /* err_set by listen_socket */
    }
    if (o->console != NULL && console_start(mh, o->console) != 0) {
        close(fd);
        abandon(mh);
        return NULL;
    }
    /* The pool holds the request line and headers (and the reply's
     * headers): its size is the header limit. */
    mh->d = MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, on_accept, mh,
        on_request, mh,
        MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, mh,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        /* The library's limit leaves the rest in the backlog; on_accept
         * keeps each pool to max_connections. */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)(mh->nallowed > 0 ? 2 * o->max_connections
                                                                     : o->max_connections),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)o->max_header,
        MHD_OPTION_END);
    if (mh->d == NULL) {
        close(fd);
        err_set("cannot start the metrics endpoint on %s:%d", o->host, *bound);
        abandon(mh);
        return NULL;
    }
    if (uv_thread_create(&mh->loop, loop_main, mh) != 0) {
        MHD_stop_daemon(mh->d);
        err_set("cannot start the metrics endpoint's thread");
        abandon(mh);
        return NULL;
    }
    return mh;
}

void
metrics_http_stop(struct metrics_http *mh)
{
    if (mh == NULL)
        return;
    atomic_store(&mh->loop_stop, true);
    uv_thread_join(&mh->loop);   /* within one MHD_run_wait (100 ms) */
    MHD_stop_daemon(mh->d);      /* closes every connection and the socket */
    console_stop(mh);
    free(mh);
}
