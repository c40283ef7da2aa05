-- A client that sends PULL_MESSAGE requests and never reads, against a
-- broker, next to a client that reads: what the broker's memory and the
-- other client's latency do.  Figures only; spec/integration/
-- backpressure_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/slowreader.lua [SECONDS [PULLS_PER_S [HIGH_WATER [WORKERS]]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 10 s, 2,000 pulls/s, the broker's default
-- writeBufferHighWaterMark (0 here = leave the conf default), 1 worker
-- (so both clients share one event loop).
--
-- Set-up: an rmq-server broker on 127.0.0.1 (ephemeral port, own temp
-- dir, no NameServer) holding 64 messages of 4 KiB in one queue, so each
-- pull of 32 is answered with ~130 KiB.  Then for SECONDS:
--  - the slow reader (a non-blocking luasocket socket) queues
--    PULLS_PER_S / 50 pulls every 20 ms and never reads;
--  - the other client (rmq.net) sends GET_MAX_OFFSET on its own
--    connection, one at a time, 2 ms apart, timing each.
-- The slow reader then closes; RSS is read again 1 s later.  Printed:
-- the broker's VmRSS before / peak / after, the other client's request
-- count and p50 / p99 / max latency, what the slow reader got sent, and
-- whether the broker closed it (serverChannelWriteTimeoutMillis).  The
-- broker is stopped by its PID.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")
local slow = require("support.slowreader")

local SECONDS = tonumber(arg[1]) or 10
local RATE = tonumber(arg[2]) or 2000
local HIGH = tonumber(arg[3]) or 0
local WORKERS = tonumber(arg[4]) or 1
local TOPIC = "SlowReaderBench"

local conf = {
    role = "broker", workers = WORKERS, brokerName = "broker-a",
    storePathRootDir = server.tmpdir() .. "/store",
    mappedFileSizeCommitLog = 16 * 1024 * 1024,
    namesrvAddr = "127.0.0.1:1",
}
if HIGH > 0 then
    conf.writeBufferHighWaterMark = HIGH
    conf.writeBufferLowWaterMark = HIGH // 2
end
local s = server.start(conf)

local function percentile(t, p)
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))] or 0
end

local ok, err = pcall(function()
    local c = assert(net.connect(s.addr))
    local body = string.rep("m", 4096)
    for _ = 1, 64 do
        local r = assert(c:call(slow.cmd((slow.send_frame(0, TOPIC, 0, body)))))
        assert(r.code == 0, r.remark)
    end
    for _ = 1, 20 do
        assert(c:call(slow.cmd((slow.pull_frame(0, { topic = TOPIC })))))
    end
    net.sleep(200)
    local before = slow.rss_kb(s.pid)
    local peak = before

    local sc = slow.connect(s.addr)
    local per_tick = math.max(1, RATE // 50)
    local opaque = 1
    local lat = {}
    local done = false
    net.spawn(function()
        while not done do
            local t0 = core.mono_ms()
            local r = c:call({ code = 30, ext = { topic = TOPIC, queueId = 0 } }, 30000)
            lat[#lat + 1] = r and (core.mono_ms() - t0) or 30000
            net.sleep(2)
        end
    end)
    local t_end = core.mono_ms() + SECONDS * 1000
    local gone
    while core.mono_ms() < t_end do
        for _ = 1, per_tick do
            sc:queue(slow.pull_frame(opaque, { topic = TOPIC }))
            opaque = opaque + 1
        end
        local n, perr = sc:pump()
        if n == nil and not gone then
            gone = perr
        end
        peak = math.max(peak, slow.rss_kb(s.pid) or 0)
        net.sleep(20)
    end
    sc:close()
    done = true
    net.sleep(1000)
    local after = slow.rss_kb(s.pid)
    local closed = s:log():match("closing connection from [^\n]*replies unread[^\n]*")
    print(("slow reader: %d pulls queued in %d s, %.0f KiB of them sent%s"):format(
        opaque - 1, SECONDS, sc.sent / 1024, gone and (" (then: " .. gone .. ")") or ""))
    print(("broker VmRSS: before %.1f MiB, peak %.1f MiB, after close %.1f MiB"):format(
        before / 1024, peak / 1024, after / 1024))
    local n = #lat
    print(("other client: %d GET_MAX_OFFSET, p50 %.2f ms, p99 %.2f ms, max %.2f ms"):format(
        n, percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1)))
    print("closed by the broker: " .. (closed or "no"))
    c:close()
end)
s:stop()
assert(ok, err)
