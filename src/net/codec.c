/*
 * codec: framing and dispatch for RemotingCommand frames (see codec.h).
 * This file owns the L/H words, the arena bookkeeping around a header
 * decode, the choice between the JSON and ROCKETMQ header codecs, and the
 * LanguageCode table.  The header formats themselves live in
 * codec_json.c and codec_rocketmq.c.
 */
#include "net/codec.h"

#include <errno.h>
#include <stdalign.h>
#include <string.h>

#include "core/err.h"
#include "net/codec_impl.h"

/* LanguageCode.java order; the ordinal is the index. */
static const char *const lang_names[RMQ_LANG_COUNT] = {
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
    "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
};

#define FIELD_ALIGN alignof(struct rmq_field)

int
rmq_frame_peek(const uint8_t *p, size_t avail, size_t max_frame,
               size_t *frame_len)
{
    if (avail < 4)
        return 0;
    uint32_t l = be32_get(p);
    /* 64-bit sum: L near 2^32 must not wrap past the limit check. */
    uint64_t flen = (uint64_t)l + 4;
    if (flen > max_frame) {
        err_set("frame of %llu bytes exceeds the limit of %zu",
                (unsigned long long)flen, max_frame);
        return -RMQ_ETOOBIG;
    }
    if (l < 4) {
        err_set("frame length %u cannot hold the header length word", l);
        return -RMQ_EPROTO;
    }
    if (avail < 8)
        return 0;
    uint32_t h = be32_get(p + 4);
    uint32_t hlen = h & 0xFFFFFFu;
    if (hlen > l - 4) {
        err_set("header length %u exceeds frame length %u - 4", hlen, l);
        return -RMQ_EPROTO;
    }
    if ((h >> 24) > RMQ_SER_ROCKETMQ) {
        err_set("unknown serialize type %u", h >> 24);
        return -RMQ_EPROTO;
    }
    if (avail < flen)
        return 0;
    *frame_len = (size_t)flen;
    return 1;
}

size_t
rmq_cmd_arena_size(size_t hlen)
{
    /*
     * Every decoded string plus its NUL fits in the header bytes it came
     * from (quotes, length prefixes and separators pay for the NUL), and
     * every kept extFields entry takes at least 4 header bytes (`"":0` in
     * JSON, more in binary).  Two alignment slacks: the top of the field
     * stack and the final slide down next to the strings.
     */
    if (hlen > SIZE_MAX / (2 * sizeof(struct rmq_field)))
        return SIZE_MAX;
    return hlen + 1 + (hlen / 4) * sizeof(struct rmq_field) +
           2 * FIELD_ALIGN;
}

int
rmq_dec_nomem(void)
{
    err_set("decode arena exhausted (smaller than rmq_cmd_arena_size)");
    return -RMQ_ETOOBIG;
}

/*
 * Sets up the two-ended cursor over the free part of the arena.  Returns
 * false when there is not even room for an aligned field stack top.
 */
static bool
dec_init(struct rmq_dec *d, struct rmq_arena *a)
{
    if (a->p == NULL || a->used > a->cap)
        return false;
    uint8_t *lo = a->p + a->used;
    size_t free_bytes = a->cap - a->used;
    size_t mis = (uintptr_t)(lo + free_bytes) & (FIELD_ALIGN - 1);
    if (mis > free_bytes)
        return false;
    d->lo = lo;
    d->base = (struct rmq_field *)(void *)(lo + free_bytes - mis);
    d->top = d->base;
    d->has_ext = false;
    return true;
}

/*
 * The fields sit at the top of the arena in reverse order; put them in
 * header order right after the strings so the arena stays one contiguous
 * used prefix.
 */
static void
dec_finish(struct rmq_dec *d, struct rmq_cmd *cmd, struct rmq_arena *a)
{
    size_t n = (size_t)(d->base - d->top);
    size_t pad = (size_t)(-(uintptr_t)d->lo) & (FIELD_ALIGN - 1);
    uint8_t *dst = d->lo + pad;  /* <= top: top is aligned and >= lo */
    struct rmq_field *out = (struct rmq_field *)(void *)dst;
    if (out + n <= d->top) {
        /* Room between (an arena of rmq_cmd_arena_size has it): reversed
         * on the way down, one pass. */
        for (size_t i = 0; i < n; i++)
            out[i] = d->top[n - 1 - i];
    } else {
        for (size_t i = 0; i < n / 2; i++) {
            struct rmq_field t = d->top[i];
            d->top[i] = d->top[n - 1 - i];
            d->top[n - 1 - i] = t;
        }
        if (n > 0)
            memmove(dst, d->top, n * sizeof(struct rmq_field));
    }
    if (d->has_ext) {
        cmd->ext = (struct rmq_field *)(void *)dst;
        cmd->ext_count = (uint32_t)n;
        a->used = (size_t)(dst - a->p) + n * sizeof(struct rmq_field);
    } else {
        cmd->ext = NULL;
        cmd->ext_count = 0;
        a->used = (size_t)(d->lo - a->p);
    }
}

int
rmq_cmd_frame(struct rmq_cmd *cmd, const uint8_t *frame, size_t len)
{
    if (len < 8) {
        err_set("frame of %zu bytes is shorter than 8", len);
        return -RMQ_EPROTO;
    }
    uint32_t l = be32_get(frame);
    if ((uint64_t)l + 4 != len) {
        err_set("frame length word %u does not match %zu bytes", l, len);
        return -RMQ_EPROTO;
    }
    uint32_t h = be32_get(frame + 4);
    uint32_t hlen = h & 0xFFFFFFu;
    uint32_t ser = h >> 24;
    if (hlen > l - 4) {
        err_set("header length %u exceeds frame length %u - 4", hlen, l);
        return -RMQ_EPROTO;
    }
    if (ser > RMQ_SER_ROCKETMQ) {
        err_set("unknown serialize type %u", ser);
        return -RMQ_EPROTO;
    }

    memset(cmd, 0, sizeof(*cmd));
    cmd->serialize = (uint8_t)ser;
    size_t body_len = len - 8 - hlen;
    if (body_len > 0) {
        cmd->body = frame + 8 + hlen;
        cmd->body_len = (uint32_t)body_len;
    }
    return 0;
}

/* rmq_cmd_decode(), from the head rmq_json_head() read when hd is not
 * NULL. */
static int
cmd_decode(struct rmq_cmd *cmd, const uint8_t *frame, size_t len,
           struct rmq_arena *arena, const struct rmq_json_head *hd)
{
    int rc = rmq_cmd_frame(cmd, frame, len);
    if (rc != 0)
        return rc;
    size_t hlen = be32_get(frame + 4) & 0xFFFFFFu;
    struct rmq_dec d;
    if (!dec_init(&d, arena))
        return rmq_dec_nomem();
    if (cmd->serialize != RMQ_SER_JSON)
        rc = rmq_bin_decode(cmd, frame + 8, hlen, &d);
    else if (hd != NULL && hd->next < hlen)
        rc = rmq_json_decode_from(cmd, frame + 8, hlen, &d, hd);
    else
        rc = rmq_json_decode(cmd, frame + 8, hlen, &d);
    if (rc != 0)
        return rc;  /* arena->used untouched: the scratch is free again */
    dec_finish(&d, cmd, arena);
    return 0;
}

int
rmq_cmd_decode(struct rmq_cmd *cmd, const uint8_t *frame, size_t len,
               struct rmq_arena *arena)
{
    return cmd_decode(cmd, frame, len, arena, NULL);
}

int
rmq_cmd_decode_head(struct rmq_cmd *cmd, const uint8_t *frame, size_t len,
                    struct rmq_arena *arena, const struct rmq_json_head *hd)
{
    return cmd_decode(cmd, frame, len, arena, hd);
}

int
rmq_cmd_encoded_len(const struct rmq_cmd *cmd, size_t *len)
{
    size_t hlen;
    int rc;
    if (cmd->serialize == RMQ_SER_JSON)
        rc = rmq_json_size(cmd, &hlen);
    else if (cmd->serialize == RMQ_SER_ROCKETMQ)
        rc = rmq_bin_size(cmd, &hlen);
    else {
        err_set("unknown serialize type %u", cmd->serialize);
        return -RMQ_EPROTO;
    }
    if (rc != 0)
        return rc;
    /* Java reads L as a signed int. */
    if ((uint64_t)4 + hlen + cmd->body_len > INT32_MAX) {
        err_set("frame of %llu bytes does not fit the length word",
                (unsigned long long)hlen + 8u + cmd->body_len);
        return -RMQ_ETOOBIG;
    }
    *len = 8 + hlen;
    return 0;
}

void
rmq_cmd_encode_to(const struct rmq_cmd *cmd, uint8_t *dst, size_t len)
{
    size_t hlen = len - 8;
    be32_put(dst, (uint32_t)(4 + hlen + cmd->body_len));
    be32_put(dst + 4, ((uint32_t)cmd->serialize << 24) | (uint32_t)hlen);
    if (cmd->serialize == RMQ_SER_JSON)
        rmq_json_write(cmd, dst + 8, hlen);
    else
        rmq_bin_write(cmd, dst + 8, hlen);
}

#define ONE_PASS_MAX 16384

int
rmq_cmd_encode(const struct rmq_cmd *cmd, struct buf *out)
{
    size_t len;
    int rc;
    if (cmd->serialize == RMQ_SER_JSON && rmq_json_bound(cmd, &len) == 0 &&
        len <= ONE_PASS_MAX && (uint64_t)4 + len + cmd->body_len <= INT32_MAX) {
        /* One pass: written into room for the longest it can be, the
         * length words after.  The same bytes as sizing then writing.
         * Only for the usual small header: a large one is sized first,
         * so `out` does not grow to six times what it holds. */
        if ((rc = buf_reserve(out, 8 + len)) != 0)
            return rc;
        uint8_t *dst = buf_tail(out);
        size_t hlen = rmq_json_put(cmd, dst + 8);
        be32_put(dst, (uint32_t)(4 + hlen + cmd->body_len));
        be32_put(dst + 4, ((uint32_t)RMQ_SER_JSON << 24) | (uint32_t)hlen);
        out->end += 8 + hlen;
        return 0;
    }
    rc = rmq_cmd_encoded_len(cmd, &len);
    if (rc != 0)
        return rc;
    rc = buf_reserve(out, len);
    if (rc != 0)
        return rc;
    rmq_cmd_encode_to(cmd, buf_tail(out), len);
    out->end += len;
    return 0;
}

const char *
rmq_language_name(int32_t ordinal)
{
    return lang_names[rmq_lang_clamp(ordinal)];
}

int32_t
rmq_language_ordinal(const char *name, size_t len)
{
    for (int32_t i = 0; i < RMQ_LANG_COUNT; i++) {
        const char *n = lang_names[i];
        if (strlen(n) == len && memcmp(n, name, len) == 0)
            return i;
    }
    return -1;
}

const struct rmq_str *
rmq_cmd_field(const struct rmq_cmd *cmd, const char *key, size_t klen)
{
    /* Backwards: with a repeated key the last one wins, as in a HashMap. */
    for (uint32_t i = cmd->ext_count; i-- > 0;) {
        const struct rmq_field *f = &cmd->ext[i];
        if (f->key.p != NULL && f->key.len == klen &&
            memcmp(f->key.p, key, klen) == 0)
            return &f->val;
    }
    return NULL;
}
