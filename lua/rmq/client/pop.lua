-- A POP consumer (RocketMQ 5, remoting): messages are leased from the
-- broker for an invisible time and acknowledged one by one, with no
-- client-side rebalance (docs/pop.md).  Connections and routes are the
-- pull consumer's (rmq.client.consumer): one cache for both.
--
--   local pop = require("rmq.client.pop")
--   local c = pop.new{ namesrvAddr=, consumerGroup=, invisibleTime=60000 }
--   local r, err, code = c:pop("Topic", { maxMsgNums = 32, pollTime = 5000,
--                                         exp = "TagA || TagB" })
--   for _, m in ipairs(r.messages) do ... assert(c:ack(m)) end
--   c:change_invisible_time(m, 30000)    -- a longer lease (m.receipt moves)
--   c:shutdown()
--
-- pop opts (5.x names): queueId (-1: every queue), brokerName (default:
-- the route's first broker), maxMsgNums (32), invisibleTime, pollTime (0:
-- answer at once), initMode (0 CONSUME_FROM_MIN, 1 MAX), expType ("TAG",
-- "SQL92"), exp ("*"), order (FIFO).  The result: {status = "FOUND" |
-- "POLLING_NOT_FOUND", popTime=, invisibleTime=, reviveQid=, restNum=,
-- messages = {...}}.  Each message carries, as the Java client builds
-- them (MQClientAPIImpl.processPopResponse): receipt (the POP_CK
-- extraInfo, ExtraInfoUtil's format, also in properties.POP_CK),
-- ackTopic (the topic it was stored in: the group's retry topic for a
-- redelivery), brokerName, and topic set back to the origin's.
local codes = require("rmq.codes")
local core = require("rmq.core")
local consumer = require("rmq.client.consumer")
local message = require("rmq.client.message")

local M = {}

local R = codes.response
local Q = codes.request

local Pop = {}
Pop.__index = Pop

function M.new(opts)
    local self = setmetatable({}, Pop)
    self.c = consumer.new(opts)
    self.consumerGroup = self.c.consumerGroup
    self.invisibleTime = opts.invisibleTime or 60000
    self.maxMsgNums = opts.maxMsgNums or 32
    return self
end

--- The master address of brokerName (or the route's first broker).
function Pop:addr(topic, broker_name)
    local r, err = self.c:route_of(topic)
    if not r then
        return nil, err
    end
    for _, bd in ipairs(r.brokerDatas or {}) do
        if broker_name == nil or bd.brokerName == broker_name then
            local a = (bd.brokerAddrs or {})["0"]
            if a then
                return a, bd.brokerName
            end
        end
    end
    return nil, "no master for topic " .. topic
end

--- ExtraInfoUtil.buildExtraInfo (8 fields).
function M.extra_info(ck_offset, pop_time, invisible, revive_qid, topic, broker, qid, offset)
    local t = topic:sub(1, 7) == "%RETRY%" and "1" or "0"
    return table.concat({ ck_offset, pop_time, invisible, revive_qid, t, broker, qid, offset }, " ")
end

-- "t qid off;t qid off" -> {["t@qid"] = value}
local function parse_info(s)
    local out = {}
    for one in (s or ""):gmatch("[^;]+") do
        local t, q, v = one:match("^(%S+) (%S+) (%S+)$")
        if t then
            out[t .. "@" .. q] = v
        end
    end
    return out
end

function Pop:call(addr, cmd, timeout)
    return self.c:call(addr, cmd, timeout)
end

function Pop:pop(topic, opts)
    opts = opts or {}
    local addr, broker = self:addr(topic, opts.brokerName)
    if not addr then
        return nil, broker
    end
    local poll = opts.pollTime or 0
    local invisible = opts.invisibleTime or self.invisibleTime
    local ext = {
        consumerGroup = self.consumerGroup, topic = topic, queueId = opts.queueId or -1,
        maxMsgNums = opts.maxMsgNums or self.maxMsgNums, invisibleTime = invisible,
        pollTime = poll, bornTime = core.now_ms(), initMode = opts.initMode or 0,
        expType = opts.expType or "TAG", exp = opts.exp or "*",
    }
    if opts.order then
        ext.order = "true"
    end
    local r, err = self:call(addr, { code = Q.POP_MESSAGE, ext = ext }, poll + (opts.timeout or 3000))
    if not r then
        return nil, ("pop from %s: %s"):format(addr, err)
    end
    if r.code ~= R.SUCCESS and r.code ~= codes.response_v5.POLLING_TIMEOUT then
        return nil, ("pop from %s: code %d %s"):format(addr, r.code, r.remark or ""), r.code
    end
    local e = r.ext
    local res = {
        status = r.code == R.SUCCESS and "FOUND" or "POLLING_NOT_FOUND",
        popTime = tonumber(e.popTime), invisibleTime = tonumber(e.invisibleTime),
        reviveQid = tonumber(e.reviveQid), restNum = tonumber(e.restNum),
        startOffsetInfo = e.startOffsetInfo, msgOffsetInfo = e.msgOffsetInfo,
        messages = {}, addr = addr,
    }
    if r.code == R.SUCCESS and r.body then
        local msgs, derr = message.decode_records(r.body)
        if not msgs then
            return nil, ("pop from %s: %s"):format(addr, derr)
        end
        local starts = parse_info(e.startOffsetInfo)
        local counts = parse_info(e.orderCountInfo)
        for _, m in ipairs(msgs) do
            local retry = m.topic:sub(1, 7) == "%RETRY%"
            local key = (retry and "1" or "0") .. "@" .. m.queueId
            m.ackTopic = m.topic
            m.brokerName = broker
            m.receipt = M.extra_info(starts[key] or m.queueOffset, res.popTime, res.invisibleTime,
                                     res.reviveQid, m.topic, broker, m.queueId, m.queueOffset)
            m.properties.POP_CK = m.receipt
            -- Orderly: the attempts so far (as the Java client reads them).
            local n = tonumber(counts[(retry and "1" or "0") .. "@qo" .. m.queueId .. "%" .. m.queueOffset]
                               or counts[key])
            if n and n > 0 then
                m.reconsumeTimes = n
            end
            if retry and m.properties.RETRY_TOPIC then
                m.topic = m.properties.RETRY_TOPIC
            end
            res.messages[#res.messages + 1] = m
        end
    end
    return res
end

local function lease_fields(self, m)
    return {
        consumerGroup = self.consumerGroup, topic = m.ackTopic, queueId = m.queueId,
        extraInfo = m.receipt, offset = m.queueOffset,
    }
end

--- ACK_MESSAGE.  true, or nil, err, code (NO_MESSAGE 208: no such lease).
function Pop:ack(m)
    local addr, err = self:addr(m.topic, m.brokerName)
    if not addr then
        return nil, err
    end
    local r
    r, err = self:call(addr, { code = Q.ACK_MESSAGE, ext = lease_fields(self, m) })
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS then
        return nil, ("ack: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    return true
end

--- BATCH_ACK_MESSAGE of messages popped from one broker: one BatchAck
-- per (stored topic, queue, popTime), offsets as a bitSet from the first
-- (fastjson2's writeBinary: an array of signed bytes).  true, or nil, err, code.
function Pop:batch_ack(msgs)
    if #msgs == 0 then
        return true
    end
    local groups, order = {}, {}
    for _, m in ipairs(msgs) do
        local f = {}
        for w in m.receipt:gmatch("%S+") do f[#f + 1] = w end
        local key = m.ackTopic .. "@" .. m.queueId .. "@" .. f[2]
        local g = groups[key]
        if not g then
            g = { m = m, popTime = f[2], reviveQid = f[4], invisible = f[3], offsets = {} }
            groups[key] = g
            order[#order + 1] = key
        end
        g.offsets[#g.offsets + 1] = m.queueOffset
    end
    local acks = {}
    for _, key in ipairs(order) do
        local g = groups[key]
        table.sort(g.offsets)
        local so = g.offsets[1]
        local bytes = {}
        for _, o in ipairs(g.offsets) do
            local i = o - so
            local b = i // 8 + 1
            bytes[b] = (bytes[b] or 0) | (1 << (i % 8))
        end
        for b = 1, #bytes do
            local v = bytes[b] or 0
            bytes[b] = tostring(v > 127 and v - 256 or v)
        end
        local retry = g.m.ackTopic:sub(1, 7) == "%RETRY%"
        acks[#acks + 1] = ('{"c":"%s","t":"%s","r":"%s","so":%d,"q":%d,"rq":%s,"pt":%s,"it":%s,"b":[%s]}')
            :format(self.consumerGroup, g.m.topic, retry and "1" or "0", so, g.m.queueId, g.reviveQid,
                    g.popTime, g.invisible, table.concat(bytes, ","))
    end
    local addr, err = self:addr(msgs[1].topic, msgs[1].brokerName)
    if not addr then
        return nil, err
    end
    local body = ('{"brokerName":"%s","acks":[%s]}'):format(msgs[1].brokerName, table.concat(acks, ","))
    local r
    r, err = self:call(addr, { code = Q.BATCH_ACK_MESSAGE, body = body })
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS then
        return nil, ("batch ack: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    return true
end

--- CHANGE_MESSAGE_INVISIBLETIME: the lease ends invisible_ms from now;
-- m.receipt becomes the new handle (as the Java client rebuilds it).
function Pop:change_invisible_time(m, invisible_ms)
    local addr, err = self:addr(m.topic, m.brokerName)
    if not addr then
        return nil, err
    end
    local ext = lease_fields(self, m)
    ext.invisibleTime = invisible_ms
    local r
    r, err = self:call(addr, { code = Q.CHANGE_MESSAGE_INVISIBLETIME, ext = ext })
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS then
        return nil, ("change invisible time: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    m.receipt = M.extra_info(m.queueOffset, r.ext.popTime, r.ext.invisibleTime, r.ext.reviveQid,
                             m.ackTopic, m.brokerName, m.queueId, m.queueOffset)
    m.properties.POP_CK = m.receipt
    return true
end

--- PEEK_MESSAGE: up to maxMsgNums messages at the group's offset,
-- neither leased nor moved past.  {status = "FOUND" | "NO_MESSAGE",
-- restNum=, messages=}, or nil, err, code.
function Pop:peek(topic, opts)
    opts = opts or {}
    local addr, broker = self:addr(topic, opts.brokerName)
    if not addr then
        return nil, broker
    end
    local r, err = self:call(addr, { code = Q.PEEK_MESSAGE, ext = {
        consumerGroup = self.consumerGroup, topic = topic, queueId = opts.queueId or -1,
        maxMsgNums = opts.maxMsgNums or self.maxMsgNums } })
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS and r.code ~= R.PULL_NOT_FOUND then
        return nil, ("peek: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    local res = { status = r.code == R.SUCCESS and "FOUND" or "NO_MESSAGE",
                  restNum = tonumber(r.ext.restNum), messages = {} }
    if r.code == R.SUCCESS and r.body then
        res.messages = assert(message.decode_records(r.body))
    end
    return res
end

--- NOTIFICATION: whether a POP would find something (waiting up to
-- opts.pollTime for it).  true | false, or nil, err, code.
function Pop:notification(topic, opts)
    opts = opts or {}
    local addr, broker = self:addr(topic, opts.brokerName)
    if not addr then
        return nil, broker
    end
    local poll = opts.pollTime or 0
    local ext = { consumerGroup = self.consumerGroup, topic = topic, queueId = opts.queueId or -1,
                  pollTime = poll, bornTime = core.now_ms() }
    if opts.order then
        ext.order = "true"
    end
    local r, err = self:call(addr, { code = Q.NOTIFICATION, ext = ext }, poll + 3000)
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS then
        return nil, ("notification: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    return r.ext.hasMsg == "true"
end

--- POLLING_INFO: how many POPs of this group wait on topic's queue.
function Pop:polling_info(topic, queue_id, broker_name)
    local addr, broker = self:addr(topic, broker_name)
    if not addr then
        return nil, broker
    end
    local r, err = self:call(addr, { code = Q.POLLING_INFO, ext = {
        consumerGroup = self.consumerGroup, topic = topic, queueId = queue_id or -1 } })
    if not r then
        return nil, err
    end
    if r.code ~= R.SUCCESS then
        return nil, ("polling info: code %d %s"):format(r.code, r.remark or ""), r.code
    end
    return tonumber(r.ext.pollingNum)
end

function Pop:shutdown()
    self.c.conns:close_all()
end

return M
