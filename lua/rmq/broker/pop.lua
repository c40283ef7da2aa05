-- Broker: RocketMQ 5's POP consumption (docs/pop.md).  The requests are
-- served in C (broker/pop_processor.c, rmq.processors.pop) over the lease
-- store (store/popstore.c); this module declares their headers, builds
-- the processor, and keeps the two decisions C hands over:
--
--   * a POP whose group or retry topic does not exist yet: the group is
--     found or auto-created as for a PULL (groups.find), the group's POP
--     retry topic %RETRY%group_topic (5.x's name, retry topic v1, its
--     default) and %DLQ%group are created; then C runs it again;
--   * a POP that found nothing and may wait (pollTime > 0): held here on
--     the event "topic@*" (raised by every store into the topic while a
--     POP waits, and by the revive service) for at most pollTime
--     (brokerSuspendMaxTimeMillis caps it), re-read at least every
--     pullHoldRecheckMillis; C answers (native.serve), the last time
--     whatever it finds.
local codes = require("rmq.codes")
local core = require("rmq.core")
local header = require("rmq.header")
local log = require("rmq.log")
local names = require("rmq.names")
local native = require("rmq.native")
local net = require("rmq.net")
local processors = require("rmq.processors")
local reply = require("rmq.reply")
local shared = require("rmq.shared")

local M = {}

local Q = codes.request

-- Set by the main thread at shutdown: held POPs answer at their next
-- re-check.
local state = shared.map("broker.pop")

-- PopMessageRequestHeader (5.x): the fields it marks @CFNotNull are
-- required; exp/expType/order/attemptId are not.
M.POP_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "maxMsgNums", "int", true },
    { "invisibleTime", "long", true },
    { "pollTime", "long", true },
    { "bornTime", "long", true },
    { "initMode", "int", true },
    { "expType", "string", false },
    { "exp", "string", false },
    { "order", "bool", false },
    { "attemptId", "string", false },
})

-- AckMessageRequestHeader (5.x).
M.ACK_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "extraInfo", "string", true },
    { "offset", "long", true },
})

-- ChangeInvisibleTimeRequestHeader (5.x).
M.CHANGE_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "extraInfo", "string", true },
    { "offset", "long", true },
    { "invisibleTime", "long", true },
})

-- PeekMessageRequestHeader (5.x).
M.PEEK_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "maxMsgNums", "int", true },
})

-- NotificationRequestHeader (5.x).
M.NOTIFICATION_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
    { "pollTime", "long", true },
    { "bornTime", "long", true },
    { "order", "bool", false },
    { "attemptId", "string", false },
})

-- PollingInfoRequestHeader (5.x).
M.POLLING_INFO_HEADER = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "topic", true },
    { "queueId", "int", true },
})

--- KeyBuilder.buildPopRetryTopic (retry topic v1).
function M.retry_topic(topic, group)
    return "%RETRY%" .. group .. "_" .. topic
end

function M.processors(b)
    local conf = b.conf
    local topics, groups = b.topics, b.groups
    -- (A slave answers REQUEST_CODE_NOT_SUPPORTED: leases live on the
    -- master.  C checks the store's role on each request, so a slave
    -- promoted at run time serves POP and a demoted master stops.)
    local np = processors.pop({
        store = b.store, pop = M.POP_HEADER, ack = M.ACK_HEADER, change = M.CHANGE_HEADER,
        peek = M.PEEK_HEADER, notification = M.NOTIFICATION_HEADER, pollingInfo = M.POLLING_INFO_HEADER,
        brokerIP1 = b.ip, brokerPermission = conf.brokerPermission,
        dir = conf.storePathRootDir .. "/pop",
        popInvisibleTimeMinMillis = conf.popInvisibleTimeMinMillis,
        popInvisibleTimeMaxMillis = conf.popInvisibleTimeMaxMillis,
        popMaxInflightPerGroup = conf.popMaxInflightPerGroup,
        popMaxInflightTotal = conf.popMaxInflightTotal,
        popLeaseLogCompactBytes = conf.popLeaseLogCompactBytes,
        popReviveIntervalMillis = conf.popReviveIntervalMillis,
        popFromRetryProbability = conf.popFromRetryProbability,
        initPopOffsetByCheckMsgInMem = conf.initPopOffsetByCheckMsgInMem,
    })
    local RW = topics.PERM_READ | topics.PERM_WRITE

    -- The group's POP retry and dead letter topics, once.
    local ensured = {}
    local function ensure_topics(group, topic)
        local retry = M.retry_topic(topic, group)
        if ensured[retry] then
            return true
        end
        if names.topic(retry) then
            return false
        end
        local cfg, created = topics.ensure(retry, 1, RW)
        if cfg == nil then
            return false
        end
        if created then
            log.info("created topic %s (POP retry of %s for %s)", retry, topic, group)
        end
        topics.ensure("%DLQ%" .. group, 1, RW)
        ensured[retry] = true
        return true
    end

    -- Holds a POP or NOTIFICATION C found nothing for, counted for
    -- POLLING_INFO under topic@group@queueId.
    local function hold(ctx, cmd, h)
        local key = h.topic .. "@*"
        local held = h.topic .. "@" .. h.consumerGroup .. "@" .. h.queueId
        processors.pop_held(held, 1)
        local deadline = core.mono_ms() + math.min(h.pollTime, conf.brokerSuspendMaxTimeMillis)
        local done = false
        while not done do
            local left = deadline - core.mono_ms()
            if left <= 0 or state:get("stopping") then
                break
            end
            net.wait_event(key, math.ceil(math.min(left, conf.pullHoldRecheckMillis)))
            done = ctx.closed or native.serve(np, ctx, cmd, false)
        end
        processors.pop_held(held, -1)
        if not done and not ctx.closed then
            native.serve(np, ctx, cmd, true)
        end
        return nil
    end

    local function pop(ctx, cmd, h)
        -- Its connection is gone (a gRPC session ending): a message
        -- taken now would only turn invisible, its answer dropped.
        if ctx.closed then
            return nil
        end
        -- C handed it over before answering: a group to find or create,
        -- a retry topic to create, or nothing found with pollTime > 0.
        if groups.find(conf, h.consumerGroup) ~= nil and topics.get(h.topic) ~= nil then
            ensure_topics(h.consumerGroup, h.topic)
        end
        if native.serve(np, ctx, cmd, h.pollTime <= 0) then
            return nil
        end
        return hold(ctx, cmd, h)
    end

    -- PEEK and POLLING_INFO come here for a group to find or create only.
    local function with_group(ctx, cmd, h)
        groups.find(conf, h.consumerGroup)
        native.serve(np, ctx, cmd, true)
        return nil
    end

    local function notification(ctx, cmd, h)
        groups.find(conf, h.consumerGroup)
        if native.serve(np, ctx, cmd, h.pollTime <= 0) then
            return nil
        end
        return hold(ctx, cmd, h)
    end

    -- ACK, BATCH_ACK and CHANGE_MESSAGE_INVISIBLETIME never come here (C answers
    -- every case); kept as handlers so the table names the codes.
    local function in_c(ctx, cmd)
        if native.serve(np, ctx, cmd, true) then
            return nil
        end
        return reply.system_error("not served")
    end

    return {
        [Q.POP_MESSAGE] = { header = M.POP_HEADER, run = pop, native = np },
        [Q.ACK_MESSAGE] = { header = M.ACK_HEADER, run = in_c, native = np },
        [Q.CHANGE_MESSAGE_INVISIBLETIME] = { header = M.CHANGE_HEADER, run = in_c, native = np },
        [Q.BATCH_ACK_MESSAGE] = { run = in_c, native = np },
        [Q.PEEK_MESSAGE] = { header = M.PEEK_HEADER, run = with_group, native = np },
        [Q.NOTIFICATION] = { header = M.NOTIFICATION_HEADER, run = notification, native = np },
        [Q.POLLING_INFO] = { header = M.POLLING_INFO_HEADER, run = with_group, native = np },
    }
end

--- Main thread, at SIGTERM: held POPs answer at their next re-check;
-- the revive thread stops (the lease log synced).
function M.main_stop()
    state:set("stopping", "1")
    processors.pop_stop()
end

function M.main_init()
    state:del("stopping")
end

--- The lease store's figures ({inflight, acked, revived, changed,
-- logBytes}), or nil when this process serves no POP.
function M.stats()
    return processors.pop_stats()
end

return M
