-- Crash recovery of a long commit log prints its progress (percent of
-- the log scanned, MB/s) at every 10 % (recoverProgressIntervalMillis),
-- and recovers exactly what it recovers without the lines.
--
-- The store: 300 commit log files of 1 MiB (300 MiB of log) that are
-- sparse, ~8 KiB on disk each: every file holds one record and then a
-- BLANK record to its end, as a file the writer left for the next one.
-- The records are one real record (written by rmq.store) copied with its
-- physical and queue offsets set for each file; no consume queue, no
-- checkpoint, an abort file: the broker must scan all 300 files.
local store = require("rmq.store")
local server = require("support.server")
local admin = require("support.admin")
local util = require("support.store")

local MB = 1024 * 1024
local FILES = 300

local function craft(dir)
    local st = assert(store.open(dir, { mappedFileSizeCommitLog = MB, storeHost = "127.0.0.1:10911" }))
    assert.equal("PUT_OK", (st:put({ topic = "Long", queueId = 0, body = "crashed store record",
                                     properties = "KEYS\1k\2TAGS\1T" })))
    st:close()
    local first = util.read_file(dir .. "/commitlog/" .. ("%020d"):format(0))
    local size = string.unpack(">i4", first)
    local rec = first:sub(1, size)
    for i = 0, FILES - 1 do
        local phy = i * MB
        -- queueOffset at 20, physicalOffset at 28 (MessageDecoder's layout).
        local r = rec:sub(1, 20) .. string.pack(">i8i8", i, phy) .. rec:sub(37)
        local blank = string.pack(">i4I4", MB - size, 0xCBD43194)
        local f = assert(io.open(("%s/commitlog/%020d"):format(dir, phy), "wb"))
        f:write(r, blank)
        f:seek("set", MB - 1)
        f:write("\0")
        f:close()
    end
    os.execute("rm -rf '" .. dir .. "/consumequeue' '" .. dir .. "/index' '" .. dir .. "/checkpoint'")
    assert(io.open(dir .. "/abort", "w")):close()
end

local function max_offset(addr)
    local r = admin.call(addr, { code = 30, ext = { topic = "Long", queueId = "0" } })
    return r.code == 0 and tonumber(r.ext.offset) or nil, r
end

describe("crash recovery progress", function()
    local dir, copy, procs
    before_each(function()
        dir = server.tmpdir()
        copy = dir .. "-quiet"
        procs = {}
    end)
    after_each(function()
        for _, p in ipairs(procs) do
            p:stop()
        end
        os.execute("rm -rf '" .. dir .. "' '" .. copy .. "'")
    end)

    local function broker(root, extra)
        local conf = { role = "broker", brokerName = "progress", storePathRootDir = root,
                       mappedFileSizeCommitLog = MB, namesrvAddr = "127.0.0.1:1",
                       registerNameServerPeriod = 60000 }
        for k, v in pairs(extra or {}) do
            conf[k] = v
        end
        local p = server.start(conf)
        procs[#procs + 1] = p
        return p
    end

    it("logs percent and MB/s of a 300 MiB scan; the recovery equals the one without lines", function()
        craft(dir)
        assert(os.execute("cp -r --sparse=always '" .. dir .. "' '" .. copy .. "'"))
        -- ~8 KiB on disk per 1 MiB file.
        local du = io.popen("du -sk '" .. dir .. "/commitlog'"):read("n")
        assert.is_true(du < FILES * 64, "the crafted files should be sparse: " .. du .. " KiB")

        local b = broker(dir, { recoverProgressIntervalMillis = 1000 })
        local log = b:log()
        local pcts = {}
        for pct, mb, total, rate in log:gmatch("recovery at (%d+)%% of the commit log %((%d+) of (%d+) MB, ([%d.]+) MB/s") do
            pcts[#pcts + 1] = tonumber(pct)
            assert.equal(FILES, tonumber(total), log)
            assert.is_true(tonumber(mb) <= FILES)
            assert.is_true(tonumber(rate) >= 0)
        end
        -- One line per 10 % step at least (more when a step takes longer
        -- than the interval), in order, then the closing one.
        assert.is_true(#pcts >= 9, log)
        for i = 2, #pcts do
            assert.is_true(pcts[i] >= pcts[i - 1], log)
        end
        assert.matches("recovery scanned 100%% of the commit log %(%d+ of 300 MB, [%d.]+ MB/s, [%d.]+ s%)", log)
        local from, n, ends = log:match("scanned from (%d+) %((%d+) records re%-dispatched%), log ends at (%d+)")
        assert.equal("0", from, log)
        assert.equal(FILES, tonumber(n))
        -- Every file, the last one too, is closed by its BLANK: the log
        -- ends where a 301st file would start.
        assert.equal(FILES * MB, tonumber(ends))
        assert.equal(FILES, (max_offset(b.addr)))

        -- The same store recovered without progress lines: same scan, same queue.
        local q = broker(copy, { recoverProgressIntervalMillis = 0 })
        local qlog = q:log()
        assert.is_nil(qlog:match("recovery at %d+%%"), qlog)
        assert.is_nil(qlog:match("recovery scanned"), qlog)
        assert.equal(("scanned from %s (%s records re-dispatched), log ends at %s"):format(from, n, ends),
                     qlog:match("scanned from %d+ %(%d+ records re%-dispatched%), log ends at %d+"))
        assert.equal(FILES, (max_offset(q.addr)))
        -- The rebuilt queue leads to the last file's record (read from
        -- the store itself once the broker stopped cleanly).
        assert.equal(0, (q:stop()))
        table.remove(procs)
        local st = assert(store.open(copy, { mappedFileSizeCommitLog = MB, storeHost = "127.0.0.1:10911" }))
        local status, got = st:get("Long", 0, FILES - 1, 1)
        assert.equal("FOUND", status)
        local m = util.parse_record(got:tostring())
        st:close()
        assert.equal((FILES - 1) * MB, m.commitLogOffset)
        assert.equal("crashed store record", m.body)
    end)
end)
