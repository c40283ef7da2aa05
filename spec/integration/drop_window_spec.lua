-- The commit log's page cache drop window (commitLogDropCacheBehindBytes,
-- commitLogDropCacheReaderSeconds; src/store/flush.c, src/store/readers.c).
-- The flush thread drops the log's page cache behind its flushed end, as
-- a user sees with fincore(1) on the commit log files; but never what a
-- consumer that pulled lately still has ahead of it, and the pages a
-- consumer far behind read back in go again once it has moved on.
-- SYNC_FLUSH: a send's reply comes after its flush, so the flush (and
-- the drop right after it) has run when the next send returns.
local net = require("rmq.net")
local server = require("support.server")
local slow = require("support.slowreader")

local MiB = 1024 * 1024
local BODY = string.rep("drop-window ", 200 * 1024 // 12)   -- ~200 KiB: 5 records a file

-- {start, res, size} of each commit log file, by offset, the last (the
-- one being written) left out.
local function files(dir)
    local p = assert(io.popen("fincore -b -n -r -o RES,SIZE,FILE " .. dir .. "/commitlog/* 2>&1"))
    local out = p:read("a")
    p:close()
    local t = {}
    for res, size, name in out:gmatch("(%d+) (%d+) (%S+)") do
        t[#t + 1] = { start = tonumber(name:match("(%d+)$")), res = tonumber(res), size = tonumber(size) }
    end
    assert(#t > 0, "fincore: " .. out)
    table.sort(t, function(a, b) return a.start < b.start end)
    t[#t] = nil
    return t
end

-- The files wholly in [from, to) of the log: how many, how many of them
-- have nothing in memory, and how many hold their records (5 of ~200 KiB
-- each; the rest of a 1 MiB file is never written).
local function count(dir, from, to)
    local seen, empty, full = 0, 0, 0
    for _, f in ipairs(files(dir)) do
        if f.start >= from and f.start + f.size <= to then
            seen = seen + 1
            if f.res == 0 then empty = empty + 1 end
            if f.res >= 990 * 1024 then full = full + 1 end
        end
    end
    return seen, empty, full
end

local function send(c, topic, body)
    local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, 0, body or BODY)))))
    assert(r.code == 0, r.remark)
    return r
end

local function pull(c, topic, offset, group)
    local r = assert(c:call(slow.cmd((slow.pull_frame(0, { topic = topic, offset = offset, max = 32,
                                                          group = group })))))
    assert(r.code == 0, r.remark)
    return tonumber(r.ext.nextBeginOffset)
end

describe("the commit log's page cache drop window", function()
    local s, c, store

    local function start(extra)
        store = server.tmpdir() .. "/store"
        local conf = {
            role = "broker", workers = 1, brokerName = "broker-a", namesrvAddr = "127.0.0.1:1",
            storePathRootDir = store, mappedFileSizeCommitLog = MiB, flushDiskType = "SYNC_FLUSH",
            commitLogDropCacheBehindBytes = MiB,
        }
        for k, v in pairs(extra or {}) do conf[k] = v end
        s = server.start(conf)
        c = assert(net.connect(s.addr))
    end

    after_each(function()
        if c then c:close() end
        if s then s:stop() end
        c, s = nil, nil
    end)

    -- 13 files with no consumer: dropped behind the flush (in steps of
    -- 8 MiB) once the index dispatch, a reader of every record, has
    -- passed them; a small send makes a flush, and so a drop.  The first
    -- file is left out: the broker reads the log's first message now and
    -- then (its store time).
    local function fill_unread(topic)
        for _ = 1, 64 do send(c, topic) end
        assert.is_truthy(server.eventually(function()
            send(c, topic, "x")
            local seen, empty = count(store, MiB, 8 * MiB)
            return seen == 7 and empty == 7
        end, 30000), "the log behind the flush was dropped")
    end

    it("keeps what a consumer that pulled has still to read", function()
        -- No index: its dispatch reads every record too, and would read
        -- back what a drop took too early.
        -- The read counts for an hour, not the default 60-120 s: the
        -- 66 SYNC_FLUSH sends below may take that long on a loaded disk.
        start({ messageIndexEnable = false, commitLogDropCacheReaderSeconds = 3600 })
        fill_unread("DwOld")
        -- A group pulls the first message of a new topic, then 13 files
        -- more are written behind it.
        send(c, "DwRead", "first")
        assert.equal(1, pull(c, "DwRead", 0, "DwGroup"))
        -- The read is in the last file (files() leaves it out).
        local from = (#files(store) + 1) * MiB
        -- Each file is looked at after every send and its most in memory
        -- kept: this machine's kernel pages out what nobody touched for
        -- 60 s (DAMON), which 64 SYNC_FLUSH sends can outlast under a
        -- sanitizer at load 20.  rmq's drop would empty a file, which the
        -- count at the end sees.
        local most = {}
        local function look()
            for _, f in ipairs(files(store)) do
                if f.start >= from then most[f.start] = math.max(most[f.start] or 0, f.res) end
            end
        end
        for _ = 1, 64 do
            send(c, "DwRead")
            look()
        end
        send(c, "DwRead", "last")
        send(c, "DwRead", "last")
        look()
        -- The whole files from the one after the read on: none dropped,
        -- and each held its 5 records in memory once written (all but
        -- the last).
        local seen, empty = count(store, from, math.huge)
        assert.is_true(seen >= 10, "files after the read: " .. seen)
        assert.equal(0, empty)
        local short = {}
        for at, res in pairs(most) do
            if res < 990 * 1024 then short[#short + 1] = ("%d: %d bytes"):format(at, res) end
        end
        assert.is_true(#short <= 1, "files never whole in memory: " .. table.concat(short, ", "))
    end)

    it("drops again what a consumer far behind read back once it has moved on", function()
        -- Epochs of 10 s: the pulls below must end inside one for the
        -- count to see every file they read back (with 3 s, 3 of 11 had
        -- gone again at load 12 beside two other suites).
        start({ commitLogDropCacheReaderSeconds = 10 })
        fill_unread("DwOld")
        -- The consumer reads the log from the start: back in memory.  (A
        -- file may go again before the count when the pulls outlast the
        -- reader's epochs: under ASan beside another suite one did.)
        local off = 0
        while off < 64 do off = pull(c, "DwOld", off, "DwLate") end
        local seen, _, full = count(store, 0, 11 * MiB)
        assert.equal(11, seen)
        assert.is_true(full >= 10, ("%d of 11 files read back"):format(full))
        -- It has stopped reading: within two of its 10 s epochs (and a
        -- drop step of writing) the pages it read go again.
        assert.is_truthy(server.eventually(function()
            send(c, "DwNew")
            local _, empty = count(store, MiB, 11 * MiB)
            return empty == 10
        end, 90000), "the pages read back were dropped again")
    end)
end)
