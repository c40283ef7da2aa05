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

    -- Regression: the copy-out used to drop a live luaL_Buffer with
    -- lua_settop when the first guess (4 KB for all(), 256 B for get())
    -- was too small, and the broker crashed once a table passed ~4 KB.
    it("copies out maps and values larger than its first guess", function()
        local m = shared.map("spec.large")
        m:clear()
        local big = string.rep("v", 70000)
        for i = 1, 2000 do
            m:set(("key-%05d"):format(i), ("value %d "):format(i) .. ("x"):rep(i % 300))
        end
        m:set("big", big)
        -- In a coroutine, at every stack depth: the old retry corrupted the
        -- stack there (Lua 5.4.4 closing the buffer's box in lua_settop).
        local function deep(d, k)
            if d > 0 then
                local a, b = deep(d - 1, k)
                return a, b
            end
            local args = {}
            for i = 1, k do args[i] = i end
            return m:all(table.unpack(args)), m:get("big", table.unpack(args))
        end
        for d = 0, 30 do
            for k = 0, 30 do
                local all, v = coroutine.wrap(function() return deep(d, k) end)()
                assert.is_true(all.big == big, "all() at depth " .. d)
                assert.is_true(v == big, ("get() at depth %d: %s"):format(d, tostring(v and #v)))
            end
        end
        for _ = 1, 3 do
            local all = m:all()
            local n = 0
            for _ in pairs(all) do n = n + 1 end
            assert.equal(2001, n)
            assert.is_true(all.big == big)
            assert.equal("value 7 " .. ("x"):rep(7), all["key-00007"])
            assert.is_true(m:get("big") == big)
            collectgarbage()
        end
        m:clear()
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

-- The typed run-time settings C processors read (broker/bsettings.h):
-- rmq.broker.tables sets them beside the JSON copy the Lua states read.
describe("shared settings", function()
    before_each(function() shared.settings_clear() end)
    after_each(function() shared.settings_clear() end)

    it("stores the keys C reads, typed, and says false for the others", function()
        assert.is_true(shared.setting("brokerPermission", 4))
        assert.is_true(shared.setting("slaveReadEnable", true))
        assert.is_true(shared.setting("slaveReadPolicyBuiltin", false))
        assert.is_true(shared.setting("waitTimeMillsInSendQueue", 0))
        assert.is_false(shared.setting("brokerName", "b"))
        assert.are.same({ brokerPermission = 4, slaveReadEnable = true,
                          slaveReadPolicyBuiltin = false, waitTimeMillsInSendQueue = 0 },
                        shared.settings())
        assert.is_true(shared.setting("brokerPermission", 6))
        assert.equal(6, shared.settings().brokerPermission)
    end)

    it("refuses a value of the wrong type or range, and keeps the old one", function()
        assert.is_true(shared.setting("brokerPermission", 6))
        assert.has_error(function() shared.setting("brokerPermission", "6") end)
        assert.has_error(function() shared.setting("brokerPermission", 6.5) end)
        assert.has_error(function() shared.setting("brokerPermission", -1) end)
        assert.has_error(function() shared.setting("waitTimeMillsInPullQueue", math.mininteger) end)
        assert.has_error(function() shared.setting("slaveReadEnable", 1) end)
        assert.has_error(function() shared.setting("slaveReadEnable", "true") end)
        assert.are.same({ brokerPermission = 6 }, shared.settings())
    end)

    it("forgets everything on clear", function()
        shared.setting("enablePropertyFilter", true)
        shared.settings_clear()
        assert.are.same({}, shared.settings())
    end)
end)
