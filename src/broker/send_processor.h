/*
 * send_processor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
 * SEND_BATCH_MESSAGE (320), whole, in C (protocol.md 4.1): RocketMQ's
 * checks in its order, each refusal with 4.9.8's text (the fixtures'),
 * written here only; then the message is appended, held pulls on its
 * queue are woken and the reply is encoded, with RocketMQ's extFields in
 * a 4.9.8 broker's order.  A put the store refuses is answered with the
 * store's status.
 *
 * The decisions are Lua hooks, each called with the facts in one call
 * (lua/rmq/broker/send.lua declares them):
 *   - createTopic: a topic the table does not have (from the producer's
 *     template, autoCreateTopicEnable; a %RETRY% topic);
 *   - retry: a send into %RETRY%group, the retry/DLQ choice (the group
 *     must exist; past its maximum the message goes to %DLQ%group);
 *   - delayLevel: where in SCHEDULE_TOPIC_XXXX a message with DELAY waits
 *     and until when (schedule.redirect);
 *   - halfTopic: RMQ_SYS_TRANS_HALF_TOPIC made for the first half message.
 * A hook that raises is answered SYSTEM_ERROR with its message (no
 * position, no path), as a Lua handler's error is.
 *
 * A processor made with checks_only runs the checks a reply message
 * (SEND_REPLY_MESSAGE, reply.lua) shares with a send, and answers their
 * refusals: one copy of them.
 *
 * The broker's permission follows UPDATE_BROKER_CONFIG (broker_perm.h);
 * the role (a slave refuses) is the store's at run time.
 *
 * MT: one processor per worker (its scratch buffers are not shared).
 */
#ifndef RMQ_SEND_PROCESSOR_H
#define RMQ_SEND_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "proto/native.h"
#include "store/commitlog.h"

struct store;
struct hspec;
struct topic_config;

struct send_processor_conf {
    struct store *store;            /* a reference is taken */
    struct host_addr store_host;    /* STOREHOST, and the msgId's host */
    const struct hspec *v1, *v2;    /* send.lua's HEADER_V1 / HEADER_V2 */
    const char *cluster;            /* brokerClusterName */
    const char *region;             /* regionId */
    const char *broker_name;        /* brokerName (timer recall handles) */
    bool trace_on;                  /* traceOn */
    int32_t perm;                   /* brokerPermission at start */
    int64_t max_size;               /* maxMessageSize */
    bool halves;                    /* store half messages (TRAN_MSG) here */
    const char *ip;                 /* brokerIP1: the broker a refusal names */
    bool checks_only;               /* SEND_REPLY_MESSAGE(_V2): the checks a
                                     * reply message shares with a send (the
                                     * broker's and the topic's permission, a
                                     * topic that exists, its queue, the body's
                                     * size), refused here; one that passes
                                     * goes to Lua (reply.lua pushes it) */
    const char *const *not_allowed; /* topics a producer may not send to */
    int n_not_allowed;
    lua_State *L;                   /* the host's state, for the hook below */
    int create_ref;                 /* registry ref in L (owned from now on;
                                     * LUA_NOREF: none): the topic auto-create
                                     * hook, function(topic, defaultTopic,
                                     * defaultTopicQueueNums, v1) -> true (the
                                     * topic exists now) | false, refusal */
    int delay_ref;                  /* likewise: the delay-level hook,
                                     * function(properties, topic, queueId, level)
                                     * -> stored properties, SCHEDULE_TOPIC_XXXX
                                     * queue, due time in ms (send.lua) */
    int retry_ref;                  /* likewise: the retry/DLQ choice,
                                     * function(group, reconsumeTimes,
                                     * maxReconsumeTimes or nil) -> true (a
                                     * retry) | DLQ topic (made) | false (no
                                     * such group) */
    int half_ref;                   /* likewise: function() that makes
                                     * RMQ_SYS_TRANS_HALF_TOPIC */
};

/** A new processor (copies what it keeps), or NULL with err_set(). */
struct native_proc *send_processor_new(const struct send_processor_conf *c);

/* A SEND_MESSAGE_V2 made in this process with its header's fields typed
 * (the gRPC service's sends): no extFields written as text to be parsed
 * again.  The strings are the caller's for the run. */
struct send_typed {
    const char *producer_group;     /* NUL-terminated; NULL: none */
    const char *topic;
    size_t topic_len;
    const char *props;              /* the properties string */
    size_t props_len;
    int64_t queue_id;               /* < 0: the broker picks */
    int64_t sys_flag;
    int64_t born_ts;
    int64_t flag;
    int64_t reconsume;
    /* The topic's config as the caller just read it from the same table
     * (config_table_topics), so it is not looked up twice; NULL: not read. */
    const struct topic_config *tc;
};

/** Whether p is a send processor (send_processor_new's). */
bool send_processor_is(const struct native_proc *p);

/**
 * Runs r (a SEND_MESSAGE_V2: its code, opaque, serialization and body;
 * its extFields unread) with the header fields t, as send_run would run
 * them decoded from extFields: the same checks, store and reply.
 * NATIVE_DONE when answered; NATIVE_TO_LUA, before anything changed, when
 * the request must go as text instead (a field the header spec refuses,
 * which it names; a reply-message processor).
 */
int send_processor_typed(struct native_proc *p, struct native_req *r, const struct send_typed *t);

#endif
