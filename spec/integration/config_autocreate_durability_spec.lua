-- What a client makes the broker auto-create is on disk before the
-- answer it relies on: a send's new topic (createTopicInSendMessageMethod),
-- a heartbeat's subscription group and retry topic, a send back's retry
-- and DLQ topics.  RocketMQ 4.9.8 writes topics.json /
-- subscriptionGroup.json there, before the reply; rmq's worker appends
-- the config to the file's journal (src/broker/config_journal.h).  A
-- SIGKILL right after the last answer must keep every acknowledged
-- config: after a restart the broker has it and the NameServer routes it.
--
-- The window is made wide on purpose: the errinj point
-- config_persist_delay_ms (src/core/errinj.h) holds the main thread's
-- persister back, so nothing but the worker's own append can have put a
-- config on disk.  (Without it the window is the persister's wake-up:
-- docs/operations.md.)
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local rq = require("support.requests")

local ERRINJ = 7031   -- the spec's own request code: store.errinj on the broker

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 15000))
end

local function send_cmd(topic, body)
    return rq.send({ group = "DurProducer", topic = topic, born = 1796034593124, body = body or "durable?" })
end

local function heartbeat_cmd(group, topic)
    return { code = 34, body = cjson.encode({
        clientID = "dur-client@" .. group, producerDataSet = {}, consumerDataSet = { {
            groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = { { topic = topic, subString = "*", tagsSet = {}, codeSet = {},
                                      subVersion = 1, expressionType = "TAG", classFilterMode = false } } } } }) }
end

describe("auto-created configs across a SIGKILL", function()
    local ns, store, b

    local function start(ns_addr)
        return server.start({ source = ([[
            return {
                role = "broker", brokerName = "broker-dur", workers = 2,
                storePathRootDir = %q, mappedFileSizeCommitLog = 1048576,
                namesrvAddr = %q,
                processors = {
                    [%d] = function(ctx, cmd)
                        local v = require("rmq.store").errinj(cmd:get("name"), tonumber(cmd:get("value")))
                        return { code = 0, remark = tostring(v) }
                    end,
                },
            }
        ]]):format(store, ns_addr, ERRINJ) })
    end

    -- The main thread's persister held back for the rest of this run.
    local function hold_persister(addr)
        local r = call(addr, { code = ERRINJ, ext = { name = "config_persist_delay_ms", value = "600000" } })
        assert.equal(0, r.code, r.remark)
    end

    -- A fresh NameServer and the broker on the same store registering
    -- with it: what it routes comes from this start's tables alone.
    local function restart()
        local ns2 = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        ns:stop()
        ns = ns2
        b = start(ns.addr)
    end

    local function topics_of(addr)
        return cjson.decode(call(addr, { code = 21 }).body).topicConfigTable
    end

    setup(function()
        ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        store = server.tmpdir() .. "/store"
        b = start(ns.addr)
    end)

    teardown(function()
        if b then b:stop() end
        ns:stop()
    end)

    it("keeps every topic a send created and acknowledged", function()
        hold_persister(b.addr)
        -- Two connections: the two workers answer sends, each writing.
        local conns = { assert(net.connect(b.addr)), assert(net.connect(b.addr)) }
        local acked = {}
        for burst = 1, 3 do
            for i = 1, 70 do
                local topic = ("DurT%d_%d"):format(burst, i)
                local r = assert(conns[i % 2 + 1]:call(send_cmd(topic), 15000))
                assert.equal(0, r.code, r.remark)
                acked[#acked + 1] = topic
            end
        end
        -- SIGKILL right after the last answer.
        b:kill()
        for _, c in ipairs(conns) do c:close() end
        restart()
        local have = topics_of(b.addr)
        local missing = {}
        for _, topic in ipairs(acked) do
            if not have[topic] then
                missing[#missing + 1] = topic
            end
        end
        assert.equal(0, #missing, ("%d of %d acknowledged topics lost their config: %s"):format(
            #missing, #acked, table.concat(missing, " ", 1, math.min(#missing, 10))))
        assert.equal(4, have.DurT3_70.writeQueueNums)
        -- The NameServer's topic list and routes, from the registration.
        local listed = server.eventually(function()
            local r = call(ns.addr, { code = 206 })
            local set = {}
            for _, t in ipairs(r.code == 0 and cjson.decode(r.body).topicList or {}) do
                set[t] = true
            end
            return set[acked[#acked]] and set
        end, 30000)
        assert.truthy(listed, "the NameServer lists the topics")
        for _, topic in ipairs(acked) do
            assert.truthy(listed[topic], topic .. " in the topic list")
            local r = call(ns.addr, { code = 105, ext = { topic = topic } })
            assert.equal(0, r.code, topic .. ": " .. tostring(r.remark))
        end
        -- And the messages sent there are still served.
        local r = call(b.addr, { code = 30, ext = { topic = "DurT2_5", queueId = "0" } })
        assert.equal(0, r.code, r.remark)
        assert.equal("1", r.ext.offset)
    end)

    it("keeps the groups and retry/DLQ topics a heartbeat and a send back created", function()
        hold_persister(b.addr)
        local c = assert(net.connect(b.addr))
        local sent = assert(c:call(send_cmd("DurBase", "to send back"), 15000))
        assert.equal(0, sent.code, sent.remark)
        local phy = tostring(tonumber(sent.ext.msgId:sub(-16), 16))
        for i = 1, 40 do
            local r = assert(c:call(heartbeat_cmd("DurHbGroup" .. i, "DurBase"), 15000))
            assert.equal(0, r.code, r.remark)
        end
        for i = 1, 40 do
            -- delayLevel -1: straight to the group's DLQ, through its retry topic's queue count.
            local r = assert(c:call({ code = 36, ext = { offset = phy, group = "DurBackGroup" .. i,
                                                          delayLevel = "-1", originTopic = "DurBase",
                                                          maxReconsumeTimes = "16" } }, 15000))
            assert.equal(0, r.code, r.remark)
        end
        b:kill()
        c:close()
        restart()
        local topics = topics_of(b.addr)
        local groups = cjson.decode(call(b.addr, { code = 201 }).body).subscriptionGroupTable
        local missing = {}
        local function want(set, name)
            if not set[name] then
                missing[#missing + 1] = name
            end
        end
        for i = 1, 40 do
            want(groups, "DurHbGroup" .. i)
            want(topics, "%RETRY%DurHbGroup" .. i)
            want(groups, "DurBackGroup" .. i)
            want(topics, "%RETRY%DurBackGroup" .. i)
            want(topics, "%DLQ%DurBackGroup" .. i)
        end
        assert.equal(0, #missing, ("%d of 200 acknowledged configs lost: %s"):format(
            #missing, table.concat(missing, " ", 1, math.min(#missing, 10))))
    end)

    it("starts past a torn batch at the journal's end, keeping the whole ones", function()
        hold_persister(b.addr)
        local c = assert(net.connect(b.addr))
        for i = 1, 5 do
            assert.equal(0, assert(c:call(send_cmd("DurTorn" .. i), 15000)).code)
        end
        b:kill()
        c:close()
        -- What a SIGKILL inside an append leaves: a batch without its end.
        local journal = store .. "/config/topics.json.journal"
        local f = assert(io.open(journal, "a"))
        f:write('{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"DurTornX"}\n',
                '{"dataVersion":{"counter":99')
        f:close()
        restart()
        local topics = topics_of(b.addr)
        for i = 1, 5 do
            assert.truthy(topics["DurTorn" .. i], "DurTorn" .. i)
        end
        assert.is_nil(topics.DurTornX, "a torn batch was never acknowledged")
        assert.matches("torn batch", b:log(), 1, true)
        -- Appends go on after the cut: a topic made now survives the next kill.
        hold_persister(b.addr)
        c = assert(net.connect(b.addr))
        assert.equal(0, assert(c:call(send_cmd("DurAfterTorn"), 15000)).code)
        b:kill()
        c:close()
        restart()
        assert.truthy(topics_of(b.addr).DurAfterTorn)
    end)
end)
