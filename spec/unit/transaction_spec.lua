-- The check service's record handling (rmq.broker.transaction) over a
-- real store: the fixed fields it reads without decoding a record agree
-- with the full decoder for IPv4 and IPv6 hosts; the check request's
-- body is the half record with the real topic and queue; a check pass
-- passes decided half messages, stops at young ones, and keeps the op
-- offset at the first op whose half message it has not passed.
local store = require("rmq.store")
local util = require("support.store")
local core = require("rmq.core")
local net = require("rmq.net")
local message = require("rmq.message")
local offsets = require("rmq.broker.offsets")
local transaction = require("rmq.broker.transaction")

local OPTS = { mappedFileSizeCommitLog = 1024 * 1024, mappedFileSizeConsumeQueue = 20 * 1000,
               storeHost = "127.0.0.1:10911" }

local function raw_at(st, phy)
    local recs = assert(st:message(phy))
    local raw = recs:get(1)
    recs:release()
    return raw
end

describe("transaction check records", function()
    local dir, st

    before_each(function()
        dir = util.tmpdir()
        st = assert(store.open(dir, OPTS))
    end)

    after_each(function()
        st:close()
    end)

    it("reads queue offset, commit log offset and body as the decoder does", function()
        for _, born in ipairs({ "127.0.0.1:4000", "[::1]:4000" }) do
            for n = 1, 3 do
                local status, phy = st:put({ topic = "FxHead", body = ("body-%d"):format(n), bornHost = born,
                                             properties = "TAGS\1a", tags = "a", wait = false })
                assert.equal("PUT_OK", status)
                local raw = raw_at(st, phy)
                local rec = assert(message.decode_record(raw))
                local qoff, p, body = transaction.head(raw)
                assert.equal(rec.queueOffset, qoff)
                assert.equal(rec.commitLogOffset, p)
                assert.equal(rec.body, body)
            end
        end
        assert.is_nil(transaction.head("short"))
    end)

    it("builds the check body with the real topic and queue", function()
        local props = message.edit_properties("", { "TAGS", "t", "REAL_TOPIC", "FxRealTopic", "REAL_QID", "3",
                                                    "PGROUP", "G", "UNIQ_KEY", "U1" })
        local status, phy = st:put({ topic = transaction.HALF_TOPIC, body = "payload", properties = props,
                                     tags = "t", wait = false })
        assert.equal("PUT_OK", status)
        local raw = raw_at(st, phy)
        local rec = assert(message.decode_record(raw))
        local out = assert(message.decode_record(transaction.check_body(raw, rec, "FxRealTopic", 3)))
        assert.equal("FxRealTopic", out.topic)
        assert.equal(3, out.queueId)
        assert.equal("payload", out.body)
        assert.equal(rec.commitLogOffset, out.commitLogOffset)
        assert.equal(rec.queueOffset, out.queueOffset)
        assert.equal(props, out.propertiesString)
        assert.equal(#transaction.check_body(raw, rec, "FxRealTopic", 3), out.storeSize)
    end)

    local G = transaction.GROUP

    -- n half messages of group G (born at `born`, default now) and ops
    -- for the half offsets in `decided`; the check offsets at 0.
    local function queues(n, born, decided)
        local props = message.edit_properties("", { "REAL_TOPIC", "FxReal", "REAL_QID", "0", "PGROUP", "G" })
        for i = 0, n - 1 do
            assert.equal("PUT_OK", (st:put({ topic = transaction.HALF_TOPIC, body = "h" .. i, properties = props,
                                             bornTimestamp = born, wait = false })))
        end
        for _, h in ipairs(decided) do
            assert.equal("PUT_OK", (st:put({ topic = transaction.OP_TOPIC, body = tostring(h),
                                             properties = "TAGS\1d", tags = "d", wait = false })))
        end
        offsets.commit(G, transaction.HALF_TOPIC, 0, 0)
        offsets.commit(G, transaction.OP_TOPIC, 0, 0)
    end

    local function pass(conf)
        conf.transactionCheckMax, conf.fileReservedTime = 15, 72
        return net.run(function() return transaction.check_pass({ conf = conf, store = st }, core.now_ms()) end)
    end

    it("passes decided half messages and stops at a young one", function()
        -- Ops for 0, 1 and 3 (in that order); 2 is undecided and young.
        queues(5, nil, { 0, 1, 3 })
        assert.equal(0, pass({ transactionTimeOut = 60000, transactionDecidedMax = 1000 }))
        assert.equal(2, offsets.query(G, transaction.HALF_TOPIC, 0))
        -- Op 2 (half 3) is still needed: the op offset stops there.
        assert.equal(2, offsets.query(G, transaction.OP_TOPIC, 0))
        assert.equal(5, st:max_offset(transaction.HALF_TOPIC, 0))   -- nothing put back
    end)

    it("asks about nothing it may not know when its op read-ahead is full", function()
        -- Half 0: old, undecided, and its op could be past the read-ahead.
        queues(3, core.now_ms() - 60000, { 1, 2 })
        pass({ transactionTimeOut = 0, transactionDecidedMax = 1 })
        assert.equal(0, offsets.query(G, transaction.HALF_TOPIC, 0))
        assert.equal(3, st:max_offset(transaction.HALF_TOPIC, 0))   -- not put back, not asked
        -- With room for every op: half 0 is checked (put back), 1 and 2 passed.
        pass({ transactionTimeOut = 0, transactionDecidedMax = 100 })
        assert.equal(3, offsets.query(G, transaction.HALF_TOPIC, 0))
        assert.equal(4, st:max_offset(transaction.HALF_TOPIC, 0))
        assert.equal(2, offsets.query(G, transaction.OP_TOPIC, 0))
    end)
end)
