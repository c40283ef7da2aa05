-- The timer store (src/store/timer.c) over a real store, without a
-- broker: the send rule (st:timer_hold: 5.x's parsing, limits and
-- rounding), and the service (st:timer_open, tm:tick) driven by the
-- timer_clock_ms injection point: buckets delivered in order and never
-- early, timer log files deleted once delivered, pending timers kept
-- across a close/reopen (and a change of precision or wheel size), a
-- timer more than a wheel turn ahead after a long stop.
local store = require("rmq.store")
local util = require("support.store")
local message = require("rmq.message")

local OPTS = {
    mappedFileSizeCommitLog = 4 * 1024 * 1024,
    mappedFileSizeConsumeQueue = 20 * 10000,
    maxHashSlotNum = 64,
    maxIndexNum = 256,
    storeHost = "127.0.0.1:10911",
    timerPrecisionMs = 1000,
    timerMaxDelaySec = 3600,
    mappedFileSizeTimerLog = 4096,   -- 128 units a file: several files
}

local function props(flat)
    return message.edit_properties("", flat)
end

local function open(dir, extra)
    return assert(store.open(dir, util.merged(OPTS, extra or {})))
end

describe("the timer send rule (st:timer_hold)", function()
    local dir, st
    before_each(function()
        dir = util.tmpdir()
        st = open(dir)
    end)
    after_each(function()
        st:close()
        util.rmrf(dir)
    end)

    it("holds a future time in the bucket below it, 5.x's rounding", function()
        local now = store.timer_now()
        local at = (now // 1000 + 100) * 1000   -- a multiple of the precision
        local held, bucket = st:timer_hold(props({ "TIMER_DELIVER_MS", tostring(at) }), "T", 3)
        assert.equal(at - 1000, bucket)
        local p = message.decode_properties(held)
        assert.equal(tostring(at - 1000), p.TIMER_OUT_MS)
        assert.equal("T", p.REAL_TOPIC)
        assert.equal("3", p.REAL_QID)
        assert.equal(tostring(at), p.TIMER_DELIVER_MS)
        bucket = select(2, st:timer_hold(props({ "TIMER_DELIVER_MS", tostring(at + 1) }), "T", 0))
        assert.equal(at, bucket)
        bucket = select(2, st:timer_hold(props({ "TIMER_DELIVER_MS", tostring(at + 999) }), "T", 0))
        assert.equal(at, bucket)
    end)

    it("reads the fields as Java's Long.parseLong, SEC before MS before DELIVER", function()
        local now = store.timer_now()
        local _, b = st:timer_hold(props({ "TIMER_DELAY_SEC", "+60", "TIMER_DELAY_MS", "5",
                                           "TIMER_DELIVER_MS", "1" }), "T", 0)
        assert.is_true(b >= now + 59000 and b <= now + 61000)
        _, b = st:timer_hold(props({ "TIMER_DELAY_MS", "0000120000", "TIMER_DELIVER_MS", "1" }), "T", 0)
        assert.is_true(b >= now + 119000 and b <= now + 121000)
        -- Not in the future: not held (stored as it is).
        assert.is_nil(st:timer_hold(props({ "TIMER_DELAY_SEC", "-5" }), "T", 0))
        assert.is_nil(st:timer_hold(props({ "TIMER_DELAY_MS", "0" }), "T", 0))
        assert.is_nil(st:timer_hold(props({ "TIMER_DELIVER_MS", "-9223372036854775808" }), "T", 0))
        assert.is_nil(st:timer_hold(props({ "TIMER_DELAY_SEC", "-9223372036854775808" }), "T", 0))
        -- A DELAY level or TIMER_OUT_MS: not a timer message (5.x).
        assert.is_nil(st:timer_hold(props({ "DELAY", "3", "TIMER_DELAY_SEC", "60" }), "T", 0))
        assert.is_nil(st:timer_hold(props({ "TIMER_OUT_MS", "1", "TIMER_DELAY_SEC", "60" }), "T", 0))
        assert.is_nil(st:timer_hold(props({ "TAGS", "x" }), "T", 0))
    end)

    it("refuses what Java cannot parse, and times beyond timerMaxDelaySec, naming the field", function()
        for _, case in ipairs({
            { "TIMER_DELAY_SEC", "" .. 3601 }, { "TIMER_DELAY_SEC", "9223372036854775807" },
            { "TIMER_DELAY_SEC", "1.5" }, { "TIMER_DELAY_SEC", " 5" }, { "TIMER_DELAY_SEC", "+" },
            { "TIMER_DELAY_MS", "9223372036854775808" }, { "TIMER_DELAY_MS", "0x10" },
            { "TIMER_DELAY_MS", "3600001" }, { "TIMER_DELIVER_MS", "9223372036854775807" },
            { "TIMER_DELIVER_MS", "soon" },
        }) do
            local held, kind, why = st:timer_hold(props(case), "T", 0)
            assert.is_false(held, case[2])
            assert.equal("illegal", kind)
            assert.matches("timer message illegal", why, 1, true)
            assert.matches(case[1], why, 1, true)
        end
        -- A recall for a time already passed.
        local held, kind = st:timer_hold(props({ "TIMER_DELIVER_MS", "5", "TIMER_DEL_UNIQKEY", "T+x" }), "T", 0)
        assert.is_false(held)
        assert.equal("illegal", kind)
    end)

    it("refuses every timer field when timerWheelEnable is off", function()
        local d2 = util.tmpdir()
        local s2 = open(d2, { timerWheelEnable = false })
        local held, kind, why = s2:timer_hold(props({ "TIMER_DELAY_SEC", "5" }), "T", 0)
        assert.is_false(held)
        assert.equal("disabled", kind)
        assert.equal("accurate timer message is not enabled, timerWheelEnable is false", why)
        assert.is_nil(s2:timer_hold(props({ "TAGS", "x" }), "T", 0))
        s2:close()
        util.rmrf(d2)
    end)
end)

describe("the timer service", function()
    local dir
    before_each(function()
        dir = util.tmpdir()
        store.errinj("timer_clock_ms", 0)
    end)
    after_each(function()
        store.errinj("timer_clock_ms", 0)
        util.rmrf(dir)
    end)

    -- Holds n timers through the send rule: i-th due base + i * step ms.
    local function hold(st, n, base, step)
        for i = 1, n do
            local held, bucket = st:timer_hold(props({ "TIMER_DELIVER_MS", tostring(base + i * step),
                                                      "UNIQ_KEY", "U" .. i }), "FxT", 0)
            assert.truthy(held)
            assert.equal("PUT_OK", (st:put({ topic = "rmq_sys_wheel_timer", queueId = 0, body = "b" .. i,
                                            properties = held, tagsCode = bucket, wait = false })))
        end
    end

    local function ticks(tm, k)
        for _ = 1, k or 50 do
            local state = tm:tick(100000)
            if state == 0 then
                return
            end
        end
    end

    -- Moves the timer clock to `at` (wall ms) and runs the service.
    local function at(tm, t)
        store.errinj("timer_clock_ms", t - (store.timer_now() - store.errinj("timer_clock_ms")))
        ticks(tm)
    end

    it("delivers bucket by bucket, never early, and deletes delivered log files", function()
        local st = open(dir)
        local tm = assert(st:timer_open())
        local base = (store.timer_now() // 1000 + 10) * 1000
        hold(st, 1000, base, 1000)   -- one a second, over 1000 s: 8 log files
        ticks(tm)
        local info = tm:info()
        assert.equal(1000, info.pending)
        assert.equal(8, info.logFiles)
        assert.equal(0, st:max_offset("FxT", 0))
        -- Half way: exactly those due (i <= 500: due base + i s).
        at(tm, base + 500 * 1000)
        assert.equal(500, st:max_offset("FxT", 0))
        local _, list = st:get("FxT", 0, 499, 1)
        local last = message.decode_record(list:get(1))
        list:release()
        assert.equal("b500", last.body)
        assert.equal(500, tm:info().pending)
        at(tm, base + 1000 * 1000)
        assert.equal(1000, st:max_offset("FxT", 0))
        -- One timer log file stays (the writer's).
        tm:tick()
        assert.equal(0, tm:info().pending)
        tm:close()
        st:close()
        -- Reopened: the checkpoint says all is done.
        st = open(dir)
        tm = assert(st:timer_open())
        ticks(tm)
        assert.equal(0, tm:info().pending)
        assert.equal(1000, st:max_offset("FxT", 0))
        tm:close()
        st:close()
    end)

    it("keeps pending timers across a reopen with another precision and wheel size", function()
        local st = open(dir)
        local tm = assert(st:timer_open())
        local base = (store.timer_now() // 1000 + 10) * 1000
        hold(st, 300, base, 1000)
        ticks(tm)
        at(tm, base + 100 * 1000)
        assert.equal(100, st:max_offset("FxT", 0))
        tm:close()
        st:close()
        st = open(dir, { timerPrecisionMs = 200, timerMaxDelaySec = 7200 })
        tm = assert(st:timer_open())
        assert.equal(200, tm:info().pending)
        at(tm, base + 200 * 1000)
        assert.equal(200, st:max_offset("FxT", 0))
        at(tm, base + 301 * 1000)
        assert.equal(300, st:max_offset("FxT", 0))
        tm:close()
        st:close()
    end)

    it("keeps a due timer while the store refuses writes, then delivers it once", function()
        local st = open(dir)
        local tm = assert(st:timer_open())
        local base = (store.timer_now() // 1000 + 5) * 1000
        hold(st, 3, base, 1000)
        ticks(tm)
        store.errinj("write_fail", 1)
        store.errinj("timer_clock_ms", base + 4000 - (store.timer_now() - store.errinj("timer_clock_ms")))
        assert.equal(-1, (tm:tick()))
        assert.equal(-1, (tm:tick()))
        store.errinj("write_fail", 0)
        assert.is_true(st:check_writable())
        ticks(tm)
        assert.equal(3, st:max_offset("FxT", 0))
        assert.equal(0, tm:info().pending)
        tm:close()
        st:close()
    end)

    it("starts without timer files over a log with timers and deliveries (a promoted slave), none twice", function()
        local st = open(dir)
        local tm = assert(st:timer_open())
        local base = (store.timer_now() // 1000 + 5) * 1000
        hold(st, 10, base, 1000)
        ticks(tm)
        at(tm, base + 5500)
        assert.equal(5, st:max_offset("FxT", 0))
        tm:close()
        st:close()
        -- A slave has the commit log (replicated), not STORE/timer.
        util.rmrf(dir .. "/timer")
        st = open(dir)
        tm = assert(st:timer_open())
        assert.equal(5, tm:info().recoveredDeliveries)
        at(tm, base + 11000)
        assert.equal(10, st:max_offset("FxT", 0))
        assert.equal(5, tm:info().skippedRedelivery)
        tm:close()
        st:close()
    end)

    it("takes a timer more than a wheel turn ahead after a long stop", function()
        local st = open(dir, { timerMaxDelaySec = 10 })   -- 24 slots
        local tm = assert(st:timer_open())
        local slots = tm:info().slots
        tm:close()
        -- A day later: the cursor is far behind; new timers are up to a
        -- wheel turn ahead of it and more.
        store.errinj("timer_clock_ms", 86400 * 1000)
        local base = (store.timer_now() // 1000) * 1000
        hold(st, 5, base, 2000)
        tm = assert(st:timer_open())
        assert.equal(slots, tm:info().slots)
        ticks(tm)
        assert.equal(0, st:max_offset("FxT", 0))   -- caught up, none due yet
        at(tm, base + 10 * 1000 + 1000)
        assert.equal(5, st:max_offset("FxT", 0))
        tm:close()
        st:close()
    end)
end)
