-- Producer queue selection (DefaultMQProducer's default, MQFaultStrategy
-- with sendLatencyFaultEnable = false).
--
-- select(facts) -> index, counter
--   facts.queues          list of {brokerName=, queueId=} (the topic's
--                         writable queues, in route order)
--   facts.counter         the topic's rotating counter (sendWhichQueue)
--   facts.lastBrokerName  the broker the previous attempt of this send
--                         failed on, or nil on a first attempt
-- Returns the 1-based index of the chosen queue and the counter to keep.
--
-- It rotates through the queues; on a retry it skips queues of the broker
-- that just failed, unless every queue is on that broker.
local M = {}

function M.select(facts)
    local queues, n = facts.queues, #facts.queues
    if n == 0 then
        return nil, facts.counter
    end
    local counter = facts.counter or 0
    local last = facts.lastBrokerName
    if last ~= nil then
        for _ = 1, n do
            counter = counter + 1
            local i = counter % n + 1
            if queues[i].brokerName ~= last then
                return i, counter
            end
        end
    end
    counter = counter + 1
    return counter % n + 1, counter
end

return M
