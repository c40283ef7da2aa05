/*
 * heartbeat: a reader of the HEART_BEAT body (RocketMQ's HeartbeatData
 * JSON) into plain C structs, without a general JSON tree.
 *
 * Every client variant the fixtures show is accepted: fastjson output
 * from Java (enum names, numbers), rocketmq-client-cpp (enum ordinals,
 * subVersion as a string, tagsSet/codeSet/producerDataSet missing, a
 * trailing newline), ali-ons (its own key order), and lua-cjson's `{}`
 * for an empty array.  A missing or null array is empty; unknown keys
 * are walked over (checked, not kept); a key given twice counts once,
 * the last one (fastjson assigns in order).
 *
 * Strict and bounded: malformed JSON is an error naming the byte offset
 * (and the field being read); nesting depth, array lengths and string
 * lengths are capped (struct hb_limits); every group name must match
 * RocketMQ's rule ^[%|a-zA-Z0-9_-]+$ with at most 255 characters, every
 * topic the same characters with at most 127, else the error names the
 * field (`consumerDataSet[3].groupName "../../x" contains illegal
 * characters, allowing only ^[%|a-zA-Z0-9_-]+$`).  A groupName or topic
 * that is missing or null is an error too (Java's broker fails on it).
 *
 * Strings point into the body when they had no escapes, else into the
 * heartbeat's own arena: the body must outlive the struct.  Strings are
 * not NUL-terminated.
 *
 * MT: a struct heartbeat belongs to its caller; the functions are
 * reentrant.
 */
#ifndef RMQ_PROTO_HEARTBEAT_H
#define RMQ_PROTO_HEARTBEAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RocketMQ's name rules (Validators / TopicValidator). */
#define HB_GROUP_MAX_LEN 255
#define HB_TOPIC_MAX_LEN 127

struct hb_str {
    const char *p;   /* NULL: absent or null */
    uint32_t len;
};

/* Enum fields: -1 when absent or null, else the Java ordinal. */
enum hb_consume_type {
    HB_CONSUME_ACTIVELY = 0,
    HB_CONSUME_PASSIVELY = 1,
    HB_CONSUME_POP = 2,           /* 5.x */
};
enum hb_message_model {
    HB_BROADCASTING = 0,
    HB_CLUSTERING = 1,
};
/* ConsumeFromWhere ordinals 0-5 (CONSUME_FROM_LAST_OFFSET ...
 * CONSUME_FROM_TIMESTAMP), names from hb_enum_name(). */

enum hb_enum {
    HB_ENUM_CONSUME_TYPE,
    HB_ENUM_MESSAGE_MODEL,
    HB_ENUM_CONSUME_FROM_WHERE,
};

struct hb_sub {
    struct hb_str topic;
    struct hb_str sub_string;       /* as sent (NULL when absent) */
    struct hb_str expression_type;  /* as sent (NULL when absent) */
    struct hb_str *tags;            /* tagsSet as sent */
    uint32_t ntags;
    uint32_t ncodes;
    int32_t *codes;                 /* codeSet as sent */
    bool has_codes;                 /* codeSet present and not null */
    bool class_filter_mode;
    int64_t sub_version;            /* 0 when absent */
};

struct hb_consumer {
    struct hb_str group;
    int8_t consume_type;            /* enum hb_consume_type or -1 */
    int8_t message_model;           /* enum hb_message_model or -1 */
    int8_t consume_from_where;      /* 0-5 or -1 */
    bool unit_mode;
    struct hb_sub *subs;
    uint32_t nsubs;
};

struct hb_producer {
    struct hb_str group;
};

struct hb_block;

struct heartbeat {
    struct hb_str client_id;        /* NULL when absent */
    struct hb_consumer *consumers;
    uint32_t nconsumers;
    uint32_t nproducers;
    struct hb_producer *producers;
    uint32_t nsubs_total;
    /* 5.x heartbeat v2: the client's hash of its heartbeat (0: v1), and
     * withoutSub: the subscriptions are left out, unchanged since the
     * heartbeat that carried this fingerprint. */
    int32_t fingerprint;
    bool without_sub;
    /* private */
    struct hb_block *blocks;
};

struct hb_limits {
    uint32_t max_consumers;         /* consumerDataSet entries */
    uint32_t max_producers;         /* producerDataSet entries */
    uint32_t max_subs;              /* subscriptionDataSet entries of one consumer */
    uint32_t max_subs_total;        /* ... of the whole heartbeat */
    uint32_t max_tags;              /* tagsSet / codeSet entries of one subscription */
    uint32_t max_string;            /* bytes of one string (subString, clientID, ...) */
    uint32_t max_depth;             /* nesting, the root object counting 1 */
};

/** The defaults: 100,000 consumers and producers, 10,000 subscriptions
 *  per consumer, 1,000,000 per heartbeat, 65,536 tags, 256 KiB strings,
 *  depth 16. */
void hb_limits_default(struct hb_limits *lim);

/**
 * Reads `len` bytes of body into *hb (which needs no initialisation).
 * Returns 0; or -RMQ_EPROTO (malformed, a limit, a bad name) or -ENOMEM,
 * with err_set() giving the reason; *hb is then empty.  Either way
 * heartbeat_free() releases it.  `lim` NULL: the defaults.
 */
int heartbeat_parse(struct heartbeat *hb, const char *body, size_t len,
                    const struct hb_limits *lim);

/** Releases what heartbeat_parse() allocated; *hb is empty after. */
void heartbeat_free(struct heartbeat *hb);

/** The Java name of an enum ordinal, or NULL. */
const char *hb_enum_name(enum hb_enum which, int ordinal);

/**
 * Checks a group (is_topic false) or topic name against RocketMQ's
 * rule.  Returns NULL when legal, else the reason ("is blank",
 * "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
 * "is longer than 255 characters").
 */
const char *hb_check_name(const char *s, size_t n, bool is_topic);

/* {{{ Normalised subscriptions (rmq.broker.filter's rules) */

/*
 * What the broker keeps of a subscription: expressionType "TAG" when
 * absent, empty or "TAG"; subString "*" when absent; for TAG, a
 * subString that is empty or "*" after trimming becomes "*" with no
 * tags, else it is split at "||", each part trimmed (Lua's %s: space,
 * \t \n \v \f \r), empty parts dropped, duplicates dropped (first wins),
 * and codes[i] = Java String.hashCode(tags[i]).  The client's own
 * tagsSet/codeSet are not used: rocketmq-client-cpp sends atoi(tag) as
 * codes (protocol.md 4.4), and Java computes exactly these.
 */
struct hb_norm {
    struct hb_str sub_string;
    struct hb_str expression_type;
    bool is_tag;
    uint32_t ntags;
    struct hb_str *tags;            /* into sub_string (not NUL-terminated) */
    int32_t *codes;
    /* private: storage for small tag lists */
    struct hb_str tags_small[8];
    int32_t codes_small[8];
    void *heap;
};

/**
 * Normalises one subscription into *out.  Returns 0, or -ENOMEM.
 * hb_norm_free() releases it (always call it).  *out may point into
 * itself (small tag lists): use it where it is, do not copy it.
 */
int hb_normalize(const struct hb_sub *sub, struct hb_norm *out);

void hb_norm_free(struct hb_norm *n);

/* }}} */

/* MQVersion.Version.V5_0_0's ordinal (RemotingCommand.version). */
#define HB_V5_0_0 413

/**
 * The 5.x heartbeat v2 fields of a HEART_BEAT reply.  A 5.x broker
 * answers every heartbeat with IS_SUPPORT_HEART_BEAT_V2=true and
 * IS_SUB_CHANGE (always true for a v1 heartbeat, one without a
 * fingerprint).  Answered to clients of 5.0.0 or later and to any
 * heartbeat with a fingerprint; a 4.x client's reply stays 4.9.8's (no
 * fields).  Returns whether to add them; *out is IS_SUB_CHANGE.
 * `sub_change`: the registry's verdict (creg_hb_result.sub_change; false
 * for a repeat).
 */
bool hb_v2_reply(const struct heartbeat *hb, int32_t version, bool sub_change, bool *out);

#endif
