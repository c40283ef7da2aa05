/*
 * upstream: see upstream.h.
 */
#include "grpc/upstream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/hmap.h"
#include "core/jscan.h"
#include "core/log.h"
#include "core/queue.h"
#include "core/wcache.h"
#include "net/codec.h"
#include "net/conn.h"
#include "net/reactor.h"
#include "rmq_codes.h"

#define PERM_WRITE 0x2
#define PERM_READ 0x4

/* The producer group gRPC producers' half messages carry (service.c). */
#define GRPC_PRODUCER_GROUP "CLIENT_INNER_PRODUCER"

/* Heartbeats to the brokers every this many timer ticks (1 s): well
 * inside the broker's 120 s channel expiry, as a remoting client's 30 s. */
#define HEARTBEAT_TICKS 30

/* A request waiting for its topic's route (or its group's config): its
 * frame, copied. */
struct waiter {
    struct wcache_waiter w;     /* first: the cache's part */
    struct conn *reply_to;      /* referenced */
    unsigned waited;            /* W_*: what it waited for already */
    size_t len;
    uint8_t frame[];
};

/* What a request routed again has waited for (it waits for each once). */
#define W_ROUTE 1u
#define W_GROUP 2u

/* One consumer group's config from a broker (GET_SUBSCRIPTIONGROUP_CONFIG,
 * as 5.x's ClusterMetadataService's subscriptionGroupConfigCache): its
 * consumeMessageOrderly, which makes its POPs orderly, and what a
 * consumer's Settings take from it (fifo, retry policy).  Requests wait for the first answer; asked again every
 * subscriptionGroupConfigCacheRefreshSeconds, dropped when unused for
 * ...ExpiredSeconds, at most ...MaxNum groups (5.x's keys). */
struct group_ent {
    struct wcache_ent ent;      /* first: in up->groups; its key is the group */
    bool known;                 /* answered (or could not be asked) once */
    bool had;                   /* a config (or "no such group") was had:
                                 * until then every use asks again, not
                                 * only each refresh (a first ask that
                                 * failed must not serve a FIFO group as
                                 * not orderly for the refresh interval) */
    bool fetching;
    struct subscription_group g;   /* the config's parts read (upstream_group_parse) */
    uint64_t fetched_ms;
};

/* One topic's route. */
struct route_ent {
    struct wcache_ent ent;      /* first: in up->routes; its key is the topic */
    uint64_t fetched_ms;        /* 0: never fetched */
    bool fetching;
    uint8_t *json;              /* the NameServer's body; NULL: none yet */
    size_t json_len;
    struct upstream_broker *b;  /* the brokers with a master */
    uint32_t nb;
    /* The topic's config from one of its brokers (GET_TOPIC_CONFIG, as
     * 5.x's ClusterMetadataService): its message.type, which QueryRoute
     * lists and SendMessage is checked against.  Requests wait for the
     * first answer as for the route; then it is asked again every
     * topicConfigCacheRefreshSeconds (the one held serving meanwhile). */
    uint8_t msg_type;           /* TOPIC_MSG_*; 0: none (every type) or unknown */
    bool cfg_known;             /* asked once, answered or not */
    bool cfg_fetching;
    uint64_t cfg_ms;            /* when last asked */
};

struct upstream {
    struct reactor *r;
    struct upstream_conf conf;
    void (*on_check)(void *arg, const uint8_t *frame, size_t len);
    void *arg;
    /* The route cache (topicRouteServiceCacheMaxNum) and the group
     * config cache (subscriptionGroupConfigCacheMaxNum): what nothing
     * waits on is evicted least recently used first, and expires (core/
     * wcache.h).  Their waiters together: at most proxyMaxWaitingRequests. */
    struct wcache routes;       /* topic -> struct route_ent */
    struct hmap conns;          /* "host:port" -> struct conn (one reference) */
    struct hmap names;          /* brokerName -> malloc'ed master address */
    struct wcache groups;       /* group -> struct group_ent */
    int32_t next_opaque;
    uint32_t rr;
    uint32_t ns_idx;
    uint32_t ticks;
    uv_timer_t timer;
    bool timer_on;
    bool stopped;
    char client_id[96];
    struct buf out;             /* a request being encoded */
    struct buf arena;           /* a request being decoded */
};

/* A request forwarded to a broker: where its reply goes. */
struct fwd {
    struct upstream *up;
    struct conn *reply_to;      /* referenced; NULL: nobody (heartbeats) */
    int32_t opaque;             /* the session's */
    int32_t code;
    char broker[128];           /* for the reply's proxyBrokerName and logs */
};

/* A route or topic config fetch: which topic (the entry may be gone
 * when it answers). */
struct fetch {
    struct upstream *up;
    char addr[64];
    char topic[];
};

static uint64_t
now_ms(struct upstream *up)
{
    return uv_now(&up->r->loop);
}

static int32_t
next_opaque(struct upstream *up)
{
    if (++up->next_opaque == INT32_MAX)
        up->next_opaque = 1;
    return up->next_opaque;
}

/* {{{ Route parsing */

static const uint8_t *
ws(const uint8_t *p, const uint8_t *e)
{
    return jscan_ws(p, e);
}

/* A key: a string, or fastjson's bare integer.  Copied (raw) into out. */
static int
read_key(const uint8_t **pp, const uint8_t *e, char *out, size_t cap)
{
    const uint8_t *p = ws(*pp, e);
    const uint8_t *raw;
    size_t n;
    if (p < e && *p == '"') {
        bool esc;
        if (jscan_string(&p, e, &raw, &n, &esc) != NULL)
            return -1;
    } else {
        raw = p;
        while (p < e && ((*p >= '0' && *p <= '9') || *p == '-'))
            p++;
        n = (size_t)(p - raw);
        if (n == 0)
            return -1;
    }
    if (n >= cap)
        n = cap - 1;
    memcpy(out, raw, n);
    out[n] = '\0';
    p = ws(p, e);
    if (p >= e || *p != ':')
        return -1;
    *pp = p + 1;
    return 0;
}

/* A string value (raw: broker names and addresses have no escapes). */
static int
read_str(const uint8_t **pp, const uint8_t *e, char *out, size_t cap)
{
    const uint8_t *p = ws(*pp, e);
    const uint8_t *raw;
    size_t n;
    bool esc;
    if (p >= e || *p != '"' || jscan_string(&p, e, &raw, &n, &esc) != NULL || n >= cap)
        return -1;
    memcpy(out, raw, n);
    out[n] = '\0';
    *pp = p;
    return 0;
}

static int
read_int(const uint8_t **pp, const uint8_t *e, int32_t *v)
{
    const uint8_t *p = ws(*pp, e);
    const uint8_t *s = p;
    bool is_int;
    if (jscan_number(&p, e, &is_int) != NULL || !is_int || p - s > 11)
        return -1;
    char tmp[16];
    memcpy(tmp, s, (size_t)(p - s));
    tmp[p - s] = '\0';
    long x = strtol(tmp, NULL, 10);
    if (x < INT32_MIN || x > INT32_MAX)
        return -1;
    *v = (int32_t)x;
    *pp = p;
    return 0;
}

/* After a value: ',' (true, more follow) or the closer (false). */
static int
next_item(const uint8_t **pp, const uint8_t *e, char closer, bool *more)
{
    const uint8_t *p = ws(*pp, e);
    if (p < e && *p == ',') {
        *more = true;
    } else if (p < e && *p == closer) {
        *more = false;
    } else {
        return -1;
    }
    *pp = p + 1;
    return 0;
}

/* Opens a container: true when it is empty (its closer read too). */
static int
open_container(const uint8_t **pp, const uint8_t *e, char opener, char closer, bool *empty)
{
    const uint8_t *p = ws(*pp, e);
    if (p >= e || *p != opener)
        return -1;
    p = ws(p + 1, e);
    *empty = p < e && *p == closer;
    *pp = *empty ? p + 1 : p;
    return 0;
}

static struct upstream_broker *
find_broker(struct upstream_route *rt, const char *name)
{
    for (uint32_t i = 0; i < rt->n; i++)
        if (strcmp(rt->b[i].name, name) == 0)
            return &rt->b[i];
    return NULL;
}

/* {"brokerName":..,"brokerAddrs":{0:"addr",..},..} */
static int
parse_broker_data(const uint8_t **pp, const uint8_t *e, struct upstream_route *rt)
{
    bool empty, more = true;
    char key[64], name[128] = "", master[64] = "";
    if (open_container(pp, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(pp, e, key, sizeof(key)) != 0)
            return -1;
        if (strcmp(key, "brokerName") == 0) {
            if (read_str(pp, e, name, sizeof(name)) != 0)
                return -1;
        } else if (strcmp(key, "brokerAddrs") == 0) {
            bool e2, m2 = true;
            if (open_container(pp, e, '{', '}', &e2) != 0)
                return -1;
            while (!e2 && m2) {
                char id[24], addr[64];
                if (read_key(pp, e, id, sizeof(id)) != 0 || read_str(pp, e, addr, sizeof(addr)) != 0 ||
                    next_item(pp, e, '}', &m2) != 0)
                    return -1;
                if (strcmp(id, "0") == 0)
                    memcpy(master, addr, sizeof(master));
            }
        } else if (jscan_skip(pp, e, 2, 16) != NULL) {
            return -1;
        }
        if (next_item(pp, e, '}', &more) != 0)
            return -1;
    }
    if (name[0] == '\0' || master[0] == '\0')
        return 0;   /* no master: not a broker requests can go to */
    struct upstream_broker *b = find_broker(rt, name);
    if (b == NULL) {
        if (rt->n >= UPSTREAM_MAX_BROKERS)
            return 0;
        b = &rt->b[rt->n++];
        memset(b, 0, sizeof(*b));
        memcpy(b->name, name, sizeof(b->name));
    }
    memcpy(b->addr, master, sizeof(b->addr));
    return 0;
}

/* {"brokerName":..,"perm":6,"readQueueNums":4,"writeQueueNums":4,..} */
static int
parse_queue_data(const uint8_t **pp, const uint8_t *e, struct upstream_route *rt,
                 struct upstream_broker *qd)
{
    bool empty, more = true;
    char key[64];
    memset(qd, 0, sizeof(*qd));
    if (open_container(pp, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(pp, e, key, sizeof(key)) != 0)
            return -1;
        int rc = strcmp(key, "brokerName") == 0       ? read_str(pp, e, qd->name, sizeof(qd->name))
               : strcmp(key, "perm") == 0             ? read_int(pp, e, &qd->perm)
               : strcmp(key, "readQueueNums") == 0    ? read_int(pp, e, &qd->read_queues)
               : strcmp(key, "writeQueueNums") == 0   ? read_int(pp, e, &qd->write_queues)
               : jscan_skip(pp, e, 2, 16) != NULL ? -1 : 0;
        if (rc != 0 || next_item(pp, e, '}', &more) != 0)
            return -1;
    }
    (void)rt;
    return 0;
}

int
upstream_route_parse(const uint8_t *json, size_t len, struct upstream_route *rt)
{
    const uint8_t *p = json, *e = json + len;
    struct upstream_broker qds[UPSTREAM_MAX_BROKERS];
    uint32_t nq = 0;
    bool empty, more = true;
    char key[64];
    rt->n = 0;
    if (open_container(&p, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(&p, e, key, sizeof(key)) != 0)
            return -1;
        bool brokers = strcmp(key, "brokerDatas") == 0, queues = strcmp(key, "queueDatas") == 0;
        if (brokers || queues) {
            bool e2, m2 = true;
            if (open_container(&p, e, '[', ']', &e2) != 0)
                return -1;
            while (!e2 && m2) {
                struct upstream_broker scratch;
                int rc = brokers ? parse_broker_data(&p, e, rt)
                                 : parse_queue_data(&p, e, rt, nq < UPSTREAM_MAX_BROKERS ? &qds[nq] : &scratch);
                if (rc != 0 || next_item(&p, e, ']', &m2) != 0)
                    return -1;
                if (queues && nq < UPSTREAM_MAX_BROKERS)
                    nq++;
            }
        } else if (jscan_skip(&p, e, 1, 16) != NULL) {
            return -1;
        }
        if (next_item(&p, e, '}', &more) != 0)
            return -1;
    }
    /* The queues go to the brokers (either list may come first); a
     * broker without queue data has no queues of this topic. */
    for (uint32_t i = 0; i < rt->n; i++) {
        rt->b[i].perm = 0;
        rt->b[i].read_queues = rt->b[i].write_queues = 0;
    }
    for (uint32_t i = 0; i < nq; i++) {
        struct upstream_broker *b = find_broker(rt, qds[i].name);
        if (b == NULL)
            continue;
        b->perm = qds[i].perm;
        b->read_queues = qds[i].read_queues < 0 ? 0 : qds[i].read_queues;
        b->write_queues = qds[i].write_queues < 0 ? 0 : qds[i].write_queues;
    }
    return 0;
}

/* }}} */

/* {{{ Replies to the session */

/* Queues a reply made here on reply_to. */
static void
reply_made(struct conn *reply_to, int32_t opaque, int32_t code, const uint8_t *body, size_t blen,
           const char *fmt, ...)
{
    if (reply_to == NULL || reply_to->closed)
        return;
    char remark[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(remark, sizeof(remark), fmt, ap);
    va_end(ap);
    struct rmq_cmd r;
    memset(&r, 0, sizeof(r));
    r.code = code;
    r.flag = RMQ_RPC_RESPONSE;
    r.opaque = opaque;
    r.serialize = RMQ_SER_JSON;
    r.language = RMQ_LANG_OTHER;
    r.version = RMQ_VERSION_409;
    r.remark.p = remark;
    r.remark.len = (uint32_t)strlen(remark);
    r.body = body;
    r.body_len = (uint32_t)blen;
    struct buf b;
    buf_init(&b);
    if (rmq_cmd_encode(&r, &b) == 0)
        (void)conn_send(reply_to, buf_head(&b), buf_len(&b), body, blen);
    buf_free(&b);
}

/* }}} */

/* {{{ Broker connections */

static void up_conn_close(struct conn *c);
static void up_conn_frame(struct conn *c, const uint8_t *frame, size_t len);
static void up_conn_connect(struct conn *c, int status);

static const struct conn_handler UP_HANDLER = {
    .on_frame = up_conn_frame,
    .on_close = up_conn_close,
    .on_connect = up_conn_connect,
};

static void
up_conn_close(struct conn *c)
{
    struct upstream *up = c->owner;
    if (up == NULL)
        return;
    size_t n = strlen(c->peer);
    struct hnode *node = hmap_find(&up->conns, hmap_hash(c->peer, n), c->peer, n);
    if (node != NULL && node->val == c) {
        hmap_remove_node(&up->conns, node);
        hmap_compact(&up->conns);
        conn_unref(c);
    }
}

/* A request from a broker: its transaction check goes to a gRPC
 * producer; NOTIFY_CONSUMER_IDS_CHANGED and stray responses need nothing. */
static void
up_conn_frame(struct conn *c, const uint8_t *frame, size_t len)
{
    struct upstream *up = c->owner;
    uint8_t small[2048];
    size_t need = rmq_cmd_arena_size(len);
    uint8_t *mem = need <= sizeof(small) ? small : malloc(need);
    if (mem == NULL || up == NULL) {
        if (mem != small)
            free(mem);
        return;
    }
    struct rmq_arena a = { .p = mem, .cap = need, .used = 0 };
    struct rmq_cmd cmd;
    if (rmq_cmd_decode(&cmd, frame, len, &a) == 0 && !(cmd.flag & RMQ_RPC_RESPONSE) &&
        cmd.code == RMQ_REQ_CHECK_TRANSACTION_STATE && up->on_check != NULL)
        up->on_check(up->arg, frame, len);
    if (mem != small)
        free(mem);
}

static void
hb_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    (void)call;
    (void)status;
    (void)frame;
    (void)len;
}

/* The proxy's own registration as a producer of GRPC_PRODUCER_GROUP on a
 * broker connection: the broker's transaction checks come to it (and on
 * to a gRPC producer) from the first send, before any client heartbeat
 * was forwarded there. */
static void
send_proxy_heartbeat(struct upstream *up, struct conn *c)
{
    char body[256];
    int n = snprintf(body, sizeof(body),
                     "{\"clientID\":\"%s\",\"consumerDataSet\":[],\"producerDataSet\":"
                     "[{\"groupName\":\"" GRPC_PRODUCER_GROUP "\"}]}", up->client_id);
    if (n <= 0 || (size_t)n >= sizeof(body))
        return;
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.code = RMQ_REQ_HEART_BEAT;
    cmd.language = RMQ_LANG_OTHER;
    cmd.version = RMQ_VERSION_409;
    cmd.serialize = RMQ_SER_JSON;
    cmd.opaque = next_opaque(up);
    cmd.body = (const uint8_t *)body;
    cmd.body_len = (uint32_t)n;
    struct buf b;
    buf_init(&b);
    struct call *call = calloc(1, sizeof(*call));
    if (call != NULL && rmq_cmd_encode(&cmd, &b) == 0) {
        call->done = hb_done;
        (void)conn_call(c, call, cmd.opaque, buf_head(&b), buf_len(&b), body, (size_t)n,
                        up->conf.call_timeout_ms);
    } else {
        free(call);
    }
    buf_free(&b);
}

static void
up_conn_connect(struct conn *c, int status)
{
    struct upstream *up = c->owner;
    if (status != 0) {
        log_warn("proxy: cannot connect to %s: %s", c->peer, uv_strerror(status));
        return;
    }
    if (up != NULL && !up->stopped)
        send_proxy_heartbeat(up, c);
}

/* The pooled connection to addr, opened when there is none; NULL when
 * the pool is full or the address unusable. */
static struct conn *
conn_get(struct upstream *up, const char *addr)
{
    size_t n = strlen(addr);
    uint64_t h = hmap_hash(addr, n);
    struct hnode *node = hmap_find(&up->conns, h, addr, n);
    if (node != NULL && !((struct conn *)node->val)->closed)
        return node->val;
    if (node == NULL && up->conns.size >= up->conf.max_conns) {
        log_warn("proxy: proxyMaxBrokerConnections (%u) reached; %s not connected", up->conf.max_conns, addr);
        return NULL;
    }
    struct conn *c = conn_connect(up->r, addr, &UP_HANDLER, up);
    if (c == NULL) {
        log_warn("proxy: cannot connect to %s: %s", addr, err_msg());
        return NULL;
    }
    conn_ref(c);
    if (node != NULL) {
        conn_unref(node->val);   /* the closed one's: its on_close finds it replaced */
        node->val = c;
    } else if (hmap_add(&up->conns, h, addr, n, c) == NULL) {
        conn_unref(c);
        conn_close(c, "out of memory");
        return NULL;
    }
    return c;
}

/* }}} */

/* {{{ Forwarding */

static void
fwd_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct fwd *f = call->arg;
    struct conn *to = f->reply_to;
    if (to != NULL && !to->closed) {
        size_t need = status == 0 ? rmq_cmd_arena_size(len) : 0;
        uint8_t *mem = need > 0 ? malloc(need) : NULL;
        struct rmq_arena a = { .p = mem, .cap = need, .used = 0 };
        struct rmq_cmd cmd;
        int drc = status == 0 && mem != NULL ? rmq_cmd_decode(&cmd, frame, len, &a) : -1;
        log_debug("proxy: request %d to %s answered: status %d, code %d, %u body bytes", (int)f->code,
                  f->broker, status, drc == 0 ? (int)cmd.code : -1, drc == 0 ? cmd.body_len : 0);
        if (drc != 0) {
            reply_made(to, f->opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "broker %s did not answer: %s",
                       f->broker, status == -RMQ_ETIMEDOUT ? "timed out" : status != 0 ? "connection lost"
                                                                        : "reply does not parse");
        } else {
            /* The session's opaque back, and for POP the broker's name,
             * which the receipt handles must carry (an ack goes there). */
            struct rmq_field ext[64];
            uint32_t n = cmd.ext_count < 63 ? cmd.ext_count : 63;
            if (cmd.ext != NULL)
                memcpy(ext, cmd.ext, n * sizeof(ext[0]));
            if (f->code == RMQ_REQ_POP_MESSAGE) {
                ext[n].key.p = "proxyBrokerName";
                ext[n].key.len = 15;
                ext[n].val.p = f->broker;
                ext[n].val.len = (uint32_t)strlen(f->broker);
                n++;
            }
            cmd.ext = ext;
            cmd.ext_count = n;
            cmd.opaque = f->opaque;
            struct buf b;
            buf_init(&b);
            if (rmq_cmd_encode(&cmd, &b) == 0)
                (void)conn_send(to, buf_head(&b), buf_len(&b), cmd.body, cmd.body_len);
            else
                reply_made(to, f->opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "broker %s: reply cannot be re-encoded",
                           f->broker);
            buf_free(&b);
        }
        free(mem);
    }
    if (to != NULL)
        conn_unref(to);
    free(f);
}

/* Sends cmd (decoded from a session's frame) to the broker at addr, its
 * reply to reply_to. */
static void
send_to(struct upstream *up, const char *addr, const char *broker, struct conn *reply_to,
        struct rmq_cmd *cmd)
{
    int32_t session_opaque = cmd->opaque;
    struct conn *c = conn_get(up, addr);
    if (c == NULL) {
        reply_made(reply_to, session_opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "cannot reach broker %s (%s)",
                   broker, addr);
        return;
    }
    struct fwd *f = calloc(1, sizeof(*f));
    struct call *call = calloc(1, sizeof(*call));
    if (f == NULL || call == NULL) {
        free(f);
        free(call);
        reply_made(reply_to, session_opaque, RMQ_RESP_SYSTEM_BUSY, NULL, 0, "proxy out of memory");
        return;
    }
    f->up = up;
    f->reply_to = reply_to;
    f->opaque = session_opaque;
    f->code = cmd->code;
    snprintf(f->broker, sizeof(f->broker), "%s", broker);
    uint64_t timeout = up->conf.call_timeout_ms;
    if (cmd->code == RMQ_REQ_POP_MESSAGE) {
        const struct rmq_str *pt = rmq_cmd_field(cmd, "pollTime", 8);
        char tmp[24];
        if (pt != NULL && pt->len < sizeof(tmp)) {
            memcpy(tmp, pt->p, pt->len);
            tmp[pt->len] = '\0';
            long long v = strtoll(tmp, NULL, 10);
            if (v > 0 && v < 3600000)
                timeout += (uint64_t)v;
        }
    }
    cmd->opaque = next_opaque(up);
    cmd->flag = 0;
    buf_reset(&up->out);
    call->done = fwd_done;
    call->arg = f;
    if (rmq_cmd_encode(cmd, &up->out) != 0) {
        free(f);
        free(call);
        reply_made(reply_to, session_opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "request cannot be encoded");
        return;
    }
    if (reply_to != NULL)
        conn_ref(reply_to);
    int rc = conn_call(c, call, cmd->opaque, buf_head(&up->out), buf_len(&up->out), cmd->body,
                       cmd->body_len, timeout);
    if (rc != 0) {   /* call freed, done never runs */
        if (reply_to != NULL)
            conn_unref(reply_to);
        free(f);
        reply_made(reply_to, session_opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "cannot send to broker %s", broker);
    }
}

static uint32_t
fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The message group (__SHARDINGKEY) in a SEND_MESSAGE_V2's properties. */
static bool
message_group(const struct rmq_cmd *cmd, const char **g, size_t *gl)
{
    const struct rmq_str *props = rmq_cmd_field(cmd, "i", 1);
    static const char key[] = "__SHARDINGKEY\001";
    if (props == NULL || props->p == NULL)
        return false;
    const char *p = props->p, *e = props->p + props->len;
    while (p < e) {
        const char *end = memchr(p, '\002', (size_t)(e - p));
        if (end == NULL)
            end = e;
        if ((size_t)(end - p) > sizeof(key) - 1 && memcmp(p, key, sizeof(key) - 1) == 0) {
            *g = p + sizeof(key) - 1;
            *gl = (size_t)(end - *g);
            return true;
        }
        p = end + 1;
    }
    return false;
}

static void str_of(const struct rmq_str *s, char *out, size_t cap);

/* The broker of a request in a route; NULL when none fits.  *qid_out:
 * a send's queue when chosen here (a message group), else -2. */
static const struct upstream_broker *
pick(struct upstream *up, const struct route_ent *re, const struct rmq_cmd *cmd, int32_t *qid_out)
{
    *qid_out = -2;
    char bname[128] = "";
    const struct rmq_str *bn = rmq_cmd_field(cmd, "bname", 5);
    if (bn != NULL)
        str_of(bn, bname, sizeof(bname));
    if (cmd->code == RMQ_REQ_SEND_MESSAGE_V2) {
        const char *g;
        size_t gl;
        uint32_t total = 0;
        for (uint32_t i = 0; i < re->nb; i++)
            if ((re->b[i].perm & PERM_WRITE) && re->b[i].write_queues > 0)
                total += (uint32_t)re->b[i].write_queues;
        if (total == 0)
            return NULL;
        if (message_group(cmd, &g, &gl)) {
            /* One queue per group over every broker's queues: its order. */
            uint32_t k = fnv1a(g, gl) % total;
            for (uint32_t i = 0; i < re->nb; i++) {
                if (!(re->b[i].perm & PERM_WRITE) || re->b[i].write_queues <= 0)
                    continue;
                if (k < (uint32_t)re->b[i].write_queues) {
                    *qid_out = (int32_t)k;
                    return &re->b[i];
                }
                k -= (uint32_t)re->b[i].write_queues;
            }
            return NULL;
        }
        uint32_t start = up->rr++;
        for (uint32_t j = 0; j < re->nb; j++) {
            const struct upstream_broker *b = &re->b[(start + j) % re->nb];
            if ((b->perm & PERM_WRITE) && b->write_queues > 0)
                return b;
        }
        return NULL;
    }
    /* Reads: the named broker, else round robin over readable ones. */
    if (bname[0] != '\0') {
        for (uint32_t i = 0; i < re->nb; i++)
            if (strcmp(re->b[i].name, bname) == 0)
                return &re->b[i];
    }
    bool offsets = cmd->code != RMQ_REQ_POP_MESSAGE;
    int32_t qid = -1;
    if (offsets) {
        const struct rmq_str *q = rmq_cmd_field(cmd, "queueId", 7);
        char tmp[16];
        if (q != NULL) {
            str_of(q, tmp, sizeof(tmp));
            qid = (int32_t)strtol(tmp, NULL, 10);
        }
        for (uint32_t i = 0; i < re->nb; i++)
            if (re->b[i].read_queues > qid || re->b[i].write_queues > qid)
                return &re->b[i];
        return NULL;
    }
    uint32_t start = up->rr++;
    for (uint32_t j = 0; j < re->nb; j++) {
        const struct upstream_broker *b = &re->b[(start + j) % re->nb];
        if ((b->perm & PERM_READ) && b->read_queues > 0)
            return b;
    }
    return NULL;
}

static void
str_of(const struct rmq_str *s, char *out, size_t cap)
{
    size_t n = s != NULL && s->p != NULL ? s->len : 0;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(out, s->p, n);
    out[n] = '\0';
}

/* END_TRANSACTION: the half message's broker is the store host in its
 * offset message id (transactionId "OFFSETMSGID@queueOffset": IPv4 and
 * port, 16 hex digits, then the commit log offset, 16). */
static int
tx_broker_addr(const struct rmq_cmd *cmd, char *out, size_t cap)
{
    const struct rmq_str *t = rmq_cmd_field(cmd, "transactionId", 13);
    char tid[160];
    str_of(t, tid, sizeof(tid));
    const char *at = strchr(tid, '@');
    if (at == NULL || at - tid != 32)
        return -1;
    unsigned v[8];
    for (int i = 0; i < 8; i++) {
        int hi = jscan_hexval((uint8_t)tid[2 * i]), lo = jscan_hexval((uint8_t)tid[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        v[i] = (unsigned)(hi << 4 | lo);
    }
    unsigned port = v[4] << 24 | v[5] << 16 | v[6] << 8 | v[7];
    if (port == 0 || port > 65535)
        return -1;
    snprintf(out, cap, "%u.%u.%u.%u:%u", v[0], v[1], v[2], v[3], port);
    return 0;
}

/* ACK / CHANGE_INVISIBLE: the broker name in the receipt handle
 * (ExtraInfoUtil's fields: its sixth). */
static int
handle_broker(const struct rmq_cmd *cmd, char *out, size_t cap)
{
    char h[800];
    str_of(rmq_cmd_field(cmd, "extraInfo", 9), h, sizeof(h));
    char *save = NULL, *tok = strtok_r(h, " ", &save);
    for (int i = 0; tok != NULL && i < 5; i++)
        tok = strtok_r(NULL, " ", &save);
    if (tok == NULL || strlen(tok) >= cap)
        return -1;
    memcpy(out, tok, strlen(tok) + 1);
    return 0;
}

static void fetch_route(struct upstream *up, struct route_ent *re);
static void fetch_cfg(struct upstream *up, struct route_ent *re);
static void route(struct upstream *up, struct conn *reply_to, const uint8_t *frame, size_t len, unsigned waited);

/* The route cache's entries: one being fetched, or whose topic config
 * is, is passed over by eviction and expiry (its answer comes back to
 * the entry); when one goes, its route goes with it. */
static bool
route_busy(const struct wcache_ent *e)
{
    const struct route_ent *re = (const struct route_ent *)e;
    return re->fetching || re->cfg_fetching;
}

static void
route_clear(struct wcache_ent *e)
{
    struct route_ent *re = (struct route_ent *)e;
    free(re->json);
    free(re->b);
}

static const struct wcache_ops route_ops = { route_busy, route_clear };

/* The topic's entry (made when new, the least recently used evicted
 * when full: topicRouteServiceCacheMaxNum, as 5.x's bounded cache). */
static struct route_ent *
route_ent(struct upstream *up, const char *topic)
{
    return (struct route_ent *)wcache_find_or_add(&up->routes, topic);
}

/* A new waiter's room (proxyMaxWaitingRequests, routes and groups
 * together), with the frame copied; NULL (and the request refused) when
 * there is none. */
static struct waiter *
waiter_new(struct upstream *up, struct conn *reply_to, int32_t opaque, const uint8_t *frame,
           size_t len, unsigned waited)
{
    struct waiter *w = up->routes.nwaiting + up->groups.nwaiting < up->conf.max_waiting
                       ? malloc(sizeof(*w) + len) : NULL;
    if (w == NULL) {
        reply_made(reply_to, opaque, RMQ_RESP_SYSTEM_BUSY, NULL, 0,
                   "too many requests wait for routes (proxyMaxWaitingRequests %u)", up->conf.max_waiting);
        return NULL;
    }
    w->waited = waited;
    w->reply_to = reply_to;
    conn_ref(reply_to);
    w->len = len;
    memcpy(w->frame, frame, len);
    return w;
}

/* The waiters of a list taken from a cache (wcache_take_waiters) one by
 * one, each no longer counted. */
static struct waiter *
waiter_pop(struct wcache *c, struct wcache_waiter **list)
{
    struct wcache_waiter *w = wcache_pop(c, list);
    return w != NULL ? container_of(w, struct waiter, w) : NULL;
}

static void
waiter_free(struct waiter *w)
{
    conn_unref(w->reply_to);
    free(w);
}

static void
wait_route(struct upstream *up, struct route_ent *re, struct conn *reply_to, int32_t opaque,
           const uint8_t *frame, size_t len, unsigned waited)
{
    struct waiter *w = waiter_new(up, reply_to, opaque, frame, len, waited);
    if (w == NULL)
        return;
    wcache_wait(&up->routes, &re->ent, &w->w);   /* not evictable while requests wait */
    if (re->json == NULL) {
        if (!re->fetching)
            fetch_route(up, re);
    } else if (!re->cfg_fetching) {
        fetch_cfg(up, re);
    }
}

/* HEART_BEAT, UNREGISTER_CLIENT: to every master broker the routes named. */
static void
broadcast(struct upstream *up, struct rmq_cmd *cmd)
{
    struct hiter it;
    hmap_iter_init(&it, &up->names);
    struct hnode *v;
    while ((v = hmap_iter_next(&it)) != NULL) {
        struct conn *c = conn_get(up, v->val);
        struct call *call = c != NULL ? calloc(1, sizeof(*call)) : NULL;
        if (call == NULL)
            continue;
        call->done = hb_done;
        cmd->opaque = next_opaque(up);
        buf_reset(&up->out);
        if (rmq_cmd_encode(cmd, &up->out) != 0) {
            free(call);
            return;
        }
        (void)conn_call(c, call, cmd->opaque, buf_head(&up->out), buf_len(&up->out), cmd->body,
                        cmd->body_len, up->conf.call_timeout_ms);
    }
}

/* The requests that wait for the topic's config as for its route: those
 * that read it (QueryRoute's accepted types, SendMessage's check). */
static bool
needs_cfg(int32_t code)
{
    return code == RMQ_REQ_GET_ROUTEINFO_BY_TOPIC || code == RMQ_REQ_SEND_MESSAGE_V2;
}

/* GET_ROUTEINFO_BY_TOPIC from the cache: the NameServer's body, and the
 * topic's message.type in `messageType` when it has one (service.c
 * lists it as the queues' accepted type). */
static void
reply_route(struct conn *reply_to, int32_t opaque, const struct route_ent *re)
{
    if (reply_to == NULL || reply_to->closed)
        return;
    const char *tn = re->msg_type != 0 ? topic_msg_type_name(re->msg_type) : NULL;
    struct rmq_field f = { { "messageType", 11 }, { tn, tn != NULL ? (uint32_t)strlen(tn) : 0 } };
    struct rmq_cmd r;
    memset(&r, 0, sizeof(r));
    r.code = RMQ_RESP_SUCCESS;
    r.flag = RMQ_RPC_RESPONSE;
    r.opaque = opaque;
    r.serialize = RMQ_SER_JSON;
    r.language = RMQ_LANG_OTHER;
    r.version = RMQ_VERSION_409;
    r.ext = tn != NULL ? &f : NULL;
    r.ext_count = tn != NULL ? 1 : 0;
    r.body = re->json;
    r.body_len = (uint32_t)re->json_len;
    struct buf b;
    buf_init(&b);
    if (rmq_cmd_encode(&r, &b) == 0)
        (void)conn_send(reply_to, buf_head(&b), buf_len(&b), re->json, re->json_len);
    buf_free(&b);
}

/* Whether a SEND_MESSAGE_V2's properties ("i": NAME 0x01 VALUE 0x02 ...)
 * have name. */
static const char *
prop_find(const struct rmq_str *props, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *p = props->p, *e = props->p + props->len;
    while (p < e) {
        const char *sep = memchr(p, 1, (size_t)(e - p));
        if (sep == NULL)
            return NULL;
        const char *end = memchr(sep + 1, 2, (size_t)(e - sep - 1));
        if (end == NULL)
            end = e;
        if ((size_t)(sep - p) == nl && memcmp(p, name, nl) == 0) {
            *vlen = (size_t)(end - sep - 1);
            return sep + 1;
        }
        p = end + 1;
    }
    return NULL;
}

/* 5.x's proxy's message type check (ProducerProcessor with
 * DefaultTopicMessageTypeValidator), as local mode's (service.c's
 * type_matches): the message's type read from its properties as
 * TopicMessageType.parseFromMessageProperty reads them must be the
 * topic's message.type, unless that is MIXED or unset; retry and DLQ
 * topics are not checked.  False, with the refusal answered
 * (UPSTREAM_RESP_TYPE_CONFLICT), when it does not match. */
static bool
type_matches(struct upstream *up, struct conn *reply_to, const struct rmq_cmd *cmd, const char *topic,
             uint8_t want)
{
    (void)up;
    if (want == 0 || want == TOPIC_MSG_MIXED || strncmp(topic, "%RETRY%", 7) == 0 ||
        strncmp(topic, "%DLQ%", 5) == 0)
        return true;
    const struct rmq_str *props = rmq_cmd_field(cmd, "i", 1);
    struct rmq_str none = { "", 0 };
    if (props == NULL || props->p == NULL)
        props = &none;
    size_t vl = 0;
    const char *v = prop_find(props, "TRAN_MSG", &vl);
    uint8_t got = TOPIC_MSG_NORMAL;
    if (v != NULL && vl == 4 && memcmp(v, "true", 4) == 0)
        got = TOPIC_MSG_TRANSACTION;
    else if (prop_find(props, "DELAY", &vl) != NULL || prop_find(props, "TIMER_DELIVER_MS", &vl) != NULL ||
             prop_find(props, "TIMER_DELAY_SEC", &vl) != NULL || prop_find(props, "TIMER_DELAY_MS", &vl) != NULL)
        got = TOPIC_MSG_DELAY;
    else if (prop_find(props, "__SHARDINGKEY", &vl) != NULL)
        got = TOPIC_MSG_FIFO;
    if (got == want)
        return true;
    reply_made(reply_to, cmd->opaque, UPSTREAM_RESP_TYPE_CONFLICT, NULL, 0,
               "TopicMessageType validate failed, the expected type is %s, but actual type is %s",
               topic_msg_type_name(want), topic_msg_type_name(got));
    return false;
}

/* {{{ Consumer groups */

static void fetch_group(struct upstream *up, struct group_ent *ge);

/* One being fetched is passed over by eviction and expiry. */
static bool
group_busy(const struct wcache_ent *e)
{
    return ((const struct group_ent *)e)->fetching;
}

static const struct wcache_ops group_ops = { group_busy, NULL };

/* The group's entry (made when new, the least recently used evicted
 * when full); NULL when full of groups requests wait on. */
static struct group_ent *
group_ent(struct upstream *up, const char *group)
{
    return (struct group_ent *)wcache_find_or_add(&up->groups, group);
}

/* Its waiters go on (routed again, having waited for the group). */
static void
release_group(struct upstream *up, struct group_ent *ge)
{
    struct wcache_waiter *list = wcache_take_waiters(&up->groups, &ge->ent);
    struct waiter *w;
    while ((w = waiter_pop(&up->groups, &list)) != NULL) {
        if (!w->reply_to->closed)
            route(up, w->reply_to, w->frame, w->len, w->waited | W_GROUP);
        waiter_free(w);
    }
}

/* A waiter's request refused with code: the opaque is in its header
 * (decoded to find it). */
static void
waiter_refuse(struct waiter *w, int32_t code, const char *why)
{
    if (w->reply_to->closed)
        return;
    uint8_t *m2 = malloc(rmq_cmd_arena_size(w->len));
    struct rmq_arena a2 = { .p = m2, .cap = m2 != NULL ? rmq_cmd_arena_size(w->len) : 0, .used = 0 };
    struct rmq_cmd rq;
    if (m2 != NULL && rmq_cmd_decode(&rq, w->frame, w->len, &a2) == 0)
        reply_made(w->reply_to, rq.opaque, code, NULL, 0, "%s", why);
    free(m2);
}

/* The waiters of a cache's entry get a refusal (SYSTEM_ERROR). */
static void
fail_waiters(struct upstream *up, struct wcache *c, struct wcache_ent *e, const char *why)
{
    struct wcache_waiter *list = wcache_take_waiters(c, e);
    struct waiter *w;
    while ((w = waiter_pop(c, &list)) != NULL) {
        waiter_refuse(w, RMQ_RESP_SYSTEM_ERROR, why);
        waiter_free(w);
    }
}

/*
 * The group's config, for a request (frame) that needs it: 0 with *cfg
 * set (NULL: not known), the request to go on; -1 when the
 * request now waits for the group's config (routed again when it comes)
 * or was refused (too many waiting).  A request that waited once goes on
 * with what is known (not orderly when nothing).
 */
static int
group_config(struct upstream *up, const char *group, struct conn *reply_to, int32_t opaque,
             const uint8_t *frame, size_t len, unsigned waited, const struct subscription_group **cfg)
{
    *cfg = NULL;
    struct group_ent *ge = group[0] != '\0' ? group_ent(up, group) : NULL;
    if (ge == NULL)
        return 0;
    uint64_t now = now_ms(up);
    wcache_touch(&up->groups, &ge->ent, now);   /* the most recently used */
    if (ge->known) {
        if (!ge->fetching && (!ge->had || now - ge->fetched_ms >= up->conf.group_refresh_ms))
            fetch_group(up, ge);   /* the one held serves meanwhile */
        *cfg = &ge->g;
        return 0;
    }
    if (waited & W_GROUP)
        return 0;
    struct waiter *w = waiter_new(up, reply_to, opaque, frame, len, waited);
    if (w == NULL)
        return -1;
    wcache_wait(&up->groups, &ge->ent, &w->w);
    if (!ge->fetching)
        fetch_group(up, ge);
    if (!ge->fetching && ge->ent.waiters != NULL)
        release_group(up, ge);   /* could not be asked: go on without */
    return -1;
}

/* GET_SUBSCRIPTIONGROUP_CONFIG answered from the cache: the parts read,
 * written back as a broker writes them (SUBSCRIPTION_GROUP_NOT_EXIST
 * when nothing is known). */
static void
reply_group(struct conn *reply_to, int32_t opaque, const char *group, const struct subscription_group *g)
{
    if (reply_to == NULL || reply_to->closed)
        return;
    struct buf body;
    buf_init(&body);
    if (g == NULL || subscription_group_json(&body, group, strlen(group), g) != 0) {
        buf_free(&body);
        reply_made(reply_to, opaque, RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST, NULL, 0, "group %s not known", group);
        return;
    }
    struct rmq_cmd r;
    memset(&r, 0, sizeof(r));
    r.code = RMQ_RESP_SUCCESS;
    r.flag = RMQ_RPC_RESPONSE;
    r.opaque = opaque;
    r.serialize = RMQ_SER_JSON;
    r.language = RMQ_LANG_OTHER;
    r.version = RMQ_VERSION_409;
    r.body = buf_head(&body);
    r.body_len = (uint32_t)buf_len(&body);
    struct buf b;
    buf_init(&b);
    if (rmq_cmd_encode(&r, &b) == 0)
        (void)conn_send(reply_to, buf_head(&b), buf_len(&b), buf_head(&body), buf_len(&body));
    buf_free(&b);
    buf_free(&body);
}

static int
read_i64(const uint8_t **pp, const uint8_t *e, int64_t *v)
{
    const uint8_t *p = ws(*pp, e);
    const uint8_t *s = p;
    bool is_int;
    if (jscan_number(&p, e, &is_int) != NULL || !is_int || p - s > 20)
        return -1;
    char tmp[24];
    memcpy(tmp, s, (size_t)(p - s));
    tmp[p - s] = '\0';
    errno = 0;
    long long x = strtoll(tmp, NULL, 10);
    if (errno != 0)
        return -1;
    *v = x;
    *pp = p;
    return 0;
}

static int
read_bool(const uint8_t **pp, const uint8_t *e, bool *v)
{
    const uint8_t *p = ws(*pp, e);
    if (e - p >= 4 && memcmp(p, "true", 4) == 0) {
        *v = true;
        *pp = p + 4;
        return 0;
    }
    if (e - p >= 5 && memcmp(p, "false", 5) == 0) {
        *v = false;
        *pp = p + 5;
        return 0;
    }
    return -1;
}

/* {"initial":..,"max":..,"multiplier":..} or {"next":[..]} */
static int
parse_retry_policy(const uint8_t **pp, const uint8_t *e, struct group_retry_policy *r, bool exponential)
{
    bool empty, more = true;
    char key[64];
    if (open_container(pp, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(pp, e, key, sizeof(key)) != 0)
            return -1;
        int rc;
        if (exponential && strcmp(key, "initial") == 0) {
            rc = read_i64(pp, e, &r->initial);
        } else if (exponential && strcmp(key, "max") == 0) {
            rc = read_i64(pp, e, &r->max);
        } else if (exponential && strcmp(key, "multiplier") == 0) {
            rc = read_i64(pp, e, &r->multiplier);
        } else if (!exponential && strcmp(key, "next") == 0) {
            bool e2, m2 = true;
            rc = open_container(pp, e, '[', ']', &e2);
            r->next_count = 0;
            while (rc == 0 && !e2 && m2) {
                int64_t v;
                rc = read_i64(pp, e, &v);
                if (rc == 0 && r->next_count < GROUP_RETRY_NEXT_MAX)
                    r->next[r->next_count++] = v;
                if (rc == 0)
                    rc = next_item(pp, e, ']', &m2);
            }
        } else {
            rc = jscan_skip(pp, e, 2, 16) != NULL ? -1 : 0;
        }
        if (rc != 0 || next_item(pp, e, '}', &more) != 0)
            return -1;
    }
    if (exponential)
        r->has_exponential = true;
    else
        r->has_customized = true;
    return 0;
}

int
upstream_group_parse(const uint8_t *json, size_t len, struct subscription_group *g)
{
    const uint8_t *p = json, *e = json + len;
    bool empty, more = true;
    char key[64];
    memset(g, 0, sizeof(*g));
    g->retry_max_times = 16;   /* SubscriptionGroupConfig's default */
    if (open_container(&p, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(&p, e, key, sizeof(key)) != 0)
            return -1;
        int rc;
        if (strcmp(key, "consumeMessageOrderly") == 0) {
            rc = read_bool(&p, e, &g->consume_message_orderly);
            g->v5 = true;
        } else if (strcmp(key, "retryMaxTimes") == 0) {
            rc = read_int(&p, e, &g->retry_max_times);
        } else if (strcmp(key, "groupRetryPolicy") == 0 && ws(p, e) < e && *ws(p, e) == '{') {
            g->v5 = true;
            bool e2, m2 = true;
            rc = open_container(&p, e, '{', '}', &e2);
            while (rc == 0 && !e2 && m2) {
                char k2[64], t[32];
                rc = read_key(&p, e, k2, sizeof(k2));
                if (rc != 0)
                    break;
                if (strcmp(k2, "type") == 0) {
                    rc = read_str(&p, e, t, sizeof(t));
                    if (rc == 0)
                        g->retry.type = strcmp(t, "EXPONENTIAL") == 0 ? GROUP_RETRY_EXPONENTIAL
                                                                       : GROUP_RETRY_CUSTOMIZED;
                } else if (strcmp(k2, "exponentialRetryPolicy") == 0 && ws(p, e) < e && *ws(p, e) == '{') {
                    rc = parse_retry_policy(&p, e, &g->retry, true);
                } else if (strcmp(k2, "customizedRetryPolicy") == 0 && ws(p, e) < e && *ws(p, e) == '{') {
                    rc = parse_retry_policy(&p, e, &g->retry, false);
                } else {
                    rc = jscan_skip(&p, e, 2, 16) != NULL ? -1 : 0;
                }
                if (rc == 0)
                    rc = next_item(&p, e, '}', &m2);
            }
        } else {
            rc = jscan_skip(&p, e, 2, 16) != NULL ? -1 : 0;
        }
        if (rc != 0 || next_item(&p, e, '}', &more) != 0)
            return -1;
    }
    return 0;
}

static void
group_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct fetch *fe = call->arg;
    struct upstream *up = fe->up;
    struct group_ent *ge = (struct group_ent *)wcache_get(&up->groups, fe->topic);
    if (ge == NULL) {
        free(fe);
        return;
    }
    ge->fetching = false;
    ge->fetched_ms = now_ms(up);
    uint8_t *mem = status == 0 ? malloc(rmq_cmd_arena_size(len)) : NULL;
    struct rmq_arena a = { .p = mem, .cap = mem != NULL ? rmq_cmd_arena_size(len) : 0, .used = 0 };
    struct rmq_cmd cmd;
    int o = -1;
    struct subscription_group g;
    if (mem != NULL && rmq_cmd_decode(&cmd, frame, len, &a) == 0) {
        if (cmd.code == RMQ_RESP_SUCCESS && cmd.body != NULL) {
            o = upstream_group_parse(cmd.body, cmd.body_len, &g);
        } else if (cmd.code == RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST) {
            memset(&g, 0, sizeof(g));   /* 5.x: no config, the client's settings */
            o = 0;
        }
    }
    free(mem);
    if (o >= 0) {
        ge->g = g;
        ge->had = true;
    } else   /* the one held keeps serving */
        log_warn("proxy: config of group %s not had from broker %s", fe->topic, fe->addr);
    ge->known = true;
    free(fe);
    if (ge->ent.waiters != NULL)
        release_group(up, ge);
}

/* GET_SUBSCRIPTIONGROUP_CONFIG to one of the brokers the routes named,
 * in turn (5.x asks one of the cluster's). */
static void
fetch_group(struct upstream *up, struct group_ent *ge)
{
    ge->fetched_ms = now_ms(up);
    const char *addr = NULL;
    if (up->names.size > 0) {
        uint32_t k = up->rr++ % up->names.size, i = 0;
        struct hiter it;
        hmap_iter_init(&it, &up->names);
        struct hnode *v;
        while (addr == NULL && (v = hmap_iter_next(&it)) != NULL)
            if (i++ == k)
                addr = v->val;
    }
    const char *group = wcache_key(&ge->ent);
    size_t gn = strlen(group);
    struct conn *c = addr != NULL ? conn_get(up, addr) : NULL;
    struct fetch *fe = c != NULL ? malloc(sizeof(*fe) + gn + 1) : NULL;
    struct call *call = fe != NULL ? calloc(1, sizeof(*call)) : NULL;
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    struct rmq_field f = { { "group", 5 }, { group, (uint32_t)gn } };
    cmd.code = RMQ_REQ_GET_SUBSCRIPTIONGROUP_CONFIG;
    cmd.language = RMQ_LANG_OTHER;
    cmd.version = RMQ_VERSION_409;
    cmd.serialize = RMQ_SER_JSON;
    cmd.ext = &f;
    cmd.ext_count = 1;
    cmd.opaque = next_opaque(up);
    buf_reset(&up->out);
    if (call == NULL || rmq_cmd_encode(&cmd, &up->out) != 0) {
        free(fe);
        free(call);
        ge->known = true;
        return;
    }
    fe->up = up;
    snprintf(fe->addr, sizeof(fe->addr), "%s", addr);
    memcpy(fe->topic, group, gn + 1);
    call->done = group_done;
    call->arg = fe;
    ge->fetching = true;
    if (conn_call(c, call, cmd.opaque, buf_head(&up->out), buf_len(&up->out), NULL, 0,
                  up->conf.call_timeout_ms) != 0) {
        ge->fetching = false;
        ge->known = true;
        free(fe);
    }
}

/* }}} */

static void
route(struct upstream *up, struct conn *reply_to, const uint8_t *frame, size_t len, unsigned waited)
{
    size_t need = rmq_cmd_arena_size(len);
    buf_reset(&up->arena);
    struct rmq_cmd cmd;
    if (buf_reserve(&up->arena, need) != 0)
        return;
    struct rmq_arena a = { .p = buf_tail(&up->arena), .cap = buf_avail(&up->arena), .used = 0 };
    if (rmq_cmd_decode(&cmd, frame, len, &a) != 0)
        return;
    char addr[64], topic[512], bname[128];
    switch (cmd.code) {
    case RMQ_REQ_HEART_BEAT:
    case RMQ_REQ_UNREGISTER_CLIENT:   /* a gRPC client gone (service.c) */
        broadcast(up, &cmd);
        return;
    case RMQ_REQ_GET_SUBSCRIPTIONGROUP_CONFIG: {
        /* service.c's Settings for a consumer: answered from the group
         * cache, `consumeMessageOrderly` in the reply's fields. */
        char g[256];
        const struct subscription_group *cfg;
        str_of(rmq_cmd_field(&cmd, "group", 5), g, sizeof(g));
        if (group_config(up, g, reply_to, cmd.opaque, frame, len, waited, &cfg) == 0)
            reply_group(reply_to, cmd.opaque, g, cfg);
        return;
    }
    case RMQ_REQ_END_TRANSACTION:
        if (tx_broker_addr(&cmd, addr, sizeof(addr)) != 0) {
            reply_made(reply_to, cmd.opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0,
                       "transaction id names no broker");
            return;
        }
        send_to(up, addr, addr, reply_to, &cmd);
        return;
    case RMQ_REQ_ACK_MESSAGE:
    case RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME:
        if (handle_broker(&cmd, bname, sizeof(bname)) == 0) {
            const char *ba = hmap_get(&up->names, bname, strlen(bname));
            if (ba != NULL) {
                snprintf(addr, sizeof(addr), "%s", ba);
                send_to(up, addr, bname, reply_to, &cmd);
                return;
            }
        }
        break;   /* unknown yet: the topic's route names it */
    case RMQ_REQ_GET_ROUTEINFO_BY_TOPIC:
    case RMQ_REQ_SEND_MESSAGE_V2:
    case RMQ_REQ_POP_MESSAGE:
    case RMQ_REQ_UPDATE_CONSUMER_OFFSET:
    case RMQ_REQ_QUERY_CONSUMER_OFFSET:
    case RMQ_REQ_GET_MIN_OFFSET:
    case RMQ_REQ_GET_MAX_OFFSET:
    case RMQ_REQ_SEARCH_OFFSET_BY_TIMESTAMP:
        break;
    default:
        reply_made(reply_to, cmd.opaque, RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED, NULL, 0,
                   "request code %d is not served by the proxy", (int)cmd.code);
        return;
    }
    str_of(rmq_cmd_field(&cmd, cmd.code == RMQ_REQ_SEND_MESSAGE_V2 ? "b" : "topic",
                         cmd.code == RMQ_REQ_SEND_MESSAGE_V2 ? 1 : 5), topic, sizeof(topic));
    if (topic[0] == '\0') {
        reply_made(reply_to, cmd.opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0, "request names no topic");
        return;
    }
    struct route_ent *re = route_ent(up, topic);
    if (re == NULL) {
        reply_made(reply_to, cmd.opaque, RMQ_RESP_SYSTEM_BUSY, NULL, 0, "route cache full");
        return;
    }
    uint64_t now = now_ms(up);
    wcache_touch(&up->routes, &re->ent, now);   /* the most recently used */
    /* A waiter routed again whose config could not be had is served
     * without it (every type taken). */
    bool may_wait = !(waited & W_ROUTE);
    if (re->json == NULL || (may_wait && !re->cfg_known && needs_cfg(cmd.code))) {
        if (may_wait)
            wait_route(up, re, reply_to, cmd.opaque, frame, len, waited);
        else
            reply_made(reply_to, cmd.opaque, RMQ_RESP_TOPIC_NOT_EXIST, NULL, 0, "no route for topic %s", topic);
        return;
    }
    if (!re->fetching && now - re->fetched_ms >= up->conf.route_refresh_ms)
        fetch_route(up, re);   /* served from the one we have meanwhile */
    if (re->cfg_known && !re->cfg_fetching && now - re->cfg_ms >= up->conf.cfg_refresh_ms)
        fetch_cfg(up, re);
    if (cmd.code == RMQ_REQ_GET_ROUTEINFO_BY_TOPIC) {
        reply_route(reply_to, cmd.opaque, re);
        return;
    }
    if (cmd.code == RMQ_REQ_SEND_MESSAGE_V2 && !type_matches(up, reply_to, &cmd, topic, re->msg_type))
        return;
    if (cmd.code == RMQ_REQ_ACK_MESSAGE || cmd.code == RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME) {
        for (uint32_t i = 0; i < re->nb; i++) {
            if (strcmp(re->b[i].name, bname) == 0) {
                send_to(up, re->b[i].addr, bname, reply_to, &cmd);
                return;
            }
        }
        reply_made(reply_to, cmd.opaque, RMQ_RESP_SYSTEM_ERROR, NULL, 0,
                   "the receipt handle's broker is not in the route of %s", topic);
        return;
    }
    int32_t qid;
    const struct upstream_broker *b = pick(up, re, &cmd, &qid);
    if (b == NULL) {
        reply_made(reply_to, cmd.opaque, cmd.code == RMQ_REQ_SEND_MESSAGE_V2 ? RMQ_RESP_NO_PERMISSION
                                                                            : RMQ_RESP_TOPIC_NOT_EXIST,
                   NULL, 0, "no %s broker for topic %s", cmd.code == RMQ_REQ_SEND_MESSAGE_V2 ? "writable" : "readable",
                   topic);
        return;
    }
    char qs[16];
    bool orderly = false;
    if (cmd.code == RMQ_REQ_POP_MESSAGE) {
        /* A consumeMessageOrderly group pops orderly (5.x's proxy: the
         * fifo of the Settings it gave from the group's config). */
        char g[256];
        const struct subscription_group *cfg;
        str_of(rmq_cmd_field(&cmd, "consumerGroup", 13), g, sizeof(g));
        if (group_config(up, g, reply_to, cmd.opaque, frame, len, waited, &cfg) != 0)
            return;
        orderly = cfg != NULL && cfg->consume_message_orderly;
        for (uint32_t i = 0; orderly && i < cmd.ext_count; i++) {
            if (cmd.ext[i].key.len == 5 && memcmp(cmd.ext[i].key.p, "order", 5) == 0) {
                cmd.ext[i].val.p = "true";
                cmd.ext[i].val.len = 4;
            }
        }
        /* The broker's every queue, as 5.x's proxy pops (its
         * ReceiveMessageQueueSelector keeps the broker, queue -1): the
         * SDKs name a route queue (the Node.js one always queue 0). */
        for (uint32_t i = 0; i < cmd.ext_count; i++) {
            if (cmd.ext[i].key.len == 7 && memcmp(cmd.ext[i].key.p, "queueId", 7) == 0) {
                cmd.ext[i].val.p = "-1";
                cmd.ext[i].val.len = 2;
            }
        }
    }
    if (qid >= -1) {
        snprintf(qs, sizeof(qs), "%d", (int)qid);
        for (uint32_t i = 0; i < cmd.ext_count; i++) {
            if (cmd.ext[i].key.len == 1 && cmd.ext[i].key.p[0] == 'e') {
                cmd.ext[i].val.p = qs;
                cmd.ext[i].val.len = (uint32_t)strlen(qs);
            }
        }
    }
    /* A Java broker's SendMessageRequestHeaderV2 requires defaultTopic
     * (c) and defaultTopicQueueNums (d), which rmq's own send path leaves
     * out: given as a 4.x/5.x client gives them. */
    struct rmq_field more[64];
    if (cmd.code == RMQ_REQ_SEND_MESSAGE_V2 && rmq_cmd_field(&cmd, "c", 1) == NULL && cmd.ext_count <= 62) {
        memcpy(more, cmd.ext, cmd.ext_count * sizeof(more[0]));
        more[cmd.ext_count] = (struct rmq_field){ { "c", 1 }, { "TBW102", 6 } };
        more[cmd.ext_count + 1] = (struct rmq_field){ { "d", 1 }, { "4", 1 } };
        cmd.ext = more;
        cmd.ext_count += 2;
    }
    snprintf(addr, sizeof(addr), "%s", b->addr);
    snprintf(bname, sizeof(bname), "%s", b->name);
    send_to(up, addr, bname, reply_to, &cmd);
}

int
upstream_forward(struct upstream *up, struct conn *reply_to, const uint8_t *frame, size_t len)
{
    if (up->stopped)
        return -1;
    route(up, reply_to, frame, len, 0);
    return 0;
}

/* }}} */

/* {{{ Route fetching */

static void
names_note(struct upstream *up, const struct upstream_broker *b)
{
    size_t n = strlen(b->name);
    uint64_t h = hmap_hash(b->name, n);
    struct hnode *node = hmap_find(&up->names, h, b->name, n);
    if (node != NULL) {
        if (strcmp(node->val, b->addr) != 0) {
            char *a = strdup(b->addr);
            if (a != NULL) {
                free(node->val);
                node->val = a;
            }
        }
        return;
    }
    /* Bounded as the route cache is (a name per broker, few brokers). */
    if (up->names.size >= up->conf.route_max)
        return;
    char *a = strdup(b->addr);
    if (a != NULL && hmap_add(&up->names, h, b->name, n, a) == NULL)
        free(a);
}

/* The waiters go on (code SUCCESS) or get the refusal.  Taken off
 * first: routing one may touch the entry again. */
static void
release_waiters(struct upstream *up, struct route_ent *re, int32_t code, const char *why)
{
    struct wcache_waiter *list = wcache_take_waiters(&up->routes, &re->ent);
    struct waiter *w;
    while ((w = waiter_pop(&up->routes, &list)) != NULL) {
        if (code != RMQ_RESP_SUCCESS)
            waiter_refuse(w, code, why);
        else if (!w->reply_to->closed)
            route(up, w->reply_to, w->frame, w->len, w->waited | W_ROUTE);
        waiter_free(w);
    }
}

static void
route_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct fetch *fe = call->arg;
    struct upstream *up = fe->up;
    struct route_ent *re = (struct route_ent *)wcache_get(&up->routes, fe->topic);
    if (re == NULL) {
        free(fe);
        return;
    }
    re->fetching = false;
    int32_t code = RMQ_RESP_SYSTEM_ERROR;
    char why[200] = "";
    uint8_t *mem = status == 0 ? malloc(rmq_cmd_arena_size(len)) : NULL;
    struct rmq_arena a = { .p = mem, .cap = mem != NULL ? rmq_cmd_arena_size(len) : 0, .used = 0 };
    struct rmq_cmd cmd;
    struct upstream_route *rt = malloc(sizeof(*rt));
    if (status != 0) {
        snprintf(why, sizeof(why), "NameServer %s did not answer", fe->addr);
        up->ns_idx++;   /* the next one, next time */
    } else if (mem == NULL || rt == NULL || rmq_cmd_decode(&cmd, frame, len, &a) != 0) {
        snprintf(why, sizeof(why), "NameServer %s: reply does not parse", fe->addr);
    } else if (cmd.code != RMQ_RESP_SUCCESS) {
        code = cmd.code;
        str_of(&cmd.remark, why, sizeof(why));
    } else if (cmd.body == NULL || upstream_route_parse(cmd.body, cmd.body_len, rt) != 0) {
        snprintf(why, sizeof(why), "NameServer %s: route of %s does not parse", fe->addr, fe->topic);
    } else {
        uint8_t *json = malloc(cmd.body_len);
        struct upstream_broker *b = malloc((rt->n > 0 ? rt->n : 1) * sizeof(*b));
        if (json == NULL || b == NULL) {
            free(json);
            free(b);
            snprintf(why, sizeof(why), "proxy out of memory");
        } else {
            memcpy(json, cmd.body, cmd.body_len);
            memcpy(b, rt->b, rt->n * sizeof(*b));
            free(re->json);
            free(re->b);
            re->json = json;
            re->json_len = cmd.body_len;
            re->b = b;
            re->nb = rt->n;
            re->fetched_ms = now_ms(up);
            code = RMQ_RESP_SUCCESS;
            for (uint32_t i = 0; i < rt->n; i++)
                names_note(up, &rt->b[i]);
        }
    }
    free(rt);
    free(mem);
    if (code != RMQ_RESP_SUCCESS && re->json != NULL) {
        /* A refresh failed: the route we have keeps serving. */
        log_warn("proxy: route of %s not refreshed: %s", fe->topic, why);
        code = RMQ_RESP_SUCCESS;
    }
    bool drop = code != RMQ_RESP_SUCCESS;
    /* A new route: its topic's config is asked before the waiters go on
     * (cfg_done lets them). */
    if (code == RMQ_RESP_SUCCESS && !re->cfg_known && re->ent.waiters != NULL) {
        fetch_cfg(up, re);
        if (re->cfg_fetching) {
            free(fe);
            return;
        }
    }
    release_waiters(up, re, code, why[0] ? why : "no route");
    /* No negative cache: a topic created later is found at once. */
    re = (struct route_ent *)wcache_get(&up->routes, fe->topic);
    if (drop && re != NULL && re->json == NULL && re->ent.waiters == NULL && !re->fetching)
        wcache_remove(&up->routes, &re->ent);
    free(fe);
}

static void
fetch_route(struct upstream *up, struct route_ent *re)
{
    const char *topic = wcache_key(&re->ent);
    /* The NameServers in turn: ns_idx moves on when one fails. */
    char list[512], addr[64] = "";
    snprintf(list, sizeof(list), "%s", up->conf.namesrv);
    char *parts[16];
    int np = 0;
    char *save = NULL;
    for (char *t = strtok_r(list, ";", &save); t != NULL && np < 16; t = strtok_r(NULL, ";", &save))
        if (*t != '\0')
            parts[np++] = t;
    if (np > 0)
        snprintf(addr, sizeof(addr), "%s", parts[up->ns_idx % (uint32_t)np]);
    struct conn *c = np > 0 ? conn_get(up, addr) : NULL;
    size_t tn = strlen(topic);
    struct fetch *fe = c != NULL ? malloc(sizeof(*fe) + tn + 1) : NULL;
    struct call *call = fe != NULL ? calloc(1, sizeof(*call)) : NULL;
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    struct rmq_field f = { { "topic", 5 }, { topic, (uint32_t)tn } };
    cmd.code = RMQ_REQ_GET_ROUTEINFO_BY_TOPIC;
    cmd.language = RMQ_LANG_OTHER;
    cmd.version = RMQ_VERSION_409;
    cmd.serialize = RMQ_SER_JSON;
    cmd.ext = &f;
    cmd.ext_count = 1;
    cmd.opaque = next_opaque(up);
    buf_reset(&up->out);
    if (call == NULL || rmq_cmd_encode(&cmd, &up->out) != 0) {
        free(fe);
        free(call);
        up->ns_idx++;
        return;   /* the waiters are answered by the sweep (a timeout) */
    }
    fe->up = up;
    snprintf(fe->addr, sizeof(fe->addr), "%s", addr);
    memcpy(fe->topic, topic, tn + 1);
    call->done = route_done;
    call->arg = fe;
    re->fetching = true;
    if (conn_call(c, call, cmd.opaque, buf_head(&up->out), buf_len(&up->out), NULL, 0,
                  up->conf.call_timeout_ms) != 0) {
        re->fetching = false;
        free(fe);
        up->ns_idx++;
    }
}

/* A TopicConfig body's message.type (its "attributes", 5.x writing the
 * key without the "+" it was altered with; rmq's brokers before took
 * either): TOPIC_MSG_*, 0 when it has none, -1 when it does not parse. */
int
upstream_topic_type_parse(const uint8_t *json, size_t len)
{
    const uint8_t *p = json, *e = json + len;
    bool empty, more = true;
    char key[64];
    int type = 0;
    if (open_container(&p, e, '{', '}', &empty) != 0)
        return -1;
    while (!empty && more) {
        if (read_key(&p, e, key, sizeof(key)) != 0)
            return -1;
        const uint8_t *v = ws(p, e);
        if (strcmp(key, "attributes") == 0 && v < e && *v == '{') {
            bool e2, m2 = true;
            if (open_container(&p, e, '{', '}', &e2) != 0)
                return -1;
            while (!e2 && m2) {
                char ak[64], av[64];
                if (read_key(&p, e, ak, sizeof(ak)) != 0)
                    return -1;
                if (strcmp(ak, "message.type") == 0 || strcmp(ak, "+message.type") == 0) {
                    if (read_str(&p, e, av, sizeof(av)) != 0)
                        return -1;
                    type = topic_msg_type_parse(av, strlen(av));
                } else if (jscan_skip(&p, e, 2, 16) != NULL) {
                    return -1;
                }
                if (next_item(&p, e, '}', &m2) != 0)
                    return -1;
            }
        } else if (jscan_skip(&p, e, 2, 16) != NULL) {
            return -1;
        }
        if (next_item(&p, e, '}', &more) != 0)
            return -1;
    }
    return type;
}

static void
cfg_done(struct call *call, int status, const uint8_t *frame, size_t len)
{
    struct fetch *fe = call->arg;
    struct upstream *up = fe->up;
    struct route_ent *re = (struct route_ent *)wcache_get(&up->routes, fe->topic);
    if (re == NULL) {
        free(fe);
        return;
    }
    re->cfg_fetching = false;
    re->cfg_ms = now_ms(up);
    uint8_t *mem = status == 0 ? malloc(rmq_cmd_arena_size(len)) : NULL;
    struct rmq_arena a = { .p = mem, .cap = mem != NULL ? rmq_cmd_arena_size(len) : 0, .used = 0 };
    struct rmq_cmd cmd;
    int type = -1;
    char why[200] = "";
    if (status != 0) {
        snprintf(why, sizeof(why), "broker %s did not answer", fe->addr);
    } else if (mem == NULL || rmq_cmd_decode(&cmd, frame, len, &a) != 0) {
        snprintf(why, sizeof(why), "broker %s: reply does not parse", fe->addr);
    } else if (cmd.code != RMQ_RESP_SUCCESS) {
        char r[100];
        str_of(&cmd.remark, r, sizeof(r));
        snprintf(why, sizeof(why), "broker %.64s: code %d %s", fe->addr, (int)cmd.code, r);
    } else if (cmd.body == NULL || (type = upstream_topic_type_parse(cmd.body, cmd.body_len)) < 0) {
        snprintf(why, sizeof(why), "broker %s: topic config does not parse", fe->addr);
    }
    free(mem);
    if (type >= 0)
        re->msg_type = (uint8_t)type;
    else   /* the one held keeps serving; none: every type taken */
        log_warn("proxy: config of topic %s not had: %s", fe->topic, why);
    re->cfg_known = true;
    free(fe);
    if (re->ent.waiters != NULL && !re->fetching)
        release_waiters(up, re, RMQ_RESP_SUCCESS, "");
}

/* GET_TOPIC_CONFIG to one of the topic's brokers (in turn, as 5.x picks
 * one at random).  When it cannot even be asked, the config counts as
 * had (none) until topicConfigCacheRefreshSeconds. */
static void
fetch_cfg(struct upstream *up, struct route_ent *re)
{
    re->cfg_ms = now_ms(up);
    const char *topic = wcache_key(&re->ent);
    size_t tn = strlen(topic);
    const struct upstream_broker *b = re->nb > 0 ? &re->b[up->rr++ % re->nb] : NULL;
    struct conn *c = b != NULL ? conn_get(up, b->addr) : NULL;
    struct fetch *fe = c != NULL ? malloc(sizeof(*fe) + tn + 1) : NULL;
    struct call *call = fe != NULL ? calloc(1, sizeof(*call)) : NULL;
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    struct rmq_field f = { { "topic", 5 }, { topic, (uint32_t)tn } };
    cmd.code = RMQ_REQ_GET_TOPIC_CONFIG;
    cmd.language = RMQ_LANG_OTHER;
    cmd.version = RMQ_VERSION_409;
    cmd.serialize = RMQ_SER_JSON;
    cmd.ext = &f;
    cmd.ext_count = 1;
    cmd.opaque = next_opaque(up);
    buf_reset(&up->out);
    if (call == NULL || rmq_cmd_encode(&cmd, &up->out) != 0) {
        free(fe);
        free(call);
        re->cfg_known = true;
        return;
    }
    fe->up = up;
    snprintf(fe->addr, sizeof(fe->addr), "%s", b->addr);
    memcpy(fe->topic, topic, tn + 1);
    call->done = cfg_done;
    call->arg = fe;
    re->cfg_fetching = true;
    if (conn_call(c, call, cmd.opaque, buf_head(&up->out), buf_len(&up->out), NULL, 0,
                  up->conf.call_timeout_ms) != 0) {
        re->cfg_fetching = false;
        re->cfg_known = true;
        free(fe);
    }
}

/* }}} */

/* {{{ Timer: cache expiry, heartbeats */

static void
on_tick(uv_timer_t *t)
{
    struct upstream *up = t->data;
    uint64_t now = now_ms(up);
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &up->routes.waited) {
        struct route_ent *re = container_of(pos, struct route_ent, ent.link);
        if (!re->fetching && !re->cfg_fetching) {
            /* Its fetch could not even start (no NameServer reachable),
             * or its config could not be asked: try again, go on
             * without the config, or give up once it has waited long
             * enough. */
            if (re->json != NULL && re->cfg_known)
                release_waiters(up, re, RMQ_RESP_SUCCESS, "");
            else if (now - re->ent.used_ms > up->conf.call_timeout_ms)
                fail_waiters(up, &up->routes, &re->ent, "no NameServer answered for the route");
            else if (re->json == NULL)
                fetch_route(up, re);
            else
                fetch_cfg(up, re);
        }
    }
    /* Unused for topicRouteServiceCacheExpiredSeconds: dropped, oldest
     * first. */
    (void)wcache_expire(&up->routes, now, up->conf.route_expire_ms);
    /* Groups likewise (subscriptionGroupConfigCacheExpiredSeconds); one
     * whose config could not even be asked goes on without it. */
    q_foreach_safe(pos, tmp, &up->groups.waited) {
        struct group_ent *ge = container_of(pos, struct group_ent, ent.link);
        if (!ge->fetching)
            release_group(up, ge);
    }
    (void)wcache_expire(&up->groups, now, up->conf.group_expire_ms);
    struct hiter it;
    struct hnode *v;
    if (++up->ticks % HEARTBEAT_TICKS == 0) {
        hmap_iter_init(&it, &up->conns);
        while ((v = hmap_iter_next(&it)) != NULL) {
            struct conn *c = v->val;
            if (!c->closed && c->connected)
                send_proxy_heartbeat(up, c);
        }
    }
}

/* }}} */

struct upstream *
upstream_new(struct reactor *r, const struct upstream_conf *conf,
             void (*on_check)(void *arg, const uint8_t *frame, size_t len), void *arg)
{
    struct upstream *up = calloc(1, sizeof(*up));
    if (up == NULL) {
        err_set("out of memory for the proxy's upstream");
        return NULL;
    }
    up->r = r;
    up->conf = *conf;
    if (up->conf.max_conns == 0)
        up->conf.max_conns = 1;
    if (up->conf.route_max == 0)
        up->conf.route_max = 1;
    up->on_check = on_check;
    up->arg = arg;
    wcache_init(&up->routes, sizeof(struct route_ent), up->conf.route_max, 64, &route_ops);
    hmap_init(&up->conns, 16);
    hmap_init(&up->names, 16);
    wcache_init(&up->groups, sizeof(struct group_ent), up->conf.group_max, 16, &group_ops);
    buf_init(&up->out);
    buf_init(&up->arena);
    char host[64] = "proxy";
    (void)gethostname(host, sizeof(host) - 1);
    snprintf(up->client_id, sizeof(up->client_id), "%.60s@rmq-proxy@%d", host, (int)getpid());
    if (uv_timer_init(&r->loop, &up->timer) != 0) {
        err_set("proxy: cannot start its timer");
        free(up);
        return NULL;
    }
    up->timer.data = up;
    up->timer_on = true;
    (void)uv_timer_start(&up->timer, on_tick, 1000, 1000);
    return up;
}

void
upstream_stop(struct upstream *up)
{
    if (up == NULL || up->stopped)
        return;
    up->stopped = true;
    if (up->timer_on) {
        uv_timer_stop(&up->timer);
        uv_close((uv_handle_t *)&up->timer, NULL);
        up->timer_on = false;
    }
    /* Every entry with waiters is in its cache's `waited`. */
    struct qnode *pos, *tmp;
    q_foreach_safe(pos, tmp, &up->routes.waited)
        fail_waiters(up, &up->routes, container_of(pos, struct wcache_ent, link), "the proxy is stopping");
    q_foreach_safe(pos, tmp, &up->groups.waited)
        fail_waiters(up, &up->groups, container_of(pos, struct wcache_ent, link), "the proxy is stopping");
}

static void
drop_conn(void *p)
{
    struct conn *c = p;
    c->owner = NULL;
    conn_unref(c);
}

void
upstream_free(struct upstream *up)
{
    if (up == NULL)
        return;
    wcache_free(&up->routes);
    hmap_free(&up->conns, drop_conn);
    hmap_free(&up->names, free);
    wcache_free(&up->groups);
    buf_free(&up->out);
    buf_free(&up->arena);
    free(up);
}
