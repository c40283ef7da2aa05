-- Server-side assignment (RocketMQ 5's QUERY_ASSIGNMENT): which of a
-- topic's queues one consumer of a group gets, decided on the broker
-- (lua/rmq/broker/assignment.lua asks; a conf's assignmentPolicy may name
-- another module, replaced live like the other policies).
--
--   assign(facts) -> list of queues | nil (no valid answer: the client
--                    keeps what it has)
--
-- facts:
--   topic, group, clientId, strategyName ("AVG", "AVG_BY_CIRCLE", ...)
--   messageModel      "CLUSTERING" | "BROADCASTING"
--   mode              "PULL" | "POP" (SET_MESSAGE_REQUEST_MODE, else PULL)
--   popShareQueueNum  POP: <= 0 every consumer pops every queue
--                     (queueId -1 per broker), N > 0 each also pops the
--                     queues of the N consumers after it
--   queues            every queue of the topic, sorted (brokerName,
--                     queueId), as {topic=, brokerName=, queueId=}
--   consumers         the group's client ids, sorted
-- The default is 5.x's QueryAssignmentProcessor.doLoadBalance.
local allocate = require("rmq.policy.allocate")

local M = {}

-- AllocateMessageQueueStrategy.getName() -> rmq.policy.allocate
M.STRATEGIES = { AVG = allocate.averagely, AVG_BY_CIRCLE = allocate.circle }

local function index_of(list, x)
    for i, v in ipairs(list) do
        if v == x then
            return i
        end
    end
    return nil
end

function M.assign(facts)
    local queues, cids = facts.queues, facts.consumers
    if facts.messageModel == "BROADCASTING" then
        return queues
    end
    local strategy = M.STRATEGIES[facts.strategyName]
    if strategy == nil or #cids == 0 then
        return nil
    end
    local function alloc(me)
        return strategy({ queues = queues, consumers = cids, me = me })
    end
    if facts.mode ~= "POP" then
        return alloc(facts.clientId)
    end
    local share = facts.popShareQueueNum or -1
    if share <= 0 then
        -- every consumer pops every broker's queues (queueId -1)
        local out, seen = {}, {}
        for _, q in ipairs(queues) do
            if not seen[q.brokerName] then
                seen[q.brokerName] = true
                out[#out + 1] = { topic = q.topic, brokerName = q.brokerName, queueId = -1 }
            end
        end
        return out
    end
    local me = index_of(cids, facts.clientId)
    if me == nil then
        return {}
    end
    if #cids > #queues then
        -- make sure each consumer gets one
        return { queues[(me - 1) % #queues + 1] }
    end
    local out = alloc(facts.clientId)
    local i = me
    for _ = 1, share do
        i = i % #cids + 1
        for _, q in ipairs(alloc(cids[i])) do
            out[#out + 1] = q
        end
    end
    return out
end

return M
