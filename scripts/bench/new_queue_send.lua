-- The first sends to new queues, and another client's sends meanwhile,
-- for one or more rmq-server binaries in turn (the held send of
-- src/broker/send_processor.c against a build without it: docs/performance.md
-- "The held send").  Figures only; spec/integration/send_new_queue_spec.lua
-- asserts the behaviour.
--
--   lua5.4 scripts/bench/new_queue_send.lua QUEUES ROUNDS LABEL=BINARY[,NAME=VALUE] ...
--
-- (from the repo root; RMQ_BUILD picks the build whose rmq.so this Lua
-- loads, default build/).  For each round, each binary: a broker
-- (workers = 1: both clients on one event loop; no NameServer; its own
-- temp store, 1 MiB commit log files) with QUEUES/8 topics of 8 queues
-- made by UPDATE_AND_CREATE_TOPIC (no queue file exists until a first
-- send) and one queue sent to already.  Then client A sends one message
-- to each new queue, one after the other, while client B sends to the
-- existing queue, one at a time, until A is done.  Printed per run: A's
-- first-send p50 / p99 / max and total, B's count and p50 / p99 / max
-- (ms).  ",NAME=VALUE" starts that binary with only that variable (and
-- PATH) in its environment: one binary measured two ways by a variable
-- a measuring patch reads.  Run it beside a disk load (dd) to see what
-- a slow mkdir costs each client.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")

local QUEUES = tonumber(arg[1]) or 200
local ROUNDS = tonumber(arg[2]) or 2
local bins = {}
for i = 3, #arg do
    local label, path = arg[i]:match("^([^=]+)=(.+)$")
    assert(label, "usage: new_queue_send.lua QUEUES ROUNDS LABEL=BINARY[,NAME=VALUE] ...")
    local bin, env = path:match("^([^,]+),(.+)$")
    bins[#bins + 1] = { label = label, path = bin or path, env = env }
end
assert(#bins > 0, "usage: new_queue_send.lua QUEUES ROUNDS LABEL=BINARY ...")
local PER_TOPIC = 8
local TOPICS = (QUEUES + PER_TOPIC - 1) // PER_TOPIC

local function send(topic, qid, body)
    return { code = 310, body = body, ext = {
        a = "NewQBenchP", b = topic, c = "TBW102", d = "8", e = tostring(qid), f = "0",
        g = tostring(core.now_ms()), h = "0", i = "WAIT\1true", j = "0", k = "false", m = "false" } }
end

local function pct(t, p)
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))] or 0
end

local function call(c, cmd)
    local r = assert(c:call(cmd, 120000))
    assert(r.code == 0, r.remark)
end

local function run(bin)
    local dir = server.tmpdir()
    local s = server.start({
        role = "broker", brokerName = "broker-nq", workers = 1, namesrvAddr = "127.0.0.1:1",
        storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1048576,
        mappedFileSizeConsumeQueue = 6000 * 20, messageIndexEnable = false,
    }, nil, { binary = bin.path, env = bin.env and {
        bin.env, "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"),
        -- an ASan build's own options, as the specs give them
        os.getenv("RMQ_SERVER_ASAN_OPTIONS") and ("ASAN_OPTIONS=" .. os.getenv("RMQ_SERVER_ASAN_OPTIONS")) or nil,
    } })
    local ok, err = pcall(function()
        local a = assert(net.connect(s.addr))
        local b = assert(net.connect(s.addr))
        for t = 1, TOPICS do
            call(a, { code = 17, ext = {
                topic = "NewQBench" .. t, defaultTopic = "TBW102", readQueueNums = tostring(PER_TOPIC),
                writeQueueNums = tostring(PER_TOPIC), perm = "6", topicFilterType = "SINGLE_TAG",
                topicSysFlag = "0", order = "false" } })
        end
        call(a, { code = 17, ext = {
            topic = "NewQBenchOther", defaultTopic = "TBW102", readQueueNums = "1", writeQueueNums = "1",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } })
        call(b, send("NewQBenchOther", 0, "warm"))
        local done, other = false, {}
        net.spawn(function()
            while not done do
                local t0 = core.mono_ms()
                call(b, send("NewQBenchOther", 0, "other"))
                other[#other + 1] = core.mono_ms() - t0
            end
        end)
        local first = {}
        local t_all = core.mono_ms()
        for q = 0, QUEUES - 1 do
            local t0 = core.mono_ms()
            call(a, send("NewQBench" .. (q // PER_TOPIC + 1), q % PER_TOPIC, "first"))
            first[#first + 1] = core.mono_ms() - t0
        end
        local total = core.mono_ms() - t_all
        done = true
        net.sleep(200)
        print(("%-8s first sends %4d: p50 %7.2f p99 %7.2f max %7.2f total %8.1f ms | other client %5d sends: "
               .. "p50 %6.2f p99 %7.2f max %7.2f ms"):format(bin.label, #first, pct(first, 0.5), pct(first, 0.99),
              pct(first, 1), total, #other, pct(other, 0.5), pct(other, 0.99), pct(other, 1)))
        a:close()
        b:close()
    end)
    s:stop()
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
end

for _ = 1, ROUNDS do
    for _, bin in ipairs(bins) do
        run(bin)
    end
end
