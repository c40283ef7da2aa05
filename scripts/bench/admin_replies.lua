-- The measuring half of scripts/bench/admin_replies.sh (see its header).
--   lua5.4 scripts/bench/admin_replies.lua WORK BASE_BUILD CURRENT_BUILD [TOPICS [SECONDS [LOOPERS]]]
-- The looping clients run in a second process (this script with --loop
-- BUILD ADDR MS N), so that reading their 4 MB replies does not slow the
-- measuring client down: only the server is shared.
if arg[1] == "--loop" then
    package.cpath = arg[2] .. "/?.so;" .. package.cpath
    local net, core = require("rmq.net"), require("rmq.core")
    local addr, ms, n = arg[3], tonumber(arg[4]), tonumber(arg[5])
    local t_end, live, replies, bytes = core.mono_ms() + ms, n, 0, 0
    for _ = 1, n do
        net.spawn(function()
            local c = assert(net.connect(addr))
            while core.mono_ms() < t_end do
                local r = assert(c:call({ code = 21 }, 120000))
                assert(r.code == 0, r.remark)
                bytes = #r.body
                replies = replies + 1
            end
            c:close()
            live = live - 1
        end)
    end
    while live > 0 do
        net.sleep(20)
    end
    print(("%d %d"):format(replies, bytes))
    os.exit(0)
end
local WORK, BASE, CUR = arg[1], arg[2], arg[3]
assert(WORK and BASE and CUR, "usage: admin_replies.lua WORK BASE_BUILD CURRENT_BUILD [TOPICS [SECONDS [LOOPERS]]]")
package.cpath = CUR .. "/?.so;" .. package.cpath
package.path = "./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local proc = require("rmq.proc")
local cjson = require("cjson")
local read_file = require("support.server").read_file

local TOPICS = tonumber(arg[4]) or 26000
local SECONDS = tonumber(arg[5]) or 15
local LOOPERS = tonumber(arg[6]) or 2

local function sh(cmd)
    assert(os.execute(cmd), "failed: " .. cmd)
end

local function send_ext(topic)
    return { a = "BenchGroup", b = topic, c = "TBW102", d = "4", e = "0", f = "0",
             g = tostring(core.now_ms()), h = "0", i = "WAIT\1true", j = "0", k = "false", m = "false" }
end

local function start(label, build)
    local dir = ("%s/%s"):format(WORK, label)
    sh(("mkdir -p '%s/store/config'"):format(dir))
    local tbl = {}
    for i = 1, TOPICS do
        local n = ("BenchTopic%05d"):format(i)
        tbl[n] = { topicName = n, readQueueNums = 4, writeQueueNums = 4, perm = 6,
                   topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false }
    end
    local f = assert(io.open(dir .. "/store/config/topics.json", "w"))
    f:write(cjson.encode({ dataVersion = { counter = 1, timestamp = 1700000000000 }, topicConfigTable = tbl }))
    f:close()
    f = assert(io.open(dir .. "/conf.lua", "w"))
    f:write(([[
return {
    role = "standalone", logLevel = "warn",
    bindAddress = "127.0.0.1", listenPort = 0, namesrvListenPort = 0,
    brokerName = "broker-a", brokerClusterName = "DefaultCluster",
    storePathRootDir = %q, kvConfigPath = %q,
    mappedFileSizeCommitLog = 64 * 1024 * 1024, mappedFileSizeConsumeQueue = 20 * 1000,
    messageIndexEnable = false,
}
]]):format(dir .. "/store", dir .. "/kvConfig.json"))
    f:close()
    local p = assert(proc.spawn({
        file = build .. "/rmq-server", args = { dir .. "/conf.lua" },
        stdout = dir .. "/stdout", stderr = dir .. "/stderr",
        env = { "HOME=" .. dir, "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") },
    }))
    local pids = assert(io.open(WORK .. "/pids", "a"))
    pids:write(p.pid, "\n")
    pids:close()
    local deadline = core.mono_ms() + 120000
    while core.mono_ms() < deadline do
        local line = read_file(dir .. "/stdout"):match("READY[^\n]*")
        if line then
            return { proc = p, broker = line:match(" broker=(%S+)") }
        end
        assert(not p.exited, label .. ": exited:\n" .. read_file(dir .. "/stderr"))
        net.sleep(50)
    end
    error(label .. ": no READY")
end

local function pct(lat, q)
    return lat[math.max(1, math.ceil(#lat * q))]
end

-- One phase: sends one at a time for SECONDS, with `loopers` clients
-- (another process) looping GET_ALL_TOPIC_CONFIG meanwhile.
local function phase(addr, loopers)
    local lp
    local out = WORK .. "/loop.out"
    if loopers > 0 then
        lp = assert(proc.spawn({ file = "lua5.4",
            args = { arg[0], "--loop", CUR, addr, tostring(SECONDS * 1000), tostring(loopers), WORK },
            stdout = out, stderr = WORK .. "/loop.err" }))
        local pids = assert(io.open(WORK .. "/pids", "a"))   -- WORK in its argv: the cleanup finds it
        pids:write(lp.pid, "\n")
        pids:close()
        net.sleep(500)   -- the loops are running
    end
    local c = assert(net.connect(addr))
    local lat, i, busy_replies = {}, 0, 0
    local t_end = core.mono_ms() + SECONDS * 1000
    while core.mono_ms() < t_end do
        i = i + 1
        local t0 = core.mono_ms()
        local r = assert(c:call({ code = 310, ext = send_ext(("BenchTopic%05d"):format(1 + i % 100)), body = "x" }, 30000))
        -- SYSTEM_BUSY (flow control: the send waited behind the
        -- worker's other work) is counted, not fatal: it is the symptom
        if r.code == 2 then
            busy_replies = busy_replies + 1
        else
            assert(r.code == 0, r.remark)
        end
        lat[#lat + 1] = core.mono_ms() - t0
    end
    local replies, bytes = 0, 0
    if lp then
        assert(lp:wait(180000), "the looping clients did not end")
        replies, bytes = read_file(out):match("(%d+) (%d+)")
        assert(replies, "looping clients: " .. read_file(WORK .. "/loop.err"))
        replies, bytes = tonumber(replies), tonumber(bytes)
    end
    c:close()
    table.sort(lat)
    return { n = #lat, p50 = pct(lat, 0.5), p99 = pct(lat, 0.99), max = lat[#lat], replies = replies, bytes = bytes,
             busy = busy_replies }
end

local function measure(label, build)
    local s = start(label, build)
    local ok, res = pcall(function()
        local quiet = phase(s.broker, 0)
        local busy = phase(s.broker, LOOPERS)
        return { quiet = quiet, busy = busy }
    end)
    s.proc:kill(15)
    if not s.proc:wait(30000) then
        s.proc:kill(9)
        s.proc:wait(5000)
    end
    assert(ok, res)
    return res
end

local results = { base = measure("base", BASE), current = measure("current", CUR) }
print(("send latency (ms, one at a time, %d s), standalone server with %d topics; "
       .. "busy: %d clients loop GET_ALL_TOPIC_CONFIG meanwhile"):format(SECONDS, TOPICS, LOOPERS))
print(("%-8s %-6s %7s %6s %8s %8s %8s %14s"):format("build", "phase", "sends", "busy", "p50", "p99", "max",
    "GET_ALLs"))
for _, label in ipairs({ "base", "current" }) do
    for _, ph in ipairs({ "quiet", "busy" }) do
        local r = results[label][ph]
        print(("%-8s %-6s %7d %6d %8.1f %8.1f %8.1f %14s"):format(label, ph, r.n, r.busy, r.p50, r.p99, r.max,
            ph == "busy" and ("%d x %.1f MB"):format(r.replies, r.bytes / 1e6) or "-"))
    end
end
