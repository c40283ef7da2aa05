-- POP receive + acknowledge against PULL + commit, on one broker in one
-- run: messages/s and the broker's CPU per message (/proc/PID/stat, the
-- client aside).
--
--   nice lua5.4 scripts/bench/pop.lua [MESSAGES [ROUNDS]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 20000 messages, 3 rounds.  A NameServer and
-- a broker (2 workers, logLevel warn) on 127.0.0.1; each round sends
-- MESSAGES (batches of 100, 4 queues) to a fresh topic, then consumes
-- them all with, in turn, a fresh group each:
--   pull+commit    PULL_MESSAGE of 32 per queue with the commit flag (the
--                  way a 4.x push consumer commits), queue after queue
--   pop+ack        POP_MESSAGE of 32 (every queue), one ACK_MESSAGE per
--                  message (what a 5.x consumer does)
--   pop+ack||      the same, the 32 ACKs of a POP in flight together (as
--                  a 5.x client acknowledges asynchronously)
--   pop+batchack   POP_MESSAGE of 32, one BATCH_ACK_MESSAGE per POP
-- Figures: median over rounds of messages/s and broker CPU µs/message,
-- and each POP variant's CPU per message over pull+commit's.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local env = require("support.broker_consume_env")
local admin = require("support.admin")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local pop = require("rmq.client.pop")
local net = require("rmq.net")

local N = tonumber(arg[1]) or 20000
local ROUNDS = tonumber(arg[2]) or 3
local QUEUES = 4

local function median(t)
    local c = {}
    for i, v in ipairs(t) do c[i] = v end
    table.sort(c)
    return c[(#c + 1) // 2]
end

local e = env.start({ workers = 2, logLevel = "warn" })
local ok, err = pcall(function()
    local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "BenchPopProducer" })
    local results = { ["pull+commit"] = { rate = {}, cpu = {} }, ["pop+ack"] = { rate = {}, cpu = {} },
                      ["pop+ack||"] = { rate = {}, cpu = {} },
                      ["pop+batchack"] = { rate = {}, cpu = {} } }

    local function measure(name, fn)
        local t0, c0 = core.mono_ms(), e.broker:cpu_seconds()
        local n = fn()
        local ms, cpu = core.mono_ms() - t0, e.broker:cpu_seconds() - c0
        assert(n == N, name .. ": consumed " .. n .. " of " .. N)
        local r = results[name]
        r.rate[#r.rate + 1] = n * 1000 / math.max(ms, 1)
        r.cpu[#r.cpu + 1] = cpu * 1e6 / n
    end

    for round = 1, ROUNDS do
        local topic = "BenchPop" .. round
        admin.create_topic(e.addr, topic, QUEUES)
        e:route(topic, QUEUES)
        for b = 0, N // 100 - 1 do
            local batch = {}
            for i = 1, 100 do
                batch[i] = { topic = topic, body = ("m%08d"):format(b * 100 + i) .. string.rep("x", 100) }
            end
            assert(p:send_batch(batch))
        end
        for _, g in ipairs({ "BenchPull" .. round, "BenchPopA" .. round, "BenchPopB" .. round,
                             "BenchPopC" .. round }) do
            assert(admin.call(e.addr, { code = 200, body = ('{"groupName":"%s"}'):format(g) }).code == 0)
        end

        measure("pull+commit", function()
            local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "BenchPull" .. round })
            local n = 0
            for q = 0, QUEUES - 1 do
                local mq = { topic = topic, brokerName = env.BROKER, queueId = q }
                local offset = 0
                while true do
                    local r = assert(c:pull(mq, offset, 32, { commitOffset = offset }))
                    if r.status ~= "FOUND" then
                        break
                    end
                    n = n + #r.messages
                    offset = r.nextBeginOffset
                end
            end
            c:shutdown()
            return n
        end)

        measure("pop+ack", function()
            local c = pop.new({ namesrvAddr = e.ns_addr, consumerGroup = "BenchPopA" .. round, invisibleTime = 600000 })
            local n = 0
            while true do
                local r = assert(c:pop(topic, { maxMsgNums = 32, pollTime = 0, initMode = 0 }))
                if #r.messages == 0 then
                    break
                end
                for _, m in ipairs(r.messages) do
                    assert(c:ack(m))
                end
                n = n + #r.messages
            end
            c:shutdown()
            return n
        end)

        measure("pop+ack||", function()
            local c = pop.new({ namesrvAddr = e.ns_addr, consumerGroup = "BenchPopC" .. round, invisibleTime = 600000 })
            local n = 0
            while true do
                local r = assert(c:pop(topic, { maxMsgNums = 32, pollTime = 0, initMode = 0 }))
                if #r.messages == 0 then
                    break
                end
                local pending = #r.messages
                for _, m in ipairs(r.messages) do
                    net.spawn(function()
                        assert(c:ack(m))
                        pending = pending - 1
                    end)
                end
                while pending > 0 do
                    net.sleep(0)
                end
                n = n + #r.messages
            end
            c:shutdown()
            return n
        end)

        measure("pop+batchack", function()
            local c = pop.new({ namesrvAddr = e.ns_addr, consumerGroup = "BenchPopB" .. round, invisibleTime = 600000 })
            local n = 0
            while true do
                local r = assert(c:pop(topic, { maxMsgNums = 32, pollTime = 0, initMode = 0 }))
                if #r.messages == 0 then
                    break
                end
                assert(c:batch_ack(r.messages))
                n = n + #r.messages
            end
            c:shutdown()
            return n
        end)
    end

    local base = median(results["pull+commit"].cpu)
    print(("%d messages x %d rounds, %d queues, broker CPU per message (median)"):format(N, ROUNDS, QUEUES))
    for _, name in ipairs({ "pull+commit", "pop+ack", "pop+ack||", "pop+batchack" }) do
        local r = results[name]
        local cpu = median(r.cpu)
        print(("%-14s %9.0f msgs/s  %7.2f us CPU/msg  %5.2fx pull"):format(name, median(r.rate), cpu, cpu / base))
    end
end)
e:stop()
os.execute("rm -rf '" .. e.dir .. "'")
assert(ok, err)
