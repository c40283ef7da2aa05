/*
 * kvconfig: see kvconfig.h.
 */
#include "route/kvconfig.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/fjson.h"
#include "core/jmap.h"
#include "store/store.h"

struct kvval {
    size_t len;
    char s[];
};

struct kvconfig {
    pthread_rwlock_t lock;
    pthread_mutex_t persist_lock;  /* orders kv_persist() calls */
    struct jmap ns;                /* namespace -> struct jmap* (key -> kvval*) */
};

static void
rdlock(struct kvconfig *kv)
{
    if (pthread_rwlock_rdlock(&kv->lock) != 0)
        abort();  /* a broken lock is a broken invariant */
}

static void
wrlock(struct kvconfig *kv)
{
    if (pthread_rwlock_wrlock(&kv->lock) != 0)
        abort();
}

static void
unlock(struct kvconfig *kv)
{
    if (pthread_rwlock_unlock(&kv->lock) != 0)
        abort();
}

struct kvconfig *
kv_new(void)
{
    struct kvconfig *kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return NULL;
    if (pthread_rwlock_init(&kv->lock, NULL) != 0) {
        free(kv);
        return NULL;
    }
    if (pthread_mutex_init(&kv->persist_lock, NULL) != 0) {
        pthread_rwlock_destroy(&kv->lock);
        free(kv);
        return NULL;
    }
    jmap_init(&kv->ns, 16);
    return kv;
}

static void
free_table(void *p)
{
    struct jmap *t = p;
    jmap_free(t, free);
    free(t);
}

void
kv_free(struct kvconfig *kv)
{
    if (kv == NULL)
        return;
    jmap_free(&kv->ns, free_table);
    pthread_mutex_destroy(&kv->persist_lock);
    pthread_rwlock_destroy(&kv->lock);
    free(kv);
}

int
kv_put(struct kvconfig *kv, const char *ns, size_t nslen, const char *key,
       size_t klen, const char *val, size_t vlen)
{
    struct kvval *v = malloc(sizeof(*v) + vlen + 1);
    if (v == NULL) {
        err_set("out of memory for a KV config value");
        return -ENOMEM;
    }
    v->len = vlen;
    memcpy(v->s, val, vlen);
    v->s[vlen] = '\0';
    int rc = 0;
    wrlock(kv);
    struct jmap *t = jmap_get_str(&kv->ns, ns, nslen);
    if (t == NULL) {
        t = malloc(sizeof(*t));
        if (t != NULL) {
            jmap_init(t, 16);
            if (jmap_put_str(&kv->ns, ns, nslen, t, NULL) == NULL) {
                free(t);
                t = NULL;
            }
        }
    }
    void *old = NULL;
    if (t == NULL || jmap_put_str(t, key, klen, v, &old) == NULL) {
        free(v);
        rc = -ENOMEM;
    }
    unlock(kv);
    free(old);
    if (rc != 0)
        err_set("out of memory for a KV config entry");
    return rc;
}

int
kv_get(struct kvconfig *kv, const char *ns, size_t nslen, const char *key,
       size_t klen, struct buf *out)
{
    int rc = 0;
    rdlock(kv);
    struct jmap *t = jmap_get_str(&kv->ns, ns, nslen);
    struct kvval *v = t != NULL ? jmap_get_str(t, key, klen) : NULL;
    if (v != NULL)
        rc = buf_append(out, v->s, v->len) == 0 ? 1 : -ENOMEM;
    unlock(kv);
    return rc;
}

int
kv_delete(struct kvconfig *kv, const char *ns, size_t nslen, const char *key,
          size_t klen)
{
    void *old = NULL;
    bool found = false;
    wrlock(kv);
    struct jmap *t = jmap_get_str(&kv->ns, ns, nslen);
    if (t != NULL)
        found = jmap_remove_str(t, key, klen, &old);
    unlock(kv);
    free(old);
    return found ? 1 : 0;
}

static void
write_table(struct fjw *w, const struct jmap *t)
{
    fjw_raw(w, "{", 1);
    struct jiter it;
    jmap_iter_init(&it, t);
    bool first = true;
    for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;) {
        const struct kvval *v = n->val;
        if (!first)
            fjw_raw(w, ",", 1);
        first = false;
        fjw_str(w, n->key, n->klen);
        fjw_raw(w, ":", 1);
        fjw_str(w, v->s, v->len);
    }
    fjw_raw(w, "}", 1);
}

int
kv_list_json(struct kvconfig *kv, const char *ns, size_t nslen,
             struct buf *out)
{
    int rc = 0;
    struct fjw w;
    fjw_init(&w, out, false);
    rdlock(kv);
    const struct jmap *t = jmap_get_str(&kv->ns, ns, nslen);
    if (t != NULL) {
        fjw_lit(&w, "{\"table\":");
        write_table(&w, t);
        fjw_raw(&w, "}", 1);
        rc = w.err != 0 ? w.err : 1;
    }
    unlock(kv);
    return rc;
}

int
kv_dump_json(struct kvconfig *kv, struct buf *out)
{
    struct fjw w;
    fjw_init(&w, out, false);
    rdlock(kv);
    fjw_lit(&w, "{\"configTable\":{");
    struct jiter it;
    jmap_iter_init(&it, &kv->ns);
    bool first = true;
    for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;) {
        if (!first)
            fjw_raw(&w, ",", 1);
        first = false;
        fjw_str(&w, n->key, n->klen);
        fjw_raw(&w, ":", 1);
        write_table(&w, n->val);
    }
    fjw_lit(&w, "}}");
    unlock(kv);
    return w.err;
}

/* The file is written as every config file is (store_write_file_atomic:
 * a temp file, fsync, the previous version kept as .bak, rename, fsync
 * of the directory), as RocketMQ's MixAll.string2File does. */
static int
persist_locked(struct kvconfig *kv, const char *path)
{
    struct buf b;
    buf_init(&b);
    if (kv_dump_json(kv, &b) != 0) {
        buf_free(&b);
        err_set("out of memory serializing the KV config");
        return -1;
    }
    int rc = store_write_file_atomic(path, buf_head(&b), buf_len(&b));
    buf_free(&b);
    return rc == 0 ? 0 : -1;
}

int
kv_persist(struct kvconfig *kv, const char *path)
{
    if (pthread_mutex_lock(&kv->persist_lock) != 0)
        abort();
    int rc = persist_locked(kv, path);
    if (pthread_mutex_unlock(&kv->persist_lock) != 0)
        abort();
    return rc;
}

void
kv_counts(struct kvconfig *kv, size_t *namespaces, size_t *entries)
{
    size_t e = 0;
    rdlock(kv);
    *namespaces = kv->ns.size;
    struct jiter it;
    jmap_iter_init(&it, &kv->ns);
    for (struct jnode *n; (n = jmap_iter_next(&it)) != NULL;)
        e += ((const struct jmap *)n->val)->size;
    unlock(kv);
    *entries = e;
}
