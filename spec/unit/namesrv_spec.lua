-- The NameServer's pieces without a server: the registry (rmq.route, a
-- private instance), register body decoding, fastjson's bare keys.
local route = require("rmq.route")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local register = require("rmq.namesrv.register")
local ns = require("support.nsclient")
local tmp = require("support.tmp")

local function topics(list)
    local t = {}
    for _, x in ipairs(list) do
        t[#t + 1] = { name = x[1], read = x[2] or 4, write = x[3] or 4, perm = x[4] or 6,
                      sysflag = x[5] or 0 }
    end
    return t
end

local function reg(rt, o)
    return rt:register({
        cluster = o.cluster or "C", addr = o.addr, name = o.name or "b", id = o.id or 0,
        ha = o.ha, dv = o.dv or { counter = 1, timestamp = 1 }, topics = topics(o.topics or {}),
        filters = o.filters, conn = o.conn or 1, acting = o.acting, timeout = o.timeout,
    })
end

describe("rmq.route", function()
    it("writes a route exactly as a 4.9.8 NameServer, in both JSON forms", function()
        local rt = route.new()
        reg(rt, { name = "broker-a", cluster = "DefaultCluster", addr = "127.0.0.1:30911",
                  topics = { { "FxTopic", 4, 4, 6 } } })
        assert.equal('{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:30911"},"brokerName":"broker-a",'
            .. '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":'
            .. '"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}',
            rt:route("FxTopic", true))
        assert.equal('{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:30911"},"brokerName":"broker-a",'
            .. '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":'
            .. '"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}',
            rt:route("FxTopic", false))
        assert.is_nil(rt:route("Other", false))
    end)

    it("orders brokerAddrs like java.util.HashMap, and sorts them in standard JSON", function()
        local rt = route.new()
        -- Put order 16, 0, 3, 33, 1: HashMap<Long,String> iterates 16, 0,
        -- 33, 1, 3 (16 and 0 share bucket 0, 33 and 1 bucket 1).
        for _, id in ipairs({ 16, 0, 3, 33, 1 }) do
            reg(rt, { addr = "h:" .. id, id = id, topics = { { "T" } } })
        end
        local body = rt:route("T", false)
        assert.matches('"brokerAddrs":{16:"h:16",0:"h:0",33:"h:33",1:"h:1",3:"h:3"}', body, 1, true)
        body = rt:route("T", true)
        assert.matches('"brokerAddrs":{"0":"h:0","1":"h:1","3":"h:3","16":"h:16","33":"h:33"}',
            body, 1, true)
    end)

    it("orders topic lists like java.util.HashSet", function()
        local rt = route.new()
        local names = { "TBW102", "SELF_TEST_TOPIC", "%RETRY%g", "h\u{e9}llo" }
        for i = 0, 39 do
            names[#names + 1] = "Topic" .. i
        end
        local list = {}
        for _, n in ipairs(names) do
            list[#list + 1] = { n }
        end
        table.sort(list, function(a, b) return a[1] < b[1] end)
        reg(rt, { addr = "h:1", topics = list })
        -- Computed independently (a Python model of HashMap(1024) feeding
        -- a HashSet(16), String.hashCode over UTF-16).
        local want = { "Topic23", "Topic24", "Topic25", "Topic26", "Topic27", "Topic28", "Topic29",
            "TBW102", "SELF_TEST_TOPIC", "Topic20", "Topic21", "Topic22", "Topic12", "Topic6",
            "Topic34", "Topic13", "Topic5", "Topic35", "Topic14", "Topic4", "Topic36", "Topic15",
            "Topic3", "Topic37", "Topic16", "Topic2", "Topic38", "Topic17", "Topic1", "Topic39",
            "Topic18", "Topic0", "Topic19", "%RETRY%g", "h\u{e9}llo", "Topic9", "Topic8", "Topic7",
            "Topic30", "Topic31", "Topic10", "Topic32", "Topic11", "Topic33" }
        assert.same({ topicList = want }, fastjson.decode(rt:topic_list("all")))
    end)

    it("escapes like fastjson: UTF-8 as is by default, \\u escapes in standard JSON", function()
        local rt = route.new()
        reg(rt, { name = "br\u{f6}ker/\"x\"", addr = "h:1", topics = { { "T" } } })
        assert.matches('"brokerName":"br\u{f6}ker/\\"x\\""', rt:route("T", false), 1, true)
        assert.matches('"brokerName":"br\\u00F6ker\\/\\"x\\""', rt:route("T", true), 1, true)
    end)

    it("replaces the address's old id (slave promotion) and answers slaves with their master", function()
        local rt = route.new()
        local r = reg(rt, { addr = "m:1", ha = "m:2", id = 0, topics = { { "T" } } })
        assert.is_true(r.first)
        assert.is_nil(r.masterAddr)
        r = reg(rt, { addr = "s:1", ha = "s:2", id = 1, conn = 2 })
        assert.equal("m:1", r.masterAddr)
        assert.equal("m:2", r.haServerAddr)
        assert.equal(1, rt:conn_closed(1))           -- the master's connection
        reg(rt, { addr = "s:1", ha = "s:2", id = 0, conn = 2, topics = { { "T" } } })
        assert.matches('"brokerAddrs":{0:"s:1"}', rt:route("T", false), 1, true)
        assert.same({ topics = 1, brokers = 1, clusters = 1, live = 1 }, rt:counts())
    end)

    it("leaves no empty topic, broker name or cluster behind", function()
        local rt = route.new()
        reg(rt, { cluster = "C1", name = "a", addr = "a:0", topics = { { "Shared" }, { "OnlyA" } }, conn = 1 })
        reg(rt, { cluster = "C1", name = "a", addr = "a:1", id = 1, conn = 2 })
        reg(rt, { cluster = "C2", name = "b", addr = "b:0", topics = { { "Shared" } }, conn = 3 })
        assert.equal(1, rt:unregister("C1", "a:0", "a", 0))
        assert.truthy(rt:route("OnlyA", false))     -- the group keeps its slave
        assert.equal(1, rt:conn_closed(2))
        assert.is_nil(rt:route("OnlyA", false))
        assert.same({ topics = 1, brokers = 1, clusters = 1, live = 1 }, rt:counts())
        assert.equal('{"brokerAddrTable":{"b":{"brokerAddrs":{0:"b:0"},"brokerName":"b",'
            .. '"cluster":"C2"}},"clusterAddrTable":{"C2":["b"]}}', rt:cluster_info())
        assert.equal(0, rt:conn_closed(99))
        assert.equal(1, rt:conn_closed(3))
        assert.same({ topics = 0, brokers = 0, clusters = 0, live = 0 }, rt:counts())
        assert.equal('{"brokerAddrTable":{},"clusterAddrTable":{}}', rt:cluster_info())
    end)

    it("expires brokers by their own timeout in one scan", function()
        local rt = route.new()
        rt:set_opt("brokerChannelExpiredTime", 100000)
        reg(rt, { name = "a", addr = "a:0", timeout = 1, topics = { { "A" } }, conn = 1 })
        reg(rt, { name = "b", addr = "b:0", timeout = 1, topics = { { "B" } }, conn = 2 })
        reg(rt, { name = "c", addr = "c:0", topics = { { "C" } }, conn = 3 })
        local t0 = core.mono_ms()
        while core.mono_ms() - t0 < 5 do end
        assert.equal(2, rt:scan())
        assert.same({ topics = 1, brokers = 1, clusters = 1, live = 1 }, rt:counts())
    end)

    it("carries filter servers into routes", function()
        local rt = route.new()
        reg(rt, { addr = "a:0", topics = { { "T" } }, filters = { "f:1", "f:2" } })
        assert.matches('"filterServerTable":{"a:0":["f:1","f:2"]}', rt:route("T", true), 1, true)
        reg(rt, { addr = "a:0", topics = { { "T" } }, filters = {} })
        assert.matches('"filterServerTable":{}', rt:route("T", true), 1, true)
    end)

    it("keeps KV config in Java's HashMap order and dumps kvConfig.json", function()
        local rt = route.new()
        rt:kv_put("ORDER_TOPIC_CONFIG", "broker-b", "1")
        rt:kv_put("ORDER_TOPIC_CONFIG", "broker-a", "2")
        assert.equal('{"table":{"broker-b":"1","broker-a":"2"}}', rt:kv_list("ORDER_TOPIC_CONFIG"))
        assert.is_true(rt:kv_delete("ORDER_TOPIC_CONFIG", "broker-a"))
        assert.is_false(rt:kv_delete("ORDER_TOPIC_CONFIG", "broker-a"))
        assert.equal('{"configTable":{"ORDER_TOPIC_CONFIG":{"broker-b":"1"}}}', rt:kv_dump())
        assert.is_nil(rt:kv_get("nope", "x"))
        local path = tmp.name()
        assert.is_true(rt:kv_persist(path))
        local f = assert(io.open(path))
        assert.equal(rt:kv_dump(), f:read("a"))
        f:close()
        os.remove(path)
        local ok, err = rt:kv_persist("/proc/no/such/dir/kv.json")
        assert.is_nil(ok)
        assert.matches("cannot create directory /proc/no", err, 1, true)
    end)
end)

describe("rmq.namesrv.register", function()
    local JSON = ns.body_json({ counter = 3, timestamp = 42, topics = { { "B", 2, 2, 6 }, { "A", 1, 1, 7 } },
                                filters = { "f:1" } })

    it("decodes a RegisterBrokerBody, topics sorted by name", function()
        local r = assert(register.decode(JSON))
        assert.same({ counter = 3, timestamp = 42 }, r.dv)
        assert.same({ { name = "A", read = 1, write = 1, perm = 7, sysflag = 0 },
                      { name = "B", read = 2, write = 2, perm = 6, sysflag = 0 } }, r.topics)
        assert.same({ "f:1" }, r.filters)
    end)

    it("decodes the compressed form to the same thing", function()
        local z = ns.body_compressed({ counter = 3, timestamp = 42, topics = { { "B", 2, 2, 6 }, { "A", 1, 1, 7 } } })
        local r = assert(register.decode(z, { compressed = true }))
        assert.same({ counter = 3, timestamp = 42 }, r.dv)
        assert.equal("A", r.topics[1].name)
        assert.equal(7, r.topics[1].perm)
        assert.same({}, r.filters)
    end)

    it("decodes the bare wrapper of old brokers, an absent body, and Java's defaults", function()
        local r = assert(register.decode('{"dataVersion":{"counter":1,"timestamp":2},'
            .. '"topicConfigTable":{"T":{"topicName":"T"}}}', { bare_wrapper = true }))
        assert.same({ { name = "T", read = 16, write = 16, perm = 6, sysflag = 0 } }, r.topics)
        assert.is_nil(r.filters)
        r = assert(register.decode(nil))
        assert.same({ counter = 0, timestamp = 0 }, r.dv)
        assert.same({}, r.topics)
    end)

    it("reads the 5.x stateVersion", function()
        local r = assert(register.decode(ns.body_json({ counter = 1, state = 9, topics = {} })))
        assert.equal(9, r.dv.state)
    end)

    it("refuses what it cannot use, with a reason", function()
        local cases = {
            { "{", "malformed JSON" },
            { '{"topicConfigSerializeWrapper":7}', "topicConfigSerializeWrapper is not an object" },
            { '{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":5}}}', "is not an object" },
            { '{"filterServerList":[1]}', "filterServerList%[1%] is not a string" },
            { '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x"}}}', "counter is not an integer" },
        }
        for _, c in ipairs(cases) do
            local r, err = register.decode(c[1])
            assert.is_nil(r, c[1])
            assert.matches(c[2], err)
        end
        local big = core.deflate(string.rep("x", 100000))
        local r, err = register.decode(big, { compressed = true, max_inflated = 1000 })
        assert.is_nil(r)
        assert.matches("over the limit", err)
        r, err = register.decode(core.deflate(string.pack(">s4i4s4", "{}", 1, "T 1 1 6 NO_SUCH_TYPE")),
            { compressed = true })
        assert.is_nil(r)
        assert.matches("unknown topicFilterType", err)
        r, err = register.decode(core.deflate(string.pack(">s4i4", "{}", 0)), { compressed = true })
        assert.is_nil(r)
        assert.matches("ends inside", err)
    end)
end)

describe("rmq.fastjson", function()
    it("quotes bare numeric keys and leaves everything else alone", function()
        assert.equal('{"0":"a","12":{"3":4}}', fastjson.quote_keys('{0:"a",12:{3:4}}'))
        assert.equal('{"k":[1,2,{"5":6}],"s":"{0:1}"}', fastjson.quote_keys('{"k":[1,2,{5:6}],"s":"{0:1}"}'))
        local plain = '{"a":[1,2,3],"b":"x, 1:2"}'
        assert.equal(plain, fastjson.quote_keys(plain))
        assert.same({ currIdMap = { ["0"] = 0, ["-1"] = 1 } },
            fastjson.decode('{"currIdMap":{0:0, -1 : 1}}'))
        assert.is_nil((fastjson.decode("{")))
    end)
end)
