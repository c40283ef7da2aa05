/*
 * httpc: see httpc.h.  The request goes out in one write; the answer is
 * read until EOF into a buffer capped at max_response, then parsed once.
 */
#include "net/httpc.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void
handle_closed(uv_handle_t *uh)
{
    struct httpc *h = uh->data;
    if (--h->open_handles > 0)
        return;
    /* Both handles are closed: parse what came and report it. */
    int status = h->status;
    const uint8_t *body = NULL;
    size_t blen = 0;
    if (status == 0) {
        /* Parsed into h->in by finish(); body is at its head. */
        status = h->finished;
        body = buf_head(&h->in);
        blen = buf_len(&h->in);
    }
    buf_free(&h->out);
    httpc_done_fn done = h->done;
    done(h, status, body, blen);
    /* The caller may have freed h; nothing after this. */
}

/* Decodes a chunked body in place; returns its length or -1. */
static long
dechunk(uint8_t *p, size_t n)
{
    size_t r = 0, w = 0;
    for (;;) {
        size_t size = 0;
        int digits = 0;
        while (r < n && isxdigit(p[r])) {
            int c = p[r];
            int v = isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10);
            if (size > (SIZE_MAX >> 4))
                return -1;
            size = size * 16 + (size_t)v;
            r++;
            digits++;
        }
        if (digits == 0)
            return -1;
        while (r < n && p[r] != '\n')   /* chunk extensions, "\r" */
            r++;
        if (r >= n)
            return -1;
        r++;
        if (size == 0)
            return (long)w;
        if (size > n - r)
            return -1;
        memmove(p + w, p + r, size);
        w += size;
        r += size;
        if (r + 2 > n || p[r] != '\r' || p[r + 1] != '\n')
            return -1;
        r += 2;
    }
}

/* Parses h->in (status line, headers, body); leaves the body alone in
 * h->in and returns the HTTP status, or UV_EPROTO. */
static int
parse(struct httpc *h)
{
    uint8_t *p = buf_head(&h->in);
    size_t n = buf_len(&h->in);
    uint8_t *end = NULL;
    for (size_t i = 0; i + 3 < n; i++) {
        if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n') {
            end = p + i;
            break;
        }
    }
    if (end == NULL || n < 12 || memcmp(p, "HTTP/1.", 7) != 0)
        return UV_EPROTO;
    int status = 0;
    for (int i = 9; i < 12; i++) {
        if (!isdigit(p[i]))
            return UV_EPROTO;
        status = status * 10 + (p[i] - '0');
    }
    /* Headers we need: Transfer-Encoding: chunked, Content-Length. */
    bool chunked = false;
    long clen = -1;
    size_t hlen = (size_t)(end - p);
    char line[256];
    size_t pos = 0;
    while (pos < hlen) {
        size_t e = pos;
        while (e < hlen && p[e] != '\r')
            e++;
        size_t ll = e - pos < sizeof(line) - 1 ? e - pos : sizeof(line) - 1;
        memcpy(line, p + pos, ll);
        line[ll] = '\0';
        if (strncasecmp(line, "transfer-encoding:", 18) == 0 && strstr(line + 18, "chunked") != NULL)
            chunked = true;
        else if (strncasecmp(line, "content-length:", 15) == 0)
            clen = strtol(line + 15, NULL, 10);
        pos = e + 2;
    }
    buf_consume(&h->in, hlen + 4);
    if (chunked) {
        long bl = dechunk(buf_head(&h->in), buf_len(&h->in));
        if (bl < 0)
            return UV_EPROTO;
        h->in.end = h->in.start + (size_t)bl;
    } else if (clen >= 0) {
        if ((size_t)clen > buf_len(&h->in))
            return UV_EPROTO;     /* closed before the whole body */
        h->in.end = h->in.start + (size_t)clen;
    }
    return status;
}

static void
finish(struct httpc *h, int status)
{
    if (h->open_handles == 0 || h->status != 0 || h->finished != 0)
        return;
    if (status == 0) {
        int s = parse(h);
        if (s < 0)
            h->status = s;
        else
            h->finished = s;
    } else {
        h->status = status;
    }
    if (h->status != 0)
        buf_free(&h->in);
    uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, handle_closed);
    uv_close((uv_handle_t *)&h->tcp, handle_closed);
}

static void
timed_out(uv_timer_t *t)
{
    finish(t->data, UV_ETIMEDOUT);
}

static void
alloc_cb(uv_handle_t *uh, size_t suggested, uv_buf_t *out)
{
    (void)suggested;
    struct httpc *h = uh->data;
    size_t want = 16384;
    if (buf_len(&h->in) + want > h->max_response + 1)
        want = h->max_response + 1 - buf_len(&h->in);
    if (want == 0 || buf_reserve(&h->in, want) != 0) {
        out->base = NULL;
        out->len = 0;
        return;
    }
    out->base = (char *)buf_tail(&h->in);
    out->len = want;
}

static void
read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct httpc *h = s->data;
    if (nread == UV_EOF) {
        finish(h, 0);
        return;
    }
    if (nread < 0) {
        finish(h, (int)nread);
        return;
    }
    if (nread == 0) {
        if (b->base == NULL)
            finish(h, UV_ENOMEM);
        return;
    }
    h->in.end += (size_t)nread;
    if (buf_len(&h->in) > h->max_response)
        finish(h, UV_E2BIG);
}

static void
write_cb(uv_write_t *w, int status)
{
    struct httpc *h = w->data;
    if (status != 0)
        finish(h, status);
}

static void
connect_cb(uv_connect_t *c, int status)
{
    struct httpc *h = c->data;
    if (status != 0) {
        finish(h, status);
        return;
    }
    if (h->status != 0)
        return;
    uv_buf_t b = uv_buf_init((char *)buf_head(&h->out), (unsigned)buf_len(&h->out));
    int rc = uv_write(&h->write, (uv_stream_t *)&h->tcp, &b, 1, write_cb);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&h->tcp, alloc_cb, read_cb);
    if (rc != 0)
        finish(h, rc);
}

int
httpc_start(struct httpc *h, uv_loop_t *loop, const char *host, int port,
            const char *method, const char *path, const void *body, size_t blen,
            size_t max_response, uint64_t timeout_ms, httpc_done_fn done)
{
    void *data = h->data;
    memset(h, 0, sizeof(*h));
    h->data = data;
    h->done = done;
    h->max_response = max_response;
    buf_init(&h->out);
    buf_init(&h->in);
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    struct sockaddr_storage sa;
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&sa);
    if (rc != 0)
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa);
    if (rc != 0)
        return rc;
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      method, path, host, port, blen);
    if (hl < 0 || (size_t)hl >= sizeof(head))
        return UV_EINVAL;
    if (buf_append(&h->out, head, (size_t)hl) != 0 ||
        (blen > 0 && buf_append(&h->out, body, blen) != 0)) {
        buf_free(&h->out);
        return UV_ENOMEM;
    }
    rc = uv_timer_init(loop, &h->timer);
    if (rc != 0) {
        buf_free(&h->out);
        return rc;
    }
    h->timer.data = h;
    rc = uv_tcp_init(loop, &h->tcp);
    if (rc != 0) {
        /* Only the timer to close; done() reports the failure. */
        h->open_handles = 1;
        h->status = rc;
        uv_close((uv_handle_t *)&h->timer, handle_closed);
        return 0;
    }
    h->tcp.data = h;
    h->open_handles = 2;
    h->connect.data = h;
    h->write.data = h;
    uv_update_time(loop);
    rc = uv_timer_start(&h->timer, timed_out, timeout_ms, 0);
    if (rc == 0)
        rc = uv_tcp_connect(&h->connect, &h->tcp, (struct sockaddr *)&sa, connect_cb);
    if (rc != 0)
        finish(h, rc);       /* reported through done(), as any failure */
    return 0;
}

void
httpc_abandon(struct httpc *h)
{
    buf_free(&h->out);
    buf_free(&h->in);
}
