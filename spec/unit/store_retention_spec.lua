-- rmq.store retention: old commit log files go, with the consume queue
-- and index files that point into them; readers of deleted offsets are
-- told the new minimum; a pinned file is never deleted.
local core = require("rmq.core")
local net = require("rmq.net")
local store = require("rmq.store")
local util = require("support.store")

local OPTS = {
    mappedFileSizeCommitLog = 64 * 1024,
    mappedFileSizeConsumeQueue = 20 * 40,
    maxHashSlotNum = 64,
    maxIndexNum = 100,
    storeHost = "127.0.0.1:10911",
}

-- The log's files, oldest first.  The directory may also hold the next
-- file, which the allocator thread makes ahead of need at any moment (as
-- 4.9.8's AllocateMappedFileService does): it is not part of the log yet.
local function log_files(st, dir)
    local all = util.ls(dir .. "/commitlog")
    return { table.unpack(all, 1, st:stats().commitlogFiles) }
end

describe("rmq.store retention", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, OPTS))
        for i = 1, 300 do
            local s = st:put({ topic = "Old", queueId = i % 2, body = string.rep("r", 900),
                               properties = "KEYS\1key" .. i })
            assert.are.equal("PUT_OK", s)
        end
        st:index_sync()
    end)

    after_each(function()
        if st then
            st:close()
        end
        util.rmrf(dir)
    end)

    it("keeps files younger than fileReservedTime", function()
        local files = log_files(st, dir)
        local r = st:delete_expired()  -- 72 h by default
        assert.is_true(r.ran)
        assert.are.equal(0, r.commitlog)
        assert.are.same(files, log_files(st, dir))
        assert.are.equal(0, st:min_phy())
    end)

    it("waits for deleteWhen unless the disk is full", function()
        local hour = tonumber(os.date("%H"))
        st:close()
        st = assert(store.open(dir, util.merged(OPTS, {
            deleteWhen = ("%02d"):format((hour + 12) % 24), fileReservedTime = 0 })))
        local r = st:delete_expired({ respectDeleteWhen = true })
        assert.is_false(r.ran)
        assert.are.equal(0, st:min_phy())
        -- Over diskMaxUsedSpaceRatio: expired files go at once.
        store.errinj("disk_ratio", 80)
        r = st:delete_expired({ respectDeleteWhen = true })
        store.errinj("disk_ratio", 0)
        assert.is_true(r.ran)
        assert.is_true(r.commitlog > 0)
    end)

    it("deletes expired files and moves every reader to the new minimum", function()
        local before = log_files(st, dir)
        local cq_before = #util.ls(dir .. "/consumequeue/Old/0")
        assert.is_true(#before >= 5)
        assert.is_true(cq_before >= 3)
        assert.is_true(st:stats().indexFiles >= 3)
        -- The store's own threads (the flush, the index dispatch) may hold
        -- the first file for an instant: it is then left for later
        -- (r.pinned, "in use"), and the broker's next retention run takes
        -- it; so does this loop's.
        local r = { commitlog = 0, consumequeue = 0, index = 0 }
        local deadline = core.mono_ms() + 30000
        while r.commitlog < 3 do
            local one = st:delete_expired({ reservedMs = 0, maxFiles = 3 - r.commitlog })
            assert.is_true(one.commitlog > 0 or one.pinned > 0)
            for _, k in ipairs({ "commitlog", "consumequeue", "index" }) do
                r[k] = r[k] + one[k]
            end
            assert.is_true(core.mono_ms() < deadline, "the first log file stayed in use for 30 s")
            if r.commitlog < 3 then
                net.sleep(10)
            end
        end
        assert.are.equal(3, r.commitlog)
        local after = log_files(st, dir)
        assert.are.equal(#before - 3, #after)
        assert.are.equal(before[4], after[1])
        local min_phy = tonumber(after[1])
        assert.are.equal(min_phy, st:min_phy())
        assert.is_true(r.consumequeue > 0)
        assert.is_true(r.index > 0)
        assert.is_true(#util.ls(dir .. "/consumequeue/Old/0") < cq_before)
        for q = 0, 1 do
            local min = st:min_offset("Old", q)
            assert.is_true(min > 0)
            -- The first surviving entry is the first record on disk.
            local status, rec, nxt, mn = st:get("Old", q, 0, 8)
            assert.are.equal("OFFSET_TOO_SMALL", status)
            assert.is_nil(rec)
            assert.are.equal(min, nxt)
            assert.are.equal(min, mn)
            status, rec = st:get("Old", q, min, 1)
            assert.are.equal("FOUND", status)
            local r1 = util.parse_record(rec:tostring())
            assert.is_true(r1.commitLogOffset >= min_phy)
            if min > 0 then
                -- The entry before it pointed into a deleted file.
                assert.is_true(r1.commitLogOffset - min_phy < 2000)
            end
        end
        assert.is_nil(st:message(0))
        assert.are.equal(st:earliest_time(), util.parse_record(st:message(min_phy):tostring()).storeTimestamp)
        -- Everything else still reads, and the store still writes.
        assert.are.equal("PUT_OK", (st:put({ topic = "Old", queueId = 0, body = "new" })))
        -- Reopened: the same minimum.
        st:close()
        st = assert(store.open(dir, OPTS))
        assert.are.equal(min_phy, st:min_phy())
        assert.are.equal("OFFSET_TOO_SMALL", (st:get("Old", 0, 0, 1)))
    end)

    it("never deletes a file a reader holds", function()
        local status, rec = st:get("Old", 1, 0, 1)  -- pins the first file
        assert.are.equal("FOUND", status)
        local r = st:delete_expired({ reservedMs = 0 })
        assert.are.equal(0, r.commitlog)
        assert.are.equal(1, r.pinned)
        assert.are.equal(0, st:min_phy())
        assert.are.equal(string.rep("r", 900), util.parse_record(rec:tostring()).body)
        rec:release()
        r = st:delete_expired({ reservedMs = 0 })
        assert.is_true(r.commitlog > 0)
    end)

    it("never deletes the file being written", function()
        local r = st:delete_expired({ reservedMs = 0, force = true, maxFiles = 100 })
        assert.is_true(r.commitlog > 0)
        -- One file in the log (the directory may also hold the next
        -- file, pre-allocated but not yet part of the log).
        assert.are.equal(1, st:stats().commitlogFiles)
        assert.is_true(st:max_phy() > st:min_phy())
        assert.are.equal(st:min_phy(), tonumber(util.ls(dir .. "/commitlog")[1]))
        assert.are.equal("PUT_OK", (st:put({ topic = "Old", body = "still writing" })))
    end)
end)
