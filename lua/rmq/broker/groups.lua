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
tables.expose(t, M, cached)   -- get, all, put, delete, data_version, *_wrapper

-- subscriptionGroup.json and its journal: rmq.configfile.table (the
-- file's sequence), this module gives the decoding (below M.load).
local file

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

file = configfile.table({
    store_file = "subscriptionGroup.json",
    table = t,
    entries = "subscriptionGroupTable",
    name_field = "groupName",
    entry = function(name, raw)
        if type(name) ~= "string" or name == "" then
            return nil, "a group with an empty name"
        end
        local cfg, why = M.normalize(raw, name)
        if cfg == nil then
            return nil, ("group %s: %s"):format(name, why)
        end
        return cfg
    end,
    seed = function()
        local list = {}
        for _, name in ipairs(M.SYSTEM) do
            list[#list + 1] = M.config(name)
        end
        return list
    end,
})

M.path = file.path

--- Main thread, before the workers: the system groups, then the file
--- (which wins) and its journal; the system groups do not move the
--- DataVersion.  Returns true, or nil, err.
function M.load(conf)
    return file.load(conf)
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

--- Writes subscriptionGroup.json when the table changed since the
--- last write.  Returns true, nil, the version on disk; or nil, err.
M.persist = file.persist

return M
