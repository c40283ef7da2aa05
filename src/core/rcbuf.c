/*
 * rcbuf: see rcbuf.h.
 */
#include "core/rcbuf.h"

#include <stdlib.h>
#include <string.h>

struct rcbuf *
rcbuf_new(size_t len)
{
    if (len > SIZE_MAX - sizeof(struct rcbuf))
        return NULL;
    struct rcbuf *b = malloc(sizeof(*b) + len);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = len;
    return b;
}

struct rcbuf *
rcbuf_copy(const void *p, size_t len)
{
    struct rcbuf *b = rcbuf_new(len);
    if (b != NULL && len > 0)
        memcpy(b->data, p, len);
    return b;
}

struct rcbuf *
rcbuf_ref(struct rcbuf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void
rcbuf_unref(struct rcbuf *b)
{
    /* acq_rel: the freeing thread sees every write made before the
     * other references were dropped. */
    if (b != NULL && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        free(b);
}
