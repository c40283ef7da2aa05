-- rmq.store: puts and gets through the Lua binding, in plain lua5.4, with
-- small files so every spec crosses file boundaries.  The first spec reads
-- a record with string.unpack at protocol.md §5.1's offsets; the others
-- decode records with rmq.message (the store's own decoder).
local store = require("rmq.store")
local message = require("rmq.message")
local core = require("rmq.core")
local util = require("support.store")

local SMALL = {
    mappedFileSizeCommitLog = 64 * 1024,
    mappedFileSizeConsumeQueue = 20 * 50,
    maxHashSlotNum = 64,
    maxIndexNum = 256,
    storeHost = "192.168.7.9:10911",
}

local function opts(extra)
    return util.merged(SMALL, extra)
end

local props = message.encode_properties   -- keys sorted

describe("rmq.store put/get", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, opts()))
    end)

    after_each(function()
        if st then
            st:close()
        end
        util.rmrf(dir)
    end)

    it("writes a record field by field as protocol.md §5.1 says", function()
        local body = "hello, world"
        local p = props({ TAGS = "TagA", KEYS = "k1 k2", UNIQ_KEY = "AABB" })
        local status, phy, qoff, wrote, ts, msgid = st:put({
            topic = "FxTopic", queueId = 3, body = body, flag = 7, properties = p,
            bornTimestamp = 1700000000123, bornHost = "10.1.2.3:4567",
            sysFlag = 0, reconsumeTimes = 2, preparedTransactionOffset = 99,
        })
        assert.are.equal("PUT_OK", status)
        assert.are.equal(0, phy)
        assert.are.equal(0, qoff)
        assert.are.equal(91 + #body + #"FxTopic" + #p, wrote)
        assert.is_true(math.abs(ts - core.now_ms()) < 5000)
        -- Offset message id: store host, port, offset, uppercase hex (§5.6).
        assert.are.equal("C0A807090000" .. "2A9F" .. "0000000000000000", msgid)

        local rec = st:message(phy)
        local raw = rec:tostring()
        assert.are.equal(wrote, #raw)
        -- Every field at its offset (IPv4 hosts, §5.1), read independently
        -- of the C decoder.
        local f = {}
        f.size, f.magic, f.crc, f.qid, f.flag, f.qoff, f.phy, f.sysflag, f.born_ts,
            f.b1, f.b2, f.b3, f.b4, f.born_port, f.store_ts, f.s1, f.s2, f.s3, f.s4, f.store_port,
            f.reconsume, f.prep, f.body, f.topic, f.props, f.after =
            string.unpack(">i4I4i4i4i4i8i8i4i8BBBBi4i8BBBBi4i4i8s4s1s2", raw)
        assert.same({ size = wrote, magic = 0xDAA320A7, crc = core.crc32(body) & 0x7FFFFFFF,
                      qid = 3, flag = 7, qoff = 0, phy = phy, sysflag = 0, born_ts = 1700000000123,
                      b1 = 10, b2 = 1, b3 = 2, b4 = 3, born_port = 4567, store_ts = ts,
                      s1 = 192, s2 = 168, s3 = 7, s4 = 9, store_port = 10911, reconsume = 2,
                      prep = 99, body = body, topic = "FxTopic", props = p, after = wrote + 1 }, f)
        assert.are.equal(ts, string.unpack(">i8", raw, 57))
        assert.are.equal(#body, string.unpack(">i4", raw, 85))
        -- The decoder reads the same fields.
        local r, nxt = assert(message.decode_record(raw))
        assert.are.equal(wrote + 1, nxt)
        assert.same({ storeSize = wrote, bodyCRC = f.crc, queueId = 3, flag = 7, queueOffset = 0,
                      commitLogOffset = phy, sysFlag = 0, bornTimestamp = 1700000000123,
                      bornHost = "10.1.2.3:4567", storeTimestamp = ts, storeHost = "192.168.7.9:10911",
                      reconsumeTimes = 2, preparedTransactionOffset = 99, body = body, topic = "FxTopic",
                      propertiesString = p, properties = { TAGS = "TagA", KEYS = "k1 k2", UNIQ_KEY = "AABB" },
                      offsetMsgId = msgid }, r)
    end)

    it("writes 20-byte IPv6 host fields and sets sysflag bits 4 and 5", function()
        local status, phy = st:put({ topic = "T6", body = "v6", bornHost = "[::1]:9",
                                     storeHost = "[fe80::2]:10911", sysFlag = 1 })
        assert.are.equal("PUT_OK", status)
        local raw = st:message(phy):tostring()
        local r = assert(util.parse_record(raw))
        assert.are.equal(1 | 0x10 | 0x20, r.sysFlag)
        assert.are.equal("[0:0:0:0:0:0:0:1]:9", r.bornHost)
        assert.are.equal("[fe80:0:0:0:0:0:0:2]:10911", r.storeHost)
        -- The offset message id of an IPv6 store host: 16 address bytes.
        assert.are.equal("FE800000000000000000000000000002" .. "00002A9F" .. ("%016X"):format(phy),
                         r.offsetMsgId)
        assert.are.equal(r.offsetMsgId, message.offset_msg_id(r.storeHost, phy))
        assert.are.equal(91 + 24 + 2 + 2, r.storeSize)
    end)

    it("round-trips messages across commit log and consume queue files", function()
        local sent = {}
        for i = 1, 400 do
            local q = i % 3
            local body = ("m%d-"):format(i) .. string.rep(string.char(65 + i % 26), 100 + (i * 37) % 900)
            local status, phy, qoff = st:put({ topic = "Roll", queueId = q, body = body,
                                               properties = props({ TAGS = "T" .. (i % 2) }) })
            assert.are.equal("PUT_OK", status)
            sent[q] = sent[q] or {}
            sent[q][#sent[q] + 1] = { body = body, phy = phy, qoff = qoff }
        end
        assert.is_true(st:stats().commitlogFiles >= 4, "several commit log files")
        for q = 0, 2 do
            local list = sent[q]
            assert.are.equal(#list, st:max_offset("Roll", q))
            assert.are.equal(0, st:min_offset("Roll", q))
            local got, off = {}, 0
            while true do
                local status, rec, nxt, mn, mx = st:get("Roll", q, off, 32)
                if status ~= "FOUND" then
                    assert.are.equal("OFFSET_OVERFLOW_ONE", status)
                    break
                end
                assert.are.equal(0, mn)
                assert.are.equal(#list, mx)
                for _, r in ipairs(util.parse_all(rec:tostring())) do
                    got[#got + 1] = r
                end
                rec:release()
                assert.is_true(nxt > off)
                off = nxt
            end
            assert.are.equal(#list, #got)
            for i, r in ipairs(got) do
                assert.are.equal(list[i].body, r.body)
                assert.are.equal(list[i].phy, r.commitLogOffset)
                assert.are.equal(i - 1, r.queueOffset)
                assert.are.equal(q, r.queueId)
            end
        end
        -- The blank at the end of every full file (§5.2).
        local files = util.ls(dir .. "/commitlog")
        local first = util.read_file(dir .. "/commitlog/" .. files[1])
        local recs, pos = 0, 1
        while true do
            local size, magic = string.unpack(">i4I4", first, pos)
            if magic == 0xCBD43194 then
                assert.are.equal(#first - pos + 1, size)
                break
            end
            recs = recs + 1
            pos = pos + size
        end
        assert.is_true(recs > 10)
    end)

    it("reports the pull statuses of protocol.md §4.3", function()
        for i = 1, 5 do
            st:put({ topic = "S", queueId = 0, body = "b" .. i })
        end
        local status, rec, nxt, mn, mx, maxphy = st:get("S", 0, 0, 2)
        assert.are.equal("FOUND", status)
        assert.are.equal(2, #rec)
        assert.are.equal(2, nxt)
        assert.are.equal(0, mn)
        assert.are.equal(5, mx)
        assert.are.equal(st:max_phy(), maxphy)
        status, rec, nxt = st:get("S", 0, 5, 32)
        assert.are.equal("OFFSET_OVERFLOW_ONE", status)
        assert.is_nil(rec)
        assert.are.equal(5, nxt)
        status, rec, nxt = st:get("S", 0, 9, 32)
        assert.are.equal("OFFSET_OVERFLOW_BADLY", status)
        assert.is_nil(rec)
        assert.are.equal(0, nxt)  -- min is 0: corrected to min (RocketMQ)
        status, rec, nxt, mn, mx = st:get("S", 1, 3, 32)
        assert.are.equal("NO_MESSAGE_IN_QUEUE", status)
        assert.is_nil(rec)
        assert.are.equal(0, mn)
        assert.are.equal(0, nxt)
        assert.are.equal(0, mx)
        status = st:get("Unknown", 0, 0, 32)
        assert.are.equal("NO_MESSAGE_IN_QUEUE", status)
        local qs = st:queues()
        assert.are.equal(1, #qs)
        assert.are.same({ topic = "S", queueId = 0, min = 0, max = 5 }, qs[1])
    end)

    it("filters by tag hash code and counts skipped entries", function()
        for i = 1, 6 do
            st:put({ topic = "F", body = "b" .. i, tags = (i % 2 == 0) and "Even" or "Odd" })
        end
        local even = message.java_hash("Even")
        local status, rec, nxt = st:get("F", 0, 0, 32, { even })
        assert.are.equal("FOUND", status)
        assert.are.equal(3, #rec)
        assert.are.equal(6, nxt)
        for _, r in ipairs(util.parse_all(rec:tostring())) do
            assert.is_truthy(({ b2 = 1, b4 = 1, b6 = 1 })[r.body])
        end
        status, rec, nxt = st:get("F", 0, 0, 32, { message.java_hash("None") })
        assert.are.equal("NO_MATCHED_MESSAGE", status)
        assert.is_nil(rec)
        assert.are.equal(6, nxt)
    end)

    it("computes Java String.hashCode over UTF-16 code units", function()
        -- What String.hashCode() returns for these in Java (JDK 17).
        for s, h in pairs({ [""] = 0, TagA = 2598919, TagB = 2598920, TagBatch = -726516768,
                            ["héllo wörld ✓"] = 1283059084, ["日本語タグ"] = -858417240,
                            ["emoji 😀 tag"] = 773266551 }) do
            assert.are.equal(h, message.java_hash(s), s)
        end
    end)

    it("stores the TAGS hash in the consume queue entry", function()
        local status = st:put({ topic = "CQ", body = "x", properties = props({ TAGS = "héllo" }) })
        assert.are.equal("PUT_OK", status)
        st:put({ topic = "CQ", body = "y" })  -- no tag: 0
        st:flush()
        local data = util.read_file(dir .. "/consumequeue/CQ/0/00000000000000000000")
        local phy, size, tags = string.unpack(">i8i4i8", data, 1)
        assert.are.equal(0, phy)
        assert.are.equal(103094734, tags)   -- "héllo".hashCode()
        local _, _, tags2 = string.unpack(">i8i4i8", data, 21)
        assert.are.equal(0, tags2)
        assert.is_true(size > 0)
    end)

    it("puts a batch as one record per message with consecutive offsets (§5.8)", function()
        st:put({ topic = "B", queueId = 1, body = "before" })
        local inner = {
            { body = "one", properties = props({ TAGS = "TagBatch", UNIQ_KEY = "U1" }) },
            { body = "two", flag = 5, properties = props({ TAGS = "TagBatch", UNIQ_KEY = "U2" }) .. "\2" },
            { body = "three", properties = "" },
        }
        local status, phy, qoff, wrote, ts, ids, count = st:put_batch({
            topic = "B", queueId = 1, body = util.batch(inner),
            properties = props({ WAIT = "true", CLUSTER = "DefaultCluster" }),
            bornHost = "127.0.0.1:5555",
        })
        assert.are.equal("PUT_OK", status)
        assert.are.equal(3, count)
        assert.are.equal(1, qoff)
        local idlist = {}
        for id in ids:gmatch("[^,]+") do
            idlist[#idlist + 1] = id
        end
        assert.are.equal(3, #idlist)
        assert.are.equal(message.offset_msg_id("192.168.7.9:10911", phy), idlist[1])
        local s2, rec = st:get("B", 1, 1, 32)
        assert.are.equal("FOUND", s2)
        local recs = util.parse_all(rec:tostring())
        assert.are.equal(3, #recs)
        local total = 0
        for i, r in ipairs(recs) do
            assert.are.equal(inner[i].body, r.body)
            assert.are.equal(i, r.queueOffset)
            assert.are.equal(inner[i].flag or 0, r.flag)
            assert.are.equal(ts, r.storeTimestamp)
            assert.are.equal(util.crc(inner[i].body), r.bodyCRC)
            assert.are.equal(message.offset_msg_id("192.168.7.9:10911", r.commitLogOffset), idlist[i])
            assert.are.equal("DefaultCluster", r.properties.CLUSTER)
            total = total + r.storeSize
        end
        assert.are.equal(wrote, total)
        -- Inner + 0x02 + batch properties; no doubled separator.
        assert.are.equal(inner[1].properties .. "\2" .. props({ WAIT = "true", CLUSTER = "DefaultCluster" }),
                         recs[1].propertiesString)
        assert.are.equal(inner[2].properties .. props({ WAIT = "true", CLUSTER = "DefaultCluster" }),
                         recs[2].propertiesString)
        assert.are.equal(props({ WAIT = "true", CLUSTER = "DefaultCluster" }), recs[3].propertiesString)
        assert.are.equal("MESSAGE_ILLEGAL", (st:put_batch({ topic = "B", body = "garbage" })))
    end)

    it("refuses bad input before writing anything", function()
        local before = st:max_phy()
        local s, why = st:put({ topic = string.rep("t", 128), body = "x" })
        assert.are.equal("MESSAGE_ILLEGAL", s)
        assert.is_truthy(why:match("topic"))
        s = st:put({ topic = "P", body = "x", properties = string.rep("p", 32768) })
        assert.are.equal("PROPERTIES_SIZE_EXCEEDED", s)
        s = st:put({ topic = "../evil", body = "x" })
        assert.are.equal("MESSAGE_ILLEGAL", s)
        assert.are.equal(before, st:max_phy())
        assert.has_error(function() st:put({ body = "x" }) end, "msg.topic is required")
        assert.has_error(function() st:put({ topic = "T", body = "x", queueId = "a" }) end)
        assert.has_error(function() st:put({ topic = "T", body = "x", bornHost = "nohost" }) end)
    end)

    it("refuses a message larger than maxMessageSize", function()
        st:close()
        st = assert(store.open(dir, opts({ maxMessageSize = 2000 })))
        local s, why = st:put({ topic = "Big", body = string.rep("x", 2001) })
        assert.are.equal("MESSAGE_ILLEGAL", s)
        assert.is_truthy(why:match("maxMessageSize"))
        -- The record (header included) counts, as in RocketMQ's encoder.
        s = st:put({ topic = "Big", body = string.rep("x", 1950) })
        assert.are.equal("MESSAGE_ILLEGAL", s)
        s = st:put({ topic = "Big", body = string.rep("x", 1800) })
        assert.are.equal("PUT_OK", s)
        -- A record that cannot fit in any commit log file.
        st:close()
        st = assert(store.open(dir, opts({ maxMessageSize = 1 << 20 })))
        s, why = st:put({ topic = "Big", body = string.rep("x", 70000) })
        assert.are.equal("MESSAGE_ILLEGAL", s, why)
        assert.are.equal(1, st:max_offset("Big", 0))
    end)

    it("looks up by time, earliest time, key and unique id", function()
        local stamps = {}
        for i = 1, 20 do
            local s, _, _, _, ts = st:put({
                topic = "L", body = "b" .. i,
                properties = props({ KEYS = "key-" .. i .. " shared", UNIQ_KEY = ("U%04d"):format(i) }),
            })
            assert.are.equal("PUT_OK", s)
            stamps[i] = ts
            if i % 5 == 0 then
                os.execute("sleep 0.02")
            end
        end
        assert.are.equal(stamps[1], st:earliest_time("L", 0))
        assert.are.equal(-1, st:earliest_time("Nope", 0))
        assert.are.equal(stamps[1], st:earliest_time())
        assert.are.equal(0, st:offset_by_time("L", 0, 0))
        assert.are.equal(19, st:offset_by_time("L", 0, stamps[20] + 100000))
        local off = st:offset_by_time("L", 0, stamps[11])
        assert.are.equal(stamps[11], util.parse_record(st:get("L", 0, off, 1) and
            select(2, st:get("L", 0, off, 1)):tostring()).storeTimestamp)
        assert.are.equal(0, st:offset_by_time("Nope", 0, stamps[1]))

        local rec, last_ts, last_phy = st:query("L", "key-7", 32, 0, stamps[20] + 1000)
        assert.is_truthy(rec)
        local found = false
        for _, r in ipairs(util.parse_all(rec:tostring())) do
            if r.properties.KEYS:match("^key%-7 ") then
                found = true
            end
        end
        assert.is_true(found)
        assert.is_true(last_ts >= stamps[20])
        assert.is_true(last_phy >= 0)
        rec = st:query("L", "shared", 32, 0, stamps[20] + 1000)
        assert.are.equal(20, #rec)
        rec = st:query("L", "U0013", 32, 0, stamps[20] + 1000)
        assert.are.equal("U0013", util.parse_all(rec:tostring())[1].properties.UNIQ_KEY)
        assert.is_nil((st:query("L", "absent", 32, 0, stamps[20] + 1000)))
        -- A window before the messages finds nothing.
        assert.is_nil((st:query("L", "shared", 32, 0, stamps[1] - 5000)))
        assert.is_nil(st:message(st:max_phy()))
        assert.is_nil(st:message(3))
    end)

    it("finds by key records of every size, large ones among small ones, IPv6 hosts too", function()
        -- The index dispatch takes each committed record from the log's
        -- metas (the record less its body) while they are there: each
        -- key must lead to its record, small or large, across file ends
        -- (64 KiB files).  The case below covers the records it reads
        -- from the log instead.
        st:close()
        st = assert(store.open(dir, opts({ maxMessageSize = 60000 })))
        local sizes = { 100, 9000, 20000, 50, 8192, 8191, 30000, 10, 16384, 16384, 200, 40000, 8300 }
        local last
        for i, n in ipairs(sizes) do
            local s, _, _, _, ts = st:put({
                topic = "Big", body = string.rep(string.char(65 + i % 26), n),
                bornHost = i % 3 == 0 and "[2001:db8::7]:4567" or "10.1.2.3:4567",
                properties = props({ KEYS = "k" .. i .. " all", UNIQ_KEY = ("B%04d"):format(i) }),
            })
            assert.are.equal("PUT_OK", s)
            last = ts
        end
        for i, n in ipairs(sizes) do
            local rec = st:query("Big", "k" .. i, 32, 0, last + 1000)
            assert.is_truthy(rec, "key k" .. i)
            local got = util.parse_all(rec:tostring())
            assert.are.equal(1, #got)
            assert.are.equal(n, #got[1].body)
            assert.are.equal(("B%04d"):format(i), got[1].properties.UNIQ_KEY)
            rec = st:query("Big", ("B%04d"):format(i), 32, 0, last + 1000)
            assert.are.equal(n, #util.parse_all(rec:tostring())[1].body)
        end
        assert.are.equal(#sizes, #st:query("Big", "all", 32, 0, last + 1000))
    end)

    -- indexMetaBufferBytes small: a batch's records are committed at
    -- once, more metas than the buffer holds, so the dispatch takes the
    -- first of them from the metas and the rest from the log (a full
    -- buffer takes no more); 1: smaller than any meta; 0: no buffer,
    -- every record from the log.  Staged or copied into the mapping
    -- (transientStorePoolEnable off), each append hands its metas over.
    for _, staged in ipairs({ true, false }) do
    for _, cap in ipairs({ 4096, 1, 0 }) do
        it(("finds every key and id with indexMetaBufferBytes = %d, transientStorePoolEnable = %s")
           :format(cap, staged), function()
            st:close()
            st = assert(store.open(dir, opts({ maxMessageSize = 60000, indexMetaBufferBytes = cap,
                                               transientStorePoolEnable = staged })))
            local want, n, last = {}, 0, nil
            for b = 1, 10 do
                -- One large record (files roll), then a batch of 30 small ones.
                n = n + 1
                local size = 9000 + (b * 7919) % 20000
                local s, phy = st:put({
                    topic = "Mix", body = string.rep(string.char(65 + n % 26), size),
                    properties = props({ KEYS = "m" .. n, UNIQ_KEY = ("M%05d"):format(n) }),
                })
                assert.are.equal("PUT_OK", s)
                want[n] = { size = size, phy = phy }
                local inner = {}
                for _ = 1, 30 do
                    n = n + 1
                    size = (n * 131) % 1000
                    inner[#inner + 1] = { body = string.rep(string.char(65 + n % 26), size),
                        properties = props({ KEYS = "m" .. n, UNIQ_KEY = ("M%05d"):format(n) }) }
                    want[n] = { size = size }
                end
                local bs, _, _, _, bts = st:put_batch({ topic = "Mix", body = util.batch(inner) })
                assert.are.equal("PUT_OK", bs)
                last = bts
            end
            for i = 1, n do
                local rec = st:query("Mix", "m" .. i, 32, 0, last + 1000)
                assert.is_truthy(rec, "key m" .. i)
                local got = util.parse_all(rec:tostring())
                assert.are.equal(1, #got, "key m" .. i)
                assert.are.equal(want[i].size, #got[1].body)
                assert.are.equal(("M%05d"):format(i), got[1].properties.UNIQ_KEY)
                local phy = got[1].commitLogOffset
                if want[i].phy then
                    assert.are.equal(want[i].phy, phy)
                end
                rec = st:query("Mix", ("M%05d"):format(i), 32, 0, last + 1000)
                assert.is_truthy(rec, "id M" .. i)
                assert.are.equal(phy, util.parse_all(rec:tostring())[1].commitLogOffset)
                -- viewMessage by id: the id carries the offset.
                rec = st:message(phy)
                assert.are.equal(("M%05d"):format(i), util.parse_all(rec:tostring())[1].properties.UNIQ_KEY)
            end
        end)
    end
    end

    it("keeps records readable after release of other slices and after close", function()
        st:put({ topic = "K", body = "keep me" })
        local _, rec = st:get("K", 0, 0, 1)
        st:close()
        st = nil
        assert.are.equal("keep me", util.parse_record(rec:tostring()).body)
        rec:release()
        rec:release()
        assert.are.equal(0, #rec)
    end)

    it("waits for SYNC_FLUSH group commit, blocking or yielding in a task", function()
        st:close()
        st = assert(store.open(dir, opts({ flushDiskType = "SYNC_FLUSH" })))
        local s, phy, _, wrote = st:put({ topic = "Sync", body = "durable" })
        assert.are.equal("PUT_OK", s)
        assert.is_true(st:flushed() >= phy + wrote)
        -- Inside tasks: several puts wait together.
        local net = require("rmq.net")
        local results = net.run(function()
            local done, out = 0, {}
            for i = 1, 8 do
                net.spawn(function()
                    out[i] = { st:put({ topic = "Sync", body = "t" .. i }) }
                    done = done + 1
                end)
            end
            while done < 8 do
                net.sleep(5)
            end
            return out
        end)
        for i = 1, 8 do
            assert.are.equal("PUT_OK", results[i][1])
            assert.is_true(st:flushed() >= results[i][2] + results[i][4])
        end
        assert.is_true(st:wait_flushed(st:max_phy()))
        -- wait = false returns at once.
        assert.are.equal("PUT_OK", (st:put({ topic = "Sync", body = "nowait", wait = false })))
    end)
end)

describe("rmq.store helpers", function()
    it("writes files atomically and keeps the previous version", function()
        local dir = util.tmpdir()
        finally(function() util.rmrf(dir) end)
        local path = dir .. "/config/topics.json"
        assert.is_true(store.atomic_write(path, "one"))
        assert.is_true(store.atomic_write(path, "two"))
        assert.are.equal("two", util.read_file(path))
        assert.are.equal("one", util.read_file(path .. ".bak"))
        assert.is_false(util.exists(path .. ".tmp"))
        local ok, err = store.atomic_write("/proc/nope/x.json", "x")
        assert.is_nil(ok)
        assert.is_string(err)
        -- rmq.configfile reads fastjson and falls back to the .bak copy.
        local configfile = require("rmq.configfile")
        local cpath = dir .. "/config/consumerOffset.json"
        assert.is_true(configfile.write(cpath, '{"offsetTable":{"T@G":{0:25,1:7}}}'))
        assert.are.equal(7, configfile.read(cpath).offsetTable["T@G"]["1"])
        assert.is_true(configfile.write(cpath, ""))  -- a broken newer file
        assert.are.equal(25, configfile.read(cpath).offsetTable["T@G"]["0"])
        assert.is_nil(configfile.read(dir .. "/config/none.json"))
    end)

    it("refuses a second open of the same directory", function()
        local dir = util.tmpdir()
        finally(function() util.rmrf(dir) end)
        local a = assert(store.open(dir, SMALL))
        local b, err = store.open(dir, SMALL)
        assert.is_nil(b)
        assert.is_truthy(err:match("in use"))
        -- Another handle on the same store shares it.
        local c = store.attach(a:share(), "192.168.7.9:10911")
        assert.are.equal("PUT_OK", (c:put({ topic = "A", body = "x" })))
        a:close()
        assert.are.equal(1, c:max_offset("A", 0))
        c:close()
    end)
end)
