-- Request fields validated where they are read (declared headers): a
-- real broker with a real NameServer gets the malformed requests from
-- the issue tracker and answers each with RocketMQ's code and a remark
-- naming the field, never a Lua traceback or a server path; nothing bad
-- is created (no topic with 2.5 or -3 queues, no %RETRY%../../x), the
-- broker stays registered, and extreme offsets cause no overflow (the
-- --asan build aborts on one).
local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local ns = require("support.nsclient")
local message = require("rmq.client.message")
local names = require("rmq.names")

local INT64_MIN, INT64_MAX = "-9223372036854775808", "9223372036854775807"

local function no_internals(r)
    local remark = r.remark or ""
    assert.is_nil(remark:find(".lua", 1, true), remark)
    assert.is_nil(remark:find("traceback", 1, true), remark)
    assert.is_nil(remark:find("/tmp", 1, true), remark)
end

describe("broker request validation", function()
    local n, b, c, nc

    setup(function()
        n = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        b = server.start({
            role = "broker", workers = 2, brokerName = "broker-a",
            storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 1024 * 1024, namesrvAddr = n.addr,
        })
        c = assert(net.connect(b.addr))
        nc = assert(net.connect(n.addr))
    end)

    teardown(function()
        c:close()
        nc:close()
        -- A sanitized server that hit undefined behaviour does not exit 0.
        assert.equal(0, b:stop())
        n:stop()
    end)

    local function call(cmd)
        return assert(c:call(cmd, 10000))
    end

    local function send(over, code)
        local cmd = rq.send({ group = "FxValGroup", topic = "FxValTopic", props = "TAGS\1TagV", ext = over,
                              body = "validate me" })
        cmd.code = code or 310
        return call(cmd)
    end

    local function send_v1(over)
        local ext = { producerGroup = "FxValGroup", topic = "FxValTopic", defaultTopic = "TBW102",
                      defaultTopicQueueNums = "4", queueId = "0", sysFlag = "0",
                      bornTimestamp = tostring(core.now_ms()), flag = "0", properties = "TAGS\1TagV",
                      reconsumeTimes = "0", unitMode = "false", batch = "false" }
        for k, v in pairs(over or {}) do
            ext[k] = v or nil
        end
        return call({ code = 10, ext = ext, body = "validate me" })
    end

    local function topic_table()
        local r = call({ code = 21 })
        assert.equal(0, r.code)
        return cjson.decode(r.body).topicConfigTable
    end

    local function routed(topic)
        return server.eventually(function()
            return ns.queue(ns.route(nc, topic), "broker-a")
        end, 10000)
    end

    it("refuses defaultTopicQueueNums 2.5 and keeps the broker registered", function()
        local r = send({ b = "FxHalfQueues", d = "2.5" })
        assert.equal(1, r.code)
        assert.equal('the custom field <d> (defaultTopicQueueNums) is not an Integer: "2.5"', r.remark)
        r = send_v1({ topic = "FxHalfQueues", defaultTopicQueueNums = "2.5" })
        assert.equal(1, r.code)
        assert.equal('the custom field <defaultTopicQueueNums> is not an Integer: "2.5"', r.remark)
        assert.is_nil(topic_table().FxHalfQueues)
        -- Registrations still go through: a topic created now is routed,
        -- and so is the template.
        assert.equal(0, send({ b = "FxAfterHalf" }).code)
        local qd = routed("FxAfterHalf")
        assert.truthy(qd, "the broker dropped out of the NameServer")
        assert.equal(4, qd.writeQueueNums)
        assert.truthy(ns.queue(ns.route(nc, "TBW102"), "broker-a"))
        assert.is_nil(ns.route(nc, "FxHalfQueues"))
    end)

    it("never creates a topic with fewer than one queue", function()
        for _, d in ipairs({ "-3", "0", "-2147483648" }) do
            local r = send({ b = "FxNoQueues", d = d })
            assert.equal(1, r.code, d)
            assert.equal(('the custom field <d> (defaultTopicQueueNums) must be >= 1 to create topic[FxNoQueues] '
                .. 'from TBW102 (%d write queues): "%s"'):format(topic_table().TBW102.writeQueueNums, d), r.remark)
        end
        local r = send_v1({ topic = "FxNoQueues", defaultTopicQueueNums = "-3" })
        assert.equal(1, r.code)
        assert.matches("the custom field <defaultTopicQueueNums> must be >= 1", r.remark, 1, true)
        assert.is_nil(topic_table().FxNoQueues)
        assert.is_nil(ns.route(nc, "FxNoQueues"))
        -- An existing topic does not need it (Java reads it only to create).
        assert.equal(0, send({ b = "FxValTopic" }).code)
        assert.equal(0, send({ b = "FxValTopic", d = "-3" }).code)
    end)

    it("caps defaultTopicQueueNums at the template's write queues", function()
        local tbw = topic_table().TBW102
        assert.equal(0, send({ b = "FxManyQueues", d = "1000" }).code)
        local cfg = topic_table().FxManyQueues
        assert.equal(tbw.writeQueueNums, cfg.writeQueueNums)
        assert.equal(tbw.writeQueueNums, cfg.readQueueNums)
    end)

    it("takes queueId strictly, negative meaning any queue", function()
        assert.equal(0, send({ b = "FxQid" }).code)
        for _, v in ipairs({ "1.5", "0x1", " 1", "1e0", "", "2147483648" }) do
            local r = send({ b = "FxQid", e = v })
            assert.equal(1, r.code, v)
            assert.equal(('the custom field <e> (queueId) is not an Integer: "%s"'):format(v), r.remark)
            no_internals(r)
        end
        local r = send_v1({ topic = "FxQid", queueId = "1.5" })
        assert.equal(1, r.code)
        assert.equal('the custom field <queueId> is not an Integer: "1.5"', r.remark)
        no_internals(r)
        r = send({ b = "FxQid", e = false })
        assert.equal(1, r.code)
        assert.equal("the custom field <e> is null", r.remark)
        r = send({ b = "FxQid", e = "4" })
        assert.equal(1, r.code)
        assert.matches("queueId[4] is illegal", r.remark, 1, true)
        for _ = 1, 8 do
            r = send({ b = "FxQid", e = "-1" })
            assert.equal(0, r.code)
            local q = tonumber(r.ext.queueId)
            assert.is_true(q >= 0 and q < 4, r.ext.queueId)
        end
        -- The other numbers too.
        r = send({ b = "FxQid", g = "17e11" })
        assert.equal('the custom field <g> (bornTimestamp) is not a Long: "17e11"', r.remark)
        r = send({ b = "FxQid", f = "0x0" })
        assert.equal('the custom field <f> (sysFlag) is not an Integer: "0x0"', r.remark)
        r = send({ b = "FxQid", j = "1.0" })
        assert.equal('the custom field <j> (reconsumeTimes) is not an Integer: "1.0"', r.remark)
    end)

    it("refuses a send-back for an illegal group name and creates nothing for it", function()
        local r = send({ b = "FxBackTopic" })
        assert.equal(0, r.code)
        local _, phy = message.decode_offset_msg_id(r.ext.msgId)
        for _, level in ipairs({ "1", "0", "-1" }) do
            r = call({ code = 36, ext = { offset = tostring(phy), group = "../../x", delayLevel = level,
                                          originTopic = "FxBackTopic", maxReconsumeTimes = "16" } })
            assert.equal(1, r.code)
            assert.equal(names.group("../../x"), r.remark)
        end
        r = call({ code = 36, ext = { offset = tostring(phy), group = "", delayLevel = "1" } })
        assert.equal("the specified group is blank", r.remark)
        r = call({ code = 36, ext = { offset = "-1", group = "FxBackGroup", delayLevel = "1" } })
        assert.equal('the custom field <offset> must be >= 0: "-1"', r.remark)
        r = call({ code = 36, ext = { offset = "1.5", group = "FxBackGroup", delayLevel = "1" } })
        assert.equal('the custom field <offset> is not a Long: "1.5"', r.remark)
        r = call({ code = 36, ext = { offset = INT64_MAX, group = "FxBackGroup", delayLevel = "1" } })
        assert.equal(1, r.code)
        assert.equal("look message by offset failed, " .. INT64_MAX, r.remark)
        r = call({ code = 36, ext = { offset = tostring(phy), group = "FxBackGroup", delayLevel = "one" } })
        assert.equal('the custom field <delayLevel> is not an Integer: "one"', r.remark)
        -- A legal group whose retry topic would be too long.
        r = call({ code = 36, ext = { offset = tostring(phy), group = ("g"):rep(125), delayLevel = "1" } })
        assert.equal(1, r.code)
        assert.matches(names.TOPIC_LONG, r.remark, 1, true)
        local t = topic_table()
        for name in pairs(t) do
            assert.is_nil(name:find("/", 1, true), name)
            assert.is_nil(name:find("ggggg", 1, true), name)
        end
        local groups = cjson.decode(call({ code = 201 }).body).subscriptionGroupTable
        assert.is_nil(groups["../../x"])
        -- A good one still works.
        r = call({ code = 36, ext = { offset = tostring(phy), group = "FxBackGroup", delayLevel = "1" } })
        assert.equal(0, r.code, r.remark)
    end)

    it("answers pulls at the extremes of queueOffset without overflow", function()
        assert.equal(0, send({ b = "FxPullEdge" }).code)
        local function pull(over)
            return call(rq.pull({ group = "FxPullEdgeGroup", topic = "FxPullEdge", ext = over }))
        end
        local r = pull({ queueOffset = INT64_MIN })
        assert.equal(21, r.code)
        assert.equal("OFFSET_TOO_SMALL", r.remark)
        assert.equal("0", r.ext.nextBeginOffset)
        r = pull({ queueOffset = "-1" })
        assert.equal(21, r.code)
        r = pull({ queueOffset = INT64_MAX })
        assert.equal(21, r.code)
        assert.equal("OFFSET_OVERFLOW_BADLY", r.remark)
        r = pull({ queueOffset = INT64_MIN, queueId = "3" })   -- an empty queue
        assert.equal(21, r.code)
        r = pull({ queueOffset = "9223372036854775808" })
        assert.equal(1, r.code)
        assert.equal('the custom field <queueOffset> is not a Long: "9223372036854775808"', r.remark)
        r = pull({ queueId = "0x0" })
        assert.equal('the custom field <queueId> is not an Integer: "0x0"', r.remark)
        r = pull({ maxMsgNums = "32.0" })
        assert.equal('the custom field <maxMsgNums> is not an Integer: "32.0"', r.remark)
        r = pull({ consumerGroup = "../../x" })
        assert.equal(names.group("../../x"), r.remark)
        r = pull({ topic = "a/b" })
        assert.equal(names.TOPIC_ILLEGAL, r.remark)
        r = pull({ commitOffset = INT64_MIN, sysFlag = "5" })   -- commit + subscription
        assert.equal(0, r.code)
        -- The other offset readers.
        for _, off in ipairs({ INT64_MIN, INT64_MAX, "-1" }) do
            r = call({ code = 33, ext = { offset = off } })
            assert.equal(1, r.code)
            assert.equal("can not find message by the offset, " .. off, r.remark)
        end
        r = call({ code = 33, ext = { offset = "1.5" } })
        assert.equal('the custom field <offset> is not a Long: "1.5"', r.remark)
        for _, ts in ipairs({ INT64_MIN, INT64_MAX }) do
            r = call({ code = 29, ext = { topic = "FxPullEdge", queueId = "0", timestamp = ts } })
            assert.equal(0, r.code)
        end
        r = call({ code = 12, ext = { topic = "FxPullEdge", key = "k", maxNum = "32", beginTimestamp = INT64_MIN,
                                      endTimestamp = INT64_MAX } })
        assert.equal(22, r.code)
        r = pull({})
        assert.equal(0, r.code)
        assert.equal("FOUND", r.remark)
    end)

    it("validates offset and lock requests by the same rules", function()
        local R = { queueId = "0", topic = "FxPullEdge", consumerGroup = "FxOffGroup" }
        local function ext(over)
            local t = {}
            for k, v in pairs(R) do t[k] = v end
            for k, v in pairs(over) do t[k] = v or nil end
            return t
        end
        local r = call({ code = 14, ext = ext({ queueId = "1.5" }) })
        assert.equal('the custom field <queueId> is not an Integer: "1.5"', r.remark)
        r = call({ code = 14, ext = ext({ queueId = "-1" }) })
        assert.equal('the custom field <queueId> must be >= 0: "-1"', r.remark)
        r = call({ code = 14, ext = ext({ consumerGroup = "a b" }) })
        assert.equal(names.group("a b"), r.remark)
        r = call({ code = 15, ext = ext({ commitOffset = "1e3" }) })
        assert.equal('the custom field <commitOffset> is not a Long: "1e3"', r.remark)
        r = call({ code = 15, ext = ext({}) })
        assert.equal("the custom field <commitOffset> is null", r.remark)
        assert.equal(0, call({ code = 15, ext = ext({ commitOffset = "7" }) }).code)
        -- Offsets only for topics and queues the broker has: a peer cannot
        -- fill the offset table (and consumerOffset.json) with names it
        -- makes up.
        for i = 1, 200 do
            r = call({ code = 15, ext = ext({ topic = "NoSuchTopic" .. i, commitOffset = "1" }) })
            assert.equal(17, r.code)
        end
        r = call({ code = 15, ext = ext({ queueId = "4096", commitOffset = "1" }) })
        assert.equal(1, r.code)
        assert.matches("QueueId%[4096%]", r.remark)
        local all = require("rmq.fastjson").decode(call({ code = 43 }).body).offsetTable
        for k in pairs(all) do
            assert.falsy(k:find("NoSuchTopic", 1, true), k)
        end
        r = call({ code = 14, ext = ext({}) })
        assert.equal(0, r.code)
        assert.equal("7", r.ext.offset)
        r = call({ code = 30, ext = { topic = "a/b", queueId = "0" } })
        assert.equal(names.TOPIC_ILLEGAL, r.remark)
        r = call({ code = 31, ext = { topic = "FxPullEdge", queueId = "2147483648" } })
        assert.equal('the custom field <queueId> is not an Integer: "2147483648"', r.remark)
        assert.equal("1", call({ code = 30, ext = { topic = "FxPullEdge", queueId = "0" } }).ext.offset)
        local function lock(group, mq)
            return call({ code = 41, body = cjson.encode({ consumerGroup = group, clientId = "c1",
                                                           mqSet = { mq } }) })
        end
        local mq = { topic = "FxPullEdge", brokerName = "broker-a", queueId = 0 }
        r = lock("../../x", mq)
        assert.equal(1, r.code)
        assert.equal("LOCK_BATCH_MQ: consumerGroup: " .. names.group("../../x"), r.remark)
        r = lock("FxLockGroup", { topic = "a/b", brokerName = "broker-a", queueId = 0 })
        assert.equal("LOCK_BATCH_MQ: mqSet[1].topic: " .. names.TOPIC_ILLEGAL, r.remark)
        r = lock("FxLockGroup", { topic = "FxPullEdge", brokerName = "broker-a", queueId = 1.5 })
        assert.equal("LOCK_BATCH_MQ: mqSet[1].queueId is not a queue id: 1.5", r.remark)
        r = lock("FxLockGroup", mq)
        assert.equal(0, r.code)
        assert.equal(1, #cjson.decode(r.body).lockOKMQSet)
    end)
end)
