-- The consume side's pure pieces, without processes: heartbeat enum
-- names, stored-record decoding and properties, the
-- fastjson text of consumerOffset.json / delayOffset.json, enum ordinals.
local offsets = require("rmq.broker.offsets")
local schedule = require("rmq.broker.schedule")
local clients = require("rmq.broker.clients")
local message = require("rmq.message")

describe("broker consume logic", function()
    -- The TAG rules themselves are C's (spec/c/test_heartbeat.c).
    it("names the heartbeat enums of every client", function()
        assert.equal("CONSUME_PASSIVELY", clients.enum("consumeType", 1))
        assert.equal("CLUSTERING", clients.enum("messageModel", "1"))
        assert.equal("CONSUME_FROM_FIRST_OFFSET", clients.enum("consumeFromWhere", 4))
        assert.equal("CONSUME_FROM_TIMESTAMP", clients.enum("consumeFromWhere", "CONSUME_FROM_TIMESTAMP"))
        assert.is_nil(clients.enum("consumeType", 7))
    end)

    it("decodes a stored record and edits its properties in place", function()
        local props = "KEYS\1k1\2TAGS\1TagA\2UNIQ_KEY\1ABC"
        local body = "\0\1body"
        local topic = "FxT"
        local rec = string.pack(">i4i4i4i4i4i8i8i4i8BBBBi4i8BBBBi4i4i8s4s1s2",
            91 + #body + #topic + #props, -626843481, 0, 3, 7, 42, 4096, 0,
            1700000000000, 10, 0, 0, 1, 5555, 1700000000001, 127, 0, 0, 1, 10911, 2, 0,
            body, topic, props)
        local r = assert(message.decode_record(rec))
        assert.equal(3, r.queueId)
        assert.equal(7, r.flag)
        assert.equal(42, r.queueOffset)
        assert.equal(4096, r.commitLogOffset)
        assert.equal("10.0.0.1:5555", r.bornHost)
        assert.equal("127.0.0.1:10911", r.storeHost)
        assert.equal(2, r.reconsumeTimes)
        assert.equal(body, r.body)
        assert.equal(topic, r.topic)
        assert.equal("7F00000100002A9F0000000000001000", r.offsetMsgId)
        assert.equal("TagA", r.properties.TAGS)
        assert.equal("TAGS\1TagB\2UNIQ_KEY\1ABC\2RETRY_TOPIC\1FxT", message.edit_properties(r.propertiesString,
            { "TAGS", "TagB", "RETRY_TOPIC", "FxT", "KEYS", false }))
        assert.is_nil(message.decode_record("short"))
    end)

    it("writes consumerOffset.json and delayOffset.json as fastjson does", function()
        local t = { ["T@g"] = { [0] = 5, [1] = 7 }, ["%RETRY%g@g"] = { [0] = 0 } }
        assert.equal('{\n\t"offsetTable":{\n\t\t"%RETRY%g@g":{0:0\n\t\t},\n\t\t"T@g":{0:5,1:7\n\t\t}\n\t}\n}',
                     offsets.encode_pretty(t))
        assert.equal('{"offsetTable":{"%RETRY%g@g":{0:0},"T@g":{0:5,1:7}}}', offsets.encode(t))
        assert.equal('{\n\t"offsetTable":{}\n}', offsets.encode_pretty({}))
        -- and reads them back (rmq.configfile / rmq.fastjson).
        local doc = require("rmq.fastjson").decode(offsets.encode_pretty(t))
        assert.equal(7, doc.offsetTable["T@g"]["1"])
        assert.same({ 1000, 5000, 60000, 7200000, 86400000 },
                    schedule.levels({ messageDelayLevel = "1s 5s 1m 2h 1d" }))
    end)

    it("redirects a delayed put to SCHEDULE_TOPIC_XXXX as the commit log does", function()
        local conf = { messageDelayLevel = "1s 5s 10s" }
        local before = require("rmq.core").now_ms()
        local msg = schedule.redirect(conf, { topic = "%RETRY%g", queueId = 0, body = "b",
                                              properties = "TAGS\1A\2DELAY\0013", tags = "A" }, 7)
        assert.equal("SCHEDULE_TOPIC_XXXX", msg.topic)
        assert.equal(2, msg.queueId)  -- level clamped to the last (3)
        assert.equal("TAGS\1A\2DELAY\0013\2REAL_TOPIC\1%RETRY%g\2REAL_QID\0010", msg.properties)
        assert.is_nil(msg.tags)
        assert.is_true(msg.tagsCode >= before + 10000 and msg.tagsCode <= before + 11000)
    end)
end)
