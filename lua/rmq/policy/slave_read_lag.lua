-- A slave-read policy (see rmq.policy.slave_read for the facts): 4.9.8's
-- rule, except that a slow consumer stays on the master while the slave
-- is more than MAX_LAG_BYTES behind it (it would find less there than
-- here).  Without replication figures (facts.slaveLagBytes nil) it is
-- exactly 4.9.8's rule.
--
--   slaveReadPolicy = "rmq.policy.slave_read_lag"
local default = require("rmq.policy.slave_read")

local M = {}

M.MAX_LAG_BYTES = 64 * 1024 * 1024

function M.suggest(facts)
    local which = default.suggest(facts)
    local lag = facts.slaveLagBytes
    if which ~= 0 and not facts.slave and lag ~= nil and lag > M.MAX_LAG_BYTES then
        return 0
    end
    return which
end

return M
