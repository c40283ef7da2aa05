-- Admin requests to a broker, for specs: one call with a 10 s bound that
-- fails the spec when nothing answers, and UPDATE_AND_CREATE_TOPIC with
-- mqadmin's fields.
--
--   local admin = require("support.admin")
--   local r = admin.call(addr, { code = 28 })
--   admin.create_topic(addr, "T", 4)       -- asserts SUCCESS
--   admin.start_consumer(ns, "G", "T", got)  -- a push consumer appending bodies
local consumer = require("rmq.client.consumer")
local net = require("rmq.net")

local M = {}

function M.call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

--- Creates topic with n read and write queues (perm 6 unless given);
--- asserts the broker took it.
function M.create_topic(addr, topic, n, perm)
    local r = M.call(addr, { code = 17, ext = {
        topic = topic, defaultTopic = "TBW102", readQueueNums = tostring(n),
        writeQueueNums = tostring(n), perm = tostring(perm or 6), topicFilterType = "SINGLE_TAG",
        topicSysFlag = "0", order = "false" } })
    assert(r.code == 0, r.remark)
    return r
end

--- A started push consumer of group on topic from its first offset that
--- appends every body to `got`, committing every 200 ms; its held pulls
--- last suspend_ms (1000).
function M.start_consumer(ns_addr, group, topic, got, suspend_ms)
    local c = consumer.new({ namesrvAddr = ns_addr, consumerGroup = group,
                             consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
                             persistConsumerOffsetInterval = 200, suspendTimeoutMillis = suspend_ms or 1000 })
    c:subscribe(topic, "*")
    c:on_message(function(msgs)
        for _, m in ipairs(msgs) do
            got[#got + 1] = m.body
        end
        return "CONSUME_SUCCESS"
    end)
    c:start()
    return c
end

return M
