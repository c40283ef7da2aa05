-- ali-ons (the npm RocketMQ client, spec/interop/ali_ons) subscribing
-- with SQL92 against rmq with enablePropertyFilter: its push consumer
-- gets exactly the messages the expression matches
-- (spec/interop/ali_ons/sql92_filter.js).
local ali_ons = require("support.ali_ons")
local env = require("support.broker_consume_env")

local TOPIC = "FxAliOnsSql"
local COUNT = 30

describe("ali-ons SQL92 subscription against rmq", function()
    local e

    setup(function()
        e = env.start({ workers = 2, enablePropertyFilter = true })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    it("delivers only the messages the expression matches", function()
        ali_ons.check()
        ali_ons.create_topic(e, TOPIC)
        local want = {}
        for i = 0, COUNT - 1 do
            if i >= 5 and i <= 20 and i % 2 == 1 then
                want[#want + 1] = i
            end
        end
        local status, res, why = ali_ons.run(e, "sql92_filter.js", {
            TOPIC = TOPIC, GROUP = "FxAliOnsSqlGroup", COUNT = COUNT,
            EXPR = "a BETWEEN 5 AND 20 AND TAGS = 'TagOdd'", EXPECTED = #want }, "ali-ons-sql")
        assert.equal(0, status, why)
        assert.truthy(res, why)
        assert.equal(COUNT, res.sent)
        assert.same(want, res.received)
    end)
end)
