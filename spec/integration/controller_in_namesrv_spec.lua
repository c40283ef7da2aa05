-- The controller embedded in a NameServer (5.x's enableControllerInNamesrv):
-- one rmq-server with role = "namesrv", enableControllerInNamesrv and the
-- controller's keys (etcdEndpoints, on a real etcd) serves the NameServer
-- on listenPort and the controller on controllerListenPort, as 5.x's
-- NamesrvStartup runs a ControllerManager on its own port beside the
-- NamesrvController.  Three brokers in controller mode with controllerAddr
-- pointing at it: a master is elected and takes sends; kill -9 of it gives
-- a new master in the route; the NameServer's own requests keep working.
local net = require("rmq.net")
local codes = require("rmq.codes")
local server = require("support.server")
local etcd = require("support.etcd")
local ns = require("support.nsclient")
local producer = require("rmq.client.producer")
local prom = require("support.prom")
local failover = require("support.failover")

local available = etcd.available()
local req = codes.request

describe("the controller embedded in a NameServer (enableControllerInNamesrv)", function()
    if not available then
        pending(etcd.why)
        return
    end

    local e, namesrv, ctl_addr, admin
    local brokers, stores = {}, {}

    local function start_broker(i)
        stores[i] = stores[i] or require("support.tmp").dir()
        return server.start(failover.broker_conf(stores[i], "EmbCluster", "bs-emb", namesrv.addr, ctl_addr, i))
    end

    local function route_addrs()
        local r = ns.route(admin, "TopicEmb")
        return r and ns.addrs(r, "bs-emb") or {}
    end

    local function gauge(s, name)
        return prom.value(prom.scrape(s.metrics_addr), name)
    end

    setup(function()
        e = etcd.start()
        -- workers = 2 asked: the embedding NameServer runs one (the
        -- controller's heartbeat table lives in one Lua state).
        namesrv = server.start({ role = "namesrv", enableControllerInNamesrv = true, controllerListenPort = 0,
            workers = 2, metricsExporterType = "PROM", metricsPromExporterPort = 0,
            metricsPromExporterHost = "127.0.0.1" },
            { "etcdEndpoints=" .. e.url, "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=2" })
        ctl_addr = "127.0.0.1:" .. namesrv.ports.controller
        admin = assert(net.connect(namesrv.addr))
        assert.truthy(server.eventually(function()
            local r = net.call(ctl_addr, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 3000)
            return r and r.ext.isLeader == "true"
        end, 15000), namesrv:log())
        for i = 1, 3 do
            brokers[i] = start_broker(i)
        end
    end)

    teardown(function()
        for _, b in pairs(brokers) do
            b:kill()
        end
        if namesrv then namesrv:kill() end
        if e then e:stop() end
    end)

    it("says READY with both ports, runs one worker, and keeps the two request tables apart", function()
        assert.equal("namesrv", namesrv.role)
        assert.truthy(namesrv.ports.listen ~= namesrv.ports.controller, namesrv.ready_line)
        local log = namesrv:log()
        assert.truthy(log:find("workers 2 ignored: a controller runs one worker", 1, true), log)
        assert.truthy(log:find("role namesrv, 1 workers", 1, true), log)
        -- The controller's address (P/leader, P/members) is its own port.
        local md = net.call(ctl_addr, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 3000)
        assert.equal(0, md.code)
        assert.equal(ctl_addr:match(":(%d+)$"), md.ext.controllerLeaderAddress:match(":(%d+)$"))
        -- As in 5.x: the NameServer's port does not answer controller
        -- requests, nor the controller's port NameServer requests.
        local r = net.call(namesrv.addr, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 3000)
        assert.equal(codes.response.REQUEST_CODE_NOT_SUPPORTED, r.code)
        r = net.call(ctl_addr, { code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = "TopicEmb" } }, 3000)
        assert.equal(codes.response.REQUEST_CODE_NOT_SUPPORTED, r.code)
        -- The controller's config is the namesrv conf's controller keys.
        r = net.call(ctl_addr, { code = req.GET_CONTROLLER_CONFIG, ext = {} }, 3000)
        assert.equal(0, r.code)
        assert.truthy(r.body:find("etcdEndpoints=" .. e.url, 1, true), r.body)
        assert.truthy(r.body:find("scanNotActiveBrokerInterval=300", 1, true), r.body)
        -- GET_NAMESRV_CONFIG shows them where the controller runs, and a
        -- NameServer without it does not list them.
        r = net.call(namesrv.addr, { code = req.GET_NAMESRV_CONFIG, ext = {} }, 3000)
        assert.equal(0, r.code)
        assert.truthy(r.body:find("enableControllerInNamesrv=true", 1, true), r.body)
        assert.truthy(r.body:find("etcdEndpoints=" .. e.url, 1, true), r.body)
        local plain = server.start({ role = "namesrv" })
        r = net.call(plain.addr, { code = req.GET_NAMESRV_CONFIG, ext = {} }, 3000)
        plain:kill()
        assert.equal(0, r.code)
        assert.truthy(r.body:find("enableControllerInNamesrv=false", 1, true), r.body)
        assert.falsy(r.body:find("etcd", 1, true), r.body)
        assert.falsy(r.body:find("electPolicy", 1, true), r.body)
        assert.truthy(r.body:find("scanNotActiveBrokerInterval=", 1, true), r.body)
    end)

    it("elects a master the route names; kill -9 of it: a new master in the route, sends resume", function()
        local p = producer.new({ namesrvAddr = namesrv.addr, producerGroup = "emb-spec", sendMsgTimeout = 3000,
            pollNameServerInterval = 1000 })
        local first = server.eventually(function()
            local r = p:send({ topic = "TopicEmb", body = "before" })
            return r and r.status == "SEND_OK" and r
        end, 20000)
        assert.truthy(first, namesrv:log())
        local addrs, master = failover.wait_route(route_addrs, brokers, 3)
        assert.truthy(addrs, "route: " .. require("cjson").encode(route_addrs()))
        local master_addr = addrs[0]
        assert.truthy(master, master_addr)
        assert.truthy(server.eventually(function() return gauge(brokers[master], "rmq_replica_role") == 1 end))
        assert.truthy(server.eventually(function()
            return gauge(brokers[master], "rmq_replica_sync_state_set_size") == 3
        end, 30000), brokers[master]:log())
        -- The NameServer's /metrics carries the controller's series.
        assert.equal(1, gauge(namesrv, "rmq_controller_active"))
        assert.equal(1, gauge(namesrv, "rmq_controller_elections_total"))

        brokers[master]:kill()
        brokers[master] = nil
        local t0 = require("rmq.core").mono_ms()
        local new = failover.wait_other_master(route_addrs, master_addr, 10000)
        assert.truthy(new, "no new master in the route within 10 s:\n" .. namesrv:log())
        print(("new master in the route after %.0f ms"):format(require("rmq.core").mono_ms() - t0))
        local sent = server.eventually(function()
            local r = p:send({ topic = "TopicEmb", body = "after" })
            return r and r.status == "SEND_OK" and r
        end, 20000)
        assert.truthy(sent)
        assert.equal(2, gauge(namesrv, "rmq_controller_elections_total"))
        assert.equal(failover.offset_msg_host(new), sent.offsetMsgId:sub(1, 16))

        -- The NameServer's own requests: the cluster, the KV config.
        local info = ns.cluster_info(admin)
        assert.truthy(info and info.clusterAddrTable and info.clusterAddrTable.EmbCluster, "cluster info")
        local put = net.call(namesrv.addr, { code = req.PUT_KV_CONFIG,
            ext = { namespace = "NS_EMB", key = "k", value = "v" } }, 3000)
        assert.equal(0, put.code)
        local got = net.call(namesrv.addr, { code = req.GET_KV_CONFIG, ext = { namespace = "NS_EMB", key = "k" } },
            3000)
        assert.equal(0, got.code)
        assert.equal("v", got.ext.value)

        -- SIGTERM: the NameServer stops, revoking the controller's lease.
        for i, b in pairs(brokers) do
            assert.equal(0, (b:stop()), b:log())
            brokers[i] = nil
        end
        assert.equal(0, (namesrv:stop()), namesrv:log())
        assert.truthy(namesrv:log():find("etcd lease %S+ revoked"), namesrv:log())
        namesrv = nil
    end)
end)

describe("an embedded controller and a role = \"controller\" process on one etcd", function()
    if not available then
        pending(etcd.why)
        return
    end

    local e, nsrv, ctl

    teardown(function()
        -- (Not ipairs over { nsrv, ctl }: the case sets nsrv to nil after
        -- its kill -9, and ipairs would stop there, leaving ctl running.)
        if nsrv then nsrv:kill() end
        if ctl then ctl:kill() end
        if e then e:stop() end
    end)

    local function metadata(addr)
        local r = net.call(addr, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 3000)
        return r and r.code == 0 and r.ext or nil
    end

    it("are one group: the NameServer's controller active first, the other takes over after its kill -9", function()
        e = etcd.start()
        local common = { "etcdEndpoints=" .. e.url, "etcdLeaseTtlSeconds=2", "scanNotActiveBrokerInterval=300" }
        nsrv = server.start({ role = "namesrv", enableControllerInNamesrv = true, controllerListenPort = 0 }, common)
        local a = "127.0.0.1:" .. nsrv.ports.controller
        assert.truthy(server.eventually(function()
            local m = metadata(a)
            return m and m.isLeader == "true"
        end, 15000), nsrv:log())
        ctl = server.start({ role = "controller" }, common)
        -- Both in P/members, as the active one's next rounds read them.
        local peers = server.eventually(function()
            local m = metadata(a)
            local p = m and m.peers or ""
            return select(2, p:gsub(";", "")) == 1 and p
        end, 15000)
        assert.truthy(peers, (metadata(a) or {}).peers)
        assert.truthy(peers:find(":" .. nsrv.ports.controller, 1, true), peers)
        assert.truthy(peers:find(":" .. ctl.ports.listen, 1, true), peers)
        -- The follower learns the leader's address at its next read of
        -- the group (it had none yet at load 20 right after joining).
        local m = server.eventually(function()
            local mm = metadata(ctl.addr)
            return mm and (mm.controllerLeaderAddress or "") ~= "" and mm
        end, 15000)
        assert.truthy(m, ctl:log())
        assert.equal("false", m.isLeader)
        assert.equal(nsrv.ports.controller, tonumber(m.controllerLeaderAddress:match(":(%d+)$")))

        nsrv:kill()
        nsrv = nil
        assert.truthy(server.eventually(function()
            local mm = metadata(ctl.addr)
            return mm and mm.isLeader == "true"
        end, 15000), ctl:log())
        -- It answers writes: a new broker set gets its first id.
        local r = net.call(ctl.addr, { code = req.CONTROLLER_GET_NEXT_BROKER_ID,
            ext = { clusterName = "EmbCluster", brokerName = "bs-new" } }, 3000)
        assert.equal(0, r.code, r.remark)
        assert.equal("1", r.ext.nextBrokerId)
    end)
end)
