/*
 * acl: RocketMQ ACL 1.0's access check (PlainAccessValidator and
 * PlainPermissionManager @4.9.8, protocol.md §8.3-8.4), run on every
 * request a broker or NameServer listener receives, before any processor
 * (C or Lua) sees it.
 *
 * A struct acl_table is what plain_acl.yml says: the global white-list
 * and the accounts (secret, white address, admin, default perms, topic
 * and group perms).  It is built once (acl_table_*), then never changed:
 * acl_publish() makes it the process's current table, which every
 * worker's struct acl_guard picks up at its next request (one atomic load
 * per request; a mutex only when the generation moved).  A reload builds
 * a new table and publishes it; a table that failed to build is never
 * published, so the old one stays.
 *
 * The check, in 4.9.8's order:
 *   1. the request's resources (per code: PlainAccessValidator.parse;
 *      HEART_BEAT reads its body, whose errors refuse the request)
 *   2. peer IP matches a globalWhiteRemoteAddresses pattern -> allowed
 *   3. no AccessKey -> "No accessKey is configured"; unknown -> "No acl
 *      config for AK"
 *   4. peer IP matches the account's whiteRemoteAddress -> allowed
 *   5. Signature over the sorted extFields (without Signature and
 *      _UNIQUE_KEY_QUERY) + body; rmq also accepts the variant with
 *      _UNIQUE_KEY_QUERY that the 4.9.8 Java client sends (§10)
 *   6. RMQ_SYS_TRACE_TOPIC with PUB among the resources -> allowed
 *   7. an admin code needs admin: true (4.9.8's five, plus rmq's
 *      extension list: acl_admin_code())
 *   8. each resource against the account's perms or defaults
 * A refusal is answered code 1 (SYSTEM_ERROR) with the remark a 4.9.8
 * broker sends: the AclException's toString() and its first stack frame.
 *
 * The NameServer (an rmq extension: 4.x has no ACL there) runs 2-5 and 7
 * with its own admin list (registration, KV writes, config, topic
 * deletion and write permission); it has no resources.
 *
 * Cost: no Lua, and no allocation of rmq's for a request with up to 42
 * extFields (acl_sign.h; HEART_BEAT bodies are parsed, which allocates;
 * libcrypto's HMAC allocates its digest copies).  Most of a signed check
 * is SHA-1 (scripts/bench/acl_check.lua --callgrind).
 *
 * MT: a table is immutable once published (any thread reads it); a guard
 * belongs to one thread; acl_publish / acl_acquire from any thread.
 */
#ifndef RMQ_ACL_H
#define RMQ_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/codec.h"

/* Permission bits (Permission.java). */
enum acl_perm {
    ACL_PERM_DENY = 1,
    ACL_PERM_ANY = 2,
    ACL_PERM_PUB = 4,
    ACL_PERM_SUB = 8,
};

enum acl_role {
    ACL_ROLE_BROKER = 1,
    ACL_ROLE_NAMESRV = 2,
};

/* The longest remark a refusal carries (names are cut to fit). */
#define ACL_REMARK_MAX 768

struct acl_table;
struct acl_account;
struct acl_signer;

/** Permission.parsePermFromString: PUB, SUB, PUB|SUB, SUB|PUB, DENY
 *  (trimmed); anything else DENY. */
uint8_t acl_perm_parse(const char *s, size_t n);

/** True when s names a permission (Permission.checkResourcePerms). */
bool acl_perm_valid(const char *s, size_t n);

/** True when `code` needs an admin account on a listener of `role`. */
bool acl_admin_code(enum acl_role role, int32_t code);

/* {{{ Building a table */

/** An empty table (denies everyone but no one is white-listed), or NULL
 *  with err_set(). */
struct acl_table *acl_table_new(void);

void acl_table_ref(struct acl_table *t);
/** Drops a reference; the last one frees the table.  NULL: no-op. */
void acl_table_unref(struct acl_table *t);

/**
 * Checks an address pattern as RemoteAddressStrategyFactory does.
 * Returns 0, or -1 with err_set() giving 4.9.8's message.
 */
int acl_addr_check(const char *pattern, size_t n);

/** Adds a globalWhiteRemoteAddresses pattern.  0, or -1 with err_set(). */
int acl_table_add_white(struct acl_table *t, const char *pattern, size_t n);

struct acl_account_spec {
    const char *access_key;
    size_t access_key_len;
    const char *secret_key;
    size_t secret_key_len;
    const char *white;         /* NULL: none */
    size_t white_len;
    bool admin;
    const char *default_topic_perm;  /* NULL: DENY */
    size_t default_topic_perm_len;
    const char *default_group_perm;  /* NULL: DENY */
    size_t default_group_perm_len;
};

/**
 * Adds an account (one with the same AccessKey is replaced, as a later
 * entry of a Java HashMap) and points *out at it for acl_account_add_perm.
 * AccessKey and secret must be longer than 6 characters (4.9.8's
 * checkPlainAccessConfig).  Returns 0, or -1 with err_set().
 */
int acl_table_add_account(struct acl_table *t, const struct acl_account_spec *s,
                          struct acl_account **out);

/**
 * Adds one topicPerms (is_topic) or groupPerms entry, "name=PERM".
 * Returns 0, or -1 with err_set() ("Parse resource permission failed for
 * topic:...").
 */
int acl_account_add_perm(struct acl_account *a, bool is_topic, const char *entry,
                         size_t n);

/** Accounts in the table. */
size_t acl_table_accounts(const struct acl_table *t);

/* }}} */

/* {{{ The current table */

/** Makes t (a reference is taken) the process's current table; NULL
 *  removes it (every request is then refused as unknown). */
void acl_publish(struct acl_table *t);

/** A reference to the current table (NULL: none) and its generation. */
struct acl_table *acl_acquire(uint64_t *gen);

/** The generation of the current table: moves on every publish. */
uint64_t acl_generation(void);

/* }}} */

/* {{{ Checking requests */

struct acl_guard;

/** A guard for one thread: a signer and the table it last used. */
struct acl_guard *acl_guard_new(void);
void acl_guard_free(struct acl_guard *g);

/**
 * Checks one request from `peer` ("ip:port", as conn.h keeps it) with the
 * current table.  Returns true when allowed; false with the reply's remark
 * in remark (NUL-terminated, *rlen bytes) when refused.
 */
bool acl_guard_check(struct acl_guard *g, enum acl_role role,
                     const struct rmq_cmd *cmd, const char *peer,
                     char remark[ACL_REMARK_MAX], size_t *rlen);

/**
 * As acl_guard_check, for a request made on behalf of account `ak`
 * already authenticated by acl_guard_authenticate_hex (gRPC): steps 1-8
 * without the Signature (the request carries none).  ak NULL: the peer
 * authenticated through a white list, which it must still match.
 */
bool acl_guard_check_as(struct acl_guard *g, enum acl_role role, const struct rmq_cmd *cmd,
                        const char *peer, const char *ak, size_t ak_len,
                        char remark[ACL_REMARK_MAX], size_t *rlen);

/**
 * RocketMQ 5's authorization header (gRPC: "MQv2-HMAC-SHA1 Credential=AK,
 * SignedHeaders=x-mq-date-time, Signature=SIG"): SIG is the hex (either
 * case) of HmacSHA1(secret of ak, content), content being the
 * x-mq-date-time value.  Steps 2-5 of the check: white lists first (true
 * whatever the rest), then the account and the signature.  True, or
 * false with the remark.  The date's freshness is the caller's.
 */
bool acl_guard_authenticate_hex(struct acl_guard *g, const char *peer, const char *ak, size_t ak_len,
                                const void *content, size_t content_len, const char *sig,
                                size_t sig_len, char remark[ACL_REMARK_MAX], size_t *rlen);

/** The same against a given table and signer (specs, the bench). */
bool acl_check(const struct acl_table *t, struct acl_signer *s,
               enum acl_role role, const struct rmq_cmd *cmd,
               const char *peer, char remark[ACL_REMARK_MAX], size_t *rlen);

/**
 * Whether account `ak` (NULL: the request had none) from `peer` may use
 * topic with perm (ACL_PERM_SUB...) under table t, as acl_check decides
 * for a resource a request names: white lists first, then the account's
 * permissions; the signature is the caller's (already checked).  For
 * records a request reaches only by offset (VIEW_MESSAGE_BY_ID).
 */
bool acl_check_topic(const struct acl_table *t, const char *peer, const char *ak, size_t ak_len,
                     const char *topic, size_t topic_len, uint8_t perm,
                     char remark[ACL_REMARK_MAX], size_t *rlen);

/* }}} */

#endif
