-- rmq driven by a RocketMQ client nobody on this team wrote: ali-ons, the
-- npm package (spec/interop/ali_ons, installed by scripts/test.sh).  Its
-- unmodified producer and push consumer go through a real NameServer to
-- a real broker (two processes on loopback): spec/interop/ali_ons/
-- produce_consume.js sends COUNT messages, consumes them back and prints
-- one JSON line; it exits 0 only when every message came back intact.
local ali_ons = require("support.ali_ons")
local env = require("support.broker_consume_env")

local TOPIC = "FxAliOns"
local GROUP = "FxAliOnsGroup"
local COUNT = 40

describe("ali-ons 3.12 against rmq", function()
    local e

    setup(function()
        e = env.start({ workers = 2 })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    it("produces and consumes through the NameServer, every message intact", function()
        ali_ons.check()
        -- The topic exists before the consumer subscribes.
        ali_ons.create_topic(e, TOPIC)
        local status, res, why = ali_ons.run(e, "produce_consume.js",
            { TOPIC = TOPIC, GROUP = GROUP, COUNT = COUNT }, "ali-ons")
        assert.equal(0, status, why)
        assert.truthy(res, why)
        assert.equal(COUNT, res.sent)
        assert.equal(COUNT, res.received)
        assert.equal(COUNT, res.intact)
        assert.equal(4, res.queues)
        assert.matches("^%x+$", res.firstMsgId)
    end)
end)
