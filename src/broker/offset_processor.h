/*
 * offset_processor: the consumer offset requests a consumer sends all the
 * time, in C (protocol.md 4.7, 4.8): QUERY_CONSUMER_OFFSET (14) for a
 * group that has an offset, UPDATE_CONSUMER_OFFSET (15) for a queue of an
 * existing topic, GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31).  The rest
 * (a group without an offset, whose start RocketMQ works out from the
 * store; an unknown topic or queue, refused) goes to the Lua handlers in
 * lua/rmq/broker/offsets.lua.
 *
 * MT: one processor per worker.
 */
#ifndef RMQ_OFFSET_PROCESSOR_H
#define RMQ_OFFSET_PROCESSOR_H

#include "proto/native.h"

struct store;
struct hspec;

enum offset_request {
    OFFSET_QUERY,               /* header: consumerGroup, topic, queueId */
    OFFSET_UPDATE,              /* ... and commitOffset */
    OFFSET_MAX,                 /* header: topic, queueId */
    OFFSET_MIN,
};

/** A new processor for one request, or NULL with err_set(). */
struct native_proc *offset_processor_new(enum offset_request kind,
                                         struct store *store,
                                         const struct hspec *header);

#endif
