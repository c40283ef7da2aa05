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
