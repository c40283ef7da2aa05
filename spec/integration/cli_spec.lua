-- The `rmq` command line against real processes.
local server = require("support.server")
local fake = require("support.fake_broker")

local TOPIC = "FxCliTopic"

local run = server.rmq

describe("rmq command line", function()
    local cluster

    setup(function()
        cluster = fake.cluster({ topic = TOPIC, brokers = { ["broker-a"] = {}, ["broker-b"] = {} } })
    end)

    teardown(function()
        cluster:stop()
    end)

    it("prints its version and its commands", function()
        local code, out = run("--version")
        assert.equal(0, code)
        assert.matches("^rmq %d+%.%d+%.%d+", out)
        code, out = run("help")
        assert.equal(0, code)
        assert.matches("bench", out)
        assert.matches("send", out)
    end)

    it("fails with one clear line and exit 2 on an unknown command or option", function()
        local code, out = run("frobnicate")
        assert.equal(2, code)
        assert.matches("^rmq: unknown command 'frobnicate'", out)
        code, out = run("send --bogus")
        assert.equal(2, code)
        assert.matches("unknown option '%-%-bogus'", out)
        code, out = run("send -n")
        assert.equal(2, code)
        assert.matches("option %-n needs a value", out)
    end)

    it("lists a command's options with --help anywhere after it", function()
        for _, args in ipairs({ "bench produce --help", "bench --help", "help bench", "bench -n x -h" }) do
            local code, out = run(args)
            assert.equal(0, code, args)
            assert.matches("^usage: rmq bench produce", out, 1, args)
            assert.matches("%-c, %-%-concurrency VALUE", out, 1, args)
            assert.matches("%-%-json\n", out, 1, args)
        end
        local code, out = run("send --help")
        assert.equal(0, code)
        assert.matches("%-t, %-%-topic VALUE", out)
    end)

    it("sends a message and reports where it went", function()
        local code, out = run(("send -n %s -t %s -k order-1 --tags TagA hello"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        assert.matches("^SEND_OK msgId=%x+ offsetMsgId=%x+ queue=broker%-%a:%d queueOffset=%d+", out)
        code, out = run(("send -n %s -t %s --json hello"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        assert.matches('"status":"SEND_OK"', out)
    end)

    it("says why a send failed", function()
        local code, out = run("send -n 127.0.0.1:1 -t " .. TOPIC .. " hello")
        assert.equal(1, code)
        assert.matches("^rmq: send failed", out)
    end)

    it("shows a topic route", function()
        local code, out = run(("topic-route -n %s %s"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        assert.matches("broker%-a%s+4%s+4%s+6%s+0=127%.0%.0%.1:%d+", out)
        assert.matches("broker%-b", out)
    end)

    it("benchmarks sends with RocketMQ's report labels", function()
        local code, out = run(("bench produce -n %s -t %s -s 128 -c 8 -d 1"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        local total = out:match("%[Complete%] Send Total: (%d+) | Send TPS: %d+ | Max RT%(ms%)")
        assert.truthy(total, out)
        assert.is_true(tonumber(total) > 0)
        assert.matches("Average RT%(ms%): [%d.]+ | p50 RT%(ms%): [%d.]+ | p99 RT%(ms%): [%d.]+ | Send Failed: 0", out)
        -- Both brokers got traffic: the bench spreads over the route's queues.
        assert.is_true(tonumber(fake.stats(cluster.brokers["broker-a"].addr).count) > 0)
        assert.is_true(tonumber(fake.stats(cluster.brokers["broker-b"].addr).count) > 0)
    end)

    it("benchmarks sends that carry a UNIQ_KEY each, as a Java producer's do (--uniq-key)", function()
        local code, out = run(("bench produce -n %s -t %s -s 128 -c 8 -d 1 --uniq-key"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        local total = tonumber(out:match("%[Complete%] Send Total: (%d+)"))
        assert.truthy(total and total > 2, out)
        -- The last send a broker got carries the key, its counter past the first's.
        for _, name in ipairs({ "broker-a", "broker-b" }) do
            local props = fake.stats(cluster.brokers[name].addr).last_i
            local key = props and props:match("UNIQ_KEY\1(%x+)")
            assert.truthy(key and #key == 32, props)
            assert.is_true(tonumber(key:sub(17), 16) > 0, key)
        end
    end)

    it("benchmarks consumption of what the topic holds", function()
        local code, out = run(("bench consume -n %s -t %s -d 1 --from first"):format(cluster.namesrv_addr, TOPIC))
        assert.equal(0, code, out)
        local total = out:match("%[Complete%] Consume Total: (%d+) | Consume TPS: %d+ | Average%(B2C%) RT%(ms%)")
        assert.truthy(total, out)
        assert.is_true(tonumber(total) > 0)
    end)
end)

describe("rmq bench consume", function()
    it("counts every record of every pull once, whatever their sizes", function()
        local c2 = fake.cluster({ topic = "FxBenchCount", brokers = { ["broker-a"] = {} } })
        local producer = require("rmq.client.producer")
        local p = producer.new({ namesrvAddr = c2.namesrv_addr })
        -- more than a pull's 32 records a queue, bodies of 1 to 700 bytes,
        -- some with keys (records of other lengths)
        local n = 300
        for i = 1, n do
            local m = { topic = "FxBenchCount", body = ("x"):rep(1 + (i * 37) % 700) }
            if i % 3 == 0 then
                m.keys = "k" .. i
            end
            assert(p:send(m))
        end
        local code, out = run(("bench consume -n %s -t FxBenchCount -d 2 --from first"):format(c2.namesrv_addr))
        c2:stop()
        assert.equal(0, code, out)
        assert.equal(tostring(n), out:match("%[Complete%] Consume Total: (%d+)"), out)
    end)
end)

describe("rmq consume", function()
    it("prints the messages a topic holds", function()
        local c2 = fake.cluster({ topic = "FxCliConsume", group = "FxCliGroup",
                                  brokers = { ["broker-a"] = {} } })
        local producer = require("rmq.client.producer")
        local p = producer.new({ namesrvAddr = c2.namesrv_addr })
        for i = 1, 3 do
            assert(p:send({ topic = "FxCliConsume", body = "hello-" .. i, tags = "T" }))
        end
        local code, out = run(("consume -n %s -t FxCliConsume -g FxCliGroup -c 3"):format(c2.namesrv_addr))
        c2:stop()
        assert.equal(0, code, out)
        for i = 1, 3 do
            assert.matches("queue=%d offset=%d+ tags=T hello%-" .. i, out)
        end
    end)
end)
