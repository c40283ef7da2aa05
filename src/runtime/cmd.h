/*
 * runtime/cmd: RemotingCommand values in Lua, as the host hands requests
 * to Lua handlers and encodes what they answer or send.
 *
 * A decoded command is a userdata ("rmq.cmd") holding the struct rmq_cmd,
 * the body bytes and the decoded strings in one block, so a request costs
 * one Lua allocation.  Fields: code, opaque, flag, version, language
 * (name), serialize ("JSON"|"ROCKETMQ"), remark, oneway, response,
 * body_len; `cmd.ext` builds (once) a string->string table of extFields;
 * `cmd:get(key)` reads one extField without building the table,
 * `cmd:fields(k1, k2, ...)` several at once; `cmd.body`
 * copies the body into a string (once).
 *
 * Commands we send are plain tables: {code=, remark=, ext={...}, body=,
 * flag=, serialize=}.
 */
#ifndef RMQ_RUNTIME_CMD_H
#define RMQ_RUNTIME_CMD_H

#include <lua.h>

#include "core/buf.h"
#include "net/codec.h"
#include "proto/header.h"   /* LCMD_TYPE */

struct host;

/**
 * Decodes a frame (4 + L bytes) and pushes it as a command userdata.
 * Returns the decoded command (inside the userdata), or NULL with
 * err_set() and nothing pushed when the frame is malformed.
 * Stack: [-0, +(0|1), m].
 */
struct rmq_cmd *lcmd_push_frame(lua_State *L, struct host *h,
                                const uint8_t *frame, size_t len);

/**
 * The two halves of lcmd_push_frame: decodes a frame into the host's
 * scratch arena (valid until the next decode; *used = arena bytes), and
 * pushes such a command as a userdata that owns copies of its bytes.
 * lcmd_decode returns 0, or -1 with err_set().
 */
int lcmd_decode(struct host *h, const uint8_t *frame, size_t len,
                struct rmq_cmd *cmd, size_t *used);
/** lcmd_decode of a frame whose JSON head rmq_json_head read into *hd
 * (NULL: none), not read again. */
int lcmd_decode_head(struct host *h, const uint8_t *frame, size_t len,
                     struct rmq_cmd *cmd, size_t *used, const struct rmq_json_head *hd);
struct rmq_cmd *lcmd_push_decoded(lua_State *L, struct host *h,
                                  const struct rmq_cmd *cmd, size_t used);

/**
 * Encodes the command table at `idx` ({code=, remark=, ext=, body=,
 * flag=, serialize=, language=, version=}) into h->enc (L word, H word,
 * header) and points *body and *blen at its body string, which stays valid
 * while the table is reachable.  Missing fields come from `base`.  When
 * `reply` is set, opaque, flag and serialize always come from base (a
 * reply mirrors its request).  Returns 0, or -1 with err_set() for a
 * malformed table.  Never raises except on memory errors.
 */
int lcmd_encode_table(lua_State *L, int idx, struct host *h,
                      const struct rmq_cmd *base, int reply,
                      const uint8_t **body, size_t *blen);

/**
 * The frame head (L word, H word, header) the last lcmd_encode_table or
 * lcmd_encode_reply on h wrote; valid until the next one.
 */
const struct buf *lcmd_encoded(struct host *h);

struct store_slices;
struct rcbuf;

/**
 * lcmd_encode_table for replies, where `body` may also be an rmq.store
 * records userdata: then *slices points at its slices (pinned while the
 * userdata lives) and *body is NULL; the header counts their bytes.
 */
int lcmd_encode_reply(lua_State *L, int idx, struct host *h,
                      const struct rmq_cmd *base, const uint8_t **body,
                      size_t *blen, const struct store_slices **slices,
                      struct rcbuf **shared);

/** Registers the metatable. Stack: [-0, +0, m]. */
void lcmd_register(lua_State *L);

struct rcbuf;

/*
 * The bindings' values a command table may hold, as the bindings (lua/)
 * describe them to this layer, so that it includes none of their headers:
 * a shared body (lua/l_rcbuf.h), store records (lua/l_store.h), and a
 * request's signing (lua/l_credentials.h).  A NULL member: no such
 * value (a body is then a string, a request goes unsigned).
 */
struct lcmd_values {
    struct rcbuf *(*rcbuf)(lua_State *L, int idx);               /* or NULL */
    const struct store_slices *(*records)(lua_State *L, int idx); /* or NULL */
    int (*cred_find)(lua_State *L, int idx);   /* lcred_find's contract */
    int (*cred_sign)(lua_State *L, int creds, struct rmq_cmd *c);
    size_t cred_extra_fields;                  /* fields a signature adds */
};

/** Sets the values of L's commands (v outlives the state: a static). [-0, +0, m] */
void lcmd_set_values(lua_State *L, const struct lcmd_values *v);

#endif
