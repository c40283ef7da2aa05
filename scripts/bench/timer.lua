-- Timer messages (RIP-43; docs/timer.md) at scale: how fast a broker
-- takes timer messages and delivers them with 100,000 and 1,000,000
-- pending, and what a pending timer costs in memory.  Figures only;
-- spec/integration/timer_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/timer.lua [COUNTS [CONCURRENCY [SIZE]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: COUNTS "100000,1000000", 64 senders,
-- 64-byte bodies.  For each count N, a fresh broker (2 workers, 5.x's
-- timer defaults: 1 s precision, 3 days max; own temp dir, no
-- NameServer):
--  1. schedule: N SEND_MESSAGE_V2 with TIMER_DELIVER_MS spread over 60 s
--     an hour from now, from CONCURRENCY tasks on 4 queues; timed until
--     the wheel holds all N (rocketmq_timer_message_snapshot).  Printed:
--     timers/s, and the broker's CPU per timer.
--  2. idle: 5 s with N pending and nothing due: the broker's CPU per
--     second (the wheel's cost per second of wall clock).
--  3. memory: VmRSS, RssAnon (heap: what the timer service allocates)
--     and RssFile (mapped store files) before the sends and with N
--     pending; the growth per pending timer.  RssAnon is the figure for
--     "memory per pending timer": RssFile is the commit log's pages the
--     sends touched (the kernel's page cache, shared, reclaimable).
--  3b. restart: a clean stop and a start, then kill -9 and a start:
--     the time to READY (the wheel is rebuilt from the timer log before
--     it) and the pending count after it.
--  4. deliver: the timer clock is moved an hour and a minute ahead
--     (timer_clock_ms, through a conf processor) so all N are due;
--     timed until all N are in their queues.  Printed: deliveries/s and
--     CPU per delivery.
-- Every server is stopped by its PID and its temp dir removed.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")
local prom = require("support.prom")

local COUNTS = {}
for n in (arg[1] or "100000,1000000"):gmatch("%d+") do
    COUNTS[#COUNTS + 1] = tonumber(n)
end
local CONC = tonumber(arg[2]) or 64
local SIZE = tonumber(arg[3]) or 64
local TOPIC = "BenchTimer"

local function status(pid)
    local f = io.open("/proc/" .. pid .. "/status")
    local out = {}
    if f then
        for line in f:lines() do
            local k, v = line:match("^(%w+):%s+(%d+) kB")
            if k then
                out[k] = tonumber(v) * 1024
            end
        end
        f:close()
    end
    return out
end

local function run(N)
    local dir = server.tmpdir()
    local conf = { source = ([[
        return {
            role = "broker", workers = 2, brokerName = "broker-bench-timer",
            storePathRootDir = %q, namesrvAddr = "127.0.0.1:1",
            mappedFileSizeCommitLog = 512 * 1024 * 1024,
            metricsExporterType = "PROM", metricsPromExporterPort = 0,
            processors = {
                [7002] = function(ctx, cmd)
                    require("rmq.store").errinj("timer_clock_ms", tonumber(cmd:get("value")))
                    return { code = 0 }
                end,
            },
        }
    ]]):format(dir .. "/store") }
    local s = server.start(conf)
    local function metric(name)
        return prom.value(prom.scrape(s.metrics_addr), name) or 0
    end
    local function delivered()
        local total = 0
        for q = 0, 3 do
            local r = net.call(s.addr, { code = 30, ext = { topic = TOPIC, queueId = tostring(q) } }, 5000)
            total = total + (r and r.code == 0 and tonumber(r.ext.offset) or 0)
        end
        return total
    end
    local ok, err = pcall(function()
        local body = string.rep("t", SIZE)
        local base_at = core.now_ms() + 3600 * 1000
        local function send(i)
            local at = base_at + (i % 60) * 1000 + i % 1000
            local r = net.call(s.addr, { code = 310, body = body, ext = {
                a = "BenchTimerP", b = TOPIC, c = "TBW102", d = "4", e = tostring(i % 4), f = "0",
                g = tostring(core.now_ms()), h = "0", i = "TIMER_DELIVER_MS\1" .. at .. "\2WAIT\1false",
                j = "0", k = "false", m = "false" } }, 10000)
            return r and r.code == 0
        end
        assert(send(0), "the first send failed")   -- creates the topic
        while metric("rocketmq_timer_message_snapshot") < 1 do
            net.sleep(10)
        end
        local m0 = status(s.pid)
        -- 1. schedule
        local t0, c0 = core.mono_ms(), s:cpu_seconds()
        local next_i, fails, running = 1, 0, CONC
        for _ = 1, CONC do
            net.spawn(function()
                while next_i < N do
                    local i = next_i
                    next_i = next_i + 1
                    if not send(i) then
                        fails = fails + 1
                    end
                end
                running = running - 1
            end)
        end
        while running > 0 do
            net.sleep(20)
        end
        local sent_ms = core.mono_ms() - t0
        while metric("rocketmq_timer_message_snapshot") < N - fails do
            net.sleep(50)
        end
        local ms, cpu = core.mono_ms() - t0, s:cpu_seconds() - c0
        print(("%9d pending  schedule: %8.0f timers/s (sent in %.1f s, in the wheel in %.1f s, %d failed)"
               .. "  server CPU %5.1f us/timer"):format(N, N * 1000 / ms, sent_ms / 1000, ms / 1000, fails,
                                                      cpu * 1e6 / N))
        -- 2. idle
        c0 = s:cpu_seconds()
        net.sleep(5000)
        print(("%9d pending  idle: server CPU %.1f ms per second of wall clock"):format(
            N, (s:cpu_seconds() - c0) * 1000 / 5))
        -- 3. memory
        local m1 = status(s.pid)
        local function per(k)
            return ((m1[k] or 0) - (m0[k] or 0)) / N
        end
        print(("%9d pending  memory: VmRSS %.0f -> %.0f MiB (%.1f B/timer), RssAnon %.1f -> %.1f MiB "
               .. "(%.1f B/timer), RssFile %.0f -> %.0f MiB (%.1f B/timer)"):format(
            N, (m0.VmRSS or 0) / 2^20, (m1.VmRSS or 0) / 2^20, per("VmRSS"),
            (m0.RssAnon or 0) / 2^20, (m1.RssAnon or 0) / 2^20, per("RssAnon"),
            (m0.RssFile or 0) / 2^20, (m1.RssFile or 0) / 2^20, per("RssFile")))
        -- 3b. restarts with N pending: a clean stop, then kill -9.
        for _, how in ipairs({ "stop", "kill -9" }) do
            if how == "stop" then
                s:stop(60000)
            else
                s:kill()
            end
            t0 = core.mono_ms()
            s = server.start(conf)
            local ready = core.mono_ms() - t0
            local pending = metric("rocketmq_timer_message_snapshot")
            print(("%9d pending  restart after %s: READY in %.2f s, %d pending after it, RssAnon %.1f MiB"):format(
                N, how, ready / 1000, pending, (status(s.pid).RssAnon or 0) / 2^20))
        end
        -- 4. deliver
        local before = delivered()
        t0, c0 = core.mono_ms(), s:cpu_seconds()
        local r = net.call(s.addr, { code = 7002, ext = { value = tostring(3600 * 1000 + 61000) } }, 5000)
        assert(r and r.code == 0, "cannot move the timer clock")
        local want = before + N - 1 - fails
        local deadline = core.mono_ms() + 600000
        local got = before
        while got < want and core.mono_ms() < deadline do
            net.sleep(100)
            got = delivered()
        end
        ms, cpu = core.mono_ms() - t0, s:cpu_seconds() - c0
        local n = got - before
        print(("%9d pending  deliver: %8.0f timers/s (%d in %.1f s)  server CPU %5.1f us/timer"):format(
            N, n * 1000 / ms, n, ms / 1000, n > 0 and cpu * 1e6 / n or 0))
    end)
    s:stop(60000)
    os.execute("rm -rf '" .. dir .. "'")
    assert(ok, err)
end

print(("timer messages: %d senders, %d-byte bodies, 1 s precision, 2 workers"):format(CONC, SIZE))
for _, n in ipairs(COUNTS) do
    run(n)
end
