/*
 * popstore: see popstore.h.
 */
#include "store/popstore.h"

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
#include "core/crc32.h"
#include "core/err.h"
#include "core/log.h"

/* Log record types. */
enum { R_KEY = 'K', R_POP = 'P', R_CURSOR = 'C', R_ACK = 'A', R_CHANGE = 'V', R_REVIVED = 'R' };

/* A lease being revived: not due again until popstore_revived. */
#define REVIVING INT64_MAX

struct pgroup {
    struct pgroup *next;
    uint64_t h;
    int64_t inflight;
    size_t len;
    char name[];
};

struct pkey {
    struct pkey *next;
    uint64_t h;
    uint32_t id;
    int32_t qid;
    struct pgroup *g;
    char *topic;
    size_t tlen;
    struct pop_lease *v;       /* ascending offsets; deadline 0: dead */
    int n, cap, head, live;
    int64_t cursor;            /* recovered POP cursor, -1 once taken */
    int64_t last_next;         /* the last POP's cursor (a rewrite keeps it) */
    int64_t due;               /* no live deadline before this */
    bool logged;               /* its K record is in the log */
    bool busy;                 /* a POP is reading the queue (popstore_try_lock) */
};

struct popstore {
    pthread_mutex_t mu;
    struct popstore_conf conf;
    char *path;
    int fd;
    int64_t log_bytes;
    int64_t compacted;         /* size right after the last rewrite */
    struct pkey **kt;
    size_t kcap, kn;
    struct pgroup **gt;
    size_t gcap, gn;
    struct pkey **byid;
    uint32_t nid, idcap;
    int64_t inflight, acked, revived, changed;
    struct buf out;            /* records of the request being logged */
};

/* {{{ Hashing */

static uint64_t
fnv(const void *p, size_t n, uint64_t h)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t
key_hash(const char *g, size_t gl, const char *t, size_t tl, int32_t qid)
{
    uint64_t h = fnv(g, gl, 14695981039346656037ULL);
    h = fnv("\0", 1, h);
    h = fnv(t, tl, h);
    return fnv(&qid, sizeof(qid), h);
}

static int
grow_table(void ***tab, size_t *cap, size_t n, size_t next_off, size_t h_off)
{
    if (n * 2 < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void **nt = calloc(nc, sizeof(*nt));
    if (nt == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < *cap; i++) {
        void *e = (*tab)[i];
        while (e != NULL) {
            void **nextp = (void **)((char *)e + next_off);
            void *next = *nextp;
            uint64_t h = *(uint64_t *)((char *)e + h_off);
            *nextp = nt[h & (nc - 1)];
            nt[h & (nc - 1)] = e;
            e = next;
        }
    }
    free(*tab);
    *tab = nt;
    *cap = nc;
    return 0;
}

static struct pgroup *
group_get(struct popstore *ps, const char *g, size_t gl, bool create)
{
    uint64_t h = fnv(g, gl, 14695981039346656037ULL);
    if (ps->gcap > 0)
        for (struct pgroup *e = ps->gt[h & (ps->gcap - 1)]; e != NULL; e = e->next)
            if (e->h == h && e->len == gl && memcmp(e->name, g, gl) == 0)
                return e;
    if (!create)
        return NULL;
    if (grow_table((void ***)&ps->gt, &ps->gcap, ps->gn, offsetof(struct pgroup, next),
                   offsetof(struct pgroup, h)) != 0)
        return NULL;
    struct pgroup *e = calloc(1, sizeof(*e) + gl + 1);
    if (e == NULL)
        return NULL;
    e->h = h;
    e->len = gl;
    memcpy(e->name, g, gl);
    e->next = ps->gt[h & (ps->gcap - 1)];
    ps->gt[h & (ps->gcap - 1)] = e;
    ps->gn++;
    return e;
}

static struct pkey *
key_find(struct popstore *ps, const char *g, size_t gl, const char *t, size_t tl, int32_t qid)
{
    if (ps->kcap == 0)
        return NULL;
    uint64_t h = key_hash(g, gl, t, tl, qid);
    for (struct pkey *e = ps->kt[h & (ps->kcap - 1)]; e != NULL; e = e->next)
        if (e->h == h && e->qid == qid && e->tlen == tl && e->g->len == gl &&
            memcmp(e->topic, t, tl) == 0 && memcmp(e->g->name, g, gl) == 0)
            return e;
    return NULL;
}

/* A new key, with the id `id` (replay) or the next one (id == UINT32_MAX). */
static struct pkey *
key_new(struct popstore *ps, const char *g, size_t gl, const char *t, size_t tl, int32_t qid,
        uint32_t id)
{
    if (id == UINT32_MAX)
        id = ps->nid;
    if (id >= ps->idcap) {
        uint32_t nc = ps->idcap ? ps->idcap : 64;
        while (nc <= id)
            nc *= 2;
        struct pkey **nb = realloc(ps->byid, nc * sizeof(*nb));
        if (nb == NULL)
            return NULL;
        memset(nb + ps->idcap, 0, (nc - ps->idcap) * sizeof(*nb));
        ps->byid = nb;
        ps->idcap = nc;
    }
    if (ps->byid[id] != NULL)
        return NULL;   /* a log defining one id twice */
    struct pgroup *grp = group_get(ps, g, gl, true);
    if (grp == NULL ||
        grow_table((void ***)&ps->kt, &ps->kcap, ps->kn, offsetof(struct pkey, next),
                   offsetof(struct pkey, h)) != 0)
        return NULL;
    struct pkey *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return NULL;
    k->topic = malloc(tl + 1);
    if (k->topic == NULL) {
        free(k);
        return NULL;
    }
    memcpy(k->topic, t, tl);
    k->topic[tl] = 0;
    k->tlen = tl;
    k->qid = qid;
    k->g = grp;
    k->id = id;
    k->cursor = -1;
    k->last_next = -1;
    k->due = INT64_MAX;
    k->h = key_hash(g, gl, t, tl, qid);
    k->next = ps->kt[k->h & (ps->kcap - 1)];
    ps->kt[k->h & (ps->kcap - 1)] = k;
    ps->kn++;
    ps->byid[id] = k;
    if (id >= ps->nid)
        ps->nid = id + 1;
    return k;
}

/* }}} */

/* {{{ Leases of one key */

/* Index of the lease on offset in k (live or dead), or -1. */
static int
lease_find(const struct pkey *k, int64_t offset)
{
    int lo = k->head, hi = k->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (k->v[mid].offset == offset)
            return mid;
        if (k->v[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Drops the dead: the prefix at once, the rest when half are dead. */
static void
lease_compact(struct pkey *k)
{
    while (k->head < k->n && k->v[k->head].deadline == 0)
        k->head++;
    if (k->head == k->n) {
        k->head = k->n = 0;
        /* Drained: a burst's array does not stay allocated. */
        if (k->cap > 64) {
            free(k->v);
            k->v = NULL;
            k->cap = 0;
        }
        return;
    }
    if (k->live * 2 >= k->n - k->head && k->head < k->n / 2)
        return;
    int w = 0;
    for (int i = k->head; i < k->n; i++)
        if (k->v[i].deadline != 0)
            k->v[w++] = k->v[i];
    k->n = w;
    k->head = 0;
}

static void
lease_kill(struct popstore *ps, struct pkey *k, int i)
{
    k->v[i].deadline = 0;
    k->live--;
    k->g->inflight--;
    ps->inflight--;
    lease_compact(k);
}

/* Adds (or replaces, on a re-pop after an offset reset) the lease. */
static int
lease_put(struct popstore *ps, struct pkey *k, const struct pop_lease *l)
{
    int i = lease_find(k, l->offset);
    if (i >= 0) {
        if (k->v[i].deadline == 0) {
            k->live++;
            k->g->inflight++;
            ps->inflight++;
        }
        k->v[i] = *l;
    } else {
        if (k->n == k->cap) {
            if (k->head > 0) {
                memmove(k->v, k->v + k->head, sizeof(*k->v) * (size_t)(k->n - k->head));
                k->n -= k->head;
                k->head = 0;
            }
            if (k->n == k->cap) {
                int nc = k->cap ? k->cap * 2 : 16;
                struct pop_lease *nv = realloc(k->v, sizeof(*nv) * (size_t)nc);
                if (nv == NULL)
                    return -ENOMEM;
                k->v = nv;
                k->cap = nc;
            }
        }
        /* Ascending: the tail, unless an offset reset went back. */
        int at = k->n;
        while (at > k->head && k->v[at - 1].offset > l->offset)
            at--;
        memmove(k->v + at + 1, k->v + at, sizeof(*k->v) * (size_t)(k->n - at));
        k->v[at] = *l;
        k->n++;
        k->live++;
        k->g->inflight++;
        ps->inflight++;
    }
    if (l->deadline < k->due)
        k->due = l->deadline;
    return 0;
}

/* }}} */

/* {{{ The log */

static int
rec_begin(struct buf *b, int type, size_t *at)
{
    *at = buf_len(b);
    uint8_t h[4] = { (uint8_t)type, 0, 0, 0 };
    return buf_append(b, h, 4);
}

static int
rec_end(struct buf *b, size_t at)
{
    size_t len = buf_len(b) - at - 4;
    if (len > 0xffff)
        return -EINVAL;
    uint8_t *p = (uint8_t *)buf_head(b) + at;
    p[2] = (uint8_t)(len & 0xff);
    p[3] = (uint8_t)(len >> 8);
    uint32_t crc = rmq_crc32(0, p, len + 4);
    return buf_append(b, &crc, 4);
}

#define PUT(b, v) buf_append((b), &(v), sizeof(v))

static int
log_key(struct buf *b, const struct pkey *k)
{
    size_t at;
    uint16_t gl = (uint16_t)k->g->len, tl = (uint16_t)k->tlen;
    if (rec_begin(b, R_KEY, &at) != 0 || PUT(b, k->id) != 0 || PUT(b, k->qid) != 0 ||
        PUT(b, gl) != 0 || buf_append(b, k->g->name, gl) != 0 || PUT(b, tl) != 0 ||
        buf_append(b, k->topic, tl) != 0)
        return -ENOMEM;
    return rec_end(b, at);
}

static int
log_pop(struct buf *b, uint32_t id, const struct pop_lease *l)
{
    size_t at;
    if (rec_begin(b, R_POP, &at) != 0 || PUT(b, id) != 0 || PUT(b, l->offset) != 0 ||
        PUT(b, l->phy) != 0 || PUT(b, l->size) != 0 || PUT(b, l->pop_time) != 0 ||
        PUT(b, l->deadline) != 0 || PUT(b, l->attempts) != 0 || PUT(b, l->order) != 0)
        return -ENOMEM;
    return rec_end(b, at);
}

static int
log_3(struct buf *b, int type, uint32_t id, int64_t a, int64_t c, int64_t d, int n)
{
    size_t at;
    if (rec_begin(b, type, &at) != 0 || PUT(b, id) != 0 || PUT(b, a) != 0)
        return -ENOMEM;
    if (n > 1 && PUT(b, c) != 0)
        return -ENOMEM;
    if (n > 2 && PUT(b, d) != 0)
        return -ENOMEM;
    return rec_end(b, at);
}

/* Writes ps->out to the log (one write(2): the request's records). */
static int
log_flush(struct popstore *ps)
{
    const uint8_t *p = buf_head(&ps->out);
    size_t n = buf_len(&ps->out);
    while (n > 0) {
        ssize_t w = write(ps->fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            err_set("write %s: %s", ps->path, strerror(e));
            buf_reset(&ps->out);
            return -e;
        }
        p += w;
        n -= (size_t)w;
        ps->log_bytes += w;
    }
    buf_reset(&ps->out);
    return 0;
}

struct rd {
    const uint8_t *p;
    size_t n, pos;
};

static bool
rd_get(struct rd *r, void *out, size_t n)
{
    if (r->pos + n > r->n)
        return false;
    memcpy(out, r->p + r->pos, n);
    r->pos += n;
    return true;
}

/* Applies one record; false: malformed (the rest of the log is ignored). */
static bool
replay_one(struct popstore *ps, int type, const uint8_t *p, size_t n)
{
    struct rd r = { p, n, 0 };
    uint32_t id;
    if (!rd_get(&r, &id, 4))
        return false;
    if (type == R_KEY) {
        int32_t qid;
        uint16_t gl, tl;
        if (!rd_get(&r, &qid, 4) || !rd_get(&r, &gl, 2) || r.pos + gl > n)
            return false;
        const char *g = (const char *)p + r.pos;
        r.pos += gl;
        if (!rd_get(&r, &tl, 2) || r.pos + tl > n)
            return false;
        const char *t = (const char *)p + r.pos;
        if (gl > POP_NAME_MAX || tl > POP_NAME_MAX)
            return false;
        struct pkey *k = key_new(ps, g, gl, t, tl, qid, id);
        if (k != NULL)
            k->logged = true;
        return k != NULL;
    }
    struct pkey *k = id < ps->idcap ? ps->byid[id] : NULL;
    if (k == NULL)
        return false;
    int64_t a, b, c;
    switch (type) {
    case R_POP: {
        struct pop_lease l;
        memset(&l, 0, sizeof(l));
        if (!rd_get(&r, &l.offset, 8) || !rd_get(&r, &l.phy, 8) || !rd_get(&r, &l.size, 4) ||
            !rd_get(&r, &l.pop_time, 8) || !rd_get(&r, &l.deadline, 8) ||
            !rd_get(&r, &l.attempts, 2) || !rd_get(&r, &l.order, 1))
            return false;
        return lease_put(ps, k, &l) == 0;
    }
    case R_CURSOR:
        if (!rd_get(&r, &a, 8))
            return false;
        k->cursor = k->last_next = a;   /* the last POP's wins */
        return true;
    case R_ACK:
    case R_REVIVED: {
        if (!rd_get(&r, &a, 8) || !rd_get(&r, &b, 8))
            return false;
        int i = lease_find(k, a);
        if (i >= 0 && k->v[i].deadline != 0 && k->v[i].pop_time == b)
            lease_kill(ps, k, i);
        return true;
    }
    case R_CHANGE: {
        if (!rd_get(&r, &a, 8) || !rd_get(&r, &b, 8) || !rd_get(&r, &c, 8))
            return false;
        int64_t d;
        if (!rd_get(&r, &d, 8))
            return false;
        int i = lease_find(k, a);
        if (i >= 0 && k->v[i].deadline != 0 && k->v[i].pop_time == b) {
            k->v[i].pop_time = c;
            k->v[i].deadline = d;
            if (d < k->due)
                k->due = d;
        }
        return true;
    }
    default:
        return false;
    }
}

static int
replay(struct popstore *ps)
{
    struct stat st;
    if (fstat(ps->fd, &st) != 0)
        return -errno;
    size_t size = (size_t)st.st_size;
    if (size == 0)
        return 0;
    uint8_t *data = malloc(size);
    if (data == NULL)
        return -ENOMEM;
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(ps->fd, data + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    size_t pos = 0;
    int64_t records = 0;
    while (pos + 8 <= got) {
        const uint8_t *p = data + pos;
        size_t len = (size_t)p[2] | (size_t)p[3] << 8;
        if (pos + 8 + len > got)
            break;
        uint32_t crc;
        memcpy(&crc, p + 4 + len, 4);
        if (crc != rmq_crc32(0, p, len + 4) || !replay_one(ps, p[0], p + 4, len))
            break;
        pos += 8 + len;
        records++;
    }
    free(data);
    if (pos < size) {
        /* A torn tail (a crash in the middle of a write): cut it, so the
         * next records follow good ones. */
        log_warn("pop lease log %s: %zu bytes after offset %zu unreadable, cut", ps->path,
                 size - pos, pos);
        if (ftruncate(ps->fd, (off_t)pos) != 0)
            return -errno;
    }
    ps->log_bytes = (int64_t)pos;
    if (lseek(ps->fd, 0, SEEK_END) < 0)
        return -errno;
    log_info("pop lease log %s: %lld records, %lld leases outstanding", ps->path,
             (long long)records, (long long)ps->inflight);
    return 0;
}

/* Rewrites the log with what is live: keys, cursors, leases. */
static int
compact(struct popstore *ps)
{
    size_t plen = strlen(ps->path);
    char *tmp = malloc(plen + 5);
    if (tmp == NULL)
        return -ENOMEM;
    memcpy(tmp, ps->path, plen);
    memcpy(tmp + plen, ".new", 5);
    struct buf b;
    buf_init(&b);
    int rc = 0;
    for (uint32_t id = 0; id < ps->nid && rc == 0; id++) {
        struct pkey *k = ps->byid[id];
        if (k == NULL)
            continue;
        rc = log_key(&b, k);
        k->logged = true;
        int64_t cur = k->last_next;
        if (rc == 0 && cur >= 0)
            rc = log_3(&b, R_CURSOR, k->id, cur, 0, 0, 1);
        for (int i = k->head; i < k->n && rc == 0; i++)
            if (k->v[i].deadline != 0) {
                struct pop_lease l = k->v[i];
                if (l.deadline == REVIVING)
                    l.deadline = l.pop_time;   /* due again after a restart */
                rc = log_pop(&b, k->id, &l);
            }
    }
    int fd = -1;
    if (rc == 0) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            rc = -errno;
    }
    const uint8_t *p = buf_head(&b);
    size_t n = buf_len(&b);
    while (rc == 0 && n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -errno;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    if (rc == 0 && fdatasync(fd) != 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, ps->path) != 0)
        rc = -errno;
    if (rc == 0) {
        /* Keys written before the rewrite are in it: the new fd goes on. */
        close(ps->fd);
        ps->fd = fd;
        ps->log_bytes = (int64_t)buf_len(&b);
        if (lseek(ps->fd, 0, SEEK_END) < 0)
            rc = -errno;
        fd = -1;
    }
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    buf_free(&b);
    free(tmp);
    if (rc != 0)
        log_warn("pop lease log %s: rewrite failed: %s", ps->path, strerror(-rc));
    return rc;
}

/* }}} */

/* {{{ Open */

struct popstore *
popstore_open(const char *dir, const struct popstore_conf *c)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        err_set("mkdir %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct popstore *ps = calloc(1, sizeof(*ps));
    if (ps == NULL) {
        err_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&ps->mu, NULL);
    ps->conf = *c;
    ps->fd = -1;
    buf_init(&ps->out);
    size_t dl = strlen(dir);
    ps->path = malloc(dl + 12);
    if (ps->path == NULL) {
        popstore_close(ps);
        err_set("out of memory");
        return NULL;
    }
    snprintf(ps->path, dl + 12, "%s/lease.log", dir);
    ps->fd = open(ps->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (ps->fd < 0) {
        err_set("open %s: %s", ps->path, strerror(errno));
        popstore_close(ps);
        return NULL;
    }
    int rc = replay(ps);
    if (rc != 0) {
        err_set("replay %s: %s", ps->path, strerror(-rc));
        popstore_close(ps);
        return NULL;
    }
    return ps;
}

void
popstore_close(struct popstore *ps)
{
    if (ps == NULL)
        return;
    for (uint32_t i = 0; i < ps->nid; i++) {
        struct pkey *k = ps->byid[i];
        if (k != NULL) {
            free(k->v);
            free(k->topic);
            free(k);
        }
    }
    for (size_t i = 0; i < ps->gcap; i++) {
        struct pgroup *g = ps->gt[i];
        while (g != NULL) {
            struct pgroup *next = g->next;
            free(g);
            g = next;
        }
    }
    free(ps->gt);
    free(ps->kt);
    free(ps->byid);
    if (ps->fd >= 0)
        close(ps->fd);
    free(ps->path);
    buf_free(&ps->out);
    pthread_mutex_destroy(&ps->mu);
    free(ps);
}

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct popstore *shared_ps;
static char *shared_dir;

struct popstore *
popstore_shared(const char *dir, const struct popstore_conf *c)
{
    pthread_mutex_lock(&shared_mu);
    struct popstore *ps = shared_ps;
    if (ps != NULL && strcmp(shared_dir, dir) != 0) {
        err_set("the pop lease store is open at %s already", shared_dir);
        ps = NULL;
    } else if (ps == NULL) {
        ps = popstore_open(dir, c);
        if (ps != NULL) {
            shared_dir = strdup(dir);
            if (shared_dir == NULL) {
                popstore_close(ps);
                ps = NULL;
                err_set("out of memory");
            } else {
                shared_ps = ps;
            }
        }
    }
    pthread_mutex_unlock(&shared_mu);
    return ps;
}

/* }}} */

/* {{{ Operations */

int64_t
popstore_room(struct popstore *ps, const char *group, size_t glen)
{
    pthread_mutex_lock(&ps->mu);
    struct pgroup *g = group_get(ps, group, glen, false);
    int64_t in = g != NULL ? g->inflight : 0;
    int64_t room = ps->conf.max_per_group - in;
    if (ps->conf.max_total - ps->inflight < room)
        room = ps->conf.max_total - ps->inflight;
    pthread_mutex_unlock(&ps->mu);
    return room > 0 ? room : 0;
}

bool
popstore_try_lock(struct popstore *ps, const char *group, size_t glen, const char *topic,
                  size_t tlen, int32_t qid)
{
    if (glen > POP_NAME_MAX || tlen > POP_NAME_MAX)
        return false;
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    if (k == NULL)
        k = key_new(ps, group, glen, topic, tlen, qid, UINT32_MAX);
    bool ok = k != NULL && !k->busy;
    if (ok)
        k->busy = true;
    pthread_mutex_unlock(&ps->mu);
    return ok;
}

void
popstore_unlock(struct popstore *ps, const char *group, size_t glen, const char *topic,
                size_t tlen, int32_t qid)
{
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    if (k != NULL)
        k->busy = false;
    pthread_mutex_unlock(&ps->mu);
}

int64_t
popstore_take_cursor(struct popstore *ps, const char *group, size_t glen, const char *topic,
                     size_t tlen, int32_t qid)
{
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int64_t c = -1;
    if (k != NULL) {
        c = k->cursor;
        k->cursor = -1;
    }
    pthread_mutex_unlock(&ps->mu);
    return c;
}

int
popstore_lease(struct popstore *ps, const char *group, size_t glen, const char *topic,
               size_t tlen, int32_t qid, struct pop_lease *v, int n, int64_t next)
{
    if (glen > POP_NAME_MAX || tlen > POP_NAME_MAX) {
        err_set("group or topic name too long");
        return -EINVAL;
    }
    pthread_mutex_lock(&ps->mu);
    int rc = 0;
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    if (k == NULL)
        k = key_new(ps, group, glen, topic, tlen, qid, UINT32_MAX);
    if (k == NULL)
        rc = -ENOMEM;
    else if (!k->logged && log_key(&ps->out, k) != 0)
        rc = -ENOMEM;
    for (int i = 0; i < n && rc == 0; i++) {
        int at = lease_find(k, v[i].offset);
        v[i].attempts = at >= 0 && k->v[at].deadline != 0 && k->v[at].attempts < INT16_MAX
                            ? (int16_t)(k->v[at].attempts + 1) : 0;
        rc = log_pop(&ps->out, k->id, &v[i]);
    }
    if (rc == 0)
        rc = log_3(&ps->out, R_CURSOR, k->id, next, 0, 0, 1);
    /* The log first: a lease the log does not hold is not handed out. */
    if (rc == 0)
        rc = log_flush(ps);
    else
        buf_reset(&ps->out);
    if (rc == 0)
        k->logged = true;
    for (int i = 0; i < n && rc == 0; i++)
        rc = lease_put(ps, k, &v[i]);
    if (rc == 0)
        k->last_next = next;
    pthread_mutex_unlock(&ps->mu);
    if (rc == -ENOMEM)
        err_set("out of memory");
    return rc;
}

/* An orderly key's offset: its first live lease, else its last cursor. */
static int64_t
order_floor(const struct pkey *k)
{
    for (int i = k->head; i < k->n; i++)
        if (k->v[i].deadline != 0)
            return k->v[i].offset;
    return k->last_next;
}

int
popstore_ack(struct popstore *ps, const char *group, size_t glen, const char *topic, size_t tlen,
             int32_t qid, int64_t offset, int64_t pop_time, int64_t *floor)
{
    *floor = -1;
    pthread_mutex_lock(&ps->mu);
    int rc = -ENOENT;
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int i = k != NULL ? lease_find(k, offset) : -1;
    if (i >= 0 && k->v[i].deadline != 0 && k->v[i].pop_time == pop_time) {
        rc = log_3(&ps->out, R_ACK, k->id, offset, pop_time, 0, 2);
        if (rc == 0)
            rc = log_flush(ps);
        else
            buf_reset(&ps->out);
        if (rc == 0) {
            bool order = k->v[i].order != 0;
            lease_kill(ps, k, i);
            ps->acked++;
            if (order)
                *floor = order_floor(k);
        }
    }
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

int
popstore_order_state(struct popstore *ps, const char *group, size_t glen, const char *topic,
                     size_t tlen, int32_t qid, int64_t now, int64_t *first)
{
    pthread_mutex_lock(&ps->mu);
    int st = POP_ORDER_FREE;
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    if (k != NULL && k->live > 0) {
        st = POP_ORDER_EXPIRED;
        *first = -1;
        for (int i = k->head; i < k->n; i++) {
            const struct pop_lease *l = &k->v[i];
            if (l->deadline == 0)
                continue;
            if (*first < 0)
                *first = l->offset;
            if (l->deadline > now) {
                st = POP_ORDER_BLOCKED;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ps->mu);
    return st;
}

int
popstore_ack_batch(struct popstore *ps, const char *group, size_t glen, const char *topic,
                   size_t tlen, int32_t qid, const int64_t *offsets, int n, int64_t pop_time,
                   int64_t *floor)
{
    return popstore_ack_each(ps, group, glen, topic, tlen, qid, offsets, n, pop_time, NULL, floor);
}

int
popstore_ack_each(struct popstore *ps, const char *group, size_t glen, const char *topic,
                  size_t tlen, int32_t qid, const int64_t *offsets, int n, int64_t pop_time,
                  bool *acked, int64_t *floor)
{
    *floor = -1;
    int done = 0;
    if (n > 64)
        n = 64;
    for (int j = 0; acked != NULL && j < n; j++)
        acked[j] = false;
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int hit[64];
    int nh = 0;
    for (int j = 0; k != NULL && j < n; j++) {
        int i = lease_find(k, offsets[j]);
        if (i < 0 || k->v[i].deadline == 0 || k->v[i].pop_time != pop_time)
            continue;
        if (log_3(&ps->out, R_ACK, k->id, offsets[j], pop_time, 0, 2) != 0)
            break;
        if (nh < 64)
            hit[nh++] = j;
    }
    /* One write for the batch, then the leases end. */
    if (nh > 0 && log_flush(ps) == 0) {
        bool order = false;
        for (int h = 0; h < nh; h++) {
            int i = lease_find(k, offsets[hit[h]]);
            if (i >= 0 && k->v[i].deadline != 0) {
                order = order || k->v[i].order != 0;
                lease_kill(ps, k, i);
                ps->acked++;
                done++;
                if (acked != NULL)
                    acked[hit[h]] = true;
            }
        }
        if (order)
            *floor = order_floor(k);
    } else {
        buf_reset(&ps->out);
    }
    pthread_mutex_unlock(&ps->mu);
    return done;
}

bool
popstore_leased(struct popstore *ps, const char *group, size_t glen, const char *topic,
                size_t tlen, int32_t qid, int64_t offset)
{
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int i = k != NULL ? lease_find(k, offset) : -1;
    bool yes = i >= 0 && k->v[i].deadline != 0;
    pthread_mutex_unlock(&ps->mu);
    return yes;
}

int
popstore_change(struct popstore *ps, const char *group, size_t glen, const char *topic,
                size_t tlen, int32_t qid, int64_t offset, int64_t pop_time, int64_t new_pop_time,
                int64_t new_deadline)
{
    pthread_mutex_lock(&ps->mu);
    int rc = -ENOENT;
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int i = k != NULL ? lease_find(k, offset) : -1;
    if (i >= 0 && k->v[i].deadline != 0 && k->v[i].pop_time == pop_time) {
        size_t at;
        rc = rec_begin(&ps->out, R_CHANGE, &at) == 0 && PUT(&ps->out, k->id) == 0 &&
                     PUT(&ps->out, offset) == 0 && PUT(&ps->out, pop_time) == 0 &&
                     PUT(&ps->out, new_pop_time) == 0 && PUT(&ps->out, new_deadline) == 0
                 ? rec_end(&ps->out, at)
                 : -ENOMEM;
        if (rc == 0)
            rc = log_flush(ps);
        else
            buf_reset(&ps->out);
        if (rc == 0) {
            k->v[i].pop_time = new_pop_time;
            k->v[i].deadline = new_deadline;
            if (new_deadline < k->due)
                k->due = new_deadline;
            ps->changed++;
        }
    }
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

int
popstore_due(struct popstore *ps, int64_t now, struct pop_due *out, int max)
{
    int n = 0;
    pthread_mutex_lock(&ps->mu);
    for (uint32_t id = 0; id < ps->nid && n < max; id++) {
        struct pkey *k = ps->byid[id];
        if (k == NULL || k->live == 0 || k->due > now)
            continue;
        int64_t due = INT64_MAX;
        for (int i = k->head; i < k->n; i++) {
            struct pop_lease *l = &k->v[i];
            if (l->deadline == 0 || l->deadline == REVIVING || l->order)
                continue;
            if (l->deadline <= now && n < max) {
                struct pop_due *d = &out[n++];
                memcpy(d->group, k->g->name, k->g->len);
                d->group[k->g->len] = 0;
                memcpy(d->topic, k->topic, k->tlen + 1);
                d->qid = k->qid;
                d->l = *l;
                l->deadline = REVIVING;
            } else if (l->deadline < due) {
                due = l->deadline;
            }
        }
        k->due = due;
    }
    pthread_mutex_unlock(&ps->mu);
    return n;
}

void
popstore_revived(struct popstore *ps, const struct pop_due *d, bool ok, int64_t retry_ms)
{
    size_t gl = strlen(d->group), tl = strlen(d->topic);
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, d->group, gl, d->topic, tl, d->qid);
    int i = k != NULL ? lease_find(k, d->l.offset) : -1;
    if (i >= 0 && k->v[i].deadline == REVIVING && k->v[i].pop_time == d->l.pop_time) {
        if (ok) {
            int rc = log_3(&ps->out, R_REVIVED, k->id, d->l.offset, d->l.pop_time, 0, 2);
            if (rc == 0)
                rc = log_flush(ps);
            else
                buf_reset(&ps->out);
            /* Unlogged, the lease comes back after a restart: revived
             * twice, never lost. */
            lease_kill(ps, k, i);
            ps->revived++;
        } else {
            k->v[i].deadline = retry_ms;
            if (retry_ms < k->due)
                k->due = retry_ms;
        }
    }
    pthread_mutex_unlock(&ps->mu);
}

int
popstore_sync(struct popstore *ps)
{
    pthread_mutex_lock(&ps->mu);
    int rc = 0;
    /* Past the configured size, and twice what the last rewrite left (a
     * log that is mostly live leases is not rewritten every second). */
    if (ps->conf.compact_bytes > 0 && ps->log_bytes > ps->conf.compact_bytes &&
        ps->log_bytes > 2 * ps->compacted) {
        rc = compact(ps);
        ps->compacted = ps->log_bytes;
        pthread_mutex_unlock(&ps->mu);
        return rc;
    }
    /* The sync outside the lock: POPs and ACKs go on meanwhile.  Only
     * this function replaces the fd (compact), and one thread calls it. */
    int fd = ps->fd;
    pthread_mutex_unlock(&ps->mu);
    if (fdatasync(fd) != 0)
        rc = -errno;
    return rc;
}

void
popstore_get_stats(struct popstore *ps, struct popstore_stats *s)
{
    pthread_mutex_lock(&ps->mu);
    s->inflight = ps->inflight;
    s->acked = ps->acked;
    s->revived = ps->revived;
    s->changed = ps->changed;
    s->log_bytes = ps->log_bytes;
    pthread_mutex_unlock(&ps->mu);
}

/* }}} */

int
popstore_each_group(struct popstore *ps,
                    int (*fn)(void *arg, const char *g, size_t n, int64_t inflight), void *arg)
{
    int rc = 0;
    pthread_mutex_lock(&ps->mu);
    for (size_t i = 0; i < ps->gcap && rc == 0; i++)
        for (struct pgroup *g = ps->gt[i]; g != NULL && rc == 0; g = g->next)
            if (g->inflight > 0)
                rc = fn(arg, g->name, g->len, g->inflight);
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

int64_t
popstore_live(struct popstore *ps, const char *group, size_t glen, const char *topic, size_t tlen,
              int32_t qid)
{
    pthread_mutex_lock(&ps->mu);
    struct pkey *k = key_find(ps, group, glen, topic, tlen, qid);
    int64_t n = k != NULL ? k->live : 0;
    pthread_mutex_unlock(&ps->mu);
    return n;
}
