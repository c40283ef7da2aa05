/* props: see props.h. */
#include "store/props.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/err.h"

/* Where the first byte a or b is in s[i, n), or n: 16 bytes a step
 * (SSE2, x86-64's baseline), never reading outside s[0, n).  Every send's
 * properties are walked twice (the store's copy, the index's keys), in
 * pairs shorter than 16 bytes: a string of 16 bytes or more ends with a
 * step over its last 16, the lanes before i masked off, so a short pair
 * is one step too. */
static inline size_t
first_of(const uint8_t *s, size_t n, size_t i, uint8_t a, uint8_t b)
{
#ifdef __SSE2__
    const __m128i va = _mm_set1_epi8((char)a), vb = _mm_set1_epi8((char)b);
    for (; n - i >= 16; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(x, va), _mm_cmpeq_epi8(x, vb)));
        if (m != 0)
            return i + (size_t)__builtin_ctz(m);
    }
    if (i < n && n >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + n - 16));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(x, va), _mm_cmpeq_epi8(x, vb)));
        m >>= i - (n - 16);     /* lane 0 is now byte i */
        return m != 0 ? i + (size_t)__builtin_ctz(m) : n;
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
    const uint8_t *s = (const uint8_t *)p;
    while (*pos < n) {
        size_t at = *pos;
        /* The pair's separator is the first 0x01 before the next 0x02:
         * one walk finds whichever comes first, then the 0x02. */
        size_t k = first_of(s, n, at, PROPS_SEP, PROPS_NAME_VALUE_SEP);
        size_t e = k;
        bool has_sep = k < n && s[k] == PROPS_NAME_VALUE_SEP;
        if (has_sep)
            e = first_of(s, n, k + 1, PROPS_SEP, PROPS_SEP);
        *pos = e + 1;          /* past the separator (or past n: the end) */
        if (has_sep && k > at && k + 1 < e) {
            kv->k = p + at;
            kv->klen = k - at;
            kv->v = p + k + 1;
            kv->vlen = e - k - 1;
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

int
props_for_store(struct buf *out, const char *p, size_t n,
                const char *cluster, size_t cluster_len, bool keep_wait,
                struct props_send *facts)
{
    facts->tags = NULL;
    facts->tags_len = 0;
    facts->wait = true;
    facts->delay = 0;
    facts->prepared = false;
    facts->timer = false;
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
        bool drop = false;
        if (same_key(&kv, "WAIT", 4)) {
            facts->wait = !(kv.vlen == 5 && memcmp(kv.v, "false", 5) == 0);
            drop = !keep_wait;
        } else if (same_key(&kv, "TAGS", 4)) {
            facts->tags = kv.v;
            facts->tags_len = kv.vlen;
        } else if (same_key(&kv, "DELAY", 5)) {
            facts->delay = props_delay_level(kv.v, kv.vlen);
        } else if (same_key(&kv, "TRAN_MSG", 8)) {
            /* Java's Boolean.parseBoolean */
            facts->prepared = kv.vlen == 4 && strncasecmp(kv.v, "true", 4) == 0;
        } else if (same_key(&kv, "CLUSTER", 7)) {
            drop = true;       /* ours replaces it */
        } else if (kv.klen > 6 && memcmp(kv.k, "TIMER_", 6) == 0) {
            facts->timer = true;
        }
        if (!drop) {
            if (!first)
                *w++ = PROPS_SEP;
            first = false;
            size_t len = kv.klen + 1 + kv.vlen;
            memcpy(w, kv.k, len);
            w += len;
        }
    }
    if (!first)
        *w++ = PROPS_SEP;
    memcpy(w, "CLUSTER", 7);
    w += 7;
    *w++ = PROPS_NAME_VALUE_SEP;
    if (cluster_len > 0)
        memcpy(w, cluster, cluster_len);
    w += cluster_len;
    out->end += (size_t)(w - buf_tail(out));
    return 0;
}
