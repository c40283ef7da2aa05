-- RocketMQ 5's Node.js PushConsumer (npm rocketmq-client-nodejs,
-- unmodified) against a standalone rmq with grpcServerPort: what its
-- listener consumes is acknowledged, what it fails comes back with
-- deliveryAttempt 1, 2, 3 after the group's backoff (a 5.x group with
-- retryMaxTimes 2: three attempts), then lands in %DLQ%group (read back
-- with rmq's remoting consumer) and is not handed out a fourth time.
-- A FIFO group (consumeMessageOrderly) is consumed in order per message
-- group, and its failed message forwarded by the SDK itself
-- (ForwardMessageToDeadLetterQueue).
local net = require("rmq.net")
local codes = require("rmq.codes")
local gn = require("support.grpc_node")
local server = require("support.server")

local req, resp = codes.request, codes.response

-- A 5.x group: retryMaxTimes 2 (3 attempts), exponential backoff from 1 s.
local function create_group(s, group, extra)
    local body = ('{"groupName":"%s","retryMaxTimes":2,%s"groupRetryPolicy":{"type":"EXPONENTIAL",'
        .. '"exponentialRetryPolicy":{"initial":1000,"max":2000,"multiplier":2}}}'):format(group, extra or "")
    local r = assert(net.call(s.broker_addr, { code = req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = body }, 5000))
    assert.equal(resp.SUCCESS, r.code, r.remark)
end

-- The records of topic's queue 0 (a DLQ has one queue), read with rmq's
-- remoting consumer once the queue holds want of them.
local function read_queue(s, topic, group, want)
    server.eventually(function()
        local r = net.call(s.broker_addr, { code = req.GET_MAX_OFFSET, ext = { topic = topic, queueId = 0 } }, 5000)
        return r and r.code == resp.SUCCESS and tonumber(r.ext.offset) >= want
    end, 60000)
    return gn.consume_all(s.listen_addr, topic, group, want)
end

-- Starts push_consumer.js; returns a function that lets it end and
-- returns its status, JSON result and output.
local function start_push(s, vars, name)
    local done = s.dir .. "/" .. name .. ".done"
    vars.DONE_FILE = done
    local finish = gn.spawn(s, "push_consumer.js", vars, name, 120000)
    return function()
        local f = assert(io.open(done, "w"))
        f:close()
        return finish(150000)
    end
end

describe("the Node.js RocketMQ 5 PushConsumer over gRPC", function()
    local s

    setup(function()
        gn.check()
        s = gn.start()
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("consumes, retries a failed message with rising deliveryAttempt, then moves it to %DLQ%group", function()
        local T, G = "GrpcPushTopic", "GrpcPushGroup"
        gn.create_topic(s, T)
        create_group(s, G)
        local finish = start_push(s, { TOPIC = T, GROUP = G, COUNT = 10 }, "push")
        -- In the DLQ once its three attempts failed.
        local dlq = read_queue(s, "%DLQ%" .. G, "GrpcPushDlqCheck", 1)
        -- While it runs, `rmq admin consumerConnection` lists the gRPC
        -- client (its 5.x client id, its address, the language its
        -- x-mq-language says: HTTP for this SDK, as 5.x's proxy registers
        -- it) and its subscription.
        local code, out = server.rmq(("admin consumerConnection -g %s -n %s"):format(G, s.listen_addr))
        assert.equal(0, code, out)
        assert.matches("\n[%w%.%-]+@%d+@%d+@%w+%s+127%.0%.0%.1:%d+%s+HTTP%s", out)
        assert.matches("\n" .. T .. "%s+%*", out)
        assert.matches("ConsumeType: CONSUME_PASSIVELY", out, 1, true)
        local status, res, why = finish()
        assert.equal(0, status, why)
        assert.truthy(res and res.sent, why)
        assert.equal(1, #dlq, why)
        assert.equal("fail-1", dlq[1].body)
        assert.equal(res.failedId, dlq[1].msgId)
        assert.equal("Push", dlq[1].tags)
        -- Every other message consumed once, on its first attempt.
        assert.equal(10, #res.consumed, why)
        local bodies = {}
        for _, m in ipairs(res.consumed) do
            assert.equal(1, m.attempt)
            bodies[m.body] = (bodies[m.body] or 0) + 1
        end
        for i = 0, 9 do
            assert.equal(1, bodies["ok-" .. i], "ok-" .. i .. " consumed " .. tostring(bodies["ok-" .. i]) .. " times")
        end
        -- The failed one: attempts 1, 2, 3 and no fourth (the server sent
        -- it to the DLQ instead).  The SDK asks for its backoff's seconds
        -- as milliseconds (1 ms, 2 ms): raised to popInvisibleTimeMinMillis
        -- (1 s), so never redelivered sooner.
        assert.same({ 1, 2, 3 }, res.failAttempts, why)
        for _, gap in ipairs(res.failGapsMs) do
            assert.is_true(gap >= 990, "redelivered " .. gap .. " ms after a failure (at least 1 s)")
        end
    end)

    it("consumes a FIFO group in order per message group; a failed message is forwarded to %DLQ%group", function()
        local T, G = "GrpcPushFifoTopic", "GrpcPushFifoGroup"
        gn.create_topic(s, T)
        create_group(s, G, '"consumeMessageOrderly":true,')
        local finish = start_push(s, { TOPIC = T, GROUP = G, COUNT = 12, FIFO = 1, GROUPS = 3 }, "push_fifo")
        -- The SDK retries a FIFO message itself, then calls
        -- ForwardMessageToDeadLetterQueue.
        local dlq = read_queue(s, "%DLQ%" .. G, "GrpcPushFifoDlqCheck", 1)
        local status, res, why = finish()
        assert.equal(0, status, why)
        assert.truthy(res and res.sent, why)
        assert.equal(1, #dlq, why)
        assert.equal("fail-1", dlq[1].body)
        assert.equal(res.failedId, dlq[1].msgId)
        assert.equal("bad", dlq[1].properties.__SHARDINGKEY)
        assert.same({ 1, 2, 3 }, res.failAttempts, why)
        -- Each message group in the order it was sent, each message once.
        assert.equal(12, #res.consumed, why)
        local last = {}
        for _, m in ipairs(res.consumed) do
            local g, i = m.body:match("^(g%d):(%d+)$")
            assert.truthy(g, m.body)
            assert.equal(g, m.group)
            i = tonumber(i)
            assert.is_true((last[g] or -1) < i, g .. " out of order at " .. m.body .. ": " .. why)
            last[g] = i
        end
    end)

    it("keeps serving a client that outlives serverChannelMaxIdleTimeSeconds", function()
        -- Its socket stays busy (Heartbeat every 10 s, long polls); the
        -- broker-side shadow connection reads nothing and must not be
        -- closed as idle (it was: HEART_BEAT then ran without its Lua
        -- ctx, and requests went to a closed conn).  35 s: more than the
        -- broker's 30 s registration with its NameServer.
        local s2 = gn.start({ serverChannelMaxIdleTimeSeconds = 35 })
        local ok, err = pcall(function()
            local T, G = "GrpcPushIdleTopic", "GrpcPushIdleGroup"
            gn.create_topic(s2, T)
            create_group(s2, G)
            local finish = start_push(s2, { TOPIC = T, GROUP = G, COUNT = 3, HOLD_MS = 40000 }, "push_idle")
            local dlq = read_queue(s2, "%DLQ%" .. G, "GrpcPushIdleDlqCheck", 1)
            local status, res, why = finish()
            assert.equal(0, status, why)
            assert.equal(1, #dlq, why)
            assert.equal(3, #res.consumed, why)
            assert.same({ 1, 2, 3 }, res.failAttempts, why)
            assert.is_nil(s2:log():find("request code %d+ failed"), why)
        end)
        local rc = s2:stop()
        assert(ok, err)
        assert.equal(0, rc)
    end)
end)
