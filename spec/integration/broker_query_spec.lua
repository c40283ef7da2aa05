-- VIEW_MESSAGE_BY_ID and QUERY_MESSAGE: finding a stored message by its
-- offset message id, and by key or unique key through the index.
local net = require("rmq.net")
local server = require("support.server")
local message = require("rmq.client.message")

describe("broker message queries", function()
    local s, c, sent

    setup(function()
        s = server.start({ role = "broker", workers = 2, brokerName = "broker-a",
                           storePathRootDir = server.tmpdir() .. "/store", namesrvAddr = "127.0.0.1:1" })
        c = assert(net.connect(s.addr))
        sent = {}
        for i = 1, 5 do
            local r = assert(c:call({ code = 310, ext = {
                a = "FxG", b = "FxQueryTopic", c = "TBW102", d = 4, e = i % 4, f = 0, g = 0, h = 0,
                i = ("KEYS\1order-%d\2UNIQ_KEY\1UNIQ%04d\2TAGS\1T"):format(i, i), j = 0, k = false, m = false },
                body = "query me " .. i }))
            assert.equal(0, r.code, r.remark)
            sent[i] = r.ext.msgId
        end
    end)

    teardown(function()
        c:close()
        s:stop()
    end)

    it("views a message by the physical offset inside its offset message id", function()
        local _, phy = message.decode_offset_msg_id(sent[3])
        local r = assert(c:call({ code = 33, ext = { offset = phy } }))
        assert.equal(0, r.code)
        local msgs = assert(message.decode_records(r.body))
        assert.equal(1, #msgs)
        assert.equal("query me 3", msgs[1].body)
        assert.equal(sent[3], msgs[1].offsetMsgId)
    end)

    it("answers an offset with no message with SYSTEM_ERROR", function()
        local r = assert(c:call({ code = 33, ext = { offset = 987654321 } }))
        assert.equal(1, r.code)
        assert.matches("can not find message by the offset", r.remark)
    end)

    it("queries by key and by unique key through the index", function()
        local now = require("rmq.core").now_ms()
        local function query(key, uniq)
            return assert(c:call({ code = 12, ext = { topic = "FxQueryTopic", key = key, maxNum = 32,
                beginTimestamp = 0, endTimestamp = now + 60000, _UNIQUE_KEY_QUERY = uniq and "true" or "false" } }))
        end
        local r = query("order-4")
        assert.equal(0, r.code)
        local msgs = assert(message.decode_records(r.body))
        local found = false
        for _, m in ipairs(msgs) do
            found = found or m.body == "query me 4"
        end
        assert.is_true(found)
        assert.truthy(tonumber(r.ext.indexLastUpdateTimestamp))
        r = query("UNIQ0002", true)
        assert.equal(0, r.code)
        assert.equal("query me 2", assert(message.decode_records(r.body))[1].body)
        r = query("no-such-key")
        assert.equal(22, r.code)
        assert.matches("can not find message", r.remark)
    end)
end)
