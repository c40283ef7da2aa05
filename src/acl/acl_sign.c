/* acl_sign: RocketMQ ACL request signatures (see acl_sign.h). */
#include "acl/acl_sign.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "core/err.h"

/* Keys up to this long are remembered: signing again with the same one
 * skips the HMAC key set-up (EVP_MAC_init with a NULL key keeps it). */
#define KEY_CACHE 128

struct acl_signer {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;
    bool keyed;                /* ctx holds key[0..key_len) */
    size_t key_len;
    unsigned char key[KEY_CACHE];
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
    s->ctx = EVP_MAC_CTX_new(s->mac);
    if (s->ctx == NULL) {
        set_ossl_err("EVP_MAC_CTX_new");
        goto fail;
    }
    /* The digest is set once; each signature only re-keys the context. */
    char digest[] = "SHA1";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_CTX_set_params(s->ctx, params) != 1) {
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
    EVP_MAC_CTX_free(s->ctx);
    EVP_MAC_free(s->mac);
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

/* Sorts by key; equal keys keep their order (pointers into one array). */
static int
field_ptr_cmp(const void *pa, const void *pb)
{
    const struct rmq_field *fa = *(const struct rmq_field *const *)pa;
    const struct rmq_field *fb = *(const struct rmq_field *const *)pb;
    int c = acl_java_strcmp(fa->key.p ? fa->key.p : "", fa->key.len,
                            fb->key.p ? fb->key.p : "", fb->key.len);
    if (c != 0)
        return c;
    return fa < fb ? -1 : fa > fb;
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
    if (cmd->ext_count > ACL_SIGN_STACK_FIELDS) {
        v = malloc(sizeof(*v) * cmd->ext_count);
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
        qsort(v, n, sizeof(*v), field_ptr_cmp);
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

/* Keys the MAC: a NULL key would mean "keep the last one" to libcrypto. */
static int
mac_begin(struct acl_signer *s, const char *secret, size_t secret_len)
{
    static const unsigned char empty[1] = {0};
    if (s->keyed && s->key_len == secret_len &&
        (secret_len == 0 || memcmp(s->key, secret, secret_len) == 0)) {
        if (EVP_MAC_init(s->ctx, NULL, 0, NULL) != 1) {
            set_ossl_err("HMAC init");
            return -1;
        }
        return 0;
    }
    const unsigned char *key =
        secret_len > 0 ? (const unsigned char *)secret : empty;
    s->keyed = false;
    if (EVP_MAC_init(s->ctx, key, secret_len, NULL) != 1) {
        set_ossl_err("HMAC init");
        return -1;
    }
    if (secret_len <= KEY_CACHE) {
        if (secret_len > 0)
            memcpy(s->key, secret, secret_len);
        s->key_len = secret_len;
        s->keyed = true;
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
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        rc = mac_update(s, v[i]->val.p, v[i]->val.len);
    if (rc == 0)
        rc = mac_update(s, cmd->body, cmd->body_len);
    if (rc == 0)
        rc = mac_end(s, out);
    if (v != stack)
        free(v);
    return rc;
}
