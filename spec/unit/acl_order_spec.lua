-- acl_order_spec: the order rmq.acl signs extFields in (src/acl/acl_sign.c)
-- is Java's String.compareTo, by UTF-16 code units, for every key: the
-- sort compares bytes while keys are ASCII and must hand over to the
-- UTF-16 comparison at the first byte >= 0x80.  Characters past U+FFFF
-- (surrogate pairs, 0xD800-0xDBFF first) sort before U+E000-U+FFFF in
-- Java, after them by code point or by UTF-8 bytes.  The expected order
-- here is computed in Lua, independently of the C code.
local acl = require "rmq.acl"

-- The UTF-16 code units of a UTF-8 string.
local function units(s)
    local u = {}
    for _, cp in utf8.codes(s) do
        if cp >= 0x10000 then
            cp = cp - 0x10000
            u[#u + 1] = 0xD800 + (cp >> 10)
            u[#u + 1] = 0xDC00 + (cp & 0x3FF)
        else
            u[#u + 1] = cp
        end
    end
    return u
end

-- Java's a.compareTo(b) < 0.
local function java_less(a, b)
    local x, y = units(a), units(b)
    for i = 1, math.min(#x, #y) do
        if x[i] ~= y[i] then
            return x[i] < y[i]
        end
    end
    return #x < #y
end

-- Characters on both sides of the boundaries that matter.
local ALPHABET = { "a", "b", "A", "_", "~", "\u{7F}", "\u{E9}", "\u{7FF}", "\u{800}", "\u{D7FF}",
                   "\u{E000}", "\u{FF21}", "\u{FFFF}", "\u{10000}", "\u{1F600}", "\u{10FFFF}" }

-- n distinct keys from a fixed seed: short ones with shared prefixes, so
-- that comparisons go past ASCII prefixes into every kind of character.
local function keys(n, seed)
    math.randomseed(seed)
    local set, out = {}, {}
    while #out < n do
        local parts = { ({ "k", "key", "" })[math.random(3)] }
        for _ = 1, math.random(1, 3) do
            parts[#parts + 1] = ALPHABET[math.random(#ALPHABET)]
        end
        local k = table.concat(parts)
        if k ~= "" and not set[k] then
            set[k] = true
            out[#out + 1] = k
        end
    end
    return out
end

-- The fields (value i for key i, values of the sizes given), and the
-- content Java signs: the values in key order, then the body.
local function case(ks, size)
    local fields, sorted = {}, {}
    for i, k in ipairs(ks) do
        local v = ("%d|"):format(i)
        fields[k] = v .. ("v"):rep(size and size(i) or 0)
        sorted[i] = k
    end
    table.sort(sorted, java_less)
    local values = {}
    for i, k in ipairs(sorted) do
        values[i] = fields[k]
    end
    return fields, table.concat(values)
end

describe("rmq.acl key order", function()
    it("puts a supplementary character before U+E000-U+FFFF, as UTF-16 does", function()
        -- bytes (and code points) say the other way round
        assert.is_true("\u{FF21}" < "\u{1F600}")
        assert.equal("21", acl.content({ ["\u{FF21}"] = "1", ["\u{1F600}"] = "2" }))
        assert.equal("21", acl.content({ ["\u{E000}"] = "1", ["\u{10000}"] = "2" }))
        assert.equal("21", acl.content({ ["\u{FFFF}"] = "1", ["\u{10FFFF}"] = "2" }))
        -- after an ASCII prefix the comparison is the same
        assert.equal("21", acl.content({ ["key\u{FF21}"] = "1", ["key\u{1F600}"] = "2" }))
        -- below U+E000 byte order and UTF-16 order agree
        assert.equal("12", acl.content({ ["\u{D7FF}"] = "1", ["\u{10000}"] = "2" }))
        assert.equal("12", acl.content({ ["k~"] = "1", ["k\u{E9}"] = "2" }))
        -- a prefix first
        assert.equal("12", acl.content({ ["k"] = "1", ["k\u{1F600}"] = "2" }))
        assert.equal("12", acl.content({ ["k\u{FF21}"] = "1", ["k\u{FF21}a"] = "2" }))
    end)

    it("sorts any number of keys in Java order (insertion sort and merge sort alike)", function()
        for _, n in ipairs({ 2, 3, 5, 13, 31, 32, 33, 40, 64, 100 }) do
            for seed = 1, 5 do
                local fields, want = case(keys(n, n * 100 + seed))
                assert.equal(want, acl.content(fields), ("%d keys, seed %d"):format(n, seed))
            end
        end
    end)

    it("signs that content, whatever the sizes of the values and the body", function()
        for _, n in ipairs({ 1, 13, 40 }) do
            for _, size in ipairs({ function() return 0 end, function(i) return i * 37 end,
                                    function(i) return i == 1 and 5000 or 900 end }) do
                for _, blen in ipairs({ 0, 10, 1024, 3000 }) do
                    local fields, content = case(keys(n, n), size)
                    local body = blen > 0 and ("b"):rep(blen) or nil
                    local want = acl.hmac("secret-1", content .. (body or ""))
                    assert.equal(want, acl.sign(fields, body, "secret-1"), ("%d keys, body %d"):format(n, blen))
                end
            end
        end
    end)

    it("keeps one keyed context per secret: secrets in turn give each its own signature", function()
        local fields = { topic = "T", a = "1" }
        local want = {}
        for i = 1, 12 do
            want[i] = acl.hmac("secret-" .. i, "1T")
        end
        -- more secrets than the signer keeps, in turn, twice round
        for _ = 1, 2 do
            for i = 1, 12 do
                assert.equal(want[i], acl.sign(fields, nil, "secret-" .. i))
                assert.equal(want[1], acl.sign(fields, nil, "secret-1"))
            end
        end
        -- a secret longer than the cache keeps, and the empty one
        local long = ("s"):rep(300)
        assert.equal(acl.hmac(long, "1T"), acl.sign(fields, nil, long))
        assert.equal(acl.hmac("", "1T"), acl.sign(fields, nil, ""))
        assert.equal(want[2], acl.sign(fields, nil, "secret-2"))
    end)
end)
