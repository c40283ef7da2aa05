/* tls: see tls.h. */
#include "net/tls.h"

#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

/* Plaintext handed to SSL_write at a time: the output BIO then never
 * holds more than this (plus record overhead) before it is drained. */
#define TLS_SEAL_CHUNK 65536

/* Largest certificate chain a peer may send (OpenSSL's default, stated
 * so the bound on a handshake's memory is written down here). */
#define TLS_MAX_CERT_LIST (100 * 1024)

struct tls_ctx {
    SSL_CTX *ssl;
    _Atomic int refs;
    bool server;
};

struct tls_session {
    SSL *ssl;
    BIO *rbio;                 /* socket -> OpenSSL (owned by ssl) */
    BIO *wbio;                 /* OpenSSL -> socket (owned by ssl) */
};

/* {{{ Errors */

/* err_set()s "what: reason" from this thread's OpenSSL error queue (or
 * `fallback` when it is empty) and empties the queue, so a later
 * connection on the thread never reports this one's error. */
static void
set_error(const char *what, const char *fallback, SSL *ssl)
{
    unsigned long e = ERR_get_error();
    char reason[256];
    if (e != 0) {
        const char *r = ERR_reason_error_string(e);
        if (r != NULL)
            snprintf(reason, sizeof(reason), "%s", r);
        else
            ERR_error_string_n(e, reason, sizeof(reason));
    } else {
        snprintf(reason, sizeof(reason), "%s", fallback);
    }
    long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK)
        err_set("%s: %s: %s", what, reason, X509_verify_cert_error_string(v));
    else
        err_set("%s: %s", what, reason);
    ERR_clear_error();
}

/* }}} */

/* {{{ Contexts */

/* The key's password, for the duration of one load (the pointer is the
 * caller's and is cleared right after). */
static int
password_cb(char *buf, int size, int rwflag, void *userdata)
{
    (void)rwflag;
    const char *pw = userdata;
    if (pw == NULL || size <= 0)
        return 0;
    size_t n = strlen(pw);
    if (n > (size_t)size)
        n = (size_t)size;
    memcpy(buf, pw, n);
    return (int)n;
}

/* 4.9.8 with authClient / authServer false: a certificate is asked for
 * (or received) but any is accepted (Netty's InsecureTrustManagerFactory). */
static int
accept_any(int preverify_ok, X509_STORE_CTX *x)
{
    (void)preverify_ok;
    (void)x;
    return 1;
}

static SSL_CTX *
ctx_base(const SSL_METHOD *method)
{
    ERR_clear_error();
    SSL_CTX *c = SSL_CTX_new(method);
    if (c == NULL) {
        set_error("TLS", "cannot create a context", NULL);
        return NULL;
    }
    if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1) {
        set_error("TLS", "cannot set the protocol versions", NULL);
        SSL_CTX_free(c);
        return NULL;
    }
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_max_cert_list(c, TLS_MAX_CERT_LIST);
    return c;
}

/* Our certificate chain and key.  `prefix` names the conf keys
 * ("tls.server" / "tls.client") in errors. */
static int
load_identity(SSL_CTX *c, const char *prefix, const char *cert,
              const char *key, const char *password)
{
    char what[1200];
    if (SSL_CTX_use_certificate_chain_file(c, cert) != 1) {
        snprintf(what, sizeof(what), "%s.certPath %s", prefix, cert);
        set_error(what, "cannot load the certificate chain", NULL);
        return -1;
    }
    SSL_CTX_set_default_passwd_cb(c, password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(c, (void *)password);
    int ok = SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM);
    SSL_CTX_set_default_passwd_cb_userdata(c, NULL);
    if (ok != 1) {
        snprintf(what, sizeof(what), "%s.keyPath %s%s", prefix, key,
                 password != NULL ? " (with keyPassword)" : "");
        set_error(what, "cannot load the private key", NULL);
        return -1;
    }
    if (SSL_CTX_check_private_key(c) != 1) {
        snprintf(what, sizeof(what), "%s.keyPath %s", prefix, key);
        set_error(what, "the key does not match the certificate", NULL);
        return -1;
    }
    return 0;
}

static int
load_trust(SSL_CTX *c, const char *prefix, const char *trust)
{
    char what[1200];
    if (trust == NULL) {
        if (SSL_CTX_set_default_verify_paths(c) != 1) {
            set_error("TLS: the system's CA certificates", "cannot load", NULL);
            return -1;
        }
        return 0;
    }
    if (SSL_CTX_load_verify_locations(c, trust, NULL) != 1) {
        snprintf(what, sizeof(what), "%s.trustCertPath %s", prefix, trust);
        set_error(what, "cannot load the trusted certificates", NULL);
        return -1;
    }
    return 0;
}

static struct tls_ctx *
ctx_wrap(SSL_CTX *c, bool server)
{
    struct tls_ctx *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        err_set("out of memory for a TLS context");
        SSL_CTX_free(c);
        return NULL;
    }
    t->ssl = c;
    t->server = server;
    atomic_init(&t->refs, 1);
    return t;
}

/* ALPN: "h2" when the client offers it (gRPC clients over TLS insist on
 * it: the gRPC port shares this context); otherwise no ALPN at all, as
 * remoting clients offer none. */
static int
alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
            unsigned int inlen, void *arg)
{
    static const unsigned char h2[] = "\x02h2";
    unsigned char *sel = NULL;
    (void)ssl;
    (void)arg;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof(h2) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

struct tls_ctx *
tls_ctx_server(const struct tls_server_opts *o)
{
    if (o->cert_path == NULL || o->key_path == NULL) {
        err_set("TLS needs tls.server.certPath and tls.server.keyPath");
        return NULL;
    }
    SSL_CTX *c = ctx_base(TLS_server_method());
    if (c == NULL)
        return NULL;
    /* Remoting connections live long and clients rarely reconnect: no
     * server-side session cache to bound (stateless tickets still work). */
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_alpn_select_cb(c, alpn_select, NULL);
    if (load_identity(c, "tls.server", o->cert_path, o->key_path,
                      o->key_password) != 0)
        goto fail;
    if (o->need_client_auth != TLS_CLIENT_AUTH_NONE) {
        int mode = SSL_VERIFY_PEER;
        if (o->need_client_auth == TLS_CLIENT_AUTH_REQUIRE)
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        if (o->auth_client) {
            if (load_trust(c, "tls.server", o->trust_cert_path) != 0)
                goto fail;
            if (o->trust_cert_path != NULL) {
                /* Named in the CertificateRequest, so a client holding
                 * several certificates offers one these CAs signed. */
                STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->trust_cert_path);
                if (names != NULL)
                    SSL_CTX_set_client_CA_list(c, names);
                ERR_clear_error();
            }
            SSL_CTX_set_verify(c, mode, NULL);
        } else {
            SSL_CTX_set_verify(c, mode, accept_any);
        }
    }
    return ctx_wrap(c, true);
fail:
    SSL_CTX_free(c);
    return NULL;
}

struct tls_ctx *
tls_ctx_client(const struct tls_client_opts *o)
{
    SSL_CTX *c = ctx_base(TLS_client_method());
    if (c == NULL)
        return NULL;
    if (o->auth_server) {
        if (load_trust(c, "tls.client", o->trust_cert_path) != 0)
            goto fail;
        SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
    }
    if (o->cert_path != NULL || o->key_path != NULL) {
        if (o->cert_path == NULL || o->key_path == NULL) {
            err_set("a client certificate needs both tls.client.certPath and "
                    "tls.client.keyPath");
            goto fail;
        }
        if (load_identity(c, "tls.client", o->cert_path, o->key_path,
                          o->key_password) != 0)
            goto fail;
    }
    return ctx_wrap(c, false);
fail:
    SSL_CTX_free(c);
    return NULL;
}

void
tls_ctx_ref(struct tls_ctx *ctx)
{
    atomic_fetch_add(&ctx->refs, 1);
}

void
tls_ctx_unref(struct tls_ctx *ctx)
{
    if (ctx == NULL || atomic_fetch_sub(&ctx->refs, 1) != 1)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

/* }}} */

/* {{{ Sessions */

struct tls_session *
tls_session_new(struct tls_ctx *ctx)
{
    ERR_clear_error();
    struct tls_session *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err_set("out of memory for a TLS session");
        return NULL;
    }
    s->ssl = SSL_new(ctx->ssl);
    s->rbio = BIO_new(BIO_s_mem());
    s->wbio = BIO_new(BIO_s_mem());
    if (s->ssl == NULL || s->rbio == NULL || s->wbio == NULL) {
        set_error("TLS", "cannot create a session", NULL);
        BIO_free(s->rbio);
        BIO_free(s->wbio);
        SSL_free(s->ssl);
        free(s);
        return NULL;
    }
    /* An empty input BIO means "wait for more", not end of stream. */
    BIO_set_mem_eof_return(s->rbio, -1);
    SSL_set_bio(s->ssl, s->rbio, s->wbio);
    if (ctx->server)
        SSL_set_accept_state(s->ssl);
    else
        SSL_set_connect_state(s->ssl);
    return s;
}

void
tls_session_free(struct tls_session *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl);  /* frees both BIOs */
    free(s);
}

/* Moves everything OpenSSL wrote into `wire`. */
static int
drain(struct tls_session *s, struct buf *wire)
{
    size_t pending = BIO_ctrl_pending(s->wbio);
    while (pending > 0) {
        if (buf_reserve(wire, pending) != 0)
            return -1;
        size_t got = 0;
        if (BIO_read_ex(s->wbio, buf_tail(wire), pending, &got) != 1 || got == 0)
            break;
        wire->end += got;
        pending = BIO_ctrl_pending(s->wbio);
    }
    return 0;
}

/* The outcome of an SSL call that returned rc: 0 when it only waits for
 * more input, 1 when the peer closed the session (close_notify), else -1
 * with err_set(). */
static int
outcome(struct tls_session *s, int rc, const char *what)
{
    int e = SSL_get_error(s->ssl, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        ERR_clear_error();
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        err_set("closed by peer");
        ERR_clear_error();
        return 1;
    default:
        set_error(what, "unexpected end of the stream", s->ssl);
        return -1;
    }
}

int
tls_session_start(struct tls_session *s, struct buf *wire)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(s->ssl);
    if (drain(s, wire) != 0)
        return -1;
    if (rc == 1)
        return 0;
    return outcome(s, rc, "TLS handshake failed");
}

int
tls_session_input(struct tls_session *s, const uint8_t *p, size_t n,
                  struct buf *plain, struct buf *wire)
{
    ERR_clear_error();
    while (n > 0) {
        size_t put = 0;
        if (BIO_write_ex(s->rbio, p, n, &put) != 1 || put == 0) {
            err_set("out of memory for TLS input");
            ERR_clear_error();
            return -1;
        }
        p += put;
        n -= put;
    }
    if (!SSL_is_init_finished(s->ssl)) {
        int rc = SSL_do_handshake(s->ssl);
        if (drain(s, wire) != 0)
            return -1;
        if (rc != 1)
            return outcome(s, rc, "TLS handshake failed");
    }
    for (;;) {
        if (buf_reserve(plain, 16384) != 0)
            return -1;
        size_t got = 0;
        int rc = SSL_read_ex(s->ssl, buf_tail(plain), buf_avail(plain), &got);
        if (rc == 1) {
            plain->end += got;
            continue;
        }
        if (drain(s, wire) != 0)
            return -1;
        return outcome(s, rc, "TLS");   /* 0, 1 (close_notify) or -1 */
    }
}

int
tls_session_seal(struct tls_session *s, const uint8_t *p, size_t n,
                 struct buf *wire)
{
    ERR_clear_error();
    while (n > 0) {
        size_t chunk = n > TLS_SEAL_CHUNK ? TLS_SEAL_CHUNK : n;
        size_t wrote = 0;
        int rc = SSL_write_ex(s->ssl, p, chunk, &wrote);
        if (rc != 1) {
            /* A memory BIO takes everything: any "retry" is a failure. */
            if (outcome(s, rc, "TLS write") != -1)
                err_set("TLS write: the session is not ready or closed");
            return -1;
        }
        p += wrote;
        n -= wrote;
        if (drain(s, wire) != 0)
            return -1;
    }
    return 0;
}

bool
tls_session_ready(const struct tls_session *s)
{
    return SSL_is_init_finished(s->ssl) == 1;
}

void
tls_session_describe(const struct tls_session *s, char *out, size_t n)
{
    const char *cipher = SSL_get_cipher_name(s->ssl);
    snprintf(out, n, "%s %s", SSL_get_version(s->ssl),
             cipher != NULL ? cipher : "?");
}

/* }}} */
