-- Slave config sync at scale: a master whose store already holds T topics,
-- G subscription groups and an offset for 4 queues of each group on one
-- topic each (written as a 4.9.8 broker writes its config files); prints
-- each GET_ALL_* reply's size and time (median of 5), then starts a slave
-- on an empty store and prints how long until it has every topic, group
-- and offset (slaveSynchronizePeriodMillis = 200, so the figure is one
-- round plus < 200 ms of waiting), and the slave's RSS.
--
--   lua5.4 scripts/bench/slave_sync.lua [T=20000] [G=5000]
--
-- Run from the repository root after a build.
package.path = "spec/?.lua;spec/support/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./" .. (os.getenv("RMQ_BUILD") or "build") .. "/?.so;" .. package.cpath

local net = require("rmq.net")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local server = require("support.server")

local T = tonumber(arg[1]) or 20000
local G = tonumber(arg[2]) or 5000

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

local function rss_mib(pid)
    return (require("support.slowreader").rss_kb(pid) or 0) / 1024
end

local store = server.tmpdir() .. "/store-m"
os.execute("mkdir -p " .. store .. "/config")
do
    local parts = {}
    for i = 1, T do
        local name = ("SyncBench%06d"):format(i)
        parts[#parts + 1] = ('"%s":{"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
            .. '"topicName":"%s","topicSysFlag":0,"writeQueueNums":8}'):format(name, name)
    end
    write(store .. "/config/topics.json", '{"dataVersion":{"counter":' .. T .. ',"timestamp":1700000000000},'
        .. '"topicConfigTable":{' .. table.concat(parts, ",") .. "}}")
    parts = {}
    local offs = {}
    for i = 1, G do
        local g = ("SyncBenchGroup%05d"):format(i)
        parts[#parts + 1] = ('"%s":{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,'
            .. '"consumeFromMinEnable":true,"groupName":"%s","notifyConsumerIdsChangedEnable":true,'
            .. '"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}'):format(g, g)
        offs[#offs + 1] = ('"SyncBench%06d@%s":{0:%d,1:%d,2:%d,3:%d}'):format(i % T + 1, g, i, i, i, i)
    end
    write(store .. "/config/subscriptionGroup.json", '{"dataVersion":{"counter":' .. G
        .. ',"timestamp":1700000000000},"subscriptionGroupTable":{' .. table.concat(parts, ",") .. "}}")
    write(store .. "/config/consumerOffset.json", '{"offsetTable":{' .. table.concat(offs, ",") .. "}}")
end

local ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
local base = {
    role = "broker", workers = 2, brokerName = "broker-sync", namesrvAddr = ns.addr,
    mappedFileSizeCommitLog = 4 * 1024 * 1024, messageIndexEnable = false,
    slaveSynchronizePeriodMillis = 200, compressedRegister = true,
}
local function conf(extra)
    local c = {}
    for k, v in pairs(base) do c[k] = v end
    for k, v in pairs(extra) do c[k] = v end
    return c
end
local m = server.start(conf({ storePathRootDir = store }))

print(("master with %d topics, %d groups, %d queue offsets"):format(T, G, 4 * G))
for _, req in ipairs({ { 21, "GET_ALL_TOPIC_CONFIG" }, { 43, "GET_ALL_CONSUMER_OFFSET" },
                       { 45, "GET_ALL_DELAY_OFFSET" }, { 201, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG" } }) do
    local times, size = {}, 0
    for i = 1, 5 do
        local t0 = core.mono_ms()
        local r = assert(net.call(m.addr, { code = req[1] }, 30000))
        times[i] = core.mono_ms() - t0
        assert(r.code == 0, r.remark)
        size = #(r.body or "")
    end
    table.sort(times)
    print(("  %-34s %9d bytes  %7.1f ms (median of 5)"):format(req[2], size, times[3]))
end

local t0 = core.mono_ms()
local s = server.start(conf({ storePathRootDir = server.tmpdir() .. "/store-s", brokerId = 1, brokerRole = "SLAVE" }))
local function has_all()
    local r = net.call(s.addr, { code = 21 }, 30000)
    local g = net.call(s.addr, { code = 201 }, 30000)
    local o = net.call(s.addr, { code = 14, ext = { consumerGroup = ("SyncBenchGroup%05d"):format(G),
        topic = ("SyncBench%06d"):format(G % T + 1), queueId = "3" } }, 30000)
    if not (r and g and o and o.code == 0 and tonumber(o.ext.offset) == G) then
        return false
    end
    local topics = fastjson.decode(r.body).topicConfigTable
    local groups = fastjson.decode(g.body).subscriptionGroupTable
    return topics[("SyncBench%06d"):format(T)] ~= nil and groups[("SyncBenchGroup%05d"):format(G)] ~= nil
end
local ok = server.eventually(has_all, 120000)
local took = core.mono_ms() - t0
local round = s:log():match("slave sync: (%d+ topic configs.-applied in %d+ ms)")
print(("slave on an empty store: everything taken %.0f ms after spawn (first round: %s; "
    .. "first round starts 200 ms after READY); slave RSS %.1f MiB, master RSS %.1f MiB"):format(
    took, tostring(round), rss_mib(s.pid), rss_mib(m.pid)))
if not ok then
    print("the slave did not get everything:\n" .. s:log())
end
s:stop()
m:stop()
ns:stop()
os.exit(ok and 0 or 1)
