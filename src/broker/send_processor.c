/*
 * send_processor: see send_processor.h.
 */
#include "broker/send_processor.h"

#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker_perm.h"
#include "broker/config_table.h"
#include "broker/topic_config.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/jstr.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "core/queue.h"
#include "proto/header.h"
#include "net/conn.h"
#include "net/notify.h"
#include "net/reactor.h"
#include "runtime/host.h"
#include "runtime/post.h"
#include "runtime/syncwait.h"
#include "core/fjson.h"
#include "store/access.h"
#include "store/props.h"
#include "store/store.h"
#include "store/timer.h"
#include "rmq_codes.h"

/* MessageSysFlag transaction bits: a prepared message with TRAN_MSG is
 * stored here as a half message; any other transaction bit goes to Lua. */
#define TRANSACTION_TYPE 0xC
#define TRANSACTION_PREPARED 0x4
#define HALF_TOPIC "RMQ_SYS_TRANS_HALF_TOPIC"

#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"
#define RETRY_PREFIX "%RETRY%"
/* FAQUrl.suggestTodo's link, after the refusals 4.9.8 gives it. */
#define FAQ "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

/* The typed keys send.lua's header specs declare. */
enum {
    F_TOPIC, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS, F_FLAG, F_PROPERTIES,
    F_RECONSUME, F_BATCH, F_DEFAULT_TOPIC, F_DEFAULT_QNUMS, F_MAX_RECONSUME, NFIELDS
};
static const char *const field_keys[NFIELDS] = {
    "topic", "queueId", "sysFlag", "bornTimestamp", "flag", "properties",
    "reconsumeTimes", "batch", "defaultTopic", "defaultTopicQueueNums", "maxReconsumeTimes",
};

struct spec_map {
    const struct hspec *spec;
    int idx[NFIELDS];          /* every one there (map_spec) */
    int group;                 /* producerGroup's, or -1 */
};

struct send_processor {
    struct native_proc base;
    struct store *store;
    struct host_addr store_host;
    struct spec_map v1, v2;
    char *cluster;
    size_t cluster_len;
    char *region;
    size_t region_len;
    bool region_plain;             /* needs no JSON escape: the one-pass reply */
    char *broker_name;
    struct buf recall;             /* a held timer message's recall handle */
    bool trace_on;
    int64_t max_size;
    bool halves;                   /* store half messages (not rejectTransactionMessage) */
    char *ip;                      /* brokerIP1, named in the broker's refusals */
    bool checks_only;              /* a reply message's checks (send_processor_conf) */
    char **not_allowed;
    size_t *not_allowed_len;       /* their lengths: no strlen per send */
    int n_not_allowed;
    uint64_t not_allowed_lens;     /* bit (len & 63) set for each: most sends skip the walk */
    struct config_table *topics;
    struct broker_perm perm;
    uint64_t rng;
    struct buf props;              /* the stored properties */
    struct buf hold;               /* a timer message's, for the timer topic */
    struct buf ids;                /* a batch's msgIds */
    struct clog_msg *work;         /* a batch's records */
    int work_cap;
    /* The topic config the last send read, valid while the table's
     * generation is tc_gen (every change of the table moves it:
     * config_table.h): a producer's sends name a few topics, and the
     * table's look-up (hash, read lock, copy) was ~290 instructions of a
     * send's ~9,500. */
    uint64_t tc_gen;
    struct topic_config tc_last;
    size_t tc_name_len;            /* 0: nothing cached */
    char tc_name[128];
    /* Queues 0-63 of that topic seen in the store (hold_for_queue): a
     * queue removed since only costs its next put the inline making a
     * held send avoids. */
    uint64_t tc_queues;
    char born_peer[64];            /* the last bornHost parsed */
    struct host_addr born;
    struct syncwait *sync;         /* SYNC_FLUSH waits (made on first use) */
    lua_State *L;                  /* the host's: the auto-create hook */
    int create_ref;                /* registry ref in L, or LUA_NOREF */
    int delay_ref;                 /* the delay-level hook, likewise */
    int retry_ref;                 /* the retry/DLQ choice hook, likewise */
    int half_ref;                  /* the half topic's creation hook, likewise */
    int defer;                     /* puts staged, replies gated: 1 yes, -1 no, 0 not known */
    struct qnode held;             /* sends waiting for their new queue (struct held_send) */
    struct buf arena;              /* a held send's frame, decoded again */
    bool rerun;                    /* running a held send again: it puts, whatever happens */
};

/* A send to a queue that does not exist yet, held while the store's
 * maker thread makes the queue's directory and files (store.h,
 * store_request_queue): the worker goes on serving its other
 * connections instead of waiting for the file system, and the send runs
 * again, from its frame, once the queue is there.  Its connection's next
 * frames wait behind it (conn_hold), so a producer's sends stay in
 * order. */
struct held_send {
    struct qnode link;             /* in sp->held */
    struct send_processor *sp;
    struct host *h;
    struct conn *c;                /* a reference */
    struct post_event *ev;         /* the wait in progress, NULL between */
    int64_t start_ns;              /* arrival, for rocketmq_rpc_latency */
    int64_t deadline_ms;
    int64_t charged;               /* bytes charged to the memory budget */
    const char *topic;             /* key[0, tlen) */
    size_t tlen;
    int32_t qid;
    size_t klen;                   /* "topic@queueId", raised when it is made */
    char key[160];
    size_t len;
    uint8_t frame[];
};

/* A held send looks again this often (a raise missed: none should be),
 * and after HOLD_MAX_MS (the longest any RocketMQ client waits for a
 * reply) it puts anyway, making the queue itself if the maker is stuck. */
#define HOLD_RECHECK_MS 250
#define HOLD_MAX_MS 30000

/* A stored message whose reply waits for its flush (SYNC_FLUSH). */
struct flush_wait {
    struct send_processor *sp;
    struct host *h;
    struct conn *c;
    struct rmq_cmd req;            /* code, opaque, serialize, flag */
    int64_t start_ns;
    char qid[24], qoff[24];
    size_t ids_len;
    size_t recall_len;             /* after the ids in ids[] */
    char ids[];
};

/* {{{ Helpers */

static uint64_t
next_random(struct send_processor *sp)
{
    /* xorshift64: the queue a "pick any" send lands on. */
    uint64_t x = sp->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    sp->rng = x;
    return x;
}

static bool
has_prefix(const char *p, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && memcmp(p, prefix, k) == 0;
}

static bool
not_allowed(const struct send_processor *sp, const char *t, size_t n)
{
    if ((sp->not_allowed_lens >> (n & 63) & 1) == 0)
        return false;
    for (int i = 0; i < sp->n_not_allowed; i++)
        if (sp->not_allowed_len[i] == n && memcmp(sp->not_allowed[i], t, n) == 0)
            return true;
    return false;
}

static const struct host_addr *
born_host(struct send_processor *sp, const char *peer)
{
    if (strcmp(peer, sp->born_peer) != 0) {
        /* Parsed aside: a peer that does not parse (an IPv6 scope, a
         * failed getpeername's "?") must not overwrite the cached one. */
        struct host_addr a;
        size_t n = strlen(peer);
        if (n >= sizeof(sp->born_peer) || host_addr_parse(peer, n, &a) != 0)
            return NULL;
        sp->born = a;
        memcpy(sp->born_peer, peer, n + 1);
    }
    return &sp->born;
}

/* The reply code of a put status: codes.put_status (rmq_codes.h). */
static int
put_code(int status)
{
    switch (status) {
#define PUT_CASE(st, code, stored) case st: return code;
    RMQ_PUT_STATUS_CODES(PUT_CASE)
#undef PUT_CASE
    default: return RMQ_RESP_SYSTEM_ERROR;
    }
}

/* The store refused the put: "STATUS: reason", the reason without file
 * names (the log has it whole), as send.lua answers. */
static int
refuse_put(struct native_req *r, const struct store_msg *m, int status)
{
    const char *reason = err_msg();
    char shown[512], remark[600];
    size_t sl = lheader_scrub(reason, strlen(reason), shown, sizeof(shown));
    if (sl != strlen(reason) || memcmp(shown, reason, sl) != 0)
        log_warn("send to %.*s@%d from %s not stored: %s %s", (int)m->topic_len,
                 m->topic, m->qid, r->c->peer, put_status_name(status), reason);
    int n = snprintf(remark, sizeof(remark), "%s: %s", put_status_name(status), shown);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(remark))
        n = (int)sizeof(remark) - 1;
    native_reply(r, put_code(status), remark, (size_t)n, NULL, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* A batch's space is the peer's to size (up to maxMessageSize / 22
 * messages): what grew past a usual batch is freed once the batch is
 * answered, so it does not stay with the worker. */
#define BATCH_KEEP 1024

static void
release_batch_space(struct send_processor *sp)
{
    if (sp->work_cap > BATCH_KEEP) {
        free(sp->work);
        sp->work = NULL;
        sp->work_cap = 0;
    }
    if (sp->ids.cap > (size_t)BATCH_KEEP * 64) {
        buf_free(&sp->ids);
        buf_init(&sp->ids);
    }
}

static int
ensure_work(struct send_processor *sp, int n)
{
    if (n <= sp->work_cap)
        return 0;
    struct clog_msg *w = realloc(sp->work, sizeof(*w) * (size_t)n);
    if (w == NULL)
        return -1;
    sp->work = w;
    sp->work_cap = n;
    return 0;
}

/* }}} */

/* The reply to a stored message: SendMessageResponseHeader's fields in
 * the order a 4.9.8 broker's HashMap writes them (the fixtures'). */
#define PUT_LIT(w, s) (memcpy((w), (s), sizeof(s) - 1), (w) += sizeof(s) - 1)

static uint8_t *
put_bytes(uint8_t *w, const char *p, size_t n)
{
    memcpy(w, p, n);
    return w + n;
}

static uint8_t *
put_i64(uint8_t *w, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *b = fjson_i64_digits(e, v);
    return put_bytes(w, b, (size_t)(e - b));
}

_Static_assert(RMQ_RESP_SUCCESS == 0, "reply_stored writes code 0 as text");
_Static_assert(RMQ_RPC_RESPONSE == 1, "reply_stored writes flag 1 as text");
_Static_assert(RMQ_VERSION_409 == 409, "reply_stored writes version 409 as text");

/* The last topic's config when it is still the table's (see tc_gen). */
static bool
topic_cached(const struct send_processor *sp, const char *name, size_t len,
             struct topic_config *out)
{
    if (len != sp->tc_name_len || len == 0 || memcmp(name, sp->tc_name, len) != 0 ||
        config_table_gen(sp->topics) != sp->tc_gen)
        return false;
    *out = sp->tc_last;
    return true;
}

/* config_table_get, remembered for topic_cached().  The generation is
 * read before the record: a change between the two leaves a newer
 * record under an older generation, which the next send reads again. */
static int
topic_lookup(struct send_processor *sp, const char *name, size_t len,
             struct topic_config *out)
{
    uint64_t gen = config_table_gen(sp->topics);
    sp->tc_name_len = 0;
    sp->tc_queues = 0;
    if (config_table_get(sp->topics, name, len, out) != 0)
        return -1;
    if (len < sizeof(sp->tc_name)) {
        memcpy(sp->tc_name, name, len);
        sp->tc_last = *out;
        sp->tc_gen = gen;
        sp->tc_name_len = len;
    }
    return 0;
}

static void
reply_stored(struct native_req *r, const struct send_processor *sp, int code,
             const char *qid, size_t qid_len, const char *qoff, size_t qoff_len,
             const char *ids, size_t ids_len, const char *recall, size_t recall_len)
{
    uint8_t *w0;
    if (recall_len == 0 && sp->region_plain &&
        (w0 = native_reply_json_begin(r, 256 + sp->region_len + ids_len + qid_len + qoff_len, 0)) != NULL) {
        /* The JSON header in one pass, the bytes rmq_cmd_encode writes
         * for the fields below (fastjson's order: top-level keys sorted,
         * extFields as given); none of the values needs escaping (digits,
         * hex msgIds and commas, a region checked once). */
        uint8_t *w = w0;
        if (code == RMQ_RESP_SUCCESS) {
            PUT_LIT(w, "{\"code\":0,\"extFields\":{\"queueId\":\"");
        } else {
            PUT_LIT(w, "{\"code\":");
            w = put_i64(w, code);
            PUT_LIT(w, ",\"extFields\":{\"queueId\":\"");
        }
        w = put_bytes(w, qid, qid_len);
        if (sp->trace_on)
            PUT_LIT(w, "\",\"TRACE_ON\":\"true\",\"MSG_REGION\":\"");
        else
            PUT_LIT(w, "\",\"TRACE_ON\":\"false\",\"MSG_REGION\":\"");
        w = put_bytes(w, sp->region, sp->region_len);
        PUT_LIT(w, "\",\"msgId\":\"");
        w = put_bytes(w, ids, ids_len);
        PUT_LIT(w, "\",\"queueOffset\":\"");
        w = put_bytes(w, qoff, qoff_len);
        /* The flag and the version are constants: written as text (the
         * asserts below keep the text and the codes together). */
        PUT_LIT(w, "\"},\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
        w = put_i64(w, r->cmd->opaque);
        PUT_LIT(w, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}");
        native_reply_json_end(r, code, (size_t)(w - w0), NULL);
        return;
    }
    struct rmq_field ext[6] = {
        { { "queueId", 7 }, { qid, (uint32_t)qid_len } },
        { { "TRACE_ON", 8 }, { sp->trace_on ? "true" : "false", sp->trace_on ? 4 : 5 } },
        { { "MSG_REGION", 10 }, { sp->region, (uint32_t)sp->region_len } },
        { { "msgId", 5 }, { ids, (uint32_t)ids_len } },
        { { "queueOffset", 11 }, { qoff, (uint32_t)qoff_len } },
        /* A held timer message (5.x's SendMessageResponseHeader). */
        { { "recallHandle", 12 }, { recall, (uint32_t)recall_len } },
    };
    native_reply(r, code, NULL, 0, ext, recall_len > 0 ? 6 : 5, NULL, 0, NULL);
}

static void
flush_done(void *arg, int outcome)
{
    struct flush_wait *fw = arg;
    struct send_processor *sp = fw->sp;
    if (outcome != SYNCWAIT_CLOSED) {
        struct native_req r = { .h = fw->h, .c = fw->c, .cmd = &fw->req,
                                .start_ns = fw->start_ns, .oneway = (fw->req.flag & RMQ_RPC_ONEWAY) != 0,
                                .metrics = fw->h->metrics, .enc = &fw->h->enc };
        /* Stored either way: the code says what is not sure yet. */
        int code = outcome == SYNCWAIT_DURABLE ? RMQ_RESP_SUCCESS
                 : outcome == SYNCWAIT_SLAVE_TIMED_OUT ? RMQ_RESP_FLUSH_SLAVE_TIMEOUT
                 : outcome == SYNCWAIT_SLAVE_NOT_AVAILABLE ? RMQ_RESP_SLAVE_NOT_AVAILABLE
                                                          : RMQ_RESP_FLUSH_DISK_TIMEOUT;
        reply_stored(&r, sp, code, fw->qid, strlen(fw->qid), fw->qoff, strlen(fw->qoff),
                     fw->ids, fw->ids_len, fw->ids + fw->ids_len, fw->recall_len);
    }
    if (!fw->c->closed)
        conn_request_done(fw->c);
    conn_unref(fw->c);
    fw->h->requests_live--;
    free(fw);
}

/* Answers once the message is durable.  NATIVE_DONE either way: on no
 * memory it answers now, FLUSH_DISK_TIMEOUT (stored, maybe not durable). */
static int
wait_flush(struct native_req *r, struct send_processor *sp, int64_t end,
           const char *qid, const char *qoff, const char *ids, size_t ids_len,
           const char *recall, size_t recall_len)
{
    if (sp->sync == NULL)
        sp->sync = syncwait_new_on(r->h, sp->store);
    struct flush_wait *fw = sp->sync != NULL ? malloc(sizeof(*fw) + ids_len + recall_len) : NULL;
    if (fw == NULL) {
        log_error("send: out of memory waiting for a flush; answering FLUSH_DISK_TIMEOUT");
        reply_stored(r, sp, RMQ_RESP_FLUSH_DISK_TIMEOUT, qid, strlen(qid), qoff, strlen(qoff), ids, ids_len,
                     recall, recall_len);
        return NATIVE_DONE;
    }
    fw->sp = sp;
    fw->h = r->h;
    fw->c = r->c;
    fw->start_ns = r->start_ns;
    memset(&fw->req, 0, sizeof(fw->req));
    fw->req.code = r->cmd->code;
    fw->req.opaque = r->cmd->opaque;
    fw->req.serialize = r->cmd->serialize;
    fw->req.flag = r->cmd->flag;
    snprintf(fw->qid, sizeof(fw->qid), "%s", qid);
    snprintf(fw->qoff, sizeof(fw->qoff), "%s", qoff);
    memcpy(fw->ids, ids, ids_len);
    fw->ids_len = ids_len;
    if (recall_len > 0)
        memcpy(fw->ids + ids_len, recall, recall_len);
    fw->recall_len = recall_len;
    conn_ref(fw->c);
    conn_request_begin(fw->c);
    r->h->requests_live++;   /* a stopping worker drains it */
    int rc = syncwait_wait_cb(sp->sync, end, sp->store->conf.sync_flush_timeout_ms,
                              flush_done, fw);
    if (rc == 0)
        return NATIVE_DONE;
    /* Known already (1 + outcome), or no memory for the wait. */
    flush_done(fw, rc > 0 ? rc - 1 : SYNCWAIT_TIMED_OUT);
    return NATIVE_DONE;
}

/* {{{ Refusals and hooks */

/* Answers r with a refusal: code and a remark (printf-style).  Every
 * text is 4.9.8's (the fixtures'), written once, here. */
static int __attribute__((format(printf, 3, 4)))
refuse(struct native_req *r, int32_t code, const char *fmt, ...)
{
    char remark[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(remark, sizeof(remark), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(remark))
        n = (int)sizeof(remark) - 1;
    native_reply(r, code, remark, (size_t)n, NULL, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* A hook that raised: SYSTEM_ERROR with its message, without positions
 * or paths (as the dispatcher answers a Lua handler's error); the log
 * has it whole.  Pops the message. */
static int
refuse_hook(struct native_req *r, lua_State *L, const char *hook)
{
    size_t n;
    const char *e = lua_tolstring(L, -1, &n);
    if (e == NULL) {
        e = "(not a string)";
        n = strlen(e);
    }
    char shown[512];
    size_t sl = lheader_scrub(e, n, shown, sizeof(shown));
    log_warn("send from %s: the %s hook failed: %.*s", r->c->peer, hook, (int)n, e);
    lua_pop(L, 1);
    native_reply(r, RMQ_RESP_SYSTEM_ERROR, shown, sl, NULL, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* Pushes the hook `ref` (and checks room for `args` more), or false. */
static bool
push_hook(struct send_processor *sp, int ref)
{
    if (sp->L == NULL || ref == LUA_NOREF || !lua_checkstack(sp->L, 8))
        return false;
    lua_rawgeti(sp->L, LUA_REGISTRYINDEX, ref);
    return true;
}

/* A topic the table does not have: the auto-create hook (send.lua: the
 * template the producer names, autoCreateTopicEnable; a %RETRY% topic)
 * decides.  Returns 0 when it exists now (in tc), else answers r (the
 * hook's refusal, or TOPIC_NOT_EXIST) and returns -1. */
static int
create_topic(struct send_processor *sp, struct native_req *r, const struct lheader_val *topic,
             const struct lheader_val *tpl, const struct lheader_val *qnums, bool v1,
             struct topic_config *tc)
{
    lua_State *L = sp->L;
    if (push_hook(sp, sp->create_ref)) {
        int top = lua_gettop(L) - 1;
        lua_pushlstring(L, topic->p, topic->len);
        if (tpl->set)
            lua_pushlstring(L, tpl->p, tpl->len);
        else
            lua_pushnil(L);
        if (qnums->set)
            lua_pushinteger(L, (lua_Integer)qnums->i);
        else
            lua_pushnil(L);
        lua_pushboolean(L, v1);
        if (lua_pcall(L, 4, 2, 0) != LUA_OK) {
            refuse_hook(r, L, "createTopic");
            lua_settop(L, top);
            return -1;
        }
        bool made = lua_toboolean(L, -2);
        if (!made && lua_type(L, -1) == LUA_TSTRING) {
            size_t n;
            const char *why = lua_tolstring(L, -1, &n);
            native_reply(r, RMQ_RESP_SYSTEM_ERROR, why, n, NULL, 0, NULL, 0, NULL);
            lua_settop(L, top);
            return -1;
        }
        lua_settop(L, top);
        if (made && config_table_get(sp->topics, topic->p, topic->len, tc) == 0)
            return 0;
    }
    refuse(r, RMQ_RESP_TOPIC_NOT_EXIST, "topic[%.*s] not exist, apply first please!" FAQ,
           (int)topic->len, topic->p);
    return -1;
}

/* A send into %RETRY%group: the retry/DLQ choice hook (sendback.lua's
 * rule: the group's retryMaxTimes, or the producer's maxReconsumeTimes)
 * decides.  Returns 1 with the DLQ topic in dlq (NUL-terminated) when the
 * message goes there, 0 when it stays a retry, -1 when r was answered. */
static int
retry_choice(struct send_processor *sp, struct native_req *r, const char *group, size_t glen,
             int64_t reconsume, const struct lheader_val *max, char *dlq, size_t cap)
{
    lua_State *L = sp->L;
    if (!push_hook(sp, sp->retry_ref))
        return 0;   /* no hook: no routing (a processor made without one) */
    int top = lua_gettop(L) - 1;
    lua_pushlstring(L, group, glen);
    lua_pushinteger(L, (lua_Integer)reconsume);
    if (max->set && r->cmd->version >= RMQ_MQVERSION_V3_4_9)
        lua_pushinteger(L, (lua_Integer)max->i);
    else
        lua_pushnil(L);
    if (lua_pcall(L, 3, 1, 0) != LUA_OK) {
        refuse_hook(r, L, "retry");
        lua_settop(L, top);
        return -1;
    }
    int rc = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
        size_t n;
        const char *t = lua_tolstring(L, -1, &n);
        if (n < cap) {
            memcpy(dlq, t, n + 1);
            rc = 1;
        }
    } else if (!lua_toboolean(L, -1)) {
        refuse(r, RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group not exist, %.*s" FAQ,
               (int)glen, group);
        rc = -1;
    }
    lua_settop(L, top);
    return rc;
}

/* True when RMQ_SYS_TRANS_HALF_TOPIC exists (the hook makes it the first
 * time, as transaction.lua's ensure). */
static bool
half_topic(struct send_processor *sp)
{
    struct topic_config htc;
    if (config_table_get(sp->topics, HALF_TOPIC, sizeof(HALF_TOPIC) - 1, &htc) == 0)
        return true;
    if (!push_hook(sp, sp->half_ref))
        return false;
    int top = lua_gettop(sp->L) - 1;
    if (lua_pcall(sp->L, 0, 0, 0) != LUA_OK)
        log_warn("send: cannot create %s: %s", HALF_TOPIC, lua_tostring(sp->L, -1));
    lua_settop(sp->L, top);
    return config_table_get(sp->topics, HALF_TOPIC, sizeof(HALF_TOPIC) - 1, &htc) == 0;
}

/* Asks the delay-level hook (send.lua: schedule.redirect, the
 * messageDelayLevel in force) where a message with DELAY goes: the
 * properties it is stored with (into sp->hold), SCHEDULE_TOPIC_XXXX's
 * queue and the time it is due (its tags code).  Returns 0, or -1 when r
 * was answered (the hook failed). */
static int
delay_redirect(struct send_processor *sp, struct native_req *r, const char *topic, size_t tlen,
               int64_t qid, int level, int32_t *queue, int64_t *due)
{
    lua_State *L = sp->L;
    if (!push_hook(sp, sp->delay_ref)) {
        refuse(r, RMQ_RESP_SYSTEM_ERROR, "delayed messages are not served here");
        return -1;
    }
    int top = lua_gettop(L) - 1;
    lua_pushlstring(L, (const char *)buf_head(&sp->props), buf_len(&sp->props));
    lua_pushlstring(L, topic, tlen);
    lua_pushinteger(L, (lua_Integer)qid);
    lua_pushinteger(L, level);
    if (lua_pcall(L, 4, 3, 0) != LUA_OK) {
        refuse_hook(r, L, "delayLevel");
        lua_settop(L, top);
        return -1;
    }
    bool ok = false;
    if (lua_type(L, -3) == LUA_TSTRING) {
        int qok = 0, dok = 0;
        lua_Integer q = lua_tointegerx(L, -2, &qok), d = lua_tointegerx(L, -1, &dok);
        size_t n;
        const char *props = lua_tolstring(L, -3, &n);
        buf_reset(&sp->hold);
        ok = qok && dok && q >= 0 && q < PROPS_DELAY_MAX && buf_append(&sp->hold, props, n) == 0;
        *queue = (int32_t)q;
        *due = (int64_t)d;
    }
    lua_settop(L, top);
    if (!ok) {
        refuse(r, RMQ_RESP_SYSTEM_ERROR, "the delay-level hook gave no place for level %d", level);
        return -1;
    }
    return 0;
}

/* }}} */

/* {{{ Sends held for their new queue */

static int send_run(struct native_proc *p, struct native_req *r);

static int64_t
now_ms(void)
{
    return clock_mono_ns() / 1000000;
}

/* The store made a queue (or failed to): the sends held for it, in every
 * worker, run again (a failed one makes it itself, and answers the
 * error).  On the store's maker thread. */
static void
queue_made(void *arg, const char *topic, size_t tlen, int32_t qid, bool ok)
{
    (void)arg;
    (void)ok;
    char key[160], qd[16];
    char *qde = qd + sizeof(qd), *qdb = fjson_i64_digits(qde, qid);
    size_t kl = tlen + 1 + (size_t)(qde - qdb);
    if (kl > sizeof(key))
        return;   /* never held (a topic is at most 127 bytes) */
    memcpy(key, topic, tlen);
    key[tlen] = '@';
    memcpy(key + tlen + 1, qdb, (size_t)(qde - qdb));
    if (post_raise(NULL, key, kl) != 0)
        log_warn("send: out of memory waking the sends held for %.*s (they look again)", (int)kl, key);
}

/* The held send is done: its accounting given back, its connection's
 * next frames let go.  to_lua: its Lua handler finishes it. */
static void
hold_end(struct held_send *hs, bool to_lua)
{
    struct conn *c = hs->c;
    if (hs->ev != NULL)
        post_event_cancel(hs->ev);
    if (q_linked(&hs->link))
        q_remove(&hs->link);
    if (hs->charged != 0 && c->mb_open)
        membudget_release(c->r->budget, &c->mb, hs->charged);
    hs->h->requests_live--;
    if (!c->closed) {
        conn_request_done(c);
        if (to_lua && host_request_to_lua(hs->h, c, hs->frame, hs->len, hs->start_ns) != 0)
            log_warn("send from %s: %s", c->peer, err_msg());
    }
    conn_release(c);
    conn_unref(c);
    free(hs);
}

/* Runs the held send's frame again (decoded anew, into the processor's
 * arena: one run at a time on the worker's thread); it puts now. */
static void
hold_run(struct held_send *hs)
{
    struct send_processor *sp = hs->sp;
    int rc = NATIVE_TO_LUA;
    if (hs->len >= 8) {
        size_t need = rmq_cmd_arena_size(be32_get(hs->frame + 4) & 0xFFFFFF);
        buf_reset(&sp->arena);
        struct rmq_cmd cmd;
        if (buf_reserve(&sp->arena, need) == 0) {
            struct rmq_arena a = { buf_tail(&sp->arena), need, 0 };
            if (rmq_cmd_decode(&cmd, hs->frame, hs->len, &a) == 0) {
                struct native_req r = {
                    .h = hs->h, .c = hs->c, .cmd = &cmd, .start_ns = hs->start_ns,
                    .oneway = (cmd.flag & RMQ_RPC_ONEWAY) != 0, .lua = NATIVE_LUA_NONE,
                    .frame = hs->frame, .frame_len = hs->len,
                    .metrics = hs->h->metrics, .enc = &hs->h->enc,
                };
                sp->rerun = true;
                rc = send_run(&sp->base, &r);
                sp->rerun = false;
            }
        }
    }
    hold_end(hs, rc == NATIVE_TO_LUA);
}

static void hold_wake(void *arg, bool raised);

static void
hold_wait(struct held_send *hs)
{
    int64_t left = hs->deadline_ms - now_ms();
    int64_t slice = left < HOLD_RECHECK_MS ? (left > 0 ? left : 0) : HOLD_RECHECK_MS;
    hs->ev = post_event_wait(&hs->h->post, hs->key, hs->klen, (uint64_t)slice, hold_wake, hs);
    if (hs->ev == NULL) {
        log_warn("send from %s: cannot wait for its new queue (%s); it makes it", hs->c->peer, err_msg());
        hold_run(hs);
    }
}

/* Raised (made, or failed), or a slice ended: run it when its queue is
 * there, or it failed, or it waited long enough, or the host drains;
 * forget it when its connection closed. */
static void
hold_wake(void *arg, bool raised)
{
    struct held_send *hs = arg;
    hs->ev = NULL;
    if (hs->c->closed) {
        hold_end(hs, false);
        return;
    }
    if (!raised && !hs->h->draining && now_ms() < hs->deadline_ms &&
        !store_has_queue(hs->sp->store, hs->topic, hs->tlen, hs->qid)) {
        hold_wait(hs);
        return;
    }
    hold_run(hs);
}

/* A send whose queue does not exist yet: held (returns true) while the
 * store makes it, when it can be -- a first run from a frame, on a
 * client's connection, its budget allowing; false: the caller puts now
 * (the queue exists, or the put makes it). */
static bool
hold_for_queue(struct send_processor *sp, struct native_req *r, const struct store_msg *m)
{
    if (sp->rerun || r->lua != NATIVE_LUA_NONE || r->frame == NULL || r->c->listener < 0 ||
        r->c->detached || r->c->closed || r->h->draining)
        return false;
    /* The queue seen before (the last topic's, tc_queues), or now. */
    bool last = m->topic_len == sp->tc_name_len && m->qid >= 0 && m->qid < 64 &&
                memcmp(m->topic, sp->tc_name, m->topic_len) == 0;
    uint64_t bit = last ? UINT64_C(1) << m->qid : 0;
    if ((sp->tc_queues & bit) != 0)
        return false;
    if (store_has_queue(sp->store, m->topic, m->topic_len, m->qid)) {
        sp->tc_queues |= bit;
        return false;
    }
    int tx = m->sysflag & SYSFLAG_TX_MASK;
    if (tx == SYSFLAG_TX_PREPARED || tx == SYSFLAG_TX_ROLLBACK)
        return false;   /* no queue entry: nothing to make */
    char qd[16];
    char *qde = qd + sizeof(qd), *qdb = fjson_i64_digits(qde, m->qid);
    size_t klen = m->topic_len + 1 + (size_t)(qde - qdb);
    struct held_send probe;
    if (klen > sizeof(probe.key))
        return false;
    /* Charged as a held pull is (as a request waiting in a Lua task); a
     * refused charge puts now instead of refusing the send. */
    int64_t cost = (int64_t)(sizeof(struct held_send) + r->frame_len) + MEMBUDGET_TASK_BYTES;
    enum membudget_limit which;
    if (r->c->mb_open && !membudget_charge(r->c->r->budget, &r->c->mb, cost, &which))
        return false;
    struct held_send *hs = calloc(1, sizeof(*hs) + r->frame_len);
    if (hs == NULL) {
        if (r->c->mb_open)
            membudget_release(r->c->r->budget, &r->c->mb, cost);
        return false;
    }
    hs->sp = sp;
    hs->h = r->h;
    hs->c = r->c;
    hs->start_ns = r->start_ns;
    hs->deadline_ms = now_ms() + HOLD_MAX_MS;
    hs->charged = r->c->mb_open ? cost : 0;
    memcpy(hs->key, m->topic, m->topic_len);
    hs->key[m->topic_len] = '@';
    memcpy(hs->key + m->topic_len + 1, qdb, (size_t)(qde - qdb));
    hs->topic = hs->key;
    hs->tlen = m->topic_len;
    hs->qid = m->qid;
    hs->klen = klen;
    hs->len = r->frame_len;
    memcpy(hs->frame, r->frame, r->frame_len);
    q_init(&hs->link);
    conn_ref(hs->c);
    conn_request_begin(hs->c);
    conn_hold(hs->c);
    hs->h->requests_live++;   /* a stopping worker drains it */
    q_insert_tail(&sp->held, &hs->link);
    /* The wait first, then the request: the raise cannot come before
     * anyone waits for it. */
    hs->ev = post_event_wait(&hs->h->post, hs->key, hs->klen, HOLD_RECHECK_MS, hold_wake, hs);
    int rc = hs->ev != NULL ? store_request_queue(sp->store, m->topic, m->topic_len, m->qid) : -ENOMEM;
    if (rc != 0) {
        /* Made meanwhile, or it cannot be asked for: put now. */
        hold_end(hs, false);
        return false;
    }
    return true;
}

/* }}} */

static int
send_stored(struct send_processor *sp, struct native_req *r, const struct spec_map *sm,
            const struct lheader_val *vals, const struct topic_config *known);

static int
send_run(struct native_proc *p, struct native_req *r)
{
    struct send_processor *sp = (struct send_processor *)p;
    const struct rmq_cmd *cmd = r->cmd;
    const struct spec_map *sm = cmd->code == RMQ_REQ_SEND_MESSAGE ? &sp->v1 : &sp->v2;
    struct lheader_val vals[64];
    char remark[512];
    if (lheader_decode(sm->spec, cmd, vals, remark, sizeof(remark)) != 0)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "%s", remark);
    return send_stored(sp, r, sm, vals, NULL);
}

/* The header spec of a send code, for the typed one-pass decode
 * (native_proc.json_spec); a reply message's checks go the generic way. */
static const struct hspec *
send_json_spec(struct native_proc *p, int32_t code)
{
    struct send_processor *sp = (struct send_processor *)p;
    if (sp->checks_only)
        return NULL;
    switch (code) {
    case RMQ_REQ_SEND_MESSAGE:
        return sp->v1.spec;
    case RMQ_REQ_SEND_MESSAGE_V2:
    case RMQ_REQ_SEND_BATCH_MESSAGE:
        return sp->v2.spec;
    default:
        return NULL;
    }
}

/* send_run with the header's values read already (send_json_spec's). */
static int
send_run_typed(struct native_proc *p, struct native_req *r, const struct lheader_val *vals)
{
    struct send_processor *sp = (struct send_processor *)p;
    const struct spec_map *sm = r->cmd->code == RMQ_REQ_SEND_MESSAGE ? &sp->v1 : &sp->v2;
    return send_stored(sp, r, sm, vals, NULL);
}

bool
send_processor_is(const struct native_proc *p)
{
    return p != NULL && p->run == send_run;
}

int
send_processor_typed(struct native_proc *p, struct native_req *r, const struct send_typed *t)
{
    struct send_processor *sp = (struct send_processor *)p;
    const struct spec_map *sm = &sp->v2;
    if (sp->checks_only || r->cmd->code != RMQ_REQ_SEND_MESSAGE_V2)
        return NATIVE_TO_LUA;
    /* The values lheader_decode would have read from V2's extFields
     * (the send as text: a..j), typed already. */
    struct lheader_val vals[64];
    memset(vals, 0, (size_t)lheader_nfields(sm->spec) * sizeof(vals[0]));
#define TSTR(f_, p_, n_) \
    (vals[f_].p = (p_), vals[f_].len = (uint32_t)(n_), vals[f_].set = true)
#define TNUM(f_, v_) (vals[f_].i = (v_), vals[f_].set = true)
    if (t->producer_group != NULL && sm->group >= 0)
        TSTR(sm->group, t->producer_group, strlen(t->producer_group));
    TSTR(sm->idx[F_TOPIC], t->topic, t->topic_len);
    TNUM(sm->idx[F_QUEUE_ID], t->queue_id);
    TNUM(sm->idx[F_SYS_FLAG], t->sys_flag);
    TNUM(sm->idx[F_BORN_TS], t->born_ts);
    TNUM(sm->idx[F_FLAG], t->flag);
    TSTR(sm->idx[F_PROPERTIES], t->props, t->props_len);
    TNUM(sm->idx[F_RECONSUME], t->reconsume);
#undef TSTR
#undef TNUM
    if (!lheader_typed_ok(sm->spec, vals))
        return NATIVE_TO_LUA;   /* its refusal's text is the decoder's */
    return send_stored(sp, r, sm, vals, t->tc);
}

static int
send_stored(struct send_processor *sp, struct native_req *r, const struct spec_map *sm,
            const struct lheader_val *vals, const struct topic_config *known)
{
    const struct rmq_cmd *cmd = r->cmd;
    const struct lheader_val *topic = &vals[sm->idx[F_TOPIC]];
    const struct lheader_val *props_in = &vals[sm->idx[F_PROPERTIES]];
    const struct lheader_val *reconsume = &vals[sm->idx[F_RECONSUME]];
    bool batch = vals[sm->idx[F_BATCH]].set && vals[sm->idx[F_BATCH]].i != 0;
    int64_t sys_flag = vals[sm->idx[F_SYS_FLAG]].i;
    int64_t qid = vals[sm->idx[F_QUEUE_ID]].i;
    int64_t tx = sys_flag & TRANSACTION_TYPE;

    /* RocketMQ's checks, in its order (protocol.md 4.1). */
    if ((broker_perm_get(&sp->perm) & RMQ_PERM_WRITE) == 0)
        return refuse(r, RMQ_RESP_NO_PERMISSION, "the broker[%s] sending message is forbidden", sp->ip);
    if (not_allowed(sp, topic->p, topic->len))
        return refuse(r, RMQ_RESP_NO_PERMISSION, "Sending message to topic[%.*s] is forbidden.",
                      (int)topic->len, topic->p);
    /* The role at run time (a controller may switch it), refused with
     * 4.9.8's text: the store's own refusal names no reason a client
     * knows. */
    if (!sp->checks_only && store_role_slave(sp->store))
        return refuse(r, RMQ_RESP_SERVICE_NOT_AVAILABLE,
                      "service not available now. It may be caused by one of the following reasons: "
                      "the broker's disk is full, messages are put to the slave, message store has been "
                      "shut down, etc.");
    struct topic_config tc;
    if (known != NULL)
        tc = *known;
    else if (topic_cached(sp, topic->p, topic->len, &tc))
        ;
    else if (topic_lookup(sp, topic->p, topic->len, &tc) != 0) {
        if (sp->checks_only)   /* a reply message's topic is never made */
            return refuse(r, RMQ_RESP_TOPIC_NOT_EXIST, "topic[%.*s] not exist, apply first please!" FAQ,
                          (int)topic->len, topic->p);
        if (create_topic(sp, r, topic, &vals[sm->idx[F_DEFAULT_TOPIC]], &vals[sm->idx[F_DEFAULT_QNUMS]],
                         cmd->code == RMQ_REQ_SEND_MESSAGE, &tc) != 0)
            return NATIVE_DONE;   /* answered there */
    }
    if ((tc.perm & RMQ_PERM_WRITE) == 0)
        return refuse(r, RMQ_RESP_NO_PERMISSION, "the topic[%.*s] sending message is forbidden",
                      (int)topic->len, topic->p);
    int32_t nq = tc.write_queue_nums > tc.read_queue_nums ? tc.write_queue_nums
                                                          : tc.read_queue_nums;
    if (qid >= nq)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "request queueId[%lld] is illegal, %.*s Producer: %s",
                      (long long)qid, (int)topic->len, topic->p, r->c->peer);
    bool picked = qid < 0;   /* a queue chosen here: a rerun would choose anew */
    if (qid < 0) {
        if (tc.write_queue_nums < 1)
            return refuse(r, RMQ_RESP_SYSTEM_ERROR, "topic[%.*s] has no write queue to pick, Producer: %s",
                          (int)topic->len, topic->p, r->c->peer);
        qid = (int64_t)(next_random(sp) % (uint64_t)tc.write_queue_nums);
    }
    if ((int64_t)cmd->body_len > sp->max_size)
        return refuse(r, RMQ_RESP_MESSAGE_ILLEGAL, "the message body size %lu is over %lld",
                      (unsigned long)cmd->body_len, (long long)sp->max_size);
    if (sp->checks_only)
        return NATIVE_TO_LUA;   /* a reply message that passed them */
    /* Where the message goes: its topic, or a retry past its maximum's
     * dead-letter topic (queue 0). */
    const char *dt = topic->p;
    size_t dtl = topic->len;
    char dlq[160];
    bool to_dlq = false;
    if (!batch && has_prefix(topic->p, topic->len, RETRY_PREFIX)) {
        size_t pl = sizeof(RETRY_PREFIX) - 1;
        int rc = retry_choice(sp, r, topic->p + pl, topic->len - pl,
                              reconsume->set ? reconsume->i : 0, &vals[sm->idx[F_MAX_RECONSUME]],
                              dlq, sizeof(dlq));
        if (rc < 0)
            return NATIVE_DONE;
        if (rc > 0) {
            to_dlq = true;
            dt = dlq;
            dtl = strlen(dlq);
            qid = 0;
        }
    }
    struct props_send f;
    buf_reset(&sp->props);
    if (props_for_store(&sp->props, props_in->set ? props_in->p : "",
                        props_in->set ? props_in->len : 0, sp->cluster, sp->cluster_len,
                        batch, &f) != 0)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "out of memory for the message's properties");
    if (f.delay > 0 && batch)
        return refuse(r, RMQ_RESP_MESSAGE_ILLEGAL, "batch messages cannot be delayed");
    bool prepared = f.prepared && !batch;
    if (prepared) {
        /* A half message (protocol.md 6.4), TransactionalMessageBridge's
         * parseHalfMessageInner: REAL_TOPIC and REAL_QID set (in place
         * when the producer sent them), into the half topic; the Java
         * producer clears DELAY on these, so no schedule detour. */
        if (!sp->halves)
            return refuse(r, RMQ_RESP_NO_PERMISSION,
                          "the broker[%s] sending transaction message is forbidden", sp->ip);
        char qd[16];
        char *qde = qd + sizeof(qd), *qdb = fjson_i64_digits(qde, qid);
        struct prop edits[2] = {
            { "REAL_TOPIC", 10, dt, dtl },
            { "REAL_QID", 8, qdb, (size_t)(qde - qdb) },
        };
        buf_reset(&sp->hold);
        if (!half_topic(sp))
            return refuse(r, RMQ_RESP_SYSTEM_ERROR, "topic[%s] not exist", HALF_TOPIC);
        if (props_edit(&sp->hold, (const char *)buf_head(&sp->props), buf_len(&sp->props),
                       edits, 2) != 0)
            return refuse(r, RMQ_RESP_SYSTEM_ERROR, "out of memory for the message's properties");
        struct buf t = sp->props;   /* the edited string is the one stored */
        sp->props = sp->hold;
        sp->hold = t;
    }
    /* A delay level: parked in SCHEDULE_TOPIC_XXXX until due (protocol.md
     * 6.3), where the hook says, unless a rollback's; the reply still
     * names the queue the producer chose. */
    int32_t delay_queue = -1;
    int64_t delay_due = 0;
    if (!prepared && f.delay > 0 && tx != TRANSACTION_TYPE &&
        delay_redirect(sp, r, dt, dtl, qid, f.delay, &delay_queue, &delay_due) != 0)
        return NATIVE_DONE;
    int64_t bucket = -1;
    if (f.timer && !batch && delay_queue < 0 && (tx == 0 || prepared)) {
        /* RIP-43: held in the timer topic until its time (store/timer.h).
         * A half message's timer is held at its commit (END_TRANSACTION);
         * its fields are checked now, so a bad one is refused while the
         * producer waits, not after it was acknowledged. */
        const struct store_conf *sc = &sp->store->conf;
        char why[400];
        int k = timer_classify((const char *)buf_head(&sp->props), buf_len(&sp->props),
                               sc->timer_enable, sc->timer_max_delay_ms, sc->timer_precision_ms,
                               timer_now_ms(), &bucket, why, sizeof(why));
        if (k == TIMER_ILLEGAL || k == TIMER_DISABLED) {
            native_reply(r, k == TIMER_ILLEGAL ? RMQ_RESP_MESSAGE_ILLEGAL : RMQ_RESP_SYSTEM_ERROR, why, strlen(why),
                         NULL, 0, NULL, 0, NULL);
            return NATIVE_DONE;
        }
        if (k != TIMER_HOLD || prepared)
            bucket = -1;
    }
    const struct host_addr *born = born_host(sp, r->c->peer);
    if (born == NULL)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "msg.bornHost: cannot parse the address %s", r->c->peer);

    struct store_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = dt;
    m.topic_len = dtl;
    m.qid = (int32_t)qid;
    m.flag = (int32_t)vals[sm->idx[F_FLAG]].i;
    m.sysflag = (int32_t)sys_flag;
    int32_t reply_qid = m.qid;   /* a half message's reply names its real queue */
    if (prepared) {
        m.topic = HALF_TOPIC;
        m.topic_len = sizeof(HALF_TOPIC) - 1;
        m.qid = 0;
        m.sysflag &= ~TRANSACTION_TYPE;
    }
    if (delay_queue >= 0) {
        m.topic = SCHEDULE_TOPIC;
        m.topic_len = sizeof(SCHEDULE_TOPIC) - 1;
        m.qid = delay_queue;
    }
    if (bucket >= 0) {
        buf_reset(&sp->hold);
        if (timer_hold_props(&sp->hold, (const char *)buf_head(&sp->props), buf_len(&sp->props),
                             bucket, dt, dtl, m.qid) != 0) {
            err_set("out of memory for a timer message's properties");
            return refuse_put(r, &m, PUT_UNKNOWN_ERROR);
        }
        m.topic = TIMER_TOPIC;
        m.topic_len = sizeof(TIMER_TOPIC) - 1;
        m.qid = 0;
    }
    m.reconsume = reconsume->set ? (int32_t)reconsume->i : 0;
    m.body = cmd->body != NULL ? cmd->body : (const uint8_t *)"";
    m.body_len = cmd->body_len;
    m.props = (const char *)buf_head(&sp->props);
    m.props_len = buf_len(&sp->props);
    m.born_ts = vals[sm->idx[F_BORN_TS]].i;
    m.born = *born;
    m.store = sp->store_host;
    if (f.tags != NULL) {
        m.has_tags_code = true;
        m.tags_code = f.tags_len > 0 ? java_hash(f.tags, f.tags_len) : 0;
    }
    if (bucket >= 0) {
        m.props = (const char *)buf_head(&sp->hold);
        m.props_len = buf_len(&sp->hold);
        m.has_tags_code = true;
        m.tags_code = bucket;   /* the timer topic's entries carry the time */
    }
    if (delay_queue >= 0) {
        m.props = (const char *)buf_head(&sp->hold);
        m.props_len = buf_len(&sp->hold);
        m.has_tags_code = true;
        m.tags_code = delay_due;   /* the schedule topic's entries carry the time */
    }

    /* A new queue: made off this thread, the send held meanwhile (not for
     * a queue picked here: its rerun would pick another, found in review). */
    if (!picked && hold_for_queue(sp, r, &m))
        return NATIVE_DONE;

    /* Staged, answered at once, the reply gated on this loop's commit
     * (reactor.h): not for a oneway send (no reply to gate) nor a wait
     * for a slave (nothing would commit before the HA thread looks), nor
     * from a detached conn, which has no socket to gate, unless its
     * replies go out on one it names (gate_to: a gRPC connection's). */
    int64_t ticket = 0;
    if (sp->defer == 0) {
        if (sp->sync == NULL)
            sp->sync = syncwait_new_on(r->h, sp->store);
        sp->defer = sp->sync != NULL && syncwait_gate(sp->sync) ? 1 : -1;
    }
    if (sp->defer > 0 && !r->oneway && (!r->c->detached || r->c->gate_to != NULL) &&
        !(f.wait && store_role_sync_master(sp->store))) {
        m.defer = true;
        ticket = syncwait_ticket(sp->sync);
    }
    /* A frame handed up just now (not a rerun, a held send or a Lua
     * handler's): the clock read once for the frames of its dispatch,
     * which all arrived before it (conn.h's dispatch_ms). */
    if (!sp->rerun && r->lua == NATIVE_LUA_NONE && r->frame != NULL && !r->c->detached) {
        if (r->c->dispatch_ms == 0)
            r->c->dispatch_ms = clock_wall_ms();
        m.arrived_ms = r->c->dispatch_ms;
    }

    struct store_put_result res;
    char id[64];
    const char *ids;
    size_t ids_len;
    /* The append's time, for rmq_storage_put_latency (metrics on only). */
    int64_t put_t0 = r->h->metrics != NULL ? clock_mono_ns() : 0, put_ns = -1;
    if (batch) {
        int cap = store_batch_cap(m.body, m.body_len);
        if (ensure_work(sp, cap) != 0) {
            err_set("out of memory for a batch of %d", cap);
            return refuse_put(r, &m, PUT_UNKNOWN_ERROR);
        }
        if (store_put_batch(sp->store, &m, sp->work, cap, &res) != PUT_OK) {
            int rc = refuse_put(r, &m, res.status);
            release_batch_space(sp);
            return rc;
        }
        if (r->h->metrics != NULL)
            put_ns = clock_mono_ns() - put_t0;
        int n = res.count;
        buf_reset(&sp->ids);
        for (int i = 0; i < n; i++) {
            size_t idn = clog_msgid(id, &m.store, sp->work[i].phy);
            if ((i > 0 && buf_append(&sp->ids, ",", 1) != 0) ||
                buf_append(&sp->ids, id, idn) != 0) {
                log_error("send: out of memory for the msgIds of a stored batch");
                break;
            }
        }
        ids = (const char *)buf_head(&sp->ids);
        ids_len = buf_len(&sp->ids);
    } else {
        if (store_put(sp->store, &m, &res) != PUT_OK)
            return refuse_put(r, &m, res.status);
        if (r->h->metrics != NULL)
            put_ns = clock_mono_ns() - put_t0;
        ids = id;
        ids_len = clog_msgid(id, &m.store, res.phy);
    }

    if (r->h->metrics != NULL) {
        metrics_in(r->h->metrics, m.topic, m.topic_len, (uint64_t)res.count,
                   (uint64_t)res.wrote, (uint64_t)m.body_len, put_ns);
        if (to_dlq) {
            /* Counted under the message's first topic (RETRY_TOPIC). */
            size_t ol;
            const char *o = props_find((const char *)buf_head(&sp->props), buf_len(&sp->props),
                                       "RETRY_TOPIC", &ol);
            if (o == NULL) {
                o = topic->p;
                ol = topic->len;
            }
            size_t dp = sizeof("%DLQ%") - 1;
            if (dtl > dp)
                metrics_dlq(r->h->metrics, o, ol, dt + dp, dtl - dp, 1);
        }
    }

    /* Held pulls on this queue, in every worker. */
    char key[160], qd[16];
    char *qde = qd + sizeof(qd), *qdb = fjson_i64_digits(qde, m.qid);
    size_t kl = m.topic_len + 1 + (size_t)(qde - qdb);
    if (kl <= sizeof(key)) {   /* a topic is at most 127 bytes */
        memcpy(key, m.topic, m.topic_len);
        key[m.topic_len] = '@';
        memcpy(key + m.topic_len + 1, qdb, (size_t)(qde - qdb));
        if (post_raise(&r->h->post, key, kl) != 0)
            log_warn("send: out of memory waking the pulls of %.*s", (int)kl, key);
        /* Held POPs wait on "topic@*" (pop_processor.h). */
        if (notify_star_waiting()) {
            key[m.topic_len + 1] = '*';
            (void)post_raise(&r->h->post, key, m.topic_len + 2);
        }
    }

    char qid_s[24], qoff_s[24];
    char *qe = qid_s + sizeof(qid_s) - 1, *oe = qoff_s + sizeof(qoff_s) - 1;
    *qe = *oe = '\0';
    const char *qb = fjson_i64_digits(qe, reply_qid), *ob = fjson_i64_digits(oe, res.qoff);
    const char *recall = NULL;
    size_t recall_len = 0;
    if (bucket >= 0 && !has_prefix(dt, dtl, RETRY_PREFIX)) {
        size_t ul;
        const char *uk = props_find((const char *)buf_head(&sp->props), buf_len(&sp->props),
                                    "UNIQ_KEY", &ul);
        buf_reset(&sp->recall);
        if (uk != NULL && timer_recall_handle(&sp->recall, dt, dtl, sp->broker_name,
                                              strlen(sp->broker_name), bucket, uk, ul) == 0) {
            recall = (const char *)buf_head(&sp->recall);
            recall_len = buf_len(&sp->recall);
        }
    }
    if (store_put_must_wait(sp->store, f.wait, res.end))
        (void)wait_flush(r, sp, res.end, qb, ob, ids, ids_len, recall, recall_len);   /* copies ids */
    else {
        reply_stored(r, sp, RMQ_RESP_SUCCESS, qb, (size_t)(qe - qb), ob, (size_t)(oe - ob), ids, ids_len,
                     recall, recall_len);
        if (m.defer)
            conn_gate_output(r->c, ticket);
    }
    release_batch_space(sp);
    return NATIVE_DONE;
}

static void
send_destroy(struct native_proc *p)
{
    struct send_processor *sp = (struct send_processor *)p;
    /* Sends still held (the host is being freed: their connections are
     * closed) are dropped unanswered, as held pulls are. */
    while (sp->held.next != NULL && !q_empty(&sp->held))
        hold_end(container_of(sp->held.next, struct held_send, link), false);
    buf_free(&sp->arena);
    if (sp->sync != NULL)
        syncwait_close(sp->sync);   /* pending waits end unanswered */
    if (sp->store != NULL)
        store_unref(sp->store);
    if (sp->L != NULL) {
        luaL_unref(sp->L, LUA_REGISTRYINDEX, sp->create_ref);
        luaL_unref(sp->L, LUA_REGISTRYINDEX, sp->delay_ref);
        luaL_unref(sp->L, LUA_REGISTRYINDEX, sp->retry_ref);
        luaL_unref(sp->L, LUA_REGISTRYINDEX, sp->half_ref);
    }
    for (int i = 0; i < sp->n_not_allowed; i++)
        free(sp->not_allowed[i]);
    free(sp->not_allowed);
    free(sp->not_allowed_len);
    free(sp->cluster);
    free(sp->region);
    free(sp->broker_name);
    free(sp->ip);
    buf_free(&sp->recall);
    free(sp->work);
    buf_free(&sp->props);
    buf_free(&sp->hold);
    buf_free(&sp->ids);
    free(sp);
}

static int
map_spec(struct spec_map *m, const struct hspec *s)
{
    m->spec = s;
    if (lheader_nfields(s) > 64) {
        err_set("a send header spec has more than 64 fields");
        return -1;
    }
    for (int i = 0; i < NFIELDS; i++) {
        m->idx[i] = lheader_field(s, field_keys[i]);
        if (m->idx[i] < 0) {
            err_set("the send header spec has no field %s", field_keys[i]);
            return -1;
        }
    }
    m->group = lheader_field(s, "producerGroup");
    return 0;
}

struct native_proc *
send_processor_new(const struct send_processor_conf *c)
{
    struct send_processor *sp = calloc(1, sizeof(*sp));
    if (sp == NULL) {
        if (c->L != NULL) {
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->create_ref);
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->delay_ref);
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->retry_ref);
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->half_ref);
        }
        err_set("out of memory");
        return NULL;
    }
    sp->L = c->L;              /* owned now: send_destroy releases it */
    sp->create_ref = c->create_ref;
    sp->delay_ref = c->delay_ref;
    sp->retry_ref = c->retry_ref;
    sp->half_ref = c->half_ref;
    sp->base.name = "send";
    sp->base.run = send_run;
    sp->base.destroy = send_destroy;
    sp->base.json_spec = send_json_spec;
    sp->base.run_typed = send_run_typed;
    buf_init(&sp->props);
    buf_init(&sp->hold);
    buf_init(&sp->ids);
    buf_init(&sp->arena);
    q_init(&sp->held);
    if (map_spec(&sp->v1, c->v1) != 0 || map_spec(&sp->v2, c->v2) != 0) {
        send_destroy(&sp->base);
        return NULL;
    }
    sp->cluster = strdup(c->cluster);
    sp->region = strdup(c->region);
    sp->broker_name = strdup(c->broker_name != NULL ? c->broker_name : "");
    sp->ip = strdup(c->ip != NULL ? c->ip : "");
    buf_init(&sp->recall);
    sp->not_allowed = calloc((size_t)c->n_not_allowed + 1, sizeof(char *));
    sp->not_allowed_len = calloc((size_t)c->n_not_allowed + 1, sizeof(size_t));
    sp->topics = config_table_topics();
    if (sp->cluster == NULL || sp->region == NULL || sp->broker_name == NULL || sp->ip == NULL ||
        sp->not_allowed == NULL || sp->not_allowed_len == NULL ||
        sp->topics == NULL || broker_perm_init(&sp->perm, c->perm) != 0) {
        send_destroy(&sp->base);
        err_set("out of memory");
        return NULL;
    }
    for (int i = 0; i < c->n_not_allowed; i++) {
        sp->not_allowed[i] = strdup(c->not_allowed[i]);
        if (sp->not_allowed[i] == NULL) {
            send_destroy(&sp->base);
            err_set("out of memory");
            return NULL;
        }
        sp->not_allowed_len[i] = strlen(sp->not_allowed[i]);
        sp->not_allowed_lens |= UINT64_C(1) << (sp->not_allowed_len[i] & 63);
        sp->n_not_allowed = i + 1;
    }
    sp->cluster_len = strlen(sp->cluster);
    sp->region_len = strlen(sp->region);
    sp->region_plain = fjson_plain(sp->region, sp->region_len);
    sp->trace_on = c->trace_on;
    sp->max_size = c->max_size;
    sp->halves = c->halves;
    sp->checks_only = c->checks_only;
    sp->rng = (uint64_t)clock_mono_ns() | 1;
    sp->store = c->store;
    sp->store_host = c->store_host;
    store_ref(sp->store);
    store_set_queue_made_hook(sp->store, queue_made, NULL);
    return &sp->base;
}
