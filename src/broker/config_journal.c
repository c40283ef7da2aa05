/*
 * config_journal: see config_journal.h.
 */
#include "broker/config_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/fjson.h"
#include "core/log.h"
#include "store/store.h"

struct config_journal {
    struct config_table *t;
    pthread_mutex_t lock;      /* guards everything below and every write to the journal */
    char *path;                /* the file; NULL: not opened, appends do nothing */
    char *jpath;               /* path + ".journal" */
    uint64_t written;          /* the generation the file and journal hold */
    uint64_t removals;         /* config_table_removals at the last rewrite */
    bool rewrite;              /* the next save rewrites (after a load) */
    uint64_t lines;            /* lines in the journal since the last rewrite */
    uint64_t appends;          /* appends so far (a rewrite drops the journal only if none ran meanwhile) */
    bool unsynced;             /* appended since the last fdatasync */
    bool created;              /* the journal was created since: its directory entry too */
};

struct config_journal *
config_journal_new(struct config_table *t)
{
    struct config_journal *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    if (pthread_mutex_init(&j->lock, NULL) != 0) {
        free(j);
        return NULL;
    }
    j->t = t;
    j->rewrite = true;
    return j;
}

/* The journals of the process-wide tables: one pair per process, as the
 * tables (config_table_topics); freed at exit by the OS. */
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static struct config_journal *shared_topics, *shared_groups;

static void
shared_init(void)
{
    struct config_table *t = config_table_topics(), *g = config_table_groups();
    shared_topics = t != NULL ? config_journal_new(t) : NULL;
    shared_groups = g != NULL ? config_journal_new(g) : NULL;
}

struct config_journal *
config_journal_topics(void)
{
    pthread_once(&shared_once, shared_init);
    return shared_topics;
}

struct config_journal *
config_journal_groups(void)
{
    pthread_once(&shared_once, shared_init);
    return shared_groups;
}

void
config_journal_free(struct config_journal *j)
{
    if (j == NULL)
        return;
    pthread_mutex_destroy(&j->lock);
    free(j->path);
    free(j->jpath);
    free(j);
}

/* Under the lock. */
static int
set_path(struct config_journal *j, const char *path)
{
    if (j->path != NULL && strcmp(j->path, path) == 0)
        return 0;
    size_t n = strlen(path);
    char *p = strdup(path), *jp = malloc(n + sizeof(".journal"));
    if (p == NULL || jp == NULL) {
        free(p);
        free(jp);
        err_set("out of memory");
        return -ENOMEM;
    }
    memcpy(jp, path, n);
    memcpy(jp + n, ".journal", sizeof(".journal"));
    free(j->path);
    free(j->jpath);
    j->path = p;
    j->jpath = jp;
    return 0;
}

int
config_journal_open(struct config_journal *j, const char *path, int64_t valid)
{
    pthread_mutex_lock(&j->lock);
    int rc = set_path(j, path);
    struct stat st;
    /* A torn batch at the end (a SIGKILL inside a write): cut off, so the
     * next append does not glue its first line to it. */
    bool torn = rc == 0 && valid >= 0 && stat(j->jpath, &st) == 0 && st.st_size > valid;
    if (torn && truncate(j->jpath, (off_t)valid) != 0) {
        rc = -errno;
        err_set("cannot cut the torn end of %s: %s", j->jpath, strerror(-rc));
    } else if (rc == 0) {
        if (torn)
            log_warn("%s: a torn batch of %lld bytes at its end cut off (never acknowledged)",
                     j->jpath, (long long)(st.st_size - valid));
        j->written = config_table_gen(j->t);
        j->removals = config_table_removals(j->t);
        j->rewrite = true;
    }
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void
config_journal_mark(struct config_journal *j)
{
    pthread_mutex_lock(&j->lock);
    j->written = config_table_gen(j->t);
    j->removals = config_table_removals(j->t);
    j->rewrite = false;
    pthread_mutex_unlock(&j->lock);
}

/* The entries changed after generation `since`, in a malloc'ed snapshot
 * (NULL on ENOMEM). */
static struct config_snapshot *
changed_since(struct config_table *t, uint64_t since)
{
    size_t cap = config_table_snapshot(t, since, NULL, 0);
    void *block = NULL;
    for (;;) {
        free(block);
        block = malloc(cap);
        if (block == NULL)
            return NULL;
        size_t need = config_table_snapshot(t, since, block, cap);
        if (need <= cap)
            return block;
        cap = need + need / 8;   /* it grew meanwhile */
    }
}

/* One batch: each entry's line, then the DataVersion's line. */
static int
encode_batch(struct buf *b, const struct config_snapshot *s, const struct config_journal_codec *c)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        rc = c->line(b, it->name, it->name_len, it->rec);
        if (rc == 0)
            rc = buf_append(b, "\n", 1);
    }
    if (rc != 0)
        return rc;
    struct fjw w;
    fjw_init(&w, b, false);
    fjw_lit(&w, "{\"dataVersion\":{\"counter\":");
    fjw_i64(&w, s->dv.counter);
    fjw_lit(&w, ",\"timestamp\":");
    fjw_i64(&w, s->dv.timestamp);
    fjw_lit(&w, "}}\n");
    return w.err;
}

/* Appends data to the journal with one write (O_APPEND), cut back to its
 * old length when the write fails or is short.  Under the lock. */
static int
write_batch(struct config_journal *j, const void *data, size_t n)
{
    int fd = open(j->jpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = -errno;
        err_set("cannot open %s: %s", j->jpath, strerror(-rc));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        err_set("cannot stat %s: %s", j->jpath, strerror(-rc));
        close(fd);
        return rc;
    }
    const char *p = data;
    size_t left = n;
    int rc = 0;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -ENOSPC;
            err_set("cannot append to %s: %s", j->jpath, strerror(-rc));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc != 0 && left < n && ftruncate(fd, st.st_size) != 0)
        log_error("%s: cannot cut a failed append off (%s): the replay stops there", j->jpath,
                  strerror(errno));
    close(fd);
    if (rc == 0 && st.st_size == 0)
        j->created = true;
    return rc;
}

/* Under the lock. */
static int
append_locked(struct config_journal *j, const struct config_journal_codec *c)
{
    if (j->path == NULL)
        return 0;
    uint64_t now = config_table_gen(j->t);
    if (now == j->written)
        return 0;
    struct config_snapshot *s = changed_since(j->t, j->written);
    if (s == NULL) {
        err_set("out of memory reading the changes of %s", j->path);
        return -ENOMEM;
    }
    struct buf b;
    buf_init(&b);
    int rc = encode_batch(&b, s, c);
    if (rc != 0)
        err_set("out of memory encoding the journal of %s", j->path);
    else
        rc = write_batch(j, buf_head(&b), buf_len(&b));
    if (rc == 0) {
        j->written = s->gen;
        j->lines += s->count + 1;
        j->appends++;
        j->unsynced = true;
    }
    buf_free(&b);
    free(s);
    return rc;
}

int
config_journal_append(struct config_journal *j, const struct config_journal_codec *c,
                      uint64_t *gen)
{
    pthread_mutex_lock(&j->lock);
    int rc = append_locked(j, c);
    if (gen != NULL)
        *gen = j->written;
    pthread_mutex_unlock(&j->lock);
    return rc;
}

static int
sync_path(const char *path, bool dir)
{
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && !dir)
            return 0;   /* dropped by a rewrite meanwhile */
        int rc = -errno;
        err_set("cannot open %s: %s", path, strerror(-rc));
        return rc;
    }
    int rc = (dir ? fsync(fd) : fdatasync(fd)) == 0 ? 0 : -errno;
    if (rc != 0)
        err_set("cannot sync %s: %s", path, strerror(-rc));
    close(fd);
    return rc;
}

/* What appends left in the page cache, to the disk. */
static int
sync_appended(struct config_journal *j)
{
    pthread_mutex_lock(&j->lock);
    bool unsynced = j->unsynced, created = j->created;
    j->unsynced = j->created = false;
    char jpath[PATH_MAX];
    snprintf(jpath, sizeof(jpath), "%s", j->jpath != NULL ? j->jpath : "");
    pthread_mutex_unlock(&j->lock);
    /* Outside the lock: an append meanwhile sets unsynced again. */
    int rc = unsynced ? sync_path(jpath, false) : 0;
    if (rc == 0 && created) {
        char *slash = strrchr(jpath, '/');
        if (slash != NULL) {
            *slash = '\0';
            rc = sync_path(slash == jpath ? "/" : jpath, true);
        }
    }
    if (rc != 0) {
        pthread_mutex_lock(&j->lock);
        j->unsynced |= unsynced;
        j->created |= created;
        pthread_mutex_unlock(&j->lock);
    }
    return rc;
}

int
config_journal_save(struct config_journal *j, const char *path, bool force,
                    const struct config_journal_codec *c, uint64_t *gen)
{
    pthread_mutex_lock(&j->lock);
    int rc = set_path(j, path);
    if (rc != 0) {
        pthread_mutex_unlock(&j->lock);
        return rc;
    }
    uint64_t removals = config_table_removals(j->t);
    size_t count = config_table_count(j->t);
    bool whole = force || j->rewrite || removals != j->removals ||
                 j->lines > (count / 8 > 256 ? count / 8 : 256);
    if (!whole) {
        rc = append_locked(j, c);
        *gen = j->written;
        pthread_mutex_unlock(&j->lock);
        return rc == 0 ? sync_appended(j) : rc;
    }
    uint64_t appends = j->appends, lines = j->lines;
    pthread_mutex_unlock(&j->lock);

    /* The whole table, encoded and written with no lock held: workers
     * append meanwhile (the snapshot is taken after `appends` was read,
     * so a batch the journal got before it is in the file too). */
    struct buf b;
    buf_init(&b);
    uint64_t g = 0;
    rc = c->whole(j->t, &b, &g, c->arg);
    if (rc != 0)
        err_set("out of memory encoding %s", path);
    else
        rc = store_write_file_atomic(path, buf_head(&b), buf_len(&b));
    buf_free(&b);
    if (rc != 0)
        return rc;

    pthread_mutex_lock(&j->lock);
    if (j->appends == appends) {
        /* Nothing was appended since the snapshot: all of it is in the
         * file.  A failed unlink leaves batches the replay skips. */
        if (unlink(j->jpath) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", j->jpath, strerror(errno));
        j->lines = 0;
        j->unsynced = j->created = false;
    } else {
        j->lines -= lines < j->lines ? lines : j->lines;
    }
    if (g > j->written)
        j->written = g;
    j->removals = removals;
    j->rewrite = false;
    *gen = j->written;
    pthread_mutex_unlock(&j->lock);
    return sync_appended(j);
}
