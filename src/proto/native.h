/*
 * proto/native: request processors written in C, placed in a role's processor
 * table beside the Lua ones (the rmq.native module).
 *
 * The processor table stays Lua: a conf can still map any code to a Lua
 * handler.  A table entry may carry a native processor as well as its Lua
 * handler ({native = np, header = spec, run = fn}); the worker installs
 * the native one for its role's listeners (native_install), and a request
 * with that code is then run in C on the worker's thread, with no
 * coroutine, no Lua value per request and the reply encoded straight from
 * C.  A native processor serves its requests whole (send) or the common
 * case, handing anything else to the entry's Lua handler (NATIVE_TO_LUA)
 * before it changes anything, so the Lua handler sees the request as if
 * C had never looked at it.  A decision it needs (an auto-created topic
 * or group, the retry/DLQ choice, a delay level, the slave-read
 * suggestion) is a hook call into Lua, one call with the facts; a request
 * it holds (a long-poll pull) it keeps in C, with a copy of its frame
 * (native_req.frame).
 *
 * This header is the processor interface (a request, a processor, a
 * reply) and the processors' Lua value; the tables of installed
 * processors, their dispatch and the rmq.native module are the host's
 * (runtime/natives.h).
 *
 * MT: a host's table is used on the host's thread only.
 */
#ifndef RMQ_PROTO_NATIVE_H
#define RMQ_PROTO_NATIVE_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/codec.h"
#include "proto/header.h"

struct host;
struct conn;
struct buf;
struct metrics_shard;
struct store_slices;

enum native_rc {
    NATIVE_DONE = 0,          /* answered (or oneway): nothing more to do */
    NATIVE_TO_LUA = 1,        /* run the entry's Lua handler instead */
};

/* One request, as a native processor sees it. */
struct native_req {
    struct host *h;
    struct conn *c;
    const struct rmq_cmd *cmd;
    int64_t start_ns;         /* arrival, for rocketmq_rpc_latency */
    bool oneway;
    int lua;                  /* enum native_lua: run again from Lua */
    /* The frame the request was decoded from (its bytes live only as
     * long as the run; NULL when there is none to keep, e.g. gRPC's):
     * what a processor copies to hold the request in C. */
    const uint8_t *frame;
    size_t frame_len;
    /* What the reply uses: the thread's request metrics (NULL: none)
     * and its encode buffer (the host's, runtime/host.h). */
    struct metrics_shard *metrics;
    struct buf *enc;
    /* native_reply_json_begin's room in the connection's output (a reply
     * without a body is spelled there, not copied from enc); NULL: enc. */
    uint8_t *direct;
};

/* native_req.lua: where the run comes from. */
enum native_lua {
    NATIVE_LUA_NONE = 0,      /* the frame, before any Lua */
    NATIVE_LUA_HOLD = 1,      /* a Lua handler holding it (native.serve) */
    NATIVE_LUA_FINAL = 2,     /* the same, for the last time: answer */
};

struct native_proc {
    const char *name;
    int (*run)(struct native_proc *p, struct native_req *r);
    void (*destroy)(struct native_proc *p);
    /* The typed one-pass path (both NULL: the processor has none).  The
     * host asks json_spec for the header spec of `code` (NULL: none for
     * it), decodes a JSON header's extFields straight into values with it
     * (lheader_json_ext, no field array) and runs run_typed with them:
     * the request's cmd has no extFields then (ext NULL), so the
     * processor reads the values only.  run_typed answers as run does,
     * NATIVE_TO_LUA included (then the host decodes the frame for Lua:
     * host.c's typed_frame; the send processor never hands a typed run to
     * Lua, so that branch has no spec yet: a processor that does needs
     * one). */
    const struct hspec *(*json_spec)(struct native_proc *p, int32_t code);
    int (*run_typed)(struct native_proc *p, struct native_req *r,
                     const struct lheader_val *vals);
};

/**
 * Pushes p as a Lua value (a userdata that owns it: destroy runs when it
 * is collected).  [-0, +1, m]
 */
void native_push(lua_State *L, struct native_proc *p);

/** The native processor at idx, or NULL. */
struct native_proc *native_test(lua_State *L, int idx);

/** Registers the processors' metatable.  [-0, +0, m] */
void native_register(lua_State *L);

/**
 * Queues the reply to r: code, remark (NULL: none), extFields (in the
 * order given) and a body (bytes, or record slices when `slices` is not
 * NULL).  Nothing is sent for a oneway request.  Returns 0 or -errno
 * (logged).
 */
/**
 * For a reply whose JSON header the processor spells itself (the same
 * bytes rmq_cmd_encode would write; a send's SEND_OK and a pull's reply,
 * written in one pass with their constant parts as literals): room for a
 * header of at most `max` bytes followed by a body of `body_len` bytes,
 * or NULL when the reply must go through native_reply instead (a oneway
 * request or a closed connection: nothing to send; an in-process owner,
 * or a request in the ROCKETMQ serialization: they want the fields; a
 * frame too long for its length word).  native_reply_json_end(r, code,
 * hlen, slices) then frames and queues the hlen bytes written there and
 * the records of `slices` (NULL: no body; else slices->bytes ==
 * body_len), as native_reply queues them.  A reply without a body is
 * spelled straight into the connection's output (no copy from the
 * encoder's buffer): nothing may be queued on the connection between the
 * two calls.
 */
uint8_t *native_reply_json_begin(struct native_req *r, size_t max, size_t body_len);
int native_reply_json_end(struct native_req *r, int32_t code, size_t hlen,
                          const struct store_slices *slices);

int native_reply(struct native_req *r, int32_t code, const char *remark,
                 size_t rlen, const struct rmq_field *ext, uint32_t next,
                 const uint8_t *body, size_t blen,
                 const struct store_slices *slices);

#endif
