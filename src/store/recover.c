/*
 * recover: checkpoint, abort marker, and the open-time recovery.
 *
 * CHECKPOINT FILE (STORE/checkpoint, 4096 bytes, big-endian)
 *
 *      0  int64  physicMsgTimestamp   \  RocketMQ 4.x's StoreCheckpoint,
 *      8  int64  logicsMsgTimestamp    > kept so a RocketMQ broker can
 *     16  int64  indexMsgTimestamp    /  open a store rmq wrote
 *     24  ...    zeros (RocketMQ 5.x puts two offsets at 24 and 32)
 *     64  8      "RMQCKPT1"           rmq's extension, ignored by RocketMQ
 *     72  int64  clogFlushed          commit log durable below this
 *     80  int64  cqSafe               consume queue entries durable for
 *                                     every record below this offset
 *     88  int64  indexSafe            index entries durable for every
 *                                     record below this offset
 *     96  int64  cleanEnd             end of the log at a clean close,
 *                                     -1 while the store is open
 *    104  int64  clogMin
 *    112  int32  crc32 of bytes 64..111 (the extension is ignored when
 *                it does not match: a torn write falls back to the
 *                RocketMQ fields)
 *
 * The service thread rewrites it after every thorough consume queue
 * flush (flushConsumeQueueThoroughInterval), and the store at open and
 * close.  STORE/abort exists while the store is open; finding it at open
 * means the last run did not close cleanly.
 *
 * RECOVERY
 *
 * 1. Clean start (no abort file, extension with cleanEnd): trust cleanEnd
 *    after checking that nothing was written at it; no scan.
 * 2. Clean start of a store without the extension (RocketMQ's): scan
 *    from the third-last commit log file with the record rules of
 *    commitlog.c (RocketMQ's recoverNormally).
 * 3. Crash (abort file): scan from the last safe point -- cqSafe from the
 *    extension, else (RocketMQ's store) the last file whose first record
 *    is older than min(physic, logics) - 3 s -- validating every record
 *    (magic, size, lengths, CRC, own offset), writing each one's consume
 *    queue entry again, until the first invalid record.  Index files
 *    that may hold entries newer than the safe point are deleted; the
 *    service thread re-indexes from the end of the last one kept.
 * Then, in every case: the end found is the log's end; later files are
 *    deleted and, after a crash, the bytes after the end are zeroed (no
 *    stale record can ever follow a new one); consume queue entries
 *    pointing at or past the end are dropped; each queue's min offset is
 *    corrected to the first record still on disk.
 */
#include "store/recover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/crc32.h"
#include "core/err.h"
#include "core/jstr.h"
#include "store/props.h"
#include "store/timer.h"
#include "core/log.h"
#include "store/store.h"

#define CKPT_SIZE 4096
#define EXT_AT 64
static const char ckpt_magic[8] = { 'R', 'M', 'Q', 'C', 'K', 'P', 'T', '1' };

/* {{{ Checkpoint and abort marker */

int
ckpt_read(const char *root, struct checkpoint *c)
{
    memset(c, 0, sizeof(*c));
    c->clean_end = -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/checkpoint", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        err_set("cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    uint8_t b[128];
    ssize_t n = pread(fd, b, sizeof(b), 0);
    int e = errno;
    close(fd);
    if (n < 0) {
        err_set("cannot read %s: %s", path, strerror(e));
        return -e;
    }
    if (n >= 24) {
        c->phys_ts = (int64_t)be64_get(b);
        c->logic_ts = (int64_t)be64_get(b + 8);
        c->index_ts = (int64_t)be64_get(b + 16);
    }
    if (n >= 116 && memcmp(b + EXT_AT, ckpt_magic, 8) == 0 &&
        rmq_crc32(0, b + EXT_AT, 48) == be32_get(b + 112)) {
        c->ext = true;
        c->clog_flushed = (int64_t)be64_get(b + 72);
        c->cq_safe = (int64_t)be64_get(b + 80);
        c->index_safe = (int64_t)be64_get(b + 88);
        c->clean_end = (int64_t)be64_get(b + 96);
        c->clog_min = (int64_t)be64_get(b + 104);
    }
    return 0;
}

int
ckpt_write(const char *root, const struct checkpoint *c)
{
    uint8_t b[CKPT_SIZE];
    memset(b, 0, sizeof(b));
    be64_put(b, (uint64_t)c->phys_ts);
    be64_put(b + 8, (uint64_t)c->logic_ts);
    be64_put(b + 16, (uint64_t)c->index_ts);
    memcpy(b + EXT_AT, ckpt_magic, 8);
    be64_put(b + 72, (uint64_t)c->clog_flushed);
    be64_put(b + 80, (uint64_t)c->cq_safe);
    be64_put(b + 88, (uint64_t)c->index_safe);
    be64_put(b + 96, (uint64_t)c->clean_end);
    be64_put(b + 104, (uint64_t)c->clog_min);
    be32_put(b + 112, rmq_crc32(0, b + EXT_AT, 48));
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/checkpoint", root);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set("cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    int rc = 0;
    /* In place, like RocketMQ's mapped checkpoint: the fields sit in one
     * sector, and a torn extension fails its CRC. */
    ssize_t n = pwrite(fd, b, sizeof(b), 0);
    if (n != (ssize_t)sizeof(b)) {
        rc = n < 0 ? -errno : -EIO;
        err_set("cannot write %s: %s", path, strerror(-rc));
    } else if (fdatasync(fd) != 0) {
        rc = -errno;
        err_set("cannot sync %s: %s", path, strerror(-rc));
    }
    close(fd);
    return rc;
}

bool
abort_exists(const char *root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/abort", root);
    return access(path, F_OK) == 0;
}

int
abort_create(const char *root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/abort", root);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set("cannot create %s: %s", path, strerror(errno));
        return -errno;
    }
    close(fd);
    return fsync_dir(root);
}

int
abort_remove(const char *root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/abort", root);
    if (unlink(path) != 0 && errno != ENOENT) {
        err_set("cannot remove %s: %s", path, strerror(errno));
        return -errno;
    }
    return fsync_dir(root);
}

/* }}} */

/* {{{ Scan */

int
store_redispatch(struct store *s, const struct clog_view *v, int64_t phy)
{
    int tx = v->sysflag & SYSFLAG_TX_MASK;
    if (tx == SYSFLAG_TX_PREPARED || tx == SYSFLAG_TX_ROLLBACK)
        return 0;
    struct cq *c = cqt_get(&s->cqs, (const char *)v->topic, v->topic_len,
                           v->qid);
    if (c == NULL)
        return 0;  /* an illegal topic name: nothing can read it anyway */
    int64_t tags = 0;
    size_t n;
    const char *props = (const char *)v->props;
    const char *tv = props_find(props, v->props_len, "TAGS", &n);
    if (tv != NULL)
        tags = java_hash(tv, n);
    if (v->topic_len == sizeof(TIMER_TOPIC) - 1 && memcmp(v->topic, TIMER_TOPIC, v->topic_len) == 0) {
        /* The timer topic's entries carry the delivery bucket, as the
         * put wrote them (timer.h): a rebuilt entry must too, or the
         * wheel would take the timer as due. */
        (void)timer_tags_of(props, v->props_len, &tags);
    }
    if (v->topic_len == 19 && memcmp(v->topic, "SCHEDULE_TOPIC_XXXX", 19) == 0) {
        const char *dv = props_find(props, v->props_len, "DELAY", &n);
        int level = dv != NULL ? props_delay_level(dv, n) : 0;
        if (level > s->conf.ndelay_levels)
            level = s->conf.ndelay_levels;
        if (level > 0)
            tags = v->store_ts + s->conf.delay_levels[level];
    }
    int rc = cq_write(c, v->qoff, phy, (int32_t)v->size, tags);
    if (rc != 0)
        return rc;
    if (v->qoff + 1 > cq_max(c)) {
        cq_publish(c, v->qoff + 1);
        c->next = v->qoff + 1;
    }
    return 0;
}

/* Progress of a long scan, for the operator watching a crashed broker
 * that has not printed READY yet: the span is start .. the end of the
 * last file (the log cannot end later), so the percentage is a lower
 * bound that jumps to 100 when the end is found early. */
struct scan_progress {
    int64_t start, span;
    int64_t t0_ns, last_ns;
    int next_pct;            /* the next 10 % step that prints a line */
    int interval_ms;         /* recoverProgressIntervalMillis; 0 = none */
    int lines;               /* printed so far */
};

static void
progress_init(struct scan_progress *p, struct store *s, int64_t start)
{
    struct commitlog *cl = &s->clog;
    memset(p, 0, sizeof(*p));
    p->start = start;
    p->interval_ms = s->conf.recover_progress_ms;
    struct mfile *last = mfq_last(&cl->q);
    if (last != NULL) {
        p->span = last->start + (int64_t)last->size - start;
        mfile_unpin(last);
    }
    p->t0_ns = p->last_ns = clock_mono_ns();
    p->next_pct = 10;
}

/* A line at every 10 % of the span and, in between, once per interval;
 * scans shorter than three files print nothing (they end in a blink). */
static void
progress_note(struct scan_progress *p, struct store *s, int64_t pos, bool done)
{
    if (p->interval_ms <= 0 || p->span < 3 * (int64_t)s->clog.file_size)
        return;
    int64_t now = clock_mono_ns();
    int pct = (int)((pos - p->start) * 100 / p->span);
    if (done)
        pct = 100;
    if (!done && pct < p->next_pct && now - p->last_ns < (int64_t)p->interval_ms * 1000000)
        return;
    double secs = (double)(now - p->t0_ns) / 1e9;
    double mb = (double)(pos - p->start) / (1024.0 * 1024.0);
    log_info("store %s: recovery %s %d%% of the commit log (%.0f of %.0f MB, "
             "%.1f MB/s, %.1f s)", s->root, done ? "scanned" : "at", pct, mb,
             (double)p->span / (1024.0 * 1024.0), secs > 0 ? mb / secs : 0.0, secs);
    p->last_ns = now;
    p->lines++;
    while (p->next_pct <= pct)
        p->next_pct += 10;
}

/* Scans from `start` to the first invalid record; returns the end. */
static int64_t
scan(struct store *s, int64_t start, bool crc, bool dispatch, int *err)
{
    struct commitlog *cl = &s->clog;
    int64_t pos = start;
    int64_t count = 0;
    struct scan_progress prog;
    progress_init(&prog, s, start);
    *err = 0;
    for (;;) {
        struct mfile *mf = mfq_find(&cl->q, pos);
        if (mf == NULL)
            break;
        progress_note(&prog, s, pos, false);
        size_t rel = (size_t)(pos - mf->start);
        int r = CLOG_END;
        while (rel < mf->size) {
            struct clog_view v;
            r = clog_decode(mf->base + rel, mf->size - rel, pos, crc, &v);
            if (r != CLOG_REC)
                break;
            if (dispatch && (*err = store_redispatch(s, &v, pos)) != 0) {
                mfile_unpin(mf);
                return pos;
            }
            pos += v.size;
            rel += v.size;
            count++;
            /* Within a file too: a 1 GiB file takes seconds. */
            if ((count & 0xFFF) == 0)
                progress_note(&prog, s, pos, false);
        }
        mfile_unpin(mf);
        if (r == CLOG_BLANK || rel >= mf->size) {
            pos = mf->start + (int64_t)mf->size;  /* on to the next file */
            continue;
        }
        if (r == CLOG_BAD)
            s->torn_tail = true;
        if (r == CLOG_BAD)
            log_warn("commit log: invalid record at %" PRId64 " (torn or "
                     "corrupt); the log ends there", pos);
        break;
    }
    if (prog.lines > 0)  /* said something: say where it ended */
        progress_note(&prog, s, pos, true);
    s->recovered_records = count;
    return pos;
}

/* RocketMQ's rule for a store without our extension: the last file whose
 * first record was stored before the checkpoint's safe time. */
static int64_t
start_by_time(struct store *s, int64_t safe_ts)
{
    struct commitlog *cl = &s->clog;
    size_t n = mfq_count(&cl->q);
    for (size_t i = n; i-- > 0;) {
        struct mfile *mf = mfq_at(&cl->q, i);
        if (mf == NULL)
            continue;
        int64_t ts = clog_peek_store_ts(mf->base, mf->size);
        int64_t start = mf->start;
        mfile_unpin(mf);
        if (ts > 0 && ts <= safe_ts)
            return start;
    }
    return mfq_min(&cl->q) < 0 ? 0 : mfq_min(&cl->q);
}

/* Did a clean close really end the log at `end`? */
static bool
clean_end_ok(struct store *s, int64_t end)
{
    struct commitlog *cl = &s->clog;
    int64_t min = mfq_min(&cl->q);
    if (min < 0)
        return end >= 0;
    if (end < min)
        return false;
    struct mfile *mf = mfq_find(&cl->q, end);
    if (mf == NULL) {
        /* Only right at the end of the last file. */
        struct mfile *last = mfq_last(&cl->q);
        bool ok = last != NULL && end == last->start + (int64_t)last->size;
        if (last != NULL)
            mfile_unpin(last);
        return ok;
    }
    size_t rel = (size_t)(end - mf->start);
    struct clog_view v;
    int r = clog_decode(mf->base + rel, mf->size - rel, end, false, &v);
    mfile_unpin(mf);
    return r == CLOG_END;
}

/* }}} */

struct fix_arg {
    int64_t end;
    int64_t min;
    bool zero;
};

static int
fix_queue(struct cq *c, void *arg)
{
    struct fix_arg *a = arg;
    cq_truncate(c, a->end, a->zero);
    cq_correct_min(c, a->min);
    return 0;
}

int
store_recover(struct store *s)
{
    struct commitlog *cl = &s->clog;
    bool abnormal = abort_exists(s->root);
    struct checkpoint ck;
    int rc = ckpt_read(s->root, &ck);
    if (rc != 0)
        return rc;
    s->recovered_abnormally = abnormal;
    s->recovered_from = -1;
    int64_t min = mfq_min(&cl->q);
    if (min < 0)
        min = 0;
    int64_t end;
    if (!abnormal && ck.ext && ck.clean_end >= 0 && clean_end_ok(s, ck.clean_end)) {
        end = ck.clean_end;
        log_debug("store %s: clean shutdown last time; log ends at %" PRId64,
                 s->root, end);
    } else if (!abnormal && !ck.ext && mfq_count(&cl->q) == 0) {
        end = min;
        log_debug("store %s: new store", s->root);
    } else if (!abnormal && !ck.ext) {
        /* RocketMQ's store after a clean stop: its recoverNormally. */
        size_t n = mfq_count(&cl->q);
        struct mfile *mf = mfq_at(&cl->q, n > 3 ? n - 3 : 0);
        int64_t start = mf != NULL ? mf->start : min;
        if (mf != NULL)
            mfile_unpin(mf);
        s->recovered_from = start;
        end = scan(s, start, s->conf.check_crc_on_recover, false, &rc);
        log_info("store %s: clean shutdown (no rmq checkpoint); scanned "
                 "from %" PRId64 ", log ends at %" PRId64, s->root, start, end);
    } else {
        if (!abnormal)
            log_warn("store %s: the checkpoint's end does not match the "
                     "log; recovering as after a crash", s->root);
        else
            log_warn("store %s: last shutdown was abnormal; recovering",
                     s->root);
        int64_t start;
        int dropped;
        if (ck.ext) {
            start = ck.cq_safe;
            dropped = ix_drop_unsafe(&s->ix, ck.index_safe, false);
        } else {
            int64_t safe = (ck.phys_ts < ck.logic_ts ? ck.phys_ts : ck.logic_ts) - 3000;
            start = start_by_time(s, safe);
            dropped = ix_drop_unsafe(&s->ix, ck.index_ts, true);
        }
        if (start < min || start > clog_wrote(cl) + (int64_t)cl->file_size * 1024)
            start = min;
        /* The scan must start on a record: a safe point inside a file we
         * no longer have (or past the files) restarts at the first file. */
        struct mfile *mf = mfq_find(&cl->q, start);
        if (mf == NULL)
            start = min;
        else
            mfile_unpin(mf);
        s->recovered_from = start;
        end = scan(s, start, s->conf.check_crc_on_recover, true, &rc);
        if (rc != 0)
            return rc;
        log_info("store %s: scanned from %" PRId64 " (%" PRId64 " records "
                 "re-dispatched), log ends at %" PRId64 "; %d index file(s) "
                 "rebuilt", s->root, start, s->recovered_records, end, dropped);
    }
    if (rc != 0)
        return rc;
    rc = clog_set_end(cl, end, abnormal);
    if (rc != 0) {
        char why[300];
        snprintf(why, sizeof(why), "cannot reserve the commit log's write position in its "
                 "file: %s", err_msg());
        store_set_readonly(s, why);
    }
    struct fix_arg fa = { end, clog_min(cl), abnormal };
    cqt_foreach(&s->cqs, fix_queue, &fa);
    ix_resume(&s->ix, cl);
    return 0;
}
