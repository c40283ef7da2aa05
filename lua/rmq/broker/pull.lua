-- Broker: PULL_MESSAGE (11), protocol.md 4.3, 6.6-6.8 (RocketMQ's
-- PullMessageProcessor and PullRequestHoldService).
--
-- The request is C's, whole (src/broker/pull_processor.h): every check
-- in Java's order, the read (one store call with the subscription's tag
-- codes and filters), the reply (the records copied once from the mapped
-- commit log into the connection's output), the long poll (held in C on
-- the event "topic@queueId" the send path raises, re-checked every
-- pullHoldRecheckMillis, for the consumer's suspendTimeoutMillis with
-- longPollingEnable or shortPollingTimeMills, at most
-- brokerSuspendMaxTimeMillis), commitOffset, and a master's corrected
-- offset with its OFFSET_MOVED_EVENT.  This module configures it and
-- answers its decisions, each a hook C calls with the facts:
--
--   suggest(facts) -> brokerId   suggestWhichBrokerId: the slaveReadPolicy
--       in force (rmq.policy.slave_read by default: 4.9.8's rule; the
--       policy module documents the facts; a policy other than the
--       default also gets the replication figures).  slaveReadEnable and
--       slaveReadPolicy may be changed by UPDATE_BROKER_CONFIG: the next
--       pull reply follows.  A slave that may not be read (slaveReadEnable
--       off) still serves what it has and suggests the master, as 4.9.8
--       does.
--   createGroup(group) -> exists   autoCreateSubscriptionGroup.
--   pullFilter(topic, group) -> nil | fn, body, account   the Lua pull
--       filter conf.pullFilters names for "topic@group" or "topic"
--       (rmq.broker.filter): C shows it each record its read would return
--       (fn(properties, tags, bodySize [, body]) -> keep) and tells
--       account(calls, dropped, err, nanos) what it cost.
--
-- The entry's `run` (a request that did not come to C first:
-- nativeProcessors = false, a draining worker) runs the same C
-- processor (native.run).
local core = require("rmq.core")
local codes = require("rmq.codes")
local filter = require("rmq.broker.filter")
local log = require("rmq.log")
local policy = require("rmq.policy")
local shared = require("rmq.shared")
local header = require("rmq.header")
local processors = require("rmq.processors")
local native = require("rmq.native")
local tables = require("rmq.broker.tables")

local M = {}

-- PullMessageRequestHeader (protocol.md 4.3), read by dispatch.  A
-- FastCodesHeader in Java: a number that does not parse is refused; the
-- fields Java unboxes are required here, commitOffset,
-- suspendTimeoutMillis and subVersion default to 0.  queueOffset may be
-- any long (below the queue's minimum it is OFFSET_TOO_SMALL, as in
-- Java); queueId < 0 is refused below with Java's remark.
M.HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "queueOffset", "long", true },
    { "maxMsgNums", "int", true },
    { "sysFlag", "int", true },
    { "commitOffset", "long", false, default = 0 },
    { "suspendTimeoutMillis", "long", false, default = 0 },
    { "subscription", "string", false },
    { "subVersion", "long", false, default = 0 },
    { "expressionType", "string", false },
})

function M.processors(b)
    local conf = b.conf
    local st, groups = b.store, b.groups
    -- The role at run time (a controller may switch it): the store's.
    local function is_slave()
        return (st:role()) == "SLAVE"
    end
    local memory = core.total_memory()
    local default_suggest = require("rmq.policy.slave_read").suggest
    local suggest = assert(policy.resolve(conf.slaveReadPolicy, "suggest", "rmq.policy.slave_read"))
    local builtin = suggest == default_suggest
    local policies = { [conf.slaveReadPolicy or "rmq.policy.slave_read"] = suggest }
    local policies_gen = policy.generation()   -- a live swap empties the cache
    -- Replication figures for a policy other than the default (which
    -- does not read them): rmq.ha's, from any worker.
    local function ha_facts()
        local h = shared.get_handle("broker.ha")
        if h == nil then
            return nil
        end
        local hs = require("rmq.ha").stats(h)
        if is_slave() then
            return { slaveAckOffset = hs.rawEnd, slaveLagBytes = math.max(0, (hs.masterOffset or 0) - (hs.rawEnd or 0)),
                     slaveConnected = hs.connected == true }
        end
        return { slaveAckOffset = hs.acked, slaveLagBytes = math.max(0, (hs.maxPhy or 0) - (hs.acked or 0)),
                 slaveConnected = (hs.conns or 0) > 0 }
    end
    local ratio = conf.accessMessageInMemoryMaxRatio or 40

    -- The slaveReadPolicy in force (conf synced by the caller): its suggest.
    local function current_suggest()
        local name = conf.slaveReadPolicy or "rmq.policy.slave_read"
        if policy.generation() ~= policies_gen then
            policies, policies_gen = {}, policy.generation()
        end
        local fn = policies[name]
        if fn == nil then
            local err
            fn, err = policy.resolve(name, "suggest", "rmq.policy.slave_read")
            if fn == nil then
                log.warn("slaveReadPolicy %s: %s; using rmq.policy.slave_read", tostring(name), tostring(err))
                fn = default_suggest
            end
            policies[name] = fn
        end
        return fn
    end

    -- suggestWhichBrokerId: fn's answer to the facts (the policy module
    -- documents them; a policy other than the default also gets the
    -- replication figures); the master when it fails.
    local function ask(fn, facts)
        if fn ~= default_suggest then
            for k, v in pairs(ha_facts() or {}) do
                facts[k] = v
            end
        end
        local ok, which = pcall(fn, facts)
        if not ok or math.type(which) ~= "integer" or which < 0 then
            log.warn("slaveReadPolicy %s answered %s: suggesting the master",
                     tostring(conf.slaveReadPolicy), tostring(which))
            which = 0
        end
        return which
    end

    local np   -- the C processor (below)

    -- A request its Lua entry got: the same C processor, which answers
    -- every pull (it hands none back).
    local function pull(ctx, cmd)
        if not native.run(np, ctx, cmd) then
            return { code = codes.response.SYSTEM_ERROR, remark = "the pull processor handed the request back" }
        end
        return nil
    end

    do
        -- The topics a Lua pull filter may apply to: their reads ask
        -- the pullFilter hook.
        local filter_topics = {}
        for key in pairs(conf.pullFilters or {}) do
            filter_topics[#filter_topics + 1] = key:match("^(.-)@") or key
        end
        np = processors.pull({
            store = st, header = M.HEADER, brokerPermission = conf.brokerPermission, ip = b.ip,
            brokerName = conf.brokerName,
            slaveReadEnable = conf.slaveReadEnable == true, memory = memory,
            accessMessageInMemoryMaxRatio = ratio, filterTopics = filter_topics,
            filterSupportRetry = conf.filterSupportRetry == true,
            enablePropertyFilter = conf.enablePropertyFilter == true,
            filterExpressionMaxLength = conf.filterExpressionMaxLength,
            filterExpressionMaxDepth = conf.filterExpressionMaxDepth,
            filterExpressionMaxNodes = conf.filterExpressionMaxNodes,
            filterCompiledCacheSize = math.min(conf.filterCompiledCacheSize, 256),
            slaveReadPolicyBuiltin = builtin,
            -- The long poll, held in C (pull_processor.h).
            longPollingEnable = conf.longPollingEnable ~= false,
            shortPollingTimeMills = conf.shortPollingTimeMills or 1000,
            brokerSuspendMaxTimeMillis = conf.brokerSuspendMaxTimeMillis,
            pullHoldRecheckMillis = conf.pullHoldRecheckMillis,
            pullReadWindowBytes = conf.pullReadWindowBytes,
            suggest = function(facts)
                tables.sync_conf(conf)
                return ask(current_suggest(), facts)
            end,
            -- A decision too: a group the table does not have is created
            -- (autoCreateSubscriptionGroup) and C serves the pull.
            createGroup = function(group)
                tables.sync_conf(conf)
                return groups.find(conf, group) ~= nil
            end,
            pullFilter = function(topic, group)
                local pf = filter.pull_filter(conf, topic, group)
                if pf == nil then
                    return nil
                end
                return pf.fn, pf.body, pf.account
            end,
        })
    end
    return {
        [codes.request.PULL_MESSAGE] = { header = M.HEADER, run = pull, native = np },
    }
end

return M
