/* acl_sign: RocketMQ ACL request signatures (see acl_sign.h). */
#include "acl/acl_sign.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "core/err.h"

/*
 * Keyed MAC contexts are kept, one per secret, for the last KEY_SLOTS
 * secrets up to KEY_CACHE bytes: a request under one of them only resets
 * its context (EVP_MAC_init with a NULL key keeps the key), so a worker
 * serving several accounts in turn does no HMAC key set-up per request.
 */
#define KEY_CACHE 128
#define KEY_SLOTS 8

struct key_slot {
    EVP_MAC_CTX *ctx;          /* NULL: not made yet */
    bool keyed;                /* ctx holds key[0..key_len) */
    size_t key_len;
    uint64_t used;             /* the signer's tick at its last use */
    unsigned char key[KEY_CACHE];
};

struct acl_signer {
    EVP_MAC *mac;
    EVP_MAC_CTX *base;         /* the digest set, no key: slots dup it */
    EVP_MAC_CTX *ctx;          /* the one being fed */
    uint64_t tick;
    struct key_slot slot[KEY_SLOTS];
};

/* libcrypto's reason for the last failure, into err_set(). */
static void
set_ossl_err(const char *what)
{
    unsigned long e = ERR_get_error();
    char msg[256];
    if (e != 0)
        ERR_error_string_n(e, msg, sizeof(msg));
    else
        strcpy(msg, "unknown error");
    ERR_clear_error();
    err_set("%s: %s", what, msg);
}

struct acl_signer *
acl_signer_new(void)
{
    struct acl_signer *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err_set("acl signer: out of memory");
        return NULL;
    }
    s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (s->mac == NULL) {
        set_ossl_err("EVP_MAC_fetch(HMAC)");
        goto fail;
    }
    s->base = EVP_MAC_CTX_new(s->mac);
    if (s->base == NULL) {
        set_ossl_err("EVP_MAC_CTX_new");
        goto fail;
    }
    /* The digest is set once; each slot is a copy keyed once. */
    char digest[] = "SHA1";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_CTX_set_params(s->base, params) != 1) {
        set_ossl_err("HMAC digest SHA1");
        goto fail;
    }
    return s;
fail:
    acl_signer_free(s);
    return NULL;
}

void
acl_signer_free(struct acl_signer *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < KEY_SLOTS; i++)
        EVP_MAC_CTX_free(s->slot[i].ctx);
    EVP_MAC_CTX_free(s->base);
    EVP_MAC_free(s->mac);
    /* the slots hold copies of secrets */
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

/* {{{ Java String order */

struct u16_iter {
    const uint8_t *p;
    const uint8_t *end;
    uint16_t low;  /* the second unit of a surrogate pair, 0 if none */
};

/*
 * The next UTF-16 code unit of the UTF-8 text, or -1 at its end.  A byte
 * that does not start a well-formed sequence counts as U+FFFD, which is
 * what Java's decoder makes of it.
 */
static int32_t
u16_next(struct u16_iter *it)
{
    if (it->low != 0) {
        int32_t u = it->low;
        it->low = 0;
        return u;
    }
    if (it->p >= it->end)
        return -1;
    uint8_t b = *it->p;
    if (b < 0x80) {
        it->p++;
        return b;
    }
    size_t n;
    uint32_t cp;
    uint32_t min;
    if ((b & 0xE0) == 0xC0) {
        n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
        n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
        n = 4, cp = b & 0x07, min = 0x10000;
    } else {
        it->p++;
        return 0xFFFD;
    }
    if ((size_t)(it->end - it->p) < n) {
        it->p++;
        return 0xFFFD;
    }
    for (size_t i = 1; i < n; i++) {
        if ((it->p[i] & 0xC0) != 0x80) {
            it->p++;
            return 0xFFFD;
        }
        cp = (cp << 6) | (it->p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        it->p++;
        return 0xFFFD;
    }
    it->p += n;
    if (cp < 0x10000)
        return (int32_t)cp;
    cp -= 0x10000;
    it->low = (uint16_t)(0xDC00 | (cp & 0x3FF));
    return (int32_t)(0xD800 | (cp >> 10));
}

int
acl_java_strcmp(const char *a, size_t alen, const char *b, size_t blen)
{
    /* ASCII prefixes (every real key) order the same either way. */
    size_t n = alen < blen ? alen : blen;
    size_t i = 0;
    while (i < n && a[i] == b[i] && (unsigned char)a[i] < 0x80)
        i++;
    struct u16_iter x = {(const uint8_t *)a + i, (const uint8_t *)a + alen, 0};
    struct u16_iter y = {(const uint8_t *)b + i, (const uint8_t *)b + blen, 0};
    for (;;) {
        int32_t u = u16_next(&x);
        int32_t v = u16_next(&y);
        if (u != v || u < 0)
            return u - v;
    }
}

/* }}} */

/*
 * Key order of two fields: Java's, by bytes while both keys are ASCII
 * there (UTF-16 order is byte order for ASCII, and every key a client
 * sends is ASCII), acl_java_strcmp from the first byte >= 0x80 on.
 */
static inline int
key_cmp(const struct rmq_field *fa, const struct rmq_field *fb)
{
    const unsigned char *a = (const unsigned char *)fa->key.p;
    const unsigned char *b = (const unsigned char *)fb->key.p;
    size_t n = fa->key.len < fb->key.len ? fa->key.len : fb->key.len;
    for (size_t i = 0; i < n; i++) {
        unsigned x = a[i];
        unsigned y = b[i];
        if ((x | y) >= 0x80)
            return acl_java_strcmp((const char *)a + i, fa->key.len - i,
                                   (const char *)b + i, fb->key.len - i);
        if (x != y)
            return (int)x - (int)y;
    }
    return fa->key.len < fb->key.len ? -1 : fa->key.len > fb->key.len;
}

/*
 * Sorts v[0..n) by key; equal keys keep their order.  Insertion sort:
 * requests carry a dozen fields, where it beats qsort's calls through a
 * comparator; past INSERTION_MAX a merge sort keeps it O(n log n).
 */
#define INSERTION_MAX 32

static void
insertion_sort(const struct rmq_field **v, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        const struct rmq_field *f = v[i];
        uint32_t j = i;
        while (j > 0 && key_cmp(v[j - 1], f) > 0) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = f;
    }
}

/* Stable merge sort of v[0..n) with tmp[0..n) as scratch. */
static void
merge_sort(const struct rmq_field **v, const struct rmq_field **tmp, uint32_t n)
{
    if (n <= INSERTION_MAX) {
        insertion_sort(v, n);
        return;
    }
    uint32_t h = n / 2;
    merge_sort(v, tmp, h);
    merge_sort(v + h, tmp, n - h);
    memcpy(tmp, v, h * sizeof(*v));
    uint32_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        v[k++] = key_cmp(v[j], tmp[i]) < 0 ? v[j++] : tmp[i++];
    while (i < h)
        v[k++] = tmp[i++];
}

static bool
key_is(const struct rmq_str *k, const char *name)
{
    size_t n = strlen(name);
    return k->len == n && memcmp(k->p, name, n) == 0;
}

static bool
signed_field(const struct rmq_field *f, unsigned flags)
{
    if (f->key.p == NULL)
        return false;
    /* Both names start with a letter no usual key starts with. */
    if (f->key.len == 0 || (f->key.p[0] != 'S' && f->key.p[0] != '_'))
        return true;
    if (key_is(&f->key, ACL_FIELD_SIGNATURE))
        return false;
    if ((flags & ACL_SIGN_SKIP_UNIQUE_KEY_QUERY) &&
        key_is(&f->key, ACL_FIELD_UNIQUE_KEY_QUERY))
        return false;
    return true;
}

/*
 * The signed fields of cmd in signing order into *out (stack when they
 * fit, else malloc'ed: the caller frees *out when it is not `stack`).
 * A key sent twice is signed twice, in arrival order: Java keeps one of
 * them, so such a request never matches a real client's signature,
 * which is the safe answer to a header a real client never sends.
 */
static int
sorted_fields(const struct rmq_cmd *cmd, unsigned flags,
              const struct rmq_field **stack, const struct rmq_field ***out,
              uint32_t *count)
{
    const struct rmq_field **v = stack;
    /* past INSERTION_MAX the merge sort needs half as much again */
    size_t need = cmd->ext_count <= INSERTION_MAX
        ? cmd->ext_count : (size_t)cmd->ext_count + cmd->ext_count / 2;
    if (need > ACL_SIGN_STACK_FIELDS) {
        v = malloc(sizeof(*v) * need);
        if (v == NULL) {
            err_set("acl sign: out of memory");
            return -ENOMEM;
        }
    }
    uint32_t n = 0;
    for (uint32_t i = 0; cmd->ext != NULL && i < cmd->ext_count; i++) {
        if (signed_field(&cmd->ext[i], flags))
            v[n++] = &cmd->ext[i];
    }
    if (n > 1)
        merge_sort(v, v + n, n);
    *out = v;
    *count = n;
    return 0;
}

int
acl_sign_content(const struct rmq_cmd *cmd, unsigned flags, struct buf *out)
{
    const struct rmq_field *stack[ACL_SIGN_STACK_FIELDS];
    const struct rmq_field **v;
    uint32_t n;
    int rc = sorted_fields(cmd, flags, stack, &v, &n);
    if (rc != 0)
        return rc;
    size_t total = cmd->body_len;
    for (uint32_t i = 0; i < n; i++)
        total += v[i]->val.len;
    size_t mark = out->end;
    rc = buf_reserve(out, total);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (v[i]->val.len > 0)
            rc = buf_append(out, v[i]->val.p, v[i]->val.len);
    }
    if (rc == 0 && cmd->body_len > 0)
        rc = buf_append(out, cmd->body, cmd->body_len);
    if (rc != 0)
        out->end = mark;
    if (v != stack)
        free(v);
    return rc == 0 ? 0 : -ENOMEM;
}

/* The slot keyed with secret, or the least recently used one. */
static struct key_slot *
key_slot(struct acl_signer *s, const char *secret, size_t secret_len, bool *hit)
{
    struct key_slot *lru = &s->slot[0];
    for (size_t i = 0; i < KEY_SLOTS; i++) {
        struct key_slot *k = &s->slot[i];
        if (k->keyed && k->key_len == secret_len &&
            (secret_len == 0 || memcmp(k->key, secret, secret_len) == 0)) {
            *hit = true;
            return k;
        }
        if (k->used < lru->used)
            lru = k;
    }
    *hit = false;
    return lru;
}

/* Keys the MAC: a NULL key would mean "keep the last one" to libcrypto. */
static int
mac_begin(struct acl_signer *s, const char *secret, size_t secret_len)
{
    static const unsigned char empty[1] = {0};
    bool hit;
    struct key_slot *k = key_slot(s, secret, secret_len, &hit);
    k->used = ++s->tick;
    if (k->ctx == NULL) {
        k->ctx = EVP_MAC_CTX_dup(s->base);
        if (k->ctx == NULL) {
            set_ossl_err("EVP_MAC_CTX_dup");
            return -1;
        }
    }
    s->ctx = k->ctx;
    if (hit) {
        if (EVP_MAC_init(k->ctx, NULL, 0, NULL) != 1) {
            set_ossl_err("HMAC init");
            return -1;
        }
        return 0;
    }
    const unsigned char *key =
        secret_len > 0 ? (const unsigned char *)secret : empty;
    k->keyed = false;
    if (EVP_MAC_init(k->ctx, key, secret_len, NULL) != 1) {
        set_ossl_err("HMAC init");
        return -1;
    }
    if (secret_len <= KEY_CACHE) {
        if (secret_len > 0)
            memcpy(k->key, secret, secret_len);
        k->key_len = secret_len;
        k->keyed = true;
    }
    return 0;
}

static int
mac_update(struct acl_signer *s, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (EVP_MAC_update(s->ctx, p, n) != 1) {
        set_ossl_err("HMAC update");
        return -1;
    }
    return 0;
}

static int
mac_end(struct acl_signer *s, char out[ACL_SIGNATURE_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    if (EVP_MAC_final(s->ctx, md, &mdlen, sizeof(md)) != 1) {
        set_ossl_err("HMAC final");
        return -1;
    }
    if (mdlen != 20) {
        err_set("HMAC-SHA1 gave %zu bytes", mdlen);
        return -1;
    }
    /* 20 bytes -> 28 characters and a NUL. */
    int w = EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
    if (w != ACL_SIGNATURE_LEN) {
        err_set("base64 of the signature gave %d characters", w);
        return -1;
    }
    return 0;
}

int
acl_sign_data(struct acl_signer *s, const void *data, size_t len,
              const char *secret, size_t secret_len,
              char out[ACL_SIGNATURE_LEN + 1])
{
    if (mac_begin(s, secret, secret_len) != 0 ||
        mac_update(s, data, len) != 0)
        return -1;
    return mac_end(s, out);
}

/*
 * Small pieces gathered into one buffer before they go to the MAC: each
 * EVP_MAC_update costs a few hundred instructions of dispatch, more than
 * copying a header value; a piece that does not fit goes on its own.
 */
#define GATHER 1024

struct gather {
    struct acl_signer *s;
    size_t n;
    unsigned char buf[GATHER];
};

static int
gather_flush(struct gather *g)
{
    int rc = mac_update(g->s, g->buf, g->n);
    g->n = 0;
    return rc;
}

static int
gather_add(struct gather *g, const void *p, size_t n)
{
    if (n > GATHER - g->n) {
        if (gather_flush(g) != 0)
            return -1;
        if (n > GATHER)
            return mac_update(g->s, p, n);
    }
    if (n > 0)
        memcpy(g->buf + g->n, p, n);
    g->n += n;
    return 0;
}

int
acl_sign_cmd(struct acl_signer *s, const struct rmq_cmd *cmd, unsigned flags,
             const char *secret, size_t secret_len,
             char out[ACL_SIGNATURE_LEN + 1])
{
    const struct rmq_field *stack[ACL_SIGN_STACK_FIELDS];
    const struct rmq_field **v;
    uint32_t n;
    if (sorted_fields(cmd, flags, stack, &v, &n) != 0)
        return -1;
    int rc = mac_begin(s, secret, secret_len);
    struct gather g;
    g.s = s;
    g.n = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        rc = gather_add(&g, v[i]->val.p, v[i]->val.len);
    if (rc == 0)
        rc = gather_add(&g, cmd->body, cmd->body_len);
    if (rc == 0)
        rc = gather_flush(&g);
    if (rc == 0)
        rc = mac_end(s, out);
    if (v != stack)
        free(v);
    return rc;
}
