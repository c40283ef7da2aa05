/*
 * tls: TLS for remoting connections, as RocketMQ 4.9.8 offers it
 * (TlsSystemConfig, TlsHelper), with OpenSSL.
 *
 * OpenSSL never touches a socket here.  Each session has two memory BIOs:
 * bytes read from the socket go into one (tls_session_input), and what
 * OpenSSL wants sent (handshake messages, alerts, records) is drained
 * from the other into a buffer the connection writes.  So the libuv read
 * and write paths stay as they are, and conn.c decides what is plaintext
 * (its `in` and `out`) and what is ciphertext (what goes to the socket).
 *
 * A context (struct tls_ctx) is made once from the conf and shared by
 * every session of every worker thread: an SSL_CTX may be used by many
 * threads once set up, and it is reference counted.  A session belongs to
 * one connection and so to one thread.
 *
 * Verification follows 4.9.8:
 *   server  tls.server.need.client.auth none: no client certificate asked
 *           for; optional: asked for, a client may send none; require: a
 *           client without one fails the handshake.  A certificate sent
 *           is checked against tls.server.trustCertPath (the system's CAs
 *           without it) only with tls.server.authClient = true, as 4.9.8
 *           uses an insecure trust manager otherwise.
 *   client  tls.client.authServer = false (4.9.8's default) accepts any
 *           server certificate; true checks it against
 *           tls.client.trustCertPath (or the system's CAs).  As 4.9.8 (no
 *           endpoint identification), the certificate's names are not
 *           compared with the address dialled.
 * TLS 1.2 and 1.3 only; renegotiation is refused (a peer could make the
 * server redo the costly half of a handshake at will).
 *
 * Memory: a session holds OpenSSL's state (a few KB; record buffers are
 * released while idle, SSL_MODE_RELEASE_BUFFERS), at most one record
 * (16 KB) waiting to be completed in its input BIO, and nothing in its
 * output BIO between calls (everything is drained into the caller's
 * buffer).  Handshake messages are bounded by OpenSSL (the certificate
 * list by TLS_MAX_CERT_LIST).
 *
 * Errors: every function that fails sets err_set() with OpenSSL's reason
 * ("certificate verify failed: unable to get local issuer certificate",
 * "wrong version number") and leaves this thread's OpenSSL error queue
 * empty.
 */
#ifndef RMQ_TLS_H
#define RMQ_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* tls.server.mode: what a server port does with plaintext and TLS. */
enum tls_mode {
    TLS_MODE_DISABLED = 0,     /* plaintext only; a TLS hello is closed */
    TLS_MODE_PERMISSIVE = 1,   /* both, told apart by the first byte */
    TLS_MODE_ENFORCING = 2,    /* TLS only; plaintext is closed */
};

/* The first byte of a TLS record carrying a handshake message (a
 * ClientHello): what 4.9.8's HandshakeHandler sniffs for. */
#define TLS_HANDSHAKE_BYTE 0x16

/* tls.server.need.client.auth */
enum tls_client_auth {
    TLS_CLIENT_AUTH_NONE = 0,
    TLS_CLIENT_AUTH_OPTIONAL = 1,
    TLS_CLIENT_AUTH_REQUIRE = 2,
};

struct tls_server_opts {
    const char *cert_path;         /* PEM chain, required */
    const char *key_path;          /* PEM key (PKCS#8 or traditional), required */
    const char *key_password;      /* NULL: key not encrypted */
    const char *trust_cert_path;   /* PEM CAs for client certificates; NULL: system's */
    enum tls_client_auth need_client_auth;
    bool auth_client;              /* verify a client's certificate */
};

struct tls_client_opts {
    bool auth_server;              /* verify the server's certificate */
    const char *trust_cert_path;   /* PEM CAs; NULL: the system's */
    const char *cert_path;         /* our certificate, NULL: none */
    const char *key_path;
    const char *key_password;
};

struct tls_ctx;
struct tls_session;

/** A server context, or NULL with err_set() (naming the file at fault). */
struct tls_ctx *tls_ctx_server(const struct tls_server_opts *o);

/** A client context, or NULL with err_set(). */
struct tls_ctx *tls_ctx_client(const struct tls_client_opts *o);

/** MT: any thread (the count is atomic). */
void tls_ctx_ref(struct tls_ctx *ctx);
void tls_ctx_unref(struct tls_ctx *ctx);

/** A session on ctx (server or client, as ctx is), or NULL with err_set(). */
struct tls_session *tls_session_new(struct tls_ctx *ctx);
void tls_session_free(struct tls_session *s);

/**
 * A client session's first flight (the ClientHello), appended to `wire`.
 * Returns 0 or -1 with err_set().
 */
int tls_session_start(struct tls_session *s, struct buf *wire);

/**
 * Bytes read from the socket.  Plaintext they complete is appended to
 * `plain`; what must be sent back (handshake messages, alerts, session
 * tickets) to `wire`.  Returns 0; 1 when the peer ended the session
 * (close_notify: close quietly); or -1 with err_set(): the peer broke the
 * protocol (or failed verification) and the connection must close.
 */
int tls_session_input(struct tls_session *s, const uint8_t *p, size_t n,
                      struct buf *plain, struct buf *wire);

/**
 * Encrypts n bytes of plaintext into records appended to `wire`.  Only
 * once tls_session_ready().  Returns 0 or -1 with err_set().
 */
int tls_session_seal(struct tls_session *s, const uint8_t *p, size_t n,
                     struct buf *wire);

/** True once the handshake has completed. */
bool tls_session_ready(const struct tls_session *s);

/** "TLSv1.3 TLS_AES_256_GCM_SHA384" (for log lines), into out. */
void tls_session_describe(const struct tls_session *s, char *out, size_t n);

#endif
