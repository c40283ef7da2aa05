-- Request-reply on the client side, as RocketMQ 4.9.8's
-- DefaultMQProducerImpl.request, ClientRemotingProcessor.receiveReplyMessage
-- and MessageUtil.createReplyMessage do it.
--
--   local reply, err = p:request(msg [, timeout_ms])   (producer.lua)
--       -> the reply message (the shape of a pulled message: topic, body,
--          properties, tags, keys, msgId, bornTimestamp, bornHost,
--          storeHost, storeTimestamp, ...), or nil and
--          "send request message to <T> OK, but wait reply message
--          timeout, <N> ms." (code "timeout") or the send's error
--   local r = request.create_reply(request_msg, body)   responder side
--   p:send_reply(r)      sends it (SEND_REPLY_MESSAGE_V2): any message
--                        with MSG_TYPE=reply is sent with that code
--
-- The requester marks the message with CORRELATION_ID (a random UUID),
-- REPLY_TO_CLIENT (its clientId) and TTL (the timeout), and first sends
-- a HEART_BEAT naming its producer group to every broker of the topic
-- over a connection of its own: the broker pushes the reply
-- (PUSH_REPLY_MESSAGE_TO_CLIENT) over that channel.  The heartbeat is
-- repeated when older than heartbeatBrokerInterval (30 s) at the next
-- request, so the channel never expires while requests keep coming.
local fastjson = require("rmq.fastjson")
local core = require("rmq.core")
local codes = require("rmq.codes")
local log = require("rmq.log")
local net = require("rmq.net")
local conns = require("rmq.client.conns")
local message = require("rmq.client.message")
local route = require("rmq.client.route")

local M = {}

M.CORRELATION_ID = "CORRELATION_ID"
M.REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
M.TTL = "TTL"
M.MSG_TYPE = "MSG_TYPE"
M.REPLY_FLAG = "reply"          -- MixAll.REPLY_MESSAGE_FLAG
M.CLUSTER = "CLUSTER"
M.ARRIVE_TIME = "ARRIVE_TIME"   -- PROPERTY_REPLY_MESSAGE_ARRIVE_TIME

local HEARTBEAT_INTERVAL = 30000

--- The reply topic of a cluster (MixAll.getReplyTopic).
function M.reply_topic(cluster)
    return cluster .. "_REPLY_TOPIC"
end

-- CorrelationIdUtil: UUID.randomUUID().toString().
local function uuid()
    local b = {}
    for i = 1, 16 do
        b[i] = math.random(0, 255)
    end
    b[7] = (b[7] & 0x0F) | 0x40
    b[9] = (b[9] & 0x3F) | 0x80
    local hex = {}
    for i = 1, 16 do
        hex[i] = ("%02x"):format(b[i])
    end
    local s = table.concat(hex)
    return ("%s-%s-%s-%s-%s"):format(s:sub(1, 8), s:sub(9, 12), s:sub(13, 16), s:sub(17, 20), s:sub(21, 32))
end

local state   -- p's request state (below: its channels call on_push)

-- PUSH_REPLY_MESSAGE_TO_CLIENT: the message out of its header, handed to
-- the request waiting on its CORRELATION_ID (none: late, logged).
local function on_push(p, cmd)
    if cmd.code ~= codes.request.PUSH_REPLY_MESSAGE_TO_CLIENT then
        return nil
    end
    local s = state(p)
    local ext = cmd.ext or {}
    local props = message.decode_properties(ext.properties or "")
    props[M.ARRIVE_TIME] = tostring(core.now_ms())
    local body = cmd.body or ""
    local sys_flag = tonumber(ext.sysFlag) or 0
    if (sys_flag & message.COMPRESSED_FLAG) ~= 0 then
        local plain, err = core.inflate(body)
        if not plain then
            log.warn("reply message from %s: %s", tostring(ext.bornHost), tostring(err))
            return { code = codes.response.SYSTEM_ERROR, remark = "process reply message fail" }
        end
        body = plain
    end
    local m = {
        topic = ext.topic, queueId = tonumber(ext.queueId), body = body,
        flag = tonumber(ext.flag), sysFlag = sys_flag, properties = props,
        tags = props.TAGS, keys = props.KEYS, msgId = props.UNIQ_KEY,
        bornTimestamp = tonumber(ext.bornTimestamp), bornHost = ext.bornHost,
        storeHost = ext.storeHost, storeTimestamp = tonumber(ext.storeTimestamp),
        reconsumeTimes = tonumber(ext.reconsumeTimes) or 0,
    }
    local corr = props[M.CORRELATION_ID]
    local slot = corr and s.pending[corr]
    if slot then
        slot.msg = m
        net.raise("rmq.request:" .. corr)
    else
        log.warn("receive reply message, but not matched any request, CorrelationId: %s, reply from host: %s",
                 tostring(corr), tostring(ext.bornHost))
    end
    return { code = codes.response.SUCCESS }
end

function state(p)
    local s = p.request_state
    if s == nil then
        s = { pending = {}, beat = {} }
        -- The reply channels: a new connection must be heartbeated again.
        s.conns = conns.new({
            on_request = function(_, _, cmd) return on_push(p, cmd) end,
            on_connect = function(addr) s.beat[addr] = nil end,
        })
        p.request_state = s
        p.clientId = p.clientId
            or ("127.0.0.1@%d#%d"):format(core.pid(), math.floor(core.mono_ms() * 1000))
    end
    return s
end

-- The channel the broker at addr pushes replies over, registered by a
-- heartbeat as a producer of p's group.
local function channel(p, s, addr, timeout)
    local c, err = s.conns:get(addr, timeout)
    if not c then
        return nil, err
    end
    local now = core.mono_ms()
    if s.beat[addr] == nil or now - s.beat[addr] >= HEARTBEAT_INTERVAL then
        local body = fastjson.encode({
            clientID = p.clientId,
            producerDataSet = { { groupName = p.producerGroup } },
            consumerDataSet = setmetatable({}, fastjson.array_mt),
        })
        local r, herr = c:call({ code = codes.request.HEART_BEAT, body = body, credentials = p.credentials }, timeout)
        if not r then
            return nil, herr
        end
        if r.code ~= 0 then
            return nil, ("heartbeat to %s: code %d %s"):format(addr, r.code, r.remark or "")
        end
        s.beat[addr] = now
    end
    return c
end

--- Sends msg and waits for its reply (see the file's header).
function M.request(p, msg, timeout)
    timeout = timeout or p.sendMsgTimeout
    if type(msg) ~= "table" then
        return nil, "the message is not a table", codes.response.MESSAGE_ILLEGAL
    end
    local begin = core.mono_ms()
    local s = state(p)
    local info, err, code = p:publish_info(msg.topic)
    if not info then
        return nil, err, code
    end
    for _, q in ipairs(info.queues) do
        local addr = route.master(info, q.brokerName)
        if addr and (s.beat[addr] == nil or not s.conns:peek(addr)
                     or core.mono_ms() - s.beat[addr] >= HEARTBEAT_INTERVAL) then
            local _, cerr = channel(p, s, addr, timeout)
            if cerr then
                log.warn("request: no reply channel to %s: %s", addr, tostring(cerr))
            end
        end
    end
    local corr = uuid()
    local out = {}
    for k, v in pairs(msg) do
        out[k] = v
    end
    local props = {}
    for k, v in pairs(msg.properties or {}) do
        props[k] = v
    end
    props[M.CORRELATION_ID] = corr
    props[M.REPLY_TO_CLIENT] = p.clientId
    props[M.TTL] = tostring(timeout)
    out.properties = props
    local slot = {}
    s.pending[corr] = slot
    local saved = p.sendMsgTimeout
    p.sendMsgTimeout = math.max(1, math.ceil(timeout - (core.mono_ms() - begin)))
    local r
    r, err, code = p:send_impl(out, "sync")
    p.sendMsgTimeout = saved
    if not r then
        s.pending[corr] = nil
        return nil, err, code
    end
    local left = timeout - (core.mono_ms() - begin)
    if slot.msg == nil and left > 0 then
        net.wait_event("rmq.request:" .. corr, math.ceil(left))
    end
    s.pending[corr] = nil
    if slot.msg == nil then
        return nil, ("send request message to <%s> OK, but wait reply message timeout, %d ms.")
            :format(msg.topic, timeout), "timeout"
    end
    return slot.msg
end

--- The reply to a request message (MessageUtil.createReplyMessage):
--- nil and the reason when the request carries no CLUSTER.
function M.create_reply(req_msg, body)
    if type(req_msg) ~= "table" then
        return nil, "create reply message fail, requestMessage cannot be null."
    end
    local props = req_msg.properties or {}
    local cluster = props[M.CLUSTER]
    if cluster == nil then
        return nil, "create reply message fail, requestMessage error, property[CLUSTER] is null."
    end
    return {
        topic = M.reply_topic(cluster),
        body = body,
        properties = {
            [M.MSG_TYPE] = M.REPLY_FLAG,
            [M.CORRELATION_ID] = props[M.CORRELATION_ID],
            [M.REPLY_TO_CLIENT] = props[M.REPLY_TO_CLIENT],
            [M.TTL] = props[M.TTL],
        },
    }
end

--- Closes the reply channels (the broker drops the producer channel).
function M.close(p)
    local s = p.request_state
    if s then
        s.conns:close_all()
    end
end

return M
