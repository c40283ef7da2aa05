/*
 * peertab: see peertab.h.
 */
#include "core/peertab.h"

#include <stdlib.h>
#include <string.h>

void
peertab_init(struct peertab *t, size_t entry_size, size_t min_cap)
{
    memset(t, 0, sizeof(*t));
    t->entry_size = entry_size < sizeof(struct peertab_entry) ? sizeof(struct peertab_entry)
                                                              : entry_size;
    t->min_cap = min_cap > 0 ? min_cap : 16;
}

size_t
peertab_addr_len(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    size_t n = colon != NULL ? (size_t)(colon - peer) : strlen(peer);
    return n < PEERTAB_ADDR_MAX ? n : PEERTAB_ADDR_MAX - 1;
}

static int
addr_cmp(const char *a, size_t alen, const struct peertab_entry *e)
{
    size_t elen = strlen(e->addr);
    int c = memcmp(a, e->addr, alen < elen ? alen : elen);
    if (c != 0)
        return c;
    return alen < elen ? -1 : alen > elen;
}

/* Binary search: the index of the address, or where it belongs
 * (*found false). */
static size_t
find(const struct peertab *t, const char *a, size_t alen, bool *found)
{
    size_t lo = 0, hi = t->n;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = addr_cmp(a, alen, t->v[mid]);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

struct peertab_entry *
peertab_join(struct peertab *t, const char *peer)
{
    size_t alen = peertab_addr_len(peer);
    bool found;
    size_t i = find(t, peer, alen, &found);
    if (found) {
        t->v[i]->refs++;
        return t->v[i];
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : t->min_cap;
        struct peertab_entry **nv = realloc(t->v, cap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        t->v = nv;
        t->cap = cap;
    }
    struct peertab_entry *e = calloc(1, t->entry_size);
    if (e == NULL)
        return NULL;
    memcpy(e->addr, peer, alen);
    e->refs = 1;
    memmove(t->v + i + 1, t->v + i, (t->n - i) * sizeof(*t->v));
    t->v[i] = e;
    t->n++;
    return e;
}

void
peertab_leave(struct peertab *t, struct peertab_entry *e)
{
    if (e == NULL || --e->refs > 0)
        return;
    bool found;
    size_t i = find(t, e->addr, strlen(e->addr), &found);
    if (found && t->v[i] == e) {
        memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof(*t->v));
        t->n--;
    }
    free(e);
    if (t->cap > 4 * t->min_cap && t->n < t->cap / 4) {
        struct peertab_entry **nv = realloc(t->v, (t->cap / 2) * sizeof(*nv));
        if (nv != NULL) {   /* else it keeps the larger array: no harm */
            t->v = nv;
            t->cap /= 2;
        }
    }
}

struct peertab_entry *
peertab_find(const struct peertab *t, const char *peer)
{
    bool found;
    size_t i = find(t, peer, peertab_addr_len(peer), &found);
    return found ? t->v[i] : NULL;
}

size_t
peertab_count(const struct peertab *t)
{
    return t->n;
}

struct peertab_entry *
peertab_at(const struct peertab *t, size_t i)
{
    return i < t->n ? t->v[i] : NULL;
}

void
peertab_free(struct peertab *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}
