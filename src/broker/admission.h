/*
 * admission: flow control as RocketMQ 4.9.8 does it, SYSTEM_BUSY (2)
 * before the processor runs.
 *
 * 4.9.8 refuses a send while the commit log's current put has held its
 * lock longer than osPageCacheBusyTimeOutMills (SendMessageProcessor.
 * rejectRequest -> "[REJECTREQUEST]..."), and, with
 * brokerFastFailureEnable, answers a request that waited in its thread
 * pool's queue for waitTimeMillsIn{Send,Pull,Heartbeat,Transaction}Queue
 * or longer ("[TIMEOUT_CLEAN_QUEUE]...", BrokerFastFailure).  rmq has no
 * queues: a request's wait is how long it has certainly sat read but
 * not served while its worker's loop handled the frames before it
 * (reactor_wait_ns).
 *
 * The gate runs in host_on_frame for the broker's listeners (host.h's
 * gate hook).  The common case costs a code switch, one clock read
 * (none with metrics on: the frame's), one atomic load of the store's put start and a compare
 * per limit; the limits are re-read from the typed shared settings
 * (broker/bsettings.h: UPDATE_BROKER_CONFIG) only when their version moves.
 * Only a request past a limit (the rare path) goes to the admission
 * policy, a Lua function(facts) -> "admit" | "busy", remark (lua/rmq/
 * policy/admission.lua documents the facts), which decides; when it
 * fails, RocketMQ's rule does.
 *
 * MT: one per worker host, used on its thread only.
 */
#ifndef RMQ_BROKER_ADMISSION_H
#define RMQ_BROKER_ADMISSION_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "broker/bsettings.h"

struct host;
struct conn;
struct rmq_cmd;
struct store;

/* The thread pools 4.9.8 fast-fails, by the request codes they serve. */
enum admission_kind {
    ADMISSION_SEND,           /* SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK */
    ADMISSION_PULL,           /* PULL_MESSAGE */
    ADMISSION_HEARTBEAT,      /* HEART_BEAT */
    ADMISSION_TRANSACTION,    /* END_TRANSACTION */
    ADMISSION_NKINDS
};

struct admission_limits {
    int64_t page_cache_ms;    /* osPageCacheBusyTimeOutMills */
    int64_t wait_ms[ADMISSION_NKINDS];
    bool fast_failure;        /* brokerFastFailureEnable */
};

struct admission {
    struct store *store;      /* a reference */
    struct bsettings_view settings;  /* run-time changes (UPDATE_BROKER_CONFIG) */
    struct admission_limits conf;    /* the conf's limits */
    struct admission_limits lim;     /* with the run-time changes applied */
    lua_State *L;             /* the host's state */
    int decide_ref;           /* registry: the policy call */
    int64_t quiet_until_ns;   /* policy errors are logged once a minute */
};

/** The kind of a request code, or -1 when flow control does not apply. */
int admission_kind_of(int32_t code);

/**
 * Makes one for `store` (referenced) with the conf's limits; `decide_ref`
 * is a registry reference in L to the policy call (owned from now on).
 * Returns NULL with err_set() on no memory.
 */
struct admission *admission_new(struct store *store, const struct admission_limits *initial,
                                lua_State *L, int decide_ref);

void admission_free(struct admission *a);

/** The host gate (host.h): answers SYSTEM_BUSY and returns true when the
 * request is refused. */
bool admission_gate(void *arg, struct host *h, struct conn *c, const struct rmq_cmd *cmd);

/** The gate's first half, for a request not decoded yet (the host's
 * typed path): true when a request of `code` would be admitted now
 * without asking the policy (no limit crossed); false when the gate must
 * see it whole (admission_gate, after the generic decode). */
bool admission_quiet(void *arg, struct host *h, int32_t code);

/** The limits now (the shared settings applied). */
const struct admission_limits *admission_limits(struct admission *a);

#endif
