-- Latency fault tolerance (MQFaultStrategy with sendLatencyFaultEnable).
--
-- A send that took at least latencyMax[i] ms marks its broker unavailable
-- for notAvailableDuration[i] ms (the largest i that matches); a send
-- that failed outright counts as 30000 ms ("isolation").  Selection
-- prefers available brokers and, when all are marked, picks one at least
-- among the better half of the marked ones.
--
-- State is a plain table the producer keeps and passes in:
--   faults[brokerName] = {latency=ms, until_ms=wall ms}
local queue_select = require("rmq.policy.queue_select")

local M = {}

M.latencyMax = { 50, 100, 550, 1000, 2000, 3000, 15000 }
M.notAvailableDuration = { 0, 0, 30000, 60000, 120000, 180000, 600000 }
M.ISOLATION_LATENCY = 30000

--- How long a broker is avoided after a send that took `latency` ms.
function M.not_available_for(latency, latencyMax, durations)
    latencyMax = latencyMax or M.latencyMax
    durations = durations or M.notAvailableDuration
    for i = #latencyMax, 1, -1 do
        if latency >= latencyMax[i] then
            return durations[i]
        end
    end
    return 0
end

--- Records a send's outcome.
-- facts: {faults=, brokerName=, latency=ms, isolation=bool, now=ms,
--         latencyMax=?, notAvailableDuration=?}
function M.update(facts)
    local latency = facts.isolation and M.ISOLATION_LATENCY or facts.latency
    local duration = M.not_available_for(latency, facts.latencyMax,
                                         facts.notAvailableDuration)
    facts.faults[facts.brokerName] = {
        latency = latency,
        until_ms = facts.now + duration,
    }
end

local function available(faults, name, now)
    local f = faults[name]
    return f == nil or now >= f.until_ms
end

M.available = available

-- The broker to try when every one is marked: sort by (available first,
-- lower latency, earlier recovery) and rotate within the better half.
local function pick_one_at_least(faults, now, counter)
    local items = {}
    for name, f in pairs(faults) do
        items[#items + 1] = { name = name, ok = now >= f.until_ms,
                              latency = f.latency, until_ms = f.until_ms }
    end
    if #items == 0 then
        return nil
    end
    table.sort(items, function(a, b)
        if a.ok ~= b.ok then
            return a.ok
        end
        if a.latency ~= b.latency then
            return a.latency < b.latency
        end
        if a.until_ms ~= b.until_ms then
            return a.until_ms < b.until_ms
        end
        return a.name < b.name
    end)
    local half = #items // 2
    if half <= 0 then
        return items[1].name
    end
    return items[counter % half + 1].name
end

--- select(facts) -> index, counter
-- facts as for rmq.policy.queue_select, plus faults= and now=.
function M.select(facts)
    local queues, n = facts.queues, #facts.queues
    if n == 0 then
        return nil, facts.counter
    end
    local faults, now = facts.faults or {}, facts.now
    local counter = facts.counter or 0
    for _ = 1, n do
        counter = counter + 1
        local i = counter % n + 1
        if available(faults, queues[i].brokerName, now) then
            return i, counter
        end
    end
    -- Every broker is marked: the least bad one still gets traffic, so
    -- the producer learns when it recovers.
    local best = pick_one_at_least(faults, now, counter)
    if best ~= nil then
        local on_best = {}
        for i, q in ipairs(queues) do
            if q.brokerName == best then
                on_best[#on_best + 1] = i
            end
        end
        if #on_best > 0 then
            counter = counter + 1
            return on_best[counter % #on_best + 1], counter
        end
        faults[best] = nil  -- no longer in the route: forget it
    end
    return queue_select.select({ queues = queues, counter = counter,
                                 lastBrokerName = facts.lastBrokerName })
end

return M
