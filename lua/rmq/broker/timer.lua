-- Timer messages (RocketMQ 5's RIP-43): the broker's side of the timer
-- service in the store (src/store/timer.h, docs/timer.md).  C holds,
-- logs and delivers every timer; this module only opens the service on
-- the main thread of a master, drives it from a timer (each tick is one
-- C call doing a bounded amount of work) and wakes the held pulls of the
-- queues it wrote to.  The send rule is C's too (st:timer_hold, used by
-- send.lua's fallback; the C send path calls the same function).
local codes = require("rmq.codes")
local header = require("rmq.header")
local log = require("rmq.log")
local message = require("rmq.message")
local net = require("rmq.net")
local store = require("rmq.store")
local topics = require("rmq.broker.topics")

local R = codes.response

local M = {}

M.TOPIC = "rmq_sys_wheel_timer"   -- TimerMessageStore.TIMER_TOPIC
M.TICK = 50                       -- ms between ticks
M.BUDGET = 4096                   -- units of work per tick
M.ROUNDS = 4                      -- ticks in a row while work is left (main thread: ~75 ms at most)

local service       -- the open timer service (main thread)
local ticker

--- The open service (main thread), or nil: for stats and specs.
function M.service()
    return service
end

local function raise(wake)
    for key in wake:gmatch("([^\n]+)\n") do
        net.raise(key)
    end
end

-- The ticker of the open service.
local function start_ticker()
    local failing = false
    ticker = net.timer(M.TICK, M.TICK, function()
        for _ = 1, M.ROUNDS do
            local ok, state, wake = pcall(service.tick, service, M.BUDGET)
            if not ok then
                log.error("timer service: %s", tostring(state))
                return
            end
            if #wake > 0 then
                raise(wake)
            end
            if state == -1 then
                if not failing then
                    log.warn("timer service: a step failed; retrying every %d ms", M.TICK)
                end
                failing = true
                return
            end
            failing = false
            if state == 0 then
                return
            end
        end
    end)
end

local started = false   -- main_start ran (the broker serves)

--- Opens the service (main thread): at start on a master, and when a
--- slave becomes the master at run time (rmq.broker.replica_role).  A
--- store whose timer files were discarded rebuilds from its commit log
--- (the timer topic's queue; deliveries already made are found).
--- Returns true, or nil and a message.
function M.start_service(b)
    if service == nil then
        local tm, err = b.store:timer_open()
        if tm == nil then
            return nil, "cannot open the timer service: " .. tostring(err)
        end
        service = tm
    end
    if started and ticker == nil then
        start_ticker()
    end
    return true
end

--- Stops delivering (main thread): a master that is no longer one.
--- discard: also remove the timer files (a demoted master's commit log
--- becomes the new master's copy; the timers are the new master's).
function M.stop_service(b, discard)
    if ticker then
        ticker:stop()
        ticker = nil
    end
    if service then
        service:close()   -- a last checkpoint, fsync'd
        service = nil
    end
    if discard then
        local ok, err = b.store:timer_discard()
        if not ok then
            return nil, err
        end
    end
    return true
end

function M.main_init(b)
    -- The timer topic needs no topic config: its records are the store's
    -- business (a broker of 4.9.8's files registers and answers the same
    -- tables as before).
    started = false
    if b.conf.brokerRole == "SLAVE" then
        return   -- the master delivers; its deliveries replicate
    end
    local ok, err = M.start_service(b)
    if not ok then
        error(err, 0)
    end
end

function M.main_start()
    started = true
    if service ~= nil then
        start_ticker()
    end
end

--- The recall handle of a held message (nil without UNIQ_KEY, or for a
--- retry topic, as 5.x's attachRecallHandle).
function M.recall_handle(conf, topic, bucket, props)
    local uniq = props:match("UNIQ_KEY\1([^\2]*)")
    if uniq == nil or uniq == "" or topic:sub(1, 7) == "%RETRY%" then
        return nil
    end
    return (store.timer_recall_handle(topic, conf.brokerName, bucket, uniq))
end

-- {{{ RECALL_MESSAGE (5.x's RecallMessageProcessor)

M.HEADER_RECALL = header.compile({
    { "producerGroup", "string", false },
    { "topic", "string", true },
    { "recallHandle", "string", true },
})

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local B64_VAL = {}
for i = 1, #B64 do
    B64_VAL[B64:byte(i)] = i - 1
end

-- Java's Base64.getUrlDecoder(): the URL alphabet, padding optional; nil
-- when it is not base64.
local function b64url_decode(s)
    s = s:gsub("=+$", "")
    if #s % 4 == 1 or #s > 4096 then
        return nil
    end
    local out, acc, bits = {}, 0, 0
    for i = 1, #s do
        local v = B64_VAL[s:byte(i)]
        if v == nil then
            return nil
        end
        acc = (acc << 6) | v
        bits = bits + 6
        if bits >= 8 then
            bits = bits - 8
            out[#out + 1] = string.char((acc >> bits) & 0xFF)
        end
    end
    return table.concat(out)
end

local function refuse(code, remark)
    return { code = code, remark = remark }
end

function M.processors(b)
    local conf, st = b.conf, b.store
    return {
        [codes.request.RECALL_MESSAGE] = { header = M.HEADER_RECALL, run = function(ctx, _, h)
            if not conf.recallMessageEnable then
                return refuse(R.NO_PERMISSION, "recall failed, operation is forbidden")
            end
            if (st:role()) == "SLAVE" then   -- (the role at run time)
                return refuse(R.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available")
            end
            if topics.get(h.topic) == nil then
                return refuse(R.TOPIC_NOT_EXIST, ("recall failed, the topic[%s] not exist"):format(h.topic))
            end
            local raw = b64url_decode(h.recallHandle)
            local items = {}
            for item in (raw or ""):gmatch("[^ ]+") do
                items[#items + 1] = item
            end
            if items[1] ~= "v1" or #items < 5 then
                return refuse(R.ILLEGAL_OPERATION, "recall handle is invalid")
            end
            local topic, broker, ts_s, uniq = items[2], items[3], items[4], items[5]
            if topic ~= h.topic then
                return refuse(R.ILLEGAL_OPERATION, "recall failed, topic not match")
            end
            if broker ~= conf.brokerName then
                return refuse(R.ILLEGAL_OPERATION, "recall failed, broker service not available")
            end
            local ts = ts_s:match("^%-?%d+$") and math.tointeger(tonumber(ts_s)) or -1
            local left = ts - store.timer_now()
            if left <= 0 or left >= conf.timerMaxDelaySec * 1000 then
                return refuse(R.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
            end
            -- The recall record: held in the same bucket as the message
            -- (the send rule puts it there); the wheel skips the message
            -- of this topic and UNIQ_KEY when it meets it.
            local props = message.edit_properties("", {
                "TIMER_DEL_UNIQKEY", topic .. "+" .. uniq, "UNIQ_KEY", uniq, "TIMER_DELIVER_MS", ts_s,
                "TAGS", "_RECALL_TAG_", "PGROUP", h.producerGroup or "", "WAIT", "false",
            })
            local held, bucket, why = st:timer_hold(props, topic, 0)
            if not held then
                return refuse(R.ILLEGAL_OPERATION, "recall failed, " .. tostring(why or "timestamp invalid"))
            end
            local status = st:put({ topic = M.TOPIC, queueId = 0, body = "0", properties = held,
                                    tagsCode = bucket, bornHost = ctx.peer, wait = false })
            if status ~= "PUT_OK" and status ~= "FLUSH_DISK_TIMEOUT" and status ~= "FLUSH_SLAVE_TIMEOUT"
                and status ~= "SLAVE_NOT_AVAILABLE" then
                return refuse(R.SYSTEM_ERROR, "recall failed, execute error")
            end
            return { code = R.SUCCESS, ext = { msgId = uniq } }
        end },
    }
end

-- }}}

function M.main_stop(b)
    M.stop_service(b, false)
    started = false
end

return M
