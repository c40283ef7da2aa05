-- rmq.policy.elect: the controller's default election (RocketMQ 5's
-- DefaultElectPolicy).
local elect = require("rmq.policy.elect").elect

local function cand(id, t)
    t = t or {}
    return { brokerId = id, address = "127.0.0.1:" .. (10000 + id), maxOffset = t.offset or 0,
             epoch = t.epoch or 0, priority = t.priority or 0, alive = t.alive ~= false,
             inSyncStateSet = t.sss ~= false, lastHeartbeat = 1 }
end

describe("rmq.policy.elect", function()
    it("keeps an alive old master of the SyncStateSet", function()
        assert.equal(1, elect({ cand(1), cand(2, { offset = 99 }) }, { oldMaster = 1 }))
    end)

    it("prefers the highest epoch, then the largest offset, then the smallest priority, then the smallest id", function()
        assert.equal(2, elect({ cand(1, { epoch = 1, offset = 900 }), cand(2, { epoch = 2, offset = 10 }) }, {}))
        assert.equal(1, elect({ cand(1, { offset = 900 }), cand(2, { offset = 10 }) }, {}))
        assert.equal(2, elect({ cand(1, { priority = 5 }), cand(2, { priority = 1 }) }, {}))
        assert.equal(1, elect({ cand(2), cand(1) }, {}))
    end)

    it("never elects outside the SyncStateSet or a dead broker in a clean election, whatever its offset", function()
        local id, why = elect({ cand(1, { alive = false }), cand(2, { sss = false, offset = 1 << 60 }) },
            { oldMaster = 1 })
        assert.is_nil(id)
        assert.equal("no alive member of the SyncStateSet", why)
        assert.equal(3, elect({ cand(2, { sss = false, offset = 1 << 60 }), cand(3) }, {}))
        -- enableElectUncleanMaster: then any alive broker.
        assert.equal(2, elect({ cand(1, { alive = false }), cand(2, { sss = false }) }, { unclean = true }))
    end)

    it("a designated broker wins only if it is an alive candidate", function()
        assert.equal(2, elect({ cand(1), cand(2) }, { oldMaster = 1, prefer = 2 }))
        local id, why = elect({ cand(1), cand(2, { alive = false }) }, { oldMaster = 1, prefer = 2 })
        assert.is_nil(id)
        assert.truthy(why:find("designated", 1, true))
    end)
end)
