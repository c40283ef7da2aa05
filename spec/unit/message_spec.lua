-- rmq.message: the message formats the broker, the client library and
-- the specs share (Java's String.hashCode, the properties string, the
-- commit log record), through rmq.so.  Expected values are Java's: the
-- hashes are what String.hashCode() returns, the properties rules are
-- MessageDecoder.string2messageProperties'.
local message = require("rmq.message")

describe("rmq.message", function()
    it("hashes strings as Java's String.hashCode, over UTF-16 code units", function()
        for s, h in pairs({ [""] = 0, a = 97, TagA = 2598919, ["héllo"] = 103094734,
                            ["Topicé"] = -1784166982, ["日本語タグ"] = -858417240,
                            ["emoji 😀 tag"] = 773266551 }) do
            assert.equal(h, message.java_hash(s), s)
        end
        -- Malformed UTF-8 hashes as one U+FFFD per bad byte.
        assert.equal(message.java_hash("\u{FFFD}\u{FFFD}x"), message.java_hash("\xC0\xAFx"))
    end)

    it("reads properties with Java's rules", function()
        assert.same({ TAGS = "A", KEYS = "k1 k2" }, message.decode_properties("TAGS\1A\2KEYS\1k1 k2"))
        -- No key, no value, no separator: dropped; the value keeps later
        -- 0x01 bytes; the last of a repeated key wins.
        assert.same({ K = "v\1w", D = "2" },
                    message.decode_properties("\1x\2E\1\2junk\2K\1v\1w\2D\0011\2D\0012\2"))
        assert.same({}, message.decode_properties(""))
        assert.same({}, message.decode_properties(nil))
        assert.equal("2", message.property("D\0011\2D\0012", "D"))
        assert.is_nil(message.property("E\1\2F\1x", "E"))
        assert.is_nil(message.property("", "TAGS"))
    end)

    it("writes properties with sorted keys, skipping empty values", function()
        assert.equal("A\1x\2B\0012\2C\1true", message.encode_properties({ C = true, B = 2, A = "x", E = "" }))
        assert.equal("", message.encode_properties({}))
        assert.has_error(function() message.encode_properties({ [1] = "x" }) end)
    end)

    it("edits properties in place, appends new keys in edit order, removes every copy", function()
        local s = "TAGS\1A\2KEYS\1k\2UNIQ_KEY\1U\2KEYS\1k2"
        assert.equal("TAGS\1B\2UNIQ_KEY\1U\2RETRY_TOPIC\1T\2WAIT\1false",
                     message.edit_properties(s, { "RETRY_TOPIC", "T", "TAGS", "B", "KEYS", false, "WAIT", "false" }))
        -- A set replaces the first copy and drops the others.
        assert.equal("KEYS\1z\2TAGS\1A\2UNIQ_KEY\1U",
                     message.edit_properties("KEYS\1k\2TAGS\1A\2KEYS\1k2\2UNIQ_KEY\1U", { "KEYS", "z" }))
        -- Segments Java drops are dropped; untouched pairs stay as stored.
        assert.equal("B\1b\2A\1a", message.edit_properties("B\1b\2\2x\2A\1a", {}))
        assert.equal("K\1v", message.edit_properties("", { "K", "v", "GONE", false }))
        assert.has_error(function() message.edit_properties(s, { "K", "v", "K", "w" }) end)
        assert.has_error(function() message.edit_properties(s, { "", "v" }) end)
        assert.has_error(function() message.edit_properties(s, { "K" }) end)
        assert.has_error(function() message.edit_properties(s, { "K", 1 }) end)
    end)

    it("reads a send's properties in one pass, as a 4.9.8 broker stores them", function()
        local stored, tags, wait, delay = message.send_properties(
            "WAIT\1false\2TAGS\1TagA\2EMPTY\1\2DELAY\0013x\2CLUSTER\1theirs\2KEYS\1k", "DefaultCluster", false)
        assert.equal("TAGS\1TagA\2DELAY\0013x\2KEYS\1k\2CLUSTER\1DefaultCluster", stored)
        assert.equal("TagA", tags)
        assert.is_false(wait)
        assert.equal(3, delay)
        -- A batch keeps WAIT (each message's own properties follow it).
        stored, tags, wait, delay = message.send_properties("WAIT\1true", "C", true)
        assert.equal("WAIT\1true\2CLUSTER\1C", stored)
        assert.is_nil(tags)
        assert.is_true(wait)
        assert.equal(0, delay)
        assert.equal("CLUSTER\1C", (message.send_properties("", "C", false)))
    end)

    it("decodes a commit log record under the store's rules", function()
        local props = "TAGS\1TagA\2UNIQ_KEY\1ABC"
        local function record(topic, body, p, size_delta)
            return string.pack(">i4I4i4i4i4i8i8i4i8BBBBi4i8BBBBi4i4i8s4s1s2",
                91 + #body + #topic + #p + (size_delta or 0), 0xDAA320A7, 11, 3, 7, 42, 4096, 0,
                1700000000000, 10, 0, 0, 1, 5555, 1700000000001, 127, 0, 0, 1, 10911, 2, 0,
                body, topic, p)
        end
        local two = record("T", "one", props) .. record("U", "two", "")
        local r, nxt = assert(message.decode_record(two))
        assert.same({ storeSize = 91 + 3 + 1 + #props, bodyCRC = 11, queueId = 3, flag = 7, queueOffset = 42,
                      commitLogOffset = 4096, sysFlag = 0, bornTimestamp = 1700000000000,
                      bornHost = "10.0.0.1:5555", storeTimestamp = 1700000000001,
                      storeHost = "127.0.0.1:10911", reconsumeTimes = 2, preparedTransactionOffset = 0,
                      body = "one", topic = "T", propertiesString = props,
                      properties = { TAGS = "TagA", UNIQ_KEY = "ABC" },
                      offsetMsgId = "7F00000100002A9F0000000000001000" }, r)
        local r2, nxt2 = assert(message.decode_record(two, nxt))
        assert.equal("two", r2.body)
        assert.equal(#two + 1, nxt2)
        -- Not a record: a short or cut buffer, a size that does not add up.
        assert.is_nil(message.decode_record("short"))
        assert.is_nil(message.decode_record(two:sub(1, nxt - 2)))
        assert.is_nil(message.decode_record(record("T", "one", props, 1) .. "x"))
        assert.has_error(function() message.decode_record(two, #two + 2) end)
    end)

    it("formats offset message ids (protocol.md 5.6)", function()
        assert.equal("7F00000100002A9F0000000000001000", message.offset_msg_id("127.0.0.1:10911", 4096))
        assert.equal("00000000000000000000000000000001" .. "00000009" .. "000000000000000F",
                     message.offset_msg_id("[::1]:9", 15))
        assert.has_error(function() message.offset_msg_id("nohost", 1) end)
    end)
end)
