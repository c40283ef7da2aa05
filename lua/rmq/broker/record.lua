-- Stored records on the broker side: one commit log record (protocol.md
-- 5.1) as fields, with the body and the properties string kept as stored
-- (compressed bodies stay compressed), for the handlers that re-put a
-- message (CONSUMER_SEND_MSG_BACK, delayed delivery).
--
--   record.decode(bytes) -> rec | nil, err
--       rec = {queueId=, flag=, queueOffset=, phy=, sysFlag=,
--              bornTimestamp=, bornHost="ip:port", storeTimestamp=,
--              storeHost="ip:port", reconsumeTimes=, preparedTransactionOffset=,
--              body=, topic=, properties= (raw string)}
--   record.props(s) -> list {{k, v}, ...} in stored order
--   record.get(list, k) / record.set(list, k, v) / record.del(list, k)
--   record.encode_props(list) -> string
--   record.offset_msg_id(rec) -> the offset message id of rec (5.6)
-- Pure: no I/O.
local M = {}

local MAGIC = -626843481          -- 0xDAA320A7
local BORNHOST_V6 = 0x10
local STOREHOST_V6 = 0x20

local function host(rec, pos, v6)
    if v6 then
        local parts = {}
        for i = 0, 7 do
            parts[#parts + 1] = ("%x"):format(string.unpack(">I2", rec, pos + 2 * i))
        end
        local port = string.unpack(">i4", rec, pos + 16)
        return "[" .. table.concat(parts, ":") .. "]:" .. port, pos + 20, rec:sub(pos, pos + 15), port
    end
    local a, b, c, d, port = string.unpack(">BBBBi4", rec, pos)
    return ("%d.%d.%d.%d:%d"):format(a, b, c, d, port), pos + 8, rec:sub(pos, pos + 3), port
end

function M.decode(bytes)
    if type(bytes) ~= "string" or #bytes < 91 then
        return nil, "not a record"
    end
    local size, magic = string.unpack(">i4i4", bytes, 1)
    if magic ~= MAGIC or size > #bytes then
        return nil, "not a record (bad magic or size)"
    end
    local r = { storeSize = size }
    local p
    r.bodyCRC, r.queueId, r.flag, r.queueOffset, r.phy, r.sysFlag, r.bornTimestamp, p =
        string.unpack(">i4i4i4i8i8i4i8", bytes, 9)
    r.bornHost, p = host(bytes, p, (r.sysFlag & BORNHOST_V6) ~= 0)
    r.storeTimestamp, p = string.unpack(">i8", bytes, p)
    r.storeHost, p, r.store_ip, r.store_port = host(bytes, p, (r.sysFlag & STOREHOST_V6) ~= 0)
    r.reconsumeTimes, r.preparedTransactionOffset, p = string.unpack(">i4i8", bytes, p)
    r.body, p = string.unpack(">s4", bytes, p)
    r.topic, p = string.unpack(">s1", bytes, p)
    r.properties = string.unpack(">s2", bytes, p)
    return r
end

--- The offset message id: store ip, port, physical offset in hex.
function M.offset_msg_id(r)
    return (r.store_ip .. string.pack(">i4i8", r.store_port, r.phy))
        :gsub(".", function(ch) return ("%02X"):format(ch:byte()) end)
end

function M.props(s)
    local list = {}
    for seg in ((s or "") .. "\2"):gmatch("([^\2]*)\2") do
        local k, v = seg:match("^([^\1]+)\1(.*)$")
        if k then
            list[#list + 1] = { k, v }
        end
    end
    return list
end

function M.get(list, k)
    for _, kv in ipairs(list) do
        if kv[1] == k then
            return kv[2]
        end
    end
    return nil
end

function M.set(list, k, v)
    for _, kv in ipairs(list) do
        if kv[1] == k then
            kv[2] = v
            return
        end
    end
    list[#list + 1] = { k, v }
end

function M.del(list, k)
    for i, kv in ipairs(list) do
        if kv[1] == k then
            table.remove(list, i)
            return
        end
    end
end

function M.encode_props(list)
    local parts = {}
    for i, kv in ipairs(list) do
        parts[i] = kv[1] .. "\1" .. kv[2]
    end
    return table.concat(parts, "\2")
end

return M
