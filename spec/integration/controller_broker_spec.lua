-- Brokers in controller mode (RocketMQ 5): three rmq brokers of one broker
-- set, a NameServer, a controller on a real etcd.  The controller gives
-- the ids and elects the master; the NameServer's route follows; kill -9
-- of the master gives a new master in the route within 10 s and sends
-- resume there.
local net = require("rmq.net")
local server = require("support.server")
local etcd = require("support.etcd")
local ns = require("support.nsclient")
local producer = require("rmq.client.producer")
local prom = require("support.prom")
local failover = require("support.failover")

local available = etcd.available()

describe("brokers in controller mode", function()
    if not available then
        pending(etcd.why)
        return
    end

    local e, ctl, namesrv, admin
    local brokers = {}

    local stores = {}

    local function start_broker(i)
        stores[i] = stores[i] or require("support.tmp").dir()
        return server.start(failover.broker_conf(stores[i], "CtlCluster", "bs-ctl", namesrv.addr, ctl.addr, i))
    end

    -- {[brokerId] = addr} of the set in the NameServer's route.
    local function route_addrs()
        local r = ns.route(admin, "TopicCtl")
        return r and ns.addrs(r, "bs-ctl") or {}
    end

    setup(function()
        e = etcd.start()
        -- The SyncStateSet grows only with the epoch-fenced HA (engineer
        -- ha5's part, not in this branch): until then it holds the master
        -- alone, and only an unclean election can replace it.
        ctl = server.start({ role = "controller", metricsExporterType = "PROM", metricsPromExporterPort = 0,
            metricsPromExporterHost = "127.0.0.1" }, { "etcdEndpoints=" .. e.url,
            "scanNotActiveBrokerInterval=300", "etcdLeaseTtlSeconds=2", "enableElectUncleanMaster=true" })
        namesrv = server.start({ role = "namesrv" })
        admin = assert(net.connect(namesrv.addr))
        assert.truthy(server.eventually(function()
            local r = net.call(ctl.addr, { code = 1005, ext = {} }, 3000)
            return r and r.ext.isLeader == "true"
        end, 15000))
        for i = 1, 3 do
            brokers[i] = start_broker(i)
        end
    end)

    teardown(function()
        for _, b in pairs(brokers) do
            b:kill()
        end
        for _, s in ipairs({ ctl, namesrv }) do
            if s then s:kill() end
        end
        if e then e:stop() end
    end)

    it("elects a master that the route names; kill -9 of it: a new master in the route within 10 s, sends resume", function()
        local p = producer.new({ namesrvAddr = namesrv.addr, producerGroup = "ctl-spec", sendMsgTimeout = 3000,
            pollNameServerInterval = 1000 })   -- the route follows within a second
        -- The first send creates TopicCtl on the master (autoCreateTopicEnable).
        local first = server.eventually(function()
            local r = p:send({ topic = "TopicCtl", body = "before" })
            return r and r.status == "SEND_OK" and r
        end, 20000)
        assert.truthy(first, brokers[1]:log())
        local addrs, master = failover.wait_route(route_addrs, brokers, 3)
        assert.truthy(addrs, "route: " .. require("cjson").encode(route_addrs()))
        local master_addr = addrs[0]
        assert.truthy(master, master_addr)

        -- /metrics: the master's role and epoch, the controller's election.
        local function gauge(s, name)
            return prom.value(prom.scrape(s.metrics_addr), name)
        end
        assert.truthy(server.eventually(function() return gauge(brokers[master], "rmq_replica_role") == 1 end))
        assert.equal(1, gauge(brokers[master], "rmq_replica_master_epoch"))
        -- The slaves catch up and the master has the controller add them
        -- (ALTER_SYNC_STATE_SET): all three in the SyncStateSet.
        assert.truthy(server.eventually(function()
            return gauge(brokers[master], "rmq_replica_sync_state_set_size") == 3
        end, 30000), brokers[master]:log())
        for i, b in pairs(brokers) do
            if i ~= master then
                assert.truthy(server.eventually(function() return gauge(b, "rmq_replica_role") == 0 end))
            end
        end
        assert.equal(1, gauge(ctl, "rmq_controller_active"))
        assert.equal(1, gauge(ctl, "rmq_controller_elections_total"))

        brokers[master]:kill()
        brokers[master] = nil
        local t0 = require("rmq.core").mono_ms()
        local new = failover.wait_other_master(route_addrs, master_addr, 10000)
        assert.truthy(new, "no new master in the route within 10 s:\n" .. ctl:log())
        local took = require("rmq.core").mono_ms() - t0
        print(("new master in the route after %.0f ms"):format(took))

        local sent = server.eventually(function()
            local r = p:send({ topic = "TopicCtl", body = "after" })
            return r and r.status == "SEND_OK" and r
        end, 20000)
        assert.truthy(sent)
        assert.equal(2, gauge(ctl, "rmq_controller_elections_total"))
        -- The old master restarted on its store keeps its controller id and
        -- rejoins as a slave of the new master.
        brokers[master] = start_broker(master)
        assert.truthy(server.eventually(function() return gauge(brokers[master], "rmq_replica_role") == 0 end,
            10000), brokers[master]:log())
        local back = server.eventually(function()
            local a = route_addrs()
            for id, addr in pairs(a) do
                if addr == brokers[master].addr and id ~= 0 then return id end
            end
        end, 10000)
        assert.truthy(back, require("cjson").encode(route_addrs()))
        assert.equal(new, route_addrs()[0])

        -- etcd gone: the controller refuses what needs it, the brokers keep
        -- their roles and the master keeps taking sends.
        e:kill()
        assert.truthy(server.eventually(function()
            return ctl:log():find("etcd unreachable", 1, true)
                and gauge(ctl, "rmq_controller_active") == 0
        end, 15000), ctl:log())
        local r = p:send({ topic = "TopicCtl", body = "etcd down" })
        assert.equal("SEND_OK", r and r.status)
        for _, b in pairs(brokers) do
            assert.equal(b.addr == new and 1 or 0, gauge(b, "rmq_replica_role"))
        end
        assert.equal(new, route_addrs()[0])
        for _, b in pairs(brokers) do
            if b.addr == new then
                assert.equal(1, gauge(b, "rmq_replica_role"))
                assert.equal(2, gauge(b, "rmq_replica_master_epoch"))
            end
        end
        assert.equal("bs-ctl", sent.queue.brokerName)
        -- The send's offset message id names the store host: the new master.
        assert.equal(failover.offset_msg_host(new), sent.offsetMsgId:sub(1, 16))
        -- SIGTERM ends a broker in controller mode cleanly.
        for i, b in pairs(brokers) do
            assert.equal(0, (b:stop()), b:log())
            brokers[i] = nil
        end
    end)
end)
