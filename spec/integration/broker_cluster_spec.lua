-- A cluster with real processes (issue 5): two NameServers, two broker
-- groups (broker-a, broker-b) in one cluster, a topic on both, our
-- producer spreading sends over both; broker-b is killed (SIGKILL):
-- the NameServers drop it at once (its connections closed), and sends
-- go on through broker-a within the producer's retry budget.  Then
-- broker-b comes back with its store and takes sends again.
local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local server = require("support.server")
local admin = require("support.admin")
local ns = require("support.nsclient")
local producer = require("rmq.client.producer")

local TOPIC = "ClusterTopic"

local function real_ns()
    return server.start({ role = "namesrv", workers = 2, kvConfigPath = server.tmpdir() .. "/kv.json" })
end

local call, create_topic = admin.call, admin.create_topic

local function brokers_of(addr)
    local c = assert(net.connect(addr))
    local info = ns.cluster_info(c)
    local rt = ns.route(c, TOPIC)
    c:close()
    local names = {}
    for _, name in ipairs(info.clusterAddrTable.DefaultCluster or {}) do
        names[#names + 1] = name
    end
    table.sort(names)
    local queues = {}
    for _, qd in ipairs(rt and rt.queueDatas or {}) do
        queues[#queues + 1] = qd.brokerName
    end
    table.sort(queues)
    return table.concat(names, ","), table.concat(queues, ",")
end

local function puts(addr)
    return tonumber(cjson.decode(call(addr, { code = 28 }).body).table.msgPutTotalTodayNow)
end

describe("cluster of two broker groups and two NameServers", function()
    local n1, n2, a, b, b_conf, namesrv

    setup(function()
        n1, n2 = real_ns(), real_ns()
        namesrv = n1.addr .. ";" .. n2.addr
        local function conf(name)
            return {
                role = "broker", workers = 2, brokerName = name, brokerClusterName = "DefaultCluster",
                storePathRootDir = server.tmpdir() .. "/store-" .. name,
                mappedFileSizeCommitLog = 1024 * 1024, namesrvAddr = namesrv,
            }
        end
        a = server.start(conf("broker-a"))
        b_conf = conf("broker-b")
        b = server.start(b_conf)
    end)

    teardown(function()
        for _, s in ipairs({ a, b, n1, n2 }) do
            if s and not s.proc.exited then
                s:stop()
            end
        end
    end)

    it("spreads sends, survives losing broker-b, and takes it back", function()
        -- The topic on both groups (mqadmin updateTopic -c DefaultCluster).
        create_topic(a.addr, TOPIC, 4)
        create_topic(b.addr, TOPIC, 4)
        for _, n in ipairs({ n1, n2 }) do
            local names, queues = brokers_of(n.addr)
            assert.equal("broker-a,broker-b", names)
            assert.equal("broker-a,broker-b", queues)
        end

        local p = producer.new({ namesrvAddr = namesrv, producerGroup = "ClusterGroup" })
        local by = {}
        for i = 1, 40 do
            local r, err = p:send({ topic = TOPIC, body = "before " .. i })
            assert.truthy(r, err)
            assert.equal("SEND_OK", r.status)
            by[r.queue.brokerName] = (by[r.queue.brokerName] or 0) + 1
        end
        assert.equal(20, by["broker-a"])
        assert.equal(20, by["broker-b"])

        -- broker-b dies: both NameServers drop it when its connection
        -- closes, long before the 120 s expiry.
        local t0 = core.mono_ms()
        b:kill()
        for _, n in ipairs({ n1, n2 }) do
            assert.truthy(server.eventually(function()
                local names, queues = brokers_of(n.addr)
                return names == "broker-a" and queues == "broker-a"
            end, 30000), "NameServer " .. n.addr .. " still has broker-b")
        end
        -- a bound well under the expiry, not a speed (a loaded machine)
        assert.is_true(core.mono_ms() - t0 < 60000)

        -- The producer still has broker-b in its route: a send that picks
        -- it fails to connect and is retried on broker-a.
        local before = puts(a.addr)
        for i = 1, 40 do
            local s0 = core.mono_ms()
            local r, err = p:send({ topic = TOPIC, body = "after " .. i })
            assert.truthy(r, err)
            assert.equal("SEND_OK", r.status)
            assert.equal("broker-a", r.queue.brokerName)
            assert.is_true(core.mono_ms() - s0 < p.sendMsgTimeout)
        end
        assert.truthy(server.eventually(function() return puts(a.addr) >= before + 40 end, 3000))
        -- A new producer asks the NameServers: only broker-a.
        local p2 = producer.new({ namesrvAddr = n2.addr, producerGroup = "ClusterGroup2" })
        for i = 1, 8 do
            local r = assert(p2:send({ topic = TOPIC, body = "new " .. i }))
            assert.equal("broker-a", r.queue.brokerName)
        end

        -- broker-b restarts on its store (new ports): registered again
        -- with its topic, and new producers spread over both once more.
        b = server.start(b_conf)
        for _, n in ipairs({ n1, n2 }) do
            local names, queues = brokers_of(n.addr)
            assert.equal("broker-a,broker-b", names)
            assert.equal("broker-a,broker-b", queues)
        end
        local p3 = producer.new({ namesrvAddr = namesrv, producerGroup = "ClusterGroup3" })
        by = {}
        for i = 1, 16 do
            local r = assert(p3:send({ topic = TOPIC, body = "again " .. i }))
            by[r.queue.brokerName] = (by[r.queue.brokerName] or 0) + 1
        end
        assert.equal(8, by["broker-a"])
        assert.equal(8, by["broker-b"])
    end)
end)
