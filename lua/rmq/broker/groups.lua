-- Subscription groups (RocketMQ's SubscriptionGroupManager): one typed
-- table in C for every worker (rmq.config_table, as the topics), loaded
-- from STORE/config/subscriptionGroup.json and persisted by the main
-- thread when it changed.  Defaults: protocol.md 6.11.
local net = require("rmq.net")
local configfile = require("rmq.configfile")
local config_table = require("rmq.config_table")
local tables = require("rmq.broker.tables")

local M = {}

local t = config_table.groups()
M.table = t

M.PERSIST = "broker.persist"   -- as rmq.broker.topics.PERSIST

-- This state's copies of the configs it looked up, kept while the
-- table's generation stays put (tables.cached).  Read-only.
local cached = tables.cached(t)

-- subscriptionGroup.json and its journal (rmq.configfile.journaled).
local save = configfile.journaled(function(conf) return M.path(conf) end, t)

-- The groups a 4.9.8 broker has from its constructor (MixAll names).
M.SYSTEM = {
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS",
}

-- SubscriptionGroupConfig's properties, their types and defaults, in
-- fastjson's (sorted) order.
local FIELDS = {
    { "brokerId", "integer", 0 },
    { "consumeBroadcastEnable", "boolean", true },
    { "consumeEnable", "boolean", true },
    { "consumeFromMinEnable", "boolean", true },
    { "groupName", "string", nil },
    { "notifyConsumerIdsChangedEnable", "boolean", true },
    { "retryMaxTimes", "integer", 16 },
    { "retryQueueNums", "integer", 1 },
    { "whichBrokerWhenConsumeSlowly", "integer", 1 },
}

function M.config(name)
    local cfg = {}
    for _, f in ipairs(FIELDS) do
        cfg[f[1]] = f[3]
    end
    cfg.groupName = name
    return cfg
end

--- A SubscriptionGroupConfig from JSON (a request body or the file):
--- Java's defaults for missing properties, unknown ones ignored.
--- Returns the config, or nil and a reason.
function M.normalize(raw, name)
    if type(raw) ~= "table" or raw[1] ~= nil then
        return nil, "not a JSON object"
    end
    local cfg = M.config(name)
    for _, f in ipairs(FIELDS) do
        local k, ty = f[1], f[2]
        local v = raw[k]
        if v ~= nil and v ~= tables.null then
            if ty == "integer" then
                local i = type(v) == "number" and math.tointeger(v)
                    or (type(v) == "string" and v:match("^%-?%d+$") and math.tointeger(tonumber(v)))
                if not i or i < -2147483648 or i > 2147483647 then
                    return nil, ("%s must be an integer, got %s"):format(k, tostring(v))
                end
                v = i
            elseif ty == "boolean" then
                if type(v) == "string" then
                    v = v:lower() == "true"
                elseif type(v) ~= "boolean" then
                    return nil, ("%s must be true or false, got %s"):format(k, tostring(v))
                end
            elseif type(v) ~= "string" then
                return nil, ("%s must be a string, got %s"):format(k, tostring(v))
            end
            cfg[k] = v
        end
    end
    if cfg.groupName == nil then
        cfg.groupName = name
    end
    return cfg
end

function M.path(conf)
    return conf.storePathRootDir .. "/config/subscriptionGroup.json"
end

--- Main thread, before the workers: the system groups, then the file
--- (which wins); neither moves the DataVersion.
function M.load(conf)
    local doc, err = configfile.read(M.path(conf))
    if err then
        return nil, err
    end
    t:clear()
    for _, name in ipairs(M.SYSTEM) do
        t:put(M.config(name), false, true)
    end
    if doc then
        if type(doc.subscriptionGroupTable) == "table" then
            for name, raw in pairs(doc.subscriptionGroupTable) do
                local cfg, nerr = M.normalize(raw, name)
                if cfg == nil then
                    return nil, ("%s: group %s: %s"):format(M.path(conf), name, nerr)
                end
                if type(name) ~= "string" or name == "" then
                    return nil, ("%s: a group with an empty name"):format(M.path(conf))
                end
                cfg.groupName = name
                t:put(cfg, false, true)
            end
        end
        if type(doc.dataVersion) == "table" then
            local dv = doc.dataVersion
            t:set_data_version({ counter = math.tointeger(dv.counter) or 0,
                                 timestamp = math.tointeger(dv.timestamp) or 0 })
        end
    end
    -- Changes made after the file was last rewritten.
    save.replay(conf, t:data_version().counter, function(raw, dv)
        if raw == nil then
            t:set_data_version(dv)
            return
        end
        local cfg = M.normalize(raw, raw.groupName)
        if cfg and type(cfg.groupName) == "string" and cfg.groupName ~= "" then
            t:put(cfg, false, true)
        end
    end)
    return true
end

--- The group's config; auto-created when the broker allows it or the
--- group is a system group.  Returns nil when unknown and not creatable.
function M.find(conf, name)
    local cfg = cached(name)
    if cfg then
        return cfg
    end
    if conf.autoCreateSubscriptionGroup or name:sub(1, 12) == "CID_RMQ_SYS_" then
        cfg = M.config(name)
        if t:put(cfg, true) then
            net.raise(M.PERSIST)   -- the main thread writes the file now
        end
        return cached(name)
    end
    return nil
end

function M.get(name)
    return cached(name)
end

function M.all()
    return t:all()
end

function M.put(cfg)
    return t:put(cfg)
end

function M.delete(name)
    return t:del(name)
end

function M.data_version()
    return t:data_version()
end

--- {"dataVersion":...,"subscriptionGroupTable":{...}}, the body of
--- GET_ALL_SUBSCRIPTIONGROUP_CONFIG and the file, in Java's order (C).
function M.encode_wrapper()
    return t:encode_wrapper()
end

--- The same bytes, encoded once per table change and shared (as topics).
function M.shared_wrapper()
    return t:shared_wrapper()
end

--- Writes subscriptionGroup.json when the table changed since the
--- last write.  Returns true, nil, the version on disk; or nil, err.
M.persist = save.persist

return M
