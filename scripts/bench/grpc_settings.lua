-- What a SETTINGS frame repeating INITIAL_WINDOW_SIZE costs the server
-- (issue 21): one connection holds STREAMS idle Telemetry streams
-- (spec/support/h2raw.lua), then sends FRAMES SETTINGS frames of ENTRIES
-- INITIAL_WINDOW_SIZE settings each (the last value alternating, so every
-- frame moves the windows) and waits for their ACKs.  Prints the server's
-- CPU time for them (utime + stime from /proc, load-dependent: compare
-- two builds in the same run).  Applying every entry costs ENTRIES x
-- STREAMS window moves a frame; applying the last value, STREAMS.
--
--   lua5.4 scripts/bench/grpc_settings.lua [STREAMS=1000] [FRAMES=200] [ENTRIES=2730] [LIMITS=raised|none]
--
-- LIMITS=raised (default) runs with grpcMaxSettingsEntries = 2730 and
-- grpcMaxSettingsPerSecond = 0, so the frames are taken; `none` passes
-- neither key (a build without them).  Run from the repository root after a
-- build (RMQ_BUILD, default build/).
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local gn = require("support.grpc_node")
local net = require("rmq.net")
local h2 = require("support.h2raw")

local STREAMS = tonumber(arg[1]) or 1000
local FRAMES = tonumber(arg[2]) or 200
local ENTRIES = tonumber(arg[3]) or 2730
local raised = arg[4] ~= "none"

local conf = { workers = 1, grpcMaxConcurrentStreams = STREAMS, grpcMaxStreamsPerSecond = 0 }
if raised then
    conf.grpcMaxSettingsEntries, conf.grpcMaxSettingsPerSecond = 2730, 0
end
local s = gn.start(conf)

local function cpu_ticks()
    local f = assert(io.open("/proc/" .. s.pid .. "/stat", "r"))
    local line = f:read("a")
    f:close()
    local rest = line:match("%) (.*)$")
    local fields = {}
    for w in rest:gmatch("%S+") do
        fields[#fields + 1] = w
    end
    return tonumber(fields[12]) + tonumber(fields[13])   -- utime, stime (fields 14, 15)
end

local function pump_until(c, done, ms)
    local t = core.mono_ms()
    while not done() do
        if not c:pump() or core.mono_ms() - t > ms then
            return false
        end
        net.sleep(1)
    end
    return true
end

local c = h2.connect(s.grpc_addr)
local block = h2.headers_block("Telemetry")
for _ = 1, STREAMS do
    c:open("Telemetry", block)
end
-- Held once the server has acknowledged a SETTINGS sent after them.
c:frame(4, 0, 0, "")
assert(pump_until(c, function() return (c.settings_acks or 0) >= 1 end, 30000), "streams not taken")
local acks0 = c.settings_acks
local t0, cpu0 = core.mono_ms(), cpu_ticks()
for k = 1, FRAMES do
    local e = string.pack(">I2I4", 4, 65535):rep(ENTRIES - 1) .. string.pack(">I2I4", 4, 65535 + k % 2)
    c:frame(4, 0, 0, e)
end
local ok = pump_until(c, function() return c.settings_acks - acks0 >= FRAMES end, 600000)
local cpu = (cpu_ticks() - cpu0) / 100   -- USER_HZ
local wall = (core.mono_ms() - t0) / 1000
print(("%d SETTINGS frames of %d INITIAL_WINDOW_SIZE, %d open streams: %s, server CPU %.2f s, "
       .. "wall %.2f s%s"):format(FRAMES, ENTRIES, STREAMS, ok and "all acknowledged" or "NOT all acknowledged",
                                  cpu, wall, c.goaway and (", GOAWAY " .. c.goaway) or ""))
c:close()
gn.stop(s)
