-- Broker: the admin requests about client connections and consumer
-- progress that mqadmin's consumer, producer and offset commands send
-- (RocketMQ 4.9.8's AdminBrokerProcessor, Broker2Client,
-- ConsumerManager / ProducerManager):
--
--   GET_CONSUMER_CONNECTION_LIST (203)  ConsumerConnection of a group
--   GET_PRODUCER_CONNECTION_LIST (204)  ProducerConnection of a group
--   GET_ALL_PRODUCER_INFO (328)         ProducerTableInfo
--   GET_CONSUME_STATS (208)             ConsumeStats (per queue: broker
--                                       offset, committed offset, store
--                                       time of the last consumed message;
--                                       consumeTps: see below)
--   INVOKE_BROKER_TO_RESET_OFFSET (222) offsets by time (-1: the max),
--                                       told to every live consumer of the
--                                       group (RESET_CONSUMER_CLIENT_OFFSET,
--                                       220, one-way) and committed here
--   QUERY_TOPIC_CONSUME_BY_WHO (300)    GroupList
--   GET_CONSUMER_RUNNING_INFO (307), CONSUME_MESSAGE_DIRECTLY (309)
--       relayed to the named client's channel and its answer relayed
--       back (Broker2Client.callClient)
--
-- Everything comes from the shared client registry and offset table, so
-- any worker answers for clients connected to any other.
--
-- The relay of 307/309: the request goes to the client's channel with
-- net.send_to (flag 0, an opaque of ours); the client's response reaches
-- the worker owning that channel as a response no call waits for, which
-- net.on_response hands to on_response() below; it is put in the shared
-- map PENDING under "connId:opaque" (only when that key is waited for)
-- and the waiting worker is woken with net.raise.  The wait is
-- adminClientCallTimeoutMillis (Java's 10 s), at most
-- adminClientCallMaxPending at once in the broker and
-- adminClientCallMaxPendingPerClient for one client connection (so a
-- client that never answers cannot hold every slot); when that
-- connection closes its waits end at once ("c" entries, on_close).
--
-- consumeTps is the rate at which the group's committed offsets moved
-- over the last minute (sampled every consumeStatsTpsSampleMillis);
-- 4.9.8 counts the messages the group pulled per second over the last
-- minute (the same figure once the consumer commits what it pulls).
--
-- One difference from 4.9.8: Java's broker only tells the consumers to
-- reset (they commit the new offsets themselves); rmq also commits them,
-- so the reset holds even for a consumer that ignores the request.
local cjson = require("cjson")
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local header = require("rmq.header")
local log = require("rmq.log")
local message = require("rmq.message")
local names = require("rmq.names")
local net = require("rmq.net")
local reply = require("rmq.reply")
local shared = require("rmq.shared")
local clients = require("rmq.broker.clients")
local offsets = require("rmq.broker.offsets")

local M = {}

local req, R = codes.request, codes.response

-- MQVersion.Version ordinals 4.9.8 checks.
M.V3_0_7_SNAPSHOT = 28
M.V3_1_8_SNAPSHOT = 62

local pending = shared.map("broker.admin_clients.pending")

local NOT_SET = "not set any response code"

-- {{{ Bodies (fastjson: fields sorted, MessageQueue map keys as objects)

local function mq_json(b, topic, qid)
    return fastjson.encode({ brokerName = b.conf.brokerName, queueId = qid, topic = topic })
end

--- Java's Double.toString for the figures we write (the shortest
--- digits that read back as v).
function M.double(v)
    if v == math.floor(v) and math.abs(v) < 1e15 then
        return ("%d.0"):format(math.floor(v))
    end
    for digits = 15, 17 do
        local s = ("%." .. digits .. "g"):format(v)
        if tonumber(s) == v then
            return s
        end
    end
    return ("%.17g"):format(v)
end

-- {{{ consumeTps (4.9.8: the group's messages got per second over the last
-- minute).  The main thread samples each "topic@group"'s committed
-- offsets (summed over its queues) every consumeStatsTpsSampleMillis;
-- the rate over the last TPS_WINDOW samples is published to every worker
-- in the shared map TPS.  Entries leave with the offsets they measure.

M.TPS_WINDOW = 6
local tps_map = shared.map("broker.admin_clients.tps")
local samples = {}   -- main thread: ["topic@group"] = {{ms, sum}, ...}
local last_sample    -- main thread: when the last sample was taken

function M.sample_tps(now)
    local seen = {}
    for tg, queues in pairs(offsets.table()) do
        local sum = 0
        for _, off in pairs(queues) do
            if off > 0 then
                sum = sum + off
            end
        end
        local s = samples[tg]
        if s == nil then
            -- New since the last sample: it had nothing committed then
            -- (on the first sample, offsets loaded at start are no rate).
            s = last_sample and { { last_sample, 0 } } or {}
            samples[tg] = s
        end
        s[#s + 1] = { now, sum }
        while #s > M.TPS_WINDOW + 1 do
            table.remove(s, 1)
        end
        local tps = 0.0
        if now > s[1][1] and sum > s[1][2] then
            tps = (sum - s[1][2]) * 1000.0 / (now - s[1][1])
        end
        local v = M.double(tps)
        if tps_map:get(tg) ~= v then
            tps_map:set(tg, v)
        end
        seen[tg] = true
    end
    last_sample = now
    for tg in pairs(samples) do
        if not seen[tg] then
            samples[tg] = nil
            tps_map:del(tg)
        end
    end
end

local tps_timer

function M.main_init(b)
    tps_map:clear()
    pending:clear()
end

--- Main thread: drops entries older than twice the call timeout (an
--- answer stored just as its waiter gave up), so they cannot pile up
--- to adminClientCallMaxPending.
function M.purge_pending(b, now)
    local limit = 2 * b.conf.adminClientCallTimeoutMillis
    for key, v in pairs(pending:all()) do
        local since = tonumber(v:match("^[wac](%d+)\n") or "")
        if since == nil or now - since > limit then
            pending:del(key)
        end
    end
end

function M.main_start(b)
    local every = b.conf.consumeStatsTpsSampleMillis
    tps_timer = net.timer(every, every, function()
        local now = core.mono_ms()
        M.sample_tps(now)
        M.purge_pending(b, now)
    end)
end

function M.main_stop(b)
    if tps_timer then
        tps_timer:stop()
        tps_timer = nil
    end
end

-- }}}

local function connection(info)
    return {
        clientAddr = info.addr or "",
        clientId = info.clientId or "",
        language = info.language or "JAVA",
        version = math.tointeger(info.version) or 0,
    }
end

local function array(t)
    return setmetatable(t, fastjson.array_mt)
end

local function sorted_members(members)
    local out = {}
    for id, info in pairs(members or {}) do
        out[#out + 1] = { id = id, info = info }
    end
    table.sort(out, function(x, y) return x.id < y.id end)
    return out
end

-- }}}

-- {{{ Helpers

-- The topics a group has committed offsets of (whichTopicByConsumer) or
-- the groups that committed offsets of a topic (whichGroupByTopic).
local function offset_keys(want_group, want_topic)
    local out = {}
    for tg in pairs(offsets.table()) do
        local topic, group = tg:match("^(.-)@(.*)$")
        if topic then
            if want_group and group == want_group then
                out[topic] = true
            elseif want_topic and topic == want_topic then
                out[group] = true
            end
        end
    end
    return out
end

local keys_sorted = require("rmq.strings").sorted_keys

-- The store time of the message at consume-queue offset `off`, or 0.
local function store_time(st, topic, qid, off)
    local status, recs = st:get(topic, qid, off, 1)
    if status ~= "FOUND" or recs == nil then
        if recs then
            recs:release()
        end
        return 0
    end
    local raw = recs:get(1)
    recs:release()
    local ok, rec = pcall(message.decode_record, raw)
    if ok and type(rec) == "table" then
        return math.tointeger(rec.storeTimestamp) or 0
    end
    return 0
end

-- }}}

-- {{{ The relay of requests to a client (307, 309)

--- net.on_response hook (any worker): a client's answer to a relayed
--- request, stored for the worker that waits for it.
function M.on_response(ctx, cmd)
    local key = ("%d:%d"):format(ctx.id, cmd.opaque)
    local v = pending:get(key)
    if v == nil or v:sub(1, 1) ~= "w" then
        return false  -- nobody waits (timed out, or not ours)
    end
    local head = cjson.encode({ code = cmd.code, remark = cmd.remark, ext = cmd.ext or {} })
    -- "a<since>\n<len>\n<head><body>": since, for the purge below
    pending:set(key, ("a%d\n%d\n"):format(math.floor(core.mono_ms()), #head) .. head .. (cmd.body or ""))
    net.raise("admin_clients." .. key)
    return true
end

--- The relayed calls waiting for connection `conn` (keys "conn:opaque").
local function waiting_for(conn)
    local prefix, n, keys = conn .. ":", 0, {}
    for key, v in pairs(pending:all()) do
        if key:sub(1, #prefix) == prefix and v:sub(1, 1) == "w" then
            n = n + 1
            keys[n] = key
        end
    end
    return n, keys
end

--- Close hook (the worker owning the connection): the calls waiting for
--- its answer end now, "c" (closed), instead of holding their slots
--- until the timeout.
function M.on_close(b, ctx)
    if pending:count() == 0 then
        return
    end
    local n, keys = waiting_for(ctx.id)
    for i = 1, n do
        pending:set(keys[i], ("c%d\n"):format(math.floor(core.mono_ms())))
        net.raise("admin_clients." .. keys[i])
    end
end

local opaque_seq = 0

-- Sends `cmd` to connection `conn` and waits for its answer.  Returns the
-- reply table, or nil and "timeout" | "busy" | a send error.
local function call_client(b, conn, cmd)
    if pending:count() >= b.conf.adminClientCallMaxPending then
        return nil, "busy"
    end
    if waiting_for(conn) >= b.conf.adminClientCallMaxPendingPerClient then
        return nil, "busy client"
    end
    opaque_seq = (opaque_seq + 1) & 0xFFFFFF
    -- Unique per worker (its id in the top bits), positive as an int32.
    local opaque = (((b.worker or 0) + 1) & 0x3F) << 24 | opaque_seq
    local key = ("%d:%d"):format(conn, opaque)
    pending:set(key, ("w%d\n"):format(math.floor(core.mono_ms())))
    cmd.opaque, cmd.flag = opaque, 0
    local ok, err = net.send_to(conn, cmd)
    if not ok then
        pending:del(key)
        return nil, err
    end
    local deadline = core.mono_ms() + b.conf.adminClientCallTimeoutMillis
    -- An answer stored between the look-up and the wait raises before
    -- anyone waits: the waits start short and grow, so such a miss costs
    -- a few ms, not a whole 100 ms wait.
    local step = 1
    while true do
        local v = pending:get(key)
        if v and v:sub(1, 1) == "a" then
            pending:del(key)
            local n, rest = v:match("^a%d+\n(%d+)\n()")
            local head = cjson.decode(v:sub(rest, rest + tonumber(n) - 1))
            local body = v:sub(rest + tonumber(n))
            local remark = head.remark
            if remark == cjson.null then
                remark = nil
            end
            return { code = math.tointeger(head.code), remark = remark, ext = head.ext,
                     body = #body > 0 and body or nil }
        elseif v and v:sub(1, 1) == "c" then
            pending:del(key)
            return nil, "closed"
        end
        local left = deadline - core.mono_ms()
        if left <= 0 then
            pending:del(key)
            return nil, "timeout"
        end
        net.wait_event("admin_clients." .. key, math.max(1, math.min(math.floor(left), step)))
        step = math.min(step * 2, 100)
    end
end

-- AdminBrokerProcessor.callConsumer.
local function call_consumer(b, code, ext, body, group, client_id)
    local conn, info
    -- findChannel: the group's channel of that client
    for id, m in pairs(clients.registry:members("consumer", group) or {}) do
        if m.clientId == client_id then
            conn, info = id, m
        end
    end
    if conn == nil then
        return reply.system_error(("The Consumer <%s> <%s> not online"):format(group, client_id))
    end
    if (info.version or 0) < M.V3_1_8_SNAPSHOT then
        return reply.system_error(("The Consumer <%s> Version <%s> too low to finish, please upgrade it to "
            .. "V3_1_8_SNAPSHOT"):format(client_id, tostring(info.version)))
    end
    local r, err = call_client(b, conn, { code = code, ext = ext, body = body })
    if r == nil then
        if err == "timeout" then
            return reply.error(R.CONSUME_MSG_TIMEOUT, ("consumer <%s> <%s> Timeout: "
                .. "org.apache.rocketmq.remoting.exception.RemotingTimeoutException: wait response on the channel "
                .. "<%s> timeout, %d(ms)"):format(group, client_id, tostring(info.addr),
                b.conf.adminClientCallTimeoutMillis))
        end
        if err == "busy" then
            err = ("%d calls already wait for clients (adminClientCallMaxPending)"):format(
                b.conf.adminClientCallMaxPending)
        elseif err == "busy client" then
            err = ("%d calls already wait for this client (adminClientCallMaxPendingPerClient)"):format(
                b.conf.adminClientCallMaxPendingPerClient)
        elseif err == "closed" then
            err = ("the channel <%s> closed before it answered"):format(tostring(info.addr))
        end
        return reply.system_error(("invoke consumer <%s> <%s> Exception: %s"):format(group, client_id, err))
    end
    return r
end

-- }}}

-- {{{ Request headers (4.9.8's *RequestHeader classes; @CFNotNull = required)

M.HEADER_CONSUMER_GROUP = header.compile({ { "consumerGroup", "group", true } })
M.HEADER_PRODUCER_GROUP = header.compile({ { "producerGroup", "group", true } })
M.HEADER_CONSUME_STATS = header.compile({
    { "consumerGroup", "group", true },
    { "topic", "string", false },
})
M.HEADER_RESET = header.compile({
    { "topic", "topic", true },
    { "group", "group", true },
    { "timestamp", "long", true },
    { "isForce", "bool", true },
})
M.HEADER_BY_WHO = header.compile({ { "topic", "topic", true } })
M.HEADER_RUNNING_INFO = header.compile({
    { "consumerGroup", "group", true },
    { "clientId", "string", true },
    { "jstackEnable", "bool", false },
})
M.HEADER_DIRECTLY = header.compile({
    { "consumerGroup", "group", true },
    { "clientId", "string", true },
    { "msgId", "string", true },
    { "brokerName", "string", false },
})

-- }}}

--- The offsets a reset moves the group to: {{qid=, offset=}, ...} or
--- nil and the reply refusing it (Broker2Client.resetOffset).
function M.reset_table(b, topic, group, timestamp, force)
    local cfg = b.topics.get(topic)
    if cfg == nil then
        return nil, reply.system_error("[reset-offset] reset offset failed, no topic in this broker. topic=" .. topic)
    end
    local st = b.store
    local out = {}
    for i = 0, cfg.writeQueueNums - 1 do
        local consumer = offsets.query(group, topic, i)
        if consumer == nil or consumer < 0 then
            return nil, reply.system_error(("THe consumer group <%s> not exist"):format(group))
        end
        local at
        if timestamp == -1 then
            at = st:max_offset(topic, i)
        else
            at = st:offset_by_time(topic, i, timestamp)
        end
        if at < 0 then
            at = 0
        end
        out[#out + 1] = { qid = i, offset = (force or at < consumer) and at or consumer }
    end
    return out
end

local function reset_body(b, topic, tbl)
    local parts = {}
    for _, e in ipairs(tbl) do
        parts[#parts + 1] = mq_json(b, topic, e.qid) .. ":" .. e.offset
    end
    return '{"offsetTable":{' .. table.concat(parts, ",") .. "}}"
end

function M.processors(b)
    local st = b.store
    local reg = clients.registry
    net.on_response(M.on_response)
    local P = {}

    P[req.GET_CONSUMER_CONNECTION_LIST] = { header = M.HEADER_CONSUMER_GROUP, run = function(ctx, cmd, h)
        local g = clients.consumer_group(h.consumerGroup)
        if g == nil then
            return reply.error(R.CONSUMER_NOT_ONLINE, ("the consumer group[%s] not online"):format(h.consumerGroup))
        end
        local set = {}
        for _, m in ipairs(sorted_members(g.members)) do
            set[#set + 1] = connection(m.info)
        end
        for _, sub in pairs(g.subscriptionTable) do
            array(sub.tagsSet)
            array(sub.codeSet)
        end
        local body = fastjson.encode({
            connectionSet = array(set),
            consumeFromWhere = g.consumeFromWhere,
            consumeType = g.consumeType,
            messageModel = g.messageModel,
            subscriptionTable = g.subscriptionTable,
        })
        return reply.ok(nil, body)
    end }

    P[req.GET_PRODUCER_CONNECTION_LIST] = { header = M.HEADER_PRODUCER_GROUP, run = function(ctx, cmd, h)
        local members = reg:members("producer", h.producerGroup)
        if members == nil or next(members) == nil then
            return reply.system_error(("the producer group[%s] not exist"):format(h.producerGroup))
        end
        local set = {}
        for _, m in ipairs(sorted_members(members)) do
            set[#set + 1] = connection(m.info)
        end
        return reply.ok(nil, fastjson.encode({ connectionSet = array(set) }))
    end }

    P[req.GET_ALL_PRODUCER_INFO] = function()
        local data = {}
        for _, group in ipairs(clients.producer_groups()) do
            local list = {}
            for _, m in ipairs(sorted_members(reg:members("producer", group))) do
                local info = m.info
                list[#list + 1] = {
                    clientId = info.clientId or "",
                    language = info.language or "JAVA",
                    lastUpdateTimestamp = math.tointeger(info.lastUpdate) or 0,
                    -- Channel.remoteAddress().toString(): "/ip:port"
                    remoteIP = "/" .. (info.addr or ""),
                    version = math.tointeger(info.version) or 0,
                }
            end
            if #list > 0 then
                data[group] = list
            end
        end
        if next(data) == nil then
            return reply.ok(nil, '{"data":{}}')
        end
        return reply.ok(nil, fastjson.encode({ data = data }))
    end

    P[req.GET_CONSUME_STATS] = { header = M.HEADER_CONSUME_STATS, run = function(ctx, cmd, h)
        local group = h.consumerGroup
        local topic_list
        if h.topic == nil or h.topic:match("^%s*$") then
            topic_list = keys_sorted(offset_keys(group, nil))
        else
            local bad = names.topic(h.topic)
            if bad then
                return reply.system_error(bad)
            end
            topic_list = { h.topic }
        end
        local g = clients.consumer_group(group)
        local parts = {}
        local tps = 0.0
        for _, topic in ipairs(topic_list) do
            local cfg = b.topics.get(topic)
            -- Java skips a topic it has no config of, and one the group,
            -- online and subscribed to something, does not subscribe to.
            local skip = cfg == nil
            if not skip and g ~= nil and g.subscriptionTable[topic] == nil and next(g.subscriptionTable) ~= nil then
                skip = true
            end
            if not skip then
                tps = tps + (tonumber(tps_map:get(topic .. "@" .. group) or "") or 0)
                for i = 0, cfg.readQueueNums - 1 do
                    local broker_off = st:max_offset(topic, i)
                    if broker_off < 0 then
                        broker_off = 0
                    end
                    local consumer_off = offsets.query(group, topic, i) or -1
                    if consumer_off < 0 then
                        consumer_off = 0
                    end
                    local last = 0
                    if consumer_off - 1 >= 0 then
                        last = store_time(st, topic, i, consumer_off - 1)
                    end
                    parts[#parts + 1] = mq_json(b, topic, i) .. ":" .. fastjson.encode({
                        brokerOffset = broker_off, consumerOffset = consumer_off, lastTimestamp = last })
                end
            end
        end
        local body = '{"consumeTps":' .. M.double(tps) .. ',"offsetTable":{' .. table.concat(parts, ",") .. "}}"
        return reply.ok(nil, body)
    end }

    P[req.INVOKE_BROKER_TO_RESET_OFFSET] = { header = M.HEADER_RESET, run = function(ctx, cmd, h)
        local topic, group = h.topic, h.group
        local tbl, refused = M.reset_table(b, topic, group, h.timestamp, h.isForce)
        if tbl == nil then
            log.warn("reset offset of %s on %s refused: %s", group, topic, refused.remark)
            return refused
        end
        local members = reg:members("consumer", group)
        if members == nil or next(members) == nil then
            local why = ("Consumer not online, so can not reset offset, Group: %s Topic: %s Timestamp: %d")
                :format(group, topic, h.timestamp)
            log.warn("%s", why)
            return reply.error(R.CONSUMER_NOT_ONLINE, why)
        end
        for _, info in pairs(members) do
            if (info.version or 0) < M.V3_0_7_SNAPSHOT then
                return reply.system_error("the client does not support this feature. version="
                    .. tostring(info.version))
            end
        end
        local body = reset_body(b, topic, tbl)
        for _, e in ipairs(tbl) do
            offsets.commit(group, topic, e.qid, e.offset)
        end
        local told = 0
        for _, m in ipairs(sorted_members(members)) do
            local ok, err = net.send_to(m.id, {
                code = req.RESET_CONSUMER_CLIENT_OFFSET,
                ext = { topic = topic, group = group, timestamp = tostring(h.timestamp), isForce = "false" },
                body = body,
            })
            if ok then
                told = told + 1
            else
                log.warn("reset offset of %s on %s: client %s not told: %s", group, topic,
                         tostring(m.info.clientId), tostring(err))
            end
        end
        log.info("reset offset of %s on %s to time %d (force %s): %d queue(s), %d client(s) told", group, topic,
                 h.timestamp, tostring(h.isForce), #tbl, told)
        -- Broker2Client sets the code only: the remark of
        -- createResponseCommand stays (as a 4.9.8 broker answers).
        return { code = R.SUCCESS, remark = NOT_SET, body = body }
    end }

    P[req.QUERY_TOPIC_CONSUME_BY_WHO] = { header = M.HEADER_BY_WHO, run = function(ctx, cmd, h)
        local set = offset_keys(nil, h.topic)
        for _, group in ipairs(clients.consumer_groups()) do
            if clients.find_subscription(group, h.topic) then
                set[group] = true
            end
        end
        return reply.ok(nil, fastjson.encode({ groupList = array(keys_sorted(set)) }))
    end }

    P[req.GET_CONSUMER_RUNNING_INFO] = { header = M.HEADER_RUNNING_INFO, run = function(ctx, cmd, h)
        return call_consumer(b, req.GET_CONSUMER_RUNNING_INFO, cmd.ext, cmd.body, h.consumerGroup, h.clientId)
    end }

    P[req.CONSUME_MESSAGE_DIRECTLY] = { header = M.HEADER_DIRECTLY, run = function(ctx, cmd, h)
        local ext = cmd.ext or {}
        ext.brokerName = b.conf.brokerName
        -- MessageDecoder.decodeMessageId: host (8 hex IPv4 + 8 hex port,
        -- or 32 + 8 for IPv6), then the commit log offset in 16 hex.
        local id = h.msgId
        local body
        if id:match("^%x+$") and (#id == 32 or #id == 56) then
            local phy = tonumber(id:sub(-16, -9), 16) << 32 | tonumber(id:sub(-8), 16)
            local recs = st:message(phy)
            if recs and #recs > 0 then
                body = recs:tostring()
            end
            if recs then
                recs:release()
            end
        end
        if body == nil then
            return reply.system_error("can not find message by the msgId, " .. names.show(id))
        end
        return call_consumer(b, req.CONSUME_MESSAGE_DIRECTLY, ext, body, h.consumerGroup, h.clientId)
    end }

    return P
end

return M
