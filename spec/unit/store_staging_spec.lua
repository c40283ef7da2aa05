-- The commit log's staged appends (transientStorePoolEnable, commitlog.h):
-- a deferred put is neither visible nor in the file until a commit writes
-- it; a put without defer commits everything staged before it; a get
-- commits what is staged (the pull a put woke must see it); a failed
-- commit discards what was staged -- nothing of it is ever visible, the
-- queue offsets are reused, the store goes read-only -- and the file is
-- byte for byte what the unstaged path writes.
local store = require("rmq.store")
local util = require("support.store")
local server = require("support.server")

local OPTS = {
    mappedFileSizeCommitLog = 64 * 1024,
    mappedFileSizeConsumeQueue = 20 * 100,
    maxHashSlotNum = 64,
    maxIndexNum = 256,
    storeHost = "127.0.0.1:10911",
    -- The flush thread commits what nobody committed at each tick: the
    -- cases look at staged bytes between a put and its commit, and a tick
    -- must not fall between them (one did under ASan at load 30).
    flushIntervalCommitLog = 3600000,
}

local function with(extra)
    local o = {}
    for k, v in pairs(OPTS) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
end

-- Opens dir after a crash: the abort marker, no clean end.
local function crash_open(dir, opts)
    util.write_at(dir .. "/checkpoint", 64, string.rep("\0", 64))
    local f = assert(io.open(dir .. "/abort", "w"))
    f:close()
    return assert(store.open(dir, opts))
end

local function file_bytes(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("a")
    f:close()
    return s
end

describe("rmq.store staged appends", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, OPTS))
    end)

    after_each(function()
        store.errinj("commit_fail", 0)
        if st then
            st:close()
        end
        util.rmrf(dir)
    end)

    it("keeps deferred puts out of sight until the commit", function()
        local s, phy, qoff = st:put({ topic = "S", body = "one", defer = true })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(0, phy)
        assert.are.equal(0, qoff)
        s, phy, qoff = st:put({ topic = "S", body = "two", defer = true })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(1, qoff)
        -- Neither the queue nor the log shows them, and the file has none
        -- of their bytes.
        assert.are.equal(0, st:max_offset("S", 0))
        assert.are.equal(0, st:max_phy())
        assert.are.equal(0, #util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog))
        assert.is_true(st:commit())
        assert.are.equal(2, st:max_offset("S", 0))
        assert.is_true(st:max_phy() > phy)
        local recs = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
        assert.are.equal(2, #recs)
        assert.are.equal("one", recs[1].body)
        assert.are.equal("two", recs[2].body)
        assert.is_true(st:commit())  -- nothing left: a no-op
    end)

    it("commits what is staged before a put without defer, and for a get", function()
        assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "staged", defer = true })))
        assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "direct" })))
        assert.are.equal(2, st:max_offset("S", 0))
        assert.are.equal("PUT_OK", (st:put({ topic = "S", queueId = 1, body = "later", defer = true })))
        assert.are.equal(0, st:max_offset("S", 1))
        -- A pull woken by the put: it finds the message.
        local status, recs = st:get("S", 1, 0, 32)
        assert.are.equal("FOUND", status)
        assert.are.equal(1, #recs)
        assert.are.equal(1, st:max_offset("S", 1))
    end)

    it("discards what was staged when the commit fails, and goes read-only", function()
        for i = 1, 5 do
            assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "ok" .. i })))
        end
        local maxphy = st:max_phy()
        for i = 1, 3 do
            assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "doomed" .. i, defer = true })))
        end
        store.errinj("commit_fail", true)
        local ok, why = st:commit()
        assert.is_nil(ok)
        assert.is_truthy(why:match("write failed"), why)
        assert.are.equal(maxphy, st:max_phy())
        assert.are.equal(5, st:max_offset("S", 0))
        local w, reason = st:writable()
        assert.is_false(w)
        assert.is_truthy(reason:match("commit log write failed"), reason)
        local s0, why0 = st:put({ topic = "S", body = "refused" })
        assert.are.equal("SERVICE_NOT_AVAILABLE", s0)
        assert.is_truthy(why0:match("read%-only"), why0)
        store.errinj("commit_fail", false)
        assert.is_true(st:check_writable())
        -- The queue offsets and the log's bytes are reused.
        local s, phy, qoff = st:put({ topic = "S", body = "after" })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(5, qoff)
        local recs = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
        assert.are.equal(6, #recs)
        assert.are.equal("after", recs[6].body)
        assert.is_true(phy >= maxphy)
        -- A crash recovery finds exactly those six.
        st:close()
        st = crash_open(dir, OPTS)
        assert.is_false(st:stats().tornTail)
        assert.are.equal(6, st:max_offset("S", 0))
        local status, got = st:get("S", 0, 0, 32)
        assert.are.equal("FOUND", status)
        assert.are.equal(6, #got)
    end)

    it("loses nothing committed when the process dies, and nothing staged survives", function()
        for i = 1, 3 do
            assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "kept" .. i, defer = true })))
        end
        assert.is_true(st:commit())
        assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "never written", defer = true })))
        -- A kill -9 now: the staged message was never acknowledged (its
        -- reply waits for the commit) and is not in the file.
        local recs = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
        assert.are.equal(3, #recs)
        for i = 1, 3 do
            assert.are.equal("kept" .. i, recs[i].body)
        end
    end)

    it("writes files byte for byte as the unstaged path does, across roll-overs", function()
        local plain_dir = util.tmpdir()
        local plain = assert(store.open(plain_dir, with({ transientStorePoolEnable = false })))
        local ok, err = pcall(function()
            -- 64 KiB files: ~90 records of 700 bytes roll over (a BLANK)
            -- about once every 90; a larger staging buffer than the file
            -- is fine, a deferred run commits at each roll-over.
            for i = 1, 300 do
                local body = ("%05d"):format(i) .. string.rep(string.char(65 + i % 26), 600 + i % 97)
                local m = { topic = "B", queueId = i % 3, body = body, bornTimestamp = 1000 + i,
                            tags = "T" .. (i % 4), properties = "KEYS\1k" .. i .. "\2" }
                local a = { topic = m.topic, queueId = m.queueId, body = m.body, bornTimestamp = m.bornTimestamp,
                            tags = m.tags, properties = m.properties, defer = i % 5 ~= 0 }
                assert.are.equal("PUT_OK", (st:put(a)))
                assert.are.equal("PUT_OK", (plain:put(m)))
            end
            assert.is_true(st:commit())
            assert.are.equal(plain:max_phy(), st:max_phy())
            for q = 0, 2 do
                assert.are.equal(plain:max_offset("B", q), st:max_offset("B", q))
            end
            local a = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
            local b = util.scan_commitlog(plain_dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
            assert.are.equal(300, #a)
            assert.are.equal(#b, #a)
            for i = 1, #a do
                -- Same offsets, queues and bodies; the store times differ.
                assert.are.equal(b[i].offset, a[i].offset)
                assert.are.equal(b[i].queueOffset, a[i].queueOffset)
                assert.are.equal(b[i].body, a[i].body)
            end
            -- The BLANK at each file's end and the zeros after the last
            -- record: the files are the same length and, outside the
            -- store timestamps, the same bytes.
            local files = {}
            for name in io.popen("ls " .. dir .. "/commitlog"):lines() do files[#files + 1] = name end
            assert.is_true(#files >= 4)
            for _, name in ipairs(files) do
                local x = file_bytes(dir .. "/commitlog/" .. name)
                local y = file_bytes(plain_dir .. "/commitlog/" .. name)
                assert.are.equal(#y, #x)
            end
        end)
        plain:close()
        util.rmrf(plain_dir)
        assert(ok, err)
    end)
    -- commitLogDropCacheBehindBytes: the flush thread drops the page cache
    -- behind the flushed end (store/flush.c).  Only clean pages go, so
    -- every record reads back byte for byte, across file rolls, before
    -- and after a reopen (which scans the files from the disk).
    it("reads every record back after the page cache behind the flush is dropped", function()
        st:close()
        util.rmrf(dir)
        dir = util.tmpdir()
        local opts = with({ mappedFileSizeCommitLog = 1024 * 1024, flushIntervalCommitLog = 10,
                            flushCommitLogLeastPages = 0, commitLogDropCacheBehindBytes = 1 })
        st = assert(store.open(dir, opts))
        local sent = {}
        -- 12 MiB: past the flush thread's 8 MiB drop step, over 12 files.
        for i = 1, 3000 do
            local body = ("m%d-"):format(i) .. string.rep(string.char(65 + i % 26), 4000)
            assert.are.equal("PUT_OK", (st:put({ topic = "D", queueId = i % 2, body = body })))
            sent[#sent + 1] = body
        end
        local last = st:max_phy()
        assert.is_truthy(server.eventually(function() return st:flushed() >= last end, 60000),
                         "the flush thread reached the end")
        local function read_all()
            local got = {}
            for q = 0, 1 do
                local off = 0
                while true do
                    local status, rec, nxt = st:get("D", q, off, 32)
                    if status ~= "FOUND" then
                        break
                    end
                    for _, r in ipairs(util.parse_all(rec:tostring())) do
                        got[tonumber(r.body:match("^m(%d+)-"))] = r.body
                    end
                    rec:release()
                    off = nxt
                end
            end
            for i, body in ipairs(sent) do
                assert.are.equal(body, got[i], "record " .. i)
            end
        end
        read_all()
        st:close()
        st = assert(store.open(dir, opts))
        read_all()
    end)
end)
