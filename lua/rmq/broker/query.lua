-- Broker: VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12), protocol.md
-- 4.9: one record by its physical offset (the offset message id), and the
-- records the index holds for topic#key in a store-time window.  Bodies
-- are the store's records (copied once into the connection's output).
local codes = require("rmq.codes")
local header = require("rmq.header")
local reply = require("rmq.reply")
local message = require("rmq.message")

local M = {}

local R = codes.response

-- The request headers (ViewMessageRequestHeader, QueryMessageRequestHeader:
-- every field @CFNotNull), read by dispatch.
M.HEADER_VIEW = header.compile({ { "offset", "long", true } })
M.HEADER_QUERY = header.compile({
    { "topic", "topic", true },
    { "key", "string", true },
    { "maxNum", "int", true },
    { "beginTimestamp", "long", true },
    { "endTimestamp", "long", true },
    { "_UNIQUE_KEY_QUERY", "bool", false, as = "unique" },
})

function M.processors(b)
    local st = b.store
    local max_num = b.conf.defaultQueryMaxNum
    local acl_on = b.conf.aclEnable
    local cacl = acl_on and require("rmq.acl")
    return {
        [codes.request.VIEW_MESSAGE_BY_ID] = { header = M.HEADER_VIEW, run = function(ctx, cmd, h)
            local recs = st:message(h.offset)
            if recs == nil or #recs == 0 then
                return reply.system_error("can not find message by the offset, " .. h.offset)
            end
            -- rmq extension: 4.9.8 checks no resource for 33, so any valid
            -- account walks the log by offset; here the account needs SUB
            -- on the record's topic, refused as a SUB of it is.
            if acl_on then
                local rec = message.decode_record(recs:get(1))
                local ok, remark = cacl.check_topic(cmd.ext.AccessKey, ctx.peer, rec and rec.topic or "", "SUB")
                if not ok then
                    recs:release()
                    return reply.system_error(remark)
                end
            end
            return { code = R.SUCCESS, body = recs }
        end },
        [codes.request.QUERY_MESSAGE] = { header = M.HEADER_QUERY, run = function(ctx, cmd, h)
            local max = h.maxNum
            if h.unique then
                max = max_num
            end
            local recs, last_ts, last_phy = st:query(h.topic, h.key, max, h.beginTimestamp, h.endTimestamp)
            local ext = { indexLastUpdateTimestamp = last_ts, indexLastUpdatePhyoffset = last_phy }
            if recs == nil then
                return reply.error(R.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
            end
            return { code = R.SUCCESS, ext = ext, body = recs }
        end },
    }
end

return M
