-- A slave-read policy (see rmq.policy.slave_read for the facts): with
-- slaveReadEnable on, every consumer is sent to the group's
-- whichBrokerWhenConsumeSlowly slave, slow or not, so the master serves
-- only producers.  On a slave it keeps the consumer there.
--
--   slaveReadPolicy = "rmq.policy.slave_read_always"
local M = {}

function M.suggest(facts)
    if not facts.slaveReadEnable then
        return 0
    end
    return facts.whichBrokerWhenConsumeSlowly or 1
end

return M
