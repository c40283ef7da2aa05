-- rmq.store recovery: after a clean stop, after a crash image, after a
-- real kill -9 of a process writing with SYNC_FLUSH, and with a tail
-- corrupted by hand (garbage, a torn record, a flipped byte).
local store = require("rmq.store")
local children = require("support.children")
local net = require("rmq.net")
local util = require("support.store")

local OPTS = {
    mappedFileSizeCommitLog = 256 * 1024,
    mappedFileSizeConsumeQueue = 20 * 100,
    maxHashSlotNum = 128,
    maxIndexNum = 1024,
    storeHost = "127.0.0.1:10911",
}

local function with(extra)
    return util.merged(OPTS, extra)
end

local function body(i)
    return ("msg-%d|"):format(i) .. string.rep(string.char(65 + i % 26), 100 + (i * 53) % 1500)
end

-- Puts n messages over 3 queues; returns what was acknowledged.
local function fill(st, n, from)
    local acks = {}
    for i = from or 1, (from or 1) + n - 1 do
        local status, phy, qoff = st:put({ topic = "R", queueId = i % 3, body = body(i),
                                           properties = "KEYS\1k" .. i })
        assert.are.equal("PUT_OK", status)
        acks[#acks + 1] = { i = i, phy = phy, qoff = qoff, q = i % 3 }
    end
    return acks
end

local function check_acks(st, acks)
    for _, a in ipairs(acks) do
        local rec = assert(st:message(a.phy), "message at " .. a.phy)
        local r = util.parse_record(rec:tostring())
        assert.are.equal(body(a.i), r.body)
        assert.are.equal(a.qoff, r.queueOffset)
        local status, got = st:get("R", a.q, a.qoff, 1)
        assert.are.equal("FOUND", status)
        assert.are.equal(a.phy, util.parse_record(got:tostring()).commitLogOffset)
    end
end

-- The last file holding data and the position after its last record.
local function tail(dir)
    local recs, last_end = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
    local base = last_end - last_end % OPTS.mappedFileSizeCommitLog
    return ("%s/commitlog/%020d"):format(dir, base), last_end - base, recs, last_end
end

local function touch(path)
    local f = assert(io.open(path, "w"))
    f:close()
end

describe("rmq.store recovery", function()
    local dir

    before_each(function()
        dir = util.tmpdir()
    end)

    after_each(function()
        util.rmrf(dir)
    end)

    it("starts fast after a clean stop and keeps every offset", function()
        local st = assert(store.open(dir, OPTS))
        local acks = fill(st, 300)
        local maxphy = st:max_phy()
        st:close()
        assert.is_false(util.exists(dir .. "/abort"))
        st = assert(store.open(dir, OPTS))
        local stats = st:stats()
        assert.is_false(stats.recoveredAbnormally)
        assert.are.equal(-1, stats.recoveredFrom)  -- no scan at all
        assert.are.equal(maxphy, st:max_phy())
        assert.are.equal(maxphy, st:flushed())
        check_acks(st, acks)
        for q = 0, 2 do
            assert.are.equal(100, st:max_offset("R", q))
        end
        local more = fill(st, 30, 301)
        assert.are.equal(1, more[1].q)
        assert.are.equal(100, more[1].qoff)
        assert.are.equal(maxphy, more[1].phy)
        assert.is_truthy(st:query("R", "k150", 4, 0, math.maxinteger))
        st:close()
    end)

    -- Many dirty queues at once (a broker with thousands of topics, a
    -- message each) are made durable by one sync of the file system, not
    -- one sync per queue; a clean stop still leaves every entry there.
    it("closes with 200 dirty queues and finds every entry after a clean stop", function()
        local st = assert(store.open(dir, OPTS))
        for i = 1, 200 do
            assert.are.equal("PUT_OK", (st:put({ topic = ("Many%03d"):format(i), queueId = i % 3,
                                                  body = "m" .. i, properties = "" })))
        end
        st:close()
        st = assert(store.open(dir, OPTS))
        assert.is_false(st:stats().recoveredAbnormally)
        for i = 1, 200 do
            assert.are.equal(1, st:max_offset(("Many%03d"):format(i), i % 3))
        end
        st:close()
    end)

    it("recovers a crash image (files copied while the store is open)", function()
        local st = assert(store.open(dir, with({ flushIntervalConsumeQueue = 20,
                                                 flushConsumeQueueThoroughInterval = 50 })))
        local acks = fill(st, 200)
        -- Wait for a thorough flush to move the checkpoint's safe point.
        for _ = 1, 200 do
            local cq_safe = string.unpack(">i8", util.read_file(dir .. "/checkpoint"), 81)
            if cq_safe > 0 then
                break
            end
            net.sleep(10)
        end
        local more = fill(st, 100, 201)
        local image = util.tmpdir()
        finally(function() util.rmrf(image) end)
        assert(os.execute("cp -r '" .. dir .. "/.' '" .. image .. "/'"))
        st:close()
        assert.is_true(util.exists(image .. "/abort"))
        local st2 = assert(store.open(image, OPTS))
        local stats = st2:stats()
        assert.is_true(stats.recoveredAbnormally)
        assert.is_true(stats.recoveredFrom > 0, "started from the checkpoint, not 0")
        assert.is_true(stats.recoveredRecords < 300)
        check_acks(st2, acks)
        check_acks(st2, more)
        assert.is_truthy(st2:query("R", "k250", 4, 0, math.maxinteger))
        st2:close()
    end)

    it("rebuilds lost consume queue entries after a crash", function()
        local st = assert(store.open(dir, OPTS))
        local acks = fill(st, 150)
        st:close()
        -- A crash where the queue files lost everything and the
        -- checkpoint is RocketMQ's only (no rmq extension).
        for q = 0, 2 do
            for _, name in ipairs(util.ls(dir .. "/consumequeue/R/" .. q)) do
                local path = dir .. "/consumequeue/R/" .. q .. "/" .. name
                local size = #util.read_file(path)
                util.write_at(path, 0, string.rep("\0", size))
            end
        end
        util.write_at(dir .. "/checkpoint", 64, string.rep("\0", 64))
        touch(dir .. "/abort")
        st = assert(store.open(dir, OPTS))
        assert.is_true(st:stats().recoveredAbnormally)
        assert.are.equal(0, st:stats().recoveredFrom)
        for q = 0, 2 do
            assert.are.equal(50, st:max_offset("R", q))
        end
        check_acks(st, acks)
        st:close()
    end)

    it("truncates garbage written after the last record", function()
        local st = assert(store.open(dir, OPTS))
        local acks = fill(st, 120)
        local maxphy = st:max_phy()
        st:close()
        local path, pos = tail(dir)
        -- Plausible-looking junk: a size, the magic, then noise.
        local junk = string.pack(">i4I4", 500, 0xDAA320A7) .. string.rep("\xAB\xCD", 300)
        util.write_at(path, pos, junk)
        touch(dir .. "/abort")
        st = assert(store.open(dir, OPTS))
        assert.is_true(st:stats().recoveredAbnormally)
        assert.is_true(st:stats().tornTail)
        assert.are.equal(maxphy, st:max_phy())
        check_acks(st, acks)
        -- The junk is gone from the file, and the next record takes its place.
        local data = util.read_file(path)
        assert.are.equal(string.rep("\0", #junk), data:sub(pos + 1, pos + #junk))
        local s, phy = st:put({ topic = "R", queueId = 0, body = "next" })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(maxphy, phy)
        st:close()
        st = assert(store.open(dir, OPTS))
        assert.are.equal("next", util.parse_record(st:message(maxphy):tostring()).body)
        st:close()
    end)

    it("drops a torn last record and its consume queue entry", function()
        local st = assert(store.open(dir, OPTS))
        local acks = fill(st, 99)
        local last = acks[#acks]
        st:close()
        local path, pos, recs = tail(dir)
        local lastrec = recs[#recs]
        assert.are.equal(last.phy, lastrec.offset)
        -- Half of the last record survived: flip a byte in its body.
        local at = pos - lastrec.storeSize + 90
        local data = util.read_file(path)
        util.write_at(path, at, string.char((data:byte(at + 1) + 1) % 256))
        -- A crash before any checkpoint covered it: only RocketMQ's
        -- fields remain, so the scan starts at the first file.
        util.write_at(dir .. "/checkpoint", 64, string.rep("\0", 64))
        touch(dir .. "/abort")
        st = assert(store.open(dir, OPTS))
        assert.is_true(st:stats().tornTail)
        assert.are.equal(last.phy, st:max_phy())
        assert.is_nil(st:message(last.phy))
        assert.are.equal(last.qoff, st:max_offset("R", last.q))
        table.remove(acks)
        check_acks(st, acks)
        -- The queue offset is reused by the next message.
        local s, phy, qoff = st:put({ topic = "R", queueId = last.q, body = "again" })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(last.qoff, qoff)
        assert.are.equal(last.phy, phy)
        st:close()
    end)

    it("keeps every acknowledged message after kill -9 during SYNC_FLUSH writes", function()
        local ackpath = dir .. ".acks"
        local errpath = dir .. ".err"
        finally(function()
            os.remove(ackpath)
            os.remove(errpath)
        end)
        local build = os.getenv("RMQ_BUILD") or "build"
        if build:sub(1, 1) ~= "/" then
            build = "./" .. build
        end
        local env = { "LUA_CPATH=" .. build .. "/?.so;;", "LUA_PATH=./lua/?.lua;./spec/?.lua;;",
                      "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") }
        for _, k in ipairs({ "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS" }) do
            if os.getenv(k) then
                env[#env + 1] = k .. "=" .. os.getenv(k)
            end
        end
        local p = assert(children.spawn({ file = "lua5.4", args = { "spec/support/store_writer.lua", dir, ackpath },
                                      env = env, stderr = errpath }))
        finally(function()
            if not p.exited then
                p:kill(9)
                p:wait(5000)
            end
        end)
        -- Wait for a good number of acknowledged puts, then kill.
        local lines = 0
        for _ = 1, 400 do
            net.sleep(25)
            local f = io.open(ackpath, "rb")
            if f then
                local s = f:read("a")
                f:close()
                lines = select(2, s:gsub("\n", ""))
            end
            if lines >= 1500 or p.exited then
                break
            end
        end
        assert.is_false(p.exited, util.exists(errpath) and util.read_file(errpath) or "writer exited")
        assert.is_true(p:kill(9))
        local _, sig = p:wait(5000)
        assert.are.equal(9, sig)
        assert.is_true(lines >= 200, "only " .. lines .. " acks")
        -- Every line written before the kill is an acknowledged message.
        local acks = {}
        for line in io.lines(ackpath) do
            local phy, qoff, q, size, seq = line:match("^(%d+) (%d+) (%d+) (%d+) (%d+)$")
            if phy then
                acks[#acks + 1] = { phy = tonumber(phy), qoff = tonumber(qoff), q = tonumber(q),
                                    size = tonumber(size), seq = tonumber(seq) }
            end
        end
        local st = assert(store.open(dir, with({ flushDiskType = "SYNC_FLUSH" })))
        assert.is_true(st:stats().recoveredAbnormally)
        local per_queue = {}
        for _, a in ipairs(acks) do
            local rec = assert(st:message(a.phy), "acknowledged message at " .. a.phy)
            local r = util.parse_record(rec:tostring())
            assert.are.equal(a.size, r.storeSize)
            assert.are.equal(a.qoff, r.queueOffset)
            assert.are.equal(("seq=%d;"):format(a.seq), r.body:match("^seq=%d+;"))
            assert.are.equal(util.crc(r.body), r.bodyCRC)
            local status, got = st:get("Crash", a.q, a.qoff, 1)
            assert.are.equal("FOUND", status)
            assert.are.equal(a.phy, util.parse_record(got:tostring()).commitLogOffset)
            per_queue[a.q] = math.max(per_queue[a.q] or 0, a.qoff + 1)
        end
        for q, n in pairs(per_queue) do
            assert.is_true(st:max_offset("Crash", q) >= n)
        end
        -- No torn record: the whole log parses up to the store's end, and
        -- every queue entry points at a record.
        local recs, last_end = util.scan_commitlog(dir .. "/commitlog", 256 * 1024)
        assert.are.equal(st:max_phy(), last_end)
        assert.is_true(#recs >= #acks)
        for q = 0, 3 do
            local off = 0
            while true do
                local status, rec, nxt = st:get("Crash", q, off, 32)
                if status ~= "FOUND" then
                    assert.are.equal("OFFSET_OVERFLOW_ONE", status)
                    break
                end
                for _, r in ipairs(util.parse_all(rec:tostring())) do
                    assert.are.equal(util.crc(r.body), r.bodyCRC)
                end
                off = nxt
            end
        end
        st:close()
    end)
end)
