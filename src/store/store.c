/*
 * store: the facade (see store.h): open/close, the service thread,
 * writability, config files.  Puts and gets are in access.c.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"
#include "store/recover.h"
#include "store/replica.h"
#include "store/retention.h"

#define DISK_WARNING_RATIO 90.0   /* diskSpaceWarningLevelRatio: read-only */

/* {{{ Configuration */

/* maxMappedConsumeQueueFiles, 0 meaning automatic: half the process's
 * mappings (vm.max_map_count, 65,530 by default), the other half left to
 * the commit log, the index, libraries, thread stacks and the allocator
 * (store/mfpool.h). */
static size_t
cq_map_bound(const struct store_conf *c)
{
    if (c->cq_max_mapped > 0)
        return (size_t)c->cq_max_mapped;
    long max = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &max) != 1 || max < 1024)
            max = 65530;
        fclose(f);
    }
    return (size_t)(max / 2);
}

void
store_conf_defaults(struct store_conf *c)
{
    memset(c, 0, sizeof(*c));
    c->clog_file_size = 1073741824;
    c->cq_file_size = 6000000;
    c->flush_interval_ms = 500;
    c->flush_least_pages = 4;
    c->flush_thorough_ms = 10000;
    c->cq_flush_interval_ms = 1000;
    c->cq_flush_least_pages = 2;
    c->cq_flush_thorough_ms = 60000;
    c->sync_flush_timeout_ms = 5000;
    c->slave_timeout_ms = 3000;
    c->ha_fallbehind_max = 268435456;
    c->file_reserved_hours = 72;
    snprintf(c->delete_when, sizeof(c->delete_when), "04");
    c->disk_max_used_ratio = 75;
    c->clean_forcibly = true;
    c->max_message_size = 4194304;
    c->check_crc_on_recover = true;
    c->recover_progress_ms = 5000;
    c->warm_files = false;
    c->warm_window = 64 << 20;
    c->staging = true;
    c->staging_bytes = 4 << 20;
    c->index_enable = true;
    c->index_meta_bytes = CLOG_META_DEFAULT;
    c->max_hash_slots = 5000000;
    c->max_index_num = 20000000;
    c->max_msgs_per_query = 64;
    c->access_in_memory_ratio = 40;
    c->max_bytes_in_memory = 262144;
    c->max_count_in_memory = 32;
    c->max_bytes_on_disk = 65536;
    c->max_count_on_disk = 8;
    c->pull_read_gap = 8192;
    c->pull_zero_copy_min = 32768;
    c->drop_cache_behind = 64 << 20;
    c->drop_cache_reader_s = 60;
    c->timer_enable = true;
    c->timer_max_delay_ms = 3LL * 24 * 3600 * 1000;
    c->timer_precision_ms = 1000;
    c->timer_flush_ms = 1000;
    c->timer_log_file_size = 100LL << 20;
    (void)store_conf_delay_levels(
        c, "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h");
}

int
store_conf_delay_levels(struct store_conf *c, const char *spec)
{
    int n = 0;
    const char *p = spec;
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        char *end;
        long v = strtol(p, &end, 10);
        int64_t unit;
        switch (*end) {
        case 's': unit = 1000; break;
        case 'm': unit = 60000; break;
        case 'h': unit = 3600000; break;
        case 'd': unit = 86400000; break;
        default:
            err_set("bad messageDelayLevel '%s'", spec);
            return -EINVAL;
        }
        if (end == p || v < 0 || n >= 31) {
            err_set("bad messageDelayLevel '%s'", spec);
            return -EINVAL;
        }
        c->delay_levels[++n] = v * unit;
        p = end + 1;
    }
    c->ndelay_levels = n;
    return 0;
}

/* }}} */

/* {{{ Writability */

double
store_disk_ratio(struct store *s)
{
    int64_t inj = errinj_get(ERRINJ_DISK_RATIO);
    if (inj > 0)
        return (double)inj;
    struct statvfs v;
    if (statvfs(s->clog.q.dir, &v) != 0 || v.f_blocks == 0)
        return 0;
    return 100.0 * (double)(v.f_blocks - v.f_bfree) / (double)v.f_blocks;
}

void
store_set_readonly(struct store *s, const char *why)
{
    pthread_mutex_lock(&s->state_mu);
    bool was = atomic_exchange(&s->writable, false);
    if (was) {
        snprintf(s->readonly_why, sizeof(s->readonly_why), "%s", why);
        s->readonly_since = clock_wall_ms();
    }
    pthread_mutex_unlock(&s->state_mu);
    if (was)
        log_error("store %s is read-only for writes: %s (it is re-checked "
                  "every second; free disk space or fix the device)",
                  s->root, why);
}

int
store_request_queue(struct store *s, const char *topic, size_t tlen, int32_t qid)
{
    if (atomic_load_explicit(&s->closing, memory_order_relaxed) || store_fenced(s) ||
        !atomic_load(&s->writable))
        return -EAGAIN;
    return cqt_request(&s->cqs, topic, tlen, qid);
}

bool
store_has_queue(struct store *s, const char *topic, size_t tlen, int32_t qid)
{
    return cqt_find(&s->cqs, topic, tlen, qid) != NULL;
}

void
store_set_queue_made_hook(struct store *s, cqt_made_fn fn, void *arg)
{
    cqt_set_made_hook(&s->cqs, fn, arg);
}

bool
store_writable(struct store *s, char *why, size_t n)
{
    if (atomic_load(&s->writable))
        return true;
    if (why != NULL && n > 0) {
        pthread_mutex_lock(&s->state_mu);
        snprintf(why, n, "%s", s->readonly_why);
        pthread_mutex_unlock(&s->state_mu);
    }
    return false;
}

bool
store_check_writable(struct store *s)
{
    if (atomic_load(&s->writable))
        return true;
    double ratio = store_disk_ratio(s);
    if (ratio > DISK_WARNING_RATIO || ERRINJ(ERRINJ_ALLOC_FAIL) ||
        ERRINJ(ERRINJ_WRITE_FAIL) || ERRINJ(ERRINJ_FSYNC_FAIL))
        return false;
    pthread_mutex_lock(&s->state_mu);
    atomic_store(&s->writable, true);
    pthread_mutex_unlock(&s->state_mu);
    log_warn("store %s is writable again (disk %.1f%% used)", s->root, ratio);
    return true;
}

static void
on_flush_error(void *arg, const char *why)
{
    char buf[300];
    snprintf(buf, sizeof(buf), "commit log flush failed: %s", why);
    store_set_readonly(arg, buf);
}

/* }}} */

/* {{{ Service thread */

static void
write_checkpoint(struct store *s, int64_t clean_end)
{
    struct checkpoint c;
    memset(&c, 0, sizeof(c));
    int64_t ts = atomic_load(&s->clog.last_ts);
    c.phys_ts = c.logic_ts = c.index_ts = ts;
    c.ext = true;
    c.clog_flushed = store_flushed(s);
    c.cq_safe = s->cq_safe;
    c.index_safe = s->index_safe;
    c.clean_end = clean_end;
    c.clog_min = clog_min(&s->clog);
    pthread_mutex_lock(&s->state_mu);
    int rc = ckpt_write(s->root, &c);
    pthread_mutex_unlock(&s->state_mu);
    if (rc != 0)
        log_error("checkpoint: %s", err_msg());
}

/* Queues with unflushed entries above which one syncfs() of the store's
 * file system replaces a sync per queue: a broker with 10,000 topics
 * that each got a message has 10,000 dirty queues, and 10,000 msyncs took
 * ~27 s here (at shutdown and on every thorough round). */
#define CQ_SYNCFS_MIN 64

/* A thorough round over many dirty queues: their maxima first, then one
 * syncfs (which writes every dirty page of the file system, mapped ones
 * included), then each queue is marked flushed up to the maximum it had
 * before the sync.  What was written after is left to the per-queue
 * flush that follows. */
static void
sync_many_queues(struct store *s, struct cq **all, int n)
{
    int dirty = 0;
    for (int i = 0; i < n && dirty < CQ_SYNCFS_MIN; i++)
        if (cq_unflushed(all[i]) > 0)
            dirty++;
    if (dirty < CQ_SYNCFS_MIN || s->lock_fd < 0)
        return;
    int64_t *upto = malloc((size_t)n * sizeof(*upto));
    if (upto == NULL)
        return;  /* the per-queue syncs still run */
    for (int i = 0; i < n; i++)
        upto[i] = cq_max(all[i]);
    if (syncfs(s->lock_fd) != 0) {
        log_warn("syncfs of the store: %s; syncing queue by queue", strerror(errno));
    } else {
        for (int i = 0; i < n; i++)
            cq_mark_flushed(all[i], upto[i]);
    }
    free(upto);
}

/* Flushes the consume queues; a thorough round also flushes the index
 * and moves the checkpoint's safe points. */
static void
flush_queues(struct store *s, bool force)
{
    int64_t now = clock_wall_ms();
    bool thorough = force || now - s->last_cq_thorough >= s->conf.cq_flush_thorough_ms;
    int least = thorough ? 0 : s->conf.cq_flush_least_pages;
    /* A cut of the log (store_log_cut) between the snapshots and the
     * checkpoint would make them name offsets past the new end. */
    int64_t gen = clog_generation(&s->clog);
    /* Snapshots first: entries for records below w are already written. */
    int64_t w = clog_wrote(&s->clog);
    int64_t ixn = s->conf.index_enable ? ix_next(&s->ix) : w;
    struct cq **all;
    int n = cqt_snapshot(&s->cqs, &all);
    if (n < 0)
        return;
    bool complete = true;
    if (thorough)
        sync_many_queues(s, all, n);
    for (int i = 0; i < n; i++) {
        int r = cq_flush(all[i], least, -1);
        if (r < 0)
            log_error("consume queue flush: %s", err_msg());
        if (r != 1)
            complete = false;
    }
    free(all);
    if (!thorough || !complete)
        return;
    if (ix_flush(&s->ix) != 0) {
        log_error("index flush: %s", err_msg());
        return;
    }
    s->last_cq_thorough = now;
    pthread_mutex_lock(&s->ck_mu);
    if ((gen & 1) == 0 && clog_generation(&s->clog) == gen) {
        s->cq_safe = w;
        s->index_safe = ixn;
        write_checkpoint(s, -1);
    }
    pthread_mutex_unlock(&s->ck_mu);
}

void
store_log_cut(struct store *s, int64_t end)
{
    pthread_mutex_lock(&s->ck_mu);
    if (s->cq_safe > end)
        s->cq_safe = end;
    if (s->index_safe > end)
        s->index_safe = end;
    write_checkpoint(s, -1);
    pthread_mutex_unlock(&s->ck_mu);
}

int
store_retention(struct store *s, const struct retention_opts *o,
                struct retention_stats *st)
{
    pthread_mutex_lock(&s->retention_mu);
    int n = retention_run(s, o, st);
    pthread_mutex_unlock(&s->retention_mu);
    /* Still too full after deleting: stop taking writes (RocketMQ's
     * diskSpaceWarningLevelRatio). */
    if (st->disk_ratio > DISK_WARNING_RATIO) {
        char why[128];
        snprintf(why, sizeof(why), "disk full (%.1f%% used, limit %.0f%%)",
                 st->disk_ratio, DISK_WARNING_RATIO);
        store_set_readonly(s, why);
    }
    return n;
}

int
store_empty_queue(struct store *s, const char *topic, size_t tlen, int32_t qid)
{
    struct cq *c = cqt_find(&s->cqs, topic, tlen, qid);
    if (c == NULL)
        return -1;
    pthread_mutex_lock(&s->retention_mu);
    /* Every entry is "below" INT64_MAX: all files but the last go, and
     * min moves past every entry written so far (it only moves forward,
     * so retention's later corrections keep it there). */
    int n = cq_delete_expired(c, INT64_MAX);
    pthread_mutex_unlock(&s->retention_mu);
    return n;
}

static void
retention_tick(struct store *s)
{
    struct retention_opts o = { clock_wall_ms(), -1, false, false, 0 };
    struct retention_stats st;
    store_retention(s, &o, &st);
}

static void
svc_wait(struct store *s, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&s->svc_cond, &s->svc_mu, &ts);
}

static bool
metas_half(struct store *s)
{
    return s->conf.index_enable && s->clog.meta_cap > 0 &&
           atomic_load_explicit(&s->clog.meta_len, memory_order_relaxed) >=
               s->clog.meta_cap / 2;
}

static void *
svc_main(void *arg)
{
    struct store *s = arg;
    log_set_thread_name("store-svc");
    pthread_setname_np(pthread_self(), "store-svc");  /* for top -H, perf */
    int64_t t0 = clock_mono_ns() / 1000000;
    int64_t last_cq = t0, last_ret = t0, last_check = t0;
    pthread_mutex_lock(&s->svc_mu);
    while (!s->svc_stop) {
        /* 10 ms while the index lags the log (QUERY_MESSAGE sees new
         * messages quickly), 100 ms when idle. */
        bool behind = s->conf.index_enable &&
                      ix_next_seen(&s->ix) < clog_wrote(&s->clog);
        /* The metas' buffer half used (metas_ready): no wait.  Its
         * signal reaches this thread only while it waits, so one sent
         * while it was busy (a thorough flush round, retention) is
         * seen here instead; one sent after this check waits for svc_mu
         * until the wait has released it. */
        if (!metas_half(s))
            svc_wait(s, behind ? 10 : 100);
        if (s->svc_stop)
            break;
        pthread_mutex_unlock(&s->svc_mu);
        if (s->conf.index_enable)
            (void)ix_dispatch(&s->ix, &s->clog, 20000);
        int64_t now = clock_mono_ns() / 1000000;
        if (now - last_cq >= s->conf.cq_flush_interval_ms) {
            flush_queues(s, false);
            last_cq = now;
        }
        if (now - last_ret >= 10000) {
            retention_tick(s);
            last_ret = now;
        }
        if (!atomic_load(&s->writable) && now - last_check >= 1000) {
            store_check_writable(s);
            last_check = now;
        }
        pthread_mutex_lock(&s->svc_mu);
    }
    pthread_mutex_unlock(&s->svc_mu);
    return NULL;
}

/* }}} */

/* {{{ Open and close */

static int
lock_root(struct store *s)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/lock", s->root);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set("cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            err_set("store %s is in use (another broker holds %s)", s->root,
                    path);
        else
            err_set("cannot lock %s: %s", path, strerror(e));
        return -e;
    }
    s->lock_fd = fd;
    return 0;
}

static void
store_free(struct store *s)
{
    clog_close(&s->clog);
    cqt_destroy(&s->cqs);
    if (s->ix.dir != NULL)
        ix_close(&s->ix);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    if (atomic_load(&s->ha_wake_fd) >= 0)
        close(atomic_load(&s->ha_wake_fd));
    pthread_mutex_destroy(&s->state_mu);
    pthread_mutex_destroy(&s->retention_mu);
    pthread_mutex_destroy(&s->ck_mu);
    pthread_mutex_destroy(&s->svc_mu);
    pthread_cond_destroy(&s->svc_cond);
    free(s->root);
    free(s);
}

/* The commit log published new records: the HA thread may send them. */
static void
ha_published(void *arg)
{
    store_ha_appended(arg);
}

/* Half of the metas' buffer is used (commitlog.h): the index dispatch
 * takes them now rather than at its next tick.  Signalled under svc_mu,
 * which the service thread holds from its check of the fill
 * (metas_half) to the wait, so the signal cannot fall between the two
 * and be lost (it then cost a whole wait: 10 ms while the index lags).
 * The log calls it after its locks are let go (no sender waits behind
 * the append lock for svc_mu), and svc_mu is a leaf: the service thread
 * holds it only over that check and the wait, and takes no other lock
 * then (the index's position is read without the index's lock, the
 * dispatch runs without svc_mu).  While the thread is busy (a
 * thorough flush round msyncs every queue) nobody takes the metas: past
 * the buffer, commits add none and the dispatch reads those records
 * from the log, as with no buffer. */
static void
metas_ready(void *arg)
{
    struct store *s = arg;
    pthread_mutex_lock(&s->svc_mu);
    pthread_cond_signal(&s->svc_cond);
    pthread_mutex_unlock(&s->svc_mu);
}

/* The flush thread's view of the readers (flush_conf.reader_floor):
 * consumers and slaves, and the index dispatch, which reads every record
 * after it is written (behind the writer, more so under load). */
static int64_t
reader_floor(void *arg)
{
    struct store *s = arg;
    int64_t low = readers_floor(&s->readers, clock_mono_ns() / 1000000);
    int64_t ix = s->conf.index_enable ? ix_next_seen(&s->ix) : INT64_MAX;
    return ix < low ? ix : low;
}

struct store *
store_open(const char *root, const struct store_conf *conf)
{
    struct store *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err_set("out of memory");
        return NULL;
    }
    s->lock_fd = -1;
    atomic_init(&s->ha_wake_fd, -1);
    s->root = strdup(root);
    s->conf = *conf;
    atomic_init(&s->refs, 1);
    atomic_init(&s->writable, true);
    atomic_init(&s->closing, false);
    atomic_init(&s->role_slave, conf->slave);
    atomic_init(&s->role_sync_master, conf->sync_master);
    atomic_init(&s->fenced, conf->slave);
    pthread_mutex_init(&s->state_mu, NULL);
    pthread_mutex_init(&s->retention_mu, NULL);
    pthread_mutex_init(&s->ck_mu, NULL);
    pthread_mutex_init(&s->svc_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->svc_cond, &ca);
    pthread_condattr_destroy(&ca);
    struct store_conf *c = &s->conf;
    /* A consume queue file holds whole entries (RocketMQ rounds up). */
    c->cq_file_size = (c->cq_file_size + CQ_UNIT - 1) / CQ_UNIT * CQ_UNIT;
    long mem_pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    s->mem_total = mem_pages > 0 && pg > 0 ? (int64_t)mem_pages * pg : INT64_MAX / 2;
    if (s->root == NULL || c->clog_file_size < 4096 || c->cq_file_size < CQ_UNIT ||
        c->max_hash_slots < 1 || c->max_index_num < 1 ||
        c->max_hash_slots > INT32_MAX || c->max_index_num > INT32_MAX) {
        err_set("bad store settings (file sizes, index sizes)");
        store_free(s);
        return NULL;
    }
    char path[PATH_MAX];
    if (mkdir_p(root) != 0 || lock_root(s) != 0)
        goto fail;
    const char *cdir = c->commitlog_dir;
    if (cdir[0] == '\0') {
        snprintf(path, sizeof(path), "%s/commitlog", root);
        cdir = path;
    }
    if (clog_open(&s->clog, cdir, (size_t)c->clog_file_size) != 0)
        goto fail;
    s->clog.on_publish = ha_published;
    s->clog.pub_arg = s;
    /* The index dispatch reads the records' metas, not the records,
     * and is woken when they fill half of their buffer. */
    s->clog.meta_cap = c->index_enable && c->index_meta_bytes > 0
                     ? (size_t)c->index_meta_bytes : 0;
    s->clog.on_metas = metas_ready;
    s->clog.metas_arg = s;
    /* The buffer holds the largest append whole (commitlog.c). */
    if (c->staging &&
        clog_set_staging(&s->clog, (size_t)(c->staging_bytes > c->max_message_size
                                                 ? c->staging_bytes : c->max_message_size)) != 0)
        goto fail;
    snprintf(path, sizeof(path), "%s/consumequeue", root);
    if (cqt_init(&s->cqs, path, (size_t)c->cq_file_size, cq_map_bound(c)) != 0 ||
        cqt_load(&s->cqs) != 0)
        goto fail;
    readers_init(&s->readers, &s->cqs, (int64_t)c->drop_cache_reader_s * 1000);
    snprintf(path, sizeof(path), "%s/index", root);
    if (ix_open(&s->ix, path, (uint32_t)c->max_hash_slots,
                (uint32_t)c->max_index_num, c->index_enable) != 0)
        goto fail;
    if (store_recover(s) != 0)
        goto fail;
    /* Make the recovered state durable, then mark the store open. */
    int64_t end = clog_wrote(&s->clog);
    /* -1: what accessMessageInMemoryMaxRatio counts as in memory stays
     * there (a pull that far behind is answered as from memory).  A
     * reader holds the page cache back to its position, but no more than
     * that span either (flush.c). */
    int64_t span = (int64_t)((double)s->mem_total * c->access_in_memory_ratio / 100.0);
    int64_t drop = c->drop_cache_behind >= 0 ? c->drop_cache_behind : span;
    struct flush_conf fc = { c->sync_flush, c->flush_interval_ms,
                             c->flush_least_pages, c->flush_thorough_ms, drop,
                             reader_floor, s, span };
    if (flusher_start(&s->flusher, &s->clog, &fc, clog_min(&s->clog),
                      on_flush_error, s) != 0)
        goto fail;
    if (flusher_flush_now(&s->flusher) != 0)
        log_warn("store %s: %s", root, err_msg());
    s->cq_safe = end;
    s->index_safe = ix_next(&s->ix);
    s->last_cq_thorough = clock_wall_ms();
    flush_queues(s, true);
    if (abort_create(root) != 0)
        goto fail_flusher;
    /* Staged appends never fault the mapping in: nothing to warm. */
    if (clog_start(&s->clog, c->warm_files, c->staging ? 0 : c->warm_window) != 0)
        goto fail_flusher;
    int rc = pthread_create(&s->svc, NULL, svc_main, s);
    if (rc != 0) {
        err_set("cannot start the store service thread: %s", strerror(rc));
        goto fail_flusher;
    }
    s->svc_running = true;
    log_debug("store %s open: commit log %" PRId64 "..%" PRId64 ", %zu "
             "queue(s), %s flush", root, clog_min(&s->clog), end,
             s->cqs.count, c->sync_flush ? "sync" : "async");
    return s;

fail_flusher:
    flusher_stop(&s->flusher);
fail:;
    /* Keep the error of the step that failed; closing logs its own. */
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", err_msg());
    store_free(s);
    err_set("%s", msg);
    return NULL;
}

void
store_ref(struct store *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void
store_unref(struct store *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    atomic_store(&s->closing, true);
    if (s->svc_running) {
        pthread_mutex_lock(&s->svc_mu);
        s->svc_stop = true;
        pthread_cond_signal(&s->svc_cond);
        pthread_mutex_unlock(&s->svc_mu);
        pthread_join(s->svc, NULL);
    }
    flusher_stop(&s->flusher);
    bool clean = flusher_flushed(&s->flusher) >= clog_wrote(&s->clog);
    store_index_sync(s);
    flush_queues(s, true);
    pthread_mutex_lock(&s->ck_mu);
    s->cq_safe = clog_wrote(&s->clog);
    s->index_safe = s->conf.index_enable ? ix_next(&s->ix) : s->cq_safe;
    if (clean)
        write_checkpoint(s, clog_wrote(&s->clog));
    pthread_mutex_unlock(&s->ck_mu);
    if (clean) {
        if (abort_remove(s->root) != 0)
            log_error("store %s: %s", s->root, err_msg());
    } else {
        log_error("store %s: closing with unflushed data; the next open "
                  "recovers as after a crash", s->root);
    }
    log_debug("store %s closed at %" PRId64, s->root, clog_wrote(&s->clog));
    store_free(s);
}

/* }}} */

/* {{{ Flush and offsets */

int64_t
store_prewarm(struct store *s, int64_t bytes)
{
    int64_t w = clog_wrote(&s->clog);
    struct mfile *mf = mfq_find(&s->clog.q, w);
    if (mf == NULL)
        return 0;
    size_t from = (size_t)(w - mf->start);
    size_t len = (size_t)bytes < mf->size - from ? (size_t)bytes : mf->size - from;
    int rc = mfile_warm(mf, from, len);
    mfile_unpin(mf);
    return rc == 0 ? (int64_t)len : 0;
}

int
store_commit(struct store *s)
{
    int rc = clog_commit(&s->clog);
    if (rc != 0) {
        char why[300];
        snprintf(why, sizeof(why), "commit log write failed: %s", err_msg());
        store_set_readonly(s, why);
        err_set("%s", why);
    }
    return rc;
}

void
store_request_flush(struct store *s, int64_t end)
{
    flusher_request(&s->flusher, end);
}

int
store_flush(struct store *s)
{
    int rc = flusher_flush_now(&s->flusher);
    if (rc != 0)
        on_flush_error(s, err_msg());
    return rc;
}

int64_t
store_min_phy(struct store *s)
{
    return clog_min(&s->clog);
}

int64_t
store_max_phy(struct store *s)
{
    return clog_wrote(&s->clog);
}

int64_t
store_flushed(struct store *s)
{
    return flusher_flushed(&s->flusher);
}

int64_t
store_dispatched(struct store *s)
{
    return s->conf.index_enable ? ix_next(&s->ix) : clog_wrote(&s->clog);
}

int64_t
store_put_in_lock_ns(struct store *s, int64_t now)
{
    return clog_in_lock_ns(&s->clog, now);
}

int
store_disk_usage(struct store *s, uint64_t *used, uint64_t *total)
{
    struct statvfs v;
    if (statvfs(s->clog.q.dir, &v) != 0 || v.f_blocks == 0)
        return -1;
    *total = (uint64_t)v.f_blocks * v.f_frsize;
    *used = (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
    return 0;
}

/* }}} */


/* {{{ Config files */

/* The directory part of path into dir ("." for a bare name). */
static void
dir_of(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, cap, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
}

/* Writes all n bytes to fd.  Returns 0 or -errno with err_set(). */
static int
write_all(int fd, const char *path, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int rc = -errno;
            err_set("cannot write %s: %s", path, strerror(-rc));
            return rc;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Creates a temp file beside `path` with a name nobody can guess
 * (path.tmp.<random>) and O_EXCL|O_NOFOLLOW: a file or symlink planted
 * under a predictable name is never followed or truncated.  Returns the
 * fd (name in tmp) or -errno with err_set(). */
static int
open_temp(const char *path, char *tmp, size_t cap, mode_t mode)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        uint64_t r;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            int rc = errno != 0 ? -errno : -EIO;
            err_set("cannot name a temp file for %s: %s", path, strerror(-rc));
            return rc;
        }
        int len = snprintf(tmp, cap, "%s.tmp.%016" PRIx64, path, r);
        if (len < 0 || (size_t)len >= cap) {
            err_set("path too long: %s", path);
            return -ENAMETOOLONG;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST) {
            int rc = -errno;
            err_set("cannot create %s: %s", tmp, strerror(-rc));
            return rc;
        }
    }
    err_set("cannot create a temp file for %s: every name taken", path);
    return -EEXIST;
}

int
store_write_file_atomic(const char *path, const void *data, size_t n)
{
    return store_write_file_atomic_mode(path, data, n, -1);
}

int
store_write_file_atomic_mode(const char *path, const void *data, size_t n, int mode)
{
    char dir[PATH_MAX], tmp[PATH_MAX], bak[PATH_MAX];
    dir_of(path, dir, sizeof(dir));
    int rc = mkdir_p(dir);
    if (rc != 0)
        return rc;
    snprintf(bak, sizeof(bak), "%s.bak", path);
    /* mode >= 0: the file keeps the permission bits it has (RocketMQ
     * rewrites such files in place), or gets `mode` when it is new. */
    mode_t create = mode >= 0 ? (mode_t)mode & 07777 : 0644;
    struct stat st;
    if (mode >= 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        create = st.st_mode & 07777;
    int fd = open_temp(path, tmp, sizeof(tmp), mode >= 0 ? 0600 : create);
    if (fd < 0)
        return fd;
    /* Created 0600 and given its bits before any byte is written: a
     * secret never sits in a file more open than the one it replaces. */
    if (mode >= 0 && fchmod(fd, create) != 0) {
        rc = -errno;
        err_set("cannot chmod %s: %s", tmp, strerror(-rc));
        close(fd);
        (void)unlink(tmp);
        return rc;
    }
    if ((rc = write_all(fd, tmp, data, n)) != 0) {
        close(fd);
        (void)unlink(tmp);
        return rc;
    }
    if (fsync(fd) != 0) {
        rc = -errno;
        err_set("cannot sync %s: %s", tmp, strerror(-rc));
        close(fd);
        (void)unlink(tmp);
        return rc;
    }
    close(fd);
    /* Keep the previous version as .bak (RocketMQ does too): a hard link,
     * so `path` itself never disappears. */
    if (access(path, F_OK) == 0) {
        (void)unlink(bak);
        if (link(path, bak) != 0)
            log_warn("cannot keep %s: %s", bak, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        rc = -errno;
        err_set("cannot rename %s to %s: %s", tmp, path, strerror(-rc));
        (void)unlink(tmp);
        return rc;
    }
    return fsync_dir(dir);
}

int
store_append_file_durable(const char *path, const void *data, size_t n)
{
    bool existed = access(path, F_OK) == 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set("cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    int rc = write_all(fd, path, data, n);
    if (rc == 0 && fdatasync(fd) != 0) {
        rc = -errno;
        err_set("cannot sync %s: %s", path, strerror(-rc));
    }
    close(fd);
    if (rc == 0 && !existed) {
        /* A new file's name must be durable too. */
        char dir[PATH_MAX];
        dir_of(path, dir, sizeof(dir));
        rc = fsync_dir(dir);
    }
    return rc;
}

/* }}} */

void
store_set_role(struct store *s, bool slave, bool sync_master, bool fenced)
{
    atomic_store(&s->role_slave, slave);
    atomic_store(&s->role_sync_master, sync_master);
    atomic_store(&s->fenced, fenced || slave);   /* a slave never puts */
}

bool
store_role_slave(struct store *s)
{
    return atomic_load_explicit(&s->role_slave, memory_order_relaxed);
}

bool
store_role_sync_master(struct store *s)
{
    return atomic_load_explicit(&s->role_sync_master, memory_order_relaxed);
}

bool
store_fenced(struct store *s)
{
    return atomic_load_explicit(&s->fenced, memory_order_relaxed);
}
