-- Failover time in controller mode: three rmq brokers of one broker set,
-- a NameServer, one controller on a real etcd (started here, as the
-- specs do).  KILLS times: kill -9 the master, then measure from the kill
-- to (a) the NameServer's route naming a new master and (b) the first
-- acknowledged send on it (a producer polling the route every 200 ms);
-- the killed broker is restarted on its store before the next kill.
-- Prints each kill and min / median / max of both.  Figures only;
-- spec/integration/controller_broker_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/controller_failover.lua [KILLS [HEARTBEAT_TIMEOUT_MS]]
--
-- Defaults: 20 kills, controllerHeartBeatTimeoutMills 1500 (brokers beat
-- every 300 ms, the controller scans every 300 ms).  The SyncStateSet
-- grows only with the epoch-fenced HA (not in this branch): the
-- controller runs with enableElectUncleanMaster.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")
local etcd = require("support.etcd")
local tmp = require("support.tmp")
local nsclient = require("support.nsclient")
local producer = require("rmq.client.producer")

local KILLS = tonumber(arg[1]) or 20
local HB_TIMEOUT = tonumber(arg[2]) or 1500

if not etcd.available() then
    print(etcd.why)
    os.exit(0)
end

local e = etcd.start()
local ctl = server.start({ role = "controller" }, { "etcdEndpoints=" .. e.url, "scanNotActiveBrokerInterval=300",
    "etcdLeaseTtlSeconds=2", "enableElectUncleanMaster=true" })
local ns = server.start({ role = "namesrv" })
local admin = assert(net.connect(ns.addr))
local stores, brokers = {}, {}

local function start_broker(i)
    stores[i] = stores[i] or tmp.dir()
    return server.start({ role = "broker", storePathRootDir = stores[i], brokerClusterName = "BenchCtl",
        brokerName = "bench-ctl", namesrvAddr = ns.addr, enableControllerMode = true, controllerAddr = ctl.addr,
        brokerHeartbeatInterval = 300, controllerHeartBeatTimeoutMills = HB_TIMEOUT, syncBrokerMetadataPeriod = 500,
        haListenPort = 0, workers = 1, autoCreateTopicEnable = true })
end

local function master_addr()
    local r = nsclient.route(admin, "BenchCtlTopic")
    return r and nsclient.addrs(r, "bench-ctl")[0]
end

local function median(t)
    table.sort(t)
    return t[(#t + 1) // 2]
end

local ok, err = pcall(function()
    for i = 1, 3 do
        brokers[i] = start_broker(i)
    end
    local p = producer.new({ namesrvAddr = ns.addr, producerGroup = "bench-ctl", sendMsgTimeout = 1000,
        retryTimesWhenSendFailed = 0, pollNameServerInterval = 200 })
    assert(server.eventually(function()
        local r = p:send({ topic = "BenchCtlTopic", body = "warm" })
        return r and r.status == "SEND_OK" and master_addr()
    end, 30000), "no master at start")
    local routes, sends = {}, {}
    for k = 1, KILLS do
        local old = master_addr()
        local victim
        for i, b in pairs(brokers) do
            if b.addr == old then victim = i end
        end
        assert(victim, "the master is not one of ours: " .. tostring(old))
        local t0 = core.mono_ms()
        brokers[victim]:kill()
        local new = server.eventually(function()
            local a = master_addr()
            return a and a ~= old and a
        end, 30000)
        assert(new, "no new master within 30 s")
        local t_route = core.mono_ms() - t0
        assert(server.eventually(function()
            local r = p:send({ topic = "BenchCtlTopic", body = "k" .. k })
            return r and r.status == "SEND_OK"
        end, 30000), "no send within 30 s")
        local t_send = core.mono_ms() - t0
        routes[#routes + 1], sends[#sends + 1] = t_route, t_send
        print(("kill %2d: route %5.0f ms, first send %5.0f ms"):format(k, t_route, t_send))
        brokers[victim] = start_broker(victim)
    end
    local function mmm(t)
        local c = {}
        for i, v in ipairs(t) do c[i] = v end
        table.sort(c)
        return c[1], median(c), c[#c]
    end
    local r1, r2, r3 = mmm(routes)
    local s1, s2, s3 = mmm(sends)
    print(("route:      min %.0f / median %.0f / max %.0f ms over %d kills"):format(r1, r2, r3, #routes))
    print(("first send: min %.0f / median %.0f / max %.0f ms over %d kills"):format(s1, s2, s3, #sends))
end)
for _, b in pairs(brokers) do b:kill() end
ctl:kill()
ns:kill()
e:stop()
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
