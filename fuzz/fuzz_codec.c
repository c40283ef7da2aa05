/*
 * fuzz_codec: libFuzzer target for the RemotingCommand codec.
 *
 * Each input is tried three ways: as received bytes (rmq_frame_peek, then
 * rmq_cmd_decode on the frame it reports), and as a bare header wrapped in
 * a well-formed frame of each serialize type, so that mutations reach the
 * JSON and binary parsers without having to keep the L and H words
 * consistent.  Whatever decodes is encoded again; the re-encoding must
 * frame, decode to the same command, and re-encode to the same bytes.
 * Any difference aborts, which libFuzzer reports as a crash.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "net/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_codec: %s (last error: %s)\n", what,
                err_msg());
        abort();
    }
}

static bool
str_eq(const struct rmq_str *a, const struct rmq_str *b)
{
    if ((a->p == NULL) != (b->p == NULL) || a->len != b->len)
        return false;
    return a->len == 0 || memcmp(a->p, b->p, a->len) == 0;
}

static void
check_same(const struct rmq_cmd *a, const struct rmq_cmd *b)
{
    check(a->code == b->code, "code differs");
    check(a->language == b->language, "language differs");
    check(a->version == b->version, "version differs");
    check(a->opaque == b->opaque, "opaque differs");
    check(a->flag == b->flag, "flag differs");
    check(a->serialize == b->serialize, "serialize differs");
    check(str_eq(&a->remark, &b->remark), "remark differs");
    check((a->ext == NULL) == (b->ext == NULL), "extFields presence differs");
    check(a->ext_count == b->ext_count, "extFields count differs");
    for (uint32_t i = 0; i < a->ext_count; i++) {
        check(str_eq(&a->ext[i].key, &b->ext[i].key), "ext key differs");
        check(str_eq(&a->ext[i].val, &b->ext[i].val), "ext value differs");
    }
    check(a->body_len == b->body_len, "body length differs");
    check((a->body == NULL) == (a->body_len == 0), "body pointer");
    check(a->body_len == 0 || memcmp(a->body, b->body, a->body_len) == 0,
          "body differs");
}

/* Things every decoded command promises, checked byte by byte (ASan). */
static void
check_sane(const struct rmq_cmd *c, const struct rmq_arena *a)
{
    check(a->used <= a->cap, "arena overrun");
    check(c->language >= 0 && c->language < RMQ_LANG_COUNT, "language");
    check(c->remark.p == NULL || c->remark.p[c->remark.len] == '\0',
          "remark not NUL-terminated");
    check(c->ext != NULL || c->ext_count == 0, "ext count without ext");
    for (uint32_t i = 0; i < c->ext_count; i++) {
        const struct rmq_field *f = &c->ext[i];
        check(f->key.p != NULL && f->val.p != NULL, "absent field string");
        check(f->key.p[f->key.len] == '\0' && f->val.p[f->val.len] == '\0',
              "field not NUL-terminated");
        check(rmq_cmd_field(c, f->key.p, f->key.len) != NULL, "lookup");
    }
}

static uint8_t *
new_arena(struct rmq_arena *a, size_t hlen)
{
    size_t need = rmq_cmd_arena_size(hlen);
    a->p = malloc(need);
    check(a->p != NULL, "out of memory");
    a->cap = need;
    a->used = 0;
    return a->p;
}

static void
encode_frame(const struct rmq_cmd *c, struct buf *out)
{
    buf_init(out);
    int rc = rmq_cmd_encode(c, out);
    if (rc == 0 && c->body_len > 0)
        rc = buf_append(out, c->body, c->body_len);
    /* Escaping can grow a JSON header past 2^24; nothing else may fail. */
    check(rc == 0 || rc == -RMQ_ETOOBIG, "encode failed");
    if (rc != 0)
        buf_free(out);
}

static void
roundtrip(const uint8_t *frame, size_t len)
{
    if (len < 8)
        return;
    size_t hlen = be32_get(frame + 4) & 0xFFFFFFu;
    if (hlen > len - 8) {
        uint8_t small[64];
        struct rmq_arena a = {small, sizeof(small), 0};
        struct rmq_cmd c;
        check(rmq_cmd_decode(&c, frame, len, &a) == -RMQ_EPROTO,
              "decode accepted a header longer than the frame");
        return;
    }

    struct rmq_arena a;
    uint8_t *mem = new_arena(&a, hlen);
    struct rmq_cmd c;
    int rc = rmq_cmd_decode(&c, frame, len, &a);
    check(rc == 0 || rc == -RMQ_EPROTO, "decode: arena_size too small");
    if (rc != 0) {
        check(a.used == 0, "failed decode used the arena");
        free(mem);
        return;
    }
    check_sane(&c, &a);

    struct buf out;
    encode_frame(&c, &out);
    if (out.data == NULL) {
        free(mem);
        return;
    }
    size_t flen = 0;
    check(rmq_frame_peek(buf_head(&out), buf_len(&out), SIZE_MAX, &flen) ==
              1 && flen == buf_len(&out),
          "re-encoding does not frame");

    struct rmq_arena a2;
    size_t hlen2 = be32_get(buf_head(&out) + 4) & 0xFFFFFFu;
    uint8_t *mem2 = new_arena(&a2, hlen2);
    struct rmq_cmd c2;
    check(rmq_cmd_decode(&c2, buf_head(&out), buf_len(&out), &a2) == 0,
          "re-encoding does not decode");
    check_sane(&c2, &a2);
    check_same(&c, &c2);

    struct buf out2;
    encode_frame(&c2, &out2);
    check(out2.data != NULL && buf_len(&out2) == buf_len(&out) &&
              memcmp(buf_head(&out2), buf_head(&out), buf_len(&out)) == 0,
          "encoding is not stable");

    buf_free(&out2);
    buf_free(&out);
    free(mem2);
    free(mem);
}

/* The input as the header of a frame of serialize type ser, 3-byte body. */
static void
as_header(const uint8_t *data, size_t size, uint32_t ser)
{
    static const uint8_t body[3] = {'x', 'y', 'z'};
    if (size > 0xFFFFFF)
        return;
    size_t len = 8 + size + sizeof(body);
    uint8_t *f = malloc(len);
    check(f != NULL, "out of memory");
    be32_put(f, (uint32_t)(len - 4));
    be32_put(f + 4, ser << 24 | (uint32_t)size);
    if (size > 0)
        memcpy(f + 8, data, size);
    memcpy(f + 8 + size, body, sizeof(body));
    roundtrip(f, len);
    free(f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t flen = 0;
    int rc = rmq_frame_peek(data, size, RMQ_DEFAULT_MAX_FRAME, &flen);
    check(rc == 0 || rc == 1 || rc == -RMQ_EPROTO || rc == -RMQ_ETOOBIG,
          "peek result");
    if (rc == 1) {
        check(flen >= 8 && flen <= size, "peek length");
        roundtrip(data, flen);
    }
    as_header(data, size, RMQ_SER_JSON);
    as_header(data, size, RMQ_SER_ROCKETMQ);
    return 0;
}
