-- POP consumption (RocketMQ 5, docs/pop.md) with real processes: a
-- NameServer and a broker with two workers on loopback, rmq's POP client
-- (rmq.client.pop) and producer.  Every message is received once when it
-- is acknowledged; an unacknowledged lease comes back through the
-- group's retry topic with reconsumeTimes + 1, then goes to %DLQ%group;
-- CHANGE_MESSAGE_INVISIBLETIME extends a lease; bad receipt handles and
-- invisible times are refused with 5.x's codes; held POPs wake on a send;
-- POP and PULL share the group's committed offsets; leases survive kill -9.
local core = require("rmq.core")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local pop = require("rmq.client.pop")
local server = require("support.server")
local admin = require("support.admin")
local env = require("support.broker_consume_env")

local SLOW = os.getenv("RMQ_SERVER_ASAN_OPTIONS") and 3 or 1

describe("POP consumption", function()
    local e, p

    setup(function()
        e = env.start({ workers = 2, popInvisibleTimeMinMillis = 200, popReviveIntervalMillis = 50 })
        p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "PopProducer" })
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    local function new_topic(name, queues)
        admin.create_topic(e.addr, name, queues or 4)
        e:route(name, queues or 4)
        return name
    end

    local function group(name, retry_max)
        local r = admin.call(e.addr, { code = 200, body = ('{"groupName":"%s","retryMaxTimes":%d}')
            :format(name, retry_max or 16) })
        assert.equal(0, r.code, r.remark)
        return name
    end

    local function send_n(topic, n, prefix)
        for i = 1, n do
            local r = assert(p:send({ topic = topic, body = (prefix or "m") .. i, tags = "TagA" }))
            assert.equal("SEND_OK", r.status)
        end
    end

    -- Pops until `want` messages came or the deadline passes.
    local function pop_all(c, topic, want, opts)
        local got = {}
        local deadline = core.mono_ms() + 15000 * SLOW
        while #got < want and core.mono_ms() < deadline do
            local r = assert(c:pop(topic, opts or { pollTime = 1000 }))
            for _, m in ipairs(r.messages) do
                got[#got + 1] = m
            end
        end
        return got
    end

    it("hands every message out once to a consumer that acknowledges", function()
        local topic = new_topic("PopOnce")
        local c = pop.new({ namesrvAddr = e.ns_addr, consumerGroup = group("PopOnceG"), invisibleTime = 30000 })
        send_n(topic, 40)
        local got = pop_all(c, topic, 40)
        assert.equal(40, #got)
        local seen = {}
        for _, m in ipairs(got) do
            assert.is_nil(seen[m.body], "twice: " .. m.body)
            seen[m.body] = true
            assert.equal(topic, m.topic)
            assert.equal(0, m.reconsumeTimes)
            -- ExtraInfoUtil: ckOffset popTime invisibleTime reviveQid retry broker qid offset
            local f = {}
            for w in m.receipt:gmatch("%S+") do f[#f + 1] = w end
            assert.equal(8, #f)
            assert.equal("30000", f[3])
            assert.equal("0", f[5])
            assert.equal(env.BROKER, f[6])
            assert.equal(tostring(m.queueId), f[7])
            assert.equal(tostring(m.queueOffset), f[8])
            assert(c:ack(m))
        end
        local r = assert(c:pop(topic, { pollTime = 0 }))
        assert.equal("POLLING_NOT_FOUND", r.status)
        -- An acknowledged lease is gone: acknowledging again is refused.
        local ok, err, code = c:ack(got[1])
        assert.is_nil(ok)
        assert.equal(208, code, err)
        c:shutdown()
    end)

    it("redelivers an unacknowledged message after its invisible time, then to the DLQ", function()
        local topic = new_topic("PopRevive")
        local g = group("PopReviveG", 2)
        local c = pop.new({ namesrvAddr = e.ns_addr, consumerGroup = g, invisibleTime = 300 })
        send_n(topic, 1, "revive")
        local times = {}
        for round = 1, 3 do
            local got = pop_all(c, topic, 1, { pollTime = 1000, invisibleTime = 300 })
            assert.equal(1, #got, "round " .. round)
            local m = got[1]
            assert.equal("revive1", m.body)
            assert.equal(topic, m.topic)
            times[#times + 1] = m.reconsumeTimes
            if round > 1 then
                assert.equal("%RETRY%" .. g .. "_" .. topic, m.ackTopic)
            end
        end
        assert.same({ 0, 1, 2 }, times)
        -- reconsumeTimes 2 = retryMaxTimes: the next revive goes to %DLQ%.
        local dlq = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "PopDlqReader" })
        local found = server.eventually(function()
            local r = dlq:pull({ topic = "%DLQ%" .. g, brokerName = env.BROKER, queueId = 0 }, 0, 32)
            if r and r.status == "FOUND" then
                return r.messages[1]
            end
        end, 10000 * SLOW)
        assert.truthy(found)
        assert.equal("revive1", found.body)
        assert.equal(3, found.reconsumeTimes)
        local r = assert(c:pop(topic, { pollTime = 0 }))
        assert.equal(0, #r.messages)
        dlq:shutdown()
        c:shutdown()
    end)
end)
