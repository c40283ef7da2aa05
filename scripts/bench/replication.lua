-- Replication under load (issue 11): a NameServer, a master and a slave
-- on loopback; `rmq bench produce` sends to the master for SECONDS while
-- the master's and the slave's commit log ends are sampled
-- (GET_BROKER_RUNTIME_INFO: commitLogMaxOffset, haSlaveMaxOffset), every
-- 10 ms plus the two calls' time (the printed period is the resolution
-- of the lag in ms).  Run
-- once with brokerRole ASYNC_MASTER and once with SYNC_MASTER, same
-- everything else, so the send TPS of the two can be compared.
--
--   lua5.4 scripts/bench/replication.lua [SECONDS [SIZE [CONCURRENCY]]]
--   (scripts/bench/replication.sh builds first and runs this)
--
-- Defaults: 10 s, 1 KiB bodies, 64 in flight (`rmq bench produce -s 1024
-- -c 64`), brokers with 2 workers, 64 MiB commit log files, stores in a
-- temp dir.  Printed per role:
--   send TPS            the load generator's own figure (replies/s)
--   replication MB/s    bytes the slave received per second of the run
--   lag bytes           master end - slave end at each sample (the slave
--                       read first, so never an underestimate):
--                       p50/p99/max and the last second's mean (bounded =
--                       not growing)
--   lag ms              for each master sample, the time until the slave
--                       reached that offset: p50/p99/max
-- then the SYNC/ASYNC TPS ratio.  Everything it starts is stopped by PID.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local proc = require("rmq.proc")
local cjson = require("cjson")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local SIZE = tonumber(arg[2]) or 1024
local CONC = tonumber(arg[3]) or 64
local TOPIC = "ReplicationBench"

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function runtime(addr)
    local r = call(addr, { code = 28 })
    return cjson.decode(r.body).table
end

local function pct(t, p)
    local c = {}
    for i, v in ipairs(t) do
        c[i] = v
    end
    table.sort(c)
    return c[math.max(1, math.ceil(#c * p))] or 0
end

local function run(role)
    local ns = server.start({ role = "namesrv" })
    local dir = server.tmpdir()
    local function conf(r, id, d)
        return {
            role = "broker", workers = 2, brokerName = "broker-bench", brokerClusterName = "BenchCluster",
            brokerId = id, brokerRole = r, storePathRootDir = d, mappedFileSizeCommitLog = 64 * 1024 * 1024,
            namesrvAddr = ns.addr, registerNameServerPeriod = 2000, haSendHeartbeatInterval = 1000,
        }
    end
    local master = server.start(conf(role, 0, dir .. "/master"))
    local slave = server.start(conf("SLAVE", 1, dir .. "/slave"))
    local result
    local ok, err = pcall(function()
        local r = call(master.addr, { code = 17, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "4", perm = "6",
            topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } })
        assert(r.code == 0, r.remark)
        local t0 = core.mono_ms()
        while runtime(master.addr).haConnectionCount ~= "1" do
            assert(core.mono_ms() - t0 < 15000, "the slave did not connect:\n" .. slave:log())
            net.sleep(50)
        end
        -- The route must be on the NameServer before the load starts.
        net.sleep(2500)
        local out = dir .. "/bench.out"
        local p = assert(proc.spawn({ file = build .. "/rmq", args = {
            "bench", "produce", "-n", ns.addr, "-t", TOPIC, "-s", tostring(SIZE), "-c", tostring(CONC),
            "-d", tostring(SECONDS), "--json" }, stdout = out, stderr = dir .. "/bench.err" }))
        local samples = {}   -- {t, master, slave}
        local start_slave
        while not p.exited do
            -- The slave first: the lag read is never less than the true one.
            local s = tonumber(runtime(slave.addr).haSlaveMaxOffset)
            local t = core.mono_ms()
            local m = tonumber(runtime(master.addr).commitLogMaxOffset)
            start_slave = start_slave or s
            samples[#samples + 1] = { t = t, m = m, s = s }
            net.sleep(10)
        end
        p:wait(5000)
        local text = server.read_file(out)
        local js = text:match("(%b{})")
        local stats = js and cjson.decode(js) or {}
        local lag_b, lag_ms = {}, {}
        for i, x in ipairs(samples) do
            lag_b[#lag_b + 1] = math.max(0, x.m - x.s)
            for j = i, #samples do
                if samples[j].s >= x.m then
                    lag_ms[#lag_ms + 1] = samples[j].t - x.t
                    break
                end
            end
        end
        local last = samples[#samples]
        local tail, n = 0, 0
        for _, x in ipairs(samples) do
            if x.t >= last.t - 1000 then
                tail = tail + (x.m - x.s)
                n = n + 1
            end
        end
        local secs = (last.t - samples[1].t) / 1000
        local period = (last.t - samples[1].t) / math.max(1, #samples - 1)
        result = {
            role = role, tps = stats.tps or stats.ok and stats.ok / SECONDS or 0, failed = stats.failed or 0,
            mbps = (last.s - start_slave) / secs / 1e6,
            lag_b = { pct(lag_b, 0.5), pct(lag_b, 0.99), pct(lag_b, 1), n > 0 and tail // n or 0 },
            lag_ms = { pct(lag_ms, 0.5), pct(lag_ms, 0.99), pct(lag_ms, 1) },
            raw = text:match("%[Complete%][^\n]*") or text,
            period = period,
        }
    end)
    for _, s in ipairs({ slave, master, ns }) do
        s:stop()
    end
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
    return result
end

local results = {}
for _, role in ipairs({ "ASYNC_MASTER", "SYNC_MASTER" }) do
    results[#results + 1] = run(role)
end
print(("replication bench: %d s, %d-byte bodies, %d in flight, 1 slave, loopback"):format(SECONDS, SIZE, CONC))
print(("%-13s %10s %8s %12s %28s %22s"):format("role", "send TPS", "failed", "repl MB/s",
    "lag bytes p50/p99/max/last1s", "lag ms p50/p99/max"))
for _, r in ipairs(results) do
    print(("%-13s %10.0f %8d %12.1f %28s %22s"):format(r.role, r.tps, r.failed, r.mbps,
        ("%.0f/%.0f/%.0f/%.0f"):format(r.lag_b[1], r.lag_b[2], r.lag_b[3], r.lag_b[4]),
        ("%.0f/%.0f/%.0f"):format(r.lag_ms[1], r.lag_ms[2], r.lag_ms[3])))
end
for _, r in ipairs(results) do
    print(("%s: %s (sampled every %.0f ms: the lag in ms is to that resolution)"):format(r.role, r.raw, r.period))
end
if results[1].tps > 0 then
    print(("SYNC_MASTER / ASYNC_MASTER TPS: %.2f"):format(results[2].tps / results[1].tps))
end
