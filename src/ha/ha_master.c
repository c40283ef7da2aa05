/*
 * ha_master: the master's side of replication (HAConnection's read and
 * write services, on the HA loop).
 *
 * A slave's stream is 8-byte big-endian offsets; the first is where it
 * wants data from (0: a new slave, which gets the master's last file as
 * 4.9.8 does, or the whole log with transfer_from_min), every one is an
 * acknowledgement.  We send nothing before the first.  Then frames of at
 * most batch_size bytes that never cross a file, written from the pinned
 * mapping (no copy), one write in flight per slave; a 12-byte heartbeat
 * (size 0) after heartbeat_ms without a write.
 *
 * Bad input: a negative offset, one beyond this log's end (after the
 * first), or one going backwards closes the connection with a log line;
 * so does a slave silent for housekeeping_ms.  A first offset beyond our
 * end is a slave that is ahead of us (its old master had more): we send
 * from our end so that it truncates, and do not count it as an ack.
 */
#include "ha/ha_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "net/conn.h"
#include "net/listen.h"
#include "store/mfile.h"
#include "store/replica.h"
#include "store/store.h"

static void pump(struct ha_conn *c);

static void
slave_freed(uv_handle_t *hd)
{
    struct ha_conn *c = hd->data;
    if (c->pinned != NULL)
        mfile_unpin(c->pinned);
    free(c);
}

static void
slave_close(struct ha_conn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = true;
    struct ha *h = c->h;
    if (why != NULL)
        log_warn("HA: closing the connection of slave %s: %s", c->peer, why);
    uv_mutex_lock(&h->mu);
    q_remove(&c->link);
    h->nconns--;
    uv_mutex_unlock(&h->mu);
    store_ha_conns_add(h->s, -1);
    /* A write in flight ends with an error; its pin goes with c. */
    uv_close((uv_handle_t *)&c->tcp, slave_freed);
}

static void
on_written(uv_write_t *w, int status)
{
    struct ha_conn *c = w->data;
    c->writing = false;
    if (c->pinned != NULL) {
        mfile_unpin(c->pinned);
        c->pinned = NULL;
    }
    if (c->closing)
        return;
    if (status != 0) {
        char why[128];
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
        slave_close(c, why);
        return;
    }
    c->last_write = ha_now_ms();
    pump(c);
}

static void
send_frame(struct ha_conn *c, int64_t phy, const uint8_t *p, size_t n,
           struct mfile *pin)
{
    be64_put(c->hdr, (uint64_t)phy);
    be32_put(c->hdr + 8, (uint32_t)n);
    uv_buf_t b[2] = { uv_buf_init((char *)c->hdr, HA_HEADER),
                      uv_buf_init((char *)(uintptr_t)p, (unsigned)n) };
    c->wr.data = c;
    c->pinned = pin;
    c->writing = true;
    int rc = uv_write(&c->wr, (uv_stream_t *)&c->tcp, b, n > 0 ? 2 : 1, on_written);
    if (rc != 0) {
        c->writing = false;
        if (pin != NULL)
            mfile_unpin(pin);
        c->pinned = NULL;
        char why[128];
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(rc));
        slave_close(c, why);
    }
}

/* Sends the next frame if one is due and nothing is in flight. */
static void
pump(struct ha_conn *c)
{
    if (c->closing || c->writing || c->next < 0)
        return;
    struct ha *h = c->h;
    struct commitlog *cl = &h->s->clog;
    int64_t wrote = clog_wrote(cl);
    if (wrote <= c->next)
        return;
    if (c->next < clog_min(cl)) {
        char why[160];
        snprintf(why, sizeof(why), "it needs offset %" PRId64 ", which "
                 "retention deleted (the log starts at %" PRId64 ")",
                 c->next, clog_min(cl));
        slave_close(c, why);
        return;
    }
    int64_t fend = clog_roll_next(cl, c->next);
    int64_t n = wrote - c->next;
    if (n > fend - c->next)
        n = fend - c->next;
    if (n > h->conf.batch_size)
        n = h->conf.batch_size;
    const uint8_t *p;
    struct mfile *mf = clog_pin(cl, c->next, (size_t)n, &p);
    if (mf == NULL) {
        slave_close(c, "its data is no longer in the commit log");
        return;
    }
    int64_t at = c->next;
    /* A slave behind reads the log like a lagging consumer: its pages
     * stay cached (store/readers.h). */
    readers_note_ha(&h->s->readers, at);
    uv_mutex_lock(&h->mu);
    c->next += n;
    uv_mutex_unlock(&h->mu);
    send_frame(c, at, p, (size_t)n, mf);
}

/* Feeds the store what counts as acknowledged after c acknowledged v:
 * with members named (ha_set_ack_peers) what every one of them
 * acknowledged, each counted once (ha_acks); else v itself (4.x: any one
 * slave), or with min_acks n > 1 the n-th largest acknowledgement among
 * the connected slaves (every one of n has it). */
static void
feed_ack(struct ha *h, int64_t v)
{
    uv_mutex_lock(&h->mu);
    int n = h->min_acks;
    bool named = h->ack_peers[0] != '\0';
    int parsed = 0;
    if (named && h->acks_gen != h->ack_gen) {
        /* (once per list: a member joins or leaves) */
        parsed = ha_acks_parse(&h->acks, h->ack_peers) == 0 ? 1 : -1;
        h->acks_gen = h->ack_gen;
    }
    uv_mutex_unlock(&h->mu);
    if (parsed < 0)
        log_error("HA: the SyncStateSet members' connections: %s; no send is acknowledged until the "
                  "next list", err_msg());
    if (named) {
        /* Members, not connections: a member's two live connections (a
         * reconnect whose old connection has not closed yet) must not
         * stand in for a member without one.  A connection's member is
         * looked up once per list (O(log n) in the names, whatever the
         * peers chose), not per acknowledgement. */
        ha_acks_reset(&h->acks);
        struct qnode *pos;
        struct qnode *tmp;
        q_foreach_safe(pos, tmp, &h->conns) {
            struct ha_conn *c = container_of(pos, struct ha_conn, link);
            if (c->closing)
                continue;
            if (c->member_gen != h->acks_gen) {
                c->member = ha_acks_member(&h->acks, c->peer);
                c->member_gen = h->acks_gen;
            }
            ha_acks_add(&h->acks, c->member, c->seq, c->ack);
        }
        int64_t low = ha_acks_low(&h->acks);
        if (low >= 0)
            store_ha_ack(h->s, low);
        return;
    }
    if (n <= 1) {
        if (v >= 0)
            store_ha_ack(h->s, v);
        return;
    }
    /* The n largest acks, descending (n <= haMaxSlaves connections). */
    int64_t top[64];
    if (n > (int)(sizeof(top) / sizeof(top[0])))
        return;   /* (more members than slaves can connect: never) */
    int have = 0;
    struct qnode *pos;
    struct qnode *tmp;
    q_foreach_safe(pos, tmp, &h->conns) {
        struct ha_conn *c = container_of(pos, struct ha_conn, link);
        if (c->ack < 0 || c->closing)
            continue;
        int i;
        if (have < n)
            i = have++;
        else if (c->ack > top[n - 1])
            i = n - 1;
        else
            continue;
        /* insert c->ack at i, keeping top[0..have) descending */
        while (i > 0 && top[i - 1] < c->ack) {
            top[i] = top[i - 1];
            i--;
        }
        top[i] = c->ack;
    }
    if (have >= n)
        store_ha_ack(h->s, top[n - 1]);
}

void
ha_master_recount(struct ha *h)
{
    feed_ack(h, -1);
}

/* One offset from the slave. false: the connection was closed. */
static bool
on_offset(struct ha_conn *c, int64_t v)
{
    struct ha *h = c->h;
    struct store *s = h->s;
    int64_t max = store_max_phy(s);
    char why[200];
    if (v < 0) {
        snprintf(why, sizeof(why), "it reported offset %" PRId64
                 " (not an HA slave?)", v);
        slave_close(c, why);
        return false;
    }
    if (c->request < 0) {
        int64_t from = v;
        if (v == 0) {
            int64_t fs = (int64_t)s->clog.file_size;
            /* The end when it connected, not now: a slave held while
             * the master asked the NameServers must not lose the bytes
             * written meanwhile (it would never have the whole file). */
            int64_t at = c->accept_max >= 0 && c->accept_max <= max ? c->accept_max : max;
            from = h->conf.transfer_from_min ? clog_min(&s->clog) : at - at % fs;
        } else if (v > max) {
            log_warn("HA: slave %s is ahead of this master (offset %" PRId64
                     " > %" PRId64 "): sending from %" PRId64 " so that it "
                     "truncates", c->peer, v, max, max);
            from = max;
        } else if (v < clog_min(&s->clog)) {
            snprintf(why, sizeof(why), "it asks for offset %" PRId64 ", older "
                     "than this log's first (%" PRId64 ")", v, clog_min(&s->clog));
            slave_close(c, why);
            return false;
        }
        uv_mutex_lock(&h->mu);
        c->request = v;
        c->next = from;
        c->ack = v > max ? -1 : v;
        c->ahead = v > max;
        uv_mutex_unlock(&h->mu);
        log_info("HA: slave %s requests offset %" PRId64 "; sending from %"
                 PRId64, c->peer, v, from);
        if (v <= max)
            feed_ack(h, v);
        else if (!c->writing)
            send_frame(c, from, NULL, 0, NULL);   /* so that it truncates now */
        return true;
    }
    if (c->ahead) {
        if (v > max)
            return true;   /* reported before it saw our first frame */
        c->ahead = false;
    }
    if (v > max) {
        snprintf(why, sizeof(why), "it acknowledged offset %" PRId64
                 ", beyond this log's end %" PRId64, v, max);
        slave_close(c, why);
        return false;
    }
    if (v > c->next && v > c->request) {
        /* An acknowledgement must be of bytes this connection sent (or
         * that the slave had when it connected): SYNC_MASTER answers on it. */
        snprintf(why, sizeof(why), "it acknowledged offset %" PRId64
                 ", beyond what it was sent (%" PRId64 ")", v, c->next);
        slave_close(c, why);
        return false;
    }
    if (c->ack >= 0 && v < c->ack) {
        snprintf(why, sizeof(why), "its offset went backwards (%" PRId64
                 " after %" PRId64 ")", v, c->ack);
        slave_close(c, why);
        return false;
    }
    uv_mutex_lock(&h->mu);
    c->ack = v;
    if (v >= max)
        c->caught_up = ha_now_ms();
    uv_mutex_unlock(&h->mu);
    feed_ack(h, v);
    return true;
}

static void
on_alloc(uv_handle_t *hd, size_t sz, uv_buf_t *b)
{
    struct ha_conn *c = hd->data;
    *b = uv_buf_init((char *)c->h->rscratch, sizeof(c->h->rscratch));
}

static void
on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct ha_conn *c = st->data;
    if (c->closing)
        return;
    if (n < 0) {
        if (n == UV_EOF)
            log_info("HA: slave %s disconnected", c->peer);
        slave_close(c, n == UV_EOF ? NULL : uv_strerror((int)n));
        return;
    }
    c->last_read = ha_now_ms();
    const uint8_t *p = (const uint8_t *)b->base;
    size_t left = (size_t)n;
    while (left > 0) {
        size_t take = 8 - (size_t)c->part_len;
        if (take > left)
            take = left;
        memcpy(c->part + c->part_len, p, take);
        c->part_len += (int)take;
        p += take;
        left -= take;
        if (c->part_len < 8)
            break;
        c->part_len = 0;
        if (!on_offset(c, (int64_t)be64_get(c->part)))
            return;
    }
    pump(c);
}

/* Is the peer ("ip:port", IPv4-mapped or not) in list (";ip;ip;")? */
static bool
list_has(const char *list, const char *peer)
{
    if (list[0] == '\0')
        return false;
    const char *colon = strrchr(peer, ':');
    if (colon == NULL)
        return false;
    size_t n = (size_t)(colon - peer);
    if (n > 7 && strncmp(peer, "::ffff:", 7) == 0 && memchr(peer + 7, '.', n - 7) != NULL) {
        peer += 7;
        n -= 7;
    }
    char want[80];
    if (n + 3 > sizeof(want))
        return false;
    want[0] = ';';
    memcpy(want + 1, peer, n);
    want[n + 1] = ';';
    want[n + 2] = '\0';
    return strstr(list, want) != NULL;
}

/* haAllowedAddresses, or the registered peers (ha_set_peers), or any
 * peer with haAllowAnyAddress (4.9.8 has no check at all: any host that
 * sends 8 bytes gets the commit log). */
static bool
peer_allowed(struct ha *h, const char *peer)
{
    if (h->conf.allow_any || list_has(h->conf.allowed, peer))
        return true;
    uv_mutex_lock(&h->mu);
    bool ok = list_has(h->peers, peer);
    uv_mutex_unlock(&h->mu);
    return ok;
}

/* "refusing" lines: at most one a second, then how many were not logged
 * (a peer reconnecting in a loop would write one per attempt). */
static void
log_refused(struct ha *h, const char *peer, const char *why)
{
    int64_t now = ha_now_ms();
    if (h->refused_log_ms != 0 && now - h->refused_log_ms < 1000) {
        h->refused_quiet++;
        return;
    }
    if (h->refused_quiet > 0)
        log_warn("HA: refusing peer %s: %s (and %lld more refused since the last line)", peer, why,
                 (long long)h->refused_quiet);
    else
        log_warn("HA: refusing peer %s: %s", peer, why);
    h->refused_log_ms = now;
    h->refused_quiet = 0;
}

static void
held_close(struct ha_conn *c, const char *why)
{
    struct ha *h = c->h;
    q_remove(&c->link);
    h->nheld--;
    c->held = false;
    if (why != NULL)
        log_refused(h, c->peer, why);
    uv_close((uv_handle_t *)&c->tcp, slave_freed);
}

#define NOT_KNOWN "not a broker registered for this brokerName at the NameServers, " \
                  "nor haMasterAddress or haAllowedAddresses"

/* Serves c (allowed), within haMaxSlaves. */
static void
serve(struct ha *h, struct ha_conn *c)
{
    if (h->nconns >= h->conf.max_slaves) {
        log_warn("HA: refusing slave %s: %d slaves connected already "
                 "(haMaxSlaves)", c->peer, h->nconns);
        uv_close((uv_handle_t *)&c->tcp, slave_freed);
        return;
    }
    (void)uv_tcp_nodelay(&c->tcp, 1);
    c->last_read = c->last_write = ha_now_ms();
    uv_mutex_lock(&h->mu);
    q_insert_tail(&h->conns, &c->link);
    h->nconns++;
    uv_mutex_unlock(&h->mu);
    store_ha_conns_add(h->s, 1);
    log_info("HA: slave %s connected", c->peer);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        slave_close(c, "cannot read from it");
}

static void
on_connection(uv_stream_t *srv, int status)
{
    struct ha *h = srv->data;
    if (status != 0) {
        log_warn("HA: accept failed: %s", uv_strerror(status));
        return;
    }
    struct ha_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || uv_tcp_init(&h->loop, &c->tcp) != 0) {
        free(c);
        log_error("HA: out of memory accepting a slave");
        return;
    }
    c->tcp.data = c;
    c->h = h;
    c->request = c->ack = c->next = -1;
    c->seq = ++h->conn_seq;
    c->member = -1;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, slave_freed);
        return;
    }
    conn_peer_name(&c->tcp, c->peer, sizeof(c->peer));
    c->accept_max = store_max_phy(h->s);
    if (peer_allowed(h, c->peer)) {
        serve(h, c);
        return;
    }
    /* Unknown: perhaps a slave that registered after the list was read.
     * Held, unread (not one byte is sent), while the broker asks the
     * NameServers again; a few at a time (haUnknownPeersMax), for
     * haUnknownPeerHoldMillis at most. */
    if (h->nheld >= h->conf.hold_max) {
        log_refused(h, c->peer, NOT_KNOWN " (and enough unknown peers wait already)");
        uv_close((uv_handle_t *)&c->tcp, slave_freed);
        return;
    }
    c->held = true;
    c->held_until = ha_now_ms() + h->conf.hold_ms;
    q_insert_tail(&h->held, &c->link);
    h->nheld++;
    uv_mutex_lock(&h->mu);
    h->want_refresh = true;
    uv_mutex_unlock(&h->mu);
}

void
ha_master_peers_changed(struct ha *h)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &h->held) {
        struct ha_conn *c = container_of(pos, struct ha_conn, link);
        if (peer_allowed(h, c->peer)) {
            q_remove(&c->link);
            h->nheld--;
            c->held = false;
            serve(h, c);
        }
    }
}

int
ha_master_listen(struct ha *h)
{
    int port = 0;
    int fd = listen_socket(h->conf.bind, h->conf.listen_port, 64, &port);
    if (fd < 0)
        return -1;  /* err_set() by listen_socket */
    int rc = uv_tcp_init(&h->loop, &h->server);
    if (rc == 0) {
        h->server.data = h;
        rc = uv_tcp_open(&h->server, fd);
        if (rc != 0)
            close(fd);
        h->listening = true;
    } else {
        close(fd);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->server, 64, on_connection);
    if (rc != 0) {
        err_set("HA: cannot listen on %s:%d: %s", h->conf.bind,
                h->conf.listen_port, uv_strerror(rc));
        return -1;
    }
    h->port = port;
    return 0;
}

void
ha_master_pump_all(struct ha *h)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &h->conns) {
        pump(container_of(pos, struct ha_conn, link));
    }
}

void
ha_master_tick(struct ha *h, int64_t now)
{
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &h->held) {
        struct ha_conn *c = container_of(pos, struct ha_conn, link);
        if (now >= c->held_until)
            held_close(c, NOT_KNOWN);
    }
    /* Ask again while a peer waits (the broker reads at most once a
     * second): a slave's registration may land after its connection. */
    if (!q_empty(&h->held)) {
        uv_mutex_lock(&h->mu);
        h->want_refresh = true;
        uv_mutex_unlock(&h->mu);
    }
    q_foreach_safe(pos, tmp, &h->conns) {
        struct ha_conn *c = container_of(pos, struct ha_conn, link);
        if (now - c->last_read > h->conf.housekeeping_ms) {
            char why[96];
            snprintf(why, sizeof(why), "nothing read for %d ms",
                     h->conf.housekeeping_ms);
            slave_close(c, why);
            continue;
        }
        pump(c);
        if (!c->closing && !c->writing && c->next >= 0 &&
            now - c->last_write > h->conf.heartbeat_ms)
            send_frame(c, c->next, NULL, 0, NULL);
    }
}

void
ha_master_close_all(struct ha *h)
{
    while (!q_empty(&h->held))
        held_close(container_of(h->held.next, struct ha_conn, link), NULL);
    while (!q_empty(&h->conns))
        slave_close(container_of(h->conns.next, struct ha_conn, link), NULL);
}

int
ha_master_stats(struct ha *h, struct ha_slave_info *out, int max)
{
    int n = 0;
    struct qnode *pos;
    struct qnode *tmp;
    q_foreach_safe(pos, tmp, &h->conns) {
        struct ha_conn *c = container_of(pos, struct ha_conn, link);
        if (n < max) {
            snprintf(out[n].addr, sizeof(out[n].addr), "%s", c->peer);
            out[n].request = c->request;
            out[n].ack = c->ack;
            out[n].next = c->next;
            out[n].caught_up_ago = c->caught_up > 0 ? ha_now_ms() - c->caught_up : -1;
        }
        n++;
    }
    return n;
}
