-- What two brokers' replies to the same request must agree on, for specs
-- that send one request sequence to a broker with the native processors
-- and one without (nativeProcessors = false):
--
--   local compare = require("support.native_compare")
--   compare.comparable(reply) -> table   for assert.same
--   compare.records(body) -> {record, ...}   a pull body by content
--
-- The reply itself, with the store's own facts left out (message ids
-- name the broker's port; remarks may name the client, whose port
-- differs), extFields as a map (Lua tables have no order; RocketMQ's
-- clients read a HashMap), whether extFields was there at all, and the
-- records of a pull by their content: every field of the stored record
-- but the hosts and the store time (the properties as the bytes stored).
local formats = require("rmq.message")
local codes = require("rmq.codes")

local R = codes.response

local M = {}

-- The records as stored (a body flagged compressed stays as it is: a
-- producer may set the flag on anything).  The broker's own
-- OFFSET_MOVED_EVENT messages are born when it writes them.
function M.records(body)
    local out = {}
    local pos = 1
    while pos <= #body do
        local m, nxt = formats.decode_record(body, pos)
        assert(m, nxt)
        out[#out + 1] = {
            topic = m.topic, queueId = m.queueId, queueOffset = m.queueOffset, body = m.body,
            properties = m.propertiesString, flag = m.flag, sysFlag = m.sysFlag,
            bornTimestamp = m.topic ~= "OFFSET_MOVED_EVENT" and m.bornTimestamp or nil,
            reconsumeTimes = m.reconsumeTimes, bodyCRC = m.bodyCRC, storeSize = m.storeSize,
            commitLogOffset = m.commitLogOffset, preparedTransactionOffset = m.preparedTransactionOffset,
        }
        pos = nxt
    end
    return out
end

function M.comparable(r)
    local ext = {}
    for k, v in pairs(r.ext or {}) do
        if k ~= "msgId" then
            ext[k] = v
        end
    end
    local out = {
        code = r.code, remark = (r.remark or ""):gsub("127%.0%.0%.1:%d+", "PEER"), ext = ext,
        has_ext = r.ext ~= nil,
    }
    if r.ext and r.ext.msgId then
        out.ids = select(2, r.ext.msgId:gsub("%x+", ""))
    end
    if r.code == R.SUCCESS and r.body and r.body ~= "" and r.ext and r.ext.nextBeginOffset then
        out.records = M.records(r.body)
    elseif r.body and r.body ~= "" then
        out.body = r.body
    end
    return out
end

--- v as one line of Lua-like text, keys sorted (for failure messages and
--- for comparing two values as text).
function M.dump(v)
    local t = type(v)
    if t == "string" then
        return (("%q"):format(v):gsub("\\\n", "\\n"))
    elseif t ~= "table" then
        return tostring(v)
    end
    local keys = {}
    for k in pairs(v) do
        keys[#keys + 1] = k
    end
    table.sort(keys, function(x, y)
        if type(x) == type(y) then
            return x < y
        end
        return type(x) == "number"
    end)
    local parts = {}
    for _, k in ipairs(keys) do
        parts[#parts + 1] = (type(k) == "string" and k or ("[" .. tostring(k) .. "]")) .. "=" .. M.dump(v[k])
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end

return M
