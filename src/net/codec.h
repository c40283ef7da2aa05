/*
 * codec: the RemotingCommand frame <-> struct rmq_cmd.
 *
 * Wire format (protocol.md §1.2-1.5, RemotingCommand.java @4.9.8):
 *
 *   int32 L          bytes that follow: 4 + header length + body length
 *   int32 H          serialize type in the top byte, header length in the
 *                    low 24 bits (0 = JSON, 1 = ROCKETMQ binary)
 *   header           H & 0xFFFFFF bytes
 *   body             L - 4 - header length bytes (may be 0)
 *
 * All integers are big-endian.  A decoded command points into the frame
 * it came from (body) and into an arena the caller supplies (strings, the
 * extFields array); it owns nothing, so its lifetime is the shorter of the
 * two.  Strings in the arena are NUL-terminated as a convenience; their
 * length is authoritative.
 *
 * MT: all functions are pure; any thread.
 */
#ifndef RMQ_CODEC_H
#define RMQ_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

enum rmq_serialize {
    RMQ_SER_JSON = 0,
    RMQ_SER_ROCKETMQ = 1,
};

/* flag bits (protocol.md §1.6) */
#define RMQ_RPC_RESPONSE 0x1
#define RMQ_RPC_ONEWAY 0x2

/* LanguageCode ordinals (protocol.md §1.5); JAVA is what we send. */
#define RMQ_LANG_JAVA 0
#define RMQ_LANG_OTHER 7
#define RMQ_LANG_COUNT 14

/* The version we put in every command we emit: MQVersion V4_9_8. */
#define RMQ_VERSION_409 409

/* Largest frame Netty accepts by default: L + 4 <= 16 MiB. */
#define RMQ_DEFAULT_MAX_FRAME 16777216u

struct rmq_str {
    const char *p;  /* NULL when absent */
    uint32_t len;
};

struct rmq_field {
    struct rmq_str key;
    struct rmq_str val;
};

struct rmq_cmd {
    int32_t code;
    int32_t language;          /* LanguageCode ordinal */
    int32_t version;
    int32_t opaque;
    int32_t flag;
    uint8_t serialize;         /* enum rmq_serialize */
    struct rmq_str remark;     /* .p == NULL: no remark */
    struct rmq_field *ext;     /* NULL: no extFields; else ext_count entries */
    uint32_t ext_count;
    const uint8_t *body;       /* NULL when body_len == 0 */
    uint32_t body_len;
};

/* A bump allocator the decoder writes strings and the field array into. */
struct rmq_arena {
    uint8_t *p;
    size_t cap;
    size_t used;
};

/**
 * Looks at the bytes received so far.  Returns 0 when a whole frame is
 * not there yet, or 1 and sets *frame_len to 4 + L (the bytes to cut).
 * Returns -RMQ_ETOOBIG when 4 + L exceeds max_frame, -RMQ_EPROTO when L
 * is too small to hold the H word, the header length exceeds L - 4 or the
 * serialize type is neither JSON nor ROCKETMQ; both with err_set().  It
 * checks the H word as soon as 8 bytes are there, so a bad header is
 * refused before its body arrives.
 */
int rmq_frame_peek(const uint8_t *p, size_t avail, size_t max_frame,
                   size_t *frame_len);

/**
 * Arena bytes that rmq_cmd_decode() may need for a header of hlen bytes.
 * An arena of this size never runs out.
 */
size_t rmq_cmd_arena_size(size_t hlen);

/**
 * Decodes one frame.  `frame` starts at the L word and `len` is 4 + L
 * (what rmq_frame_peek() reported).  JSON headers: extFields values may be
 * strings, numbers or booleans (turned into their text), null values are
 * dropped, `language` may be a name or a number, unknown keys are skipped,
 * a missing extFields leaves cmd->ext NULL.  Binary headers: a 0-length
 * string decodes as absent, as in Java.
 * Returns 0, or -RMQ_EPROTO with err_set() naming what is wrong, or
 * -RMQ_ETOOBIG when the arena's free space is smaller than the header
 * needs (never with rmq_cmd_arena_size() bytes free).  On failure
 * arena->used is unchanged.
 */
int rmq_cmd_decode(struct rmq_cmd *cmd, const uint8_t *frame, size_t len,
                   struct rmq_arena *arena);

/**
 * rmq_cmd_decode()'s first half: checks the frame's L and H words and
 * sets cmd to the command with no header fields read (zeros, no remark,
 * no extFields), its serialize type and body.  Returns 0 or -RMQ_EPROTO
 * (err_set()), as rmq_cmd_decode() would for the same words.
 */
int rmq_cmd_frame(struct rmq_cmd *cmd, const uint8_t *frame, size_t len);

/*
 * The pieces of a JSON header for a decode that types its extFields
 * itself in one pass (proto/header.h, lheader_json_ext): the codec reads
 * the RemotingCommand members around them, the caller the entries.  Both
 * take the plain spelling only (no whitespace, members as the Java client
 * writes them) and say false at anything else, committing nothing that
 * matters: the frame then goes through rmq_cmd_decode(), which accepts or
 * refuses it as always.  So they have no error messages of their own.
 */

/* What rmq_json_head() read of a header. */
struct rmq_json_head {
    int32_t code;
    uint32_t next;     /* offset past the code member: its ',' or '}' */
    uint32_t ext_at;   /* offset of extFields' first entry when extFields
                        * follows at once (`,"extFields":{`), else 0 */
};

/**
 * A header that starts `{"code":N` with a plain integer N (the Java
 * client writes code first: fastjson's sorted keys), into *hd; false for
 * any other start.
 */
bool rmq_json_head(const uint8_t *h, size_t hlen, struct rmq_json_head *hd);

/**
 * rmq_cmd_decode() of a JSON frame whose header rmq_json_head() read into
 * *hd (NULL: none): the same result and errors, the code not read again.
 */
int rmq_cmd_decode_head(struct rmq_cmd *cmd, const uint8_t *frame, size_t len,
                        struct rmq_arena *arena, const struct rmq_json_head *hd);

/**
 * The members after extFields' closing '}' (at = the offset past it) up
 * to the header's end, into cmd: flag, language "JAVA", opaque,
 * serializeTypeCurrentRPC "JSON" and version, each at most once, plain
 * integers, then the closing '}' as the last byte.  False for anything
 * else (a second code or extFields, a remark, another key, a language
 * other than JAVA, whitespace, ...).
 */
bool rmq_json_tail(const uint8_t *h, size_t hlen, size_t at, struct rmq_cmd *cmd);

/* The longest tail a tail memo keeps (the Java client's is ~95 bytes). */
#define RMQ_JSON_TAIL_MEMO 128

/* The last Java-order tail rmq_json_tail_memo() read: its bytes, where
 * its opaque's digits are, and the other members' values.  Zeroed: none. */
struct rmq_json_tail_memo {
    uint32_t len;              /* 0: none kept */
    uint32_t op_at, op_len;    /* the opaque's text, from the tail's start */
    int32_t flag, version;
    uint8_t bytes[RMQ_JSON_TAIL_MEMO];
};

/**
 * rmq_json_tail() through *tm: the same answer and the same cmd fields
 * for every tail.  A tail equal to the one kept but for the opaque's
 * digits (a client's next request) reads only those; a tail in the Java
 * client's order is kept.
 */
bool rmq_json_tail_memo(const uint8_t *h, size_t hlen, size_t at, struct rmq_cmd *cmd,
                        struct rmq_json_tail_memo *tm);

/**
 * Appends the L word, the H word and the header of `cmd` to `out`, in
 * cmd->serialize.  L counts cmd->body_len, but the body itself is not
 * written: the caller sends it as a separate buffer (no copy) or appends
 * it.  JSON output is strict, keys in fastjson's sorted order: code,
 * extFields (when cmd->ext != NULL, `{}` when it is empty), flag,
 * language (the name), opaque, remark (when present),
 * serializeTypeCurrentRPC, version; every extFields value a JSON string.
 * Returns 0, or -ENOMEM / -RMQ_ETOOBIG (see rmq_cmd_encoded_len()) /
 * -RMQ_EPROTO (unknown cmd->serialize); `out` is unchanged on failure.
 */
int rmq_cmd_encode(const struct rmq_cmd *cmd, struct buf *out);

/**
 * The two halves of rmq_cmd_encode() for callers that own the output
 * memory (the Lua binding writes straight into a luaL_Buffer).  Sets *len
 * to the bytes rmq_cmd_encode() would append (8 + header length).
 * Returns 0, or -RMQ_ETOOBIG (header over 2^24 - 1 bytes, frame over
 * INT32_MAX, a ROCKETMQ code/version outside a short, a key over 65535
 * bytes) / -RMQ_EPROTO (unknown cmd->serialize), with err_set().
 */
int rmq_cmd_encoded_len(const struct rmq_cmd *cmd, size_t *len);

/** Writes exactly the len bytes rmq_cmd_encoded_len() reported to dst. */
void rmq_cmd_encode_to(const struct rmq_cmd *cmd, uint8_t *dst, size_t len);

/** "JAVA", "CPP", ... for an ordinal; "OTHER" when out of range. */
const char *rmq_language_name(int32_t ordinal);

/** Ordinal for a name (exact, upper case); -1 when unknown. */
int32_t rmq_language_ordinal(const char *name, size_t len);

/** Value of extFields[key] or NULL. Linear scan: headers are small. */
const struct rmq_str *rmq_cmd_field(const struct rmq_cmd *cmd,
                                    const char *key, size_t klen);

#endif
