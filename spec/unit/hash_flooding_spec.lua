-- Hash flooding (issue 21 item 3): names whose Java String.hashCode is
-- equal ("Aa" and "BB", so 13 such pairs give 8,192 twins) must not make
-- a lookup walk a chain.  Each table keyed by names a peer chooses is
-- filled with 8,192 of them and its chain statistics read: the Java
-- chain (the order kept for replies) holds them all, the keyed chain a
-- lookup walks stays short.  Deterministic: counts, no timing.
local route = require("rmq.route")
local ct = require("rmq.config_table")
local ot = require("rmq.offset_table")
local shared = require("rmq.shared")
local message = require("rmq.message")

local N_BITS = 13                  -- 2^13 = 8,192 names
local MAX_CHAIN = 16               -- keyed chains: ~6 expected at load <= 1

-- prefix .. one of "Aa"/"BB" per bit of i: all share one String.hashCode.
local function colliding(prefix)
    local names = {}
    for i = 0, (1 << N_BITS) - 1 do
        local parts = { prefix }
        for b = 0, N_BITS - 1 do
            parts[#parts + 1] = (i >> b) & 1 == 1 and "BB" or "Aa"
        end
        names[#names + 1] = table.concat(parts)
    end
    return names
end

local function report(what, st)
    print(string.format("  %-28s %6d names  %6d buckets  longest keyed chain %3d  "
                        .. "longest Java chain %5d", what, st.size, st.cap,
                        st.max_keyed_chain or st.max_chain, st.max_java_chain or -1))
end

describe("tables keyed by peer-chosen names", function()
    local names = colliding("Flood")

    it("the names really collide in Java's hash", function()
        local h = message.java_hash(names[1])
        for i = 2, #names, 97 do
            assert.equal(h, message.java_hash(names[i]))
        end
        assert.equal(#names, 1 << N_BITS)
    end)

    it("NameServer routes: 8,192 colliding topics, short lookups, every route found", function()
        local rt = route.new()
        local topics = { { name = "Ordinary", read = 4, write = 4, perm = 6, sysflag = 0 } }
        for _, n in ipairs(names) do
            topics[#topics + 1] = { name = n, read = 4, write = 4, perm = 6, sysflag = 0 }
        end
        rt:register({ cluster = "C", addr = "127.0.0.1:10911", name = "b", id = 0,
                      dv = { counter = 1, timestamp = 1 }, topics = topics, conn = 1 })
        local st = rt:hash_stats().topics
        report("route topics", st)
        assert.equal(#names + 1, st.size)
        assert.is_true(st.max_java_chain >= #names)       -- the order structure: one chain
        assert.is_true(st.max_keyed_chain <= MAX_CHAIN)   -- what a lookup walks
        for i = 1, #names, 61 do
            assert.is_truthy(rt:route(names[i], true))
        end
        assert.is_truthy(rt:route("Ordinary", true))
        -- deletes unlink in O(1) and keep the rest findable
        for i = 1, #names, 2 do
            assert.is_true(rt:delete_topic(names[i]))
        end
        st = rt:hash_stats().topics
        assert.equal(#names // 2 + 1, st.size)
        assert.is_true(st.max_keyed_chain <= MAX_CHAIN)
        for i = 2, #names, 62 do
            assert.is_truthy(rt:route(names[i], true))
        end
        assert.is_nil(rt:route(names[1], true))
    end)

    it("topic and subscription-group configs", function()
        local t = ct.new_topics()
        for _, n in ipairs(names) do
            assert.is_true(t:put({ topicName = n, readQueueNums = 4, writeQueueNums = 4, perm = 6,
                                   topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false }))
        end
        local st = t:hash_stats()
        report("topic configs", st)
        assert.equal(#names, st.size)
        assert.is_true(st.max_java_chain >= #names)
        assert.is_true(st.max_keyed_chain <= MAX_CHAIN)
        assert.equal(names[77], t:get(names[77]).topicName)
        local g = ct.new_groups()
        for _, n in ipairs(names) do
            assert.is_true(g:put({ groupName = n }))
        end
        st = g:hash_stats()
        report("subscription groups", st)
        assert.is_true(st.max_keyed_chain <= MAX_CHAIN)
        for i = 1, #names, 3 do
            assert.equal(1, g:del(names[i]) and 1 or 0)
        end
        assert.is_true(g:hash_stats().max_keyed_chain <= MAX_CHAIN)
    end)

    it("consumer offsets (topic@group keys)", function()
        local t = ot.new()
        for i, n in ipairs(names) do
            assert.is_true(t:commit("TopicT", n, 0, i))
        end
        local st = t:hash_stats()
        report("offsets", st)
        assert.equal(#names, st.size)
        assert.is_true(st.max_java_chain >= #names)
        assert.is_true(st.max_keyed_chain <= MAX_CHAIN)
        assert.equal(100, t:query("TopicT", names[100], 0))
    end)

    it("the broker's shared maps (topic configs, groups, locks as Lua sees them)", function()
        local m = shared.map("spec.hash_flooding")
        m:clear()
        for _, n in ipairs(names) do
            m:set(n, "x")
        end
        local st = m:hash_stats()
        report("shared map", st)
        assert.equal(#names, st.size)
        assert.is_true(st.max_chain <= MAX_CHAIN)
        m:clear()
    end)
end)
