/*
 * reqload: see reqload.h.  Writes go out with uv_try_write (the common
 * case: the socket buffer takes the whole small frame), falling back to
 * uv_write for the rest; the frame bytes outlive the run, so no copy.
 */
#include "tools/reqload.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"

struct rl_conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    struct reqload *rl;
    uint8_t *in;
    size_t in_len;
    size_t in_cap;
    int64_t sent_ns;
    bool connected;
    bool closing;
};

struct reqload {
    uv_loop_t loop;
    uv_timer_t timer;
    struct rl_conn *conns;
    int n;
    const uint8_t *frame;
    size_t flen;
    int64_t warm_until_ns;
    int64_t start_ns;
    int64_t end_ns;
    bool measuring;
    bool stop;
    struct reqload_result *res;
};

static void send_frame(struct rl_conn *c);

static void
on_closed(uv_handle_t *h)
{
    (void)h;
}

static void
close_conn(struct rl_conn *c)
{
    if (!c->closing) {
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    }
}

static void
on_written(uv_write_t *req, int status)
{
    struct rl_conn *c = req->data;
    if (status != 0)
        close_conn(c);
}

static void
send_frame(struct rl_conn *c)
{
    struct reqload *rl = c->rl;
    c->sent_ns = clock_mono_ns();
    uv_buf_t b = uv_buf_init((char *)rl->frame, (unsigned)rl->flen);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == (int)rl->flen)
        return;
    if (n < 0 && n != UV_EAGAIN) {
        close_conn(c);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    b = uv_buf_init((char *)rl->frame + done, (unsigned)(rl->flen - done));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
        close_conn(c);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    struct rl_conn *c = h->data;
    (void)suggested;
    if (c->in_cap - c->in_len < 16384) {
        size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
        uint8_t *p = realloc(c->in, cap);
        if (p == NULL) {
            *out = uv_buf_init(NULL, 0);
            return;
        }
        c->in = p;
        c->in_cap = cap;
    }
    *out = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static bool
reply_ok(const uint8_t *f, size_t len)
{
    if (len < 8)
        return false;
    uint32_t h = be32_get(f + 4);
    if ((h >> 24) == 1)   /* ROCKETMQ binary header: int16 code first */
        return len >= 10 && f[8] == 0 && f[9] == 0;
    static const char ok[] = "{\"code\":0,";
    return len >= 8 + sizeof(ok) - 1 && memcmp(f + 8, ok, sizeof(ok) - 1) == 0;
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_conn *c = s->data;
    struct reqload *rl = c->rl;
    (void)buf;
    if (nread < 0) {
        close_conn(c);
        return;
    }
    c->in_len += (size_t)nread;
    size_t off = 0;
    bool got = false;
    while (c->in_len - off >= 4) {
        size_t flen = 4 + (size_t)be32_get(c->in + off);
        if (c->in_len - off < flen)
            break;
        int64_t now = clock_mono_ns();
        if (rl->measuring) {
            if (reply_ok(c->in + off, flen)) {
                rl->res->ok++;
                lg_hist_add(&rl->res->hist, (uint64_t)((now - c->sent_ns) / 1000));
            } else {
                rl->res->errors++;
            }
        } else if (now >= rl->warm_until_ns) {
            rl->measuring = true;
            rl->start_ns = now;
        }
        off += flen;
        got = true;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    if (got && !rl->stop)
        send_frame(c);
}

static void
on_connect(uv_connect_t *req, int status)
{
    struct rl_conn *c = req->data;
    if (status != 0) {
        c->rl->res->failed_connects++;
        close_conn(c);
        return;
    }
    c->connected = true;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        close_conn(c);
        return;
    }
    (void)uv_tcp_nodelay(&c->tcp, 1);
    if (!c->rl->stop)
        send_frame(c);
}

static void
on_timer(uv_timer_t *t)
{
    struct reqload *rl = t->data;
    rl->stop = true;
    rl->end_ns = clock_mono_ns();
    for (int i = 0; i < rl->n; i++)
        close_conn(&rl->conns[i]);
    uv_close((uv_handle_t *)&rl->timer, on_closed);
}

int
reqload_run(const char *addr, const uint8_t *frame, size_t len,
            int connections, double seconds, double warmup_ms,
            struct reqload_result *res)
{
    memset(res, 0, sizeof(*res));
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host) || len < 8) {
        err_set("bad address %s", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa;
    if (uv_ip4_addr(host, atoi(colon + 1), &sa) != 0) {
        err_set("bad IPv4 address %s", addr);
        return -1;
    }
    struct reqload rl;
    memset(&rl, 0, sizeof(rl));
    rl.conns = calloc((size_t)connections, sizeof(*rl.conns));
    if (rl.conns == NULL || uv_loop_init(&rl.loop) != 0) {
        free(rl.conns);
        err_set("out of memory");
        return -1;
    }
    rl.n = connections;
    rl.frame = frame;
    rl.flen = len;
    rl.res = res;
    int64_t t0 = clock_mono_ns();
    rl.warm_until_ns = t0 + (int64_t)(warmup_ms * 1e6);
    int rc = 0;
    for (int i = 0; i < connections; i++) {
        struct rl_conn *c = &rl.conns[i];
        c->rl = &rl;
        c->creq.data = c;
        if (uv_tcp_init(&rl.loop, &c->tcp) != 0) {
            rl.n = i;
            rc = -1;
            break;
        }
        c->tcp.data = c;
        if (uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&sa, on_connect) != 0) {
            res->failed_connects++;
            close_conn(c);
        }
    }
    rl.timer.data = &rl;
    if (uv_timer_init(&rl.loop, &rl.timer) != 0) {
        rc = -1;
        for (int i = 0; i < rl.n; i++)
            close_conn(&rl.conns[i]);
    } else if (uv_timer_start(&rl.timer, on_timer,
                              (uint64_t)(warmup_ms + seconds * 1000), 0) != 0) {
        rc = -1;
        on_timer(&rl.timer);
    }
    (void)uv_run(&rl.loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&rl.loop);
    for (int i = 0; i < rl.n; i++)
        free(rl.conns[i].in);
    free(rl.conns);
    res->seconds = rl.measuring ? (double)(rl.end_ns - rl.start_ns) / 1e9 : 0;
    if (rc != 0 || res->failed_connects == connections) {
        err_set("cannot connect to %s", addr);
        return -1;
    }
    return 0;
}
