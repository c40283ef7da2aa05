-- Replays what the Java client, rocketmq-client-cpp and ali-ons sent to a
-- RocketMQ 4.9.8 broker on the consume side (../shared/fixtures/frames:
-- heartbeats, pulls, offsets, consumer lists, unregister) against rmq's
-- broker, after putting the same number of messages into the same
-- queues, and compares the answers: byte for byte where the reply does
-- not depend on this store (heartbeats, offsets, consumer lists), field
-- by field for pulls (extFields order is the Java HashMap's; the records
-- are this store's).
local net = require("rmq.net")
local codec = require("rmq.codec")
local cjson = require("cjson")
local core = require("rmq.core")
local producer = require("rmq.client.producer")
local message = require("rmq.client.message")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)
local server = require("support.server")
local env = require("support.broker_consume_env")

-- The captured request, decoded, with extFields changed.
local function edited(frame, ext)
    local cmd = assert(codec.decode(frame))
    for k, v in pairs(ext) do
        cmd.ext[k] = v
    end
    return cmd
end

local function send_to(p, topic, qid, msg)
    msg.topic = topic
    return assert(p:send_orderly(msg, qid, function(queues, _, arg)
        for _, q in ipairs(queues) do
            if q.queueId == arg then return q end
        end
    end))
end

describe("broker consume side against captured RocketMQ 4.9.8 traffic", function()
    local e, java, notified

    setup(function()
        e = env.start({ workers = 2 })
        e:route("FxTopic")
        e:route("FxCpp")
        e:route("FxAli")
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxFixtureProducer" })
        -- The queues as they were when the captures were made.
        for _ = 1, 14 do send_to(p, "FxTopic", 0, { body = "q0", tags = "TagA" }) end
        for _ = 1, 14 do send_to(p, "FxTopic", 2, { body = "q2", tags = "TagA" }) end
        for _ = 1, 19 do send_to(p, "FxTopic", 3, { body = "q3", tags = "TagA" }) end
        for _ = 1, 2 do send_to(p, "FxCpp", 0, { body = "cpp" }) end
        for _ = 1, 2 do send_to(p, "FxAli", 0, { body = "ali" }) end
        e.producer = p
        notified = {}
        java = assert(net.connect(e.addr, { on_request = function(ctx, cmd)
            notified[#notified + 1] = cmd
        end }))
    end)

    teardown(function()
        java:close()
        e:stop()
    end)

    fx_it("answers every captured HEART_BEAT byte for byte and notifies the group", function()
        local groups = {
            ["heartbeat-java-consumer.jsonl"] = "FxConsumerGroup",
            ["heartbeat-cpp.jsonl"] = "FxCppGroup",
            ["heartbeat-ali-ons.jsonl"] = "GID_FxAli",
            ["heartbeat-java-producer.jsonl"] = false,
        }
        local want_notify = {}
        for _, f in ipairs(fixtures.frames("notify-consumer-ids-changed.jsonl")) do
            want_notify[f.decoded.extFields.consumerGroup] = f.decoded
        end
        for file, group in pairs(groups) do
            local conn, got = java, notified
            if file ~= "heartbeat-java-consumer.jsonl" then
                got = {}
                conn = assert(net.connect(e.addr, { on_request = function(ctx, cmd)
                    got[#got + 1] = cmd
                end }))
            end
            local before = #got
            local p = fixtures.pairs_of(file)[1]
            local _, raw = assert(conn:call_raw(p.req.raw))
            fixtures.same_frame(p.resp.raw, raw, file)
            if group then
                assert.truthy(server.eventually(function() return #got > before end, 2000), file)
                local n = got[#got]
                local w = want_notify[group]
                assert.equal(w.code, n.code)
                assert.equal(w.flag, n.flag)
                assert.same(w.extFields, n.ext)
                assert.is_nil(n.body)
                local body = cjson.decode(p.req.decoded.body_text)
                local r = assert(conn:call({ code = 38, ext = { consumerGroup = group } }))
                assert.equal(0, r.code)
                assert.same({ body.clientID }, cjson.decode(r.body).consumerIdList)
            end
            if conn ~= java then
                conn:close()
            end
        end
    end)

    fx_it("answers the captured GET_CONSUMER_LIST_BY_GROUP byte for byte", function()
        local p = fixtures.pairs_of("consumer-list.jsonl")[1]
        local _, raw = assert(java:call_raw(p.req.raw))
        fixtures.same_frame(p.resp.raw, raw, "consumer-list.jsonl")
    end)

    fx_it("answers the captured offset requests byte for byte", function()
        for _, file in ipairs({ "get-max-offset.jsonl", "get-min-offset-earliest-time.jsonl" }) do
            for _, p in ipairs(fixtures.pairs_of(file)) do
                local r, raw = assert(java:call_raw(p.req.raw))
                if p.req.decoded.code == 32 then
                    -- This store's messages have their own store time.
                    assert.equal(0, r.code)
                    local ts = tonumber(r.ext.timestamp)
                    assert.is_true(ts > core.now_ms() - 600000 and ts <= core.now_ms())
                else
                    fixtures.same_frame(p.resp.raw, raw, file)
                end
            end
        end
        local p = fixtures.pairs_of("search-offset-by-timestamp.jsonl")[1]
        local r = assert(java:call_raw(p.req.raw))
        assert.equal(0, r.code)
        local off = tonumber(r.ext.offset)
        assert.is_true(off >= 0 and off <= 13)
    end)

    fx_it("answers QUERY/UPDATE_CONSUMER_OFFSET as captured (offset 0 for a young queue)", function()
        local q = fixtures.pairs_of("query-consumer-offset.jsonl")
        -- (1) a brand-new group on a queue that starts at 0: offset 0.
        local _, raw = assert(java:call_raw(q[1].req.raw))
        fixtures.same_frame(q[1].resp.raw, raw, "query-consumer-offset.jsonl #1")
        -- Java commits one-way: no reply; the next query sees it.
        local u = fixtures.pairs_of("update-consumer-offset.jsonl")
        assert.equal(2, u[1].req.decoded.flag)
        assert(java:send_raw(u[1].req.raw))
        net.sleep(50)
        _, raw = assert(java:call_raw(q[2].req.raw))
        fixtures.same_frame(q[2].resp.raw, raw, "query-consumer-offset.jsonl #2")
        -- rocketmq-client-cpp and ali-ons commit two-way.
        for i = 2, 3 do
            local conn = assert(net.connect(e.addr))
            _, raw = assert(conn:call_raw(u[i].req.raw))
            fixtures.same_frame(u[i].resp.raw, raw, "update-consumer-offset.jsonl #" .. i)
            conn:close()
        end
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = 14, ext = { consumerGroup = "GID_FxAli", topic = "FxAli", queueId = 0 } }))
        assert.equal("2", r.ext.offset)
        conn:close()
        -- (3), a queue whose first file was deleted (min offset > 0),
        -- needs retention to have run: covered in the pull spec's 21 case.
    end)

    fx_it("answers the captured pulls of the three clients with the captured fields", function()
        local function check(file, p, reply, body_records)
            local want = p.resp.decoded
            assert.equal(want.code, reply.code, file)
            assert.equal(want.remark, reply.remark, file)
            assert.same(want.extFields, reply.ext, file)
            if body_records then
                local msgs = assert(message.decode_records(reply.body))
                assert.equal(body_records, #msgs, file)
            end
        end
        -- rocketmq-client-cpp and ali-ons: FLAG_SUBSCRIPTION, "*".
        for _, file in ipairs({ "pull-cpp.jsonl", "pull-ali-ons.jsonl" }) do
            local p = fixtures.pairs_of(file)[1]
            local conn = assert(net.connect(e.addr))
            local reply = assert(conn:call_raw(p.req.raw))
            check(file, p, reply, 2)
            conn:close()
        end
        -- Java: no FLAG_SUBSCRIPTION; the heartbeat's subscription counts.
        local jp = fixtures.pairs_of("pull-java.jsonl")
        local reply = assert(java:call_raw(jp[1].req.raw))
        check("pull-java.jsonl #1", jp[1], reply, 14)
        -- The next pulls carry a newer subVersion than the heartbeat
        -- replayed above: SUBSCRIPTION_NOT_LATEST until a heartbeat with it.
        local held = edited(jp[2].req.raw, { suspendTimeoutMillis = "600" })
        held.opaque = nil
        local r = assert(java:call(held))
        assert.equal(25, r.code)
        assert.equal("the consumer's subscription not latest", r.remark)
        local hb = cjson.decode(fixtures.pairs_of("heartbeat-java-consumer.jsonl")[1].req.decoded.body_text)
        for _, sd in ipairs(hb.consumerDataSet[1].subscriptionDataSet) do
            if sd.topic == "FxTopic" then sd.subVersion = 1796034608438 end
        end
        r = assert(java:call({ code = 34, body = cjson.encode(hb) }))
        assert.equal(0, r.code)
        -- (2) caught up: held, then 19 OFFSET_OVERFLOW_ONE (hold cut to
        -- 600 ms here), and its commitOffset (5) stored while held.
        local t0 = core.mono_ms()
        r = assert(java:call(held))
        assert.is_true(core.mono_ms() - t0 >= 550)
        local want = jp[2].resp.decoded
        assert.equal(want.code, r.code)
        assert.equal(want.remark, r.remark)
        assert.same(want.extFields, r.ext)
        local q = assert(java:call({ code = 14, ext = { consumerGroup = "FxConsumerGroup", topic = "FxTopic", queueId = 0 } }))
        assert.equal("5", q.ext.offset)
        -- (3) held, woken by a new message: FOUND with it.
        local woken
        net.spawn(function()
            local cmd = edited(jp[3].req.raw, {})
            cmd.opaque = nil
            woken = assert(java:call(cmd, 20000))
        end)
        net.sleep(200)
        assert.is_nil(woken)
        send_to(e.producer, "FxTopic", 3, { body = "new", tags = "TagA" })
        assert.truthy(server.eventually(function() return woken end, 2000))
        local w3 = jp[3].resp.decoded
        assert.equal(w3.code, woken.code)
        assert.equal(w3.remark, woken.remark)
        assert.same(w3.extFields, woken.ext)
        assert.equal(1, #assert(message.decode_records(woken.body)))
    end)

    fx_it("answers the captured UNREGISTER_CLIENT byte for byte; the group is gone", function()
        local p = fixtures.pairs_of("unregister-client.jsonl")[1]
        local _, raw = assert(java:call_raw(p.req.raw))
        fixtures.same_frame(p.resp.raw, raw, "unregister-client.jsonl")
        local r = assert(java:call({ code = 38, ext = { consumerGroup = "FxConsumerGroup" } }))
        assert.equal(1, r.code)
        assert.equal("no consumer for this group, FxConsumerGroup", r.remark)
        -- Without members the group's subscriptions are gone too (24).
        local cmd = edited(fixtures.pairs_of("pull-java.jsonl")[1].req.raw, {})
        cmd.opaque = nil
        r = assert(java:call(cmd))
        assert.equal(24, r.code)
    end)
end)
