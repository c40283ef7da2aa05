-- rmq's producer against spec brokers that misbehave on purpose.
local net = require("rmq.net")
local core = require("rmq.core")
local producer = require("rmq.client.producer")
local fake = require("support.fake_broker")

local TOPIC = "FxProducerTopic"

describe("producer", function()
    local cluster

    before_each(function()
        cluster = fake.cluster({ topic = TOPIC, brokers = { ["broker-a"] = {}, ["broker-b"] = {} } })
    end)

    after_each(function()
        cluster:stop()
    end)

    local function new(opts)
        opts = opts or {}
        opts.namesrvAddr = cluster.namesrv_addr
        opts.producerGroup = "FxGroup"
        return producer.new(opts)
    end

    it("sends with the SEND_MESSAGE_V2 header a RocketMQ broker expects", function()
        local p = new()
        local r = assert(p:send({ topic = TOPIC, body = "hello", tags = "TagA", keys = "k1 k2" }))
        assert.equal("SEND_OK", r.status)
        assert.equal(32, #r.msgId)
        assert.equal(32, #r.offsetMsgId)
        assert.equal("DefaultRegion", r.regionId)
        local st = fake.stats(cluster.brokers[r.queue.brokerName].addr)
        assert.equal("FxGroup", st.last_a)
        assert.equal(TOPIC, st.last_b)
        assert.equal("TBW102", st.last_c)
        assert.equal("4", st.last_d)
        assert.equal(tostring(r.queue.queueId), st.last_e)
        assert.equal("0", st.last_f)
        assert.equal(r.queue.brokerName, st.last_n)
        assert.matches("TAGS\1TagA", st.last_i, 1, true)
        assert.matches("KEYS\1k1 k2", st.last_i, 1, true)
        assert.matches("UNIQ_KEY\1" .. r.msgId, st.last_i, 1, true)
    end)

    it("rotates through every queue of every broker", function()
        local p = new()
        local seen = {}
        for _ = 1, 8 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            local k = r.queue.brokerName .. "/" .. r.queue.queueId
            assert.is_nil(seen[k])
            seen[k] = true
        end
    end)

    it("retries on another broker and avoids the one that failed", function()
        cluster:set("broker-a", { fail_code = 1 })
        local p = new()
        for _ = 1, 10 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            assert.equal("broker-b", r.queue.brokerName)
        end
        assert.is_true(tonumber(fake.stats(cluster.brokers["broker-a"].addr).count) > 0)
    end)

    it("does not retry a refusal RocketMQ does not retry", function()
        cluster:set("broker-a", { fail_code = 13 })
        cluster:set("broker-b", { fail_code = 13 })
        local p = new()
        local r, err, code = p:send({ topic = TOPIC, body = "x" })
        assert.is_nil(r)
        assert.truthy(err)
        assert.equal(13, code)
        local total = tonumber(fake.stats(cluster.brokers["broker-a"].addr).count)
            + tonumber(fake.stats(cluster.brokers["broker-b"].addr).count)
        assert.equal(1, total)
    end)

    it("does not retry a send that timed out", function()
        cluster:set("broker-a", { delay_ms = 2000 })
        cluster:set("broker-b", { delay_ms = 2000 })
        local p = new({ sendMsgTimeout = 300 })
        local t0 = core.mono_ms()
        local r, err = p:send({ topic = TOPIC, body = "x" })
        local took = core.mono_ms() - t0
        assert.is_nil(r)
        assert.matches("timed out", err)
        assert.is_true(took < 1500, "took " .. took .. " ms")
        local total = tonumber(fake.stats(cluster.brokers["broker-a"].addr).count)
            + tonumber(fake.stats(cluster.brokers["broker-b"].addr).count)
        assert.equal(1, total)
    end)

    it("marks a slow broker unavailable and uses it again once it recovers", function()
        -- Tables scaled down so the spec takes a second: a send of 300 ms
        -- or more makes the broker unavailable for 800 ms.
        local p = new({ sendLatencyFaultEnable = true,
                        latencyMax = { 50, 300 }, notAvailableDuration = { 0, 800 } })
        cluster:set("broker-a", { delay_ms = 350 })
        -- Send until a message lands on the slow broker.
        local hit_a = false
        for _ = 1, 8 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            if r.queue.brokerName == "broker-a" then hit_a = true break end
        end
        assert.is_true(hit_a)
        cluster:set("broker-a", { delay_ms = 0 })
        -- Marked: the next sends all go to broker-b.
        for _ = 1, 8 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            assert.equal("broker-b", r.queue.brokerName)
        end
        net.sleep(900)
        local seen_a = false
        for _ = 1, 8 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            seen_a = seen_a or r.queue.brokerName == "broker-a"
        end
        assert.is_true(seen_a)
    end)

    it("takes a user's queue-selection policy: a function or a module name", function()
        local p = new({ queueSelectPolicy = function(facts)
            for i, q in ipairs(facts.queues) do
                if q.brokerName == "broker-b" and q.queueId == 3 then
                    return i, facts.counter
                end
            end
        end })
        for _ = 1, 3 do
            local r = assert(p:send({ topic = TOPIC, body = "x" }))
            assert.equal("broker-b", r.queue.brokerName)
            assert.equal(3, r.queue.queueId)
        end
        assert.has_error(function() new({ queueSelectPolicy = "no.such.policy" }) end)
    end)

    it("compresses a large body with zlib and the 4.9.8 sysFlag", function()
        local p = new()
        local body = string.rep("rocketmq compresses this body; ", 400)
        local r = assert(p:send({ topic = TOPIC, body = body }))
        local st = fake.stats(cluster.brokers[r.queue.brokerName].addr)
        assert.equal(tostring(0x301), st.last_f)
        assert.equal(tostring(#body), st.inflated_len)
        assert.equal(tostring(core.crc32(body)), st.inflated_crc)
    end)

    it("refuses invalid messages before sending", function()
        local p = new()
        local r, err = p:send({ topic = "bad topic!", body = "x" })
        assert.is_nil(r)
        assert.matches("contains characters", err)
        r, err = p:send({ topic = TOPIC, body = "" })
        assert.is_nil(r)
        assert.matches("empty", err)
    end)

    it("sends orderly to the queue the selector picks", function()
        local p = new()
        local first = assert(p:send_orderly({ topic = TOPIC, body = "x" }, "order-42"))
        for _ = 1, 5 do
            local r = assert(p:send_orderly({ topic = TOPIC, body = "x" }, "order-42"))
            assert.same(first.queue, r.queue)
        end
    end)

    it("sends asynchronously and calls back", function()
        local p = new()
        local got = {}
        for i = 1, 5 do
            p:send_async({ topic = TOPIC, body = "x" .. i }, function(r) got[#got + 1] = r.status end)
        end
        local waited = 0
        while #got < 5 and waited < 3000 do net.sleep(10) waited = waited + 10 end
        assert.same({ "SEND_OK", "SEND_OK", "SEND_OK", "SEND_OK", "SEND_OK" }, got)
    end)

    it("sends a batch as SEND_BATCH_MESSAGE with one UNIQ_KEY per message", function()
        local p = new()
        local r = assert(p:send_batch({
            { topic = TOPIC, body = "one" }, { topic = TOPIC, body = "two", tags = "T2" },
        }))
        assert.equal("SEND_OK", r.status)
        local ids = {}
        for id in r.msgId:gmatch("[^,]+") do ids[#ids + 1] = id end
        assert.equal(2, #ids)
        local st = fake.stats(cluster.brokers[r.queue.brokerName].addr)
        assert.equal("true", st.last_m)
    end)

    it("uses the TBW102 template route for a topic the NameServer does not know", function()
        local p = new()
        local r = assert(p:send({ topic = "FxNewTopic", body = "x" }))
        assert.equal("SEND_OK", r.status)
        local st = fake.stats(cluster.brokers[r.queue.brokerName].addr)
        assert.equal("FxNewTopic", st.last_b)
    end)
end)
