-- rmq.store under faults (errinj.h): a failed write leaves no partial
-- record and turns the store read-only until the cause is gone; a file
-- that cannot be created (or a sparse file's next blocks) likewise; a
-- slow disk gives FLUSH_DISK_TIMEOUT.
local store = require("rmq.store")
local util = require("support.store")

local OPTS = {
    mappedFileSizeCommitLog = 64 * 1024,
    mappedFileSizeConsumeQueue = 20 * 100,
    maxHashSlotNum = 64,
    maxIndexNum = 256,
    storeHost = "127.0.0.1:10911",
}

describe("rmq.store faults", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, OPTS))
    end)

    after_each(function()
        for _, name in ipairs({ "write_fail", "alloc_fail", "fsync_fail", "flush_delay_ms", "disk_ratio" }) do
            store.errinj(name, 0)
        end
        if st then
            st:close()
        end
        util.rmrf(dir)
    end)

    it("knows its injection points", function()
        assert.are.equal(0, store.errinj("write_fail"))
        assert.has_error(function() store.errinj("nope", true) end)
    end)

    it("rolls back a failed write and goes read-only until the fault is gone", function()
        for i = 1, 10 do
            assert.are.equal("PUT_OK", (st:put({ topic = "W", body = "ok" .. i })))
        end
        local maxphy = st:max_phy()
        store.errinj("write_fail", true)
        local s, why = st:put({ topic = "W", body = "doomed" })
        assert.are.equal("UNKNOWN_ERROR", s)
        assert.is_truthy(why:match("write failed"))
        assert.are.equal(maxphy, st:max_phy())
        assert.are.equal(10, st:max_offset("W", 0))
        local ok, reason = st:writable()
        assert.is_false(ok)
        assert.is_truthy(reason:match("write failed"))
        s, why = st:put({ topic = "W", body = "refused" })
        assert.are.equal("SERVICE_NOT_AVAILABLE", s)
        assert.is_truthy(why:match("read%-only"))
        assert.is_false(st:check_writable())  -- still failing
        store.errinj("write_fail", false)
        assert.is_true(st:check_writable())
        local s2, phy, qoff = st:put({ topic = "W", body = "after" })
        assert.are.equal("PUT_OK", s2)
        assert.are.equal(maxphy, phy)
        assert.are.equal(10, qoff)
        -- Nothing of the failed record is on disk: a crash recovery scan
        -- finds exactly the eleven records.
        st:close()
        util.write_at(dir .. "/checkpoint", 64, string.rep("\0", 64))
        local f = assert(io.open(dir .. "/abort", "w"))
        f:close()
        st = assert(store.open(dir, OPTS))
        assert.is_false(st:stats().tornTail)
        assert.are.equal(11, st:max_offset("W", 0))
        local recs = util.scan_commitlog(dir .. "/commitlog", OPTS.mappedFileSizeCommitLog)
        assert.are.equal(11, #recs)
        assert.are.equal("after", recs[11].body)
    end)

    it("reports a file that cannot be created and recovers when space returns", function()
        store.errinj("alloc_fail", true)
        local s, why
        for i = 1, 200 do
            s, why = st:put({ topic = "A", body = string.rep("a", 1000) })
            if s ~= "PUT_OK" then
                break
            end
        end
        assert.are.equal("CREATE_MAPEDFILE_FAILED", s)
        assert.is_truthy(why:match("No space left") or why:match("ENOSPC") or why:match("space"))
        local n = st:max_offset("A", 0)
        assert.are.equal("SERVICE_NOT_AVAILABLE", (st:put({ topic = "A", body = "x" })))
        store.errinj("alloc_fail", false)
        assert.is_true(st:check_writable())
        local s2, _, qoff = st:put({ topic = "A", body = "x" })
        assert.are.equal("PUT_OK", s2)
        assert.are.equal(n, qoff)
        local status, rec = st:get("A", 0, 0, 32)
        assert.are.equal("FOUND", status)
        assert.is_true(#rec > 0)
    end)

    it("reports a full disk inside a sparse file, keeps every record before it", function()
        -- 16 MiB files, sparse (warmMapedFileEnable off): blocks come 4
        -- MiB at a time, so the disk can fill up in the middle of a file.
        st:close()
        util.rmrf(dir)
        dir = util.tmpdir()
        local opts = {}
        for k, v in pairs(OPTS) do
            opts[k] = v
        end
        opts.mappedFileSizeCommitLog = 16 * 1024 * 1024
        st = assert(store.open(dir, opts))
        local body = string.rep("s", 64 * 1024)
        local n = 0
        while st:max_phy() < 3 * 1024 * 1024 do
            assert.are.equal("PUT_OK", (st:put({ topic = "S", body = body })))
            n = n + 1
        end
        store.errinj("alloc_fail", true)
        local s, why
        for _ = 1, 200 do
            s, why = st:put({ topic = "S", body = body })
            if s ~= "PUT_OK" then
                break
            end
            n = n + 1
        end
        assert.are_not.equal("PUT_OK", s)
        assert.is_truthy(tostring(why):match("space"), tostring(why))
        assert.is_true(st:max_phy() < 16 * 1024 * 1024, "the disk filled up only at the next file: the first was reserved whole")
        store.errinj("alloc_fail", false)
        assert.is_true(st:check_writable())
        assert.are.equal("PUT_OK", (st:put({ topic = "S", body = "after" })))
        st:close()
        st = assert(store.open(dir, opts))
        assert.are.equal(n + 1, st:max_offset("S", 0))
    end)

    it("goes read-only when the disk is nearly full", function()
        store.errinj("disk_ratio", 95)
        assert.are.equal("PUT_OK", (st:put({ topic = "D", body = "x" })))
        -- The service thread checks the disk with retention (every 10 s);
        -- a manual run does the same check.
        st:delete_expired({ reservedMs = 1 << 40 })
        local s, why = st:put({ topic = "D", body = "y" })
        assert.are.equal("SERVICE_NOT_AVAILABLE", s)
        assert.is_truthy(why:match("disk full"))
        assert.is_false(st:check_writable())
        store.errinj("disk_ratio", 50)
        assert.is_true(st:check_writable())
    end)

    it("answers FLUSH_DISK_TIMEOUT when the sync flush is too slow", function()
        st:close()
        local o = util.merged(OPTS, { flushDiskType = "SYNC_FLUSH", syncFlushTimeout = 100 })
        st = assert(store.open(dir, o))
        store.errinj("flush_delay_ms", 400)
        local s, phy, qoff = st:put({ topic = "Slow", body = "late" })
        assert.are.equal("FLUSH_DISK_TIMEOUT", s)
        assert.are.equal(0, qoff)  -- stored anyway
        store.errinj("flush_delay_ms", 0)
        local ok, err = st:wait_flushed(st:max_phy(), 3000)
        assert.is_true(ok, err)
        assert.are.equal("late", util.parse_record(st:message(phy):tostring()).body)
    end)

    it("goes read-only when an fsync fails", function()
        store.errinj("fsync_fail", true)
        st:put({ topic = "F", body = "x" })
        assert.is_nil((st:flush()))
        assert.is_false((st:writable()))
        assert.are.equal("SERVICE_NOT_AVAILABLE", (st:put({ topic = "F", body = "y" })))
        store.errinj("fsync_fail", false)
        assert.is_true(st:flush())
        assert.is_true(st:check_writable())
    end)
end)
