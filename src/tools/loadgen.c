/*
 * loadgen: see loadgen.h.
 *
 * Slots.  The run owns `concurrency` slots; a slot is one request in
 * flight.  Its opaque is OPAQUE_BASE + slot + generation * concurrency
 * (modulo a 9-digit window), so every opaque has the same number of
 * decimal digits and can be written into the pre-encoded JSON header in
 * place, and a reply maps back to its slot with a division; a late reply
 * to a slot that already timed out carries a stale opaque and is ignored.
 * When a reply arrives the slot sends again at once, to the next queue.
 *
 * gRPC (opts->grpc): a slot's call is one HTTP/2 stream of a gclient
 * (src/grpc/client.h) on one of the connections; the call's callback
 * gets the slot itself, and a call that timed out is cancelled (its
 * callback then never runs), so no reply is matched by number.  The
 * request is the target's SendMessageRequest with its message_id's
 * counter digits patched before each call (gclient_call copies it).
 *
 * Rate (opts->rate): a slot that would send ahead of rate x elapsed is
 * parked; the timer, every millisecond then, sends parked slots as the
 * budget grows.
 */
#include "tools/loadgen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apache/rocketmq/v2/service.pb-c.h"
#include "core/clock.h"
#include "core/err.h"
#include "acl/acl_sign.h"
#include "core/log.h"
#include "grpc/h2.h"
#include "net/codec.h"
#include "net/conn.h"
#include "rmq_codes.h"

#define OPAQUE_BASE 1000000000
#define OPAQUE_SPAN 1000000000

#define GRPC_SEND_PATH "/apache.rocketmq.v2.MessagingService/SendMessage"
/* apache.rocketmq.v2.Code */
#define GRPC_CODE_OK 20000
#define GRPC_CODE_TOO_MANY_REQUESTS 42900
/* A SendMessageResponse of one entry is about 100 bytes. */
#define GRPC_MAX_RESPONSE (1u << 20)

/* {{{ Histogram */

static int
bucket_of(uint64_t us)
{
    if (us < 1024)
        return (int)us;
    int e = 63 - __builtin_clzll(us);           /* >= 10 */
    int sub = (int)((us >> (e - 6)) & 63);      /* 64 sub-buckets */
    int b = 1024 + (e - 10) * 64 + sub;
    return b < LG_HIST_BUCKETS ? b : LG_HIST_BUCKETS - 1;
}

static uint64_t
bucket_value(int b)
{
    if (b < 1024)
        return (uint64_t)b;
    int e = (b - 1024) / 64 + 10;
    int sub = (b - 1024) % 64;
    return ((uint64_t)1 << e) + ((uint64_t)sub << (e - 6));
}

void
lg_hist_add(struct lg_hist *h, uint64_t us)
{
    h->count++;
    h->sum_us += us;
    if (us > h->max_us)
        h->max_us = us;
    h->buckets[bucket_of(us)]++;
}

uint64_t
lg_hist_quantile(const struct lg_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->count);
    if (want == 0)
        want = 1;
    uint64_t seen = 0;
    for (int b = 0; b < LG_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= want)
            return bucket_value(b);
    }
    return h->max_us;
}

void
lg_hist_merge(struct lg_hist *into, const struct lg_hist *from)
{
    into->count += from->count;
    into->sum_us += from->sum_us;
    if (from->max_us > into->max_us)
        into->max_us = from->max_us;
    for (int b = 0; b < LG_HIST_BUCKETS; b++)
        into->buckets[b] += from->buckets[b];
}

/* }}} */

/* The connections to one broker address, shared by all its queues. */
struct lg_broker {
    const char *addr;
    struct conn **conns;
    int nconns;
};

struct lg_target_state {
    const struct lg_target *target;
    struct buf frame;          /* the encoded request, opaque patched */
    size_t opaque_at;          /* offset of the opaque in `frame` */
    size_t uniq_at;            /* offset of UNIQ_KEY's (gRPC: message_id's)
                                * counter digits; 0: none */
    struct lg_broker *broker;
};

struct lg_run;

struct lg_slot {
    int32_t opaque;            /* remoting: expected in the reply */
    bool busy;                 /* a request in flight */
    int32_t stream;            /* gRPC: the call's stream id */
    struct conn *conn;         /* gRPC: the call's connection */
    struct lg_run *run;
    int64_t sent_ns;
    uint32_t generation;
    bool unsent;               /* parked by slot_unsent, its failure counted */
};

struct lg_run {
    struct reactor *r;
    const struct loadgen_opts *o;
    struct lg_target_state *targets;
    int ntargets;
    struct lg_broker *brokers;
    int nbrokers;
    struct lg_slot *slots;
    int nslots;
    uint64_t next_target;
    uint64_t sent_seq;         /* sends so far: UNIQ_KEY's counter */
    int connecting;
    int failed_connects;
    bool stopping;
    int64_t start_ns;
    int64_t next_tick_ns;
    uv_timer_t timer;
    struct lg_stats sec;
    struct lg_stats *total;
    uint8_t arena[8192];
    int in_flight;
    uint64_t started;          /* sends begun: the rate's count */
    int *parked;               /* slots waiting for the rate, a stack */
    int nparked;
};

static void send_slot(struct lg_run *run, int i);

enum lg_outcome { LG_OK, LG_BUSY, LG_FAILED };

/* Slot i's request ended (a reply): counted, timed, and the slot sends
 * again unless the run is stopping. */
static void
slot_done(struct lg_run *run, int i, enum lg_outcome out)
{
    struct lg_slot *s = &run->slots[i];
    int64_t now = clock_mono_ns();
    uint64_t us = (uint64_t)((now - s->sent_ns) / 1000);
    s->busy = false;
    s->opaque = 0;
    run->in_flight--;
    if (out == LG_OK) {
        run->sec.ok++;
        lg_hist_add(&run->sec.hist, us);
    } else if (out == LG_BUSY) {
        run->sec.busy++;
    } else {
        run->sec.failed++;
    }
    if (!run->stopping)
        send_slot(run, i);
}

static void
on_reply(struct conn *c, const uint8_t *frame, size_t len)
{
    struct lg_run *run = c->owner;
    struct rmq_cmd cmd;
    struct rmq_arena a = { run->arena, sizeof(run->arena), 0 };
    if (rmq_cmd_decode(&cmd, frame, len, &a) != 0)
        return;
    if (!(cmd.flag & RMQ_RPC_RESPONSE) || cmd.opaque < OPAQUE_BASE)
        return;
    int i = (int)((uint32_t)(cmd.opaque - OPAQUE_BASE) % (uint32_t)run->nslots);
    struct lg_slot *s = &run->slots[i];
    if (!s->busy || s->opaque != cmd.opaque)
        return;  /* a reply to a request that already timed out */
    /* SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE
     * all mean "stored" (protocol.md 2.2). */
    enum lg_outcome out = LG_FAILED;
    if (cmd.code == RMQ_RESP_SUCCESS || cmd.code == RMQ_RESP_FLUSH_DISK_TIMEOUT ||
        cmd.code == RMQ_RESP_FLUSH_SLAVE_TIMEOUT || cmd.code == RMQ_RESP_SLAVE_NOT_AVAILABLE)
        out = LG_OK;
    else if (cmd.code == RMQ_RESP_SYSTEM_BUSY)
        out = LG_BUSY;     /* SYSTEM_BUSY: the broker's flow control */
    slot_done(run, i, out);
}

/* A varint at p[*at..n) into *v; false when it does not fit. */
static bool
pb_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *at < n; shift += 7) {
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7F) << shift;
        if ((b & 0x80) == 0)
            return true;
    }
    return false;
}

/* The message field `field` (wire type 2) of the protobuf message
 * p[0..n): *sub, *sublen; false when absent or malformed.  Skips the
 * other fields by their wire type (any order, as any server may write
 * them). */
static bool
pb_find(const uint8_t *p, size_t n, uint32_t field, const uint8_t **sub, size_t *sublen)
{
    size_t at = 0;
    uint64_t key, v;
    while (at < n) {
        if (!pb_varint(p, n, &at, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!pb_varint(p, n, &at, &v))
                return false;
            if ((key >> 3) == field) {   /* a varint: handed back by value */
                *sub = NULL;
                *sublen = (size_t)v;
                return true;
            }
            break;
        case 1:
            if (n - at < 8)
                return false;
            at += 8;
            break;
        case 2:
            if (!pb_varint(p, n, &at, &v) || v > n - at)
                return false;
            if ((key >> 3) == field) {
                *sub = p + at;
                *sublen = (size_t)v;
                return true;
            }
            at += (size_t)v;
            break;
        case 5:
            if (n - at < 4)
                return false;
            at += 4;
            break;
        default:
            return false;
        }
    }
    return false;
}

/* SendMessageResponse's status.code, or -1.  By hand: protobuf-c's
 * unpack allocates the whole response, and the generator's CPU is the
 * machine's the server does not get. */
static int64_t
send_response_code(const struct gclient_result *r)
{
    if (r->len < 5 || r->data[0] != 0)
        return -1;
    size_t n = be32_get(r->data + 1);
    if (n > r->len - 5)
        return -1;
    const uint8_t *st, *code;
    size_t stlen, v;
    if (!pb_find(r->data + 5, n, 1, &st, &stlen) || st == NULL)
        return -1;
    if (!pb_find(st, stlen, 1, &code, &v))
        return 0;   /* proto3: an absent code is 0 */
    return code == NULL ? (int64_t)v : -1;
}

static void
on_grpc_reply(void *arg, const struct gclient_result *r)
{
    struct lg_slot *s = arg;
    struct lg_run *run = s->run;
    if (!s->busy)
        return;
    enum lg_outcome out = LG_FAILED;
    int64_t code = r->status == GRPC_OK ? send_response_code(r) : -1;
    if (code == GRPC_CODE_OK)
        out = LG_OK;
    else if (code == GRPC_CODE_TOO_MANY_REQUESTS || r->status == GRPC_RESOURCE_EXHAUSTED)
        out = LG_BUSY;   /* the broker's flow control, as 5.x answers it */
    s->stream = 0;
    slot_done(run, (int)(s - run->slots), out);
}

static void
on_conn_close(struct conn *c)
{
    (void)c;
}

static void
on_connect(struct conn *c, int status)
{
    struct lg_run *run = c->owner;
    run->connecting--;
    if (status != 0) {
        run->failed_connects++;
        log_warn("bench: cannot connect to %s: %s", c->peer, uv_strerror(status));
    }
}

static const struct conn_handler lg_handler = {
    .on_frame = on_reply,
    .on_close = on_conn_close,
    .on_connect = on_connect,
};

/* gRPC: the HTTP/2 session starts once connected; :authority is the
 * address dialled. */
static void
on_grpc_connect(struct conn *c, int status)
{
    struct lg_run *run = c->owner;
    on_connect(c, status);
    if (status == 0 && gclient_new(c, c->peer, GRPC_MAX_RESPONSE) == NULL) {
        run->failed_connects++;
        log_warn("bench: no HTTP/2 session to %s: %s", c->peer, err_msg());
        conn_close(c, "no HTTP/2 session");
    }
}

static size_t
on_grpc_bytes(struct conn *c, const uint8_t *p, size_t n)
{
    return gclient_on_bytes(c, p, n);
}

/* Every call still open ends UNAVAILABLE (its callback counts it failed). */
static void
on_grpc_close(struct conn *c)
{
    gclient_on_conn_close(c->ext);
}

static const struct conn_handler lg_grpc_handler = {
    .on_bytes = on_grpc_bytes,
    .on_close = on_grpc_close,
    .on_connect = on_grpc_connect,
};

static void
put_opaque_digits(uint8_t *p, int32_t v)
{
    for (int k = 9; k >= 0; k--) {
        p[k] = (uint8_t)('0' + v % 10);
        v /= 10;
    }
}

/* True when one more send now would be ahead of the rate: more than
 * rate x elapsed and the first one begun (the check was one send
 * looser: 102 in a 2.0 s run at 50 a second). */
static bool
over_rate(struct lg_run *run, int64_t now)
{
    if (run->o->rate <= 0)
        return false;
    double allowed = run->o->rate * (double)(now - run->start_ns) / 1e9 + 1;
    return (double)run->started + 1 > allowed;
}

/* The message id's last 16 hex digits, from the run's sequence, into the
 * pre-encoded frame f (remoting's UNIQ_KEY, gRPC's message_id alike). */
static void
patch_uniq(struct lg_run *run, const struct lg_target_state *t, uint8_t *f)
{
    if (t->uniq_at == 0)
        return;
    uint64_t n = run->sent_seq++;
    for (int k = 15; k >= 0; k--, n >>= 4)
        f[t->uniq_at + (size_t)k] = (uint8_t)"0123456789ABCDEF"[n & 15];
}

/* Slot i's request could not even start (no connection takes it): counted
 * failed, and the slot parked for the timer's next tick, so the run keeps
 * its concurrency (a slot dropped here was gone for the rest of the run)
 * without going round at once on a connection that refuses every call.
 * The tries after it count nothing until one starts: the slot's one
 * request failed once, not once a tick (a run whose connections were all
 * gone counted ~100 failures a second a slot). */
static void
slot_unsent(struct lg_run *run, int i)
{
    if (!run->slots[i].unsent)
        run->sec.failed++;
    run->slots[i].unsent = true;
    /* At the bottom of the stack: on_timer's pass takes each parked slot
     * once (this one is not tried again in the same pass). */
    memmove(run->parked + 1, run->parked, (size_t)run->nparked * sizeof(*run->parked));
    run->parked[0] = i;
    run->nparked++;
}

static void
send_grpc(struct lg_run *run, int i, struct lg_target_state *t)
{
    struct lg_slot *s = &run->slots[i];
    uint8_t *f = buf_head(&t->frame);
    patch_uniq(run, t, f);
    struct lg_broker *b = t->broker;
    /* The slot's own connection first; one that cannot take a call (closed,
     * or the server's GOAWAY) passes it to the next. */
    s->busy = true;
    run->in_flight++;
    int32_t id = -1;
    for (int k = 0; k < b->nconns && id < 0; k++) {
        struct conn *c = b->conns[((uint32_t)i + (uint32_t)k) % (uint32_t)b->nconns];
        if (c->closed || c->ext == NULL)
            continue;
        s->conn = c;
        id = gclient_call(c->ext, GRPC_SEND_PATH, run->o->grpc_headers, (size_t)run->o->grpc_nheaders,
                          f, buf_len(&t->frame), run->o->timeout_ms, on_grpc_reply, s);
    }
    if (id < 0) {
        s->busy = false;
        run->in_flight--;
        slot_unsent(run, i);
        return;
    }
    s->unsent = false;
    s->stream = id;
}

static void
send_slot(struct lg_run *run, int i)
{
    struct lg_slot *s = &run->slots[i];
    int64_t now = clock_mono_ns();
    if (over_rate(run, now)) {
        run->parked[run->nparked++] = i;
        return;
    }
    run->started++;
    s->sent_ns = now;
    struct lg_target_state *t = &run->targets[run->next_target++ % (uint64_t)run->ntargets];
    if (run->o->grpc) {
        send_grpc(run, i, t);
        return;
    }
    s->generation++;
    /* A window that is a multiple of nslots keeps (opaque - base) % nslots
     * equal to the slot across the wrap. */
    uint64_t window = OPAQUE_SPAN - OPAQUE_SPAN % (uint64_t)run->nslots;
    uint64_t seq = (uint64_t)s->generation * (uint64_t)run->nslots + (uint64_t)i;
    int32_t opaque = (int32_t)(OPAQUE_BASE + seq % window);
    uint8_t *f = buf_head(&t->frame);
    if (run->o->binary_header)
        be32_put(f + t->opaque_at, (uint32_t)opaque);
    else
        put_opaque_digits(f + t->opaque_at, opaque);
    patch_uniq(run, t, f);
    struct lg_broker *b = t->broker;
    struct conn *c = b->conns[(uint32_t)i % (uint32_t)b->nconns];
    s->opaque = opaque;
    s->busy = true;
    run->in_flight++;
    if (conn_send(c, f, buf_len(&t->frame), NULL, 0) != 0) {
        s->opaque = 0;
        s->busy = false;
        run->in_flight--;
        slot_unsent(run, i);
        return;
    }
    s->unsent = false;
}

static void
flush_tick(struct lg_run *run, int64_t now)
{
    double elapsed = (double)(now - run->start_ns) / 1e9;
    if (run->o->tick != NULL)
        run->o->tick(run->o->arg, elapsed, &run->sec);
    run->total->ok += run->sec.ok;
    run->total->failed += run->sec.failed;
    run->total->busy += run->sec.busy;
    lg_hist_merge(&run->total->hist, &run->sec.hist);
    memset(&run->sec, 0, sizeof(run->sec));
}

static void
on_timer(uv_timer_t *tm)
{
    struct lg_run *run = tm->data;
    int64_t now = clock_mono_ns();
    /* Requests older than the timeout count as failed; the slot resends. */
    int64_t limit = (int64_t)run->o->timeout_ms * 1000000;
    for (int i = 0; i < run->nslots; i++) {
        struct lg_slot *s = &run->slots[i];
        if (s->busy && now - s->sent_ns > limit) {
            if (run->o->grpc && s->conn->ext != NULL)
                gclient_cancel(s->conn->ext, s->stream);   /* its callback does not run */
            s->opaque = 0;
            s->busy = false;
            run->in_flight--;
            run->sec.failed++;
            if (!run->stopping)
                send_slot(run, i);
        }
    }
    /* Parked slots, as far as the rate lets them go now, each once a pass
     * (a slot whose send cannot start parks again: slot_unsent). */
    for (int pass = run->nparked; pass > 0 && !run->stopping && run->nparked > 0 && !over_rate(run, now); pass--)
        send_slot(run, run->parked[--run->nparked]);
    if (now >= run->next_tick_ns) {
        flush_tick(run, now);
        run->next_tick_ns += 1000000000;
    }
    if (!run->stopping &&
        (double)(now - run->start_ns) / 1e9 >= run->o->seconds)
        run->stopping = true;
}

/* AccessKey (SecurityToken) and Signature into cmd's fields, as
 * AclClientRPCHook adds them; sig holds the Signature's text.  0, or -1
 * with err_set(). */
static int
sign_header(const struct loadgen_opts *o, struct rmq_cmd *cmd,
            char sig[ACL_SIGNATURE_LEN + 1])
{
    struct rmq_field *f = cmd->ext;
    f[cmd->ext_count++] = (struct rmq_field){
        { ACL_FIELD_ACCESS_KEY, sizeof(ACL_FIELD_ACCESS_KEY) - 1 },
        { o->access_key, (uint32_t)strlen(o->access_key) } };
    if (o->security_token != NULL)
        f[cmd->ext_count++] = (struct rmq_field){
            { ACL_FIELD_SECURITY_TOKEN, sizeof(ACL_FIELD_SECURITY_TOKEN) - 1 },
            { o->security_token, (uint32_t)strlen(o->security_token) } };
    struct acl_signer *s = acl_signer_new();
    if (s == NULL)
        return -1;
    const char *secret = o->secret_key != NULL ? o->secret_key : "";
    int rc = acl_sign_cmd(s, cmd, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, secret,
                          strlen(secret), sig);
    acl_signer_free(s);
    if (rc != 0)
        return -1;
    f[cmd->ext_count++] = (struct rmq_field){
        { ACL_FIELD_SIGNATURE, sizeof(ACL_FIELD_SIGNATURE) - 1 },
        { sig, ACL_SIGNATURE_LEN } };
    return 0;
}

/* The target's SendMessageRequest: one NORMAL message to its queue, as
 * a 5.x SDK fills it (tag, message_id, born timestamp and host, body
 * encoding), the message_id a 5.x one (34 hex digits: version 01, this
 * process and the run's start, then a counter written per send). */
static int
encode_grpc_target(struct lg_run *run, struct lg_target_state *t, const uint8_t *body)
{
    const struct loadgen_opts *o = run->o;
    char mid[40];
    int64_t now = clock_wall_ms();
    snprintf(mid, sizeof(mid), "01%08X%08X%016X", 0x7F000001u,
             (unsigned)((uint32_t)getpid() << 16 ^ (uint32_t)(now & 0xFFFF)), 0u);
    Google__Protobuf__Timestamp born = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    born.seconds = now / 1000;
    born.nanos = (int32_t)(now % 1000) * 1000000;
    Apache__Rocketmq__V2__SystemProperties sp = APACHE__ROCKETMQ__V2__SYSTEM_PROPERTIES__INIT;
    sp.tag = (char *)"bench";
    sp.message_id = mid;
    sp.message_type = APACHE__ROCKETMQ__V2__MESSAGE_TYPE__NORMAL;
    sp.body_encoding = APACHE__ROCKETMQ__V2__ENCODING__IDENTITY;
    sp.born_timestamp = &born;
    sp.born_host = (char *)"127.0.0.1";
    sp.queue_id = t->target->queue_id;
    Apache__Rocketmq__V2__Resource topic = APACHE__ROCKETMQ__V2__RESOURCE__INIT;
    topic.name = (char *)o->topic;
    Apache__Rocketmq__V2__Message m = APACHE__ROCKETMQ__V2__MESSAGE__INIT;
    m.topic = &topic;
    m.system_properties = &sp;
    m.body.data = (uint8_t *)body;
    m.body.len = o->body_size;
    Apache__Rocketmq__V2__Message *ms[1] = { &m };
    Apache__Rocketmq__V2__SendMessageRequest req = APACHE__ROCKETMQ__V2__SEND_MESSAGE_REQUEST__INIT;
    req.n_messages = 1;
    req.messages = ms;
    size_t n = apache__rocketmq__v2__send_message_request__get_packed_size(&req);
    if (buf_reserve(&t->frame, n) != 0)
        return -ENOMEM;
    apache__rocketmq__v2__send_message_request__pack(&req, buf_tail(&t->frame));
    t->frame.end += n;
    /* The id's prefix is this process's and unique in the request. */
    uint8_t *at = memmem(buf_head(&t->frame), n, mid, 18);
    if (at == NULL) {
        err_set("bench: cannot find the message id in the encoded request");
        return -EINVAL;
    }
    t->uniq_at = (size_t)(at - buf_head(&t->frame)) + 18;
    return 0;
}

static int
encode_target(struct lg_run *run, struct lg_target_state *t, const uint8_t *body)
{
    const struct loadgen_opts *o = run->o;
    if (o->grpc)
        return encode_grpc_target(run, t, body);
    char qid[16], bts[24];
    snprintf(qid, sizeof(qid), "%d", t->target->queue_id);
    snprintf(bts, sizeof(bts), "%lld", (long long)clock_wall_ms());
    if (o->uniq_key && o->access_key != NULL) {
        err_set("bench: --uniq-key cannot be signed once per queue; not with ACL credentials");
        return -EINVAL;
    }
    /* With uniq_key, a Java producer's UNIQ_KEY (32 hex digits: the
     * process and the run's start, then a counter written per send),
     * which the store indexes as it does every Java client's message. */
    char props[96];
    int plen = o->uniq_key
        ? snprintf(props, sizeof(props), "WAIT\001true\002TAGS\001bench\002UNIQ_KEY\001%08X%08X%016X",
                   0x7F000001u, (unsigned)((uint32_t)getpid() << 16 ^ (uint32_t)(clock_wall_ms() & 0xFFFF)), 0u)
        : snprintf(props, sizeof(props), "WAIT\001true\002TAGS\001bench");
    /* The header, then room for AccessKey, SecurityToken, Signature. */
    struct rmq_field f[13 + 3] = {
        { { "a", 1 }, { o->group, (uint32_t)strlen(o->group) } },
        { { "b", 1 }, { o->topic, (uint32_t)strlen(o->topic) } },
        { { "c", 1 }, { "TBW102", 6 } },
        { { "d", 1 }, { "4", 1 } },
        { { "e", 1 }, { qid, (uint32_t)strlen(qid) } },
        { { "f", 1 }, { "0", 1 } },
        { { "g", 1 }, { bts, (uint32_t)strlen(bts) } },
        { { "h", 1 }, { "0", 1 } },
        { { "i", 1 }, { props, (uint32_t)plen } },
        { { "j", 1 }, { "0", 1 } },
        { { "k", 1 }, { "false", 5 } },
        { { "m", 1 }, { "false", 5 } },
        { { "n", 1 }, { t->target->broker_name, (uint32_t)strlen(t->target->broker_name) } },
    };
    struct rmq_cmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.code = RMQ_REQ_SEND_MESSAGE_V2;
    cmd.language = RMQ_LANG_JAVA;
    cmd.version = RMQ_VERSION_409;
    cmd.opaque = OPAQUE_BASE;
    cmd.serialize = o->binary_header ? RMQ_SER_ROCKETMQ : RMQ_SER_JSON;
    cmd.ext = f;
    cmd.ext_count = 13;
    cmd.body = body;
    cmd.body_len = (uint32_t)o->body_size;
    char sig[ACL_SIGNATURE_LEN + 1];
    if (o->access_key != NULL && sign_header(o, &cmd, sig) != 0)
        return -EINVAL;
    if (rmq_cmd_encode(&cmd, &t->frame) != 0 ||
        buf_append(&t->frame, body, o->body_size) != 0)
        return -ENOMEM;
    if (o->uniq_key) {
        /* The key's prefix is this process's and unique in the frame. */
        uint8_t *hdr = buf_head(&t->frame);
        size_t at_key = (size_t)plen - 32;
        uint8_t *at = memmem(hdr + 8, buf_len(&t->frame) - 8, props + at_key, 16);
        if (at == NULL) {
            err_set("bench: cannot find UNIQ_KEY in the encoded header");
            return -EINVAL;
        }
        t->uniq_at = (size_t)(at - hdr) + 16;
    }
    if (o->binary_header) {
        t->opaque_at = 8 + 5;  /* L, H, code(2) language(1) version(2) */
        return 0;
    }
    const char *needle = "\"opaque\":1000000000";
    uint8_t *hdr = buf_head(&t->frame);
    size_t hlen = be32_get(hdr + 4) & 0xFFFFFF;
    uint8_t *at = memmem(hdr + 8, hlen, needle, strlen(needle));
    if (at == NULL) {
        err_set("bench: cannot find the opaque in the encoded header");
        return -EINVAL;
    }
    t->opaque_at = (size_t)(at - hdr) + strlen(needle) - 10;
    return 0;
}

static void
run_free(struct lg_run *run)
{
    /* Closing a gRPC connection calls back its open calls, into the
     * slots: they go first. */
    run->stopping = true;
    for (int i = 0; i < run->nbrokers; i++) {
        struct lg_broker *b = &run->brokers[i];
        for (int k = 0; k < b->nconns; k++) {
            if (b->conns[k] != NULL) {
                conn_close(b->conns[k], "bench done");
                conn_unref(b->conns[k]);
            }
        }
        free(b->conns);
    }
    for (int i = 0; i < run->ntargets; i++)
        buf_free(&run->targets[i].frame);
    free(run->brokers);
    free(run->targets);
    free(run->slots);
    free(run->parked);
}

/* The broker entry for addr, connecting on first sight. */
static struct lg_broker *
broker_for(struct lg_run *run, const char *addr, int *rc)
{
    for (int i = 0; i < run->nbrokers; i++)
        if (strcmp(run->brokers[i].addr, addr) == 0)
            return &run->brokers[i];
    struct lg_broker *b = &run->brokers[run->nbrokers++];
    int n = run->o->connections_per_broker > 0 ? run->o->connections_per_broker : 4;
    b->addr = addr;
    b->conns = calloc((size_t)n, sizeof(*b->conns));
    if (b->conns == NULL) {
        *rc = -ENOMEM;
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        b->conns[k] = conn_connect(run->r, addr, run->o->grpc ? &lg_grpc_handler : &lg_handler, run);
        if (b->conns[k] == NULL) {
            *rc = -EINVAL;
            return NULL;
        }
        b->nconns = k + 1;
        conn_ref(b->conns[k]);
        run->connecting++;
    }
    return b;
}

int
loadgen_run(struct reactor *r, const struct loadgen_opts *o,
            struct lg_stats *total)
{
    struct lg_run *run = calloc(1, sizeof(*run));
    if (run == NULL)
        return -ENOMEM;
    int rc = 0;
    run->r = r;
    run->o = o;
    run->total = total;
    memset(total, 0, sizeof(*total));
    run->ntargets = o->ntargets;
    run->nslots = o->concurrency > 0 ? o->concurrency : 1;
    run->targets = calloc((size_t)o->ntargets, sizeof(*run->targets));
    run->brokers = calloc((size_t)o->ntargets, sizeof(*run->brokers));
    run->slots = calloc((size_t)run->nslots, sizeof(*run->slots));
    run->parked = calloc((size_t)run->nslots, sizeof(*run->parked));
    uint8_t *body = malloc(o->body_size ? o->body_size : 1);
    if (run->targets == NULL || run->brokers == NULL || run->slots == NULL ||
        run->parked == NULL || body == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < run->nslots; i++)
        run->slots[i].run = run;
    for (size_t i = 0; i < o->body_size; i++)
        body[i] = (uint8_t)('a' + (i * 7) % 26);
    for (int i = 0; i < o->ntargets; i++) {
        struct lg_target_state *t = &run->targets[i];
        t->target = &o->targets[i];
        buf_init(&t->frame);
        if ((rc = encode_target(run, t, body)) != 0)
            goto out;
        if ((t->broker = broker_for(run, t->target->addr, &rc)) == NULL)
            goto out;
    }
    while (run->connecting > 0)
        reactor_run(r, UV_RUN_ONCE);
    if (run->failed_connects > 0) {
        err_set("bench: %d connection(s) failed", run->failed_connects);
        rc = -ECONNREFUSED;
        goto out;
    }
    run->start_ns = clock_mono_ns();
    run->next_tick_ns = run->start_ns + 1000000000;
    if ((rc = uv_timer_init(&r->loop, &run->timer)) != 0)
        goto out;
    run->timer.data = run;
    /* With a rate, parked slots go every millisecond (bursts of 10 ms
     * would batch the server's reads more than the rate does). */
    uint64_t every = o->rate > 0 ? 1 : 10;
    if ((rc = uv_timer_start(&run->timer, on_timer, every, every)) != 0) {
        uv_close((uv_handle_t *)&run->timer, NULL);
        goto out;
    }
    for (int i = 0; i < run->nslots; i++)
        send_slot(run, i);
    int64_t drain_deadline = 0;
    for (;;) {
        reactor_run(r, UV_RUN_ONCE);
        if (!run->stopping)
            continue;
        if (drain_deadline == 0)
            drain_deadline = clock_mono_ns() + (int64_t)o->timeout_ms * 1000000;
        if (run->in_flight == 0 || clock_mono_ns() > drain_deadline)
            break;
    }
    flush_tick(run, clock_mono_ns());
    total->failed += (uint64_t)run->in_flight;
    uv_timer_stop(&run->timer);
    uv_close((uv_handle_t *)&run->timer, NULL);
out:
    run_free(run);
    /* Closing handles point into `run`: let their callbacks run first. */
    reactor_run(r, UV_RUN_NOWAIT);
    free(body);
    free(run);
    return rc;
}
