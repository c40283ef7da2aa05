/*
 * l_credentials: signing the requests a Lua state sends, as RocketMQ's
 * AclClientRPCHook does (protocol.md §8.2): AccessKey (and SecurityToken)
 * into extFields, then Signature = Base64(HmacSHA1(secretKey, the sorted
 * extField values + body)), computed by acl/acl_sign.
 *
 * Credentials are a Lua table {accessKey=, secretKey=[, securityToken=]}
 * (rmq.client.credentials makes them).  A request table names its own
 * (`credentials = creds`, or `false` for none); a request without the
 * field gets the state's default, set with net.credentials(creds | nil).
 * Replies are never signed.
 *
 * MT: per Lua state (the signer and the default live in its registry).
 */
#ifndef RMQ_L_CREDENTIALS_H
#define RMQ_L_CREDENTIALS_H

#include <lua.h>

#include "net/codec.h"

/* extFields a signature adds: AccessKey, SecurityToken, Signature. */
#define LCRED_EXTRA_FIELDS 3

/* The longest secret or key accepted (Java has no limit; this bounds
 * what a typo can cost). */
#define LCRED_MAX_LEN 4096

/**
 * The credentials a request is signed with: the value at stack index
 * `idx` (a table), or, when idx is 0, the state's default (pushed).
 * Returns the absolute index of the table, 0 when there is none (no
 * default), or -1 with err_set() when the value is not a table.
 */
int lcred_find(lua_State *L, int idx);

/**
 * Signs request `c` with the credentials table at `creds` (lcred_find's).
 * c->ext must have room for LCRED_EXTRA_FIELDS more entries; an existing
 * AccessKey, SecurityToken or Signature is replaced, as Java's
 * addExtField does.  The strings c then points at stay valid until the
 * caller restores its stack top (they are pushed).  Returns 0, or -1
 * with err_set() (malformed credentials, libcrypto failure).
 */
int lcred_sign(lua_State *L, int creds, struct rmq_cmd *c);

/**
 * net.credentials([creds | nil]) -> the previous default: with an
 * argument sets (nil/false: clears) the state's default credentials;
 * without one only returns them.
 */
int lcred_default(lua_State *L);

#endif
