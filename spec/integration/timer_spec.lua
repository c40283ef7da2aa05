-- Timer messages (RIP-43) against a real broker: TIMER_DELAY_SEC,
-- TIMER_DELAY_MS and TIMER_DELIVER_MS hold a message until its time (not
-- early, within the precision), up to timerMaxDelaySec; fields out of
-- range are refused naming the field; pending timers survive a restart,
-- kill -9 and a crash between a delivery and its checkpoint, none
-- delivered twice; the delay levels keep working.  Delays of hours and
-- days use the timer_clock_ms injection point (src/core/errinj.h),
-- switched by a conf processor (code 7002) of the broker under test.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")
local prom = require("support.prom")

local CL, CQ = 4 * 1024 * 1024, 20 * 1000

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

-- SEND_MESSAGE_V2 to queue 0 of topic with properties p (a table).
local function send(addr, topic, body, p)
    return call(addr, rq.send({ group = "FxTimerProducer", topic = topic,
                                props = message.encode_properties(p), body = body }))
end

-- Every message of topic/0 from offset 0 (decoded records).
local function all(addr, topic)
    return (rq.records(addr, { group = "FxTimerReader", topic = topic, timeout = 10000 }))
end

local function count(addr, topic)
    local r = call(addr, { code = 30, ext = { topic = topic, queueId = "0" } })
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.offset)
end

-- Waits until topic/0 holds n messages; returns them.
local function arrived(addr, topic, n, ms)
    server.eventually(function() return count(addr, topic) >= n end, ms or 20000)
    return all(addr, topic)
end

local function conf(dir, extra)
    local lines = {}
    for k, v in pairs(extra or {}) do
        lines[#lines + 1] = ("%s = %s,"):format(k, type(v) == "string" and ("%q"):format(v) or tostring(v))
    end
    return { source = ([[
        return {
            role = "broker", workers = 2, brokerName = "broker-timer",
            storePathRootDir = %q, mappedFileSizeCommitLog = %d, mappedFileSizeConsumeQueue = %d,
            namesrvAddr = "127.0.0.1:1",
            processors = {
                [7002] = function(ctx, cmd)
                    local store = require("rmq.store")
                    local name = cmd:get("name")
                    return { code = 0, remark = tostring(store.errinj(name, tonumber(cmd:get("value")))) }
                end,
            },
            %s
        }
    ]]):format(dir, CL, CQ, table.concat(lines, "\n")) }
end

local function errinj(addr, name, value)
    local r = call(addr, { code = 7002, ext = { name = name, value = tostring(value) } })
    assert.equal(0, r.code, r.remark)
end

describe("timer messages", function()
    it("holds TIMER_DELAY_SEC / TIMER_DELAY_MS / TIMER_DELIVER_MS until their time, not early", function()
        local s = server.start(conf(server.tmpdir() .. "/store", { timerPrecisionMs = 100 }))
        local t0 = core.now_ms()
        -- The first send auto-creates the topic (Lua's send path); the
        -- others take the C path: both hold.
        local due = {}
        local r = send(s.addr, "FxTimerA", "sec", { TIMER_DELAY_SEC = "2" })
        assert.equal(0, r.code, r.remark)
        due.sec = t0 + 2000
        local t1 = core.now_ms()
        r = send(s.addr, "FxTimerA", "ms", { TIMER_DELAY_MS = "1500" })
        assert.equal(0, r.code, r.remark)
        due.ms = t1 + 1500
        local at = core.now_ms() + 3000
        r = send(s.addr, "FxTimerA", "at", { TIMER_DELIVER_MS = tostring(at) })
        assert.equal(0, r.code, r.remark)
        due.at = at
        -- A time already passed: delivered at once, as a plain message.
        r = send(s.addr, "FxTimerA", "past", { TIMER_DELIVER_MS = tostring(core.now_ms() - 5000) })
        assert.equal(0, r.code, r.remark)
        assert.equal(3, count(s.addr, "rmq_sys_wheel_timer"))

        local got = arrived(s.addr, "FxTimerA", 4)
        assert.equal(4, #got)
        assert.equal("past", got[1].body)
        local seen = {}
        for i = 2, 4 do
            local m = got[i]
            seen[m.body] = true
            -- Never before the time asked for; within the precision plus a
            -- loaded machine's scheduling slack.
            assert.is_true(m.storeTimestamp >= due[m.body], m.body .. " arrived early")
            assert.is_true(m.storeTimestamp <= due[m.body] + 100 + 3000, m.body .. " arrived late")
            assert.is_nil(m.properties.REAL_TOPIC)
            assert.is_nil(m.properties.REAL_QID)
            assert.is_not_nil(m.properties.TIMER_OUT_MS)
            assert.is_not_nil(m.properties.TIMER_DEQUEUE_MS)
        end
        assert.same({ sec = true, ms = true, at = true }, seen)
        assert.equal(0, s:stop())
    end)

    it("refuses timer fields out of range naming the field, as 5.x's MESSAGE_ILLEGAL", function()
        local s = server.start(conf(server.tmpdir() .. "/store", { timerMaxDelaySec = 3600 }))
        assert.equal(0, send(s.addr, "FxTimerB", "x", {}).code)   -- the topic exists: C path
        for _, case in ipairs({
            { { TIMER_DELAY_SEC = "3601" }, "TIMER_DELAY_SEC" },
            { { TIMER_DELAY_MS = "3600001" }, "TIMER_DELAY_MS" },
            { { TIMER_DELIVER_MS = tostring(core.now_ms() + 3700 * 1000) }, "TIMER_DELIVER_MS" },
            { { TIMER_DELAY_SEC = "soon" }, "TIMER_DELAY_SEC" },
            { { TIMER_DELAY_MS = "99999999999999999999" }, "TIMER_DELAY_MS" },
            { { TIMER_DELIVER_MS = "1e12" }, "TIMER_DELIVER_MS" },
            { { TIMER_DELAY_SEC = "922337203685477580" }, "TIMER_DELAY_SEC" },
        }) do
            for _, topic in ipairs({ "FxTimerB", "FxTimerNew" .. _ }) do   -- C path, Lua path
                local r = send(s.addr, topic, "bad", case[1])
                assert.equal(13, r.code, case[2])
                assert.matches("timer message illegal", r.remark, 1, true)
                assert.matches(case[2], r.remark, 1, true)
            end
        end
        assert.equal(0, count(s.addr, "rmq_sys_wheel_timer"))
        -- The timer topic takes no direct sends (its records name where
        -- they go).
        local r = send(s.addr, "rmq_sys_wheel_timer", "direct", { REAL_TOPIC = "FxTimerB", REAL_QID = "0" })
        assert.equal(16, r.code)
        assert.matches("forbidden", r.remark, 1, true)
        -- At the limit: held.
        assert.equal(0, send(s.addr, "FxTimerB", "edge", { TIMER_DELAY_SEC = "3600" }).code)
        assert.equal(1, count(s.addr, "rmq_sys_wheel_timer"))
        -- The server keeps serving.
        assert.equal(0, send(s.addr, "FxTimerB", "y", {}).code)
        assert.equal(2, count(s.addr, "FxTimerB"))
        assert.equal(0, s:stop())

        -- timerWheelEnable = false: refused as 5.x's WHEEL_TIMER_NOT_ENABLE.
        s = server.start(conf(server.tmpdir() .. "/store2", { timerWheelEnable = false }))
        assert.equal(0, send(s.addr, "FxTimerB", "x", {}).code)
        r = send(s.addr, "FxTimerB", "x", { TIMER_DELAY_SEC = "5" })
        assert.equal(1, r.code)
        assert.matches("timerWheelEnable is false", r.remark, 1, true)
        assert.equal(0, s:stop())
    end)

    it("delivers delays of an hour and of three days on an injected clock", function()
        local s = server.start(conf(server.tmpdir() .. "/store",
                                    { metricsExporterType = "PROM", metricsPromExporterPort = 0 }))
        local function metric(name)
            return prom.value(prom.scrape(s.metrics_addr), name)
        end
        assert.equal(0, send(s.addr, "FxTimerLong", "hour", { TIMER_DELAY_SEC = "3600" }).code)
        assert.equal(0, send(s.addr, "FxTimerLong", "days", { TIMER_DELAY_SEC = tostring(3 * 86400) }).code)
        -- Pending in RocketMQ 5's metric names.
        assert.equal(2, server.eventually(function()
            return metric("rocketmq_timer_message_snapshot") == 2 and 2
        end, 20000) or metric("rocketmq_timer_message_snapshot"))
        assert.equal(2, metric("rocketmq_timer_enqueue_total"))
        assert.equal(0, metric("rocketmq_timer_dequeue_total"))
        -- And in GET_BROKER_RUNTIME_INFO, 5.x's keys (mqadmin brokerStatus).
        local info = require("cjson").decode(call(s.addr, { code = 28 }).body).table
        assert.equal("2", info.timerCongestNum)
        assert.equal("0", info.timerOffsetBehind)
        assert.equal("0", info.timerReadBehind)
        assert.matches("^%d+%.%d$", info.timerEnqueueTps)
        local r = send(s.addr, "FxTimerLong", "over", { TIMER_DELAY_SEC = tostring(3 * 86400 + 1) })
        assert.equal(13, r.code)
        assert.equal(0, count(s.addr, "FxTimerLong"))
        -- 59 minutes on: nothing yet.  The clock is moved, then the
        -- timer service is given time to pass that point (its own
        -- position is in the metrics).
        errinj(s.addr, "timer_clock_ms", 59 * 60 * 1000)
        assert.equal(0, send(s.addr, "FxTimerLong", "probe", { TIMER_DELAY_MS = "1" }).code)
        local got = arrived(s.addr, "FxTimerLong", 1)
        assert.equal("probe", got[1].body)   -- delivered past the 59-minute point
        assert.equal(1, count(s.addr, "FxTimerLong"))
        errinj(s.addr, "timer_clock_ms", 3600 * 1000 + 1000)
        got = arrived(s.addr, "FxTimerLong", 2)
        assert.equal("hour", got[2].body)
        errinj(s.addr, "timer_clock_ms", 3 * 86400 * 1000 - 60 * 1000)
        assert.equal(0, send(s.addr, "FxTimerLong", "probe2", { TIMER_DELAY_MS = "1" }).code)
        got = arrived(s.addr, "FxTimerLong", 3)
        assert.equal("probe2", got[3].body)
        assert.equal(3, count(s.addr, "FxTimerLong"))
        errinj(s.addr, "timer_clock_ms", 3 * 86400 * 1000 + 1000)
        got = arrived(s.addr, "FxTimerLong", 4)
        assert.equal("days", got[4].body)
        assert.equal(0, metric("rocketmq_timer_message_snapshot"))
        assert.equal(4, metric("rocketmq_timer_dequeue_total"))   -- with the two probes
        errinj(s.addr, "timer_clock_ms", 0)
        assert.equal(0, s:stop())
    end)

    it("keeps the delay levels working beside timers", function()
        local s = server.start(conf(server.tmpdir() .. "/store"))
        assert.equal(0, send(s.addr, "FxTimerLvl", "x", {}).code)
        local t0 = core.now_ms()
        assert.equal(0, send(s.addr, "FxTimerLvl", "level1", { DELAY = "1" }).code)
        -- DELAY wins over timer fields, as 5.x (the level decides).
        assert.equal(0, send(s.addr, "FxTimerLvl", "both", { DELAY = "1", TIMER_DELAY_SEC = "3000" }).code)
        assert.equal(0, count(s.addr, "rmq_sys_wheel_timer"))
        local got = arrived(s.addr, "FxTimerLvl", 3)
        assert.equal(3, #got)
        for i = 2, 3 do
            assert.is_true(got[i].storeTimestamp >= t0 + 1000)
        end
        assert.equal(0, s:stop())
    end)

    -- topic/0 holds "x" and m1..mn, each once.
    it("is sent by the project's producer and `rmq send --delay / --deliver-at`", function()
        local dir = server.tmpdir()
        local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
                                 brokerName = "broker-tc", storePathRootDir = dir .. "/store",
                                 kvConfigPath = dir .. "/kv.json", timerPrecisionMs = 100,
                                 mappedFileSizeCommitLog = CL })
        local p = require("rmq.client.producer").new({ namesrvAddr = s.addr, producerGroup = "FxTimerP" })
        local t0 = core.now_ms()
        local r = assert(p:send({ topic = "FxTimerCli", body = "api", delayTimeMs = 1500 }))
        assert.equal("SEND_OK", r.status)
        local _, err = p:send_batch({ { topic = "FxTimerCli", body = "b", delayTimeSec = 5 } })
        assert.matches("timer messages cannot be batched", err, 1, true)
        local code, out = server.rmq(("send -n %s -t FxTimerCli --delay 2s cli"):format(s.addr))
        assert.equal(0, code, out)
        code, out = server.rmq(("send -n %s -t FxTimerCli --deliver-at %d at"):format(s.addr, t0 + 2500))
        assert.equal(0, code, out)
        code, out = server.rmq(("send -n %s -t FxTimerCli --delay soon x"):format(s.addr))
        assert.equal(2, code, out)
        assert.matches("--delay takes a duration", out, 1, true)
        code, out = server.rmq(("send -n %s -t FxTimerCli --delay 4d x"):format(s.addr))
        assert.equal(1, code, out)
        assert.matches("TIMER_DELAY_MS", out, 1, true)
        code, out = server.rmq(("send -n %s -t FxTimerCli --delay 1s --delay-level 2 x"):format(s.addr))
        assert.equal(2, code, out)
        -- Whatever queues the producer picked: all three arrive, none early.
        local bodies = {}
        server.eventually(function()
            bodies = {}
            for q = 0, 3 do
                local rr = call(s.broker_addr, rq.pull({ group = "FxTimerReader", topic = "FxTimerCli", qid = q }))
                if rr.code == 0 then
                    for _, m in ipairs(message.decode_records(rr.body)) do
                        bodies[m.body] = m.storeTimestamp
                    end
                end
            end
            return bodies.api and bodies.cli and bodies.at
        end, 20000)
        assert.is_true(bodies.api >= t0 + 1500)
        assert.is_true(bodies.cli >= t0 + 2000)
        assert.is_true(bodies.at >= t0 + 2500)
        assert.equal(0, s:stop())
    end)

    it("recalls a timer message not yet delivered (RECALL_MESSAGE, 5.5)", function()
        local s = server.start(conf(server.tmpdir() .. "/store", { timerPrecisionMs = 100, recallMessageEnable = true }))
        local function recall(topic, handle)
            return call(s.addr, { code = 370, ext = { producerGroup = "FxTimerProducer", topic = topic,
                                                       recallHandle = handle } })
        end
        -- The first send takes Lua's path (the topic is new), the others C's.
        local a = send(s.addr, "FxTimerRecall", "a", { TIMER_DELAY_MS = "3000", UNIQ_KEY = "FXUNIQA" })
        assert.equal(0, a.code, a.remark)
        local c = send(s.addr, "FxTimerRecall", "c", { TIMER_DELAY_MS = "3000", UNIQ_KEY = "FXUNIQC" })
        assert.equal(0, c.code, c.remark)
        local probe = send(s.addr, "FxTimerRecall", "probe", { TIMER_DELAY_MS = "3500", UNIQ_KEY = "FXUNIQP" })
        assert.equal(0, probe.code)
        assert.is_string(a.ext.recallHandle)
        assert.is_string(c.ext.recallHandle)
        -- 5.x's handle: base64url("v1 TOPIC BROKER TIMER_OUT_MS+1 UNIQ_KEY").
        local b64 = require("support.base64")
        local raw = b64.decode((c.ext.recallHandle:gsub("-", "+"):gsub("_", "/")))
        assert.matches("^v1 FxTimerRecall broker%-timer %d+ FXUNIQC$", raw)

        -- Refusals, as 5.x's RecallMessageProcessor.
        local r = recall("FxTimerRecall", "not base64!")
        assert.equal(604, r.code)
        assert.equal("recall handle is invalid", r.remark)
        r = recall("FxTimerOther", c.ext.recallHandle)
        assert.equal(17, r.code)
        assert.equal(0, send(s.addr, "FxTimerOther", "x", {}).code)
        r = recall("FxTimerOther", c.ext.recallHandle)
        assert.equal(604, r.code)
        assert.equal("recall failed, topic not match", r.remark)

        r = recall("FxTimerRecall", a.ext.recallHandle)
        assert.equal(0, r.code, r.remark)
        assert.equal("FXUNIQA", r.ext.msgId)
        r = recall("FxTimerRecall", c.ext.recallHandle)
        assert.equal(0, r.code, r.remark)
        -- The probe, due after them, arrives; the recalled ones never do.
        local got = arrived(s.addr, "FxTimerRecall", 1)
        assert.equal(1, #got)
        assert.equal("probe", got[1].body)
        assert.equal(1, count(s.addr, "FxTimerRecall"))
        -- Too late now.
        r = recall("FxTimerRecall", probe.ext.recallHandle)
        assert.equal(604, r.code)
        assert.equal("recall failed, timestamp invalid", r.remark)
        assert.equal(0, s:stop())

        s = server.start(conf(server.tmpdir() .. "/store2"))
        local d = send(s.addr, "FxTimerRecall", "d", { TIMER_DELAY_SEC = "60", UNIQ_KEY = "FXUNIQD" })
        r = call(s.addr, { code = 370, ext = { topic = "FxTimerRecall", recallHandle = d.ext.recallHandle } })
        assert.equal(16, r.code)
        assert.equal("recall failed, operation is forbidden", r.remark)
        assert.equal(0, s:stop())
    end)

    local function expect_once(addr, topic, n)
        local got = arrived(addr, topic, n + 1, 60000)
        local seen = {}
        for _, m in ipairs(got) do
            assert.is_nil(seen[m.body], m.body .. " delivered twice")
            seen[m.body] = true
        end
        for i = 1, n do
            assert.is_true(seen["m" .. i], "m" .. i .. " lost")
        end
        assert.equal(n + 1, #got)
    end

    it("survives a restart and kill -9 with pending timers, none lost, none twice", function()
        local dir = server.tmpdir() .. "/store"
        local c = conf(dir, { timerPrecisionMs = 100, timerFlushIntervalMs = 200 })
        local s = server.start(c)
        assert.equal(0, send(s.addr, "FxTimerR", "x", {}).code)
        local N = 300
        for i = 1, N do
            -- Due from 1 s to 4 s from now, and a few an hour away.
            local delay = i % 50 == 0 and 3600 * 1000 or 1000 + (i * 10)
            assert.equal(0, send(s.addr, "FxTimerR", "m" .. i, { TIMER_DELAY_MS = tostring(delay) }).code)
        end
        assert.equal(0, s:stop())   -- a clean restart
        s = server.start(c)
        -- Some delivered, then kill -9 in the middle of the deliveries.
        server.eventually(function() return count(s.addr, "FxTimerR") > 100 end, 20000)
        s:kill()
        s = server.start(c)
        -- The hour-away ones: brought forward on the injected clock.
        errinj(s.addr, "timer_clock_ms", 3600 * 1000 + 1000)
        expect_once(s.addr, "FxTimerR", N)
        assert.equal(0, s:stop())
    end)

    it("delivers nothing early after kill -9 right behind the sends (rebuilt queue entries)", function()
        -- The store's recovery rebuilds the timer topic's consume queue
        -- entries from the commit log: they must carry the time again.
        local dir = server.tmpdir() .. "/store"
        local c = conf(dir, { timerPrecisionMs = 100 })
        local s = server.start(c)
        assert.equal(0, send(s.addr, "FxTimerK", "x", {}).code)
        for i = 1, 40 do
            local delay = i <= 20 and 3600 * 1000 or 2000
            assert.equal(0, send(s.addr, "FxTimerK", "m" .. i, { TIMER_DELAY_MS = tostring(delay) }).code)
        end
        s:kill()
        s = server.start(c)
        assert.truthy(s:log():find("abnormal", 1, true))
        -- The 2-second ones arrive; the hour-away ones are not among them.
        local got = arrived(s.addr, "FxTimerK", 21)
        assert.equal(21, #got)
        for _, m in ipairs(got) do
            local i = tonumber(m.body:match("^m(%d+)$"))
            assert.is_true(i == nil or i > 20, m.body .. " delivered an hour early")
        end
        errinj(s.addr, "timer_clock_ms", 3600 * 1000 + 1000)
        expect_once(s.addr, "FxTimerK", 40)
        assert.equal(0, s:stop())
    end)

    it("does not deliver twice after a crash between a delivery and its checkpoint, twice over", function()
        local dir = server.tmpdir() .. "/store"
        -- Checkpoints far apart: every delivery before the crash is after
        -- the last checkpoint, and the service replays them all.
        local c = conf(dir, { timerPrecisionMs = 100, timerFlushIntervalMs = 3600000 })
        local s = server.start(c)
        assert.equal(0, send(s.addr, "FxTimerC", "m0", {}).code)
        local N = 40
        local last
        for i = 1, N do
            -- Due 4 s to 13 s from now a second apart (the first crash
            -- comes after the 10th), then 2 s apart to 73 s: plenty left
            -- for the second crash's 3 even when a loaded machine (ASan
            -- beside two other suites, load 15) restarts slowly; 1 s apart
            -- to 43 s, all were delivered before that restart once.
            local due = i <= 10 and 3000 + i * 1000 or 13000 + (i - 10) * 2000
            last = send(s.addr, "FxTimerC", "m" .. i, { TIMER_DELAY_MS = tostring(due) })
            assert.equal(0, last.code)
        end
        -- A producer forging the delivered marker of the last timer (its
        -- record's offset is in its msgId) cannot make it be skipped.
        local phy = tostring(tonumber(last.ext.msgId:sub(-16), 16))
        assert.equal(0, send(s.addr, "FxTimerForged", "forged", { [ "__RMQ_TIMER_SRC" ] = phy }).code)
        -- The process dies right after the 10th delivery's put.
        errinj(s.addr, "timer_crash_after", 10)
        assert.is_not_nil(s.proc:wait(60000), "no crash after the 10th delivery")
        s = server.start(c)
        assert.truthy(s:log():find("10 deliveries after the checkpoint", 1, true), s:log())
        -- And again during the replay, 3 deliveries into it: the first
        -- crash's deliveries must still be known to the third run.
        errinj(s.addr, "timer_crash_after", 3)
        assert.is_not_nil(s.proc:wait(60000), "no crash after the 3rd delivery of the replay")
        s = server.start(c)
        local got = arrived(s.addr, "FxTimerC", N + 1, 90000)
        local seen = {}
        for _, m in ipairs(got) do
            assert.is_nil(seen[m.body], m.body .. " delivered twice")
            seen[m.body] = true
        end
        assert.equal(N + 1, #got)
        -- The first run's 10 and the second's: 3 after the arming, and
        -- any the second run made before it (timers already due when it
        -- started, on a machine slow to restart: ASan at load 20).
        local after = tonumber(s:log():match("(%d+) deliveries after the checkpoint"))
        assert.truthy(after and after >= 13, s:log())
        assert.equal(0, s:stop())
    end)
end)
