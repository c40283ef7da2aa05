-- rmq.shared: maps every worker's Lua state sees.  Here through rmq.so
-- in one state; the broker specs exercise them across worker threads.
local shared = require("rmq.shared")

describe("shared maps", function()
    it("sets, gets, deletes and counts", function()
        local m = shared.map("spec.basic")
        m:clear()
        assert.is_nil(m:get("a"))
        assert.is_true(m:set("a", "1"))
        assert.equal("1", m:get("a"))
        assert.is_true(m:set("a", "2"))
        assert.equal("2", m:get("a"))
        assert.is_false(m:set("a", "3", true))  -- if absent: kept
        assert.equal("2", m:get("a"))
        assert.equal(1, m:count())
        assert.is_true(m:del("a"))
        assert.is_false(m:del("a"))
        assert.equal(0, m:count())
    end)

    it("is the same map under the same name", function()
        shared.map("spec.same"):set("k", "v")
        assert.equal("v", shared.map("spec.same"):get("k"))
        assert.is_nil(shared.map("spec.other"):get("k"))
    end)

    it("moves its version on every write, and only then", function()
        local m = shared.map("spec.version")
        local v0 = m:version()
        m:get("x")
        assert.equal(v0, m:version())
        m:set("x", "1")
        assert.is_true(m:version() > v0)
        local v1 = m:version()
        m:set("x", "1", true)
        assert.equal(v1, m:version())
        m:del("x")
        assert.is_true(m:version() > v1)
    end)

    it("holds binary values and large maps, and lists them all", function()
        local m = shared.map("spec.big")
        m:clear()
        local big = string.rep("\0\1\2\255", 5000)
        m:set("big", big)
        assert.equal(big, m:get("big"))
        for i = 1, 2000 do
            m:set("k" .. i, tostring(i))
        end
        local all = m:all()
        assert.equal(big, all.big)
        for i = 1, 2000 do
            assert.equal(tostring(i), all["k" .. i])
        end
        assert.equal(2001, m:count())
    end)
end)
