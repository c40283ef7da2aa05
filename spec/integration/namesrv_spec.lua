-- The NameServer role end to end: real rmq-server processes on loopback,
-- driven over TCP the way brokers, clients and mqadmin drive a RocketMQ
-- 4.9.8 NameServer (protocol.md §3).
local net = require("rmq.net")
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local ns = require("support.nsclient")

local req, resp = codes.request, codes.response

local function start(extra, overrides)
    local dir = server.tmpdir()
    local conf = { role = "namesrv", workers = 2, kvConfigPath = dir .. "/kv/kvConfig.json" }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    local s = server.start(conf, overrides)
    s.kv_path = conf.kvConfigPath
    return s
end

local function connect(s)
    return assert(net.connect(s.addr))
end

local NOT_EXIST = "No topic route info in name server for the topic: %s\n"
    .. "See http://rocketmq.apache.org/docs/faq/ for further details."

-- Two clusters, two broker groups, a master and a slave each.
local A0 = { cluster = "ClusterA", name = "broker-a", id = 0, addr = "10.0.0.1:10911",
             ha = "10.0.0.1:10912", counter = 1,
             topics = { { "TopicAB", 4, 4, 6 }, { "TopicA", 8, 8, 6 }, { "TBW102", 8, 8, 7 } } }
local A1 = { cluster = "ClusterA", name = "broker-a", id = 1, addr = "10.0.0.2:10911",
             ha = "10.0.0.2:10912", counter = 1,
             topics = { { "TopicAB", 4, 4, 6 }, { "SlaveOnly", 1, 1, 6 } } }
local B0 = { cluster = "ClusterB", name = "broker-b", id = 0, addr = "10.0.1.1:10911",
             ha = "10.0.1.1:10912", counter = 1, compressed = true,
             topics = { { "TopicAB", 2, 2, 6 }, { "TopicB", 4, 4, 6 } } }
local B1 = { cluster = "ClusterB", name = "broker-b", id = 1, addr = "10.0.1.2:10911",
             ha = "10.0.1.2:10912", counter = 1, topics = {} }

local function with(base, changes)
    local t = {}
    for k, v in pairs(base) do
        t[k] = v
    end
    for k, v in pairs(changes or {}) do
        t[k] = v
    end
    return t
end

describe("NameServer", function()
    local s, admin
    local conns = {}

    local function broker(key, o)
        conns[key] = conns[key] or connect(s)
        local r = assert(ns.register(conns[key], o))
        return r
    end

    local function drop(key)
        if conns[key] then
            conns[key]:close()
            conns[key] = nil
        end
    end

    local function eventually_route(topic, pred)
        return server.eventually(function()
            local rt = ns.route(admin, topic)
            return pred(rt)
        end, 3000)
    end

    before_each(function()
        s = start({ brokerChannelExpiredTime = 120000 })
        admin = connect(s)
    end)

    after_each(function()
        for k in pairs(conns) do
            drop(k)
        end
        if admin then
            admin:close()
        end
        if s then
            assert.equal(0, (s:stop()))
        end
    end)

    describe("registration", function()
        it("registers masters and slaves of two broker groups in two clusters", function()
            local ra0 = broker("a0", A0)
            assert.equal(0, ra0.code)
            assert.same({}, ra0.ext)            -- a master gets no masterAddr
            assert.is_nil(ra0.body)             -- no ORDER_TOPIC_CONFIG yet
            local ra1 = broker("a1", A1)
            assert.equal(0, ra1.code)
            assert.same({ masterAddr = A0.addr, haServerAddr = A0.ha }, ra1.ext)
            assert.equal(0, broker("b0", B0).code)   -- compressed body
            local rb1 = broker("b1", B1)
            assert.same({ masterAddr = B0.addr, haServerAddr = B0.ha }, rb1.ext)

            local info = ns.cluster_info(admin)
            local names = {}
            for c, list in pairs(info.clusterAddrTable) do
                names[c] = list
            end
            assert.same({ ClusterA = { "broker-a" }, ClusterB = { "broker-b" } }, names)
            assert.equal("ClusterA", info.brokerAddrTable["broker-a"].cluster)
            assert.same({ ["0"] = A0.addr, ["1"] = A1.addr },
                info.brokerAddrTable["broker-a"].brokerAddrs)
            assert.same({ ["0"] = B0.addr, ["1"] = B1.addr },
                info.brokerAddrTable["broker-b"].brokerAddrs)

            -- A topic on both groups: both BrokerDatas, queue data from masters.
            local route = assert(ns.route(admin, "TopicAB"))
            assert.equal(2, #route.brokerDatas)
            assert.same({ [0] = A0.addr, [1] = A1.addr }, ns.addrs(route, "broker-a"))
            assert.same({ [0] = B0.addr, [1] = B1.addr }, ns.addrs(route, "broker-b"))
            assert.same({ brokerName = "broker-a", perm = 6, readQueueNums = 4, writeQueueNums = 4,
                          topicSysFlag = 0 }, ns.queue(route, "broker-a"))
            assert.same({ brokerName = "broker-b", perm = 6, readQueueNums = 2, writeQueueNums = 2,
                          topicSysFlag = 0 }, ns.queue(route, "broker-b"))
            assert.same({}, route.filterServerTable)
            local rb = assert(ns.route(admin, "TopicB"))
            assert.equal(1, #rb.brokerDatas)
            assert.equal("broker-b", rb.brokerDatas[1].brokerName)
            -- A 4.x slave's topic configs are not taken.
            assert.is_nil((ns.route(admin, "SlaveOnly")))
        end)

        it("writes quoted ids for clients >= 4.9.4 and fastjson's bare ids for older ones", function()
            broker("a0", A0)
            local r = assert(admin:call({ code = req.GET_ROUTEINFO_BY_TOPIC,
                                          ext = { topic = "TopicA" }, version = 409 }))
            assert.matches('"brokerAddrs":{"0":"10.0.0.1:10911"}', r.body, 1, true)
            r = assert(admin:call({ code = req.GET_ROUTEINFO_BY_TOPIC,
                                    ext = { topic = "TopicA" }, version = 333 }))
            assert.matches('"brokerAddrs":{0:"10.0.0.1:10911"}', r.body, 1, true)
            r = assert(admin:call({ code = req.GET_ROUTEINFO_BY_TOPIC, version = 121,
                                    ext = { topic = "TopicA", acceptStandardJsonOnly = "true" } }))
            assert.matches('"brokerAddrs":{"0":"10.0.0.1:10911"}', r.body, 1, true)
            -- The exact body a 4.9.8 NameServer writes for this state.
            assert.equal('{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},'
                .. '"brokerName":"broker-a","cluster":"ClusterA"}],"filterServerTable":{},'
                .. '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,'
                .. '"topicSysFlag":0,"writeQueueNums":8}]}', r.body)
        end)

        it("answers TOPIC_NOT_EXIST with RocketMQ's remark for an unknown topic", function()
            broker("a0", A0)
            local route, r = ns.route(admin, "NoSuchTopic")
            assert.is_nil(route)
            assert.equal(resp.TOPIC_NOT_EXIST, r.code)
            assert.equal(NOT_EXIST:format("NoSuchTopic"), r.remark)
            assert.is_nil(r.body)
            r = assert(admin:call({ code = req.GET_ROUTEINFO_BY_TOPIC }))
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.equal("the custom field <topic> is null", r.remark)
        end)

        it("promotes a slave: its address under id 0 replaces its old id", function()
            broker("a0", A0)
            broker("a1", A1)
            drop("a0")   -- the master goes away
            assert.truthy(eventually_route("TopicA", function(rt)
                local a = ns.addrs(rt, "broker-a")
                return a and a[0] == nil and a[1] == A1.addr
            end))
            local r = broker("a1", with(A1, { id = 0, counter = 2, topics = A0.topics }))
            assert.same({}, r.ext)
            local route = assert(ns.route(admin, "TopicA"))
            assert.same({ [0] = A1.addr }, ns.addrs(route, "broker-a"))
        end)

        it("ignores a registration whose stateVersion is older than the live one (5.x)", function()
            broker("a0", with(A0, { state = 5, acting = false }))
            local r = broker("x0", with(A0, { addr = "10.0.0.9:10911", state = 3, acting = false,
                                             topics = { { "Intruder", 1, 1, 6 } } }))
            assert.equal(0, r.code)
            assert.same({ [0] = A0.addr }, ns.addrs(assert(ns.route(admin, "TopicA")), "broker-a"))
            assert.is_nil((ns.route(admin, "Intruder")))
            -- A newer one takes the id over.
            broker("x0", with(A0, { addr = "10.0.0.9:10911", state = 6, acting = false }))
            assert.same({ [0] = "10.0.0.9:10911" },
                ns.addrs(assert(ns.route(admin, "TopicA")), "broker-a"))
        end)

        it("rebuilds queue data only when the broker's DataVersion changed", function()
            broker("a0", A0)
            -- Same counter: the new queue numbers are not taken.
            broker("a0", with(A0, { topics = { { "TopicA", 2, 2, 6 } } }))
            assert.equal(8, ns.queue(assert(ns.route(admin, "TopicA")), "broker-a").readQueueNums)
            -- New counter: taken; topics missing from the body stay.
            broker("a0", with(A0, { counter = 2, topics = { { "TopicA", 2, 2, 6 } } }))
            assert.equal(2, ns.queue(assert(ns.route(admin, "TopicA")), "broker-a").readQueueNums)
            assert.truthy((ns.route(admin, "TopicAB")))
        end)

        it("answers QUERY_DATA_VERSION and treats an unchanged one as a heartbeat", function()
            broker("a0", A0)
            local function query(counter)
                return assert(admin:call({ code = req.QUERY_DATA_VERSION, ext = {
                    brokerName = A0.name, brokerAddr = A0.addr, clusterName = A0.cluster,
                    brokerId = "0" }, body = ('{"counter":%d,"timestamp":1700000000000}'):format(counter) }))
            end
            local r = query(1)
            assert.equal(0, r.code)
            assert.equal("false", r.ext.changed)
            assert.equal('{"counter":1,"timestamp":1700000000000}', r.body)
            r = query(7)
            assert.equal("true", r.ext.changed)
            r = assert(admin:call({ code = req.QUERY_DATA_VERSION, ext = {
                brokerName = "x", brokerAddr = "1.2.3.4:5", clusterName = "c", brokerId = "0" },
                body = '{"counter":1,"timestamp":1}' }))
            assert.equal("true", r.ext.changed)
            assert.is_nil(r.body)
        end)

        it("unregisters a broker on UNREGISTER_BROKER and leaves nothing empty behind", function()
            broker("a0", A0)
            broker("b0", B0)
            local r = assert(ns.unregister(conns.b0, B0))
            assert.equal(0, r.code)
            assert.same({}, r.ext)
            assert.is_nil((ns.route(admin, "TopicB")))
            local route = assert(ns.route(admin, "TopicAB"))
            assert.equal(1, #route.brokerDatas)
            assert.equal(1, #route.queueDatas)
            local info = ns.cluster_info(admin)
            assert.is_nil(info.clusterAddrTable.ClusterB)
            assert.is_nil(info.brokerAddrTable["broker-b"])
        end)
    end)

    describe("liveness", function()
        it("removes a broker at once when its connection closes", function()
            broker("a0", A0)
            broker("a1", A1)
            broker("b0", B0)
            broker("b1", B1)
            -- A slave goes: only its address leaves.
            drop("b1")
            assert.truthy(eventually_route("TopicB", function(rt)
                local a = ns.addrs(rt, "broker-b")
                return a and a[1] == nil and a[0] == B0.addr
            end))
            -- The master of broker-a goes: the group stays (its slave
            -- serves reads), without id 0.
            drop("a0")
            assert.truthy(eventually_route("TopicA", function(rt)
                local a = ns.addrs(rt, "broker-a")
                return a and a[0] == nil and a[1] == A1.addr
            end))
            -- The last one goes: the group, its topics and its cluster too.
            drop("a1")
            assert.truthy(eventually_route("TopicA", function(rt) return rt == nil end))
            local info = ns.cluster_info(admin)
            assert.is_nil(info.clusterAddrTable.ClusterA)
            assert.is_nil(info.brokerAddrTable["broker-a"])
            local route = assert(ns.route(admin, "TopicAB"))
            assert.equal(1, #route.queueDatas)
            assert.equal("broker-b", route.queueDatas[1].brokerName)
            -- A client's connection closing changes nothing.
            local c = connect(s)
            assert.truthy((ns.route(c, "TopicB")))
            c:close()
            net.sleep(50)
            assert.truthy((ns.route(admin, "TopicB")))
        end)
    end)

    describe("admin", function()
        it("wipes and adds the write permission of a broker's topics", function()
            broker("a0", A0)
            broker("b0", B0)
            local r = assert(admin:call({ code = req.WIPE_WRITE_PERM_OF_BROKER,
                                          ext = { brokerName = "broker-a" } }))
            assert.equal(0, r.code)
            assert.equal("3", r.ext.wipeTopicCount)
            local route = assert(ns.route(admin, "TopicAB"))
            assert.equal(4, ns.queue(route, "broker-a").perm)
            assert.equal(6, ns.queue(route, "broker-b").perm)
            assert.equal(5, ns.queue(assert(ns.route(admin, "TBW102")), "broker-a").perm)
            -- An unchanged DataVersion does not restore it...
            broker("a0", A0)
            assert.equal(4, ns.queue(assert(ns.route(admin, "TopicAB")), "broker-a").perm)
            r = assert(admin:call({ code = req.ADD_WRITE_PERM_OF_BROKER,
                                    ext = { brokerName = "broker-a" } }))
            assert.equal("3", r.ext.addTopicCount)
            assert.equal(6, ns.queue(assert(ns.route(admin, "TBW102")), "broker-a").perm)
            r = assert(admin:call({ code = req.WIPE_WRITE_PERM_OF_BROKER,
                                    ext = { brokerName = "nobody" } }))
            assert.equal("0", r.ext.wipeTopicCount)
            -- ... a new one does.
            admin:call({ code = req.WIPE_WRITE_PERM_OF_BROKER, ext = { brokerName = "broker-a" } })
            broker("a0", with(A0, { counter = 2 }))
            assert.equal(6, ns.queue(assert(ns.route(admin, "TopicAB")), "broker-a").perm)
        end)

        it("deletes a topic, everywhere or in one cluster", function()
            broker("a0", A0)
            broker("b0", B0)
            local r = assert(admin:call({ code = req.DELETE_TOPIC_IN_NAMESRV,
                                          ext = { topic = "TopicAB", clusterName = "ClusterB" } }))
            assert.equal(0, r.code)
            local route = assert(ns.route(admin, "TopicAB"))
            assert.equal(1, #route.queueDatas)
            assert.equal("broker-a", route.queueDatas[1].brokerName)
            r = assert(admin:call({ code = req.DELETE_TOPIC_IN_NAMESRV, ext = { topic = "TopicA" } }))
            assert.equal(0, r.code)
            assert.is_nil((ns.route(admin, "TopicA")))
            -- The last cluster's delete removes the topic.
            admin:call({ code = req.DELETE_TOPIC_IN_NAMESRV,
                         ext = { topic = "TopicAB", clusterName = "ClusterA" } })
            assert.is_nil((ns.route(admin, "TopicAB")))
            r = assert(admin:call({ code = req.DELETE_TOPIC_IN_NAMESRV, ext = {} }))
            assert.equal(resp.SYSTEM_ERROR, r.code)
        end)

        it("lists topics: all, by cluster, system, unit flags", function()
            broker("a0", with(A0, { topics = { { "TopicA", 4, 4, 6 }, { "Unit", 1, 1, 6, 1 },
                                               { "UnitSub", 1, 1, 6, 2 }, { "Both", 1, 1, 6, 3 } } }))
            broker("b0", B0)
            assert.same({ "Both", "TopicA", "TopicAB", "TopicB", "Unit", "UnitSub" },
                (ns.topic_list(admin, req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)))
            assert.same({ "TopicAB", "TopicB" },
                (ns.topic_list(admin, req.GET_TOPICS_BY_CLUSTER, { cluster = "ClusterB" })))
            assert.same({}, (ns.topic_list(admin, req.GET_TOPICS_BY_CLUSTER, { cluster = "Nope" })))
            local list, t = ns.topic_list(admin, req.GET_SYSTEM_TOPIC_LIST_FROM_NS)
            assert.same({ "ClusterA", "ClusterB", "broker-a", "broker-b" }, list)
            assert.truthy(t.brokerAddr == A0.addr or t.brokerAddr == B0.addr)
            assert.same({ "Both", "Unit" }, (ns.topic_list(admin, req.GET_UNIT_TOPIC_LIST)))
            assert.same({ "Both", "UnitSub" }, (ns.topic_list(admin, req.GET_HAS_UNIT_SUB_TOPIC_LIST)))
            assert.same({ "UnitSub" }, (ns.topic_list(admin, req.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)))
        end)

        it("reads and updates its configuration, refusing black-listed keys", function()
            local r = assert(admin:call({ code = req.GET_NAMESRV_CONFIG }))
            assert.equal(0, r.code)
            assert.matches("\norderMessageEnable=false\n", r.body, 1, true)
            assert.matches("kvConfigPath=" .. s.kv_path .. "\n", r.body, 1, true)
            r = assert(admin:call({ code = req.UPDATE_NAMESRV_CONFIG, body = "kvConfigPath=/tmp/x\n" }))
            assert.equal(resp.NO_PERMISSION, r.code)
            assert.equal("Can not update config in black list.", r.remark)
            r = assert(admin:call({ code = req.UPDATE_NAMESRV_CONFIG,
                                    body = "scanNotActiveBrokerInterval=abc\n" }))
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("scanNotActiveBrokerInterval", r.remark)
            r = assert(admin:call({ code = req.UPDATE_NAMESRV_CONFIG,
                                    body = "# from mqadmin\norderMessageEnable=true\nenableTopicList : false\n" }))
            assert.equal(0, r.code)
            -- Every worker sees it: ask over several connections.
            for _ = 1, 4 do
                local c = connect(s)
                local g = assert(c:call({ code = req.GET_NAMESRV_CONFIG }))
                assert.matches("\norderMessageEnable=true\n", g.body, 1, true)
                local l = assert(c:call({ code = req.GET_UNIT_TOPIC_LIST }))
                assert.equal(resp.SYSTEM_ERROR, l.code)
                assert.equal("disable", l.remark)
                c:close()
            end
        end)

        it("attaches orderTopicConf from ORDER_TOPIC_CONFIG when orderMessageEnable", function()
            broker("a0", A0)
            local r = assert(admin:call({ code = req.PUT_KV_CONFIG, ext = {
                namespace = "ORDER_TOPIC_CONFIG", key = "TopicA", value = "broker-a:8" } }))
            assert.equal(0, r.code)
            assert.is_nil(assert(ns.route(admin, "TopicA")).orderTopicConf)
            -- Registration replies carry the namespace as a KVTable.
            r = broker("a0", A0)
            assert.equal('{"table":{"TopicA":"broker-a:8"}}', r.body)
            admin:call({ code = req.UPDATE_NAMESRV_CONFIG, body = "orderMessageEnable=true" })
            local route = assert(ns.route(admin, "TopicA"))
            assert.equal("broker-a:8", route.orderTopicConf)
            assert.is_nil(assert(ns.route(admin, "TopicAB")).orderTopicConf)
        end)

        it("answers REQUEST_CODE_NOT_SUPPORTED for codes it does not serve", function()
            local r = assert(admin:call({ code = req.SEND_MESSAGE_V2 }))
            assert.equal(resp.REQUEST_CODE_NOT_SUPPORTED, r.code)
            assert.equal(" request type 310 not supported", r.remark)
        end)
    end)

    describe("bad input", function()
        it("refuses a malformed register body with an error and keeps serving", function()
            local c = connect(s)
            local function reg(o)
                return assert(ns.register(c, with(A0, o)))
            end
            local r = reg({ body = "{\"topicConfigSerializeWrapper\":" })
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("^Failed to decode RegisterBrokerBody: malformed JSON", r.remark)
            r = reg({ body = '{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}' })
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("perm is not an integer", r.remark)
            r = reg({ body = "not zlib at all", compressed = true })
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("bad zlib data", r.remark)
            local bad_text = require("rmq.core").deflate(string.pack(">s4i4s4", "{}", 1, "T 4 x 6 SINGLE_TAG"))
            r = reg({ body = bad_text, compressed = true })
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("not an integer", r.remark)
            r = reg({ body = require("rmq.core").deflate(string.pack(">s4i4", "{}", 99)), compressed = true })
            assert.matches("impossible topic count", r.remark)
            -- A wrong CRC is refused and logged.
            local cmd = ns.register_cmd(A0)
            cmd.ext.bodyCrc32 = "12345"
            r = assert(c:call(cmd))
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.equal("crc32 not match", r.remark)
            assert.matches("crc32 not match", s:log())
            -- Missing or broken header fields.
            cmd = ns.register_cmd(A0)
            cmd.ext.brokerName = nil
            r = assert(c:call(cmd))
            assert.equal("the custom field <brokerName> is null", r.remark)
            for _, bad in ipairs({ "zero", "0x1", "1.5", " 0", "9223372036854775808" }) do
                cmd = ns.register_cmd(A0)
                cmd.ext.brokerId = bad
                r = assert(c:call(cmd))
                assert.equal(resp.SYSTEM_ERROR, r.code, bad)
                assert.matches("<brokerId> is not a Long", r.remark, 1, true)
            end
            -- An optional number is not ignored when it does not parse.
            cmd = ns.register_cmd(A0)
            cmd.ext.bodyCrc32 = "12x"
            r = assert(c:call(cmd))
            assert.equal(resp.SYSTEM_ERROR, r.code)
            assert.matches("<bodyCrc32> is not an Integer", r.remark, 1, true)
            -- Nothing of that was registered; the server still serves.
            assert.is_nil((ns.route(admin, "TopicA")))
            assert.matches("bad body", s:log())
            r = reg({})
            assert.equal(0, r.code)
            assert.truthy((ns.route(admin, "TopicA")))
            c:close()
        end)

        it("accepts fastjson's bare numeric keys and the 5.x fields in a register body", function()
            local body = '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
                .. '{"counter":3,"stateVersion":0,"timestamp":1700000000000},"mappingDataVersion":'
                .. '{"counter":0,"timestamp":0},"topicConfigTable":{"StaticT":{"attributes":{},'
                .. '"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
                .. '"topicName":"StaticT","topicSysFlag":0,"writeQueueNums":2}},'
                .. '"topicQueueMappingInfoMap":{"StaticT":{"bname":"broker-a","currIdMap":{0:0,1:1},'
                .. '"epoch":1,"scope":"__global__","topic":"StaticT","totalQueues":2}}}}'
            local r = broker("a0", with(A0, { body = body, acting = false, timeout = 30000 }))
            assert.equal(0, r.code, r.remark)
            local route = assert(ns.route(admin, "StaticT"))
            assert.equal(2, ns.queue(route, "broker-a").readQueueNums)
        end)
    end)
end)

describe("NameServer liveness scan", function()
    it("expires a broker after its heartbeat timeout and keeps one that registers", function()
        -- 2 s: one round of the loop below (two calls and a route, 100 ms
        -- apart) stays far under it on a loaded machine under ASan; with
        -- 800 ms a slow round let the beating broker-b expire too.
        local EXPIRE = 2000
        local s = start({ brokerChannelExpiredTime = EXPIRE, scanNotActiveBrokerInterval = 100 })
        local admin = connect(s)
        local quiet, busy, short, beating = connect(s), connect(s), connect(s), connect(s)
        local mono = require("rmq.core").mono_ms
        assert.equal(0, assert(ns.register(quiet, A0)).code)
        local t0 = mono()   -- broker-a's last word: it expires EXPIRE after
        assert.equal(0, assert(ns.register(busy, B0)).code)
        -- 5.x: a per-broker timeout from the header wins over the default.
        local C0 = { cluster = "ClusterC", name = "broker-c", id = 0, addr = "10.0.2.1:10911",
                     topics = { { "TopicC", 1, 1, 6 } }, timeout = 60000, acting = false }
        assert.equal(0, assert(ns.register(short, C0)).code)
        -- 5.x: BROKER_HEARTBEAT keeps a broker alive between registrations.
        local D0 = { cluster = "ClusterD", name = "broker-d", id = 0, addr = "10.0.3.1:10911",
                     topics = { { "TopicD", 1, 1, 6 } }, acting = true }
        assert.equal(0, assert(ns.register(beating, D0)).code)
        local gone_at
        -- Beating until broker-a is gone and a whole expiry longer (the
        -- others must outlive it by that), at most 30 s.
        while mono() - t0 < 30000 and not (gone_at and mono() - t0 > gone_at + EXPIRE) do
            assert(ns.register(busy, B0))   -- a heartbeat: same DataVersion
            local hb = assert(beating:call({ code = req.BROKER_HEARTBEAT, ext = {
                clusterName = D0.cluster, brokerAddr = D0.addr, brokerName = D0.name } }))
            assert.equal(0, hb.code)
            if not gone_at and not ns.route(admin, "TopicA") then
                gone_at = mono() - t0
            end
            net.sleep(100)
        end
        assert.truthy(gone_at, "broker-a never expired")
        assert.is_true(gone_at >= EXPIRE - 100, "expired too early: " .. tostring(gone_at))
        assert.truthy((ns.route(admin, "TopicB")))
        assert.truthy((ns.route(admin, "TopicC")))
        assert.truthy((ns.route(admin, "TopicD")))
        local info = ns.cluster_info(admin)
        assert.is_nil(info.clusterAddrTable.ClusterA)
        assert.matches("expired", s:log())
        -- Its connection is still open; registering again brings it back.
        assert.equal(0, assert(ns.register(quiet, A0)).code)
        assert.truthy((ns.route(admin, "TopicA")))
        for _, c in ipairs({ admin, quiet, busy, short, beating }) do
            c:close()
        end
        assert.equal(0, (s:stop()))
    end)
end)

describe("Several NameServers", function()
    it("run side by side and never share what brokers tell them", function()
        local s1, s2 = start(), start()
        local b1, b2 = connect(s1), connect(s2)
        assert.equal(0, assert(ns.register(b1, A0)).code)
        assert.equal(0, assert(ns.register(b2, B0)).code)
        assert.truthy((ns.route(b1, "TopicA")))
        assert.is_nil((ns.route(b1, "TopicB")))
        assert.truthy((ns.route(b2, "TopicB")))
        assert.is_nil((ns.route(b2, "TopicA")))
        b1:close()
        b2:close()
        assert.equal(0, (s1:stop()))
        assert.equal(0, (s2:stop()))
    end)
end)

describe("NameServer acting master (5.x)", function()
    it("shows the lowest slave as master when the master is gone and the queue is read-only", function()
        local s = start({ supportActingMaster = true })
        local admin = connect(s)
        local m, sl = connect(s), connect(s)
        local M0 = { cluster = "C", name = "broker-x", id = 0, addr = "10.0.9.1:10911",
                     topics = { { "TopicX", 4, 4, 6 } }, acting = true }
        local S1 = { cluster = "C", name = "broker-x", id = 1, addr = "10.0.9.2:10911",
                     topics = { { "TopicX", 4, 4, 6 }, { "SlaveTopic", 2, 2, 6 } }, acting = true }
        assert(ns.register(m, M0))
        assert(ns.register(sl, S1))
        -- With the master there, the slave is no prime slave: its topic
        -- configs are not taken.
        assert.is_nil((ns.route(admin, "SlaveTopic")))
        m:close()
        -- The master's queues lose PERM_WRITE when it goes (5.x).
        assert.truthy(server.eventually(function()
            local rt = ns.route(admin, "TopicX")
            return rt and ns.queue(rt, "broker-x").perm == 4
        end, 3000))
        local route = assert(ns.route(admin, "TopicX"))
        assert.same({ [0] = S1.addr }, ns.addrs(route, "broker-x"))
        -- Now the slave is the prime slave: its configs count, write-wiped.
        assert(ns.register(sl, with(S1, { counter = 2 })))
        local st = assert(ns.route(admin, "SlaveTopic"))
        assert.equal(4, ns.queue(st, "broker-x").perm)
        assert.same({ [0] = S1.addr }, ns.addrs(st, "broker-x"))
        -- Without supportActingMaster the route shows the slave as it is.
        admin:call({ code = req.UPDATE_NAMESRV_CONFIG, body = "supportActingMaster=false" })
        assert.same({ [1] = S1.addr }, ns.addrs(assert(ns.route(admin, "TopicX")), "broker-x"))
        admin:close()
        sl:close()
        assert.equal(0, (s:stop()))
    end)
end)

describe("NameServer KV config", function()
    it("keeps KV config across a restart, in RocketMQ's kvConfig.json format", function()
        local s = start()
        local c = connect(s)
        local function call(code, ext)
            return assert(c:call({ code = code, ext = ext }))
        end
        assert.equal(0, call(req.PUT_KV_CONFIG, { namespace = "NS1", key = "k1", value = "v1" }).code)
        assert.equal(0, call(req.PUT_KV_CONFIG, { namespace = "NS1", key = "k2", value = "v \"2\"" }).code)
        assert.equal(0, call(req.PUT_KV_CONFIG, { namespace = "NS2", key = "k", value = "x" }).code)
        assert.equal(0, call(req.PUT_KV_CONFIG, { namespace = "NS2", key = "k", value = "y" }).code)
        local r = call(req.GET_KV_CONFIG, { namespace = "NS2", key = "k" })
        assert.equal(0, r.code)
        assert.equal("y", r.ext.value)
        r = call(req.GET_KV_CONFIG, { namespace = "NS2", key = "nope" })
        assert.equal(resp.QUERY_NOT_FOUND, r.code)
        assert.equal("No config item, Namespace: NS2 Key: nope", r.remark)
        r = call(req.GET_KVLIST_BY_NAMESPACE, { namespace = "NS1" })
        assert.same({ table = { k1 = "v1", k2 = 'v "2"' } }, fastjson.decode(r.body))
        r = call(req.GET_KVLIST_BY_NAMESPACE, { namespace = "NS9" })
        assert.equal(resp.QUERY_NOT_FOUND, r.code)
        assert.equal("No config item, Namespace: NS9", r.remark)
        assert.equal(0, call(req.DELETE_KV_CONFIG, { namespace = "NS1", key = "k1" }).code)
        r = call(req.PUT_KV_CONFIG, { namespace = "NS1", key = "k3" })
        assert.equal(resp.SYSTEM_ERROR, r.code)
        assert.equal("the custom field <value> is null", r.remark)
        c:close()
        assert.equal(0, (s:stop()))

        local file = server.read_file(s.kv_path)
        assert.same({ configTable = { NS1 = { k2 = 'v "2"' }, NS2 = { k = "y" } } },
            fastjson.decode(file))
        assert.is_nil(io.open(s.kv_path .. ".tmp", "rb"))

        local s2 = server.start({ role = "namesrv", workers = 1, kvConfigPath = s.kv_path })
        c = connect(s2)
        r = call(req.GET_KV_CONFIG, { namespace = "NS1", key = "k2" })
        assert.equal(0, r.code)
        assert.equal('v "2"', r.ext.value)
        r = call(req.GET_KV_CONFIG, { namespace = "NS1", key = "k1" })
        assert.equal(resp.QUERY_NOT_FOUND, r.code)
        assert.equal("y", call(req.GET_KV_CONFIG, { namespace = "NS2", key = "k" }).ext.value)
        c:close()
        assert.equal(0, (s2:stop()))
    end)

    it("refuses to start on a corrupt KV config file rather than overwrite it", function()
        local dir = server.tmpdir()
        local f = assert(io.open(dir .. "/kv.json", "w"))
        f:write("{not json")
        f:close()
        local ok, err = pcall(server.start, { role = "namesrv", kvConfigPath = dir .. "/kv.json" })
        assert.is_false(ok)
        assert.matches("not valid JSON", err)
        assert.equal("{not json", server.read_file(dir .. "/kv.json"))
    end)
end)
