-- Timer messages (RocketMQ 5's RIP-43): the broker's side of the timer
-- service in the store (src/store/timer.h, docs/timer.md).  C holds,
-- logs and delivers every timer; this module only opens the service on
-- the main thread of a master, drives it from a timer (each tick is one
-- C call doing a bounded amount of work) and wakes the held pulls of the
-- queues it wrote to.  The send rule is C's too (st:timer_hold, used by
-- send.lua's fallback; the C send path calls the same function).
local log = require("rmq.log")
local net = require("rmq.net")
local topics = require("rmq.broker.topics")

local M = {}

M.TOPIC = "rmq_sys_wheel_timer"   -- TimerMessageStore.TIMER_TOPIC
M.TICK = 50                       -- ms between ticks
M.BUDGET = 4096                   -- units of work per tick
M.ROUNDS = 8                      -- ticks in a row while work is left

local service       -- the open timer service (main thread)
local ticker

--- The open service (main thread), or nil: for stats and specs.
function M.service()
    return service
end

function M.main_init(b)
    -- A system topic, as the half topic (rmq_sys_ names: no client may
    -- create or delete it); it holds every pending timer's record.
    topics.ensure(M.TOPIC, 1)
    if b.conf.brokerRole == "SLAVE" then
        return   -- the master delivers; its deliveries replicate
    end
    local tm, err = b.store:timer_open()
    if tm == nil then
        error("cannot open the timer service: " .. tostring(err), 0)
    end
    service = tm
end

local function raise(wake)
    for key in wake:gmatch("([^\n]+)\n") do
        net.raise(key)
    end
end

function M.main_start(b)
    if service == nil then
        return
    end
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

function M.main_stop(b)
    if ticker then
        ticker:stop()
        ticker = nil
    end
    if service then
        service:close()   -- a last checkpoint, fsync'd
        service = nil
    end
end

return M
