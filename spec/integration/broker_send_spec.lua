-- The broker's send path with real processes: what real clients sent to
-- a 4.9.8 broker (the captured frames) gets the answers it got, and every
-- refusal has RocketMQ's code while the broker keeps serving.
local net = require("rmq.net")
local codec = require("rmq.codec")
local server = require("support.server")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)
local consumer = require("rmq.client.consumer")

local function broker(extra)
    local conf = {
        role = "broker", workers = 2, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = "127.0.0.1:1",  -- no NameServer: sends go direct
    }
    for k, v in pairs(extra or {}) do conf[k] = v end
    return server.start(conf)
end

local function send(c, topic, opts)
    opts = opts or {}
    return assert(c:call({
        code = 310,
        ext = { a = "FxGroup", b = topic, c = opts.template or "TBW102", d = 4, e = opts.queue or 0,
                f = 0, g = 1796034593124, h = 0, i = opts.props or "WAIT\1true\2TAGS\1TagA",
                j = 0, k = false, m = false },
        body = opts.body or "hello",
    }))
end

describe("broker send", function()
    local s, c

    setup(function()
        s = broker({ maxMessageSize = 64 * 1024 })
        c = assert(net.connect(s.addr))
    end)

    teardown(function()
        c:close()
        s:stop()
    end)

    fx_it("answers the captured client sends as the 4.9.8 broker did", function()
        local files = { "send-java.jsonl", "send-cpp.jsonl", "send-ali-ons.jsonl", "send-v1-java.jsonl",
                        "send-java-rocketmq-header.jsonl", "send-batch-java.jsonl" }
        local n = 0
        for _, name in ipairs(files) do
            local conn = assert(net.connect(s.addr))
            local replies = {}
            for _, f in ipairs(fixtures.frames(name)) do
                if f.dir == "s2c" and f.decoded.flag % 2 == 1 then
                    replies[f.decoded.opaque] = f.decoded
                end
            end
            for _, f in ipairs(fixtures.frames(name)) do
                local d = f.decoded
                if f.dir == "c2s" and (d.code == 310 or d.code == 10 or d.code == 320) then
                    local req = assert(codec.decode(f.raw))
                    req.opaque = nil
                    local r = assert(conn:call(req))
                    local want = replies[d.opaque]
                    assert.equal(want.code, r.code, name .. ": " .. tostring(r.remark))
                    assert.equal(want.serializeType, r.serialize, name)
                    -- Same reply fields; ids and offsets are this store's.
                    for k in pairs(want.extFields) do
                        assert.truthy(r.ext[k], name .. " reply lacks " .. k)
                    end
                    assert.equal(want.extFields.queueId, r.ext.queueId, name)
                    assert.equal(want.extFields.MSG_REGION, r.ext.MSG_REGION, name)
                    local ids = select(2, want.extFields.msgId:gsub(",", ",")) + 1
                    assert.equal(ids, select(2, r.ext.msgId:gsub(",", ",")) + 1, name)
                    assert.matches("^[%x,]+$", r.ext.msgId)
                    n = n + 1
                end
            end
            conn:close()
        end
        assert.is_true(n >= 10)
    end)

    it("stores what a consumer reads back: body, tags, keys, CLUSTER added, WAIT dropped", function()
        local body = "stored body \0 with bytes \255"
        local r = send(c, "FxStoreTopic", { body = body, queue = 2,
            props = "KEYS\1k1\2UNIQ_KEY\1ABCDEF\2WAIT\1true\2TAGS\1TagZ\2color\1red" })
        assert.equal(0, r.code)
        local cons = consumer.new({ namesrvAddr = "127.0.0.1:1", consumerGroup = "FxReader" })
        -- No NameServer: point the consumer at the broker by hand.
        cons.routes.FxStoreTopic = { fetched = math.huge, route = { brokerDatas = {
            { brokerName = "broker-a", brokerAddrs = { ["0"] = s.addr } } } } }
        local p = assert(cons:pull({ topic = "FxStoreTopic", brokerName = "broker-a", queueId = 2 },
                                   tonumber(r.ext.queueOffset), 1))
        assert.equal("FOUND", p.status)
        local m = p.messages[1]
        assert.equal(body, m.body)
        assert.equal("TagZ", m.tags)
        assert.equal("k1", m.keys)
        assert.equal("red", m.properties.color)
        assert.equal("DefaultCluster", m.properties.CLUSTER)
        assert.is_nil(m.properties.WAIT)
        assert.equal("ABCDEF", m.msgId)
        assert.equal(r.ext.msgId, m.offsetMsgId)
        -- The offset message id and STOREHOST name this broker's address.
        assert.equal(s.addr, m.storeHost)
        local port = tonumber(s.addr:match(":(%d+)$"))
        assert.equal(("7F000001%08X"):format(port), r.ext.msgId:sub(1, 16))
    end)

    it("holds a delayed message until its delay level is due", function()
        local cons = consumer.new({ namesrvAddr = "127.0.0.1:1", consumerGroup = "FxDelayReader" })
        cons.routes.FxDelayTopic = { fetched = math.huge, route = { brokerDatas = {
            { brokerName = "broker-a", brokerAddrs = { ["0"] = s.addr } } } } }
        local mq = { topic = "FxDelayTopic", brokerName = "broker-a", queueId = 1 }
        local t0 = require("rmq.core").mono_ms()
        -- Level 1 is 1 s (messageDelayLevel "1s 5s 10s ...").
        local r = send(c, "FxDelayTopic", { queue = 1, body = "later", props = "DELAY\0011\2TAGS\1TagD" })
        assert.equal(0, r.code)
        assert.equal("1", r.ext.queueId)
        local p = assert(cons:pull(mq, 0, 1))
        assert.equal("NO_NEW_MSG", p.status)
        local got = server.eventually(function()
            local q = assert(cons:pull(mq, 0, 1))
            return q.status == "FOUND" and q.messages[1]
        end, 5000)
        assert.truthy(got, "the delayed message never arrived")
        local waited = require("rmq.core").mono_ms() - t0
        assert.is_true(waited >= 900, "delivered after " .. waited .. " ms")
        assert.equal("later", got.body)
        assert.equal("TagD", got.tags)
    end)

    it("refuses an illegal topic name with SYSTEM_ERROR", function()
        local r = send(c, "bad topic!")
        assert.equal(1, r.code)
        assert.matches("illegal characters", r.remark)
    end)

    it("refuses topics clients may not send to with NO_PERMISSION", function()
        local r = send(c, "SCHEDULE_TOPIC_XXXX")
        assert.equal(16, r.code)
        assert.matches("forbidden", r.remark)
    end)

    it("refuses a queue id beyond the topic's queues", function()
        assert.equal(0, send(c, "FxQueueTopic").code)
        local r = send(c, "FxQueueTopic", { queue = 99 })
        assert.equal(1, r.code)
        assert.matches("queueId%[99%] is illegal", r.remark)
    end)

    it("applies a topic's new permission and queue count to the next send after many", function()
        -- A worker keeps the config of the topic it last sent to while the
        -- topic table does not change; the update comes through another
        -- connection (another worker, or the same one).
        for _ = 1, 5 do
            assert.equal(0, send(c, "FxChangeTopic", { queue = 3 }).code)
        end
        local admin = assert(net.connect(s.addr))
        local function update(o)
            local ext = { topic = "FxChangeTopic", defaultTopic = "TBW102", readQueueNums = "4",
                          writeQueueNums = "4", perm = "6", topicFilterType = "SINGLE_TAG",
                          topicSysFlag = "0", order = "false" }
            for k, v in pairs(o) do ext[k] = v end
            local r = assert(admin:call({ code = 17, ext = ext }))
            assert.equal(0, r.code, r.remark)
        end
        update({ perm = "4" })
        local r = send(c, "FxChangeTopic", { queue = 3 })
        assert.equal(16, r.code)
        assert.matches("the topic[FxChangeTopic] sending message is forbidden", r.remark, 1, true)
        update({ readQueueNums = "2", writeQueueNums = "2" })
        r = send(c, "FxChangeTopic", { queue = 3 })
        assert.equal(1, r.code)
        assert.matches("queueId[3] is illegal", r.remark, 1, true)
        assert.equal(0, send(c, "FxChangeTopic", { queue = 1 }).code)
        admin:close()
    end)

    it("refuses a body over maxMessageSize with MESSAGE_ILLEGAL", function()
        local r = send(c, "FxBigTopic", { body = string.rep("x", 64 * 1024 + 1) })
        assert.equal(13, r.code)
        assert.equal(0, send(c, "FxBigTopic", { body = string.rep("x", 1000) }).code)
    end)

    it("refuses a template that cannot be inherited: TOPIC_NOT_EXIST", function()
        local r = send(c, "FxNoSuchTopic", { template = "SELF_TEST_TOPIC" })
        assert.equal(17, r.code)
        assert.matches("topic%[FxNoSuchTopic%] not exist, apply first please!", r.remark)
    end)

    it("keeps serving after every refusal", function()
        assert.equal(0, send(c, "FxAfterTopic").code)
    end)
end)

describe("broker send, configured refusals", function()
    it("refuses unknown topics when autoCreateTopicEnable is off", function()
        local s = broker({ autoCreateTopicEnable = false })
        local c = assert(net.connect(s.addr))
        local r = send(c, "FxAutoOff")
        assert.equal(17, r.code)
        assert.equal(0, send(c, "BenchmarkTest").code)  -- a system topic exists
        c:close()
        assert.equal(0, s:stop())
    end)

    it("a slave refuses writes with SERVICE_NOT_AVAILABLE", function()
        local s = broker({ brokerRole = "SLAVE", brokerId = 1 })
        local c = assert(net.connect(s.addr))
        local r = send(c, "BenchmarkTest")
        assert.equal(14, r.code)
        c:close()
        s:stop()
    end)

    it("a broker without write permission refuses with NO_PERMISSION", function()
        local s = broker({ brokerPermission = 4 })
        local c = assert(net.connect(s.addr))
        assert.equal(16, send(c, "BenchmarkTest").code)
        c:close()
        s:stop()
    end)

    it("serves sends on the VIP port too", function()
        local s = broker()
        local c = assert(net.connect(s.vip_addr))
        assert.equal(0, send(c, "BenchmarkTest").code)
        c:close()
        s:stop()
    end)
end)
