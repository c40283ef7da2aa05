-- END_TRANSACTION names a half message by its commit log offset; the
-- store reads a record at any offset whose bytes look like one, so a
-- producer can plant a "half message" inside an ordinary message's body.
-- The broker must commit only what its half queue holds at
-- tranStateTableOffset, and only into a queue that exists.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")

local HALF = "RMQ_SYS_TRANS_HALF_TOPIC"

local function call(addr, cmd) return assert(net.call(addr, cmd, 10000)) end

local function start(dir)
    return server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
        brokerName = "b-forge", storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
        mappedFileSizeCommitLog = 1024 * 1024, mappedFileSizeConsumeQueue = 20000,
        transactionCheckInterval = 60000 })
end

-- A commit log record (protocol.md 5.1) of the half topic whose
-- properties send a commit to topic@qid, claiming to be at phy.
local function forged(phy, topic, qid)
    local props = "PGROUP\1G\2REAL_TOPIC\1" .. topic .. "\2REAL_QID\1" .. qid .. "\2UNIQ_KEY\1FORGED\2WAIT\1false"
    local body = "evil"
    local rest = string.pack(">I4I4i4i4i8i8i4i8", 0xDAA320A7, 0, 0, 0, 999999, phy, 0, core.now_ms())
        .. string.rep("\0", 8) .. string.pack(">i8", core.now_ms()) .. string.rep("\0", 8)
        .. string.pack(">i4i8i4", 0, 0, #body) .. body .. string.pack(">B", #HALF) .. HALF
        .. string.pack(">I2", #props) .. props
    return string.pack(">i4", 4 + #rest) .. rest
end

local function send(addr, topic, body, sysflag, props)
    local r = call(addr, rq.send({ group = "G", topic = topic, sysflag = sysflag, props = props, body = body }))
    assert.equal(0, r.code, r.remark)
    local _, phy = message.decode_offset_msg_id(r.ext.msgId)
    return r, phy
end

local function max_offset(addr, topic, qid)
    local r = call(addr, { code = 30, ext = { topic = topic, queueId = tostring(qid) } })
    return r.code == 0 and tonumber(r.ext.offset) or 0
end

describe("END_TRANSACTION and a forged half message", function()
    local s, dir
    before_each(function() dir = server.tmpdir() end)
    after_each(function()
        if s then s:stop() end
        s = nil
    end)

    it("refuses a half record hidden in a message body and commits nothing", function()
        s = start(dir)
        local addr = s.broker_addr
        -- A real topic with 4 queues, so only the forgery decides.
        send(addr, "FxForgeTarget", "seed", "0", "WAIT\1true")
        local probe = forged(0, "FxForgeTarget", "1")
        local _, p1 = send(addr, "FxForgeCarrier", probe, "0", "WAIT\1true")
        local _, p2 = send(addr, "FxForgeCarrier", probe, "0", "WAIT\1true")
        local body_pos = p2 + (p2 - p1) + 88   -- the next record's body
        local _, p3 = send(addr, "FxForgeCarrier", forged(body_pos, "FxForgeTarget", "1"), "0", "WAIT\1true")
        assert.equal(p2 + (p2 - p1), p3)
        -- The forgery is readable as a record at body_pos ...
        local raw = call(addr, { code = 33, ext = { offset = tostring(body_pos) } })
        assert.equal(0, raw.code, raw.remark)
        local before = max_offset(addr, "FxForgeTarget", 1)
        local r = call(addr, { code = 37, ext = { producerGroup = "G", tranStateTableOffset = "999999",
            commitLogOffset = tostring(body_pos), commitOrRollback = "8", fromTransactionCheck = "false",
            msgId = "FORGED" } })
        -- ... but the half queue holds no such unit.
        assert.are_not.equal(0, r.code)
        assert.matches("Find prepared transaction message failed", r.remark, 1, true)
        assert.equal(before, max_offset(addr, "FxForgeTarget", 1))
        -- And with the offset of the half queue's real unit 0 (none yet).
        r = call(addr, { code = 37, ext = { producerGroup = "G", tranStateTableOffset = "0",
            commitLogOffset = tostring(body_pos), commitOrRollback = "8", msgId = "FORGED" } })
        assert.are_not.equal(0, r.code)
        assert.equal(before, max_offset(addr, "FxForgeTarget", 1))
        assert.equal(0, call(addr, { code = 30, ext = { topic = "FxForgeTarget", queueId = "0" } }).code)
    end)

    it("discards a real half message whose topic is gone instead of committing it", function()
        s = start(dir)
        local addr = s.broker_addr
        local U = "CCCC0000000000000000000000000001"
        local r, phy = send(addr, "FxForgeGone", "h", "4",
            "TRAN_MSG\1true\2PGROUP\1G\2UNIQ_KEY\1" .. U .. "\2WAIT\1true")
        local qid = tonumber(r.ext.queueId)
        local del = call(addr, { code = 215, ext = { topic = "FxForgeGone" } })
        assert.equal(0, del.code, del.remark)
        local e = call(addr, { code = 37, ext = { producerGroup = "G", tranStateTableOffset = r.ext.queueOffset,
            commitLogOffset = tostring(phy), commitOrRollback = "8", msgId = U } })
        assert.are_not.equal(0, e.code)
        assert.matches("does not exist", e.remark, 1, true)
        assert.equal(0, max_offset(addr, "FxForgeGone", qid))
        -- Discarded: an op message records it, and a second try is refused.
        assert.equal(1, max_offset(addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0))
        e = call(addr, { code = 37, ext = { producerGroup = "G", tranStateTableOffset = r.ext.queueOffset,
            commitLogOffset = tostring(phy), commitOrRollback = "8", msgId = U } })
        assert.are_not.equal(0, e.code)
        assert.matches("already decided", e.remark, 1, true)
    end)
end)
