-- codec_json_spec: the JSON header decoder's fast paths against what they
-- could get wrong.
--
-- The decoder takes the spelling clients really send (no whitespace,
-- plain or \u00XX-escaped strings copied 16 bytes at a time, one-letter
-- extFields keys, plain integers) inline and hands anything else to the
-- careful readers.  These cases sit on the seams: where a run ends, where
-- an escape starts, where the header ends, where a number stops fitting.
local codec = require "rmq.codec"

local frame = require("support.requests").frame

local function decode(hdr, body)
    return codec.decode(frame(hdr, body))
end

-- JSON text of s as fastjson writes it (the encoder's escaping).
local function quoted(s)
    return (s:gsub('[\0-\31"\\]', function(c)
        local short = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n",
            ["\r"] = "\\r", ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }
        return short[c] or ("\\u%04X"):format(c:byte())
    end))
end

-- A Java 4.9.8 SEND_MESSAGE_V2 header, as the bench and the fixtures have it.
local V2 = '{"code":310,"extFields":{"a":"FxProducerGroup","b":"FxTopic",'
    .. '"c":"TBW102","d":"4","e":"0","f":"0","g":"1796034593124","h":"0",'
    .. '"i":"KEYS\\u0001fx-FxTopic-0\\u0002UNIQ_KEY\\u0001C0000202110C5FFD2B'
    .. '27979919620000\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA","j":"0",'
    .. '"k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA",'
    .. '"opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}'

describe("rmq.codec JSON fast paths", function()
    it("decodes the Java SEND_MESSAGE_V2 header", function()
        local t = assert(decode(V2, "body"))
        assert.are.equal(310, t.code)
        assert.are.equal(5, t.opaque)
        assert.are.equal(409, t.version)
        assert.are.equal("JAVA", t.language)
        assert.are.equal("FxProducerGroup", t.ext.a)
        assert.are.equal("KEYS\1fx-FxTopic-0\2UNIQ_KEY\1C0000202110C5FFD2B"
            .. "27979919620000\2WAIT\1true\2TAGS\1TagA", t.ext.i)
        assert.are.equal("broker-a", t.ext.n)
        assert.are.equal("body", t.body)
    end)

    it("refuses every truncation of it, body or not", function()
        for n = 0, #V2 - 1 do
            local hdr = V2:sub(1, n)
            local t, err = decode(hdr)
            assert.is_nil(t, hdr)
            assert.truthy(err:find("^JSON header: "), err)
            assert.is_nil((decode(hdr, "}")), hdr)
        end
    end)

    it("copies plain strings of every length around the 16-byte runs", function()
        for n = 0, 70 do
            local s = ("0123456789abcdefghijklmnopqrstuvwxyz"):rep(2):sub(1, n)
            for _, key in ipairs{ "k", "key", "" } do
                local t = assert(decode('{"extFields":{"' .. key .. '":"' .. s
                    .. '","z":"1"},"remark":"' .. s .. '"}'))
                assert.are.equal(s, t.ext[key])
                assert.are.equal("1", t.ext.z)
                assert.are.equal(s, t.remark)
            end
        end
    end)

    it("decodes an escape at every offset of a run", function()
        local escapes = {
            { "\\u0001", "\1" }, { "\\u0000", "\0" }, { '\\"', '"' },
            { "\\\\", "\\" }, { "\\/", "/" }, { "\\n", "\n" }, { "\\t", "\t" },
            { "\\u00e9", "é" }, { "\\u00FF", "ÿ" }, { "\\u20AC", "€" },
            { "\\uD83D\\uDE00", "\240\159\152\128" },
            { "\\uDBFF\\uDFFF", "\244\143\191\191" },
            { "\\uD800", "\239\191\189" },          -- lone high
            { "\\uDC00", "\239\191\189" },          -- lone low
            { "\\uD800\\u0041", "\239\191\189A" },  -- high, then no low
            { "\\uD83D\\uD83D\\uDE00", "\239\191\189\240\159\152\128" },
        }
        local run = ("x"):rep(40)
        for _, e in ipairs(escapes) do
            for i = 0, 40 do
                local raw = run:sub(1, i) .. e[1] .. run:sub(i + 1)
                local want = run:sub(1, i) .. e[2] .. run:sub(i + 1)
                local t = assert(decode('{"extFields":{"a":"' .. raw .. '","'
                    .. raw .. '":"v"},"remark":"' .. raw .. '"}'), raw)
                assert.are.equal(want, t.ext.a, raw)
                assert.are.equal("v", t.ext[want], raw)
                assert.are.equal(want, t.remark, raw)
            end
            -- Escapes back to back, and alone.
            local t = assert(decode('{"extFields":{"a":"' .. e[1]:rep(5)
                .. '"},"remark":"' .. e[1] .. '"}'))
            assert.are.equal(e[2]:rep(5), t.ext.a)
            assert.are.equal(e[2], t.remark)
        end
    end)

    it("keeps NUL bytes, raw control characters and UTF-8 as they are", function()
        local t = assert(decode('{"extFields":{"\\u0000":"a\\u0000b","c":"x\1y\31z",'
            .. '"é":"€"},"remark":"\\u0000"}'))
        assert.are.equal("a\0b", t.ext["\0"])
        assert.are.equal("x\1y\31z", t.ext.c)
        assert.are.equal("€", t.ext["é"])
        assert.are.equal("\0", t.remark)
    end)

    it("round-trips what the encoder escapes", function()
        local s = ""
        for b = 0, 255 do
            s = s .. string.char(b)
        end
        local f = codec.encode{ code = 1, remark = s, ext = { [s] = s, k = s } }
        local t = assert(codec.decode(f))
        assert.are.equal(s, t.remark)
        assert.are.equal(s, t.ext[s])
        assert.are.equal(s, t.ext.k)
        assert.truthy(f:find('"remark":"' .. quoted(s) .. '"', 1, true))
    end)

    it("refuses bad strings wherever they fall in a run", function()
        local bad = { "\\x", "\\u12G4", "\\u12", "\\", "\\uD83D\\uZE00" }
        for _, b in ipairs(bad) do
            for i = 0, 20 do
                local s = ("y"):rep(i) .. b
                for _, hdr in ipairs{
                    '{"extFields":{"a":"' .. s .. '"}}',
                    '{"extFields":{"' .. s .. '":"v"}}',
                    '{"remark":"' .. s .. '"}',
                    '{"extFields":{"a":"' .. s,
                    '{"remark":"' .. s,
                } do
                    local t, err = decode(hdr)
                    assert.is_nil(t, hdr)
                    assert.truthy(err:find("^JSON header: "), err)
                end
            end
        end
        local _, err = decode('{"remark":"abc\\x"}')
        assert.are.equal("JSON header: bad escape at offset 14", err)
        _, err = decode('{"remark":"abc\\u00G1"}')
        assert.are.equal("JSON header: bad \\u escape at offset 14", err)
        _, err = decode('{"extFields":{"a":"abc')
        assert.are.equal("JSON header: unterminated string at offset 22", err)
    end)

    it("refuses a string that ends the header", function()
        for _, hdr in ipairs{ '{"remark":"abc"', '{"extFields":{"a":"b"',
            '{"extFields":{"a"', '{"code"', '"abc"' } do
            local t, err = decode(hdr)
            assert.is_nil(t, hdr)
            assert.truthy(err:find("^JSON header: "), err)
        end
        local _, err = decode('{"remark":"abc"')
        assert.are.equal("JSON header: expected ',' or '}' at offset 15", err)
        _, err = decode('{"extFields":{"a":"b"')
        assert.are.equal("JSON header: expected ',' or '}' in extFields at offset 21",
            err)
    end)

    it("reads integers up to the int32 limits and no further", function()
        local ok = {
            { "0", 0 }, { "-0", 0 }, { "7", 7 }, { "-7", -7 },
            { "999999999", 999999999 }, { "1000000000", 1000000000 },
            { "2147483647", 2147483647 }, { "-2147483648", -2147483648 },
            { "0000000000", nil }, { "2147483648", nil }, { "-2147483649", nil },
            { "4294967296", nil }, { "9999999999", nil }, { "12345678901", nil },
            { "99999999999999999999", nil }, { "01", nil }, { "-01", nil },
            { "1.0", nil }, { "1e0", nil }, { "1E0", nil }, { "-", nil },
            { "--1", nil }, { "+1", nil }, { '"1"', nil }, { "true", nil },
        }
        for _, c in ipairs(ok) do
            for _, key in ipairs{ "code", "flag", "opaque", "version" } do
                for _, tail in ipairs{ "}", ',"x":1}', " }" } do
                    local hdr = '{"' .. key .. '":' .. c[1] .. tail
                    local t, err = decode(hdr)
                    if c[2] then
                        assert.are.equal(c[2], assert(t, hdr)[key], hdr)
                    else
                        assert.is_nil(t, hdr)
                        assert.truthy(err:find("^JSON header: "), err)
                    end
                end
            end
        end
        local _, err = decode('{"code":2147483648}')
        assert.are.equal("JSON header: code is not a 32-bit integer at offset 8", err)
        _, err = decode('{"opaque":1.5}')
        assert.are.equal("JSON header: opaque is not a 32-bit integer at offset 10", err)
        _, err = decode('{"version":"409"}')
        assert.are.equal("JSON header: version is not a number at offset 11", err)
        -- A number running to the end of the header.
        assert.is_nil((decode('{"code":310')))
    end)

    it("takes whitespace between any two tokens", function()
        local tokens = { "{", '"code"', ":", "310", ",", '"extFields"', ":", "{",
            '"a"', ":", '"b"', ",", '"n"', ":", "12", ",", '"z"', ":", "null",
            "}", ",", '"language"', ":", '"CPP"', ",", '"remark"', ":", '""',
            ",", '"version"', ":", "333", "}" }
        local want = { code = 310, flag = 0, opaque = 0, version = 333,
            language = "CPP", serialize = "JSON", remark = "",
            ext = { a = "b", n = "12" } }
        for i = 0, #tokens do
            for _, w in ipairs{ " ", "\n", "\r\n\t " } do
                local parts = {}
                for k, tok in ipairs(tokens) do
                    parts[#parts + 1] = tok
                    if k == i or i == 0 then
                        parts[#parts + 1] = w
                    end
                end
                local hdr = (i == 0 and w or "") .. table.concat(parts)
                assert.are.same(want, assert(decode(hdr), hdr), hdr)
            end
        end
        -- rocketmq-client-cpp ends its header with a newline.
        local t = assert(decode('{"code":34,"extFields":{"AccessKey":"",'
            .. '"OnsChannel":"ALIYUN"},"flag":0,"language":"CPP","opaque":2,'
            .. '"remark":"","version":333}\n'))
        assert.are.equal("CPP", t.language)
        assert.are.equal("", t.ext.AccessKey)
    end)

    it("turns booleans and numbers into text and drops nulls, in any entry", function()
        local t = assert(decode('{"extFields":{"a":true,"b":false,"c":null,'
            .. '"d":-12.5e3,"e":"s","f":null,"g":0,"h":{"x":[1,"]"]},"i":[]}}'))
        assert.are.same({ a = "true", b = "false", d = "-12.5e3", e = "s",
            g = "0", h = '{"x":[1,"]"]}', i = "[]" }, t.ext)
        t = assert(decode('{"extFields":{"a":null}}'))
        assert.are.same({}, t.ext)
        t = assert(decode('{"extFields":{"a":null,"b":"1"}}'))
        assert.are.same({ b = "1" }, t.ext)
        for _, hdr in ipairs{ '{"extFields":{"a":nul}}', '{"extFields":{"a":tru}}',
            '{"extFields":{"a":"1","b"}}', '{"extFields":{"a":"1",}}',
            '{"extFields":{"a":"1"x}}', '{"extFields":{"a" "1"}}' } do
            assert.is_nil((decode(hdr)), hdr)
        end
    end)

    it("reads the members in any order", function()
        local members = { '"code":7', '"extFields":{"k":"v","kk":"vv"}',
            '"flag":1', '"language":"GO"', '"opaque":-9', '"remark":"r"',
            '"serializeTypeCurrentRPC":"JSON"', '"version":121', '"other":[1]' }
        local want = { code = 7, flag = 1, language = "GO", opaque = -9,
            remark = "r", version = 121, serialize = "JSON",
            ext = { k = "v", kk = "vv" } }
        -- Every rotation, forwards and backwards.
        for r = 0, #members - 1 do
            for _, rev in ipairs{ false, true } do
                local order = {}
                for i = 1, #members do
                    local k = (i + r - 1) % #members + 1
                    order[#order + 1] = members[rev and #members + 1 - k or k]
                end
                local hdr = "{" .. table.concat(order, ",") .. "}"
                assert.are.same(want, assert(decode(hdr), hdr), hdr)
            end
        end
    end)

    it("tells keys apart by more than their first letter", function()
        local t = assert(decode('{"c":1,"cod":2,"codes":3,"codE":4,"code ":5,'
            .. '"ext":{},"extFieldsX":{},"flags":6,"lang":"GO","remarks":"x",'
            .. '"opaqu":7,"v":8,"serializeTypeCurrentRPCs":9,"\\u0066lag":10}'))
        assert.are.same({ code = 0, flag = 10, opaque = 0, version = 0,
            language = "JAVA", serialize = "JSON" }, t)
    end)

    it("keeps the last of repeated members and entries", function()
        local t = assert(decode('{"extFields":{"a":"1","a":"2","b":"x"},'
            .. '"language":"JAVA","language":"CPP","extFields":{"a":"3"}}'))
        assert.are.same({ a = "3" }, t.ext)
        assert.are.equal("CPP", t.language)
    end)

    it("tells a one-letter key from what only looks like one", function()
        local t = assert(decode('{"extFields":{"\\\\":"a","\\"":"b","\\u0041":"c",'
            .. '"x":"d","":"e"}}'))
        assert.are.same({ ["\\"] = "a", ['"'] = "b", A = "c", x = "d", [""] = "e" },
            t.ext)
        assert.is_nil((decode('{"extFields":{""":"a"}}')))
    end)
end)
