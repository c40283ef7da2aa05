-- Idle gRPC streams against one standalone rmq-server (issue 23's "a
-- million idle streams"): CONNS connections spread over ADDRS local
-- addresses (127.0.0.2, .3, ...) each open PER Telemetry streams that
-- never send a message (spec/support/h2raw.lua: raw HTTP/2 from Lua), and
-- hold them.  Prints, once every stream was answered or held: streams
-- held and refused, the memory budget's figures (/metrics), the server's
-- RSS before and at the peak, and a QueryRoute + SendMessage timed from
-- 127.0.0.1 meanwhile.  Figures only: grpc_abuse_spec asserts the bounds.
--
--   lua5.4 scripts/bench/grpc_idle.lua [CONNS=200] [PER=1000] [ADDRS=1] [BUDGET=default|off]
--
-- BUDGET=off runs the server with memoryBudget* = 0 (no limit): what the
-- streams cost unbounded (mind the machine's memory: ~3.3 KB a stream).
-- Run from the repository root after a build (RMQ_BUILD, default build/).
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local h2 = require("support.h2raw")
local prom = require("support.prom")
local slow = require("support.slowreader")

local CONNS = tonumber(arg[1]) or 200
local PER = tonumber(arg[2]) or 1000
local ADDRS = tonumber(arg[3]) or 1
local unbounded = arg[4] == "off"

local conf = { workers = 1, grpcMaxConcurrentStreams = PER, grpcMaxStreamsPerSecond = 0,
               metricsExporterType = "PROM", metricsPromExporterPort = 0 }
if unbounded then
    conf.memoryBudgetBytes, conf.memoryBudgetPerPeerBytes, conf.memoryBudgetPerConnectionBytes = 0, 0, 0
end
local s = gn.start(conf)
gn.create_topic(s, "GrpcIdleBench")
local rss0 = slow.rss_kb(s.pid)
local t0 = core.mono_ms()
local conns = {}
local block = h2.headers_block("Telemetry")
for i = 1, CONNS do
    local c = h2.connect(s.grpc_addr, ("127.0.0.%d"):format(2 + (i - 1) % ADDRS))
    for _ = 1, PER do
        c:open("Telemetry", block)
    end
    conns[i] = c
end
local want, peak = CONNS * PER, rss0
local opened, ended, closed
local last_change, last_seen = core.mono_ms(), nil
local last_scrape = 0
repeat
    opened, ended, closed = 0, 0, 0
    local backlog = 0
    for _, c in ipairs(conns) do
        c:pump()
        -- A connection the server closed holds none of its streams.
        opened, ended = opened + c.opened, ended + (c.closed and c.opened or c.nended)
        closed = closed + (c.closed and 1 or 0)
        backlog = backlog + c:backlog()
    end
    local r = slow.rss_kb(s.pid) or 0
    if r > peak then
        peak = r
    end
    -- What the server holds, once a second: settled when neither it nor
    -- the answers moved for 3 s (the server may still be reading).
    if core.mono_ms() - last_scrape >= 1000 then
        last_scrape = core.mono_ms()
        local seen = ended .. "/" .. tostring(prom.value(prom.scrape(s.metrics_addr), "rmq_memory_budget_used_bytes",
                                                        'kind="requests"'))
        if seen ~= last_seen then
            last_seen, last_change = seen, core.mono_ms()
        end
    end
    net.sleep(20)
until backlog == 0 and core.mono_ms() - last_change > 3000
local secs = (core.mono_ms() - t0) / 1000
local text = prom.scrape(s.metrics_addr)
local probe_t = core.mono_ms()
local c = assert(grpc.connect(s.grpc_addr))
local route, rerr = c:query_route("GrpcIdleBench")
local sent, serr = c:send("GrpcIdleBench", "probe")
c:close()
local probe_ms = core.mono_ms() - probe_t
print(("streams asked %d on %d connections from %d addresses (budget %s), %.1f s"):format(
    want, CONNS, ADDRS, unbounded and "off" or "default", secs))
print(("  held %d, refused or reset %d, connections closed by the server %d"):format(
    opened - ended, ended, closed))
print(("  budget: requests %s bytes, peer max %s, refused peer %s total %s"):format(
    tostring(prom.value(text, "rmq_memory_budget_used_bytes", 'kind="requests"')),
    tostring(prom.value(text, "rmq_memory_budget_peer_max_bytes")),
    tostring(prom.value(text, "rmq_memory_budget_refused_total", 'limit="memoryBudgetPerPeerBytes"')),
    tostring(prom.value(text, "rmq_memory_budget_refused_total", 'limit="memoryBudgetBytes"'))))
print(("  server RSS %d KiB before, %d KiB at the peak (+%d MiB)"):format(rss0, peak, (peak - rss0) // 1024))
print(("  a client from 127.0.0.1 meanwhile: QueryRoute %s, SendMessage %s, %d ms (load %s)"):format(
    route and "OK" or tostring(rerr), sent and "OK" or tostring(serr), math.floor(probe_ms),
    (io.open("/proc/loadavg") or { read = function() return "?" end }):read("l")))
for _, cc in ipairs(conns) do
    cc:close()
end
s:stop()
