/*
 * buf: growable byte buffer (see buf.h).  Growth doubles so that appends
 * are amortised O(1); compaction happens only when asked, because the
 * connection code knows when a frame boundary makes it cheap.
 */
#include "core/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

void
buf_init(struct buf *b)
{
    b->data = NULL;
    b->cap = b->start = b->end = 0;
}

void
buf_free(struct buf *b)
{
    if (b->data != NULL)   /* most streams' buffers never held a byte */
        free(b->data);
    buf_init(b);
}

int
buf_reserve(struct buf *b, size_t n)
{
    if (b->cap - b->end >= n)
        return 0;
    /* Reuse the consumed prefix before growing. */
    if (b->start > 0 && b->cap - buf_len(b) >= n) {
        buf_compact(b);
        return 0;
    }
    size_t need = buf_len(b) + n;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            err_set("buffer size overflow");
            return -ENOMEM;
        }
        cap *= 2;
    }
    uint8_t *p = malloc(cap);
    if (p == NULL) {
        err_set("out of memory growing a buffer to %zu bytes", cap);
        return -ENOMEM;
    }
    if (b->data != NULL)
        memcpy(p, b->data + b->start, buf_len(b));
    b->end -= b->start;
    b->start = 0;
    free(b->data);
    b->data = p;
    b->cap = cap;
    return 0;
}

int
buf_append(struct buf *b, const void *p, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc != 0)
        return rc;
    if (n > 0)
        memcpy(b->data + b->end, p, n);
    b->end += n;
    return 0;
}

int
buf_put_be32(struct buf *b, uint32_t v)
{
    int rc = buf_reserve(b, 4);
    if (rc != 0)
        return rc;
    be32_put(b->data + b->end, v);
    b->end += 4;
    return 0;
}

int
buf_put_be16(struct buf *b, uint16_t v)
{
    int rc = buf_reserve(b, 2);
    if (rc != 0)
        return rc;
    be16_put(b->data + b->end, v);
    b->end += 2;
    return 0;
}

void
buf_consume(struct buf *b, size_t n)
{
    b->start += n;
    if (b->start >= b->end)
        b->start = b->end = 0;
}

void
buf_compact(struct buf *b)
{
    if (b->start == 0)
        return;
    size_t n = buf_len(b);
    if (n > 0)
        memmove(b->data, b->data + b->start, n);
    b->start = 0;
    b->end = n;
}
