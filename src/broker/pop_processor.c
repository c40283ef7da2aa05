/*
 * pop_processor: see pop_processor.h.
 */
#include "broker/pop_processor.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/broker_perm.h"
#include "broker/config_table.h"
#include "proto/heartbeat.h"
#include "broker/offset_table.h"
#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/jscan.h"
#include "core/log.h"
#include "core/metrics.h"
#include "filter/sql92.h"
#include "proto/header.h"
#include "runtime/host.h"
#include "runtime/post.h"
#include "store/access.h"
#include "store/commitlog.h"
#include "store/popstore.h"
#include "store/props.h"
#include "store/store.h"
#include "rmq_codes.h"

/* BatchAck bitSet bytes taken (8192 offsets from startOffset). */
#define BATCH_BITS_MAX 1024
/* Acks a BATCH_ACK body may carry. */
#define BATCH_ACKS_MAX 1024

/* KeyBuilder.POP_ORDER_REVIVE_QUEUE */
#define ORDER_REVIVE_QID 999
/* PopMessageProcessor: at most 32 messages a POP. */
#define MAX_NUMS 32
/* ConsumeInitMode */
#define INIT_MIN 0

#define FAQ_APPLY_TOPIC "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

enum { P_GROUP, P_TOPIC, P_QID, P_MAX, P_INVISIBLE, P_POLL, P_INIT, P_EXP_TYPE, P_EXP, P_ORDER,
       P_BORN, NP };
static const char *const pop_keys[NP] = {
    "consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime",
    "initMode", "expType", "exp", "order", "bornTime",
};

/* PopMessageRequestHeader.isTimeoutTooMuch: the client gave up already. */
#define POP_TIMEOUT_SLACK_MS 500
enum { K_GROUP, K_TOPIC, K_QID, K_MAX, NK };
static const char *const peek_keys[NK] = { "consumerGroup", "topic", "queueId", "maxMsgNums" };
enum { N_GROUP, N_TOPIC, N_QID, N_POLL, N_ORDER, NN };
static const char *const notify_keys[NN] = { "consumerGroup", "topic", "queueId", "pollTime", "order" };
enum { I_GROUP, I_TOPIC, I_QID, NI };
static const char *const info_keys[NI] = { "consumerGroup", "topic", "queueId" };
enum { A_GROUP, A_TOPIC, A_QID, A_EXTRA, A_OFFSET, NA };
static const char *const ack_keys[NA] = {
    "consumerGroup", "topic", "queueId", "extraInfo", "offset",
};
enum { C_GROUP, C_TOPIC, C_QID, C_EXTRA, C_OFFSET, C_INVISIBLE, NC };
static const char *const change_keys[NC] = {
    "consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime",
};

struct pop_processor {
    struct native_proc base;
    struct store *store;
    struct popstore *ps;
    const struct hspec *pop_h, *ack_h, *change_h, *peek_h, *notify_h, *info_h;
    int pi[NP], ai[NA], ci[NC], ki[NK], ni[NN], ii[NI];
    struct broker_perm perm;
    char broker_ip[64];
    int64_t inv_min, inv_max;
    int32_t retry_probability;
    bool init_by_mem;
    struct config_table *topics, *groups;
    struct offset_table *offsets;
    struct iovec iov[MAX_NUMS];
    struct mfile *pins[MAX_NUMS];
    struct buf key, start_info, msg_info, order_info, remark;
    uint32_t rnd;
};

/* {{{ The revive service (one thread a process) */

struct reviver {
    struct store *store;
    struct popstore *ps;
    struct host_addr store_host;
    int64_t interval;
    struct config_table *groups;
    int64_t log_second;         /* failures logged in this second ... */
    int logged;                 /* ... at most REVIVE_LOG_MAX of them */
};

#define REVIVE_LOG_MAX 10

/* A failure worth a log line (at most REVIVE_LOG_MAX a second: a full
 * disk must not turn every due lease into a line a second). */
static bool
revive_log_ok(struct reviver *rv)
{
    int64_t sec = clock_wall_ms() / 1000;
    if (sec != rv->log_second) {
        if (rv->logged > REVIVE_LOG_MAX)
            log_warn("pop revive: %d more failures in the last second", rv->logged - REVIVE_LOG_MAX);
        rv->log_second = sec;
        rv->logged = 0;
    }
    return ++rv->logged <= REVIVE_LOG_MAX;
}

static pthread_mutex_t revive_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reviver revive_conf;
static struct popstore *stats_ps;   /* for pop_stats: the shared store */
static int revive_started;
static pthread_t revive_thread;
static atomic_bool revive_stopping;

/* KeyBuilder.buildPopRetryTopic (retry topic v1, 5.x's default). */
static int
retry_topic(struct buf *b, const char *group, size_t gl, const char *topic, size_t tl)
{
    buf_reset(b);
    return buf_append(b, "%RETRY%", 7) == 0 && buf_append(b, group, gl) == 0 &&
                   buf_append(b, "_", 1) == 0 && buf_append(b, topic, tl) == 0
               ? 0
               : -ENOMEM;
}

/* The topic a POP of `topic` by `group` reads: the origin's name when the
 * lease's topic is the group's retry topic. */
static void
origin_topic(const char *group, const char *topic, const char **o, size_t *ol)
{
    size_t gl = strlen(group);
    *o = topic;
    *ol = strlen(topic);
    if (strncmp(topic, "%RETRY%", 7) == 0 && strncmp(topic + 7, group, gl) == 0 &&
        topic[7 + gl] == '_') {
        *o = topic + 8 + gl;
        *ol = strlen(*o);
    }
}

/* Re-puts one due lease: %RETRY%group_topic, or %DLQ%group past the
 * group's retryMaxTimes (reconsumeTimes counted as 5.x does). */
static bool
revive_one(struct reviver *rv, const struct pop_due *d, struct buf *tb, struct buf *pb)
{
    struct iovec iov[1];
    struct mfile *pins[1];
    struct store_slices sl = { .cap = 1, .iov = iov, .pins = pins };
    if (store_read_at(rv->store, d->l.phy, &sl) != 0 || sl.n != 1) {
        /* Gone (retention): nothing left to redeliver. */
        store_slices_release(&sl);
        log_warn("pop revive: the record at %" PRId64 " (%s@%d offset %" PRId64
                 ") is gone; the lease ends", d->l.phy, d->topic, d->qid, d->l.offset);
        return true;
    }
    struct clog_view v;
    if (clog_decode(iov[0].iov_base, iov[0].iov_len, -1, false, &v) != CLOG_REC) {
        store_slices_release(&sl);
        return true;
    }
    size_t gl = strlen(d->group);
    const char *origin;
    size_t ol;
    origin_topic(d->group, d->topic, &origin, &ol);
    struct subscription_group g;
    int32_t max = 16;
    if (config_table_get(rv->groups, d->group, gl, &g) == 0)
        max = g.retry_max_times;
    bool dlq = v.reconsume >= max;
    int rc;
    if (dlq) {
        buf_reset(tb);
        rc = buf_append(tb, "%DLQ%", 5) == 0 && buf_append(tb, d->group, gl) == 0 ? 0 : -ENOMEM;
    } else {
        rc = retry_topic(tb, d->group, gl, origin, ol);
    }
    char msgid[64];
    size_t idn = clog_msgid(msgid, &rv->store_host, d->l.phy);
    struct prop edits[3];
    int ne = 0;
    size_t plen;
    if (props_find((const char *)v.props, v.props_len, "RETRY_TOPIC", &plen) == NULL)
        edits[ne++] = (struct prop){ "RETRY_TOPIC", 11, origin, ol };
    const char *oid = props_find((const char *)v.props, v.props_len, "ORIGIN_MESSAGE_ID", &plen);
    if (oid == NULL || plen == 0)
        edits[ne++] = (struct prop){ "ORIGIN_MESSAGE_ID", 17, msgid, idn };
    buf_reset(pb);
    if (rc == 0)
        rc = props_edit(pb, (const char *)v.props, v.props_len, edits, ne);
    struct store_put_result res;
    int status = -1;
again:
    if (rc == 0) {
        struct store_msg m = {
            .topic = (const char *)buf_head(tb), .topic_len = buf_len(tb), .qid = 0,
            .flag = v.flag, .sysflag = v.sysflag, .reconsume = v.reconsume + 1,
            .body = v.body, .body_len = v.body_len,
            .props = (const char *)buf_head(pb), .props_len = buf_len(pb),
            .born_ts = v.born_ts, .store = rv->store_host,
        };
        memcpy(m.born.ip, v.born, v.born_len);
        m.born.len = v.born_len;
        const uint8_t *pb4 = v.born + v.born_len;   /* big-endian, as Java writes it */
        m.born.port = (int32_t)((uint32_t)pb4[0] << 24 | (uint32_t)pb4[1] << 16 |
                                (uint32_t)pb4[2] << 8 | pb4[3]);
        status = store_put(rv->store, &m, &res);
    }
    bool permanent = status == PUT_MESSAGE_ILLEGAL || status == PUT_PROPERTIES_SIZE_EXCEEDED;
    if (permanent && !dlq) {
        /* The retry topic cannot take it (its name or the properties too
         * long): the dead letter queue, whose name is the group's. */
        dlq = true;
        buf_reset(tb);
        rc = buf_append(tb, "%DLQ%", 5) == 0 && buf_append(tb, d->group, gl) == 0 ? 0 : -ENOMEM;
        goto again;
    }
    store_slices_release(&sl);
    if (permanent) {
        /* Nowhere to put it: the lease ends (the message stays in its
         * topic at its offset; an admin can reset the group to it). */
        log_error("pop revive of %s@%d offset %" PRId64 " for %s: %s; the lease ends", d->topic,
                  d->qid, d->l.offset, d->group, put_status_name(status));
        return true;
    }
    if (status != PUT_OK) {
        if (revive_log_ok(rv))
            log_warn("pop revive of %s@%d offset %" PRId64 " for %s failed: %s; retried in 1 s",
                     d->topic, d->qid, d->l.offset, d->group,
                     rc != 0 ? "out of memory" : put_status_name(status));
        return false;
    }
    if (!dlq) {
        /* Held POPs of the origin topic wait on "topic@*". */
        char key[POP_NAME_MAX + 3];
        memcpy(key, origin, ol);
        memcpy(key + ol, "@*", 2);
        (void)post_raise(NULL, key, ol + 2);
    }
    return true;
}

static void *
revive_main(void *arg)
{
    struct reviver *rv = arg;
    enum { BATCH = 256 };
    struct pop_due *due = malloc(sizeof(*due) * BATCH);
    struct buf tb, pb;
    buf_init(&tb);
    buf_init(&pb);
    int64_t last_sync = clock_wall_ms();
    while (!atomic_load(&revive_stopping)) {
        int64_t now = clock_wall_ms();
        /* A fenced store (a slave, a master cut from its controllers)
         * takes no puts: the master revives, this one waits. */
        int n = due != NULL && !store_fenced(rv->store) ? popstore_due(rv->ps, now, due, BATCH) : 0;
        for (int i = 0; i < n; i++) {
            bool ok = revive_one(rv, &due[i], &tb, &pb);
            popstore_revived(rv->ps, &due[i], ok, now + 1000);
        }
        if (now - last_sync >= 1000) {
            (void)popstore_sync(rv->ps);
            last_sync = now;
        }
        if (n == BATCH)
            continue;
        struct timespec ts = { rv->interval / 1000, (rv->interval % 1000) * 1000000 };
        nanosleep(&ts, NULL);
    }
    (void)popstore_sync(rv->ps);
    free(due);
    buf_free(&tb);
    buf_free(&pb);
    return NULL;
}

void
pop_revive_stop(void)
{
    pthread_mutex_lock(&revive_mu);
    if (revive_started > 0) {
        atomic_store(&revive_stopping, true);
        pthread_join(revive_thread, NULL);
        revive_started = 2;   /* stopped: not started again */
    }
    pthread_mutex_unlock(&revive_mu);
}

/* Starts the thread the first time (under revive_mu). */
static int
revive_start(const struct reviver *rv)
{
    if (revive_started != 0)
        return revive_started;
    revive_conf = *rv;
    revive_started = pthread_create(&revive_thread, NULL, revive_main, &revive_conf) == 0 ? 1 : -1;
    if (revive_started > 0) {
        /* Kept for the life of the process, as the thread is. */
        store_ref(rv->store);
        stats_ps = rv->ps;
    }
    return revive_started;
}

bool
pop_stats(struct popstore_stats *s)
{
    pthread_mutex_lock(&revive_mu);
    struct popstore *ps = stats_ps;
    pthread_mutex_unlock(&revive_mu);
    if (ps == NULL)
        return false;
    popstore_get_stats(ps, s);
    return true;
}

int64_t
pop_leases_of(const char *group, size_t glen, const char *topic, size_t tlen, int32_t qid)
{
    pthread_mutex_lock(&revive_mu);
    struct popstore *ps = stats_ps;
    pthread_mutex_unlock(&revive_mu);
    return ps != NULL ? popstore_live(ps, group, glen, topic, tlen, qid) : 0;
}

struct inflight_arg {
    const struct metrics *m;
    struct buf *out;
};

static int
inflight_sample(void *arg, const char *g, size_t n, int64_t inflight)
{
    struct inflight_arg *a = arg;
    struct metrics_label l = { "consumer_group", g, n };
    return metrics_put_sample(a->out, a->m, "rmq_pop_inflight_messages", &l, 1, inflight);
}

int
pop_metrics(const struct metrics *m, struct buf *out)
{
    pthread_mutex_lock(&revive_mu);
    struct popstore *ps = stats_ps;
    pthread_mutex_unlock(&revive_mu);
    if (ps == NULL)
        return 0;
    struct popstore_stats s;
    popstore_get_stats(ps, &s);
    struct inflight_arg a = { m, out };
    if (metrics_put_head(out, "rmq_pop_inflight_messages", "gauge",
                         "POP leases held, by consumer group.") != 0 ||
        popstore_each_group(ps, inflight_sample, &a) != 0)
        return -1;
    static const struct { const char *name, *type, *help; } fam[4] = {
        { "rocketmq_pop_revive_retry_messages_total", "counter",
          "POP leases past their invisible time, re-put into the retry topic or the DLQ." },
        { "rmq_pop_ack_messages_total", "counter", "POP leases acknowledged." },
        { "rmq_pop_changed_total", "counter", "POP invisible times changed." },
        { "rmq_pop_lease_log_bytes", "gauge", "Size of the POP lease log." },
    };
    int64_t v[4] = { s.revived, s.acked, s.changed, s.log_bytes };
    for (int i = 0; i < 4; i++)
        if (metrics_put_head(out, fam[i].name, fam[i].type, fam[i].help) != 0 ||
            metrics_put_sample(out, m, fam[i].name, NULL, 0, v[i]) != 0)
            return -1;
    return 0;
}

/* }}} */

static int pop_run(struct native_proc *p, struct native_req *r);

/* {{{ Replies */

static void
reply_text(struct native_req *r, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
reply_text(struct native_req *r, int32_t code, const char *fmt, ...)
{
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(text))
        n = (int)sizeof(text) - 1;
    (void)native_reply(r, code, text, (size_t)n, NULL, 0, NULL, 0, NULL);
}

static void
reply_topic_missing(struct native_req *r, const struct lheader_val *t)
{
    reply_text(r, RMQ_RESP_TOPIC_NOT_EXIST, "topic[%.*s] not exist, apply first please! %s", (int)t->len,
               t->p, FAQ_APPLY_TOPIC);
}

/* The peer as Java's channel.remoteAddress() prints it. */
static const char *
peer(struct native_req *r)
{
    return r->c->peer;
}

/* }}} */

/* {{{ extraInfo (ExtraInfoUtil) */

struct extra {
    int n;
    int64_t f[8];
};

/*
 * Splits extraInfo on spaces and reads the numeric fields the 5.x broker
 * reads, in its order; a failure is answered as the 5.x broker's
 * exception reaches the client (SYSTEM_ERROR with the exception's text).
 */
static bool
parse_extra(struct native_req *r, const struct lheader_val *x, struct extra *e)
{
    const char *s[8];
    size_t l[8];
    int n = 0;
    size_t i = 0;
    while (i <= x->len && n < 8) {
        size_t j = i;
        while (j < x->len && x->p[j] != ' ')
            j++;
        s[n] = x->p + i;
        l[n] = j - i;
        n++;
        i = j + 1;
    }
    if (x->len == 0)
        n = 1;
    e->n = n;
    /* AckMessageProcessor: getBrokerName (6 fields), then the numbers. */
    if (n < 6) {
        reply_text(r, RMQ_RESP_SYSTEM_ERROR,
                   "java.lang.IllegalArgumentException: getBrokerName fail, extraInfoStrs length %d", n);
        return false;
    }
    static const int order[] = { 3, 0, 1, 2 };
    for (int k = 0; k < 4; k++) {
        int f = order[k];
        char tmp[24];
        bool ok = l[f] > 0 && l[f] < sizeof(tmp);
        if (ok) {
            memcpy(tmp, s[f], l[f]);
            tmp[l[f]] = 0;
            char *end;
            errno = 0;
            long long v = strtoll(tmp, &end, 10);
            ok = errno == 0 && *end == 0 && !(tmp[0] == '+' && l[f] == 1);
            e->f[f] = v;
        }
        if (!ok) {
            reply_text(r, RMQ_RESP_SYSTEM_ERROR,
                       "java.lang.NumberFormatException: For input string: \"%.*s\"",
                       (int)(l[f] > 64 ? 64 : l[f]), s[f]);
            return false;
        }
    }
    return true;
}

/* }}} */

/* {{{ POP_MESSAGE */

struct filter {
    bool all;
    int n;
    int32_t codes[64];
    struct sql92 *sql;
};

static bool
sql_match(void *ud, const uint8_t *rec, size_t len)
{
    struct clog_view v;
    if (clog_decode(rec, len, -1, false, &v) != CLOG_REC)
        return true;
    return sql92_match_props(ud, (const char *)v.props, v.props_len);
}

/* FilterAPI.build over exp/expType; false: it does not parse. */
static bool
build_filter(const struct lheader_val *type, const struct lheader_val *exp, struct filter *f)
{
    f->all = true;
    f->n = 0;
    f->sql = NULL;
    if (!exp->set || exp->len == 0)
        return true;
    if (type->set && type->len == 5 && memcmp(type->p, "SQL92", 5) == 0) {
        struct sql92_limits lim = { .max_len = 4096, .max_depth = 64, .max_nodes = 1024 };
        char err[8];
        f->sql = sql92_compile(exp->p, exp->len, &lim, err, sizeof(err));
        return f->sql != NULL;
    }
    if (type->set && type->len > 0 && !(type->len == 3 && memcmp(type->p, "TAG", 3) == 0))
        return false;
    if (exp->len == 1 && exp->p[0] == '*')
        return true;   /* SubscriptionData.SUB_ALL */
    struct hb_sub hs;
    memset(&hs, 0, sizeof(hs));
    hs.sub_string = (struct hb_str){ exp->p, exp->len };
    struct hb_norm n;
    if (hb_normalize(&hs, &n) != 0)
        return false;
    bool ok = n.ntags <= 64;
    if (ok && n.ntags > 0) {
        f->all = false;
        f->n = (int)n.ntags;
        memcpy(f->codes, n.codes, sizeof(int32_t) * n.ntags);
    }
    hb_norm_free(&n);
    return ok;
}

struct pop_run {
    struct native_req *r;
    const char *group;
    size_t gl;
    int64_t invisible, pop_time;
    int init_mode;
    struct filter *f;
    struct store_slices out;   /* gathered over the queues read */
    int64_t rest;
    bool order;
    bool failed;
};

static int64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Appends ';' when b is not empty, then "retry qid ". */
static int
info_head(struct buf *b, bool retry, int32_t qid)
{
    char t[32];
    int n = snprintf(t, sizeof(t), "%s%c %d ", buf_len(b) > 0 ? ";" : "", retry ? '1' : '0', qid);
    return buf_append(b, t, (size_t)n);
}

/* getInitOffset: where a group without an offset on the queue starts.
 * MIN (and a retry topic): the queue's first message.  MAX: 0 while the
 * queue still starts at 0 and its first message is in memory (a young
 * queue: the new group gets its history; initPopOffsetByCheckMsgInMem),
 * else the last message ("pop last one, then commit offset"). */
static int64_t
init_offset(struct pop_processor *pp, const struct pop_run *pr, const char *topic, size_t tl,
            int32_t qid, bool retry)
{
    if (retry || pr->init_mode == INIT_MIN)
        return store_min_offset(pp->store, topic, tl, qid);
    if (pp->init_by_mem && store_min_offset(pp->store, topic, tl, qid) <= 0 &&
        store_in_memory(pp->store, topic, tl, qid, 0))
        return 0;
    int64_t last = store_max_offset(pp->store, topic, tl, qid) - 1;
    return last < 0 ? 0 : last;
}

/* popMsgFromQueue: reads from the group's offset, leases what it finds,
 * moves the offset past what it read. */
static void pop_queue_locked(struct pop_processor *pp, struct pop_run *pr, const char *topic,
                             size_t tl, int32_t qid, bool retry, int budget);

static void
pop_queue(struct pop_processor *pp, struct pop_run *pr, const char *topic, size_t tl,
          int32_t qid, bool retry, int budget)
{
    if (budget <= 0 || pr->failed)
        return;
    /* Another worker's POP of this queue and group: skip it, as 5.x. */
    if (!popstore_try_lock(pp->ps, pr->group, pr->gl, topic, tl, qid))
        return;
    pop_queue_locked(pp, pr, topic, tl, qid, retry, budget);
    popstore_unlock(pp->ps, pr->group, pr->gl, topic, tl, qid);
}

static void
pop_queue_locked(struct pop_processor *pp, struct pop_run *pr, const char *topic, size_t tl,
                 int32_t qid, bool retry, int budget)
{
    buf_reset(&pp->key);
    if (buf_append(&pp->key, topic, tl) != 0 || buf_append(&pp->key, "@", 1) != 0 ||
        buf_append(&pp->key, pr->group, pr->gl) != 0) {
        pr->failed = true;
        return;
    }
    const char *key = (const char *)buf_head(&pp->key);
    size_t kl = buf_len(&pp->key);
    /* Orderly (ConsumerOrderInfoManager): nothing from a queue while a
     * lease of it runs; once they all ran out, the same messages again,
     * from the first. */
    int64_t first = -1;
    int ost = pr->order ? popstore_order_state(pp->ps, pr->group, pr->gl, topic, tl, qid,
                                               pr->pop_time, &first)
                        : POP_ORDER_FREE;
    if (ost == POP_ORDER_BLOCKED)
        return;
    int64_t committed = offset_table_query(pp->offsets, key, kl, (uint32_t)qid);
    int64_t offset = committed;
    int64_t cursor = popstore_take_cursor(pp->ps, pr->group, pr->gl, topic, tl, qid);
    if (cursor > offset)
        offset = cursor;   /* the log is ahead of the last offset flush */
    if (offset < 0)
        offset = init_offset(pp, pr, topic, tl, qid, retry);
    if (ost == POP_ORDER_EXPIRED && first >= 0)
        offset = first;
    /* Where this POP starts is the group's offset from now on, whatever
     * it finds (the cursor is taken once). */
    if (offset != committed)
        (void)offset_table_commit(pp->offsets, key, kl, (uint32_t)qid, offset);
    struct store_slices out = {
        .cap = budget, .iov = pr->out.iov + pr->out.n, .pins = pr->out.pins + pr->out.npins,
        .consumer = true,
    };
    struct store_get_result res;
    int st = store_get_match(pp->store, topic, tl, qid, offset, budget,
                             pr->f->all || retry ? NULL : pr->f->codes,
                             pr->f->all || retry ? 0 : pr->f->n,
                             pr->f->sql != NULL && !retry ? sql_match : NULL, pr->f->sql, &out,
                             &res);
    (void)st;
    if (res.max > res.next)
        pr->rest += res.max - res.next;
    if (out.n == 0) {
        store_slices_release(&out);
        /* Filtered out or corrected: the offset moves on, no lease. */
        if (res.next != offset && res.next >= 0)
            (void)offset_table_commit(pp->offsets, key, kl, (uint32_t)qid, res.next);
        return;
    }
    struct pop_lease lv[MAX_NUMS];
    for (int i = 0; i < out.n; i++) {
        /* The store handed out whole records: their queue offset (byte
         * 20) and physical offset (byte 28) are read in place, without
         * decoding the rest (protocol.md's record layout). */
        const uint8_t *rec = out.iov[i].iov_base;
        if (out.iov[i].iov_len < 36) {
            store_slices_release(&out);
            pr->failed = true;
            return;
        }
        lv[i] = (struct pop_lease){ .offset = be64(rec + 20), .phy = be64(rec + 28),
                                    .size = (int32_t)out.iov[i].iov_len,
                                    .pop_time = pr->pop_time,
                                    .deadline = pr->pop_time + pr->invisible,
                                    .order = pr->order };
    }
    if (popstore_lease(pp->ps, pr->group, pr->gl, topic, tl, qid, lv, out.n, res.next) != 0) {
        log_warn("pop: cannot record leases of %.*s: %s", (int)kl, key, err_msg());
        store_slices_release(&out);
        pr->failed = true;
        return;
    }
    /* An orderly queue's offset moves on acknowledgement (ack_message). */
    if (!pr->order)
        (void)offset_table_commit(pp->offsets, key, kl, (uint32_t)qid, res.next);
    /* startOffsetInfo / msgOffsetInfo (/ orderCountInfo), as
     * ExtraInfoUtil builds them. */
    char num[32];
    int ok = info_head(&pp->start_info, retry, qid) == 0 &&
             buf_append(&pp->start_info, num,
                        (size_t)snprintf(num, sizeof(num), "%" PRId64, lv[0].offset)) == 0 &&
             info_head(&pp->msg_info, retry, qid) == 0;
    for (int i = 0; ok && i < out.n; i++)
        ok = buf_append(&pp->msg_info, num,
                        (size_t)snprintf(num, sizeof(num), "%s%" PRId64, i > 0 ? "," : "",
                                         lv[i].offset)) == 0;
    for (int i = 0; ok && pr->order && i < out.n; i++) {
        /* buildQueueOffsetOrderCountInfo: "0 qo<qid>%<offset> <count>" */
        char t[96];
        int tn = snprintf(t, sizeof(t), "%s%c qo%d%%%" PRId64 " %d",
                          buf_len(&pp->order_info) > 0 ? ";" : "", retry ? '1' : '0', qid,
                          lv[i].offset, lv[i].attempts);
        ok = buf_append(&pp->order_info, t, (size_t)tn) == 0;
    }
    if (!ok)
        pr->failed = true;
    pr->out.n += out.n;
    pr->out.npins += out.npins;
    pr->out.bytes += out.bytes;
}

static uint32_t
next_rand(struct pop_processor *pp)
{
    pp->rnd = pp->rnd * 1103515245u + 12345u;
    return pp->rnd >> 8;
}

static int
pop_message(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->pop_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->pi[P_GROUP]], *topic = &v[pp->pi[P_TOPIC]];
    int64_t qid = v[pp->pi[P_QID]].i, max = v[pp->pi[P_MAX]].i;
    int64_t invisible = v[pp->pi[P_INVISIBLE]].i;
    int64_t poll = v[pp->pi[P_POLL]].set ? v[pp->pi[P_POLL]].i : 0;
    bool order = v[pp->pi[P_ORDER]].set && v[pp->pi[P_ORDER]].i != 0;
    int64_t born = v[pp->pi[P_BORN]].set ? v[pp->pi[P_BORN]].i : 0;
    /* 5.x: bornTime 0 is "now"; a request older than its poll time (and
     * 500 ms) is one the client stopped waiting for.  Not once held here. */
    if (r->lua == NATIVE_LUA_NONE && born != 0 &&
        clock_wall_ms() - born - poll > POP_TIMEOUT_SLACK_MS) {
        reply_text(r, RMQ_RESP_POLLING_TIMEOUT, "the broker[%s] pop message is timeout too much",
                   pp->broker_ip);
        return NATIVE_DONE;
    }
    if ((broker_perm_get(&pp->perm) & RMQ_PERM_READ) == 0) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "the broker[%s] pop message is forbidden", pp->broker_ip);
        return NATIVE_DONE;
    }
    if (max > MAX_NUMS) {
        reply_text(r, RMQ_RESP_INVALID_PARAMETER, "the broker[%s] pop message's num is greater than 32",
                   pp->broker_ip);
        return NATIVE_DONE;
    }
    if (invisible < pp->inv_min || invisible > pp->inv_max) {
        reply_text(r, RMQ_RESP_INVALID_PARAMETER,
                   "invisibleTime %" PRId64 " is out of range [%" PRId64 ", %" PRId64
                   "] (popInvisibleTimeMinMillis, popInvisibleTimeMaxMillis)",
                   invisible, pp->inv_min, pp->inv_max);
        return NATIVE_DONE;
    }
    struct topic_config tc;
    if (config_table_get(pp->topics, topic->p, topic->len, &tc) != 0) {
        reply_topic_missing(r, topic);
        return NATIVE_DONE;
    }
    if ((tc.perm & RMQ_PERM_READ) == 0) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "the topic[%.*s] peeking message is forbidden",
                   (int)topic->len, topic->p);
        return NATIVE_DONE;
    }
    if (qid >= tc.read_queue_nums) {
        reply_text(r, RMQ_RESP_INVALID_PARAMETER,
                   "queueId[%" PRId64 "] is illegal, topic:[%.*s] topicConfig.readQueueNums:[%d] "
                   "consumer:[%s]",
                   qid, (int)topic->len, topic->p, tc.read_queue_nums, peer(r));
        return NATIVE_DONE;
    }
    struct subscription_group g;
    if (config_table_get(pp->groups, group->p, group->len, &g) != 0) {
        if (r->lua == NATIVE_LUA_NONE)
            return NATIVE_TO_LUA;   /* pop.lua: auto-create, or the refusal */
        reply_text(r, RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST,
                   "subscription group [%.*s] does not exist, %s", (int)group->len, group->p,
                   "\nSee http://rocketmq.apache.org/docs/faq/ for further details.");
        return NATIVE_DONE;
    }
    if (!g.consume_enable) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "subscription group no permission, %.*s", (int)group->len,
                   group->p);
        return NATIVE_DONE;
    }
    struct buf rt;
    buf_init(&rt);
    if (retry_topic(&rt, group->p, group->len, topic->p, topic->len) != 0) {
        buf_free(&rt);
        return NATIVE_TO_LUA;
    }
    struct topic_config rtc;
    bool has_retry = config_table_get(pp->topics, (const char *)buf_head(&rt), buf_len(&rt),
                                      &rtc) == 0;
    if (!has_retry && r->lua == NATIVE_LUA_NONE) {
        buf_free(&rt);
        return NATIVE_TO_LUA;   /* pop.lua creates the retry topic */
    }
    struct filter f;
    if (!build_filter(&v[pp->pi[P_EXP_TYPE]], &v[pp->pi[P_EXP]], &f)) {
        buf_free(&rt);
        reply_text(r, RMQ_RESP_SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed");
        return NATIVE_DONE;
    }
    int64_t room = popstore_room(pp->ps, group->p, group->len);
    int budget = (int)(max < 1 ? 1 : max);
    if (budget > room)
        budget = (int)room;
    struct pop_run pr = {
        .r = r, .group = group->p, .gl = group->len, .invisible = invisible,
        .pop_time = clock_wall_ms(), .init_mode = v[pp->pi[P_INIT]].set ? (int)v[pp->pi[P_INIT]].i : 0,
        .f = &f, .out = { .cap = MAX_NUMS, .iov = pp->iov, .pins = pp->pins },
    };
    buf_reset(&pp->start_info);
    buf_reset(&pp->msg_info);
    buf_reset(&pp->order_info);
    pr.order = order;
    const char *rtn = (const char *)buf_head(&rt);
    size_t rtl = buf_len(&rt);
    bool retry_first = !order && (int32_t)(next_rand(pp) % 100) < pp->retry_probability;
    if (retry_first && has_retry && !order)
        pop_queue(pp, &pr, rtn, rtl, 0, true, budget);
    if (qid < 0) {
        int nq = tc.read_queue_nums;
        int start = nq > 0 ? (int)(next_rand(pp) % (uint32_t)nq) : 0;
        for (int i = 0; i < nq && pr.out.n < budget; i++)
            pop_queue(pp, &pr, topic->p, topic->len, (start + i) % nq, false,
                      budget - pr.out.n);
    } else {
        pop_queue(pp, &pr, topic->p, topic->len, (int32_t)qid, false, budget);
    }
    if (!retry_first && has_retry && !order && pr.out.n < budget)
        pop_queue(pp, &pr, rtn, rtl, 0, true, budget - pr.out.n);
    buf_free(&rt);
    if (f.sql != NULL)
        sql92_free(f.sql);
    if (pr.out.n == 0 && !pr.failed && poll > 0 && r->lua != NATIVE_LUA_FINAL)
        return NATIVE_TO_LUA;   /* pop.lua holds it */
    if (pr.out.n == 0 && pr.failed) {
        store_slices_release(&pr.out);
        reply_text(r, RMQ_RESP_SYSTEM_ERROR, "pop failed: %s", err_msg());
        return NATIVE_DONE;
    }
    char d[4][24];
    int dn[4];
    dn[0] = snprintf(d[0], sizeof(d[0]), "%" PRId64, pr.pop_time);
    dn[1] = snprintf(d[1], sizeof(d[1]), "%" PRId64, invisible);
    dn[2] = snprintf(d[2], sizeof(d[2]), "%d", order ? ORDER_REVIVE_QID : 0);
    dn[3] = snprintf(d[3], sizeof(d[3]), "%" PRId64, pr.rest);
    struct rmq_field ext[7] = {
        { { "popTime", 7 }, { d[0], (uint32_t)dn[0] } },
        { { "invisibleTime", 13 }, { d[1], (uint32_t)dn[1] } },
        { { "reviveQid", 9 }, { d[2], (uint32_t)dn[2] } },
        { { "restNum", 7 }, { d[3], (uint32_t)dn[3] } },
        { { "startOffsetInfo", 15 },
          { (const char *)buf_head(&pp->start_info), (uint32_t)buf_len(&pp->start_info) } },
        { { "msgOffsetInfo", 13 },
          { (const char *)buf_head(&pp->msg_info), (uint32_t)buf_len(&pp->msg_info) } },
        { { "orderCountInfo", 14 },
          { (const char *)buf_head(&pp->order_info), (uint32_t)buf_len(&pp->order_info) } },
    };
    uint32_t next = order && buf_len(&pp->order_info) > 0 ? 7 : 6;
    if (pr.out.n > 0) {
        (void)native_reply(r, RMQ_RESP_SUCCESS, "FOUND", 5, ext, next, NULL, 0, &pr.out);
    } else {
        (void)native_reply(r, RMQ_RESP_POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", 19, ext, next, NULL, 0, NULL);
    }
    store_slices_release(&pr.out);
    return NATIVE_DONE;
}

/* }}} */

/* {{{ ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME */

/* The queue a lease names, checked (lease_check): its topic exists and
 * has the queue, and the queue's offsets then. */
struct lease_queue {
    int32_t code;               /* RMQ_RESP_SUCCESS, or the refusal */
    int32_t read_queue_nums;
    int64_t min, max;
};

static void
lease_queue(struct pop_processor *pp, const char *topic, size_t tl, int64_t qid, struct lease_queue *q)
{
    struct topic_config tc;
    q->code = RMQ_RESP_SUCCESS;
    q->min = q->max = 0;
    if (config_table_get(pp->topics, topic, tl, &tc) != 0) {
        q->code = RMQ_RESP_TOPIC_NOT_EXIST;
        return;
    }
    q->read_queue_nums = tc.read_queue_nums;
    if (qid < 0 || qid >= tc.read_queue_nums) {
        q->code = RMQ_RESP_MESSAGE_ILLEGAL;
        return;
    }
    q->min = store_min_offset(pp->store, topic, tl, (int32_t)qid);
    q->max = store_max_offset(pp->store, topic, tl, (int32_t)qid);
}

/* An ACK's (change false) or CHANGE_INVISIBLE_TIME's lease checked
 * against its queue q: RMQ_RESP_SUCCESS, or the refusal with its remark
 * in out (the text the broker answers; CHANGE's NO_MESSAGE has none). */
static int32_t
lease_check(const struct lease_queue *q, const char *topic, size_t tl, int64_t qid, int64_t offset,
            bool change, const char *who, char *out, size_t cap, size_t *olen)
{
    int n = 0;
    if (q->code == RMQ_RESP_TOPIC_NOT_EXIST) {
        n = snprintf(out, cap, "topic[%.*s] not exist, apply first please! %s", (int)tl, topic, FAQ_APPLY_TOPIC);
    } else if (q->code == RMQ_RESP_MESSAGE_ILLEGAL) {
        n = snprintf(out, cap, "queueId[%" PRId64 "] is illegal, topic:[%.*s] topicConfig.readQueueNums:[%d] "
                     "consumer:[%s]", qid, (int)tl, topic, q->read_queue_nums, who);
    } else if (change ? (offset < q->min || offset >= q->max) : (offset < q->min || offset > q->max)) {
        if (!change)
            n = snprintf(out, cap, "offset is illegal, key:%.*s@%" PRId64 ", commit:%" PRId64
                         ", store:%" PRId64 "~%" PRId64, (int)tl, topic, qid, offset, q->min, q->max);
        *olen = n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
        return RMQ_RESP_NO_MESSAGE;
    } else {
        return RMQ_RESP_SUCCESS;
    }
    *olen = n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
    return q->code;
}

/* The checks both share (topic, queue, offset range, extraInfo). */
static bool
lease_request(struct pop_processor *pp, struct native_req *r, const struct lheader_val *topic,
              int64_t qid, int64_t offset, const struct lheader_val *extra, bool change,
              struct extra *e)
{
    struct lease_queue q;
    lease_queue(pp, topic->p, topic->len, qid, &q);
    char remark[768];
    size_t rl = 0;
    int32_t code = lease_check(&q, topic->p, topic->len, qid, offset, change, peer(r), remark, sizeof(remark), &rl);
    if (code != RMQ_RESP_SUCCESS) {
        (void)native_reply(r, code, rl > 0 ? remark : NULL, rl, NULL, 0, NULL, 0, NULL);
        return false;
    }
    return parse_extra(r, extra, e);
}

static void
reply_no_lease(struct native_req *r, const struct lheader_val *group,
               const struct lheader_val *topic, int64_t qid, int64_t offset, int64_t pop_time)
{
    reply_text(r, RMQ_RESP_NO_MESSAGE,
               "no lease of group %.*s on %.*s@%" PRId64 " offset %" PRId64 " popped at %" PRId64
               " (acknowledged, revived, or not this receipt handle)",
               (int)group->len, group->p, (int)topic->len, topic->p, qid, offset, pop_time);
}

static int
ack_message(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->ack_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->ai[A_GROUP]], *topic = &v[pp->ai[A_TOPIC]];
    int64_t qid = v[pp->ai[A_QID]].i, offset = v[pp->ai[A_OFFSET]].i;
    struct extra e;
    if (!lease_request(pp, r, topic, qid, offset, &v[pp->ai[A_EXTRA]], false, &e))
        return NATIVE_DONE;
    int64_t floor;
    if (popstore_ack(pp->ps, group->p, group->len, topic->p, topic->len, (int32_t)qid, offset,
                     e.f[1], &floor) != 0) {
        reply_no_lease(r, group, topic, qid, offset, e.f[1]);
        return NATIVE_DONE;
    }
    if (floor >= 0) {
        /* An orderly lease: the group's offset follows the first left. */
        buf_reset(&pp->key);
        if (buf_append(&pp->key, topic->p, topic->len) == 0 && buf_append(&pp->key, "@", 1) == 0 &&
            buf_append(&pp->key, group->p, group->len) == 0)
            (void)offset_table_commit(pp->offsets, (const char *)buf_head(&pp->key),
                                      buf_len(&pp->key), (uint32_t)qid, floor);
    }
    (void)native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, NULL, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

bool
pop_processor_is(const struct native_proc *p)
{
    return p != NULL && p->run == pop_run;
}

/* The group's offset follows an orderly lease's first left (floor). */
static void
order_commit(struct pop_processor *pp, const char *group, size_t gl, const char *topic, size_t tl,
             int32_t qid, int64_t floor)
{
    buf_reset(&pp->key);
    if (buf_append(&pp->key, topic, tl) == 0 && buf_append(&pp->key, "@", 1) == 0 &&
        buf_append(&pp->key, group, gl) == 0)
        (void)offset_table_commit(pp->offsets, (const char *)buf_head(&pp->key), buf_len(&pp->key),
                                  (uint32_t)qid, floor);
}

bool
pop_processor_ack(struct native_proc *p, const char *who, const char *group, size_t gl,
                  struct pop_ack_entry *e, size_t n,
                  void (*fail)(void *arg, size_t i, int32_t code, const char *remark, size_t len), void *arg,
                  struct metrics_shard *metrics, int64_t start_ns)
{
    struct pop_processor *pp = (struct pop_processor *)p;
    if (store_role_slave(pp->store)) {
        /* pop_run's refusal, on the remoting path: each entry counted as
         * the ACK_MESSAGE it would have been. */
        if (metrics != NULL) {
            int64_t t = clock_mono_ns() - start_ns;
            for (size_t i = 0; i < n; i++)
                metrics_rpc(metrics, RMQ_REQ_ACK_MESSAGE, RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED, t);
        }
        return false;
    }
    char remark[768];
    /* Entries of one receive share a queue and a pop time: a run of them
     * is checked against its queue once and acked in one write. */
    size_t i = 0;
    while (i < n) {
        struct lease_queue q;
        lease_queue(pp, e[i].topic, e[i].tlen, e[i].qid, &q);
        size_t j = i;
        int64_t offs[64];
        size_t idx[64];
        int m = 0;
        for (; j < n && m < 64; j++) {
            if (j > i && (e[j].qid != e[i].qid || e[j].pop_time != e[i].pop_time || e[j].tlen != e[i].tlen ||
                          memcmp(e[j].topic, e[i].topic, e[i].tlen) != 0))
                break;
            size_t rl = 0;
            int32_t code = lease_check(&q, e[j].topic, e[j].tlen, e[j].qid, e[j].offset, false, who, remark,
                                       sizeof(remark), &rl);
            if (code != RMQ_RESP_SUCCESS) {
                fail(arg, j, code, remark, rl);
                if (metrics != NULL)
                    metrics_rpc(metrics, RMQ_REQ_ACK_MESSAGE, code, clock_mono_ns() - start_ns);
                continue;
            }
            offs[m] = e[j].offset;
            idx[m] = j;
            m++;
        }
        if (m > 0) {
            bool acked[64];
            int64_t floor;
            (void)popstore_ack_each(pp->ps, group, gl, e[i].topic, e[i].tlen, e[i].qid, offs, m, e[i].pop_time,
                                    acked, &floor);
            if (floor >= 0)
                order_commit(pp, group, gl, e[i].topic, e[i].tlen, e[i].qid, floor);
            /* The run's entries answered now: one clock read for them. */
            int64_t t = metrics != NULL ? clock_mono_ns() - start_ns : 0;
            for (int h = 0; h < m; h++) {
                if (metrics != NULL)
                    metrics_rpc(metrics, RMQ_REQ_ACK_MESSAGE, acked[h] ? RMQ_RESP_SUCCESS : RMQ_RESP_NO_MESSAGE, t);
                if (acked[h])
                    continue;
                size_t k = idx[h];
                int rn = snprintf(remark, sizeof(remark),
                                  "no lease of group %.*s on %.*s@%" PRId32 " offset %" PRId64 " popped at %" PRId64
                                  " (acknowledged, revived, or not this receipt handle)",
                                  (int)gl, group, (int)e[k].tlen, e[k].topic, e[k].qid, e[k].offset, e[k].pop_time);
                fail(arg, k, RMQ_RESP_NO_MESSAGE, remark,
                     rn < 0 ? 0 : (size_t)rn >= sizeof(remark) ? sizeof(remark) - 1 : (size_t)rn);
            }
        }
        i = j;
    }
    return true;
}

static int
change_invisible(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->change_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->ci[C_GROUP]], *topic = &v[pp->ci[C_TOPIC]];
    int64_t qid = v[pp->ci[C_QID]].i, offset = v[pp->ci[C_OFFSET]].i;
    int64_t invisible = v[pp->ci[C_INVISIBLE]].i;
    if (invisible < pp->inv_min || invisible > pp->inv_max) {
        reply_text(r, RMQ_RESP_INVALID_PARAMETER,
                   "invisibleTime %" PRId64 " is out of range [%" PRId64 ", %" PRId64
                   "] (popInvisibleTimeMinMillis, popInvisibleTimeMaxMillis)",
                   invisible, pp->inv_min, pp->inv_max);
        return NATIVE_DONE;
    }
    struct extra e;
    if (!lease_request(pp, r, topic, qid, offset, &v[pp->ci[C_EXTRA]], true, &e))
        return NATIVE_DONE;
    int64_t now = clock_wall_ms();
    if (popstore_change(pp->ps, group->p, group->len, topic->p, topic->len, (int32_t)qid, offset,
                        e.f[1], now, now + invisible) != 0) {
        reply_no_lease(r, group, topic, qid, offset, e.f[1]);
        return NATIVE_DONE;
    }
    char d[3][24];
    int dn[3];
    dn[0] = snprintf(d[0], sizeof(d[0]), "%" PRId64, now);
    dn[1] = snprintf(d[1], sizeof(d[1]), "%" PRId64, invisible);
    dn[2] = snprintf(d[2], sizeof(d[2]), "%" PRId64, e.f[3]);
    struct rmq_field ext[3] = {
        { { "popTime", 7 }, { d[0], (uint32_t)dn[0] } },
        { { "invisibleTime", 13 }, { d[1], (uint32_t)dn[1] } },
        { { "reviveQid", 9 }, { d[2], (uint32_t)dn[2] } },
    };
    (void)native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, ext, 3, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* }}} */

/* {{{ Held POPs (POLLING_INFO's pollingNum), process-wide */

struct held {
    struct held *next;
    int64_t n;
    size_t len;
    char key[];                /* topic@group@queueId */
};

#define HELD_BUCKETS 256
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct held *held_tab[HELD_BUCKETS];

static unsigned
held_bucket(const char *k, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 16777619u;
    return h % HELD_BUCKETS;
}

int
pop_held_add(const char *key, size_t n, int delta)
{
    unsigned b = held_bucket(key, n);
    pthread_mutex_lock(&held_mu);
    struct held **pp = &held_tab[b];
    while (*pp != NULL && !((*pp)->len == n && memcmp((*pp)->key, key, n) == 0))
        pp = &(*pp)->next;
    int rc = 0;
    if (*pp == NULL && delta > 0) {
        struct held *h = calloc(1, sizeof(*h) + n);
        if (h == NULL) {
            rc = -ENOMEM;
        } else {
            h->len = n;
            memcpy(h->key, key, n);
            *pp = h;
        }
    }
    if (rc == 0 && *pp != NULL) {
        (*pp)->n += delta;
        if ((*pp)->n <= 0) {
            struct held *dead = *pp;
            *pp = dead->next;
            free(dead);
        }
    }
    pthread_mutex_unlock(&held_mu);
    return rc;
}

static int64_t
held_count(const char *key, size_t n)
{
    unsigned b = held_bucket(key, n);
    int64_t c = 0;
    pthread_mutex_lock(&held_mu);
    for (struct held *h = held_tab[b]; h != NULL; h = h->next)
        if (h->len == n && memcmp(h->key, key, n) == 0)
            c = h->n;
    pthread_mutex_unlock(&held_mu);
    return c;
}

/* }}} */

/* {{{ PEEK_MESSAGE, NOTIFICATION, POLLING_INFO */

/* The checks PEEK, NOTIFICATION and POLLING_INFO share with POP; false:
 * answered (or handed to Lua, *rc). */
static bool
queue_checks(struct pop_processor *pp, struct native_req *r, const struct lheader_val *group,
             const struct lheader_val *topic, int64_t qid, const char *what, int qcode,
             struct topic_config *tc, int *rc)
{
    *rc = NATIVE_DONE;
    if ((broker_perm_get(&pp->perm) & RMQ_PERM_READ) == 0) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "the broker[%s] %s message is forbidden", pp->broker_ip, what);
        return false;
    }
    if (config_table_get(pp->topics, topic->p, topic->len, tc) != 0) {
        reply_topic_missing(r, topic);
        return false;
    }
    if ((tc->perm & RMQ_PERM_READ) == 0) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "the topic[%.*s] peeking message is forbidden",
                   (int)topic->len, topic->p);
        return false;
    }
    if (qid >= tc->read_queue_nums) {
        reply_text(r, qcode,
                   "queueId[%" PRId64 "] is illegal, topic:[%.*s] topicConfig.readQueueNums:[%d] "
                   "consumer:[%s]",
                   qid, (int)topic->len, topic->p, tc->read_queue_nums, peer(r));
        return false;
    }
    struct subscription_group g;
    if (config_table_get(pp->groups, group->p, group->len, &g) != 0) {
        if (r->lua == NATIVE_LUA_NONE) {
            *rc = NATIVE_TO_LUA;
            return false;
        }
        reply_text(r, RMQ_RESP_SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group [%.*s] does not exist, %s",
                   (int)group->len, group->p, FAQ_APPLY_TOPIC);
        return false;
    }
    if (!g.consume_enable) {
        reply_text(r, RMQ_RESP_NO_PERMISSION, "subscription group no permission, %.*s", (int)group->len,
                   group->p);
        return false;
    }
    return true;
}

/* The group's read position in a queue (PeekMessageProcessor.getPopOffset). */
static int64_t
read_offset(struct pop_processor *pp, const char *group, size_t gl, const char *topic, size_t tl,
            int32_t qid)
{
    buf_reset(&pp->key);
    if (buf_append(&pp->key, topic, tl) != 0 || buf_append(&pp->key, "@", 1) != 0 ||
        buf_append(&pp->key, group, gl) != 0)
        return -1;
    int64_t o = offset_table_query(pp->offsets, (const char *)buf_head(&pp->key),
                                   buf_len(&pp->key), (uint32_t)qid);
    if (o < 0)
        o = store_min_offset(pp->store, topic, tl, qid);
    return o < 0 ? 0 : o;
}

static void
peek_queue(struct pop_processor *pp, const struct lheader_val *group, const char *topic,
           size_t tl, int32_t qid, int max, struct store_slices *all, int64_t *rest)
{
    int64_t offset = read_offset(pp, group->p, group->len, topic, tl, qid);
    int64_t maxo = store_max_offset(pp->store, topic, tl, qid);
    if (maxo > offset)
        *rest += maxo - offset;
    if (all->n >= max)
        return;
    struct store_slices out = {
        .cap = max - all->n, .iov = all->iov + all->n, .pins = all->pins + all->npins,
    };
    struct store_get_result res;
    int st = store_get(pp->store, topic, tl, qid, offset, max - all->n, NULL, 0, &out, &res);
    if ((st == GET_OFFSET_TOO_SMALL || st == GET_OFFSET_OVERFLOW_BADLY) && out.n == 0) {
        store_slices_release(&out);
        out.n = out.npins = 0;
        out.bytes = 0;
        (void)store_get(pp->store, topic, tl, qid, res.next, max - all->n, NULL, 0, &out, &res);
    }
    all->n += out.n;
    all->npins += out.npins;
    all->bytes += out.bytes;
}

static int
peek_message(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->peek_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->ki[K_GROUP]], *topic = &v[pp->ki[K_TOPIC]];
    int64_t qid = v[pp->ki[K_QID]].i, max = v[pp->ki[K_MAX]].i;
    struct topic_config tc;
    int rc;
    if (!queue_checks(pp, r, group, topic, qid, "peeking", RMQ_RESP_INVALID_PARAMETER, &tc, &rc))
        return rc;
    if (max > MAX_NUMS)
        max = MAX_NUMS;
    if (max < 1)
        max = 1;
    struct store_slices all = { .cap = MAX_NUMS, .iov = pp->iov, .pins = pp->pins };
    int64_t rest = 0;
    struct buf rt;
    buf_init(&rt);
    bool retry = retry_topic(&rt, group->p, group->len, topic->p, topic->len) == 0;
    bool retry_first = (next_rand(pp) % 5) == 0;
    if (retry && retry_first)
        peek_queue(pp, group, (const char *)buf_head(&rt), buf_len(&rt), 0, (int)max, &all, &rest);
    if (qid < 0) {
        int nq = tc.read_queue_nums;
        int start = nq > 0 ? (int)(next_rand(pp) % (uint32_t)nq) : 0;
        for (int i = 0; i < nq; i++)
            peek_queue(pp, group, topic->p, topic->len, (start + i) % nq, (int)max, &all, &rest);
    } else {
        peek_queue(pp, group, topic->p, topic->len, (int32_t)qid, (int)max, &all, &rest);
    }
    if (retry && !retry_first && all.n < max)
        peek_queue(pp, group, (const char *)buf_head(&rt), buf_len(&rt), 0, (int)max, &all, &rest);
    buf_free(&rt);
    char d[24];
    int dn = snprintf(d, sizeof(d), "%" PRId64, rest);
    struct rmq_field ext[1] = { { { "restNum", 7 }, { d, (uint32_t)dn } } };
    if (all.n > 0)
        (void)native_reply(r, RMQ_RESP_SUCCESS, "FOUND", 5, ext, 1, NULL, 0, &all);
    else
        (void)native_reply(r, RMQ_RESP_PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", 19, ext, 1, NULL, 0, NULL);
    store_slices_release(&all);
    return NATIVE_DONE;
}

/* Whether a POP of the group could get something from the queue now. */
static bool
queue_has_msg(struct pop_processor *pp, const struct lheader_val *group, const char *topic,
              size_t tl, int32_t qid, bool order, int64_t now)
{
    int64_t first;
    if (order && popstore_order_state(pp->ps, group->p, group->len, topic, tl, qid, now, &first) ==
                     POP_ORDER_BLOCKED)
        return false;
    if (order && popstore_order_state(pp->ps, group->p, group->len, topic, tl, qid, now, &first) ==
                     POP_ORDER_EXPIRED)
        return true;
    return store_max_offset(pp->store, topic, tl, qid) >
           read_offset(pp, group->p, group->len, topic, tl, qid);
}

static int
notification(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->notify_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->ni[N_GROUP]], *topic = &v[pp->ni[N_TOPIC]];
    int64_t qid = v[pp->ni[N_QID]].i;
    int64_t poll = v[pp->ni[N_POLL]].set ? v[pp->ni[N_POLL]].i : 0;
    bool order = v[pp->ni[N_ORDER]].set && v[pp->ni[N_ORDER]].i != 0;
    struct topic_config tc;
    int rc;
    if (!queue_checks(pp, r, group, topic, qid, "peeking", RMQ_RESP_INVALID_PARAMETER, &tc, &rc))
        return rc;
    int64_t now = clock_wall_ms();
    bool has = false;
    if (qid < 0) {
        for (int i = 0; i < tc.read_queue_nums && !has; i++)
            has = queue_has_msg(pp, group, topic->p, topic->len, i, order, now);
    } else {
        has = queue_has_msg(pp, group, topic->p, topic->len, (int32_t)qid, order, now);
    }
    if (!has && !order) {
        struct buf rt;
        buf_init(&rt);
        if (retry_topic(&rt, group->p, group->len, topic->p, topic->len) == 0)
            has = queue_has_msg(pp, group, (const char *)buf_head(&rt), buf_len(&rt), 0, false, now);
        buf_free(&rt);
    }
    if (!has && poll > 0 && r->lua != NATIVE_LUA_FINAL)
        return NATIVE_TO_LUA;   /* pop.lua holds it as a POP */
    struct rmq_field ext[1] = { { { "hasMsg", 6 }, { has ? "true" : "false", has ? 4u : 5u } } };
    (void)native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, ext, 1, NULL, 0, NULL);
    return NATIVE_DONE;
}

static int
polling_info(struct pop_processor *pp, struct native_req *r)
{
    struct lheader_val v[64];
    char remark[512];
    if (lheader_decode(pp->info_h, r->cmd, v, remark, sizeof(remark)) != 0) {
        (void)native_reply(r, RMQ_RESP_SYSTEM_ERROR, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    const struct lheader_val *group = &v[pp->ii[I_GROUP]], *topic = &v[pp->ii[I_TOPIC]];
    int64_t qid = v[pp->ii[I_QID]].i;
    struct topic_config tc;
    int rc;
    if (!queue_checks(pp, r, group, topic, qid, "peeking", RMQ_RESP_INVALID_PARAMETER, &tc, &rc))
        return rc;
    char key[POP_NAME_MAX * 2 + 32];
    int kn = snprintf(key, sizeof(key), "%.*s@%.*s@%" PRId64, (int)topic->len, topic->p,
                      (int)group->len, group->p, qid);
    char d[24];
    int dn = snprintf(d, sizeof(d), "%" PRId64, held_count(key, (size_t)kn));
    struct rmq_field ext[1] = { { { "pollingNum", 10 }, { d, (uint32_t)dn } } };
    (void)native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, ext, 1, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* }}} */

/* {{{ BATCH_ACK_MESSAGE (BatchAckMessageRequestBody, fastjson2) */

struct batch_ack {
    const char *c, *t, *r;
    size_t cl, tl, rl;
    int64_t so, q, pt;
    uint8_t bits[BATCH_BITS_MAX];
    size_t nbits;
};

static const char *
j_string(const uint8_t **p, const uint8_t *end, const char **s, size_t *n)
{
    const uint8_t *raw;
    bool esc;
    if (jscan_peek(*p, end) != '"')
        return "a string expected";
    const char *why = jscan_string(p, end, &raw, n, &esc);
    if (why != NULL)
        return why;
    if (esc)
        return "an escaped name";   /* group and topic names need none */
    *s = (const char *)raw;
    return NULL;
}

static const char *
j_int(const uint8_t **p, const uint8_t *end, int64_t *v)
{
    const uint8_t *start = *p;
    bool is_int;
    const char *why = jscan_number(p, end, &is_int);
    if (why != NULL)
        return why;
    char t[32];
    size_t n = (size_t)(*p - start);
    if (!is_int || n >= sizeof(t))
        return "an integer expected";
    memcpy(t, start, n);
    t[n] = 0;
    errno = 0;
    *v = strtoll(t, NULL, 10);
    return errno != 0 ? "an integer out of range" : NULL;
}

static int
b64v(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* A BitSet as fastjson2 writes it (writeBinary of toByteArray: an array
 * of signed bytes, or base64 with WriteByteArrayAsBase64). */
static const char *
j_bits(const uint8_t **p, const uint8_t *end, struct batch_ack *a)
{
    a->nbits = 0;
    if (jscan_peek(*p, end) == '"') {
        const char *s;
        size_t n;
        const char *why = j_string(p, end, &s, &n);
        if (why != NULL)
            return why;
        uint32_t acc = 0;
        int have = 0;
        for (size_t i = 0; i < n && s[i] != '='; i++) {
            int v = b64v((unsigned char)s[i]);
            if (v < 0)
                return "bad base64";
            acc = acc << 6 | (uint32_t)v;
            have += 6;
            if (have >= 8) {
                have -= 8;
                if (a->nbits < BATCH_BITS_MAX)
                    a->bits[a->nbits++] = (uint8_t)(acc >> have);
            }
        }
        return NULL;
    }
    if (jscan_peek(*p, end) == 'n')
        return jscan_literal(p, end, "null", 4);
    if (jscan_peek(*p, end) != '[')
        return "a byte array expected";
    (*p)++;
    *p = jscan_ws(*p, end);
    if (jscan_peek(*p, end) == ']') {
        (*p)++;
        return NULL;
    }
    for (;;) {
        int64_t v;
        *p = jscan_ws(*p, end);
        const char *why = j_int(p, end, &v);
        if (why != NULL)
            return why;
        if (v < -128 || v > 255)
            return "a byte out of range";
        if (a->nbits < BATCH_BITS_MAX)
            a->bits[a->nbits++] = (uint8_t)v;
        *p = jscan_ws(*p, end);
        int c = jscan_peek(*p, end);
        (*p)++;
        if (c == ']')
            return NULL;
        if (c != ',')
            return "',' or ']' expected";
    }
}

static bool
key_is(const char *k, size_t kl, const char *a, const char *b)
{
    return (kl == strlen(a) && memcmp(k, a, kl) == 0) || (kl == strlen(b) && memcmp(k, b, kl) == 0);
}

/* Applies one BatchAck (AckMessageProcessor.appendAck with a batch). */
static void
batch_apply(struct pop_processor *pp, const struct batch_ack *a)
{
    if (a->c == NULL || a->t == NULL || a->cl > POP_NAME_MAX || a->tl > POP_NAME_MAX)
        return;
    struct buf rt;
    buf_init(&rt);
    const char *topic = a->t;
    size_t tl = a->tl;
    if (a->rl == 1 && a->r[0] == '1') {
        if (retry_topic(&rt, a->c, a->cl, a->t, a->tl) != 0) {
            buf_free(&rt);
            return;
        }
        topic = (const char *)buf_head(&rt);
        tl = buf_len(&rt);
    }
    int64_t last_floor = -1;
    int64_t offs[64];
    int n = 0;
    for (size_t i = 0; i <= a->nbits * 8; i++) {
        bool set = i < a->nbits * 8 && (a->bits[i / 8] >> (i % 8) & 1);
        if (set)
            offs[n++] = a->so + (int64_t)i;
        if (n == 64 || (i == a->nbits * 8 && n > 0)) {
            int64_t floor;
            (void)popstore_ack_batch(pp->ps, a->c, a->cl, topic, tl, (int32_t)a->q, offs, n, a->pt,
                                     &floor);
            if (floor >= 0)
                last_floor = floor;
            n = 0;
        }
    }
    if (last_floor >= 0) {
        buf_reset(&pp->key);
        if (buf_append(&pp->key, topic, tl) == 0 && buf_append(&pp->key, "@", 1) == 0 &&
            buf_append(&pp->key, a->c, a->cl) == 0)
            (void)offset_table_commit(pp->offsets, (const char *)buf_head(&pp->key),
                                      buf_len(&pp->key), (uint32_t)a->q, last_floor);
    }
    buf_free(&rt);
}

static const char *
batch_one(struct pop_processor *pp, const uint8_t **p, const uint8_t *end, struct batch_ack *a)
{
    memset(a, 0, offsetof(struct batch_ack, bits));
    a->nbits = 0;
    if (jscan_peek(*p, end) != '{')
        return "an object expected";
    (*p)++;
    for (;;) {
        *p = jscan_ws(*p, end);
        if (jscan_peek(*p, end) == '}') {
            (*p)++;
            batch_apply(pp, a);
            return NULL;
        }
        const char *k;
        size_t kl;
        const char *why = j_string(p, end, &k, &kl);
        if (why != NULL)
            return why;
        *p = jscan_ws(*p, end);
        if (jscan_peek(*p, end) != ':')
            return "':' expected";
        (*p)++;
        *p = jscan_ws(*p, end);
        int64_t ignored;
        if (key_is(k, kl, "c", "consumerGroup"))
            why = j_string(p, end, &a->c, &a->cl);
        else if (key_is(k, kl, "t", "topic"))
            why = j_string(p, end, &a->t, &a->tl);
        else if (key_is(k, kl, "r", "retry"))
            why = j_string(p, end, &a->r, &a->rl);
        else if (key_is(k, kl, "so", "startOffset"))
            why = j_int(p, end, &a->so);
        else if (key_is(k, kl, "q", "queueId"))
            why = j_int(p, end, &a->q);
        else if (key_is(k, kl, "pt", "popTime"))
            why = j_int(p, end, &a->pt);
        else if (key_is(k, kl, "rq", "reviveQueueId") || key_is(k, kl, "it", "invisibleTime"))
            why = j_int(p, end, &ignored);
        else if (key_is(k, kl, "b", "bitSet"))
            why = j_bits(p, end, a);
        else
            why = jscan_skip(p, end, 2, 8);
        if (why != NULL)
            return why;
        *p = jscan_ws(*p, end);
        if (jscan_peek(*p, end) == ',')
            (*p)++;
        else if (jscan_peek(*p, end) != '}')
            return "',' or '}' expected";
    }
}

static int
batch_ack(struct pop_processor *pp, struct native_req *r)
{
    const uint8_t *p = r->cmd->body, *end = p + r->cmd->body_len;
    int acks = 0;
    const char *why = NULL;
    struct batch_ack *a = malloc(sizeof(*a));
    if (a == NULL) {
        reply_text(r, RMQ_RESP_SYSTEM_ERROR, "out of memory");
        return NATIVE_DONE;
    }
    p = jscan_ws(p, end);
    if (p < end && *p == '{') {
        p++;
        for (;;) {
            p = jscan_ws(p, end);
            if (jscan_peek(p, end) == '}')
                break;
            const char *k;
            size_t kl;
            if ((why = j_string(&p, end, &k, &kl)) != NULL)
                break;
            p = jscan_ws(p, end);
            if (jscan_peek(p, end) != ':') {
                why = "':' expected";
                break;
            }
            p = jscan_ws(p + 1, end);
            if (kl == 4 && memcmp(k, "acks", 4) == 0 && jscan_peek(p, end) == '[') {
                p = jscan_ws(p + 1, end);
                while (why == NULL && jscan_peek(p, end) != ']') {
                    if (++acks > BATCH_ACKS_MAX) {
                        why = "more than 1024 acks";
                        break;
                    }
                    why = batch_one(pp, &p, end, a);
                    p = jscan_ws(p, end);
                    if (why == NULL && jscan_peek(p, end) == ',')
                        p = jscan_ws(p + 1, end);
                    else if (why == NULL && jscan_peek(p, end) != ']')
                        why = "',' or ']' expected";
                }
                if (why == NULL)
                    p++;
            } else {
                why = jscan_skip(&p, end, 1, 8);
            }
            if (why != NULL)
                break;
            p = jscan_ws(p, end);
            if (jscan_peek(p, end) == ',')
                p++;
            else if (jscan_peek(p, end) != '}') {
                why = "',' or '}' expected";
                break;
            }
        }
    } else if (r->cmd->body_len > 0) {
        why = "an object expected";
    }
    free(a);
    if (why != NULL) {
        reply_text(r, RMQ_RESP_SYSTEM_ERROR, "BatchAckMessageRequestBody: %s", why);
        return NATIVE_DONE;
    }
    /* No body or no acks: 5.x answers NO_MESSAGE. */
    (void)native_reply(r, acks > 0 ? RMQ_RESP_SUCCESS : RMQ_RESP_NO_MESSAGE, NULL, 0, NULL, 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

/* }}} */

static int
pop_run(struct native_proc *p, struct native_req *r)
{
    struct pop_processor *pp = (struct pop_processor *)p;
    /* Leases live on the master; the role can change at run time (a
     * controller's election), so it is the store's role now that
     * counts, as a slave that never served POP answered before. */
    if (store_role_slave(pp->store)) {
        reply_text(r, RMQ_RESP_REQUEST_CODE_NOT_SUPPORTED, "the broker[%s] is a slave: POP is served by the master",
                   pp->broker_ip);
        return NATIVE_DONE;
    }
    switch (r->cmd->code) {
    case RMQ_REQ_POP_MESSAGE: return pop_message(pp, r);
    case RMQ_REQ_ACK_MESSAGE: return ack_message(pp, r);
    case RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME: return change_invisible(pp, r);
    case RMQ_REQ_BATCH_ACK_MESSAGE: return batch_ack(pp, r);
    case RMQ_REQ_PEEK_MESSAGE: return peek_message(pp, r);
    case RMQ_REQ_NOTIFICATION: return notification(pp, r);
    case RMQ_REQ_POLLING_INFO: return polling_info(pp, r);
    default: return NATIVE_TO_LUA;
    }
}

static void
pop_destroy(struct native_proc *p)
{
    struct pop_processor *pp = (struct pop_processor *)p;
    if (pp->store != NULL)
        store_unref(pp->store);
    buf_free(&pp->key);
    buf_free(&pp->start_info);
    buf_free(&pp->msg_info);
    buf_free(&pp->order_info);
    buf_free(&pp->remark);
    free(pp);
}

static int
field_indexes(const struct hspec *h, const char *const *keys, int n, int *out)
{
    if (lheader_nfields(h) > 64) {
        err_set("a pop header spec has more than 64 fields");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        out[i] = lheader_field(h, keys[i]);
        if (out[i] < 0) {
            err_set("a pop header spec has no field %s", keys[i]);
            return -1;
        }
    }
    return 0;
}

struct native_proc *
pop_processor_new(const struct pop_processor_conf *c)
{
    struct pop_processor *pp = calloc(1, sizeof(*pp));
    if (pp == NULL) {
        err_set("out of memory");
        return NULL;
    }
    pp->base.name = "pop";
    pp->base.run = pop_run;
    pp->base.destroy = pop_destroy;
    buf_init(&pp->key);
    buf_init(&pp->start_info);
    buf_init(&pp->msg_info);
    buf_init(&pp->order_info);
    buf_init(&pp->remark);
    if (field_indexes(c->pop, pop_keys, NP, pp->pi) != 0 ||
        field_indexes(c->ack, ack_keys, NA, pp->ai) != 0 ||
        field_indexes(c->change, change_keys, NC, pp->ci) != 0 ||
        field_indexes(c->peek, peek_keys, NK, pp->ki) != 0 ||
        field_indexes(c->notify, notify_keys, NN, pp->ni) != 0 ||
        field_indexes(c->info, info_keys, NI, pp->ii) != 0) {
        pop_destroy(&pp->base);
        return NULL;
    }
    pp->pop_h = c->pop;
    pp->ack_h = c->ack;
    pp->change_h = c->change;
    pp->peek_h = c->peek;
    pp->notify_h = c->notify;
    pp->info_h = c->info;
    pp->topics = config_table_topics();
    pp->groups = config_table_groups();
    pp->offsets = offset_table_shared();
    if (pp->topics == NULL || pp->groups == NULL || pp->offsets == NULL ||
        broker_perm_init(&pp->perm, c->perm) != 0) {
        pop_destroy(&pp->base);
        err_set("out of memory");
        return NULL;
    }
    struct popstore_conf pc = {
        .max_per_group = c->max_per_group, .max_total = c->max_total,
        .compact_bytes = c->compact_bytes,
    };
    pp->ps = popstore_shared(c->dir, &pc);
    if (pp->ps == NULL) {
        pop_destroy(&pp->base);
        return NULL;
    }
    snprintf(pp->broker_ip, sizeof(pp->broker_ip), "%s", c->broker_ip ? c->broker_ip : "");
    pp->inv_min = c->invisible_min;
    pp->inv_max = c->invisible_max;
    pp->retry_probability = c->retry_probability;
    pp->init_by_mem = c->init_by_mem;
    pp->rnd = (uint32_t)clock_mono_ns() ^ (uint32_t)(uintptr_t)pp;
    pp->store = c->store;
    store_ref(pp->store);
    /* The revive thread: once a process, over the shared store.  It keeps
     * its store reference for the life of the process. */
    struct reviver rv = { c->store, pp->ps, c->store_host,
                          c->revive_interval > 0 ? c->revive_interval : 200, pp->groups, 0, 0 };
    pthread_mutex_lock(&revive_mu);
    int started = revive_start(&rv);
    pthread_mutex_unlock(&revive_mu);
    if (started < 0) {
        pop_destroy(&pp->base);
        err_set("cannot start the pop revive thread");
        return NULL;
    }
    return &pp->base;
}
