-- Send TPS of a three-broker group (a master and two slaves, one broker
-- set) in four set-ups, each a fresh group on loopback with its own
-- NameServer, each loaded by `rmq bench produce -s SIZE -c CONCURRENCY`
-- for SECONDS (issue 24's "send TPS in controller mode vs ASYNC_MASTER vs
-- SYNC_MASTER at 64 in flight"):
--
--   ASYNC_MASTER            4.x roles in the conf: brokerId 0 + 1 + 2
--   SYNC_MASTER             the same, the master SYNC_MASTER (a send waits
--                           for a slave)
--   controller              enableControllerMode (one controller on a real
--                           etcd): ids and master from the controller,
--                           brokerRole left ASYNC_MASTER
--   controller+allAck       the same with brokerRole SYNC_MASTER and
--                           allAckInSyncStateSet (a send waits for every
--                           member of the SyncStateSet: the set-up that
--                           loses nothing acknowledged at a failover)
--
-- Each run starts when every slave is connected (4.x: the master's
-- haConnectionCount; controller: a SyncStateSet of 3) and the topic is in
-- the NameServer's route.  Prints per set-up the load generator's TPS,
-- failed sends and p99 latency, and the load average before the run.
--
--   lua5.4 scripts/bench/controller_tps.lua [SECONDS [SIZE [CONCURRENCY [ROUNDS]]]]
--
-- Defaults: 10 s, 1024-byte bodies, 64 in flight, 1 round.  With ROUNDS
-- > 1 the four set-ups run again, every other round in reverse order, so
-- a machine whose load drifts during the run favours none of them; each
-- run is printed, then each set-up's median.  Brokers run 2 workers
-- and 64 MiB commit log files in temp dirs; everything is stopped by PID.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local net = require("rmq.net")
local proc = require("rmq.proc")
local cjson = require("cjson")
local server = require("support.server")
local etcd = require("support.etcd")
local nsclient = require("support.nsclient")

local SECONDS = tonumber(arg[1]) or 10
local SIZE = tonumber(arg[2]) or 1024
local CONC = tonumber(arg[3]) or 64
local TOPIC = "ControllerTpsBench"
local NAME = "bench-tps"

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function loadavg()
    local f = io.open("/proc/loadavg")
    local s = f and f:read("l") or "?"
    if f then
        f:close()
    end
    return s:match("^(%S+ %S+ %S+)") or s
end

local function wait(what, fn, ms)
    local ok = server.eventually(fn, ms or 60000)
    assert(ok, what)
    return ok
end

local function create_topic(addr)
    local r = call(addr, { code = 17, ext = {
        topic = TOPIC, defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "4", perm = "6",
        topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } })
    assert(r.code == 0, r.remark)
end

-- One set-up: returns {name, tps, failed, p99, load, raw}.
local function run(setup)
    local ns = server.start({ role = "namesrv" })
    local admin = assert(net.connect(ns.addr))
    local e, ctl
    local brokers = {}
    local dir = server.tmpdir()
    local result
    local ok, err = pcall(function()
        local base = {
            role = "broker", workers = 2, brokerName = NAME, brokerClusterName = "BenchTps",
            mappedFileSizeCommitLog = 64 * 1024 * 1024, namesrvAddr = ns.addr, registerNameServerPeriod = 2000,
            haSendHeartbeatInterval = 1000,
        }
        local function conf(i, extra)
            local c = { storePathRootDir = dir .. "/b" .. i }
            for k, v in pairs(base) do c[k] = v end
            for k, v in pairs(extra) do c[k] = v end
            return c
        end
        local master
        if setup.ctl then
            e = etcd.start()
            ctl = server.start({ role = "controller" }, { "etcdEndpoints=" .. e.url,
                "scanNotActiveBrokerInterval=1000" })
            wait("no active controller", function()
                local r = net.call(ctl.addr, { code = 1005, ext = {} }, 3000)
                return r and r.ext.isLeader == "true"
            end)
            for i = 1, 3 do
                brokers[i] = server.start(conf(i, { enableControllerMode = true, controllerAddr = ctl.addr,
                    brokerRole = setup.role, allAckInSyncStateSet = setup.allAck or nil, haListenPort = 0,
                    syncBrokerMetadataPeriod = 1000 }))
            end
            local info = wait("no SyncStateSet of 3:\n" .. ctl:log(), function()
                local r = net.call(ctl.addr, { code = 1004, ext = { brokerName = NAME } }, 3000)
                local body = r and r.code == 0 and cjson.decode(r.body)
                return body and #body.syncStateSet == 3 and r
            end)
            master = info.ext.masterAddress
        else
            brokers[1] = server.start(conf(1, { brokerId = 0, brokerRole = setup.role }))
            for i = 2, 3 do
                brokers[i] = server.start(conf(i, { brokerId = i - 1, brokerRole = "SLAVE" }))
            end
            master = brokers[1].addr
            wait("the slaves did not connect", function()
                local r = call(master, { code = 28 })
                return cjson.decode(r.body).table.haConnectionCount == "2"
            end)
        end
        create_topic(master)
        wait("the topic is not in the route", function()
            local r = nsclient.route(admin, TOPIC)
            return r and nsclient.addrs(r, NAME)[0] == master
        end)
        local load = loadavg()
        local out = dir .. "/bench.out"
        local p = assert(proc.spawn({ file = build .. "/rmq", args = {
            "bench", "produce", "-n", ns.addr, "-t", TOPIC, "-s", tostring(SIZE), "-c", tostring(CONC),
            "-d", tostring(SECONDS), "--json" }, stdout = out, stderr = dir .. "/bench.err" }))
        p:wait((SECONDS + 60) * 1000)
        local text = server.read_file(out)
        local js = text:match("(%b{})")
        local stats = js and cjson.decode(js) or {}
        result = { name = setup.name, tps = stats.tps or 0, failed = stats.failed or 0,
            p99 = stats.p99_ms or stats.p99 or (stats.latency_ms and stats.latency_ms.p99) or "?", load = load,
            raw = (text:match("%[Complete%][^\n]*") or text):gsub("%s+$", "") }
    end)
    for _, b in pairs(brokers) do b:stop() end
    for _, s in ipairs({ ctl, ns }) do
        if s then s:stop() end
    end
    if e then e:stop() end
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
    return result
end

if not etcd.available() then
    print(etcd.why)
    os.exit(0)
end
local ROUNDS = tonumber(arg[4]) or 1
local SETUPS = {
    { name = "ASYNC_MASTER", role = "ASYNC_MASTER" },
    { name = "SYNC_MASTER", role = "SYNC_MASTER" },
    { name = "controller", ctl = true, role = "ASYNC_MASTER" },
    { name = "controller+allAck", ctl = true, role = "SYNC_MASTER", allAck = true },
}
local results, by_name = {}, {}
for round = 1, ROUNDS do
    for k = 1, #SETUPS do
        local s = SETUPS[round % 2 == 1 and k or #SETUPS + 1 - k]
        local r = run(s)
        r.round = round
        results[#results + 1] = r
        by_name[s.name] = by_name[s.name] or {}
        table.insert(by_name[s.name], r.tps)
        io.stderr:write(("round %d: %s done\n"):format(round, s.name))
    end
end
print(("controller TPS bench: 3 brokers of one set (1 master, 2 slaves), %d s, %d-byte bodies, %d in flight,"
    .. " loopback"):format(SECONDS, SIZE, CONC))
print(("%-5s %-18s %10s %8s %10s   %s"):format("round", "set-up", "send TPS", "failed", "p99 ms",
    "load average before"))
for _, r in ipairs(results) do
    print(("%-5d %-18s %10.0f %8d %10s   %s"):format(r.round, r.name, r.tps, r.failed, tostring(r.p99), r.load))
end
if ROUNDS > 1 then
    for _, s in ipairs(SETUPS) do
        local t = by_name[s.name]
        table.sort(t)
        print(("median %-18s %10.0f TPS over %d runs"):format(s.name, t[(#t + 1) // 2], #t))
    end
end
for _, r in ipairs(results) do
    print(("%d %s: %s"):format(r.round, r.name, r.raw))
end
