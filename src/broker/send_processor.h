/*
 * send_processor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
 * SEND_BATCH_MESSAGE (320) in C, for the common case (protocol.md 4.1):
 * a writable broker, an existing writable topic that is not a system,
 * retry or dead-letter topic, a queue id in range (or < 0: one is
 * picked), no delay level and no transaction flag (but a prepared
 * message with TRAN_MSG=true, stored as a half message once
 * RMQ_SYS_TRANS_HALF_TOPIC exists).  Then the message is
 * appended, held pulls on its queue are woken and the reply is encoded,
 * all in C, with RocketMQ's extFields in a 4.9.8 broker's order.
 *
 * A topic the table does not have is a decision: C calls send.lua's
 * auto-create hook (from the producer's template, autoCreateTopicEnable)
 * once and goes on when the topic exists then; so is a delay level (the
 * delay-level hook says where in SCHEDULE_TOPIC_XXXX it waits and until
 * when: schedule.redirect).  Everything else goes to the Lua handler
 * (lua/rmq/broker/send.lua), which makes the other decisions (retry and
 * DLQ routing) and writes every
 * refusal: this processor returns NATIVE_TO_LUA before it changes
 * anything.  A put the store
 * refuses is answered here (the store's status, as the Lua path does).
 *
 * The broker's permission follows UPDATE_BROKER_CONFIG (broker_perm.h).
 *
 * MT: one processor per worker (its scratch buffers are not shared).
 */
#ifndef RMQ_SEND_PROCESSOR_H
#define RMQ_SEND_PROCESSOR_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "proto/native.h"
#include "store/commitlog.h"

struct store;
struct hspec;

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
    const char *const *not_allowed; /* topics a producer may not send to */
    int n_not_allowed;
    lua_State *L;                   /* the host's state, for the hook below */
    int create_ref;                 /* registry ref in L (owned from now on;
                                     * LUA_NOREF: none): the topic auto-create
                                     * hook, function(topic, defaultTopic,
                                     * defaultTopicQueueNums, v1) -> bool (the
                                     * topic exists now; send.lua) */
    int delay_ref;                  /* likewise: the delay-level hook,
                                     * function(properties, topic, queueId, level)
                                     * -> stored properties, SCHEDULE_TOPIC_XXXX
                                     * queue, due time in ms (send.lua) */
};

/** A new processor (copies what it keeps), or NULL with err_set(). */
struct native_proc *send_processor_new(const struct send_processor_conf *c);

#endif
