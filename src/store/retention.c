/* retention: deleting expired files (see retention.h). */
#include "store/retention.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"
#include "store/store.h"

#define FORCIBLY_RATIO 85.0     /* diskSpaceCleanForciblyRatio */
#define BATCH_MAX 10            /* deleteFileBatchMax */

bool
retention_hour_matches(const char *delete_when, int hour)
{
    const char *p = delete_when;
    while (*p != '\0') {
        char *end;
        long h = strtol(p, &end, 10);
        if (end != p && h == hour)
            return true;
        p = strchr(p, ';');
        if (p == NULL)
            break;
        p++;
    }
    return false;
}

static int
clean_queues(struct store *s, int64_t clog_min)
{
    struct cq **all;
    int n = cqt_snapshot(&s->cqs, &all);
    int deleted = 0;
    for (int i = 0; i < n; i++)
        deleted += cq_delete_expired(all[i], clog_min);
    if (n >= 0)
        free(all);
    return deleted;
}

int
retention_run(struct store *s, const struct retention_opts *o,
              struct retention_stats *st)
{
    memset(st, 0, sizeof(*st));
    struct commitlog *cl = &s->clog;
    double ratio = store_disk_ratio(s);
    st->disk_ratio = ratio;
    time_t now_s = (time_t)(o->now_ms / 1000);
    struct tm tm;
    localtime_r(&now_s, &tm);
    bool time_ok = o->at_once ||
                   retention_hour_matches(s->conf.delete_when, tm.tm_hour);
    bool space_ok = ratio > (double)s->conf.disk_max_used_ratio;
    bool forcibly = o->force ||
                    (s->conf.clean_forcibly && ratio > FORCIBLY_RATIO);
    if (!time_ok && !space_ok && !forcibly) {
        /* Still drop queue/index files left behind by an earlier run. */
        return 0;
    }
    st->ran = true;
    int64_t reserved = o->reserved_ms >= 0
                           ? o->reserved_ms
                           : (int64_t)s->conf.file_reserved_hours * 3600000;
    int max = o->max_files > 0 ? o->max_files : BATCH_MAX;
    while (st->clog_files < max && mfq_count(&cl->q) > 1) {
        struct mfile *mf = mfq_first(&cl->q);
        if (mf == NULL)
            break;
        int64_t mtime = mfile_mtime(mf);
        bool expired = mtime >= 0 && o->now_ms >= mtime + reserved;
        /* The file being written (or about to be) is never deleted. */
        bool current = mf->start + (int64_t)mf->size > clog_wrote(cl);
        if ((!expired && !forcibly) || current) {
            mfile_unpin(mf);
            break;
        }
        int64_t next = mf->start + (int64_t)mf->size;
        char path[4096];
        snprintf(path, sizeof(path), "%s", mf->path);
        bool dropped = mfq_drop_first(&cl->q, mf, 1);
        mfile_unpin(mf);
        if (!dropped) {
            st->pinned++;
            log_info("retention: %s is in use; deleting it later", path);
            break;
        }
        atomic_store_explicit(&cl->min, next, memory_order_release);
        log_info("retention: deleted %s (%s; disk %.1f%% used)", path,
                 expired ? "expired" : "disk nearly full", ratio);
        st->clog_files++;
    }
    int64_t min = clog_min(cl);
    st->cq_files = clean_queues(s, min);
    st->index_files = ix_delete_expired(&s->ix, min);
    return st->clog_files;
}
