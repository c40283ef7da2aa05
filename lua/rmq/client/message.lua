-- Messages on the client side: validation, the properties string, the
-- client unique id (UNIQ_KEY) and the offset message id (protocol.md
-- 5.4-5.6).
local core = require("rmq.core")

local M = {}

M.NAME_VALUE_SEPARATOR = "\1"
M.PROPERTY_SEPARATOR = "\2"
M.TOPIC_MAX_LENGTH = 127
M.COMPRESSED_FLAG = 0x1
-- A 4.9.4+ producer marks zlib explicitly: compression type 3 in bits 8-10.
M.COMPRESSION_ZLIB = 0x300

--- key\1value\2... without the trailing separator (as Java writes it);
-- keys sorted so the string is deterministic.  Empty values are skipped,
-- as Java skips nulls and drops empties on parse.
function M.encode_properties(props)
    local keys = {}
    for k, v in pairs(props) do
        if v ~= nil and tostring(v) ~= "" then
            keys[#keys + 1] = k
        end
    end
    table.sort(keys)
    local parts = {}
    for i, k in ipairs(keys) do
        parts[i] = k .. "\1" .. tostring(props[k])
    end
    return table.concat(parts, "\2")
end

--- Parses a properties string (Java's string2messageProperties rules).
function M.decode_properties(s)
    local props = {}
    if s == nil then
        return props
    end
    for seg in (s .. "\2"):gmatch("([^\2]*)\2") do
        local k, v = seg:match("^([^\1]+)\1(.+)$")
        if k then
            props[k] = v
        end
    end
    return props
end

--- nil when valid, else the reason (Java's Validators.checkTopic).
function M.check_topic(topic)
    if type(topic) ~= "string" or topic == "" then
        return "the topic is blank"
    end
    if #topic > M.TOPIC_MAX_LENGTH then
        return ("the topic is longer than %d characters"):format(M.TOPIC_MAX_LENGTH)
    end
    if not topic:match("^[%%|%w_%-]+$") then
        return ("the topic[%s] contains characters other than letters, digits, %%, |, _ and -"):format(topic)
    end
    return nil
end

--- nil when valid, else the reason (Validators.checkMessage).
function M.check(msg, maxMessageSize)
    if type(msg) ~= "table" then
        return "the message is not a table"
    end
    local err = M.check_topic(msg.topic)
    if err then
        return err
    end
    if type(msg.body) ~= "string" or #msg.body == 0 then
        return "the message body is empty"
    end
    if #msg.body > maxMessageSize then
        return ("the message body is %d bytes, over maxMessageSize %d"):format(#msg.body, maxMessageSize)
    end
    return nil
end

-- UNIQ_KEY: ip(4) pid(2) loader hash(4) | ms since month start(4) counter(2)
-- in uppercase hex.  The first half is fixed per process.
local uniq = { prefix = nil, counter = 0, month_start = 0, next_month = 0 }

local function month_bounds(now_ms)
    local t = os.date("*t", now_ms // 1000)
    local start = os.time({ year = t.year, month = t.month, day = 1, hour = 0 })
    local nxt = os.time({ year = t.year, month = t.month + 1, day = 1, hour = 0 })
    return start * 1000, nxt * 1000
end

local function ip_bytes()
    -- The address this host is reached on is not knowable without a
    -- connection; like Java without a network, fall back to loopback.
    return string.char(127, 0, 0, 1)
end

function M.uniq_key()
    local now = core.now_ms()
    if uniq.prefix == nil then
        local seed = core.pid() * 2654435761 + now
        uniq.prefix = (ip_bytes() .. string.pack(">I2I4", core.pid() & 0xFFFF, seed & 0xFFFFFFFF))
            :gsub(".", function(c) return ("%02X"):format(c:byte()) end)
    end
    if now >= uniq.next_month then
        uniq.month_start, uniq.next_month = month_bounds(now)
    end
    uniq.counter = (uniq.counter + 1) & 0xFFFF
    return uniq.prefix .. ("%08X%04X"):format((now - uniq.month_start) & 0xFFFFFFFF, uniq.counter)
end

--- Offset message id: store host ip, port and physical offset (5.6).
function M.offset_msg_id(ip, port, phy_offset)
    local a, b, c, d = ip:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if not a then
        return nil
    end
    return ("%02X%02X%02X%02X%08X%016X"):format(tonumber(a), tonumber(b), tonumber(c),
                                                 tonumber(d), port, phy_offset)
end

--- Splits an offset message id into "ip:port" and the physical offset.
function M.decode_offset_msg_id(id)
    if #id ~= 32 then
        return nil
    end
    local a, b, c, d = tonumber(id:sub(1, 2), 16), tonumber(id:sub(3, 4), 16),
                       tonumber(id:sub(5, 6), 16), tonumber(id:sub(7, 8), 16)
    local port = tonumber(id:sub(9, 16), 16)
    local off = tonumber(id:sub(17, 32), 16)
    if not (a and port and off) then
        return nil
    end
    return ("%d.%d.%d.%d:%d"):format(a, b, c, d, port), off
end

return M
