-- REGISTER_BROKER bodies (protocol.md §3.1, §3.12): pure decoding, no
-- state, so that specs can feed it anything.
--
--   local register = require "rmq.namesrv.register"
--   local reg, err = register.decode(body, { compressed = bool,
--       bare_wrapper = bool, max_inflated = bytes })
--   reg = { dv = {counter=, timestamp=, state=}, topics = {{name=, read=,
--           write=, perm=, sysflag=}, ...}, filters = {...} }
--   err = a one-line reason when the body cannot be used
--
-- Forms:
--   JSON       RegisterBrokerBody {"filterServerList":[...],
--              "topicConfigSerializeWrapper":{"dataVersion":{...},
--              "topicConfigTable":{topic: TopicConfig}}} (5.x adds the
--              static-topic maps, ignored here, whose bare numeric keys
--              rmq.fastjson accepts);
--   bare       a TopicConfigSerializeWrapper alone (brokers older than
--              V3_0_11 send that);
--   compressed one zlib stream of int32-length-prefixed records:
--              DataVersion JSON, topic count, per topic the text form
--              "name read write perm filterType [attributes]", the filter
--              server list JSON (5.x appends mapping records: ignored).
--   nil body   an empty registration with DataVersion {0, 0}.
--
-- Topics are returned sorted by name, so registrations apply in a
-- deterministic order.  Missing TopicConfig numbers take Java's defaults
-- (16 read / 16 write queues, perm 6, sysflag 0).
local core = require "rmq.core"
local fastjson = require "rmq.fastjson"

local M = {}

local DEFAULT_QUEUES = 16
local DEFAULT_PERM = 6
local FILTER_TYPES = { SINGLE_TAG = true, MULTI_TAG = true }

-- TopicConfig's numbers are Java ints, and a queue count is not
-- negative: anything else would reach the registry (whose C fields are
-- int32) truncated, and clients as a broken route.
local INT32_MIN, INT32_MAX = -2147483648, 2147483647
local COUNT = { 0, INT32_MAX }
local INT32 = { INT32_MIN, INT32_MAX }

local function in_range(i, range, what)
    if range and (i < range[1] or i > range[2]) then
        error(("%s is %d, outside %d..%d"):format(what, i, range[1], range[2]), 0)
    end
    return i
end

local function int_field(t, key, dflt, where, range)
    local v = t[key]
    if v == nil or v == fastjson.null then
        return dflt
    end
    local i = fastjson.int(v)
    if i == nil then
        error(("%s.%s is not an integer (%s)"):format(where, key, tostring(v)), 0)
    end
    return in_range(i, range, where .. "." .. key)
end

local function decode_dv(t, where)
    if t == nil or t == fastjson.null then
        return { counter = 0, timestamp = 0 }
    end
    if type(t) ~= "table" then
        error(where .. " is not an object", 0)
    end
    local dv = {
        counter = int_field(t, "counter", 0, where),
        timestamp = int_field(t, "timestamp", 0, where),
    }
    if t.stateVersion ~= nil and t.stateVersion ~= fastjson.null then
        dv.state = int_field(t, "stateVersion", 0, where)
    end
    return dv
end

local function by_name(a, b)
    return a.name < b.name
end

local function decode_topics(tct)
    local topics = {}
    if tct == nil or tct == fastjson.null then
        return topics
    end
    if type(tct) ~= "table" then
        error("topicConfigTable is not an object", 0)
    end
    for key, tc in pairs(tct) do
        local where = "topicConfigTable[" .. tostring(key) .. "]"
        if type(tc) ~= "table" then
            error(where .. " is not an object", 0)
        end
        local name = tc.topicName
        if name == nil or name == fastjson.null then
            name = key
        end
        if type(name) ~= "string" or name == "" then
            error(where .. ".topicName is not a string", 0)
        end
        topics[#topics + 1] = {
            name = name,
            read = int_field(tc, "readQueueNums", DEFAULT_QUEUES, where, COUNT),
            write = int_field(tc, "writeQueueNums", DEFAULT_QUEUES, where, COUNT),
            perm = int_field(tc, "perm", DEFAULT_PERM, where, INT32),
            sysflag = int_field(tc, "topicSysFlag", 0, where, INT32),
        }
    end
    table.sort(topics, by_name)
    return topics
end

local function decode_filters(list)
    if list == nil or list == fastjson.null then
        return {}
    end
    if type(list) ~= "table" then
        error("filterServerList is not an array", 0)
    end
    local out = {}
    for i = 1, #list do
        if type(list[i]) ~= "string" then
            error("filterServerList[" .. i .. "] is not a string", 0)
        end
        out[i] = list[i]
    end
    return out
end

local function decode_json(body, bare)
    local t, err = fastjson.decode(body)
    if t == nil then
        error("malformed JSON: " .. err, 0)
    end
    if type(t) ~= "table" then
        error("the body is not a JSON object", 0)
    end
    local wrapper, filters = t, nil
    if not bare then
        wrapper = t.topicConfigSerializeWrapper
        if wrapper == nil or wrapper == fastjson.null then
            wrapper = {}
        elseif type(wrapper) ~= "table" then
            error("topicConfigSerializeWrapper is not an object", 0)
        end
        filters = decode_filters(t.filterServerList)
    end
    return {
        dv = decode_dv(wrapper.dataVersion, "dataVersion"),
        topics = decode_topics(wrapper.topicConfigTable),
        filters = filters,
    }
end

-- TopicConfig.decode(): "name read write perm filterType [attributes]".
local function decode_topic_text(s, i)
    local f = {}
    for part in (s .. " "):gmatch("(.-) ") do
        f[#f + 1] = part
    end
    local where = "topic record " .. i
    if #f < 5 then
        error(("%s has %d fields, needs 5: %q"):format(where, #f, s:sub(1, 80)), 0)
    end
    local nums = {}
    for k = 2, 4 do
        nums[k] = fastjson.int(f[k])
        if nums[k] == nil or not f[k]:match("^[+-]?%d+$") then
            error(("%s: field %d is not an integer: %q"):format(where, k, f[k]), 0)
        end
        in_range(nums[k], k == 4 and INT32 or COUNT, ("%s: field %d"):format(where, k))
    end
    if not FILTER_TYPES[f[5]] then
        error(("%s: unknown topicFilterType %q"):format(where, f[5]), 0)
    end
    if f[1] == "" then
        error(where .. " has an empty topic name", 0)
    end
    return { name = f[1], read = nums[2], write = nums[3], perm = nums[4], sysflag = 0 }
end

local function decode_compressed(body, max_inflated)
    local raw, err = core.inflate(body, max_inflated)
    if raw == nil then
        error(err, 0)
    end
    local pos, n = 1, #raw
    local function int32(what)
        if pos + 3 > n then
            error("compressed body ends inside " .. what, 0)
        end
        local v = string.unpack(">i4", raw, pos)
        pos = pos + 4
        return v
    end
    local function bytes(len, what)
        if len < 0 or pos + len - 1 > n then
            error(("compressed body: %s length %d exceeds the data"):format(what, len), 0)
        end
        local s = raw:sub(pos, pos + len - 1)
        pos = pos + len
        return s
    end
    local dvt, derr = fastjson.decode(bytes(int32("the DataVersion length"), "DataVersion"))
    if dvt == nil then
        error("malformed DataVersion JSON: " .. derr, 0)
    end
    local dv = decode_dv(dvt, "dataVersion")
    local count = int32("the topic count")
    if count < 0 or count * 4 > n - pos + 1 then
        error(("compressed body: impossible topic count %d"):format(count), 0)
    end
    local byname, topics = {}, {}
    for i = 1, count do
        local t = decode_topic_text(bytes(int32("a topic length"), "topic"), i)
        if byname[t.name] == nil then
            topics[#topics + 1] = t
        else
            topics[byname[t.name]] = t
        end
        byname[t.name] = byname[t.name] or #topics
    end
    table.sort(topics, by_name)
    local filters = {}
    local fl = bytes(int32("the filter server list length"), "filter server list")
    local list = fastjson.decode(fl)
    if type(list) == "table" then
        filters = decode_filters(list)
    end
    return { dv = dv, topics = topics, filters = filters }
end

--- Decodes a REGISTER_BROKER body; see the header of this file.
function M.decode(body, opts)
    opts = opts or {}
    if body == nil or body == "" then
        return { dv = { counter = 0, timestamp = 0 }, topics = {},
                 filters = not opts.bare_wrapper and {} or nil }
    end
    local ok, res = pcall(function()
        if opts.compressed then
            return decode_compressed(body, opts.max_inflated or 64 * 1024 * 1024)
        end
        return decode_json(body, opts.bare_wrapper)
    end)
    if not ok then
        return nil, tostring(res)
    end
    return res
end

return M
