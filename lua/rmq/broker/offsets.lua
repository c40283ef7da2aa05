-- Consumer offsets (RocketMQ's ConsumerOffsetManager and the offset
-- requests of ConsumerManageProcessor / AdminBrokerProcessor,
-- protocol.md 4.7, 4.8):
--
--   QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
--   SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30),
--   GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
--   GET_ALL_CONSUMER_OFFSET (43, what a slave syncs)
--
-- Every worker shares one typed table in C (rmq.offset_table:
-- "topic@group" -> queue id -> offset under a rwlock), so two workers
-- committing different queues of one group never overwrite each other
-- and a commit costs the same with 10 or 100,000 queues committed.  The
-- main thread loads STORE/config/consumerOffset.json at start and writes
-- it (fastjson's pretty format, bare numeric queue keys, as the Java
-- broker does) every flushConsumerOffsetInterval ms when something
-- changed, and at shutdown.
--
-- For other modules (admin, pull):
--   offsets.commit(group, topic, qid, offset)
--   offsets.query(group, topic, qid) -> offset | nil
--   offsets.table() -> {["topic@group"] = {[qid] = offset}}
--   offsets.remove_group(group), offsets.remove_topic(topic)
local configfile = require("rmq.configfile")
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local log = require("rmq.log")
local net = require("rmq.net")
local offset_table = require("rmq.offset_table")
local processors = require("rmq.processors")
local slave_read = require("rmq.policy.slave_read")
local header = require("rmq.header")
local reply = require("rmq.reply")

local req, resp = codes.request, codes.response

local M = {}

local map = offset_table.shared()
M.map = map

--- Stores a committed offset (no check that it moves forward: Java
--- does not check either).  A negative offset is not stored.
function M.commit(group, topic, qid, offset)
    return map:commit(topic, group, qid, offset)
end

function M.query(group, topic, qid)
    return map:query(topic, group, qid)
end

--- {["topic@group"] = {[qid] = offset}}, a snapshot.
function M.table()
    return map:all()
end

--- Drops every offset of a consumer group (DELETE_SUBSCRIPTIONGROUP).
function M.remove_group(group)
    return map:remove_group(group)
end

--- Drops every offset of a topic (DELETE_TOPIC_IN_BROKER).
function M.remove_topic(topic)
    return map:remove_topic(topic)
end

-- {{{ fastjson text (C: rmq.offset_table)

-- The table `t` ({["topic@group"] = {[qid] = offset}}) or, without one,
-- the live table.
local function source(t)
    if t == nil then
        return map
    end
    local tmp = offset_table.new()
    for tg, queues in pairs(t) do
        local topic, group = tg:match("^(.-)@(.*)$")
        for q, off in pairs(queues) do
            tmp:commit(topic or tg, group or "", q, off)
        end
    end
    return tmp
end

--- The table as ConsumerOffsetManager.encode(pretty) writes it:
--- fastjson's PrettyFormat (tabs) with bare integer queue keys.
function M.encode_pretty(t)
    return source(t):encode(true)
end

--- ConsumerOffsetManager.encode() (compact): GET_ALL_CONSUMER_OFFSET.
function M.encode(t)
    return source(t):encode(false)
end

-- }}}

-- {{{ Persistence (main thread)

-- consumerOffset.json's offsetTable into the map; the queue offsets read.
local function decode(doc)
    local n = 0
    local offs = doc.offsetTable
    for tg, queues in pairs(type(offs) == "table" and offs or {}) do
        if type(queues) == "table" then
            local topic, group = tostring(tg):match("^(.-)@(.+)$")
            for q, off in pairs(queues) do
                local qid, o = fastjson.int(q), fastjson.int(off)
                if topic and qid and o and qid >= 0 and qid < 65536 and o >= 0 then
                    M.commit(group, topic, qid, o)
                    n = n + 1
                end
            end
        end
    end
    return n
end

-- The file's sequence is rmq.configfile.table's.
local file = configfile.table({ store_file = "consumerOffset.json", decode = decode,
    reset = function() map:clear() end,
    encode = function() return M.encode_pretty() end,
    version = function() return map:version() end })
M.path = file.path

--- Loads consumerOffset.json into the shared map (main thread, before
--- the workers).  Returns true, the number of queue offsets; or nil, err.
function M.load(conf)
    local ok, n = file.load(conf)
    return ok, n
end

--- Writes consumerOffset.json when the table changed since the last write.
M.persist = file.persist

function M.main_init(b)
    local ok, n = M.load(b.conf)
    if not ok then
        error("cannot load " .. M.path(b.conf) .. ": " .. tostring(n), 0)
    end
    if n > 0 then
        log.info("consumer offsets: %d queue offsets loaded", n)
    end
end

local timer

local function persist_logged(b)
    local ok, err = M.persist(b.conf)
    if not ok then
        log.error("cannot persist consumer offsets: %s", tostring(err))
    end
end

function M.main_start(b)
    local every = b.conf.flushConsumerOffsetInterval or 5000
    timer = net.timer(every, every, function() persist_logged(b) end)
end

function M.main_stop(b)
    if timer then
        timer:stop()
        timer = nil
    end
    persist_logged(b)
end

--- After the workers ended: commits answered during their drain.
function M.after_workers(b)
    persist_logged(b)
end

-- }}}

-- {{{ Handlers

-- The request headers (protocol.md 4.7, 4.8), read by dispatch.
local GROUP = { "consumerGroup", "group", true }
local TOPIC = { "topic", "topic", true }
local QUEUE = { "queueId", "int", true, min = 0 }
M.HEADER_QUEUE = header.compile({ TOPIC, QUEUE })
M.HEADER_QUERY = header.compile({ GROUP, TOPIC, QUEUE })
M.HEADER_UPDATE = header.compile({ GROUP, TOPIC, QUEUE, { "commitOffset", "long", true } })
M.HEADER_SEARCH = header.compile({ TOPIC, QUEUE, { "timestamp", "long", true } })

function M.processors(b)
    local st = b.store
    local conf = b.conf
    local memory = core.total_memory()
    local P = {}

    -- "Message 0 of the queue is still in memory": a young queue, where
    -- a new group starts at 0 even with CONSUME_FROM_LAST_OFFSET
    -- (checkInDiskByConsumeOffset(topic, q, 0) is false).
    local function first_in_memory(topic, qid)
        local status, recs, _, _, _, max_phy, last_phy = st:get(topic, qid, 0, 1)
        if recs then
            recs:release()
        end
        if status ~= "FOUND" and status ~= "NO_MATCHED_MESSAGE" and status ~= "MESSAGE_WAS_REMOVING" then
            return true  -- no entry at offset 0: not "in disk"
        end
        return not slave_read.is_slow({
            maxPhyOffset = max_phy, lastPhyOffset = last_phy, physicalMemory = memory,
            accessMessageInMemoryMaxRatio = conf.accessMessageInMemoryMaxRatio,
        })
    end

    P[req.QUERY_CONSUMER_OFFSET] = { header = M.HEADER_QUERY, run = function(ctx, cmd, h)
        local group, topic, qid = h.consumerGroup, h.topic, h.queueId
        local off = M.query(group, topic, qid)
        if off and off >= 0 then
            return { code = 0, ext = { offset = off } }
        end
        if st:min_offset(topic, qid) <= 0 and first_in_memory(topic, qid) then
            return { code = 0, ext = { offset = 0 } }
        end
        return reply.error(resp.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first", {})
    end }

    -- As 5.x: only for a topic this broker has and one of its queues, so
    -- what a peer can make the offset table hold is bounded by the
    -- topics, not by what it sends.
    P[req.UPDATE_CONSUMER_OFFSET] = { header = M.HEADER_UPDATE, run = function(ctx, cmd, h)
        local cfg = b.topics.get(h.topic)
        if cfg == nil then
            return reply.error(resp.TOPIC_NOT_EXIST, ("Topic %s not found"):format(h.topic))
        end
        local nq = math.max(cfg.readQueueNums, cfg.writeQueueNums)
        if h.queueId >= nq then
            return reply.system_error(("QueueId[%d] is equal or greater than the queue number %d of topic %s")
                :format(h.queueId, nq, h.topic))
        end
        M.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return { code = 0, ext = {} }
    end }

    P[req.GET_MAX_OFFSET] = { header = M.HEADER_QUEUE, run = function(ctx, cmd, h)
        return { code = 0, ext = { offset = st:max_offset(h.topic, h.queueId) } }
    end }

    P[req.GET_MIN_OFFSET] = { header = M.HEADER_QUEUE, run = function(ctx, cmd, h)
        return { code = 0, ext = { offset = st:min_offset(h.topic, h.queueId) } }
    end }

    P[req.SEARCH_OFFSET_BY_TIMESTAMP] = { header = M.HEADER_SEARCH, run = function(ctx, cmd, h)
        return { code = 0, ext = { offset = st:offset_by_time(h.topic, h.queueId, h.timestamp) } }
    end }

    P[req.GET_EARLIEST_MSG_STORETIME] = { header = M.HEADER_QUEUE, run = function(ctx, cmd, h)
        return { code = 0, ext = { timestamp = st:earliest_time(h.topic, h.queueId) } }
    end }

    P[req.GET_ALL_CONSUMER_OFFSET] = function()
        return { code = 0, body = M.encode() }
    end

    -- In C (rmq.processors.offset): a query for a group that has an
    -- offset, an update of a known queue, max and min offsets.  The
    -- handlers above get the rest.
    for code, kind in pairs({
        [req.QUERY_CONSUMER_OFFSET] = "query", [req.UPDATE_CONSUMER_OFFSET] = "update",
        [req.GET_MAX_OFFSET] = "max", [req.GET_MIN_OFFSET] = "min",
    }) do
        P[code].native = processors.offset(kind, st, P[code].header)
    end
    return P
end

-- }}}

return M
