-- Flow control with the store slowed: what producers see with and without
-- it (README "Flow control").  Figures only; spec/integration/
-- flow_control_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/flow_control.lua [SECONDS [PUT_DELAY_MS [SENDERS]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/; scripts/bench/flow_control.sh builds and runs it).
-- Defaults: 10 s a round, 50 ms a put, 64 senders.
--
-- Set-up: an rmq-server broker (2 workers, no NameServer) on 127.0.0.1,
-- one topic of 8 queues.  SENDERS closed-loop senders, each on its own
-- connection, send 1 KiB SEND_MESSAGE_V2 requests with a 3 s timeout
-- (the Java producer's sendMsgTimeout), one at a time, for SECONDS, in
-- three rounds:
--   healthy      the store as it is, flow control on (4.9.8's defaults)
--   slow, on     every commit log append held PUT_DELAY_MS (errinj
--                put_delay_ms), flow control on
--   slow, off    the same store, brokerFastFailureEnable = false and
--                osPageCacheBusyTimeOutMills = 10000000 (UPDATE_BROKER_CONFIG)
-- Printed per round: sends, stored (SUCCESS; and what the broker holds
-- once it settled: more means sends stored after their producer gave up,
-- which a retry duplicates), SYSTEM_BUSY, timed out,
-- other errors, stored TPS, p50 / p99 of stored sends, and p99 of the
-- time to an answer (any answer; a timeout counts 3000 ms): with flow
-- control a producer learns at once that the broker is busy (and can go
-- to another broker), without it it waits for its timeout.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local DELAY = tonumber(arg[2]) or 50
local SENDERS = tonumber(arg[3]) or 64
local TOPIC = "FlowControlBench"
local TIMEOUT = 3000

local s = server.start({ source = ([[
    return {
        role = "broker", workers = 2, brokerName = "broker-a",
        storePathRootDir = %q, mappedFileSizeCommitLog = 16777216,
        namesrvAddr = "127.0.0.1:1",
        processors = {
            [7001] = function(ctx, cmd)
                require("rmq.store").errinj("put_delay_ms", tonumber(cmd:get("ms")))
                return { code = 0 }
            end,
        },
    }
]]):format(server.tmpdir() .. "/store") })

local function percentile(t, p)
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))] or 0
end

local function call(cmd)
    local r, err = net.call(s.addr, cmd, 10000)
    assert(r and r.code == 0, r and r.remark or err)
end

local body = string.rep("b", 1024)

-- Messages the broker holds in the topic (GET_MAX_OFFSET over its queues).
local function broker_count()
    local n = 0
    for q = 0, 7 do
        local r = assert(net.call(s.addr, { code = 30, ext = { topic = TOPIC, queueId = q } }, 10000))
        n = n + tonumber(r.ext.offset)
    end
    return n
end

local function round(name)
    local stats = { sent = 0, ok = 0, busy = 0, timeout = 0, other = 0 }
    local held = broker_count()
    local ok_ms, answer_ms = {}, {}
    local t_end = core.mono_ms() + SECONDS * 1000
    local running = 0
    for i = 1, SENDERS do
        local c = assert(net.connect(s.addr))
        running = running + 1
        net.spawn(function()
            while core.mono_ms() < t_end do
                local t0 = core.mono_ms()
                stats.sent = stats.sent + 1
                local r, err = c:call({ code = 310, body = body, ext = {
                    a = "BenchGroup", b = TOPIC, c = "TBW102", d = 8, e = i % 8, f = 0,
                    g = core.now_ms(), h = 0, i = "WAIT\1true", j = 0, k = false, m = false } }, TIMEOUT)
                local ms = core.mono_ms() - t0
                if r and r.code == 0 then
                    stats.ok = stats.ok + 1
                    ok_ms[#ok_ms + 1] = ms
                    answer_ms[#answer_ms + 1] = ms
                elseif r and r.code == 2 then
                    stats.busy = stats.busy + 1
                    answer_ms[#answer_ms + 1] = ms
                    net.sleep(10)   -- a producer would go elsewhere; do not spin
                elseif err == "timeout" then
                    stats.timeout = stats.timeout + 1
                    answer_ms[#answer_ms + 1] = TIMEOUT
                    c:close()
                    c = assert(net.connect(s.addr))   -- late replies go to the old one
                else
                    stats.other = stats.other + 1
                    answer_ms[#answer_ms + 1] = ms
                end
            end
            c:close()
            running = running - 1
        end)
    end
    while running > 0 do
        net.sleep(50)
    end
    -- What the broker still works through after the producers gave up.
    local settled, last = nil, -1
    while settled ~= last do
        last = settled
        net.sleep(500)
        settled = broker_count()
    end
    print(("%-10s sends %6d | stored %6d (broker holds %6d) | busy %6d | timed out %5d | other %3d"
        .. " | stored TPS %8.1f | stored p50 %7.1f ms p99 %7.1f ms | answer p99 %7.1f ms"):format(
        name, stats.sent, stats.ok, settled - held, stats.busy, stats.timeout, stats.other, stats.ok / SECONDS,
        percentile(ok_ms, 0.5), percentile(ok_ms, 0.99), percentile(answer_ms, 0.99)))
    io.stdout:flush()
end

local ok, err = pcall(function()
    call({ code = 17, ext = { topic = TOPIC, defaultTopic = "TBW102", readQueueNums = "8", writeQueueNums = "8",
                              perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } })
    print(("flow control bench: %d senders, %d s a round, 1 KiB sends, %d ms a put when slow, timeout %d ms")
        :format(SENDERS, SECONDS, DELAY, TIMEOUT))
    round("healthy")
    call({ code = 7001, ext = { ms = DELAY } })
    round("slow, on")
    call({ code = 25, body = "brokerFastFailureEnable=false\nosPageCacheBusyTimeOutMills=10000000\n" })
    round("slow, off")
    call({ code = 7001, ext = { ms = 0 } })
end)
s:stop()
assert(ok, err)
