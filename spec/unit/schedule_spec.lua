-- Delayed delivery (rmq.broker.schedule) over a real store: a record in
-- SCHEDULE_TOPIC_XXXX that can never be delivered (bad REAL_TOPIC or
-- REAL_QID, a topic that is gone, a re-put the store refuses for good)
-- is moved to rmq_sys_SCHEDULE_DLQ, counted, and its level goes on to
-- the records behind it; a transient failure (store not writable) keeps
-- the record until the store takes writes again.
local store = require("rmq.store")
local util = require("support.store")
local core = require("rmq.core")
local schedule = require("rmq.broker.schedule")
local topics = require("rmq.broker.topics")
local message = require("rmq.message")
local cjson = require("cjson")

local OPTS = {
    mappedFileSizeCommitLog = 256 * 1024,
    mappedFileSizeConsumeQueue = 20 * 100,
    maxHashSlotNum = 64,
    maxIndexNum = 256,
    storeHost = "127.0.0.1:10911",
}

-- A properties string of {k, v} pairs in their order.
local function props(t)
    local flat = {}
    for _, kv in ipairs(t) do
        flat[#flat + 1] = kv[1]
        flat[#flat + 1] = kv[2]
    end
    return message.edit_properties("", flat)
end

describe("delayed delivery of records that can never be delivered", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, OPTS))
        assert(schedule.load({ storePathRootDir = dir }))   -- level offsets: none yet
        topics.ensure("FxLive", 4)
    end)

    after_each(function()
        store.errinj("disk_ratio", 0)
        st:close()
        util.rmrf(dir)
    end)

    -- A record parked for level 1, as schedule.redirect stores one.
    local function park(real_topic, real_qid, body, extra)
        local p = { { "DELAY", "1" } }
        if real_topic then p[#p + 1] = { "REAL_TOPIC", real_topic } end
        if real_qid then p[#p + 1] = { "REAL_QID", real_qid } end
        p[#p + 1] = { "TAGS", "TagS" }
        for _, kv in ipairs(extra or {}) do p[#p + 1] = kv end
        local status = st:put({ topic = schedule.TOPIC, queueId = 0, body = body, properties = props(p),
                                tagsCode = core.now_ms(), bornHost = "127.0.0.1:40000", wait = false })
        assert.equal("PUT_OK", status)
    end

    local function level_offset()
        local t = cjson.decode((schedule.encode(false):gsub("(%d+):", '"%1":')))
        return t.offsetTable["1"] or 0
    end

    local function bodies(topic, qid)
        local out = {}
        local status, recs = st:get(topic, qid, 0, 32)
        if status == "FOUND" then
            for i = 1, #recs do
                out[#out + 1] = assert(message.decode_record(recs:get(i)))
            end
            recs:release()
        elseif recs then
            recs:release()
        end
        return out
    end

    local function deliver()
        -- Level 1 with no delay: everything parked is due.
        for _ = 1, 5 do
            schedule.deliver_level(st, 1, 0, core.now_ms())
        end
    end

    it("moves each undeliverable record aside and delivers the one behind them", function()
        local before = schedule.dead_letters()
        park("%RETRY%../../x", "0", "bad topic name")   -- what a send-back for group ../../x parked
        park("FxLive", "1.5", "bad queue id")
        park(nil, "0", "no topic")
        park("FxLive", nil, "no queue id")
        park("FxGone", "0", "no such topic")
        park("FxLive", "9", "queue out of range")
        park(schedule.TOPIC, "0", "loops")
        park("FxLive", "2", "good")
        deliver()
        local live = bodies("FxLive", 2)
        assert.equal(1, #live)
        assert.equal("good", live[1].body)
        assert.is_nil(live[1].properties.DELAY)
        assert.equal(8, level_offset())
        local dlq = bodies(schedule.DLQ_TOPIC, 0)
        assert.equal(7, #dlq)
        assert.equal(7, schedule.dead_letters() - before)
        local want = { "bad topic name", "bad queue id", "no topic", "no queue id", "no such topic",
                       "queue out of range", "loops" }
        for i, rec in ipairs(dlq) do
            assert.equal(want[i], rec.body)
            local p = rec.properties
            assert.truthy(p.SCHEDULE_DLQ_REASON, want[i])
            assert.equal("1", p.SCHEDULE_DLQ_LEVEL)
            assert.is_nil(p.DELAY)
            assert.equal("TagS", p.TAGS)
        end
        assert.matches("REAL_TOPIC %RETRY%../../x: The specified topic contains illegal characters",
                       dlq[1].properties.SCHEDULE_DLQ_REASON, 1, true)
        assert.equal("topic FxGone does not exist",
                     dlq[5].properties.SCHEDULE_DLQ_REASON)
        assert.truthy(topics.get(schedule.DLQ_TOPIC), "the dead-letter topic is created on demand")
        -- A later record on the level is delivered too.
        park("FxLive", "3", "later")
        deliver()
        assert.equal("later", bodies("FxLive", 3)[1].body)
        assert.equal(9, level_offset())
    end)

    it("moves aside a record whose re-put the store refuses for good", function()
        -- At the properties limit as parked; delivered (DELAY dropped,
        -- WAIT=false added) it is over: PROPERTIES_SIZE_EXCEEDED.
        local head = props({ { "DELAY", "1" }, { "REAL_TOPIC", "FxLive" }, { "REAL_QID", "0" },
                             { "TAGS", "TagS" } }) .. "\2" .. "PAD\1"
        local pad = ("p"):rep(32767 - #head)
        park("FxLive", "0", "too big", { { "PAD", pad } })
        park("FxLive", "0", "fine")
        deliver()
        local live = bodies("FxLive", 0)
        assert.equal(1, #live)
        assert.equal("fine", live[1].body)
        local dlq = bodies(schedule.DLQ_TOPIC, 0)
        assert.equal("too big", dlq[#dlq].body)
        assert.matches("PROPERTIES_SIZE_EXCEEDED",
                       dlq[#dlq].properties.SCHEDULE_DLQ_REASON, 1, true)
        assert.equal(2, level_offset())
    end)

    it("keeps a record through a transient failure and delivers it once the store takes writes", function()
        park("FxLive", "1", "patient")
        store.errinj("disk_ratio", 95)
        st:delete_expired({ reservedMs = 1 << 40 })   -- the disk check: read-only now
        local again = schedule.deliver_level(st, 1, 0, core.now_ms())
        assert.is_true(again > core.now_ms() + schedule.TICK)   -- retried later, not skipped
        assert.equal(0, level_offset())
        assert.equal(0, #bodies("FxLive", 1))
        store.errinj("disk_ratio", 50)
        assert.is_true(st:check_writable())
        deliver()
        assert.equal("patient", bodies("FxLive", 1)[1].body)
        assert.equal(1, level_offset())
    end)
end)
