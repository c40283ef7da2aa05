-- A record in SCHEDULE_TOPIC_XXXX that can never be delivered (what a
-- send-back for group "../../x" parked before group names were checked:
-- REAL_TOPIC %RETRY%../../x) no longer blocks its delay level, across
-- restarts: it goes to rmq_sys_SCHEDULE_DLQ once, is counted in
-- GET_BROKER_RUNTIME_INFO, and later delayed messages on level 1 are
-- delivered, before and after a restart.
local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local store = require("rmq.store")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")

local CL, CQ = 1024 * 1024, 20 * 1000

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function send_delayed(addr, topic, body)
    return call(addr, rq.send({ group = "FxDelayProducer", topic = topic, props = "DELAY\0011\2TAGS\1TagL",
                                body = body }))
end

local function pull(addr, topic, qid, offset)
    return call(addr, rq.pull({ group = "FxDelayReader", topic = topic, qid = qid, offset = offset }))
end

local function max_offset(addr, topic)
    local r = call(addr, { code = 30, ext = { topic = topic, queueId = "0" } })
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.offset)
end

local function runtime(addr)
    return cjson.decode(call(addr, { code = 28 }).body).table
end

-- The body of the message at topic/0@offset once delivered, or nil.
local function delivered(addr, topic, offset)
    return server.eventually(function()
        local r = pull(addr, topic, 0, offset)
        if r.code == 0 then
            return message.decode_records(r.body)[1].body
        end
        return nil
    end, 20000)
end

describe("delayed delivery past a record that can never be delivered", function()
    it("moves it aside once and keeps delivering level 1, across a restart", function()
        local dir = server.tmpdir() .. "/store"
        -- The record as an old broker parked it: level 1, due long ago.
        local st = assert(store.open(dir, { mappedFileSizeCommitLog = CL, mappedFileSizeConsumeQueue = CQ,
                                            storeHost = "127.0.0.1:10911" }))
        local status = st:put({
            topic = "SCHEDULE_TOPIC_XXXX", queueId = 0, body = "stuck",
            properties = "DELAY\0011\2REAL_TOPIC\1%RETRY%../../x\2REAL_QID\0010\2RETRY_TOPIC\1FxOld",
            tagsCode = core.now_ms(), bornHost = "127.0.0.1:40000", wait = false,
        })
        assert.equal("PUT_OK", status)
        st:close()

        local conf = {
            role = "broker", workers = 2, brokerName = "broker-a", storePathRootDir = dir,
            mappedFileSizeCommitLog = CL, mappedFileSizeConsumeQueue = CQ,
            namesrvAddr = "127.0.0.1:1", flushDelayOffsetInterval = 500,
        }
        local s = server.start(conf)
        assert.equal(0, send_delayed(s.addr, "FxAfterStuck", "first").code)
        assert.equal("first", delivered(s.addr, "FxAfterStuck", 0), "level 1 is blocked")
        assert.equal(1, max_offset(s.addr, "rmq_sys_SCHEDULE_DLQ"))
        assert.equal("1", runtime(s.addr).scheduleDeadLetters)
        local r = pull(s.addr, "rmq_sys_SCHEDULE_DLQ", 0, 0)
        assert.equal(0, r.code)
        local m = message.decode_records(r.body)[1]
        assert.equal("stuck", m.body)
        assert.equal("%RETRY%../../x", m.properties.REAL_TOPIC)
        assert.equal("1", m.properties.SCHEDULE_DLQ_LEVEL)
        assert.matches("illegal characters", m.properties.SCHEDULE_DLQ_REASON, 1, true)
        assert.is_nil(m.properties.DELAY)
        assert.truthy(s:log():find("can never be delivered", 1, true))
        assert.equal(0, s:stop())

        -- After a restart the level goes on from where it was: the bad
        -- record is not met again, new delayed messages arrive.
        s = server.start(conf)
        assert.equal(0, send_delayed(s.addr, "FxAfterStuck", "second").code)
        assert.equal("second", delivered(s.addr, "FxAfterStuck", 1), "level 1 is blocked after the restart")
        assert.equal(1, max_offset(s.addr, "rmq_sys_SCHEDULE_DLQ"))
        assert.equal("0", runtime(s.addr).scheduleDeadLetters)
        assert.equal(0, s:stop())
    end)
end)
