-- Admin requests to a broker, for specs: one call with a 10 s bound that
-- fails the spec when nothing answers, and UPDATE_AND_CREATE_TOPIC with
-- mqadmin's fields.
--
--   local admin = require("support.admin")
--   local r = admin.call(addr, { code = 28 })
--   admin.create_topic(addr, "T", 4)       -- asserts SUCCESS
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

return M
