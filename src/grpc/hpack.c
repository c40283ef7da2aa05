/*
 * hpack: see hpack.h.
 *
 * The Huffman decoder takes 8 bits at a time through HUFF_FAST (every
 * code of at most 8 bits: letters, digits, '/', '-', '.'), and a longer
 * code by its length from the canonical layout (HUFF_FIRST/COUNT/OFF).
 * A Huffman string seen again (nghttp2's clients never index :path or
 * content-length, so every call sends them as the same Huffman literal)
 * is taken decoded from a small per-connection cache, by its encoded
 * bytes.
 */
#include "grpc/hpack.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

/* RFC 7541 Appendix B's Huffman code is canonical: codes of one length
 * are consecutive, in symbol order.  Per length L (5-30), the first code,
 * how many there are and where their symbols start in HUFF_SYMS.
 * Generated from the RFC's table (code and length per symbol). */
static const uint32_t HUFF_FIRST[31] = {
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x14, 0x5c,
    0xf8, 0x0, 0x3f8, 0x7fa, 0xffa, 0x1ff8, 0x3ffc, 0x7ffc,
    0x0, 0x0, 0x0, 0x7fff0, 0xfffe6, 0x1fffdc, 0x3fffd2, 0x7fffd8,
    0xffffea, 0x1ffffec, 0x3ffffe0, 0x7ffffde, 0xfffffe2, 0x0, 0x3ffffffc,
};

static const uint16_t HUFF_COUNT[31] = {
    0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3,
    0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19, 29, 0, 4,
};

static const uint16_t HUFF_OFF[31] = {
    0, 0, 0, 0, 0, 0, 10, 36, 68, 0, 74, 79, 82, 84, 90, 92,
    0, 0, 0, 95, 98, 106, 119, 145, 174, 186, 190, 205, 224, 0, 253,
};

static const uint16_t HUFF_SYMS[257] = {
    48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51,
    52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108, 109,
    110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76,
    77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107, 113, 118,
    119, 120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39,
    43, 124, 35, 62, 0, 36, 64, 91, 93, 126, 94, 125, 60, 96, 123, 92,
    195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172, 176, 177,
    179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156, 160,
    163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232,
    233, 1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157,
    158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239, 9, 142,
    144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193,
    200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255, 203, 204, 211,
    212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254,
    2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20,
    21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220, 249, 10, 13, 22,
    256,
};

/* The next 8 bits -> (length << 8) | symbol for the codes of at most
 * 8 bits (every character of a path, a token or a number); 0: longer. */
static const uint16_t HUFF_FAST[256] = {
    0x0530, 0x0530, 0x0530, 0x0530, 0x0530, 0x0530, 0x0530, 0x0530, 0x0531, 0x0531, 0x0531, 0x0531,
    0x0531, 0x0531, 0x0531, 0x0531, 0x0532, 0x0532, 0x0532, 0x0532, 0x0532, 0x0532, 0x0532, 0x0532,
    0x0561, 0x0561, 0x0561, 0x0561, 0x0561, 0x0561, 0x0561, 0x0561, 0x0563, 0x0563, 0x0563, 0x0563,
    0x0563, 0x0563, 0x0563, 0x0563, 0x0565, 0x0565, 0x0565, 0x0565, 0x0565, 0x0565, 0x0565, 0x0565,
    0x0569, 0x0569, 0x0569, 0x0569, 0x0569, 0x0569, 0x0569, 0x0569, 0x056f, 0x056f, 0x056f, 0x056f,
    0x056f, 0x056f, 0x056f, 0x056f, 0x0573, 0x0573, 0x0573, 0x0573, 0x0573, 0x0573, 0x0573, 0x0573,
    0x0574, 0x0574, 0x0574, 0x0574, 0x0574, 0x0574, 0x0574, 0x0574, 0x0620, 0x0620, 0x0620, 0x0620,
    0x0625, 0x0625, 0x0625, 0x0625, 0x062d, 0x062d, 0x062d, 0x062d, 0x062e, 0x062e, 0x062e, 0x062e,
    0x062f, 0x062f, 0x062f, 0x062f, 0x0633, 0x0633, 0x0633, 0x0633, 0x0634, 0x0634, 0x0634, 0x0634,
    0x0635, 0x0635, 0x0635, 0x0635, 0x0636, 0x0636, 0x0636, 0x0636, 0x0637, 0x0637, 0x0637, 0x0637,
    0x0638, 0x0638, 0x0638, 0x0638, 0x0639, 0x0639, 0x0639, 0x0639, 0x063d, 0x063d, 0x063d, 0x063d,
    0x0641, 0x0641, 0x0641, 0x0641, 0x065f, 0x065f, 0x065f, 0x065f, 0x0662, 0x0662, 0x0662, 0x0662,
    0x0664, 0x0664, 0x0664, 0x0664, 0x0666, 0x0666, 0x0666, 0x0666, 0x0667, 0x0667, 0x0667, 0x0667,
    0x0668, 0x0668, 0x0668, 0x0668, 0x066c, 0x066c, 0x066c, 0x066c, 0x066d, 0x066d, 0x066d, 0x066d,
    0x066e, 0x066e, 0x066e, 0x066e, 0x0670, 0x0670, 0x0670, 0x0670, 0x0672, 0x0672, 0x0672, 0x0672,
    0x0675, 0x0675, 0x0675, 0x0675, 0x073a, 0x073a, 0x0742, 0x0742, 0x0743, 0x0743, 0x0744, 0x0744,
    0x0745, 0x0745, 0x0746, 0x0746, 0x0747, 0x0747, 0x0748, 0x0748, 0x0749, 0x0749, 0x074a, 0x074a,
    0x074b, 0x074b, 0x074c, 0x074c, 0x074d, 0x074d, 0x074e, 0x074e, 0x074f, 0x074f, 0x0750, 0x0750,
    0x0751, 0x0751, 0x0752, 0x0752, 0x0753, 0x0753, 0x0754, 0x0754, 0x0755, 0x0755, 0x0756, 0x0756,
    0x0757, 0x0757, 0x0759, 0x0759, 0x076a, 0x076a, 0x076b, 0x076b, 0x0771, 0x0771, 0x0776, 0x0776,
    0x0777, 0x0777, 0x0778, 0x0778, 0x0779, 0x0779, 0x077a, 0x077a, 0x0826, 0x082a, 0x082c, 0x083b,
    0x0858, 0x085a, 0x0000, 0x0000,
};

/* RFC 7541 Appendix A. */
static const struct {
    const char *name, *value;
    uint8_t nlen, vlen;
} STATIC[62] = {
#define S(n, v) { n, v, sizeof(n) - 1, sizeof(v) - 1 }
    S("", ""), S(":authority", ""), S(":method", "GET"), S(":method", "POST"), S(":path", "/"),
    S(":path", "/index.html"), S(":scheme", "http"), S(":scheme", "https"), S(":status", "200"),
    S(":status", "204"), S(":status", "206"), S(":status", "304"), S(":status", "400"),
    S(":status", "404"), S(":status", "500"), S("accept-charset", ""),
    S("accept-encoding", "gzip, deflate"), S("accept-language", ""), S("accept-ranges", ""),
    S("accept", ""), S("access-control-allow-origin", ""), S("age", ""), S("allow", ""),
    S("authorization", ""), S("cache-control", ""), S("content-disposition", ""),
    S("content-encoding", ""), S("content-language", ""), S("content-length", ""),
    S("content-location", ""), S("content-range", ""), S("content-type", ""), S("cookie", ""),
    S("date", ""), S("etag", ""), S("expect", ""), S("expires", ""), S("from", ""), S("host", ""),
    S("if-match", ""), S("if-modified-since", ""), S("if-none-match", ""), S("if-range", ""),
    S("if-unmodified-since", ""), S("last-modified", ""), S("link", ""), S("location", ""),
    S("max-forwards", ""), S("proxy-authenticate", ""), S("proxy-authorization", ""), S("range", ""),
    S("referer", ""), S("refresh", ""), S("retry-after", ""), S("server", ""), S("set-cookie", ""),
    S("strict-transport-security", ""), S("transfer-encoding", ""), S("user-agent", ""), S("vary", ""),
    S("via", ""), S("www-authenticate", ""),
#undef S
};

long
hpack_huff_decode(const uint8_t *p, size_t n, uint8_t *out)
{
    uint64_t acc = 0;
    unsigned bits = 0;
    size_t i = 0, o = 0;
    for (;;) {
        while (bits <= 56 && i < n) {
            acc = (acc << 8) | p[i++];
            bits += 8;
        }
        if (bits == 0)
            break;
        /* The next 8 bits, padded with ones past the end. */
        uint32_t top = bits >= 8 ? (uint32_t)(acc >> (bits - 8)) & 0xff
                                 : (uint32_t)((acc << (8 - bits)) | ((1u << (8 - bits)) - 1)) & 0xff;
        unsigned len = HUFF_FAST[top] >> 8, sym = HUFF_FAST[top] & 0xff;
        if (len == 0) {
            for (unsigned l = 9; l <= 30 && l <= bits; l++) {
                uint32_t code = (uint32_t)(acc >> (bits - l)) & ((1u << l) - 1);
                if (code - HUFF_FIRST[l] < HUFF_COUNT[l]) {
                    len = l;
                    sym = HUFF_SYMS[HUFF_OFF[l] + code - HUFF_FIRST[l]];
                    break;
                }
            }
        }
        if (len == 0 || len > bits) {
            /* The end: at most 7 bits of padding, all ones (EOS's
             * prefix, RFC 7541 5.2). */
            if (bits > 7 || (acc & ((1u << bits) - 1)) != (1u << bits) - 1)
                return -1;
            break;
        }
        if (sym == 256)
            return -1;   /* EOS inside a string */
        out[o++] = (uint8_t)sym;
        bits -= len;
    }
    return (long)o;
}

/* An integer with an n-bit prefix (RFC 7541 5.1).  -1: truncated or too
 * large (past 2^28: no field, table or block of ours is that big). */
static int
get_int_long(const uint8_t **pp, const uint8_t *end, unsigned nbits, uint32_t *v)
{
    const uint8_t *p = *pp;
    uint32_t max = (1u << nbits) - 1;
    uint32_t x = *p++ & max;
    if (x == max) {
        unsigned shift = 0;
        for (;;) {
            if (p == end || shift > 21)
                return -1;
            uint8_t b = *p++;
            x += (uint32_t)(b & 127) << shift;
            shift += 7;
            if (!(b & 128))
                break;
        }
        if (x > (1u << 28))
            return -1;
    }
    *pp = p;
    *v = x;
    return 0;
}

/* The one-byte form (every index a client sends, most lengths) inline. */
static inline int
get_int(const uint8_t **pp, const uint8_t *end, unsigned nbits, uint32_t *v)
{
    uint32_t max = (1u << nbits) - 1;
    uint32_t x = **pp & max;
    if (x < max) {
        (*pp)++;
        *v = x;
        return 0;
    }
    return get_int_long(pp, end, nbits, v);
}

/* A string literal (RFC 7541 5.2): *s, *len point at its bytes, decoded
 * into `scratch` when Huffman-coded.  Only values use the cache (a name
 * taken from a cache slot could be overwritten by its value's entry). */
static int
get_string(struct hpack_dec *d, const uint8_t **pp, const uint8_t *end, struct buf *scratch,
           bool cache, const uint8_t **s, size_t *len)
{
    const uint8_t *p = *pp;
    if (p == end)
        return -1;
    bool huff = (*p & 0x80) != 0;
    uint32_t n;
    if (get_int(&p, end, 7, &n) != 0 || (size_t)(end - p) < n)
        return -1;
    *pp = p + n;
    if (!huff) {
        *s = p;
        *len = n;
        return 0;
    }
    cache = cache && n <= HPACK_CACHE_ENC && n > 0;
    if (cache) {
        for (unsigned k = 0; k < HPACK_CACHE; k++) {
            if (d->cache[k].elen == n && memcmp(d->cache[k].enc, p, n) == 0) {
                *s = d->cache[k].dec;
                *len = d->cache[k].dlen;
                return 0;
            }
        }
    }
    buf_reset(scratch);
    if (buf_reserve(scratch, (size_t)n * 8 / 5 + 1) != 0)
        return -1;
    long got = hpack_huff_decode(p, n, buf_tail(scratch));
    if (got < 0)
        return -1;
    *s = buf_tail(scratch);
    *len = (size_t)got;
    if (cache) {
        unsigned k = d->cache_next++ % HPACK_CACHE;
        memcpy(d->cache[k].enc, p, n);
        memcpy(d->cache[k].dec, *s, (size_t)got);
        d->cache[k].elen = (uint8_t)n;
        d->cache[k].dlen = (uint8_t)got;
    }
    return 0;
}

static void
evict_to(struct hpack_dec *d, size_t room)
{
    while (d->count > 0 && d->size > room) {
        struct hpack_entry *e = &d->ring[(d->newest + HPACK_ENTRIES - (d->count - 1)) % HPACK_ENTRIES];
        d->size -= (size_t)e->nlen + e->vlen + 32;
        free(e->p);
        e->p = NULL;
        d->count--;
    }
}

/* The dynamic entry of index i (62 or more, within the table). */
static struct hpack_entry *
entry(struct hpack_dec *d, uint32_t i)
{
    return &d->ring[(d->newest + HPACK_ENTRIES - (i - 62)) % HPACK_ENTRIES];
}

/* Index i (1-based, static then dynamic): its name and value, or -1. */
static inline int
lookup(const struct hpack_dec *d, uint32_t i, const uint8_t **n, size_t *nl, const uint8_t **v, size_t *vl)
{
    if (i == 0)
        return -1;
    if (i < 62) {
        *n = (const uint8_t *)STATIC[i].name;
        *nl = STATIC[i].nlen;
        *v = (const uint8_t *)STATIC[i].value;
        *vl = STATIC[i].vlen;
        return 0;
    }
    i -= 62;
    if (i >= d->count)
        return -1;
    const struct hpack_entry *e = &d->ring[(d->newest + HPACK_ENTRIES - i) % HPACK_ENTRIES];
    *n = e->p;
    *nl = e->nlen;
    *v = e->p + e->nlen;
    *vl = e->vlen;
    return 0;
}

/* Adds a field to the dynamic table (RFC 7541 4.4): copied first, since
 * its name may be an entry the eviction drops.  *e: the entry, or NULL
 * when the field is larger than the table (which is then emptied). */
static int
insert(struct hpack_dec *d, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl,
       struct hpack_entry **e)
{
    size_t sz = nl + vl + 32;
    *e = NULL;
    if (sz > d->max) {
        evict_to(d, 0);
        return 0;
    }
    uint8_t *p = malloc(nl + vl > 0 ? nl + vl : 1);
    if (p == NULL)
        return -1;
    memcpy(p, n, nl);
    memcpy(p + nl, v, vl);
    evict_to(d, d->max - sz);
    d->newest = (d->newest + 1) % HPACK_ENTRIES;
    struct hpack_entry *x = &d->ring[d->newest];
    x->p = p;
    x->nlen = (uint32_t)nl;
    x->vlen = (uint32_t)vl;
    x->mark = HPACK_MARK_NEW;
    d->count++;
    d->size += sz;
    *e = x;
    return 0;
}

int
hpack_decode(struct hpack_dec *d, const uint8_t *p, size_t len, hpack_field_fn fn, void *ud)
{
    const uint8_t *end = p + len;
    bool fields = false;
    while (p < end) {
        uint8_t b = *p;
        uint32_t idx;
        const uint8_t *n, *v;
        size_t nl, vl;
        if (b & 0x80) {   /* indexed field */
            if (get_int(&p, end, 7, &idx) != 0 || lookup(d, idx, &n, &nl, &v, &vl) != 0)
                goto bad;
            fn(ud, n, nl, v, vl, idx < 62 ? HPACK_MARK_STATIC : entry(d, idx)->mark);
            fields = true;
            continue;
        }
        if ((b & 0xe0) == 0x20) {   /* dynamic table size update */
            uint32_t sz;
            if (fields || get_int(&p, end, 5, &sz) != 0 || sz > HPACK_TABLE_MAX)
                goto bad;
            d->max = sz;
            evict_to(d, sz);
            continue;
        }
        bool index = (b & 0xc0) == 0x40;
        if (get_int(&p, end, index ? 6 : 4, &idx) != 0)
            goto bad;
        if (idx != 0) {
            const uint8_t *iv;
            size_t ivl;
            if (lookup(d, idx, &n, &nl, &iv, &ivl) != 0)
                goto bad;
        } else if (get_string(d, &p, end, &d->sname, false, &n, &nl) != 0) {
            goto bad;
        }
        if (get_string(d, &p, end, &d->svalue, true, &v, &vl) != 0)
            goto bad;
        struct hpack_entry *e = NULL;
        if (index) {
            if (insert(d, n, nl, v, vl, &e) != 0) {
                err_set("out of memory for the HPACK table");
                return -1;
            }
            if (e != NULL) {
                n = e->p;
                v = e->p + e->nlen;
            }
        }
        uint8_t mark = fn(ud, n, nl, v, vl, HPACK_MARK_NEW);
        if (e != NULL)
            e->mark = mark;
        fields = true;
    }
    return 0;
bad:
    err_set("a header block that does not decode (HPACK)");
    return -1;
}

void
hpack_dec_init(struct hpack_dec *d)
{
    memset(d, 0, sizeof(*d));
    d->max = HPACK_TABLE_MAX;
    buf_init(&d->sname);
    buf_init(&d->svalue);
}

void
hpack_dec_free(struct hpack_dec *d)
{
    evict_to(d, 0);
    buf_free(&d->sname);
    buf_free(&d->svalue);
}
