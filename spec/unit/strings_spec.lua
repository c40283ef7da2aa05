-- rmq.strings: helpers the control plane uses on request bodies.
local strings = require("rmq.strings")

describe("strings.trim", function()
    it("drops leading and trailing blanks only", function()
        for _, c in ipairs({
            { "", "" }, { "   ", "" }, { "a", "a" }, { " a ", "a" }, { "\t a b \n", "a b" },
            { "a  b", "a  b" }, { "\r\n\v\fx\f", "x" },
        }) do
            assert.equal(c[2], strings.trim(c[1]))
        end
    end)

    it("keeps a long run of inner blanks (bodies can hold them)", function()
        local s = "a" .. (" "):rep(200000) .. "b"
        assert.equal(s, strings.trim("  " .. s .. "  "))
    end)
end)

describe("strings.sorted_keys", function()
    it("puts ids in numeric order, then names, then other keys", function()
        local t = { ["10"] = 1, ["9"] = 1, [2] = 1, b = 1, a = 1, [true] = 1 }
        assert.same({ 2, "9", "10", "a", "b", true }, strings.sorted_keys(t))
    end)

    it("is a total order on keys that mix numeric and lexical order", function()
        -- "2" < "10" by value, "10" < "1a" by text, "1a" < "2"? would
        -- cycle if numeric strings and names shared one ranking.
        local t = {}
        for _, k in ipairs({ "10", "2", "1a", "x", "", "0x10", 3, 1.5 }) do
            t[k] = true
        end
        assert.same({ 1.5, "2", 3, "10", "0x10", "", "1a", "x" }, strings.sorted_keys(t))
        assert.same({}, strings.sorted_keys(nil))
    end)
end)
