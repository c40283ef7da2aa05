-- The control-plane policies are pure functions: checked here directly.
local queue_select = require("rmq.policy.queue_select")
local latency_fault = require("rmq.policy.latency_fault")
local allocate = require("rmq.policy.allocate")
local slave_read = require("rmq.policy.slave_read")
local policy = require("rmq.policy")

local function queues(spec)
    -- spec: {{"broker-a", 4}, {"broker-b", 4}} -> 8 queues in route order
    local out = {}
    for _, b in ipairs(spec) do
        for q = 0, b[2] - 1 do
            out[#out + 1] = { brokerName = b[1], queueId = q }
        end
    end
    return out
end

describe("queue selection (default)", function()
    local qs = queues({ { "broker-a", 4 }, { "broker-b", 4 } })

    it("rotates through every queue", function()
        local seen, counter = {}, 0
        for _ = 1, 8 do
            local i
            i, counter = queue_select.select({ queues = qs, counter = counter })
            seen[i] = (seen[i] or 0) + 1
        end
        for i = 1, 8 do
            assert.equal(1, seen[i])
        end
    end)

    it("avoids the broker that just failed on a retry", function()
        local counter = 0
        for _ = 1, 20 do
            local i
            i, counter = queue_select.select({ queues = qs, counter = counter,
                                               lastBrokerName = "broker-a" })
            assert.equal("broker-b", qs[i].brokerName)
        end
    end)

    it("falls back to any queue when the failed broker is the only one", function()
        local only_a = queues({ { "broker-a", 2 } })
        local i = queue_select.select({ queues = only_a, counter = 5, lastBrokerName = "broker-a" })
        assert.equal("broker-a", only_a[i].brokerName)
    end)

    it("returns nil without queues", function()
        assert.is_nil((queue_select.select({ queues = {}, counter = 0 })))
    end)
end)

describe("latency fault tolerance", function()
    local qs = queues({ { "broker-a", 4 }, { "broker-b", 4 } })

    it("maps latency to the not-available duration of RocketMQ's table", function()
        assert.equal(0, latency_fault.not_available_for(49))
        assert.equal(0, latency_fault.not_available_for(100))
        assert.equal(30000, latency_fault.not_available_for(550))
        assert.equal(60000, latency_fault.not_available_for(1000))
        assert.equal(180000, latency_fault.not_available_for(3000))
        assert.equal(600000, latency_fault.not_available_for(15000))
        assert.equal(600000, latency_fault.not_available_for(99999))
    end)

    it("marks a slow broker, avoids it, and uses it again once it recovers", function()
        local faults, now = {}, 1000000
        latency_fault.update({ faults = faults, brokerName = "broker-a", latency = 1200, now = now })
        assert.is_false(latency_fault.available(faults, "broker-a", now))
        local counter = 0
        for _ = 1, 16 do
            local i
            i, counter = latency_fault.select({ queues = qs, counter = counter, faults = faults, now = now })
            assert.equal("broker-b", qs[i].brokerName)
        end
        -- 60 s later the mark has expired.
        local later = now + 60000
        local brokers = {}
        for _ = 1, 8 do
            local i
            i, counter = latency_fault.select({ queues = qs, counter = counter, faults = faults, now = later })
            brokers[qs[i].brokerName] = true
        end
        assert.is_true(brokers["broker-a"] and brokers["broker-b"])
    end)

    it("treats a failed send as 30 s of latency (isolation)", function()
        local faults = {}
        latency_fault.update({ faults = faults, brokerName = "broker-b", latency = 3, isolation = true, now = 0 })
        assert.equal(30000, faults["broker-b"].latency)
        -- 30 s is past latencyMax[7] (15 s): avoided for 600 s, as in Java.
        assert.equal(600000, faults["broker-b"].until_ms)
    end)

    it("picks one at least when every broker is marked: the least slow", function()
        local faults, now = {}, 0
        latency_fault.update({ faults = faults, brokerName = "broker-a", latency = 16000, now = now })
        latency_fault.update({ faults = faults, brokerName = "broker-b", latency = 700, now = now })
        local counter = 0
        for _ = 1, 10 do
            local i
            i, counter = latency_fault.select({ queues = qs, counter = counter, faults = faults, now = now })
            assert.equal("broker-b", qs[i].brokerName)
        end
    end)
end)

describe("rebalance allocation", function()
    local mqs = queues({ { "broker-a", 4 }, { "broker-b", 4 } })
    local cids = { "c1", "c2", "c3" }

    local function ids(list)
        local out = {}
        for _, q in ipairs(list) do
            out[#out + 1] = q.brokerName:sub(-1) .. q.queueId
        end
        return table.concat(out, " ")
    end

    it("averagely: 3 consumers over 8 queues get 3, 3, 2 contiguous queues", function()
        assert.equal("a0 a1 a2", ids(allocate.averagely({ queues = mqs, consumers = cids, me = "c1" })))
        assert.equal("a3 b0 b1", ids(allocate.averagely({ queues = mqs, consumers = cids, me = "c2" })))
        assert.equal("b2 b3", ids(allocate.averagely({ queues = mqs, consumers = cids, me = "c3" })))
    end)

    it("averagely: every queue is taken exactly once", function()
        for nc = 1, 10 do
            local cs = {}
            for i = 1, nc do cs[i] = ("c%02d"):format(i) end
            local taken = {}
            for _, me in ipairs(cs) do
                for _, q in ipairs(allocate.averagely({ queues = mqs, consumers = cs, me = me })) do
                    local k = q.brokerName .. q.queueId
                    assert.is_nil(taken[k])
                    taken[k] = me
                end
            end
            local n = 0
            for _ in pairs(taken) do n = n + 1 end
            assert.equal(8, n)
        end
    end)

    it("circle: deals the queues round-robin", function()
        assert.equal("a0 a3 b2", ids(allocate.circle({ queues = mqs, consumers = cids, me = "c1" })))
        assert.equal("a1 b0 b3", ids(allocate.circle({ queues = mqs, consumers = cids, me = "c2" })))
        assert.equal("a2 b1", ids(allocate.circle({ queues = mqs, consumers = cids, me = "c3" })))
    end)

    it("gives nothing to a consumer that is not in the group", function()
        assert.same({}, allocate.averagely({ queues = mqs, consumers = cids, me = "stranger" }))
    end)
end)

describe("slave read suggestion", function()
    local base = {
        slaveReadEnable = true, physicalMemory = 1000, accessMessageInMemoryMaxRatio = 40,
        whichBrokerWhenConsumeSlowly = 1, groupBrokerId = 0,
    }
    local function with(t)
        local f = {}
        for k, v in pairs(base) do f[k] = v end
        for k, v in pairs(t) do f[k] = v end
        return f
    end

    it("suggests the master when slave read is off", function()
        assert.equal(0, slave_read.suggest(with({ slaveReadEnable = false, maxPhyOffset = 10000, lastPhyOffset = 0 })))
    end)

    it("suggests whichBrokerWhenConsumeSlowly when the backlog exceeds the in-memory share", function()
        assert.equal(1, slave_read.suggest(with({ maxPhyOffset = 1401, lastPhyOffset = 1000 })))
    end)

    it("suggests the group's broker when the consumer keeps up", function()
        assert.equal(0, slave_read.suggest(with({ maxPhyOffset = 1400, lastPhyOffset = 1000 })))
    end)
end)

describe("slave-read policy variants", function()
    local always = require("rmq.policy.slave_read_always")
    local lag = require("rmq.policy.slave_read_lag")
    local function facts(t)
        local f = { slaveReadEnable = true, physicalMemory = 1000, accessMessageInMemoryMaxRatio = 40,
                    whichBrokerWhenConsumeSlowly = 2, groupBrokerId = 0, maxPhyOffset = 1000, lastPhyOffset = 1000 }
        for k, v in pairs(t) do
            f[k] = v
        end
        return f
    end

    it("always: the slave whatever the backlog, the master without slave read", function()
        assert.equal(2, always.suggest(facts({})))
        assert.equal(2, always.suggest(facts({ lastPhyOffset = 0 })))
        assert.equal(0, always.suggest(facts({ slaveReadEnable = false })))
    end)

    it("lag: 4.9.8's rule, but a slow consumer stays while the slave lags", function()
        assert.equal(0, lag.suggest(facts({})))
        assert.equal(2, lag.suggest(facts({ lastPhyOffset = 0 })))
        assert.equal(2, lag.suggest(facts({ lastPhyOffset = 0, slaveLagBytes = lag.MAX_LAG_BYTES })))
        assert.equal(0, lag.suggest(facts({ lastPhyOffset = 0, slaveLagBytes = lag.MAX_LAG_BYTES + 1 })))
        -- On the slave itself the lag says nothing: stay.
        assert.equal(2, lag.suggest(facts({ lastPhyOffset = 0, slave = true, slaveLagBytes = lag.MAX_LAG_BYTES + 1 })))
    end)
end)

describe("policy resolution", function()
    it("takes a function, a module name, or reports what is wrong", function()
        local f = function() end
        assert.equal(f, policy.resolve(f, "select"))
        assert.equal(queue_select.select, policy.resolve("rmq.policy.queue_select", "select"))
        assert.equal(queue_select.select, policy.resolve(nil, "select", "rmq.policy.queue_select"))
        local fn, err = policy.resolve("no.such.module", "select")
        assert.is_nil(fn)
        assert.matches("cannot load policy module 'no.such.module'", err)
        fn, err = policy.resolve("rmq.policy.allocate", "select")
        assert.is_nil(fn)
        assert.matches("has no function 'select'", err)
    end)
end)

describe("admission (flow control, 4.9.8's rule)", function()
    local admission = require("rmq.policy.admission")

    local function facts(over)
        local f = { code = 310, kind = "send", topic = "T", putInLockMillis = 0,
                    osPageCacheBusyTimeOutMills = 1000, pageCacheBusy = false, waitMillis = 3,
                    waitLimitMillis = 200, waitOver = false, brokerFastFailureEnable = true,
                    inFlight = 7, connInFlight = 1, worker = 0, peer = "127.0.0.1:1" }
        for k, v in pairs(over or {}) do
            f[k] = v
        end
        return f
    end

    it("refuses a send while the store's put is slow, whatever fast failure says", function()
        for _, ff in ipairs({ true, false }) do
            local v, remark = admission.admit(facts({ putInLockMillis = 1500, pageCacheBusy = true,
                                                      brokerFastFailureEnable = ff }))
            assert.equal("busy", v)
            assert.equal("[REJECTREQUEST]system busy, start flow control for a while", remark)
        end
    end)

    it("refuses a request that waited its limit, with the wait and the worker's in-flight count", function()
        local v, remark = admission.admit(facts({ kind = "pull", code = 11, waitMillis = 5012,
                                                  waitLimitMillis = 5000, waitOver = true }))
        assert.equal("busy", v)
        assert.equal("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
            .. "period in queue: 5012ms, size of queue: 7", remark)
        -- Fast failure off: served.
        assert.equal("admit", (admission.admit(facts({ waitMillis = 900, waitOver = true,
                                                      brokerFastFailureEnable = false }))))
    end)

    it("admits what crossed no limit", function()
        assert.equal("admit", (admission.admit(facts())))
    end)
end)
