-- Subscription groups (RocketMQ's SubscriptionGroupManager): one table
-- for every worker, loaded from STORE/config/subscriptionGroup.json and
-- persisted by the main thread when it changed.  Defaults: protocol.md
-- 6.11.
local configfile = require("rmq.configfile")
local tables = require("rmq.broker.tables")
local cjson = require("cjson")

local M = {}

local t = tables.new("broker.groups")
M.table = t

function M.config(name)
    return {
        groupName = name,
        consumeEnable = true,
        consumeFromMinEnable = true,
        consumeBroadcastEnable = true,
        retryQueueNums = 1,
        retryMaxTimes = 16,
        brokerId = 0,
        whichBrokerWhenConsumeSlowly = 1,
        notifyConsumerIdsChangedEnable = true,
    }
end

function M.path(conf)
    return conf.storePathRootDir .. "/config/subscriptionGroup.json"
end

function M.load(conf)
    local doc, err = configfile.read(M.path(conf))
    if err then
        return nil, err
    end
    t.map:clear()
    if doc then
        for name, cfg in pairs(doc.subscriptionGroupTable or {}) do
            t.map:set(name, cjson.encode(cfg))
        end
        if doc.dataVersion then
            t:set_data_version(doc.dataVersion)
        end
    end
    return true
end

--- The group's config; auto-created when the broker allows it or the
-- group is a system group.  Returns nil when unknown and not creatable.
function M.find(conf, name)
    local cfg = t:get(name)
    if cfg then
        return cfg
    end
    if conf.autoCreateSubscriptionGroup or name:sub(1, 12) == "CID_RMQ_SYS_" then
        cfg = M.config(name)
        t:put(name, cfg, true)
        return t:get(name)
    end
    return nil
end

function M.get(name)
    return t:get(name)
end

function M.all()
    return t:all()
end

function M.put(cfg)
    t:put(cfg.groupName, cfg)
end

function M.delete(name)
    return t:del(name)
end

function M.encode_wrapper()
    local all = t:all()
    if next(all) == nil then
        all = setmetatable({}, { __jsontype = "object" })
    end
    return cjson.encode({ dataVersion = t:data_version(), subscriptionGroupTable = all })
end

local persisted = -1

function M.persist(conf, force)
    local v = t:version()
    if v == persisted and not force then
        return true
    end
    local ok, err = configfile.write(M.path(conf), M.encode_wrapper())
    if ok then
        persisted = v
    end
    return ok, err
end

return M
