/*
 * runtime/natives: the native processors (proto/native.h) a host serves,
 * by listener and request code, and the rmq.native module.
 *
 * The processor table stays Lua: a role's table entry may carry a native
 * processor beside its Lua handler ({native = np, header = spec, run =
 * fn}); the worker installs the native ones for its role's listeners
 * (native_install), and host_on_frame then runs a request with such a
 * code in C (native_dispatch), on the worker's thread.
 *
 *   native.is(v) -> bool
 *   native.serve(np, ctx, cmd, final) -> true (answered) | false: runs a
 *       native processor on a request its Lua handler holds (a held POP):
 *       native_req.lua is NATIVE_LUA_HOLD, or NATIVE_LUA_FINAL when final
 *   native.run(np, ctx, cmd) -> answered: runs a request its Lua entry
 *       got (no native dispatch: nativeProcessors = false, a draining
 *       worker; or a Lua handler using C's checks) in C, as a first run
 *       (NATIVE_LUA_NONE, no frame); false: handed back (NATIVE_TO_LUA)
 *
 * MT: a host's tables are used on the host's thread only.
 */
#ifndef RMQ_RUNTIME_NATIVES_H
#define RMQ_RUNTIME_NATIVES_H

#include <lua.h>
#include <stdbool.h>

#include "net/codec.h"
#include "proto/native.h"

struct host;
struct conn;

/* Request codes below this can have a native processor (4.9.8's highest
 * is 351), and those of RocketMQ 5's POP family, NATIVE_HIGH_BASE and the
 * NATIVE_HIGH_CODES after it (200050 ... 200151); any other code always
 * goes to Lua. */
#define NATIVE_MAX_CODE 1024
#define NATIVE_HIGH_BASE 200000
#define NATIVE_HIGH_CODES 256

/** The host's native tables (one per listener index); freed with it. */
struct native_table;
void native_table_free(struct native_table *t);

/**
 * Serves the codes of the table at idx ({[code] = np}) on listener
 * `listener` of h in C; the values stay alive while installed.  Returns 0,
 * or -1 with err_set() (then some may be installed).  [-0, +0, m]
 */
int native_install(lua_State *L, struct host *h, int listener, int idx);

/**
 * host_on_frame's hook: runs the request if its listener has a native
 * processor for cmd->code.  Returns true when the request was answered
 * here, false when it goes the Lua way (no processor, or NATIVE_TO_LUA).
 */
bool native_dispatch(struct host *h, struct conn *c, const struct rmq_cmd *cmd);

/** The native processor installed for `code` on c's listener, or NULL
 * (none, or the host is stopping): for a caller in this process that
 * runs a processor's own entry (the gRPC service's typed sends). */
struct native_proc *native_find(struct host *h, struct conn *c, int32_t code);

/** r as native_dispatch makes it for cmd on c. */
void native_req_init(struct native_req *r, struct host *h, struct conn *c, const struct rmq_cmd *cmd);

/* The rmq.native module (listed in lua/l_modules.h). */
int luaopen_rmq_native(lua_State *L);

#endif
