-- rmq admin's pure parts: mqadmin's option parsing, the fastjson reader
-- (bean keys, bare numeric keys), the message id decoder, the tables.
local admin = require("rmq.admin")
local remote = require("rmq.admin.remote")
local broker = require("rmq.admin.broker")

describe("rmq admin options", function()
    local cmd = { name = "x", options = {
        { "t", "topic", arg = true, required = true },
        { "l", "list" },
        { "c", "clusterName", arg = true },
    } }

    it("reads -t V, -tV, --topic V, --topic=V, -topic V and flags", function()
        for _, argv in ipairs({ { "-t", "T" }, { "-tT" }, { "--topic", "T" }, { "--topic=T" }, { "-topic", "T" } }) do
            local o = assert(admin.parse(cmd, argv))
            assert.equal("T", o.topic)
        end
        local o, args = admin.parse(cmd, { "-l", "-t", " T ", "extra", "-n", "a:1;b:2", "--json" })
        assert.is_true(o.list)
        assert.equal("T", o.topic)   -- trimmed, as mqadmin's getOptionValue().trim()
        assert.equal("a:1;b:2", o.namesrvAddr)
        assert.is_true(o.json)
        assert.same({ "extra" }, args)
    end)

    it("refuses what mqadmin refuses, as usage errors", function()
        local _, err = admin.parse(cmd, { "-t", "T", "-z" })
        assert.equal(2, err.exit)
        assert.matches("Unrecognized option: %-z", tostring(err))
        _, err = admin.parse(cmd, {})
        assert.equal("Missing required option: t", tostring(err))
        _, err = admin.parse(cmd, { "-t" })
        assert.matches("Missing argument for option: t", tostring(err))
        _, err = admin.parse(cmd, { "-t", "-l" })   -- an option is not a value
        assert.matches("Missing argument for option: t", tostring(err))
        _, err = admin.parse(cmd, { "-t", "T", "--list=yes" })
        assert.matches("takes no value", tostring(err))
        -- -h needs no required option
        local o = assert(admin.parse(cmd, { "-h" }))
        assert.is_true(o.help)
    end)

    it("names the server and the response code in one line", function()
        local e = remote.refused("127.0.0.1:9876", 17, " No topic route\ninfo ", 105)
        assert.equal("127.0.0.1:9876 refused GET_ROUTEINFO_BY_TOPIC: TOPIC_NOT_EXIST (code 17): No topic route info",
            tostring(e))
        assert.equal(1, e.exit)
        assert.equal(3, remote.unreachable("h:1", "timeout").exit)
    end)
end)

describe("rmq admin fastjson reader", function()
    it("reads maps keyed by beans as entries, bare numeric keys as strings", function()
        local t = remote.decode_fastjson('{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:'
            .. '{"maxOffset":5,"minOffset":0},{"brokerName":"a","queueId":0,"topic":"T"}:{"maxOffset":7}},'
            .. '"brokerAddrs":{0:"h:1",1:"h:2"},"s":"a\\"b\\u00e9\\ud83d\\ude00","n":[1,2.5,-3,1e3,true]}')
        local e = remote.entries(t.offsetTable)
        assert.equal(2, #e)
        assert.equal("b", e[1].key.brokerName)
        assert.equal(5, e[1].value.maxOffset)
        assert.equal(math.type(5), math.type(e[1].value.maxOffset))   -- integers stay integers
        assert.same({ ["0"] = "h:1", ["1"] = "h:2" }, t.brokerAddrs)
        assert.equal('a"bé😀', t.s)
        assert.same({ 1, 2.5, -3, 1000.0, true }, t.n)
        -- a plain map's entries too
        assert.equal(2, #remote.entries(t.brokerAddrs))
    end)

    it("refuses garbage with a one-line error, never a Lua error", function()
        for _, bad in ipairs({ '{"a":', '{"a" 1}', '[1,,2]', '"open', '{"a":tru}', ("["):rep(100) .. ("]"):rep(100) }) do
            local ok, err = pcall(remote.decode_fastjson, bad, "h:1")
            assert.is_false(ok, bad)
            assert.is_true(remote.is_error(err), bad)
            assert.matches("^h:1: unreadable JSON body", tostring(err))
        end
    end)
end)

describe("rmq admin decodeMessageId", function()
    it("reads the ip and the time since the month's start", function()
        -- 127.0.0.1, pid 0x0BE3, loader 0x164E08E1, 0x0D0E6C4F ms, counter 0
        local id = "7F0000010BE3164E08E10D0E6C4F0000"
        local now = os.time({ year = 2026, month = 12, day = 1, hour = 12, min = 0, sec = 0 }) * 1000
        local r = broker.decode_message_id(id, now)
        assert.equal("127.0.0.1", r.ip)
        -- 0x0D0E6C4F ms after Dec 1 00:00 is in the future: November's start then
        local nov = os.time({ year = 2026, month = 11, day = 1, hour = 0, min = 0, sec = 0 }) * 1000
        assert.equal(nov + 0x0D0E6C4F, r.ms)
        assert.has_error(function() broker.decode_message_id("xyz") end)
    end)
end)

describe("rmq admin tables", function()
    it("aligns columns two spaces apart, no trailing blanks", function()
        assert.equal("#A    #Broker\nlong  b\nx", admin.table({ "#A", "#Broker" }, { { "long", "b" }, { "x", "" } }))
    end)
end)
