/*
 * ha_slave: the slave's side of replication (HAClient, on the HA loop).
 *
 * Connects to the master's HA address (haMasterAddress, else the
 * haServerAddr of the REGISTER_BROKER reply: ha_set_master), reports its
 * offset (the end of the bytes received: 8 bytes big-endian) at once, then
 * every heartbeat_ms and after each append, and appends every frame's
 * bytes at the frame's offset.  4.9.8's HAClient sends its first report
 * only heartbeat_ms after connecting; the bytes are the same, sooner.
 *
 * A frame at another offset than ours: a lower one means our log is
 * ahead of this master (a master change): we truncate to it and log it;
 * a higher one is a gap: we disconnect as 4.9.8 does.  Frames larger
 * than the 4 MiB buffer are garbage: disconnect.  Nothing read for
 * housekeeping_ms (the master heartbeats every 5 s) means a dead link:
 * disconnect.  Reconnects back off from 1 s to 5 s.
 */
#include "ha/ha_impl.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "store/mfile.h"
#include "store/replica.h"
#include "store/store.h"

static void
tcp_freed(uv_handle_t *hd)
{
    free(hd);
}

void
ha_slave_close(struct ha *h, const char *why)
{
    struct ha_client *k = &h->cli;
    if (k->tcp == NULL)
        return;
    if (why != NULL)
        log_warn("HA: leaving master %s: %s", k->addr, why);
    k->tcp->data = NULL;
    uv_close((uv_handle_t *)k->tcp, tcp_freed);
    k->tcp = NULL;
    k->connected = k->connecting = false;
    k->report_busy = false;
    free(k->buf);
    k->buf = NULL;
    k->len = 0;
    k->retry_at = ha_now_ms() + k->backoff_ms;
    k->backoff_ms = k->backoff_ms * 2 > HA_RECONNECT_MAX_MS ? HA_RECONNECT_MAX_MS
                                                            : k->backoff_ms * 2;
    uv_mutex_lock(&h->mu);
    h->st.connected = false;
    uv_mutex_unlock(&h->mu);
}

static void report(struct ha *h);

static void
on_reported(uv_write_t *w, int status)
{
    struct ha *h = w->data;
    struct ha_client *k = &h->cli;
    /* The connection it was written to may be gone already. */
    if (w->handle->data == NULL)
        return;
    k->report_busy = false;
    if (status != 0) {
        ha_slave_close(h, uv_strerror(status));
        return;
    }
    if (k->report_again) {
        k->report_again = false;
        report(h);
    }
}

static void
report(struct ha *h)
{
    struct ha_client *k = &h->cli;
    if (!k->connected)
        return;
    if (k->report_busy) {
        k->report_again = true;
        return;
    }
    int64_t off = store_replica_end(h->s);
    if (k->trunc_to >= 0 && k->trunc_to < off)
        off = k->trunc_to;   /* fenced: not past the last common epoch */
    else
        k->trunc_to = -1;
    be64_put(k->report, (uint64_t)off);
    uv_buf_t b = uv_buf_init((char *)k->report, 8);
    k->report_wr.data = h;
    k->report_busy = true;
    int rc = uv_write(&k->report_wr, (uv_stream_t *)k->tcp, &b, 1, on_reported);
    if (rc != 0) {
        k->report_busy = false;
        ha_slave_close(h, uv_strerror(rc));
        return;
    }
    k->reported = off;
    k->last_report = ha_now_ms();
}

/* The message records in [from, to) of s's commit log (the log line of
 * a truncation says what it drops); blanks are not counted. */
static int64_t
count_records(struct store *s, int64_t from, int64_t to)
{
    struct commitlog *cl = &s->clog;
    int64_t fs = (int64_t)cl->file_size;
    int64_t n = 0;
    int64_t pos = from;
    while (pos < to) {
        const uint8_t *p;
        struct mfile *mf = clog_pin(cl, pos, 8, &p);
        if (mf == NULL)
            break;
        uint32_t size = be32_get(p);
        uint32_t magic = be32_get(p + 4);
        mfile_unpin(mf);
        int64_t fend = pos - pos % fs + fs;
        if (magic == CLOG_BLANK_MAGIC) {
            pos = fend;
            continue;
        }
        if (magic != CLOG_MAGIC || size < 8 || (int64_t)size > fend - pos)
            break;
        n++;
        pos += size;
    }
    return n;
}

/* One frame.  false: the connection was closed. */
static bool
on_frame(struct ha *h, int64_t phy, const uint8_t *body, size_t n)
{
    struct ha_client *k = &h->cli;
    struct store *s = h->s;
    int64_t raw = store_replica_end(s);
    char why[300];
    if (phy < 0) {
        snprintf(why, sizeof(why), "frame at offset %" PRId64, phy);
        ha_slave_close(h, why);
        return false;
    }
    if (phy < raw) {
        int64_t recs = count_records(s, phy, raw);
        log_warn("HA: this slave's log (end %" PRId64 ") is ahead of master "
                 "%s (%" PRId64 "): truncating to %" PRId64 ", dropping %"
                 PRId64 " bytes (%" PRId64 " messages)%s", raw, k->addr,
                 phy, phy, raw - phy, recs,
                 k->trunc_to >= 0 ? ", past the last epoch it shares with the master" : "");
        k->trunc_to = -1;
        if (store_replica_truncate(s, phy) != 0) {
            snprintf(why, sizeof(why), "cannot truncate: %s", err_msg());
            ha_slave_close(h, why);
            return false;
        }
        uv_mutex_lock(&h->mu);
        h->st.truncations++;
        uv_mutex_unlock(&h->mu);
        raw = phy;
    } else if (phy > raw && raw != 0) {
        snprintf(why, sizeof(why), "master sent offset %" PRId64 ", this slave "
                 "has up to %" PRId64 " (a gap)", phy, raw);
        ha_slave_close(h, why);
        return false;
    }
    if (n > 0 || phy != raw) {
        if (store_replica_append(s, phy, body, n) != 0) {
            snprintf(why, sizeof(why), "cannot append %zu bytes at %" PRId64
                     ": %s", n, phy, err_msg());
            ha_slave_close(h, why);
            return false;
        }
    }
    uv_mutex_lock(&h->mu);
    h->st.master_offset = phy + (int64_t)n;
    uv_mutex_unlock(&h->mu);
    k->backoff_ms = 1000;
    return true;
}

static void
on_alloc(uv_handle_t *hd, size_t sz, uv_buf_t *b)
{
    struct ha *h = hd->data;
    struct ha_client *k = &h->cli;
    *b = uv_buf_init((char *)k->buf + k->len, (unsigned)(HA_SLAVE_BUF - k->len));
}

static void
on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct ha *h = st->data;
    if (h == NULL)
        return;
    struct ha_client *k = &h->cli;
    if (n < 0) {
        ha_slave_close(h, n == UV_EOF ? "the master closed the connection"
                                      : uv_strerror((int)n));
        return;
    }
    if (n == 0)
        return;
    k->last_read = ha_now_ms();
    k->len += (size_t)n;
    int64_t before = store_replica_end(h->s);
    size_t at = 0;
    while (k->len - at >= HA_HEADER) {
        const uint8_t *p = k->buf + at;
        int64_t phy = (int64_t)be64_get(p);
        uint32_t size = be32_get(p + 8);
        if ((size_t)size > HA_SLAVE_BUF - HA_HEADER) {
            char why[96];
            snprintf(why, sizeof(why), "frame of %u bytes (larger than the "
                     "%d-byte buffer)", size, HA_SLAVE_BUF);
            ha_slave_close(h, why);
            return;
        }
        if (k->len - at < HA_HEADER + (size_t)size)
            break;
        if (!on_frame(h, phy, p + HA_HEADER, size))
            return;
        at += HA_HEADER + size;
    }
    if (at > 0) {
        memmove(k->buf, k->buf + at, k->len - at);
        k->len -= at;
    }
    if (store_replica_end(h->s) != before)
        report(h);
}

/* This end of the connection, "ip:port" as the master's log and stats
 * name the peer (conn_peer_name's format): the broker tells the master
 * which connection is its own (rmq.broker.replica_role). */
static void
local_name(const uv_tcp_t *tcp, char *out, size_t n)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof(ip));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof(ip));
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(out, n, "%s:%d", ip, port);
}

static void
on_connected(uv_connect_t *req, int status)
{
    struct ha *h = req->data;
    struct ha_client *k = &h->cli;
    if (req->handle->data == NULL)
        return;   /* closed meanwhile */
    k->connecting = false;
    if (status != 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot connect: %s", uv_strerror(status));
        ha_slave_close(h, why);
        return;
    }
    k->buf = malloc(HA_SLAVE_BUF);
    if (k->buf == NULL) {
        ha_slave_close(h, "out of memory");
        return;
    }
    k->len = 0;
    k->connected = true;
    k->last_read = ha_now_ms();
    (void)uv_tcp_nodelay(k->tcp, 1);
    log_info("HA: connected to master %s; this slave's offset is %" PRId64,
             k->addr, store_replica_end(h->s));
    char local[64];
    local_name(k->tcp, local, sizeof(local));
    uv_mutex_lock(&h->mu);
    h->st.connected = true;
    snprintf(h->st.local, sizeof(h->st.local), "%s", local);
    uv_mutex_unlock(&h->mu);
    if (uv_read_start((uv_stream_t *)k->tcp, on_alloc, on_read) != 0) {
        ha_slave_close(h, "cannot read");
        return;
    }
    report(h);
}

/* "host:port" (the last ':' splits; [v6] allowed) -> sockaddr. */
static int
parse_addr(const char *s, struct sockaddr_storage *ss)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return -1;
    char host[128];
    size_t hn = (size_t)(colon - s);
    if (s[0] == '[' && hn >= 2 && s[hn - 1] == ']') {
        s++;
        hn -= 2;
    }
    if (hn >= sizeof(host))
        return -1;
    memcpy(host, s, hn);
    host[hn] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        return -1;
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return -1;
}

static void
connect_master(struct ha *h)
{
    struct ha_client *k = &h->cli;
    uv_mutex_lock(&h->mu);
    snprintf(k->addr, sizeof(k->addr), "%s", h->want_master);
    snprintf(h->st.master, sizeof(h->st.master), "%s", k->addr);
    uv_mutex_unlock(&h->mu);
    if (k->addr[0] == '\0')
        return;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (parse_addr(k->addr, &ss) != 0) {
        log_warn("HA: master address '%s' is not host:port with a numeric "
                 "host; not connecting", k->addr);
        k->retry_at = ha_now_ms() + HA_RECONNECT_MAX_MS;
        return;
    }
    k->tcp = malloc(sizeof(*k->tcp));
    if (k->tcp == NULL || uv_tcp_init(&h->loop, k->tcp) != 0) {
        free(k->tcp);
        k->tcp = NULL;
        k->retry_at = ha_now_ms() + HA_RECONNECT_MAX_MS;
        return;
    }
    k->tcp->data = h;
    k->conn_req.data = h;
    k->connecting = true;
    uv_mutex_lock(&h->mu);
    h->st.reconnects++;
    uv_mutex_unlock(&h->mu);
    int rc = uv_tcp_connect(&k->conn_req, k->tcp, (struct sockaddr *)&ss, on_connected);
    if (rc != 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot connect: %s", uv_strerror(rc));
        ha_slave_close(h, why);
    }
}

void
ha_slave_master_changed(struct ha *h, const char *addr)
{
    struct ha_client *k = &h->cli;
    if (k->tcp != NULL && strcmp(k->addr, addr) == 0)
        return;
    if (k->tcp != NULL) {
        char why[320];
        snprintf(why, sizeof(why), "the master's HA address is now '%s'", addr);
        ha_slave_close(h, why);
    }
    k->backoff_ms = 1000;
    k->retry_at = 0;
    connect_master(h);
}

void
ha_slave_role(struct ha *h, bool slave, const char *addr, int64_t trunc)
{
    struct ha_client *k = &h->cli;
    if (!slave) {
        if (k->tcp != NULL)
            ha_slave_close(h, "this broker is the master now");
        h->conf.slave = false;
        k->trunc_to = -1;
        uv_mutex_lock(&h->mu);
        h->st.master[0] = '\0';
        uv_mutex_unlock(&h->mu);
        return;
    }
    h->conf.slave = true;
    if (k->tcp != NULL)
        ha_slave_close(h, "the role changed (a new master or epoch)");
    k->trunc_to = trunc;
    k->backoff_ms = 1000;
    k->retry_at = 0;
    connect_master(h);
}

void
ha_slave_tick(struct ha *h, int64_t now)
{
    struct ha_client *k = &h->cli;
    if (k->tcp == NULL) {
        if (now >= k->retry_at)
            connect_master(h);
        return;
    }
    if (!k->connected)
        return;
    if (now - k->last_read > h->conf.housekeeping_ms) {
        char why[96];
        snprintf(why, sizeof(why), "nothing read for %d ms", h->conf.housekeeping_ms);
        ha_slave_close(h, why);
        return;
    }
    if (now - k->last_report >= h->conf.heartbeat_ms)
        report(h);
}
