-- The web console's cost: a standalone (real process on loopback) with
-- topics of Q queues each added step by step; for each size, how long a
-- fresh snapshot (what /api/topics does when its last one is stale, and
-- the sampler every consoleSampleSeconds) takes and how much CPU the
-- server spends on it, and the send TPS of `rmq bench produce` with the
-- sampler every second against no console sampling (metrics off).
--
--   lua5.4 scripts/bench/console.lua [TOPICS=256] [Q=8] [SECONDS=5]
--
-- Run from the repository root after a build.
package.path = "spec/?.lua;spec/support/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./" .. (os.getenv("RMQ_BUILD") or "build") .. "/?.so;" .. package.cpath

local net = require("rmq.net")
local core = require("rmq.core")
local codes = require("rmq.codes")
local server = require("support.server")
local http = require("support.http")

local TOPICS = tonumber(arg[1]) or 256
local Q = tonumber(arg[2]) or 8
local SECONDS = tonumber(arg[3]) or 5

local function cpu_ms(pid)
    local f = assert(io.open("/proc/" .. pid .. "/stat"))
    local stat = f:read("a")
    f:close()
    local fields = {}
    for x in stat:match("%) (.*)$"):gmatch("%S+") do
        fields[#fields + 1] = x
    end
    -- utime and stime (fields 14 and 15 of stat; 12 and 13 after the name)
    return (tonumber(fields[12]) + tonumber(fields[13])) * 10
end

local function start(console)
    local conf = {
        role = "standalone", workers = 2, brokerName = "broker-bench",
        storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 64 * 1024 * 1024,
        autoCreateTopicEnable = true,
    }
    if console then
        conf.metricsExporterType = "PROM"
        conf.metricsPromExporterPort = 0
        conf.consoleSampleSeconds = console
    end
    return server.start(conf, { "namesrvListenPort=0" })
end

local function create(s, from, to)
    for i = from, to do
        local r = assert(net.call(s.broker_addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC,
            ext = { topic = ("BenchConsole%05d"):format(i), defaultTopic = "TBW102", readQueueNums = Q,
                    writeQueueNums = Q, perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0,
                    order = false } }, 10000))
        assert(r.code == 0, r.remark)
    end
end

-- Snapshot cost: the sampler is set to an hour, so each /api/topics
-- after a second's wait takes a fresh snapshot.
do
    local s = start(3600)
    print(("snapshot cost (standalone, 2 workers, %d queues per topic):"):format(Q))
    local done = 0
    for _, n in ipairs({ TOPICS // 4, TOPICS // 2, TOPICS }) do
        create(s, done + 1, n)
        done = n
        net.sleep(1100)
        local c0, t0 = cpu_ms(s.pid), core.now_ms()
        local status, t = http.json(s.metrics_addr, "/api/topics")
        local ms = core.now_ms() - t0
        local cpu = cpu_ms(s.pid) - c0
        assert(status == 200, tostring(t))
        print(("  %5d topics (%6d queues in all) %7d ms  server CPU %5d ms"):format(#t.topics,
              (n * Q), ms, cpu))
    end
    s:stop()
end

-- Send TPS with the console sampling every second vs no metrics endpoint.
local function produce(s)
    local p = io.popen(("%s/rmq bench produce -n %s -t BenchConsoleSend -s 512 -c 32 -d %d 2>&1")
        :format(server.build, s.listen_addr, SECONDS))
    local out = p:read("a")
    p:close()
    return tonumber(out:match("Send TPS: *([%d.]+)")) or 0, out
end

print(("send TPS, rmq bench produce -s 512 -c 32 -d %d, %d topics of %d queues:"):format(SECONDS, TOPICS, Q))
for _, console in ipairs({ false, 1, false, 1 }) do
    local s = start(console)
    create(s, 1, TOPICS)
    local tps, out = produce(s)
    if tps == 0 then
        print(out)
    end
    print(("  %-28s %10.0f"):format(console and "console sampling every 1 s" or "no metrics/console", tps))
    s:stop()
end
