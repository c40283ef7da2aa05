/*
 * metrics_http: see metrics_http.h.
 */
#include "server/metrics_http.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "core/metrics.h"
#include "net/listen.h"

struct metrics_http {
    struct MHD_Daemon *d;
    struct metrics *m;
};

static const char text_type[] = "text/plain; version=0.0.4; charset=utf-8";

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
    if (rc == MHD_YES)
        rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
           const char *method, const char *version, const char *upload_data,
           size_t *upload_size, void **con_cls)
{
    struct metrics_http *mh = cls;
    (void)version;
    (void)upload_data;
    if (*upload_size != 0)
        return MHD_NO;   /* a body: nothing here takes one */
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    if (!get && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        static const char msg[] = "method not allowed\n";
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", msg,
                      sizeof(msg) - 1, "GET, HEAD");
    }
    (void)con_cls;
    if (strcmp(url, "/metrics") != 0) {
        static const char msg[] = "not found: try /metrics\n";
        return answer(conn, MHD_HTTP_NOT_FOUND, "text/plain", msg, sizeof(msg) - 1, NULL);
    }
    struct buf b;
    buf_init(&b);
    enum MHD_Result rc;
    if (metrics_render(mh->m, &b) != 0) {
        static const char msg[] = "out of memory\n";
        rc = answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", msg,
                    sizeof(msg) - 1, NULL);
    } else {
        rc = answer(conn, MHD_HTTP_OK, text_type, (const char *)buf_head(&b),
                    buf_len(&b), NULL);
    }
    buf_free(&b);
    return rc;
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

struct metrics_http *
metrics_http_start(struct metrics *m, const struct metrics_http_opts *o, int *bound)
{
    struct metrics_http *mh = calloc(1, sizeof(*mh));
    if (mh == NULL) {
        err_set("out of memory for the metrics endpoint");
        return NULL;
    }
    mh->m = m;
    int fd = listen_socket(o->host, o->port, 64, bound);
    if (fd < 0) {
        free(mh);
        return NULL;   /* err_set by listen_socket */
    }
    /* The pool holds the request line and headers (and the reply's
     * headers): its size is the header limit. */
    mh->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_request, mh,
        MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)o->max_header,
        MHD_OPTION_END);
    if (mh->d == NULL) {
        close(fd);
        free(mh);
        err_set("cannot start the metrics endpoint on %s:%d", o->host, *bound);
        return NULL;
    }
    return mh;
}

void
metrics_http_stop(struct metrics_http *mh)
{
    if (mh == NULL)
        return;
    MHD_stop_daemon(mh->d);   /* joins its thread, closes the socket */
    free(mh);
}
