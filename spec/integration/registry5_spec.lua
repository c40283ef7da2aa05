-- The 5.x registry and broker surface (docs/rocketmq5.md), with real
-- processes: GET_BROKER_MEMBER_GROUP (901) from the NameServer,
-- GET_TOPIC_CONFIG (351) from the broker, and heartbeat v2 (a 5.x
-- client's fingerprint: a heartbeat without subscriptions keeps the
-- group's, and the broker says when it needs them again).  4.x clients
-- get 4.9.8's replies, unchanged.
local net = require("rmq.net")
local cjson = require("cjson")
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local ns = require("support.nsclient")
local env = require("support.broker_consume_env")

local req, resp = codes.request, codes.response

local V4_9_8, V5_3_0 = 409, 473   -- MQVersion.Version ordinals

describe("NameServer GET_BROKER_MEMBER_GROUP (5.x)", function()
    local s, admin, conns

    before_each(function()
        s = server.start({ role = "namesrv", workers = 2, kvConfigPath = server.tmpdir() .. "/kv.json" })
        admin = assert(net.connect(s.addr))
        conns = {}
    end)

    after_each(function()
        admin:close()
        for _, c in pairs(conns) do
            c:close()
        end
        assert.equal(0, (s:stop()))
    end)

    local function register(key, o)
        conns[key] = conns[key] or assert(net.connect(s.addr))
        local r = assert(ns.register(conns[key], o))
        assert.equal(0, r.code, r.remark)
    end

    local function member_group(cluster, name)
        return assert(admin:call({ code = req.GET_BROKER_MEMBER_GROUP,
                                   ext = { clusterName = cluster, brokerName = name } }))
    end

    it("answers the addresses of a broker name by id, as 5.x writes them", function()
        register("m", { cluster = "C5", name = "b5", id = 0, addr = "10.0.5.1:10911",
                        topics = { { "T5", 4, 4, 6 } }, acting = true, timeout = 30000 })
        register("s", { cluster = "C5", name = "b5", id = 1, addr = "10.0.5.2:10911",
                        topics = { { "T5", 4, 4, 6 } }, acting = true, timeout = 30000 })
        local r = member_group("C5", "b5")
        assert.equal(resp.SUCCESS, r.code, r.remark)
        assert.equal('{"brokerMemberGroup":{"brokerAddrs":{0:"10.0.5.1:10911",1:"10.0.5.2:10911"},'
            .. '"brokerName":"b5","cluster":"C5"}}', r.body)
        -- The slave goes: one member left.
        conns.s:close()
        conns.s = nil
        assert.truthy(server.eventually(function()
            local t = fastjson.decode(member_group("C5", "b5").body)
            return t.brokerMemberGroup.brokerAddrs["1"] == nil
        end, 5000))
        local t = fastjson.decode(member_group("C5", "b5").body)
        assert.equal("10.0.5.1:10911", t.brokerMemberGroup.brokerAddrs["0"])
    end)

    it("answers an empty group for an unknown name, with the names asked", function()
        local r = member_group("NoCluster", "nobody")
        assert.equal(resp.SUCCESS, r.code)
        assert.equal('{"brokerMemberGroup":{"brokerAddrs":{},"brokerName":"nobody","cluster":"NoCluster"}}',
            r.body)
    end)

    it("refuses a request without brokerName naming the field, and keeps serving", function()
        local r = assert(admin:call({ code = req.GET_BROKER_MEMBER_GROUP, ext = { clusterName = "C5" } }))
        assert.equal(resp.SYSTEM_ERROR, r.code)
        assert.matches("brokerName", r.remark)
        assert.equal(resp.SUCCESS, member_group("C5", "x").code)
    end)
end)

-- A consumer's heartbeat body; fingerprint/withoutSub: heartbeat v2.
local function heartbeat_body(client_id, group, topics, fingerprint, without_sub)
    local subs = {}
    if not without_sub then
        for _, topic in ipairs(topics) do
            subs[#subs + 1] = { topic = topic, subString = "*", expressionType = "TAG",
                                tagsSet = setmetatable({}, cjson.array_mt),
                                codeSet = setmetatable({}, cjson.array_mt), subVersion = 1 }
        end
    end
    local hb = {
        clientID = client_id,
        consumerDataSet = { {
            groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = setmetatable(subs, cjson.array_mt),
        } },
        producerDataSet = setmetatable({}, cjson.array_mt),
    }
    if fingerprint then
        hb.heartbeatFingerprint = fingerprint
        hb.withoutSub = without_sub == true
    end
    return cjson.encode(hb)
end

describe("broker (5.x surface)", function()
    local e, c

    setup(function()
        e = env.start({ workers = 2 })
    end)

    teardown(function()
        if c then
            c:close()
        end
        e:stop()
    end)

    before_each(function()
        if c == nil or c.closed then
            c = assert(net.connect(e.addr))
        end
    end)

    local function subscribed_topics(group)
        local r = assert(c:call({ code = req.GET_CONSUMER_CONNECTION_LIST, ext = { consumerGroup = group } }))
        if r.code ~= resp.SUCCESS then
            return nil, r.remark
        end
        local out = {}
        for topic in pairs(fastjson.decode(r.body).subscriptionTable) do
            out[#out + 1] = topic
        end
        table.sort(out)
        return table.concat(out, ",")
    end

    it("GET_TOPIC_CONFIG answers one topic as 5.x's TopicConfigAndQueueMapping", function()
        local r = assert(c:call({ code = req.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = "Reg5Topic", defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "2",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = { topic = "Reg5Topic", lo = "true" },
                            version = V5_3_0 }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        assert.equal('{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
            .. '"topicFilterType":"SINGLE_TAG","topicName":"Reg5Topic","topicSysFlag":0,'
            .. '"writeQueueNums":2}', r.body)
        -- System topics are in the table too (5.x selectTopicConfig).
        r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = { topic = "TBW102" } }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        assert.equal("TBW102", fastjson.decode(r.body).topicName)
    end)

    it("GET_TOPIC_CONFIG of an unknown topic is TOPIC_NOT_EXIST with 5.x's remark", function()
        local r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = { topic = "NoSuchTopic5" } }))
        assert.equal(resp.TOPIC_NOT_EXIST, r.code)
        assert.equal("No topic in this broker. topic: NoSuchTopic5", r.remark)
        r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = {} }))
        assert.equal(resp.SYSTEM_ERROR, r.code)
        assert.matches("topic", r.remark)
    end)

    it("answers a 4.x client's heartbeat as 4.9.8 did: no v2 fields", function()
        for _ = 1, 2 do   -- the first (registry written) and the repeat (answered in C)
            local r = assert(c:call({ code = req.HEART_BEAT, version = V4_9_8,
                body = heartbeat_body("127.0.0.1@v4", "Reg5G4", { "Reg5T4" }) }))
            assert.equal(resp.SUCCESS, r.code)
            assert.is_nil(r.ext and r.ext.IS_SUPPORT_HEART_BEAT_V2)
            assert.is_nil(r.ext and r.ext.IS_SUB_CHANGE)
        end
    end)

    it("tells a 5.x client v1 heartbeat that it supports v2", function()
        for _ = 1, 2 do
            local r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0,
                body = heartbeat_body("127.0.0.1@v1", "Reg5G1", { "Reg5T1" }) }))
            assert.equal(resp.SUCCESS, r.code)
            assert.equal("true", r.ext.IS_SUPPORT_HEART_BEAT_V2)
            assert.equal("true", r.ext.IS_SUB_CHANGE)
        end
    end)

    it("keeps a group's subscriptions through heartbeats without them while the fingerprint holds", function()
        local g = "Reg5G2"
        local function beat(topics, fp, without)
            local r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0,
                body = heartbeat_body("127.0.0.1@v2", g, topics, fp, without) }))
            assert.equal(resp.SUCCESS, r.code, r.remark)
            assert.equal("true", r.ext.IS_SUPPORT_HEART_BEAT_V2)
            return r.ext.IS_SUB_CHANGE
        end
        -- The full heartbeat with its fingerprint, then the repeat.
        assert.equal("false", beat({ "Reg5A", "Reg5B" }, 1111))
        assert.equal("false", beat({ "Reg5A", "Reg5B" }, 1111))
        assert.equal("Reg5A,Reg5B", subscribed_topics(g))
        -- The same fingerprint without the subscriptions: they stay.
        for _ = 1, 3 do
            assert.equal("false", beat({}, 1111, true))
            assert.equal("Reg5A,Reg5B", subscribed_topics(g))
        end
        -- Another fingerprint without them: the broker asks for them
        -- (IS_SUB_CHANGE) and keeps what it has meanwhile.
        assert.equal("true", beat({}, 2222, true))
        assert.equal("Reg5A,Reg5B", subscribed_topics(g))
        -- The client sends them with the new fingerprint: a change (5.x
        -- says so once, the client sends them once more), then settled.
        assert.equal("true", beat({ "Reg5C" }, 2222 + 1))
        assert.equal("Reg5C", subscribed_topics(g))
        assert.equal("false", beat({ "Reg5C" }, 2222 + 1))
        assert.equal("false", beat({}, 2222 + 1, true))
        assert.equal("Reg5C", subscribed_topics(g))
        -- Negative fingerprints are Java ints too.
        assert.equal("true", beat({ "Reg5C" }, -5))
        assert.equal("false", beat({}, -5, true))
    end)

    it("asks for the subscriptions of a group it does not know (a restarted broker)", function()
        local g = "Reg5G3"
        local r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0,
            body = heartbeat_body("127.0.0.1@v3", g, { "Reg5D" }, 3333) }))
        assert.equal("false", r.ext.IS_SUB_CHANGE)
        assert.equal("Reg5D", subscribed_topics(g))
        c:close()
        e:restart()
        c = assert(net.connect(e.addr))
        assert.is_nil((subscribed_topics(g)))
        r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0,
            body = heartbeat_body("127.0.0.1@v3", g, { "Reg5D" }, 3333, true) }))
        assert.equal(resp.SUCCESS, r.code)
        assert.equal("true", r.ext.IS_SUB_CHANGE)
        r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0,
            body = heartbeat_body("127.0.0.1@v3", g, { "Reg5D" }, 3333) }))
        assert.equal("false", r.ext.IS_SUB_CHANGE)
        assert.equal("Reg5D", subscribed_topics(g))
    end)

    it("refuses a fingerprint that is not a Java int, naming it, and keeps serving", function()
        for _, bad in ipairs({ '"x"', "4294967296", "true" }) do
            local body = heartbeat_body("127.0.0.1@bad", "Reg5Bad", { "Reg5E" }, 1)
                :gsub('"heartbeatFingerprint":1', '"heartbeatFingerprint":' .. bad)
            local r = assert(c:call({ code = req.HEART_BEAT, version = V5_3_0, body = body }))
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("heartbeatFingerprint", r.remark)
        end
        assert.is_nil((subscribed_topics("Reg5Bad")))
    end)

    it("is a member of its group at the NameServer once it registered", function()
        local nc = assert(net.connect(e.ns_addr))
        assert.truthy(server.eventually(function()
            local r = assert(nc:call({ code = req.GET_BROKER_MEMBER_GROUP,
                ext = { clusterName = env.CLUSTER, brokerName = env.BROKER } }))
            local t = fastjson.decode(r.body)
            return t.brokerMemberGroup.brokerAddrs["0"] ~= nil
        end, 10000))
        nc:close()
    end)
end)

describe("a broker with enableSlaveActingMaster (5.x registration)", function()
    local fake = require("support.fake_namesrv")

    local function broker(namesrv, name)
        return server.start({
            role = "broker", workers = 1, brokerName = name, brokerClusterName = "C5hb",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = namesrv, enableSlaveActingMaster = true,
            brokerNotActiveTimeoutMillis = 1500, brokerHeartbeatInterval = 200,
            registerNameServerPeriod = 60000,
        })
    end

    it("registers with heartbeatTimeoutMillis and sends BROKER_HEARTBEAT one-way between rounds", function()
        local fns = fake.start()
        local b = broker(fns.addr, "b5fake")
        local reg = fake.frames(fns.addr, 103)[1]
        assert.equal("1500", reg.ext.heartbeatTimeoutMillis)
        assert.equal("true", reg.ext.enableActingMaster)
        assert.truthy(server.eventually(function() return #fake.frames(fns.addr, 904) >= 3 end, 10000))
        local hb = fake.frames(fns.addr, 904)[1]
        assert.is_true(hb.oneway)
        assert.equal("C5hb", hb.ext.clusterName)
        assert.equal("b5fake", hb.ext.brokerName)
        assert.equal(reg.ext.brokerAddr, hb.ext.brokerAddr)
        assert.equal(1, #fake.frames(fns.addr, 103))   -- the heartbeats are not registrations
        assert.equal(0, (b:stop()))
        fns:stop()
    end)

    it("stays routed by a real NameServer far past its timeout with one registration a minute", function()
        local ns_srv = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json",
                                      scanNotActiveBrokerInterval = 200 })
        local b = broker(ns_srv.addr, "b5real")
        local c = assert(net.connect(ns_srv.addr))
        local function present()
            local r = assert(c:call({ code = req.GET_BROKER_MEMBER_GROUP,
                                      ext = { clusterName = "C5hb", brokerName = "b5real" } }))
            return fastjson.decode(r.body).brokerMemberGroup.brokerAddrs["0"] ~= nil
        end
        assert.truthy(server.eventually(present, 10000))
        -- 4 x the 1.5 s timeout, the NameServer scanning every 0.2 s.
        local t0 = require("rmq.core").mono_ms()
        while require("rmq.core").mono_ms() - t0 < 6000 do
            assert.is_true(present(), "expired although it heartbeats")
            net.sleep(250)
        end
        c:close()
        assert.equal(0, (b:stop()))
        assert.equal(0, (ns_srv:stop()))
    end)
end)
