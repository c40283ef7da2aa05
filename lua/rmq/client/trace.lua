-- Message trace records as RocketMQ 4.9.8's clients write them
-- (TraceDataEncoder, TraceConstants, AsyncTraceDispatcher) and the way
-- `mqadmin queryMsgTraceById` finds them.
--
-- A client with enableMsgTrace sends trace messages to the trace topic
-- (RMQ_SYS_TRACE_TOPIC, the broker's msgTraceTopicName, served when
-- traceTopicEnable): the body is records separated by FIELD (\2), each
-- its fields separated by CONTENT (\1), the first field the type (Pub,
-- SubBefore, SubAfter, EndTransaction); the message's KEYS are the
-- msgIds (and keys) of the messages traced, so QUERY_MESSAGE on the
-- trace topic by a msgId finds the trace messages that mention it.
--
--   trace.decode(body) -> {record, ...}   TraceDataEncoder's decoder
--       record: {type=, timestamp=, regionId=, groupName=, topic=, msgId=,
--       tags=, keys=, storeHost=, bodyLength=, costTime=, msgType=,
--       offsetMsgId=, success=, clientHost=, requestId=, retryTimes=,
--       contextCode=, transactionId=, transactionState=,
--       fromTransactionCheck=}  (the fields of its type)
--   trace.encode(record) -> string        one record, as the encoder
--                                          writes it (FIELD included)
--   trace.after_send(p, msg, result, began_ms, cost_ms, store_host)
--       a producer's Pub record (producer.lua calls it with
--       enableMsgTrace; customizedTraceTopic names the topic)
--   trace.before_consume(c, msgs) -> ctx; trace.after_consume(c, ctx,
--       success, returnType)  a consumer's SubBefore / SubAfter records
--   trace.flush(owner, timeout_ms) -> true when every record was sent
--   trace.query(namesrvs, msgId [, opts]) -> {record, ...} | nil, err
--       opts.traceTopic (RMQ_SYS_TRACE_TOPIC), opts.timeout (3000),
--       opts.credentials (rmq.client.credentials: requests signed):
--       the records of msgId in every broker of the trace topic, oldest
--       first
local codes = require("rmq.codes")
local core = require("rmq.core")
local net = require("rmq.net")
local message = require("rmq.client.message")
local route = require("rmq.client.route")

local M = {}

M.CONTENT = "\1"
M.FIELD = "\2"
M.DEFAULT_TOPIC = "RMQ_SYS_TRACE_TOPIC"

-- MessageType ordinals.
M.MSG_TYPES = { [0] = "Normal_Msg", [1] = "Trans_Msg_Half", [2] = "Trans_msg_Commit", [3] = "Delay_Msg" }

local function split(s, sep)
    local out = {}
    local from = 1
    while true do
        local i = s:find(sep, from, true)
        if not i then
            out[#out + 1] = s:sub(from)
            return out
        end
        out[#out + 1] = s:sub(from, i - 1)
        from = i + 1
    end
end

local function bool(s)
    return s == "true"
end

local function decode_one(line)
    local f = split(line, M.CONTENT)
    local t = f[1]
    if t == "Pub" then
        local r = {
            type = t, timestamp = tonumber(f[2]), regionId = f[3], groupName = f[4],
            topic = f[5], msgId = f[6], tags = f[7], keys = f[8], storeHost = f[9],
            bodyLength = tonumber(f[10]), costTime = tonumber(f[11]),
            msgType = M.MSG_TYPES[tonumber(f[12])] or f[12],
        }
        if #f == 13 then
            r.success = bool(f[13])
        elseif #f >= 14 then
            r.offsetMsgId, r.success = f[13], bool(f[14])
            r.clientHost = f[15]
        end
        return r
    elseif t == "SubBefore" then
        return {
            type = t, timestamp = tonumber(f[2]), regionId = f[3], groupName = f[4],
            requestId = f[5], msgId = f[6], retryTimes = tonumber(f[7]), keys = f[8],
        }
    elseif t == "SubAfter" then
        local r = {
            type = t, requestId = f[2], msgId = f[3], costTime = tonumber(f[4]),
            success = bool(f[5]), keys = f[6], contextCode = tonumber(f[7]),
        }
        if #f >= 9 then
            r.timestamp, r.groupName = tonumber(f[8]), f[9]
        end
        return r
    elseif t == "EndTransaction" then
        return {
            type = t, timestamp = tonumber(f[2]), regionId = f[3], groupName = f[4],
            topic = f[5], msgId = f[6], tags = f[7], keys = f[8], storeHost = f[9],
            msgType = M.MSG_TYPES[tonumber(f[10])] or f[10], transactionId = f[11],
            transactionState = f[12], fromTransactionCheck = bool(f[13]),
        }
    end
    return nil  -- a type this version does not know: skipped, as Java does
end

function M.decode(body)
    local out = {}
    if type(body) ~= "string" or body == "" then
        return out
    end
    for _, line in ipairs(split(body, M.FIELD)) do
        if line ~= "" then
            local r = decode_one(line)
            if r then
                out[#out + 1] = r
            end
        end
    end
    return out
end

local ORDINAL = {}
for k, v in pairs(M.MSG_TYPES) do
    ORDINAL[v] = k
end

local function s(v)
    return v == nil and "null" or tostring(v)
end

function M.encode(r)
    local C = M.CONTENT
    local f
    if r.type == "Pub" then
        f = { "Pub", r.timestamp, r.regionId, r.groupName, r.topic, r.msgId, r.tags, r.keys,
              r.storeHost, r.bodyLength or 0, r.costTime or 0, ORDINAL[r.msgType] or 0,
              r.offsetMsgId, r.success ~= false }
    elseif r.type == "SubBefore" then
        f = { "SubBefore", r.timestamp, r.regionId, r.groupName, r.requestId, r.msgId,
              r.retryTimes or 0, r.keys }
    elseif r.type == "SubAfter" then
        f = { "SubAfter", r.requestId, r.msgId, r.costTime or 0, r.success ~= false, r.keys,
              r.contextCode or 0, r.timestamp, r.groupName }
    elseif r.type == "EndTransaction" then
        f = { "EndTransaction", r.timestamp, r.regionId, r.groupName, r.topic, r.msgId, r.tags,
              r.keys, r.storeHost, ORDINAL[r.msgType] or 0, r.transactionId, r.transactionState,
              r.fromTransactionCheck == true }
    else
        error("unknown trace type " .. tostring(r.type), 2)
    end
    local parts = {}
    for i = 1, #f do
        parts[i] = s(f[i])
    end
    -- n-1 fields end with CONTENT; the record with FIELD.
    return table.concat(parts, C) .. M.FIELD
end

local INT64_MAX = math.maxinteger

-- {{{ Writing: producers and consumers with enableMsgTrace

-- Sends records to owner's trace topic (customizedTraceTopic, else
-- RMQ_SYS_TRACE_TOPIC) on a task, through a producer of its own as
-- AsyncTraceDispatcher's traceProducer; the trace message's keys are the
-- msgIds and keys of the messages traced.
local function dispatch(owner, group, recs)
    local topic = owner.customizedTraceTopic or M.DEFAULT_TOPIC
    local body, keys, seen = {}, {}, {}
    for i, r in ipairs(recs) do
        body[i] = M.encode(r)
        for _, k in ipairs({ r.msgId, r.keys }) do
            if k and k ~= "" and not seen[k] then
                seen[k] = true
                keys[#keys + 1] = k
            end
        end
    end
    if owner.trace_producer == nil then
        local producer = require("rmq.client.producer")
        owner.trace_producer = producer.new({
            namesrvAddr = owner.namesrvAddr,
            producerGroup = "_INNER_TRACE_PRODUCER-" .. group,
            sendMsgTimeout = 5000,
            -- as AsyncTraceDispatcher gets its owner's RPCHook
            credentials = owner.credentials,
        })
    end
    local tp = owner.trace_producer
    owner.trace_pending = (owner.trace_pending or 0) + 1
    net.spawn(function()
        local ok, err = tp:send({ topic = topic, body = table.concat(body), keys = table.concat(keys, " ") })
        owner.trace_pending = owner.trace_pending - 1
        if not ok then
            require("rmq.log").warn("trace of %s not written to %s: %s", tostring(recs[1].msgId), topic,
                                    tostring(err))
        end
    end)
end

--- Waits (up to timeout_ms) until owner's trace records are sent, as
--- AsyncTraceDispatcher.flush does at a client's shutdown: a command that
--- exits right after its send must not cut them off.  True when none is
--- left.
function M.flush(owner, timeout_ms)
    local waited = 0
    while (owner.trace_pending or 0) > 0 and waited < timeout_ms do
        net.sleep(5)
        waited = waited + 5
    end
    return (owner.trace_pending or 0) == 0
end

local function keys_of(msg)
    local keys = msg.keys
    if type(keys) == "table" then
        keys = table.concat(keys, " ")
    end
    return keys
end

--- After a send of p with enableMsgTrace (SendMessageTraceHookImpl):
--- a Pub record for msg.  As in 4.9.8, only a send the broker answered
--- with TRACE_ON and a region is traced, and sends to the trace topic
--- itself are not.
---   res: the send result; began: core.now_ms() at the send's start;
---   cost_ms: how long it took; store_host: the broker's address.
function M.after_send(p, msg, res, began, cost_ms, store_host)
    local topic = p.customizedTraceTopic or M.DEFAULT_TOPIC
    if msg.topic == topic or res == nil or not res.traceOn or res.regionId == nil then
        return
    end
    dispatch(p, p.producerGroup, { {
        type = "Pub", timestamp = began, regionId = res.regionId, groupName = p.producerGroup,
        topic = msg.topic, msgId = res.msgId, tags = msg.tags, keys = keys_of(msg),
        storeHost = store_host, bodyLength = #msg.body, costTime = math.floor(cost_ms),
        msgType = (msg.delayTimeLevel or 0) > 0 and "Delay_Msg" or "Normal_Msg",
        offsetMsgId = res.offsetMsgId, success = res.status == "SEND_OK",
    } })
end

--- Before a consumer c with enableMsgTrace hands msgs to its handler
--- (ConsumeMessageTraceHookImpl.consumeMessageBefore): the SubBefore
--- records, returned for after_consume (nil: nothing to trace; a message
--- whose TRACE_ON property is "false" is skipped).
function M.before_consume(c, msgs)
    local recs = {}
    local now = core.now_ms()
    local request_id = message.uniq_key()
    for _, m in ipairs(msgs) do
        local props = m.properties or {}
        if props.TRACE_ON ~= "false" then
            recs[#recs + 1] = {
                type = "SubBefore", timestamp = now, regionId = props.MSG_REGION,
                groupName = c.consumerGroup, requestId = request_id, msgId = m.msgId,
                retryTimes = m.reconsumeTimes or 0, keys = keys_of(m),
            }
        end
    end
    if #recs == 0 then
        return nil
    end
    dispatch(c, c.consumerGroup, recs)
    return { recs = recs, began = core.mono_ms(), n = #msgs }
end

-- ConsumeReturnType ordinals (contextCode).
M.CONTEXT_CODE = { SUCCESS = 0, TIME_OUT = 1, EXCEPTION = 2, RETURNNULL = 3, FAILED = 4 }

--- After the handler returned (consumeMessageAfter): the SubAfter
--- records, the cost shared by the messages of the call.
function M.after_consume(c, before, success, context_type)
    if before == nil then
        return
    end
    local cost = math.floor((core.mono_ms() - before.began) / before.n)
    local recs = {}
    for i, b in ipairs(before.recs) do
        recs[i] = {
            type = "SubAfter", requestId = b.requestId, msgId = b.msgId, costTime = cost,
            success = success, keys = b.keys, contextCode = M.CONTEXT_CODE[context_type] or 0,
            timestamp = b.timestamp, groupName = b.groupName,
        }
    end
    dispatch(c, c.consumerGroup, recs)
end

-- }}}

function M.query(namesrvs, msg_id, opts)
    opts = opts or {}
    local topic = opts.traceTopic or M.DEFAULT_TOPIC
    local timeout = opts.timeout or 3000
    local r, err = route.fetch(namesrvs, topic, timeout, nil, opts.credentials)
    if not r then
        return nil, ("no route of the trace topic %s: %s"):format(topic, tostring(err))
    end
    local out, seen = {}, {}
    local asked = 0
    for _, bd in ipairs(r.brokerDatas or {}) do
        local addrs = bd.brokerAddrs or {}
        local addr = addrs["0"] or addrs[0]
        if addr == nil then
            local _
            _, addr = next(addrs)
        end
        if addr then
            asked = asked + 1
            local rep, cerr = net.call(addr, {
                code = codes.request.QUERY_MESSAGE,
                ext = { topic = topic, key = msg_id, maxNum = 64,
                        beginTimestamp = 0, endTimestamp = INT64_MAX },
                credentials = opts.credentials,
            }, timeout)
            if not rep then
                return nil, ("query %s: %s"):format(addr, tostring(cerr))
            end
            if rep.code == codes.response.SUCCESS and rep.body then
                local msgs, derr = message.decode_records(rep.body)
                if not msgs then
                    return nil, ("query %s: %s"):format(addr, derr)
                end
                for _, m in ipairs(msgs) do
                    local key = m.offsetMsgId or (addr .. m.commitLogOffset)
                    if not seen[key] then
                        seen[key] = true
                        for _, rec in ipairs(M.decode(m.body)) do
                            if rec.msgId == msg_id then
                                rec.traceMsgStoreTimestamp = m.storeTimestamp
                                out[#out + 1] = rec
                            end
                        end
                    end
                end
            elseif rep.code ~= codes.response.QUERY_NOT_FOUND then
                return nil, ("query %s: code %d %s"):format(addr, rep.code, rep.remark or "")
            end
        end
    end
    if asked == 0 then
        return nil, ("the trace topic %s has no broker"):format(topic)
    end
    -- By time, then in a message's life order (a SubAfter's time is the
    -- SubBefore's in 4.9.8).
    local rank = { Pub = 1, EndTransaction = 2, SubBefore = 3, SubAfter = 4 }
    for i, rec in ipairs(out) do
        rec._i = i
    end
    table.sort(out, function(a, b)
        local ta = a.timestamp or a.traceMsgStoreTimestamp or 0
        local tb = b.timestamp or b.traceMsgStoreTimestamp or 0
        if ta ~= tb then
            return ta < tb
        end
        if rank[a.type] ~= rank[b.type] then
            return (rank[a.type] or 9) < (rank[b.type] or 9)
        end
        return a._i < b._i
    end)
    for _, rec in ipairs(out) do
        rec._i = nil
    end
    return out
end

return M
