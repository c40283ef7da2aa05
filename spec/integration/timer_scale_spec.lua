-- A million pending timer messages (issue 22's "Done when"): the broker
-- holds them within a memory bound that does not grow with the count
-- (docs/timer.md: the heap grows by the wheel's 4 MiB of slots at most,
-- nothing per timer), keeps all of them across kill -9, and delivers each
-- exactly once when they fall due (an injected clock: timer_clock_ms).
-- Under the ASan build (servers 3-10x slower) the count is 100,000.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local prom = require("support.prom")

local N = os.getenv("RMQ_SERVER_ASAN_OPTIONS") and 100000 or 1000000
local BOUND = 32 * 1024 * 1024   -- bytes of heap (RssAnon) growth allowed in all
local TOPIC = "FxTimerScale"

local function rss_anon(pid)
    local f = assert(io.open("/proc/" .. pid .. "/status"))
    local v
    for line in f:lines() do
        v = v or tonumber(line:match("^RssAnon:%s+(%d+) kB"))
    end
    f:close()
    return v * 1024
end

describe("a million pending timers", function()
    it("fit a flat memory bound, survive kill -9, and are each delivered once", function()
        local dir = server.tmpdir()
        local conf = { source = ([[
            return {
                role = "broker", workers = 2, brokerName = "broker-timer-scale",
                storePathRootDir = %q, namesrvAddr = "127.0.0.1:1",
                mappedFileSizeCommitLog = 256 * 1024 * 1024,
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
        local function pending()
            return prom.value(prom.scrape(s.metrics_addr), "rocketmq_timer_message_snapshot") or -1
        end
        local base_at = core.now_ms() + 3600 * 1000
        local function send(i)
            local r = net.call(s.addr, { code = 310, body = "m" .. i, ext = {
                a = "FxTimerScaleP", b = TOPIC, c = "TBW102", d = "4", e = tostring(i % 4), f = "0",
                g = tostring(core.now_ms()), h = "0",
                i = "TIMER_DELIVER_MS\1" .. (base_at + (i % 600) * 1000) .. "\2WAIT\1false",
                j = "0", k = "false", m = "false" } }, 30000)
            return r ~= nil and r.code == 0
        end
        assert.is_true(send(0))
        assert.is_true(server.eventually(function() return pending() == 1 end, 20000))
        local heap0 = rss_anon(s.pid)
        local next_i, fails, running = 1, 0, 64
        for _ = 1, 64 do
            net.spawn(function()
                while next_i < N do
                    local i = next_i
                    next_i = next_i + 1
                    -- A loaded machine (ASan) may see flow control's
                    -- SYSTEM_BUSY: sent again, as a producer does.
                    local ok = send(i)
                    for k = 1, 20 do
                        if ok then
                            break
                        end
                        net.sleep(10 * k)
                        ok = send(i)
                    end
                    if not ok then
                        fails = fails + 1
                    end
                end
                running = running - 1
            end)
        end
        while running > 0 do
            net.sleep(50)
        end
        assert.equal(0, fails)
        assert.is_true(server.eventually(function() return pending() == N end, 120000),
                       "pending: " .. pending())
        local grew = rss_anon(s.pid) - heap0
        assert.is_true(grew < BOUND, ("the heap grew %d bytes for %d timers"):format(grew, N))

        s:kill()
        s = server.start(conf)
        -- The wheel is rebuilt before READY; what was read after the last
        -- checkpoint (at most timerFlushIntervalMs of it) is read again.
        assert.is_true(server.eventually(function() return pending() == N end, 60000),
                       "pending after kill -9: " .. pending() .. "\n" .. s:log():sub(-3000))
        assert.is_true(rss_anon(s.pid) - heap0 < BOUND)

        local r = net.call(s.addr, { code = 7002, ext = { value = tostring(3600 * 1000 + 601 * 1000) } }, 5000)
        assert.equal(0, r.code)
        local function delivered()
            local total = 0
            for q = 0, 3 do
                local rr = net.call(s.addr, { code = 30, ext = { topic = TOPIC, queueId = tostring(q) } }, 5000)
                total = total + (rr and rr.code == 0 and tonumber(rr.ext.offset) or 0)
            end
            return total
        end
        assert.is_true(server.eventually(function() return delivered() >= N end, 300000))
        assert.is_true(server.eventually(function() return pending() == 0 end, 20000))
        assert.equal(N, delivered())   -- none twice
        assert.equal(0, s:stop(60000))
    end)
end)
