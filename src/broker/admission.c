/*
 * admission: see admission.h.
 */
#include "broker/admission.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/bsettings.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "proto/native.h"
#include "net/conn.h"
#include "runtime/host.h"
#include "store/store.h"
#include "rmq_codes.h"

/* isOSPageCacheBusy's sanity bound: a put "in progress" for longer than
 * this is a stale stamp, not a busy store. */
#define PAGE_CACHE_STALE_MS 10000000

/* A policy's remark longer than this is cut (it goes in every reply). */
#define REMARK_MAX 512

static const char *const kind_names[ADMISSION_NKINDS] = {
    "send", "pull", "heartbeat", "transaction",
};

/* The settings of struct admission_limits' wait_ms, in its order. */
static const enum bset_key wait_keys[ADMISSION_NKINDS] = {
    BSET_WAIT_SEND_MS, BSET_WAIT_PULL_MS, BSET_WAIT_HEARTBEAT_MS, BSET_WAIT_TRANSACTION_MS,
};

int
admission_kind_of(int32_t code)
{
    switch (code) {
    case RMQ_REQ_SEND_MESSAGE:
    case RMQ_REQ_SEND_MESSAGE_V2:
    case RMQ_REQ_SEND_BATCH_MESSAGE:
    case RMQ_REQ_CONSUMER_SEND_MSG_BACK: return ADMISSION_SEND;
    case RMQ_REQ_PULL_MESSAGE: return ADMISSION_PULL;
    case RMQ_REQ_HEART_BEAT: return ADMISSION_HEARTBEAT;
    case RMQ_REQ_END_TRANSACTION: return ADMISSION_TRANSACTION;
    default: return -1;
    }
}

struct admission *
admission_new(struct store *store, const struct admission_limits *initial, lua_State *L,
              int decide_ref)
{
    struct admission *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        err_set("out of memory");
        return NULL;
    }
    a->store = store;
    store_ref(store);
    a->lim = *initial;
    a->conf = *initial;
    a->L = L;
    a->decide_ref = decide_ref;
    /* (a is zeroed: the settings are read on the first request) */
    return a;
}

void
admission_free(struct admission *a)
{
    if (a == NULL)
        return;
    store_unref(a->store);
    free(a);
}

/* {{{ Limits changed at run time */

const struct admission_limits *
admission_limits(struct admission *a)
{
    if (!bsettings_refresh(&a->settings))
        return &a->lim;
    const struct bsettings_values *v = &a->settings.v;
    a->lim.page_cache_ms = bsettings_get(v, BSET_PAGE_CACHE_MS, a->conf.page_cache_ms);
    for (int k = 0; k < ADMISSION_NKINDS; k++)
        a->lim.wait_ms[k] = bsettings_get(v, wait_keys[k], a->conf.wait_ms[k]);
    a->lim.fast_failure = bsettings_get(v, BSET_FAST_FAILURE, a->conf.fast_failure) != 0;
    return &a->lim;
}

/* }}} */

/* {{{ The rare path: a limit crossed */

struct crossing {
    int kind;
    int64_t in_lock_ms, wait_ms;
    bool page_cache_busy, wait_over;
    size_t queue;             /* what the remark calls "size of queue" */
};

/* RocketMQ's rule (and the answer when the policy fails). */
static int
default_remark(const struct crossing *x, char *out, size_t n)
{
    if (x->page_cache_busy)
        return snprintf(out, n, "[REJECTREQUEST]system busy, start flow control for a while");
    return snprintf(out, n, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                    "period in queue: %lldms, size of queue: %zu",
                    (long long)x->wait_ms, x->queue);
}

/* The last of duplicate keys (rmq_cmd_field), as the processors and
 * Java's HashMap take it: the policy must see the topic the request is
 * served for. */
static const struct rmq_str *
ext_field(const struct rmq_cmd *cmd, const char *key)
{
    return rmq_cmd_field(cmd, key, strlen(key));
}

/* The policy's facts (lua/rmq/policy/admission.lua). */
static void
push_facts(lua_State *L, struct admission *a, struct host *h, struct conn *c,
           const struct rmq_cmd *cmd, const struct crossing *x)
{
    const struct { const char *k; int64_t v; } ints[] = {
        { "code", cmd->code },
        { "putInLockMillis", x->in_lock_ms },
        { "osPageCacheBusyTimeOutMills", a->lim.page_cache_ms },
        { "waitMillis", x->wait_ms },
        { "waitLimitMillis", a->lim.wait_ms[x->kind] },
        { "inFlight", (int64_t)h->requests_live },
        { "connInFlight", (int64_t)c->inflight },
        { "worker", h->worker_id },
    };
    const struct { const char *k; bool v; } flags[] = {
        { "oneway", (cmd->flag & RMQ_RPC_ONEWAY) != 0 },
        { "pageCacheBusy", x->page_cache_busy },
        { "waitOver", x->wait_over },
        { "brokerFastFailureEnable", a->lim.fast_failure },
    };
    lua_createtable(L, 0, 16);
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        lua_pushinteger(L, (lua_Integer)ints[i].v);
        lua_setfield(L, -2, ints[i].k);
    }
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        lua_pushboolean(L, flags[i].v);
        lua_setfield(L, -2, flags[i].k);
    }
    lua_pushstring(L, kind_names[x->kind]);
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, c->peer);
    lua_setfield(L, -2, "peer");
    const struct rmq_str *t = ext_field(cmd, "topic");
    if (t == NULL && (cmd->code == RMQ_REQ_SEND_MESSAGE_V2 || cmd->code == RMQ_REQ_SEND_BATCH_MESSAGE))
        t = ext_field(cmd, "b");   /* SendMessageRequestHeaderV2 */
    if (t == NULL && cmd->code == RMQ_REQ_CONSUMER_SEND_MSG_BACK)
        t = ext_field(cmd, "originTopic");
    if (t != NULL) {
        lua_pushlstring(L, t->p, t->len);
        lua_setfield(L, -2, "topic");
    }
}

/* Asks the policy.  Returns true = busy (remark in out), false = admit. */
static bool
ask_policy(struct admission *a, struct host *h, struct conn *c, const struct rmq_cmd *cmd,
           const struct crossing *x, int64_t now, char *out, size_t n)
{
    lua_State *L = a->L;
    const char *why = NULL;
    int top = lua_gettop(L);
    bool busy = true;
    if (!lua_checkstack(L, 8)) {
        why = "no Lua stack";
    } else {
        lua_rawgeti(L, LUA_REGISTRYINDEX, a->decide_ref);
        push_facts(L, a, h, c, cmd, x);
        if (lua_pcall(L, 1, 2, 0) != LUA_OK) {
            why = lua_tostring(L, -1);
            if (why == NULL)
                why = "an error without a message";
        } else {
            const char *verdict = lua_tostring(L, -2);
            if (verdict != NULL && strcmp(verdict, "admit") == 0) {
                busy = false;
            } else if (verdict != NULL && strcmp(verdict, "busy") == 0) {
                size_t rl;
                const char *remark = lua_tolstring(L, -1, &rl);
                if (remark != NULL && rl > 0) {
                    if (rl >= n)
                        rl = n - 1;
                    memcpy(out, remark, rl);
                    out[rl] = '\0';
                } else {
                    (void)default_remark(x, out, n);
                }
            } else {
                why = "it answered neither \"admit\" nor \"busy\"";
            }
        }
    }
    if (why != NULL) {
        if (now >= a->quiet_until_ns) {
            log_warn("admission policy failed (%s); RocketMQ's rule decides", why);
            a->quiet_until_ns = now + (int64_t)60 * 1000000000;
        }
        (void)default_remark(x, out, n);
        busy = true;
    }
    lua_settop(L, top);
    return busy;
}

/* }}} */

/* RocketMQ's rejectRequest facts for a request of `code` now: false when
 * flow control does not apply or no limit is crossed (it is admitted
 * without asking the policy), true with *x and *now filled. */
static bool
crossing(struct admission *a, struct host *h, int32_t code, struct crossing *x, int64_t *now_out)
{
    int kind = admission_kind_of(code);
    if (kind < 0)
        return false;
    /* The frame's arrival when metrics took it; else one read of the
     * coarse clock, for the codes checked only: the limits it is held
     * against are whole milliseconds (waitTimeMillsInSendQueue 200,
     * osPageCacheBusyTimeOutMills 1000 by default), and the coarse
     * clock's tick (1-4 ms) is far under them: a wait stamped precisely
     * looks up to a tick shorter, time under the store's lock (stamped
     * coarse) against a precise frame time up to a tick longer. */
    int64_t now = h->metrics != NULL ? h->frame_ns : clock_mono_coarse_ns();
    const struct admission_limits *lim = admission_limits(a);
    *x = (struct crossing){ .kind = kind };
    if (kind == ADMISSION_SEND) {
        /* rejectRequest: isOSPageCacheBusy, whatever brokerFastFailureEnable */
        x->in_lock_ms = store_put_in_lock_ns(a->store, now) / 1000000;
        x->page_cache_busy = x->in_lock_ms > lim->page_cache_ms && x->in_lock_ms < PAGE_CACHE_STALE_MS;
    }
    if (lim->fast_failure) {
        x->wait_ms = reactor_wait_ns(&h->r, now) / 1000000;
        x->wait_over = x->wait_ms >= lim->wait_ms[kind];
    }
    *now_out = now;
    return x->page_cache_busy || x->wait_over;
}

bool
admission_quiet(void *arg, struct host *h, int32_t code)
{
    struct crossing x;
    int64_t now;
    return !crossing(arg, h, code, &x, &now);
}

bool
admission_gate(void *arg, struct host *h, struct conn *c, const struct rmq_cmd *cmd)
{
    struct admission *a = arg;
    struct crossing x;
    int64_t now;
    if (!crossing(a, h, cmd->code, &x, &now))
        return false;
    x.queue = h->requests_live;
    char remark[REMARK_MAX];
    if (!ask_policy(a, h, c, cmd, &x, now, remark, sizeof(remark)))
        return false;
    struct native_req r = {
        .h = h, .c = c, .cmd = cmd, .start_ns = now,
        .oneway = (cmd->flag & RMQ_RPC_ONEWAY) != 0,
        .metrics = h->metrics, .enc = &h->enc,
    };
    (void)native_reply(&r, RMQ_RESP_SYSTEM_BUSY, remark, strlen(remark), NULL, 0, NULL, 0, NULL);
    return true;
}
