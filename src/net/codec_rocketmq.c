/*
 * codec_rocketmq: the ROCKETMQ binary (serialize type 1) RemotingCommand
 * header, RocketMQSerializable in Java (protocol.md §1.5):
 *
 *   short code, byte language, short version, int opaque, int flag,
 *   int remarkLen + remark, int extLen + extLen bytes of entries
 *   (short keyLen, key, int valLen, value), all big-endian.
 *
 * A 0-length string means null on the way in (a remark of length 0 is
 * absent; an entry whose key or value has length 0 is skipped) and an
 * absent string is written with length 0 on the way out, so what we emit
 * decodes to the same command.  Bytes after the extFields section are
 * ignored, as Java's decoder ignores them.
 */
#include <string.h>

#include "core/err.h"
#include "net/codec_impl.h"

/* Two's complement without implementation-defined narrowing. */
static inline int32_t
s16(uint16_t v)
{
    return (int32_t)v - ((v & 0x8000u) ? 0x10000 : 0);
}

static inline int32_t
s32(uint32_t v)
{
    return v <= INT32_MAX ? (int32_t)v
                          : (int32_t)(v - 0x80000000u) + INT32_MIN;
}

static int
bfail(const char *what, size_t off)
{
    err_set("ROCKETMQ header: %s at offset %zu", what, off);
    return -RMQ_EPROTO;
}

static int
copy_str(struct rmq_dec *d, const uint8_t *p, size_t n, struct rmq_str *out)
{
    uint8_t *w = dec_str_begin(d, n);
    if (w == NULL)
        return rmq_dec_nomem();
    memcpy(w, p, n);
    dec_str_end(d, out, n);
    return 0;
}

int
rmq_bin_decode(struct rmq_cmd *cmd, const uint8_t *h, size_t hlen,
               struct rmq_dec *d)
{
    if (hlen < RMQ_BIN_FIXED) {
        err_set("ROCKETMQ header of %zu bytes is shorter than %d", hlen,
                RMQ_BIN_FIXED);
        return -RMQ_EPROTO;
    }
    cmd->code = s16(be16_get(h));
    cmd->language = rmq_lang_clamp(h[2]);
    cmd->version = s16(be16_get(h + 3));
    cmd->opaque = s32(be32_get(h + 5));
    cmd->flag = s32(be32_get(h + 9));

    int rc;
    uint32_t rlen = be32_get(h + 13);
    size_t pos = 17;
    /* Room for the remark and the extLen word after it. */
    if (rlen > hlen - pos - 4)
        return bfail("remark length overruns the header", 13);
    if (rlen > 0 && (rc = copy_str(d, h + pos, rlen, &cmd->remark)) != 0)
        return rc;
    pos += rlen;

    uint32_t elen = be32_get(h + pos);
    pos += 4;
    if (elen > hlen - pos)
        return bfail("extFields length overruns the header", pos - 4);
    const uint8_t *p = h + pos;
    const uint8_t *e = p + elen;
    while (p < e) {
        if (e - p < 2)
            return bfail("truncated extFields key length",
                         (size_t)(p - h));
        uint16_t klen = be16_get(p);
        p += 2;
        if (e - p < (ptrdiff_t)klen + 4)
            return bfail("extFields key overruns the map",
                         (size_t)(p - h));
        const uint8_t *key = p;
        p += klen;
        uint32_t vlen = be32_get(p);
        p += 4;
        if ((size_t)(e - p) < vlen)
            return bfail("extFields value overruns the map",
                         (size_t)(p - h));
        const uint8_t *val = p;
        p += vlen;
        if (klen == 0 || vlen == 0)
            continue;
        struct rmq_str ks;
        struct rmq_str vs;
        if ((rc = copy_str(d, key, klen, &ks)) != 0 ||
            (rc = copy_str(d, val, vlen, &vs)) != 0)
            return rc;
        struct rmq_field *f = dec_field_push(d);
        if (f == NULL)
            return rmq_dec_nomem();
        f->key = ks;
        f->val = vs;
    }
    /* Java keeps an empty map only for extLen > 0 with no entries, which
     * it cannot produce; no kept entry reads back as no extFields. */
    d->has_ext = d->top != d->base;
    return 0;
}

static inline bool
field_kept(const struct rmq_field *f)
{
    return f->key.p != NULL && f->val.p != NULL;
}

int
rmq_bin_size(const struct rmq_cmd *cmd, size_t *hlen)
{
    const uint64_t limit = 0xFFFFFF;
    if (cmd->code < INT16_MIN || cmd->code > INT16_MAX) {
        err_set("code %d does not fit the ROCKETMQ header's short",
                (int)cmd->code);
        return -RMQ_ETOOBIG;
    }
    if (cmd->version < INT16_MIN || cmd->version > INT16_MAX) {
        err_set("version %d does not fit the ROCKETMQ header's short",
                (int)cmd->version);
        return -RMQ_ETOOBIG;
    }
    uint64_t n = RMQ_BIN_FIXED;
    if (cmd->remark.p != NULL)
        n += cmd->remark.len;
    if (cmd->ext != NULL) {
        for (uint32_t i = 0; i < cmd->ext_count && n <= limit; i++) {
            const struct rmq_field *f = &cmd->ext[i];
            if (!field_kept(f))
                continue;
            if (f->key.len > UINT16_MAX) {
                err_set("extFields key of %u bytes does not fit a short",
                        f->key.len);
                return -RMQ_ETOOBIG;
            }
            n += 6 + (uint64_t)f->key.len + f->val.len;
        }
    }
    if (n > limit) {
        err_set("ROCKETMQ header of %llu bytes does not fit in 24 bits",
                (unsigned long long)n);
        return -RMQ_ETOOBIG;
    }
    *hlen = (size_t)n;
    return 0;
}

void
rmq_bin_write(const struct rmq_cmd *cmd, uint8_t *dst, size_t hlen)
{
    uint32_t rlen = cmd->remark.p != NULL ? cmd->remark.len : 0;
    be16_put(dst, (uint16_t)cmd->code);
    dst[2] = (uint8_t)rmq_lang_clamp(cmd->language);
    be16_put(dst + 3, (uint16_t)cmd->version);
    be32_put(dst + 5, (uint32_t)cmd->opaque);
    be32_put(dst + 9, (uint32_t)cmd->flag);
    be32_put(dst + 13, rlen);
    uint8_t *w = dst + 17;
    if (rlen > 0) {
        memcpy(w, cmd->remark.p, rlen);
        w += rlen;
    }
    be32_put(w, (uint32_t)(hlen - RMQ_BIN_FIXED - rlen));
    w += 4;
    if (cmd->ext == NULL)
        return;
    for (uint32_t i = 0; i < cmd->ext_count; i++) {
        const struct rmq_field *f = &cmd->ext[i];
        if (!field_kept(f))
            continue;
        be16_put(w, (uint16_t)f->key.len);
        w += 2;
        memcpy(w, f->key.p, f->key.len);
        w += f->key.len;
        be32_put(w, f->val.len);
        w += 4;
        memcpy(w, f->val.p, f->val.len);
        w += f->val.len;
    }
}
