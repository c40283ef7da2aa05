-- Topic configs (RocketMQ's TopicConfigManager): every worker sees one
-- typed table in C (rmq.config_table: records under a rwlock, a
-- DataVersion, a generation per change); the main thread loads
-- STORE/config/topics.json at start, creates the system topics, and
-- persists the table when it changed.  Each Lua state caches the
-- configs it read until the table's generation moves, so a lookup is a
-- table index, and creating one topic costs the same with 20 or 20,000
-- topics in the table.
--
-- A TopicConfig is {topicName=, readQueueNums=, writeQueueNums=, perm=,
-- topicFilterType="SINGLE_TAG", topicSysFlag=0, order=false}.
--
-- Creating a topic (create_from_template, ensure, put) asks for an
-- immediate registration with the NameServers (rmq.broker.register.now),
-- as the Java broker does after it creates one.
local net = require("rmq.net")
local fastjson = require("rmq.fastjson")
local configfile = require("rmq.configfile")
local config_table = require("rmq.config_table")
local tables = require("rmq.broker.tables")
local log = require("rmq.log")

local M = {}

M.PERM_PRIORITY, M.PERM_READ, M.PERM_WRITE, M.PERM_INHERIT = 8, 4, 2, 1
M.DEFAULT_TOPIC = "TBW102"
M.NAME_MAX = 127
M.FILTER_TYPES = { SINGLE_TAG = true, MULTI_TAG = true }

local t = config_table.topics()
M.table = t   -- :version(), :count(), :bump(), :data_version(), ...

-- This state's copies of the configs it looked up, kept while the
-- table's generation stays put (tables.cached).  Read-only.
local cached = tables.cached(t)
tables.expose(t, M, cached)   -- get, all, put, delete, data_version, *_wrapper

-- topics.json and its journal: rmq.configfile.table (the file's
-- sequence), this module gives the decoding (M.load).
local file

--- A TopicConfig with RocketMQ's defaults.
function M.config(name, read, write, perm)
    return {
        topicName = name,
        readQueueNums = read or 16,
        writeQueueNums = write or read or 16,
        perm = perm or (M.PERM_READ | M.PERM_WRITE),
        topicFilterType = "SINGLE_TAG",
        topicSysFlag = 0,
        order = false,
    }
end

-- {{{ 5.x topic attributes (TopicAttributes, AttributeUtil)

-- Each known key: its values, whether an existing topic may change it,
-- and the values rmq serves (the others are refused: a BatchCQ queue or
-- a compacted topic would be promised and not kept).
-- (values in the order of 5.x's HashSet, which its refusal prints)
M.ATTRIBUTES = {
    ["message.type"] = { changeable = true, values = { "UNSPECIFIED", "MIXED", "TRANSACTION", "FIFO",
                                                     "DELAY", "NORMAL" } },
    ["queue.type"] = { changeable = false, values = { "SimpleCQ", "BatchCQ" }, served = { SimpleCQ = true } },
    ["cleanup.policy"] = { changeable = false, values = { "DELETE", "COMPACTION" }, served = { DELETE = true } },
    ["reserve.time"] = { changeable = true, served = {} },
}

local function set_text(values)
    return "[" .. table.concat(values, ", ") .. "]"
end

--- 5.x's attribute modification ("+k=v,+k2=v2,-k3") as a list of
--- {op, key, value}; nil, 5.x's message when malformed.
function M.parse_attributes(text)
    local out, seen = {}, {}
    if text == nil or text == "" then
        return out
    end
    for kv in (text .. ","):gmatch("([^,]*),") do
        local key, value = kv:match("^([^=]*)=(.*)$")
        if key then
            value = value:match("^[^=]*")
            if not key:find("+", 1, true) then
                return nil, "add/alter attribute format is wrong: " .. key
            end
        else
            key, value = kv, ""
            if not key:find("-", 1, true) then
                return nil, "delete attribute format is wrong: " .. key
            end
        end
        if seen[key] then
            return nil, "key duplication: " .. key
        end
        seen[key] = true
        out[#out + 1] = { op = key:sub(1, 1), key = key:sub(2), value = value }
    end
    return out
end

--- The attributes of a topic after a modification (AttributeUtil
--- .alterCurrentAttributes): create (the topic is new), current (its
--- attributes or nil), mods (parse_attributes).  Returns the table, or
--- nil, 5.x's message.
function M.alter_attributes(create, current, mods)
    local out, keys = {}, {}
    for k, v in pairs(current or {}) do
        out[k] = v
    end
    for _, m in ipairs(mods) do
        local key = m.key
        if key == "" or key:find("[+-]") then
            return nil, "kv string format wrong."
        end
        if keys[key] then
            return nil, "alter duplication key. key: " .. key
        end
        keys[key] = true
        local a = M.ATTRIBUTES[key]
        if create and m.op ~= "+" then
            return nil, "only add attribute is supported while creating topic. key: " .. key
        elseif not create and m.op ~= "+" and m.op ~= "-" then
            return nil, "wrong format key: " .. key
        elseif not create and m.op == "-" and out[key] == nil then
            return nil, "attempt to delete a nonexistent key: " .. key
        elseif a == nil then
            return nil, "unsupported key: " .. key
        elseif not create and not a.changeable then
            return nil, "attempt to update an unchangeable attribute. key: " .. key
        end
        if m.op == "-" then
            out[key] = nil
        else
            local ok = a.values == nil
            for _, v in ipairs(a.values or {}) do
                ok = ok or v == m.value
            end
            if not ok then
                return nil, "value is not in set: " .. set_text(a.values)
            end
            if a.served and not a.served[m.value] then
                return nil, ("attribute %s=%s is not served by rmq"):format(key, m.value)
            end
            out[key] = m.value
        end
    end
    return out
end

-- }}}

-- Topics a client may not send to (protocol.md 6.2).
M.NOT_ALLOWED_SEND = {
    SCHEDULE_TOPIC_XXXX = true, RMQ_SYS_TRANS_HALF_TOPIC = true,
    RMQ_SYS_TRANS_OP_HALF_TOPIC = true, TRANS_CHECK_MAX_TIME_TOPIC = true,
    SELF_TEST_TOPIC = true, OFFSET_MOVED_EVENT = true,
    -- rmq: timer records name the topic they are delivered to; only the
    -- send rule may write them (5.x stores a direct send as is).
    rmq_sys_wheel_timer = true,
}

-- TopicValidator's SYSTEM_TOPIC_SET (4.9.8); the broker adds its cluster
-- and broker names and the reply topic at start (is_system below).
M.SYSTEM = {
    TBW102 = true, SCHEDULE_TOPIC_XXXX = true, BenchmarkTest = true,
    RMQ_SYS_TRANS_HALF_TOPIC = true, RMQ_SYS_TRACE_TOPIC = true,
    RMQ_SYS_TRANS_OP_HALF_TOPIC = true, TRANS_CHECK_MAX_TIME_TOPIC = true,
    SELF_TEST_TOPIC = true, OFFSET_MOVED_EVENT = true,
    -- rmq: timer records name the topic they are delivered to; only the
    -- send rule may write them (5.x stores a direct send as is).
    rmq_sys_wheel_timer = true,
}

--- True for topics the broker owns (admin may not create/delete them).
function M.is_system(name, conf)
    if M.SYSTEM[name] or name:sub(1, 8) == "rmq_sys_" then
        return true
    end
    if conf and (name == conf.brokerClusterName or name == conf.brokerName
        or name == conf.brokerClusterName .. "_REPLY_TOPIC"
        or (conf.traceTopicEnable and name == conf.msgTraceTopicName)) then
        return true
    end
    return false
end

--- nil when legal, else the reason (TopicValidator).
function M.check_name(name)
    if type(name) ~= "string" or name == "" then
        return "the topic name is blank"
    end
    if #name > M.NAME_MAX then
        return "the topic name is longer than 127 characters"
    end
    if not name:match("^[%%|%w_%-]+$") then
        return ("the topic[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$"):format(name)
    end
    return nil
end

--- nil when legal, else the remark a 4.9.8 broker's admin processor
--- answers (TopicValidator.validateTopic(topic, response), in its order).
function M.admin_check_name(name)
    if type(name) ~= "string" or not name:find("%S") then
        return "The specified topic is blank."
    end
    if not name:match("^[%%|%w_%-]+$") then
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    end
    if #name > M.NAME_MAX then
        return "The specified topic is longer than topic max length."
    end
    return nil
end

-- The topics a 4.9.8 broker creates in TopicConfigManager's constructor.
local function system_topics(conf)
    local rw, all = M.PERM_READ | M.PERM_WRITE, M.PERM_READ | M.PERM_WRITE | M.PERM_INHERIT
    local function named(enabled)
        return M.PERM_INHERIT | (enabled ~= false and rw or 0)
    end
    local list = {
        M.config("SELF_TEST_TOPIC", 1, 1, rw),
    }
    if conf.autoCreateTopicEnable then
        list[#list + 1] = M.config(M.DEFAULT_TOPIC, conf.defaultTopicQueueNums,
                                   conf.defaultTopicQueueNums, all)
    end
    list[#list + 1] = M.config("BenchmarkTest", 1024, 1024, rw)
    list[#list + 1] = M.config(conf.brokerClusterName, 16, 16, named(conf.clusterTopicEnable))
    list[#list + 1] = M.config(conf.brokerName, 1, 1, named(conf.brokerTopicEnable))
    list[#list + 1] = M.config("OFFSET_MOVED_EVENT", 1, 1, rw)
    list[#list + 1] = M.config("SCHEDULE_TOPIC_XXXX", 18, 18, rw)
    if conf.traceTopicEnable then
        list[#list + 1] = M.config(conf.msgTraceTopicName or "RMQ_SYS_TRACE_TOPIC", 1, 1, rw)
    end
    list[#list + 1] = M.config(conf.brokerClusterName .. "_REPLY_TOPIC", 1, 1, rw)
    return list
end

local int = math.tointeger

-- A TopicConfig's numbers and their ranges (PermName bits; a topic has
-- at most 65535 queues).
local NUMERIC = {
    { "readQueueNums", 0, 65535 }, { "writeQueueNums", 0, 65535 },
    { "perm", 0, 15 }, { "topicSysFlag", -2147483648, 2147483647 },
}

-- A TopicConfig from a file or a request, with Java's defaults for what
-- is missing; nil, reason when a field has the wrong type or range, or
-- the topic has no name.
function M.normalize(name, cfg)
    if type(cfg) ~= "table" then
        return nil, ("topic %s: not an object"):format(name)
    end
    local out = M.config(name)
    for _, f in ipairs(NUMERIC) do
        local k, min, max = f[1], f[2], f[3]
        local v = cfg[k]
        if v ~= nil then
            v = type(v) == "number" and int(v) or nil
            if v == nil then
                return nil, ("topic %s: %s is not an integer"):format(name, k)
            end
            if v < min or v > max then
                return nil, ("topic %s: %s %d is not in %d..%d"):format(name, k, v, min, max)
            end
            out[k] = v
        end
    end
    if cfg.topicFilterType ~= nil then
        if not M.FILTER_TYPES[cfg.topicFilterType] then
            return nil, ("topic %s: unknown topicFilterType %s"):format(name, tostring(cfg.topicFilterType))
        end
        out.topicFilterType = cfg.topicFilterType
    end
    if cfg.order ~= nil then
        out.order = cfg.order == true
    end
    if type(cfg.attributes) == "table" and next(cfg.attributes) ~= nil then
        local mods = {}
        for k, v in pairs(cfg.attributes) do
            mods[#mods + 1] = { op = "+", key = k, value = tostring(v) }
        end
        table.sort(mods, function(a, b) return a.key < b.key end)
        local attrs, why = M.alter_attributes(true, nil, mods)
        if attrs == nil then
            return nil, ("topic %s: attributes: %s"):format(name, why)
        end
        out.attributes = attrs
    end
    if type(cfg.topicName) == "string" and cfg.topicName ~= "" then
        out.topicName = cfg.topicName
    end
    if type(out.topicName) ~= "string" or out.topicName == "" then
        return nil, "a topic config without a topic name"
    end
    return out
end

file = configfile.table({
    store_file = "topics.json",
    table = t,
    entries = "topicConfigTable",
    name_field = "topicName",
    entry = function(name, raw) return M.normalize(name, raw) end,
    seed = system_topics,
})

M.path = file.path

--- Main thread, before the workers: the table from disk plus the system
-- topics.  Returns nil, err when the file is unreadable.
--
-- As in Java, the system topics are in the table before the file is
-- read (the file wins for topics it has), and neither changes the
-- DataVersion: a new broker registers with counter 0.
function M.load(conf)
    local ok, err, replayed = file.load(conf)
    if not ok then
        return nil, err
    end
    if replayed > 0 then
        log.info("topics: %d config(s) replayed from %s.journal", replayed, M.path(conf))
    end
    if not conf.autoCreateTopicEnable then
        -- Without auto-create the template must not be inheritable
        -- (RocketMQ forces TBW102 to RW).
        local tbw = t:get(M.DEFAULT_TOPIC)
        if tbw and (tbw.perm & M.PERM_INHERIT) ~= 0 then
            tbw.perm = M.PERM_READ | M.PERM_WRITE
            t:put(tbw)
        end
    end
    return true
end

M.PERSIST = "broker.persist"   -- raised: the main thread persists the tables now

-- After a topic is created: its journal line written (any thread; no
-- fsync, the main thread's persist raised here syncs it), so a SIGKILL
-- after the answer the creating request gets keeps the topic, as the
-- Java broker writes topics.json before it answers
-- (createTopicInSendMessageMethod, createTopicInSendMessageBackMethod);
-- and an immediate registration (without a require cycle: register
-- needs this module).
local function changed()
    local ok, err = file.append()
    if not ok then
        -- The main thread's persist tries again (and logs its own error).
        log.error("topics: cannot append a created topic to the journal: %s", tostring(err))
    end
    local rok, register = pcall(require, "rmq.broker.register")
    if rok and register.now then
        register.now()
    end
    net.raise(M.PERSIST)
end

-- {{{ Encoding, as a 4.9.8 broker writes it (in C: rmq.config_table)

--- {dataVersion=, topicConfigTable=} as RocketMQ's
-- TopicConfigSerializeWrapper, as Lua tables (O(topics): for admin
-- listings, not for hot paths).
function M.wrapper()
    return { dataVersion = t:data_version(), topicConfigTable = t:all() }
end


--- One TopicConfig as a 5.x broker writes it (GET_TOPIC_CONFIG): the
--- 4.9.8 fields plus `attributes` ({"+message.type": "FIFO", ...}).
function M.encode5(cfg)
    local out = {}
    for k, v in pairs(cfg) do
        out[k] = v
    end
    out.attributes = cfg.attributes or {}
    return fastjson.encode(out)
end

--- The REGISTER_BROKER body with the topics changed after table version
--- `since` (0 or nil: all), JSON or (compressed) the zlib stream of
--- text records; perm, when given, replaces every topic's permission;
--- offset/limit: only that part of the table, in its order (split
--- registration).  Returns body, the number of topics in it, the table
--- version it covers.
function M.register_body(compressed, perm, since, offset, limit)
    return t:register_body(compressed, perm or -1, since or 0, offset or 0, limit or 0)
end

-- }}}

--- Saves what changed since the last save: appended to the journal, or
--- topics.json rewritten (force: always rewritten, the journal dropped).
--- Returns true, nil, the table version now on disk; or nil, err.
M.persist = file.persist

--- Auto-creates `name` from the template topic the producer named
-- (createTopicInSendMessageMethod, protocol.md 6.2).  Returns the new
-- config, or nil, reason; a third value true when this call created it.
function M.create_from_template(name, template, queue_nums)
    local tpl = t:get(template)
    if tpl == nil then
        return nil, ("the default topic %s does not exist"):format(template)
    end
    if (tpl.perm & M.PERM_INHERIT) == 0 then
        return nil, ("the default topic %s may not be inherited (perm %d)"):format(template, tpl.perm)
    end
    local n = math.min(math.tointeger(queue_nums) or 4, tpl.writeQueueNums)
    if n < 1 then
        return nil, ("a topic needs at least 1 queue (defaultTopicQueueNums %s, %s has %d write queues)")
            :format(tostring(queue_nums), template, tpl.writeQueueNums)
    end
    local cfg = M.config(name, n, n, tpl.perm & ~M.PERM_INHERIT)
    cfg.topicFilterType = tpl.topicFilterType or "SINGLE_TAG"
    if not t:put(cfg, true) then
        return t:get(name)  -- another worker created it first
    end
    changed()
    return cfg, nil, true
end

--- Creates a topic with fixed queue numbers if missing (%RETRY%, %DLQ%).
--- Returns the config and whether this call created it.
function M.ensure(name, queue_nums, perm)
    local cfg = t:get(name)
    if cfg then
        return cfg, false
    end
    cfg = M.config(name, queue_nums, queue_nums, perm or (M.PERM_READ | M.PERM_WRITE))
    local created = t:put(cfg, true)
    if created then
        changed()
    end
    return t:get(name), created
end

--- The register reply's ORDER_TOPIC_CONFIG KV table
-- (TopicConfigManager.updateOrderTopicConfig): topics in it become
-- order=true, all others order=false.  Returns true if a topic changed
-- (the DataVersion moved then).
function M.apply_order(kv)
    if type(kv) ~= "table" then
        return false
    end
    local n = 0
    for name, cfg in pairs(t:all()) do
        local want = kv[name] ~= nil
        if (cfg.order == true) ~= want then
            local copy = {}
            for k, v in pairs(cfg) do
                copy[k] = v
            end
            copy.order = want
            t:put(copy, false, true)
            n = n + 1
            log.info("topic %s: order=%s (NameServer ORDER_TOPIC_CONFIG)", name, tostring(want))
        end
    end
    if n > 0 then
        t:bump()
    end
    return n > 0
end

return M
