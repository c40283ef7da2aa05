-- The controller on a three-member etcd cluster, with real brokers: two
-- rmq controllers (etcdEndpoints naming all three members), a NameServer
-- and three brokers of one set in controller mode.
--
--   * one etcd member killed (kill -9, the first of every controller's
--     etcdEndpoints, so the client must move on): elections still happen;
--   * two members killed (no quorum): the brokers keep their roles and
--     the master keeps taking sends, the route does not change, both
--     controllers refuse elections (no split brain), and each logs "etcd
--     unreachable" about once a second however many requests come;
--   * the members back: elections work again;
--   * the active controller killed (kill -9): the other takes over within
--     about the lease time, and the next election works;
--   * the web console of a broker shows the set's master, epoch and
--     SyncStateSet (/api/controller).
local net = require("rmq.net")
local core = require("rmq.core")
local codes = require("rmq.codes")
local server = require("support.server")
local etcd = require("support.etcd")
local ns = require("support.nsclient")
local producer = require("rmq.client.producer")
local prom = require("support.prom")

local req = codes.request
local NOT_LEADER = codes.response.CONTROLLER_NOT_LEADER
local TTL = 2     -- etcdLeaseTtlSeconds

describe("controller on a three-member etcd", function()
    if not etcd.available() then
        pending(etcd.why)
        return
    end

    local cl, ctl, namesrv, admin, p
    local brokers, stores = {}, {}

    local function start_controller()
        return server.start({ role = "controller" }, { "etcdEndpoints=" .. cl.urls,
            "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=" .. TTL, "etcdRequestTimeoutMillis=500" })
    end

    local function start_broker(i)
        stores[i] = stores[i] or require("support.tmp").dir()
        return server.start({ role = "broker", storePathRootDir = stores[i], brokerClusterName = "QCluster",
            brokerName = "bs-q", namesrvAddr = namesrv.addr, enableControllerMode = true,
            controllerAddr = ctl[1].addr .. ";" .. ctl[2].addr,
            brokerHeartbeatInterval = 300, controllerHeartBeatTimeoutMills = 1500,
            syncBrokerMetadataPeriod = 500, haListenPort = 0, workers = 1, autoCreateTopicEnable = true,
            metricsExporterType = "PROM", metricsPromExporterPort = 0, metricsPromExporterHost = "127.0.0.1" })
    end

    local function meta(c)
        local r = net.call(c.addr, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 5000)
        return r and r.ext or {}
    end

    local function active()
        for _, c in pairs(ctl) do
            if meta(c).isLeader == "true" then
                return c
            end
        end
    end

    local function gauge(s, name)
        return prom.value(prom.scrape(s.metrics_addr), name)
    end

    local function route_master()
        local r = ns.route(admin, "TopicQ")
        return r and ns.addrs(r, "bs-q")[0]
    end

    local function broker_at(addr)
        for i, b in pairs(brokers) do
            if b.addr == addr then
                return i
            end
        end
    end

    local function send(body)
        local r = p:send({ topic = "TopicQ", body = body })
        return r and r.status == "SEND_OK" and r
    end

    -- Every broker is in the SyncStateSet and in the route.
    local function formed()
        local m = route_master()
        local i = m and broker_at(m)
        if not i or gauge(brokers[i], "rmq_replica_sync_state_set_size") ~= 3 then
            return false
        end
        local r = ns.route(admin, "TopicQ")
        local n = 0
        for _ in pairs(ns.addrs(r, "bs-q")) do
            n = n + 1
        end
        return n == 3 and i
    end

    -- kill -9 of the master broker: a new master in the route, a send
    -- acknowledged there; the old one restarted on its store rejoins.
    local function fail_master(why)
        local old = assert(route_master())
        local victim = assert(broker_at(old))
        brokers[victim]:kill()
        local t0 = core.mono_ms()
        local new = server.eventually(function()
            local a = route_master()
            return a and a ~= old and a
        end, 20000)
        local logs = ""
        for _, c in pairs(ctl) do
            logs = logs .. c:log()
        end
        assert.truthy(new, why .. ": no new master in the route within 20 s\n" .. logs)
        print(("%s: new master in the route %.0f ms after the kill"):format(why, core.mono_ms() - t0))
        assert.truthy(server.eventually(function() return send(why) end, 20000))
        brokers[victim] = start_broker(victim)
        assert.truthy(server.eventually(formed, 30000), "the set did not form again: " .. brokers[victim]:log())
        return new
    end

    setup(function()
        cl = etcd.cluster(3)
        ctl = { start_controller(), start_controller() }
        namesrv = server.start({ role = "namesrv" })
        admin = assert(net.connect(namesrv.addr))
        assert.truthy(server.eventually(active, 20000))
        for i = 1, 3 do
            brokers[i] = start_broker(i)
        end
        p = producer.new({ namesrvAddr = namesrv.addr, producerGroup = "q-spec", sendMsgTimeout = 3000,
            pollNameServerInterval = 500 })
    end)

    teardown(function()
        for _, b in pairs(brokers) do
            b:kill()
        end
        for _, c in pairs(ctl or {}) do
            c:kill()
        end
        if namesrv then namesrv:kill() end
        if cl then cl:stop() end
    end)

    it("a three-broker set elects a master and forms its SyncStateSet", function()
        assert.truthy(server.eventually(function() return send("first") end, 30000), brokers[1]:log())
        local m = assert(server.eventually(formed, 30000))
        -- The web console of a slave shows the set as the controller keeps it.
        local slave = brokers[m % 3 + 1]
        local status, t = require("support.http").json(slave.metrics_addr, "/api/controller")
        assert.equal(200, status, tostring(t))
        assert.truthy(t.controller == ctl[1].addr or t.controller == ctl[2].addr, t.controller)
        assert.equal(1, #t.sets)
        local set = t.sets[1]
        assert.same({ "bs-q", brokers[m].addr, 1 }, { set.brokerName, set.masterAddress, set.masterEpoch })
        assert.equal(3, #set.inSync)
        assert.equal(0, #set.notInSync)
        for _, x in ipairs(set.inSync) do
            assert.is_true(x.alive)
        end
    end)

    it("one etcd member down (the first of etcdEndpoints): elections still happen", function()
        cl.members[1]:kill()
        fail_master("one etcd member down")
        assert.truthy(active())
    end)

    it("two members down: the master keeps serving, the route holds, elections are refused", function()
        local master = assert(route_master())
        local before = {}
        for i, b in pairs(brokers) do
            before[i] = gauge(b, "rmq_replica_role")
        end
        -- "etcd unreachable" is counted over a window that starts at the
        -- kill, while eight clients to each controller keep asking
        -- GET_NEXT_BROKER_ID: to the active one an etcd read each until
        -- it stands down, then refused at once.  About one line a
        -- second each, whatever the number of failed calls.
        local lines0 = {}
        for i, c in pairs(ctl) do
            lines0[i] = #c:log()
        end
        local t0 = core.mono_ms()
        local asked, running = 0, 0
        for _, c in pairs(ctl) do
            for _ = 1, 8 do
                running = running + 1
                net.spawn(function()
                    while core.mono_ms() - t0 < 6000 do
                        local r = net.call(c.addr, { code = req.CONTROLLER_GET_NEXT_BROKER_ID, ext = {
                            clusterName = "QCluster", brokerName = "bs-q" } }, 10000)
                        assert(r and (r.code == NOT_LEADER or r.code == 0))
                        asked = asked + 1
                    end
                    running = running - 1
                end)
            end
        end
        cl.members[2]:kill()
        -- Both controllers stand down: their leases cannot be renewed.
        assert.truthy(server.eventually(function()
            return meta(ctl[1]).isLeader == "false" and meta(ctl[2]).isLeader == "false"
        end, 20000))
        -- Elections are refused by both, designated or not.
        for _, c in pairs(ctl) do
            for id = 1, 3 do
                local r = assert(net.call(c.addr, { code = req.CONTROLLER_ELECT_MASTER, ext = {
                    clusterName = "QCluster", brokerName = "bs-q", brokerId = tostring(id),
                    designateElect = "true" } }, 10000))
                assert.equal(NOT_LEADER, r.code, r.remark)
            end
        end
        assert.truthy(server.eventually(function() return running == 0 end, 30000))
        local window = (core.mono_ms() - t0) / 1000
        local failed_total = 0
        for i, c in pairs(ctl) do
            local text = c:log():sub(lines0[i] + 1)
            local n, failed = 0, 0
            for calls in text:gmatch("etcd unreachable %([^\n]-%((%d+) failed call%(s%) in the last second%)") do
                n = n + 1
                failed = failed + tonumber(calls)
            end
            failed_total = failed_total + failed
            print(("controller %d: %d 'etcd unreachable' lines in %.1f s, standing for %d failed etcd calls;"
                .. " %d GET_NEXT_BROKER_ID to the two"):format(i, n, window, failed, asked))
            assert.truthy(n >= 1 and n <= window + 3, ("%d lines in %.1f s"):format(n, window))
        end
        -- The active controller's requests failed on etcd many times more
        -- often than lines were written.
        assert.truthy(failed_total > window + 6, failed_total)
        -- The brokers kept their roles; the master takes sends; the route
        -- still names it.
        assert.truthy(send("no quorum"))
        assert.equal(master, route_master())
        for i, b in pairs(brokers) do
            assert.equal(before[i], gauge(b, "rmq_replica_role"))
        end
    end)

    it("the members back: elections work again", function()
        cl:restart(2)
        cl:restart(1)
        cl:wait(2)
        cl:wait(1)
        assert.truthy(server.eventually(active, 20000))
        fail_master("etcd back")
    end)

    it("kill -9 of the active controller: the other takes over within the lease time; the next election works",
        function()
            local a = assert(active())
            local other = a == ctl[1] and ctl[2] or ctl[1]
            a:kill()
            local t0 = core.mono_ms()
            local took = server.eventually(function() return meta(other).isLeader == "true" end, 20000)
            local ms = core.mono_ms() - t0
            assert.truthy(took, other:log())
            print(("takeover: the standby active %.0f ms after kill -9 of the active controller (lease TTL %d s)")
                :format(ms, TTL))
            -- Within the TTL plus one campaign round (TTL/3) and the polling,
            -- with room for a loaded machine.
            assert.truthy(ms < (TTL + 5) * 1000, ("took %.0f ms"):format(ms))
            fail_master("after the controller takeover")
        end)
end)
