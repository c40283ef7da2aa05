/*
 * l_store: the rmq.store module: the broker's message store (src/store/)
 * for Lua.
 *
 *   store.open(dir, opts) -> st | nil, err
 *       opts: the conf keys of MessageStoreConfig (storePathCommitLog,
 *       mappedFileSizeCommitLog, mappedFileSizeConsumeQueue, flushDiskType,
 *       flushIntervalCommitLog, flushCommitLogLeastPages,
 *       flushCommitLogThoroughInterval, flushIntervalConsumeQueue,
 *       flushConsumeQueueLeastPages, flushConsumeQueueThoroughInterval,
 *       syncFlushTimeout, fileReservedTime, deleteWhen,
 *       diskMaxUsedSpaceRatio, cleanFileForciblyEnable, maxMessageSize,
 *       checkCRCOnRecover, warmMapedFileEnable, commitLogWarmWindowBytes,
 *       transientStorePoolEnable, commitLogStagingBytes,
 *       messageIndexEnable, indexMetaBufferBytes,
 *       maxHashSlotNum, maxIndexNum, maxMsgsNumBatch,
 *       accessMessageInMemoryMaxRatio, maxTransfer{Bytes,Count}OnMessageIn
 *       {Memory,Disk}, pullReadGapBytes, pullZeroCopyMinBytes, brokerRole, messageDelayLevel) plus storeHost
 *       ("ip:port" written as STOREHOST; default "127.0.0.1:10911").
 *       Other keys are ignored, so a whole broker conf can be passed.
 *   store.attach(st:share()) -> st      another handle on the same store
 *       (another Lua state / worker); the store closes with its last handle
 *
 *   st:put(msg) -> status, phy, queueOffset, wroteBytes, storeTs, msgId
 *                | status, reason                          (not stored)
 *       msg = {topic=, queueId=0, body=, flag=0, properties="",
 *              tags= | tagsCode=, bornTimestamp=now, bornHost=storeHost,
 *              storeHost=opts.storeHost, sysFlag=0, reconsumeTimes=0,
 *              preparedTransactionOffset=0, wait=true, defer=false}
 *       In SYNC_FLUSH mode with wait ~= false it waits (yielding in a
 *       task, blocking in a plain script) until an fsync covers the
 *       message; status is then PUT_OK or FLUSH_DISK_TIMEOUT (stored
 *       either way).  defer = true only stages it (access.h): neither
 *       visible nor written until st:commit() (or a get, or a put
 *       without defer) -- what the broker's send path does.
 *   st:commit() -> true | nil, err       write what deferred puts staged
 *   st:put_batch(msg) -> status, phy, queueOffset, wroteBytes, storeTs,
 *       msgIds ("id,id,..."), count      msg.body = the batch encoding
 *   st:get(topic, queueId, offset, maxCount [, tagCodes [, filter
 *       [, withBody]]]) -> status, records|nil, nextOffset, minOffset,
 *       maxOffset, maxPhyOffset, maxPhyOffsetPulling,
 *       suggestPullingFromSlave [, filterCalls, filterDropped,
 *       filterError, filterNanos]    filter: a compiled SQL92 filter (rmq.filter) or
 *       fn(properties, tags, bodySize [, body]) -> keep, evaluated on
 *       each record the tag codes let through (l_filter.h)
 *   st:message(phyOffset) -> records|nil          VIEW_MESSAGE_BY_ID
 *   st:query(topic, key, maxNum, beginTs, endTs) -> records|nil,
 *       indexLastUpdateTimestamp, indexLastUpdatePhyoffset
 *   st:min_offset(topic, q), st:max_offset(topic, q),
 *   st:offset_by_time(topic, q, ts), st:earliest_time([topic, q])
 *   st:time_at(topic, q, offset) -> storeTimestamp | -1   (the message
 *       at offset; getMessageStoreTimeStamp)
 *   st:empty_queue(topic, q) -> files deleted | nil (no such queue)
 *       all its files but the last deleted, min moved to max (CLEAN_UNUSED_TOPIC)
 *   st:cq_units(topic, q, index, count) -> nil (no such queue) |
 *       min, max, {{physicOffset=, physicSize=, tagsCode=}, ...}  the
 *       consume queue's entries from index (at most count; QUERY_CONSUME_QUEUE)
 *   st:min_phy(), st:max_phy(), st:flushed()
 *   st:flush() -> true | nil, err        sync the commit log now
 *   st:wait_flushed(offset [, timeout_ms]) -> true | nil, "timeout"
 *   st:delete_expired{reservedMs=, force=, now=} -> stats table
 *   st:writable() -> bool, reason; st:check_writable() -> bool
 *   st:set_role(brokerRole, fenced); st:role() -> brokerRole, fenced
 *       the replica role at run time (store_set_role: fenced refuses
 *       every local put)
 *   st:index_sync()                      index everything now
 *   st:prewarm(bytes) -> bytes           pre-fault the current file now
 *   st:queues() -> {{topic=, queueId=, min=, max=}, ...}
 *   st:stats_sampler(map, cluster) -> sampler: sampler:sample(now_ms, at_boot),
 *       sampler:size() -> items, queue bases (broker/stats_sampler.h)
 *   st:queues_max_sum() -> the sum of every queue's max offset
 *   st:stats() -> table (recovery facts, offsets, counts, diskRatio (%),
 *       commitLogDisk{Total,Free,Used}, consumeQueueDisk{Total,Free,Used})
 *   st:share() -> lightuserdata;  st:close()
 *   st:timer_hold(properties, topic, queueId) -> nil (not a held timer
 *       message: store as is) | heldProperties, TIMER_OUT_MS (store in
 *       rmq_sys_wheel_timer queue 0, tagsCode = TIMER_OUT_MS) | false,
 *       "illegal" | "disabled", remark        (store/timer.h's rule)
 *   store.timer_recall_handle(topic, brokerName, timerOutMs, uniqKey)
 *       -> handle (5.x's RecallMessageHandle.HandleV1) | nil, err
 *   store.timer_now() -> ms             the timer clock (errinj timer_clock_ms)
 *   st:timer_discard() -> true | nil, err   removes the (closed) timer
 *       service's files (timer_discard: a demoted master's)
 *   st:timer_open() -> tm | nil, err      the timer service (one per
 *       store, main thread); tm:tick([budget]) -> 1 more | 0 idle | -1,
 *       "topic@qid\n..." queues written; tm:info() -> table;
 *       tm:close() (also __gc)
 *
 *   records: #r, r:size(), r:tostring() (one copy of every byte),
 *            r:get(i) (record i), r:release() (unpins; also __gc/__close)
 *
 *   store.errinj(name [, value]) -> value     fault injection (errinj.h)
 *   store.append_durable(path, data) -> true | nil, err (append, fdatasync)
 *   store.atomic_write(path, data [, mode]) -> true | nil, err   (temp,
 *                                             fsync, .bak kept, rename; see
 *                                             rmq.configfile); with mode the
 *                                             file keeps its permission bits
 *                                             or is created with mode
 *
 *   The store's benchmark loops are the tools module rmq.store_bench
 *   (src/tools/l_store_bench.c, not linked into rmq-server).
 *
 * Errors: misuse raises; expected failures return status + reason.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "broker/offset_table.h"
#include "broker/stats_sampler.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/jstr.h"
#include "core/metrics.h"
#include "core/smap.h"
#include "runtime/host.h"
#include "lua/l_err.h"
#include "lua/l_modules.h"
#include "lua/l_store.h"
#include "lua/l_filter.h"
#include "runtime/syncwait.h"
#include "store/retention.h"
#include "store/timer.h"

#define LSTORE_TYPE "rmq.store.store"


/* {{{ Handles */

struct lstore {
    struct store *s;            /* NULL once closed */
    struct syncwait *n;         /* created on the first sync wait */
    struct host_addr store_host;
    /* Last parsed bornHost: most puts on a handle repeat it. */
    char born_str[64];
    size_t born_len;
    struct host_addr born;
};

static struct lstore *
check_store_at(lua_State *L, int idx)
{
    return LERR_CHECKOPEN(L, idx, struct lstore, s, LSTORE_TYPE, "store is closed");
}

struct store *
lstore_check(lua_State *L, int idx, struct host_addr *store_host)
{
    struct lstore *ls = check_store_at(L, idx);
    if (store_host != NULL)
        *store_host = ls->store_host;
    return ls->s;
}

static struct lstore *
check_store(lua_State *L)
{
    return check_store_at(L, 1);
}

/* }}} */

/* {{{ Options */

int64_t
lstore_opt_int(lua_State *L, int t, const char *k, int64_t def)
{
    lua_getfield(L, t, k);
    int64_t v = def;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = (int64_t)lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "opts.%s must be an integer", k);
    }
    lua_pop(L, 1);
    return v;
}

bool
lstore_opt_bool(lua_State *L, int t, const char *k, bool def)
{
    lua_getfield(L, t, k);
    bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Copies a string option into buf (n bytes); false if absent. */
bool
lstore_opt_str(lua_State *L, int t, const char *k, char *buf, size_t n)
{
    lua_getfield(L, t, k);
    bool have = !lua_isnil(L, -1);
    if (have) {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        if (s == NULL)
            luaL_error(L, "opts.%s must be a string", k);
        if (len >= n)
            luaL_error(L, "opts.%s is too long", k);
        memcpy(buf, s, len + 1);
    }
    lua_pop(L, 1);
    return have;
}

static void
read_conf(lua_State *L, int t, struct store_conf *c, char *host, size_t hn)
{
    store_conf_defaults(c);
    if (lua_isnoneornil(L, t))
        return;
    luaL_checktype(L, t, LUA_TTABLE);
    lstore_opt_str(L, t, "storePathCommitLog", c->commitlog_dir,
            sizeof(c->commitlog_dir));
    c->clog_file_size = lstore_opt_int(L, t, "mappedFileSizeCommitLog", c->clog_file_size);
    c->cq_file_size = lstore_opt_int(L, t, "mappedFileSizeConsumeQueue", c->cq_file_size);
    c->cq_max_mapped = lstore_opt_int(L, t, "maxMappedConsumeQueueFiles", c->cq_max_mapped);
    char buf[64];
    if (lstore_opt_str(L, t, "flushDiskType", buf, sizeof(buf))) {
        if (strcmp(buf, "SYNC_FLUSH") == 0)
            c->sync_flush = true;
        else if (strcmp(buf, "ASYNC_FLUSH") == 0)
            c->sync_flush = false;
        else
            luaL_error(L, "opts.flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH");
    }
    c->flush_interval_ms = (int)lstore_opt_int(L, t, "flushIntervalCommitLog", c->flush_interval_ms);
    c->flush_least_pages = (int)lstore_opt_int(L, t, "flushCommitLogLeastPages", c->flush_least_pages);
    c->flush_thorough_ms = (int)lstore_opt_int(L, t, "flushCommitLogThoroughInterval", c->flush_thorough_ms);
    c->cq_flush_interval_ms = (int)lstore_opt_int(L, t, "flushIntervalConsumeQueue", c->cq_flush_interval_ms);
    c->cq_flush_least_pages = (int)lstore_opt_int(L, t, "flushConsumeQueueLeastPages", c->cq_flush_least_pages);
    c->cq_flush_thorough_ms = (int)lstore_opt_int(L, t, "flushConsumeQueueThoroughInterval", c->cq_flush_thorough_ms);
    c->sync_flush_timeout_ms = (int)lstore_opt_int(L, t, "syncFlushTimeout", c->sync_flush_timeout_ms);
    c->file_reserved_hours = (int)lstore_opt_int(L, t, "fileReservedTime", c->file_reserved_hours);
    lstore_opt_str(L, t, "deleteWhen", c->delete_when, sizeof(c->delete_when));
    c->disk_max_used_ratio = (int)lstore_opt_int(L, t, "diskMaxUsedSpaceRatio", c->disk_max_used_ratio);
    c->clean_forcibly = lstore_opt_bool(L, t, "cleanFileForciblyEnable", c->clean_forcibly);
    c->max_message_size = lstore_opt_int(L, t, "maxMessageSize", c->max_message_size);
    c->check_crc_on_recover = lstore_opt_bool(L, t, "checkCRCOnRecover", c->check_crc_on_recover);
    c->recover_progress_ms = (int)lstore_opt_int(L, t, "recoverProgressIntervalMillis", c->recover_progress_ms);
    c->warm_files = lstore_opt_bool(L, t, "warmMapedFileEnable", c->warm_files);
    c->warm_window = lstore_opt_int(L, t, "commitLogWarmWindowBytes", c->warm_window);
    c->staging = lstore_opt_bool(L, t, "transientStorePoolEnable", c->staging);
    c->staging_bytes = lstore_opt_int(L, t, "commitLogStagingBytes", c->staging_bytes);
    c->index_enable = lstore_opt_bool(L, t, "messageIndexEnable", c->index_enable);
    c->index_meta_bytes = lstore_opt_int(L, t, "indexMetaBufferBytes", c->index_meta_bytes);
    c->max_hash_slots = lstore_opt_int(L, t, "maxHashSlotNum", c->max_hash_slots);
    c->max_index_num = lstore_opt_int(L, t, "maxIndexNum", c->max_index_num);
    c->max_msgs_per_query = (int)lstore_opt_int(L, t, "maxMsgsNumBatch", c->max_msgs_per_query);
    c->access_in_memory_ratio = (int)lstore_opt_int(L, t, "accessMessageInMemoryMaxRatio", c->access_in_memory_ratio);
    c->max_bytes_in_memory = (int)lstore_opt_int(L, t, "maxTransferBytesOnMessageInMemory", c->max_bytes_in_memory);
    c->pull_read_gap = (int)lstore_opt_int(L, t, "pullReadGapBytes", c->pull_read_gap);
    c->pull_zero_copy_min = (int)lstore_opt_int(L, t, "pullZeroCopyMinBytes", c->pull_zero_copy_min);
    c->drop_cache_behind = lstore_opt_int(L, t, "commitLogDropCacheBehindBytes", c->drop_cache_behind);
    c->drop_cache_reader_s = (int)lstore_opt_int(L, t, "commitLogDropCacheReaderSeconds", c->drop_cache_reader_s);
    c->max_count_in_memory = (int)lstore_opt_int(L, t, "maxTransferCountOnMessageInMemory", c->max_count_in_memory);
    c->max_bytes_on_disk = (int)lstore_opt_int(L, t, "maxTransferBytesOnMessageInDisk", c->max_bytes_on_disk);
    c->max_count_on_disk = (int)lstore_opt_int(L, t, "maxTransferCountOnMessageInDisk", c->max_count_on_disk);
    if (lstore_opt_str(L, t, "brokerRole", buf, sizeof(buf))) {
        c->slave = strcmp(buf, "SLAVE") == 0;
        c->sync_master = strcmp(buf, "SYNC_MASTER") == 0;
    }
    c->slave_timeout_ms = (int)lstore_opt_int(L, t, "slaveTimeout", c->slave_timeout_ms);
    c->ha_fallbehind_max = lstore_opt_int(L, t, "haSlaveFallbehindMax", c->ha_fallbehind_max);
    char levels[512];
    if (lstore_opt_str(L, t, "messageDelayLevel", levels, sizeof(levels)) &&
        store_conf_delay_levels(c, levels) != 0)
        luaL_error(L, "%s", err_msg());
    c->timer_enable = lstore_opt_bool(L, t, "timerWheelEnable", c->timer_enable);
    int64_t max_sec = lstore_opt_int(L, t, "timerMaxDelaySec", c->timer_max_delay_ms / 1000);
    if (max_sec < 1 || max_sec > INT32_MAX)
        luaL_error(L, "opts.timerMaxDelaySec must be 1 to %d", INT32_MAX);
    c->timer_max_delay_ms = max_sec * 1000;
    c->timer_precision_ms = timer_precision_snap(
        lstore_opt_int(L, t, "timerPrecisionMs", c->timer_precision_ms));
    c->timer_flush_ms = (int)lstore_opt_int(L, t, "timerFlushIntervalMs", c->timer_flush_ms);
    c->timer_log_file_size = lstore_opt_int(L, t, "mappedFileSizeTimerLog", c->timer_log_file_size);
    if (c->timer_flush_ms < 1 || c->timer_log_file_size < 4096)
        luaL_error(L, "opts.timerFlushIntervalMs must be >= 1 and mappedFileSizeTimerLog >= 4096");
    lstore_opt_str(L, t, "storeHost", host, hn);
    if (c->flush_interval_ms < 1 || c->cq_flush_interval_ms < 1 ||
        c->sync_flush_timeout_ms < 1 || c->slave_timeout_ms < 1 || c->max_message_size < 1 ||
        c->max_count_in_memory < 1 || c->max_count_on_disk < 1)
        luaL_error(L, "store opts: intervals, timeouts and limits must be >= 1");
}

/* }}} */

/* {{{ Open, attach, close */

static struct lstore *
new_handle(lua_State *L)
{
    struct lstore *ls = lua_newuserdatauv(L, sizeof(*ls), 0);
    memset(ls, 0, sizeof(*ls));
    luaL_setmetatable(L, LSTORE_TYPE);
    return ls;
}

static int
lstore_open(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    struct store_conf conf;
    char host[64] = "127.0.0.1:10911";
    read_conf(L, 2, &conf, host, sizeof(host));
    struct host_addr sh;
    if (host_addr_parse(host, strlen(host), &sh) != 0)
        return luaL_error(L, "opts.storeHost: %s", err_msg());
    /* The handle exists (closed) before the store does: a raise after
     * store_open could not leak it. */
    struct lstore *ls = new_handle(L);
    ls->store_host = sh;
    struct store *s = store_open(dir, &conf);
    if (s == NULL)
        return lerr_push(L);
    ls->s = s;
    return 1;
}

static int
lstore_share(lua_State *L)
{
    struct lstore *ls = check_store(L);
    lua_pushlightuserdata(L, ls->s);
    return 1;
}

static int
lstore_attach(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
    struct store *s = lua_touserdata(L, 1);
    const char *host = luaL_optstring(L, 2, "127.0.0.1:10911");
    struct host_addr sh;
    if (host_addr_parse(host, strlen(host), &sh) != 0)
        return luaL_error(L, "storeHost: %s", err_msg());
    struct lstore *ls = new_handle(L);
    ls->store_host = sh;
    store_ref(s);
    ls->s = s;
    return 1;
}

static void
handle_close(struct lstore *ls)
{
    if (ls->n != NULL) {
        syncwait_close(ls->n);
        ls->n = NULL;
    }
    if (ls->s != NULL) {
        struct store *s = ls->s;
        ls->s = NULL;
        store_unref(s);
    }
}

static int
lstore_close(lua_State *L)
{
    struct lstore *ls = luaL_checkudata(L, 1, LSTORE_TYPE);
    if (ls->n != NULL && syncwait_pending(ls->n))
        return luaL_error(L, "store:close(): sync-flush waits are pending");
    handle_close(ls);
    return 0;
}

static int
lstore_gc(lua_State *L)
{
    struct lstore *ls = luaL_checkudata(L, 1, LSTORE_TYPE);
    handle_close(ls);
    return 0;
}

/* }}} */

/* {{{ Put */

static const char *
field_str(lua_State *L, int t, const char *k, size_t *len, bool required)
{
    lua_getfield(L, t, k);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (required)
            luaL_error(L, "msg.%s is required", k);
        *len = 0;
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "msg.%s must be a string", k);
    const char *s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);  /* still referenced by the message table */
    return s;
}

static int64_t
field_int(lua_State *L, int t, const char *k, int64_t def)
{
    lua_getfield(L, t, k);
    int64_t v = def;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = (int64_t)lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "msg.%s must be an integer", k);
    }
    lua_pop(L, 1);
    return v;
}

static void
parse_host_field(lua_State *L, struct lstore *ls, int t, const char *k,
                 struct host_addr *out, const struct host_addr *def,
                 bool cache)
{
    size_t n;
    const char *s = field_str(L, t, k, &n, false);
    if (s == NULL) {
        *out = *def;
        return;
    }
    if (cache && n == ls->born_len && n < sizeof(ls->born_str) &&
        memcmp(s, ls->born_str, n) == 0) {
        *out = ls->born;
        return;
    }
    if (host_addr_parse(s, n, out) != 0)
        luaL_error(L, "msg.%s: %s", k, err_msg());
    if (cache && n < sizeof(ls->born_str)) {
        memcpy(ls->born_str, s, n);
        ls->born_len = n;
        ls->born = *out;
    }
}

/* Reads msg (at index t) into m; strings stay owned by the table. */
static void
read_msg(lua_State *L, struct lstore *ls, int t, struct store_msg *m,
         bool *wait)
{
    luaL_checktype(L, t, LUA_TTABLE);
    memset(m, 0, sizeof(*m));
    m->topic = field_str(L, t, "topic", &m->topic_len, true);
    size_t n;
    m->body = (const uint8_t *)field_str(L, t, "body", &n, true);
    m->body_len = n;
    m->props = field_str(L, t, "properties", &m->props_len, false);
    if (m->props == NULL)
        m->props = "";
    int64_t qid = field_int(L, t, "queueId", 0);
    if (qid < 0 || qid > INT32_MAX)
        luaL_error(L, "msg.queueId out of range");
    m->qid = (int32_t)qid;
    m->flag = (int32_t)field_int(L, t, "flag", 0);
    m->sysflag = (int32_t)field_int(L, t, "sysFlag", 0);
    m->reconsume = (int32_t)field_int(L, t, "reconsumeTimes", 0);
    m->born_ts = field_int(L, t, "bornTimestamp", clock_wall_ms());
    m->prep_tx_off = field_int(L, t, "preparedTransactionOffset", 0);
    lua_getfield(L, t, "tagsCode");
    if (!lua_isnil(L, -1)) {
        int ok;
        m->tags_code = (int64_t)lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "msg.tagsCode must be an integer");
        m->has_tags_code = true;
    }
    lua_pop(L, 1);
    if (!m->has_tags_code) {
        const char *tags = field_str(L, t, "tags", &n, false);
        if (tags != NULL) {
            m->tags_code = n > 0 ? java_hash(tags, n) : 0;
            m->has_tags_code = true;
        }
    }
    parse_host_field(L, ls, t, "storeHost", &m->store, &ls->store_host, false);
    parse_host_field(L, ls, t, "bornHost", &m->born, &m->store, true);
    lua_getfield(L, t, "wait");
    *wait = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, t, "defer");
    m->defer = lua_toboolean(L, -1);
    lua_pop(L, 1);
}

static int
push_put_failure(lua_State *L, const struct store_put_result *r)
{
    lua_pushstring(L, put_status_name(r->status));
    lua_pushstring(L, err_msg());
    return 2;
}

/* Waits for `end` to be durable; the caller pushed `nvals` results. */
static int
wait_flush(lua_State *L, struct lstore *ls, int64_t end, int timeout_ms,
           int nvals, bool is_put)
{
    if (ls->n == NULL) {
        ls->n = syncwait_new(L, ls->s);
        if (ls->n == NULL)
            return luaL_error(L, "out of memory");
    }
    return syncwait_wait(L, ls->n, end, timeout_ms, nvals, is_put);
}

static int
lstore_put(lua_State *L)
{
    struct lstore *ls = check_store(L);
    struct store_msg m;
    bool wait;
    read_msg(L, ls, 2, &m, &wait);
    struct store_put_result r;
    struct metrics_shard *ms = host_of(L)->metrics;
    int64_t t0 = ms != NULL ? clock_mono_ns() : 0;
    if (store_put(ls->s, &m, &r) != PUT_OK)
        return push_put_failure(L, &r);
    if (ms != NULL)
        metrics_put_latency(ms, clock_mono_ns() - t0);
    lua_pushinteger(L, r.phy);
    lua_pushinteger(L, r.qoff);
    lua_pushinteger(L, r.wrote);
    lua_pushinteger(L, r.store_ts);
    char id[64];
    size_t idn = clog_msgid(id, &m.store, r.phy);
    lua_pushlstring(L, id, idn);
    if (store_put_must_wait(ls->s, wait, r.end))
        return wait_flush(L, ls, r.end, ls->s->conf.sync_flush_timeout_ms, 5,
                          true);
    lua_pushliteral(L, "PUT_OK");
    lua_rotate(L, -6, 1);
    return 6;
}

static int
lstore_put_batch(lua_State *L)
{
    struct lstore *ls = check_store(L);
    struct store_msg m;
    bool wait;
    read_msg(L, ls, 2, &m, &wait);
    int cap = store_batch_cap(m.body, m.body_len);
    /* Work space in a userdata: collected even if something raises. */
    struct clog_msg *work = lua_newuserdatauv(L, sizeof(*work) * (size_t)cap, 0);
    struct store_put_result r;
    struct metrics_shard *ms = host_of(L)->metrics;
    int64_t t0 = ms != NULL ? clock_mono_ns() : 0;
    if (store_put_batch(ls->s, &m, work, cap, &r) != PUT_OK)
        return push_put_failure(L, &r);
    if (ms != NULL)
        metrics_put_latency(ms, clock_mono_ns() - t0);
    int n = r.count;
    lua_pushinteger(L, r.phy);
    lua_pushinteger(L, r.qoff);
    lua_pushinteger(L, r.wrote);
    lua_pushinteger(L, r.store_ts);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < n; i++) {
        char id[64];
        size_t idn = clog_msgid(id, &m.store, work[i].phy);
        if (i > 0)
            luaL_addchar(&b, ',');
        luaL_addlstring(&b, id, idn);
    }
    luaL_pushresult(&b);
    lua_pushinteger(L, n);
    if (store_put_must_wait(ls->s, wait, r.end))
        return wait_flush(L, ls, r.end, ls->s->conf.sync_flush_timeout_ms, 6,
                          true);
    lua_pushliteral(L, "PUT_OK");
    lua_rotate(L, -7, 1);
    return 7;
}

static int
lstore_wait_flushed(lua_State *L)
{
    struct lstore *ls = check_store(L);
    int64_t end = (int64_t)luaL_checkinteger(L, 2);
    int timeout = (int)luaL_optinteger(L, 3, ls->s->conf.sync_flush_timeout_ms);
    if (store_flushed(ls->s) >= end) {
        lua_pushboolean(L, 1);
        return 1;
    }
    return wait_flush(L, ls, end, timeout, 0, false);
}

static int
lstore_commit(lua_State *L)
{
    struct lstore *ls = check_store(L);
    return lerr_result(L, store_commit(ls->s));
}

static int
lstore_flush(lua_State *L)
{
    struct lstore *ls = check_store(L);
    return lerr_result(L, store_flush(ls->s));
}

/* }}} */

/* {{{ Records */

static int
records_release(lua_State *L)
{
    struct lrecords *r = luaL_checkudata(L, 1, LSTORE_RECORDS_TYPE);
    store_slices_release(&r->sl);
    return 0;
}

struct lrecords *
lstore_check_records(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, LSTORE_RECORDS_TYPE);
}

/* A records userdata for up to cap slices, empty; on the stack. */
static struct lrecords *
new_records(lua_State *L, int cap)
{
    if (cap < 1)
        cap = 1;
    size_t sz = sizeof(struct lrecords) + (size_t)cap * sizeof(struct iovec) +
                (size_t)cap * sizeof(struct mfile *);
    struct lrecords *r = lua_newuserdatauv(L, sz, 0);
    memset(r, 0, sizeof(*r));
    r->sl.cap = cap;
    r->sl.iov = (struct iovec *)(void *)(r + 1);
    r->sl.pins = (struct mfile **)(void *)(r->sl.iov + cap);
    luaL_setmetatable(L, LSTORE_RECORDS_TYPE);
    return r;
}

static int
records_len(lua_State *L)
{
    struct lrecords *r = lstore_check_records(L, 1);
    lua_pushinteger(L, r->sl.n);
    return 1;
}

static int
records_size(lua_State *L)
{
    struct lrecords *r = lstore_check_records(L, 1);
    lua_pushinteger(L, (lua_Integer)r->sl.bytes);
    return 1;
}

static int
records_tostring(lua_State *L)
{
    struct lrecords *r = lstore_check_records(L, 1);
    luaL_Buffer b;
    char *p = luaL_buffinitsize(L, &b, r->sl.bytes);
    for (int i = 0; i < r->sl.n; i++) {
        memcpy(p, r->sl.iov[i].iov_base, r->sl.iov[i].iov_len);
        p += r->sl.iov[i].iov_len;
    }
    luaL_pushresultsize(&b, r->sl.bytes);
    return 1;
}

static int
records_get(lua_State *L)
{
    struct lrecords *r = lstore_check_records(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    luaL_argcheck(L, i >= 1 && i <= r->sl.n, 2, "no such record");
    lua_pushlstring(L, r->sl.iov[i - 1].iov_base, r->sl.iov[i - 1].iov_len);
    return 1;
}

/* }}} */

/* {{{ Get and look-ups */

static int
lstore_get(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    lua_Integer qid = luaL_checkinteger(L, 3);
    int64_t offset = (int64_t)luaL_checkinteger(L, 4);
    lua_Integer max = luaL_checkinteger(L, 5);
    luaL_argcheck(L, qid >= 0 && qid <= INT32_MAX, 3, "bad queue id");
    luaL_argcheck(L, max >= 1 && max <= 65536, 5, "maxCount must be 1..65536");
    lua_settop(L, 8);   /* the filter stays at 7 whatever is pushed below */
    int32_t *codes = NULL;
    int ncodes = 0;
    if (!lua_isnoneornil(L, 6)) {
        luaL_checktype(L, 6, LUA_TTABLE);
        ncodes = (int)luaL_len(L, 6);
        codes = lua_newuserdatauv(L, sizeof(*codes) * (size_t)(ncodes + 1), 0);
        for (int i = 0; i < ncodes; i++) {
            lua_rawgeti(L, 6, i + 1);
            int ok;
            codes[i] = (int32_t)lua_tointegerx(L, -1, &ok);
            if (!ok)
                return luaL_error(L, "tag codes must be integers");
            lua_pop(L, 1);
        }
    }
    const struct store_conf *c = &ls->s->conf;
    int cap = (int)max;
    int limit = c->max_count_in_memory > c->max_count_on_disk
                    ? c->max_count_in_memory : c->max_count_on_disk;
    if (cap > limit)
        cap = limit;
    /* offset is any int64 a client sent (a pull's queueOffset, even
     * INT64_MIN): no subtraction that can overflow.  Below 0 the store
     * answers OFFSET_TOO_SMALL without reading; cap stays the limit. */
    int64_t qmax = store_max_offset(ls->s, topic, tlen, (int32_t)qid);
    if (offset >= qmax)
        cap = 1;
    else if (offset >= 0 && qmax - offset < cap)
        cap = (int)(qmax - offset);
    struct record_match m;
    bool filtered = false;
    if (!lua_isnoneornil(L, 7)) {
        filtered = lfilter_matcher(L, 7, lua_toboolean(L, 8), &m);
        luaL_argcheck(L, filtered, 7, "a compiled filter or a function expected");
    }
    struct lrecords *rec = new_records(L, cap);
    struct store_get_result r;
    store_get_match(ls->s, topic, tlen, (int32_t)qid, offset, (int)max, codes,
                    ncodes, filtered ? record_match : NULL, filtered ? &m : NULL,
                    &rec->sl, &r);
    lua_pushstring(L, get_status_name(r.status));
    if (rec->sl.n > 0)
        lua_pushvalue(L, -2);
    else
        lua_pushnil(L);
    lua_pushinteger(L, r.next);
    lua_pushinteger(L, r.min);
    lua_pushinteger(L, r.max);
    lua_pushinteger(L, r.max_phy);
    lua_pushinteger(L, r.max_phy_pulling);
    lua_pushboolean(L, r.suggest_slave);
    if (!filtered)
        return 8;
    lua_pushinteger(L, m.calls);
    lua_pushinteger(L, m.dropped);
    if (m.err[0] != 0)
        lua_pushstring(L, m.err);
    else
        lua_pushnil(L);
    lua_pushinteger(L, m.nanos);
    return 12;
}

static int
lstore_message(lua_State *L)
{
    struct lstore *ls = check_store(L);
    int64_t phy = (int64_t)luaL_checkinteger(L, 2);
    /* A client's offset (VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK):
     * outside the commit log it is nothing, before the store's range
     * arithmetic (phy + length) could overflow on an extreme value. */
    if (phy < 0 || phy >= store_max_phy(ls->s)) {
        lua_pushnil(L);
        return 1;
    }
    struct lrecords *rec = new_records(L, 1);
    if (store_read_at(ls->s, phy, &rec->sl) != 0)
        lua_pushnil(L);
    return 1;
}

static int
lstore_query(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen, klen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    const char *key = luaL_checklstring(L, 3, &klen);
    int max = (int)luaL_optinteger(L, 4, 32);
    int64_t begin = (int64_t)luaL_optinteger(L, 5, 0);
    int64_t end = (int64_t)luaL_optinteger(L, 6, INT64_MAX);
    if (max < 1)
        max = 1;
    if (max > 4096)
        max = 4096;
    struct lrecords *rec = new_records(L, max);
    int64_t last_ts, last_phy;
    int n = store_query(ls->s, topic, tlen, key, klen, max, begin, end,
                        &rec->sl, &last_ts, &last_phy);
    if (n == 0)
        lua_pushnil(L);
    else
        lua_pushvalue(L, -1);
    lua_pushinteger(L, last_ts);
    lua_pushinteger(L, last_phy);
    return 3;
}

static int
lstore_min_offset(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    lua_pushinteger(L, store_min_offset(ls->s, topic, tlen,
                                        (int32_t)luaL_checkinteger(L, 3)));
    return 1;
}

static int
lstore_max_offset(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    lua_pushinteger(L, store_max_offset(ls->s, topic, tlen,
                                        (int32_t)luaL_checkinteger(L, 3)));
    return 1;
}

static int
lstore_offset_by_time(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    int32_t qid = (int32_t)luaL_checkinteger(L, 3);
    int64_t ts = (int64_t)luaL_checkinteger(L, 4);
    lua_pushinteger(L, store_offset_by_time(ls->s, topic, tlen, qid, ts));
    return 1;
}

static int
lstore_earliest_time(lua_State *L)
{
    struct lstore *ls = check_store(L);
    if (lua_isnoneornil(L, 2)) {
        lua_pushinteger(L, store_earliest_time_all(ls->s));
        return 1;
    }
    size_t tlen;
    const char *topic = luaL_checklstring(L, 2, &tlen);
    lua_pushinteger(L, store_earliest_time(ls->s, topic, tlen,
                                           (int32_t)luaL_checkinteger(L, 3)));
    return 1;
}

/* Arguments 2 and 3: topic and queue id (0..INT32_MAX). */
static const char *
check_queue_args(lua_State *L, size_t *tlen, int32_t *qid)
{
    const char *topic = luaL_checklstring(L, 2, tlen);
    lua_Integer q = luaL_checkinteger(L, 3);
    luaL_argcheck(L, q >= 0 && q <= INT32_MAX, 3, "bad queue id");
    *qid = (int32_t)q;
    return topic;
}

static int
lstore_time_at(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    int32_t qid;
    const char *topic = check_queue_args(L, &tlen, &qid);
    int64_t off = (int64_t)luaL_checkinteger(L, 4);
    lua_pushinteger(L, store_time_at_offset(ls->s, topic, tlen, qid, off));
    return 1;
}

static int
lstore_empty_queue(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    int32_t qid;
    const char *topic = check_queue_args(L, &tlen, &qid);
    int n = store_empty_queue(ls->s, topic, tlen, qid);
    if (n < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, n);
    return 1;
}

/* The units are read below the queue's published max, as a pull does
 * (cq_read needs no lock); a unit whose file retention removed ends the
 * list, as Java's getIndexBuffer answers null for it. */
static int
lstore_cq_units(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t tlen;
    int32_t qid;
    const char *topic = check_queue_args(L, &tlen, &qid);
    int64_t idx = (int64_t)luaL_checkinteger(L, 4);
    lua_Integer count = luaL_checkinteger(L, 5);
    luaL_argcheck(L, count >= 0 && count <= 65536, 5, "count must be 0..65536");
    struct cq *c = cqt_find(&ls->s->cqs, topic, tlen, qid);
    if (c == NULL) {
        lua_pushnil(L);
        return 1;
    }
    int64_t min = cq_min(c), max = cq_max(c);
    lua_pushinteger(L, min);
    lua_pushinteger(L, max);
    lua_createtable(L, 0, 0);
    if (idx < min || idx >= max)
        return 3;
    int n = 0;
    for (int64_t i = idx; i < max && n < count; i++) {
        struct cq_entry e;
        if (cq_read(c, i, &e) != 0)
            break;
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, e.phy);
        lua_setfield(L, -2, "physicOffset");
        lua_pushinteger(L, e.size);
        lua_setfield(L, -2, "physicSize");
        lua_pushinteger(L, e.tags);
        lua_setfield(L, -2, "tagsCode");
        lua_rawseti(L, -2, ++n);
    }
    return 3;
}

static int
lstore_min_phy(lua_State *L)
{
    lua_pushinteger(L, store_min_phy(check_store(L)->s));
    return 1;
}

static int
lstore_max_phy(lua_State *L)
{
    lua_pushinteger(L, store_max_phy(check_store(L)->s));
    return 1;
}

static int
lstore_flushed(lua_State *L)
{
    lua_pushinteger(L, store_flushed(check_store(L)->s));
    return 1;
}

static int
lstore_prewarm(lua_State *L)
{
    struct lstore *ls = check_store(L);
    lua_pushinteger(L, store_prewarm(ls->s, (int64_t)luaL_checkinteger(L, 2)));
    return 1;
}

static int
lstore_index_sync(lua_State *L)
{
    store_index_sync(check_store(L)->s);
    return 0;
}

/* }}} */

/* {{{ Maintenance and facts */

static int
lstore_delete_expired(lua_State *L)
{
    struct lstore *ls = check_store(L);
    struct retention_opts o = { clock_wall_ms(), -1, true, false, 0 };
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        o.reserved_ms = lstore_opt_int(L, 2, "reservedMs", -1);
        o.force = lstore_opt_bool(L, 2, "force", false);
        o.now_ms = lstore_opt_int(L, 2, "now", o.now_ms);
        o.max_files = (int)lstore_opt_int(L, 2, "maxFiles", 0);
        o.at_once = !lstore_opt_bool(L, 2, "respectDeleteWhen", false);
    }
    struct retention_stats st;
    store_retention(ls->s, &o, &st);
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, st.clog_files);
    lua_setfield(L, -2, "commitlog");
    lua_pushinteger(L, st.cq_files);
    lua_setfield(L, -2, "consumequeue");
    lua_pushinteger(L, st.index_files);
    lua_setfield(L, -2, "index");
    lua_pushinteger(L, st.pinned);
    lua_setfield(L, -2, "pinned");
    lua_pushboolean(L, st.ran);
    lua_setfield(L, -2, "ran");
    lua_pushnumber(L, st.disk_ratio);
    lua_setfield(L, -2, "diskRatio");
    return 1;
}

static int
lstore_writable(lua_State *L)
{
    struct lstore *ls = check_store(L);
    char why[256];
    bool ok = store_writable(ls->s, why, sizeof(why));
    lua_pushboolean(L, ok);
    if (ok)
        return 1;
    lua_pushstring(L, why);
    return 2;
}

/* st:set_role(brokerRole, fenced): "SLAVE" | "SYNC_MASTER" | "ASYNC_MASTER";
 * fenced refuses every local put (store_set_role). */
static int
lstore_set_role(lua_State *L)
{
    struct lstore *ls = check_store(L);
    const char *role = luaL_checkstring(L, 2);
    bool slave = strcmp(role, "SLAVE") == 0, sync = strcmp(role, "SYNC_MASTER") == 0;
    if (!slave && !sync && strcmp(role, "ASYNC_MASTER") != 0)
        return luaL_error(L, "set_role: brokerRole must be ASYNC_MASTER, SYNC_MASTER or SLAVE");
    store_set_role(ls->s, slave, sync, lua_toboolean(L, 3));
    return 0;
}

/* st:role() -> brokerRole, fenced */
static int
lstore_role(lua_State *L)
{
    struct store *s = check_store(L)->s;
    lua_pushstring(L, store_role_slave(s) ? "SLAVE" : store_role_sync_master(s) ? "SYNC_MASTER" : "ASYNC_MASTER");
    lua_pushboolean(L, store_fenced(s));
    return 2;
}

static int
lstore_check_writable(lua_State *L)
{
    lua_pushboolean(L, store_check_writable(check_store(L)->s));
    return 1;
}

struct qinfo {
    const char *topic;          /* lives as long as the store */
    int32_t qid;
    int64_t min, max;
};

struct qfill {
    struct qinfo *info;
    int cap;
    int n;
};

/* Under the table's read lock: plain copies only, nothing that raises. */
static int
fill_queue(struct cq *c, void *arg)
{
    struct qfill *f = arg;
    if (f->n >= f->cap)
        return 1;
    f->info[f->n].topic = c->topic;
    f->info[f->n].qid = c->qid;
    f->info[f->n].min = cq_min(c);
    f->info[f->n].max = cq_max(c);
    f->n++;
    return 0;
}

static int
lstore_queues(lua_State *L)
{
    struct lstore *ls = check_store(L);
    /* Room for the queues now plus some created meanwhile; the copy is
     * made into Lua-owned memory so nothing leaks if a push raises. */
    int cap = (int)ls->s->cqs.count + 64;
    struct qfill f = { lua_newuserdatauv(L, sizeof(struct qinfo) * (size_t)cap, 0),
                       cap, 0 };
    cqt_foreach(&ls->s->cqs, fill_queue, &f);
    lua_createtable(L, f.n, 0);
    for (int i = 0; i < f.n; i++) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, f.info[i].topic);
        lua_setfield(L, -2, "topic");
        lua_pushinteger(L, f.info[i].qid);
        lua_setfield(L, -2, "queueId");
        lua_pushinteger(L, f.info[i].min);
        lua_setfield(L, -2, "min");
        lua_pushinteger(L, f.info[i].max);
        lua_setfield(L, -2, "max");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Under the table's read lock: a sum, nothing that raises. */
static int
sum_queue_max(struct cq *c, void *arg)
{
    *(int64_t *)arg += cq_max(c);
    return 0;
}

/* st:queues_max_sum(): the sum of every queue's max offset (the messages
 * the consume queues hold), without a table per queue: the main state
 * asks every second (the put TPS), and st:queues() made 14 MB of garbage
 * a second at 58,000 queues (docs/memory.md). */
static int
lstore_queues_max_sum(lua_State *L)
{
    struct lstore *ls = check_store(L);
    int64_t sum = 0;
    cqt_foreach(&ls->s->cqs, sum_queue_max, &sum);
    lua_pushinteger(L, (lua_Integer)sum);
    return 1;
}

/* {{{ The statistics sampler (broker/stats_sampler.h) */

#define LSAMPLER_TYPE "rmq.store.stats_sampler"

struct lsampler {
    struct stats_sampler *s;
};

/* st:stats_sampler(map, cluster) -> sampler: the broker's statistics
 * samples of this store and the shared offset table, published into the
 * shared map `map` (rmq.shared.map), taken in C: the main state's timer
 * builds nothing per queue. */
static int
lstore_stats_sampler(lua_State *L)
{
    struct lstore *ls = check_store(L);
    const char *map = luaL_checkstring(L, 2);
    const char *cluster = luaL_checkstring(L, 3);
    struct lsampler *u = lua_newuserdatauv(L, sizeof(*u), 0);
    u->s = NULL;
    luaL_setmetatable(L, LSAMPLER_TYPE);
    struct smap *out = smap_named(map);
    struct offset_table *offs = offset_table_shared();
    if (out == NULL || offs == NULL || (u->s = stats_sampler_new(ls->s, offs, out, cluster)) == NULL)
        return luaL_error(L, "out of memory creating the statistics sampler");
    return 1;
}

static struct lsampler *
check_sampler(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct lsampler, s, LSAMPLER_TYPE,
                          "the statistics sampler is closed");
}

/* sampler:sample(now_ms, at_boot) -> true | nil, err */
static int
lsampler_sample(lua_State *L)
{
    struct lsampler *u = check_sampler(L);
    lua_Integer now = luaL_checkinteger(L, 2);
    return lerr_result(L, stats_sampler_sample(u->s, (int64_t)now, lua_toboolean(L, 3)));
}

/* sampler:size() -> items, queue bases */
static int
lsampler_size(lua_State *L)
{
    struct lsampler *u = check_sampler(L);
    lua_pushinteger(L, (lua_Integer)stats_sampler_items(u->s));
    lua_pushinteger(L, (lua_Integer)stats_sampler_queues(u->s));
    return 2;
}

static int
lsampler_close(lua_State *L)
{
    struct lsampler *u = luaL_checkudata(L, 1, LSAMPLER_TYPE);
    stats_sampler_free(u->s);
    u->s = NULL;
    return 0;
}

/* }}} */

/* <prefix>DiskTotal, <prefix>DiskFree (bytes free to unprivileged users,
 * Java's getUsableSpace), <prefix>DiskUsed (total - free blocks, as
 * Java's getTotalSpace - getFreeSpace). */
static void
disk_fields(lua_State *L, const char *dir, const char *prefix)
{
    struct statvfs v;
    if (dir == NULL || statvfs(dir, &v) != 0 || v.f_blocks == 0)
        return;
    char key[64];
    snprintf(key, sizeof(key), "%sDiskTotal", prefix);
    lua_pushinteger(L, (lua_Integer)((uint64_t)v.f_blocks * v.f_frsize));
    lua_setfield(L, -2, key);
    snprintf(key, sizeof(key), "%sDiskFree", prefix);
    lua_pushinteger(L, (lua_Integer)((uint64_t)v.f_bavail * v.f_frsize));
    lua_setfield(L, -2, key);
    snprintf(key, sizeof(key), "%sDiskUsed", prefix);
    lua_pushinteger(L, (lua_Integer)((uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize));
    lua_setfield(L, -2, key);
}

static int
lstore_stats(lua_State *L)
{
    struct lstore *ls = check_store(L);
    struct store *s = ls->s;
    lua_createtable(L, 0, 16);
    lua_pushboolean(L, s->recovered_abnormally);
    lua_setfield(L, -2, "recoveredAbnormally");
    lua_pushinteger(L, s->recovered_from);
    lua_setfield(L, -2, "recoveredFrom");
    lua_pushinteger(L, s->recovered_records);
    lua_setfield(L, -2, "recoveredRecords");
    lua_pushboolean(L, s->torn_tail);
    lua_setfield(L, -2, "tornTail");
    /* The timer service's figures (store/timer.h; zeros when none runs). */
    lua_pushboolean(L, atomic_load(&s->timer.running));
    lua_setfield(L, -2, "timerRunning");
    lua_pushinteger(L, atomic_load(&s->timer.pending));
    lua_setfield(L, -2, "timerPending");
    lua_pushinteger(L, atomic_load(&s->timer.enqueue_lag));
    lua_setfield(L, -2, "timerEnqueueLag");
    lua_pushinteger(L, atomic_load(&s->timer.dequeue_lag_ms));
    lua_setfield(L, -2, "timerDequeueLagMs");
    lua_pushnumber(L, (double)atomic_load(&s->timer.enqueue_tps_milli) / 1000.0);
    lua_setfield(L, -2, "timerEnqueueTps");
    lua_pushnumber(L, (double)atomic_load(&s->timer.dequeue_tps_milli) / 1000.0);
    lua_setfield(L, -2, "timerDequeueTps");
    lua_pushinteger(L, store_min_phy(s));
    lua_setfield(L, -2, "minPhyOffset");
    lua_pushinteger(L, store_max_phy(s));
    lua_setfield(L, -2, "maxPhyOffset");
    lua_pushinteger(L, store_flushed(s));
    lua_setfield(L, -2, "flushedPhyOffset");
    lua_pushinteger(L, (lua_Integer)mfq_count(&s->clog.q));
    lua_setfield(L, -2, "commitlogFiles");
    lua_pushinteger(L, (lua_Integer)ix_count(&s->ix));
    lua_setfield(L, -2, "indexFiles");
    lua_pushinteger(L, s->conf.index_enable ? ix_next(&s->ix) : 0);
    lua_setfield(L, -2, "indexedPhyOffset");
    lua_pushinteger(L, (lua_Integer)s->cqs.count);
    lua_setfield(L, -2, "queues");
    /* Lazily mapped consume-queue files (store/mfpool.h). */
    lua_pushinteger(L, (lua_Integer)mfpool_count(&s->cqs.pool));
    lua_setfield(L, -2, "consumeQueueFilesMapped");
    lua_pushinteger(L, (lua_Integer)s->cqs.pool.limit);
    lua_setfield(L, -2, "maxMappedConsumeQueueFiles");
    lua_pushinteger(L, atomic_load(&s->cqs.pool.peak));
    lua_setfield(L, -2, "consumeQueueFilesMappedPeak");
    lua_pushinteger(L, atomic_load(&s->cqs.pool.maps));
    lua_setfield(L, -2, "consumeQueueFileMaps");
    lua_pushinteger(L, atomic_load(&s->cqs.pool.unmaps));
    lua_setfield(L, -2, "consumeQueueFileUnmaps");
    lua_pushboolean(L, store_writable(s, NULL, 0));
    lua_setfield(L, -2, "writable");
    lua_pushstring(L, s->conf.sync_flush ? "SYNC_FLUSH" : "ASYNC_FLUSH");
    lua_setfield(L, -2, "flushDiskType");
    lua_pushinteger(L, s->conf.clog_file_size);
    lua_setfield(L, -2, "mappedFileSizeCommitLog");
    /* The partitions of the commit log and of the consume queues
     * (getRuntimeInfo's commitLogDiskRatio, consumeQueueDiskRatio,
     * commitLogDirCapacity): statvfs, absent when it fails. */
    lua_pushnumber(L, store_disk_ratio(s));
    lua_setfield(L, -2, "diskRatio");
    disk_fields(L, s->clog.q.dir, "commitLog");
    disk_fields(L, s->cqs.root, "consumeQueue");
    return 1;
}

/* }}} */

/* {{{ Module functions */

static int
lstore_errinj(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    int id = errinj_find(name);
    if (id < 0)
        return luaL_error(L, "no injection point '%s'", name);
    if (!lua_isnoneornil(L, 2)) {
        int64_t v = lua_isboolean(L, 2) ? lua_toboolean(L, 2)
                                        : (int64_t)luaL_checkinteger(L, 2);
        errinj_set((enum errinj_id)id, v);
    }
    lua_pushinteger(L, errinj_get((enum errinj_id)id));
    return 1;
}

static int
lstore_append_durable(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    return lerr_result(L, store_append_file_durable(path, data, n));
}

static int
lstore_atomic_write(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    lua_Integer mode = luaL_optinteger(L, 3, -1);
    luaL_argcheck(L, mode >= -1 && mode <= 07777, 3, "a permission mode (0 to 07777)");
    return lerr_result(L, store_write_file_atomic_mode(path, data, n, (int)mode));
}

/* }}} */

/* {{{ Timer messages (store/timer.h) */

#define LTIMER_TYPE "rmq.store.timer"

struct ltimer {
    struct timer_store *t;      /* NULL once closed */
    struct buf wake;
};

/* st:timer_hold(properties, topic, queueId) -> nil (not held: store as
 * is) | heldProperties, bucket | false, "illegal"|"disabled", remark */
static int
lstore_timer_hold(lua_State *L)
{
    struct lstore *ls = check_store(L);
    size_t pn, tn;
    const char *p = luaL_checklstring(L, 2, &pn);
    const char *topic = luaL_checklstring(L, 3, &tn);
    lua_Integer qid = luaL_checkinteger(L, 4);
    luaL_argcheck(L, qid >= 0 && qid <= INT32_MAX, 4, "a queue id");
    const struct store_conf *sc = &ls->s->conf;
    int64_t bucket;
    char why[400];
    int k = timer_classify(p, pn, sc->timer_enable, sc->timer_max_delay_ms, sc->timer_precision_ms,
                           timer_now_ms(), &bucket, why, sizeof(why));
    if (k == TIMER_PLAIN) {
        lua_pushnil(L);
        return 1;
    }
    if (k != TIMER_HOLD) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, k == TIMER_ILLEGAL ? "illegal" : "disabled");
        lua_pushstring(L, why);
        return 3;
    }
    struct buf out;
    buf_init(&out);
    if (timer_hold_props(&out, p, pn, bucket, topic, tn, (int32_t)qid) != 0) {
        buf_free(&out);
        return luaL_error(L, "timer_hold: %s", err_msg());
    }
    lua_pushlstring(L, (const char *)buf_head(&out), buf_len(&out));
    buf_free(&out);
    lua_pushinteger(L, bucket);
    return 2;
}

/* store.timer_recall_handle(topic, brokerName, timerOutMs, uniqKey) -> handle */
static int
lstore_timer_recall_handle(lua_State *L)
{
    size_t tn, bn, un;
    const char *topic = luaL_checklstring(L, 1, &tn);
    const char *broker = luaL_checklstring(L, 2, &bn);
    lua_Integer bucket = luaL_checkinteger(L, 3);
    const char *uniq = luaL_checklstring(L, 4, &un);
    struct buf out;
    buf_init(&out);
    if (timer_recall_handle(&out, topic, tn, broker, bn, bucket, uniq, un) != 0) {
        buf_free(&out);
        return lerr_push(L);
    }
    lua_pushlstring(L, (const char *)buf_head(&out), buf_len(&out));
    buf_free(&out);
    return 1;
}

/* store.timer_now() -> ms: the timer clock (wall + timer_clock_ms) */
static int
lstore_timer_now(lua_State *L)
{
    lua_pushinteger(L, timer_now_ms());
    return 1;
}

/* st:timer_discard() -> true | nil, err */
static int
lstore_timer_discard(lua_State *L)
{
    struct lstore *ls = check_store(L);
    return lerr_result(L, timer_discard(ls->s->root));
}

/* st:timer_open() -> timer | nil, err */
static int
lstore_timer_open(lua_State *L)
{
    struct lstore *ls = check_store(L);
    struct ltimer *lt = lua_newuserdatauv(L, sizeof(*lt), 0);
    lt->t = NULL;
    buf_init(&lt->wake);
    luaL_setmetatable(L, LTIMER_TYPE);
    lt->t = timer_open(ls->s, ls->s->root);
    if (lt->t == NULL)
        return lerr_push(L);
    return 1;
}

static struct ltimer *
check_timer(lua_State *L)
{
    return LERR_CHECKOPEN(L, 1, struct ltimer, t, LTIMER_TYPE, "timer service is closed");
}

/* tm:tick([budget]) -> state (1 more work, 0 idle, -1 failed), wake
 * ("topic@qid\n..." to wake held pulls on) */
static int
ltimer_tick(lua_State *L)
{
    struct ltimer *lt = check_timer(L);
    lua_Integer budget = luaL_optinteger(L, 2, 2048);
    luaL_argcheck(L, budget > 0 && budget <= 1000000, 2, "1 to 1000000");
    buf_reset(&lt->wake);
    int rc = timer_tick(lt->t, timer_now_ms(), (int)budget, &lt->wake);
    lua_pushinteger(L, rc);
    lua_pushlstring(L, (const char *)buf_head(&lt->wake), buf_len(&lt->wake));
    if (lt->wake.cap > 65536) {
        buf_free(&lt->wake);
        buf_init(&lt->wake);
    }
    return 2;
}

static int
ltimer_info(lua_State *L)
{
    struct ltimer *lt = check_timer(L);
    struct timer_info i;
    timer_info(lt->t, &i);
    lua_createtable(L, 0, 12);
#define F(name, v) (lua_pushinteger(L, (v)), lua_setfield(L, -2, name))
    F("pending", i.pending);
    F("enqueued", i.enqueued);
    F("delivered", i.delivered);
    F("dropped", i.dropped);
    F("skippedRedelivery", i.skipped_redelivery);
    F("cursor", i.cursor);
    F("queueOffset", i.enq_offset);
    F("logBytes", i.log_end);
    F("logFiles", i.log_files);
    F("slots", i.slots);
    F("recoveredDeliveries", i.recovered_seen);
    F("recalled", i.recalled);
    F("now", timer_now_ms());
#undef F
    return 1;
}

static int
ltimer_close(lua_State *L)
{
    struct ltimer *lt = luaL_checkudata(L, 1, LTIMER_TYPE);
    timer_close(lt->t);
    lt->t = NULL;
    buf_free(&lt->wake);
    buf_init(&lt->wake);
    return 0;
}

/* }}} */

/*
 * Makes the metatable tname once: `methods` as __index, `fin` as both
 * __gc and __close (a handle is released the same way by the collector
 * and at the end of a <close> variable's scope; fin is idempotent).
 * [-0, +0, m]
 */
static void
handle_type(lua_State *L, const char *tname, const luaL_Reg *methods, lua_CFunction fin)
{
    if (luaL_newmetatable(L, tname)) {              /* mt */
        lua_newtable(L);                            /* mt idx */
        luaL_setfuncs(L, methods, 0);
        lua_setfield(L, -2, "__index");             /* mt */
        lua_pushcfunction(L, fin);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, fin);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);                                  /* - */
}

int
luaopen_rmq_store(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "put", lstore_put },
        { "put_batch", lstore_put_batch },
        { "get", lstore_get },
        { "message", lstore_message },
        { "query", lstore_query },
        { "min_offset", lstore_min_offset },
        { "max_offset", lstore_max_offset },
        { "offset_by_time", lstore_offset_by_time },
        { "earliest_time", lstore_earliest_time },
        { "time_at", lstore_time_at },
        { "cq_units", lstore_cq_units },
        { "empty_queue", lstore_empty_queue },
        { "min_phy", lstore_min_phy },
        { "max_phy", lstore_max_phy },
        { "flushed", lstore_flushed },
        { "flush", lstore_flush },
        { "commit", lstore_commit },
        { "wait_flushed", lstore_wait_flushed },
        { "delete_expired", lstore_delete_expired },
        { "writable", lstore_writable },
        { "set_role", lstore_set_role },
        { "timer_discard", lstore_timer_discard },
        { "role", lstore_role },
        { "check_writable", lstore_check_writable },
        { "index_sync", lstore_index_sync },
        { "prewarm", lstore_prewarm },
        { "queues", lstore_queues },
        { "queues_max_sum", lstore_queues_max_sum },
        { "stats_sampler", lstore_stats_sampler },
        { "stats", lstore_stats },
        { "share", lstore_share },
        { "close", lstore_close },
        { "timer_hold", lstore_timer_hold },
        { "timer_open", lstore_timer_open },
        { NULL, NULL },
    };
    static const luaL_Reg timer_methods[] = {
        { "tick", ltimer_tick },
        { "info", ltimer_info },
        { "close", ltimer_close },
        { NULL, NULL },
    };
    static const luaL_Reg sampler_methods[] = {
        { "sample", lsampler_sample },
        { "size", lsampler_size },
        { "close", lsampler_close },
        { NULL, NULL },
    };
    static const luaL_Reg rec_methods[] = {
        { "size", records_size },
        { "tostring", records_tostring },
        { "get", records_get },
        { "release", records_release },
        { NULL, NULL },
    };
    static const luaL_Reg fns[] = {
        { "open", lstore_open },
        { "attach", lstore_attach },
        { "errinj", lstore_errinj },
        { "atomic_write", lstore_atomic_write },
        { "append_durable", lstore_append_durable },
        { "timer_recall_handle", lstore_timer_recall_handle },
        { "timer_now", lstore_timer_now },
        { NULL, NULL },
    };
    handle_type(L, LSTORE_TYPE, methods, lstore_gc);
    handle_type(L, LTIMER_TYPE, timer_methods, ltimer_close);
    handle_type(L, LSAMPLER_TYPE, sampler_methods, lsampler_close);
    handle_type(L, LSTORE_RECORDS_TYPE, rec_methods, records_release);
    luaL_getmetatable(L, LSTORE_RECORDS_TYPE);
    lua_pushcfunction(L, records_len);
    lua_setfield(L, -2, "__len");
    lua_pop(L, 1);
    /* The host first: its finaliser must run after every store handle's
     * (finalisers run in reverse order of creation). */
    (void)host_of(L);
    luaL_newlib(L, fns);
    return 1;
}
