-- rmq.store against the stores a real RocketMQ 4.9.8 broker wrote
-- (../shared/fixtures/store, README there): every record parsed and
-- checked against the manifests, then copies opened by rmq.store: the
-- clean one needs no repair, the crashed one is recovered.
local store = require("rmq.store")
local message = require("rmq.message")
local core = require("rmq.core")
local cjson = require("cjson")
local util = require("support.store")
local fixtures = require("support.fixtures")
local fx_describe = fixtures.gate(describe, pending)

local NULL = cjson.null

-- The manifest's view of one message, checked against a parsed record.
local function check_record(m, r)
    assert.are.equal(m.commitLogOffset, r.commitLogOffset)
    assert.are.equal(m.storeSize, r.storeSize)
    assert.are.equal(m.topic, r.topic)
    assert.are.equal(m.queueId, r.queueId)
    assert.are.equal(m.queueOffset, r.queueOffset)
    assert.are.equal(m.sysFlag, r.sysFlag)
    assert.are.equal(m.flag, r.flag)
    assert.are.equal(m.bornTimestamp, r.bornTimestamp)
    assert.are.equal(m.storeTimestamp, r.storeTimestamp)
    assert.are.equal(m.bodyCRC, r.bodyCRC)
    assert.are.equal(m.bodyCRC, util.crc(r.body))
    assert.are.equal(m.storedBodyLen, #r.body)
    assert.are.equal(m.bornHost, r.bornHost)
    assert.are.equal(m.storeHost, r.storeHost)
    assert.are.equal(0, r.reconsumeTimes)
    assert.are.equal(0, r.preparedTransactionOffset)
    if m.compressed then
        local plain = assert(core.inflate(r.body))
        assert.are.equal(m.bodyLen, #plain)
    else
        assert.are.equal(m.bodyLen, #r.body)
    end
    for k, v in pairs(m.storedProperties) do
        assert.are.equal(v, r.properties[k], k)
    end
    for k in pairs(r.properties) do
        assert.is_not_nil(m.storedProperties[k], "unexpected property " .. k)
    end
    local tags = m.tags ~= NULL and m.tags ~= "" and m.tags or nil
    assert.are.equal(m.tagsCode, tags and message.java_hash(tags) or 0)
    -- The offset message id of §5.6.
    assert.are.equal(m.offsetMsgId, message.offset_msg_id(m.storeHost, m.commitLogOffset))
    assert.are.equal(m.offsetMsgId, r.offsetMsgId)
end

-- Every consume queue entry against the manifest.
local function check_cq(dir, manifest)
    local by_queue = {}
    for _, m in ipairs(manifest) do
        local key = ("%s/%d"):format(m.topic, m.queueId)
        by_queue[key] = by_queue[key] or {}
        by_queue[key][m.queueOffset] = m
    end
    local checked = 0
    for key, entries in pairs(by_queue) do
        local qdir = dir .. "/consumequeue/" .. key
        for _, name in ipairs(util.ls(qdir)) do
            local data = util.read_file(qdir .. "/" .. name)
            local first = tonumber(name) // 20
            for i = 0, #data // 20 - 1 do
                local phy, size, tags = string.unpack(">i8i4i8", data, i * 20 + 1)
                if size > 0 then
                    local m = assert(entries[first + i], key .. " entry " .. (first + i))
                    assert.are.equal(m.commitLogOffset, phy)
                    assert.are.equal(m.storeSize, size)
                    assert.are.equal(m.tagsCode, tags)
                    checked = checked + 1
                end
            end
        end
    end
    assert.are.equal(#manifest, checked)
end

-- Index file: header and a lookup of every key by hand (§5.11).
local function check_index(path, manifest, slots)
    local data = util.read_file(path)
    local begin_ts, end_ts, begin_phy, end_phy, slot_count, count =
        string.unpack(">i8i8i8i8i4i4", data, 1)
    assert.is_true(end_ts >= begin_ts)
    assert.is_true(end_phy >= begin_phy)
    assert.is_true(slot_count > 0)
    local function lookup(key)
        local h = message.java_hash(key)
        h = h < 0 and -h or h
        if h >= 0x80000000 then
            h = 0
        end
        local at = string.unpack(">i4", data, 41 + (h % slots) * 4)
        local found = {}
        while at > 0 and at < count do
            local kh, phy, _, prev = string.unpack(">i4i8i4i4", data, 41 + slots * 4 + at * 20)
            if kh == h then
                found[phy] = true
            end
            at = prev
        end
        return found
    end
    for _, m in ipairs(manifest) do
        assert.is_true(lookup(m.topic .. "#" .. m.msgId)[m.commitLogOffset], m.msgId)
        if m.keys ~= NULL then
            for k in m.keys:gmatch("%S+") do
                assert.is_true(lookup(m.topic .. "#" .. k)[m.commitLogOffset], k)
            end
        end
    end
    return count
end

-- Everything an opened store must serve for the manifest.
local function check_served(st, manifest)
    for _, m in ipairs(manifest) do
        local rec = assert(st:message(m.commitLogOffset), "message at " .. m.commitLogOffset)
        check_record(m, assert(util.parse_record(rec:tostring())))
        rec:release()
        local status, got = st:get(m.topic, m.queueId, m.queueOffset, 1)
        assert.are.equal("FOUND", status)
        assert.are.equal(m.commitLogOffset, util.parse_record(got:tostring()).commitLogOffset)
        got:release()
        local q = assert(st:query(m.topic, m.msgId, 32, 0, m.storeTimestamp + 1000), m.msgId)
        local hit = false
        for _, r in ipairs(util.parse_all(q:tostring())) do
            hit = hit or r.commitLogOffset == m.commitLogOffset
        end
        assert.is_true(hit, "query " .. m.msgId)
        q:release()
    end
end

fx_describe("RocketMQ 4.9.8 fixture stores", function()
    local clean_manifest = util.manifest("clean")
    local crashed_manifest = util.manifest("crashed")

    it("parses every record of clean/ as MANIFEST.jsonl describes it", function()
        local recs, last_end = util.scan_commitlog(util.fixture_dir("clean") .. "/commitlog", 1048576)
        assert.are.equal(200, #recs)
        assert.are.equal(#clean_manifest, #recs)
        assert.are.equal(1222422, last_end)
        for i, m in ipairs(clean_manifest) do
            check_record(m, recs[i])
        end
        -- seq 55: TAGS="" was sent; the record has no TAGS property.
        for _, m in ipairs(clean_manifest) do
            if m.seq == 55 then
                assert.are.equal(0, m.tagsCode)
            end
        end
        check_cq(util.fixture_dir("clean"), clean_manifest)
        local idx = util.ls(util.fixture_dir("clean") .. "/index")
        assert.are.equal(1, #idx)
        assert.are.equal(419, check_index(util.fixture_dir("clean") .. "/index/" .. idx[1],
                                          clean_manifest, 500))
    end)

    it("parses every record of crashed/ as MANIFEST-crashed.jsonl describes it", function()
        local recs, last_end = util.scan_commitlog(util.fixture_dir("crashed") .. "/commitlog", 1048576)
        assert.are.equal(624, #recs)
        assert.are.equal(532889, last_end)
        for i, m in ipairs(crashed_manifest) do
            check_record(m, recs[i])
        end
        check_cq(util.fixture_dir("crashed"), crashed_manifest)
        local idx = util.ls(util.fixture_dir("crashed") .. "/index")
        assert.are.equal(1249, check_index(util.fixture_dir("crashed") .. "/index/" .. idx[1],
                                           crashed_manifest, 500))
    end)

    it("reads the fastjson config files (bare numeric keys)", function()
        local configfile = require("rmq.configfile")
        local cdir = util.fixture_dir("clean") .. "/config/"
        local t = assert(configfile.read(cdir .. "consumerOffset.json"))
        assert.are.equal(25, t.offsetTable["FxStoreA@FxStoreGroup"]["0"])
        assert.are.equal(5, t.offsetTable["FxStoreB@FxStorePartialGroup"]["3"])
        for _, name in ipairs({ "topics.json", "subscriptionGroup.json", "delayOffset.json" }) do
            assert.is_table(configfile.read(cdir .. name), name)
        end
        t = assert(configfile.read(util.fixture_dir("crashed") .. "/config/consumerOffset.json"))
        assert.are.equal(284, t.offsetTable["FxCrash@FxCrashGroup"]["1"])
    end)

    it("opens a copy of clean/ with nothing to repair", function()
        local dir = util.copy_fixture("clean")
        finally(function() util.rmrf(dir) end)
        local st = assert(store.open(dir, util.FIXTURE_OPTS))
        local stats = st:stats()
        assert.is_false(stats.recoveredAbnormally)
        assert.is_false(stats.tornTail)
        assert.are.equal(1222422, st:max_phy())
        assert.are.equal(0, st:min_phy())
        local maxes = { ["FxStoreA"] = { 25, 25, 25, 25 }, ["FxStoreB"] = { 23, 23, 32, 22 } }
        for topic, list in pairs(maxes) do
            for q, n in ipairs(list) do
                assert.are.equal(n, st:max_offset(topic, q - 1))
                assert.are.equal(0, st:min_offset(topic, q - 1))
            end
        end
        check_served(st, clean_manifest)
        -- The batch (seq 150-159): consecutive queue offsets 12-21.
        local status, rec = st:get("FxStoreB", 2, 12, 32)
        assert.are.equal("FOUND", status)
        local recs = util.parse_all(rec:tostring())
        for i = 1, 10 do
            assert.are.equal(11 + i, recs[i].queueOffset)
            assert.are.equal("TagBatch", recs[i].properties.TAGS)
            -- Batch records keep WAIT (the batch-level properties).
            assert.are.equal("true", recs[i].properties.WAIT)
        end
        -- Writing continues after the last record, in the second file.
        local s, phy, qoff = st:put({ topic = "FxStoreA", queueId = 0, body = "after",
                                      bornHost = "127.0.0.1:1" })
        assert.are.equal("PUT_OK", s)
        assert.are.equal(1222422, phy)
        assert.are.equal(25, qoff)
        st:close()
        -- And a clean reopen trusts the checkpoint.
        st = assert(store.open(dir, util.FIXTURE_OPTS))
        assert.is_false(st:stats().recoveredAbnormally)
        assert.are.equal(-1, st:stats().recoveredFrom)
        assert.are.equal(26, st:max_offset("FxStoreA", 0))
        assert.are.equal("after", util.parse_record(st:message(1222422):tostring()).body)
        st:close()
    end)

    it("recovers a copy of crashed/", function()
        local dir = util.copy_fixture("crashed")
        finally(function() util.rmrf(dir) end)
        local st = assert(store.open(dir, util.FIXTURE_OPTS))
        local stats = st:stats()
        assert.is_true(stats.recoveredAbnormally)
        assert.are.equal(0, stats.recoveredFrom)
        assert.are.equal(624, stats.recoveredRecords)
        assert.are.equal(532889, st:max_phy())
        assert.are.equal(312, st:max_offset("FxCrash", 0))
        assert.are.equal(312, st:max_offset("FxCrash", 1))
        -- The pre-allocated, unused second file is past the end: deleted.
        assert.are.equal(1, stats.commitlogFiles)
        local n = 0
        for q = 0, 1 do
            local off = 0
            while true do
                local status, rec, nxt = st:get("FxCrash", q, off, 32)
                if status ~= "FOUND" then
                    break
                end
                n = n + #rec
                rec:release()
                off = nxt
            end
        end
        assert.are.equal(624, n)
        -- The index was rebuilt from the commit log (its file was newer
        -- than the checkpoint's indexMsgTimestamp 0).
        check_served(st, crashed_manifest)
        for _, m in ipairs(crashed_manifest) do
            local q = assert(st:query("FxCrash", m.keys, 32, 0, m.storeTimestamp + 1000), m.keys)
            q:release()
        end
        st:close()
        -- Reopened: clean now, same numbers.
        st = assert(store.open(dir, util.FIXTURE_OPTS))
        assert.is_false(st:stats().recoveredAbnormally)
        assert.are.equal(532889, st:max_phy())
        assert.are.equal(312, st:max_offset("FxCrash", 1))
        st:close()
    end)
end)
