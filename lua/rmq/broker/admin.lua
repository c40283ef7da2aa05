-- Broker: the admin requests mqadmin and DefaultMQAdminExt send
-- (RocketMQ's AdminBrokerProcessor, protocol.md 4.13):
--
--   UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215),
--   GET_ALL_TOPIC_CONFIG (21), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
--   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207),
--   GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26),
--   UPDATE_BROKER_CONFIG (25); 5.x's GET_TOPIC_CONFIG (351) and
--   GET_SUBSCRIPTIONGROUP_CONFIG (352)
--
-- Replies are a 4.9.8 broker's, down to its quirks: a created topic is
-- answered with remark "not set any response code" (the captured reply),
-- GET_ALL_TOPIC_CONFIG carries an empty extFields object and a body
-- byte-identical to the Java broker's.  Bad requests get SYSTEM_ERROR
-- with a remark that says what is wrong; a slave refuses changes.
--
-- A topic change registers with the NameServers before the reply (as
-- Java's registerIncrementBrokerData does), so the route exists when
-- mqadmin's updateTopic returns.  The tables are persisted by the main
-- thread within a second (rmq.broker's timer) and at shutdown.
--
-- Run-time configuration: UPDATE_BROKER_CONFIG changes the keys in LIVE
-- for every worker (rmq.broker.tables settings; other modules see them
-- through tables.sync_conf(conf)); they last until the broker restarts.
-- Changing brokerPermission bumps the topic DataVersion and registers
-- at once, as in Java.
local core = require("rmq.core")
local net = require("rmq.net")
local shared = require("rmq.shared")
local store = require("rmq.store")
local ha = require("rmq.ha")
local codes = require("rmq.codes")
local log = require("rmq.log")
local fastjson = require("rmq.fastjson")
local conf_mod = require("rmq.conf")
local tables = require("rmq.broker.tables")
local topics = require("rmq.broker.topics")
local groups = require("rmq.broker.groups")
local register = require("rmq.broker.register")
local schedule = require("rmq.broker.schedule")
local admin_store = require("rmq.broker.admin_store")
local header = require("rmq.header")
local names = require("rmq.names")
local reply = require("rmq.reply")

local M = {}

local req, R = codes.request, codes.response

M.SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, "
    .. "please execute it from master broker."
M.NOT_SET = "not set any response code"   -- RemotingCommand.createResponseCommand's remark

-- Keys UPDATE_BROKER_CONFIG (and the live console's set) may change
-- while the broker runs, each with what a live value may be (the conf
-- file keeps its def's wider range): `values` the only ones allowed,
-- `min`/`max` a range.  Every other key is refused unless the value is
-- the one in force: paths (storePath*, logFile, rocketmqHome, the ACL
-- and TLS files), anything that names code to load (processors,
-- pullFilters, other policies), listeners, limits, the console.
M.LIVE = {
    -- PermName bits: 2 write-only, 4 read-only (stops every send), 6 both.
    brokerPermission = { values = { [2] = true, [4] = true, [6] = true }, doc = "2, 4 or 6" },
    forceRegister = {}, compressedRegister = {},
    -- 4.9.8 clamps the period to 10-60 s (BrokerController.start).
    registerNameServerPeriod = { min = 10000, max = 60000 },
    registerBrokerTimeoutMills = { min = 1000, max = 60000 },
    topicQueueNumsMax = { min = 1, max = 65535 },
    enablePropertyFilter = {},
    slaveReadEnable = {}, slaveReadPolicy = {},   -- the next pull reply follows
}
-- Flow control's limits (rmq.broker.admission): the next request follows.
-- 10000000 ms is 4.9.8's bound past which a put "in progress" is stale:
-- the page cache rule off.
M.LIVE.osPageCacheBusyTimeOutMills = { min = 100, max = 10000000 }
M.LIVE.brokerFastFailureEnable = {}
M.LIVE.waitTimeMillsInSendQueue = { min = 50, max = 60000 }
M.LIVE.waitTimeMillsInPullQueue = { min = 50, max = 60000 }
M.LIVE.waitTimeMillsInHeartbeatQueue = { min = 1000, max = 120000 }
M.LIVE.waitTimeMillsInTransactionQueue = { min = 100, max = 60000 }
-- BrokerConfig.configBlackList's default.
M.BLACK_LIST = { configBlackList = true, brokerConfigPath = true }

local meta = shared.map("broker.meta")
local config_table = tables.new("broker.config")   -- only its DataVersion

local PERSISTED = "broker.persisted"   -- raised after the main thread wrote the tables

-- {{{ Persistence now (Java persists a changed table before it answers)

-- The main thread writes topics.json and subscriptionGroup.json when
-- asked (topics.PERSIST, raised by any thread) and at least every
-- second; the files are written by that one thread only.
local persister = { stopped = false }

local function persist_tables(conf)
    for _, m in ipairs({ { topics, "persisted.topics" }, { groups, "persisted.groups" } }) do
        local ok, err, v = m[1].persist(conf)
        if ok then
            meta:set(m[2], tostring(v))
        else
            log.error("cannot persist %s: %s", m[2]:sub(11), tostring(err))
        end
    end
    net.raise(PERSISTED)
end

--- Any thread, in a task: asks the main thread to write the tables and
--- waits until both files hold what the tables hold now (bounded).
function M.persist_now(timeout)
    local want_t, want_g = topics.table:version(), groups.table:version()
    net.raise(topics.PERSIST)
    local deadline = core.mono_ms() + (timeout or 3000)
    while true do
        if (tonumber(meta:get("persisted.topics") or "") or -1) >= want_t
            and (tonumber(meta:get("persisted.groups") or "") or -1) >= want_g then
            return true
        end
        local left = deadline - core.mono_ms()
        if left <= 0 then
            return nil, "timeout"
        end
        net.wait_event(PERSISTED, math.max(1, math.min(math.floor(left), 100)))
    end
end

-- }}}

-- The request headers (protocol.md 4.13), read by dispatch.  Queue
-- numbers are at least 1 here; their upper bound, topicQueueNumsMax, may
-- change at run time (UPDATE_BROKER_CONFIG), so the handler checks it.
M.HEADER_CREATE_TOPIC = header.compile({
    { "topic", "topic", true },
    { "defaultTopic", "string", true },
    { "readQueueNums", "int", true, min = 1 },
    { "writeQueueNums", "int", true, min = 1 },
    { "perm", "int", true, min = 0, max = 15 },
    { "topicFilterType", "string", true },
    { "topicSysFlag", "int", false, default = 0 },
    { "order", "bool", true },
    { "attributes", "string", false },   -- 5.x: "+message.type=FIFO,-k"
})
M.HEADER_DELETE_TOPIC = header.compile({ { "topic", "topic", true } })
-- 5.x GetTopicConfigRequestHeader: topic (not checked as a name: an
-- unknown one is simply not found), lo (static topics' mapping).
M.HEADER_GET_TOPIC_CONFIG = header.compile({ { "topic", "string", true }, { "lo", "bool", false } })
M.HEADER_GET_GROUP_CONFIG = header.compile({ { "group", "string", true } })
-- Not a group-name check: a group stored under an illegal name (before
-- names were checked) must stay deletable.
M.HEADER_DELETE_GROUP = header.compile({
    { "groupName", "string", true },
    { "removeOffset", "bool", false },
})

-- {{{ Runtime info

local function days(ms)
    local s = ms // 1000
    return ("[ %d days, %d hours, %d minutes, %d seconds ]"):format(
        s // 86400, (s % 86400) // 3600, (s % 3600) // 60, s % 60)
end

-- The main thread samples the store once a second: messages put (the
-- sum of the consume queues' max offsets) and commit log bytes, for the
-- TPS figures (10 s, 60 s, 600 s, as StoreStatsService reports them).
local samples = {}

local function sample(st)
    -- Every second: a sum in C, no table per queue (st:queues() made 14 MB
    -- of garbage a second in the main state at 58,000 queues).
    local msgs = st:queues_max_sum()
    local now = core.mono_ms()
    samples[#samples + 1] = { t = now, msgs = msgs }
    if #samples > 601 then
        table.remove(samples, 1)
    end
    local function tps(window)
        local last = samples[#samples]
        local first = samples[math.max(1, #samples - window)]
        if last.t <= first.t then
            return 0
        end
        return (last.msgs - first.msgs) * 1000 / (last.t - first.t)
    end
    meta:set("stats.putTps", ("%.2f %.2f %.2f"):format(tps(10), tps(60), tps(600)))
    meta:set("stats.putMsgs", tostring(msgs))
end

-- Replication figures (rmq.ha, src/ha/): 4.9.8 reports only
-- commitLogMaxOffset; these are its HAService's numbers under the names
-- its getters have (slaveFallBehindMuch = max offset - push2SlaveMaxOffset).
local function ha_runtime(t, role)
    local h = shared.get_handle("broker.ha")
    if h == nil then
        return
    end
    local s = ha.stats(h)
    if role == "SLAVE" then
        t.haSlaveConnected = tostring(s.connected)
        t.haSlaveMasterAddr = s.master
        t.haSlaveMaxOffset = tostring(s.rawEnd)
        t.haSlaveFallBehind = tostring(math.max(0, s.masterOffset - s.rawEnd))
        return
    end
    t.haConnectionCount = tostring(s.conns)
    t.haPush2SlaveMaxOffset = tostring(s.acked)
    t.slaveFallBehindMuch = tostring(s.conns > 0 and math.max(0, s.maxPhy - s.acked) or 0)
end

local function runtime_info(b)
    local st, conf = b.store, b.conf
    local stats = st:stats()
    local boot = tonumber(meta:get("stats.bootTimestamp")) or core.now_ms()
    local start_msgs = tonumber(meta:get("stats.startMsgs")) or 0
    local start_phy = tonumber(meta:get("stats.startPhy")) or 0
    local msgs = tonumber(meta:get("stats.putMsgs")) or start_msgs
    local put_total = math.max(0, msgs - start_msgs)
    local put_bytes = math.max(0, stats.maxPhyOffset - start_phy)
    local earliest = st:earliest_time()
    local zero_tps = "0.00 0.00 0.00"
    local t = {
        brokerVersionDesc = "V4_9_8",
        brokerVersion = "409",
        bootTimestamp = tostring(boot),
        runtime = days(core.now_ms() - boot),
        msgPutTotalYesterdayMorning = "0",
        msgPutTotalTodayMorning = "0",
        msgPutTotalTodayNow = tostring(put_total),
        msgGetTotalYesterdayMorning = "0",
        msgGetTotalTodayMorning = "0",
        msgGetTotalTodayNow = "0",
        putTps = meta:get("stats.putTps") or zero_tps,
        getFoundTps = zero_tps,
        getMissTps = zero_tps,
        getTotalTps = zero_tps,
        getTransferedTps = zero_tps,
        putMessageTimesTotal = tostring(put_total),
        putMessageSizeTotal = tostring(put_bytes),
        putMessageAverageSize = ("%.2f"):format(put_total > 0 and put_bytes / put_total or 0),
        putMessageFailedTimes = "0",
        putMessageEntireTimeMax = "0",
        getMessageEntireTimeMax = "0",
        commitLogMinOffset = tostring(stats.minPhyOffset),
        commitLogMaxOffset = tostring(stats.maxPhyOffset),
        -- DefaultMessageStore.getRuntimeInfo: used/total of the commit log's disk, 0..1
        remainHowManyDataToCommit = "0",
        remainTransientStoreBufferNumbs = "2147483647",
        dispatchBehindBytes = "0",
        dispatchMaxBuffer = "0",
        pageCacheLockTimeMills = "0",
        earliestMessageTimeStamp = tostring(earliest or 0),
        startAcceptSendRequestTimeStamp = "0",
        sendThreadPoolQueueSize = "0",
        sendThreadPoolQueueCapacity = "10000",
        sendThreadPoolQueueHeadWaitTimeMills = "0",
        pullThreadPoolQueueSize = "0",
        pullThreadPoolQueueCapacity = "100000",
        pullThreadPoolQueueHeadWaitTimeMills = "0",
        queryThreadPoolQueueSize = "0",
        queryThreadPoolQueueCapacity = "20000",
        queryThreadPoolQueueHeadWaitTimeMills = "0",
        EndTransactionQueueSize = "0",
        EndTransactionThreadPoolQueueCapacity = "100000",
        -- rmq's own facts (mqadmin brokerStatus prints every key)
        brokerRole = conf.brokerRole,
        brokerPermission = tostring(conf.brokerPermission),
        flushDiskType = stats.flushDiskType,
        commitLogFiles = tostring(stats.commitlogFiles),
        consumeQueues = tostring(stats.queues),
        -- the statistics' last sample, ms (every brokerStatsSampleMillis)
        brokerStatsSampledAt = tostring(admin_store.sampled_at() or 0),
        -- consume-queue files mapped now / at most at once, cold ones unmapped (maxMappedConsumeQueueFiles)
        consumeQueueFilesMapped = tostring(stats.consumeQueueFilesMapped),
        consumeQueueFilesMappedPeak = tostring(stats.consumeQueueFilesMappedPeak),
        consumeQueueFileUnmaps = tostring(stats.consumeQueueFileUnmaps),
        maxMappedConsumeQueueFiles = tostring(stats.maxMappedConsumeQueueFiles),
        storeWritable = tostring(stats.writable),
        topicCount = tostring(topics.table:count()),
        subscriptionGroupCount = tostring(groups.table:count()),
        -- GET_ALL_TOPIC_CONFIG / GET_ALL_SUBSCRIPTIONGROUP_CONFIG bodies encoded (once per change)
        topicConfigEncodes = tostring(topics.table:encodes()),
        subscriptionGroupEncodes = tostring(groups.table:encodes()),
        scheduleDeadLetters = tostring(schedule.dead_letters()),
        -- 5.x's timer keys (AdminBrokerProcessor; docs/timer.md)
        timerReadBehind = tostring(stats.timerDequeueLagMs // 1000),
        timerOffsetBehind = tostring(stats.timerEnqueueLag),
        timerCongestNum = tostring(stats.timerPending),
        timerEnqueueTps = ("%.1f"):format(stats.timerEnqueueTps),
        timerDequeueTps = ("%.1f"):format(stats.timerDequeueTps),
        masterAddr = register.master_addr(),
        haMasterAddr = register.ha_master_addr(),
        slaveSyncTimestamp = meta:get("sync.lastSync"),   -- a slave's last config sync (rmq.broker.slave_sync)
    }
    ha_runtime(t, conf.brokerRole)
    admin_store.runtime_store_keys(b, t, stats)
    -- The memory budget (docs/memory.md): bytes held now and the limits.
    local mb = core.memory_budget()
    t.memoryBudgetUsed = tostring(mb.used)
    t.memoryBudgetRequests = tostring(mb.requests)
    t.memoryBudgetOutput = tostring(mb.output)
    t.memoryBudgetConsole = tostring(mb.console)
    t.memoryBudgetMetrics = tostring(mb.metrics)
    t.memoryBudgetPeerMax = tostring(mb.peerMax)
    t.memoryBudgetBytes = tostring(mb.limit)
    t.memoryBudgetPerPeerBytes = tostring(mb.perPeerLimit)
    t.memoryBudgetPerConnectionBytes = tostring(mb.perConnectionLimit)
    -- Requests refused with SYSTEM_BUSY so far, by the limit reached.
    t.memoryBudgetRefused = ("memoryBudgetBytes:%d memoryBudgetPerPeerBytes:%d memoryBudgetPerConnectionBytes:%d")
        :format(mb.refusedTotal, mb.refusedPeer, mb.refusedConnection)
    -- What the process holds beside the budget: the allocator's figures
    -- and each Lua state's heap ("main:1234 worker0:5678 ...", bytes).
    t.memoryAllocator = mb.allocator
    t.memoryAllocatedBytes = tostring(mb.allocated)
    t.memoryResidentBytes = tostring(mb.resident)
    t.memoryRetainedBytes = tostring(mb.retained)
    t.memoryActiveBytes = tostring(mb.active)
    t.memoryAllocatorMetadataBytes = tostring(mb.metadata)
    local heaps = {}
    for _, state in ipairs(mb.lua) do
        heaps[#heaps + 1] = state.name .. ":" .. state.bytes
    end
    t.memoryLuaHeapBytes = table.concat(heaps, " ")
    -- The log (docs/operations.md, Logging): lines dropped because the
    -- log file took them slower than they came (logBufferBytes full).
    t.logDroppedLines = tostring(core.log_stats().droppedLines)
    return fastjson.encode({ table = t })   -- KVTable, keys in byte order
end

-- }}}

-- {{{ Broker config

local value_text = admin_store.value_text

-- The typed value of one UPDATE_BROKER_CONFIG entry, or nil, why.
-- `remote` (a request from the network, not the live console): a policy
-- may only be one of rmq's own (rmq.policy.*) or the module the conf file
-- named, so a peer cannot make the broker load an arbitrary module.
local function config_value(conf, key, text, remote)
    local e = conf_mod.describe(key)
    if e == nil or e.ignored or not (e.roles.broker or e.roles.standalone) then
        local hint = conf_mod.suggest(key, conf_mod.keys_for_role("broker"))
        return nil, ("unknown broker config key '%s'%s"):format(key,
            hint and (" (did you mean '" .. hint .. "'?)") or "")
    end
    if e.secret then
        -- Not even "unchanged": that would tell a guess from the secret.
        return nil, ("key '%s' cannot be changed while rmq runs; set it in the conf file and restart"):format(key)
    end
    local v, err = conf_mod.coerce(key, text)
    if v == nil then
        return nil, err
    end
    if e.min and type(v) == "number" and v < e.min then
        return nil, ("key '%s' must be >= %d, got %s"):format(key, e.min, text)
    end
    if e.max and type(v) == "number" and v > e.max then
        return nil, ("key '%s' must be <= %d, got %s"):format(key, e.max, text)
    end
    -- What a conf may not ask for (aclEnable=true, brokerRole=SYNC_MASTER),
    -- an update may not switch on either.
    local refused = conf_mod.refusal(key, v)
    if refused then
        return nil, refused
    end
    if key == "slaveReadPolicy" then
        local why = e.check and e.check(v)
        if why then
            return nil, ("key '%s' %s"):format(key, why)
        end
        if remote and v:sub(1, #"rmq.policy.") ~= "rmq.policy." and v ~= remote.slaveReadPolicy then
            return nil, ("key '%s': a remote update may name only rmq.policy.* or the conf file's policy (%s);"
                         .. " load other modules from the conf file or the live console"):format(key,
                         tostring(remote.slaveReadPolicy or "rmq.policy.slave_read"))
        end
        if require("rmq.policy").resolve(v, "suggest") == nil then
            -- (the loader's message names server paths: not in a reply)
            return nil, ("key '%s': no policy module %s with a function suggest"):format(key, v)
        end
    end
    local live = M.LIVE[key]
    if live == nil then
        if v ~= conf[key] then
            return nil, ("key '%s' cannot be changed while rmq runs; set it in the conf file and restart"
                .. " (live keys: %s)"):format(key, table.concat(conf_mod.sorted_keys(M.LIVE), ", "))
        end
        return v
    end
    if live.values and not live.values[v] then
        return nil, ("key '%s' may be changed live only to %s, got %s"):format(key, live.doc, text)
    end
    if live.min and (v < live.min or v > live.max) then
        return nil, ("key '%s' may be changed live only within %d..%d, got %s"):format(key,
            live.min, live.max, text)
    end
    return v
end

M.config_value = config_value   -- the live console's set(key, value)

-- }}}

function M.processors(b)
    local conf = b.conf
    local P = {}
    -- What a remote UPDATE_BROKER_CONFIG may name as a policy besides
    -- rmq.policy.* (config_value): the conf file's choice, read at start.
    local remote = { slaveReadPolicy = conf.slaveReadPolicy }

    local function slave()
        return conf.brokerRole == "SLAVE"
    end

    -- The sync registration after a topic change: bounded by the
    -- registration timeout; the reply does not wait longer than that.
    local function registered()
        local ok, err = register.sync(b, (conf.registerBrokerTimeoutMills or 6000) + 1000)
        if not ok then
            log.warn("topic change: registration with the NameServers not confirmed: %s", tostring(err))
        end
    end

    local function persisted()
        local ok, err = M.persist_now()
        if not ok then
            log.warn("table change: not confirmed on disk: %s", tostring(err))
        end
    end

    -- The refusal of a topic admin request, if any: a slave refuses, the
    -- name (legal: the header checked it) must not be a system topic's.
    local function admin_refusal(topic)
        tables.sync_conf(conf)
        if slave() then
            return reply.system_error(M.SLAVE_REMARK)
        end
        if topics.is_system(topic, conf) then
            return reply.system_error(("The topic[%s] is conflict with system topic."):format(topic))
        end
        return nil
    end

    P[req.UPDATE_AND_CREATE_TOPIC] = { header = M.HEADER_CREATE_TOPIC, run = function(ctx, cmd, h)
        local topic = h.topic
        local refusal = admin_refusal(topic)
        if refusal then
            return refusal
        end
        local max = conf.topicQueueNumsMax or 1024
        for _, k in ipairs({ "readQueueNums", "writeQueueNums" }) do
            if h[k] > max then
                return reply.system_error(('the custom field <%s> is out of range 1..%d (topicQueueNumsMax): "%d"')
                    :format(k, max, h[k]))
            end
        end
        local filter = h.topicFilterType
        if not topics.FILTER_TYPES[filter] then
            return reply.system_error(("topicFilterType = [%s] value invalid"):format(names.show(filter)))
        end
        -- 4.9.8 builds a new TopicConfig: `order` of the header is not
        -- applied (the NameServer's ORDER_TOPIC_CONFIG sets it).
        local cfg = topics.config(topic, h.readQueueNums, h.writeQueueNums, h.perm)
        cfg.topicFilterType = filter
        cfg.topicSysFlag = h.topicSysFlag
        -- 5.x attributes: a modification of the topic's (kept when the
        -- request has none, as 5.x's TopicConfigManager does).
        local mods, why = topics.parse_attributes(h.attributes)
        if mods == nil then
            return reply.system_error(why)
        end
        for _, m in ipairs(mods) do
            if m.op == "+" and m.key == "message.type" and m.value == "MIXED" and not conf.enableMixedMessageType then
                return reply.error(R.INVALID_PARAMETER, "MIXED message type is not supported.")
            end
        end
        local current = topics.get(topic)
        local attrs, awhy = topics.alter_attributes(current == nil, current and current.attributes, mods)
        if attrs == nil then
            log.warn("UPDATE_AND_CREATE_TOPIC %s from %s refused: %s", topic, ctx.peer, awhy)
            return reply.system_error(awhy)
        end
        cfg.attributes = next(attrs) and attrs or nil
        local changed = topics.put(cfg)
        persisted()
        log.info("UPDATE_AND_CREATE_TOPIC %s from %s: %d/%d queues, perm %d%s", topic, ctx.peer,
                 cfg.readQueueNums, cfg.writeQueueNums, cfg.perm, changed and "" or " (unchanged)")
        registered()
        return { code = R.SUCCESS, remark = M.NOT_SET }
    end }

    -- 5.x GET_TOPIC_CONFIG (mqadmin getTopicConfig, the proxy): one
    -- topic as 5.x's TopicConfigAndQueueMapping, attributes included;
    -- mappingDetail (static topics, none here) is null and so not written.
    P[req.GET_TOPIC_CONFIG] = { header = M.HEADER_GET_TOPIC_CONFIG, run = function(ctx, cmd, h)
        local cfg = topics.get(h.topic)
        if cfg == nil then
            log.warn("GET_TOPIC_CONFIG from %s: no topic %s in this broker", ctx.peer, names.show(h.topic))
            return reply.error(R.TOPIC_NOT_EXIST, "No topic in this broker. topic: " .. h.topic)
        end
        return { code = R.SUCCESS, body = topics.encode5(cfg) }
    end }

    -- 5.x GET_SUBSCRIPTIONGROUP_CONFIG (the proxy reads a group's
    -- consumeMessageOrderly from it): one group as fastjson writes it,
    -- auto-created as a POP of it would (findSubscriptionGroupConfig).
    P[req.GET_SUBSCRIPTIONGROUP_CONFIG] = { header = M.HEADER_GET_GROUP_CONFIG, run = function(ctx, cmd, h)
        local cfg = groups.find(conf, h.group)
        if cfg == nil then
            log.warn("GET_SUBSCRIPTIONGROUP_CONFIG from %s: no group %s in this broker", ctx.peer, names.show(h.group))
            return reply.error(R.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        end
        return { code = R.SUCCESS, body = fastjson.encode(cfg) }
    end }

    P[req.DELETE_TOPIC_IN_BROKER] = { header = M.HEADER_DELETE_TOPIC, run = function(ctx, cmd, h)
        local topic = h.topic
        local refusal = admin_refusal(topic)
        if refusal then
            return refusal
        end
        local existed = topics.delete(topic)
        persisted()
        -- The store has no way to delete a topic's consume queues yet:
        -- they stay (and so do consumer offsets, to match them); a topic
        -- created again with the name continues from them.
        log.info("DELETE_TOPIC_IN_BROKER %s from %s: %s", topic, ctx.peer,
                 existed and "deleted" or "was not there")
        if existed then
            register.now()
        end
        return { code = R.SUCCESS }
    end }

    P[req.GET_ALL_TOPIC_CONFIG] = function()
        -- Encoded once per DataVersion, shared (docs/hardening-tables.md)
        return { code = R.SUCCESS, ext = {}, body = topics.shared_wrapper() }
    end

    P[req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP] = function(ctx, cmd)
        tables.sync_conf(conf)
        if slave() then
            return reply.system_error(M.SLAVE_REMARK)
        end
        local body = cmd.body
        if body == nil or body == "" then
            return reply.system_error("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP needs a SubscriptionGroupConfig JSON body")
        end
        local raw, err = fastjson.decode(body)
        if raw == nil then
            return reply.system_error("the SubscriptionGroupConfig body is not JSON: " .. header.scrub(tostring(err)))
        end
        local cfg
        cfg, err = groups.normalize(raw)
        if cfg == nil then
            return reply.system_error("bad SubscriptionGroupConfig: " .. header.scrub(tostring(err)))
        end
        local bad = names.group(cfg.groupName)
        if bad then
            return reply.system_error(bad)
        end
        local max = conf.topicQueueNumsMax or 1024
        if cfg.retryQueueNums < 0 or cfg.retryQueueNums > max then
            return reply.system_error(("retryQueueNums %d is out of range: 0..%d (topicQueueNumsMax)")
                :format(cfg.retryQueueNums, max))
        end
        groups.put(cfg)
        persisted()
        log.info("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP %s from %s", cfg.groupName, ctx.peer)
        return { code = R.SUCCESS }
    end

    P[req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG] = function()
        return { code = R.SUCCESS, body = groups.shared_wrapper() }
    end

    P[req.DELETE_SUBSCRIPTIONGROUP] = { header = M.HEADER_DELETE_GROUP, run = function(ctx, cmd, h)
        tables.sync_conf(conf)
        if slave() then
            return reply.system_error(M.SLAVE_REMARK)
        end
        local name = h.groupName
        local existed = groups.delete(name)
        persisted()
        local remove = h.removeOffset == true
        if remove then
            local ok, offsets = pcall(require, "rmq.broker.offsets")
            if ok and type(offsets.remove_group) == "function" then
                offsets.remove_group(name)
            end
        end
        log.info("DELETE_SUBSCRIPTIONGROUP %s from %s: %s%s", name, ctx.peer,
                 existed and "deleted" or "was not there", remove and ", offsets removed" or "")
        return { code = R.SUCCESS }
    end }

    P[req.GET_BROKER_RUNTIME_INFO] = function()
        tables.sync_conf(conf)
        return { code = R.SUCCESS, body = runtime_info(b) }
    end

    P[req.GET_BROKER_CONFIG] = function()
        tables.sync_conf(conf)
        return { code = R.SUCCESS, ext = { version = tables.encode_dv(config_table:data_version()) },
                 body = admin_store.config_text(b, conf, conf_mod.keys_for_role("broker")) }
    end

    P[req.UPDATE_BROKER_CONFIG] = function(ctx, cmd)
        tables.sync_conf(conf)
        local body = cmd.body
        if body == nil or body == "" then
            return reply.system_error("UPDATE_BROKER_CONFIG needs a body of key=value lines")
        end
        local ok, props = pcall(require("rmq.properties").parse, body)
        if not ok or type(props) ~= "table" then
            return reply.system_error("the body is not properties text: " .. header.scrub(tostring(props)))
        end
        local changes, keys = {}, {}
        for k in pairs(props) do
            keys[#keys + 1] = k
        end
        table.sort(keys)
        for _, k in ipairs(keys) do
            if M.BLACK_LIST[k] then
                return reply.black_list()
            end
            local v, err = config_value(conf, k, props[k], remote)
            if v == nil then
                err = header.scrub(tostring(err))
                log.warn("UPDATE_BROKER_CONFIG from %s refused: %s", ctx.peer, err)
                return reply.system_error(err)
            end
            changes[k] = v
        end
        local perm_changed = false
        for _, k in ipairs(keys) do
            if changes[k] ~= conf[k] then
                log.info("UPDATE_BROKER_CONFIG from %s: %s = %s (was %s)", ctx.peer, k,
                         value_text(changes[k]), value_text(conf[k]))
                tables.set_setting(k, changes[k])
                conf[k] = changes[k]
                perm_changed = perm_changed or k == "brokerPermission"
            end
        end
        config_table:bump()
        if perm_changed then
            topics.table:bump()
            registered()
        end
        return { code = R.SUCCESS }
    end

    return P
end

function M.main_init(b)
    tables.clear_settings()
    config_table:reset_data_version()
    config_table:data_version()
    local st = b.store
    local msgs = st:queues_max_sum()
    meta:set("stats.bootTimestamp", tostring(core.now_ms()))
    meta:set("stats.startMsgs", tostring(msgs))
    meta:set("stats.putMsgs", tostring(msgs))
    meta:set("stats.startPhy", tostring(st:max_phy()))
    meta:del("stats.putTps")
    meta:del("persisted.topics")
    meta:del("persisted.groups")
    samples = {}
end

function M.main_stop(b)
    persister.stopped = true
    net.raise(topics.PERSIST)
end

function M.main_start(b)
    persister.stopped = false
    net.spawn(function()
        while not persister.stopped do
            -- A change made while the last write ran raised PERSIST when
            -- nobody waited: look at the versions, not only the event.
            local written_t = tonumber(meta:get("persisted.topics") or "")
            local written_g = tonumber(meta:get("persisted.groups") or "")
            if written_t == topics.table:version() and written_g == groups.table:version() then
                net.wait_event(topics.PERSIST, 1000)
            end
            -- A test's window (src/core/errinj.h): the persister late.
            local late = store.errinj("config_persist_delay_ms")
            if late > 0 and not persister.stopped then
                net.sleep(late)
            end
            if persister.stopped then
                break
            end
            local ok, err = pcall(persist_tables, b.conf)
            if not ok then
                log.error("persisting the broker tables: %s", tostring(err))
            end
        end
    end)
    b.timers = b.timers or {}
    b.timers[#b.timers + 1] = net.timer(0, 1000, function()
        local ok, err = pcall(sample, b.store)
        if not ok then
            log.error("broker stats sample: %s", tostring(err))
        end
    end)
end

return M
