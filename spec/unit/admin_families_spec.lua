-- The pure parts of rmq admin's group, consumer, message and offset
-- families: MQVersion names, mqadmin's timestamp options, MessageQueue
-- order, SubscriptionGroupConfig.toString.
local rpc = require("rmq.admin.rpc")
local group = require("rmq.admin.group")
local offset = require("rmq.admin.offset")

describe("rmq admin families: helpers", function()
    it("names client versions as MQVersion.getVersionDesc", function()
        assert.equal("V4_9_8", rpc.version_desc(409))
        assert.equal("V4_9_8_SNAPSHOT", rpc.version_desc(408))
        assert.equal("V4_0_0_SNAPSHOT", rpc.version_desc(212))
        assert.equal("V5_1_0", rpc.version_desc(212 + 2 * 110 + 1))
        assert.equal("HIGHER_VERSION", rpc.version_desc(612))
        assert.equal("-", rpc.version_desc(nil))
    end)

    it("reads timestamps as mqadmin: milliseconds or yyyy-MM-dd#HH:mm:ss:SSS, local time", function()
        assert.equal(1700000000123, rpc.parse_time("1700000000123", "b"))
        local t = os.time({ year = 2026, month = 3, day = 4, hour = 5, min = 6, sec = 7 })
        assert.equal(t * 1000 + 89, rpc.parse_time("2026-03-04#05:06:07:089", "b"))
        assert.equal(-1, offset.parse_timestamp("now"))
        for _, bad in ipairs({ "yesterday", "2026-03-04 05:06:07", "2026-13-04#05:06:07:089", "" }) do
            local ok, err = pcall(rpc.parse_time, bad, "beginTimestamp")
            assert.is_false(ok, bad)
            assert.equal(2, err.exit, bad)
            assert.matches("%-%-beginTimestamp", tostring(err))
        end
    end)

    it("orders queues as MessageQueue.compareTo: topic, broker, queue id", function()
        local qs = { { topic = "B", brokerName = "a", queueId = 0 }, { topic = "A", brokerName = "b", queueId = 1 },
                     { topic = "A", brokerName = "b", queueId = 0 }, { topic = "A", brokerName = "a", queueId = 3 } }
        table.sort(qs, rpc.mq_less)
        local keys = {}
        for i, q in ipairs(qs) do
            keys[i] = q.topic .. q.brokerName .. q.queueId
        end
        assert.same({ "Aa3", "Ab0", "Ab1", "Ba0" }, keys)
    end)

    it("prints a subscription group as SubscriptionGroupConfig.toString", function()
        assert.equal("SubscriptionGroupConfig [groupName=G, consumeEnable=true, consumeFromMinEnable=false, "
            .. "consumeBroadcastEnable=false, retryQueueNums=1, retryMaxTimes=16, brokerId=0, "
            .. "whichBrokerWhenConsumeSlowly=1, notifyConsumerIdsChangedEnable=true]",
            group.config_string({ groupName = "G", consumeEnable = true, consumeFromMinEnable = false,
                                  consumeBroadcastEnable = false, retryQueueNums = 1, retryMaxTimes = 16,
                                  brokerId = 0, whichBrokerWhenConsumeSlowly = 1,
                                  notifyConsumerIdsChangedEnable = true }))
    end)
end)
