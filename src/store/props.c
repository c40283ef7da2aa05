/* props: see props.h. */
#include "store/props.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/err.h"
#include "core/jscan.h"

/* Where the first byte a or b is in s[0, n), or n: 16 bytes a step
 * (SSE2, x86-64's baseline), never reading past n.  Every send's
 * properties are walked twice (the store's copy, the index's keys):
 * a call to memchr per separator cost more than the walk. */
static inline size_t
first_of(const uint8_t *s, size_t n, uint8_t a, uint8_t b)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i va = _mm_set1_epi8((char)a), vb = _mm_set1_epi8((char)b);
    for (; n - i >= 16; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(x, va), _mm_cmpeq_epi8(x, vb)));
        if (m != 0)
            return i + (size_t)__builtin_ctz(m);
    }
#endif
    for (; i < n; i++)
        if (s[i] == a || s[i] == b)
            return i;
    return n;
}

bool
props_next(const char *p, size_t n, size_t *pos, struct prop *kv)
{
    while (*pos < n) {
        const uint8_t *seg = (const uint8_t *)p + *pos;
        size_t left = n - *pos;
        /* The pair's separator is the first 0x01 before the next 0x02:
         * one walk finds whichever comes first, then the 0x02. */
        size_t k = first_of(seg, left, PROPS_SEP, PROPS_NAME_VALUE_SEP);
        size_t slen = k;
        bool has_sep = k < left && seg[k] == PROPS_NAME_VALUE_SEP;
        if (has_sep)
            slen = k + 1 + first_of(seg + k + 1, left - k - 1, PROPS_SEP, PROPS_SEP);
        *pos += slen + 1;      /* past the separator (or past n: the end) */
        if (has_sep && k > 0 && k + 1 < slen) {
            kv->k = (const char *)seg;
            kv->klen = k;
            kv->v = (const char *)seg + k + 1;
            kv->vlen = slen - k - 1;
            return true;
        }
    }
    return false;
}

static bool
same_key(const struct prop *kv, const char *k, size_t klen)
{
    return kv->klen == klen && memcmp(kv->k, k, klen) == 0;
}

const char *
props_findn(const char *p, size_t n, const char *key, size_t klen,
            size_t *vlen)
{
    const char *found = NULL;
    size_t pos = 0;
    struct prop kv;
    while (props_next(p, n, &pos, &kv)) {
        if (same_key(&kv, key, klen)) {
            found = kv.v;
            *vlen = kv.vlen;
        }
    }
    return found;
}

const char *
props_find(const char *p, size_t n, const char *key, size_t *vlen)
{
    return props_findn(p, n, key, strlen(key), vlen);
}

int
props_delay_level(const char *v, size_t n)
{
    int level = 0;
    for (size_t i = 0; i < n && v[i] >= '0' && v[i] <= '9' && level < PROPS_DELAY_MAX; i++)
        level = level * 10 + (v[i] - '0');
    return level;
}

int
props_put(struct buf *out, const char *k, size_t klen, const char *v,
          size_t vlen)
{
    /* One reserve, then plain copies: this runs for every pair of every
     * message sent. */
    bool first = buf_len(out) == 0;
    size_t need = (first ? 0 : 1) + klen + 1 + vlen;
    if (buf_reserve(out, need) != 0)
        return -ENOMEM;
    uint8_t *w = buf_tail(out);
    if (!first)
        *w++ = PROPS_SEP;
    memcpy(w, k, klen);
    w += klen;
    *w++ = PROPS_NAME_VALUE_SEP;
    if (vlen > 0)
        memcpy(w, v, vlen);
    out->end += need;
    return 0;
}

/* Appends a stored pair's own bytes (key, 0x01, value as stored). */
static int
put_stored(struct buf *out, const struct prop *kv)
{
    return props_put(out, kv->k, kv->klen, kv->v, kv->vlen);
}

int
props_edit(struct buf *out, const char *p, size_t n,
           const struct prop *edits, int n_edits)
{
    /* Edits are few (a handful per re-put): which of them found their key
     * in p (a set there happens in place) fits the bits of a word. */
    if (n_edits > PROPS_EDITS_MAX) {
        err_set("more than %d property edits", PROPS_EDITS_MAX);
        return -EINVAL;
    }
    for (int i = 0; i < n_edits; i++) {
        if (edits[i].klen == 0) {
            err_set("property edit %d has an empty key", i + 1);
            return -EINVAL;
        }
        for (int j = 0; j < i; j++) {
            if (same_key(&edits[j], edits[i].k, edits[i].klen)) {
                err_set("property %.*s is edited twice", (int)edits[i].klen, edits[i].k);
                return -EINVAL;
            }
        }
    }
    uint64_t seen = 0;
    size_t pos = 0;
    struct prop kv;
    while (props_next(p, n, &pos, &kv)) {
        int e = -1;
        for (int i = 0; i < n_edits && e < 0; i++)
            if (same_key(&kv, edits[i].k, edits[i].klen))
                e = i;
        int rc = 0;
        if (e < 0) {
            rc = put_stored(out, &kv);
        } else {
            if (edits[e].v != NULL && (seen & (1ull << e)) == 0)
                rc = props_put(out, kv.k, kv.klen, edits[e].v, edits[e].vlen);
            seen |= 1ull << e;
        }
        if (rc != 0)
            return rc;
    }
    for (int i = 0; i < n_edits; i++) {
        if (edits[i].v == NULL || (seen & (1ull << i)) != 0)
            continue;
        if (props_put(out, edits[i].k, edits[i].klen, edits[i].v, edits[i].vlen) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* A send's pair kv, as a 4.9.8 broker takes it: the facts the broker
 * reads from it go to *f; true when the stored properties keep it (WAIT
 * only when keep_wait; never CLUSTER: ours replaces it).  The one home of
 * these rules: props_for_store() and props_json_for_store() both ask it. */
static inline __attribute__((always_inline)) bool
send_keeps(struct props_send *f, const char *k, size_t klen, const char *v, size_t vlen,
           bool keep_wait)
{
    /* By length first: most keys (KEYS, UNIQ_KEY, user keys) are none of these. */
    switch (klen) {
    case 4:
        if (memcmp(k, "WAIT", 4) == 0) {
            f->wait = !(vlen == 5 && memcmp(v, "false", 5) == 0);
            return keep_wait;
        }
        if (memcmp(k, "TAGS", 4) == 0) {
            f->tags = v;
            f->tags_len = vlen;
        }
        return true;
    case 5:
        if (memcmp(k, "DELAY", 5) == 0)
            f->delay = props_delay_level(v, vlen);
        return true;
    case 7:
        if (memcmp(k, "CLUSTER", 7) == 0)
            return false;
        break;
    case 8:
        /* Java's Boolean.parseBoolean */
        if (memcmp(k, "TRAN_MSG", 8) == 0)
            f->prepared = vlen == 4 && strncasecmp(v, "true", 4) == 0;
        break;
    default:
        break;
    }
    if (klen > 6 && memcmp(k, "TIMER_", 6) == 0)
        f->timer = true;
    return true;
}

static void
send_facts_init(struct props_send *f)
{
    f->tags = NULL;
    f->tags_len = 0;
    f->wait = true;
    f->delay = 0;
    f->prepared = false;
    f->timer = false;
}

/* Appends CLUSTER = cluster at w (a separator first unless the string is
 * empty); returns the end. */
static uint8_t *
put_cluster(uint8_t *w, bool first, const char *cluster, size_t cluster_len)
{
    if (!first)
        *w++ = PROPS_SEP;
    memcpy(w, "CLUSTER", 7);
    w += 7;
    *w++ = PROPS_NAME_VALUE_SEP;
    if (cluster_len > 0)
        memcpy(w, cluster, cluster_len);
    return w + cluster_len;
}

int
props_for_store(struct buf *out, const char *p, size_t n,
                const char *cluster, size_t cluster_len, bool keep_wait,
                struct props_send *facts)
{
    send_facts_init(facts);
    /* One reserve for the whole output (the pairs kept are at most p's
     * bytes, plus CLUSTER and a separator each side), then plain copies:
     * a kept pair is its own bytes in p (key, 0x01, value). */
    size_t room = n + 2 + 7 + 1 + cluster_len;
    if (buf_reserve(out, room) != 0)
        return -ENOMEM;
    uint8_t *w = buf_tail(out);
    bool first = buf_len(out) == 0;
    size_t pos = 0;
    struct prop kv;
    while (props_next(p, n, &pos, &kv)) {
        if (send_keeps(facts, kv.k, kv.klen, kv.v, kv.vlen, keep_wait)) {
            if (!first)
                *w++ = PROPS_SEP;
            first = false;
            size_t len = kv.klen + 1 + kv.vlen;
            memcpy(w, kv.k, len);
            w += len;
        }
    }
    w = put_cluster(w, first, cluster, cluster_len);
    out->end += (size_t)(w - buf_tail(out));
    return 0;
}

/* The 16 bytes at p copied to w; where the first byte among them that
 * needs a look is (a backslash, or 0x00-0x02: a separator written
 * unescaped), or 16. */
static inline unsigned
copy16_props(uint8_t *w, const uint8_t *p)
{
#ifdef __SSE2__
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    _mm_storeu_si128((__m128i *)(void *)w, v);
    __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(2)), v);
    __m128i m = _mm_or_si128(low, _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
    return (unsigned)__builtin_ctz((unsigned)_mm_movemask_epi8(m) | 0x10000u);
#else
    unsigned i = 0;
    for (; i < 16; i++) {
        w[i] = p[i];
        if (p[i] <= 2 || p[i] == '\\')
            break;
    }
    return i;
#endif
}

/* The segment [seg, w) just ended (at a 0x02 or the end): kept as a pair
 * (true), or not (the caller rewinds to its mark).  sep is the offset of
 * its first 0x01, or -1. */
static inline __attribute__((always_inline)) bool
seg_keeps(struct props_send *f, const uint8_t *seg, const uint8_t *w, ptrdiff_t sep,
          bool keep_wait)
{
    ptrdiff_t len = w - seg;
    /* Java's string2messageProperties: a key before the first 0x01 and
     * a value after it, both non-empty (props_next's rule). */
    if (sep <= 0 || sep + 1 >= len)
        return false;
    return send_keeps(f, (const char *)seg, (size_t)sep, (const char *)seg + sep + 1,
                      (size_t)(len - sep - 1), keep_wait);
}

int
props_json_for_store(struct buf *out, const char *js, size_t n,
                     const char *cluster, size_t cluster_len, bool keep_wait,
                     struct props_send *facts)
{
    send_facts_init(facts);
    /* Decoded text is never longer than its JSON: one reserve as
     * props_for_store's, and 16 more for the last run's over-copy. */
    size_t room = n + 2 + 7 + 1 + cluster_len + 16;
    size_t start = buf_len(out);
    if (buf_reserve(out, room) != 0)
        return -ENOMEM;
    const uint8_t *p = (const uint8_t *)js, *e = p + n;
    uint8_t *w0 = buf_tail(out), *w = w0;
    bool first = start == 0;
    /* The segment being read: where it began in the output (mark, with
     * its 0x02 when one goes before it), its first byte, its first 0x01. */
    uint8_t *mark = w;
    if (!first)
        *w++ = PROPS_SEP;
    uint8_t *seg = w;
    ptrdiff_t sep = -1;
    for (;;) {
        unsigned c;
        if (e - p >= 16) {
            unsigned k = copy16_props(w, p);
            p += k;
            w += k;
            if (k == 16)
                continue;
        } else {
            while (p < e && *p > 2 && *p != '\\')
                *w++ = *p++;
            if (p == e)
                break;
        }
        if (*p != '\\') {
            c = *p++;                  /* 0x00-0x02 as it stands */
        } else if (e - p >= 6 && p[1] == 'u' && p[2] == '0' && p[3] == '0') {
            /* \u00XX: how fastjson writes the separators */
            int32_t hi = jscan_hex[p[4]], lo = jscan_hex[p[5]];
            if ((hi | lo) < 0)
                goto other;
            p += 6;
            if (hi != 0) {
                w += jscan_utf8_put(w, (uint32_t)(hi << 4 | lo));
                continue;
            }
            c = (unsigned)lo;
        } else if (e - p >= 2 && p[1] != 'u' && jscan_short_esc[p[1]] != 0) {
            *w++ = jscan_short_esc[p[1]];
            p += 2;
            continue;
        } else {
            int32_t cp;
            if (e - p < 6 || p[1] != 'u' || (cp = jscan_hex4(p + 2)) < 0)
                goto other;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDFFF) {
                int32_t lo;
                if (cp > 0xDBFF || e - p < 6 || p[0] != '\\' || p[1] != 'u' ||
                    (lo = jscan_hex4(p + 2)) < 0xDC00 || lo > 0xDFFF)
                    goto other;   /* a lone half: jscan_unescape's U+FFFD */
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            w += jscan_utf8_put(w, (uint32_t)cp);
            continue;
        }
        if (c == PROPS_SEP) {
            if (seg_keeps(facts, seg, w, sep, keep_wait))
                first = false;
            else
                w = mark;
            mark = w;
            if (!first)
                *w++ = PROPS_SEP;
            seg = w;
            sep = -1;
            continue;
        }
        if (c == PROPS_NAME_VALUE_SEP && sep < 0)
            sep = w - seg;
        *w++ = (uint8_t)c;
    }
    if (seg_keeps(facts, seg, w, sep, keep_wait))
        first = false;
    else
        w = mark;
    w = put_cluster(w, first, cluster, cluster_len);
    out->end += (size_t)(w - w0);
    return 0;

other: {
        /* What the fast steps above leave (a lone surrogate, a malformed
         * escape): decoded as the generic header decode decodes it
         * (jscan_unescape), then props_for_store. */
        out->end = start;
        uint8_t *tmp = malloc(n + 1);
        if (tmp == NULL)
            return -ENOMEM;
        size_t m = jscan_unescape((const uint8_t *)js, n, tmp);
        int rc = props_for_store(out, (const char *)tmp, m, cluster, cluster_len, keep_wait,
                                 facts);
        free(tmp);
        if (rc == 0 && facts->tags != NULL)   /* it pointed into tmp: the stored copy's */
            facts->tags = props_findn((const char *)buf_head(out) + start, buf_len(out) - start,
                                      "TAGS", 4, &facts->tags_len);
        return rc;
    }
}
