/*
 * pull_processor: PULL_MESSAGE (11) in C for the common case
 * (protocol.md 4.3): a readable broker, an existing subscription group
 * that may consume, an existing readable topic and queue, a TAG
 * subscription (from the request's FLAG_SUBSCRIPTION, or the group's
 * heartbeat in the client registry), and a read that finds messages or
 * ends without waiting.  The read is one store call; the reply's body is
 * the records, copied once from the mapped commit log into the
 * connection's output.  The slave-read suggestion is a decision: the
 * slaveReadPolicy's (lua/rmq/policy/slave_read.lua by default), asked
 * through one hook call with the facts; with the built-in policy and
 * slaveReadEnable off its answer is always the master (0), so no call is
 * made then.
 *
 * Everything else goes to the Lua handler (lua/rmq/broker/pull.lua)
 * before anything changes: a refusal, a group to auto-create, a pull to
 * hold (PULL_NOT_FOUND with FLAG_SUSPEND), a corrected offset on a master
 * (OFFSET_MOVED_EVENT).  The consumer's commitOffset is stored only when
 * the answer is given here.
 *
 * MT: one processor per worker.
 */
#ifndef RMQ_PULL_PROCESSOR_H
#define RMQ_PULL_PROCESSOR_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

#include "lua/l_native.h"

struct store;
struct hspec;

#include "filter/sql92.h"

struct pull_processor_conf {
    struct store *store;            /* a reference is taken */
    const struct hspec *header;     /* pull.lua's HEADER */
    int32_t perm;                   /* brokerPermission at start */
    bool slave;                     /* brokerRole == SLAVE */
    bool slave_read_enable;         /* slaveReadEnable */
    bool slave_read_builtin;        /* slaveReadPolicy is the built-in rule (at start) */
    int64_t memory;                 /* physical memory, bytes */
    int64_t ratio;                  /* accessMessageInMemoryMaxRatio */
    const char *lua_topics;         /* topics pulled in Lua (a Lua pull */
    size_t lua_topics_len;          /*   filter): names each ending in NUL; copied */
    bool lua_retry_topics;          /* %RETRY% topics too (filterSupportRetry) */
    bool enable_property_filter;    /* enablePropertyFilter at start */
    struct sql92_limits sql_limits; /* filterExpressionMax* */
    int sql_cache;                  /* compiled expressions kept (filterCompiledCacheSize) */
    bool long_polling;              /* longPollingEnable */
    int64_t short_polling_ms;       /* shortPollingTimeMills */
    int64_t suspend_max_ms;         /* brokerSuspendMaxTimeMillis */
    int64_t recheck_ms;             /* pullHoldRecheckMillis; 0: holds go to Lua */
    lua_State *L;                   /* the host's state, for the hook below */
    int suggest_ref;                /* registry ref in L (owned from now on; LUA_NOREF:
                                     * none): the slave-read hook, function(facts) ->
                                     * brokerId (pull.lua) */
    int group_ref;                  /* likewise (LUA_NOREF: none): the group
                                     * auto-create hook, function(group) -> bool
                                     * (the group exists now), called for a group
                                     * the table does not have */
};

/** A new processor, or NULL with err_set(). */
struct native_proc *pull_processor_new(const struct pull_processor_conf *c);

#endif
