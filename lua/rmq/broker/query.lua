-- Broker: VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12), protocol.md
-- 4.9: one record by its physical offset (the offset message id), and the
-- records the index holds for topic#key in a store-time window.  Bodies
-- are the store's records (copied once into the connection's output).
local codes = require("rmq.codes")

local M = {}

local R = codes.response

function M.processors(b)
    local st = b.store
    local max_num = b.conf.defaultQueryMaxNum
    return {
        [codes.request.VIEW_MESSAGE_BY_ID] = function(ctx, cmd)
            local offset = tonumber(cmd:get("offset"))
            if offset == nil then
                return { code = R.SYSTEM_ERROR, remark = "the custom field <offset> is null" }
            end
            local recs = st:message(math.tointeger(offset) or -1)
            if recs == nil or #recs == 0 then
                return { code = R.SYSTEM_ERROR, remark = "can not find message by the offset, " .. math.floor(offset) }
            end
            return { code = R.SUCCESS, body = recs }
        end,
        [codes.request.QUERY_MESSAGE] = function(ctx, cmd)
            local topic, key, max, begin_ts, end_ts, uniq =
                cmd:fields("topic", "key", "maxNum", "beginTimestamp", "endTimestamp", "_UNIQUE_KEY_QUERY")
            if topic == nil or key == nil then
                return { code = R.SYSTEM_ERROR,
                         remark = ("the custom field <%s> is null"):format(topic == nil and "topic" or "key") }
            end
            max = math.tointeger(tonumber(max)) or max_num
            if uniq == "true" then
                max = max_num
            end
            local recs, last_ts, last_phy = st:query(topic, key, max,
                math.tointeger(tonumber(begin_ts)) or 0,
                math.tointeger(tonumber(end_ts)) or math.maxinteger)
            local ext = { indexLastUpdateTimestamp = last_ts, indexLastUpdatePhyoffset = last_phy }
            if recs == nil then
                return { code = R.QUERY_NOT_FOUND, ext = ext,
                         remark = "can not find message, maybe time range not correct" }
            end
            return { code = R.SUCCESS, ext = ext, body = recs }
        end,
    }
end

return M
