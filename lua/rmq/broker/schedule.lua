-- Delayed delivery through SCHEDULE_TOPIC_XXXX (RocketMQ's
-- ScheduleMessageService and the delay branch of CommitLog.putMessage,
-- protocol.md 6.3).
--
-- Storing: schedule.redirect(conf, msg, level) turns a put (a table for
-- st:put whose properties already carry DELAY=level) into a put to
-- SCHEDULE_TOPIC_XXXX queue level-1, with REAL_TOPIC / REAL_QID added and
-- the delivery time as the consume queue's tag code, as the Java commit
-- log does for a message with DELAY > 0.  CONSUMER_SEND_MSG_BACK uses it;
-- a send path handles DELAY the same way (`if delay > 0 then
-- schedule.redirect(conf, msg, delay) end` before st:put, not for
-- batches or prepared transactions).
--
-- Delivering (main thread, masters only): every level's queue is walked
-- from its offset; each record whose time has come (store time + the
-- level's delay) is put again into REAL_TOPIC / REAL_QID with DELAY
-- removed and WAIT=false, everything else copied, and held pulls on that
-- queue are woken.  The first pass runs 1 s after start; a level with
-- nothing due is looked at again when its next record is due (at most
-- every 100 ms).  Progress per level is kept in
-- STORE/config/delayOffset.json ({"offsetTable":{1:off,...}}, fastjson's
-- format), written every flushDelayOffsetInterval and at shutdown, and
-- served to slaves by GET_ALL_DELAY_OFFSET (45).
--
-- A record that can never be delivered does not block its level: when
-- REAL_TOPIC / REAL_QID are missing or invalid (not a legal topic name,
-- the schedule topic itself, a topic the broker does not have, a queue
-- id that is not an integer or out of the topic's range), when the
-- record cannot be decoded, or when its re-put fails for good
-- (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED, or the put raises), it is
-- moved aside to its own dead-letter topic, rmq_sys_SCHEDULE_DLQ (queue
-- 0, created on demand; rmq_sys_ names are system topics no client may
-- create or delete by admin), as it was stored minus DELAY, plus
-- SCHEDULE_DLQ_REASON (why) and SCHEDULE_DLQ_LEVEL; it is logged (msgId
-- and reason) and counted (schedule.dead_letters(), in
-- GET_BROKER_RUNTIME_INFO as scheduleDeadLetters), and the level's offset
-- moves past it.  Transient failures (store not writable, disk full,
-- service not available, other store errors) keep the record: the level
-- is tried again after RETRY_PUT ms, as before.  A put that stored the
-- message (PUT_OK, or a flush/slave timeout, which still stored it)
-- counts as delivered.
local codes = require("rmq.codes")
local configfile = require("rmq.configfile")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local log = require("rmq.log")
local net = require("rmq.net")
local names = require("rmq.names")
local message = require("rmq.message")
local shared = require("rmq.shared")
local topics = require("rmq.broker.topics")

local M = {}

M.TOPIC = "SCHEDULE_TOPIC_XXXX"
M.FIRST_DELAY = 1000   -- ms after start of the first pass
M.TICK = 100           -- ms between passes (DELAY_FOR_A_WHILE)
M.RETRY_PUT = 10000    -- ms before retrying a level whose put failed
M.BATCH = 32           -- records read per level per pass
M.DLQ_TOPIC = "rmq_sys_SCHEDULE_DLQ"   -- records that can never be delivered

-- Put statuses: the message is stored; the put can never succeed.
local STORED = codes.put_stored
local PERMANENT = { MESSAGE_ILLEGAL = true, PROPERTIES_SIZE_EXCEEDED = true }

local UNIT = { s = 1000, m = 60000, h = 3600000, d = 86400000 }

--- The levels' delays in ms (messageDelayLevel, 1-based).
function M.levels(conf)
    local out = {}
    for n, u in tostring(conf.messageDelayLevel or ""):gmatch("(%d+)([smhd])") do
        out[#out + 1] = tonumber(n) * UNIT[u]
    end
    return out
end

local offsets = shared.map("broker.delayOffset")  -- level -> queue offset
local stats = shared.map("broker.schedule")       -- counters (this run)

--- How many records were moved to DLQ_TOPIC since the broker started.
function M.dead_letters()
    return math.tointeger(tonumber(stats:get("deadLetters") or "0")) or 0
end

--- Redirects a put to the schedule topic (msg is changed and returned).
-- msg.properties must already hold DELAY=level (it stays, as in Java).
function M.redirect(conf, msg, level)
    local levels = M.levels(conf)
    if level > #levels then
        level = #levels
    end
    msg.properties = message.edit_properties(msg.properties or "", {
        "DELAY", tostring(level), "REAL_TOPIC", msg.topic, "REAL_QID", tostring(msg.queueId or 0) })
    msg.topic = M.TOPIC
    msg.queueId = level - 1
    msg.tags = nil
    msg.tagsCode = core.now_ms() + levels[level]
    return msg
end

-- {{{ delayOffset.json

local function table_of()
    local t = {}
    for k, v in pairs(offsets:all()) do
        t[tonumber(k)] = math.tointeger(tonumber(v))
    end
    return t
end

--- DelayOffsetSerializeWrapper as fastjson writes it.
function M.encode(pretty)
    return fastjson.encode({ offsetTable = fastjson.map(table_of()) }, pretty)
end

--- Sets a level's delivery offset (a slave taking its master's,
--- rmq.broker.slave_sync); written to delayOffset.json by the persister.
function M.set_offset(level, off)
    offsets:set(tostring(level), tostring(off))
end

-- delayOffset.json (rmq.configfile.table: the file's sequence).
local file = configfile.table({
    store_file = "delayOffset.json",
    reset = function() offsets:clear() end,
    decode = function(doc)
        local n = 0
        for k, v in pairs(type(doc.offsetTable) == "table" and doc.offsetTable or {}) do
            local level, off = fastjson.int(k), fastjson.int(v)
            if level and off then
                offsets:set(tostring(level), tostring(off))
                n = n + 1
            end
        end
        return n
    end,
    encode = function() return M.encode(true) end,
    version = function() return offsets:version() end,
})
M.path = file.path

--- Loads delayOffset.json (main thread).  Returns true, or nil, err.
M.load = file.load
M.persist = file.persist

-- }}}

-- {{{ Delivery (main thread)

-- A REAL_QID: a queue id, strictly (digits only, int32).
local function queue_id(s)
    if s == nil or not s:match("^%d+$") or #s > 10 then
        return nil
    end
    local q = math.tointeger(tonumber(s))
    if q == nil or q > 0x7FFFFFFF then
        return nil
    end
    return q
end
M.queue_id = queue_id   -- transactions read REAL_QID too

-- The record as it is delivered (ScheduleMessageService.messageTimeup),
-- or nil and why it can never be.
local function timeup(rec)
    local topic = rec.properties.REAL_TOPIC
    local qid_s = rec.properties.REAL_QID
    if topic == nil then
        return nil, "no REAL_TOPIC"
    end
    local bad = names.topic(topic)
    if bad then
        return nil, ("REAL_TOPIC %s: %s"):format(names.show(topic), bad)
    end
    if topic == M.TOPIC then
        return nil, "REAL_TOPIC is " .. M.TOPIC
    end
    local qid = queue_id(qid_s)
    if qid == nil then
        return nil, qid_s == nil and "no REAL_QID" or ("REAL_QID %s is not a queue id"):format(names.show(qid_s))
    end
    local cfg = topics.get(topic)
    if cfg == nil then
        return nil, ("topic %s does not exist"):format(topic)
    end
    local nq = math.max(cfg.readQueueNums or 0, cfg.writeQueueNums or 0)
    if qid >= nq then
        return nil, ("REAL_QID %d is out of range: topic %s has %d queues"):format(qid, topic, nq)
    end
    return {
        topic = topic, queueId = qid, body = rec.body, flag = rec.flag,
        properties = message.edit_properties(rec.propertiesString, { "DELAY", false, "WAIT", "false" }),
        tags = rec.properties.TAGS or "",
        sysFlag = rec.sysFlag, bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost,
        storeHost = rec.storeHost, reconsumeTimes = rec.reconsumeTimes, wait = false,
    }
end

-- A property value: no separators or other control characters.
local function prop_text(s)
    return (tostring(s):gsub("%c", "?"))
end

-- st:put that never raises: status, reason.
local function put(st, msg)
    local ok, status, reason = pcall(st.put, st, msg)
    if not ok then
        return "PUT_RAISED", status
    end
    return status, reason
end

-- Moves a record that can never be delivered to DLQ_TOPIC.  rec is the
-- decoded record, or nil with raw its bytes.  Returns true when the level
-- may move past it (stored aside, or dropped because even that can never
-- work), false to try again later.
local function dead_letter(st, level, rec, raw, reason, id)
    local cfg = topics.ensure(M.DLQ_TOPIC, 1, topics.PERM_READ | topics.PERM_WRITE)
    if cfg == nil then
        log.error("delayed message %s (level %d) cannot be delivered (%s) and %s cannot be created",
                  id, level, reason, M.DLQ_TOPIC)
        return false
    end
    local extra = { "SCHEDULE_DLQ_REASON", prop_text(reason), "SCHEDULE_DLQ_LEVEL", tostring(level),
                    "WAIT", "false" }
    local msg
    if rec then
        msg = {
            topic = M.DLQ_TOPIC, queueId = 0, body = rec.body, flag = rec.flag,
            properties = message.edit_properties(rec.propertiesString, { "DELAY", false, table.unpack(extra) }),
            tags = rec.properties.TAGS or "",
            sysFlag = rec.sysFlag, bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost,
            storeHost = rec.storeHost, reconsumeTimes = rec.reconsumeTimes, wait = false,
        }
    else
        msg = { topic = M.DLQ_TOPIC, queueId = 0, body = raw or "", properties = message.edit_properties("", extra),
                tags = "", wait = false }
    end
    local pst, why = put(st, msg)
    if PERMANENT[pst] or pst == "PUT_RAISED" then
        -- As it was it cannot be stored either: keep the bytes, drop the
        -- properties (too many, or what made it illegal).
        msg.properties = message.edit_properties("", extra)
        msg.sysFlag = 0
        pst, why = put(st, msg)
    end
    if STORED[pst] then
        stats:set("deadLetters", tostring(M.dead_letters() + 1))
        log.error("delayed message %s (level %d) can never be delivered: %s; moved to %s",
                  id, level, reason, M.DLQ_TOPIC)
        net.raise(M.DLQ_TOPIC .. "@0")
        return true
    end
    if PERMANENT[pst] or pst == "PUT_RAISED" then
        stats:set("deadLetters", tostring(M.dead_letters() + 1))
        log.error("delayed message %s (level %d) can never be delivered: %s; not even to %s (%s %s): dropped",
                  id, level, reason, M.DLQ_TOPIC, tostring(pst), tostring(why))
        return true
    end
    log.error("delayed message %s (level %d) can never be delivered: %s; moving it to %s failed: %s %s",
              id, level, reason, M.DLQ_TOPIC, tostring(pst), tostring(why))
    return false
end

--- One pass over one level: delivers what is due.  Returns the time
--- (monotonic-free: wall ms) at which to look again.
function M.deliver_level(st, level, delay, now)
    local off = tonumber(offsets:get(tostring(level)) or "0")
    local status, recs, next_off = st:get(M.TOPIC, level - 1, off, M.BATCH)
    if status ~= "FOUND" then
        if recs then
            recs:release()
        end
        if status == "OFFSET_TOO_SMALL" or status == "OFFSET_OVERFLOW_BADLY"
            or status == "MESSAGE_WAS_REMOVING" or status == "OFFSET_FOUND_NULL" then
            if next_off ~= off then
                offsets:set(tostring(level), tostring(next_off))
                return now
            end
        end
        return now + M.TICK
    end
    local again = now + M.TICK
    local n = #recs
    local expect = off   -- the queue offset of the next record
    for i = 1, n do
        local raw = recs:get(i)
        local ok, rec = pcall(message.decode_record, raw)
        if not ok or rec == nil then
            -- Nothing in it can be trusted, its time included.
            local id = ("%s@%d:%d"):format(M.TOPIC, level - 1, expect)
            if not dead_letter(st, level, nil, raw, "the record cannot be decoded", id) then
                recs:release()
                return now + M.RETRY_PUT
            end
            expect = expect + 1
        else
            local due = rec.storeTimestamp + delay
            if due > now then
                again = math.min(due, now + delay)
                break
            end
            local id = rec.offsetMsgId
            local msg, why = timeup(rec)
            local pst, reason
            if msg then
                pst, reason = put(st, msg)
                if not STORED[pst] and (PERMANENT[pst] or pst == "PUT_RAISED") then
                    why = ("put to %s@%d: %s %s"):format(msg.topic, msg.queueId, tostring(pst),
                                                           tostring(reason))
                    msg = nil
                end
            end
            if msg then
                if not STORED[pst] then
                    log.error("delayed message %s (level %d) not delivered to %s: %s %s",
                              id, level, msg.topic, tostring(pst), tostring(reason))
                    recs:release()
                    return now + M.RETRY_PUT
                end
                net.raise(msg.topic .. "@" .. msg.queueId)
            elseif not dead_letter(st, level, rec, nil, why, id) then
                recs:release()
                return now + M.RETRY_PUT
            end
            expect = rec.queueOffset + 1
        end
        offsets:set(tostring(level), tostring(expect))
        if i == n then
            again = now  -- maybe more right behind
        end
    end
    recs:release()
    return again
end

local timers = {}

function M.main_init(b)
    local ok, err = M.load(b.conf)
    if not ok then
        error("cannot load " .. M.path(b.conf) .. ": " .. tostring(err), 0)
    end
end

function M.main_start(b)
    local conf = b.conf
    local every = conf.flushDelayOffsetInterval or 10000
    timers[#timers + 1] = net.timer(every, every, function()
        local ok, err = M.persist(conf)
        if not ok then
            log.error("cannot persist delay offsets: %s", tostring(err))
        end
    end)
    if conf.brokerRole == "SLAVE" or b.role_services_stopped then
        return  -- a slave's schedule queues are the master's copy (replica_role starts it on promotion)
    end
    local levels = M.levels(conf)
    for level = 1, #levels do
        if offsets:get(tostring(level)) == nil then
            offsets:set(tostring(level), "0")
        end
    end
    local next_at = {}
    local busy = false
    timers[#timers + 1] = net.timer(M.FIRST_DELAY, M.TICK, function()
        if busy then
            return
        end
        busy = true
        local ok, err = pcall(function()
            for level, delay in ipairs(levels) do
                local now = core.now_ms()
                -- A few rounds per tick when a level has a backlog due.
                local rounds = 0
                while (next_at[level] or 0) <= now and rounds < 8 do
                    next_at[level] = M.deliver_level(b.store, level, delay, now)
                    rounds = rounds + 1
                    now = core.now_ms()
                end
            end
        end)
        busy = false
        if not ok then
            log.error("delayed delivery: %s", tostring(err))
        end
    end)
end

function M.main_stop(b)
    for _, t in ipairs(timers) do
        t:stop()
    end
    timers = {}
    local ok, err = M.persist(b.conf)
    if not ok then
        log.error("cannot persist delay offsets: %s", tostring(err))
    end
end

-- }}}

function M.processors(b)
    return {
        [codes.request.GET_ALL_DELAY_OFFSET] = function()
            return { code = 0, body = M.encode(false) }
        end,
    }
end

return M
