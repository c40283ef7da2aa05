/*
 * buf: a growable byte buffer.  Readers consume from the front, writers
 * append at the back; buf_compact() slides unread bytes to the start so a
 * connection's read buffer does not grow without bound.
 */
#ifndef RMQ_BUF_H
#define RMQ_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
    uint8_t *data;  /* heap block, NULL until the first reserve */
    size_t cap;     /* bytes allocated */
    size_t start;   /* first unread byte */
    size_t end;     /* one past the last written byte */
};

/** Empty buffer; no allocation until data arrives. */
void buf_init(struct buf *b);

/** Frees the block; the buffer is empty and reusable afterwards. */
void buf_free(struct buf *b);

/**
 * Makes room for at least n more bytes after end.
 * Returns 0, or -ENOMEM with err_set().
 */
int buf_reserve(struct buf *b, size_t n);

/** Appends n bytes (reserving as needed). Returns 0 or -ENOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);

/** Appends a big-endian u32 / u16. Returns 0 or -ENOMEM. */
int buf_put_be32(struct buf *b, uint32_t v);
int buf_put_be16(struct buf *b, uint16_t v);

/** Drops n unread bytes from the front. */
void buf_consume(struct buf *b, size_t n);

/** Moves unread bytes to offset 0. */
void buf_compact(struct buf *b);

static inline size_t buf_len(const struct buf *b) { return b->end - b->start; }
static inline uint8_t *buf_head(const struct buf *b) { return b->data + b->start; }
static inline uint8_t *buf_tail(const struct buf *b) { return b->data + b->end; }
static inline size_t buf_avail(const struct buf *b) { return b->cap - b->end; }
static inline void buf_reset(struct buf *b) { b->start = b->end = 0; }

/* The big-endian stores as a byte swap and one store: GCC 12 does not
 * merge the byte-wise spelling when the value is a 64-bit half
 * (be64_put), and a send's record and queue entry write ~20 of them
 * (~100 instructions a send, callgrind). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RMQ_BE32(x) __builtin_bswap32(x)
#define RMQ_BE16(x) __builtin_bswap16(x)
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define RMQ_BE32(x) (x)
#define RMQ_BE16(x) (x)
#else
#error "unknown byte order"
#endif

/* The loads stay byte-wise: GCC merges them, and be64_get's two
 * halves into one load and swap, which two swapped words would not
 * (a 32-message pull +100 instructions, measured). */
static inline uint32_t
be32_get(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint16_t
be16_get(const uint8_t *p)
{
    return (uint16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline void
be32_put(uint8_t *p, uint32_t v)
{
    uint32_t x = RMQ_BE32(v);
    memcpy(p, &x, 4);
}

static inline void
be16_put(uint8_t *p, uint16_t v)
{
    uint16_t x = (uint16_t)RMQ_BE16(v);
    memcpy(p, &x, 2);
}

/* Whether the n bytes at a and b are the same, for the short names of the
 * hot paths (a header's field names, a queue's topic): a libc memcmp call
 * was half the cost of a header field's look-up.  Words that overlap,
 * never a byte past either. */
static inline bool
bytes_eq(const void *pa, const void *pb, size_t n)
{
    const char *a = pa, *b = pb;
    if (n >= 8) {
        uint64_t x, y;
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y)
                return false;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t x4, y4, u4, v4;
        memcpy(&x4, a, 4);
        memcpy(&y4, b, 4);
        memcpy(&u4, a + n - 4, 4);
        memcpy(&v4, b + n - 4, 4);
        return ((x4 ^ y4) | (u4 ^ v4)) == 0;
    }
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

#endif
