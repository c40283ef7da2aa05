/*
 * service: see service.h.
 */
#include "grpc/service.h"
#include "grpc/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <lauxlib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "apache/rocketmq/v2/service.pb-c.h"
#include "broker/config_table.h"
#include "broker/send_processor.h"
#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "core/clock.h"
#include "core/crc32.h"
#include "core/err.h"
#include "core/fjson.h"
#include "core/log.h"
#include "grpc/metrics.h"
#include "grpc/pbcheck.h"
#include "grpc/renew.h"
#include "grpc/codec.h"
#include "grpc/recvpack.h"
#include "broker/pop_processor.h"
#include "grpc/sendpack.h"
#include "grpc/txdata.h"
#include "proto/native.h"
#include "runtime/natives.h"
#include "net/codec.h"
#include "net/conn.h"
#include "store/commitlog.h"
#include "runtime/host.h"
#include "runtime/lconn.h"
#include "rmq_codes.h"

/* Short names for the generated types (protoc-c's are long). */
typedef Apache__Rocketmq__V2__Status PbStatus;
typedef Apache__Rocketmq__V2__Resource PbResource;
typedef Apache__Rocketmq__V2__Message PbMessage;
typedef Apache__Rocketmq__V2__MessageQueue PbQueue;
typedef Apache__Rocketmq__V2__Broker PbBroker;
typedef Apache__Rocketmq__V2__Endpoints PbEndpoints;
typedef Apache__Rocketmq__V2__Address PbAddress;
typedef Apache__Rocketmq__V2__SendResultEntry PbSendResult;
typedef Apache__Rocketmq__V2__Settings PbSettings;
typedef Apache__Rocketmq__V2__TelemetryCommand PbTelemetry;

#define CODE(x) APACHE__ROCKETMQ__V2__CODE__##x

/* Remoting codes the replies carry (protocol.md 2). */
#define TRANSACTION_COMMIT_TYPE 8
#define TRANSACTION_ROLLBACK_TYPE 12

/* The producer group gRPC producers register under (5.x SDKs have none;
 * 5.x's proxy's name for its own).  A message's producer group is its
 * topic (5.x SendMessageActivity: "use topicName as
 * producerGroup for transactional checker"), so the broker's check asks a
 * producer publishing that topic; half messages stored before that carry
 * this group, which EndTransaction still names for them (end_transaction).
 * Cluster mode alike: the producers' heartbeats, forwarded, register the
 * proxy's broker connections under the topics, and relay_check picks a
 * session publishing the topic (upstream.c registers under this group
 * for the old half messages). */
#define GRPC_PRODUCER_GROUP "CLIENT_INNER_PRODUCER"

/* The broker's remark refusing END_TRANSACTION's producer group
 * (transaction.lua half_of). */
#define PRODUCER_GROUP_WRONG "The producer group wrong"

/* MessageSysFlag bits. */
#define SYSFLAG_COMPRESSED 0x1
#define SYSFLAG_TRANSACTION_PREPARED 0x4

/* Message properties (MessageConst). */
#define NAME_VALUE_SEP '\001'
#define PROP_SEP '\002'

/* A receipt handle's fields (split_handle). */
#define HANDLE_FIELDS 9

/* Sends one session may have waiting for the broker at once. */
#define MAX_PENDING 65536

enum method {
    M_UNKNOWN = 0,
    M_QUERY_ROUTE,
    M_HEARTBEAT,
    M_SEND_MESSAGE,
    M_QUERY_ASSIGNMENT,
    M_TELEMETRY,
    M_NOTIFY_TERMINATION,
    M_END_TRANSACTION,
    M_RECEIVE,
    M_ACK,
    M_CHANGE_INVISIBLE,
    M_UPDATE_OFFSET,
    M_GET_OFFSET,
    M_QUERY_OFFSET,
    M_FORWARD_DLQ,
    M_FORWARD_ACK,      /* ForwardMessageToDeadLetterQueue's ack (pending only) */
    M_RECALL,
    M_SETTINGS_GROUP,   /* cluster Telemetry: its group's config asked (pending only) */
    M_NOT_YET,          /* in MessagingService, not served yet */
};

static const struct {
    const char *name;
    enum method m;
} METHODS[] = {
    /* The calls of every message first: fewer compares per call. */
    { "SendMessage", M_SEND_MESSAGE },
    { "ReceiveMessage", M_RECEIVE },
    { "AckMessage", M_ACK },
    { "QueryRoute", M_QUERY_ROUTE },
    { "Heartbeat", M_HEARTBEAT },
    { "QueryAssignment", M_QUERY_ASSIGNMENT },
    { "Telemetry", M_TELEMETRY },
    { "NotifyClientTermination", M_NOTIFY_TERMINATION },
    { "ForwardMessageToDeadLetterQueue", M_FORWARD_DLQ },
    { "PullMessage", M_NOT_YET },
    { "UpdateOffset", M_UPDATE_OFFSET },
    { "GetOffset", M_GET_OFFSET },
    { "QueryOffset", M_QUERY_OFFSET },
    { "EndTransaction", M_END_TRANSACTION },
    { "ChangeInvisibleDuration", M_CHANGE_INVISIBLE },
    { "RecallMessage", M_RECALL },
    { "SyncLiteSubscription", M_NOT_YET },
};

#define SERVICE_PREFIX "/apache.rocketmq.v2.MessagingService/"

/* A bump arena for the request being decoded: protobuf-c allocates
 * every sub-message, string and repeated field of a request apart; here
 * they come from one block kept across requests, and a request larger
 * than the block (a big body) takes malloc'ed blocks freed with it. */
struct pb_block {
    struct pb_block *next;
    max_align_t data[];
};

struct pb_arena {
    uint8_t *base;
    size_t cap, used;
    struct pb_block *extra;
};

#define PB_ARENA_BYTES (64 * 1024)

struct grpc_server {
    struct host *h;
    struct grpc_conf conf;
    struct qnode sessions;
    struct pb_arena arena;
    ProtobufCAllocator alloc;
    struct upstream *up;         /* cluster mode (role proxy): the brokers */
    struct txdata *tx;           /* cluster mode: the transactions it may end (txdata.h) */
    bool own_tx;                 /* tx is this server's (not conf.tx_table) */
    uint32_t check_rr;           /* cluster mode: the producer the next check goes to */
    struct grpc_metrics *metrics;   /* rocketmq_rpc_latency of calls; NULL: off */
    char unpack_why[128];        /* why the last pb_unpack refused ("": it did not parse) */
};

/* A request waiting for the broker's reply: which call and which entry. */
struct pending {
    struct pending *next;
    int32_t opaque;
    int32_t stream_id;
    uint32_t index;
    enum method m;               /* M_SEND_MESSAGE or M_END_TRANSACTION */
    char *group;                 /* M_RECEIVE: the consumer group, for giving
                                  * back what a gone call's POP took, then
                                  * (after its NUL) the call's account */
    size_t ak_len;               /* that account's length (0: none) */
};

struct dlq_job;

/* One gRPC connection. */
struct gsession {
    struct qnode link;           /* in gs->sessions */
    struct grpc_server *gs;
    struct h2c *h2;
    struct conn *cn;             /* the socket */
    struct conn *shadow;         /* the broker-side remoting conn */
    struct pending *head, *tail;
    size_t npending;
    int32_t next_opaque;
    int32_t telemetry_sid;       /* the client's Telemetry stream; 0: none */
    char client_id[128];         /* x-mq-client-id: safe characters only */
    bool crc_decimal;            /* the body digest as the Node.js SDK checks it */
    uint8_t lang;                /* its x-mq-language as a LanguageCode ordinal + 1; 0: none said */
    struct buf consumer_hb;      /* a consumer's RMQ_REQ_HEART_BEAT body (from its
                                  * Telemetry settings); empty: none */
    char consumer_group[256];    /* its group (cluster mode: unregistered at close) */
    struct buf arena;            /* reply header decoding */
    struct buf props;            /* a message's properties being built */
    struct buf frame;            /* a request encoded for the Lua path */
    /* With aclEnable: the account of the call whose request is being
     * handled (its requests to the broker are checked as that account's);
     * NULL: a white-listed peer without one. */
    char ak[128];
    size_t ak_len;               /* 0: none */
    struct dlq_job *jobs;        /* records on their way to %DLQ% (dlq_job_*) */
    size_t njobs;
    int32_t max_attempts;        /* told to the consumer of attempts_group in its
                                  * Telemetry settings; 0: none yet */
    char attempts_group[256];
    /* Cluster mode: the Settings last answered, sent once more after a
     * route answered soon after them (settings_again). */
    struct buf settings;
    uint64_t settings_due_ms;    /* clock_mono: until when; 0: none */
    /* Cluster mode: a consumer's Settings waiting for its group's config
     * (upstream.c's cache), handled again when it is answered; meanwhile
     * group_cfg is what it said when group_known. */
    struct buf settings_in;
    bool settings_group_pass;
    bool group_known;            /* group_cfg is the group's (this pass) */
    struct subscription_group group_cfg;
    struct renew *renew;         /* auto_renew leases (renew.h); NULL: none yet */
    struct gcall *spare;         /* calls freed, for the next ones (call_new) */
    size_t nspare;               /* at most CALL_SPARES */
    struct pending *free_pending;   /* entries to reuse (pending_add), at most MAX_PENDING */
    /* The topics the producer publishes (its Settings'
     * publishing list and its transactional sends), sorted, at most
     * conf.max_producer_topics: it registers as producer of each
     * (register_producer), the group of its half messages. */
    char **ptopics;
    uint32_t nptopics;
    bool ended;                  /* session_end ran (draining, or closed) */
};

/* One call (stream user data).  A session keeps up to CALL_SPARES freed
 * ones for its next calls (a client keeps a few in flight), and a call
 * is not zeroed whole (call_new): only the part before `group`, the
 * strings after it made empty (a calloc of its 2 KB was a tenth of a
 * send's instructions). */
#define CALL_SPARES 16
#define LEASE_CAP 1200
struct gcall {
    struct gsession *ss;
    enum method m;
    bool counted;                /* conn_request_begin'd on the socket */
    bool got_request;
    int64_t invisible_ms;        /* ReceiveMessage: the lease asked for */
    bool auto_renew;             /* ReceiveMessage: its leases kept (renew.h) */
    PbSendResult *entries;       /* SendMessage: one per message (entry1 for one) */
    PbStatus *statuses;          /* (status1 for one) */
    size_t n;
    size_t outstanding;
    size_t ak_len;               /* 0: none (a white-listed peer) */
    uint64_t tx_bits;            /* cluster SendMessage: entry i (< 64) is a transactional
                                  * message of topic k->topic (its end goes in gs->tx) */
    bool tx_legacy;              /* EndTransaction: asked again under GRPC_PRODUCER_GROUP */
    bool refused;                /* AckMessage: the broker does not serve acks (a slave):
                                  * UNIMPLEMENTED once every entry is back */
    int32_t ep_port;
    char *echo;                  /* AckMessage: its entries' message ids and handles,
                                  * one block (the entries point into it) */
    /* Not zeroed when reused: */
    char group[256];             /* Receive/Ack/Change: the consumer group */
    char topic[256];             /* Receive/Change: the topic asked for */
    char ak[128];                /* aclEnable: the authenticated AccessKey */
    char *lease;                 /* Change, Forward: the handle (its fields),
                                  * LEASE_CAP bytes (call_lease); NULL: none */
    char ep_host[64];            /* cluster QueryRoute/Assignment: the access point asked */
    struct gcall *spare_next;    /* in ss->spare */
    PbSendResult entry1;         /* a call of one entry: no allocation */
    PbStatus status1;
    char id1[72];                /* entry1's message_id and transaction_id when */
    char tid1[136];              /* they fit (call_str) */
};

/* {{{ Helpers */

#define NOT_SERVED_FMT "%s is not served by this rmq yet (it needs POP consumption on the broker)"

static const char *
method_name(enum method m)
{
    return m == M_RECEIVE ? "ReceiveMessage" : m == M_ACK ? "AckMessage" : "ChangeInvisibleDuration";
}

static void *
pb_alloc(void *data, size_t size)
{
    struct pb_arena *a = data;
    size = (size + 15) & ~(size_t)15;
    if (a->base != NULL && size <= a->cap - a->used) {
        void *p = a->base + a->used;
        a->used += size;
        return p;
    }
    struct pb_block *b = malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    b->next = a->extra;
    a->extra = b;
    return b->data;
}

static void
pb_free(void *data, void *p)
{
    (void)data;
    (void)p;   /* all at once, in pb_done */
}

/* The request decoded with pb_unpack is no longer used. */
static void
pb_done(struct grpc_server *gs)
{
    struct pb_arena *a = &gs->arena;
    a->used = 0;
    while (a->extra != NULL) {
        struct pb_block *b = a->extra;
        a->extra = b->next;
        free(b);
    }
}

/* Unpacks one request into the arena (one at a time per worker: every
 * caller is done with it, pb_done, before it returns). */
static ProtobufCMessage *
pb_unpack(struct grpc_server *gs, const ProtobufCMessageDescriptor *d, size_t n, const uint8_t *p)
{
    pb_done(gs);
    gs->unpack_why[0] = '\0';
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &gs->alloc, n, p);
    if (m != NULL && !pbcheck_utf8(m, gs->unpack_why, sizeof(gs->unpack_why)))
        m = NULL;   /* proto3 strings are UTF-8 (grpc/pbcheck.h) */
    if (m == NULL)
        pb_done(gs);
    return m;
}

static void call_done(struct h2s *s);

/* Ends the call INVALID_ARGUMENT "<Message> does not parse[: why]". */
static void
refuse_unparsed(struct gsession *ss, struct h2s *s, const ProtobufCMessageDescriptor *d)
{
    char why[240];
    snprintf(why, sizeof(why), "%s does not parse%s%s", d->short_name,
             ss->gs->unpack_why[0] != '\0' ? ": " : "", ss->gs->unpack_why);
    h2_finish(s, GRPC_INVALID_ARGUMENT, why);
    call_done(s);
}

/* A call's request message, or NULL after ending the call
 * INVALID_ARGUMENT ("<Message> does not parse"). */
static void *
unpack_call(struct gsession *ss, struct h2s *s, const ProtobufCMessageDescriptor *d, size_t n,
            const uint8_t *p)
{
    ProtobufCMessage *m = pb_unpack(ss->gs, d, n, p);
    if (m == NULL)
        refuse_unparsed(ss, s, d);
    return m;
}

/* The status messages that are not copies (never freed). */
static char MSG_OK[] = "OK";
static char MSG_EMPTY[] = "";

static void
msg_free(char *m)
{
    if (m != MSG_OK && m != MSG_EMPTY)
        free(m);
}

static struct gcall *
call_new(struct gsession *ss)
{
    struct gcall *k = ss->spare;
    if (k != NULL) {
        ss->spare = k->spare_next;
        ss->nspare--;
    } else if ((k = malloc(sizeof(*k))) == NULL) {
        return NULL;
    }
    memset(k, 0, offsetof(struct gcall, group));
    k->group[0] = k->topic[0] = k->ak[0] = k->ep_host[0] = '\0';
    k->lease = NULL;
    return k;
}

/* k's room for its lease (LEASE_CAP bytes, made on first use), or NULL
 * out of memory. */
static char *
call_lease(struct gcall *k)
{
    if (k->lease == NULL && (k->lease = malloc(LEASE_CAP)) != NULL)
        k->lease[0] = '\0';
    return k->lease;
}

/* n entries and statuses for call k (zeroed; inline for one): 0, or -1
 * out of memory. */
static int
call_entries(struct gcall *k, size_t n)
{
    if (n <= 1) {
        memset(&k->entry1, 0, sizeof(k->entry1));
        memset(&k->status1, 0, sizeof(k->status1));
        k->entries = &k->entry1;
        k->statuses = &k->status1;
        return 0;
    }
    k->entries = calloc(n, sizeof(*k->entries));
    k->statuses = calloc(n, sizeof(*k->statuses));
    return k->entries != NULL && k->statuses != NULL ? 0 : -1;
}

/* p[0..n) as a string of entry i of call k: in `inl` (k's own room for
 * entry1, cap bytes) when it fits, else a copy (NULL: out of memory). */
static char *
call_str(struct gcall *k, size_t i, char *inl, size_t cap, const char *p, size_t n)
{
    if (i == 0 && k->entries == &k->entry1 && n < cap) {
        memcpy(inl, p, n);
        inl[n] = '\0';
        return inl;
    }
    return strndup(p, n);
}

static void
call_free(struct gcall *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n; i++) {
        if (k->echo == NULL && k->entries[i].message_id != k->id1)
            free(k->entries[i].message_id);
        if (k->echo == NULL && k->entries[i].transaction_id != k->tid1)
            free(k->entries[i].transaction_id);
        if (k->entries[i].recall_handle != protobuf_c_empty_string)   /* _init's default */
            free(k->entries[i].recall_handle);
        msg_free(k->statuses[i].message);
    }
    if (k->entries != &k->entry1)
        free(k->entries);
    if (k->statuses != &k->status1)
        free(k->statuses);
    free(k->lease);
    free(k->echo);
    k->echo = NULL;
    struct gsession *ss = k->ss;
    if (ss != NULL && ss->nspare < CALL_SPARES) {
        k->spare_next = ss->spare;
        ss->spare = k;
        ss->nspare++;
    } else {
        free(k);
    }
}

/* The call is answered: the socket may read more (backpressure). */
static void
call_done(struct h2s *s)
{
    struct gcall *k = h2_stream_user(s);
    if (k == NULL)
        return;
    h2_set_stream_user(s, NULL);
    if (k->counted)
        conn_request_done(k->ss->cn);
    call_free(k);
}

static int
reply_msg(struct h2s *s, const ProtobufCMessage *m)
{
    /* Packed straight into the call's output (no buffer of its own). */
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = h2_send_reserve(s, n);
    if (b == NULL)
        return -1;
    protobuf_c_message_pack(m, b);
    int32_t code = grpc_metrics_status_of(m);
    if (code >= 0)
        h2_set_code(s, code);
    return h2_send_commit(s, n);
}

/* A unary call's one answer, then OK. */
static void
answer(struct h2s *s, const ProtobufCMessage *m)
{
    if (reply_msg(s, m) != 0)
        h2_finish(s, GRPC_INTERNAL, "cannot encode the response");
    else
        h2_finish(s, GRPC_OK, NULL);
    call_done(s);
}

/* "ns%name" as 5.x's NamespaceUtil.wrapNamespace, or name. */
static int
resource_name(const PbResource *r, char *out, size_t cap)
{
    if (r == NULL || r->name == NULL || r->name[0] == '\0')
        return -1;
    if (r->resource_namespace == NULL || r->resource_namespace[0] == '\0') {
        size_t n = strlen(r->name);
        if (n >= cap)
            return -1;
        memcpy(out, r->name, n + 1);
        return (int)n;
    }
    int n = snprintf(out, cap, "%s%%%s", r->resource_namespace, r->name);
    return n > 0 && (size_t)n < cap ? n : -1;
}

/* An integer in decimal into out (at least 21 bytes); its length.  Per
 * message, where snprintf showed in profiles. */
static size_t
fmt_i64(char *out, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *b = fjson_i64_digits(e, v);
    size_t n = (size_t)(e - b);
    memcpy(out, b, n);
    out[n] = '\0';
    return n;
}

/* A decimal integer at p[0..n) (an optional '-'), *at moved past it;
 * false when there is none. */
static bool
scan_i64(const char *p, size_t n, size_t *at, int64_t *v)
{
    size_t i = *at;
    bool neg = i < n && p[i] == '-';
    if (neg)
        i++;
    size_t d0 = i;
    uint64_t x = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9' && i - d0 < 19)
        x = x * 10 + (uint64_t)(p[i++] - '0');
    if (i == d0)
        return false;
    *v = neg ? -(int64_t)x : (int64_t)x;
    *at = i;
    return true;
}

static int
topic_lookup(const char *name, size_t len, struct topic_config *tc)
{
    struct config_table *t = config_table_topics();
    return t != NULL ? config_table_get(t, name, len, tc) : -1;
}

static Apache__Rocketmq__V2__Permission
perm_of(int32_t perm)
{
    bool r = (perm & RMQ_PERM_READ) != 0, w = (perm & RMQ_PERM_WRITE) != 0;
    return r && w ? APACHE__ROCKETMQ__V2__PERMISSION__READ_WRITE
         : r      ? APACHE__ROCKETMQ__V2__PERMISSION__READ
         : w      ? APACHE__ROCKETMQ__V2__PERMISSION__WRITE
                  : APACHE__ROCKETMQ__V2__PERMISSION__NONE;
}

/* Topics without a message.type attribute (every 4.x topic) accept
 * every type, as a 5.x MIXED topic does. */
static Apache__Rocketmq__V2__MessageType ALL_TYPES[] = {
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__DELAY,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION,
};

/* The types a queue of a topic accepts in QueryRoute, as 5.x's
 * RouteActivity: the topic's message.type, all four for MIXED, and all
 * four for a topic without the attribute (rmq: every 4.x topic, which
 * SendMessage does not check either). */
static Apache__Rocketmq__V2__MessageType ONE_TYPE[] = {
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__MESSAGE_TYPE_UNSPECIFIED,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__DELAY,
    APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION,
};

static Apache__Rocketmq__V2__MessageType *
accept_types(uint8_t topic_type, size_t *n)
{
    if (topic_type >= TOPIC_MSG_UNSPECIFIED && topic_type <= TOPIC_MSG_TRANSACTION) {
        *n = 1;
        return &ONE_TYPE[topic_type - TOPIC_MSG_UNSPECIFIED];
    }
    *n = sizeof(ALL_TYPES) / sizeof(ALL_TYPES[0]);
    return ALL_TYPES;
}


/* The broker as a route names it: brokerName, id 0, the access point
 * the client used (5.x local mode) or, when it sent none, ours. */
struct route_broker {
    PbBroker broker;
    PbEndpoints ep;
    PbAddress addr;
    PbAddress *addrs[1];
};

static void
route_broker_init(struct route_broker *rb, struct grpc_server *gs, const PbEndpoints *asked)
{
    apache__rocketmq__v2__broker__init(&rb->broker);
    rb->broker.name = gs->conf.broker_name;
    rb->broker.id = 0;
    if (asked != NULL && asked->n_addresses > 0) {
        rb->broker.endpoints = (PbEndpoints *)asked;
        return;
    }
    apache__rocketmq__v2__endpoints__init(&rb->ep);
    apache__rocketmq__v2__address__init(&rb->addr);
    rb->addr.host = gs->conf.host;
    rb->addr.port = gs->conf.port;
    rb->addrs[0] = &rb->addr;
    rb->ep.scheme = APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__IPv4;
    rb->ep.n_addresses = 1;
    rb->ep.addresses = rb->addrs;
    rb->broker.endpoints = &rb->ep;
}

/* }}} */

/* {{{ QueryRoute, QueryAssignment, Heartbeat, NotifyClientTermination */

static void cluster_route_ask(struct gsession *ss, struct h2s *s, const uint8_t *p, size_t n);

static void
query_route(struct gsession *ss, struct h2s *s, const uint8_t *p, size_t n)
{
    if (ss->gs->up != NULL) {
        cluster_route_ask(ss, s, p, n);
        return;
    }
    Apache__Rocketmq__V2__QueryRouteRequest *rq = unpack_call(ss, s, &apache__rocketmq__v2__query_route_request__descriptor, n, p);
    if (rq == NULL)
        return;
    Apache__Rocketmq__V2__QueryRouteResponse rs = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    rs.status = &st;
    char name[512];
    struct topic_config tc;
    int len = resource_name(rq->topic, name, sizeof(name));
    PbQueue *qs = NULL, **qp = NULL;
    struct route_broker rb;
    if (len < 0) {
        st.code = CODE(ILLEGAL_TOPIC);
        st.message = "topic name is empty";
    } else if (topic_lookup(name, (size_t)len, &tc) != 0) {
        st.code = CODE(TOPIC_NOT_FOUND);
        st.message = "topic not found";
    } else {
        route_broker_init(&rb, ss->gs, rq->endpoints);
        int32_t nq = tc.read_queue_nums > tc.write_queue_nums ? tc.read_queue_nums
                                                              : tc.write_queue_nums;
        if (nq < 0)
            nq = 0;
        qs = calloc((size_t)nq + 1, sizeof(*qs));
        qp = calloc((size_t)nq + 1, sizeof(*qp));
        if (qs == NULL || qp == NULL) {
            st.code = CODE(INTERNAL_SERVER_ERROR);
            st.message = "out of memory";
        } else {
            for (int32_t i = 0; i < nq; i++) {
                apache__rocketmq__v2__message_queue__init(&qs[i]);
                qs[i].topic = rq->topic;
                qs[i].id = i;
                int32_t perm = tc.perm;
                if (i >= tc.read_queue_nums)
                    perm &= ~RMQ_PERM_READ;
                if (i >= tc.write_queue_nums)
                    perm &= ~RMQ_PERM_WRITE;
                qs[i].permission = perm_of(perm);
                qs[i].broker = &rb.broker;
                qs[i].accept_message_types = accept_types(tc.message_type, &qs[i].n_accept_message_types);
                qp[i] = &qs[i];
            }
            rs.n_message_queues = (size_t)nq;
            rs.message_queues = qp;
            st.code = CODE(OK);
            st.message = "OK";
        }
    }
    answer(s, &rs.base);
    free(qs);
    free(qp);
    pb_done(ss->gs);
}

static void
query_assignment(struct gsession *ss, struct h2s *s, const uint8_t *p, size_t n)
{
    if (ss->gs->up != NULL) {
        cluster_route_ask(ss, s, p, n);
        return;
    }
    Apache__Rocketmq__V2__QueryAssignmentRequest *rq = unpack_call(ss, s, &apache__rocketmq__v2__query_assignment_request__descriptor, n, p);
    if (rq == NULL)
        return;
    Apache__Rocketmq__V2__QueryAssignmentResponse rs =
        APACHE__ROCKETMQ__V2__QUERY_ASSIGNMENT_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    rs.status = &st;
    char name[512];
    struct topic_config tc;
    int len = resource_name(rq->topic, name, sizeof(name));
    struct route_broker rb;
    PbQueue q;
    Apache__Rocketmq__V2__Assignment a = APACHE__ROCKETMQ__V2__ASSIGNMENT__INIT;
    Apache__Rocketmq__V2__Assignment *ap[1] = { &a };
    if (len < 0) {
        st.code = CODE(ILLEGAL_TOPIC);
        st.message = "topic name is empty";
    } else if (topic_lookup(name, (size_t)len, &tc) != 0) {
        st.code = CODE(TOPIC_NOT_FOUND);
        st.message = "topic not found";
    } else {
        /* As 5.x: one assignment per broker with readable queues, queue
         * id -1 (the broker picks the queue of each POP). */
        route_broker_init(&rb, ss->gs, rq->endpoints);
        st.code = CODE(OK);
        st.message = "OK";
        if ((tc.perm & RMQ_PERM_READ) && tc.read_queue_nums > 0) {
            apache__rocketmq__v2__message_queue__init(&q);
            q.topic = rq->topic;
            q.id = -1;
            q.permission = perm_of(tc.perm);
            q.broker = &rb.broker;
            q.n_accept_message_types = sizeof(ALL_TYPES) / sizeof(ALL_TYPES[0]);
            q.accept_message_types = ALL_TYPES;
            a.message_queue = &q;
            rs.n_assignments = 1;
            rs.assignments = ap;
        }
    }
    answer(s, &rs.base);
    pb_done(ss->gs);
}

/* A request of this session to the broker: its header fields and the
 * next opaque (which pending_take matches the reply by). */
static void
cmd_init(struct gsession *ss, struct rmq_cmd *cmd, int32_t code, uint8_t serialize)
{
    memset(cmd, 0, sizeof(*cmd));
    cmd->code = code;
    cmd->language = RMQ_LANG_OTHER;
    cmd->version = RMQ_VERSION_409;
    cmd->opaque = ++ss->next_opaque;
    if (ss->next_opaque == INT32_MAX)
        ss->next_opaque = 0;
    cmd->serialize = serialize;
}

static int broker_dispatch(struct gsession *ss, const struct rmq_cmd *cmd);
static int end_tx_call(struct gsession *ss, struct h2s *s, struct gcall *k, const char *group);
static uint8_t session_language(const struct gsession *ss);

/* s as a JSON string: quotes, backslashes and control bytes escaped,
 * other bytes (UTF-8) as they are. */
static int
json_str(struct buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_append(b, "\"", 1) != 0)
        return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[6] = { '\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15] };
        int rc = *p == '"' || *p == '\\' ? buf_append(b, (char[]){ '\\', (char)*p }, 2)
               : *p < 0x20 ? buf_append(b, e, 6) : buf_append(b, p, 1);
        if (rc != 0)
            return -1;
    }
    return buf_append(b, "\"", 1);
}

#define BLIT(b, lit) buf_append((b), (lit), sizeof(lit) - 1)

/* One RMQ_REQ_HEART_BEAT of body b on the shadow conn, the reply not waited for. */
static void
heartbeat_send(struct gsession *ss, const struct buf *b)
{
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_HEART_BEAT, RMQ_SER_JSON);
    cmd.language = session_language(ss);
    cmd.body = buf_head(b);
    cmd.body_len = (uint32_t)buf_len(b);
    (void)broker_dispatch(ss, &cmd);
}

/* Registers the session with the broker (RMQ_REQ_HEART_BEAT on the shadow
 * conn, as a remoting producer's heartbeat) as a producer of
 * GRPC_PRODUCER_GROUP, and of each topic it publishes (as
 * 5.x's ClientActivity registers a producer under each topic of its
 * Settings): the broker's transaction check of a half message of topic T
 * (RMQ_REQ_CHECK_TRANSACTION_STATE on the shadow conn, relayed over
 * Telemetry) then reaches a producer of T, never one of another topic,
 * and it is listed as the groups' producer.  Two heartbeats: the broker
 * refuses a heartbeat whole when its new groups pass
 * clientMaxProducerGroups, and GRPC_PRODUCER_GROUP's must not go with
 * it.  The replies are not waited for. */
static void
register_producer(struct gsession *ss)
{
    if (ss->client_id[0] == '\0' || ss->shadow == NULL)
        return;
    struct buf b;
    buf_init(&b);
    bool bad = BLIT(&b, "{\"clientID\":") || json_str(&b, ss->client_id) ||
               BLIT(&b, ",\"consumerDataSet\":[],\"producerDataSet\":[{\"groupName\":\""
                        GRPC_PRODUCER_GROUP "\"}]}");
    if (!bad)
        heartbeat_send(ss, &b);
    if (!bad && ss->nptopics > 0) {
        buf_reset(&b);
        bad = BLIT(&b, "{\"clientID\":") || json_str(&b, ss->client_id) ||
              BLIT(&b, ",\"consumerDataSet\":[],\"producerDataSet\":[");
        for (uint32_t i = 0; i < ss->nptopics && !bad; i++)
            bad = (i > 0 && BLIT(&b, ",")) || BLIT(&b, "{\"groupName\":") || json_str(&b, ss->ptopics[i]) ||
                  BLIT(&b, "}");
        if (!bad && BLIT(&b, "]}") == 0)
            heartbeat_send(ss, &b);
    }
    buf_free(&b);
}

/* Notes that the session publishes topic t (len n); true when
 * it is new (then registered, register_producer).  At most
 * conf.max_producer_topics (grpcMaxProducerTopics): one past them is not
 * kept, and the checks of its half messages go to another producer of it,
 * or wait for one. */
static bool
note_producer_topic(struct gsession *ss, const char *t, size_t n)
{
    if (n == 0)
        return false;
    uint32_t lo = 0, hi = ss->nptopics;
    while (lo < hi) {   /* binary search: peer-chosen names, O(log n) */
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strncmp(ss->ptopics[mid], t, n);
        if (c == 0 && ss->ptopics[mid][n] == '\0')
            return false;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (ss->nptopics >= ss->gs->conf.max_producer_topics)
        return false;
    char *copy = strndup(t, n);
    char **grown = copy != NULL ? realloc(ss->ptopics, (ss->nptopics + 1) * sizeof(*grown)) : NULL;
    if (grown == NULL) {
        free(copy);
        return false;
    }
    ss->ptopics = grown;
    memmove(&grown[lo + 1], &grown[lo], (ss->nptopics - lo) * sizeof(*grown));
    grown[lo] = copy;
    ss->nptopics++;
    return true;
}

/* A consumer's RMQ_REQ_HEART_BEAT body from its Telemetry settings: its group and
 * subscriptions, so the broker lists it (consumerConnection, the group's
 * client ids) as a remoting consumer of the group. */

static void
note_consumer(struct gsession *ss, const PbSettings *cs)
{
    buf_reset(&ss->consumer_hb);
    const Apache__Rocketmq__V2__Subscription *sub = cs->subscription;
    char group[256];
    if (ss->client_id[0] == '\0' || sub == NULL || resource_name(sub->group, group, sizeof(group)) < 0 ||
        sub->n_subscriptions == 0 || sub->n_subscriptions > 64)
        return;
    struct buf *b = &ss->consumer_hb;
    char ver[24];
    fmt_i64(ver, clock_wall_ms());
    /* || keeps the appends in order and stops at the first failure. */
    bool bad = BLIT(b, "{\"clientID\":") || json_str(b, ss->client_id) ||
               BLIT(b, ",\"producerDataSet\":[],\"consumerDataSet\":[{\"groupName\":") ||
               json_str(b, group) ||
               BLIT(b, ",\"consumeType\":\"CONSUME_PASSIVELY\",\"messageModel\":\"CLUSTERING\","
                       "\"consumeFromWhere\":\"CONSUME_FROM_LAST_OFFSET\",\"unitMode\":false,"
                       "\"subscriptionDataSet\":[");
    for (size_t i = 0; i < sub->n_subscriptions && !bad; i++) {
        const Apache__Rocketmq__V2__SubscriptionEntry *e = sub->subscriptions[i];
        char topic[256];
        if (e == NULL || resource_name(e->topic, topic, sizeof(topic)) < 0) {
            bad = true;
            break;
        }
        bool sql = e->expression != NULL && e->expression->type == APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL;
        const char *exp = e->expression != NULL && e->expression->expression != NULL &&
                                  e->expression->expression[0] != '\0'
                              ? e->expression->expression : "*";
        bad = (i > 0 && BLIT(b, ",")) || BLIT(b, "{\"topic\":") || json_str(b, topic) ||
              BLIT(b, ",\"subString\":") || json_str(b, exp) ||
              (sql ? BLIT(b, ",\"expressionType\":\"SQL92\"") : BLIT(b, ",\"expressionType\":\"TAG\"")) ||
              BLIT(b, ",\"tagsSet\":[],\"codeSet\":[],\"classFilterMode\":false,\"subVersion\":") ||
              buf_append(b, ver, strlen(ver)) || BLIT(b, "}");
    }
    if (bad || BLIT(b, "]}]}"))
        buf_reset(b);
    else
        snprintf(ss->consumer_group, sizeof(ss->consumer_group), "%s", group);
}

static void
register_consumer(struct gsession *ss)
{
    if (buf_len(&ss->consumer_hb) == 0 || ss->shadow == NULL)
        return;
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_HEART_BEAT, RMQ_SER_JSON);
    cmd.language = session_language(ss);
    cmd.body = buf_head(&ss->consumer_hb);
    cmd.body_len = (uint32_t)buf_len(&ss->consumer_hb);
    (void)broker_dispatch(ss, &cmd);
}

/* The body digest of a message this server hands out: CRC32, which
 * every SDK checks, but the SDKs disagree on its text.  Java (and the
 * others following its Utilities.crc32CheckSum) compare
 * Long.toHexString(crc).toUpperCase(); the Node.js SDK compares the
 * decimal number (`${crc32(body)}`) and discards a message whose digest
 * differs as corrupted.  The Node.js SDK is the one that says
 * x-mq-language HTTP (its LanguageCode).  5.x's proxy sends MD5 in
 * upper-case hex, which the Node.js SDK (lower-case hex) refuses too,
 * and costs a few µs per KiB. */
static const char *
body_crc(const struct gsession *ss, const uint8_t *body, size_t len, char out[16])
{
    uint32_t crc = (uint32_t)rmq_crc32(0, body, len);
    /* "%u" or "%X", by hand: snprintf was 300 instructions a message. */
    if (ss->crc_decimal) {
        out[fmt_i64(out, (int64_t)crc)] = '\0';
        return out;
    }
    char t[8];
    int n = 0;
    do {
        t[n++] = "0123456789ABCDEF"[crc & 15];
        crc >>= 4;
    } while (crc != 0);
    for (int i = 0; i < n; i++)
        out[i] = t[n - 1 - i];
    out[n] = '\0';
    return out;
}

/* How the client reads a body digest (body_crc), and the language its
 * heartbeats carry, from its call's x-mq-language: 5.x's proxy registers
 * a client with LanguageCode.valueOf of it, so consumerConnection shows
 * JAVA for the Java SDK and HTTP for the Node.js one; a name it does
 * not know is OTHER here (5.x's valueOf would throw). */
static void
note_language(struct gsession *ss, struct h2s *s)
{
    const char *lang = h2_header(s, "x-mq-language");
    if (lang == NULL)
        return;
    ss->crc_decimal = strcmp(lang, "HTTP") == 0;
    int32_t o = rmq_language_ordinal(lang, strlen(lang));
    ss->lang = (uint8_t)((o >= 0 ? o : RMQ_LANG_OTHER) + 1);
}

/* The language a registration of the session's client says. */
static uint8_t
session_language(const struct gsession *ss)
{
    return ss->lang != 0 ? (uint8_t)(ss->lang - 1) : RMQ_LANG_OTHER;
}

/* Keeps x-mq-client-id when it is a plain id (5.x SDKs: host@pid@n@...). */
static void
note_client_id(struct gsession *ss, struct h2s *s)
{
    note_language(ss, s);
    const char *id = h2_header(s, "x-mq-client-id");
    if (id == NULL || ss->client_id[0] != '\0')
        return;
    size_t n = strlen(id);
    if (n == 0 || n >= sizeof(ss->client_id))
        return;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '@' || ch == '.' || ch == '_' || ch == '-' || ch == ':'))
            return;
    }
    memcpy(ss->client_id, id, n + 1);
}

/* Heartbeat and NotifyClientTermination: parsed (a malformed request
 * is refused), answered OK. */
static void
simple_ok(struct gsession *ss, struct h2s *s, enum method m, const uint8_t *p, size_t n)
{
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = CODE(OK);
    st.message = "OK";
    if (m == M_HEARTBEAT) {
        Apache__Rocketmq__V2__HeartbeatRequest *rq =
            (void *)pb_unpack(ss->gs, &apache__rocketmq__v2__heartbeat_request__descriptor, n, p);
        if (rq == NULL) {
            h2_finish(s, GRPC_INVALID_ARGUMENT, "HeartbeatRequest does not parse");
            call_done(s);
            return;
        }
        bool producer = rq->client_type == APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER;
        pb_done(ss->gs);
        if (producer) {
            note_client_id(ss, s);
            register_producer(ss);
        } else {
            register_consumer(ss);
        }
        Apache__Rocketmq__V2__HeartbeatResponse rs = APACHE__ROCKETMQ__V2__HEARTBEAT_RESPONSE__INIT;
        rs.status = &st;
        answer(s, &rs.base);
    } else {
        Apache__Rocketmq__V2__NotifyClientTerminationRequest *rq =
            (void *)pb_unpack(ss->gs, &apache__rocketmq__v2__notify_client_termination_request__descriptor, n, p);
        if (rq == NULL) {
            h2_finish(s, GRPC_INVALID_ARGUMENT, "NotifyClientTerminationRequest does not parse");
            call_done(s);
            return;
        }
        pb_done(ss->gs);
        Apache__Rocketmq__V2__NotifyClientTerminationResponse rs =
            APACHE__ROCKETMQ__V2__NOTIFY_CLIENT_TERMINATION_RESPONSE__INIT;
        rs.status = &st;
        answer(s, &rs.base);
    }
}

/* }}} */

/* {{{ Telemetry */

/* The consumer group's 5.x fields, when the group has them: the client
 * is told fifo from consumeMessageOrderly, and the backoff from
 * groupRetryPolicy with retryMaxTimes + 1 attempts, as 5.x's proxy
 * (GrpcClientSettingsManager.mergeSubscriptionData) does.  A group
 * without them keeps the answer rmq gave before (the client's fifo, the
 * default backoff).  Returns true when g was filled. */
static bool
group_v5(const struct gsession *ss, const PbSettings *cs, struct subscription_group *g)
{
    if (ss->gs->up != NULL) {
        /* Cluster mode: the group's config from a broker (upstream.c). */
        if (!ss->group_known)
            return false;
        *g = ss->group_cfg;
        return g->v5;
    }
    const char *name = cs->subscription->group != NULL ? cs->subscription->group->name : NULL;
    struct config_table *t = config_table_groups();
    if (name == NULL || t == NULL || config_table_get(t, name, strlen(name), g) != 0)
        return false;
    return g->v5;
}

static void
set_duration_ms(Google__Protobuf__Duration *d, int64_t ms)
{
    d->seconds = ms / 1000;
    d->nanos = (int32_t)(ms % 1000) * 1000000;
}

static void settings_keep(struct gsession *ss, const ProtobufCMessage *m, const Google__Protobuf__Duration *timeout);
static int broker_call(struct gsession *ss, struct h2s *s, int32_t code, struct rmq_field *ext, uint32_t n,
                       enum method m, uint32_t index);

/* The client sent its Settings: answer with the server's, as a 5.x
 * proxy does (what it may send, the retry backoff it should use). */
static void
telemetry(struct gsession *ss, struct h2s *s, const uint8_t *p, size_t n)
{
    PbTelemetry *in = (void *)pb_unpack(ss->gs, &apache__rocketmq__v2__telemetry_command__descriptor, n, p);
    if (in == NULL) {
        h2_finish(s, GRPC_INVALID_ARGUMENT, "TelemetryCommand does not parse");
        call_done(s);
        return;
    }
    if (in->command_case != APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS ||
        in->settings == NULL) {
        /* Results of commands we never send (thread stacks, verify
         * results): nothing to answer. */
        pb_done(ss->gs);
        return;
    }
    const PbSettings *cs = in->settings;
    /* Cluster mode: whether a consumer's group is fifo is its config's
     * consumeMessageOrderly on the brokers (5.x's proxy reads it through
     * its cache): asked first (upstream.c answers from its group cache),
     * these Settings handled once it is answered. */
    char gname[256];
    if (ss->gs->up != NULL && !ss->settings_group_pass &&
        cs->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION && cs->subscription != NULL &&
        resource_name(cs->subscription->group, gname, sizeof(gname)) > 0) {
        buf_reset(&ss->settings_in);
        pb_done(ss->gs);
        struct rmq_field ext[1];
        ext[0].key.p = "group";
        ext[0].key.len = 5;
        ext[0].val.p = gname;
        ext[0].val.len = (uint32_t)strlen(gname);
        if (buf_append(&ss->settings_in, p, n) == 0 &&
            broker_call(ss, s, RMQ_REQ_GET_SUBSCRIPTIONGROUP_CONFIG, ext, 1, M_SETTINGS_GROUP, 0) == 0)
            return;
        /* Not asked: handled with what the client said. */
        ss->settings_group_pass = true;
        telemetry(ss, s, p, n);
        ss->settings_group_pass = false;
        return;
    }
    ss->telemetry_sid = h2_stream_id(s);
    if (cs->client_type == APACHE__ROCKETMQ__V2__CLIENT_TYPE__PRODUCER) {
        note_client_id(ss, s);
        size_t np = cs->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING &&
                            cs->publishing != NULL ? cs->publishing->n_topics : 0;
        for (size_t i = 0; i < np; i++) {
            char t[256];
            int tl = resource_name(cs->publishing->topics[i], t, sizeof(t));
            if (tl > 0)
                (void)note_producer_topic(ss, t, (size_t)tl);
        }
        register_producer(ss);
    } else if (cs->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION) {
        note_client_id(ss, s);
        note_consumer(ss, cs);
        register_consumer(ss);
    }
    PbSettings st = APACHE__ROCKETMQ__V2__SETTINGS__INIT;
    st.client_type = cs->client_type;
    st.access_point = cs->access_point;
    st.request_timeout = cs->request_timeout;
    st.user_agent = cs->user_agent;
    Apache__Rocketmq__V2__RetryPolicy rp = APACHE__ROCKETMQ__V2__RETRY_POLICY__INIT;
    Apache__Rocketmq__V2__ExponentialBackoff eb = APACHE__ROCKETMQ__V2__EXPONENTIAL_BACKOFF__INIT;
    Google__Protobuf__Duration initial = GOOGLE__PROTOBUF__DURATION__INIT;
    Google__Protobuf__Duration max = GOOGLE__PROTOBUF__DURATION__INIT;
    /* 5.x's producer backoff: 10 ms doubling up to 1 s. */
    initial.nanos = 10000000;
    max.seconds = 1;
    eb.initial = &initial;
    eb.max = &max;
    eb.multiplier = 2.0f;
    rp.max_attempts = cs->backoff_policy != NULL && cs->backoff_policy->max_attempts > 0
                          ? cs->backoff_policy->max_attempts : 3;
    rp.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_EXPONENTIAL_BACKOFF;
    rp.exponential_backoff = &eb;
    st.backoff_policy = &rp;
    Apache__Rocketmq__V2__Publishing pub = APACHE__ROCKETMQ__V2__PUBLISHING__INIT;
    Apache__Rocketmq__V2__Subscription sub = APACHE__ROCKETMQ__V2__SUBSCRIPTION__INIT;
    Google__Protobuf__Duration poll = GOOGLE__PROTOBUF__DURATION__INIT;
    struct subscription_group grp;
    Apache__Rocketmq__V2__CustomizedBackoff cb = APACHE__ROCKETMQ__V2__CUSTOMIZED_BACKOFF__INIT;
    Google__Protobuf__Duration levels[GROUP_RETRY_NEXT_MAX > 18 ? GROUP_RETRY_NEXT_MAX : 18];
    Google__Protobuf__Duration *level_ptrs[GROUP_RETRY_NEXT_MAX > 18 ? GROUP_RETRY_NEXT_MAX : 18];
    if (cs->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION &&
        cs->subscription != NULL) {
        sub.group = cs->subscription->group;
        sub.n_subscriptions = cs->subscription->n_subscriptions;
        sub.subscriptions = cs->subscription->subscriptions;
        sub.fifo = cs->subscription->fifo;
        if (group_v5(ss, cs, &grp)) {
            const struct group_retry_policy *gr = &grp.retry;
            sub.fifo = grp.consume_message_orderly;
            /* retryMaxTimes is any int: no overflow at INT32_MAX. */
            rp.max_attempts = grp.retry_max_times < INT32_MAX ? grp.retry_max_times + 1 : INT32_MAX;
            if (gr->type == GROUP_RETRY_EXPONENTIAL) {
                /* Absent: ExponentialRetryPolicy's defaults. */
                set_duration_ms(&initial, gr->has_exponential ? gr->initial : 5000);
                set_duration_ms(&max, gr->has_exponential ? gr->max : 7200000);
                eb.multiplier = gr->has_exponential ? (float)gr->multiplier : 2.0f;
            } else {
                /* Absent: CustomizedRetryPolicy's 18 levels (1 s .. 2 h). */
                static const int64_t dflt[] = { 1000, 5000, 10000, 30000, 60000, 120000,
                                                180000, 240000, 300000, 360000, 420000, 480000,
                                                540000, 600000, 1200000, 1800000, 3600000, 7200000 };
                const int64_t *lv = gr->has_customized ? gr->next : dflt;
                size_t nl = gr->has_customized ? gr->next_count : sizeof(dflt) / sizeof(dflt[0]);
                for (size_t i = 0; i < nl; i++) {
                    levels[i] = (Google__Protobuf__Duration)GOOGLE__PROTOBUF__DURATION__INIT;
                    set_duration_ms(&levels[i], lv[i]);
                    level_ptrs[i] = &levels[i];
                }
                cb.n_next = nl;
                cb.next = level_ptrs;
                rp.strategy_case = APACHE__ROCKETMQ__V2__RETRY_POLICY__STRATEGY_CUSTOMIZED_BACKOFF;
                rp.customized_backoff = &cb;
            }
        }
        /* What ReceiveMessage holds this consumer's records to. */
        if (resource_name(cs->subscription->group, ss->attempts_group, sizeof(ss->attempts_group)) >= 0)
            ss->max_attempts = rp.max_attempts;
        sub.receive_batch_size = 32;
        poll.seconds = 20;
        sub.long_polling_timeout = &poll;
        st.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_SUBSCRIPTION;
        st.subscription = &sub;
    } else {
        pub.n_topics = cs->pub_sub_case == APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING &&
                               cs->publishing != NULL
                           ? cs->publishing->n_topics : 0;
        pub.topics = pub.n_topics > 0 ? cs->publishing->topics : NULL;
        pub.max_body_size = ss->gs->conf.max_body;
        pub.validate_message_type = true;
        st.pub_sub_case = APACHE__ROCKETMQ__V2__SETTINGS__PUB_SUB_PUBLISHING;
        st.publishing = &pub;
    }
    PbTelemetry out = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    PbStatus status = APACHE__ROCKETMQ__V2__STATUS__INIT;
    status.code = CODE(OK);
    status.message = "OK";
    out.status = &status;
    out.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_SETTINGS;
    out.settings = &st;
    if (reply_msg(s, &out.base) != 0) {
        h2_finish(s, GRPC_INTERNAL, "cannot encode the settings");
        call_done(s);
    } else if (ss->gs->up != NULL) {
        settings_keep(ss, &out.base, cs->request_timeout);
    }
    pb_done(ss->gs);
}

/* }}} */

/* {{{ SendMessage */

static inline int
prop_put_n(struct buf *b, const char *k, size_t klen, const char *v, size_t vlen)
{
    /* One reserve, not four appends: three to six of these a send, the
     * room nearly always there (no call). */
    if (buf_avail(b) < klen + vlen + 2 && buf_reserve(b, klen + vlen + 2) != 0)
        return -1;
    uint8_t *t = buf_tail(b);
    memcpy(t, k, klen);
    t[klen] = NAME_VALUE_SEP;
    if (vlen > 0)
        memcpy(t + klen + 1, v, vlen);
    t[klen + 1 + vlen] = PROP_SEP;
    b->end += klen + vlen + 2;
    return 0;
}

/* A property whose name is a literal (its length known here). */
#define prop_put(b, k, v, vlen) prop_put_n((b), (k), sizeof(k) - 1, (v), (vlen))

static bool
has_separator(const char *s)
{
    return strchr(s, NAME_VALUE_SEP) != NULL || strchr(s, PROP_SEP) != NULL;
}

/* Fails entry i of call k at once (nothing was sent to the broker). */
static void
send_fail(struct gcall *k, size_t i, Apache__Rocketmq__V2__Code code, const char *msg)
{
    k->statuses[i].code = code;
    k->statuses[i].message = strdup(msg);
}

/* Builds message i's properties into ss->props: 5.x's mapping of
 * SystemProperties onto a 4.x message (keys, tag, UNIQ_KEY, the message
 * group as the sharding key, delivery time as TIMER_DELIVER_MS,
 * TRAN_MSG), then the user's.  Returns 0 or a v2 code with *why. */
static Apache__Rocketmq__V2__Code
build_props(struct gsession *ss, const PbMessage *m, const char *pgroup, int32_t *sysflag, const char **why)
{
    struct buf *b = &ss->props;
    buf_reset(b);
    const Apache__Rocketmq__V2__SystemProperties *sp = m->system_properties;
    *sysflag = 0;
    for (size_t i = 0; i < m->n_user_properties; i++) {
        const char *k = m->user_properties[i]->key, *v = m->user_properties[i]->value;
        if (k == NULL || k[0] == '\0' || has_separator(k) || (v != NULL && has_separator(v))) {
            *why = "a user property key is empty or has a control separator";
            return CODE(ILLEGAL_MESSAGE_PROPERTY_KEY);
        }
        if (prop_put_n(b, k, strlen(k), v != NULL ? v : "", v != NULL ? strlen(v) : 0) != 0)
            goto oom;
    }
    /* 5.x SendMessageActivity: the SDK's born_host, else the peer's
     * address, kept as __BORNHOST (ReceiveMessage answers it). */
    const char *bh = sp != NULL && sp->born_host != NULL && sp->born_host[0] != '\0' ? sp->born_host
                                                                                : ss->cn->peer;
    if (has_separator(bh)) {
        *why = "the born host has a control separator";
        return CODE(BAD_REQUEST);
    }
    if (prop_put(b, "__BORNHOST", bh, strlen(bh)) != 0)
        goto oom;
    if (sp == NULL)
        return CODE(OK);
    if (sp->tag != NULL && sp->tag[0] != '\0') {
        if (has_separator(sp->tag) || strchr(sp->tag, '|') != NULL) {
            *why = "the tag has a '|' or a control separator";
            return CODE(ILLEGAL_MESSAGE_TAG);
        }
        if (prop_put(b, "TAGS", sp->tag, strlen(sp->tag)) != 0)
            goto oom;
    }
    if (sp->n_keys > 0) {
        size_t start = buf_len(b);
        char sep[1] = { NAME_VALUE_SEP }, end[1] = { PROP_SEP };
        if (buf_append(b, "KEYS", 4) != 0 || buf_append(b, sep, 1) != 0)
            goto oom;
        for (size_t i = 0; i < sp->n_keys; i++) {
            if (has_separator(sp->keys[i]) || strchr(sp->keys[i], ' ') != NULL) {
                *why = "a key has a space or a control separator";
                return CODE(ILLEGAL_MESSAGE_KEY);
            }
            if ((i > 0 && buf_append(b, " ", 1) != 0) ||
                buf_append(b, sp->keys[i], strlen(sp->keys[i])) != 0)
                goto oom;
        }
        if (buf_append(b, end, 1) != 0)
            goto oom;
        (void)start;
    }
    if (sp->message_id != NULL && sp->message_id[0] != '\0') {
        if (has_separator(sp->message_id)) {
            *why = "the message id has a control separator";
            return CODE(ILLEGAL_MESSAGE_ID);
        }
        if (prop_put(b, "UNIQ_KEY", sp->message_id, strlen(sp->message_id)) != 0)
            goto oom;
    }
    if (sp->message_group != NULL && sp->message_group[0] != '\0') {
        if (has_separator(sp->message_group)) {
            *why = "the message group has a control separator";
            return CODE(ILLEGAL_MESSAGE_GROUP);
        }
        if (prop_put(b, "__SHARDINGKEY", sp->message_group, strlen(sp->message_group)) != 0)
            goto oom;
    }
    if (sp->delivery_timestamp != NULL) {
        char t[32];
        int64_t ms = sp->delivery_timestamp->seconds * 1000 + sp->delivery_timestamp->nanos / 1000000;
        int tn = snprintf(t, sizeof(t), "%lld", (long long)ms);
        if (prop_put(b, "TIMER_DELIVER_MS", t, (size_t)tn) != 0)
            goto oom;
    }
    if (sp->message_type == APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION) {
        if (prop_put(b, "TRAN_MSG", "true", 4) != 0 ||
            prop_put(b, "PGROUP", pgroup, strlen(pgroup)) != 0)
            goto oom;
        *sysflag |= SYSFLAG_TRANSACTION_PREPARED;
    }
    if (sp->trace_context != NULL && sp->trace_context[0] != '\0' && !has_separator(sp->trace_context) &&
        prop_put(b, "TRACE_CONTEXT", sp->trace_context, strlen(sp->trace_context)) != 0)
        goto oom;
    if (sp->body_encoding == APACHE__ROCKETMQ__V2__ENCODING__GZIP)
        *sysflag |= SYSFLAG_COMPRESSED;
    return CODE(OK);
oom:
    *why = "out of memory";
    return CODE(INTERNAL_SERVER_ERROR);
}

static uint32_t
fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int
pending_add(struct gsession *ss, int32_t opaque, int32_t stream_id, uint32_t index, enum method m)
{
    if (ss->npending >= MAX_PENDING)
        return -1;
    struct pending *p = ss->free_pending;
    if (p != NULL)
        ss->free_pending = p->next;
    else if ((p = malloc(sizeof(*p))) == NULL)
        return -1;
    p->next = NULL;
    p->group = NULL;
    p->ak_len = 0;
    p->opaque = opaque;
    p->stream_id = stream_id;
    p->index = index;
    p->m = m;
    if (ss->tail != NULL)
        ss->tail->next = p;
    else
        ss->head = p;
    ss->tail = p;
    ss->npending++;
    return 0;
}

/* p (pending_take's, or NULL) kept for the next pending_add. */
static void
pending_put(struct gsession *ss, struct pending *p)
{
    if (p == NULL)
        return;
    free(p->group);
    p->group = NULL;
    p->next = ss->free_pending;
    ss->free_pending = p;
}

/* Replies come back in the order the sends went out, nearly always: the
 * head matches, and the scan is bounded by MAX_PENDING. */
static struct pending *
pending_take(struct gsession *ss, int32_t opaque)
{
    struct pending *prev = NULL;
    for (struct pending *p = ss->head; p != NULL; prev = p, p = p->next) {
        if (p->opaque != opaque)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            ss->head = p->next;
        if (ss->tail == p)
            ss->tail = prev;
        ss->npending--;
        return p;
    }
    return NULL;
}

/*
 * aclEnable: the request checked as the call's account would be on the
 * remoting port (acl.h: its resources, the account's permissions), the
 * signature having been the call's (authenticate).  A refusal is answered
 * as the broker's NO_PERMISSION with the check's remark, through the
 * shadow conn as any reply (so after this dispatch returns), and the call
 * ends FORBIDDEN.  True when refused.
 */
static bool
acl_refused(struct gsession *ss, const struct rmq_cmd *cmd)
{
    char remark[ACL_REMARK_MAX];
    size_t rlen;
    if (acl_guard_check_as(ss->gs->h->acl, ACL_ROLE_BROKER, cmd, ss->cn->peer,
                           ss->ak_len > 0 ? ss->ak : NULL, ss->ak_len,
                           remark, &rlen))
        return false;
    log_info("gRPC request code %d from %s refused: %.*s", (int)cmd->code, ss->cn->peer,
             (int)rlen, remark);
    struct rmq_cmd r;
    memset(&r, 0, sizeof(r));
    r.code = RMQ_RESP_NO_PERMISSION;
    r.flag = RMQ_RPC_RESPONSE;
    r.opaque = cmd->opaque;
    r.serialize = cmd->serialize;
    r.remark.p = remark;
    r.remark.len = (uint32_t)rlen;
    buf_reset(&ss->frame);
    if (rmq_cmd_encode(&r, &ss->frame) != 0 ||
        conn_send(ss->shadow, buf_head(&ss->frame), buf_len(&ss->frame), NULL, 0) != 0)
        pending_put(ss, pending_take(ss, cmd->opaque));  /* the call ends by its deadline */
    return true;
}

/* Hands cmd to the broker on the shadow conn: its native processor first,
 * as a remoting request takes it, else (NATIVE_TO_LUA, or none) the
 * request encoded once and dispatched as any remoting frame.  The reply
 * comes back through shadow_output.  Returns 0, or -1 when it could not
 * be encoded (its pending entry is dropped). */
static int
broker_dispatch(struct gsession *ss, const struct rmq_cmd *cmd)
{
    struct host *h = ss->gs->h;
    if (ss->gs->up != NULL) {
        /* Cluster mode: to the broker the request is for; its reply comes
         * back through the shadow conn as a local broker's would. */
        buf_reset(&ss->frame);
        if (rmq_cmd_encode(cmd, &ss->frame) != 0 ||
            (cmd->body_len > 0 && buf_append(&ss->frame, cmd->body, cmd->body_len) != 0) ||
            upstream_forward(ss->gs->up, ss->shadow, buf_head(&ss->frame), buf_len(&ss->frame)) != 0) {
            pending_put(ss, pending_take(ss, cmd->opaque));
            return -1;
        }
        return 0;
    }
    if (h->metrics != NULL)
        h->frame_ns = clock_mono_ns();
    if (ss->gs->conf.acl && h->acl != NULL && acl_refused(ss, cmd))
        return 0;
    if (native_dispatch(h, ss->shadow, cmd))
        return 0;
    buf_reset(&ss->frame);
    if (rmq_cmd_encode(cmd, &ss->frame) != 0 ||
        (cmd->body_len > 0 && buf_append(&ss->frame, cmd->body, cmd->body_len) != 0)) {
        pending_put(ss, pending_take(ss, cmd->opaque));
        return -1;
    }
    host_server_handler.on_frame(ss->shadow, buf_head(&ss->frame), buf_len(&ss->frame));
    return 0;
}

/* A send run by the broker's send processor with its header typed
 * (send_processor_typed): no extFields formatted here and parsed there.
 * Local mode only, without aclEnable (the ACL check reads the text);
 * false when it must go as text (nothing was done then). */
static bool
send_typed(struct gsession *ss, const struct rmq_cmd *cmd, const struct send_typed *t)
{
    struct host *h = ss->gs->h;
    if (ss->gs->up != NULL || (ss->gs->conf.acl && h->acl != NULL))
        return false;
    struct native_proc *np = native_find(h, ss->shadow, cmd->code);
    if (!send_processor_is(np))
        return false;
    if (h->metrics != NULL)
        h->frame_ns = clock_mono_ns();
    struct native_req r;
    native_req_init(&r, h, ss->shadow, cmd);
    return send_processor_typed(np, &r, t) == NATIVE_DONE;
}

/* The message type check of 5.x's proxy (ProducerProcessor with
 * DefaultTopicMessageTypeValidator): the message's type, as
 * TopicMessageType.parseFromMessageProperty reads the properties
 * build_props writes (TRAN_MSG: TRANSACTION; a delivery time: DELAY; a
 * message group: FIFO; else NORMAL), must be the topic's message.type
 * unless that is MIXED; retry and DLQ topics are not checked.  A topic
 * without the attribute takes every type (rmq: 4.x topics have none;
 * 5.x reads a missing one as NORMAL).  False, with entry i failed, when
 * it does not match. */
static bool
type_matches(struct gcall *k, size_t i, const char *topic, const struct topic_config *tc,
             const Apache__Rocketmq__V2__SystemProperties *sp)
{
    uint8_t want = tc->message_type;
    if (want == 0 || want == TOPIC_MSG_MIXED || strncmp(topic, "%RETRY%", 7) == 0 ||
        strncmp(topic, "%DLQ%", 5) == 0)
        return true;
    uint8_t got = TOPIC_MSG_NORMAL;
    if (sp != NULL && sp->message_type == APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION)
        got = TOPIC_MSG_TRANSACTION;
    else if (sp != NULL && sp->delivery_timestamp != NULL)
        got = TOPIC_MSG_DELAY;
    else if (sp != NULL && sp->message_group != NULL && sp->message_group[0] != '\0')
        got = TOPIC_MSG_FIFO;
    if (got == want)
        return true;
    char why[160];
    snprintf(why, sizeof(why), "TopicMessageType validate failed, the expected type is %s, but actual type is %s",
             topic_msg_type_name(want), topic_msg_type_name(got));
    send_fail(k, i, CODE(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), why);
    return false;
}

/* Sends message i of call k to the broker as RMQ_REQ_SEND_MESSAGE_V2. */
static void
send_one(struct gsession *ss, struct h2s *s, struct gcall *k, size_t i, const PbMessage *m)
{
    struct grpc_server *gs = ss->gs;
    const Apache__Rocketmq__V2__SystemProperties *sp = m->system_properties;
    if (sp != NULL && sp->message_id != NULL)
        k->entries[i].message_id = call_str(k, i, k->id1, sizeof(k->id1), sp->message_id,
                                            strlen(sp->message_id));
    char topic[512];
    int tlen = resource_name(m->topic, topic, sizeof(topic));
    if (tlen < 0) {
        send_fail(k, i, CODE(ILLEGAL_TOPIC), "topic name is empty or too long");
        return;
    }
    if (m->body.len == 0) {
        send_fail(k, i, CODE(MESSAGE_BODY_EMPTY), "message body is empty");
        return;
    }
    if (m->body.len > (size_t)gs->conf.max_body) {
        char why[128];
        snprintf(why, sizeof(why), "message body of %zu bytes is larger than maxMessageSize %d",
                 m->body.len, gs->conf.max_body);
        send_fail(k, i, CODE(MESSAGE_BODY_TOO_LARGE), why);
        return;
    }
    int32_t sysflag = 0;
    const char *why = NULL;
    /* The producer group: the topic (GRPC_PRODUCER_GROUP). */
    const char *pgroup = topic;
    Apache__Rocketmq__V2__Code pc = build_props(ss, m, pgroup, &sysflag, &why);
    if (pc != CODE(OK)) {
        send_fail(k, i, pc, why);
        return;
    }
    /* A producer sending a transactional message of a topic its Settings
     * did not list is asked about it too (registered first: the same
     * shadow conn carries both, in order). */
    if ((sysflag & SYSFLAG_TRANSACTION_PREPARED) && note_producer_topic(ss, topic, (size_t)tlen))
        register_producer(ss);
    /* Cluster mode: its transaction id goes in gs->tx when the send is
     * answered (on_reply).  The SDKs send one transactional message a
     * call; one past the 64th, or of a second topic in the same call, is
     * not kept, and its end is refused as unknown (the broker's check
     * then asks the producer). */
    if (gs->tx != NULL && (sysflag & SYSFLAG_TRANSACTION_PREPARED) && i < 64 &&
        (k->topic[0] == '\0' || strcmp(k->topic, topic) == 0) && (size_t)tlen < sizeof(k->topic)) {
        memcpy(k->topic, topic, (size_t)tlen + 1);
        k->tx_bits |= UINT64_C(1) << i;
    }
    /* The queue: a message group always lands on the same queue (its
     * order), by hash as 5.x's proxy picks it; else the client's choice
     * when it names a writable queue; else the broker picks. */
    int32_t qid = -1;
    struct topic_config tc;
    bool known = topic_lookup(topic, (size_t)tlen, &tc) == 0;
    if (known && !type_matches(k, i, topic, &tc, sp))
        return;
    if (known && tc.write_queue_nums > 0) {
        if (sp != NULL && sp->message_group != NULL && sp->message_group[0] != '\0')
            qid = (int32_t)(fnv1a(sp->message_group) % (uint32_t)tc.write_queue_nums);
        else if (sp != NULL && sp->queue_id >= 0 && sp->queue_id < tc.write_queue_nums)
            qid = sp->queue_id;
    }
    int64_t born = sp != NULL && sp->born_timestamp != NULL
                       ? sp->born_timestamp->seconds * 1000 + sp->born_timestamp->nanos / 1000000
                       : clock_wall_ms();
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_SEND_MESSAGE_V2, RMQ_SER_ROCKETMQ);
    cmd.body = m->body.data;
    cmd.body_len = (uint32_t)m->body.len;
    if (pending_add(ss, cmd.opaque, h2_stream_id(s), (uint32_t)i, M_SEND_MESSAGE) != 0) {
        send_fail(k, i, CODE(TOO_MANY_REQUESTS), "too many sends waiting on this connection");
        return;
    }
    k->outstanding++;
    const struct send_typed t = {
        .producer_group = pgroup, .topic = topic, .topic_len = (size_t)tlen,
        .props = (const char *)buf_head(&ss->props), .props_len = buf_len(&ss->props),
        .queue_id = qid, .sys_flag = sysflag, .born_ts = born, .flag = 0, .reconsume = 0,
        .tc = known ? &tc : NULL,
    };
    if (send_typed(ss, &cmd, &t))
        return;
    /* As text: extFields as a remoting producer writes them. */
    char qs[24], fs[24], bs[24];
    fmt_i64(qs, qid);
    fmt_i64(fs, sysflag);
    fmt_i64(bs, born);
    struct rmq_field ext[8];
    uint32_t ne = 0;
#define FIELD(k_, v_, n_) \
    ext[ne].key.p = k_; ext[ne].key.len = 1; ext[ne].val.p = v_; ext[ne].val.len = (uint32_t)(n_); ne++
    FIELD("a", pgroup, strlen(pgroup));
    FIELD("b", topic, tlen);
    FIELD("e", qs, strlen(qs));
    FIELD("f", fs, strlen(fs));
    FIELD("g", bs, strlen(bs));
    FIELD("h", "0", 1);
    FIELD("i", (const char *)buf_head(&ss->props), buf_len(&ss->props));
    FIELD("j", "0", 1);
#undef FIELD
    cmd.ext = ext;
    cmd.ext_count = ne;
    if (broker_dispatch(ss, &cmd) != 0) {
        k->outstanding--;
        send_fail(k, i, CODE(INTERNAL_SERVER_ERROR), "cannot encode the send");
    }
}

static void
send_answer(struct h2s *s, struct gcall *k)
{
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    PbSendResult *one[1];
    PbSendResult **ep = k->n <= 1 ? one : calloc(k->n, sizeof(*ep));
    if (ep == NULL) {
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        call_done(s);
        return;
    }
    bool same = true;
    for (size_t i = 0; i < k->n; i++) {
        ep[i] = &k->entries[i];
        k->entries[i].status = &k->statuses[i];
        if (k->statuses[i].message == NULL)
            k->statuses[i].message = MSG_EMPTY;
        if (k->statuses[i].code != k->statuses[0].code)
            same = false;
    }
    if (k->n == 0) {
        st.code = CODE(BAD_REQUEST);
        st.message = "no message to send";
    } else if (same) {
        st.code = k->statuses[0].code;
        st.message = k->statuses[0].message;
    } else {
        st.code = CODE(MULTIPLE_RESULTS);
        st.message = "messages have different results";
    }
    /* Packed by hand (sendpack.h): protobuf-c's packer was a tenth of
     * a send's instructions. */
    size_t n = sendpack_response(NULL, &st, ep, k->n);
    uint8_t *b = h2_send_reserve(s, n);
    if (b == NULL) {
        h2_finish(s, GRPC_INTERNAL, "cannot encode the response");
    } else {
        sendpack_response(b, &st, ep, k->n);
        h2_set_code(s, (int32_t)st.code);
        if (h2_send_commit(s, n) != 0)
            h2_finish(s, GRPC_INTERNAL, "cannot encode the response");
        else
            h2_finish(s, GRPC_OK, NULL);
    }
    call_done(s);
    if (ep != one)
        free(ep);
}

/* A reply field as a number.  Its bytes are not NUL-terminated when the
 * reply was handed over as fields (shadow_reply): bounded by its length. */
static int64_t
field_i64(const struct rmq_str *f, int64_t dflt)
{
    if (f == NULL || f->p == NULL || f->len == 0 || f->len > 24)
        return dflt;
    /* The broker's own numbers (plain digits, short): without strtoll's
     * copy and locale-aware parse (a fifth of a send's reply). */
    if (f->len <= 18) {
        size_t j = f->p[0] == '-' ? 1 : 0;
        int64_t v = 0;
        for (; j < f->len && f->p[j] >= '0' && f->p[j] <= '9'; j++)
            v = v * 10 + (f->p[j] - '0');
        if (j == f->len && j > (f->p[0] == '-' ? 1u : 0u))
            return f->p[0] == '-' ? -v : v;
    }
    char d[25];
    memcpy(d, f->p, f->len);
    d[f->len] = '\0';
    return strtoll(d, NULL, 10);
}

/* The broker's remark as a string for a status message: its first 200
 * bytes at most (a message, not a dump); out. */
static const char *
remark_of(const struct rmq_cmd *cmd, char *out, size_t cap)
{
    size_t n = cmd->remark.p != NULL ? cmd->remark.len : 0;
    if (n > 200)
        n = 200;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(out, cmd->remark.p, n);
    out[n] = '\0';
    return out;
}

static Apache__Rocketmq__V2__Code
v2_code(int32_t remoting)
{
    switch (remoting) {
    case RMQ_RESP_SUCCESS: return CODE(OK);
    case RMQ_RESP_FLUSH_DISK_TIMEOUT: return CODE(MASTER_PERSISTENCE_TIMEOUT);
    case RMQ_RESP_FLUSH_SLAVE_TIMEOUT: return CODE(SLAVE_PERSISTENCE_TIMEOUT);
    case RMQ_RESP_SLAVE_NOT_AVAILABLE: return CODE(HA_NOT_AVAILABLE);
    case RMQ_RESP_MESSAGE_ILLEGAL: return CODE(BAD_REQUEST);
    case RMQ_RESP_NO_PERMISSION: return CODE(FORBIDDEN);
    case RMQ_RESP_TOPIC_NOT_EXIST: return CODE(TOPIC_NOT_FOUND);
    case RMQ_RESP_SYSTEM_BUSY: return CODE(TOO_MANY_REQUESTS);
    case UPSTREAM_RESP_TYPE_CONFLICT: return CODE(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE);
    case RMQ_RESP_SERVICE_NOT_AVAILABLE:
    case RMQ_RESP_SYSTEM_ERROR:
    default: return CODE(INTERNAL_SERVER_ERROR);
    }
}

static void end_tx_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg);
static void nack_popped(struct gsession *ss, const char *group, const char *ak, size_t ak_len,
                        const struct rmq_cmd *cmd);
static void on_pop_reply(struct gsession *ss, struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd);
static void ack_answer(struct h2s *s, struct gcall *k);
static void ack_end(struct h2s *s, struct gcall *k);
static void change_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg, const char *handle);
static void on_offset_reply(struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd);
static void on_forward_reply(struct gsession *ss, struct h2s *s, struct gcall *k, enum method m,
                             const struct rmq_cmd *cmd);
static void on_recall_reply(struct h2s *s, const struct rmq_cmd *cmd);
static Apache__Rocketmq__V2__Code pop_code(int32_t remoting);
static bool dlq_job_reply(struct gsession *ss, const struct rmq_cmd *cmd);
static void dlq_jobs_free(struct gsession *ss);
static void cluster_route_answer(struct gsession *ss, struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd);

/* A reply from the broker for one of this session's sends. */
static void
on_reply(struct gsession *ss, const struct rmq_cmd *cmd)
{
    if (ss->jobs != NULL && dlq_job_reply(ss, cmd))
        return;
    if (ss->renew != NULL && renew_reply(ss->renew, cmd))
        return;
    struct pending *p = pending_take(ss, cmd->opaque);
    if (p == NULL)
        return;
    int32_t sid = p->stream_id;
    uint32_t i = p->index;
    enum method m = p->m;
    char *group = p->group;
    size_t ak_len = p->ak_len;
    p->group = NULL;
    pending_put(ss, p);
    struct h2s *s = h2_find(ss->h2, sid);
    struct gcall *k = s != NULL ? h2_stream_user(s) : NULL;
    if (m == M_RECEIVE) {
        if (k != NULL)
            on_pop_reply(ss, s, k, cmd);
        else if (group != NULL && cmd->code == RMQ_RESP_SUCCESS)
            /* the call is gone: nobody gets them */
            nack_popped(ss, group, group + strlen(group) + 1, ak_len, cmd);
        free(group);
        return;
    }
    free(group);
    if (k != NULL && (m == M_QUERY_ROUTE || m == M_QUERY_ASSIGNMENT)) {
        cluster_route_answer(ss, s, k, cmd);
        return;
    }
    if (k != NULL && (m == M_UPDATE_OFFSET || m == M_GET_OFFSET || m == M_QUERY_OFFSET)) {
        on_offset_reply(s, k, cmd);
        return;
    }
    if (k != NULL && m == M_RECALL) {
        on_recall_reply(s, cmd);
        return;
    }
    if (k != NULL && m == M_SETTINGS_GROUP) {
        /* The group's config (upstream.c, as a broker writes it): the
         * Settings that waited for it handled now, as local mode's from
         * its own table (fifo, retry policy). */
        ss->group_known = cmd->code == RMQ_RESP_SUCCESS && cmd->body != NULL &&
                          upstream_group_parse(cmd->body, cmd->body_len, &ss->group_cfg) == 0;
        ss->settings_group_pass = true;
        if (buf_len(&ss->settings_in) > 0)
            telemetry(ss, s, buf_head(&ss->settings_in), buf_len(&ss->settings_in));
        ss->settings_group_pass = false;
        ss->group_known = false;
        buf_reset(&ss->settings_in);
        return;
    }
    if (k != NULL && (m == M_FORWARD_DLQ || m == M_FORWARD_ACK)) {
        on_forward_reply(ss, s, k, m, cmd);
        return;
    }
    if (k != NULL && m == M_CHANGE_INVISIBLE) {
        if (cmd->code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED) {
            char why[160];
            snprintf(why, sizeof(why), NOT_SERVED_FMT, method_name(k->m));
            h2_finish(s, GRPC_UNIMPLEMENTED, why);
            call_done(s);
            return;
        }
        if (cmd->code != RMQ_RESP_SUCCESS) {
            char why[256];
            remark_of(cmd, why, sizeof(why));
            change_answer(s, pop_code(cmd->code), why, NULL);
            return;
        }
        /* k->lease holds "ck reviveQid retry broker queueId offset [phy]". */
        char f[7][128];
        f[6][0] = '\0';
        const struct rmq_str *pt = rmq_cmd_field(cmd, "popTime", 7);
        const struct rmq_str *it = rmq_cmd_field(cmd, "invisibleTime", 13);
        if (pt == NULL || it == NULL || sscanf(k->lease != NULL ? k->lease : "", "%127s %127s %127s %127s %127s %127s %127s", f[0], f[1],
                                               f[2], f[3], f[4], f[5], f[6]) < 6) {
            change_answer(s, CODE(INTERNAL_SERVER_ERROR), "the broker's answer has no popTime", NULL);
            return;
        }
        char handle[1024];
        snprintf(handle, sizeof(handle), "%s %.*s %.*s %s %s %s %s %s%s%s", f[0], (int)pt->len, pt->p,
                 (int)it->len, it->p, f[1], f[2], f[3], f[4], f[5], f[6][0] != '\0' ? " " : "", f[6]);
        change_answer(s, CODE(OK), "OK", handle);
        return;
    }
    if (k != NULL && m == M_ACK) {
        if (i < k->n) {
            /* A slave's refusal ends the call only once every entry is
             * back: the reply can come inside ack_message's loop (the
             * shadow connection answers at once), which still fills the
             * call's entries. */
            if (cmd->code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED)
                k->refused = true;
            k->statuses[i].code = pop_code(cmd->code);
            k->statuses[i].message = cmd->code == RMQ_RESP_SUCCESS ? MSG_OK
                : cmd->remark.p != NULL ? strndup(cmd->remark.p, cmd->remark.len) : strdup("ack failed");
        }
        if (--k->outstanding == 0)
            ack_end(s, k);
        return;
    }
    if (k != NULL && m == M_END_TRANSACTION) {
        char msg[256];
        remark_of(cmd, msg, sizeof(msg));
        if (cmd->code != RMQ_RESP_SUCCESS && !k->tx_legacy && strcmp(msg, PRODUCER_GROUP_WRONG) == 0) {
            /* A half message stored before its group was its topic
             * (GRPC_PRODUCER_GROUP): asked again as that. */
            k->tx_legacy = true;
            k->outstanding = 1;
            if (end_tx_call(ss, s, k, GRPC_PRODUCER_GROUP) == 0)
                return;
            k->outstanding = 0;
        }
        end_tx_answer(s, cmd->code == RMQ_RESP_SUCCESS ? CODE(OK) : CODE(INVALID_TRANSACTION_ID),
                      cmd->code == RMQ_RESP_SUCCESS ? "OK" : msg);
        return;
    }
    if (k == NULL || i >= k->n)
        return;   /* the call was cancelled meanwhile */
    k->statuses[i].code = v2_code(cmd->code);
    if (cmd->code != RMQ_RESP_SUCCESS)
        k->statuses[i].message = cmd->remark.p != NULL ? strndup(cmd->remark.p, cmd->remark.len)
                                                       : strdup("send failed");
    else
        k->statuses[i].message = MSG_OK;
    /* The reply's fields in one pass, backwards (the last of a key wins,
     * as rmq_cmd_field finds it). */
    const struct rmq_str *off = NULL, *mid = NULL, *rh = NULL;
    for (uint32_t j = cmd->ext_count; j-- > 0;) {
        const struct rmq_field *f = &cmd->ext[j];
        if (f->key.p == NULL)
            continue;
        if (f->key.len == 11 && off == NULL && memcmp(f->key.p, "queueOffset", 11) == 0)
            off = &f->val;
        else if (f->key.len == 5 && mid == NULL && memcmp(f->key.p, "msgId", 5) == 0)
            mid = &f->val;
        else if (f->key.len == 12 && rh == NULL && memcmp(f->key.p, "recallHandle", 12) == 0)
            rh = &f->val;
    }
    if (off != NULL && off->p != NULL)
        k->entries[i].offset = field_i64(off, 0);
    /* The transaction id: "offsetMsgId@queueOffset", what RMQ_REQ_END_TRANSACTION
     * needs to name a half message (its commit log offset is in the
     * offset msgId), kept by the client instead of a table here (5.x's
     * proxy keeps one).  The broker checks both against the store. */
    if (mid != NULL && mid->p != NULL && cmd->code == RMQ_RESP_SUCCESS) {
        char tid[160];
        size_t ml = mid->len < 100 ? mid->len : 100;
        memcpy(tid, mid->p, ml);
        tid[ml] = '@';
        size_t tl = ml + 1 + fmt_i64(tid + ml + 1, k->entries[i].offset);
        k->entries[i].transaction_id = call_str(k, i, k->tid1, sizeof(k->tid1), tid, tl);
        if (ss->gs->tx != NULL && i < 64 && (k->tx_bits >> i & 1) &&
            txdata_add(ss->gs->tx, k->topic, tid, clock_mono_ns() / 1000000) != 0)
            log_warn("proxy: out of memory keeping transaction %s", tid);
    }
    if (k->entries[i].message_id == NULL && mid != NULL && mid->p != NULL)
        k->entries[i].message_id = call_str(k, i, k->id1, sizeof(k->id1), mid->p, mid->len);
    /* A timer message's recall handle, which RecallMessage takes. */
    if (rh != NULL && rh->p != NULL && rh->len > 0 && cmd->code == RMQ_RESP_SUCCESS)
        k->entries[i].recall_handle = strndup(rh->p, rh->len);
    if (--k->outstanding == 0)
        send_answer(s, k);
}

/* {{{ ReceiveMessage, AckMessage, ChangeInvisibleDuration over POP
 *
 * A thin layer over the broker's POP requests (RocketMQ 5's remoting
 * protocol, docs/pop.md): ReceiveMessage is one RMQ_REQ_POP_MESSAGE (its long
 * polling held by the broker), AckMessage its entries to the POP processor
 * typed (pop_processor_ack; as one RMQ_REQ_ACK_MESSAGE per entry in cluster
 * mode and with aclEnable), ChangeInvisibleDuration one
 * RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME.  The receipt
 * handle the client gets is the lease's extraInfo (ExtraInfoUtil's eight
 * fields: ckQueueOffset popTime invisibleTime reviveQid retry brokerName
 * queueId queueOffset), from which an ack names the lease again.  A broker
 * without POP answers REQUEST_CODE_NOT_SUPPORTED: the call then ends
 * UNIMPLEMENTED, as before POP existed. */

static void receive_status(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg);

/* What a long poll cut by the call's deadline leaves of it for the
 * answer's way back (receive_message). */
#define POLL_ANSWER_MS 1000

/* A Duration in ms.  A peer's seconds saturate at +-DURATION_MAX_S (about
 * 292 years) instead of overflowing: the callers then bound the value. */
#define DURATION_MAX_S (INT64_MAX / 1000 - 1)

static int64_t
duration_ms(const Google__Protobuf__Duration *d, int64_t dflt)
{
    if (d == NULL)
        return dflt;
    int64_t sec = d->seconds > DURATION_MAX_S ? DURATION_MAX_S : d->seconds < -DURATION_MAX_S ? -DURATION_MAX_S
                                                                                                : d->seconds;
    return sec * 1000 + d->nanos / 1000000;
}

/* Sends a command for call s to the broker (the POP family, the offset
 * requests, RMQ_REQ_END_TRANSACTION); the reply comes to on_reply. */
static int
broker_call(struct gsession *ss, struct h2s *s, int32_t code, struct rmq_field *ext, uint32_t n,
             enum method m, uint32_t index)
{
    /* JSON: a ROCKETMQ header holds a code in a short, and POP's are
     * 2000xx (5.x's clients send them as JSON too); the others take it
     * as well (the command is handed over in memory, and encoded only
     * for the Lua path). */
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, code, RMQ_SER_JSON);
    cmd.ext = ext;
    cmd.ext_count = n;
    if (pending_add(ss, cmd.opaque, h2_stream_id(s), index, m) != 0)
        return -1;
    /* A POP's answer may find its call gone (cancelled, past its
     * deadline): what it took is then given back in the group's name,
     * as the call's account (nack_records), so the entry keeps both.
     * Set before the dispatch, which may answer at once. */
    const struct gcall *k = h2_stream_user(s);
    if (m == M_RECEIVE && k != NULL) {
        size_t gl = strlen(k->group);
        char *g = malloc(gl + 1 + k->ak_len + 1);
        if (g == NULL) {
            pending_put(ss, pending_take(ss, cmd.opaque));
            return -1;
        }
        memcpy(g, k->group, gl + 1);
        memcpy(g + gl + 1, k->ak, k->ak_len);
        g[gl + 1 + k->ak_len] = '\0';
        ss->tail->group = g;
        ss->tail->ak_len = k->ak_len;
    }
    return broker_dispatch(ss, &cmd);
}

#define SET(f, k, v) \
    do { (f).key.p = (k); (f).key.len = (uint32_t)strlen(k); (f).val.p = (v); \
         (f).val.len = (uint32_t)strlen(v); } while (0)

static void
receive_message(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    Apache__Rocketmq__V2__ReceiveMessageRequest *rq = unpack_call(ss, s, &apache__rocketmq__v2__receive_message_request__descriptor, n, p);
    if (rq == NULL)
        return;
    note_language(ss, s);
    char topic[256];
    int gl = resource_name(rq->group, k->group, sizeof(k->group));
    int tl = rq->message_queue != NULL ? resource_name(rq->message_queue->topic, topic, sizeof(topic)) : -1;
    int64_t invisible = duration_ms(rq->invisible_duration, 30000);
    /* auto_renew: 5.x's defaultInvisibleTimeMills, kept while the client
     * is connected (renew.h). */
    if (rq->auto_renew && ss->gs->conf.renew.enabled) {
        invisible = ss->gs->conf.renew.default_invisible_ms;
        k->auto_renew = true;
    }
    int64_t poll = duration_ms(rq->long_polling_timeout, 0);
    int32_t batch = rq->batch_size > 0 ? rq->batch_size : 1;
    if (batch > 32)
        batch = 32;
    char qid[24], num[24], inv[24], pol[24], born[24];
    /* The broker's every queue (-1), whatever queue the client names, as
     * 5.x's proxy (ReceiveMessageQueueSelector: the broker's acting
     * queue): the Java SDK's SimpleConsumer names the route's queues in
     * turn, and held on one queue it missed what the others received. */
    fmt_i64(qid, -1);
    fmt_i64(num, batch);
    fmt_i64(inv, invisible);
    fmt_i64(born, clock_wall_ms());
    const char *exp = "*", *exp_type = "TAG";
    if (rq->filter_expression != NULL) {
        if (rq->filter_expression->expression != NULL && rq->filter_expression->expression[0] != '\0')
            exp = rq->filter_expression->expression;
        if (rq->filter_expression->type == APACHE__ROCKETMQ__V2__FILTER_TYPE__SQL)
            exp_type = "SQL92";
    }
    if (gl < 0 || tl < 0) {
        pb_done(ss->gs);
        h2_finish(s, GRPC_INVALID_ARGUMENT, gl < 0 ? "consumer group is empty" : "topic is empty");
        call_done(s);
        return;
    }
    /* 5.x's proxy refuses a lease shorter than minInvisibleTimeMillsForRecv
     * (ReceiveMessageActivity), except with auto_renew, whose lease is
     * the server's: a message must stay invisible long enough for the
     * consumer to handle it before it is delivered again. */
    if (!k->auto_renew && (invisible < ss->gs->conf.recv_invisible_min_ms ||
                           invisible > ss->gs->conf.invisible_max_ms)) {
        char why[96];
        bool small = invisible < ss->gs->conf.recv_invisible_min_ms;
        snprintf(why, sizeof(why), "the invisibleTime is too %s. %s is %lld", small ? "small" : "large",
                 small ? "min" : "max",
                 (long long)(small ? ss->gs->conf.recv_invisible_min_ms : ss->gs->conf.invisible_max_ms));
        pb_done(ss->gs);
        receive_status(s, CODE(ILLEGAL_INVISIBLE_TIME), why);
        return;
    }
    /* The long poll as 5.x's proxy bounds it (ReceiveMessageActivity):
     * at most grpcClientConsumerMaxLongPollingTimeoutMillis, and never
     * past the call's deadline; when less than the min is left, answered
     * at once ILLEGAL_POLLING_TIME.  A POP held past the deadline would
     * pop a message for a call already gone (DEADLINE_EXCEEDED), leaving
     * it invisible to every live receive: the Java SDK's
     * AsyncSimpleConsumerExample, whose calls wait in the client behind
     * the stream limit, lost its message so.  Unlike 5.x a shorter ask is
     * not raised to the min (the SDKs' short awaits stay short), and a
     * poll cut by the deadline ends POLL_ANSWER_MS before it, so that the
     * empty answer reaches the client before the client gives up. */
    if (poll > ss->gs->conf.poll_max_ms)
        poll = ss->gs->conf.poll_max_ms;
    int64_t left = h2_deadline_left_ms(s);
    if (poll > 0 && left >= 0 && poll > left - POLL_ANSWER_MS) {
        if (left < ss->gs->conf.poll_min_ms || left <= POLL_ANSWER_MS) {
            pb_done(ss->gs);
            receive_status(s, CODE(ILLEGAL_POLLING_TIME),
                           "The deadline time remaining is not enough for polling, please check network condition");
            return;
        }
        poll = left - POLL_ANSWER_MS;
    }
    fmt_i64(pol, poll);
    memcpy(k->topic, topic, (size_t)tl + 1);
    k->invisible_ms = invisible;
    struct rmq_field ext[12];
    /* A consumeMessageOrderly group pops orderly, as 5.x's proxy
     * (ReceiveMessageActivity: fifo from the group's config). */
    struct subscription_group grp;
    struct config_table *gt = config_table_groups();
    bool fifo = gt != NULL && config_table_get(gt, k->group, strlen(k->group), &grp) == 0 &&
                grp.v5 && grp.consume_message_orderly;
    /* initMode MAX, as 5.x's proxy pops (where a new group starts: docs/pop.md). */
    SET(ext[0], "consumerGroup", k->group);
    SET(ext[1], "topic", k->topic);
    SET(ext[2], "queueId", qid);
    SET(ext[3], "maxMsgNums", num);
    SET(ext[4], "invisibleTime", inv);
    SET(ext[5], "pollTime", pol);
    SET(ext[6], "bornTime", born);
    SET(ext[7], "initMode", "1");
    SET(ext[8], "expType", exp_type);
    SET(ext[9], "exp", exp);
    SET(ext[10], "order", fifo ? "true" : "false");
    /* Cluster mode: the queue's broker (5.x's RpcRequestHeader bname). */
    uint32_t ne = 11;
    if (ss->gs->up != NULL && rq->message_queue->broker != NULL && rq->message_queue->broker->name != NULL &&
        rq->message_queue->broker->name[0] != '\0') {
        SET(ext[ne], "bname", rq->message_queue->broker->name);
        ne++;
    }
    int rc = broker_call(ss, s, RMQ_REQ_POP_MESSAGE, ext, ne, M_RECEIVE, 0);
    pb_done(ss->gs);
    if (rc != 0) {
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED, "too many requests waiting on this connection");
        call_done(s);
    }
}

/* A receipt handle's fields: ExtraInfoUtil's eight, then (5.x's
 * ReceiptHandle, and every handle rmq issues) the record's commit log
 * offset, which ForwardMessageToDeadLetterQueue names.  Returns the
 * count (8 or 9), or -1 when malformed.  The broker reads the first
 * eight of an extraInfo and ignores the rest, as 5.x's does. */
static int
split_handle(const char *h, char f[HANDLE_FIELDS][128])
{
    int n = 0;
    const char *p = h;
    while (*p != '\0' && n < HANDLE_FIELDS) {
        const char *e = strchr(p, ' ');
        size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= 128)
            return -1;
        memcpy(f[n], p, len);
        f[n][len] = '\0';
        n++;
        p = e != NULL ? e + 1 : p + len;
    }
    return n >= 8 && *p == '\0' ? n : -1;
}

/* The topic a lease was stored in: the group's POP retry topic for a
 * redelivery (5.x's KeyBuilder.buildPopRetryTopic, retry topic v2 off). */
static void
lease_topic(char *out, size_t cap, const char *retry, const char *group, const char *topic)
{
    if (strcmp(retry, "1") == 0)
        snprintf(out, cap, "%%RETRY%%%s_%s", group, topic);
    else
        snprintf(out, cap, "%s", topic);
}

static int32_t
renew_send(void *arg, const struct renew_lease *l, int64_t invisible_ms)
{
    struct gsession *ss = arg;
    char f[HANDLE_FIELDS][128], stored[600], inv[24];
    if (split_handle(l->handle, f) < 0)
        return 0;
    lease_topic(stored, sizeof(stored), f[4], l->group, l->topic);
    fmt_i64(inv, invisible_ms);
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME, RMQ_SER_JSON);
    struct rmq_field ext[6];
    SET(ext[0], "consumerGroup", l->group);
    SET(ext[1], "topic", stored);
    SET(ext[2], "queueId", f[6]);
    SET(ext[3], "extraInfo", l->handle);
    SET(ext[4], "offset", f[7]);
    SET(ext[5], "invisibleTime", inv);
    cmd.ext = ext;
    cmd.ext_count = 6;
    memcpy(ss->ak, l->ak, l->ak_len);
    ss->ak_len = l->ak_len;
    return broker_dispatch(ss, &cmd) == 0 ? cmd.opaque : 0;
}

/* Keeps the lease of a message received with auto_renew (renew.h). */
static void
renew_keep(struct gcall *k, const char *msg_id, const char *handle)
{
    struct gsession *ss = k->ss;
    if (ss->renew == NULL)
        ss->renew = renew_new(&ss->cn->r->loop, &ss->gs->conf.renew, ss->cn, ss->gs->h->metrics,
                              renew_send, ss);
    if (ss->renew == NULL || !renew_add(ss->renew, k->group, k->topic, msg_id, handle, k->ak, k->ak_len))
        log_debug("gRPC auto-renew: a message of group %s from %s is not renewed (memory budget)",
                  k->group, ss->cn->peer);
}

/* The handle to act on for a message the client names: the newest of
 * its auto_renew lease, which is taken (renewed no more), else the
 * client's own. */
static const char *
newest_handle(struct gsession *ss, const char *group, const char *msg_id, const char *h, char *buf,
              size_t cap)
{
    if (h != NULL && msg_id != NULL && ss->renew != NULL && renew_take(ss->renew, group, msg_id, buf, cap))
        return buf;
    return h;
}

/* A receipt handle's fields in place (split_handle's rules, no copy). */
struct hfield {
    const char *p;
    size_t n;
};

static int
handle_fields(const char *h, struct hfield f[HANDLE_FIELDS])
{
    int n = 0;
    const char *p = h;
    while (*p != '\0' && n < HANDLE_FIELDS) {
        const char *e = p;
        while (*e != '\0' && *e != ' ')
            e++;
        size_t len = (size_t)(e - p);
        if (len == 0 || len >= 128)
            return -1;
        f[n].p = p;
        f[n].n = len;
        n++;
        p = *e == ' ' ? e + 1 : e;
    }
    return n >= 8 && *p == '\0' ? n : -1;
}

/* A field as a plain decimal (an optional '-', at most 18 digits); false
 * for anything else, which the remoting path answers with its remark. */
static inline bool
hfield_i64(const struct hfield *f, int64_t *v)
{
    const char *p = f->p;
    size_t n = f->n, i = 0;
    bool neg = n > 0 && p[0] == '-';
    if (neg)
        i = 1;
    if (n == i || n - i > 18)
        return false;
    int64_t x = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9)
            return false;
        x = x * 10 + (int64_t)d;
    }
    *v = neg ? -x : x;
    return true;
}

/* The typed acks' results back into call k (pop_processor_ack's fail):
 * map[i] is entry i's index in the call. */
struct ack_ctx {
    struct gcall *k;
    const uint32_t *map;
};

static void
ack_failed(void *arg, size_t i, int32_t code, const char *remark, size_t len)
{
    struct ack_ctx *c = arg;
    uint32_t e = c->map[i];
    c->k->statuses[e].code = pop_code(code);
    c->k->statuses[e].message = len > 0 ? strndup(remark, len) : strdup("ack failed");
}

static void
ack_message(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    /* By hand (codec.h), else protobuf-c (whose answer it is then). */
    pb_done(ss->gs);
    Apache__Rocketmq__V2__AckMessageRequest *rq = codec_ack_request(&ss->gs->alloc, p, n);
    if (rq == NULL)
        rq = unpack_call(ss, s, &apache__rocketmq__v2__ack_message_request__descriptor, n, p);
    if (rq == NULL)
        return;
    char topic[256];
    int gl = resource_name(rq->group, k->group, sizeof(k->group));
    int tl = resource_name(rq->topic, topic, sizeof(topic));
    k->n = rq->n_entries;
    int ce = call_entries(k, k->n);
    if (gl < 0 || tl < 0 || ce != 0 || k->n == 0) {
        k->n = 0;
        pb_done(ss->gs);
        h2_finish(s, GRPC_INVALID_ARGUMENT, "an ack needs a group, a topic and entries");
        call_done(s);
        return;
    }
    k->outstanding = 1;
    /* The typed entries are counted in the broker's ACK_MESSAGE metrics
     * from here, as broker_dispatch's frame_ns times each one sent. */
    int64_t start_ns = ss->gs->h->metrics != NULL ? clock_mono_ns() : 0;
    /* Local mode without aclEnable: the entries go to the POP processor
     * typed and together (pop_processor_ack: one queue check and one log
     * write a run of them), not as one remoting ACK_MESSAGE each whose
     * header is written here and parsed there (4,400 instructions an
     * entry).  The answers are the same. */
    struct host *h = ss->gs->h;
    struct native_proc *np = NULL;
    if (ss->gs->up == NULL && !(ss->gs->conf.acl && h->acl != NULL) && ss->shadow != NULL) {
        np = native_find(h, ss->shadow, RMQ_REQ_ACK_MESSAGE);
        if (!pop_processor_is(np))
            np = NULL;
    }
    struct pop_ack_entry *typed = np != NULL ? malloc(k->n * (sizeof(*typed) + sizeof(uint32_t))) : NULL;
    uint32_t *map = typed != NULL ? (uint32_t *)(typed + k->n) : NULL;
    size_t nt = 0;
    /* The group's retry topic, which a redelivery's lease is stored in,
     * made once for the call. */
    char retry_topic[600];
    size_t retry_len = 0;
    size_t tlen = strlen(topic);
    /* message_id and receipt_handle are echoed in the answer: copied
     * into one block for the call (two strdups an entry before). */
    size_t echo_len = 0;
    for (size_t i = 0; i < k->n; i++) {
        const Apache__Rocketmq__V2__AckMessageEntry *e = rq->entries[i];
        echo_len += (e->message_id != NULL ? strlen(e->message_id) : 0) +
                    (e->receipt_handle != NULL ? strlen(e->receipt_handle) : 0) + 2;
    }
    char *echo = k->echo = malloc(echo_len);
    for (size_t i = 0; i < k->n; i++) {
        const Apache__Rocketmq__V2__AckMessageEntry *e = rq->entries[i];
        apache__rocketmq__v2__send_result_entry__init(&k->entries[i]);
        apache__rocketmq__v2__status__init(&k->statuses[i]);
        k->statuses[i].message = NULL;
        const char *mid = e->message_id != NULL ? e->message_id : "";
        const char *rhd = e->receipt_handle != NULL ? e->receipt_handle : "";
        if (echo != NULL) {
            size_t ml = strlen(mid) + 1, hl = strlen(rhd) + 1;
            memcpy(echo, mid, ml);
            k->entries[i].message_id = echo;
            echo += ml;
            memcpy(echo, rhd, hl);
            k->entries[i].transaction_id = echo;
            echo += hl;
        } else {
            k->entries[i].message_id = strdup(mid);
            k->entries[i].transaction_id = strdup(rhd);
        }
        char newest[512];
        const char *rh = newest_handle(ss, k->group, e->message_id, e->receipt_handle, newest, sizeof(newest));
        if (typed != NULL && rh != NULL) {
            struct hfield hf[HANDLE_FIELDS];
            int64_t v[4], qid, off;
            bool retry = false;
            bool ok = handle_fields(rh, hf) >= 0 && hfield_i64(&hf[0], &v[0]) && hfield_i64(&hf[1], &v[1]) &&
                      hfield_i64(&hf[2], &v[2]) && hfield_i64(&hf[3], &v[3]) && hfield_i64(&hf[6], &qid) &&
                      hfield_i64(&hf[7], &off) && qid >= INT32_MIN && qid <= INT32_MAX;
            if (ok) {
                retry = hf[4].n == 1 && hf[4].p[0] == '1';
                if (retry && retry_len == 0) {
                    lease_topic(retry_topic, sizeof(retry_topic), "1", k->group, topic);
                    retry_len = strlen(retry_topic);
                }
                struct pop_ack_entry *t = &typed[nt];
                t->topic = retry ? retry_topic : topic;
                t->tlen = retry ? retry_len : tlen;
                t->qid = (int32_t)qid;
                t->offset = off;
                t->pop_time = v[1];
                map[nt++] = (uint32_t)i;
                k->statuses[i].code = CODE(OK);
                k->statuses[i].message = MSG_OK;
                continue;
            }
        }
        char f[HANDLE_FIELDS][128], stored[600];
        if (rh == NULL || split_handle(rh, f) < 0) {
            send_fail(k, i, CODE(INVALID_RECEIPT_HANDLE), "receipt handle is not one this server issued");
            continue;
        }
        lease_topic(stored, sizeof(stored), f[4], k->group, topic);
        struct rmq_field ext[5];
        SET(ext[0], "consumerGroup", k->group);
        SET(ext[1], "topic", stored);
        SET(ext[2], "queueId", f[6]);
        SET(ext[3], "extraInfo", rh);
        SET(ext[4], "offset", f[7]);
        /* Counted first: the broker's reply can come back inside the
         * call (shadow_reply). */
        k->outstanding++;
        if (broker_call(ss, s, RMQ_REQ_ACK_MESSAGE, ext, 5, M_ACK, (uint32_t)i) != 0) {
            k->outstanding--;
            send_fail(k, i, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection");
            continue;
        }
    }
    if (nt > 0) {
        struct ack_ctx ctx = { k, map };
        /* false: a slave, refused as the remoting path refuses it. */
        if (!pop_processor_ack(np, ss->shadow->peer, k->group, strlen(k->group), typed, nt, ack_failed, &ctx,
                               h->metrics, start_ns))
            k->refused = true;
    }
    free(typed);
    pb_done(ss->gs);
    if (--k->outstanding == 0)
        ack_end(s, k);
}

/* Every entry of an AckMessage is back: its answer, or the broker's
 * refusal of acks (a slave) for the whole call. */
static void
ack_end(struct h2s *s, struct gcall *k)
{
    if (k->refused) {
        char why[160];
        snprintf(why, sizeof(why), NOT_SERVED_FMT, method_name(k->m));
        h2_finish(s, GRPC_UNIMPLEMENTED, why);
        call_done(s);
        return;
    }
    ack_answer(s, k);
}

static void
change_invisible(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    Apache__Rocketmq__V2__ChangeInvisibleDurationRequest *rq = unpack_call(ss, s, &apache__rocketmq__v2__change_invisible_duration_request__descriptor, n, p);
    if (rq == NULL)
        return;
    char f[HANDLE_FIELDS][128], stored[600], inv[24], newest[512];
    int gl = resource_name(rq->group, k->group, sizeof(k->group));
    int tl = resource_name(rq->topic, k->topic, sizeof(k->topic));
    int64_t ms = duration_ms(rq->invisible_duration, -1);
    /* A nack ends auto-renewal (5.x's ChangeInvisibleDurationActivity). */
    const char *rh = gl >= 0 ? newest_handle(ss, k->group, rq->message_id, rq->receipt_handle, newest, sizeof(newest))
                             : rq->receipt_handle;
    int nf = rh != NULL ? split_handle(rh, f) : -1;
    if (gl < 0 || tl < 0 || nf < 0) {
        pb_done(ss->gs);
        change_answer(s, CODE(INVALID_RECEIPT_HANDLE), "receipt handle is not one this server issued", NULL);
        return;
    }
    /* Longer than maxInvisibleTimeMills: 5.x's proxy refuses it
     * (ChangeInvisibleDurationActivity). */
    if (ms > ss->gs->conf.invisible_max_ms) {
        char why[96];
        snprintf(why, sizeof(why), "the invisibleTime is too large. max is %lld",
                 (long long)ss->gs->conf.invisible_max_ms);
        pb_done(ss->gs);
        change_answer(s, CODE(ILLEGAL_INVISIBLE_TIME), why, NULL);
        return;
    }
    lease_topic(stored, sizeof(stored), f[4], k->group, k->topic);
    /* 5.x takes any shorter duration; the broker refuses one under
     * popInvisibleTimeMinMillis.  A shorter one (the Node SDK's push
     * consumer reads its backoff's seconds as milliseconds, so it asks
     * for 1 ms) is raised to that minimum, not refused: a refusal would
     * have the client retry it forever, and later than asked is still
     * not visible before asked. */
    if (ms >= 0 && ms < ss->gs->conf.invisible_min_ms)
        ms = ss->gs->conf.invisible_min_ms;
    fmt_i64(inv, ms);
    struct rmq_field ext[6];
    SET(ext[0], "consumerGroup", k->group);
    SET(ext[1], "topic", stored);
    SET(ext[2], "queueId", f[6]);
    SET(ext[3], "extraInfo", rh);
    SET(ext[4], "offset", f[7]);
    SET(ext[5], "invisibleTime", inv);
    /* The new handle keeps the lease's fields but its popTime and
     * invisibleTime, which the reply gives: keep the rest here. */
    if (call_lease(k) == NULL) {
        pb_done(ss->gs);
        change_answer(s, CODE(INTERNAL_SERVER_ERROR), "out of memory", NULL);
        return;
    }
    snprintf(k->lease, LEASE_CAP, "%s %s %s %s %s %s%s%s", f[0], f[3], f[4], f[5], f[6], f[7],
             nf > 8 ? " " : "", nf > 8 ? f[8] : "");
    int rc = broker_call(ss, s, RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME, ext, 6, M_CHANGE_INVISIBLE, 0);
    pb_done(ss->gs);
    if (rc != 0)
        change_answer(s, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection", NULL);
}

/* {{{ ForwardMessageToDeadLetterQueue
 *
 * As 5.x's proxy (ProducerProcessor.forwardMessageToDeadLetterQueue):
 * the broker's CONSUMER_SEND_MSG_BACK with delayLevel -1 (straight into
 * %DLQ%group, the broker's own rule: sendback.lua) naming the record by
 * the commit log offset the receipt handle carries, then, once stored,
 * the lease acknowledged so the message is not revived as well.  5.x
 * answers before that ack; here the answer waits for it, so a client
 * that sees OK will not be handed the message again. */

static void
forward_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg)
{
    Apache__Rocketmq__V2__ForwardMessageToDeadLetterQueueResponse rs =
        APACHE__ROCKETMQ__V2__FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    rs.status = &st;
    answer(s, &rs.base);
}

/* aclEnable: the broker's CONSUMER_SEND_MSG_BACK checks SUB on the
 * record's topic as the request's AccessKey (sendback.lua, as a remoting
 * client's signed request carries it); without it every send back of a
 * gRPC call was refused "No accessKey is configured".  Fills *f with the
 * call's account (ss->ak, already authenticated) and returns 1; 0 when
 * there is none (no ACL, a white-listed peer). */
static size_t
send_back_account(struct gsession *ss, struct rmq_field *f)
{
    if (ss->ak_len == 0)
        return 0;
    f->key.p = "AccessKey";
    f->key.len = 9;
    f->val.p = ss->ak;
    f->val.len = (uint32_t)ss->ak_len;
    return 1;
}

static void
forward_dlq(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    Apache__Rocketmq__V2__ForwardMessageToDeadLetterQueueRequest *rq =
        unpack_call(ss, s, &apache__rocketmq__v2__forward_message_to_dead_letter_queue_request__descriptor, n, p);
    if (rq == NULL)
        return;
    char f[HANDLE_FIELDS][128], newest[512];
    int gl = resource_name(rq->group, k->group, sizeof(k->group));
    int tl = resource_name(rq->topic, k->topic, sizeof(k->topic));
    const char *rh = gl >= 0 ? newest_handle(ss, k->group, rq->message_id, rq->receipt_handle, newest, sizeof(newest))
                             : rq->receipt_handle;
    int nf = rh != NULL ? split_handle(rh, f) : -1;
    if (gl < 0 || tl < 0) {
        pb_done(ss->gs);
        h2_finish(s, GRPC_INVALID_ARGUMENT, gl < 0 ? "consumer group is empty" : "topic is empty");
        call_done(s);
        return;
    }
    if (nf < 9) {
        pb_done(ss->gs);
        forward_answer(s, CODE(INVALID_RECEIPT_HANDLE), nf < 0 ? "receipt handle is not one this server issued"
                                                               : "commit log offset is empty");
        return;
    }
    /* Kept for the ack that follows: the handle itself. */
    if (call_lease(k) == NULL) {
        pb_done(ss->gs);
        forward_answer(s, CODE(INTERNAL_SERVER_ERROR), "out of memory");
        return;
    }
    snprintf(k->lease, LEASE_CAP, "%s", rh);
    char origin[256];
    snprintf(origin, sizeof(origin), "%s", k->topic);
    struct rmq_field ext[7];
    SET(ext[0], "offset", f[8]);
    SET(ext[1], "group", k->group);
    SET(ext[2], "delayLevel", "-1");
    SET(ext[3], "originMsgId", rq->message_id != NULL ? rq->message_id : "");
    SET(ext[4], "originTopic", origin);
    SET(ext[5], "maxReconsumeTimes", "0");
    size_t n_ext = 6 + send_back_account(ss, &ext[6]);
    int rc = broker_call(ss, s, RMQ_REQ_CONSUMER_SEND_MSG_BACK, ext, n_ext, M_FORWARD_DLQ, 0);
    pb_done(ss->gs);
    if (rc != 0)
        forward_answer(s, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection");
}

static void
on_forward_reply(struct gsession *ss, struct h2s *s, struct gcall *k, enum method m, const struct rmq_cmd *cmd)
{
    if (m == M_FORWARD_ACK) {
        /* Stored in the DLQ already: a failed ack only means the lease
         * may come back once more (5.x ignores it the same way). */
        if (cmd->code != RMQ_RESP_SUCCESS)
            log_info("gRPC ForwardMessageToDeadLetterQueue of group %s: the ack after it failed (%d)", k->group,
                     cmd->code);
        forward_answer(s, CODE(OK), "OK");
        return;
    }
    if (cmd->code != RMQ_RESP_SUCCESS) {
        char why[256];
        remark_of(cmd, why, sizeof(why));
        forward_answer(s, pop_code(cmd->code), why[0] != '\0' ? why : "forward to the dead letter queue failed");
        return;
    }
    char f[HANDLE_FIELDS][128], stored[600];
    if (k->lease == NULL || split_handle(k->lease, f) < 0) {
        forward_answer(s, CODE(OK), "OK");
        return;
    }
    lease_topic(stored, sizeof(stored), f[4], k->group, k->topic);
    struct rmq_field ext[5];
    SET(ext[0], "consumerGroup", k->group);
    SET(ext[1], "topic", stored);
    SET(ext[2], "queueId", f[6]);
    SET(ext[3], "extraInfo", k->lease);
    SET(ext[4], "offset", f[7]);
    /* As the forward's account (aclEnable): this runs from the reply
     * path, when the session's account is the last call's, which may be
     * another account's; its refused ack let the message come back. */
    memcpy(ss->ak, k->ak, k->ak_len);
    ss->ak_len = k->ak_len;
    if (broker_call(ss, s, RMQ_REQ_ACK_MESSAGE, ext, 5, M_FORWARD_ACK, 0) != 0)
        forward_answer(s, CODE(OK), "OK");
}

/* }}} */

/* {{{ RecallMessage
 *
 * As 5.x's proxy (RecallMessageActivity): the broker's RECALL_MESSAGE
 * with the topic and the handle SendMessage returned for a timer message
 * (SendResultEntry.recall_handle, the broker's reply); the broker decides
 * (recallMessageEnable, the handle, the time left) and answers the
 * message id. */

static void
recall_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg, const char *id)
{
    Apache__Rocketmq__V2__RecallMessageResponse rs = APACHE__ROCKETMQ__V2__RECALL_MESSAGE_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    rs.status = &st;
    rs.message_id = (char *)(id != NULL ? id : "");
    answer(s, &rs.base);
}

static void
recall_message(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    Apache__Rocketmq__V2__RecallMessageRequest *rq =
        unpack_call(ss, s, &apache__rocketmq__v2__recall_message_request__descriptor, n, p);
    if (rq == NULL)
        return;
    int tl = resource_name(rq->topic, k->topic, sizeof(k->topic));
    if (tl < 0 || rq->recall_handle == NULL || rq->recall_handle[0] == '\0') {
        pb_done(ss->gs);
        recall_answer(s, CODE(BAD_REQUEST), tl < 0 ? "topic is empty" : "recall handle is empty", NULL);
        return;
    }
    struct rmq_field ext[3];
    SET(ext[0], "producerGroup", GRPC_PRODUCER_GROUP);
    SET(ext[1], "topic", k->topic);
    SET(ext[2], "recallHandle", rq->recall_handle);
    int rc = broker_call(ss, s, RMQ_REQ_RECALL_MESSAGE, ext, 3, M_RECALL, 0);
    pb_done(ss->gs);
    if (rc != 0)
        recall_answer(s, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection", NULL);
}

static void
on_recall_reply(struct h2s *s, const struct rmq_cmd *cmd)
{
    char why[256], id[128];
    remark_of(cmd, why, sizeof(why));
    const struct rmq_str *mid = rmq_cmd_field(cmd, "msgId", 5);
    snprintf(id, sizeof(id), "%.*s", mid != NULL && mid->p != NULL ? (int)(mid->len < 100 ? mid->len : 100) : 0,
             mid != NULL && mid->p != NULL ? mid->p : "");
    if (cmd->code == RMQ_RESP_SUCCESS)
        recall_answer(s, CODE(OK), "OK", id);
    else if (cmd->code == RMQ_RESP_ILLEGAL_OPERATION)
        recall_answer(s, CODE(BAD_REQUEST), why, NULL);
    else
        recall_answer(s, v2_code(cmd->code), why[0] != '\0' ? why : "recall failed", NULL);
}

/* }}} */

/* {{{ Records past their attempts: to %DLQ% instead of the client
 *
 * As 5.x's proxy filters what it pops for a ReceiveMessage
 * (ReceiveMessageActivity's PopMessageResultFilter: TO_DLQ when the
 * record's reconsumeTimes reached the consumer's maxAttempts): such a
 * record is not handed out again but sent back with delayLevel -1 and
 * its lease acknowledged once stored, as ForwardMessageToDeadLetterQueue
 * does.  A non-FIFO PushConsumer never forwards by itself (it only
 * changes the invisible duration of a failed message), so this is how
 * its messages reach the DLQ.  Each job waits for the broker's reply on
 * the shadow conn; at most MAX_DLQ_JOBS per session (past it the record
 * is delivered, and the next receive tries again). */

#define MAX_DLQ_JOBS 1024

struct dlq_job {
    struct dlq_job *next;
    int32_t opaque;
    bool acking;                 /* the send back is stored: the ack is out */
    char group[256];
    char topic[600];             /* the lease's topic (the POP retry topic) */
    char qid[128];
    char offset[128];
    char extra[1200];
    /* aclEnable: the receive's account.  The ack after the send back goes
     * out from the reply path, when the session's account is whatever
     * call it handled last (another account's on a shared connection). */
    char ak[128];
    size_t ak_len;
};

static void
dlq_jobs_free(struct gsession *ss)
{
    while (ss->jobs != NULL) {
        struct dlq_job *j = ss->jobs;
        ss->jobs = j->next;
        free(j);
    }
    ss->njobs = 0;
}

/* The attempts a consumer of group may make: what its Telemetry
 * settings said (this session's), else a 5.x group's retryMaxTimes + 1;
 * 0: unknown (no filtering: the broker's own retry rules hold). */
static int32_t
max_attempts_of(struct gsession *ss, const char *group)
{
    if (ss->max_attempts > 0 && strcmp(ss->attempts_group, group) == 0)
        return ss->max_attempts;
    struct subscription_group g;
    struct config_table *t = config_table_groups();
    if (t != NULL && config_table_get(t, group, strlen(group), &g) == 0 && g.v5)
        return g.retry_max_times < INT32_MAX ? g.retry_max_times + 1 : INT32_MAX;
    return 0;
}

/* Starts sending record v of call k to the DLQ; false when it cannot (the
 * caller then delivers it). */
static bool
dlq_job_start(struct gsession *ss, struct gcall *k, const struct clog_view *v, const char *handle)
{
    char f[HANDLE_FIELDS][128];
    if (ss->njobs >= MAX_DLQ_JOBS || split_handle(handle, f) < 9)
        return false;
    struct dlq_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return false;
    snprintf(j->group, sizeof(j->group), "%s", k->group);
    lease_topic(j->topic, sizeof(j->topic), f[4], k->group, k->topic);
    snprintf(j->qid, sizeof(j->qid), "%s", f[6]);
    snprintf(j->offset, sizeof(j->offset), "%s", f[7]);
    snprintf(j->extra, sizeof(j->extra), "%s", handle);
    memcpy(j->ak, k->ak, k->ak_len);
    j->ak_len = k->ak_len;
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_CONSUMER_SEND_MSG_BACK, RMQ_SER_JSON);
    memcpy(ss->ak, k->ak, k->ak_len);
    ss->ak_len = k->ak_len;
    struct rmq_field ext[6];
    SET(ext[0], "offset", f[8]);
    SET(ext[1], "group", j->group);
    SET(ext[2], "delayLevel", "-1");
    SET(ext[3], "originTopic", k->topic);
    SET(ext[4], "maxReconsumeTimes", "0");
    cmd.ext = ext;
    cmd.ext_count = 5 + send_back_account(ss, &ext[5]);
    j->opaque = cmd.opaque;
    j->next = ss->jobs;
    ss->jobs = j;
    ss->njobs++;
    (void)v;
    if (broker_dispatch(ss, &cmd) != 0) {
        /* Unlinked here unless a reply came meanwhile. */
        for (struct dlq_job **pp = &ss->jobs; *pp != NULL; pp = &(*pp)->next)
            if (*pp == j) {
                *pp = j->next;
                ss->njobs--;
                free(j);
                return false;
            }
    }
    return true;
}

/* A reply for one of the session's DLQ jobs: true when it was one. */
static bool
dlq_job_reply(struct gsession *ss, const struct rmq_cmd *cmd)
{
    struct dlq_job **pp = &ss->jobs;
    while (*pp != NULL && (*pp)->opaque != cmd->opaque)
        pp = &(*pp)->next;
    struct dlq_job *j = *pp;
    if (j == NULL)
        return false;
    if (!j->acking && cmd->code == RMQ_RESP_SUCCESS) {
        struct rmq_cmd ack;
        cmd_init(ss, &ack, RMQ_REQ_ACK_MESSAGE, RMQ_SER_JSON);
        struct rmq_field ext[5];
        SET(ext[0], "consumerGroup", j->group);
        SET(ext[1], "topic", j->topic);
        SET(ext[2], "queueId", j->qid);
        SET(ext[3], "extraInfo", j->extra);
        SET(ext[4], "offset", j->offset);
        ack.ext = ext;
        ack.ext_count = 5;
        j->opaque = ack.opaque;
        j->acking = true;
        memcpy(ss->ak, j->ak, j->ak_len);
        ss->ak_len = j->ak_len;
        if (broker_dispatch(ss, &ack) == 0)
            return true;
        /* The job may have been answered (and freed) inside; look again. */
        pp = &ss->jobs;
        while (*pp != NULL && *pp != j)
            pp = &(*pp)->next;
        if (*pp == NULL)
            return true;
    } else if (cmd->code != RMQ_RESP_SUCCESS) {
        char why[256];
        log_info("gRPC: %s of a record of group %s past its attempts failed (%d): %s",
                 j->acking ? "the ack" : "the move to the DLQ", j->group, cmd->code,
                 remark_of(cmd, why, sizeof(why)));
    }
    *pp = j->next;
    ss->njobs--;
    free(j);
    return true;
}

/* }}} */

/* v2 codes for the POP family's refusals. */
static Apache__Rocketmq__V2__Code
pop_code(int32_t remoting)
{
    switch (remoting) {
    case RMQ_RESP_SUCCESS: return CODE(OK);
    case RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST: return CODE(CONSUMER_GROUP_NOT_FOUND);
    case RMQ_RESP_TOPIC_NOT_EXIST: return CODE(TOPIC_NOT_FOUND);
    case RMQ_RESP_NO_MESSAGE: return CODE(INVALID_RECEIPT_HANDLE);
    case RMQ_RESP_INVALID_PARAMETER: return CODE(BAD_REQUEST);
    case RMQ_RESP_NO_PERMISSION: return CODE(FORBIDDEN);
    default: return v2_code(remoting);
    }
}

/* A record's properties split for a v2 Message (5.x's mapping back of a
 * MessageExt): the system ones it names apart, rmq's and the broker's
 * internal ones dropped, the rest the user's.  The strings point into
 * `copy` (a NUL-terminated copy of the properties, cut in place). */
struct v2_props {
    Apache__Rocketmq__V2__Message__UserPropertiesEntry ents[64];
    Apache__Rocketmq__V2__Message__UserPropertiesEntry *ep[64];
    size_t ne, nk;
    char *keys[16];
    char *tag, *uniq, *group, *retry_topic, *born_host;
};

/* 5.x's proxy passes on as user properties all but MessageConst's
 * STRING_HASH_SET (GrpcConverter.buildUserAttributes): these names (TAGS,
 * KEYS, UNIQ_KEY, RETRY_TOPIC are taken before), so the broker's own
 * (CLUSTER, TIMER_*, ...) never reach an application. */
static int
prop_cmp(const void *key, const void *elem)
{
    return strcmp(key, *(const char *const *)elem);
}

static bool
internal_prop(const char *k)
{
    /* Sorted (strcmp order: bsearch), six compares instead of up to 47. */
    static const char *const names[] = {
        "1ST_POP_TIME", "ARRIVE_TIME", "BORN_TIMESTAMP", "BUYER_ID", "CLUSTER", "CONSUME_START_TIME",
        "CORRECTION_FLAG", "CORRELATION_ID", "DELAY", "DLQ_ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC",
        "DUP_INFO", "EXTEND_UNIQ_INFO", "INNER_MULTI_QUEUE_OFFSET", "INSTANCE_ID", "MAX_OFFSET",
        "MAX_RECONSUME_TIMES", "MIN_OFFSET", "MQ2_FLAG", "MSG_REGION", "MSG_TYPE", "ORIGIN_MESSAGE_ID",
        "PGROUP", "POP_CK", "POP_CK_OFFSET", "PUSH_REPLY_TIME", "REAL_QID", "REAL_TOPIC", "RECONSUME_TIME",
        "REPLY_TO_CLIENT", "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS",
        "TIMER_DEL_UNIQKEY", "TIMER_DEQUEUE_MS", "TIMER_ENQUEUE_MS", "TIMER_OUT_MS", "TIMER_ROLL_TIMES",
        "TRACE_ON", "TRANSFER_FLAG", "TRAN_MSG", "TRAN_PREPARED_QUEUE_OFFSET", "TTL", "WAIT", "__BORNHOST",
        "__CRC32#",
    };
    if (bsearch(k, names, sizeof(names) / sizeof(names[0]), sizeof(names[0]), prop_cmp) != NULL)
        return true;
    return strncmp(k, "TRANSACTION_CHECK", 17) == 0;
}

/* Is key k (klen bytes) the literal lit? */
#define KEY_IS(k, klen, lit) ((klen) == sizeof(lit) - 1 && memcmp((k), (lit), sizeof(lit) - 1) == 0)

static void
props_split(char *copy, size_t len, struct v2_props *o)
{
    o->ne = o->nk = 0;
    o->tag = o->uniq = o->group = o->retry_topic = o->born_host = NULL;
    char *kv = copy, *end = copy + len;
    while (kv < end && *kv != '\0') {
        /* memchr over the known length (strchr was a scan per separator
         * over the rest of the copy). */
        char *next = memchr(kv, PROP_SEP, (size_t)(end - kv));
        char *stop = next != NULL ? next : end;
        *stop = '\0';
        char *sep = memchr(kv, NAME_VALUE_SEP, (size_t)(stop - kv));
        if (sep != NULL) {
            *sep = '\0';
            size_t kl = (size_t)(sep - kv);
            char *val = sep + 1;
            if (KEY_IS(kv, kl, "TAGS")) {
                o->tag = val;
            } else if (KEY_IS(kv, kl, "UNIQ_KEY")) {
                o->uniq = val;
            } else if (KEY_IS(kv, kl, "__SHARDINGKEY")) {
                o->group = val;
            } else if (KEY_IS(kv, kl, "RETRY_TOPIC")) {
                o->retry_topic = val;
            } else if (KEY_IS(kv, kl, "__BORNHOST")) {
                o->born_host = val;
            } else if (KEY_IS(kv, kl, "KEYS")) {
                char *save = NULL;
                for (char *t = strtok_r(val, " ", &save); t != NULL && o->nk < 16; t = strtok_r(NULL, " ", &save))
                    o->keys[o->nk++] = t;
            } else if (!internal_prop(kv) && o->ne < 64) {
                apache__rocketmq__v2__message__user_properties_entry__init(&o->ents[o->ne]);
                o->ents[o->ne].key = kv;
                o->ents[o->ne].value = val;
                o->ep[o->ne] = &o->ents[o->ne];
                o->ne++;
            }
        }
        if (next == NULL)
            break;
        kv = next + 1;
    }
}

/* GrpcConverter's born_host: __BORNHOST, else the record's born host
 * address (getBornHostString: the address, no port), in ip.  IPv4 by
 * hand (inet_ntop was 1,700 instructions a message). */
static char *
born_host(const struct v2_props *pr, const struct clog_view *v, char ip[64])
{
    if (pr->born_host != NULL)
        return pr->born_host;
    if (v->born != NULL && v->born_len == 4) {
        char *p = ip;
        for (int i = 0; i < 4; i++) {
            if (i > 0)
                *p++ = '.';
            p += fmt_i64(p, v->born[i]);
        }
        *p = '\0';
        return ip;
    }
    if (v->born == NULL || inet_ntop(v->born_len == 16 ? AF_INET6 : AF_INET, v->born, ip, 64) == NULL)
        ip[0] = '\0';
    return ip;
}

/* What every record of one POP answer shares: the lease's popTime,
 * invisibleTime and reviveQid as the broker wrote them, the broker the
 * handles name, and startOffsetInfo ("retry queueId offset;...") read
 * once into a table instead of searched per record. */
#define POP_STARTS_MAX 64
struct pop_batch {
    const struct rmq_str *pt, *it, *rq;
    int32_t max_attempts;       /* the group's (max_attempts_of), once an answer */
    uint8_t born[4];            /* the last IPv4 born host formatted, and its text */
    char born_ip[64];
    const char *broker;
    size_t broker_len;
    int nstarts;
    struct { int32_t retry, qid; int64_t off; } starts[POP_STARTS_MAX];
};

static void
pop_batch_init(struct pop_batch *b, const struct rmq_cmd *cmd, const char *broker)
{
    b->pt = b->it = b->rq = NULL;
    const struct rmq_str *si = NULL;
    for (uint32_t j = 0; j < cmd->ext_count; j++) {
        const struct rmq_field *f = &cmd->ext[j];
        if (f->key.p == NULL)
            continue;
        if (f->key.len == 7 && memcmp(f->key.p, "popTime", 7) == 0)
            b->pt = &f->val;
        else if (f->key.len == 13 && memcmp(f->key.p, "invisibleTime", 13) == 0)
            b->it = &f->val;
        else if (f->key.len == 9 && memcmp(f->key.p, "reviveQid", 9) == 0)
            b->rq = &f->val;
        else if (f->key.len == 15 && memcmp(f->key.p, "startOffsetInfo", 15) == 0)
            si = &f->val;
    }
    b->broker = broker;
    b->broker_len = strlen(broker);
    b->max_attempts = 0;
    b->born_ip[0] = '\0';
    b->nstarts = 0;
    if (si == NULL || si->p == NULL)
        return;
    size_t at = 0;
    while (at < si->len && b->nstarts < POP_STARTS_MAX) {
        int64_t r, q, o;
        if (!scan_i64(si->p, si->len, &at, &r) || at >= si->len || si->p[at++] != ' ' ||
            !scan_i64(si->p, si->len, &at, &q) || at >= si->len || si->p[at++] != ' ' ||
            !scan_i64(si->p, si->len, &at, &o))
            break;
        b->starts[b->nstarts].retry = (int32_t)r;
        b->starts[b->nstarts].qid = (int32_t)q;
        b->starts[b->nstarts].off = o;
        b->nstarts++;
        if (at < si->len && si->p[at] == ';')
            at++;
        else
            break;
    }
}

/* A field the broker gave as text, or "0" when it gave none. */
static char *
put_field(char *p, const struct rmq_str *f)
{
    if (f == NULL || f->p == NULL) {
        *p++ = '0';
        return p;
    }
    size_t n = f->len < 24 ? f->len : 24;
    memcpy(p, f->p, n);
    return p + n;
}

/* The receipt handle of record v: ExtraInfoUtil's eight fields
 * (ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId
 * queueOffset), then its commit log offset; built by hand (snprintf was
 * 3,500 instructions a message).  Returns its length (< cap). */
static size_t
make_handle(char *out, size_t cap, const struct pop_batch *b, const struct clog_view *v, bool retry)
{
    /* ckQueueOffset: the batch's start on this queue, else the record's
     * own offset. */
    int64_t ck = v->qoff;
    for (int i = 0; i < b->nstarts; i++) {
        if (b->starts[i].retry == (retry ? 1 : 0) && b->starts[i].qid == v->qid) {
            ck = b->starts[i].off;
            break;
        }
    }
    size_t bl = b->broker_len < 200 ? b->broker_len : 200;
    if (cap < 9 * 24 + bl)
        return 0;
    char *p = out;
    p += fmt_i64(p, ck);
    *p++ = ' ';
    p = put_field(p, b->pt);
    *p++ = ' ';
    p = put_field(p, b->it);
    *p++ = ' ';
    p = put_field(p, b->rq);
    *p++ = ' ';
    *p++ = retry ? '1' : '0';
    *p++ = ' ';
    memcpy(p, b->broker, bl);
    p += bl;
    *p++ = ' ';
    p += fmt_i64(p, v->qid);
    *p++ = ' ';
    p += fmt_i64(p, v->qoff);
    *p++ = ' ';
    p += fmt_i64(p, v->phy);
    *p = '\0';
    return (size_t)(p - out);
}

/* How long a message popped for a call that could not have it stays
 * invisible: 5.x's proxy gives such messages back with a 1 s lease
 * (ReceiveMessageResponseStreamWriter's NACK_INVISIBLE_TIME). */
#define NACK_INVISIBLE_MS 1000

/* The records left at p[0..left) of a POP answer (b) are given back:
 * one CHANGE_MESSAGE_INVISIBLETIME each to NACK_INVISIBLE_MS (at least
 * the broker's minimum), whose replies nobody waits for (no pending
 * entry: on_reply drops them).  For a call gone before its answer (a
 * client's RST_STREAM, its deadline) and for records the stream could
 * not take, which otherwise stayed invisible for the whole lease. */
static void
nack_records(struct gsession *ss, const char *group, const char *ak, size_t ak_len, const uint8_t *p,
             size_t left, const struct pop_batch *b)
{
    /* As the receive's account (aclEnable): the session's is the last
     * call's, which may be another account's, whose CHANGE the ACL
     * check refuses (the message then stayed invisible for the lease).
     * The session's is put back after: this runs from the reply path,
     * and the give-back must not change what any other request is
     * checked as. */
    char saved_ak[sizeof(ss->ak)];
    size_t saved_len = ss->ak_len;
    memcpy(saved_ak, ss->ak, saved_len);
    if (ak != ss->ak) {
        memcpy(ss->ak, ak, ak_len);
        ss->ak_len = ak_len;
    }
    int64_t ms = NACK_INVISIBLE_MS > ss->gs->conf.invisible_min_ms ? NACK_INVISIBLE_MS
                                                                   : ss->gs->conf.invisible_min_ms;
    char inv[24], qid[24], off[24], handle[400], topic[256];
    fmt_i64(inv, ms);
    while (p != NULL && left > 0) {
        struct clog_view v;
        if (clog_decode(p, left, -1, false, &v) != CLOG_REC || v.size == 0 || v.size > left)
            break;
        bool retry = v.topic_len >= 7 && memcmp(v.topic, "%RETRY%", 7) == 0;
        size_t tl = v.topic_len < sizeof(topic) ? v.topic_len : sizeof(topic) - 1;
        memcpy(topic, v.topic, tl);
        topic[tl] = '\0';
        if (make_handle(handle, sizeof(handle), b, &v, retry) > 0) {
            fmt_i64(qid, v.qid);
            fmt_i64(off, v.qoff);
            struct rmq_cmd cmd;
            cmd_init(ss, &cmd, RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME, RMQ_SER_JSON);
            struct rmq_field ext[6];
            SET(ext[0], "consumerGroup", group);
            SET(ext[1], "topic", topic);
            SET(ext[2], "queueId", qid);
            SET(ext[3], "extraInfo", handle);
            SET(ext[4], "offset", off);
            SET(ext[5], "invisibleTime", inv);
            cmd.ext = ext;
            cmd.ext_count = 6;
            if (broker_dispatch(ss, &cmd) != 0)
                log_warn("gRPC: a message popped for a gone ReceiveMessage of group %s stays invisible "
                         "(%s %d@%lld)", group, topic, v.qid, (long long)v.qoff);
        }
        p += v.size;
        left -= v.size;
    }
    memcpy(ss->ak, saved_ak, saved_len);
    ss->ak_len = saved_len;
}

/* The broker a POP answer's receipt handles name: in cluster mode the
 * one that answered (upstream.c), so that an ack goes back to it; else
 * this one.  buf holds the name (pop_batch keeps the pointer). */
static const char *
answer_broker(struct gsession *ss, const struct rmq_cmd *cmd, char *buf, size_t cap)
{
    if (ss->gs->up != NULL) {
        const struct rmq_str *pb = rmq_cmd_field(cmd, "proxyBrokerName", 15);
        if (pb != NULL && pb->p != NULL && pb->len > 0 && pb->len < cap) {
            memcpy(buf, pb->p, pb->len);
            buf[pb->len] = '\0';
            return buf;
        }
    }
    return ss->gs->conf.broker_name;
}

/* A POP answer whose call is gone: everything it took goes back. */
static void
nack_popped(struct gsession *ss, const char *group, const char *ak, size_t ak_len, const struct rmq_cmd *cmd)
{
    if (ss->shadow == NULL || cmd->body == NULL)
        return;
    char bname[128];
    struct pop_batch b;
    pop_batch_init(&b, cmd, answer_broker(ss, cmd, bname, sizeof(bname)));
    nack_records(ss, group, ak, ak_len, cmd->body, cmd->body_len, &b);
}

/* One popped record as a v2 Message (5.x's mapping of a MessageExt),
 * packed by hand (recvpack.h) straight into the stream's output.  The
 * strings it needs are cut from a copy of its properties.  Returns 0 or
 * -1. */
static int
send_popped(struct h2s *s, struct gcall *k, const struct clog_view *v, struct pop_batch *b)
{
    /* The properties' copy on the stack when it fits (one a message). */
    char small[1024];
    char *copy = v->props_len < sizeof(small) ? small : malloc(v->props_len + 1);
    if (copy == NULL)
        return -1;
    /* Up to a NUL, as the C string it was read as before. */
    size_t plen = strnlen((const char *)v->props, v->props_len);
    memcpy(copy, v->props, plen);
    copy[plen] = '\0';
    struct v2_props pr;
    props_split(copy, plen, &pr);
    bool retry = v->topic_len >= 7 && memcmp(v->topic, "%RETRY%", 7) == 0;
    char handle[400];
    if (make_handle(handle, sizeof(handle), b, v, retry) == 0) {
        if (copy != small)
            free(copy);
        return -1;
    }
    int32_t max = b->max_attempts;
    if (max > 0 && v->reconsume >= max && dlq_job_start(k->ss, k, v, handle)) {
        if (copy != small)
            free(copy);
        return 0;
    }
    PbResource res = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    res.name = retry && pr.retry_topic != NULL ? pr.retry_topic : k->topic;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Digest dg = APACHE__ROCKETMQ__V2__DIGEST__INIT;
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Timestamp storeT = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Duration inv = GOOGLE__PROTOBUF__DURATION__INIT;
    born.seconds = v->born_ts / 1000;
    born.nanos = (int32_t)(v->born_ts % 1000) * 1000000;
    storeT.seconds = v->store_ts / 1000;
    storeT.nanos = (int32_t)(v->store_ts % 1000) * 1000000;
    inv.seconds = k->invisible_ms / 1000;
    inv.nanos = (int32_t)(k->invisible_ms % 1000) * 1000000;
    sp.tag = pr.tag != NULL ? pr.tag : (char *)"";
    sp.n_keys = pr.nk;
    sp.keys = pr.keys;
    sp.message_id = pr.uniq != NULL ? pr.uniq : (char *)"";
    /* The SDKs check it (Java logs an error for none), of the body as
     * stored. */
    char crc[16];
    dg.type = APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32;
    dg.checksum = (char *)body_crc(k->ss, v->body, v->body_len, crc);
    sp.body_digest = &dg;
    sp.body_encoding = (v->sysflag & SYSFLAG_COMPRESSED) ? APACHE__ROCKETMQ__V2__ENCODING__GZIP
                                                         : APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp.message_type = pr.group != NULL ? APACHE__ROCKETMQ__V2__MESSAGE_TYPE__FIFO
                                    : APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    sp.message_group = pr.group != NULL ? pr.group : (char *)"";
    sp.born_timestamp = &born;
    char bip[64];
    if (pr.born_host == NULL && v->born != NULL && v->born_len == 4) {
        /* A batch's records mostly share their producer's address. */
        if (b->born_ip[0] == '\0' || memcmp(b->born, v->born, 4) != 0) {
            memcpy(b->born, v->born, 4);
            born_host(&pr, v, b->born_ip);
        }
        sp.born_host = b->born_ip;
    } else {
        sp.born_host = born_host(&pr, v, bip);
    }
    sp.store_timestamp = &storeT;
    sp.receipt_handle = handle;
    sp.queue_id = v->qid;
    sp.queue_offset = v->qoff;
    sp.invisible_duration = &inv;
    sp.delivery_attempt = v->reconsume + 1;
    PbMessage m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    m.topic = &res;
    m.n_user_properties = pr.ne;
    m.user_properties = pr.ep;
    m.system_properties = &sp;
    m.body.data = (uint8_t *)v->body;
    m.body.len = v->body_len;
    /* ReceiveMessageResponse{message}: sized once, written in place. */
    struct recvpack_sizes z;
    size_t n = recvpack_size(&m, &z);
    uint8_t *out = h2_send_reserve(s, n);
    int rc = -1;
    if (out != NULL && recvpack_write(out, &m, &z) == n)
        rc = h2_send_commit(s, n);
    /* Its lease kept only once the message is the client's: one the
     * stream did not take is given back by the caller, and a renewal
     * would hide it again. */
    if (rc == 0 && k->auto_renew && pr.uniq != NULL)
        renew_keep(k, pr.uniq, handle);
    if (copy != small)
        free(copy);
    return rc;
}

static void
receive_status(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg)
{
    Apache__Rocketmq__V2__ReceiveMessageResponse out = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    out.content_case = APACHE__ROCKETMQ__V2__RECEIVE_MESSAGE_RESPONSE__CONTENT_STATUS;
    out.status = &st;
    if (reply_msg(s, &out.base) != 0)
        h2_finish(s, GRPC_INTERNAL, "cannot encode the response");
    else
        h2_finish(s, GRPC_OK, NULL);
    call_done(s);
}

static void
on_pop_reply(struct gsession *ss, struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd)
{
    char why[256];
    remark_of(cmd, why, sizeof(why));
    if (cmd->code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED) {
        snprintf(why, sizeof(why), NOT_SERVED_FMT, method_name(k->m));
        h2_finish(s, GRPC_UNIMPLEMENTED, why);
        call_done(s);
        return;
    }
    /* As 5.x's proxy reads a broker's POP answer (MQClientAPIImpl
     * processPopResponse): PULL_NOT_FOUND is nothing found too, and a
     * 5.x Java broker answers POLLING_FULL (its remark NO_MESSAGE_IN_QUEUE)
     * past popPollingSize held POPs of one queue: TOO_MANY_REQUESTS. */
    if (cmd->code == RMQ_RESP_POLLING_TIMEOUT || cmd->code == RMQ_RESP_PULL_NOT_FOUND) {
        receive_status(s, CODE(MESSAGE_NOT_FOUND), "no new message");
        return;
    }
    if (cmd->code == RMQ_RESP_POLLING_FULL) {
        receive_status(s, CODE(TOO_MANY_REQUESTS), "polling full");
        return;
    }
    if (cmd->code != RMQ_RESP_SUCCESS) {
        receive_status(s, pop_code(cmd->code), why);
        return;
    }
    char bname[128];
    struct pop_batch b;
    pop_batch_init(&b, cmd, answer_broker(ss, cmd, bname, sizeof(bname)));
    b.max_attempts = max_attempts_of(ss, k->group);
    const uint8_t *p = cmd->body;
    size_t left = cmd->body_len;
    while (p != NULL && left > 0) {
        struct clog_view v;
        if (clog_decode(p, left, -1, false, &v) != CLOG_REC || v.size == 0 || v.size > left)
            break;
        if (send_popped(s, k, &v, &b) != 0) {
            /* The stream took no more: what is left goes back. */
            nack_records(ss, k->group, k->ak, k->ak_len, p, left, &b);
            break;
        }
        p += v.size;
        left -= v.size;
    }
    receive_status(s, CODE(OK), "OK");
}

static void
ack_answer(struct h2s *s, struct gcall *k)
{
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    Apache__Rocketmq__V2__AckMessageResultEntry *es = calloc(k->n, sizeof(*es));
    Apache__Rocketmq__V2__AckMessageResultEntry **ep = calloc(k->n, sizeof(*ep));
    if (es == NULL || ep == NULL) {
        free(es);
        free(ep);
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        call_done(s);
        return;
    }
    bool same = true;
    for (size_t i = 0; i < k->n; i++) {
        apache__rocketmq__v2__ack_message_result_entry__init(&es[i]);
        if (k->statuses[i].message == NULL)
            k->statuses[i].message = MSG_OK;
        es[i].message_id = k->entries[i].message_id;
        es[i].receipt_handle = k->entries[i].transaction_id;
        es[i].status = &k->statuses[i];
        ep[i] = &es[i];
        if (k->statuses[i].code != k->statuses[0].code)
            same = false;
    }
    st.code = same ? k->statuses[0].code : CODE(MULTIPLE_RESULTS);
    st.message = same ? k->statuses[0].message : (char *)"acks have different results";
    /* AckMessageResponse packed by hand (recvpack.h), in place. */
    size_t n = recvpack_ack_response(NULL, &st, ep, k->n);
    uint8_t *b = h2_send_reserve(s, n);
    if (b != NULL) {
        recvpack_ack_response(b, &st, ep, k->n);
        h2_set_code(s, (int32_t)st.code);
    }
    if (b == NULL || h2_send_commit(s, n) != 0)
        h2_finish(s, GRPC_INTERNAL, "cannot encode the response");
    else
        h2_finish(s, GRPC_OK, NULL);
    call_done(s);
    free(es);
    free(ep);
}

static void
change_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg, const char *handle)
{
    Apache__Rocketmq__V2__ChangeInvisibleDurationResponse rs =
        APACHE__ROCKETMQ__V2__CHANGE_INVISIBLE_DURATION_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    rs.status = &st;
    rs.receipt_handle = (char *)(handle != NULL ? handle : "");
    answer(s, &rs.base);
}

/* }}} */

/* {{{ UpdateOffset, GetOffset, QueryOffset (5.x's PullConsumer)
 *
 * Each one broker request, as a remoting consumer makes it:
 * RMQ_REQ_UPDATE_CONSUMER_OFFSET and RMQ_REQ_QUERY_CONSUMER_OFFSET for the group's
 * committed offset of one queue, RMQ_REQ_GET_MIN_OFFSET / RMQ_REQ_GET_MAX_OFFSET /
 * RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP for QueryOffset's BEGINNING / END /
 * TIMESTAMP.  The queue is the MessageQueue's topic and id (local mode:
 * the broker's own queue ids, as QueryRoute gives them). */

static void
offset_answer(struct h2s *s, enum method m, Apache__Rocketmq__V2__Code code, const char *msg, int64_t offset)
{
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    if (m == M_UPDATE_OFFSET) {
        Apache__Rocketmq__V2__UpdateOffsetResponse rs = APACHE__ROCKETMQ__V2__UPDATE_OFFSET_RESPONSE__INIT;
        rs.status = &st;
        answer(s, &rs.base);
    } else if (m == M_GET_OFFSET) {
        Apache__Rocketmq__V2__GetOffsetResponse rs = APACHE__ROCKETMQ__V2__GET_OFFSET_RESPONSE__INIT;
        rs.status = &st;
        rs.offset = offset;
        answer(s, &rs.base);
    } else {
        Apache__Rocketmq__V2__QueryOffsetResponse rs = APACHE__ROCKETMQ__V2__QUERY_OFFSET_RESPONSE__INIT;
        rs.status = &st;
        rs.offset = offset;
        answer(s, &rs.base);
    }
}

static void
on_offset_reply(struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd)
{
    if (cmd->code == RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED) {
        h2_finish(s, GRPC_UNIMPLEMENTED, "not served by this broker");
        call_done(s);
        return;
    }
    char msg[256];
    remark_of(cmd, msg, sizeof(msg));
    if (cmd->code == RMQ_RESP_QUERY_NOT_FOUND) {
        /* the group has committed nothing on this queue yet */
        offset_answer(s, k->m, CODE(OFFSET_NOT_FOUND), msg[0] != '\0' ? msg : "no offset committed", 0);
        return;
    }
    if (cmd->code != RMQ_RESP_SUCCESS) {
        offset_answer(s, k->m, pop_code(cmd->code), msg, 0);
        return;
    }
    const struct rmq_str *off = rmq_cmd_field(cmd, "offset", 6);
    int64_t v = field_i64(off, 0);
    offset_answer(s, k->m, CODE(OK), "OK", v);
}

static void
offset_rpc(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    const ProtobufCMessageDescriptor *d =
        k->m == M_UPDATE_OFFSET ? &apache__rocketmq__v2__update_offset_request__descriptor
        : k->m == M_GET_OFFSET ? &apache__rocketmq__v2__get_offset_request__descriptor
                               : &apache__rocketmq__v2__query_offset_request__descriptor;
    ProtobufCMessage *rq = unpack_call(ss, s, d, n, p);
    if (rq == NULL)
        return;
    const PbResource *group = NULL;
    const PbQueue *mq;
    int64_t commit = 0, ts = 0;
    int32_t code;
    if (k->m == M_UPDATE_OFFSET) {
        Apache__Rocketmq__V2__UpdateOffsetRequest *u = (void *)rq;
        group = u->group;
        mq = u->message_queue;
        commit = u->offset;
        code = RMQ_REQ_UPDATE_CONSUMER_OFFSET;
    } else if (k->m == M_GET_OFFSET) {
        Apache__Rocketmq__V2__GetOffsetRequest *g = (void *)rq;
        group = g->group;
        mq = g->message_queue;
        code = RMQ_REQ_QUERY_CONSUMER_OFFSET;
    } else {
        Apache__Rocketmq__V2__QueryOffsetRequest *q = (void *)rq;
        mq = q->message_queue;
        switch (q->query_offset_policy) {
        case APACHE__ROCKETMQ__V2__QUERY_OFFSET_POLICY__BEGINNING: code = RMQ_REQ_GET_MIN_OFFSET; break;
        case APACHE__ROCKETMQ__V2__QUERY_OFFSET_POLICY__END: code = RMQ_REQ_GET_MAX_OFFSET; break;
        case APACHE__ROCKETMQ__V2__QUERY_OFFSET_POLICY__TIMESTAMP:
            code = RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP;
            ts = q->timestamp != NULL ? q->timestamp->seconds * 1000 + q->timestamp->nanos / 1000000 : 0;
            break;
        default: code = -1; break;
        }
    }
    int tl = mq != NULL ? resource_name(mq->topic, k->topic, sizeof(k->topic)) : -1;
    int gl = group != NULL ? resource_name(group, k->group, sizeof(k->group)) : 0;
    if (tl < 0 || gl < 0 || (k->m != M_QUERY_OFFSET && gl == 0) || code < 0 || mq->id < 0) {
        pb_done(ss->gs);
        offset_answer(s, k->m, CODE(BAD_REQUEST),
                      code < 0 ? "unknown query_offset_policy"
                               : "a group (but for QueryOffset) and a message queue (topic, id >= 0) are needed", 0);
        return;
    }
    char qid[16], num[24];
    snprintf(qid, sizeof(qid), "%d", (int)mq->id);
    fmt_i64(num, k->m == M_UPDATE_OFFSET ? commit : ts);
    char bname[128] = "";
    if (ss->gs->up != NULL && mq->broker != NULL && mq->broker->name != NULL)
        snprintf(bname, sizeof(bname), "%s", mq->broker->name);
    pb_done(ss->gs);
    struct rmq_field ext[5];
    uint32_t ne = 0;
    SET(ext[ne], "topic", k->topic); ne++;
    if (bname[0] != '\0') {
        SET(ext[ne], "bname", bname); ne++;
    }
    SET(ext[ne], "queueId", qid); ne++;
    if (k->m != M_QUERY_OFFSET) {
        SET(ext[ne], "consumerGroup", k->group); ne++;
    }
    if (k->m == M_UPDATE_OFFSET) {
        SET(ext[ne], "commitOffset", num); ne++;
    } else if (code == RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP) {
        SET(ext[ne], "timestamp", num); ne++;
    }
    if (broker_call(ss, s, code, ext, ne, k->m, 0) != 0)
        offset_answer(s, k->m, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection", 0);
}

/* }}} */

/* {{{ EndTransaction */

static void
end_tx_answer(struct h2s *s, Apache__Rocketmq__V2__Code code, const char *msg)
{
    Apache__Rocketmq__V2__EndTransactionResponse rs = APACHE__ROCKETMQ__V2__END_TRANSACTION_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    st.code = code;
    st.message = (char *)msg;
    rs.status = &st;
    answer(s, &rs.base);
}

/* "HEX@N" (see on_reply): the commit log offset (the msgId's last 16 hex
 * digits) and the half message's queue offset.  0 or -1. */
static int
parse_tx_id(const char *tid, long long *clog, long long *qoff)
{
    const char *at = strchr(tid, '@');
    if (at == NULL || at - tid < 16 || at[1] == '\0')
        return -1;
    unsigned long long v = 0;
    for (const char *p = at - 16; p < at; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0'
              : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
              : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    char *end;
    errno = 0;
    long long q = strtoll(at + 1, &end, 10);
    if (*end != '\0' || errno != 0 || q < 0 || v > (unsigned long long)INT64_MAX)
        return -1;
    *clog = (long long)v;
    *qoff = q;
    return 0;
}

/* Cluster mode: the transaction's entry in gs->tx, taken. */
static bool
tx_known(struct grpc_server *gs, const Apache__Rocketmq__V2__EndTransactionRequest *rq)
{
    char topic[256];
    if (resource_name(rq->topic, topic, sizeof(topic)) < 0)
        return false;
    return txdata_take(gs->tx, topic, rq->transaction_id, clock_mono_ns() / 1000000);
}

/* RMQ_REQ_END_TRANSACTION of the request kept in k->lease ("tranStateTableOffset
 * commitLogOffset commitOrRollback fromCheck msgId transactionId"), as
 * producer group group. */
static int
end_tx_call(struct gsession *ss, struct h2s *s, struct gcall *k, const char *group)
{
    char qs[24], cs[24], ws[8], chk[4], mid[600], tid[600];
    if (sscanf(k->lease, "%23s %23s %7s %3s %599s %599s", qs, cs, ws, chk, mid, tid) != 6)
        return -1;
    bool check = strcmp(chk, "1") == 0;
    struct rmq_field ext[7] = {
        { { "producerGroup", 13 }, { group, (uint32_t)strlen(group) } },
        { { "tranStateTableOffset", 20 }, { qs, (uint32_t)strlen(qs) } },
        { { "commitLogOffset", 15 }, { cs, (uint32_t)strlen(cs) } },
        { { "commitOrRollback", 16 }, { ws, (uint32_t)strlen(ws) } },
        { { "fromTransactionCheck", 20 }, { check ? "true" : "false", check ? 4 : 5 } },
        { { "msgId", 5 }, { mid, (uint32_t)strlen(mid) } },
        { { "transactionId", 13 }, { tid, (uint32_t)strlen(tid) } },
    };
    return broker_call(ss, s, RMQ_REQ_END_TRANSACTION, ext, 7, M_END_TRANSACTION, 0);
}

static void
end_transaction(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    Apache__Rocketmq__V2__EndTransactionRequest *rq = unpack_call(ss, s, &apache__rocketmq__v2__end_transaction_request__descriptor, n, p);
    if (rq == NULL)
        return;
    long long clog = 0, qoff = 0;
    int what = rq->resolution == APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__COMMIT ? TRANSACTION_COMMIT_TYPE
             : rq->resolution == APACHE__ROCKETMQ__V2__TRANSACTION_RESOLUTION__ROLLBACK ? TRANSACTION_ROLLBACK_TYPE
             : 0;
    if (what == 0) {
        /* Unknown: nothing decided, the broker's check asks again. */
        end_tx_answer(s, CODE(OK), "OK");
    } else if (rq->transaction_id == NULL || parse_tx_id(rq->transaction_id, &clog, &qoff) != 0) {
        end_tx_answer(s, CODE(INVALID_TRANSACTION_ID), "transaction id is not one this server issued");
    } else if (rq->message_id == NULL || rq->message_id[0] == '\0') {
        end_tx_answer(s, CODE(ILLEGAL_MESSAGE_ID), "message id is empty");
    } else if (ss->gs->tx != NULL && !tx_known(ss->gs, rq)) {
        /* Cluster mode, as 5.x's proxy: only a transaction this worker
         * sent or relayed a check of, once (txdata.h).  5.x's message;
         * its code there is INTERNAL_SERVER_ERROR (its
         * TRANSACTION_DATA_NOT_FOUND has no gRPC code), here the one
         * rmq's broker and local mode answer for a decided transaction. */
        end_tx_answer(s, CODE(INVALID_TRANSACTION_ID), "cannot found transaction data");
    } else {
        bool check = rq->source == APACHE__ROCKETMQ__V2__TRANSACTION_SOURCE__SOURCE_SERVER_CHECK;
        /* The half message's group (send_one): its topic; GRPC_PRODUCER_GROUP
         * for a half message stored before that (on_reply asks again under
         * it: the request is kept in k->lease, k->topic). */
        int kept = call_lease(k) == NULL ? -1
                   : snprintf(k->lease, LEASE_CAP, "%lld %lld %d %d %s %s", qoff, clog, what,
                              check ? 1 : 0, rq->message_id, rq->transaction_id);
        bool by_topic = resource_name(rq->topic, k->topic, sizeof(k->topic)) > 0;
        k->tx_legacy = !by_topic;
        if (kept <= 0 || (size_t)kept >= LEASE_CAP || strchr(rq->message_id, ' ') != NULL ||
            strlen(rq->transaction_id) >= 600) {
            end_tx_answer(s, CODE(ILLEGAL_MESSAGE_ID), "message id is too long or has a space");
        } else {
            /* Set first: the broker's reply can come back, and end the
             * call, inside broker_call (shadow_reply). */
            k->outstanding = 1;
            if (end_tx_call(ss, s, k, by_topic ? k->topic : GRPC_PRODUCER_GROUP) != 0) {
                k->outstanding = 0;
                end_tx_answer(s, CODE(TOO_MANY_REQUESTS), "too many requests waiting on this connection");
            }
        }
    }
    pb_done(ss->gs);
}

/* }}} */

static void
send_message(struct gsession *ss, struct h2s *s, struct gcall *k, const uint8_t *p, size_t n)
{
    /* By hand (codec.h), else protobuf-c (whose answer it is then). */
    pb_done(ss->gs);
    /* The hand decoder checks its strings are UTF-8 (codec.c), as
     * pb_unpack's pbcheck_utf8 does. */
    Apache__Rocketmq__V2__SendMessageRequest *rq = codec_send_request(&ss->gs->alloc, p, n);
    if (rq == NULL)
        rq = unpack_call(ss, s, &apache__rocketmq__v2__send_message_request__descriptor, n, p);
    if (rq == NULL)
        return;
    k->n = rq->n_messages;
    if (call_entries(k, k->n) != 0) {
        k->n = 0;
        pb_done(ss->gs);
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        call_done(s);
        return;
    }
    for (size_t i = 0; i < k->n; i++) {
        apache__rocketmq__v2__send_result_entry__init(&k->entries[i]);
        apache__rocketmq__v2__status__init(&k->statuses[i]);
        k->statuses[i].message = NULL;
        k->entries[i].message_id = NULL;
        k->entries[i].transaction_id = NULL;
    }
    /* One outstanding count held across the loop: a reply delivered
     * synchronously cannot answer the call before every send went out. */
    k->outstanding = 1;
    for (size_t i = 0; i < k->n; i++)
        send_one(ss, s, k, i, rq->messages[i]);
    pb_done(ss->gs);
    if (--k->outstanding == 0)
        send_answer(s, k);
}

/* }}} */

/* {{{ h2 callbacks */

/* Copies the value after `key` in an authorization header, up to the
 * next ',' or blank (and '/' for the credential: 5.x's older clients
 * send "AK/region/..."), into out.  Its length, or -1 when absent or too
 * long. */
static int
auth_field(const char *hdr, const char *key, bool slash, char *out, size_t cap)
{
    const char *p = strstr(hdr, key);
    if (p == NULL)
        return -1;
    p += strlen(key);
    size_t n = 0;
    while (p[n] != '\0' && p[n] != ',' && p[n] != ' ' && !(slash && p[n] == '/'))
        n++;
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return (int)n;
}

/* x-mq-date-time, "yyyyMMdd'T'HHmmss'Z'" (UTC), in ms since the epoch, or -1. */
static int64_t
parse_date_time(const char *v)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    if (v == NULL || strlen(v) != 16 || v[8] != 'T' || v[15] != 'Z')
        return -1;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (v[i] < '0' || v[i] > '9'))
            return -1;
    tm.tm_year = (v[0] - '0') * 1000 + (v[1] - '0') * 100 + (v[2] - '0') * 10 + (v[3] - '0') - 1900;
    tm.tm_mon = (v[4] - '0') * 10 + (v[5] - '0') - 1;
    tm.tm_mday = (v[6] - '0') * 10 + (v[7] - '0');
    tm.tm_hour = (v[9] - '0') * 10 + (v[10] - '0');
    tm.tm_min = (v[11] - '0') * 10 + (v[12] - '0');
    tm.tm_sec = (v[13] - '0') * 10 + (v[14] - '0');
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? -1 : (int64_t)t * 1000;
}

/*
 * aclEnable: 5.x's authorization header ("MQv2-HMAC-SHA1 Credential=AK,
 * SignedHeaders=x-mq-date-time, Signature=HEX") checked against
 * plain_acl.yml's accounts (acl_guard_authenticate_hex: white lists
 * first, as the remoting check), and its signed date within
 * grpcAuthDateTimeWindowMillis of our clock, so a captured header cannot
 * be replayed later.  True with the AccessKey in ak (*ak_len 0: none, a
 * white-listed peer); false with the reason in why.
 */
static bool
authenticate(struct gsession *ss, struct h2s *s, char ak[128], size_t *ak_len, char *why, size_t cap)
{
    const char *auth = h2_header(s, "authorization");
    const char *date = h2_header(s, "x-mq-date-time");
    char sig[64];
    int al = -1, sl = -1;
    if (auth != NULL) {
        if (strncmp(auth, "MQv2-HMAC-SHA1 ", 15) != 0) {
            snprintf(why, cap, "authorization is not MQv2-HMAC-SHA1");
            return false;
        }
        al = auth_field(auth, "Credential=", true, ak, 128);
        sl = auth_field(auth, "Signature=", false, sig, sizeof(sig));
        if (al < 0 || sl < 0) {
            snprintf(why, cap, "authorization without Credential or Signature");
            return false;
        }
        int64_t t = parse_date_time(date);
        if (t < 0) {
            snprintf(why, cap, "x-mq-date-time missing or not yyyyMMddTHHmmssZ");
            return false;
        }
        int64_t now = clock_wall_ms(), skew = now > t ? now - t : t - now;
        if (skew > ss->gs->conf.auth_window_ms) {
            snprintf(why, cap, "x-mq-date-time %s is %lld ms from the server's clock (grpcAuthDateTimeWindowMillis %lld)",
                     date, (long long)skew, (long long)ss->gs->conf.auth_window_ms);
            return false;
        }
    }
    size_t rlen = 0;
    char remark[ACL_REMARK_MAX];
    if (!acl_guard_authenticate_hex(ss->gs->h->acl, ss->cn->peer, al < 0 ? NULL : ak, al < 0 ? 0 : (size_t)al,
                                    date, date != NULL ? strlen(date) : 0, sig, sl < 0 ? 0 : (size_t)sl,
                                    remark, &rlen)) {
        snprintf(why, cap, "%.*s", (int)rlen, remark);
        return false;
    }
    *ak_len = al < 0 ? 0 : (size_t)al;
    return true;
}

static int
on_call(struct h2s *s)
{
    struct gsession *ss = h2_user(h2_stream_conn(s));
    const char *path = h2_path(s);
    enum method m = M_UNKNOWN;
    const char *name = "";
    if (strncmp(path, SERVICE_PREFIX, sizeof(SERVICE_PREFIX) - 1) == 0) {
        name = path + sizeof(SERVICE_PREFIX) - 1;
        for (size_t i = 0; i < sizeof(METHODS) / sizeof(METHODS[0]); i++)
            if (strcmp(name, METHODS[i].name) == 0) {
                m = METHODS[i].m;
                break;
            }
    }
    if (m == M_UNKNOWN)
        return GRPC_UNIMPLEMENTED;
    if (m == M_NOT_YET) {
        /* Not a POP matter (that is NOT_SERVED_FMT, a broker without it). */
        char why[160];
        snprintf(why, sizeof(why), "%s is not served by this rmq%s", name,
                 strcmp(name, "SyncLiteSubscription") == 0 ? " (the broker has no lite topics)" : " yet");
        h2_finish(s, GRPC_UNIMPLEMENTED, why);
        return GRPC_OK;
    }
    char ak[128];
    size_t ak_len = 0;
    if (ss->gs->conf.acl && ss->gs->h->acl != NULL) {
        char why[ACL_REMARK_MAX];
        if (!authenticate(ss, s, ak, &ak_len, why, sizeof(why))) {
            log_info("gRPC call %s from %s refused: %s", name, ss->cn->peer, why);
            h2_finish(s, GRPC_UNAUTHENTICATED, why);
            return GRPC_OK;
        }
    }
    struct gcall *k = call_new(ss);
    if (k == NULL)
        return GRPC_RESOURCE_EXHAUSTED;
    k->ss = ss;
    k->m = m;
    memcpy(k->ak, ak, ak_len);
    k->ak_len = ak_len;
    h2_set_stream_user(s, k);
    if (m == M_TELEMETRY) {
        h2_set_bidi(s);
    } else {
        /* Unary calls count as requests in flight on the socket: a client
         * pipelining calls without reading answers gets paused (conn.h). */
        conn_request_begin(ss->cn);
        k->counted = true;
    }
    return GRPC_OK;
}

static void
on_message(struct h2s *s, const uint8_t *p, size_t n)
{
    struct gcall *k = h2_stream_user(s);
    if (k == NULL)
        return;
    struct gsession *ss = k->ss;
    if (k->m != M_TELEMETRY) {
        if (k->got_request) {
            h2_finish(s, GRPC_INTERNAL, "a unary call sent more than one request message");
            call_done(s);
            return;
        }
        k->got_request = true;
    }
    memcpy(ss->ak, k->ak, k->ak_len);
    ss->ak_len = k->ak_len;
    switch (k->m) {
    case M_QUERY_ROUTE: query_route(ss, s, p, n); break;
    case M_QUERY_ASSIGNMENT: query_assignment(ss, s, p, n); break;
    case M_HEARTBEAT:
    case M_NOTIFY_TERMINATION: simple_ok(ss, s, k->m, p, n); break;
    case M_SEND_MESSAGE: send_message(ss, s, k, p, n); break;
    case M_END_TRANSACTION: end_transaction(ss, s, k, p, n); break;
    case M_RECEIVE: receive_message(ss, s, k, p, n); break;
    case M_ACK: ack_message(ss, s, k, p, n); break;
    case M_CHANGE_INVISIBLE: change_invisible(ss, s, k, p, n); break;
    case M_UPDATE_OFFSET:
    case M_GET_OFFSET:
    case M_QUERY_OFFSET: offset_rpc(ss, s, k, p, n); break;
    case M_TELEMETRY: telemetry(ss, s, p, n); break;
    case M_FORWARD_DLQ: forward_dlq(ss, s, k, p, n); break;
    case M_RECALL: recall_message(ss, s, k, p, n); break;
    default:
        h2_finish(s, GRPC_UNIMPLEMENTED, "method not implemented");
        call_done(s);
    }
}

static void
on_half_close(struct h2s *s)
{
    struct gcall *k = h2_stream_user(s);
    if (k == NULL)
        return;
    if (k->m == M_TELEMETRY) {
        h2_finish(s, GRPC_OK, NULL);
        call_done(s);
    } else if (!k->got_request) {
        h2_finish(s, GRPC_INTERNAL, "a unary call ended without its request message");
        call_done(s);
    }
}

static void
on_cancel(struct h2s *s)
{
    call_done(s);
}

/* Cluster mode: the brokers forget this client's membership of its
 * consumer group when its connection ends (UNREGISTER_CLIENT), as a local
 * broker does when the shadow conn closes.  Without it a Java broker
 * keeps the proxy's pooled connection in the group until
 * channelExpiredTimeout (120 s) after the group's last heartbeat, then
 * closes that connection, and every call of every other client on it
 * fails ("connection lost").  The producer group is left: the proxy's own
 * registration (upstream.c) shares it. */
static void
unregister_consumer(struct gsession *ss)
{
    if (ss->gs->up == NULL || ss->consumer_group[0] == '\0' || ss->client_id[0] == '\0')
        return;
    struct rmq_field ext[2];
    SET(ext[0], "clientID", ss->client_id);
    SET(ext[1], "consumerGroup", ss->consumer_group);
    struct rmq_cmd cmd;
    cmd_init(ss, &cmd, RMQ_REQ_UNREGISTER_CLIENT, RMQ_SER_JSON);
    cmd.ext = ext;
    cmd.ext_count = 2;
    buf_reset(&ss->frame);
    if (rmq_cmd_encode(&cmd, &ss->frame) == 0)
        (void)upstream_forward(ss->gs->up, NULL, buf_head(&ss->frame), buf_len(&ss->frame));
}

/* The session's end at the broker, once: at on_close, or sooner, as the
 * connection starts draining (on_draining), since no call of it will be
 * answered any more: a POP still held for it (a ReceiveMessage the
 * connection error cancelled) must not take a message whose answer
 * would be dropped, leaving it invisible for its invisible time. */
static void
session_end(struct gsession *ss)
{
    if (ss->ended)
        return;
    ss->ended = true;
    unregister_consumer(ss);
    /* Its auto_renew leases come back soon (renew.h), while the shadow
     * conn can still carry the requests. */
    struct renew *r = ss->renew;
    ss->renew = NULL;
    renew_free(r);
    /* The broker forgets this client (its close hook runs for the
     * shadow conn, as for a remoting client going away): a held POP
     * sees its connection closed and ends without taking a message. */
    if (ss->shadow != NULL) {
        struct conn *sh = ss->shadow;
        ss->shadow = NULL;
        sh->ext = NULL;
        sh->gate_to = NULL;   /* the socket conn goes: nothing to gate */
        conn_close(sh, "gRPC connection closed");
        conn_unref(sh);
    }
}

static void
on_h2_draining(struct h2c *c)
{
    session_end(h2_user(c));
}

static void
on_h2_close(struct h2c *c)
{
    struct gsession *ss = h2_user(c);
    session_end(ss);
    while (ss->head != NULL) {
        struct pending *p = ss->head;
        ss->head = p->next;
        free(p->group);
        free(p);
    }
    while (ss->free_pending != NULL) {
        struct pending *p = ss->free_pending;
        ss->free_pending = p->next;
        free(p);
    }
    ss->tail = NULL;
    ss->npending = 0;
    dlq_jobs_free(ss);
}

/* Every call in rocketmq_rpc_latency (grpc/metrics.h). */
static void
on_end(struct h2s *s)
{
    struct gsession *ss = h2_user(h2_stream_conn(s));
    if (ss->gs->metrics == NULL)
        return;   /* metrics off: not even the clock read */
    grpc_metrics_call(ss->gs->metrics, h2_path(s), h2_status(s), h2_code(s), h2_elapsed_ns(s));
}

static const struct h2_callbacks H2_CB = {
    .on_call = on_call,
    .on_message = on_message,
    .on_half_close = on_half_close,
    .on_cancel = on_cancel,
    .on_close = on_h2_close,
    .on_draining = on_h2_draining,
    .on_end = on_end,
};

/* }}} */

/* {{{ The two conns */

/* RMQ_REQ_CHECK_TRANSACTION_STATE from the broker's transaction check: relayed
 * to the client as Telemetry's RecoverOrphanedTransactionCommand, with
 * the half message (the body is its record, REAL_TOPIC as topic) and a
 * transaction id EndTransaction takes (offsetMsgId@tranStateTableOffset).
 * Dropped when the client has no Telemetry stream open: the broker asks
 * again at its next check. */
static void
on_check(struct gsession *ss, const struct rmq_cmd *cmd)
{
    struct h2s *s = ss->telemetry_sid != 0 ? h2_find(ss->h2, ss->telemetry_sid) : NULL;
    const struct rmq_str *off_id = rmq_cmd_field(cmd, "offsetMsgId", 11);
    const struct rmq_str *tso = rmq_cmd_field(cmd, "tranStateTableOffset", 20);
    struct clog_view v;
    if (s == NULL || off_id == NULL || off_id->p == NULL || tso == NULL || tso->p == NULL ||
        off_id->len > 100 || tso->len > 20 || cmd->body == NULL ||
        clog_decode(cmd->body, cmd->body_len, -1, false, &v) != CLOG_REC)
        return;
    /* Properties: system ones into SystemProperties, the rest as the
     * user's (5.x's mapping back, as for a received message). */
    char *copy = strndup((const char *)v.props, v.props_len);
    if (copy == NULL)
        return;
    struct v2_props pr;
    props_split(copy, strlen(copy), &pr);
    char topic[256];
    size_t tl = v.topic_len < sizeof(topic) - 1 ? v.topic_len : sizeof(topic) - 1;
    memcpy(topic, v.topic, tl);
    topic[tl] = '\0';
    PbResource res = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    res.name = topic;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    Apache__Rocketmq__V2__Digest dg = APACHE__ROCKETMQ__V2__DIGEST__INIT;
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Timestamp stored = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    born.seconds = v.born_ts / 1000;
    born.nanos = (int32_t)(v.born_ts % 1000) * 1000000;
    stored.seconds = v.store_ts / 1000;
    stored.nanos = (int32_t)(v.store_ts % 1000) * 1000000;
    sp.tag = pr.tag != NULL ? pr.tag : (char *)"";
    sp.n_keys = pr.nk;
    sp.keys = pr.keys;
    sp.message_id = pr.uniq != NULL ? pr.uniq : (char *)"";
    char crc[16];   /* the SDKs check it, as send_popped's */
    dg.type = APACHE__ROCKETMQ__V2__DIGEST_TYPE__CRC32;
    dg.checksum = (char *)body_crc(ss, v.body, v.body_len, crc);
    sp.body_digest = &dg;
    sp.body_encoding = (v.sysflag & SYSFLAG_COMPRESSED) ? APACHE__ROCKETMQ__V2__ENCODING__GZIP
                                                        : APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__TRANSACTION;
    sp.born_timestamp = &born;
    char bip[64];
    sp.born_host = born_host(&pr, &v, bip);
    sp.store_timestamp = &stored;
    if (pr.group != NULL)
        sp.message_group = pr.group;
    sp.queue_id = v.qid;
    sp.queue_offset = v.qoff;
    PbMessage m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    m.topic = &res;
    m.n_user_properties = pr.ne;
    m.user_properties = pr.ep;
    m.system_properties = &sp;
    m.body.data = (uint8_t *)v.body;
    m.body.len = v.body_len;
    char tid[128];
    memcpy(tid, off_id->p, off_id->len);
    tid[off_id->len] = '@';
    memcpy(tid + off_id->len + 1, tso->p, tso->len);
    tid[off_id->len + 1 + tso->len] = '\0';
    /* Cluster mode: the producer's answer to this check may end it (5.x's
     * proxy adds the transaction as it relays the check). */
    if (ss->gs->tx != NULL && txdata_add(ss->gs->tx, topic, tid, clock_mono_ns() / 1000000) != 0)
        log_warn("proxy: out of memory keeping transaction %s", tid);
    Apache__Rocketmq__V2__RecoverOrphanedTransactionCommand rc =
        APACHE__ROCKETMQ__V2__RECOVER_ORPHANED_TRANSACTION_COMMAND__INIT;
    rc.message = &m;
    rc.transaction_id = tid;
    PbTelemetry out = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__INIT;
    out.command_case = APACHE__ROCKETMQ__V2__TELEMETRY_COMMAND__COMMAND_RECOVER_ORPHANED_TRANSACTION_COMMAND;
    out.recover_orphaned_transaction_command = &rc;
    (void)reply_msg(s, &out.base);
    free(copy);
}

/* The shadow conn's output: the broker's replies, as remoting frames. */
static void
shadow_output(struct conn *sh)
{
    struct gsession *ss = sh->ext;
    if (ss == NULL) {
        buf_reset(&sh->out);
        return;
    }
    while (buf_len(&sh->out) > 0) {
        size_t flen = 0;
        int rc = rmq_frame_peek(buf_head(&sh->out), buf_len(&sh->out), SIZE_MAX, &flen);
        if (rc <= 0) {
            if (rc < 0)
                buf_reset(&sh->out);
            break;
        }
        size_t need = rmq_cmd_arena_size(flen);
        buf_reset(&ss->arena);
        if (buf_reserve(&ss->arena, need) != 0) {
            buf_consume(&sh->out, flen);
            continue;
        }
        struct rmq_arena a = { .p = buf_tail(&ss->arena), .cap = buf_avail(&ss->arena), .used = 0 };
        struct rmq_cmd cmd;
        if (rmq_cmd_decode(&cmd, buf_head(&sh->out), flen, &a) == 0) {
            if (cmd.flag & RMQ_RPC_RESPONSE)
                on_reply(ss, &cmd);
            else if (cmd.code == RMQ_REQ_CHECK_TRANSACTION_STATE)
                on_check(ss, &cmd);
        }
        buf_consume(&sh->out, flen);
    }
    buf_compact(&sh->out);
    if (ss->h2 != NULL)
        h2_flush(ss->h2);
}

/* A native processor's reply on the shadow conn, handed over as fields
 * (conn_handler.on_reply): no remoting frame encoded there and decoded
 * here.  Inside a call's on_message (h2 is reading) the flush is the
 * read's; a reply that comes later (a SYNC_FLUSH send, a held POP) is
 * written here. */
static void
shadow_reply(struct conn *sh, const struct rmq_cmd *cmd)
{
    struct gsession *ss = sh->ext;
    if (ss == NULL || !(cmd->flag & RMQ_RPC_RESPONSE))
        return;
    on_reply(ss, cmd);
    if (ss->h2 != NULL)
        h2_flush(ss->h2);
}

static void
shadow_close(struct conn *sh)
{
    host_server_handler.on_close(sh);
}

static const struct conn_handler SHADOW_HANDLER = {
    .on_frame = NULL,
    .on_close = shadow_close,
    .on_output = shadow_output,
    .on_reply = shadow_reply,
};

static size_t
sock_bytes(struct conn *cn, const uint8_t *p, size_t n)
{
    return h2_on_bytes(cn, p, n);
}

static void
sock_close(struct conn *cn)
{
    struct h2c *c = cn->ext;
    struct gsession *ss = c != NULL ? h2_user(c) : NULL;
    h2_on_conn_close(c);
    if (ss != NULL) {
        q_remove(&ss->link);
        buf_free(&ss->arena);
        buf_free(&ss->consumer_hb);
        buf_free(&ss->settings);
        buf_free(&ss->settings_in);
        buf_free(&ss->props);
        buf_free(&ss->frame);
        while (ss->spare != NULL) {   /* after every call's end (h2_on_conn_close) */
            struct gcall *k = ss->spare;
            ss->spare = k->spare_next;
            free(k);
        }
        for (uint32_t i = 0; i < ss->nptopics; i++)
            free(ss->ptopics[i]);
        free(ss->ptopics);
        free(ss);
    }
}

static const struct conn_handler SOCK_HANDLER = {
    .on_close = sock_close,
    .on_bytes = sock_bytes,
};

/* }}} */

/* {{{ Cluster mode (role proxy): routes from the NameServers, checks relayed */

/* The Node.js SDK (1.0.8, BaseClient.startup) asks its topics' routes
 * one after the other, opens Telemetry with its Settings after the
 * first, and waits for the server's Settings with no time limit, but
 * listens for them only once the last route has come: Settings answered
 * while a later QueryRoute still waited on the NameServer were dropped
 * and startup() never returned.  So they go once more after a route
 * answered within the client's request timeout of them (a client that
 * had them already just applies them again, as it does every 5 min). */
static void
settings_keep(struct gsession *ss, const ProtobufCMessage *m, const Google__Protobuf__Duration *timeout)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    buf_reset(&ss->settings);
    ss->settings_due_ms = 0;
    if (buf_reserve(&ss->settings, n) != 0)
        return;
    protobuf_c_message_pack(m, buf_tail(&ss->settings));
    ss->settings.end += n;
    int64_t ms = timeout != NULL ? timeout->seconds * 1000 + timeout->nanos / 1000000 : 0;
    if (ms < 3000 || ms > 60000)
        ms = ms < 3000 ? 3000 : 60000;   /* the SDKs' default; bounded */
    ss->settings_due_ms = (uint64_t)(clock_mono_ns() / 1000000 + ms);
}

static void
settings_again(struct gsession *ss)
{
    bool due = ss->settings_due_ms != 0 && (uint64_t)(clock_mono_ns() / 1000000) <= ss->settings_due_ms;
    ss->settings_due_ms = 0;
    struct h2s *s = due && ss->telemetry_sid != 0 ? h2_find(ss->h2, ss->telemetry_sid) : NULL;
    size_t n = buf_len(&ss->settings);
    uint8_t *b = s != NULL ? h2_send_reserve(s, n) : NULL;
    if (b != NULL) {
        memcpy(b, buf_head(&ss->settings), n);
        (void)h2_send_commit(s, n);
    }
}

/* QueryRoute / QueryAssignment: the topic's route, from upstream.c's
 * cache (GET_ROUTEINFO_BY_TOPIC through the backend seam, as any request);
 * answered in cluster_route_answer. */
static void
cluster_route_ask(struct gsession *ss, struct h2s *s, const uint8_t *p, size_t n)
{
    struct gcall *k = h2_stream_user(s);
    bool route = k->m == M_QUERY_ROUTE;
    const PbResource *topic;
    const PbEndpoints *ep;
    if (route) {
        Apache__Rocketmq__V2__QueryRouteRequest *rq =
            unpack_call(ss, s, &apache__rocketmq__v2__query_route_request__descriptor, n, p);
        if (rq == NULL)
            return;
        topic = rq->topic;
        ep = rq->endpoints;
    } else {
        Apache__Rocketmq__V2__QueryAssignmentRequest *rq =
            unpack_call(ss, s, &apache__rocketmq__v2__query_assignment_request__descriptor, n, p);
        if (rq == NULL)
            return;
        topic = rq->topic;
        ep = rq->endpoints;
    }
    char name[512];
    int len = resource_name(topic, name, sizeof(name));
    /* The access point the client used is the route's endpoint (as 5.x's
     * proxy answers in cluster mode): every call comes back here. */
    if (ep != NULL && ep->n_addresses > 0 && ep->addresses[0]->host != NULL) {
        snprintf(k->ep_host, sizeof(k->ep_host), "%s", ep->addresses[0]->host);
        k->ep_port = ep->addresses[0]->port;
    } else {
        snprintf(k->ep_host, sizeof(k->ep_host), "%s", ss->gs->conf.host);
        k->ep_port = ss->gs->conf.port;
    }
    if (len >= 0) {
        snprintf(k->topic, sizeof(k->topic), "%s", topic->name);
        snprintf(k->group, sizeof(k->group), "%s",
                 topic->resource_namespace != NULL ? topic->resource_namespace : "");
    }
    pb_done(ss->gs);
    if (len < 0) {
        Apache__Rocketmq__V2__QueryRouteResponse rs = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
        Apache__Rocketmq__V2__QueryAssignmentResponse ra = APACHE__ROCKETMQ__V2__QUERY_ASSIGNMENT_RESPONSE__INIT;
        PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
        st.code = CODE(ILLEGAL_TOPIC);
        st.message = "topic name is empty";
        rs.status = ra.status = &st;
        answer(s, route ? &rs.base : &ra.base);
        return;
    }
    struct rmq_field ext[1];
    SET(ext[0], "topic", name);
    if (broker_call(ss, s, RMQ_REQ_GET_ROUTEINFO_BY_TOPIC, ext, 1, k->m, 0) != 0) {
        h2_finish(s, GRPC_RESOURCE_EXHAUSTED, "too many requests waiting on this connection");
        call_done(s);
    }
}

static void
cluster_route_answer(struct gsession *ss, struct h2s *s, struct gcall *k, const struct rmq_cmd *cmd)
{
    bool route = k->m == M_QUERY_ROUTE;
    Apache__Rocketmq__V2__QueryRouteResponse rs = APACHE__ROCKETMQ__V2__QUERY_ROUTE_RESPONSE__INIT;
    Apache__Rocketmq__V2__QueryAssignmentResponse ra = APACHE__ROCKETMQ__V2__QUERY_ASSIGNMENT_RESPONSE__INIT;
    PbStatus st = APACHE__ROCKETMQ__V2__STATUS__INIT;
    rs.status = ra.status = &st;
    char why[256];
    struct upstream_route *rt = malloc(sizeof(*rt));
    PbResource res = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    res.name = k->topic;
    res.resource_namespace = k->group;
    PbEndpoints ep = APACHE__ROCKETMQ__V2__ENDPOINTS__INIT;
    PbAddress addr = APACHE__ROCKETMQ__V2__ADDRESS__INIT;
    PbAddress *addrs[1] = { &addr };
    addr.host = k->ep_host;
    addr.port = k->ep_port;
    ep.scheme = APACHE__ROCKETMQ__V2__ADDRESS_SCHEME__IPv4;
    ep.n_addresses = 1;
    ep.addresses = addrs;
    PbBroker *bs = NULL;
    PbQueue *qs = NULL, **qp = NULL;
    Apache__Rocketmq__V2__Assignment *as = NULL, **ap = NULL;
    if (cmd->code != RMQ_RESP_SUCCESS) {
        st.code = v2_code(cmd->code);   /* SYSTEM_BUSY (proxyMaxWaitingRequests): TOO_MANY_REQUESTS, as 5.x */
        remark_of(cmd, why, sizeof(why));
        st.message = cmd->code == RMQ_RESP_TOPIC_NOT_EXIST ? "topic not found" : why;
    } else if (rt == NULL || cmd->body == NULL || upstream_route_parse(cmd->body, cmd->body_len, rt) != 0) {
        st.code = CODE(INTERNAL_SERVER_ERROR);
        st.message = "the topic's route does not parse";
    } else {
        /* The topic's message.type, from its broker (upstream.c, as
         * 5.x's proxy reads the TopicConfig): none, every type. */
        const struct rmq_str *mt = rmq_cmd_field(cmd, "messageType", 11);
        uint8_t topic_type = mt != NULL && mt->p != NULL ? topic_msg_type_parse(mt->p, mt->len) : 0;
        size_t total = 0;
        for (uint32_t i = 0; i < rt->n; i++) {
            int32_t nq = rt->b[i].read_queues > rt->b[i].write_queues ? rt->b[i].read_queues : rt->b[i].write_queues;
            total += (size_t)(nq > 0 ? nq : 0);
        }
        bs = calloc(rt->n + 1, sizeof(*bs));
        qs = calloc(total + rt->n + 1, sizeof(*qs));
        qp = calloc(total + rt->n + 1, sizeof(*qp));
        as = calloc(rt->n + 1, sizeof(*as));
        ap = calloc(rt->n + 1, sizeof(*ap));
        if (bs == NULL || qs == NULL || qp == NULL || as == NULL || ap == NULL) {
            st.code = CODE(INTERNAL_SERVER_ERROR);
            st.message = "out of memory";
        } else {
            size_t nqs = 0, nas = 0;
            for (uint32_t i = 0; i < rt->n; i++) {
                const struct upstream_broker *b = &rt->b[i];
                apache__rocketmq__v2__broker__init(&bs[i]);
                bs[i].name = (char *)b->name;
                bs[i].id = 0;
                bs[i].endpoints = &ep;
                if (!route) {
                    /* As 5.x: one assignment per readable broker, queue -1. */
                    if (!(b->perm & RMQ_PERM_READ) || b->read_queues <= 0)
                        continue;
                    PbQueue *q = &qs[nqs++];
                    apache__rocketmq__v2__message_queue__init(q);
                    q->topic = &res;
                    q->id = -1;
                    q->permission = perm_of(b->perm);
                    q->broker = &bs[i];
                    q->accept_message_types = accept_types(topic_type, &q->n_accept_message_types);
                    apache__rocketmq__v2__assignment__init(&as[nas]);
                    as[nas].message_queue = q;
                    ap[nas] = &as[nas];
                    nas++;
                    continue;
                }
                int32_t nq = b->read_queues > b->write_queues ? b->read_queues : b->write_queues;
                for (int32_t j = 0; j < nq; j++) {
                    PbQueue *q = &qs[nqs];
                    apache__rocketmq__v2__message_queue__init(q);
                    q->topic = &res;
                    q->id = j;
                    int32_t perm = b->perm;
                    if (j >= b->read_queues)
                        perm &= ~RMQ_PERM_READ;
                    if (j >= b->write_queues)
                        perm &= ~RMQ_PERM_WRITE;
                    q->permission = perm_of(perm);
                    q->broker = &bs[i];
                    q->accept_message_types = accept_types(topic_type, &q->n_accept_message_types);
                    qp[nqs++] = q;
                }
            }
            rs.n_message_queues = nqs;
            rs.message_queues = qp;
            ra.n_assignments = nas;
            ra.assignments = ap;
            st.code = CODE(OK);
            st.message = "OK";
        }
    }
    answer(s, route ? &rs.base : &ra.base);
    if (route)
        settings_again(ss);
    free(bs);
    free(qs);
    free(qp);
    free(as);
    free(ap);
    free(rt);
}

/* Whether the session publishes topic t (note_producer_topic's list). */
static bool
publishes(const struct gsession *ss, const char *t)
{
    uint32_t lo = 0, hi = ss->nptopics;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ss->ptopics[mid], t);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* A session a check of topic may go to: a producer with a Telemetry
 * stream open that publishes the topic (any such producer when topic is
 * NULL: a half message of GRPC_PRODUCER_GROUP, stored before topics
 * were groups). */
static bool
check_target(const struct gsession *ss, const char *topic)
{
    return ss->telemetry_sid != 0 && ss->client_id[0] != '\0' && buf_len(&ss->consumer_hb) == 0 &&
           (topic == NULL || publishes(ss, topic));
}

/* A broker's CHECK_TRANSACTION_STATE (upstream.c): to a producer session
 * with a Telemetry stream open on this worker that publishes the half
 * message's topic (its group: a broker asks the proxy's connection,
 * registered for the topic by the producers' forwarded heartbeats), in
 * turn, through its shadow conn (shadow_output relays it as in local
 * mode).  A half message of GRPC_PRODUCER_GROUP (stored before) goes to
 * any producer session.  Dropped when there is none: the broker asks
 * again at its next check. */
static void
relay_check(void *arg, const uint8_t *frame, size_t len)
{
    struct grpc_server *gs = arg;
    uint8_t small[2048];
    size_t need = rmq_cmd_arena_size(len);
    uint8_t *mem = need <= sizeof(small) ? small : malloc(need);
    if (mem == NULL)
        return;
    struct rmq_arena a = { .p = mem, .cap = need, .used = 0 };
    struct rmq_cmd cmd;
    struct clog_view v;
    char topic[256];
    const char *want = NULL;
    bool ok = rmq_cmd_decode(&cmd, frame, len, &a) == 0 && cmd.body != NULL &&
              clog_decode(cmd.body, cmd.body_len, -1, false, &v) == CLOG_REC && v.topic_len > 0 &&
              v.topic_len < sizeof(topic);
    if (ok) {
        memcpy(topic, v.topic, v.topic_len);
        topic[v.topic_len] = '\0';
        static const char legacy[] = "PGROUP\001" GRPC_PRODUCER_GROUP "\002";
        /* PGROUP as the last property has no separator after it. */
        const char *pr = (const char *)v.props;
        bool old = false;
        for (size_t i = 0; i + sizeof(legacy) - 2 <= v.props_len; i++) {
            if ((i == 0 || pr[i - 1] == '\002') &&
                memcmp(pr + i, legacy, sizeof(legacy) - 2) == 0 &&
                (i + sizeof(legacy) - 2 == v.props_len || pr[i + sizeof(legacy) - 2] == '\002')) {
                old = true;
                break;
            }
        }
        want = old ? NULL : topic;
    }
    if (mem != small)
        free(mem);
    if (!ok)
        return;
    size_t n = 0;
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &gs->sessions) {
        struct gsession *ss = container_of(pos, struct gsession, link);
        if (check_target(ss, want))
            n++;
    }
    if (n == 0)
        return;
    size_t pick = gs->check_rr++ % n, i = 0;
    q_foreach_safe(pos, tmp, &gs->sessions) {
        struct gsession *ss = container_of(pos, struct gsession, link);
        if (!check_target(ss, want))
            continue;
        if (i++ == pick) {
            if (ss->shadow != NULL)
                (void)conn_send(ss->shadow, frame, len, NULL, 0);
            return;
        }
    }
}

/* }}} */

/* {{{ Server */

struct grpc_server *
grpc_server_new(struct host *h, const struct grpc_conf *conf)
{
    struct grpc_server *gs = calloc(1, sizeof(*gs));
    if (gs == NULL) {
        err_set("out of memory for the gRPC server");
        return NULL;
    }
    gs->h = h;
    gs->conf = *conf;
    q_init(&gs->sessions);
    gs->arena.base = malloc(PB_ARENA_BYTES);
    if (gs->arena.base == NULL) {
        free(gs);
        err_set("out of memory for the gRPC server");
        return NULL;
    }
    gs->arena.cap = PB_ARENA_BYTES;
    gs->alloc.alloc = pb_alloc;
    gs->alloc.free = pb_free;
    gs->alloc.allocator_data = &gs->arena;
    gs->metrics = grpc_metrics_new(h->metrics);
    if (conf->cluster) {
        gs->up = upstream_new(&h->r, &conf->up, relay_check, gs);
        gs->own_tx = conf->tx_table == NULL;
        gs->tx = gs->up == NULL ? NULL : gs->own_tx ? txdata_new(&conf->tx) : conf->tx_table;
        if (gs->tx == NULL) {
            upstream_free(gs->up);
            grpc_metrics_free(gs->metrics);
            free(gs->arena.base);
            free(gs);
            return NULL;
        }
    }
    return gs;
}

void
grpc_server_accept(struct grpc_server *gs, int fd)
{
    struct host *h = gs->h;
    struct gsession *ss = calloc(1, sizeof(*ss));
    if (ss == NULL) {
        close(fd);
        log_warn("out of memory for a gRPC connection; closed");
        return;
    }
    ss->gs = gs;
    buf_init(&ss->arena);
    buf_init(&ss->consumer_hb);
    buf_init(&ss->settings);
    buf_init(&ss->settings_in);
    buf_init(&ss->props);
    buf_init(&ss->frame);
    q_init(&ss->link);
    struct conn *cn = conn_adopt(&h->r, fd, &SOCK_HANDLER, h, gs->conf.listener);
    if (cn == NULL) {
        log_warn("cannot accept a gRPC connection: %s", err_msg());
        free(ss);
        return;
    }
    ss->cn = cn;
    struct conn *sh = conn_new_detached(&h->r, &SHADOW_HANDLER, h, gs->conf.listener);
    struct lconn *lc = sh != NULL ? lconn_wrap(h->L, sh, LUA_NOREF) : NULL;
    if (sh == NULL || lc == NULL) {
        log_warn("cannot serve a gRPC connection from %s: out of memory", cn->peer);
        if (sh != NULL)
            conn_close(sh, "out of memory");
        conn_close(cn, "out of memory");
        free(ss);
        return;
    }
    lc->role = gs->conf.role;
    snprintf(sh->peer, sizeof(sh->peer), "%s", cn->peer);
    sh->ext = ss;
    /* A local send's append is staged and its answer, written to the
     * socket conn, waits for the loop's one commit (reactor.h's gate),
     * as a remoting send's: without it every gRPC send was its own
     * pwrite and publish (strace: one pwrite64 and 1.4 futex calls a
     * message, against 0.1 each for remoting at the same rate). */
    sh->gate_to = cn;
    conn_ref(sh);
    ss->shadow = sh;
    q_insert_tail(&gs->sessions, &ss->link);
    ss->h2 = h2_new(cn, &gs->conf.lim, &H2_CB, ss);
    if (ss->h2 == NULL) {
        log_warn("cannot serve a gRPC connection from %s: %s", cn->peer, err_msg());
        q_remove(&ss->link);
        sh->ext = NULL;
        sh->gate_to = NULL;
        conn_close(sh, "no HTTP/2 session");
        conn_unref(sh);
        conn_close(cn, "no HTTP/2 session");
        free(ss);
        return;
    }
    log_debug("gRPC connection from %s", cn->peer);
}

void
grpc_server_goaway(struct grpc_server *gs)
{
    if (gs == NULL)
        return;
    upstream_stop(gs->up);
    struct qnode *pos;
    struct qnode *tmp;
    q_foreach_safe(pos, tmp, &gs->sessions) {
        struct gsession *ss = container_of(pos, struct gsession, link);
        if (ss->h2 != NULL)
            h2_goaway(ss->h2);
    }
}

void
grpc_server_free(struct grpc_server *gs)
{
    if (gs == NULL)
        return;
    pb_done(gs);
    upstream_free(gs->up);
    if (gs->own_tx)
        txdata_free(gs->tx);
    grpc_metrics_free(gs->metrics);
    free(gs->arena.base);
    free(gs);
}

/* }}} */
