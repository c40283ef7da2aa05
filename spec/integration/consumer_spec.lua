-- rmq's consumers against spec brokers (spec/support/fake_broker.lua).
local net = require("rmq.net")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local fake = require("support.fake_broker")
local server = require("support.server")

local TOPIC = "FxConsumeTopic"
local GROUP = "FxConsumerGroup"

describe("consumers", function()
    local cluster, p

    before_each(function()
        cluster = fake.cluster({ topic = TOPIC, group = GROUP,
                                 brokers = { ["broker-a"] = { with_slave = true }, ["broker-b"] = {} } })
        p = producer.new({ namesrvAddr = cluster.namesrv_addr, producerGroup = "FxP" })
    end)

    after_each(function()
        cluster:stop()
    end)

    local function new(opts)
        opts = opts or {}
        opts.namesrvAddr = cluster.namesrv_addr
        opts.consumerGroup = opts.consumerGroup or GROUP
        opts.consumeFromWhere = opts.consumeFromWhere or "CONSUME_FROM_FIRST_OFFSET"
        return consumer.new(opts)
    end

    it("pulls a queue and decodes every record with body and properties intact", function()
        local sent = {}
        for i = 1, 8 do
            local body = ("body-%d-"):format(i) .. string.rep("\0\1\2", i)
            local r = assert(p:send({ topic = TOPIC, body = body, tags = (i % 2 == 0) and "Even" or "Odd",
                                      keys = "k" .. i, properties = { color = "blue" } }))
            sent[r.msgId] = { body = body, queue = r.queue, offset = r.queueOffset }
        end
        local c = new()
        local got = 0
        for _, s in pairs(sent) do
            local r = assert(c:pull(s.queue, s.offset, 1))
            assert.equal("FOUND", r.status)
            local m = r.messages[1]
            assert.equal(s.body, m.body)
            assert.equal("blue", m.properties.color)
            assert.equal(TOPIC, m.topic)
            assert.equal(s.offset, m.queueOffset)
            got = got + 1
        end
        assert.equal(8, got)
    end)

    it("filters by tag", function()
        for i = 1, 8 do
            assert(p:send({ topic = TOPIC, body = "m" .. i, tags = (i % 2 == 0) and "Even" or "Odd" }))
        end
        local c = new()
        local evens = 0
        for _, b in ipairs({ "broker-a", "broker-b" }) do
            for qid = 0, 3 do
                local r = assert(c:pull({ topic = TOPIC, brokerName = b, queueId = qid }, 0, 32, { expr = "Even" }))
                for _, m in ipairs(r.messages) do
                    assert.equal("Even", m.tags)
                    evens = evens + 1
                end
            end
        end
        assert.equal(4, evens)
    end)

    it("pulls next from the node the broker suggests", function()
        assert(p:send_orderly({ topic = TOPIC, body = "x" }, 0, function(queues)
            for _, q in ipairs(queues) do
                if q.brokerName == "broker-a" then return q end
            end
        end))
        cluster:set("broker-a", { suggest = 1 })
        local c = new()
        local mq = { topic = TOPIC, brokerName = "broker-a", queueId = 0 }
        local r = assert(c:pull(mq, 0, 1))
        assert.equal(1, r.suggestWhichBrokerId)
        assert.equal(cluster.brokers["broker-a"].addr, r.addr)
        c:pull(mq, 0, 1)
        assert.is_true(tonumber(fake.stats(cluster.brokers["broker-a"].slave.addr).pulls) >= 1)
    end)

    it("rebalances 3 consumers over 8 queues, each queue owned once", function()
        local cs = {}
        for i = 1, 3 do
            cs[i] = new({ clientId = ("127.0.0.1@c%d"):format(i), rebalanceInterval = 200 })
            cs[i]:subscribe(TOPIC, "*")
            cs[i]:on_message(function() return "CONSUME_SUCCESS" end)
            cs[i]:start()
        end
        local function owned()
            local seen, sizes = {}, {}
            for i, c in ipairs(cs) do
                sizes[i] = 0
                for _, mq in ipairs(c:assigned()) do
                    if mq.topic == TOPIC then
                        local k = consumer.mq_key(mq)
                        if seen[k] then return nil end
                        seen[k] = true
                        sizes[i] = sizes[i] + 1
                    end
                end
            end
            table.sort(sizes)
            return table.concat(sizes, ",")
        end
        assert.equal("2,3,3", server.eventually(function()
            local o = owned()
            return o == "2,3,3" and o
        end, 5000))
        -- Joining members were announced with NOTIFY_CONSUMER_IDS_CHANGED.
        assert.is_true(cs[1].events.notified >= 2)
        for _, c in ipairs(cs) do c:shutdown() end
    end)

    it("consumes every message once, commits offsets, and sends failures back", function()
        local n = 40
        for i = 1, n do
            assert(p:send({ topic = TOPIC, body = "m" .. i, tags = (i == 7) and "Bad" or "Ok" }))
        end
        local seen, count = {}, 0
        local c = new({ persistConsumerOffsetInterval = 100 })
        c:subscribe(TOPIC, "*")
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                if m.tags == "Bad" then
                    return "RECONSUME_LATER"
                end
                assert.is_nil(seen[m.body])
                seen[m.body] = true
                count = count + 1
            end
            return "CONSUME_SUCCESS"
        end)
        c:start()
        assert.truthy(server.eventually(function() return count == n - 1 end, 5000))
        net.sleep(300)  -- a persist round
        c:shutdown()
        local sent_back = tonumber(fake.stats(cluster.brokers["broker-a"].addr).sent_back)
            + tonumber(fake.stats(cluster.brokers["broker-b"].addr).sent_back)
        assert.equal(1, sent_back)
        -- Every queue's committed offset reached its end.
        local committed = 0
        for _, b in ipairs({ "broker-a", "broker-b" }) do
            for k, v in pairs(fake.stats(cluster.brokers[b].addr)) do
                if k:match("^offset_" .. GROUP .. "@" .. TOPIC) then
                    committed = committed + tonumber(v)
                end
            end
        end
        assert.equal(n, committed)
    end)
end)
