/*
 * pull_processor: see pull_processor.h.
 */
#include "broker/pull_processor.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker_perm.h"
#include "broker/bsettings.h"
#include "broker/client_registry.h"
#include "broker/config_table.h"
#include "proto/heartbeat.h"
#include "broker/offset_table.h"
#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/metrics.h"
#include "core/queue.h"
#include "filter/record_match.h"
#include "filter/sql92.h"
#include "proto/header.h"
#include "core/fjson.h"
#include "net/conn.h"
#include "runtime/host.h"
#include "runtime/post.h"
#include "store/access.h"
#include "store/commitlog.h"
#include "store/props.h"
#include "store/store.h"
#include "rmq_codes.h"

/* PullSysFlag. */
#define FLAG_COMMIT_OFFSET 0x1
#define FLAG_SUSPEND 0x2
#define FLAG_SUBSCRIPTION 0x4
#define FLAG_CLASS_FILTER 0x8

/* MessageModel ordinals in the client registry. */
#define BROADCASTING 0

/* pull.lua caps maxMsgNums so; the store's transfer limits cut further. */
#define MAX_MSGS 65536

/* FAQUrl.suggestTodo's link, after the refusals 4.9.8 gives it. */
#define FAQ "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

enum {
    F_GROUP, F_TOPIC, F_QUEUE_ID, F_OFFSET, F_MAX, F_SYS_FLAG, F_COMMIT,
    F_SUB, F_SUB_VERSION, F_EXPR, F_SUSPEND_MS, NFIELDS
};
static const char *const field_keys[NFIELDS] = {
    "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums",
    "sysFlag", "commitOffset", "subscription", "subVersion", "expressionType",
    "suspendTimeoutMillis",
};

struct pull_processor {
    struct native_proc base;
    struct store *store;
    const struct hspec *header;
    int idx[NFIELDS];
    struct broker_perm perm;
    bool slave_read_enable;        /* (the role: store_role_slave, at run time) */
    bool conf_slave_read_enable;   /* the conf's, before run-time changes */
    bool conf_builtin;             /* the same for default_policy */
    bool default_policy;           /* slaveReadPolicy is the built-in rule: with
                                    * slaveReadEnable off, no hook call */
    struct bsettings_view settings; /* run-time changes (UPDATE_BROKER_CONFIG) */
    int64_t memory, ratio;         /* the slave-read facts the broker gives */
    lua_State *L;                  /* the host's: the slave-read hook */
    int suggest_ref;               /* registry ref in L, or LUA_NOREF */
    int group_ref;                 /* the group auto-create hook, likewise */
    int filter_ref;                /* the Lua pull filter hook, likewise */
    int64_t quiet_until_ns;        /* hook errors are logged once a minute */
    struct config_table *topics, *groups;
    struct offset_table *offsets;
    struct creg *clients;
    struct buf rec;                /* client registry answers */
    struct buf key;                /* "topic@group" */
    char *ip;                      /* brokerIP1, named in a refusal */
    char *broker_name;             /* brokerName, in OFFSET_MOVED_EVENT */
    struct host_addr store_host;   /* its records' born and store host */
    struct buf event;              /* an OFFSET_MOVED_EVENT's body */
    int32_t *codes;                /* a subscription's tag codes */
    uint32_t ncodes_cap;
    struct store_window win;       /* pullReadWindowBytes (store/access.h) */
    struct iovec *iov;             /* read slices */
    struct mfile **pins;
    int cap;
    char *filter_topics;           /* see pull_processor_conf */
    size_t filter_topics_len;
    bool filter_support_retry;
    struct buf retry_rec;          /* a retried record's real subscription */
    struct buf arena;              /* a held pull's decoded header */
    struct sql92_limits sql_limits;
    struct sql_entry *sql;         /* compiled SQL92 expressions, by text */
    int nsql, sql_cap, sql_next;
    bool long_polling;             /* see pull_processor_conf */
    int64_t short_polling_ms, suspend_max_ms, recheck_ms;
    struct qnode held;             /* struct held_pull.link */
};

/* A pull held in C (the long poll): its frame, to run again when its
 * queue is raised, at each re-check and at its deadline. */
struct held_pull {
    struct qnode link;             /* in pp->held */
    struct pull_processor *pp;
    struct host *h;
    struct conn *c;                /* a reference */
    struct post_event *ev;         /* the wait in progress, NULL between */
    int64_t start_ns;              /* arrival, for rocketmq_rpc_latency */
    int64_t deadline_ms;           /* clock_mono_ns() / 1e6 */
    int64_t offset;                /* queueOffset: a re-check reads past it only */
    int64_t charged;               /* bytes charged to the memory budget */
    int32_t qid;
    size_t tlen;                   /* the topic: key[0, tlen) */
    size_t klen;                   /* "topic@queueId" */
    char key[160];
    size_t len;
    uint8_t frame[];
};

/* pull_serve's third answer: nothing new yet, keep holding. */
#define PULL_WAIT 2

/* One compiled expression (ConsumerFilterData's compiled form). */
struct sql_entry {
    char *text;
    size_t len;
    struct sql92 *f;               /* NULL: it did not compile */
};

/* A topic conf.pullFilters names (for every group or some): its reads
 * ask the pullFilter hook. */
static bool
filter_topic(const struct pull_processor *pp, const char *t, size_t len)
{
    for (size_t i = 0; i < pp->filter_topics_len;) {
        size_t l = strlen(pp->filter_topics + i);
        if (l == len && memcmp(pp->filter_topics + i, t, len) == 0)
            return true;
        i += l + 1;
    }
    return false;
}

/* {{{ Subscriptions */

struct tag_filter {
    bool all;                      /* no codes: everything matches */
    int n;
    const int32_t *codes;          /* n codes (pp->codes) */
    const struct sql92 *sql;       /* a SQL92 subscription's filter, or NULL */
};

/* Why a subscription is refused (the pull's answer, pull_serve). */
enum {
    SUB_OK = 0,
    SUB_PARSE_FAILED,              /* the request's own does not parse or compile */
    SUB_NO_GROUP_INFO,             /* no consumer of the group is registered */
    SUB_BROADCAST,                 /* broadcast, and the group may not */
    SUB_NOT_EXIST,                 /* the group has no subscription of the topic */
    SUB_NOT_LATEST,                /* the pull's subVersion is newer */
    SUB_NO_FILTER_DATA,            /* the group's expression does not compile */
    SUB_NOT_SUPPORTED,             /* not TAG, and enablePropertyFilter off */
    SUB_NO_MEMORY,
};

/* Room for n tag codes in pp->codes. */
static int32_t *
codes_room(struct pull_processor *pp, uint32_t n)
{
    if (n > pp->ncodes_cap) {
        int32_t *c = realloc(pp->codes, sizeof(*c) * n);
        if (c == NULL)
            return NULL;
        pp->codes = c;
        pp->ncodes_cap = n;
    }
    return pp->codes;
}

struct pull_processor;
static bool sql_for(struct pull_processor *pp, const char *type, size_t tlen,
                    const char *text, size_t len, const struct sql92 **out);
static bool is_tag(const char *type, size_t tlen);

/* A PULL's own subscription (FLAG_SUBSCRIPTION), parsed as a heartbeat's
 * is (FilterAPI.buildSubscriptionData; ConsumerFilterManager.build for a
 * SQL92 one).  Returns SUB_OK or why not. */
static int
request_filter(struct pull_processor *pp, const struct lheader_val *sub,
               const struct lheader_val *expr, struct tag_filter *f)
{
    f->sql = NULL;
    if (expr->set && !is_tag(expr->p, expr->len)) {
        if (!sub->set || sub->len == 0 || !sql_for(pp, expr->p, expr->len, sub->p, sub->len, &f->sql))
            return SUB_PARSE_FAILED;
        if (!broker_perm_property_filter(&pp->perm))
            return SUB_NOT_SUPPORTED;
        f->all = true;
        f->n = 0;
        return SUB_OK;
    }
    struct hb_sub hs;
    memset(&hs, 0, sizeof(hs));
    if (sub->set)
        hs.sub_string = (struct hb_str){ sub->p, sub->len };
    if (expr->set)
        hs.expression_type = (struct hb_str){ expr->p, expr->len };
    struct hb_norm n;
    if (hb_normalize(&hs, &n) != 0)
        return SUB_NO_MEMORY;
    int rc = SUB_OK;
    int32_t *codes = codes_room(pp, n.ntags);
    if (!n.is_tag)
        rc = SUB_PARSE_FAILED;
    else if (codes == NULL && n.ntags > 0)
        rc = SUB_NO_MEMORY;
    else {
        f->all = n.ntags == 0 && n.sub_string.len == 1 && n.sub_string.p[0] == '*';
        f->n = (int)n.ntags;
        f->codes = codes;
        if (n.ntags > 0)
            memcpy(codes, n.codes, sizeof(int32_t) * n.ntags);
    }
    hb_norm_free(&n);
    return rc;
}

/* The group's subscription of topic from its heartbeat (Java's default:
 * no FLAG_SUBSCRIPTION).  Returns SUB_OK or why not. */
static int
registered_filter(struct pull_processor *pp, const struct lheader_val *group,
                  const struct lheader_val *topic, int64_t sub_version,
                  const struct subscription_group *g, bool class_filter,
                  struct tag_filter *f)
{
    buf_reset(&pp->rec);
    int rc = creg_subscription(pp->clients, group->p, group->len, topic->p,
                               topic->len, &pp->rec);
    if (rc < 0)
        return SUB_NO_MEMORY;
    if (rc == 0)
        return SUB_NO_GROUP_INFO;
    struct creg_rd rd;
    creg_rd_init(&rd, &pp->rec, 0);
    (void)creg_rd_i8(&rd);                  /* consumeType */
    int8_t model = creg_rd_i8(&rd);
    (void)creg_rd_i8(&rd);                  /* consumeFromWhere */
    (void)creg_rd_u8(&rd);                  /* unitMode */
    if (!g->consume_broadcast_enable && model == BROADCASTING)
        return SUB_BROADCAST;
    if (rc != 2)
        return SUB_NOT_EXIST;
    size_t l;
    (void)creg_rd_str(&rd, &l);             /* topic */
    size_t sl;
    const char *sub_string = creg_rd_str(&rd, &sl);
    size_t el;
    const char *expr = creg_rd_str(&rd, &el);
    int64_t version = creg_rd_i64(&rd);
    bool class_mode = creg_rd_u8(&rd) != 0;
    uint32_t ntags = creg_rd_u32(&rd);
    if (version < sub_version)
        return SUB_NOT_LATEST;
    f->sql = NULL;
    if (!is_tag(expr, el)) {
        /* The group's ConsumerFilterData (compiled once per worker). */
        if (!sql_for(pp, expr, el, sub_string, sl, &f->sql))
            return SUB_NO_FILTER_DATA;
        if (!broker_perm_property_filter(&pp->perm))
            return SUB_NOT_SUPPORTED;
        if (class_filter || class_mode)
            f->sql = NULL;
        f->all = true;
        f->n = 0;
        return SUB_OK;
    }
    if (class_filter || class_mode || (sl == 1 && sub_string[0] == '*')) {
        f->all = true;
        f->n = 0;
        return SUB_OK;
    }
    int32_t *codes = codes_room(pp, ntags);
    if (codes == NULL && ntags > 0)
        return SUB_NO_MEMORY;
    for (uint32_t i = 0; i < ntags; i++)
        (void)creg_rd_str(&rd, &l);
    f->all = false;
    f->n = (int)ntags;
    f->codes = codes;
    for (uint32_t i = 0; i < ntags; i++)
        codes[i] = creg_rd_i32(&rd);
    return SUB_OK;
}

/*
 * The compiled filter of an expression, compiled the first time this
 * worker sees it (a subscription's text, from its heartbeat or a pull
 * header) and kept: no pull parses it again.  NULL: it does not compile
 * (pull.lua answers with the reason) or no memory.
 */
static const struct sql92 *
sql_filter(struct pull_processor *pp, const char *text, size_t len)
{
    for (int i = 0; i < pp->nsql; i++)
        if (pp->sql[i].len == len && memcmp(pp->sql[i].text, text, len) == 0)
            return pp->sql[i].f;
    if (pp->sql_cap <= 0 || len > pp->sql_limits.max_len)
        return NULL;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, text, len);
    copy[len] = 0;
    char err[8];
    struct sql92 *f = sql92_compile(text, len, &pp->sql_limits, err, sizeof(err));
    struct sql_entry *e;
    if (pp->nsql < pp->sql_cap) {
        e = &pp->sql[pp->nsql++];
    } else {
        /* full: the oldest goes (round robin) */
        e = &pp->sql[pp->sql_next];
        pp->sql_next = (pp->sql_next + 1) % pp->sql_cap;
        free(e->text);
        sql92_free(e->f);
    }
    *e = (struct sql_entry){ copy, len, f };
    return f;
}

/* isMatchedByCommitLog over a record's properties. */
static bool
sql_match(void *ud, const uint8_t *rec, size_t len)
{
    struct clog_view v;
    if (clog_decode(rec, len, -1, false, &v) != CLOG_REC)
        return true;
    return sql92_match_props(ud, (const char *)v.props, v.props_len);
}

/* FilterAPI's TAG: no type, "" or "TAG". */
static bool
is_tag(const char *type, size_t tlen)
{
    return tlen == 0 || (tlen == 3 && memcmp(type, "TAG", 3) == 0);
}

/* The SQL92 filter for an expression type and text: type exactly SQL92
 * (FilterFactory knows no other), compiled. */
static bool
sql_for(struct pull_processor *pp, const char *type, size_t tlen, const char *text,
        size_t len, const struct sql92 **out)
{
    if (!(tlen == 5 && memcmp(type, "SQL92", 5) == 0))
        return false;
    *out = sql_filter(pp, text, len);
    return *out != NULL;
}

/* }}} */

static int
ensure_cap(struct pull_processor *pp, int n)
{
    if (n <= pp->cap)
        return 0;
    struct iovec *iov = realloc(pp->iov, sizeof(*iov) * (size_t)n);
    if (iov == NULL)
        return -1;
    pp->iov = iov;
    struct mfile **pins = realloc(pp->pins, sizeof(*pins) * (size_t)n);
    if (pins == NULL)
        return -1;
    pp->pins = pins;
    pp->cap = n;
    return 0;
}

/* The reply code of a get status, and whether the read scanned consume
 * queue entries: codes.get_status and codes.get_scanned (rmq_codes.h). */
static int
status_code(int status, int64_t offset)
{
    switch (status) {
#define GET_CASE(st, code, scanned) case st: return code;
    RMQ_GET_STATUS_CODES(GET_CASE)
#undef GET_CASE
    default: return offset != 0 ? RMQ_RESP_PULL_OFFSET_MOVED : RMQ_RESP_PULL_NOT_FOUND;
    }
}

static bool
scanned(int status)
{
    switch (status) {
#define GET_CASE(st, code, scanned) case st: return scanned;
    RMQ_GET_STATUS_CODES(GET_CASE)
#undef GET_CASE
    default: return false;
    }
}

/* The run-time values of slaveReadEnable and of "is slaveReadPolicy the
 * built-in rule, unreplaced" (Lua answers that: tables.set_setting), read
 * again only when the typed settings' version moves (one atomic load a
 * pull), so a replaced policy is asked from the next pull on. */
static void
read_settings(struct pull_processor *pp)
{
    if (!bsettings_refresh(&pp->settings))
        return;
    const struct bsettings_values *v = &pp->settings.v;
    pp->slave_read_enable =
        bsettings_get(v, BSET_SLAVE_READ_ENABLE, pp->conf_slave_read_enable) != 0;
    pp->default_policy = bsettings_get(v, BSET_SLAVE_READ_BUILTIN, pp->conf_builtin) != 0;
}

static void
set_int(lua_State *L, const char *k, int64_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

/* Asks the slave-read hook (pull.lua: the slaveReadPolicy in force, which
 * documents the facts) which broker the consumer should pull from next.
 * Any failure suggests the master (0), logged once a minute. */
static int64_t
suggest(struct pull_processor *pp, struct native_req *r, const struct subscription_group *g,
        const struct lheader_val *group, const struct lheader_val *topic, int64_t qid,
        int64_t max_phy, int64_t last_phy)
{
    lua_State *L = pp->L;
    if (L == NULL || pp->suggest_ref == LUA_NOREF || !lua_checkstack(L, 6))
        return 0;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, pp->suggest_ref);
    lua_createtable(L, 0, 11);
    lua_pushboolean(L, pp->slave_read_enable);
    lua_setfield(L, -2, "slaveReadEnable");
    set_int(L, "maxPhyOffset", max_phy);
    set_int(L, "lastPhyOffset", last_phy);
    set_int(L, "physicalMemory", pp->memory);
    set_int(L, "accessMessageInMemoryMaxRatio", pp->ratio);
    set_int(L, "whichBrokerWhenConsumeSlowly", g->which_broker_when_consume_slowly);
    set_int(L, "groupBrokerId", g->broker_id);
    lua_pushlstring(L, group->p, group->len);
    lua_setfield(L, -2, "group");
    lua_pushlstring(L, topic->p, topic->len);
    lua_setfield(L, -2, "topic");
    set_int(L, "queueId", qid);
    lua_pushboolean(L, store_role_slave(pp->store));
    lua_setfield(L, -2, "slave");
    int64_t which = 0;
    const char *why = NULL;
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        why = lua_tostring(L, -1);
    } else {
        int isint = 0;
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (isint && lua_type(L, -1) == LUA_TNUMBER && v >= 0)
            which = (int64_t)v;
        else
            why = "not a broker id";
    }
    if (why != NULL) {
        int64_t now = clock_mono_ns();
        if (now >= pp->quiet_until_ns) {
            log_warn("slave-read hook failed (%s): suggesting the master to %s",
                     why, r->c->peer);
            pp->quiet_until_ns = now + 60 * (int64_t)1000000000;
        }
    }
    lua_settop(L, top);
    return which;
}

static struct held_pull *hold_new(struct pull_processor *pp, struct native_req *r,
                                  const struct lheader_val *topic, int64_t qid, int64_t offset,
                                  int64_t hold_ms);
static void hold_start(struct held_pull *hp);

/*
 * One run of a pull: the first (r->lua == NATIVE_LUA_NONE), or again for
 * a pull held here (NATIVE_LUA_HOLD: PULL_WAIT unless there is something
 * to answer; NATIVE_LUA_FINAL: its deadline, answer what there is).
 */
/* OffsetMovedEvent into OFFSET_MOVED_EVENT (PullMessageProcessor's
 * generateOffsetMovedEvent): fastjson's body, DELAY=0, KEYS and TAGS the
 * group.  A put that fails is logged (the pull is answered anyway). */
static void
offset_moved_event(struct pull_processor *pp, struct native_req *r, const struct lheader_val *group,
                   const struct lheader_val *topic, int64_t qid, int64_t requested, int64_t now)
{
    static const char T[] = "OFFSET_MOVED_EVENT";
    struct fjw w;
    buf_reset(&pp->event);
    fjw_init(&w, &pp->event, false);
    fjw_lit(&w, "{\"consumerGroup\":");
    fjw_str(&w, group->p, group->len);
    fjw_lit(&w, ",\"messageQueue\":{\"brokerName\":");
    fjw_str(&w, pp->broker_name, strlen(pp->broker_name));
    fjw_lit(&w, ",\"queueId\":");
    fjw_i64(&w, qid);
    fjw_lit(&w, ",\"topic\":");
    fjw_str(&w, topic->p, topic->len);
    fjw_lit(&w, "},\"offsetNew\":");
    fjw_i64(&w, now);
    fjw_lit(&w, ",\"offsetRequest\":");
    fjw_i64(&w, requested);
    fjw_lit(&w, "}");
    size_t body_len = buf_len(&pp->event);
    struct prop kv[3] = {
        { "DELAY", 5, "0", 1 },
        { "KEYS", 4, group->p, group->len },
        { "TAGS", 4, group->p, group->len },
    };
    int rc = w.err;
    for (int i = 0; rc == 0 && i < 3; i++) {
        if ((i > 0 && buf_append(&pp->event, "\2", 1) != 0) ||
            buf_append(&pp->event, kv[i].k, kv[i].klen) != 0 ||
            buf_append(&pp->event, "\1", 1) != 0 ||
            buf_append(&pp->event, kv[i].v, kv[i].vlen) != 0)
            rc = -ENOMEM;
    }
    if (rc != 0) {
        log_warn("pull: out of memory for an OFFSET_MOVED_EVENT of %.*s", (int)group->len, group->p);
        return;
    }
    const uint8_t *head = buf_head(&pp->event);
    struct store_msg m = {
        .topic = T, .topic_len = sizeof(T) - 1, .qid = 0,
        .body = head, .body_len = body_len,
        .props = (const char *)head + body_len, .props_len = buf_len(&pp->event) - body_len,
        .born_ts = clock_wall_ms(), .born = pp->store_host, .store = pp->store_host,
    };
    struct store_put_result res;
    if (store_put(pp->store, &m, &res) != PUT_OK) {
        log_warn("pull: OFFSET_MOVED_EVENT not stored: %s", err_msg());
        return;
    }
    static const char key[] = "OFFSET_MOVED_EVENT@0";
    if (post_raise(&r->h->post, key, sizeof(key) - 1) != 0)
        log_warn("pull: out of memory waking the pulls of %s", key);
}

/* {{{ The reply */

#define PUT_LIT(w, s) (memcpy((w), (s), sizeof(s) - 1), (w) += sizeof(s) - 1)

static uint8_t *
put_i64(uint8_t *w, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *b = fjson_i64_digits(e, v);
    memcpy(w, b, (size_t)(e - b));
    return w + (e - b);
}

/* The longest pull_reply_head writes, less the remark: its literals
 * (196 bytes) and six numbers of at most 20 characters each. */
#define PULL_HEAD_MAX (196 + 6 * 20)

size_t
pull_reply_head(uint8_t *w0, int32_t code, const char *remark, size_t rlen,
                int32_t opaque, int64_t which, int64_t next, int64_t max, int64_t min)
{
    uint8_t *w = w0;
    PUT_LIT(w, "{\"code\":");
    w = put_i64(w, code);
    PUT_LIT(w, ",\"extFields\":{\"suggestWhichBrokerId\":\"");
    w = put_i64(w, which);
    PUT_LIT(w, "\",\"nextBeginOffset\":\"");
    w = put_i64(w, next);
    PUT_LIT(w, "\",\"maxOffset\":\"");
    w = put_i64(w, max);
    PUT_LIT(w, "\",\"minOffset\":\"");
    w = put_i64(w, min);
    PUT_LIT(w, "\"},\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    w = put_i64(w, opaque);
    PUT_LIT(w, ",\"remark\":\"");
    memcpy(w, remark, rlen);
    w += rlen;
    PUT_LIT(w, "\",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":409}");
    return (size_t)(w - w0);
}

/*
 * Answers a pull that read: PullMessageResponseHeader's fields in a 4.9.8
 * broker's order (the fixtures'), the get status as the remark, and the
 * records when there are (body).  The JSON header is spelled in one pass
 * with its constant parts as literals: the remark is a status name
 * (capitals and '_') and the values are numbers, so nothing needs
 * escaping (spec/c/test_formats.c holds it to rmq_cmd_encode's bytes).
 * What native_reply_json_begin refuses takes native_reply.
 */
static void
reply_pulled(struct native_req *r, int32_t code, const char *remark, int64_t which,
             const struct store_get_result *res, const struct store_slices *body)
{
    size_t rlen = strlen(remark);
    uint8_t *w = native_reply_json_begin(r, PULL_HEAD_MAX + rlen, body != NULL ? body->bytes : 0);
    if (w != NULL) {
        size_t hlen = pull_reply_head(w, code, remark, rlen, r->cmd->opaque, which, res->next,
                                      res->max, res->min);
        native_reply_json_end(r, code, hlen, body);
        return;
    }
    char d[4][24];
    char *e[4], *b[4];
    int64_t nums[4] = { which, res->next, res->max, res->min };
    for (int i = 0; i < 4; i++) {
        e[i] = d[i] + sizeof(d[i]);
        b[i] = fjson_i64_digits(e[i], nums[i]);
    }
    struct rmq_field ext[4] = {
        { { "suggestWhichBrokerId", 20 }, { b[0], (uint32_t)(e[0] - b[0]) } },
        { { "nextBeginOffset", 15 }, { b[1], (uint32_t)(e[1] - b[1]) } },
        { { "maxOffset", 9 }, { b[2], (uint32_t)(e[2] - b[2]) } },
        { { "minOffset", 9 }, { b[3], (uint32_t)(e[3] - b[3]) } },
    };
    native_reply(r, code, remark, rlen, ext, 4, NULL, 0, body);
}

/* }}} */

/* Answers r with a refusal (4.9.8's texts, written here only): an empty
 * extFields, as Java's PullMessageResponseHeader with no field set. */
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
    static const struct rmq_field none[1];
    native_reply(r, code, remark, (size_t)n, none, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* Asks the group auto-create hook (pull.lua: autoCreateSubscriptionGroup,
 * the CID_RMQ_SYS_ groups) for a group the table does not have; true when
 * it exists now, in g.  Any failure: false (the Lua handler answers). */
static bool
create_group(struct pull_processor *pp, const struct lheader_val *group,
             struct subscription_group *g)
{
    lua_State *L = pp->L;
    if (L == NULL || pp->group_ref == LUA_NOREF || !lua_checkstack(L, 3))
        return false;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, pp->group_ref);
    lua_pushlstring(L, group->p, group->len);
    bool made = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_toboolean(L, -1);
    lua_settop(L, top);
    return made && config_table_get(pp->groups, group->p, group->len, g) == 0;
}

/* {{{ Filters inside the read */

/* One read's filters beyond the tag codes (pull_serve). */
struct pull_match {
    struct pull_processor *pp;
    const struct sql92 *sql;       /* the subscription's, or NULL */
    const struct lheader_val *group;
    bool retry;                    /* filterSupportRetry on a retry topic */
    bool lua;                      /* a Lua pull filter: lm */
    struct record_match lm;
    /* The last real topic a retried record named, and its filter (NULL:
     * everything passes); the entry is looked up again when the topic
     * changes, so an entry the compile cache let go is never reused. */
    char last[128];
    size_t last_len;
    bool last_set;
    const struct sql92 *last_sql;
};

/* The group's SQL92 subscription of a retried record's real topic
 * (RETRY_TOPIC), or NULL: a TAG one passes (its tags were checked at the
 * first pull), and so does one that does not compile, or no record. */
static const struct sql92 *
retry_filter(struct pull_match *m, const char *real, size_t rlen)
{
    struct pull_processor *pp = m->pp;
    buf_reset(&pp->retry_rec);
    if (creg_subscription(pp->clients, m->group->p, m->group->len, real, rlen, &pp->retry_rec) != 2)
        return NULL;
    struct creg_rd rd;
    size_t l, sl, el;
    creg_rd_init(&rd, &pp->retry_rec, 0);
    (void)creg_rd_i8(&rd);
    (void)creg_rd_i8(&rd);
    (void)creg_rd_i8(&rd);
    (void)creg_rd_u8(&rd);
    (void)creg_rd_str(&rd, &l);             /* topic */
    const char *sub = creg_rd_str(&rd, &sl);
    const char *expr = creg_rd_str(&rd, &el);
    const struct sql92 *f = NULL;
    if (expr == NULL || sub == NULL || is_tag(expr, el) || !sql_for(pp, expr, el, sub, sl, &f))
        return NULL;
    return f;
}

static bool
retry_match(struct pull_match *m, const uint8_t *rec, size_t len)
{
    struct clog_view v;
    if (clog_decode(rec, len, -1, false, &v) != CLOG_REC)
        return true;
    size_t rlen;
    const char *real = props_find((const char *)v.props, v.props_len, "RETRY_TOPIC", &rlen);
    if (real == NULL)
        return true;
    if (!m->last_set || m->last_len != rlen || memcmp(m->last, real, rlen) != 0) {
        m->last_sql = retry_filter(m, real, rlen);
        m->last_set = rlen <= sizeof(m->last);
        if (m->last_set) {
            memcpy(m->last, real, rlen);
            m->last_len = rlen;
        }
    }
    return m->last_sql == NULL ||
           sql92_match_props(m->last_sql, (const char *)v.props, v.props_len);
}

/* store_match_fn over a pull_match: the retry rule, then the Lua filter
 * (only what the first keeps is shown to it). */
static bool
pull_match(void *ud, const uint8_t *rec, size_t len)
{
    struct pull_match *m = ud;
    if (m->sql != NULL && !sql_match((void *)m->sql, rec, len))
        return false;
    if (m->retry && !retry_match(m, rec, len))
        return false;
    return !m->lua || record_match(&m->lm, rec, len);
}

/* Asks the pullFilter hook (pull.lua) for the Lua pull filter of topic
 * and group: true when there is one, set up in lm, its values left on
 * the stack (the function, body, account, and lm's closure) for
 * pull_filter_done.  A failing hook is logged once a minute: no filter. */
static bool
pull_filter(struct pull_processor *pp, struct native_req *r, const struct lheader_val *topic,
            const struct lheader_val *group, struct record_match *lm)
{
    lua_State *L = pp->L;
    if (L == NULL || pp->filter_ref == LUA_NOREF || !lua_checkstack(L, 8))
        return false;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, pp->filter_ref);
    lua_pushlstring(L, topic->p, topic->len);
    lua_pushlstring(L, group->p, group->len);
    if (lua_pcall(L, 2, 3, 0) != LUA_OK) {
        int64_t now = clock_mono_ns();
        if (now >= pp->quiet_until_ns) {
            const char *e = lua_tostring(L, -1);
            log_warn("pull filter hook failed (%s): %.*s of %s is read unfiltered",
                     e != NULL ? e : "?", (int)topic->len, topic->p, r->c->peer);
            pp->quiet_until_ns = now + 60 * (int64_t)1000000000;
        }
        lua_settop(L, top);
        return false;
    }
    if (lua_type(L, top + 1) != LUA_TFUNCTION) {
        lua_settop(L, top);
        return false;              /* none for this group */
    }
    record_match_lua(lm, L, top + 1, lua_toboolean(L, top + 2));
    return true;
}

/* The read is over: the filter's account (calls, dropped, first error,
 * nanoseconds in it) is told, and the stack is as before pull_filter. */
static void
pull_filter_done(struct pull_processor *pp, const struct record_match *lm, int top)
{
    lua_State *L = pp->L;
    if (lua_type(L, top + 3) == LUA_TFUNCTION && (lm->calls > 0 || lm->err[0] != 0)) {
        lua_pushvalue(L, top + 3);
        lua_pushinteger(L, lm->calls);
        lua_pushinteger(L, lm->dropped);
        if (lm->err[0] != 0)
            lua_pushstring(L, lm->err);
        else
            lua_pushnil(L);
        lua_pushinteger(L, lm->nanos);
        if (lua_pcall(L, 4, 0, 0) != LUA_OK)
            log_warn("pull filter account failed: %s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
    }
    lua_settop(L, top);
}

/* }}} */

/* The pull, its header's values read (v: lheader_decode's, or the typed
 * one-pass decode's, which are the same for every header it takes). */
static int
pull_serve_vals(struct pull_processor *pp, struct native_req *r, const struct lheader_val *v)
{
    /* A slave that may not be read (slaveReadEnable off) serves what it
     * has and suggests the master, as 4.9.8 does: its
     * PullMessageProcessor sets PULL_RETRY_IMMEDIATELY for such a slave,
     * then overwrites it with the read's own code. */
    read_settings(pp);
    const struct lheader_val *group = &v[pp->idx[F_GROUP]];
    const struct lheader_val *topic = &v[pp->idx[F_TOPIC]];
    int64_t qid = v[pp->idx[F_QUEUE_ID]].i;
    int64_t offset = v[pp->idx[F_OFFSET]].i;
    int64_t max = v[pp->idx[F_MAX]].i;
    int64_t sys_flag = v[pp->idx[F_SYS_FLAG]].i;
    /* PullMessageProcessor's checks, in its order. */
    if ((broker_perm_get(&pp->perm) & RMQ_PERM_READ) == 0)
        return refuse(r, RMQ_RESP_NO_PERMISSION, "the broker[%s] pulling message is forbidden", pp->ip);
    struct subscription_group g;
    if (config_table_get(pp->groups, group->p, group->len, &g) != 0 && !create_group(pp, group, &g))
        return refuse(r, RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST,
                      "subscription group [%.*s] does not exist, " FAQ, (int)group->len, group->p);
    if (!g.consume_enable)
        return refuse(r, RMQ_RESP_NO_PERMISSION, "subscription group no permission, %.*s",
                      (int)group->len, group->p);
    struct topic_config tc;
    if (config_table_get(pp->topics, topic->p, topic->len, &tc) != 0) {
        log_warn("pull: the topic %.*s does not exist, consumer: %s", (int)topic->len, topic->p,
                 r->c->peer);
        return refuse(r, RMQ_RESP_TOPIC_NOT_EXIST, "topic[%.*s] not exist, apply first please! " FAQ,
                      (int)topic->len, topic->p);
    }
    if ((tc.perm & RMQ_PERM_READ) == 0)
        return refuse(r, RMQ_RESP_NO_PERMISSION, "the topic[%.*s] pulling message is forbidden",
                      (int)topic->len, topic->p);
    if (qid < 0 || qid >= tc.read_queue_nums)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR,
                      "queueId[%lld] is illegal, topic:[%.*s] topicConfig.readQueueNums:[%d] consumer:[%s]",
                      (long long)qid, (int)topic->len, topic->p, (int)tc.read_queue_nums, r->c->peer);
    bool class_filter = (sys_flag & FLAG_CLASS_FILTER) != 0;
    struct tag_filter f;
    int why;
    const struct lheader_val *expr;
    if (sys_flag & FLAG_SUBSCRIPTION) {
        expr = &v[pp->idx[F_EXPR]];
        why = request_filter(pp, &v[pp->idx[F_SUB]], expr, &f);
        if (why == SUB_OK && class_filter) {
            f.all = true;
            f.sql = NULL;
        }
    } else {
        expr = NULL;
        int64_t sub_version = v[pp->idx[F_SUB_VERSION]].set ? v[pp->idx[F_SUB_VERSION]].i : 0;
        why = registered_filter(pp, group, topic, sub_version, &g, class_filter, &f);
    }
    switch (why) {
    case SUB_OK:
        break;
    case SUB_PARSE_FAILED:
        log_warn("Parse the consumer's subscription[%.*s] failed, group: %.*s",
                 v[pp->idx[F_SUB]].set ? (int)v[pp->idx[F_SUB]].len : 3,
                 v[pp->idx[F_SUB]].set ? v[pp->idx[F_SUB]].p : "nil", (int)group->len, group->p);
        return refuse(r, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed");
    case SUB_NO_GROUP_INFO:
        return refuse(r, RMQ_RESP_SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist" FAQ);
    case SUB_BROADCAST:
        return refuse(r, RMQ_RESP_NO_PERMISSION, "the consumer group[%.*s] can not consume by broadcast way",
                      (int)group->len, group->p);
    case SUB_NOT_EXIST:
        return refuse(r, RMQ_RESP_SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist" FAQ);
    case SUB_NOT_LATEST:
        return refuse(r, RMQ_RESP_SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest");
    case SUB_NO_FILTER_DATA:
        return refuse(r, RMQ_RESP_FILTER_DATA_NOT_EXIST,
                      "The broker's consumer filter data is not exist!Your expression may be wrong!");
    case SUB_NOT_SUPPORTED: {
        /* The expression type: the request's, or the group's (its
         * registry record, still in pp->rec). */
        const char *t = expr != NULL ? expr->p : NULL;
        size_t tl = expr != NULL ? expr->len : 0;
        if (expr == NULL) {
            struct creg_rd rd;
            size_t l;
            creg_rd_init(&rd, &pp->rec, 0);
            (void)creg_rd_i8(&rd);
            (void)creg_rd_i8(&rd);
            (void)creg_rd_i8(&rd);
            (void)creg_rd_u8(&rd);
            (void)creg_rd_str(&rd, &l);
            (void)creg_rd_str(&rd, &l);
            t = creg_rd_str(&rd, &tl);
        }
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "The broker does not support consumer to filter message by %.*s",
                      (int)tl, t);
    }
    default:
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "out of memory reading the subscription");
    }
    if (max < 1)
        max = 1;
    if (max > MAX_MSGS)
        max = MAX_MSGS;
    /* Slices for what the store can return, not what the peer asks:
     * the arrays live as long as the worker. */
    if (max > store_get_max_records(pp->store))
        max = store_get_max_records(pp->store);
    if (ensure_cap(pp, (int)max) != 0)
        return refuse(r, RMQ_RESP_SYSTEM_ERROR, "out of memory for a pull of %lld messages", (long long)max);
    struct store_slices out = { .cap = (int)max, .iov = pp->iov, .pins = pp->pins, .consumer = true };
    struct store_get_result res;
    /* filterSupportRetry: a retry topic read with no SQL92 filter of its
     * own judges each record by its real topic's (ExpressionFor-
     * RetryMessageFilter); and a Lua pull filter, when one applies. */
    struct pull_match pm = {
        .pp = pp, .sql = f.sql, .group = group,
        .retry = pp->filter_support_retry && f.sql == NULL && topic->len >= 7 &&
                 memcmp(topic->p, "%RETRY%", 7) == 0,
    };
    int top = 0;
    if (pp->L != NULL && filter_topic(pp, topic->p, topic->len)) {
        top = lua_gettop(pp->L);
        pm.lua = pull_filter(pp, r, topic, group, &pm.lm);
    }
    int status;
    if (pm.retry || pm.lua)
        status = store_get_match(pp->store, topic->p, topic->len, (int32_t)qid, offset, (int)max,
                                 f.all ? NULL : f.codes, f.all ? 0 : f.n, pull_match, &pm, &out, &res);
    else
        status = store_get_match(pp->store, topic->p, topic->len, (int32_t)qid, offset, (int)max,
                                 f.all ? NULL : f.codes, f.all ? 0 : f.n,
                                 f.sql != NULL ? sql_match : NULL, (void *)f.sql, &out, &res);
    if (pm.lua)
        pull_filter_done(pp, &pm.lm, top);
    if (out.n > 1 && pp->win.nblocks > 0) {   /* one record has no gap: no window */
        store_window_sync(&pp->win, pp->store);
        out.win = &pp->win;
    }
    int code = status_code(status, offset);
    bool suspend = (sys_flag & FLAG_SUSPEND) != 0;
    struct held_pull *hp = NULL;
    if (r->lua == NATIVE_LUA_HOLD) {
        /* Held: woken by messages the filter drops (NO_MATCHED_MSG:
         * PULL_RETRY_IMMEDIATELY), or a slave's moved offset, it goes on
         * waiting. */
        if (code == RMQ_RESP_PULL_NOT_FOUND || code == RMQ_RESP_PULL_RETRY_IMMEDIATELY ||
            (code == RMQ_RESP_PULL_OFFSET_MOVED && store_role_slave(pp->store))) {
            store_slices_release(&out);
            return PULL_WAIT;
        }
    } else if (r->lua == NATIVE_LUA_NONE && code == RMQ_RESP_PULL_NOT_FOUND && suspend) {
        /* The long poll: the consumer's suspendTimeoutMillis
         * (longPollingEnable) or shortPollingTimeMills, at most
         * brokerSuspendMaxTimeMillis; 0 answers at once. */
        int64_t hold_ms = pp->long_polling ? (v[pp->idx[F_SUSPEND_MS]].set ? v[pp->idx[F_SUSPEND_MS]].i : 0)
                                           : pp->short_polling_ms;
        if (hold_ms > pp->suspend_max_ms)
            hold_ms = pp->suspend_max_ms;
        if (r->h->draining)
            hold_ms = 0;   /* shutting down: answered at once */
        if (hold_ms > 0) {
            hp = hold_new(pp, r, topic, qid, offset, hold_ms);
            if (hp == NULL) {
                store_slices_release(&out);
                return NATIVE_DONE;   /* refused by the memory budget (answered) */
            }
        }
    } else if (r->lua == NATIVE_LUA_NONE && code == RMQ_RESP_PULL_OFFSET_MOVED && !store_role_slave(pp->store)) {
        /* A master corrects the offset, and says so with an event. */
        log_warn("PULL_OFFSET_MOVED: correction offset. topic=%.*s, groupId=%.*s, requestOffset=%lld, "
                 "newOffset=%lld", (int)topic->len, topic->p, (int)group->len, group->p,
                 (long long)offset, (long long)res.next);
        offset_moved_event(pp, r, group, topic, qid, offset, res.next);
    }
    /* The slave-read policy's suggestion: the built-in one with
     * slaveReadEnable off always says the master. */
    int64_t which = 0;
    if (hp == NULL && (pp->slave_read_enable || !pp->default_policy)) {
        int64_t last = scanned(status) ? res.max_phy_pulling : res.max_phy;
        which = suggest(pp, r, &g, group, topic, qid, res.max_phy, last);
    }
    if (code == RMQ_RESP_PULL_OFFSET_MOVED && store_role_slave(pp->store)) {
        /* A slave does not correct offsets: retry, from the master. */
        code = RMQ_RESP_PULL_RETRY_IMMEDIATELY;
        which = g.broker_id;
    }
    /* The consumer's offset, on the first run only (held or not). */
    if ((sys_flag & FLAG_COMMIT_OFFSET) && !store_role_slave(pp->store) && r->lua == NATIVE_LUA_NONE) {
        buf_reset(&pp->key);
        int64_t commit = v[pp->idx[F_COMMIT]].set ? v[pp->idx[F_COMMIT]].i : 0;
        int rc = buf_append(&pp->key, topic->p, topic->len) == 0 &&
                         buf_append(&pp->key, "@", 1) == 0 &&
                         buf_append(&pp->key, group->p, group->len) == 0
                     ? offset_table_commit(pp->offsets, (const char *)buf_head(&pp->key),
                                           buf_len(&pp->key), (uint32_t)qid, commit)
                     : -ENOMEM;
        /* A negative offset is not stored (-EINVAL), as offsets.commit;
         * out of memory, the offset is not stored either: refused. */
        if (rc == -ENOMEM) {
            store_slices_release(&out);
            if (hp != NULL) {
                host_budget_release(hp->c, hp->charged);
                membudget_burst_free(hp);
            }
            return refuse(r, RMQ_RESP_SYSTEM_ERROR, "out of memory storing the consumer's offset");
        }
    }
    if (hp != NULL) {
        store_slices_release(&out);
        hold_start(hp);
        return NATIVE_DONE;
    }
    if (code == RMQ_RESP_SUCCESS && r->h->metrics != NULL)
        metrics_out(r->h->metrics, topic->p, topic->len, group->p, group->len,
                    (uint64_t)out.n, (uint64_t)out.bytes, (int32_t)qid, res.next, r->start_ns);
    reply_pulled(r, code, get_status_name(status), which, &res,
                 code == RMQ_RESP_SUCCESS ? &out : NULL);
    /* The window's count after the reply took its path (this worker's
     * shard: one window, one shard). */
    if (out.win != NULL && r->h->metrics != NULL)
        metrics_pull_window_sends(r->h->metrics, pp->win.sends);
    store_slices_release(&out);
    return NATIVE_DONE;
}

static int
pull_serve(struct pull_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->header, r->cmd, v, remark, sizeof(remark)) != 0) {
        /* Refused before any header is made: no extFields. */
        native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    return pull_serve_vals(pp, r, v);
}

/* {{{ Held pulls */

/* What a held pull is charged: as a request waiting in a Lua task
 * (core/membudget.h), so the limits mean the same number of held pulls
 * whichever side holds them. */
static int64_t
hold_cost(size_t frame_len)
{
    return (int64_t)frame_len + MEMBUDGET_TASK_BYTES;
}

static int64_t
mono_ms(void)
{
    return clock_mono_ns() / 1000000;
}

/* The record of a pull about to be held (not waiting yet), charged to the
 * budget; NULL when the budget refused it (answered SYSTEM_BUSY) or no
 * memory (answered SYSTEM_ERROR). */
static struct held_pull *
hold_new(struct pull_processor *pp, struct native_req *r, const struct lheader_val *topic,
         int64_t qid, int64_t offset, int64_t hold_ms)
{
    /* A request with no frame (the gRPC service's shadow connection, a
     * Lua handler's native.run): its frame is encoded once, to hold. */
    const uint8_t *frame = r->frame;
    size_t frame_len = r->frame_len;
    if (frame == NULL) {
        buf_reset(&pp->event);
        if (rmq_cmd_encode(r->cmd, &pp->event) != 0 ||
            (r->cmd->body_len > 0 && buf_append(&pp->event, r->cmd->body, r->cmd->body_len) != 0)) {
            refuse(r, RMQ_RESP_SYSTEM_ERROR, "cannot hold the pull: %s", err_msg());
            return NULL;
        }
        frame = buf_head(&pp->event);
        frame_len = buf_len(&pp->event);
    }
    int64_t cost = hold_cost(frame_len);
    if (!host_budget_charge(r->h, r->c, r->cmd, cost))
        return NULL;
    /* From the burst arena (core/membudget.h): a flood of held pulls
     * must not leave its slabs pinned by the long-lived objects allocated
     * beside them. */
    struct held_pull *hp = membudget_burst_calloc(sizeof(*hp) + frame_len);
    char qd[16];
    char *qde = qd + sizeof(qd), *qdb = fjson_i64_digits(qde, qid);
    size_t klen = topic->len + 1 + (size_t)(qde - qdb);
    if (hp == NULL || klen > sizeof(hp->key)) {
        membudget_burst_free(hp);
        host_budget_release(r->c, cost);
        static const char oom[] = "out of memory holding a pull";
        log_error("pull from %s: %s", r->c->peer, oom);
        native_reply(r, RMQ_RESP_SYSTEM_ERROR, oom, sizeof(oom) - 1, NULL, 0, NULL, 0, NULL);
        return NULL;
    }
    hp->pp = pp;
    hp->h = r->h;
    hp->c = r->c;
    hp->start_ns = r->start_ns;
    hp->deadline_ms = mono_ms() + hold_ms;
    hp->offset = offset;
    hp->charged = cost;
    hp->qid = (int32_t)qid;
    memcpy(hp->key, topic->p, topic->len);
    hp->key[topic->len] = '@';
    memcpy(hp->key + topic->len + 1, qdb, (size_t)(qde - qdb));
    hp->tlen = topic->len;
    hp->klen = klen;
    hp->len = frame_len;
    memcpy(hp->frame, frame, frame_len);
    q_init(&hp->link);
    return hp;
}

/* The held pull is done: its accounting given back, its connection
 * released.  to_lua: its Lua handler finishes it (after all). */
static void
hold_end(struct held_pull *hp, bool to_lua)
{
    struct conn *c = hp->c;
    if (hp->ev != NULL)
        post_event_cancel(hp->ev);
    if (q_linked(&hp->link))
        q_remove(&hp->link);
    host_budget_release(c, hp->charged);
    hp->h->requests_live--;
    if (!c->closed) {
        conn_request_done(c);
        if (to_lua && host_request_to_lua(hp->h, c, hp->frame, hp->len, hp->start_ns) != 0)
            log_warn("pull from %s: %s", c->peer, err_msg());
    }
    conn_unref(c);
    membudget_burst_free(hp);
}

static void hold_wake(void *arg, bool raised);

/* Waits for the queue's key until the next re-check or the deadline.
 * The first slice is cut at random in [recheck/2, recheck]: pulls held
 * together (thousands, from a flood or a restart) then do not all
 * re-check in the same millisecond, every slice after. */
static void
hold_wait(struct held_pull *hp, bool first)
{
    struct pull_processor *pp = hp->pp;
    int64_t slice = pp->recheck_ms;
    if (first)
        slice = slice / 2 + (clock_mono_ns() / 1000) % (slice / 2 + 1);   /* µs: jitter enough */
    int64_t left = hp->deadline_ms - mono_ms();
    if (left < slice)
        slice = left > 0 ? left : 0;
    hp->ev = post_event_wait(&hp->h->post, hp->key, hp->klen, (uint64_t)slice, hold_wake, hp);
    if (hp->ev == NULL) {
        /* No wait: answer what there is now. */
        log_warn("pull from %s: cannot hold (%s)", hp->c->peer, err_msg());
        hold_wake(hp, false);
    }
}

/* Runs the held pull's frame again (decoded anew, into the processor's
 * arena: one run at a time on the worker's thread). */
static int
hold_run(struct held_pull *hp, bool final)
{
    struct pull_processor *pp = hp->pp;
    struct rmq_cmd cmd;
    if (hp->len < 8)
        return NATIVE_TO_LUA;
    size_t need = rmq_cmd_arena_size(be32_get(hp->frame + 4) & 0xFFFFFF);
    buf_reset(&pp->arena);
    if (buf_reserve(&pp->arena, need) != 0)
        return NATIVE_TO_LUA;
    struct rmq_arena a = { buf_tail(&pp->arena), need, 0 };
    if (rmq_cmd_decode(&cmd, hp->frame, hp->len, &a) != 0)
        return NATIVE_TO_LUA;
    struct native_req r = {
        .h = hp->h, .c = hp->c, .cmd = &cmd, .start_ns = hp->start_ns,
        .oneway = (cmd.flag & RMQ_RPC_ONEWAY) != 0,
        .lua = final ? NATIVE_LUA_FINAL : NATIVE_LUA_HOLD,
        .metrics = hp->h->metrics, .enc = &hp->h->enc,
    };
    return pull_serve(pp, &r);
}

/* The key was raised, or a slice ended: read again when the queue grew
 * (a raise, or the max offset past the one asked: a message stored
 * between the read and the wait), answer at the deadline or when the
 * host drains; forget it when its connection closed. */
static void
hold_wake(void *arg, bool raised)
{
    struct held_pull *hp = arg;
    hp->ev = NULL;
    if (hp->c->closed) {
        hold_end(hp, false);
        return;
    }
    bool final = mono_ms() >= hp->deadline_ms || hp->h->draining;
    if (!final && !raised &&
        store_max_offset(hp->pp->store, hp->key, hp->tlen, hp->qid) <= hp->offset) {
        hold_wait(hp, false);
        return;
    }
    int rc = hold_run(hp, final);
    if (rc == PULL_WAIT && !final) {
        hold_wait(hp, false);
        return;
    }
    hold_end(hp, rc == NATIVE_TO_LUA);
}

static void
hold_start(struct held_pull *hp)
{
    conn_ref(hp->c);
    conn_request_begin(hp->c);
    hp->h->requests_live++;   /* a stopping worker drains it */
    q_insert_tail(&hp->pp->held, &hp->link);
    hold_wait(hp, true);
}

/* }}} */

static int
pull_run(struct native_proc *p, struct native_req *r)
{
    struct pull_processor *pp = (struct pull_processor *)p;
    int rc = pull_serve(pp, r);
    return rc == PULL_WAIT ? NATIVE_DONE : rc;
}

/* The header spec for the typed one-pass decode (runtime/host.c's
 * typed_frame): the Java client's PULL_MESSAGE, its extFields read and
 * typed in one pass instead of decoded into fields and read again. */
static const struct hspec *
pull_json_spec(struct native_proc *p, int32_t code)
{
    struct pull_processor *pp = (struct pull_processor *)p;
    return code == RMQ_REQ_PULL_MESSAGE ? pp->header : NULL;
}

/* pull_run with the header's values read already (pull_json_spec's).  A
 * pull held for later keeps its frame, and is decoded again when it
 * runs again (hold_new). */
static int
pull_run_typed(struct native_proc *p, struct native_req *r, const struct lheader_val *vals)
{
    struct pull_processor *pp = (struct pull_processor *)p;
    int rc = pull_serve_vals(pp, r, vals);
    return rc == PULL_WAIT ? NATIVE_DONE : rc;
}

static void
pull_destroy(struct native_proc *p)
{
    struct pull_processor *pp = (struct pull_processor *)p;
    /* Pulls still held (the host is being freed: their connections are
     * closed) are dropped unanswered. */
    while (!q_empty(&pp->held))
        hold_end(container_of(pp->held.next, struct held_pull, link), false);
    if (pp->L != NULL) {
        luaL_unref(pp->L, LUA_REGISTRYINDEX, pp->suggest_ref);
        luaL_unref(pp->L, LUA_REGISTRYINDEX, pp->group_ref);
        luaL_unref(pp->L, LUA_REGISTRYINDEX, pp->filter_ref);
    }
    if (pp->store != NULL)
        store_unref(pp->store);
    buf_free(&pp->rec);
    buf_free(&pp->key);
    free(pp->iov);
    free(pp->codes);
    free(pp->ip);
    free(pp->broker_name);
    buf_free(&pp->event);
    free(pp->pins);
    free(pp->filter_topics);
    buf_free(&pp->retry_rec);
    buf_free(&pp->arena);
    store_window_free(&pp->win);
    for (int i = 0; i < pp->nsql; i++) {
        free(pp->sql[i].text);
        sql92_free(pp->sql[i].f);
    }
    free(pp->sql);
    free(pp);
}

struct native_proc *
pull_processor_new(const struct pull_processor_conf *c)
{
    struct pull_processor *pp = calloc(1, sizeof(*pp));
    if (pp == NULL) {
        if (c->L != NULL) {
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->suggest_ref);
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->group_ref);
            luaL_unref(c->L, LUA_REGISTRYINDEX, c->filter_ref);
        }
        err_set("out of memory");
        return NULL;
    }
    pp->L = c->L;              /* owned now: pull_destroy releases it */
    pp->suggest_ref = c->suggest_ref;
    pp->group_ref = c->group_ref;
    pp->filter_ref = c->filter_ref;
    pp->base.name = "pull";
    pp->base.run = pull_run;
    pp->base.json_spec = pull_json_spec;
    pp->base.run_typed = pull_run_typed;
    pp->base.destroy = pull_destroy;
    q_init(&pp->held);
    store_window_init(&pp->win, c->read_window);
    pp->long_polling = c->long_polling;
    pp->short_polling_ms = c->short_polling_ms;
    pp->suspend_max_ms = c->suspend_max_ms;
    pp->recheck_ms = c->recheck_ms;
    buf_init(&pp->rec);
    buf_init(&pp->key);
    buf_init(&pp->retry_rec);
    buf_init(&pp->arena);
    if (lheader_nfields(c->header) > 64) {
        pull_destroy(&pp->base);
        err_set("the pull header spec has more than 64 fields");
        return NULL;
    }
    for (int i = 0; i < NFIELDS; i++) {
        pp->idx[i] = lheader_field(c->header, field_keys[i]);
        if (pp->idx[i] < 0) {
            pull_destroy(&pp->base);
            err_set("the pull header spec has no field %s", field_keys[i]);
            return NULL;
        }
    }
    pp->header = c->header;
    pp->topics = config_table_topics();
    pp->groups = config_table_groups();
    pp->offsets = offset_table_shared();
    pp->clients = creg_shared();
    if (pp->topics == NULL || pp->groups == NULL || pp->offsets == NULL ||
        pp->clients == NULL || broker_perm_init(&pp->perm, c->perm) != 0 ||
        ensure_cap(pp, 32) != 0) {
        pull_destroy(&pp->base);
        err_set("out of memory");
        return NULL;
    }
    if (c->filter_topics_len > 0) {
        pp->filter_topics = malloc(c->filter_topics_len);
        if (pp->filter_topics == NULL) {
            pull_destroy(&pp->base);
            err_set("out of memory");
            return NULL;
        }
        memcpy(pp->filter_topics, c->filter_topics, c->filter_topics_len);
        pp->filter_topics_len = c->filter_topics_len;
    }
    pp->filter_support_retry = c->filter_support_retry;
    pp->broker_name = strdup(c->broker_name != NULL ? c->broker_name : "");
    pp->store_host = c->store_host;
    buf_init(&pp->event);
    if (pp->broker_name == NULL) {
        pull_destroy(&pp->base);
        err_set("out of memory");
        return NULL;
    }
    pp->ip = strdup(c->ip != NULL ? c->ip : "");
    if (pp->ip == NULL) {
        pull_destroy(&pp->base);
        err_set("out of memory");
        return NULL;
    }
    pp->perm.property_filter = c->enable_property_filter;
    pp->sql_limits = c->sql_limits;
    /* At least one slot: an expression is compiled here even with no
     * cache (filterCompiledCacheSize = 0), kept until the next one. */
    int sql_cap = c->sql_cache > 0 ? c->sql_cache : 1;
    pp->sql = calloc((size_t)sql_cap, sizeof(*pp->sql));
    if (pp->sql == NULL) {
        pull_destroy(&pp->base);
        err_set("out of memory");
        return NULL;
    }
    pp->sql_cap = sql_cap;
    pp->slave_read_enable = c->slave_read_enable;
    pp->conf_slave_read_enable = c->slave_read_enable;
    pp->default_policy = c->slave_read_builtin;
    pp->conf_builtin = c->slave_read_builtin;
    /* (pp is zeroed: the settings are read on the first request) */
    pp->memory = c->memory;
    pp->ratio = c->ratio;
    pp->store = c->store;
    store_ref(pp->store);
    return &pp->base;
}
