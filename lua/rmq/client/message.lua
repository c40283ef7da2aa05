-- Messages on the client side: validation, the properties string, the
-- client unique id (UNIQ_KEY), the offset message id and the records of
-- a PULL body (protocol.md 5.1-5.6).
local core = require("rmq.core")
local formats = require("rmq.message")

local M = {}

M.TOPIC_MAX_LENGTH = 127
M.COMPRESSED_FLAG = 0x1
-- A 4.9.4+ producer marks zlib explicitly: compression type 3 in bits 8-10.
M.COMPRESSION_ZLIB = 0x300

-- The formats themselves are the C the broker uses (rmq.message):
-- properties encoded with sorted keys (deterministic; empty values
-- skipped, as Java skips nulls and drops empties on parse) and decoded
-- with Java's string2messageProperties rules; Java's String.hashCode.
M.encode_properties = formats.encode_properties
M.decode_properties = formats.decode_properties
M.java_hash = formats.java_hash

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

--- Decodes concatenated commit log records (a PULL body, protocol.md
-- 5.1) into messages (rmq.message.decode_record's fields, with
-- properties as a table), compressed bodies inflated as consumers do, and
-- tags, keys and msgId (UNIQ_KEY, else the offset message id) set.
-- Returns a list, or nil and the reason for the first bad record.
function M.decode_records(body)
    local out = {}
    local pos, n = 1, #body
    while pos <= n do
        local m, nxt = formats.decode_record(body, pos)
        if m == nil then
            return nil, nxt
        end
        if (m.sysFlag & M.COMPRESSED_FLAG) ~= 0 then
            local plain, err = core.inflate(m.body)
            if not plain then
                return nil, ("message at offset %d: %s"):format(m.commitLogOffset, err)
            end
            m.body = plain
        end
        m.tags = m.properties.TAGS
        m.keys = m.properties.KEYS
        m.msgId = m.properties.UNIQ_KEY or m.offsetMsgId
        out[#out + 1] = m
        pos = nxt
    end
    return out
end

return M
