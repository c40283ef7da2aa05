-- Remoting requests built by hand, for specs that talk to a broker below
-- the client library: SEND_MESSAGE_V2 (310) and PULL_MESSAGE (11) as
-- command tables (for rmq.net's c:call, or rmq.codec.encode for a socket
-- of the spec's own), and the frame around a header the spec wrote
-- itself.  The fields are the ones RocketMQ 4.9.8's Java client sends
-- (SendMessageRequestHeaderV2's one-letter names, PullMessageRequestHeader's);
-- a builder takes the few a spec varies, and `ext` sets any other field
-- (false removes it).
--
--   local rq = require("support.requests")
--   c:call(rq.send({ topic = "T", qid = 1, body = "x", tags = "TagA" }))
--   c:call(rq.pull({ group = "G", topic = "T", qid = 1, offset = 3 }))
--   rq.records(c, { group = "G", topic = "T", qid = 1 })
--                            -> every record of the queue from offset 0
--                               (decoded), and the reply that ended the walk;
--                               c a connection or an address
--   rq.bodies(c, {...})      -> the same, bodies only
--   rq.frame(header [, body [, serialize_type]])   -> one frame's bytes
--   rq.read_reply(sock)      -> the next frame off a blocking luasocket
--                               socket, decoded
local codec = require("rmq.codec")
local core = require("rmq.core")
local message = require("rmq.client.message")
local net = require("rmq.net")

local M = {}

-- Sets o.ext's fields over ext (a false one is removed); returns ext.
local function over(ext, o)
    for k, v in pairs(o.ext or {}) do
        ext[k] = v or nil
    end
    return ext
end

--- The properties string of a send: WAIT (o.wait, true unless false),
--- then TAGS when o.tags is given.
function M.props(o)
    local p = "WAIT\1" .. tostring(o.wait ~= false)
    if o.tags then
        p = p .. "\2TAGS\1" .. o.tags
    end
    return p
end

--- SEND_MESSAGE_V2's header fields: a producerGroup (o.group), b topic,
--- c defaultTopic, d defaultTopicQueueNums (o.queues, 4), e queueId
--- (o.qid, 0), f sysFlag (o.sysflag, 0), g bornTimestamp (o.born, now),
--- h flag, i properties (o.props, else M.props(o)), j reconsumeTimes,
--- k unitMode, m batch.
function M.send_ext(o)
    return over({
        a = o.group or "SpecProducer", b = o.topic, c = "TBW102", d = tostring(o.queues or 4),
        e = tostring(o.qid or 0), f = tostring(o.sysflag or 0), g = tostring(o.born or core.now_ms()), h = "0",
        i = o.props or M.props(o), j = "0", k = "false", m = "false",
    }, o)
end

--- A SEND_MESSAGE_V2 of o.body (see send_ext for the other fields).
function M.send(o)
    return { code = 310, opaque = o.opaque, ext = M.send_ext(o), body = o.body }
end

--- A PULL_MESSAGE of o.group on o.topic's queue o.qid (0) from o.offset
--- (0): up to o.max (32) messages, sysFlag o.sysflag (4,
--- FLAG_SUBSCRIPTION), commitOffset o.commit (0), held up to o.suspend
--- ms (0), subscription o.subscription ("*") of version o.subversion (0),
--- expressionType o.expr (absent unless given).
function M.pull(o)
    return { code = 11, opaque = o.opaque, ext = over({
        consumerGroup = o.group, topic = o.topic, queueId = tostring(o.qid or 0),
        queueOffset = tostring(o.offset or 0), maxMsgNums = tostring(o.max or 32),
        sysFlag = tostring(o.sysflag or 4), commitOffset = tostring(o.commit or 0),
        suspendTimeoutMillis = tostring(o.suspend or 0), subscription = o.subscription or "*",
        subVersion = tostring(o.subversion or 0), expressionType = o.expr,
    }, o) }
end

--- Pulls o's queue from offset 0 until the broker has nothing more, on
--- `via`: a connection (rmq.net's, or anything with :call) or an
--- address; each call bounded by o.timeout (30 s).  Returns the decoded
--- records in order and the reply that ended the walk.
function M.records(via, o)
    local out, q = {}, setmetatable({ offset = 0 }, { __index = o })
    local timeout = o.timeout or 30000
    while true do
        local cmd = M.pull(q)
        local r
        if type(via) == "string" then
            r = assert(net.call(via, cmd, timeout))
        else
            r = assert(via:call(cmd, timeout))
        end
        if r.code ~= 0 then
            return out, r
        end
        for _, m in ipairs(message.decode_records(r.body)) do
            out[#out + 1] = m
        end
        q.offset = tonumber(r.ext.nextBeginOffset)
    end
end

--- M.records' bodies only, and the reply that ended the walk.
function M.bodies(via, o)
    local records, last = M.records(via, o)
    for i, m in ipairs(records) do
        records[i] = m.body
    end
    return records, last
end

--- One remoting frame: the length word, the header-length word (its top
--- byte the serialize type: 0 JSON, 1 ROCKETMQ), the header, the body.
function M.frame(header, body, ser)
    body = body or ""
    return string.pack(">I4I4", 4 + #header + #body, (ser or 0) << 24 | #header) .. header .. body
end

--- The next frame off a blocking luasocket socket, decoded (asserts it
--- arrives and decodes).
function M.read_reply(sock)
    local len = string.unpack(">I4", assert(sock:receive(4)))
    return assert(codec.decode(string.pack(">I4", len) .. assert(sock:receive(len))))
end

return M
