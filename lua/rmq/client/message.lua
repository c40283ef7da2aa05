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

--- Java's String.hashCode over the UTF-16 code units of a UTF-8 string
-- (the consume queue's tag hash, protocol.md 5.9).
function M.java_hash(s)
    local h = 0
    local function add(unit)
        h = (h * 31 + unit) & 0xFFFFFFFF
    end
    for _, cp in utf8.codes(s, true) do
        if cp >= 0x10000 then
            cp = cp - 0x10000
            add(0xD800 + (cp >> 10))
            add(0xDC00 + (cp & 0x3FF))
        else
            add(cp)
        end
    end
    if h >= 0x80000000 then
        h = h - 0x100000000
    end
    return h
end

local MAGIC = -626843481          -- 0xDAA320A7, a message
local BLANK = -875286124          -- 0xCBD43194, end of file
local BORNHOST_V6 = 0x10
local STOREHOST_V6 = 0x20

local function host(rec, pos, v6)
    if v6 then
        local a = { rec:byte(pos, pos + 15) }
        local parts = {}
        for i = 1, 16, 2 do
            parts[#parts + 1] = ("%x"):format(a[i] * 256 + a[i + 1])
        end
        local port = string.unpack(">i4", rec, pos + 16)
        return "[" .. table.concat(parts, ":") .. "]:" .. port, pos + 20, rec:sub(pos, pos + 15), port
    end
    local a, b, c, d, port = string.unpack(">BBBBi4", rec, pos)
    return ("%d.%d.%d.%d:%d"):format(a, b, c, d, port), pos + 8, nil, port
end

--- Decodes concatenated commit log records (a PULL body, protocol.md
-- 5.1) into messages.  Compressed bodies are inflated (as consumers do).
-- Returns a list, or nil and the reason for the first bad record.
function M.decode_records(body)
    local out = {}
    local pos, n = 1, #body
    while pos <= n do
        if n - pos + 1 < 8 then
            return nil, "truncated record header"
        end
        local size, magic = string.unpack(">i4i4", body, pos)
        if magic == BLANK then
            break
        end
        if magic ~= MAGIC or size < 91 or pos + size - 1 > n then
            return nil, ("bad record at byte %d (size %d, magic %d)"):format(pos - 1, size, magic)
        end
        local m = { storeSize = size }
        local p = pos + 8
        m.bodyCRC, m.queueId, m.flag, m.queueOffset, m.commitLogOffset, m.sysFlag,
            m.bornTimestamp, p = string.unpack(">i4i4i4i8i8i4i8", body, p)
        m.bornHost, p = host(body, p, (m.sysFlag & BORNHOST_V6) ~= 0)
        m.storeTimestamp, p = string.unpack(">i8", body, p)
        local store_ip6, store_port
        m.storeHost, p, store_ip6, store_port = host(body, p, (m.sysFlag & STOREHOST_V6) ~= 0)
        m.reconsumeTimes, m.preparedTransactionOffset, p = string.unpack(">i4i8", body, p)
        local raw
        raw, p = string.unpack(">s4", body, p)
        m.topic, p = string.unpack(">s1", body, p)
        local props
        props = string.unpack(">s2", body, p)
        m.properties = M.decode_properties(props)
        if (m.sysFlag & M.COMPRESSED_FLAG) ~= 0 then
            local plain, err = core.inflate(raw)
            if not plain then
                return nil, ("message at offset %d: %s"):format(m.commitLogOffset, err)
            end
            raw = plain
        end
        m.body = raw
        m.tags = m.properties.TAGS
        m.keys = m.properties.KEYS
        if store_ip6 == nil then
            m.offsetMsgId = M.offset_msg_id(m.storeHost:match("^([^:]+)"), store_port, m.commitLogOffset)
        else
            m.offsetMsgId = (store_ip6 .. string.pack(">i4i8", store_port, m.commitLogOffset))
                :gsub(".", function(ch) return ("%02X"):format(ch:byte()) end)
        end
        m.msgId = m.properties.UNIQ_KEY or m.offsetMsgId
        out[#out + 1] = m
        pos = pos + size
    end
    return out
end

return M
