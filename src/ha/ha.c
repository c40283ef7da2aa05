/*
 * ha: the replication service's thread and loop (see ha.h).  The loop
 * runs one timer (every 100 ms: heartbeats, housekeeping, the slave's
 * reports and reconnects), the master's listener and connections, the
 * slave's connection, and a poll on the store's "new data" eventfd that
 * the put path signals at most once per pass (store_ha_appended), so a
 * send never waits for a timer to be replicated.
 */
#include "ha/ha_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "store/replica.h"
#include "store/store.h"

#define TICK_MS 100

int64_t
ha_now_ms(void)
{
    return clock_mono_ns() / 1000000;
}

static void
on_tick(uv_timer_t *t)
{
    struct ha *h = t->data;
    int64_t now = ha_now_ms();
    if (h->conf.slave)
        ha_slave_tick(h, now);
    ha_master_tick(h, now);
}

static void
on_data(uv_poll_t *p, int status, int events)
{
    struct ha *h = p->data;
    uint64_t n;
    /* Drained before the pass: an append after this signals again. */
    while (read(h->data_fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
        ;
    store_ha_woken(h->s);
    ha_master_pump_all(h);
}

static void
close_walk(uv_handle_t *hd, void *arg)
{
    if (!uv_is_closing(hd))
        uv_close(hd, NULL);
}

static void
on_wake(uv_async_t *a)
{
    struct ha *h = a->data;
    uv_mutex_lock(&h->mu);
    bool stop = h->stop;
    bool changed = h->master_changed;
    bool peers = h->peers_changed;
    bool role = h->role_changed;
    bool want_slave = h->want_slave;
    int64_t trunc = h->want_trunc;
    char addr[256];
    memcpy(addr, h->want_master, sizeof(addr));
    h->master_changed = false;
    h->peers_changed = false;
    h->role_changed = false;
    uv_mutex_unlock(&h->mu);
    if (stop) {
        if (h->conf.slave)
            ha_slave_close(h, NULL);
        ha_master_close_all(h);
        uv_walk(&h->loop, close_walk, NULL);
        return;
    }
    if (role)
        ha_slave_role(h, want_slave, addr, trunc);
    else if (changed && h->conf.slave)
        ha_slave_master_changed(h, addr);
    if (peers) {
        ha_master_peers_changed(h);
        ha_master_recount(h);
    }
}

static void
thread_main(void *arg)
{
    struct ha *h = arg;
    log_set_thread_name("ha");
    uv_run(&h->loop, UV_RUN_DEFAULT);
}

struct ha *
ha_start(struct store *s, const struct ha_conf *c)
{
    struct ha *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        err_set("out of memory");
        return NULL;
    }
    h->s = s;
    store_ref(s);
    h->conf = *c;
    h->data_fd = -1;
    q_init(&h->conns);
    q_init(&h->held);
    h->cli.reported = -1;
    h->cli.trunc_to = -1;
    h->cli.backoff_ms = 1000;
    if (uv_mutex_init(&h->mu) != 0 || uv_loop_init(&h->loop) != 0) {
        err_set("cannot create the HA loop");
        free(h);
        return NULL;
    }
    int rc = uv_async_init(&h->loop, &h->wake, on_wake);
    if (rc == 0)
        rc = uv_timer_init(&h->loop, &h->tick);
    if (rc != 0) {
        err_set("cannot create the HA loop's handles: %s", uv_strerror(rc));
        goto fail;
    }
    h->wake.data = h;
    h->tick.data = h;
    /* A slave listens too, as 4.9.8's does: a slave of a slave works. */
    {
        if (ha_master_listen(h) != 0)
            goto fail;
        h->data_fd = store_ha_wake_fd(s);
        if (h->data_fd < 0 ||
            uv_poll_init(&h->loop, &h->data_poll, h->data_fd) != 0 ||
            uv_poll_start(&h->data_poll, UV_READABLE, on_data) != 0) {
            err_set("cannot watch the store for new data");
            goto fail;
        }
        h->data_poll.data = h;
    }
    if (c->slave) {
        snprintf(h->want_master, sizeof(h->want_master), "%s", c->master_addr);
        h->master_changed = c->master_addr[0] != '\0';
        h->st.master[0] = '\0';
    }
    if (uv_timer_start(&h->tick, on_tick, TICK_MS, TICK_MS) != 0)
        goto fail;
    if (h->master_changed)
        (void)uv_async_send(&h->wake);
    if (uv_thread_create(&h->thread, thread_main, h) != 0) {
        err_set("cannot start the HA thread");
        goto fail;
    }
    h->thread_started = true;
    return h;
fail:
    uv_walk(&h->loop, close_walk, NULL);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&h->loop);
    uv_mutex_destroy(&h->mu);
    store_unref(s);
    free(h);
    return NULL;
}

void
ha_set_master(struct ha *h, const char *addr)
{
    uv_mutex_lock(&h->mu);
    if (strcmp(h->want_master, addr) != 0) {
        snprintf(h->want_master, sizeof(h->want_master), "%s", addr);
        h->master_changed = true;
        (void)uv_async_send(&h->wake);
    }
    uv_mutex_unlock(&h->mu);
}

/* A ';'-separated list as ";a;b;" in buf (HA_PEERS_MAX bytes), so that
 * a peer matches as ";ip;"; spaces dropped; a list past the buffer loses
 * its tail (conf and Lua keep it far below).  An empty list gives ";;"
 * when empty_sep, else "".  Returns the length without the NUL. */
static size_t
peer_list(char *buf, const char *list, bool empty_sep)
{
    size_t n = 0;
    if (list[0] == '\0' && !empty_sep) {
        buf[0] = '\0';
        return 0;
    }
    buf[n++] = ';';
    for (const char *p = list; *p != '\0' && n < HA_PEERS_MAX - 2; p++)
        if (*p != ' ')
            buf[n++] = *p;
    buf[n++] = ';';
    buf[n] = '\0';
    return n;
}

void
ha_set_peers(struct ha *h, const char *list)
{
    char buf[HA_PEERS_MAX];
    size_t n = peer_list(buf, list, true);
    uv_mutex_lock(&h->mu);
    memcpy(h->peers, buf, n + 1);
    h->peers_changed = true;
    (void)uv_async_send(&h->wake);
    uv_mutex_unlock(&h->mu);
}

void
ha_set_role(struct ha *h, bool slave, const char *addr, int64_t trunc)
{
    uv_mutex_lock(&h->mu);
    snprintf(h->want_master, sizeof(h->want_master), "%s", slave ? addr : "");
    h->want_slave = slave;
    h->want_trunc = slave ? trunc : -1;
    h->role_changed = true;
    h->master_changed = false;
    (void)uv_async_send(&h->wake);
    uv_mutex_unlock(&h->mu);
}

void
ha_set_min_acks(struct ha *h, int n)
{
    uv_mutex_lock(&h->mu);
    h->min_acks = n;
    h->peers_changed = true;   /* (the loop recounts the acks) */
    (void)uv_async_send(&h->wake);
    uv_mutex_unlock(&h->mu);
}

void
ha_set_ack_peers(struct ha *h, const char *list)
{
    char buf[HA_PEERS_MAX];
    size_t n = peer_list(buf, list, false);
    uv_mutex_lock(&h->mu);
    memcpy(h->ack_peers, buf, n + 1);
    h->ack_gen++;
    h->peers_changed = true;   /* (the loop recounts the acks) */
    (void)uv_async_send(&h->wake);
    uv_mutex_unlock(&h->mu);
}

bool
ha_take_refresh(struct ha *h)
{
    uv_mutex_lock(&h->mu);
    bool want = h->want_refresh;
    h->want_refresh = false;
    uv_mutex_unlock(&h->mu);
    return want;
}

int
ha_stats(struct ha *h, struct ha_stats *st, struct ha_slave_info *out, int max)
{
    uv_mutex_lock(&h->mu);
    *st = h->st;
    int n = ha_master_stats(h, out, max);
    uv_mutex_unlock(&h->mu);
    st->port = h->port;
    st->conns = store_ha_conns(h->s);
    st->acked = store_ha_acked(h->s);
    st->max_phy = store_max_phy(h->s);
    /* (conf.slave changes on the loop thread: ha_set_role) */
    st->raw_end = store_replica_end(h->s);
    return n;
}

void
ha_stop(struct ha *h)
{
    if (h == NULL)
        return;
    uv_mutex_lock(&h->mu);
    h->stop = true;
    uv_mutex_unlock(&h->mu);
    (void)uv_async_send(&h->wake);
    if (h->thread_started)
        uv_thread_join(&h->thread);
    (void)uv_loop_close(&h->loop);
    uv_mutex_destroy(&h->mu);
    free(h->cli.buf);
    store_unref(h->s);
    free(h);
}
