-- The subscription group family of `rmq admin`: updateSubGroup,
-- deleteSubGroup and getConsumerConfig, as 4.9.8's mqadmin
-- (UpdateSubGroupSubCommand, DeleteSubscriptionGroupCommand,
-- GetConsumerConfigSubCommand): the same options, requests and output.
--
--   group.update(ctx, {groupName=, brokerAddr= | clusterName=, ...}) -> {brokers=, config=}
--   group.delete(ctx, {groupName=, brokerAddr= | clusterName=, removeOffset=}) -> {brokers=, ...}
--   group.config(ctx, {groupName=}) -> {{clusterName=, brokerName=, brokerAddr=, config=}, ...}
local fastjson = require("rmq.fastjson")
local codes = require("rmq.codes")
local remote = require("rmq.admin.remote")
local rpc = require("rmq.admin.rpc")

local req = codes.request

local M = {}

-- SubscriptionGroupConfig's fields in declaration order (getConsumerConfig
-- prints them so, and so does its toString).
M.FIELDS = { "groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable", "retryQueueNums",
             "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly", "notifyConsumerIdsChangedEnable" }

local function parse_bool(v)
    return tostring(v):lower() == "true"      -- Boolean.parseBoolean
end

local function parse_int(o, name)
    local n = math.tointeger(tonumber(o[name]))
    if n == nil then
        error(remote.usage(("--%s: %q is not an integer"):format(name, tostring(o[name]))), 0)
    end
    return n
end

-- The 5.x fields, shown (after consumeBroadcastEnable and retryMaxTimes,
-- where 5.x's toString has them) only for a group that has them.
local V5_AFTER = { consumeBroadcastEnable = "consumeMessageOrderly", retryMaxTimes = "groupRetryPolicy" }

local function show(v)
    return type(v) == "table" and fastjson.encode(v) or tostring(v)
end

--- The fields shown for g: 4.9.8's, and the 5.x ones g has.
function M.fields(g)
    local out = {}
    for _, f in ipairs(M.FIELDS) do
        out[#out + 1] = f
        local v5 = V5_AFTER[f]
        if v5 and g[v5] ~= nil then
            out[#out + 1] = v5
        end
    end
    return out
end

--- SubscriptionGroupConfig.toString.
function M.config_string(g)
    local parts = {}
    for i, f in ipairs(M.fields(g)) do
        parts[i] = f .. "=" .. show(g[f])
    end
    return "SubscriptionGroupConfig [" .. table.concat(parts, ", ") .. "]"
end

function M.update(ctx, o)
    -- mqadmin starts from the Java defaults but turns broadcast and
    -- from-min off unless asked.
    local g = {
        groupName = o.groupName, consumeEnable = true, consumeFromMinEnable = false, consumeBroadcastEnable = false,
        retryQueueNums = 1, retryMaxTimes = 16, brokerId = 0, whichBrokerWhenConsumeSlowly = 1,
        notifyConsumerIdsChangedEnable = true,
    }
    for opt, field in pairs({ consumeEnable = "consumeEnable", consumeFromMinEnable = "consumeFromMinEnable",
                              consumeBroadcastEnable = "consumeBroadcastEnable",
                              notifyConsumerIdsChanged = "notifyConsumerIdsChangedEnable" }) do
        if o[opt] ~= nil then
            g[field] = parse_bool(o[opt])
        end
    end
    for _, opt in ipairs({ "retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly" }) do
        if o[opt] ~= nil then
            g[opt] = parse_int(o, opt)
        end
    end
    -- 5.x's -o and -p: the group then carries both 5.x fields (5.x's
    -- mqadmin always sends them; without either we send 4.9.8's body).
    if o.consumeMessageOrderly ~= nil or o.groupRetryPolicy ~= nil then
        g.consumeMessageOrderly = o.consumeMessageOrderly ~= nil and parse_bool(o.consumeMessageOrderly) or false
        g.groupRetryPolicy = { type = "CUSTOMIZED" }
        if o.groupRetryPolicy ~= nil then
            local ok, raw = pcall(fastjson.decode, o.groupRetryPolicy)
            if not ok or type(raw) ~= "table" then
                error(remote.usage(("--groupRetryPolicy: %q is not a JSON object"):format(o.groupRetryPolicy)), 0)
            end
            g.groupRetryPolicy = raw
        end
    end
    local done = {}
    for _, addr in ipairs(remote.targets(ctx, o, "clusterName")) do
        remote.ok(ctx, addr, { code = req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = fastjson.encode(g) })
        done[#done + 1] = addr
    end
    return { brokers = done, config = g }
end

function M.delete(ctx, o)
    local remove = o.removeOffset ~= nil and parse_bool(o.removeOffset) or false
    local addrs = remote.targets(ctx, o, "clusterName")
    local out = { group = o.groupName, cluster = not o.brokerAddr and o.clusterName or nil, brokers = {},
                  removeOffset = remove }
    for _, addr in ipairs(addrs) do
        remote.ok(ctx, addr, { code = req.DELETE_SUBSCRIPTIONGROUP,
                               ext = { groupName = o.groupName, removeOffset = remove } })
        out.brokers[#out.brokers + 1] = addr
    end
    if out.cluster then
        -- As mqadmin: with -c the group's retry and DLQ topics go too,
        -- from the masters and the NameServers (one missing is no error).
        out.topicsDeleted = {}
        for _, topic in ipairs({ "%RETRY%" .. o.groupName, "%DLQ%" .. o.groupName }) do
            for _, addr in ipairs(addrs) do
                pcall(remote.call, ctx, addr, { code = req.DELETE_TOPIC_IN_BROKER, ext = { topic = topic } })
            end
            for _, ns in ipairs(ctx.namesrv) do
                pcall(remote.call, ctx, ns, { code = req.DELETE_TOPIC_IN_NAMESRV, ext = { topic = topic } })
            end
            out.topicsDeleted[#out.topicsDeleted + 1] = topic
        end
    end
    return out
end

--- The group's config on every broker that has it (examineSubscriptionGroupConfig
--- reads GET_ALL_SUBSCRIPTIONGROUP_CONFIG of each broker).
function M.config(ctx, o)
    local out = {}
    for _, b in ipairs(rpc.brokers(ctx)) do
        local t = rpc.json(ctx, b.addr, { code = req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG })
        local g = (t.subscriptionGroupTable or {})[o.groupName]
        if g then
            local cfg = {}
            for _, f in ipairs(M.fields(g)) do
                cfg[f] = g[f]
            end
            out[#out + 1] = { clusterName = b.cluster, brokerName = b.name, brokerAddr = b.addr, config = cfg }
        end
    end
    if #out == 0 then
        error(remote.failed(nil, ("no broker has subscription group %s"):format(o.groupName)), 0)
    end
    return out
end

M.commands = {
    {
        name = "updateSubGroup", desc = "Update or create subscription group",
        options = {
            { "b", "brokerAddr", arg = true, desc = "create subscription group to which broker" },
            { "c", "clusterName", arg = true, desc = "create subscription group to which cluster" },
            { "g", "groupName", arg = true, required = true, desc = "consumer group name" },
            { "s", "consumeEnable", arg = true, desc = "consume enable" },
            { "m", "consumeFromMinEnable", arg = true, desc = "from min offset" },
            { "d", "consumeBroadcastEnable", arg = true, desc = "broadcast" },
            { "o", "consumeMessageOrderly", arg = true, desc = "consume message orderly" },
            { "q", "retryQueueNums", arg = true, desc = "retry queue nums" },
            { "r", "retryMaxTimes", arg = true, desc = "retry max times" },
            { "p", "groupRetryPolicy", arg = true,
              desc = "the json string of retry policy ( exp: "
                  .. '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":7200000,"multiplier":2}} '
                  .. '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,5000,10000]}} )' },
            { "i", "brokerId", arg = true, desc = "consumer from which broker id" },
            { "w", "whichBrokerWhenConsumeSlowly", arg = true, desc = "which broker id when consume slowly" },
            { "a", "notifyConsumerIdsChanged", arg = true, desc = "notify consumerId changed" },
        },
        check = remote.need_broker_or("clusterName"),
        run = M.update,
        format = function(r)
            local lines = {}
            for _, addr in ipairs(r.brokers) do
                lines[#lines + 1] = ("create subscription group to %s success."):format(addr)
            end
            lines[#lines + 1] = M.config_string(r.config)
            return table.concat(lines, "\n")
        end,
    },
    {
        name = "deleteSubGroup", desc = "Delete subscription group from broker.",
        options = {
            { "b", "brokerAddr", arg = true, desc = "delete subscription group from which broker" },
            { "c", "clusterName", arg = true, desc = "delete subscription group from which cluster" },
            { "g", "groupName", arg = true, required = true, desc = "subscription group name" },
            { "r", "removeOffset", arg = true, desc = "remove offset" },
        },
        check = remote.need_broker_or("clusterName"),
        run = M.delete,
        format = function(r)
            local lines = {}
            for _, addr in ipairs(r.brokers) do
                if r.cluster then
                    lines[#lines + 1] = ("delete subscription group [%s] from broker [%s] in cluster [%s] success.")
                        :format(r.group, addr, r.cluster)
                else
                    lines[#lines + 1] = ("delete subscription group [%s] from broker [%s] success.")
                        :format(r.group, addr)
                end
            end
            return table.concat(lines, "\n")
        end,
    },
    {
        name = "getConsumerConfig", desc = "Get consumer config by subscription group name!",
        options = { { "g", "groupName", arg = true, required = true, desc = "subscription group name" } },
        run = M.config,
        format = function(list)
            local lines = {}
            for _, info in ipairs(list) do
                lines[#lines + 1] = ("=============================%s:%s============================="):format(
                    tostring(info.clusterName), info.brokerName)
                for _, f in ipairs(M.fields(info.config)) do
                    local v = info.config[f]
                    lines[#lines + 1] = ("%-40s=  %s"):format(f, v == nil and "" or show(v))
                end
            end
            return table.concat(lines, "\n")
        end,
    },
}

return M
