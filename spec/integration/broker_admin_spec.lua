-- The broker's admin requests (protocol.md 4.13) with real processes:
-- the captured mqadmin/DefaultMQAdminExt exchanges get the 4.9.8
-- broker's answers, topics and groups survive a restart, every bad
-- request gets a clear refusal while the broker keeps serving, and the
-- VIP port serves the same requests.
local net = require("rmq.net")
local cjson = require("cjson")
local codec = require("rmq.codec")
local server = require("support.server")
local rq = require("support.requests")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)
local ns = require("support.nsclient")

local SLAVE = "Can't modify topic or subscription group from slave broker, "
    .. "please execute it from master broker."

local function real_ns()
    return server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
end

local function broker_conf(namesrv, extra)
    local conf = {
        role = "broker", workers = 2, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = namesrv or "127.0.0.1:1",
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return conf
end

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function topic_ext(topic, o)
    o = o or {}
    local ext = { topic = topic, defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "4",
                  perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" }
    for k, v in pairs(o) do
        ext[k] = v ~= false and v or nil
    end
    return ext
end

local function all_topics(addr)
    local r = call(addr, { code = 21 })
    assert.equal(0, r.code)
    return cjson.decode(r.body)
end

local function all_groups(addr)
    local r = call(addr, { code = 201 })
    assert.equal(0, r.code)
    return cjson.decode(r.body)
end

-- request/reply of a capture file
local function exchange(name)
    local req, resp
    for _, f in ipairs(fixtures.frames(name)) do
        if f.dir == "c2s" then
            req = f
        elseif f.dir == "s2c" then
            resp = f
        end
    end
    return req, resp
end

local function send(addr, topic, body)
    return call(addr, rq.send({ group = "FxGroup", topic = topic, tags = "TagA", body = body or "hello" }))
end

describe("broker admin", function()
    local n, b, nc

    setup(function()
        n = real_ns()
        b = server.start(broker_conf(n.addr, { topicQueueNumsMax = 64 }))
        nc = assert(net.connect(n.addr))
    end)

    teardown(function()
        nc:close()
        b:stop()
        n:stop()
    end)

    fx_it("answers the captured UPDATE_AND_CREATE_TOPIC as the 4.9.8 broker did, route included", function()
        local req, resp = exchange("update-and-create-topic.jsonl")
        local c = assert(net.connect(b.addr))
        local r, raw = assert(c:call_raw(req.raw))
        c:close()
        assert.equal(0, r.code)
        -- The whole frame: remark "not set any response code" (sic), no
        -- extFields, no body.
        fixtures.same_frame(resp.raw, raw, "update-and-create-topic.jsonl")
        -- Registered before the reply: the route is there now.
        local qd = ns.queue(ns.route(nc, "FxTopic"), "broker-a")
        assert.same({ brokerName = "broker-a", perm = 6, readQueueNums = 4, writeQueueNums = 4,
                      topicSysFlag = 0 }, qd)
        local t = all_topics(b.addr).topicConfigTable.FxTopic
        assert.same({ order = false, perm = 6, readQueueNums = 4, topicFilterType = "SINGLE_TAG",
                      topicName = "FxTopic", topicSysFlag = 0, writeQueueNums = 4 }, t)
        -- Again with other numbers: an update.
        r = call(b.addr, { code = 17, ext = topic_ext("FxTopic", { readQueueNums = "2", writeQueueNums = "8",
                                                                   perm = "4", topicFilterType = "MULTI_TAG" }) })
        assert.equal(0, r.code)
        assert.same({ brokerName = "broker-a", perm = 4, readQueueNums = 2, writeQueueNums = 8, topicSysFlag = 0 },
                    ns.queue(ns.route(nc, "FxTopic"), "broker-a"))
        assert.equal("MULTI_TAG", all_topics(b.addr).topicConfigTable.FxTopic.topicFilterType)
    end)

    it("refuses bad topic requests with a remark and keeps serving", function()
        local long = ("t"):rep(128)
        local cases = {
            { topic_ext("TBW102"), "The topic[TBW102] is conflict with system topic." },
            { topic_ext("SCHEDULE_TOPIC_XXXX"), "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic." },
            { topic_ext("rmq_sys_x"), "The topic[rmq_sys_x] is conflict with system topic." },
            { topic_ext("DefaultCluster"), "The topic[DefaultCluster] is conflict with system topic." },
            { topic_ext("broker-a"), "The topic[broker-a] is conflict with system topic." },
            { topic_ext("a.b"), "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$" },
            { topic_ext(" "), "The specified topic is blank." },
            { topic_ext(long), "The specified topic is longer than topic max length." },
            { topic_ext("T1", { topic = false }), "the custom field <topic> is null" },
            { topic_ext("T1", { readQueueNums = false }), "the custom field <readQueueNums> is null" },
            { topic_ext("T1", { perm = "rw" }), 'the custom field <perm> is not an Integer: "rw"' },
            { topic_ext("T1", { topicFilterType = "X" }), "topicFilterType = [X] value invalid" },
            { topic_ext("T1", { writeQueueNums = "65" }),
              'the custom field <writeQueueNums> is out of range 1..64 (topicQueueNumsMax): "65"' },
            { topic_ext("T1", { readQueueNums = "-1" }), 'the custom field <readQueueNums> must be >= 1: "-1"' },
            -- A topic has at least one queue (a 0 would be published to
            -- clients that then divide by it).
            { topic_ext("T1", { readQueueNums = "0" }), 'the custom field <readQueueNums> must be >= 1: "0"' },
            { topic_ext("T1", { writeQueueNums = "2.5" }), 'the custom field <writeQueueNums> is not an Integer: "2.5"' },
            { topic_ext("T1", { readQueueNums = "0x4" }), 'the custom field <readQueueNums> is not an Integer: "0x4"' },
            { topic_ext("T1", { perm = "16" }), 'the custom field <perm> is out of range 0..15: "16"' },
        }
        for _, c in ipairs(cases) do
            local r = call(b.addr, { code = 17, ext = c[1] })
            assert.equal(1, r.code, c[2])
            assert.equal(c[2], r.remark)
        end
        for _, c in ipairs({ { "TBW102", "The topic[TBW102] is conflict with system topic." },
                             { "a/b", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$" } }) do
            local r = call(b.addr, { code = 215, ext = { topic = c[1] } })
            assert.equal(1, r.code)
            assert.equal(c[2], r.remark)
        end
        assert.is_nil(all_topics(b.addr).topicConfigTable.T1)
    end)

    it("deletes topics", function()
        assert.equal(0, call(b.addr, { code = 17, ext = topic_ext("Gone") }).code)
        assert.truthy(all_topics(b.addr).topicConfigTable.Gone)
        local before = all_topics(b.addr).dataVersion.counter
        local r = call(b.addr, { code = 215, ext = { topic = "Gone" } })
        assert.equal(0, r.code)
        assert.is_nil(r.remark)
        local after = all_topics(b.addr)
        assert.is_nil(after.topicConfigTable.Gone)
        assert.equal(before + 1, after.dataVersion.counter)
        -- Unknown topic: nothing to do, still 0 (as Java).
        assert.equal(0, call(b.addr, { code = 215, ext = { topic = "NeverWas" } }).code)
    end)

    it("creates, lists and deletes subscription groups", function()
        local r = call(b.addr, { code = 200, body = '{"groupName":"G1","retryMaxTimes":3,"consumeEnable":false}' })
        assert.equal(0, r.code, r.remark)
        local all = all_groups(b.addr)
        assert.same({ brokerId = 0, consumeBroadcastEnable = true, consumeEnable = false,
                      consumeFromMinEnable = true, groupName = "G1", notifyConsumerIdsChangedEnable = true,
                      retryMaxTimes = 3, retryQueueNums = 1, whichBrokerWhenConsumeSlowly = 1 },
                    all.subscriptionGroupTable.G1)
        -- A 4.9.8 broker's system groups are there from the start.
        for _, g in ipairs({ "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                             "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS" }) do
            assert.truthy(all.subscriptionGroupTable[g], g)
        end
        assert.is_number(all.dataVersion.counter)
        for _, c in ipairs({
            { nil, "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP needs a SubscriptionGroupConfig JSON body" },
            { "{oops", "the SubscriptionGroupConfig body is not JSON" },
            { "[1]", "bad SubscriptionGroupConfig: not a JSON object" },
            { '{"retryMaxTimes":3}', "the specified group is blank" },
            { '{"groupName":"G 1"}', "the specified group[G 1] contains illegal characters" },
            { '{"groupName":"../../x"}', "the specified group[../../x] contains illegal characters" },
            { '{"groupName":"G2","retryQueueNums":"x"}', "bad SubscriptionGroupConfig: retryQueueNums must be an integer" },
            { '{"groupName":"G2","consumeEnable":3}', "bad SubscriptionGroupConfig: consumeEnable must be true or false" },
            { '{"groupName":"G2","retryQueueNums":100}', "retryQueueNums 100 is out of range: 0..64" },
        }) do
            r = call(b.addr, { code = 200, body = c[1] })
            assert.equal(1, r.code, c[2])
            assert.equal(c[2], r.remark:sub(1, #c[2]))
        end
        assert.is_nil(all_groups(b.addr).subscriptionGroupTable.G2)
        r = call(b.addr, { code = 207, ext = { groupName = "G1", removeOffset = "true" } })
        assert.equal(0, r.code)
        assert.is_nil(all_groups(b.addr).subscriptionGroupTable.G1)
        r = call(b.addr, { code = 207, ext = {} })
        assert.equal(1, r.code)
        assert.equal("the custom field <groupName> is null", r.remark)
    end)

    it("reports runtime info", function()
        local t = cjson.decode(call(b.addr, { code = 28 }).body).table
        for _, k in ipairs({ "brokerVersionDesc", "brokerVersion", "msgPutTotalTodayNow", "putTps",
                             "getTransferedTps", "commitLogMaxOffset", "commitLogMinOffset", "bootTimestamp",
                             "runtime", "earliestMessageTimeStamp", "sendThreadPoolQueueSize",
                             "pageCacheLockTimeMills", "remainHowManyDataToFlush" }) do
            assert.is_string(t[k], k)
        end
        assert.equal("V4_9_8", t.brokerVersionDesc)
        assert.matches("^%[ %d+ days, %d+ hours, %d+ minutes, %d+ seconds %]$", t.runtime)
        local before = tonumber(t.msgPutTotalTodayNow)
        for i = 1, 5 do
            assert.equal(0, send(b.addr, "StatsTopic", "m" .. i).code)
        end
        local now = server.eventually(function()
            local x = cjson.decode(call(b.addr, { code = 28 }).body).table
            return tonumber(x.msgPutTotalTodayNow) >= before + 5
                and tonumber(x.putTps:match("^(%S+)")) > 0 and x
        end, 3000)
        assert.truthy(now, "puts not counted")
        assert.matches("^%d+%.%d%d %d+%.%d%d %d+%.%d%d$", now.putTps)
        assert.is_true(tonumber(now.commitLogMaxOffset) > 0)
    end)

    it("reads and updates the broker config", function()
        local r = call(b.addr, { code = 26 })
        assert.equal(0, r.code)
        assert.matches("\nbrokerName=broker%-a\n", "\n" .. r.body)
        assert.matches("\nbrokerPermission=6\n", "\n" .. r.body)
        local v0 = cjson.decode(r.ext.version)
        for _, c in ipairs({
            { "brokerConfigPath=/x\n", 16, "Can not update config in black list." },
            { "brokerPermisson=4\n", 1, "unknown broker config key 'brokerPermisson' (did you mean 'brokerPermission'?)" },
            { "brokerPermission=x\n", 1, "key 'brokerPermission'" },
            { "brokerPermission=99\n", 1, "key 'brokerPermission' must be <= 15, got 99" },
            { "listenPort=1\n", 1, "key 'listenPort' cannot be changed while rmq runs" },
            { nil, 1, "UPDATE_BROKER_CONFIG needs a body" },
        }) do
            r = call(b.addr, { code = 25, body = c[1] })
            assert.equal(c[2], r.code, c[3])
            assert.equal(c[3], r.remark:sub(1, #c[3]))
        end
        r = call(b.addr, { code = 25, body = "forceRegister=false\nbrokerName=broker-a\n" })
        assert.equal(0, r.code, r.remark)
        r = call(b.addr, { code = 26 })
        assert.matches("\nforceRegister=false\n", "\n" .. r.body)
        assert.is_true(cjson.decode(r.ext.version).counter > v0.counter)
        assert.equal(0, call(b.addr, { code = 25, body = "forceRegister=true" }).code)
        -- brokerPermission: the NameServer has the new perms when the
        -- reply comes (every worker's conf follows).
        assert.equal(0, call(b.addr, { code = 25, body = "brokerPermission=4" }).code)
        assert.equal(4, ns.queue(ns.route(nc, "TBW102"), "broker-a").perm)
        assert.equal(0, call(b.addr, { code = 25, body = "brokerPermission=6" }).code)
        assert.equal(7, ns.queue(ns.route(nc, "TBW102"), "broker-a").perm)
    end)

    it("serves admin and sends on the VIP port", function()
        assert.truthy(b.vip_addr)
        local r = call(b.vip_addr, { code = 17, ext = topic_ext("VipTopic") })
        assert.equal(0, r.code)
        r = send(b.vip_addr, "VipTopic", "through the VIP port")
        assert.equal(0, r.code, r.remark)
        assert.equal("0", r.ext.queueId)
        assert.truthy(all_topics(b.vip_addr).topicConfigTable.VipTopic)
    end)
end)

describe("broker admin tables", function()
    fx_it("answers GET_ALL_TOPIC_CONFIG byte for byte as the 4.9.8 broker did, from its topics.json", function()
        local req, resp = exchange("get-all-topic-config.jsonl")
        local want = assert(codec.decode(resp.raw))
        local conf = broker_conf(nil)
        -- A Java broker's config/topics.json (the same wrapper) moves over.
        os.execute("mkdir -p " .. conf.storePathRootDir .. "/config")
        local f = assert(io.open(conf.storePathRootDir .. "/config/topics.json", "w"))
        f:write(want.body)
        f:close()
        local s = server.start(conf)
        local c = assert(net.connect(s.addr))
        local r, raw = assert(c:call_raw(req.raw))
        c:close()
        assert.equal(0, r.code)
        assert.equal(want.body, r.body)
        -- The whole frame: an empty extFields object, no remark.
        fixtures.same_frame(resp.raw, raw, "get-all-topic-config.jsonl")
        s:stop()
    end)

    it("keeps topics and groups across a restart", function()
        local conf = broker_conf(nil)
        local s = server.start(conf)
        assert.equal(0, call(s.addr, { code = 17, ext = topic_ext("Kept", { readQueueNums = "3" }) }).code)
        assert.equal(0, call(s.addr, { code = 200, body = '{"groupName":"KeptGroup","retryQueueNums":2}' }).code)
        assert.equal(0, send(s.addr, "AutoKept").code)
        local t0, g0 = all_topics(s.addr), all_groups(s.addr)
        assert.equal(0, s:stop())
        s = server.start(conf)
        local t1, g1 = all_topics(s.addr), all_groups(s.addr)
        assert.same(t0, t1)
        assert.same(g0, g1)
        assert.equal(3, t1.topicConfigTable.Kept.readQueueNums)
        assert.equal(2, g1.subscriptionGroupTable.KeptGroup.retryQueueNums)
        assert.truthy(t1.topicConfigTable.AutoKept)
        -- Killed right after the reply: written before it (as Java does).
        assert.equal(0, call(s.addr, { code = 17, ext = topic_ext("KeptToo") }).code)
        assert.equal(0, call(s.addr, { code = 200, body = '{"groupName":"KeptToo"}' }).code)
        s:kill()
        s = server.start(conf)
        assert.truthy(all_topics(s.addr).topicConfigTable.KeptToo)
        assert.truthy(all_groups(s.addr).subscriptionGroupTable.KeptToo)
        s:stop()
    end)

    it("refuses changes on a slave", function()
        local s = server.start(broker_conf(nil, { brokerId = 1, brokerRole = "SLAVE" }))
        for _, cmd in ipairs({ { code = 17, ext = topic_ext("T") }, { code = 215, ext = { topic = "T" } },
                               { code = 200, body = '{"groupName":"G"}' }, { code = 207, ext = { groupName = "G" } } }) do
            local r = call(s.addr, cmd)
            assert.equal(1, r.code)
            assert.equal(SLAVE, r.remark)
        end
        assert.equal(0, call(s.addr, { code = 21 }).code)
        s:stop()
    end)
end)
