/*
 * topic_config: RocketMQ's TopicConfig as a config_table record, and its
 * encodings, byte for byte as a 4.9.8 broker writes them:
 *
 *   JSON (fastjson, properties sorted by name):
 *     {"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",
 *      "topicName":"T","topicSysFlag":0,"writeQueueNums":4}
 *   TopicConfigSerializeWrapper (topics.json, GET_ALL_TOPIC_CONFIG and the
 *   JSON REGISTER_BROKER body):
 *     {"dataVersion":{"counter":N,"timestamp":T},"topicConfigTable":{"T":{...},...}}
 *   TopicConfig.encode(), the text form of a compressed registration:
 *     "name read write perm filterType"
 *
 * A topic with 5.x attributes is written as 5.x writes it: JSON with
 * "attributes":{...} first (a HashMap: cleanup.policy, message.type,
 * queue.type), the text form with the attributes' JSON as a sixth field.
 *
 * The name is the table key, not part of the record.
 */
#ifndef RMQ_TOPIC_CONFIG_H
#define RMQ_TOPIC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/config_table.h"
#include "core/buf.h"
#include "rmq_codes.h"

enum topic_filter_type { TOPIC_SINGLE_TAG = 0, TOPIC_MULTI_TAG = 1 };

/* PermName bits: RMQ_PERM_* of rmq_codes.h (from lua/rmq/codes.lua). */

struct topic_config {
    int32_t read_queue_nums;
    int32_t write_queue_nums;
    int32_t perm;
    int32_t topic_sys_flag;
    uint8_t filter_type;       /* enum topic_filter_type */
    bool order;
    /* 5.x attributes (TopicAttributes), each set or not: a topic of 4.x
     * has none and is written as 4.9.8 writes it. */
    uint8_t message_type;      /* 0 unset, else TOPIC_MSG_* */
    uint8_t attr_flags;        /* TOPIC_ATTR_* */
};

/* "message.type" values (TopicMessageType), stored as index + 1. */
enum { TOPIC_MSG_UNSPECIFIED = 1, TOPIC_MSG_NORMAL, TOPIC_MSG_FIFO, TOPIC_MSG_DELAY,
       TOPIC_MSG_TRANSACTION, TOPIC_MSG_MIXED, TOPIC_MSG_COUNT = TOPIC_MSG_MIXED };
/* The attributes whose one value rmq serves, set or not. */
enum { TOPIC_ATTR_SIMPLE_CQ = 1,      /* "queue.type": "SimpleCQ" */
       TOPIC_ATTR_CLEANUP_DELETE = 2  /* "cleanup.policy": "DELETE" */ };

/** The name of a message.type value (1..TOPIC_MSG_COUNT), or NULL. */
const char *topic_msg_type_name(uint8_t t);

/** The message.type value of a name, or 0. */
uint8_t topic_msg_type_parse(const char *s, size_t n);

/** The Java name of a filter type. */
const char *topic_filter_name(uint8_t t);

/** One TopicConfig JSON object. Returns 0 or -ENOMEM. */
int topic_config_json(struct buf *b, const char *name, size_t nlen,
                      const struct topic_config *c);

/**
 * The TopicConfigSerializeWrapper of a snapshot (its items in the order
 * they are in). With perm >= 0 every topic is written with that
 * permission instead of its own (a broker without read+write permission
 * registers its topics so). Returns 0 or -ENOMEM.
 */
int topic_wrapper_json(struct buf *b, const struct config_snapshot *s,
                       int perm);

/**
 * The inflated records of a compressed REGISTER_BROKER body: int32-length
 * prefixed DataVersion JSON, int32 topic count, each topic's text form,
 * the filter server list "[]".  Returns 0 or -ENOMEM.
 */
int topic_register_records(struct buf *b, const struct config_snapshot *s,
                           int perm);

#endif
