/*
 * pull_processor: PULL_MESSAGE (11) in C for the common case
 * (protocol.md 4.3): a readable broker, an existing subscription group
 * that may consume, an existing readable topic and queue, a TAG
 * subscription (from the request's FLAG_SUBSCRIPTION, or the group's
 * heartbeat in the client registry).  The read is one store call; the reply's body is
 * the records, copied once from the mapped commit log into the
 * connection's output.  The slave-read suggestion is a decision: the
 * slaveReadPolicy's (lua/rmq/policy/slave_read.lua by default), asked
 * through one hook call with the facts; with the built-in policy and
 * slaveReadEnable off its answer is always the master (0), so no call is
 * made then.
 *
 * The long poll is held here too (pullHoldRecheckMillis > 0 in the
 * conf): a pull with FLAG_SUSPEND that finds nothing new keeps a copy of
 * its frame, a connection reference and a deadline (the consumer's
 * suspendTimeoutMillis with longPollingEnable, else shortPollingTimeMills;
 * at most brokerSuspendMaxTimeMillis), and waits, with no Lua task, on the
 * event "topic@queueId" (runtime/post.h post_event_wait) that a send to
 * the queue raises in any worker.  It is run again when raised, at each
 * pullHoldRecheckMillis slice if the queue grew past its offset (a
 * message stored between the read and the wait), and at its deadline;
 * messages its filter drops keep it waiting.  Its commitOffset is stored
 * on the first run only.  It counts as a request in flight (the
 * connection's, the worker's drain) and is charged to the memory budget as
 * a waiting task is (refused past a limit: SYSTEM_BUSY); a draining worker
 * answers it at its next slice; a closed connection's is dropped at its
 * next slice; the rest are freed with the processor.
 *
 * A group the table does not have is a decision: the createGroup hook
 * (pull.lua: autoCreateSubscriptionGroup) is asked once, and the pull
 * goes on here when the group exists then.  Every refusal is answered
 * here, with 4.9.8's text (PullMessageProcessor's checks, in its order),
 * and so is a corrected offset on a master (the OFFSET_MOVED_EVENT
 * record written, as generateOffsetMovedEvent).  A request with no frame
 * (the gRPC service's shadow connection, native.run) is encoded once when
 * it is held.
 *
 * Filters beyond the tag codes run inside the store's read (a record
 * they drop does not count toward maxMsgNums, as Java's
 * isMatchedByCommitLog): a SQL92 subscription's compiled filter; with
 * filterSupportRetry, on a %RETRY% topic whose subscription is not SQL92,
 * each record judged by the group's SQL92 subscription of its
 * RETRY_TOPIC (ExpressionForRetryMessageFilter); and a Lua pull filter
 * (conf.pullFilters), a decision: for a topic conf.pullFilters names, the
 * pullFilter hook (pull.lua) is asked once per read, with the topic and
 * group, for the function of that "topic@group" or topic, which then
 * says keep or skip for each record shown to it (filter/record_match.h),
 * and is told the read's counts after it.

 * MT: one processor per worker.
 */
#ifndef RMQ_PULL_PROCESSOR_H
#define RMQ_PULL_PROCESSOR_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

#include "proto/native.h"
#include "store/commitlog.h"

struct store;
struct hspec;

#include "filter/sql92.h"

struct pull_processor_conf {
    struct store *store;            /* a reference is taken */
    const struct hspec *header;     /* pull.lua's HEADER */
    int32_t perm;                   /* brokerPermission at start */
    const char *ip;                 /* brokerIP1: the broker a refusal names */
    const char *broker_name;        /* brokerName (OFFSET_MOVED_EVENT's body) */
    struct host_addr store_host;    /* the OFFSET_MOVED_EVENT record's hosts */
    bool slave_read_enable;         /* slaveReadEnable */
    bool slave_read_builtin;        /* slaveReadPolicy is the built-in rule (at start) */
    int64_t memory;                 /* physical memory, bytes */
    int64_t ratio;                  /* accessMessageInMemoryMaxRatio */
    const char *filter_topics;      /* topics a Lua pull filter may apply to */
    size_t filter_topics_len;       /*   (conf.pullFilters): names each ending in NUL; copied */
    bool filter_support_retry;      /* filterSupportRetry */
    bool enable_property_filter;    /* enablePropertyFilter at start */
    struct sql92_limits sql_limits; /* filterExpressionMax* */
    int sql_cache;                  /* compiled expressions kept (filterCompiledCacheSize) */
    bool long_polling;              /* longPollingEnable */
    int64_t short_polling_ms;       /* shortPollingTimeMills */
    int64_t suspend_max_ms;         /* brokerSuspendMaxTimeMillis */
    int64_t recheck_ms;             /* pullHoldRecheckMillis (>= 1) */
    size_t read_window;             /* pullReadWindowBytes (store_window; 0: none) */
    lua_State *L;                   /* the host's state, for the hook below */
    int suggest_ref;                /* registry ref in L (owned from now on; LUA_NOREF:
                                     * none): the slave-read hook, function(facts) ->
                                     * brokerId (pull.lua) */
    int group_ref;                  /* likewise (LUA_NOREF: none): the group
                                     * auto-create hook, function(group) -> bool
                                     * (the group exists now), called for a group
                                     * the table does not have */
    int filter_ref;                 /* likewise (LUA_NOREF: none): the Lua pull
                                     * filter hook, function(topic, group) ->
                                     * nil | fn, body, account; fn(properties,
                                     * tags, bodySize [, body]) -> keep per
                                     * record, account(calls, dropped, err,
                                     * nanos) after the read */
};

/** A new processor, or NULL with err_set(). */
struct native_proc *pull_processor_new(const struct pull_processor_conf *c);

/**
 * Writes at w the JSON header of a pull's reply with these fields (the
 * bytes rmq_cmd_encode writes for them; at most 316 bytes plus rlen) and
 * returns its length.  remark must need no escaping (a get status name).
 */
size_t pull_reply_head(uint8_t *w, int32_t code, const char *remark, size_t rlen,
                       int32_t opaque, int64_t which, int64_t next, int64_t max, int64_t min);

#endif
