-- The producer: route lookup, queue selection, fault avoidance, retries,
-- as RocketMQ's DefaultMQProducer does them (protocol.md 4.1, 6.9).
--
--   local p = producer.new{ namesrvAddr = "127.0.0.1:9876", producerGroup = "g" }
--   local r, err, code = p:send{ topic = "T", body = "hi", tags = "A", keys = "k1 k2" }
--   (a timer message: deliverTimeMs = epoch ms, or delayTimeSec / delayTimeMs;
--   a delay level: delayTimeLevel = 1..18)
--   r = {status="SEND_OK", msgId=UNIQ_KEY, offsetMsgId=, queue={topic=,
--        brokerName=, queueId=}, queueOffset=, regionId=, traceOn=}
--   p:send_oneway(msg); p:send_async(msg, function(r, err, code) end)
--   p:send_orderly(msg, arg [, selector])   queue = selector(queues, msg, arg)
--   p:send_batch{msg1, msg2, ...}
--   p:request(msg [, timeout]) -> reply message; p:send_reply(reply)
--   (request-reply: rmq.client.request)
--
-- Options (RocketMQ names and defaults): sendMsgTimeout 3000,
-- retryTimesWhenSendFailed 2, retryAnotherBrokerWhenNotStoreOK false,
-- compressMsgBodyOverHowmuch 4096, maxMessageSize 4 MiB,
-- defaultTopicQueueNums 4, createTopicKey "TBW102",
-- pollNameServerInterval 30000, sendLatencyFaultEnable false,
-- enableMsgTrace false (a Pub trace record per send, rmq.client.trace;
-- customizedTraceTopic), accessKey / secretKey / securityToken (ACL:
-- every request signed, route lookups too; rmq.client.credentials),
-- sendMessageWithVIPChannel false, serialize "JSON", latencyMax and
-- notAvailableDuration (MQFaultStrategy's tables); and the policies:
-- queueSelectPolicy (default rmq.policy.queue_select, or rmq.policy.
-- latency_fault when sendLatencyFaultEnable), a function or module name.
local core = require("rmq.core")
local net = require("rmq.net")
local codes = require("rmq.codes")
local message = require("rmq.client.message")
local route = require("rmq.client.route")
local credentials = require("rmq.client.credentials")
local policy = require("rmq.policy")
local latency_fault = require("rmq.policy.latency_fault")

local M = {}

local DEFAULTS = {
    producerGroup = "DEFAULT_PRODUCER",
    sendMsgTimeout = 3000,
    retryTimesWhenSendFailed = 2,
    retryAnotherBrokerWhenNotStoreOK = false,
    compressMsgBodyOverHowmuch = 4096,
    compressLevel = 5,
    maxMessageSize = 4 * 1024 * 1024,
    defaultTopicQueueNums = 4,
    createTopicKey = "TBW102",
    pollNameServerInterval = 30000,
    sendLatencyFaultEnable = false,
    enableMsgTrace = false,
    sendMessageWithVIPChannel = false,
    serialize = "JSON",
    unitMode = false,
}

-- Response codes after which Java retries on another broker (4.9.8's
-- DefaultMQProducer.retryResponseCodes).  SYSTEM_BUSY (2, flow control)
-- is not one: the send fails at once and, with sendLatencyFaultEnable,
-- the busy broker is avoided for notAvailableDuration (30 s counted as
-- the latency: 10 min with the default tables) by the sends that follow.
-- Option retryResponseCodes = {code, ...} replaces the set (Java:
-- addRetryResponseCode), e.g. {1, 2, 14, 16, 17, 204, 205} to retry a busy
-- broker's send on another broker at once.
local RETRY_CODES = {
    [codes.response.TOPIC_NOT_EXIST] = true,
    [codes.response.SERVICE_NOT_AVAILABLE] = true,
    [codes.response.SYSTEM_ERROR] = true,
    [codes.response.NO_PERMISSION] = true,
    [codes.response.NO_BUYER_ID] = true,
    [codes.response.NOT_IN_CURRENT_UNIT] = true,
}

local STATUS = {
    [codes.response.SUCCESS] = "SEND_OK",
    [codes.response.FLUSH_DISK_TIMEOUT] = "FLUSH_DISK_TIMEOUT",
    [codes.response.FLUSH_SLAVE_TIMEOUT] = "FLUSH_SLAVE_TIMEOUT",
    [codes.response.SLAVE_NOT_AVAILABLE] = "SLAVE_NOT_AVAILABLE",
}

local Producer = {}
Producer.__index = Producer

function M.new(opts)
    opts = opts or {}
    local p = setmetatable({}, Producer)
    for k, v in pairs(DEFAULTS) do
        p[k] = v
    end
    for k, v in pairs(opts) do
        p[k] = v
    end
    p.namesrvs = route.parse_namesrv(p.namesrvAddr)
    p.credentials = credentials.option(p)
    assert(require("rmq.client.tls").apply(p.tls))   -- opts.tls: the process's connections
    local default_policy = p.sendLatencyFaultEnable and "rmq.policy.latency_fault"
        or "rmq.policy.queue_select"
    local select, err = policy.resolve(p.queueSelectPolicy, "select", default_policy)
    if not select then
        error(err, 2)
    end
    p.select = select
    p.retry_codes = RETRY_CODES
    if opts.retryResponseCodes ~= nil then
        p.retry_codes = {}
        for _, c in ipairs(opts.retryResponseCodes) do
            if math.type(c) ~= "integer" then
                error("retryResponseCodes must list integer response codes", 2)
            end
            p.retry_codes[c] = true
        end
    end
    p.faults = {}
    p.infos = {}        -- topic -> publish info {queues, brokers, counter, fetched}
    p.namesrv_index = 0
    return p
end

-- The publish info of a topic: cached, refreshed after
-- pollNameServerInterval or when forced (after a failure).
function Producer:publish_info(topic, force)
    local info = self.infos[topic]
    local now = core.now_ms()
    if info and not force and now - info.fetched < self.pollNameServerInterval
        and #info.queues > 0 then
        return info
    end
    local r, err, code = route.fetch(self.namesrvs, topic, self.sendMsgTimeout, self.namesrv_index,
                                     self.credentials)
    local fresh
    if r then
        fresh = route.publish_info(topic, r)
    elseif code == codes.response.TOPIC_NOT_EXIST then
        -- Unknown topic: send with the template's route and let the
        -- broker auto-create it (if it allows).
        local t = route.fetch(self.namesrvs, self.createTopicKey, self.sendMsgTimeout, self.namesrv_index,
                              self.credentials)
        if t then
            fresh = route.publish_info(topic, t, self.defaultTopicQueueNums)
        end
    else
        self.namesrv_index = self.namesrv_index + 1
    end
    if fresh == nil or #fresh.queues == 0 then
        if info and #info.queues > 0 then
            return info  -- keep the last good route rather than fail
        end
        return nil, err or ("no route info of topic " .. topic), code
    end
    -- Java starts each topic's rotation at a random queue.
    fresh.counter = info and info.counter or math.random(0, 1 << 20)
    fresh.fetched = now
    self.infos[topic] = fresh
    return fresh
end

function Producer:broker_addr(info, broker_name)
    local addr = route.master(info, broker_name)
    if addr and self.sendMessageWithVIPChannel then
        local host, port = addr:match("^(.*):(%d+)$")
        addr = host .. ":" .. (tonumber(port) - 2)
    end
    return addr
end

-- The SEND_MESSAGE_V2 header (short names, protocol.md 4.1).
function Producer:header(msg, mq, sys_flag, props, batch)
    return {
        a = self.producerGroup,
        b = msg.topic,
        c = self.createTopicKey,
        d = self.defaultTopicQueueNums,
        e = mq.queueId,
        f = sys_flag,
        g = core.now_ms(),
        h = msg.flag or 0,
        i = props,
        j = msg.reconsumeTimes or 0,
        k = self.unitMode,
        m = batch or false,
        n = mq.brokerName,
    }
end

-- Properties and body as sent: tags, keys, delay, UNIQ_KEY, WAIT, user
-- properties; the body compressed when large.
function Producer:prepare(msg)
    local props = {}
    for k, v in pairs(msg.properties or {}) do
        props[k] = v
    end
    if msg.tags then
        props.TAGS = msg.tags
    end
    if msg.keys then
        props.KEYS = type(msg.keys) == "table" and table.concat(msg.keys, " ") or msg.keys
    end
    if msg.delayTimeLevel and msg.delayTimeLevel > 0 then
        props.DELAY = tostring(msg.delayTimeLevel)
    end
    -- Timer messages (RocketMQ 5's Message.setDeliverTimeMs /
    -- setDelayTimeSec / setDelayTimeMs; docs/timer.md).
    if msg.deliverTimeMs then
        props.TIMER_DELIVER_MS = ("%d"):format(msg.deliverTimeMs)
    end
    if msg.delayTimeSec then
        props.TIMER_DELAY_SEC = ("%d"):format(msg.delayTimeSec)
    end
    if msg.delayTimeMs then
        props.TIMER_DELAY_MS = ("%d"):format(msg.delayTimeMs)
    end
    if props.WAIT == nil then
        props.WAIT = msg.waitStoreMsgOK == false and "false" or "true"
    end
    props.UNIQ_KEY = props.UNIQ_KEY or message.uniq_key()
    local body, sys_flag = msg.body, 0
    if #body >= self.compressMsgBodyOverHowmuch then
        body = core.deflate(body, self.compressLevel)
        sys_flag = message.COMPRESSED_FLAG | message.COMPRESSION_ZLIB
    end
    return body, sys_flag, props
end

local function result_of(r, mq, uniq)
    local ext = r.ext
    return {
        status = STATUS[r.code],
        msgId = uniq,
        offsetMsgId = ext.msgId,
        queue = mq,
        queueOffset = tonumber(ext.queueOffset),
        transactionId = ext.transactionId,
        regionId = ext.MSG_REGION,
        traceOn = ext.TRACE_ON ~= "false",
    }
end

function Producer:note_latency(broker_name, latency, isolation)
    if self.sendLatencyFaultEnable then
        latency_fault.update({ faults = self.faults, brokerName = broker_name,
                               latency = latency, isolation = isolation,
                               now = core.now_ms(), latencyMax = self.latencyMax,
                               notAvailableDuration = self.notAvailableDuration })
    end
end

-- One logical send with Java's retry rules.  `mode` is "sync",
-- "oneway" or "orderly" (a fixed queue: no broker switching).
function Producer:send_impl(msg, mode, fixed_queue, body_override, sys_override, props_override)
    local err = message.check(msg, self.maxMessageSize)
    if err then
        return nil, err, codes.response.MESSAGE_ILLEGAL
    end
    local begin = core.mono_ms()
    local info, rerr, rcode = self:publish_info(msg.topic)
    if not info then
        return nil, rerr, rcode
    end
    local body, sys_flag, props = self:prepare(msg)
    if body_override then
        body, sys_flag = body_override, sys_override
        props = props_override
    end
    local props_s = message.encode_properties(props)
    local times = (mode == "sync" or mode == "async") and (1 + self.retryTimesWhenSendFailed) or 1
    local last_broker, last_err, last_code
    for _ = 1, times do
        local mq
        if fixed_queue then
            mq = fixed_queue
        else
            local i
            i, info.counter = self.select({
                queues = info.queues, counter = info.counter,
                lastBrokerName = last_broker, faults = self.faults,
                now = core.now_ms(), topic = msg.topic,
            })
            mq = i and info.queues[i]
        end
        if not mq then
            return nil, "no queue to send to for topic " .. msg.topic, rcode
        end
        local spent = core.mono_ms() - begin
        if spent >= self.sendMsgTimeout then
            -- Timeouts are not retried: the budget is for the whole send.
            return nil, ("send timed out after %d ms (%s)"):format(math.floor(spent), last_err or "timeout"), last_code
        end
        local addr = self:broker_addr(info, mq.brokerName)
        local cmd = {
            -- A reply (MSG_TYPE=reply) goes as SEND_REPLY_MESSAGE_V2, as
            -- MQClientAPIImpl.sendMessage sends it.
            code = msg.batch and codes.request.SEND_BATCH_MESSAGE
                or props.MSG_TYPE == "reply" and codes.request.SEND_REPLY_MESSAGE_V2
                or codes.request.SEND_MESSAGE_V2,
            ext = self:header(msg, mq, sys_flag, props_s, msg.batch),
            body = body,
            serialize = self.serialize,
            credentials = self.credentials,
        }
        local t0, t0_wall = core.mono_ms(), core.now_ms()
        if addr == nil then
            last_err, last_code = "no master address for broker " .. mq.brokerName, nil
            self:publish_info(msg.topic, true)
        elseif mode == "oneway" then
            local ok, oerr = net.oneway(addr, cmd)
            if ok then
                return { status = "SEND_OK", msgId = props.UNIQ_KEY, queue = mq }
            end
            return nil, oerr
        else
            local r, cerr = net.call(addr, cmd, math.max(1, math.ceil(self.sendMsgTimeout - spent)))
            local latency = core.mono_ms() - t0
            if r == nil then
                self:note_latency(mq.brokerName, latency, true)
                last_err, last_code = ("%s (%s): %s"):format(addr, mq.brokerName, cerr), nil
                if cerr == "timeout" then
                    -- The budget is gone: Java does not retry a timeout.
                    return nil, "send timed out: " .. last_err, nil
                end
            elseif STATUS[r.code] then
                self:note_latency(mq.brokerName, latency, false)
                local res = result_of(r, mq, props.UNIQ_KEY)
                if self.enableMsgTrace and not msg.batch then
                    require("rmq.client.trace").after_send(self, msg, res, t0_wall, latency, addr)
                end
                if r.code == codes.response.SUCCESS or not self.retryAnotherBrokerWhenNotStoreOK then
                    return res
                end
                last_err, last_code = res.status, r.code
            else
                self:note_latency(mq.brokerName, latency, true)
                last_err = ("%s (%s): code %d %s"):format(addr, mq.brokerName, r.code, r.remark or "")
                last_code = r.code
                if not self.retry_codes[r.code] then
                    return nil, last_err, last_code
                end
            end
        end
        last_broker = mq.brokerName
        if fixed_queue then
            break
        end
    end
    return nil, last_err or "send failed", last_code
end

function Producer:send(msg)
    return self:send_impl(msg, "sync")
end

function Producer:send_oneway(msg)
    return self:send_impl(msg, "oneway")
end

--- Sends without waiting; cb(result | nil, err, code) runs as a task.
function Producer:send_async(msg, cb)
    net.spawn(function()
        local r, err, code = self:send_impl(msg, "async")
        if cb then
            cb(r, err, code)
        end
    end)
end

--- Request-reply (rmq.client.request): the reply message, or nil, err.
function Producer:request(msg, timeout)
    return require("rmq.client.request").request(self, msg, timeout)
end

--- Sends a reply made by rmq.client.request.create_reply.
function Producer:send_reply(reply_msg)
    return self:send_impl(reply_msg, "sync")
end

--- Ordered send: the selector picks the queue (default: hash of arg).
function Producer:send_orderly(msg, arg, selector)
    local info, err, code = self:publish_info(msg.topic)
    if not info then
        return nil, err, code
    end
    selector = selector or function(queues, _, a)
        -- SelectMessageQueueByHash: arg.hashCode() % size, made positive.
        -- An integer hashes as a Java Integer (or Long, past 32 bits),
        -- anything else as the String tostring() gives.
        local h
        if math.type(a) == "integer" and a >= -0x80000000 and a <= 0x7FFFFFFF then
            h = a
        elseif math.type(a) == "integer" then
            h = (a ~ (a >> 32)) & 0xFFFFFFFF
            h = h >= 0x80000000 and h - 0x100000000 or h
        else
            h = message.java_hash(tostring(a))
        end
        return queues[math.abs(math.fmod(h, #queues)) + 1]
    end
    local mq = selector(info.queues, msg, arg)
    if not mq then
        return nil, "the selector chose no queue"
    end
    return self:send_impl(msg, "orderly", mq)
end

-- Batch body (protocol.md 5.8): per message
-- int totalSize, int magic 0, int bodyCRC 0, int flag, int bodyLen, body,
-- short propsLen, props.
local function encode_batch_item(body, flag, props_s)
    local total = 4 + 4 + 4 + 4 + 4 + #body + 2 + #props_s
    return string.pack(">i4i4i4i4s4s2", total, 0, 0, flag or 0, body, props_s)
end

function Producer:send_batch(msgs)
    if #msgs == 0 then
        return nil, "the batch is empty", codes.response.MESSAGE_ILLEGAL
    end
    local topic = msgs[1].topic
    local parts, uniq = {}, {}
    for i, m in ipairs(msgs) do
        if m.topic ~= topic then
            return nil, "every message of a batch must have the same topic", codes.response.MESSAGE_ILLEGAL
        end
        if m.delayTimeLevel and m.delayTimeLevel > 0 then
            return nil, "delayed messages cannot be batched", codes.response.MESSAGE_ILLEGAL
        end
        if m.deliverTimeMs or m.delayTimeSec or m.delayTimeMs then
            -- The broker does not hold batches (as 5.x).
            return nil, "timer messages cannot be batched", codes.response.MESSAGE_ILLEGAL
        end
        local err = message.check(m, self.maxMessageSize)
        if err then
            return nil, err, codes.response.MESSAGE_ILLEGAL
        end
        local props = {}
        for k, v in pairs(m.properties or {}) do props[k] = v end
        if m.tags then props.TAGS = m.tags end
        if m.keys then props.KEYS = m.keys end
        props.UNIQ_KEY = props.UNIQ_KEY or message.uniq_key()
        uniq[i] = props.UNIQ_KEY
        parts[i] = encode_batch_item(m.body, m.flag, message.encode_properties(props))
    end
    local body = table.concat(parts)
    local r, err, code = self:send_impl({ topic = topic, body = body, batch = true }, "sync", nil,
        body, 0, { WAIT = "true" })
    if r then
        r.msgId = table.concat(uniq, ",")
    end
    return r, err, code
end

M.Producer = Producer

return M
