/*
 * wcache: see wcache.h.
 */
#include "core/wcache.h"

#include <stdlib.h>
#include <string.h>

void
wcache_init(struct wcache *c, size_t ent_size, size_t max, uint32_t cap,
            const struct wcache_ops *ops)
{
    memset(c, 0, sizeof(*c));
    hmap_init(&c->map, cap);
    q_init(&c->idle);
    q_init(&c->waited);
    c->max = max > 0 ? max : 1;
    c->ent_size = ent_size < sizeof(struct wcache_ent) ? sizeof(struct wcache_ent) : ent_size;
    c->ops = ops;
}

static bool
busy(const struct wcache *c, const struct wcache_ent *e)
{
    return c->ops != NULL && c->ops->busy != NULL && c->ops->busy(e);
}

/* Out of the map and the lists, and freed; the map is not compacted
 * (the caller does, once, after a walk that removed). */
static void
drop(struct wcache *c, struct wcache_ent *e)
{
    q_remove(&e->link);
    hmap_remove_node(&c->map, e->node);
    if (c->ops != NULL && c->ops->clear != NULL)
        c->ops->clear(e);
    free(e);
}

static void
free_ent(void *p)
{
    free(p);
}

void
wcache_free(struct wcache *c)
{
    struct hiter it;
    hmap_iter_init(&it, &c->map);
    struct hnode *v;
    if (c->ops != NULL && c->ops->clear != NULL)
        while ((v = hmap_iter_next(&it)) != NULL)
            c->ops->clear(v->val);
    hmap_free(&c->map, free_ent);
    q_init(&c->idle);
    q_init(&c->waited);
}

struct wcache_ent *
wcache_get(const struct wcache *c, const char *key)
{
    return hmap_get(&c->map, key, strlen(key));
}

struct wcache_ent *
wcache_find_or_add(struct wcache *c, const char *key)
{
    size_t n = strlen(key);
    uint64_t h = hmap_hash(key, n);
    struct hnode *node = hmap_find(&c->map, h, key, n);
    if (node != NULL)
        return node->val;
    if (c->map.size >= c->max) {
        /* Full: the least recently used goes; one being filled is
         * passed over (its answer comes back to the entry), and those
         * waited on are not in this list. */
        struct qnode *pos, *tmp;
        q_foreach_safe(pos, tmp, &c->idle) {
            struct wcache_ent *o = container_of(pos, struct wcache_ent, link);
            if (!busy(c, o)) {
                drop(c, o);
                hmap_compact(&c->map);
                break;
            }
        }
        if (c->map.size >= c->max)
            return NULL;
    }
    struct wcache_ent *e = calloc(1, c->ent_size);
    if (e == NULL)
        return NULL;
    e->wtail = &e->waiters;
    e->node = hmap_add(&c->map, h, key, n, e);
    if (e->node == NULL) {
        free(e);
        return NULL;
    }
    q_insert_tail(&c->idle, &e->link);
    return e;
}

void
wcache_touch(struct wcache *c, struct wcache_ent *e, uint64_t now)
{
    e->used_ms = now;
    if (e->waiters == NULL) {
        q_remove(&e->link);
        q_insert_tail(&c->idle, &e->link);
    }
}

void
wcache_wait(struct wcache *c, struct wcache_ent *e, struct wcache_waiter *w)
{
    w->next = NULL;
    if (e->waiters == NULL) {   /* not evictable while requests wait */
        q_remove(&e->link);
        q_insert_tail(&c->waited, &e->link);
    }
    *e->wtail = w;
    e->wtail = &w->next;
    c->nwaiting++;
}

struct wcache_waiter *
wcache_take_waiters(struct wcache *c, struct wcache_ent *e)
{
    struct wcache_waiter *w = e->waiters;
    if (w == NULL)
        return NULL;
    e->waiters = NULL;
    e->wtail = &e->waiters;
    q_remove(&e->link);
    q_insert_tail(&c->idle, &e->link);
    return w;
}

struct wcache_waiter *
wcache_pop(struct wcache *c, struct wcache_waiter **list)
{
    struct wcache_waiter *w = *list;
    if (w == NULL)
        return NULL;
    *list = w->next;
    w->next = NULL;
    c->nwaiting--;
    return w;
}

void
wcache_remove(struct wcache *c, struct wcache_ent *e)
{
    drop(c, e);
    hmap_compact(&c->map);
}

size_t
wcache_expire(struct wcache *c, uint64_t now, uint64_t max_idle_ms)
{
    /* The list is in order of use: the first one used since ends the
     * walk. */
    size_t removed = 0;
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &c->idle) {
        struct wcache_ent *e = container_of(pos, struct wcache_ent, link);
        if (now - e->used_ms < max_idle_ms)
            break;
        if (!busy(c, e)) {
            drop(c, e);
            removed++;
        }
    }
    if (removed > 0)
        hmap_compact(&c->map);
    return removed;
}
