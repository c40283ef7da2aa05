/*
 * proto/header: declared request headers (the rmq.header module) and the
 * text rules shared with the reply path.
 *
 *   local header = require "rmq.header"
 *   local spec = header.compile{
 *       { "queueId", "int", true, min = 0 },         -- name, type, required
 *       { "b", "topic", true, as = "topic" },        -- wire name b, read as h.topic
 *       { "j", "int", false, as = "reconsumeTimes", default = 0 },
 *       { "i", "string", false, as = "properties", max_len = 32767 },
 *   }
 *   local h, code, remark = spec:read(cmd)   -- cmd: an rmq.cmd, or {ext = {...}}
 *
 * Types: string; int (int32) and long (int64): strict decimal, an
 * optional sign and digits only (no "0x1", "2.5", " 1", ""), overflow
 * refused, then min/max; bool: Java's Boolean.parseBoolean ("true" in any
 * case is true, anything else false); topic: TopicValidator.validateTopic
 * (not blank, ^[%|a-zA-Z0-9_-]+$, at most 127 bytes); group:
 * Validators.checkGroup (not blank, at most 255 bytes, same characters).
 * An absent optional field is nil in h, or its `default`.
 *
 * Refusals are (nil, 1 SYSTEM_ERROR, remark): "the custom field <NAME> is
 * null" (Java's text) for a missing required field; "the custom field
 * <NAME> is not an Integer: \"VALUE\"" / "is not a Long" / "is out of
 * range MIN..MAX" / "is longer than N bytes" for a malformed one (VALUE
 * cut to 64 bytes, anything outside printable ASCII, '"' and '\\' shown
 * as '?'); RocketMQ's own texts for a topic or group name.
 *
 *   header.topic(s), header.group(s) -> nil | reason   the name rules
 *   header.scrub(s) -> s   an error text fit for a reply: no "file:line:"
 *                          position, no filesystem paths
 */
#ifndef RMQ_PROTO_HEADER_H
#define RMQ_PROTO_HEADER_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/codec.h"

/* The metatable of a decoded command as Lua holds it (runtime/cmd.h): the
 * userdata starts with its struct rmq_cmd, which spec:read takes. */
#define LCMD_TYPE "rmq.cmd"

/* The most fields a spec has (header.compile refuses more): room for a
 * spec's values. */
#define LHEADER_MAX_FIELDS 64

/* A compiled spec (header.compile), for C request processors. */
struct hspec;

/* One field as read: the wire text, and the number for int/long/bool. */
struct lheader_val {
    const char *p;             /* points into the command; NULL if absent */
    uint32_t len;
    bool set;                  /* present in extFields */
    int64_t i;                 /* int, long: the value; bool: 0 or 1 */
};

/**
 * Reads and checks every field of s from the command, into vals (one per
 * field, in declaration order) with the same rules and texts as
 * spec:read.  Defaults are not applied (a C caller knows its own).
 * Returns 0, or 1 (SYSTEM_ERROR) with the refusal's remark in remark.
 */
int lheader_decode(const struct hspec *s, const struct rmq_cmd *c,
                   struct lheader_val *vals, char *remark, size_t cap);

/**
 * The typed one-pass decode of a JSON header's extFields (what
 * lheader_decode reads from the decoded field array, read straight from
 * the header's bytes): the entries from offset `at` (the first one, past
 * extFields' '{': net/codec.h's rmq_json_head) to extFields' closing '}',
 * each typed and checked by s as it is read, the strings unescaped into
 * scratch (cap bytes: hlen - at are enough), vals as lheader_decode
 * fills them.  Keys s does not declare are read over.  Returns the offset
 * past the closing '}', or 0 when it does not take the header: an entry
 * not spelled plainly (jscan_entry_plain), a field given twice, a value
 * s refuses, a required field missing.  Then the generic decode and
 * lheader_decode take it (and name a refusal): so every header this path
 * takes gets the vals lheader_decode would give, and no other.
 */
size_t lheader_json_ext(const struct hspec *s, const uint8_t *h, size_t hlen, size_t at,
                        struct lheader_val *vals, uint8_t *scratch, size_t cap);

/* The longest header a memo keeps (a Java send's is 250-450 bytes). */
#define LHEADER_MEMO_MAX 1024

/*
 * A connection's last typed header (lheader_json_ext_memo): a client
 * sends the same header again and again with a few values changed (a
 * send's born timestamp, its UNIQ_KEY, the queue), so the next one is
 * compared with it byte for byte and only the entries whose value bytes
 * differ are read and checked again.  One allocation of 2.6-4.1 KiB,
 * made on a connection's first typed request and released with free().
 */
struct lheader_memo;

/**
 * lheader_json_ext() through the memo *mp (NULL: none yet; made, grown or
 * kept as it goes): the same answer and the same vals for every header,
 * and *mp keeps the header taken.  vals' strings may point into the
 * memo, valid until the next call with it.  A header of the same spec,
 * length and extFields start as the one kept, differing only inside
 * values, is not read whole again; anything else is.
 */
size_t lheader_json_ext_memo(const struct hspec *s, struct lheader_memo **mp,
                             const uint8_t *h, size_t hlen, size_t at,
                             struct lheader_val *vals, uint8_t *scratch, size_t cap);

/** rmq_json_tail() through the memo m keeps of the tail (m NULL: none). */
bool lheader_json_tail_memo(struct lheader_memo *m, const uint8_t *h, size_t hlen, size_t at,
                            struct rmq_cmd *cmd);

/**
 * For a request made in this process with its fields already typed (no
 * extFields text to parse: the gRPC service's sends): whether vals, as
 * lheader_decode would have filled them (p and len for a string, topic or
 * group; i for a number or a bool; set), pass every check of s.  False
 * when one would be refused: the caller then sends the request as text,
 * and lheader_decode names the refusal with its usual remark.
 */
bool lheader_typed_ok(const struct hspec *s, const struct lheader_val *vals);

/** The spec at idx (raises if it is not one). */
const struct hspec *lheader_check(lua_State *L, int idx);

/** Number of fields; index of the field whose typed key is `key`, or -1. */
int lheader_nfields(const struct hspec *s);
int lheader_field(const struct hspec *s, const char *key);

/**
 * Writes into out (NUL-terminated, at most cap bytes) the error text `msg`
 * without its leading "chunk:line:" positions and with every run that
 * looks like a filesystem path (contains '/' but is not a URL, or names a
 * .lua file) replaced by "<path>".  Returns the length written.
 */
size_t lheader_scrub(const char *msg, size_t len, char *out, size_t cap);

/* The rmq.header module (opened by runtime/host.c, listed in lua/l_modules.h). */
int luaopen_rmq_header(lua_State *L);

#endif
