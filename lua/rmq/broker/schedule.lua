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
local codes = require("rmq.codes")
local configfile = require("rmq.configfile")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local log = require("rmq.log")
local net = require("rmq.net")
local record = require("rmq.broker.record")
local shared = require("rmq.shared")

local M = {}

M.TOPIC = "SCHEDULE_TOPIC_XXXX"
M.FIRST_DELAY = 1000   -- ms after start of the first pass
M.TICK = 100           -- ms between passes (DELAY_FOR_A_WHILE)
M.RETRY_PUT = 10000    -- ms before retrying a level whose put failed
M.BATCH = 32           -- records read per level per pass

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

--- Redirects a put to the schedule topic (msg is changed and returned).
-- msg.properties must already hold DELAY=level (it stays, as in Java).
function M.redirect(conf, msg, level)
    local levels = M.levels(conf)
    if level > #levels then
        level = #levels
    end
    local props = record.props(msg.properties)
    record.set(props, "DELAY", tostring(level))
    record.set(props, "REAL_TOPIC", msg.topic)
    record.set(props, "REAL_QID", tostring(msg.queueId or 0))
    msg.properties = record.encode_props(props)
    msg.topic = M.TOPIC
    msg.queueId = level - 1
    msg.tags = nil
    msg.tagsCode = core.now_ms() + levels[level]
    return msg
end

-- {{{ delayOffset.json

function M.path(conf)
    return conf.storePathRootDir .. "/config/delayOffset.json"
end

local function table_of()
    local t = {}
    for k, v in pairs(offsets:all()) do
        t[tonumber(k)] = math.tointeger(tonumber(v))
    end
    return t
end

local function entries(t)
    local ks = {}
    for k in pairs(t) do
        ks[#ks + 1] = k
    end
    table.sort(ks)
    local parts = {}
    for i, k in ipairs(ks) do
        parts[i] = ("%d:%d"):format(k, t[k])
    end
    return table.concat(parts, ",")
end

--- DelayOffsetSerializeWrapper as fastjson writes it.
function M.encode(pretty)
    local t = table_of()
    if pretty then
        if next(t) == nil then
            return '{\n\t"offsetTable":{}\n}'
        end
        return '{\n\t"offsetTable":{' .. entries(t) .. "\n\t}\n}"
    end
    return '{"offsetTable":{' .. entries(t) .. "}}"
end

function M.load(conf)
    local doc, err = configfile.read(M.path(conf))
    if err then
        return nil, err
    end
    offsets:clear()
    for k, v in pairs(doc and doc.offsetTable or {}) do
        local level, off = fastjson.int(k), fastjson.int(v)
        if level and off then
            offsets:set(tostring(level), tostring(off))
        end
    end
    return true
end

local save = configfile.saver(M.path, function() return M.encode(true) end,
                              function() return offsets:version() end)
M.persist = save.persist

-- }}}

-- {{{ Delivery (main thread)

-- The record as it is delivered (ScheduleMessageService.messageTimeup).
local function timeup(rec)
    local props = record.props(rec.properties)
    local topic = record.get(props, "REAL_TOPIC")
    local qid = tonumber(record.get(props, "REAL_QID") or "")
    if topic == nil or qid == nil then
        return nil
    end
    record.del(props, "DELAY")
    record.set(props, "WAIT", "false")
    return {
        topic = topic, queueId = math.tointeger(qid), body = rec.body, flag = rec.flag,
        properties = record.encode_props(props), tags = record.get(props, "TAGS") or "",
        sysFlag = rec.sysFlag, bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost,
        storeHost = rec.storeHost, reconsumeTimes = rec.reconsumeTimes, wait = false,
    }
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
    for i = 1, n do
        local rec = record.decode(recs:get(i))
        if rec == nil then
            break
        end
        local due = rec.storeTimestamp + delay
        if due > now then
            again = math.min(due, now + delay)
            break
        end
        local msg = timeup(rec)
        if msg then
            local pst, reason = st:put(msg)
            if pst ~= "PUT_OK" then
                log.error("delayed message %s (level %d) not delivered to %s: %s %s",
                          record.offset_msg_id(rec), level, msg.topic, tostring(pst), tostring(reason))
                recs:release()
                return now + M.RETRY_PUT
            end
            net.raise(msg.topic .. "@" .. msg.queueId)
        else
            log.warn("delayed message %s (level %d) has no REAL_TOPIC/REAL_QID: dropped",
                     record.offset_msg_id(rec), level)
        end
        offsets:set(tostring(level), tostring(rec.queueOffset + 1))
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
    save.mark()
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
    if conf.brokerRole == "SLAVE" then
        return  -- a slave's schedule queues are the master's copy
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
