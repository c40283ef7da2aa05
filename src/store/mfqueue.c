/* mfqueue: contiguous mapped files, named by offset (see mfqueue.h). */
#include "store/mfqueue.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "store/mfpool.h"

int
mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(tmp)) {
        err_set("bad directory path '%s'", path);
        return -EINVAL;
    }
    /* Usually only the last component is missing (a new consume queue's
     * directory): one mkdir, not one per component from the root (perf:
     * 13 % of the broker's time while 8,192 topics were auto-created). */
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno != ENOENT && errno != EEXIST) {
        int e = errno;
        err_set("cannot create directory %s: %s", path, strerror(e));
        return -e;
    }
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            err_set("cannot create directory %s: %s", tmp, strerror(e));
            return -e;
        }
        tmp[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        err_set("%s is not a directory", path);
        return -ENOTDIR;
    }
    return 0;
}

int
fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        err_set("cannot open directory %s: %s", path, strerror(e));
        return -e;
    }
    int rc = 0;
    if (fsync(fd) != 0) {
        rc = -errno;
        err_set("cannot sync directory %s: %s", path, strerror(-rc));
    }
    close(fd);
    return rc;
}

int
mfq_init(struct mfqueue *q, const char *dir, size_t file_size)
{
    memset(q, 0, sizeof(*q));
    q->file_size = file_size;
    q->want = -1;
    atomic_init(&q->warm_kick, INT64_MAX);
    atomic_init(&q->writer_pos, 0);
    int rc = mkdir_p(dir);
    if (rc != 0)
        return rc;
    q->dir = strdup(dir);
    if (q->dir == NULL) {
        err_set("out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    pthread_cond_init(&q->warm_cond, NULL);
    return 0;
}

void
mfq_set_pool(struct mfqueue *q, struct mfpool *pool)
{
    q->pool = pool;
}

/* Counts a file just mapped; past the pool's bound, unmaps cold files of
 * any queue, a batch at a time (a sixteenth of the bound, at most 64: a
 * batch costs about 5 us per munmap, and this can run under the commit
 * log's append lock when a queue's new file is created).  Lock held. */
static void
pool_add_locked(struct mfqueue *q, struct mfile *mf)
{
    struct mfpool *p = q->pool;
    /* No read-around on faults: the first write to a new consume queue
     * otherwise made the kernel allocate and zero large folios around
     * the page (perf: most of the broker's CPU while 8,192 topics were
     * auto-created, under the append lock).  Entries are 20 bytes; a
     * page holds 204 of them. */
    if (madvise(mf->base, mf->size, MADV_RANDOM) != 0)
        log_debug("madvise %s: %s", mf->path, strerror(errno));
    if (mfpool_add(p, mf, &q->lock) != 0)
        log_warn("%s: %s (file mapped but not counted)", mf->path, err_msg());
    if (mfpool_over(p)) {
        size_t batch = p->limit / 16 < 64 ? p->limit / 16 + 1 : 64;
        mfpool_trim(p, p->limit > batch ? p->limit - batch : 0);
    }
}

/* Pins files[i], mapping it first when it is cold (lazy queues), counted
 * in the pool (pool_add_locked); when the process is
 * out of mappings, the pool gives some back and the map is tried once
 * more.  Returns NULL with errno set if the file cannot be mapped.  Lock
 * held (the pool's lock comes after it). */
static struct mfile *
pin_locked(struct mfqueue *q, struct mfile *mf)
{
    if (q->pool != NULL) {
        if (mf->base == NULL) {
            int rc = mfile_map(mf);
            if (rc == -ENOMEM) {
                struct mfpool *p = q->pool;
                size_t n = mfpool_count(p);
                log_warn("%s; unmapping cold consume queue files (%zu mapped)",
                         err_msg(), n);
                mfpool_trim(p, n - n / 4);
                rc = mfile_map(mf);
            }
            if (rc != 0) {
                errno = -rc;
                return NULL;
            }
            pool_add_locked(q, mf);
        }
        atomic_store_explicit(&mf->used, true, memory_order_relaxed);
    }
    mfile_pin(mf);
    return mf;
}

/* Forgets a file the queue lets go (before retiring it).  Lock held. */
static void
unpool_locked(struct mfqueue *q, struct mfile *mf)
{
    if (q->pool != NULL)
        mfpool_remove(q->pool, mf);
}

/* Appends to files[]; the caller holds the lock (or owns the queue). */
static int
files_push(struct mfqueue *q, struct mfile *mf)
{
    if (q->nfiles == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        struct mfile **nf = realloc(q->files, cap * sizeof(*nf));
        if (nf == NULL) {
            err_set("out of memory");
            return -ENOMEM;
        }
        q->files = nf;
        q->cap = cap;
    }
    q->files[q->nfiles++] = mf;
    return 0;
}

static int
cmp_start(const void *a, const void *b)
{
    int64_t x = (*(struct mfile *const *)a)->start;
    int64_t y = (*(struct mfile *const *)b)->start;
    return x < y ? -1 : x > y;
}

static bool
is_offset_name(const char *name, int64_t *out)
{
    if (strlen(name) != 20)
        return false;
    int64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        if (v > (INT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (name[i] - '0');
    }
    *out = v;
    return true;
}

int
mfq_load(struct mfqueue *q)
{
    DIR *d = opendir(q->dir);
    if (d == NULL) {
        int e = errno;
        err_set("cannot list %s: %s", q->dir, strerror(e));
        return -e;
    }
    int rc = 0;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        int64_t start;
        if (!is_offset_name(de->d_name, &start))
            continue;
        snprintf(path, sizeof(path), "%s/%s", q->dir, de->d_name);
        struct mfile *mf = mfile_open(path, start, q->file_size,
                                      q->pool != NULL ? MF_LAZY : 0);
        if (mf == NULL) {
            rc = -(errno ? errno : EIO);
            break;
        }
        if ((rc = files_push(q, mf)) != 0) {
            mfile_unpin(mf);
            break;
        }
    }
    closedir(d);
    if (rc != 0)
        return rc;
    if (q->nfiles > 1)
        qsort(q->files, q->nfiles, sizeof(*q->files), cmp_start);
    for (size_t i = 1; i < q->nfiles; i++) {
        if (q->files[i]->start != q->files[i - 1]->start + (int64_t)q->file_size) {
            err_set("%s does not follow %s (a file is missing or misnamed; "
                    "the log must be contiguous)", q->files[i]->path,
                    q->files[i - 1]->path);
            return -EINVAL;
        }
    }
    return 0;
}

/* The file holding `pos` among the queue's files and the prepared one,
 * pinned; NULL if none yet.  Lock held. */
static struct mfile *
warm_target(struct mfqueue *q, int64_t pos)
{
    if (q->nfiles > 0 && pos >= q->files[0]->start) {
        uint64_t i = (uint64_t)(pos - q->files[0]->start) / q->file_size;
        if (i < q->nfiles) {
            mfile_pin(q->files[i]);
            return q->files[i];
        }
    }
    if (q->ready != NULL && pos >= q->ready->start &&
        pos < q->ready->start + (int64_t)q->file_size) {
        mfile_pin(q->ready);
        return q->ready;
    }
    return NULL;
}

enum { WARM_DONE, WARM_MORE, WARM_NO_FILE };

/* Pre-faults one chunk at warm_pos if its file exists: WARM_MORE; else
 * WARM_DONE (the window ahead of the writer is warm) or WARM_NO_FILE
 * (the next file is not there yet: the roll-over that creates it wakes
 * the thread).  Called with the lock held; drops it meanwhile.
 * The warmed edge only moves forward: if the writer overtook it, the
 * next chunks are pages the writer faulted in already, which populating
 * skips cheaply, so the warmer catches up without leaving a gap (jumping
 * ahead of the writer measured slower). */
static int
warm_step(struct mfqueue *q)
{
    int64_t live = atomic_load_explicit(&q->writer_pos, memory_order_relaxed);
    if (q->warm_pos >= live + q->warm_window)
        return WARM_DONE;
    struct mfile *mf = warm_target(q, q->warm_pos);
    if (mf == NULL)
        return WARM_NO_FILE;
    int64_t from = q->warm_pos;
    int64_t end = mf->start + (int64_t)mf->size;
    int64_t to = from + MFQ_WARM_CHUNK < end ? from + MFQ_WARM_CHUNK : end;
    pthread_mutex_unlock(&q->lock);
    if (mfile_warm(mf, (size_t)(from - mf->start), (size_t)(to - from)) != 0)
        log_debug("warming %s: %s", mf->path, err_msg());
    mfile_unpin(mf);
    pthread_mutex_lock(&q->lock);
    if (q->warm_pos == from)
        q->warm_pos = to;
    return WARM_MORE;
}

static void *
allocator_main(void *arg)
{
    struct mfqueue *q = arg;
    char path[PATH_MAX], name[21];
    log_set_thread_name("store-alloc");
    pthread_setname_np(pthread_self(), "store-alloc");  /* for top -H, perf */
    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        if (q->want < 0 || q->ready != NULL) {
            pthread_cond_wait(&q->cond, &q->lock);
            continue;
        }
        int64_t start = q->want;
        q->busy = true;
        pthread_mutex_unlock(&q->lock);
        mfile_name(name, start);
        snprintf(path, sizeof(path), "%s/%s", q->dir, name);
        (void)unlink(path);  /* a stale prepared file from an old run */
        /* Reserved whole only with warmMapedFileEnable (RocketMQ's warm
         * files are written whole); else sparse, the writer reserving
         * chunks and the warmer allocating its window as it goes. */
        struct mfile *mf = mfile_open(path, start, q->file_size,
                                      MF_CREATE | (q->reserve_whole ? MF_RESERVE : 0));
        if (mf == NULL)
            log_warn("pre-allocating the next file: %s", err_msg());
        pthread_mutex_lock(&q->lock);
        q->busy = false;
        if (q->want == start) {
            q->want = -1;
            q->ready = mf;
        } else if (mf != NULL) {
            mfile_retire(mf);  /* no longer wanted */
        }
        pthread_cond_broadcast(&q->cond);
        pthread_cond_broadcast(&q->warm_cond);  /* a file to warm */
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

static void *
warmer_main(void *arg)
{
    struct mfqueue *q = arg;
    log_set_thread_name("store-warm");
    pthread_setname_np(pthread_self(), "store-warm");
    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        int w = warm_step(q);
        if (w == WARM_MORE)
            continue;
        /* Caught up: sleep until the writer nears the warmed edge (or the
         * next file appears). */
        atomic_store_explicit(&q->warm_kick,
                              w == WARM_DONE ? q->warm_pos - q->warm_window / 2
                                             : INT64_MAX,
                              memory_order_relaxed);
        pthread_cond_wait(&q->warm_cond, &q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

void
mfq_kick_warmer(struct mfqueue *q, int64_t pos)
{
    pthread_mutex_lock(&q->lock);
    /* No more kicks until the thread has caught up again. */
    atomic_store_explicit(&q->warm_kick, INT64_MAX, memory_order_relaxed);
    if (pos > atomic_load(&q->writer_pos))
        atomic_store(&q->writer_pos, pos);
    pthread_cond_broadcast(&q->warm_cond);
    pthread_mutex_unlock(&q->lock);
}

int
mfq_start_allocator(struct mfqueue *q, bool reserve_whole, int64_t warm_window,
                    int64_t pos)
{
    bool warm = warm_window > 0;
    q->warm = warm;
    q->reserve_whole = reserve_whole;
    q->warm_window = warm_window;
    atomic_store(&q->writer_pos, pos);
    q->warm_pos = pos;
    atomic_store(&q->warm_kick, INT64_MAX);
    if (q->nfiles == 0)
        q->want = pos - pos % (int64_t)q->file_size;
    int rc = pthread_create(&q->thread, NULL, allocator_main, q);
    if (rc != 0) {
        err_set("cannot start the file allocator: %s", strerror(rc));
        return -rc;
    }
    q->has_thread = true;
    if (warm) {
        rc = pthread_create(&q->warm_thread, NULL, warmer_main, q);
        if (rc != 0) {
            err_set("cannot start the file warmer: %s", strerror(rc));
            return -rc;
        }
        q->has_warm_thread = true;
    }
    return 0;
}

void
mfq_destroy(struct mfqueue *q)
{
    if (q->dir == NULL)
        return;
    if (q->has_thread || q->has_warm_thread) {
        pthread_mutex_lock(&q->lock);
        q->stop = true;
        pthread_cond_broadcast(&q->cond);
        pthread_cond_broadcast(&q->warm_cond);
        pthread_mutex_unlock(&q->lock);
        if (q->has_thread)
            pthread_join(q->thread, NULL);
        if (q->has_warm_thread)
            pthread_join(q->warm_thread, NULL);
        q->has_thread = q->has_warm_thread = false;
    }
    if (q->ready != NULL) {
        /* Like RocketMQ at shutdown: an unused prepared file goes. */
        mfile_retire(q->ready);
        q->ready = NULL;
    }
    for (size_t i = 0; i < q->nfiles; i++) {
        if (q->pool != NULL) {
            pthread_mutex_lock(&q->lock);
            unpool_locked(q, q->files[i]);
            pthread_mutex_unlock(&q->lock);
        }
        mfile_unpin(q->files[i]);
    }
    free(q->files);
    q->files = NULL;
    q->nfiles = q->cap = 0;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    pthread_cond_destroy(&q->warm_cond);
    free(q->dir);
    q->dir = NULL;
}

struct mfile *
mfq_find(struct mfqueue *q, int64_t off)
{
    struct mfile *mf = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->nfiles > 0 && off >= q->files[0]->start) {
        uint64_t i = (uint64_t)(off - q->files[0]->start) / q->file_size;
        if (i < q->nfiles)
            mf = pin_locked(q, q->files[i]);
        else
            errno = ENOENT;
    } else {
        errno = ENOENT;
    }
    pthread_mutex_unlock(&q->lock);
    return mf;
}

struct mfile *
mfq_pin(struct mfqueue *q, struct mfile *mf)
{
    pthread_mutex_lock(&q->lock);
    mf = pin_locked(q, mf);
    pthread_mutex_unlock(&q->lock);
    return mf;
}

struct mfile *
mfq_at(struct mfqueue *q, size_t i)
{
    struct mfile *mf = NULL;
    pthread_mutex_lock(&q->lock);
    if (i < q->nfiles)
        mf = pin_locked(q, q->files[i]);
    pthread_mutex_unlock(&q->lock);
    return mf;
}

struct mfile *
mfq_first(struct mfqueue *q)
{
    return mfq_at(q, 0);
}

struct mfile *
mfq_last(struct mfqueue *q)
{
    struct mfile *mf = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->nfiles > 0)
        mf = pin_locked(q, q->files[q->nfiles - 1]);
    pthread_mutex_unlock(&q->lock);
    return mf;
}

bool
mfq_is_last(struct mfqueue *q, const struct mfile *mf)
{
    pthread_mutex_lock(&q->lock);
    bool last = q->nfiles > 0 && q->files[q->nfiles - 1] == mf;
    pthread_mutex_unlock(&q->lock);
    return last;
}

size_t
mfq_count(struct mfqueue *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->nfiles;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int64_t
mfq_min(struct mfqueue *q)
{
    pthread_mutex_lock(&q->lock);
    int64_t v = q->nfiles > 0 ? q->files[0]->start : -1;
    pthread_mutex_unlock(&q->lock);
    return v;
}

void
mfq_prepare_next(struct mfqueue *q)
{
    if (!q->has_thread)
        return;
    pthread_mutex_lock(&q->lock);
    if (q->nfiles > 0 && q->want < 0) {
        int64_t next = q->files[q->nfiles - 1]->start + (int64_t)q->file_size;
        if (q->ready == NULL || q->ready->start != next) {
            q->want = next;
            pthread_cond_signal(&q->cond);
        }
    }
    pthread_mutex_unlock(&q->lock);
}

struct mfile *
mfq_create(struct mfqueue *q, int64_t start, bool reserve)
{
    struct mfile *mf = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->nfiles > 0 &&
        start != q->files[q->nfiles - 1]->start + (int64_t)q->file_size) {
        pthread_mutex_unlock(&q->lock);
        err_set("%s: new file at %" PRId64 " does not follow the last one",
                q->dir, start);
        errno = EINVAL;
        return NULL;
    }
    for (;;) {
        if (q->ready != NULL && q->ready->start == start) {
            mf = q->ready;
            q->ready = NULL;
            break;
        }
        if (q->busy && q->want == start) {
            pthread_cond_wait(&q->cond, &q->lock);
            continue;
        }
        if (q->ready != NULL) {
            mfile_retire(q->ready);
            q->ready = NULL;
        }
        if (q->want == start)
            q->want = -1;  /* we make it ourselves */
        break;
    }
    pthread_mutex_unlock(&q->lock);

    if (mf == NULL) {
        char path[PATH_MAX], name[21];
        mfile_name(name, start);
        snprintf(path, sizeof(path), "%s/%s", q->dir, name);
        (void)unlink(path);
        mf = mfile_open(path, start, q->file_size,
                        MF_CREATE | (reserve ? MF_RESERVE : 0));
        if (mf == NULL)
            return NULL;
    }
    pthread_mutex_lock(&q->lock);
    int rc = files_push(q, mf);
    if (rc == 0 && q->pool != NULL)
        pool_add_locked(q, mf);
    pthread_mutex_unlock(&q->lock);
    if (rc != 0) {
        mfile_retire(mf);
        errno = ENOMEM;
        return NULL;
    }
    mfq_prepare_next(q);
    return mf;
}

bool
mfq_drop_first(struct mfqueue *q, struct mfile *mf, int caller_pins)
{
    bool dropped = false;
    pthread_mutex_lock(&q->lock);
    if (q->nfiles > 1 && q->files[0] == mf &&
        mfile_refs(mf) <= 1 + caller_pins) {
        memmove(q->files, q->files + 1, (q->nfiles - 1) * sizeof(*q->files));
        q->nfiles--;
        unpool_locked(q, mf);
        dropped = true;
    }
    pthread_mutex_unlock(&q->lock);
    if (dropped)
        mfile_retire(mf);  /* the queue's reference; pins keep the map */
    return dropped;
}

size_t
mfq_truncate(struct mfqueue *q, int64_t end)
{
    size_t removed = 0;
    for (;;) {
        struct mfile *victim = NULL;
        pthread_mutex_lock(&q->lock);
        if (q->nfiles > 0 && q->files[q->nfiles - 1]->start > end) {
            victim = q->files[--q->nfiles];
            unpool_locked(q, victim);
        }
        pthread_mutex_unlock(&q->lock);
        if (victim == NULL)
            break;
        log_info("deleting %s: past the end of valid data (%" PRId64 ")",
                 victim->path, end);
        mfile_retire(victim);
        removed++;
    }
    /* A file prepared (or being made) for the old last file's roll-over
     * is not the next one any more: left on disk past the gap, it would
     * stop the next start ("does not follow").  Drop it; the allocator
     * drops one it is still making. */
    struct mfile *stale = NULL;
    pthread_mutex_lock(&q->lock);
    int64_t next = q->nfiles > 0
        ? q->files[q->nfiles - 1]->start + (int64_t)q->file_size
        : end - end % (int64_t)q->file_size;
    if (q->ready != NULL && q->ready->start != next) {
        stale = q->ready;
        q->ready = NULL;
    }
    if (q->want >= 0 && q->want != next)
        q->want = -1;
    pthread_mutex_unlock(&q->lock);
    if (stale != NULL) {
        log_info("deleting %s: prepared for a file past the end of valid "
                 "data (%" PRId64 ")", stale->path, end);
        mfile_retire(stale);
    }
    if (removed > 0 || stale != NULL)
        mfq_prepare_next(q);
    return removed;
}
