-- The offset family of `rmq admin`: cloneGroupOffset, resetOffsetByTime
-- and skipAccumulatedMessage, as 4.9.8's mqadmin (CloneGroupOffsetCommand,
-- ResetOffsetByTimeCommand, SkipAccumulationSubCommand).
--
-- A reset asks every broker of the topic's route with
-- INVOKE_BROKER_TO_RESET_OFFSET (222): the broker moves the committed
-- offsets and tells the group's live consumers (RESET_CONSUMER_CLIENT_OFFSET)
-- so they re-read at once.  When it answers CONSUMER_NOT_ONLINE (no
-- member connected) mqadmin falls back to writing the offsets itself
-- (resetOffsetByTimestampOld: GET_CONSUME_STATS, SEARCH_OFFSET_BY_TIMESTAMP
-- or GET_MAX_OFFSET, then UPDATE_CONSUMER_OFFSET), and so do we.
--
--   offset.reset(ctx, {group=, topic=, timestamp=, force=}) ->
--       {offsets = {{brokerName=, queueId=, offset=}...}} | {rollback = {RollbackStats...}}
--   offset.clone(ctx, {srcGroup=, destGroup=, topic=}) -> {cloned = {...}}
local codes = require("rmq.codes")
local remote = require("rmq.admin.remote")
local rpc = require("rmq.admin.rpc")

local req = codes.request
local CONSUMER_NOT_ONLINE = codes.response.CONSUMER_NOT_ONLINE

local M = {}

local function array(t)
    return require("rmq.admin").array(t)
end

local function tbl(headings, rows)
    return require("rmq.admin").table(headings, rows)
end

--- -s of resetOffsetByTime: "now" (-1), milliseconds, or
--- yyyy-MM-dd#HH:mm:ss:SSS in local time.
function M.parse_timestamp(s)
    if s == "now" then
        return -1
    end
    return rpc.parse_time(s, "timestamp")
end

local function parse_force(v)
    if v == nil then
        return true
    end
    return tostring(v):lower() == "true"   -- Boolean.valueOf
end

local function update_offset(ctx, addr, group, mq, offset)
    remote.ok(ctx, addr, { code = req.UPDATE_CONSUMER_OFFSET,
                           ext = { consumerGroup = group, topic = mq.topic, queueId = mq.queueId,
                                   commitOffset = offset, bname = mq.brokerName } })
end

-- resetOffsetConsumeOffset: one queue moved to the offset of timestamp
-- (the max offset for -1), unless it would go forward without force.
local function rollback_queue(ctx, addr, group, mq, w, timestamp, force)
    local reset
    if timestamp == -1 then
        reset = rpc.queue_offset(ctx, addr, req.GET_MAX_OFFSET, mq.topic, mq.queueId)
    else
        reset = rpc.queue_offset(ctx, addr, req.SEARCH_OFFSET_BY_TIMESTAMP, mq.topic, mq.queueId, timestamp)
    end
    local st = { brokerName = mq.brokerName, queueId = mq.queueId, brokerOffset = w.brokerOffset,
                 consumerOffset = w.consumerOffset, timestampOffset = reset, rollbackOffset = w.consumerOffset }
    if force or reset <= w.consumerOffset then
        st.rollbackOffset = reset
        update_offset(ctx, addr, group, mq, reset)
    end
    return st
end

-- resetOffsetByTimestampOld, for a group with no member online.
local function reset_old(ctx, group, topic, timestamp, force)
    local bds, r = rpc.route_brokers(ctx, topic)
    local nums = {}
    for _, qd in ipairs(r.queueDatas or {}) do
        nums[qd.brokerName] = qd.readQueueNums
    end
    local out = {}
    for _, bd in ipairs(bds) do
        local addr = rpc.select_addr(bd)
        if addr then
            local stats = rpc.json(ctx, addr, { code = req.GET_CONSUME_STATS, ext = { consumerGroup = group } })
            local consumed = {}
            for _, kv in ipairs(remote.entries(stats.offsetTable)) do
                local mq, w = kv.key, kv.value
                if type(mq) == "table" and mq.topic == topic then
                    consumed[#consumed + 1] = { mq = mq, w = w }
                end
            end
            table.sort(consumed, function(a, b) return rpc.mq_less(a.mq, b.mq) end)
            if #consumed == 0 then
                -- Never consumed: from the queue's own min and max offsets
                -- (what GET_TOPIC_STATS_INFO answers).
                for q = 0, (nums[bd.brokerName] or 0) - 1 do
                    local w = {
                        brokerOffset = rpc.queue_offset(ctx, addr, req.GET_MAX_OFFSET, topic, q),
                        consumerOffset = rpc.queue_offset(ctx, addr, req.GET_MIN_OFFSET, topic, q),
                    }
                    consumed[#consumed + 1] = { mq = { topic = topic, brokerName = bd.brokerName, queueId = q },
                                                w = w }
                end
            end
            for _, c in ipairs(consumed) do
                out[#out + 1] = rollback_queue(ctx, addr, group, c.mq, c.w, timestamp, force)
            end
        end
    end
    return out
end

--- resetOffsetByTimestamp: INVOKE_BROKER_TO_RESET_OFFSET at every broker
--- of the route; the offsets the brokers set, or (no member online)
--- what the fallback wrote.
function M.reset(ctx, group, topic, timestamp, force, cplus)
    local offsets = {}
    for _, bd in ipairs((rpc.route_brokers(ctx, topic))) do
        local addr = rpc.select_addr(bd)
        if addr then
            -- -c (a C++ client's offsets): 4.9.8 marks the request CPP.
            local cmd = { code = req.INVOKE_BROKER_TO_RESET_OFFSET, language = cplus and "CPP" or nil,
                          ext = { topic = topic, group = group, timestamp = timestamp, isForce = force } }
            local r = remote.ok(ctx, addr, cmd, { [CONSUMER_NOT_ONLINE] = true })
            if r.code == CONSUMER_NOT_ONLINE then
                return { rollback = array(reset_old(ctx, group, topic, timestamp, force)) }
            end
            local t = r.body and r.body ~= "" and remote.decode_fastjson(r.body, addr)
            for _, kv in ipairs(remote.entries(t and t.offsetTable)) do
                local mq = kv.key
                if type(mq) == "table" then
                    offsets[#offsets + 1] = { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId,
                                              offset = kv.value }
                end
            end
        end
    end
    table.sort(offsets, rpc.mq_less)
    return { offsets = array(offsets) }
end

local function reset_text(r, header)
    local lines = {}
    if header then
        lines[1] = header
    end
    if r.rollback then
        local rows = {}
        for _, s in ipairs(r.rollback) do
            rows[#rows + 1] = { s.brokerName, s.queueId, s.brokerOffset, s.consumerOffset, s.timestampOffset,
                                s.rollbackOffset }
        end
        lines[#lines + 1] = tbl({ "#brokerName", "#queueId", "#brokerOffset", "#consumerOffset", "#timestampOffset",
                                  "#rollbackOffset" }, rows)
    else
        local rows = {}
        for _, q in ipairs(r.offsets) do
            rows[#rows + 1] = { q.brokerName, q.queueId, q.offset }
        end
        lines[#lines + 1] = tbl({ "#brokerName", "#queueId", "#offset" }, rows)
    end
    return table.concat(lines, "\n")
end

function M.clone(ctx, o)
    local stats = rpc.consume_stats(ctx, o.srcGroup)
    local route = remote.route(ctx, o.topic)
    local addr_of = {}
    for _, bd in ipairs(route.brokerDatas or {}) do
        addr_of[bd.brokerName] = rpc.select_addr(bd)
    end
    local out = { srcGroup = o.srcGroup, destGroup = o.destGroup, topic = o.topic, cloned = {} }
    -- As mqadmin: every queue the source group has an offset of, at the
    -- brokers of the topic's route.
    for _, w in ipairs(stats.offsetTable) do
        local addr = addr_of[w.mq.brokerName]
        if addr and w.consumerOffset >= 0 then
            update_offset(ctx, addr, o.destGroup, w.mq, w.consumerOffset)
            out.cloned[#out.cloned + 1] = { topic = w.mq.topic, brokerName = w.mq.brokerName, queueId = w.mq.queueId,
                                            offset = w.consumerOffset }
        end
    end
    out.cloned = array(out.cloned)
    return out
end

M.commands = {
    {
        name = "cloneGroupOffset", desc = "clone offset from other group.",
        options = {
            { "s", "srcGroup", arg = true, required = true, desc = "set source consumer group" },
            { "d", "destGroup", arg = true, required = true, desc = "set destination consumer group" },
            { "t", "topic", arg = true, required = true, desc = "set the topic" },
            { "o", "offline", arg = true, desc = "the group or the topic is offline" },
        },
        run = M.clone,
        format = function(r)
            return ("clone group offset success. srcGroup[%s], destGroup=[%s], topic[%s]"):format(r.srcGroup,
                r.destGroup, r.topic)
        end,
    },
    {
        name = "resetOffsetByTime", desc = "Reset consumer offset by timestamp(without client restart).",
        options = {
            { "g", "group", arg = true, required = true, desc = "set the consumer group" },
            { "t", "topic", arg = true, required = true, desc = "set the topic" },
            { "s", "timestamp", arg = true, required = true,
              desc = "set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]" },
            { "f", "force", arg = true, desc = "set the force rollback by timestamp switch[true|false]" },
            { "c", "cplus", desc = "reset c++ client offset" },
        },
        run = function(ctx, o)
            local ts = M.parse_timestamp(o.timestamp)
            local force = parse_force(o.force)
            local r = M.reset(ctx, o.group, o.topic, ts, force, o.cplus)
            r.group, r.topic, r.force, r.timestampString, r.timestamp = o.group, o.topic, force, o.timestamp, ts
            return r
        end,
        format = function(r)
            return reset_text(r, ("rollback consumer offset by specified %s[%s], topic[%s], force[%s], "
                .. "timestamp(string)[%s], timestamp(long)[%s]"):format(r.rollback and "consumerGroup" or "group",
                r.group, r.topic, tostring(r.force), r.timestampString, tostring(r.timestamp)))
        end,
    },
    {
        name = "skipAccumulatedMessage", desc = "Skip all messages that are accumulated (not consumed) currently",
        options = {
            { "g", "group", arg = true, required = true, desc = "set the consumer group" },
            { "t", "topic", arg = true, required = true, desc = "set the topic" },
            { "f", "force", arg = true, desc = "set the force rollback by timestamp switch[true|false]" },
        },
        run = function(ctx, o)
            return M.reset(ctx, o.group, o.topic, -1, parse_force(o.force))
        end,
        format = function(r) return reset_text(r) end,
    },
}

return M
