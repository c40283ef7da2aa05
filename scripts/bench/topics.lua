-- Topic creation at scale: a NameServer and a broker (real processes on
-- loopback), then N topics created through UPDATE_AND_CREATE_TOPIC and N
-- auto-created by a first send, C connections in flight; prints the rate
-- of each step of STEP topics (flat = the cost does not grow with the
-- table), the time until the NameServer lists every topic, and the time
-- from spawning a restarted broker to its READY line.
--
--   lua5.4 scripts/bench/topics.lua [N=10000] [C=32] [STEP=2000]
--
-- Run from the repository root after a build (RMQ_BUILD=build-asan for
-- the sanitized one).
package.path = "spec/?.lua;spec/support/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./" .. (os.getenv("RMQ_BUILD") or "build") .. "/?.so;" .. package.cpath

local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local server = require("support.server")
local load = require("support.load")

local N = tonumber(arg[1]) or 10000
local C = tonumber(arg[2]) or 32
local STEP = tonumber(arg[3]) or 2000

local store = server.tmpdir() .. "/store"
local ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
local conf = {
    role = "broker", workers = 2, brokerName = "broker-bench", storePathRootDir = store,
    namesrvAddr = ns.addr, mappedFileSizeCommitLog = 64 * 1024 * 1024,
    mappedFileSizeConsumeQueue = 20 * 64, messageIndexEnable = false,
}
local b = server.start(conf)

local function rss_mib(pid)
    local f = io.open("/proc/" .. pid .. "/status")
    local kb = f and f:read("a"):match("VmRSS:%s+(%d+)")
    if f then f:close() end
    return (tonumber(kb) or 0) / 1024
end

local function names(prefix, from, to)
    local out = {}
    for i = from, to do
        out[#out + 1] = ("%s%06d"):format(prefix, i)
    end
    return out
end

local function step(what, addr, prefix, fn)
    print(("%s, %d topics, %d connections:"):format(what, N, C))
    for from = 1, N, STEP do
        local to = math.min(N, from + STEP - 1)
        local res = load.run(addr, C, names(prefix, from, to), fn)
        if res.failed > 0 then
            print("  failed: " .. table.concat(res.errors, "; "))
            os.exit(1)
        end
        print(("  topics %6d-%6d  %8.0f topics/s"):format(from, to, (to - from + 1) / (res.ms / 1000)))
    end
end

step("UPDATE_AND_CREATE_TOPIC", b.addr, "BenchAdmin", function(c, topic)
    local r = assert(c:call({ code = 17, ext = {
        topic = topic, defaultTopic = "TBW102", readQueueNums = "2", writeQueueNums = "2", perm = "6",
        topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
    assert(r.code == 0, r.remark)
end)
step("auto-create by SEND_MESSAGE_V2", b.vip_addr, "BenchAuto", function(c, topic)
    local r = assert(c:call({ code = 310, body = "x", ext = {
        a = "BenchGroup", b = topic, c = "TBW102", d = "4", e = "0", f = "0",
        g = tostring(core.now_ms()), h = "0", i = "WAIT\1true", j = "0", k = "false", m = "false" } }, 30000))
    assert(r.code == 0, r.remark)
end)

local t0 = core.mono_ms()
local listed = server.eventually(function()
    local r = net.call(ns.addr, { code = 206 }, 30000)
    return r and r.code == 0 and #cjson.decode(r.body).topicList >= 2 * N
end, 60000)
print(("NameServer lists all %d topics %s %.0f ms after the last creation")
    :format(2 * N, listed and "" or "NOT", core.mono_ms() - t0))
print(("RSS: broker %.1f MiB, NameServer %.1f MiB"):format(rss_mib(b.pid), rss_mib(ns.pid)))

assert(b:stop() == 0)
t0 = core.mono_ms()
b = server.start(conf)
print(("restart of a store with %d topics: READY after %.0f ms (spawn to READY line)")
    :format(2 * N + 10, core.mono_ms() - t0))
b:stop()
ns:stop()
