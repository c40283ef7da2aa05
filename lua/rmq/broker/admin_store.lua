-- Broker: the store and statistics requests of mqadmin's topicStatus,
-- brokerConsumeStats, statsAll, cleanExpiredCQ, cleanUnusedTopic,
-- deleteExpiredCommitLog, queryCq and exportMetadata (4.9.8's
-- AdminBrokerProcessor, DefaultMessageStore and BrokerStatsManager):
--
--   GET_TOPIC_STATS_INFO (202)            TopicStatsTable
--   GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305)   TopicList of the system topics
--   CLEAN_EXPIRED_CONSUMEQUEUE (306)      see clean_expired_cq below
--   VIEW_BROKER_STATS_DATA (315)          BrokerStatsData (minute/hour/day)
--   CLEAN_UNUSED_TOPIC (316)              see clean_unused_topic below
--   GET_BROKER_CONSUME_STATS (317)        ConsumeStatsList
--   QUERY_CONSUME_QUEUE (321)             QueryConsumeQueueResponseBody
--   DELETE_EXPIRED_COMMITLOG (329)        a manual retention run
--
-- Bodies are fastjson's text: a Map whose keys are MessageQueue objects
-- is written with the keys as JSON objects ({{"brokerName":..}:{..}}),
-- which fastjson (the Java clients) reads back; object fields in
-- String.compareTo order, null fields left out.
--
-- Statistics (BrokerStatsManager's StatsItem, rmq's own figures): the
-- main thread samples (in C: src/broker/stats_sampler.h), every
-- brokerStatsSampleMillis (10 s), each topic's messages put
-- (the sum of its consume queues' max offsets, so every put counts: the
-- native and the Lua path, batches, retries) and each topic@group's
-- consumed progress (the sum of its committed offsets: 4.9.8 counts the
-- messages pulled, rmq counts what the group committed), and keeps the
-- samples of the last minute (7, every 10 s), hour (7, every 10 min)
-- and day (25, every hour) as 4.9.8 does.  A reply computes each window
-- from its oldest sample to the value now (4.9.8 to its latest sample:
-- rmq's figures include the last 10 s).  Items: TOPIC_PUT_NUMS (topic),
-- GROUP_GET_NUMS (topic@group), BROKER_PUT_NUMS and BROKER_GET_NUMS
-- (the cluster name); avgpt is 0 (rmq does not count requests per item);
-- anything else is answered as 4.9.8 answers an item never incremented.
local core = require("rmq.core")
local net = require("rmq.net")
local shared = require("rmq.shared")
local codes = require("rmq.codes")
local log = require("rmq.log")
local fastjson = require("rmq.fastjson")
local header = require("rmq.header")
local reply = require("rmq.reply")
local topics = require("rmq.broker.topics")
local groups = require("rmq.broker.groups")
local offsets = require("rmq.broker.offsets")
local clients = require("rmq.broker.clients")

local M = {}

local req, R = codes.request, codes.response

M.STATS_SAMPLE_MS = 10000   -- brokerStatsSampleMillis's default
-- window name, samples kept, one sample every N base samples (10 s)
M.WINDOWS = { { "Minute", 7, 1 }, { "Hour", 7, 60 }, { "Day", 25, 360 } }
M.QUERY_CQ_MAX = 1000   -- queryCq units per reply (mqadmin asks for 10)

local stats_map = shared.map("broker.stats")   -- "NAME KEY" -> base and the windows' oldest samples

-- {{{ fastjson helpers

local function mq_key(topic, broker, qid)
    return fastjson.encode({ brokerName = broker, queueId = qid, topic = topic })
end

-- A Map<MessageQueue, V>: entries = {{topic, qid, value_table}, ...}.
local function mq_map(broker, entries)
    local parts = {}
    for i, e in ipairs(entries) do
        parts[i] = mq_key(e[1], broker, e[2]) .. ":" .. fastjson.encode(e[3])
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

-- A double as Java's Double.toString writes the usual values.
local function double(v)
    if v ~= v or v == math.huge or v == -math.huge then
        v = 0
    end
    if v == math.floor(v) and math.abs(v) < 1e15 then
        return ("%.1f"):format(v)
    end
    return ("%.17g"):format(v):gsub("(%..-)0+$", "%1")
end

-- }}}

-- {{{ Statistics

local function cluster(conf)
    return conf.brokerClusterName or "DefaultCluster"
end

-- The samples are taken in C (src/broker/stats_sampler.h: per item,
-- the per-queue bases, the windows' samples, published into stats_map
-- as "BASE FIRST FIRST FIRST"): the main state's timer builds nothing
-- per consume queue or committed offset (it built a table for each:
-- docs/memory.md).  Main thread only.
local sampler

local function sample(b, at_boot)
    if sampler == nil then
        sampler = b.store:stats_sampler("broker.stats", cluster(b.conf))
    end
    local ok, err = sampler:sample(core.now_ms(), at_boot)
    if not ok then
        error(err)
    end
end

--- When the last statistics sample was taken (ms since the epoch), or
--- nil before the first: a positive signal that one has run.
function M.sampled_at()
    return tonumber(stats_map:get("@sampled") or "")
end

-- What the live values are computed from, read once per request (a
-- brokerConsumeStats reply asks for every group's figures).
local function snapshot(b)
    local snap = {}
    function snap.queues()
        snap.q = snap.q or b.store:queues()
        return snap.q
    end
    function snap.offsets()
        snap.o = snap.o or offsets.table()
        return snap.o
    end
    return snap
end

-- The item's value now (any thread), or nil when it does not exist.
local function live_value(b, name, key, base, snap)
    if name == "TOPIC_PUT_NUMS" then
        local raw, found = 0, false
        for _, q in ipairs(snap.queues()) do
            if q.topic == key then
                raw, found = raw + q.max, true
            end
        end
        return found and raw - base or nil
    elseif name == "GROUP_GET_NUMS" then
        local queues = snap.offsets()[key]
        if queues == nil then
            return nil
        end
        local raw = 0
        for _, off in pairs(queues) do
            raw = raw + off
        end
        return raw - base
    elseif name == "BROKER_PUT_NUMS" and key == cluster(b.conf) then
        local raw = 0
        for _, q in ipairs(snap.queues()) do
            raw = raw + q.max
        end
        return raw - base
    elseif name == "BROKER_GET_NUMS" and key == cluster(b.conf) then
        local raw = 0
        for _, queues in pairs(snap.offsets()) do
            for _, off in pairs(queues) do
                raw = raw + off
            end
        end
        return raw - base
    end
    return nil
end

--- The BrokerStatsData of (name, key) as a Lua table, or nil when the
--- item does not exist.  Any thread; snap: a snapshot(b) to share
--- between calls of one request.
function M.stats_data(b, name, key, snap)
    local entry = stats_map:get(name .. " " .. key)
    local base = 0
    local firsts = {}
    if entry then
        local fields = {}
        for f in entry:gmatch("%S+") do
            fields[#fields + 1] = f
        end
        base = tonumber(fields[1]) or 0
        for w = 1, #M.WINDOWS do
            local t, v = (fields[w + 1] or ""):match("^(%d+),(%-?%d+)$")
            firsts[w] = t and { tonumber(t), tonumber(v) } or nil
        end
    end
    local v = live_value(b, name, key, base, snap or snapshot(b))
    if v == nil then
        return nil
    end
    local now = core.now_ms()
    -- Not sampled yet (created since the last sample): from 0 at that sample.
    local since = tonumber(stats_map:get("@sampled") or "") or now
    local out = {}
    for w, spec in ipairs(M.WINDOWS) do
        local first = firsts[w] or { since, 0 }
        local sum = math.max(0, v - first[2])
        local ms = now - first[1]
        out["stats" .. spec[1]] = { sum = math.tointeger(sum) or 0, tps = ms > 0 and sum * 1000 / ms or 0, avgpt = 0 }
    end
    return out
end

local function stats_json(d)
    local parts = {}
    for _, w in ipairs({ "statsDay", "statsHour", "statsMinute" }) do
        local it = d[w]
        parts[#parts + 1] = ('"%s":{"avgpt":%s,"sum":%d,"tps":%s}'):format(w, double(it.avgpt), it.sum, double(it.tps))
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

-- }}}

-- {{{ Broker config (GET_BROKER_CONFIG)

-- Every key a 4.9.8 broker's getAllConfigsFormatString writes
-- (BrokerConfig, NettyServerConfig, NettyClientConfig, MessageStoreConfig
-- as MixAll.object2Properties reads them; null fields left out) with
-- 4.9.8's default.  A key rmq's conf has shows rmq's value; the others
-- are settings rmq does not implement and show 4.9.8's fixed default
-- (mqadmin's exportConfigs and getBrokerConfig read them).
M.CONFIG_4_9_8 = {
    -- BrokerConfig
    { "aclEnable", "false" },
    { "adminBrokerThreadPoolNums", "16" },
    { "autoCreateSubscriptionGroup", "true" },
    { "autoCreateTopicEnable", "true" },
    { "autoDeleteUnusedStats", "false" },
    { "brokerClusterName", "DefaultCluster" },
    { "brokerFastFailureEnable", "true" },
    { "brokerIP1" },   -- host-dependent: from the conf / the bound address
    { "brokerIP2" },   -- host-dependent: from the conf / the bound address
    { "brokerId", "0" },
    { "brokerName" },   -- host-dependent: from the conf / the bound address
    { "brokerPermission", "6" },
    { "brokerTopicEnable", "true" },
    { "clientManageThreadPoolNums", "32" },
    { "clientManagerThreadPoolQueueCapacity", "1000000" },
    { "clusterTopicEnable", "true" },
    { "commercialBaseCount", "1" },
    { "commercialBigCount", "1" },
    { "commercialEnable", "true" },
    { "commercialTimerCount", "1" },
    { "commercialTransCount", "1" },
    { "compressedRegister", "false" },
    { "configBlackList", "configBlackList;brokerConfigPath" },
    { "consumerFallbehindThreshold", "17179869184" },
    { "consumerManageThreadPoolNums", "32" },
    { "consumerManagerThreadPoolQueueCapacity", "1000000" },
    { "defaultTopicQueueNums", "8" },
    { "disableConsumeIfConsumerReadSlowly", "false" },
    { "enableCalcFilterBitMap", "false" },
    { "enableDetailStat", "true" },
    { "enablePropertyFilter", "false" },
    { "endTransactionPoolQueueCapacity", "100000" },
    { "endTransactionThreadPoolNums", "12" },
    { "expectConsumerNumUseFilter", "32" },
    { "fetchNamesrvAddrByAddressServer", "false" },
    { "filterDataCleanTimeSpan", "86400000" },
    { "filterServerNums", "0" },
    { "filterSupportRetry", "false" },
    { "flushConsumerOffsetHistoryInterval", "60000" },
    { "flushConsumerOffsetInterval", "5000" },
    { "forceRegister", "true" },
    { "heartbeatThreadPoolNums", "2" },
    { "heartbeatThreadPoolQueueCapacity", "50000" },
    { "highSpeedMode", "false" },
    { "isolateLogEnable", "false" },
    { "longPollingEnable", "true" },
    { "maxDelayTime", "40" },
    { "maxErrorRateOfBloomFilter", "20" },
    { "messageStorePlugIn", "" },
    { "msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC" },
    { "notifyConsumerIdsChangedEnable", "true" },
    { "processReplyMessageThreadPoolNums", "20" },
    { "pullMessageThreadPoolNums", "20" },
    { "pullThreadPoolQueueCapacity", "100000" },
    { "putMessageFutureThreadPoolNums", "2" },
    { "putThreadPoolQueueCapacity", "10000" },
    { "queryMessageThreadPoolNums", "10" },
    { "queryThreadPoolQueueCapacity", "20000" },
    { "regionId", "DefaultRegion" },
    { "registerBrokerTimeoutMills", "6000" },
    { "registerNameServerPeriod", "30000" },
    { "rejectTransactionMessage", "false" },
    { "replyThreadPoolQueueCapacity", "10000" },
    { "sendMessageThreadPoolNums", "2" },
    { "sendThreadPoolQueueCapacity", "10000" },
    { "shortPollingTimeMills", "1000" },
    { "slaveReadEnable", "false" },
    { "startAcceptSendRequestTimeStamp", "0" },
    { "storeReplyMessageEnable", "true" },
    { "traceOn", "true" },
    { "traceTopicEnable", "false" },
    { "transactionCheckInterval", "60000" },
    { "transactionCheckMax", "15" },
    { "transactionTimeOut", "6000" },
    { "transferMsgByHeap", "true" },
    { "waitTimeMillsInHeartbeatQueue", "31000" },
    { "waitTimeMillsInPullQueue", "5000" },
    { "waitTimeMillsInSendQueue", "200" },
    { "waitTimeMillsInTransactionQueue", "3000" },
    -- NettyServerConfig
    { "listenPort", "8888" },
    { "serverAsyncSemaphoreValue", "64" },
    { "serverCallbackExecutorThreads", "0" },
    { "serverChannelMaxIdleTimeSeconds", "120" },
    { "serverOnewaySemaphoreValue", "256" },
    { "serverPooledByteBufAllocatorEnable", "true" },
    { "serverSelectorThreads", "3" },
    { "serverSocketBacklog", "1024" },
    { "serverSocketRcvBufSize", "0" },
    { "serverSocketSndBufSize", "0" },
    { "serverWorkerThreads", "8" },
    { "useEpollNativeSelector", "false" },
    { "writeBufferHighWaterMark", "0" },
    { "writeBufferLowWaterMark", "0" },
    -- NettyClientConfig
    { "channelNotActiveInterval", "60000" },
    { "clientAsyncSemaphoreValue", "65535" },
    { "clientCallbackExecutorThreads", "2" },
    { "clientChannelMaxIdleTimeSeconds", "120" },
    { "clientCloseSocketIfTimeout", "true" },
    { "clientOnewaySemaphoreValue", "65535" },
    { "clientPooledByteBufAllocatorEnable", "false" },
    { "clientSocketRcvBufSize", "0" },
    { "clientSocketSndBufSize", "0" },
    { "clientWorkerThreads", "4" },
    { "connectTimeoutMillis", "3000" },
    { "useTLS", "false" },
    -- MessageStoreConfig
    { "accessMessageInMemoryMaxRatio", "40" },
    { "bitMapLengthConsumeQueueExt", "64" },
    { "brokerRole", "ASYNC_MASTER" },
    { "checkCRCOnRecover", "true" },
    { "cleanFileForciblyEnable", "true" },
    { "cleanResourceInterval", "10000" },
    { "commitCommitLogLeastPages", "4" },
    { "commitCommitLogThoroughInterval", "200" },
    { "commitIntervalCommitLog", "200" },
    { "debugLockEnable", "false" },
    { "defaultQueryMaxNum", "32" },
    { "deleteCommitLogFilesInterval", "100" },
    { "deleteConsumeQueueFilesInterval", "100" },
    { "deleteWhen", "04" },
    { "destroyMapedFileIntervalForcibly", "120000" },
    { "diskFallRecorded", "true" },
    { "diskMaxUsedSpaceRatio", "75" },
    { "duplicationEnable", "false" },
    { "enableConsumeQueueExt", "false" },
    { "enableDLegerCommitLog", "false" },
    { "enableLmq", "false" },
    { "enableMultiDispatch", "false" },
    { "enableScheduleAsyncDeliver", "false" },
    { "enableScheduleMessageStats", "true" },
    { "fastFailIfNoBufferInStorePool", "false" },
    { "fileReservedTime", "72" },
    { "flushCommitLogLeastPages", "4" },
    { "flushCommitLogThoroughInterval", "10000" },
    { "flushCommitLogTimed", "true" },
    { "flushConsumeQueueLeastPages", "2" },
    { "flushConsumeQueueThoroughInterval", "60000" },
    { "flushDelayOffsetInterval", "10000" },
    { "flushDiskType", "ASYNC_FLUSH" },
    { "flushIntervalCommitLog", "500" },
    { "flushIntervalConsumeQueue", "1000" },
    { "flushLeastPagesWhenWarmMapedFile", "4096" },
    { "haHousekeepingInterval", "20000" },
    { "haListenPort", "10912" },
    { "haSendHeartbeatInterval", "5000" },
    { "haSlaveFallbehindMax", "268435456" },
    { "haTransferBatchSize", "32768" },
    { "isEnableBatchPush", "false" },
    { "mappedFileSizeCommitLog", "1073741824" },
    { "mappedFileSizeConsumeQueue", "6000000" },
    { "mappedFileSizeConsumeQueueExt", "50331648" },
    { "maxHashSlotNum", "5000000" },
    { "maxIndexNum", "20000000" },
    { "maxLmqConsumeQueueNum", "20000" },
    { "maxMessageSize", "4194304" },
    { "maxMsgsNumBatch", "64" },
    { "maxTransferBytesOnMessageInDisk", "65536" },
    { "maxTransferBytesOnMessageInMemory", "262144" },
    { "maxTransferCountOnMessageInDisk", "8" },
    { "maxTransferCountOnMessageInMemory", "32" },
    { "messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" },
    { "messageIndexEnable", "true" },
    { "messageIndexSafe", "false" },
    { "offsetCheckInSlave", "false" },
    { "osPageCacheBusyTimeOutMills", "1000" },
    { "putMsgIndexHightWater", "600000" },
    { "redeleteHangedFileInterval", "120000" },
    { "scheduleAsyncDeliverMaxPendingLimit", "2000" },
    { "scheduleAsyncDeliverMaxResendNum2Blocked", "3" },
    { "slaveTimeout", "3000" },
    { "storePathRootDir" },   -- host-dependent: from the conf / the bound address
    { "syncFlushTimeout", "5000" },
    { "transientStorePoolEnable", "false" },
    { "transientStorePoolSize", "5" },
    { "useReentrantLockWhenPutMessage", "true" },
    { "warmMapedFileEnable", "false" },
}

local function value_text(v)
    local ty = type(v)
    if ty == "boolean" or ty == "string" then
        return tostring(v)
    elseif math.type(v) == "integer" then
        return ("%d"):format(v)
    elseif ty == "number" then
        return tostring(v)
    end
    return nil
end
M.value_text = value_text

--- The GET_BROKER_CONFIG body: 4.9.8's keys (rmq's values where rmq has
--- the key), then rmq's own keys, "key=value\n" each.
function M.config_text(b, conf, own_keys)
    local lines, done = {}, {}
    local host = {
        brokerIP1 = b.ip, brokerIP2 = conf.brokerIP2 or b.ip,
        haListenPort = conf.haListenPort or (conf.listenPort and conf.listenPort + 1),
        useTLS = conf["tls.enable"],   -- NettyClientConfig.useTLS = tls.enable
    }
    for _, e in ipairs(M.CONFIG_4_9_8) do
        local k = e[1]
        local text = value_text(conf[k])
        if text == nil and host[k] ~= nil then
            text = value_text(host[k])
        end
        if text == nil then
            text = e[2]
        end
        if text ~= nil then
            lines[#lines + 1] = k .. "=" .. text .. "\n"
        end
        done[k] = true
    end
    local describe = require("rmq.conf").describe
    for _, k in ipairs(own_keys) do
        if not done[k] and not describe(k).secret then   -- (consolePassword)
            local text = value_text(conf[k])
            if text ~= nil then
                lines[#lines + 1] = k .. "=" .. text .. "\n"
            end
        end
    end
    return table.concat(lines)
end

-- }}}

-- {{{ Runtime info (GET_BROKER_RUNTIME_INFO's store keys)

-- MixAll.humanReadableByteCount(bytes, false)
function M.human_bytes(n)
    if n < 1024 then
        return ("%d B"):format(n)
    end
    local exp = math.floor(math.log(n) / math.log(1024))
    exp = math.min(exp, 6)
    return ("%.1f %siB"):format(n / 1024 ^ exp, ("KMGTPE"):sub(exp, exp))
end

local delay_offsets = shared.map("broker.delayOffset")

--- Adds to t (the KVTable) what 4.9.8's DefaultMessageStore.getRuntimeInfo
--- and prepareRuntimeInfo report about the disks and the schedule queues.
function M.runtime_store_keys(b, t, stats)
    if stats.commitLogDiskTotal then
        t.commitLogDiskRatio = tostring(stats.commitLogDiskUsed / stats.commitLogDiskTotal)
        t.commitLogDirCapacity = ("Total : %s, Free : %s."):format(
            M.human_bytes(stats.commitLogDiskTotal), M.human_bytes(stats.commitLogDiskFree))
    else
        t.commitLogDiskRatio = "-1.0"
    end
    if stats.consumeQueueDiskTotal then
        t.consumeQueueDiskRatio = tostring(stats.consumeQueueDiskUsed / stats.consumeQueueDiskTotal)
    else
        t.consumeQueueDiskRatio = "-1.0"
    end
    t.remainHowManyDataToFlush = M.human_bytes(math.max(0, stats.maxPhyOffset - stats.flushedPhyOffset))
    -- ScheduleMessageService.buildRunningStats: "delayOffset,maxOffset"
    for level, off in pairs(delay_offsets:all()) do
        local n = math.tointeger(tonumber(level))
        if n and n >= 1 then
            t["scheduleMessageOffset_" .. n] = ("%s,%d"):format(off,
                math.max(0, b.store:max_offset("SCHEDULE_TOPIC_XXXX", n - 1)))
        end
    end
end

-- }}}

-- {{{ Requests

M.HEADER_TOPIC_STATS = header.compile({ { "topic", "string", true } })
M.HEADER_VIEW_STATS = header.compile({
    { "statsName", "string", true },
    { "statsKey", "string", true },
})
M.HEADER_CONSUME_STATS = header.compile({ { "isOrder", "bool", true } })
M.HEADER_QUERY_CQ = header.compile({
    { "topic", "string", true },
    { "queueId", "int", true, min = 0 },
    { "index", "long", true },
    { "count", "int", true },
    { "consumerGroup", "string", false },
})

-- 4.9.8's TopicValidator.getSystemTopicSet() on a broker.
local function system_topics(conf)
    local list = { "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                   "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                   "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", cluster(conf), conf.brokerName,
                   cluster(conf) .. "_REPLY_TOPIC" }
    if conf.traceTopicEnable and conf.msgTraceTopicName then
        list[#list + 1] = conf.msgTraceTopicName
    end
    local seen, out = {}, {}
    for _, t in ipairs(list) do
        if not seen[t] then
            seen[t] = true
            out[#out + 1] = t
        end
    end
    return out
end

local function topic_stats(b, topic, cfg)
    local st, entries = b.store, {}
    for i = 0, cfg.writeQueueNums - 1 do
        local min = math.max(0, st:min_offset(topic, i))
        local max = math.max(0, st:max_offset(topic, i))
        local ts = 0
        if max > 0 then
            ts = st:time_at(topic, i, max - 1)
        end
        entries[#entries + 1] = { topic, i, { lastUpdateTimestamp = ts, maxOffset = max, minOffset = min } }
    end
    return '{"offsetTable":' .. mq_map(b.conf.brokerName, entries) .. "}"
end

-- One ConsumeStats (of fetchAllConsumeStatsInBroker) as JSON, and its diff.
local function consume_stats(b, group, topic, cfg, snap)
    local st, entries, diff = b.store, {}, 0
    for i = 0, cfg.writeQueueNums - 1 do
        local broker_off = math.max(0, st:max_offset(topic, i))
        local consumer_off = math.max(0, offsets.query(group, topic, i) or -1)
        local w = { brokerOffset = broker_off, consumerOffset = consumer_off, lastTimestamp = 0 }
        if consumer_off - 1 >= 0 then
            local ts = st:time_at(topic, i, consumer_off - 1)
            if ts > 0 then
                w.lastTimestamp = ts
            end
        end
        diff = diff + broker_off - consumer_off
        entries[#entries + 1] = { topic, i, w }
    end
    local d = M.stats_data(b, "GROUP_GET_NUMS", topic .. "@" .. group, snap)
    local tps = d and d.statsMinute.tps or 0
    return ('{"consumeTps":%s,"offsetTable":%s}'):format(double(tps), mq_map(b.conf.brokerName, entries)), diff
end

-- ConsumerOffsetManager.whichTopicByConsumer for every group at once:
-- group -> sorted topics, from one pass over the offsets snapshot (a pass
-- per group cost groups x offset entries).
local function topics_by_group(snap)
    local out = {}
    for tg in pairs(snap.offsets()) do
        local topic, g = tg:match("^(.-)@(.*)$")
        if topic then
            local l = out[g]
            if l == nil then
                l = {}
                out[g] = l
            end
            l[#l + 1] = topic
        end
    end
    for _, l in pairs(out) do
        table.sort(l)
    end
    return out
end

-- The reply holds at most brokerConsumeStatsMaxQueues queues: past it the
-- groups not reached are left out (logged, and said in the remark), the
-- totalDiff counting the queues sent.
local function broker_consume_stats(b, is_order)
    local list, total = {}, 0
    local snap = snapshot(b)
    local by_group = topics_by_group(snap)
    local cap, queues, left = b.conf.brokerConsumeStatsMaxQueues, 0, 0
    local names = {}
    for name in pairs(groups.all()) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, group in ipairs(names) do
        if queues >= cap then
            left = left + 1
        else
            local stats = {}
            local online = clients.consumer_group(group)
            local has_subs = online and next(online.subscriptionTable or {}) ~= nil
            for _, topic in ipairs(by_group[group] or {}) do
                local cfg = topics.get(topic)
                if cfg == nil then
                    log.warn("consumeStats, topic config not exist, %s", topic)
                elseif not (is_order and not cfg.order) then
                    local sub = clients.find_subscription(group, topic)
                    if sub == nil and has_subs then
                        log.warn("consumeStats, the consumer group[%s], topic[%s] not exist", group, topic)
                    else
                        local text, diff = consume_stats(b, group, topic, cfg, snap)
                        stats[#stats + 1] = text
                        total = total + diff
                        queues = queues + cfg.writeQueueNums
                    end
                end
            end
            list[#list + 1] = "{" .. fastjson.encode(group) .. ":[" .. table.concat(stats, ",") .. "]}"
        end
    end
    local remark
    if left > 0 then
        remark = ("%d of %d groups left out: the reply holds %d queues, brokerConsumeStatsMaxQueues is %d")
            :format(left, #names, queues, cap)
        log.warn("GET_BROKER_CONSUME_STATS: %s", remark)
    end
    return ('{"brokerAddr":%s,"consumeStatsList":[%s],"totalDiff":%d}'):format(
        fastjson.encode(b.addr), table.concat(list, ","), total), remark
end

local function query_cq(b, h)
    local topic, qid = h.topic, h.queueId
    local min, max, units = b.store:cq_units(topic, qid, h.index, math.max(0, math.min(h.count, M.QUERY_CQ_MAX)))
    if min == nil then
        return reply.system_error(("%d@%s is not exist!"):format(qid, header.scrub(topic)))
    end
    local body = { maxQueueIndex = max, minQueueIndex = min }
    if h.consumerGroup ~= nil then
        local sub = clients.find_subscription(h.consumerGroup, topic)
        if sub == nil then
            body.filterData = ("%s@%s is not online!"):format(h.consumerGroup, topic)
        else
            body.subscriptionData = sub
            -- ConsumerFilterManager keeps filter data for SQL92 only.
            body.filterData = "null"
        end
    end
    if h.index < min or h.index >= max then
        -- Java answers SUCCESS without a body here.
        return { code = R.SUCCESS, remark = ("Index %d of %d@%s is not exist!"):format(h.index, qid, header.scrub(topic)) }
    end
    for _, u in ipairs(units) do
        u.eval = false
    end
    body.queueData = setmetatable(units, fastjson.array_mt)
    return { code = R.SUCCESS, body = fastjson.encode(body) }
end

-- 4.9.8 destroys the consume queues whose last entry points below the
-- commit log's minimum.  rmq's retention already deletes such queues'
-- files and moves their min to max with every commit log deletion; the
-- queues themselves live as long as the store (consumequeue.h), so
-- this run reports them and deletes nothing more.
local function clean_expired_cq(b)
    local st = b.store
    local min_phy = st:min_phy()
    local n = 0
    for _, q in ipairs(st:queues()) do
        if q.topic ~= "SCHEDULE_TOPIC_XXXX" and q.max > 0 and q.min >= q.max then
            n = n + 1
        end
    end
    log.warn("cleanExpiredConsumeQueue: %d consume queues hold no message above commit log offset %d", n, min_phy)
    return n
end

-- 4.9.8 destroys the consume queues of topics not in the topic table
-- (except SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_OP_HALF_TOPIC).  rmq's
-- queues live as long as the store: each such queue is emptied instead
-- (its files deleted but the last, its min moved to its max; a topic
-- created again with the name continues from there).  Kept besides: the
-- topics the broker manages itself (system topics, %RETRY% and %DLQ%,
-- created on demand and maybe not in the table yet), and a queue whose
-- last message was stored less than cleanUnusedTopicIdleTime hours ago
-- (a topic table that lags its queues, as a slave's does, or a topic
-- deleted and sent to again, must not lose what was just stored).
local function managed(t, conf)
    return t == "SCHEDULE_TOPIC_XXXX" or topics.is_system(t, conf)
        or t:sub(1, 7) == "%RETRY%" or t:sub(1, 5) == "%DLQ%"
end

local function clean_unused_topic(b)
    local st = b.store
    local unused, seen, files, recent = {}, {}, 0, 0
    local idle_ms = b.conf.cleanUnusedTopicIdleTime * 3600 * 1000
    local now = core.now_ms()
    for _, q in ipairs(st:queues()) do
        local t = q.topic
        if topics.get(t) == nil and not managed(t, b.conf) and q.max > q.min then
            local last = st:time_at(t, q.queueId, q.max - 1)
            if last >= 0 and now - last < idle_ms then
                recent = recent + 1
            else
                files = files + (st:empty_queue(t, q.queueId) or 0)
                if not seen[t] then
                    seen[t] = true
                    unused[#unused + 1] = t
                end
            end
        end
    end
    table.sort(unused)
    return (": %d consume queue files of %d topics without a topic config deleted%s%s%s"):format(files, #unused,
        #unused > 0 and ": " or "", table.concat(unused, ", ", 1, math.min(#unused, 20)),
        recent > 0 and ("; %d queues with a message newer than cleanUnusedTopicIdleTime kept"):format(recent) or "")
end

-- }}}

function M.processors(b)
    local conf = b.conf
    local P = {}

    P[req.GET_TOPIC_STATS_INFO] = { header = M.HEADER_TOPIC_STATS, run = function(ctx, cmd, h)
        local cfg = topics.get(h.topic)
        if cfg == nil then
            return reply.error(R.TOPIC_NOT_EXIST, ("topic[%s] not exist"):format(header.scrub(h.topic)))
        end
        return { code = R.SUCCESS, body = topic_stats(b, h.topic, cfg) }
    end }

    P[req.GET_SYSTEM_TOPIC_LIST_FROM_BROKER] = function()
        return { code = R.SUCCESS,
                 body = fastjson.encode({ topicList = setmetatable(system_topics(conf), fastjson.array_mt) }) }
    end

    -- Maintenance runs, logged as 4.9.8 logs them ("invoke NAME start/end").
    local function maintenance(name, run)
        return function(ctx)
            log.warn("invoke %s start (from %s).", name, ctx.peer)
            log.warn("invoke %s end%s.", name, run() or "")
            return { code = R.SUCCESS }
        end
    end

    P[req.CLEAN_EXPIRED_CONSUMEQUEUE] = maintenance("cleanExpiredConsumeQueue", function()
        clean_expired_cq(b)
    end)

    P[req.DELETE_EXPIRED_COMMITLOG] = maintenance("deleteExpiredCommitLog", function()
        -- executeDeleteFilesManually: expired files go now, whatever deleteWhen says.
        local r = b.store:delete_expired()
        return (": %d commit log, %d consume queue, %d index files deleted%s"):format(
            r.commitlog, r.consumequeue, r.index,
            r.pinned > 0 and (", " .. r.pinned .. " in use kept for the next run") or "")
    end)

    local clean_unused = maintenance("cleanUnusedTopic", function()
        return clean_unused_topic(b)
    end)
    P[req.CLEAN_UNUSED_TOPIC] = function(ctx)
        -- A slave's topic table lags the queues it replicates by a sync
        -- period: every new topic would look unused.  The master's run
        -- is the one that counts.
        if conf.brokerRole == "SLAVE" then
            log.warn("cleanUnusedTopic from %s refused: this broker is a slave", ctx.peer)
            return reply.error(R.SLAVE_NOT_AVAILABLE, "cleanUnusedTopic is forbidden on a slave")
        end
        return clean_unused(ctx)
    end

    P[req.VIEW_BROKER_STATS_DATA] = { header = M.HEADER_VIEW_STATS, run = function(ctx, cmd, h)
        local d = M.stats_data(b, h.statsName, h.statsKey)
        if d == nil then
            return reply.system_error(("The stats <%s> <%s> not exist"):format(
                header.scrub(h.statsName), header.scrub(h.statsKey)))
        end
        return { code = R.SUCCESS, body = stats_json(d) }
    end }

    P[req.GET_BROKER_CONSUME_STATS] = { header = M.HEADER_CONSUME_STATS, run = function(ctx, cmd, h)
        local body, remark = broker_consume_stats(b, h.isOrder)
        return { code = R.SUCCESS, body = body, remark = remark }
    end }

    P[req.QUERY_CONSUME_QUEUE] = { header = M.HEADER_QUERY_CQ, run = function(ctx, cmd, h)
        return query_cq(b, h)
    end }

    return P
end

function M.main_init(b)
    stats_map:clear()
    if sampler then
        sampler:close()
        sampler = nil
    end
    sample(b, true)
end

function M.main_start(b)
    b.timers = b.timers or {}
    local every = b.conf.brokerStatsSampleMillis or M.STATS_SAMPLE_MS
    b.timers[#b.timers + 1] = net.timer(every, every, function()
        local ok, err = pcall(sample, b, false)
        if not ok then
            log.error("broker stats sample: %s", tostring(err))
        end
    end)
end

return M
