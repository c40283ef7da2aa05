/* flush: the commit log flush thread and group commit (see flush.h). */
#include "store/flush.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"

#define PAGE 4096
#define FLUSH_ALIGN (2 << 20)  /* a huge page / large folio */

/* Syncs [from, to) of the log, file by file.  Pages below `behind`
 * (whole 2 MiB blocks the writer has left) are unmapped first: see
 * mfile_drop_pages() for why. */
static int
sync_range(struct commitlog *cl, int64_t from, int64_t to, int64_t behind)
{
    int64_t pos = from;
    while (pos < to) {
        struct mfile *mf = mfq_find(&cl->q, pos);
        if (mf == NULL) {
            /* Deleted by retention: already durable or gone. */
            pos = clog_roll_next(cl, pos);
            continue;
        }
        int64_t fend = mf->start + (int64_t)mf->size;
        int64_t end = to < fend ? to : fend;
        int64_t drop = behind < end ? behind : end;
        if (drop > pos)
            mfile_drop_pages(mf, (size_t)(pos - mf->start),
                             (size_t)(drop - mf->start));
        int rc = mfile_sync(mf, (size_t)(pos - mf->start),
                            (size_t)(end - mf->start));
        mfile_unpin(mf);
        if (rc != 0)
            return rc;
        pos = end;
    }
    return 0;
}

/*
 * Drops the page cache of the log more than drop_behind bytes below
 * `flushed` (durable, so clean), in steps of at least DROP_STEP.  Why:
 * a write into the page cache costs most of a large message's CPU when
 * it needs a new page (on this kind of host, a page free for a while
 * costs a trip to the hypervisor on first touch); pages freed here come
 * back to the writer hot.
 *
 * Not above what a reader still needs (conf.reader_floor: the lowest
 * position a consumer or a slave read at lately, store/readers.h), or
 * it would read its backlog from the disk; but a reader holds at most
 * conf.reader_max bytes (the span RocketMQ counts as in memory: a
 * consumer further behind reads from the disk anyway).  When a reader
 * turns up below what was dropped already, the pages it reads in come
 * back into the cache: `dropped` goes down to it, so they are dropped
 * again once every reader has passed them.  Flush thread only.
 */
#define DROP_STEP (8 << 20)

static void
drop_behind(struct flusher *f, int64_t flushed)
{
    if (f->conf.drop_behind <= 0)
        return;
    int64_t to = flushed - f->conf.drop_behind;
    if (f->conf.reader_floor != NULL) {
        /* At every flush, not only when a drop is due: a reader seen
         * once below `dropped` brings pages back that must go again. */
        int64_t keep = f->conf.reader_floor(f->conf.reader_arg);
        if (keep < flushed - f->conf.reader_max)
            keep = flushed - f->conf.reader_max;
        if (keep < to)
            to = keep;
        if (keep < f->dropped)
            f->dropped = keep;
    }
    int64_t pos = f->dropped > clog_min(f->cl) ? f->dropped : clog_min(f->cl);
    if (to - pos < DROP_STEP)
        return;
    while (pos < to) {
        struct mfile *mf = mfq_find(&f->cl->q, pos);
        if (mf == NULL) {
            pos = clog_roll_next(f->cl, pos);
            continue;
        }
        int64_t fend = mf->start + (int64_t)mf->size;
        int64_t end = to < fend ? to : fend;
        /* From the 2 MiB block `pos` is in: a large folio that the last
         * step's end cut through was kept whole then (the kernel drops
         * only folios wholly in the range), and goes now. */
        size_t from = (size_t)(pos - mf->start);
        mfile_drop_cache(mf, from - from % FLUSH_ALIGN, (size_t)(end - mf->start));
        mfile_unpin(mf);
        pos = end;
    }
    f->dropped = to;
}

/* The start of the 2 MiB block the writer is in: everything below it is
 * left behind for good. */
static int64_t
behind_writer(struct flusher *f)
{
    int64_t w = clog_wrote(f->cl);
    return w - w % FLUSH_ALIGN;
}

static void
publish(struct flusher *f, int64_t upto)
{
    int64_t cur = atomic_load(&f->flushed);
    while (cur < upto &&
           !atomic_compare_exchange_weak(&f->flushed, &cur, upto))
        ;
    flusher_poke(f);
}

int
flusher_flush_now(struct flusher *f)
{
    /* Staged bytes first: a flush covers what was put so far. */
    int rc = clog_commit(f->cl);
    if (rc != 0)
        return rc;
    int64_t w = clog_wrote(f->cl);
    int64_t from = flusher_flushed(f);
    if (w <= from)
        return 0;
    rc = sync_range(f->cl, from, w, behind_writer(f));
    if (rc == 0)
        publish(f, w);
    return rc;
}

static void
wait_ms(struct flusher *f, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&f->cond, &f->mu, &ts);
}

static void *
flush_main(void *arg)
{
    struct flusher *f = arg;
    log_set_thread_name("store-flush");
    pthread_setname_np(pthread_self(), "store-flush");  /* for top -H, perf */
    int64_t last_err_log = 0;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (f->conf.sync) {
            if (f->requested <= flusher_flushed(f)) {
                f->sleeping = true;
                wait_ms(f, 10);
                f->sleeping = false;
            }
        } else {
            wait_ms(f, f->conf.interval_ms);
        }
        if (f->stop)
            break;
        pthread_mutex_unlock(&f->mu);

        /* What deferred puts staged is written first (a SYNC_FLUSH put
         * waits for this sync; with ASYNC_FLUSH their loop commits
         * them, and this only catches what nobody committed). */
        if (clog_commit(f->cl) != 0 && f->on_error != NULL)
            f->on_error(f->err_arg, err_msg());
        int64_t w = clog_wrote(f->cl);
        int64_t done = flusher_flushed(f);
        bool go = w > done;
        if (go && !f->conf.sync) {
            int64_t now = clock_wall_ms();
            int least = f->conf.least_pages;
            if (now - f->last_thorough >= f->conf.thorough_ms) {
                f->last_thorough = now;
                least = 0;
            } else if (w - w % FLUSH_ALIGN > done) {
                /* Stop short of the block the writer is in: syncing it
                 * write-protects it (with large folios, all 2 MiB of it)
                 * and the writer's next store takes a fault.  The tail
                 * goes at the next thorough flush. */
                w -= w % FLUSH_ALIGN;
            }
            go = least <= 0 || w / PAGE - done / PAGE >= least;
        }
        if (go) {
            int64_t delay = errinj_get(ERRINJ_FLUSH_DELAY_MS);
            if (delay > 0)
                usleep((useconds_t)(delay * 1000));
            int rc = sync_range(f->cl, done, w, behind_writer(f));
            if (rc == 0) {
                publish(f, w);
                drop_behind(f, w);
            } else {
                int64_t now = clock_wall_ms();
                if (now - last_err_log >= 10000) {
                    log_error("commit log flush failed: %s", err_msg());
                    last_err_log = now;
                }
                if (f->on_error != NULL)
                    f->on_error(f->err_arg, err_msg());
            }
        }
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

int
flusher_start(struct flusher *f, struct commitlog *cl,
              const struct flush_conf *conf, int64_t flushed,
              void (*on_error)(void *, const char *), void *err_arg)
{
    memset(f, 0, sizeof(*f));
    f->cl = cl;
    f->conf = *conf;
    if (f->conf.interval_ms <= 0)
        f->conf.interval_ms = 500;
    f->on_error = on_error;
    f->err_arg = err_arg;
    atomic_init(&f->flushed, flushed);
    f->last_thorough = clock_wall_ms();
    q_init(&f->subs);
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->subs_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&f->thread, NULL, flush_main, f);
    if (rc != 0) {
        err_set("cannot start the flush thread: %s", strerror(rc));
        return -rc;
    }
    f->running = true;
    return 0;
}

void
flusher_stop(struct flusher *f)
{
    if (!f->running)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    f->running = false;
    if (flusher_flush_now(f) != 0)
        log_error("final commit log flush failed: %s", err_msg());
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->subs_mu);
}

void
flusher_request(struct flusher *f, int64_t end)
{
    pthread_mutex_lock(&f->mu);
    if (end > f->requested) {
        f->requested = end;
        if (f->sleeping)
            pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->mu);
}

/* Also publish()'s: every subscriber hears the flushed offset. */
void
flusher_poke(struct flusher *f)
{
    int64_t now = atomic_load(&f->flushed);
    pthread_mutex_lock(&f->subs_mu);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &f->subs) {
        struct flush_sub *s = container_of(pos, struct flush_sub, link);
        s->notify(s, now);
    }
    pthread_mutex_unlock(&f->subs_mu);
}

void
flusher_subscribe(struct flusher *f, struct flush_sub *s)
{
    pthread_mutex_lock(&f->subs_mu);
    q_insert_tail(&f->subs, &s->link);
    pthread_mutex_unlock(&f->subs_mu);
}

void
flusher_unsubscribe(struct flusher *f, struct flush_sub *s)
{
    pthread_mutex_lock(&f->subs_mu);
    if (q_linked(&s->link))
        q_remove(&s->link);
    pthread_mutex_unlock(&f->subs_mu);
}
