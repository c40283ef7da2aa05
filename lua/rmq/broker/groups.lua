-- Subscription groups (RocketMQ's SubscriptionGroupManager): one typed
-- table in C for every worker (rmq.config_table, as the topics), loaded
-- from STORE/config/subscriptionGroup.json and persisted by the main
-- thread when it changed.  Defaults: protocol.md 6.11.
local net = require("rmq.net")
local configfile = require("rmq.configfile")
local config_table = require("rmq.config_table")
local tables = require("rmq.broker.tables")
local log = require("rmq.log")

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

-- 5.x's GroupRetryPolicy: {type="CUSTOMIZED"|"EXPONENTIAL",
-- customizedRetryPolicy={next={ms,...}}, exponentialRetryPolicy=
-- {initial=ms, max=ms, multiplier=n}}; 5.x's defaults for what is missing
-- inside a policy given (ExponentialRetryPolicy: 5 s, 2 h, 2).
M.RETRY_NEXT_MAX = 32   -- levels a customized policy keeps (src/broker/subscription_group.h)
local EXPONENTIAL_DEFAULTS = { initial = 5000, max = 7200000, multiplier = 2 }

local function long(v, what)
    local i = type(v) == "number" and math.tointeger(v)
        or (type(v) == "string" and v:match("^%d+$") and math.tointeger(tonumber(v)))
    if not i or i < 0 then
        return nil, ("%s must be a whole number >= 0, got %s"):format(what, tostring(v))
    end
    return i
end

--- A groupRetryPolicy from JSON, checked.  Returns it, or nil and a reason.
function M.retry_policy(raw)
    if type(raw) ~= "table" or raw[1] ~= nil then
        return nil, "groupRetryPolicy must be a JSON object"
    end
    local out = { type = "CUSTOMIZED" }
    local ty = raw.type
    if ty ~= nil and ty ~= tables.null then
        if ty ~= "CUSTOMIZED" and ty ~= "EXPONENTIAL" then
            return nil, ("groupRetryPolicy.type must be CUSTOMIZED or EXPONENTIAL, got %s"):format(tostring(ty))
        end
        out.type = ty
    end
    local e = raw.exponentialRetryPolicy
    if e ~= nil and e ~= tables.null then
        if type(e) ~= "table" or e[1] ~= nil then
            return nil, "groupRetryPolicy.exponentialRetryPolicy must be a JSON object"
        end
        local p = {}
        for k, d in pairs(EXPONENTIAL_DEFAULTS) do
            local v = e[k]
            if v == nil or v == tables.null then
                p[k] = d
            else
                local i, why = long(v, "groupRetryPolicy.exponentialRetryPolicy." .. k)
                if not i then
                    return nil, why
                end
                p[k] = i
            end
        end
        out.exponentialRetryPolicy = p
    end
    local c = raw.customizedRetryPolicy
    if c ~= nil and c ~= tables.null then
        if type(c) ~= "table" or c[1] ~= nil then
            return nil, "groupRetryPolicy.customizedRetryPolicy must be a JSON object"
        end
        local nx = c.next
        if type(nx) ~= "table" or (next(nx) ~= nil and nx[1] == nil) then
            return nil, "groupRetryPolicy.customizedRetryPolicy.next must be a list of milliseconds"
        end
        if #nx == 0 or #nx > M.RETRY_NEXT_MAX then
            return nil, ("groupRetryPolicy.customizedRetryPolicy.next must have 1..%d levels, got %d")
                :format(M.RETRY_NEXT_MAX, #nx)
        end
        local levels = {}
        for i, v in ipairs(nx) do
            local ms, why = long(v, ("groupRetryPolicy.customizedRetryPolicy.next[%d]"):format(i - 1))
            if not ms then
                return nil, why
            end
            levels[i] = ms
        end
        out.customizedRetryPolicy = { next = levels }
    end
    return out
end

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
    -- The 5.x fields: kept (and written) only when given, so a 4.x
    -- group stays byte for byte what 4.9.8 writes.
    local o = raw.consumeMessageOrderly
    if o ~= nil and o ~= tables.null then
        if type(o) == "string" and (o:lower() == "true" or o:lower() == "false") then
            o = o:lower() == "true"
        elseif type(o) ~= "boolean" then
            return nil, ("consumeMessageOrderly must be true or false, got %s"):format(tostring(o))
        end
        cfg.consumeMessageOrderly = o
    end
    local rp = raw.groupRetryPolicy
    if rp ~= nil and rp ~= tables.null then
        local why
        cfg.groupRetryPolicy, why = M.retry_policy(rp)
        if cfg.groupRetryPolicy == nil then
            return nil, why
        end
    end
    if (cfg.consumeMessageOrderly ~= nil) ~= (cfg.groupRetryPolicy ~= nil) then
        -- 5.x always has both: the one missing takes its default.
        if cfg.consumeMessageOrderly == nil then
            cfg.consumeMessageOrderly = false
        else
            cfg.groupRetryPolicy = { type = "CUSTOMIZED" }
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
            -- In the journal before the answer that relies on it (Java's
            -- findSubscriptionGroupConfig persists there); the main
            -- thread syncs it now.
            local ok, err = file.append()
            if not ok then
                log.error("groups: cannot append a created group to the journal: %s", tostring(err))
            end
            net.raise(M.PERSIST)
        end
        return cached(name)
    end
    return nil
end

--- Writes subscriptionGroup.json when the table changed since the
--- last write.  Returns true, nil, the version on disk; or nil, err.
M.persist = file.persist

return M
