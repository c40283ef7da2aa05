/* replica: the store's side of HA replication (see replica.h). */
#include "store/replica.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "store/consumequeue.h"
#include "store/recover.h"

int64_t
store_replica_end(struct store *s)
{
    return clog_raw_end(&s->clog);
}

/* A replicated record's queue entry.  A queue that starts empty at a
 * later offset (a slave copying from its master's last file) begins
 * there, as RocketMQ corrects a queue's minimum to the log's. */
static int
dispatch(void *arg, const struct clog_view *v, int64_t phy)
{
    struct store *s = arg;
    struct cq *c = NULL;
    int tx = v->sysflag & SYSFLAG_TX_MASK;
    if (tx != SYSFLAG_TX_PREPARED && tx != SYSFLAG_TX_ROLLBACK)
        c = cqt_get(&s->cqs, (const char *)v->topic, v->topic_len, v->qid);
    if (c != NULL) {
        /* The master's bytes decide the queue offset: a gap past the
         * queue's end would make cq_write create every file up to it (a
         * peer posing as the master could fill the disk), and an offset
         * past INT64_MAX / CQ_UNIT overflows its byte position. */
        int64_t max = cq_max(c);
        if (v->qoff < 0 || v->qoff > INT64_MAX / CQ_UNIT - 1 || (max > 0 && v->qoff > max)) {
            err_set("replicated record at %" PRId64 " (%.*s queue %d) has queue offset %" PRId64
                    ", the queue ends at %" PRId64, phy, (int)v->topic_len, (const char *)v->topic,
                    (int)v->qid, v->qoff, max);
            return -EINVAL;
        }
    }
    bool fresh = c != NULL && cq_max(c) == 0 && v->qoff > 0;
    int rc = store_redispatch(s, v, phy);
    if (rc == 0 && fresh)
        atomic_store_explicit(&c->min, v->qoff, memory_order_release);
    return rc;
}

int
store_replica_append(struct store *s, int64_t phy, const uint8_t *data,
                     size_t len)
{
    return clog_append_raw(&s->clog, phy, data, len, dispatch, s);
}

struct trunc_arg {
    int64_t end;
};

static int
truncate_queue(struct cq *c, void *arg)
{
    struct trunc_arg *a = arg;
    cq_truncate(c, a->end, true);
    return 0;
}

int
store_replica_truncate(struct store *s, int64_t end)
{
    struct commitlog *cl = &s->clog;
    slock_lock(&cl->lock);
    int64_t min = clog_min(cl);
    if (end < min) {
        slock_unlock(&cl->lock);
        err_set("cannot truncate to %" PRId64 ": the log starts at %" PRId64,
                end, min);
        return -EINVAL;
    }
    /* Through the index: it resumes at `end` if it had read past it. */
    int rc = ix_cut_log(&s->ix, cl, end, true);
    struct trunc_arg a = { end };
    cqt_foreach(&s->cqs, truncate_queue, &a);
    slock_unlock(&cl->lock);
    /* Before anything new is appended past `end`: the checkpoint's safe
     * points must not name offsets that the new records will fill (a
     * crash would start the recovery's scan inside one).  Lowered even
     * when the cut failed: an earlier safe point only scans more. */
    store_log_cut(s, end);
    if (rc != 0)
        log_warn("truncating the commit log to %" PRId64 ": %s", end, err_msg());
    /* Stale bytes past the new end would come back at the next recovery:
     * the caller closes the connection and retries. */
    return rc;
}

void
store_ha_ack(struct store *s, int64_t off)
{
    int64_t cur = atomic_load(&s->ha_acked);
    while (cur < off && !atomic_compare_exchange_weak(&s->ha_acked, &cur, off))
        ;
    flusher_poke(&s->flusher);
}

int64_t
store_ha_acked(struct store *s)
{
    return atomic_load_explicit(&s->ha_acked, memory_order_acquire);
}

void
store_ha_conns_add(struct store *s, int delta)
{
    atomic_fetch_add(&s->ha_conns, delta);
    flusher_poke(&s->flusher);
}

int
store_ha_conns(struct store *s)
{
    return atomic_load(&s->ha_conns);
}

bool
store_slave_ok(struct store *s, int64_t end)
{
    return store_ha_conns(s) > 0 &&
           end - store_ha_acked(s) < s->conf.ha_fallbehind_max;
}

int
store_ha_wake_fd(struct store *s)
{
    pthread_mutex_lock(&s->state_mu);
    int fd = atomic_load(&s->ha_wake_fd);
    if (fd < 0) {
        fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) {
            fd = -errno;
            err_set("eventfd: %s", strerror(errno));
        } else {
            atomic_store(&s->ha_wake_fd, fd);
        }
    }
    pthread_mutex_unlock(&s->state_mu);
    return fd;
}

void
store_ha_signal(struct store *s)
{
    if (atomic_exchange_explicit(&s->ha_wake_pending, true, memory_order_acq_rel))
        return;
    int fd = atomic_load(&s->ha_wake_fd);
    uint64_t one = 1;
    /* EAGAIN: the counter is full of wake-ups already. */
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        atomic_store(&s->ha_wake_pending, false);
}

void
store_ha_woken(struct store *s)
{
    atomic_store_explicit(&s->ha_wake_pending, false, memory_order_release);
}
