/*
 * codec_impl: what codec.c (framing, dispatch) shares with the two header
 * codecs, codec_json.c and codec_rocketmq.c.  Not for use outside
 * src/net/codec*.c.
 *
 * Decoding writes into the caller's arena from both ends: strings grow up
 * from the bottom, extFields entries grow down from the top.  That way a
 * single pass needs no field count up front and nothing is ever moved
 * while parsing; codec.c slides the field array down next to the strings
 * once the header is done.
 */
#ifndef RMQ_CODEC_IMPL_H
#define RMQ_CODEC_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/codec.h"

/* Deepest nesting of an unknown JSON value we walk through to skip it. */
#define RMQ_JSON_MAX_DEPTH 32

/* Header bytes before the remark in the ROCKETMQ layout, plus extLen. */
#define RMQ_BIN_FIXED 21

struct rmq_dec {
    uint8_t *lo;              /* next free string byte */
    struct rmq_field *top;    /* lowest field pushed so far */
    struct rmq_field *base;   /* one past the first field pushed */
    bool has_ext;             /* the header carried an extFields map */
};

/*
 * Room for a string of at most n bytes plus its NUL, or NULL when the
 * arena is exhausted.  Commit with dec_str_end() once the real length is
 * known (unescaping may shrink it).
 */
static inline uint8_t *
dec_str_begin(struct rmq_dec *d, size_t n)
{
    if ((size_t)((uint8_t *)d->top - d->lo) <= n)
        return NULL;
    return d->lo;
}

static inline void
dec_str_end(struct rmq_dec *d, struct rmq_str *s, size_t n)
{
    d->lo[n] = '\0';
    s->p = (const char *)d->lo;
    s->len = (uint32_t)n;
    d->lo += n + 1;
}

/* A new extFields slot, or NULL when the arena is exhausted. */
static inline struct rmq_field *
dec_field_push(struct rmq_dec *d)
{
    if ((size_t)((uint8_t *)d->top - d->lo) < sizeof(struct rmq_field))
        return NULL;
    d->top--;
    return d->top;
}

/* Forgets the fields pushed so far (a repeated extFields key). */
static inline void
dec_fields_reset(struct rmq_dec *d)
{
    d->top = d->base;
}

/** Records the "arena exhausted" error; returns -RMQ_ETOOBIG. */
int rmq_dec_nomem(void);

/**
 * Parses a JSON header into cmd (fields other than body/serialize).
 * Returns 0, -RMQ_EPROTO or -RMQ_ETOOBIG (arena), with err_set().
 */
int rmq_json_decode(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
                    struct rmq_dec *d);

/**
 * rmq_json_decode() for a header whose head rmq_json_head() read into
 * *hd: the same result, the code not read again.
 */
int rmq_json_decode_from(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
                         struct rmq_dec *d, const struct rmq_json_head *hd);

/** Same for a ROCKETMQ binary header. */
int rmq_bin_decode(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
                   struct rmq_dec *d);

/**
 * Exact JSON header length for cmd; -RMQ_ETOOBIG when it reaches 2^24.
 */
int rmq_json_size(const struct rmq_cmd *cmd, size_t *hlen);

/** Writes the hlen bytes rmq_json_size() reported. */
void rmq_json_write(const struct rmq_cmd *cmd, uint8_t *dst, size_t hlen);

/**
 * At least the bytes rmq_json_put() writes (-RMQ_ETOOBIG past 24 bits:
 * then rmq_json_size() says exactly), for writing a header in one pass.
 */
int rmq_json_bound(const struct rmq_cmd *cmd, size_t *bound);

/** Writes the header; returns its length (what rmq_json_size() says). */
size_t rmq_json_put(const struct rmq_cmd *cmd, uint8_t *dst);

/** Same pair for the ROCKETMQ binary header. */
int rmq_bin_size(const struct rmq_cmd *cmd, size_t *hlen);
void rmq_bin_write(const struct rmq_cmd *cmd, uint8_t *dst, size_t hlen);

/** Language ordinal as both encoders emit it: unknown -> OTHER. */
static inline int32_t
rmq_lang_clamp(int32_t ordinal)
{
    return ordinal >= 0 && ordinal < RMQ_LANG_COUNT ? ordinal
                                                    : RMQ_LANG_OTHER;
}

#endif
