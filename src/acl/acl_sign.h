/*
 * acl_sign: the request signature of RocketMQ ACL 1.0 (protocol.md §8.2,
 * AclClientRPCHook / AclUtils.combineRequestContent / AclSigner @4.9.8).
 *
 *   content   = the values (not the keys) of the extFields sorted by key
 *               in Java String order, except "Signature" (and, as the
 *               4.9.8 broker computes it, "_UNIQUE_KEY_QUERY"), joined
 *               with no separator, then the raw body bytes
 *   Signature = Base64(HmacSHA1(key = secret bytes, data = content)),
 *               standard alphabet with padding: always 28 characters
 *
 * The HMAC is OpenSSL libcrypto's (EVP_MAC "HMAC" with SHA1), never
 * written here.  The content is fed to the MAC piece by piece, so
 * checking a request copies nothing and allocates nothing unless the
 * request has more than ACL_SIGN_STACK_FIELDS extFields.
 *
 * MT: a struct acl_signer belongs to one thread at a time (it holds the
 * MAC context); the pure functions may run on any thread.
 */
#ifndef RMQ_ACL_SIGN_H
#define RMQ_ACL_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "net/codec.h"

/* Base64 of a 20-byte HMAC-SHA1, without the NUL. */
#define ACL_SIGNATURE_LEN 28

/* extFields sorted on the stack; more take one malloc per signature. */
#define ACL_SIGN_STACK_FIELDS 64

/* The extField names ACL uses (SessionCredentials @4.9.8). */
#define ACL_FIELD_ACCESS_KEY "AccessKey"
#define ACL_FIELD_SIGNATURE "Signature"
#define ACL_FIELD_SECURITY_TOKEN "SecurityToken"
#define ACL_FIELD_UNIQUE_KEY_QUERY "_UNIQUE_KEY_QUERY"

enum acl_sign_flags {
    /* Leave _UNIQUE_KEY_QUERY out, as PlainAccessValidator.parse does
     * (the 4.9.8 Java client signs it: protocol.md §10). */
    ACL_SIGN_SKIP_UNIQUE_KEY_QUERY = 1,
};

struct acl_signer;

/** A signer (one MAC context), or NULL with err_set(). */
struct acl_signer *acl_signer_new(void);

/** Frees a signer; NULL is a no-op. */
void acl_signer_free(struct acl_signer *s);

/**
 * Java's String.compareTo on two UTF-8 strings: by UTF-16 code units,
 * which differs from byte order only for characters past U+FFFF against
 * U+E000..U+FFFF.  Malformed UTF-8 compares bytewise from the first bad
 * byte on.  Returns <0, 0 or >0.
 */
int acl_java_strcmp(const char *a, size_t alen, const char *b, size_t blen);

/**
 * Appends the signing content of `cmd` (see above) to `out`: for specs,
 * logs and tools; the check itself does not build it.
 * Returns 0, or -ENOMEM with `out` unchanged.
 */
int acl_sign_content(const struct rmq_cmd *cmd, unsigned flags, struct buf *out);

/**
 * The Signature of `cmd` under `secret` (secret_len bytes, UTF-8) into
 * out (ACL_SIGNATURE_LEN characters + NUL).  Returns 0, or -1 with
 * err_set() (libcrypto failure, out of memory).
 */
int acl_sign_cmd(struct acl_signer *s, const struct rmq_cmd *cmd, unsigned flags,
                 const char *secret, size_t secret_len,
                 char out[ACL_SIGNATURE_LEN + 1]);

/**
 * Base64(HmacSHA1(secret, data)) into out.  Returns 0, or -1 with
 * err_set().
 */
int acl_sign_data(struct acl_signer *s, const void *data, size_t len,
                  const char *secret, size_t secret_len,
                  char out[ACL_SIGNATURE_LEN + 1]);

#endif
