-- Which gRPC producer a transaction check reaches (issue 23, F1): as in
-- 5.x, a producer of the half message's topic, never one of another topic.
-- 5.x's proxy sends a message with its topic as producer group ("use
-- topicName as producerGroup for transactional checker") and registers a
-- producer under each topic it publishes; rmq once put every gRPC producer
-- and every half message in one group, CLIENT_INNER_PRODUCER, and a
-- producer of topic A was asked about (and committed) topic B's half.
-- RocketMQ 5's Node.js SDK (spec/interop/grpc_node/tx_topics.js) on a
-- standalone rmq whose check runs every second.
local net = require("rmq.net")
local server = require("support.server")
local rq = require("support.requests")
local gn = require("support.grpc_node")

local HALF = "RMQ_SYS_TRANS_HALF_TOPIC"

local function max_offset(addr, topic)
    local r = assert(net.call(addr, { code = 30, ext = { topic = topic, queueId = "0" } }, 10000))
    return r.code == 0 and tonumber(r.ext.offset) or 0
end

local function exists(path)
    local f = io.open(path)
    if f then
        f:close()
    end
    return f ~= nil
end

-- The checks in res (a tx_topics.js result) of message id.
local function checks_of(res, id)
    local n = 0
    for _, c in ipairs(res and res.checks or {}) do
        if c.messageId == id then
            n = n + 1
        end
    end
    return n
end

-- The case: X (topic A) live all along; Y sends a half message on B and
-- leaves; once a check round re-put it (its check went to whichever
-- producer the broker took: X only, before the fix), Z (topic B) starts:
-- Z is asked and commits, X never.  t: gn's target (grpc_addr, dir, log);
-- broker: the half message's broker address; ns: the NameServer's;
-- topic(name): creates it (and waits for its route).
local function other_topics_case(t, broker, ns, topic, prefix)
    local A, B = prefix .. "A", prefix .. "B"
    topic(A)
    topic(B)
    local ready, stop = t.dir .. "/" .. prefix .. "x.ready", t.dir .. "/" .. prefix .. "x.stop"
    local finish_x = gn.spawn(t, "tx_topics.js", { TOPIC = A, ROLE = "watch", READY = ready, STOP = stop,
                                                   WAIT_MS = 240000 }, prefix .. "_x", 240000)
    local ok, err = pcall(function()
        assert(server.eventually(function() return exists(ready) end, 60000), "X never started")
        local status, res, why = gn.run(t, "tx_topics.js", { TOPIC = B, ROLE = "half" }, prefix .. "_y")
        assert.equal(0, status, why)
        local id = assert(res and res.sent, why)
        local h0 = max_offset(broker, HALF)
        assert(server.eventually(function() return max_offset(broker, HALF) > h0 end, 60000),
            "no check round re-put the half message")
        status, res, why = gn.run(t, "tx_topics.js", { TOPIC = B, ROLE = "check", EXPECT = id, WAIT_MS = 60000 },
            prefix .. "_z", 90000)
        assert.equal(0, status, why)
        assert.is_true(checks_of(res, id) >= 1, "Z (topic B) was never asked: " .. why)
        for _, c in ipairs(res.checks) do
            assert.equal(B, c.topic)
        end
        local got = gn.consume_all(ns, B, prefix .. "Reader", 1)
        assert.equal(1, #got)
        assert.equal("half-of-" .. B, got[1].body)
        assert.equal(id, got[1].msgId)
    end)
    local f = io.open(stop, "w")
    if f then
        f:write("stop\n")
        f:close()
    end
    local status, res, why = finish_x(60000)
    assert(ok, err)
    assert.equal(0, status, why)
    -- X (topic A) was never asked about B's half message.
    assert.same({}, res.checks, why)
end

describe("a gRPC transaction check", function()
    local s

    setup(function()
        gn.check()
        s = gn.start({ transactionCheckInterval = 1000, transactionTimeOut = 1000,
                   transactionCheckMax = 100000 })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("reaches a producer of the half message's topic, never one of another topic", function()
        other_topics_case(s, s.broker_addr, s.listen_addr, function(name) gn.create_topic(s, name) end,
            "GrpcTxTopic")
    end)

    it("still ends a half message of the group CLIENT_INNER_PRODUCER (stored before topics were groups)",
        function()
        local C = "GrpcTxTopicC"
        gn.create_topic(s, C)
        -- A half message as rmq stored a gRPC producer's before: PGROUP
        -- CLIENT_INNER_PRODUCER (SEND_MESSAGE_V2 by hand).
        local uniq = "0A00000100002A9F0000000000C0FFEE"
        local r = assert(net.call(s.broker_addr, rq.send({ group = "CLIENT_INNER_PRODUCER", topic = C, qid = 1,
            sysflag = 4, body = "legacy-half",
            props = "TRAN_MSG\1true\2PGROUP\1CLIENT_INNER_PRODUCER\2UNIQ_KEY\1" .. uniq .. "\2WAIT\1true" }),
            10000))
        assert.equal(0, r.code, r.remark)
        -- A producer of C (registered under CLIENT_INNER_PRODUCER too) is
        -- asked; its COMMIT (EndTransaction) ends it.
        local status, res, why = gn.run(s, "tx_topics.js", { TOPIC = C, ROLE = "check", EXPECT = uniq,
                                                               WAIT_MS = 60000 }, "tx_c", 90000)
        assert.equal(0, status, why)
        assert.is_true(checks_of(res, uniq) >= 1, "the producer was never asked: " .. why)
        local got = gn.consume_all(s.listen_addr, C, "GrpcTxTopicReaderC", 1)
        assert.equal(1, #got)
        assert.equal("legacy-half", got[1].body)
        assert.equal(uniq, got[1].msgId)
    end)
end)

describe("grpcMaxProducerTopics", function()
    local s

    setup(function()
        gn.check()
        s = gn.start({ transactionCheckInterval = 1000, transactionTimeOut = 1000,
                   transactionCheckMax = 100000, grpcMaxProducerTopics = 1 })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("bounds the topics a producer is asked about: past it, none", function()
        -- Publishing two topics, one registered (the first its Settings list).
        local T1, T2 = "GrpcTxBoundA", "GrpcTxBoundB"
        gn.create_topic(s, T1)
        gn.create_topic(s, T2)
        local status, res, why = gn.run(s, "tx_topics.js", { TOPICS = T1 .. "," .. T2, ROLE = "each",
                                                               WAIT_MS = 60000 }, "tx_bound", 90000)
        assert.equal(0, status, why)
        assert.equal(2, #res.sent, why)
        -- Asked twice about T1's half message; T2's, checked in the same
        -- rounds, reached no producer.
        assert.is_true(checks_of(res, res.sent[1]) >= 2, why)
        assert.equal(0, checks_of(res, res.sent[2]), why)
        assert.matches("no live producer of group " .. T2, s:log(), 1, true)
    end)
end)

describe("a gRPC transaction check through rmq's proxy (cluster mode)", function()
    local c

    setup(function()
        -- grpcMaxProducerTopics: a proxy takes it too.
        c = gn.start_proxy({ brokers = { "txtopics-b1" },
                             broker = { transactionCheckInterval = 1000, transactionTimeOut = 1000,
                                        transactionCheckMax = 100000 },
                             proxy = { grpcMaxProducerTopics = 8 } })
    end)

    teardown(function()
        if c then
            gn.stop_all(c.servers)
        end
    end)

    it("reaches a producer of the half message's topic, never one of another topic", function()
        local t = { grpc_addr = c.px.grpc_addr, dir = c.px.dir, log = function()
            local parts = {}
            for _, sv in ipairs(c.servers) do
                parts[#parts + 1] = sv.role .. ": " .. sv:log():sub(-1500)
            end
            return table.concat(parts, "\n")
        end }
        local b = c.brokers[1]
        other_topics_case(t, b.addr, c.ns.addr, function(name)
            gn.create_topic(b, name)
            assert(server.eventually(function()
                local r = net.call(c.ns.addr, { code = 105, ext = { topic = name } }, 5000)
                return r and r.code == 0
            end, 60000), "no route of " .. name)
        end, "ProxyTxTopic")
    end)
end)
