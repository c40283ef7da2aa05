-- Broker: LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42), what orderly push
-- consumers use so that one client at a time consumes a queue
-- (RocketMQ's RebalanceLockManager, protocol.md 4.10).  A lock is
-- (group, queue) -> (clientId, last renewal), shared by every worker; it
-- lapses after rebalanceLockMaxLiveTime without renewal.
local cjson = require("cjson")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local codes = require("rmq.codes")
local shared = require("rmq.shared")
local names = require("rmq.names")
local reply = require("rmq.reply")

local M = {}

local locks = shared.map("broker.locks")

local function key(group, mq)
    return table.concat({ group, tostring(mq.topic), tostring(mq.brokerName),
                          tostring(math.tointeger(mq.queueId) or mq.queueId) }, "\1")
end

--- Tries to lock mq for client; true when client holds it afterwards.
function M.try_lock(group, mq, client, now, max_live)
    local k = key(group, mq)
    local mine = cjson.encode({ c = client, t = now })
    if locks:set(k, mine, true) then
        return true  -- it was free
    end
    local cur = cjson.decode(locks:get(k) or "null")
    if cur == nil or cur == cjson.null then
        return locks:set(k, mine, true)
    end
    if cur.c == client then
        locks:set(k, mine)  -- renewal
        return true
    end
    if now - cur.t > max_live then
        -- Lapsed: take it over (another worker may win the race; then it
        -- holds the lock and we report not locked).
        locks:del(k)
        return locks:set(k, mine, true)
    end
    return false
end

function M.unlock(group, mq, client)
    local k = key(group, mq)
    local cur = cjson.decode(locks:get(k) or "null")
    if cur ~= nil and cur ~= cjson.null and cur.c == client then
        locks:del(k)
    end
end

function M.processors(b)
    local conf = b.conf
    local R = codes.response
    -- The LockBatchRequestBody / UnlockBatchRequestBody, its names
    -- checked by RocketMQ's rules (they become lock keys): the body, or
    -- nil and the remark.
    local function body_of(cmd, what)
        local ok, t = pcall(cjson.decode, cmd.body or "")
        if not ok or type(t) ~= "table" or type(t.mqSet) ~= "table"
            or type(t.consumerGroup) ~= "string" or type(t.clientId) ~= "string" then
            return nil, what .. ": bad body (want consumerGroup, clientId, mqSet)"
        end
        local bad = names.group(t.consumerGroup)
        if bad then
            return nil, what .. ": consumerGroup: " .. bad
        end
        for i, mq in ipairs(t.mqSet) do
            if type(mq) ~= "table" then
                return nil, ("%s: mqSet[%d] is not a MessageQueue"):format(what, i)
            end
            bad = names.topic(mq.topic)
            if bad then
                return nil, ("%s: mqSet[%d].topic: %s"):format(what, i, bad)
            end
            local q = math.tointeger(mq.queueId)
            if q == nil or q < 0 or q > 0x7FFFFFFF then
                return nil, ("%s: mqSet[%d].queueId is not a queue id: %s"):format(what, i,
                    names.show(tostring(mq.queueId)))
            end
            if type(mq.brokerName) ~= "string" then
                return nil, ("%s: mqSet[%d].brokerName is not a string"):format(what, i)
            end
        end
        return t
    end
    return {
        [codes.request.LOCK_BATCH_MQ] = function(ctx, cmd)
            local t, why = body_of(cmd, "LOCK_BATCH_MQ")
            if not t then
                return reply.system_error(why)
            end
            local now, ok_set = core.now_ms(), {}
            for _, mq in ipairs(t.mqSet) do
                if M.try_lock(t.consumerGroup, mq, t.clientId, now, conf.rebalanceLockMaxLiveTime) then
                    ok_set[#ok_set + 1] = { brokerName = mq.brokerName, topic = mq.topic,
                                            queueId = math.tointeger(mq.queueId) or mq.queueId }
                end
            end
            return { code = R.SUCCESS,
                     body = fastjson.encode({ lockOKMQSet = setmetatable(ok_set, fastjson.array_mt) }) }
        end,
        [codes.request.UNLOCK_BATCH_MQ] = function(ctx, cmd)
            local t, why = body_of(cmd, "UNLOCK_BATCH_MQ")
            if not t then
                return reply.system_error(why)
            end
            for _, mq in ipairs(t.mqSet) do
                M.unlock(t.consumerGroup, mq, t.clientId)
            end
            return { code = R.SUCCESS }
        end,
    }
end

return M
