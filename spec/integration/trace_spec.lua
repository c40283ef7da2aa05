-- Message trace with real processes: with traceTopicEnable the broker
-- serves RMQ_SYS_TRACE_TOPIC (or msgTraceTopicName), trace messages in
-- the Java client's format (TraceDataEncoder, keys = the traced msgIds,
-- as AsyncTraceDispatcher sends them) land there, and a message's trace
-- is found by its msgId through QUERY_MESSAGE, as mqadmin
-- queryMsgTraceById finds it -- by rmq.client.trace and `rmq trace`.
local cjson = require("cjson")
local core = require("rmq.core")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local route = require("rmq.client.route")
local trace = require("rmq.client.trace")
local server = require("support.server")
local env = require("support.broker_consume_env")

local run = server.rmq

-- The three records a traced send and consume leave for msg (Pub from
-- the producer, SubBefore and SubAfter from the consumer).
local function records(msg_id, offset_id, t)
    return {
        { type = "Pub", timestamp = t, regionId = "DefaultRegion", groupName = "FxTracedProducer",
          topic = "FxTraced", msgId = msg_id, tags = "TagA", keys = "order-1",
          storeHost = "127.0.0.1:10911", bodyLength = 5, costTime = 3, msgType = "Normal_Msg",
          offsetMsgId = offset_id, success = true },
        { type = "SubBefore", timestamp = t + 10, regionId = "DefaultRegion",
          groupName = "FxTracedConsumer", requestId = "req-1", msgId = msg_id, retryTimes = 0,
          keys = "order-1" },
        { type = "SubAfter", requestId = "req-1", msgId = msg_id, costTime = 7, success = true,
          keys = "order-1", contextCode = 0, timestamp = t + 10, groupName = "FxTracedConsumer" },
    }
end

describe("message trace", function()
    local e, p

    setup(function()
        e = env.start({ workers = 2, traceTopicEnable = true })
        p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxTraceWriter" })
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    it("serves the trace topic and finds a message's trace records by its msgId", function()
        local r = assert(server.eventually(function() return e:lookup(trace.DEFAULT_TOPIC) end, 5000),
                         "no route of RMQ_SYS_TRACE_TOPIC")
        assert.equal(env.BROKER, r.brokerDatas[1].brokerName)
        e:route("FxTraced", 4)
        local sent = assert(p:send({ topic = "FxTraced", body = "hello", tags = "TagA", keys = "order-1" }))
        local other = assert(p:send({ topic = "FxTraced", body = "other", tags = "TagA" }))
        local now = core.now_ms()
        -- Like AsyncTraceDispatcher: the records of several messages in
        -- one trace message, its keys their msgIds (and keys).
        local recs = records(sent.msgId, sent.offsetMsgId, now)
        local body = trace.encode(recs[1]) .. trace.encode(records(other.msgId, other.offsetMsgId, now)[1])
        assert(p:send({ topic = trace.DEFAULT_TOPIC, body = body,
                        keys = sent.msgId .. " order-1 " .. other.msgId }))
        assert(p:send({ topic = trace.DEFAULT_TOPIC, body = trace.encode(recs[2]) .. trace.encode(recs[3]),
                        keys = sent.msgId .. " order-1" }))

        local found = assert(trace.query(route.parse_namesrv(e.ns_addr), sent.msgId))
        assert.equal(3, #found)
        for i, want in ipairs(recs) do
            local got = found[i]
            for k, v in pairs(want) do
                assert.equal(v, got[k], want.type .. "." .. k)
            end
        end
        local only = assert(trace.query(route.parse_namesrv(e.ns_addr), other.msgId))
        assert.equal(1, #only)
        assert.equal(other.offsetMsgId, only[1].offsetMsgId)

        -- The command line shows the same.
        local code, out = run("trace -n " .. e.ns_addr .. " " .. sent.msgId)
        assert.equal(0, code, out)
        assert.matches("Pub%s+FxTracedProducer%s+FxTraced/TagA", out)
        assert.matches("SubBefore%s+FxTracedConsumer", out)
        assert.matches("SubAfter%s+FxTracedConsumer%s+%S+%s+%S+ %S+%s+7%s+success", out)
        code, out = run("trace -n " .. e.ns_addr .. " --json " .. sent.msgId)
        assert.equal(0, code, out)
        local j = cjson.decode(out)
        assert.equal(3, #j)
        assert.equal("Pub", j[1].type)
        -- A msgId with no trace: one line and a non-zero exit.
        code, out = run("trace -n " .. e.ns_addr .. " 00000000000000000000000000000000")
        assert.equal(1, code)
        assert.matches("^rmq: trace: no trace of 00000000000000000000000000000000", out)
    end)

    it("has rmq's producer write a Pub record per send with enableMsgTrace", function()
        e:route("FxTracedByRmq", 4)
        local tp = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxRmqTraced", enableMsgTrace = true })
        local sent = assert(tp:send({ topic = "FxTracedByRmq", body = "traced!", tags = "T1", keys = "k-9" }))
        local found = server.eventually(function()
            local f = trace.query(route.parse_namesrv(e.ns_addr), sent.msgId)
            return f and #f > 0 and f
        end, 60000)
        assert(found, "no trace record of the send")
        assert.equal(1, #found)
        local r = found[1]
        assert.equal("Pub", r.type)
        assert.equal("FxRmqTraced", r.groupName)
        assert.equal("FxTracedByRmq", r.topic)
        assert.equal("T1", r.tags)
        assert.equal("k-9", r.keys)
        assert.equal(7, r.bodyLength)
        assert.equal(sent.offsetMsgId, r.offsetMsgId)
        assert.equal(e.addr, r.storeHost)
        assert.is_true(r.success)
        -- A producer without it writes none.
        local plain = assert(p:send({ topic = "FxTracedByRmq", body = "untraced" }))
        -- A barrier, not a sleep: a traced send after it, whose record
        -- (written the same asynchronous way) is waited for; a record of
        -- the untraced one would be there by then.
        local after = assert(tp:send({ topic = "FxTracedByRmq", body = "traced after", keys = "k-10" }))
        assert(server.eventually(function()
            local f = trace.query(route.parse_namesrv(e.ns_addr), after.msgId)
            return f and #f > 0
        end, 30000), "no trace record of the send after the untraced one")
        assert.equal(0, #assert(trace.query(route.parse_namesrv(e.ns_addr), plain.msgId)))
    end)

    it("has rmq's push consumer write SubBefore and SubAfter with enableMsgTrace", function()
        e:route("FxTracedConsume", 4)
        local tp = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxRmqTraced2", enableMsgTrace = true })
        local sent = assert(tp:send({ topic = "FxTracedConsume", body = "consume me", keys = "ck" }))
        local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "FxTracedGroup",
                                 consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET", enableMsgTrace = true })
        c:subscribe("FxTracedConsume", "*")
        local got = 0
        c:on_message(function(msgs)
            got = got + #msgs
            return "CONSUME_SUCCESS"
        end)
        c:start()
        local found = server.eventually(function()
            local f = trace.query(route.parse_namesrv(e.ns_addr), sent.msgId)
            return f and #f >= 3 and f
        end, 60000)
        c:shutdown()
        assert(found, "no consume trace of the message (consumed " .. got .. ")")
        local types = {}
        for _, r in ipairs(found) do
            types[#types + 1] = r.type
        end
        assert.same({ "Pub", "SubBefore", "SubAfter" }, types)
        assert.equal("FxTracedGroup", found[2].groupName)
        assert.equal(0, found[2].retryTimes)
        assert.equal("ck", found[2].keys)
        assert.equal(found[2].requestId, found[3].requestId)
        assert.is_true(found[3].success)
        assert.equal(0, found[3].contextCode)
        assert.equal("FxTracedGroup", found[3].groupName)
    end)

    it("decodes what 4.9.8 clients write, old and new field counts", function()
        local C, F = trace.CONTENT, trace.FIELD
        -- A 13-field Pub (before offsetMsgId), a 7-field SubAfter (before
        -- timestamp and group) and an EndTransaction.
        local body = table.concat({ "Pub", "1", "R", "G", "T", "ID", "tag", "k", "h:1", "5", "2", "3", "true" }, C) .. F
            .. table.concat({ "SubAfter", "req", "ID", "4", "false", "k", "1" }, C) .. F
            .. table.concat({ "EndTransaction", "2", "R", "G", "T", "ID", "tag", "k", "h:1", "1", "tx",
                              "COMMIT_MESSAGE", "true" }, C) .. F
        local got = trace.decode(body)
        assert.equal(3, #got)
        assert.equal("Delay_Msg", got[1].msgType)
        assert.is_true(got[1].success)
        assert.is_nil(got[1].offsetMsgId)
        assert.is_false(got[2].success)
        assert.equal(1, got[2].contextCode)
        assert.is_nil(got[2].groupName)
        assert.equal("COMMIT_MESSAGE", got[3].transactionState)
        assert.is_true(got[3].fromTransactionCheck)
        assert.equal("Trans_Msg_Half", got[3].msgType)
    end)
end)

describe("message trace topic", function()
    it("is not served without traceTopicEnable, and is msgTraceTopicName with it", function()
        local e = env.start({ workers = 1 })
        local ok, err = pcall(function()
            -- Registered (its reply topic is routed), without the trace topic.
            assert(server.eventually(function() return e:lookup(env.CLUSTER .. "_REPLY_TOPIC") end, 5000))
            assert.is_nil(e:lookup(trace.DEFAULT_TOPIC))
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
        e = env.start({ workers = 1, traceTopicEnable = true, msgTraceTopicName = "FxOwnTraceTopic" })
        ok, err = pcall(function()
            assert(server.eventually(function() return e:lookup("FxOwnTraceTopic") end, 5000),
                   "no route of msgTraceTopicName")
            assert.is_nil(e:lookup(trace.DEFAULT_TOPIC))
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
    end)
end)
