-- Consumer offsets (RocketMQ's ConsumerOffsetManager and the offset
-- requests of ConsumerManageProcessor / AdminBrokerProcessor,
-- protocol.md 4.7, 4.8):
--
--   QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
--   SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30),
--   GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
--   GET_ALL_CONSUMER_OFFSET (43, what a slave syncs)
--
-- Every worker shares one table: an rmq.shared map with one key per
-- queue ("topic@group qid" -> offset), so two workers committing
-- different queues of one group never overwrite each other.  The main
-- thread loads STORE/config/consumerOffset.json at start and writes it
-- (fastjson's pretty format, bare numeric queue keys, as the Java broker
-- does) every flushConsumerOffsetInterval ms when something changed, and
-- at shutdown.
--
-- For other modules (admin, pull):
--   offsets.commit(group, topic, qid, offset)
--   offsets.query(group, topic, qid) -> offset | nil
--   offsets.table() -> {["topic@group"] = {[qid] = offset}}
--   offsets.remove_group(group), offsets.remove_topic(topic)
local cjson = require("cjson")
local configfile = require("rmq.configfile")
local codes = require("rmq.codes")
local core = require("rmq.core")
local log = require("rmq.log")
local net = require("rmq.net")
local shared = require("rmq.shared")
local slave_read = require("rmq.policy.slave_read")
local header = require("rmq.header")

local req, resp = codes.request, codes.response

local M = {}

local map = shared.map("broker.consumerOffset")
M.map = map

local function int(v)
    if type(v) == "string" then
        v = tonumber(v)
    end
    if type(v) ~= "number" then
        return nil
    end
    return math.tointeger(v)
end

local function key(group, topic, qid)
    return topic .. "@" .. group .. " " .. qid
end

--- Stores a committed offset (no check that it moves forward: Java
--- does not check either).
function M.commit(group, topic, qid, offset)
    map:set(key(group, topic, qid), tostring(offset))
end

function M.query(group, topic, qid)
    local v = map:get(key(group, topic, qid))
    return v and math.tointeger(tonumber(v)) or nil
end

--- {["topic@group"] = {[qid] = offset}}, a snapshot.
function M.table()
    local t = {}
    for k, v in pairs(map:all()) do
        local tg, q = k:match("^(.*) (%d+)$")
        if tg then
            local e = t[tg]
            if e == nil then
                e = {}
                t[tg] = e
            end
            e[tonumber(q)] = math.tointeger(tonumber(v))
        end
    end
    return t
end

local function remove_where(pred)
    local n = 0
    for k in pairs(map:all()) do
        local tg = k:match("^(.*) %d+$")
        local topic, group = (tg or ""):match("^(.-)@(.*)$")
        if topic and pred(topic, group) and map:del(k) then
            n = n + 1
        end
    end
    return n
end

--- Drops every offset of a consumer group (DELETE_SUBSCRIPTIONGROUP).
function M.remove_group(group)
    return remove_where(function(_, g) return g == group end)
end

--- Drops every offset of a topic (DELETE_TOPIC_IN_BROKER).
function M.remove_topic(topic)
    return remove_where(function(t) return t == topic end)
end

-- {{{ fastjson text

local function quote(s)
    return (cjson.encode(s))
end

local function sorted_keys(t)
    local ks = {}
    for k in pairs(t) do
        ks[#ks + 1] = k
    end
    table.sort(ks)
    return ks
end

local function queue_map(e)
    local parts = {}
    for _, q in ipairs(sorted_keys(e)) do
        parts[#parts + 1] = ("%d:%d"):format(q, e[q])
    end
    return table.concat(parts, ",")
end

--- The table as ConsumerOffsetManager.encode(pretty) writes it:
--- fastjson's PrettyFormat (tabs) with bare integer queue keys.
function M.encode_pretty(t)
    t = t or M.table()
    local ks = sorted_keys(t)
    if #ks == 0 then
        return '{\n\t"offsetTable":{}\n}'
    end
    local rows = {}
    for _, k in ipairs(ks) do
        rows[#rows + 1] = "\t\t" .. quote(k) .. ":{" .. queue_map(t[k]) .. "\n\t\t}"
    end
    return '{\n\t"offsetTable":{\n' .. table.concat(rows, ",\n") .. "\n\t}\n}"
end

--- ConsumerOffsetManager.encode() (compact): GET_ALL_CONSUMER_OFFSET.
function M.encode(t)
    t = t or M.table()
    local rows = {}
    for _, k in ipairs(sorted_keys(t)) do
        rows[#rows + 1] = quote(k) .. ":{" .. queue_map(t[k]) .. "}"
    end
    return '{"offsetTable":{' .. table.concat(rows, ",") .. "}}"
end

-- }}}

-- {{{ Persistence (main thread)

function M.path(conf)
    return conf.storePathRootDir .. "/config/consumerOffset.json"
end

--- Loads consumerOffset.json into the shared map (main thread, before
--- the workers).  Returns true, or nil, err.
function M.load(conf)
    local doc, err = configfile.read(M.path(conf))
    if err then
        return nil, err
    end
    map:clear()
    local n = 0
    for tg, queues in pairs(doc and doc.offsetTable or {}) do
        if type(queues) == "table" then
            local topic, group = tg:match("^(.-)@(.+)$")
            for q, off in pairs(queues) do
                local qid, o = int(q), int(off)
                if topic and qid and o then
                    M.commit(group, topic, qid, o)
                    n = n + 1
                end
            end
        end
    end
    return true, n
end

--- Writes consumerOffset.json when the table changed since the last write.
local save = configfile.saver(M.path, function() return M.encode_pretty() end,
                              function() return map:version() end)
M.persist = save.persist

function M.main_init(b)
    local ok, n = M.load(b.conf)
    if not ok then
        error("cannot load " .. M.path(b.conf) .. ": " .. tostring(n), 0)
    end
    save.mark()
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
        return { code = resp.QUERY_NOT_FOUND, ext = {},
                 remark = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first" }
    end }

    P[req.UPDATE_CONSUMER_OFFSET] = { header = M.HEADER_UPDATE, run = function(ctx, cmd, h)
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

    return P
end

-- }}}

return M
