-- Rebalance allocation strategies: which of a topic's queues this
-- consumer takes, given every consumer of the group.
--
-- Each strategy is f(facts) -> list of queues, with
--   facts.queues      every queue of the topic, sorted (by broker name,
--                     then queue id), as {brokerName=, queueId=, ...}
--   facts.consumers   every client id of the group, sorted
--   facts.me          this consumer's client id
-- A consumer not in the list gets nothing.
local M = {}

local function index_of(list, x)
    for i, v in ipairs(list) do
        if v == x then
            return i - 1
        end
    end
    return nil
end

--- AllocateMessageQueueAveragely: contiguous blocks; the first
-- (#queues % #consumers) consumers get one extra.
function M.averagely(facts)
    local mqs, cids = facts.queues, facts.consumers
    local index = index_of(cids, facts.me)
    local out = {}
    if index == nil or #mqs == 0 then
        return out
    end
    local n, c = #mqs, #cids
    local mod = n % c
    local size
    if n <= c then
        size = 1
    elseif mod > 0 and index < mod then
        size = n // c + 1
    else
        size = n // c
    end
    local start = (mod > 0 and index < mod) and index * size or index * size + mod
    local range = math.min(size, n - start)
    for i = 0, range - 1 do
        out[#out + 1] = mqs[(start + i) % n + 1]
    end
    return out
end

--- AllocateMessageQueueAveragelyByCircle: deal the queues round-robin.
function M.circle(facts)
    local mqs, cids = facts.queues, facts.consumers
    local index = index_of(cids, facts.me)
    local out = {}
    if index == nil then
        return out
    end
    for i = index, #mqs - 1, #cids do
        out[#out + 1] = mqs[i + 1]
    end
    return out
end

M.allocate = M.averagely

return M
