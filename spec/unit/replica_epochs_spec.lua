-- The epoch file (5.x's epochFileCheckpoint: the number of entries, then
-- "epoch-startOffset" lines) and the consistent point two brokers share
-- (5.x's EpochFileCache.findConsistentPoint), as rmq.broker.replica_role
-- reads, writes and computes them; and the SyncStateSet a master proposes
-- next.
local rr = require("rmq.broker.replica_role")

describe("epoch file", function()
    it("reads and writes 5.x's format", function()
        local text = "3\n1-0\n2-4096\n5-81920\n"
        local e = assert(rr.parse(text))
        assert.same({ { epoch = 1, start = 0 }, { epoch = 2, start = 4096 }, { epoch = 5, start = 81920 } }, e)
        assert.equal(text, rr.format(e))
        assert.same({}, rr.parse(""))
        assert.same({ { epoch = 7, start = 0 } }, rr.parse("1\r\n7-0\r\n"))   -- written on Windows
    end)

    it("refuses a file that is not one, saying why", function()
        for text, why in pairs({
            ["x\n1-0\n"] = "the first line is not the number of entries",
            ["2\n1-0\n"] = "expected 2 entries, found 1",
            ["1\n1:0\n"] = "line 2 is not epoch%-startOffset",
            ["2\n2-0\n1-10\n"] = "epochs and offsets must grow",
            ["2\n1-10\n2-5\n"] = "epochs and offsets must grow",
            ["1\n2147483648-0\n"] = "line 2 is not epoch%-startOffset",
            ["1\n-1-0\n"] = "line 2 is not epoch%-startOffset",
        }) do
            local e, err = rr.parse(text)
            assert.is_nil(e, text)
            assert.matches(why, err)
        end
        local huge = { tostring(rr.MAX_ENTRIES + 5) }
        for i = 1, rr.MAX_ENTRIES + 5 do
            huge[#huge + 1] = ("%d-%d"):format(i, i)
        end
        local e, err = rr.parse(table.concat(huge, "\n"))
        assert.is_nil(e)
        assert.matches("more than", err)
    end)
end)

describe("consistent point", function()
    local function E(...)
        local out, args = {}, { ... }
        for i = 1, #args, 2 do
            out[#out + 1] = { epoch = args[i], start = args[i + 1] }
        end
        return out
    end

    it("is the end of the last epoch both hold from the same offset", function()
        -- an old master (epoch 1 up to 1400) and the new master of epoch 2
        -- from 1000: the old one keeps 0..1000
        assert.equal(1000, rr.consistent_point(E(1, 0), 1400, E(1, 0, 2, 1000), 2000))
        -- a slave behind the master in the same epoch keeps all it has
        assert.equal(700, rr.consistent_point(E(1, 0, 2, 500), 700, E(1, 0, 2, 500), 2000))
        -- a deposed master of epoch 3 that the master of epoch 4 never saw
        assert.equal(900, rr.consistent_point(E(1, 0, 2, 500, 3, 900), 1500, E(1, 0, 2, 500, 4, 900), 3000))
        -- same epoch number from another start: not the same epoch
        assert.equal(500, rr.consistent_point(E(1, 0, 2, 600), 800, E(1, 0, 2, 500), 900))
        -- nothing in common
        assert.equal(-1, rr.consistent_point(E(3, 0), 100, E(1, 0), 50))
        assert.equal(-1, rr.consistent_point({}, 0, E(1, 0), 50))
    end)
end)

-- The set a master proposes next (5.x's shrink and expand), from plain
-- facts: what a lagging slave may join, and when a member leaves.
describe("the next SyncStateSet", function()
    local function facts(over)
        local p = {
            self = 0, cur = { 0, 1 }, caught_up_ago = {}, ack = {},
            last_in_sync = { [1] = 100000 }, now = 100000, limit = 15000,
            join_within = 10000, confirm = nil,
        }
        for k, v in pairs(over or {}) do
            p[k] = v
        end
        return p
    end

    it("takes a slave caught up lately, and keeps the members caught up within the limit", function()
        local set, why = rr.next_sync_state_set(facts({ caught_up_ago = { [1] = 0, [2] = 500 } }))
        assert.same({ 0, 1, 2 }, set)
        assert.same({ "broker 2 caught up" }, why)
    end)

    it("with allAckInSyncStateSet, refuses a joiner behind what the members acknowledged", function()
        -- Caught up 2 s ago, but 4 KiB behind the offset the set has
        -- acknowledged: elected, it would lose those acknowledged sends.
        local p = facts({ caught_up_ago = { [1] = 0, [2] = 2000 }, ack = { [1] = 81920, [2] = 77824 },
                          confirm = 81920 })
        assert.same({ 0, 1 }, (rr.next_sync_state_set(p)))
        -- Once it holds that offset it joins.
        p.ack[2] = 81920
        assert.same({ 0, 1, 2 }, (rr.next_sync_state_set(p)))
        -- A slave that never acknowledged anything holds nothing.
        p.ack[2] = nil
        assert.same({ 0, 1 }, (rr.next_sync_state_set(p)))
    end)

    it("without a confirm offset (a master alone, or not allAckInSyncStateSet) a joiner needs only to be caught up", function()
        local p = facts({ cur = { 0 }, last_in_sync = {}, caught_up_ago = { [1] = 2000 }, ack = { [1] = 0 } })
        assert.same({ 0, 1 }, (rr.next_sync_state_set(p)))
        p.caught_up_ago[1] = 10001   -- not lately
        assert.same({ 0 }, (rr.next_sync_state_set(p)))
    end)

    it("lets a member go once it has not been caught up for haMaxTimeSlaveNotCatchup", function()
        local set, why = rr.next_sync_state_set(facts({ now = 100000 + 15001 }))
        assert.same({ 0 }, set)
        assert.same({ "broker 1 left (not caught up for 15000 ms)" }, why)
        assert.same({ 0, 1 }, (rr.next_sync_state_set(facts({ now = 100000 + 15000 }))))
    end)
end)
