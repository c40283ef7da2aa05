-- rmq.header (declared request headers, in C), rmq.names (the same name
-- rules in Lua, for bodies) and rmq.dispatch reading a declared header
-- before the handler: strict numbers, RocketMQ's name rules and texts,
-- refusals that name the field, and error texts fit for a reply.
local header = require("rmq.header")
local names = require("rmq.names")
local dispatch = require("rmq.dispatch")

local function read(spec, ext)
    return spec:read({ ext = ext })
end

describe("rmq.header", function()
    local spec = header.compile({
        { "queueId", "int", true },
        { "queueOffset", "long", false },
        { "perm", "int", false, min = 0, max = 15 },
        { "n", "int", false, min = 1 },
        { "b", "topic", false, as = "topic" },
        { "consumerGroup", "group", false },
        { "m", "bool", false, as = "batch" },
        { "j", "int", false, as = "reconsumeTimes", default = 0 },
        { "s", "string", false, max_len = 8 },
    })

    it("reads typed values under their declared keys", function()
        local h = assert(read(spec, { queueId = "-3", queueOffset = "9223372036854775807", perm = "+6",
                                      b = "%RETRY%G_1|x-y", consumerGroup = "CID_a-b", m = "TRUE", s = "abc" }))
        assert.equal(-3, h.queueId)
        assert.equal("integer", math.type(h.queueId))
        assert.equal(math.maxinteger, h.queueOffset)
        assert.equal(6, h.perm)
        assert.equal("%RETRY%G_1|x-y", h.topic)
        assert.is_nil(h.b)
        assert.equal("CID_a-b", h.consumerGroup)
        assert.is_true(h.batch)
        assert.equal(0, h.reconsumeTimes)   -- the default of an absent field
        assert.equal("abc", h.s)
        assert.equal(math.mininteger, assert(read(spec, { queueId = "0", queueOffset = "-9223372036854775808" })).queueOffset)
    end)

    it("reads Java's booleans: true in any case, anything else false", function()
        for v, want in pairs({ ["true"] = true, TrUe = true, ["false"] = false, ["1"] = false, ["0"] = false,
                               yes = false, [""] = false, [" true"] = false }) do
            assert.equal(want, assert(read(spec, { queueId = "1", m = v })).batch, v)
        end
        assert.is_nil(assert(read(spec, { queueId = "1" })).batch)
    end)

    it("refuses a missing required field with Java's text", function()
        local h, code, remark = read(spec, {})
        assert.is_nil(h)
        assert.equal(1, code)
        assert.equal("the custom field <queueId> is null", remark)
    end)

    it("takes integers strictly: sign and digits only, in range", function()
        for _, v in ipairs({ "2.5", "1.0", "0x1", "1e3", " 1", "1 ", "", "+", "-", "--1", "1_000", "inf", "nan",
                             "2147483648", "-2147483649", "99999999999999999999" }) do
            local h, code, remark = read(spec, { queueId = v })
            assert.is_nil(h, v)
            assert.equal(1, code)
            assert.equal(('the custom field <queueId> is not an Integer: "%s"'):format(v), remark)
        end
        assert.equal(2147483647, assert(read(spec, { queueId = "2147483647" })).queueId)
        assert.equal(-2147483648, assert(read(spec, { queueId = "-2147483648" })).queueId)
        assert.equal(7, assert(read(spec, { queueId = "007" })).queueId)
    end)

    it("refuses a long that overflows", function()
        for _, v in ipairs({ "9223372036854775808", "-9223372036854775809", "18446744073709551616", "1.5" }) do
            local _, code, remark = read(spec, { queueId = "0", queueOffset = v })
            assert.equal(1, code)
            assert.equal(('the custom field <queueOffset> is not a Long: "%s"'):format(v), remark)
        end
    end)

    it("refuses values out of the declared range, naming the field", function()
        local _, _, remark = read(spec, { queueId = "0", perm = "16" })
        assert.equal('the custom field <perm> is out of range 0..15: "16"', remark)
        _, _, remark = read(spec, { queueId = "0", perm = "-1" })
        assert.equal('the custom field <perm> is out of range 0..15: "-1"', remark)
        _, _, remark = read(spec, { queueId = "0", n = "0" })
        assert.equal('the custom field <n> must be >= 1: "0"', remark)
        _, _, remark = read(spec, { queueId = "0", s = "123456789" })
        assert.equal('the custom field <s> is longer than 8 bytes: "123456789"', remark)
    end)

    it("shows a bad value cut and with unsafe characters replaced", function()
        local _, _, remark = read(spec, { queueId = "1\0\1\"\\\n\255" .. ("9"):rep(100) })
        assert.equal('the custom field <queueId> is not an Integer: "1??????' .. ("9"):rep(57) .. '..."', remark)
        local alias = header.compile({ { "e", "int", true, as = "queueId" } })
        _, _, remark = read(alias, { e = "1.5" })
        assert.equal('the custom field <e> (queueId) is not an Integer: "1.5"', remark)
    end)

    it("applies TopicValidator's rules and texts to topics", function()
        local cases = {
            { "", names.TOPIC_BLANK }, { "  \t", names.TOPIC_BLANK },
            { "a/b", names.TOPIC_ILLEGAL }, { "../../x", names.TOPIC_ILLEGAL }, { "a b", names.TOPIC_ILLEGAL },
            { "t\0", names.TOPIC_ILLEGAL }, { "caf\195\169", names.TOPIC_ILLEGAL }, { "a.b", names.TOPIC_ILLEGAL },
            { ("t"):rep(128), names.TOPIC_LONG },
        }
        for _, c in ipairs(cases) do
            local h, code, remark = read(spec, { queueId = "0", b = c[1] })
            assert.is_nil(h, c[1])
            assert.equal(1, code)
            assert.equal(c[2], remark, c[1])
            assert.equal(c[2], header.topic(c[1]))
            assert.equal(c[2], names.topic(c[1]))
        end
        assert.truthy(read(spec, { queueId = "0", b = ("t"):rep(127) }))
        assert.is_nil(names.topic(("t"):rep(127)))
        assert.is_nil(header.topic("%DLQ%G|1_-"))
    end)

    it("applies Validators.checkGroup's rules and texts to groups", function()
        local long = ("g"):rep(256)
        for _, name in ipairs({ "", " ", "../../x", "G 1", "a/b", long, long .. "/", "g\1" }) do
            local want = names.group(name)
            assert.truthy(want, name)
            local h, code, remark = read(spec, { queueId = "0", consumerGroup = name })
            assert.is_nil(h)
            assert.equal(1, code)
            assert.equal(want, remark)
            assert.equal(want, header.group(name))
        end
        assert.equal("the specified group[../../x] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
                     names.group("../../x"))
        assert.equal("the specified group is blank", names.group(" "))
        assert.equal("the specified group is longer than group max length 255.", names.group(long))
        assert.equal("the specified group[g?] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
                     names.group("g\1"))
        assert.is_nil(names.group(("g"):rep(255)))
        assert.is_nil(header.group("CID_RMQ_SYS_TRANS"))
    end)

    it("checks every byte of a name of any length, as rmq.names does", function()
        -- The C check reads 8 or 16 bytes a step (the last step overlaps
        -- the one before it): a bad byte is found at every position of
        -- every length around those steps, and no good name is refused.
        local allowed = {}
        for c in ("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"):gmatch(".") do
            allowed[c:byte()] = true
        end
        local function check(name, good)
            local want = names.topic(name)
            assert.equal(want, header.topic(name))
            assert.equal(names.group(name), header.group(name))
            if good then
                assert.is_nil(want, name)
            else
                assert.truthy(want, name)
            end
        end
        local checked = 0
        for _, len in ipairs({ 1, 2, 3, 5, 7, 8, 9, 10, 12, 15, 16, 17, 18, 23, 24, 25, 31, 32, 33, 40 }) do
            local base = ("aZ9_-|%"):rep(6):sub(1, len)
            check(base, true)
            -- every byte where the steps start and end; a few bad bytes
            -- everywhere
            local at = {}
            for _, i in ipairs({ 1, 2, 7, 8, 9, 15, 16, 17, 32, 33, len - 8, len - 7, len - 1, len }) do
                if i >= 1 and i <= len then at[i] = true end
            end
            for i = 1, len do
                local bytes = at[i] and 256 or 0
                for b = 0, bytes - 1 do
                    check(base:sub(1, i - 1) .. string.char(b) .. base:sub(i + 1), allowed[b])
                    checked = checked + 1
                end
                for _, b in ipairs({ 0x2E, 0x20, 0x40, 0x5B, 0x60, 0x7B, 0x7F, 0x80, 0xC1, 0xFF }) do
                    check(base:sub(1, i - 1) .. string.char(b) .. base:sub(i + 1), false)
                end
            end
        end
        assert.is_true(checked > 30000, checked)
    end)

    it("refuses bad declarations when compiled", function()
        assert.has_error(function() header.compile({}) end)
        assert.has_error(function() header.compile({ { "x", "float", true } }) end)
        assert.has_error(function() header.compile({ { "x", "int", true, min = 5, max = 1 } }) end)
        assert.has_error(function() header.compile({ { "x", "int", true, max = 2 ^ 40 } }) end)
        assert.has_error(function() header.compile({ "x" }) end)
        assert.has_error(function() header.compile({ { "x", "int", true }, { "x", "long", false } }) end)
    end)

    it("reads an rmq.cmd's extFields as decoded from a frame", function()
        local codec = require("rmq.codec")
        local bench = require("rmq.bench")
        local frame = codec.encode({ code = 310, ext = { queueId = "5", b = "T", m = "true", z = "x", x = "1",
                                                        queueIdx = "7", queueI = "8" } })
        local got
        bench.dispatch(frame, 1, function(ctx, cmd)
            got = { spec:read(cmd) }
        end)
        assert.equal(5, got[1].queueId)
        assert.equal("T", got[1].topic)
        assert.is_true(got[1].batch)
    end)
end)

describe("rmq.header.scrub", function()
    it("drops the error position and any server path", function()
        assert.equal("bad argument #1 to 'put' (number has no integer representation)",
            header.scrub("/work/x/lua/rmq/broker/send.lua:123: bad argument #1 to 'put' "
                .. "(number has no integer representation)"))
        assert.equal("boom", header.scrub("...x/lua/rmq/a.lua:1: send.lua:9: boom"))
        assert.equal("boom", header.scrub('[string "conf"]:3: boom'))
        assert.equal("cannot open <path>: No such file or directory",
            header.scrub("cannot open /tmp/store/config/topics.json: No such file or directory"))
        assert.equal("in <path>: x", header.scrub("in ./lua/rmq/x.lua:12: x"))
        assert.equal("see http://rocketmq.apache.org/docs/faq/ 1..64",
            header.scrub("see http://rocketmq.apache.org/docs/faq/ 1..64"))
        assert.equal("PUT_OK: 12 ok", header.scrub("PUT_OK: 12 ok"))
    end)
end)

describe("rmq.dispatch with declared headers", function()
    local spec = header.compile({ { "n", "int", true, min = 1 } })
    local d = dispatch.new({
        [1] = { header = spec, run = function(ctx, cmd, h) return { code = 0, remark = tostring(h.n) } end },
        [2] = { header = { { "g", "group", true } }, run = function(ctx, cmd, h) return { code = 0, remark = h.g } end },
        [3] = function(ctx, cmd) return { code = 0, remark = "plain" } end,
        [4] = { run = function(ctx, cmd, h) return { code = 0, remark = tostring(h) } end },
    })
    local function cmd(code, ext)
        return { code = code, ext = ext }
    end

    it("gives the handler the typed table", function()
        assert.same({ code = 0, remark = "5" }, d(nil, cmd(1, { n = "5" })))
        assert.same({ code = 0, remark = "G1" }, d(nil, cmd(2, { g = "G1" })))
    end)

    it("answers a bad header itself, naming the field", function()
        assert.same({ code = 1, remark = "the custom field <n> is null" }, d(nil, cmd(1, {})))
        assert.same({ code = 1, remark = 'the custom field <n> must be >= 1: "0"' }, d(nil, cmd(1, { n = "0" })))
        assert.same({ code = 1, remark = names.group("../../x") }, d(nil, cmd(2, { g = "../../x" })))
    end)

    it("keeps plain handlers and header-less tables working", function()
        assert.same({ code = 0, remark = "plain" }, d(nil, cmd(3, {})))
        assert.same({ code = 0, remark = "nil" }, d(nil, cmd(4, {})))
        assert.equal(3, d(nil, cmd(99, {})).code)   -- REQUEST_CODE_NOT_SUPPORTED
    end)
end)
