-- rmq.properties: the Java Properties text of config update bodies.
local properties = require("rmq.properties")

describe("rmq.properties.parse", function()
    it("reads what mqadmin updateNamesrvConfig and updateBrokerConfig send, and Java properties syntax", function()
        local p, order = properties.parse(
            "# comment\n! also\na=1\nb : two words \nc x\\\n  y\nd=\\u0041\\t\n\n  e=\n")
        assert.same({ a = "1", b = "two words ", c = "xy", d = "A\t", e = "" }, p)
        assert.same({ "a", "b", "c", "d", "e" }, order)
    end)
end)
