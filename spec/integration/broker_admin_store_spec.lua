-- The store and statistics requests of mqadmin's topicStatus,
-- brokerConsumeStats, statsAll, queryCq, deleteExpiredCommitLog,
-- cleanExpiredCQ, cleanUnusedTopic, getBrokerConfig, exportConfigs and
-- brokerStatus (rmq.broker.admin_store), against a real broker: every
-- reply decoded and checked against what was sent and committed.
local net = require("rmq.net")
local core = require("rmq.core")
local cjson = require("cjson")
local message = require("rmq.message")
local server = require("support.server")
local rq = require("support.requests")
local admin = require("support.admin")

local BROKER = "broker-a"

local call = admin.call
local create_topic = admin.create_topic

-- fastjson writes Map<MessageQueue, V> with the MessageQueue objects as
-- keys; the keys are checked here and turned into "topic/qid" strings.
local function decode_mq_map(body)
    local bad
    local text = body:gsub('{"brokerName":"([^"]*)","queueId":(%d+),"topic":"([^"]*)"}:', function(b, q, t)
        if b ~= BROKER then
            bad = b
        end
        return '"' .. t .. "/" .. q .. '":'
    end)
    assert.is_nil(bad, "brokerName in a MessageQueue key")
    return cjson.decode(text)
end

local function send(addr, topic, qid, body, tags)
    local r = call(addr, rq.send({ group = "PG", topic = topic, qid = qid, tags = tags or "TagA",
                                   body = body or "hello" }))
    assert.equal(0, r.code, r.remark)
    return r
end

local function commit(addr, group, topic, qid, offset)
    local r = call(addr, { code = 15, ext = { consumerGroup = group, topic = topic,
                                               queueId = tostring(qid), commitOffset = tostring(offset) } })
    assert.equal(0, r.code, r.remark)
end

local function stats(addr, name, key)
    return call(addr, { code = 315, ext = { statsName = name, statsKey = key } })
end

local function runtime(addr)
    return cjson.decode(call(addr, { code = 28 }).body).table
end

local function props(body)
    local t, n = {}, 0
    for k, v in body:gmatch("([^=\n]+)=([^\n]*)\n") do
        t[k] = v
        n = n + 1
    end
    return t, n
end

describe("broker store admin requests", function()
    local b, store

    setup(function()
        store = server.tmpdir() .. "/store"
        b = server.start({ role = "broker", workers = 2, brokerName = BROKER,
                           storePathRootDir = store,
                           mappedFileSizeCommitLog = 64 * 1024, mappedFileSizeConsumeQueue = 4 * 20,
                           namesrvAddr = "127.0.0.1:1", cleanUnusedTopicIdleTime = 0,
                           -- statistics sampled every 2 s, not 10 (the minute window: 7 samples, 14 s)
                           brokerStatsSampleMillis = 2000 })
    end)

    teardown(function()
        b:stop()
    end)

    it("answers GET_TOPIC_STATS_INFO with each queue's offsets and last store time", function()
        create_topic(b.addr, "StatsT", 4)
        local t0 = core.now_ms()
        for _ = 1, 3 do
            send(b.addr, "StatsT", 0)
        end
        send(b.addr, "StatsT", 2)
        send(b.addr, "StatsT", 2)
        local t1 = core.now_ms()
        local r = call(b.addr, { code = 202, ext = { topic = "StatsT" } })
        assert.equal(0, r.code, r.remark)
        local tab = decode_mq_map(r.body).offsetTable
        local expect = { [0] = 3, [1] = 0, [2] = 2, [3] = 0 }
        for q = 0, 3 do
            local o = tab["StatsT/" .. q]
            assert.is_table(o, "queue " .. q)
            assert.equal(0, o.minOffset)
            assert.equal(expect[q], o.maxOffset)
            if expect[q] > 0 then
                assert.is_true(o.lastUpdateTimestamp >= t0 - 1 and o.lastUpdateTimestamp <= t1 + 1)
            else
                assert.equal(0, o.lastUpdateTimestamp)
            end
        end
        r = call(b.addr, { code = 202, ext = { topic = "NoSuchTopic" } })
        assert.equal(17, r.code)
        assert.equal("topic[NoSuchTopic] not exist", r.remark)
        r = call(b.addr, { code = 202, ext = {} })
        assert.equal(1, r.code)
        assert.equal("the custom field <topic> is null", r.remark)
    end)

    it("answers QUERY_CONSUME_QUEUE with the consume queue unit of a sent message", function()
        create_topic(b.addr, "CqT", 2)
        local r1 = send(b.addr, "CqT", 1, "first", "TagA")
        local r2 = send(b.addr, "CqT", 1, ("x"):rep(100), "TagB")
        local r = call(b.addr, { code = 321, ext = { topic = "CqT", queueId = "1", index = "0", count = "10" } })
        assert.equal(0, r.code, r.remark)
        local body = cjson.decode(r.body)
        assert.equal(0, body.minQueueIndex)
        assert.equal(2, body.maxQueueIndex)
        assert.equal(2, #body.queueData)
        for i, sent in ipairs({ { r1, "TagA" }, { r2, "TagB" } }) do
            local u = body.queueData[i]
            -- the offset message id of the send reply carries the commit log offset
            local phy = tonumber(sent[1].ext.msgId:sub(17, 32), 16)
            assert.equal(phy, u.physicOffset)
            assert.equal(message.java_hash(sent[2]), u.tagsCode)
            assert.is_false(u.eval)
            -- the record at that offset is the message, of that size
            local rec = assert(message.decode_record(
                call(b.addr, { code = 33, ext = { offset = tostring(phy) } }).body))
            assert.equal(u.physicSize, rec.storeSize)
            assert.equal("CqT", rec.topic)
        end
        assert.equal(1, #cjson.decode(call(b.addr, { code = 321, ext = {
            topic = "CqT", queueId = "1", index = "1", count = "10" } }).body).queueData)
        -- a group that is not online
        body = cjson.decode(call(b.addr, { code = 321, ext = {
            topic = "CqT", queueId = "1", index = "0", count = "1", consumerGroup = "CqG" } }).body)
        assert.equal("CqG@CqT is not online!", body.filterData)
        assert.equal(1, #body.queueData)
        -- online: its subscription
        local c = assert(net.connect(b.addr))
        local hb = assert(c:call({ code = 34, body = cjson.encode({
            clientID = "cq-client", consumerDataSet = { {
                groupName = "CqG", consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
                consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
                subscriptionDataSet = { { topic = "CqT", subString = "TagA", tagsSet = { "TagA" },
                                          codeSet = {}, subVersion = 1, expressionType = "TAG",
                                          classFilterMode = false } } } } }) }))
        assert.equal(0, hb.code, hb.remark)
        body = cjson.decode(call(b.addr, { code = 321, ext = {
            topic = "CqT", queueId = "1", index = "0", count = "1", consumerGroup = "CqG" } }).body)
        c:close()
        assert.equal("null", body.filterData)
        assert.equal("CqT", body.subscriptionData.topic)
        assert.equal("TagA", body.subscriptionData.subString)
        -- no such queue; an index past the end
        local r3 = call(b.addr, { code = 321, ext = { topic = "CqT", queueId = "7", index = "0", count = "1" } })
        assert.equal(1, r3.code)
        assert.equal("7@CqT is not exist!", r3.remark)
        r3 = call(b.addr, { code = 321, ext = { topic = "CqT", queueId = "1", index = "9", count = "1" } })
        assert.equal(0, r3.code)
        assert.equal("Index 9 of 1@CqT is not exist!", r3.remark)
        r3 = call(b.addr, { code = 321, ext = { topic = "CqT", queueId = "x", index = "0", count = "1" } })
        assert.equal(1, r3.code)
    end)

    it("answers VIEW_BROKER_STATS_DATA with the messages put and consumed", function()
        create_topic(b.addr, "PutT", 2)
        for i = 1, 4 do
            send(b.addr, "PutT", i % 2)
        end
        local r = stats(b.addr, "TOPIC_PUT_NUMS", "PutT")
        assert.equal(0, r.code, r.remark)
        local d = cjson.decode(r.body)
        assert.equal(4, d.statsMinute.sum)
        assert.equal(4, d.statsHour.sum)
        assert.equal(4, d.statsDay.sum)
        assert.is_true(d.statsMinute.tps > 0)
        -- a group's consumed messages: what it committed
        commit(b.addr, "PutG", "PutT", 0, 2)
        commit(b.addr, "PutG", "PutT", 1, 1)
        d = cjson.decode(stats(b.addr, "GROUP_GET_NUMS", "PutT@PutG").body)
        assert.equal(3, d.statsMinute.sum)
        assert.equal(3, d.statsDay.sum)
        r = stats(b.addr, "TOPIC_PUT_NUMS", "NoSuchTopic")
        assert.equal(1, r.code)
        assert.equal("The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist", r.remark)
        r = call(b.addr, { code = 315, ext = { statsName = "TOPIC_PUT_NUMS" } })
        assert.equal(1, r.code)
        assert.equal("the custom field <statsKey> is null", r.remark)
        -- the whole broker
        d = cjson.decode(stats(b.addr, "BROKER_PUT_NUMS", "DefaultCluster").body)
        assert.is_true(d.statsDay.sum >= 4)
    end)

    it("keeps the messages of a new topic in every window across the broker's samples", function()
        create_topic(b.addr, "LateT", 1)
        for _ = 1, 3 do
            send(b.addr, "LateT", 0)
        end
        commit(b.addr, "LateG", "LateT", 0, 2)
        -- At least one sample taken after the sends (brokerStatsSampledAt).
        local sent = core.now_ms()
        assert.truthy(server.eventually(function()
            local info = cjson.decode(call(b.addr, { code = 28 }).body).table
            return tonumber(info.brokerStatsSampledAt) > sent
        end, 30000))
        send(b.addr, "LateT", 0)
        send(b.addr, "LateT", 0)
        local d = cjson.decode(stats(b.addr, "TOPIC_PUT_NUMS", "LateT").body)
        for _, w in ipairs({ "statsMinute", "statsHour", "statsDay" }) do
            assert.equal(5, d[w].sum, w)
            assert.is_true(d[w].tps > 0, w)
        end
        d = cjson.decode(stats(b.addr, "GROUP_GET_NUMS", "LateT@LateG").body)
        assert.same({ 2, 2, 2 }, { d.statsMinute.sum, d.statsHour.sum, d.statsDay.sum })
    end)

    it("answers GET_BROKER_CONSUME_STATS with every group's lag", function()
        create_topic(b.addr, "LagT", 2)
        local r = call(b.addr, { code = 200, body = cjson.encode({ groupName = "LagG", consumeEnable = true,
            consumeFromMinEnable = true, consumeBroadcastEnable = true, retryQueueNums = 1, retryMaxTimes = 16,
            brokerId = 0, whichBrokerWhenConsumeSlowly = 1, notifyConsumerIdsChangedEnable = true }) })
        assert.equal(0, r.code, r.remark)
        for _ = 1, 5 do
            send(b.addr, "LagT", 0)
        end
        send(b.addr, "LagT", 1)
        commit(b.addr, "LagG", "LagT", 0, 2)
        r = call(b.addr, { code = 317, ext = { isOrder = "false" } })
        assert.equal(0, r.code, r.remark)
        local body = decode_mq_map(r.body)
        assert.equal(b.addr, body.brokerAddr)
        local found
        for _, m in ipairs(body.consumeStatsList) do
            if m.LagG then
                found = m.LagG
            end
        end
        assert.is_table(found)
        assert.equal(1, #found)
        local q0, q1 = found[1].offsetTable["LagT/0"], found[1].offsetTable["LagT/1"]
        assert.same({ 5, 2 }, { q0.brokerOffset, q0.consumerOffset })
        assert.same({ 1, 0, 0 }, { q1.brokerOffset, q1.consumerOffset, q1.lastTimestamp })
        assert.is_true(q0.lastTimestamp > 0)
        -- the broker's total: this group's 3 + 1 and the other groups'
        local total = 0
        for _, m in ipairs(body.consumeStatsList) do
            for _, list in pairs(m) do
                for _, cs in ipairs(list) do
                    for _, w in pairs(cs.offsetTable) do
                        total = total + w.brokerOffset - w.consumerOffset
                    end
                end
            end
        end
        assert.equal(total, body.totalDiff)
        r = call(b.addr, { code = 317, ext = { isOrder = "true" } })
        assert.equal(0, r.code)
        assert.equal(0, decode_mq_map(r.body).totalDiff)   -- no order topic
        r = call(b.addr, { code = 317, ext = {} })
        assert.equal("the custom field <isOrder> is null", r.remark)
    end)

    it("answers GET_BROKER_CONFIG with 4.9.8's key set", function()
        local r = call(b.addr, { code = 26 })
        assert.equal(0, r.code)
        local t, n = props(r.body)
        assert.is_true(n >= 175, "keys: " .. n)
        -- rmq's values where it has the key
        assert.equal(BROKER, t.brokerName)
        assert.equal(b.addr:match(":(%d+)$"), t.listenPort)
        assert.equal("65536", t.mappedFileSizeCommitLog)
        assert.equal("ASYNC_MASTER", t.brokerRole)
        -- 4.9.8's fixed defaults where rmq does not implement the key
        -- (exportConfigs reads these three)
        assert.equal("0", t.filterServerNums)
        assert.equal("true", t.traceOn)
        assert.equal("false", t.useTLS)
        assert.equal("16", t.adminBrokerThreadPoolNums)
        assert.equal("80", t.mappedFileSizeConsumeQueue)
    end)

    it("reports the disks in GET_BROKER_RUNTIME_INFO", function()
        local t = runtime(b.addr)
        for _, k in ipairs({ "commitLogDiskRatio", "consumeQueueDiskRatio" }) do
            local v = tonumber(t[k])
            assert.is_number(v, k)
            assert.is_true(v > 0 and v <= 1, k .. " = " .. t[k])
        end
        assert.matches("^Total : [%d.]+ [KMGTPE]?i?B, Free : [%d.]+ [KMGTPE]?i?B%.$", t.commitLogDirCapacity)
        assert.matches("^%d[%d.]* [KMGTPE]?i?B$", t.remainHowManyDataToFlush)
    end)

    it("answers GET_SYSTEM_TOPIC_LIST_FROM_BROKER, CLEAN_EXPIRED_CONSUMEQUEUE and CLEAN_UNUSED_TOPIC", function()
        local list = cjson.decode(call(b.addr, { code = 305 }).body).topicList
        local set = {}
        for _, v in ipairs(list) do
            set[v] = true
        end
        for _, v in ipairs({ "TBW102", "SCHEDULE_TOPIC_XXXX", BROKER, "DefaultCluster",
                             "DefaultCluster_REPLY_TOPIC", "OFFSET_MOVED_EVENT" }) do
            assert.is_true(set[v], v)
        end
        assert.equal(0, call(b.addr, { code = 306 }).code)
        local r = call(b.addr, { code = 202, ext = { topic = "StatsT" } })
        assert.equal(3, decode_mq_map(r.body).offsetTable["StatsT/0"].maxOffset)
    end)

    it("empties the consume queues of topics no longer in the topic table on CLEAN_UNUSED_TOPIC", function()
        local function files(topic, q)
            local n = 0
            for _ in io.popen(("ls %s/consumequeue/%s/%d"):format(store, topic, q)):lines() do
                n = n + 1
            end
            return n
        end
        create_topic(b.addr, "GoneT", 1)
        create_topic(b.addr, "KeptT", 1)
        for _ = 1, 10 do   -- 4 units a file: 3 files each
            send(b.addr, "GoneT", 0)
            send(b.addr, "KeptT", 0)
        end
        assert.equal(3, files("GoneT", 0))
        commit(b.addr, "KeptG", "KeptT", 0, 4)
        assert.equal(0, call(b.addr, { code = 215, ext = { topic = "GoneT" } }).code)
        assert.equal(0, call(b.addr, { code = 316 }).code)
        -- the deleted topic's queue: its last file only, and empty
        assert.equal(1, files("GoneT", 0))
        local cq = call(b.addr, { code = 321, ext = { topic = "GoneT", queueId = "0", index = "0", count = "1" } })
        assert.equal("Index 0 of 0@GoneT is not exist!", cq.remark)
        cq = call(b.addr, { code = 321, ext = { topic = "GoneT", queueId = "0", index = "9", count = "1" } })
        assert.equal("Index 9 of 0@GoneT is not exist!", cq.remark)
        -- the topic in the table keeps every message, readable
        assert.equal(3, files("KeptT", 0))
        local st = decode_mq_map(call(b.addr, { code = 202, ext = { topic = "KeptT" } }).body).offsetTable["KeptT/0"]
        assert.same({ 0, 10 }, { st.minOffset, st.maxOffset })
        local units = cjson.decode(call(b.addr, { code = 321, ext = {
            topic = "KeptT", queueId = "0", index = "0", count = "10" } }).body).queueData
        assert.equal(10, #units)
        local rec = assert(message.decode_record(call(b.addr, { code = 33, ext = {
            offset = ("%d"):format(units[1].physicOffset) } }).body))
        assert.equal("KeptT", rec.topic)
    end)
end)

describe("DELETE_EXPIRED_COMMITLOG", function()
    it("deletes the expired commit log files at once, whatever deleteWhen says", function()
        local dir = server.tmpdir() .. "/store"
        local b = server.start({ role = "broker", workers = 1, brokerName = BROKER, storePathRootDir = dir,
                                 mappedFileSizeCommitLog = 16 * 1024, deleteWhen = "04",
                                 fileReservedTime = 1, namesrvAddr = "127.0.0.1:1" })
        local ok, err = pcall(function()
            create_topic(b.addr, "OldT", 1)
            for _ = 1, 40 do
                send(b.addr, "OldT", 0, ("o"):rep(1000))
            end
            local before = runtime(b.addr)
            assert.equal("0", before.commitLogMinOffset)
            local files = {}
            for f in io.popen("ls " .. dir .. "/commitlog"):lines() do
                files[#files + 1] = f
            end
            assert.is_true(#files >= 3, "files: " .. #files)
            -- the oldest two written two hours ago: expired (fileReservedTime = 1 h)
            for i = 1, 2 do
                assert(os.execute(("touch -d '2 hours ago' %s/commitlog/%s"):format(dir, files[i])))
            end
            local r = call(b.addr, { code = 329 })
            assert.equal(0, r.code)
            local after = runtime(b.addr)
            assert.equal(tostring(2 * 16 * 1024), after.commitLogMinOffset)
            local st = decode_mq_map(call(b.addr, { code = 202, ext = { topic = "OldT" } }).body).offsetTable
            assert.is_true(st["OldT/0"].minOffset > 0)
            assert.equal(40, st["OldT/0"].maxOffset)
        end)
        b:stop()
        assert(ok, err)
    end)
end)

describe("GET_BROKER_CONSUME_STATS past brokerConsumeStatsMaxQueues", function()
    it("leaves out the groups not reached and says so in the remark", function()
        local b = server.start({ role = "broker", workers = 1, brokerName = BROKER,
                                 storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 64 * 1024,
                                 namesrvAddr = "127.0.0.1:1", brokerConsumeStatsMaxQueues = 2 })
        local ok, err = pcall(function()
            for _, g in ipairs({ "CapA", "CapB" }) do
                create_topic(b.addr, g .. "T", 2)
                local r = call(b.addr, { code = 200, body = cjson.encode({ groupName = g, consumeEnable = true,
                    consumeFromMinEnable = true, consumeBroadcastEnable = true, retryQueueNums = 1,
                    retryMaxTimes = 16, brokerId = 0, whichBrokerWhenConsumeSlowly = 1,
                    notifyConsumerIdsChangedEnable = true }) })
                assert.equal(0, r.code, r.remark)
                send(b.addr, g .. "T", 0)
                commit(b.addr, g, g .. "T", 0, 1)
                send(b.addr, g .. "T", 1)
            end
            local r = call(b.addr, { code = 317, ext = { isOrder = "false" } })
            assert.equal(0, r.code, r.remark)
            local body = decode_mq_map(r.body)
            local seen = {}
            for _, m in ipairs(body.consumeStatsList) do
                for g, list in pairs(m) do
                    seen[g] = #list
                end
            end
            -- CapA's two queues fill the reply; CapB comes after it.
            assert.equal(1, seen.CapA)
            assert.is_nil(seen.CapB)
            assert.equal(1, body.totalDiff)
            assert.matches("groups left out: the reply holds 2 queues, brokerConsumeStatsMaxQueues is 2",
                           r.remark, 1, true)
        end)
        b:stop()
        assert(ok, err)
    end)
end)
