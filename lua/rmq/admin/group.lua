-- The subscription group family of `rmq admin`: updateSubGroup,
-- deleteSubGroup and getConsumerConfig, as 4.9.8's mqadmin
-- (UpdateSubGroupSubCommand, DeleteSubscriptionGroupCommand,
-- GetConsumerConfigSubCommand): the same option letters, requests and
-- output.
--
-- Each command is {name=, desc=, options = {{letter, long, takes_value,
-- desc, required}...}, run = function(c, o) -> result | nil, err, exit,
-- text = function(result) -> string}; c is an rmq.admin.rpc client and o
-- the option values by letter.  Results are plain tables (--json prints
-- them as they are).
local fastjson = require("rmq.fastjson")
local codes = require("rmq.codes")
local rpc = require("rmq.admin.rpc")

local req = codes.request

local M = {}

-- SubscriptionGroupConfig's fields in declaration order (what
-- getConsumerConfig prints), with their Java defaults.
M.FIELDS = { "groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable", "retryQueueNums",
             "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly", "notifyConsumerIdsChangedEnable" }

local function parse_bool(v)
    return tostring(v):lower() == "true"      -- Boolean.parseBoolean
end

local function parse_int(v, letter)
    local n = math.tointeger(tonumber(v))
    if n == nil then
        return nil, ("-%s: %q is not an integer"):format(letter, tostring(v))
    end
    return n
end

--- SubscriptionGroupConfig.toString.
function M.config_string(g)
    local parts = {}
    for i, f in ipairs(M.FIELDS) do
        parts[i] = f .. "=" .. tostring(g[f])
    end
    return "SubscriptionGroupConfig [" .. table.concat(parts, ", ") .. "]"
end

local function update(c, o)
    local g = {
        groupName = o.g, consumeEnable = true, consumeFromMinEnable = false, consumeBroadcastEnable = false,
        retryQueueNums = 1, retryMaxTimes = 16, brokerId = 0, whichBrokerWhenConsumeSlowly = 1,
        notifyConsumerIdsChangedEnable = true,
    }
    for letter, field in pairs({ s = "consumeEnable", m = "consumeFromMinEnable", d = "consumeBroadcastEnable",
                                 a = "notifyConsumerIdsChangedEnable" }) do
        if o[letter] then
            g[field] = parse_bool(o[letter])
        end
    end
    for letter, field in pairs({ q = "retryQueueNums", r = "retryMaxTimes", i = "brokerId",
                                 w = "whichBrokerWhenConsumeSlowly" }) do
        if o[letter] then
            local n, err = parse_int(o[letter], letter)
            if not n then
                return nil, "updateSubGroup: " .. err, rpc.EXIT_USAGE
            end
            g[field] = n
        end
    end
    local addrs, err, exit = c:targets(o, "updateSubGroup")
    if not addrs then
        return nil, err, exit
    end
    local done = {}
    for _, addr in ipairs(addrs) do
        local r, e, x = c:ok(addr, { code = req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = fastjson.encode(g) })
        if not r then
            return nil, e, x
        end
        done[#done + 1] = addr
    end
    return { brokers = done, config = g }
end

local function delete(c, o)
    local addrs, err, exit = c:targets(o, "deleteSubGroup")
    if not addrs then
        return nil, err, exit
    end
    local remove = o.r ~= nil and parse_bool(o.r) or false
    local out = { group = o.g, cluster = o.c, brokers = {}, removeOffset = remove }
    for _, addr in ipairs(addrs) do
        local r, e, x = c:ok(addr, { code = req.DELETE_SUBSCRIPTIONGROUP,
                                     ext = { groupName = o.g, removeOffset = remove } })
        if not r then
            return nil, e, x
        end
        out.brokers[#out.brokers + 1] = addr
    end
    if o.c then
        -- As mqadmin: the group's retry and DLQ topics go too, from every
        -- master and from the NameServers (a missing one is no error).
        out.topicsDeleted = {}
        for _, topic in ipairs({ "%RETRY%" .. o.g, "%DLQ%" .. o.g }) do
            for _, addr in ipairs(addrs) do
                c:call(addr, { code = req.DELETE_TOPIC_IN_BROKER, ext = { topic = topic } })
            end
            for _, ns in ipairs(c.namesrvs) do
                c:call(ns, { code = req.DELETE_TOPIC_IN_NAMESRV, ext = { topic = topic } })
            end
            out.topicsDeleted[#out.topicsDeleted + 1] = topic
        end
    end
    return out
end

local function get_config(c, o)
    local brokers, err, exit = c:brokers()
    if not brokers then
        return nil, err, exit
    end
    local out = {}
    for _, b in ipairs(brokers) do
        local t, e, x = c:json(b.addr, { code = req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG })
        if not t then
            return nil, e, x
        end
        local g = (t.subscriptionGroupTable or {})[o.g]
        if g then
            local cfg = {}
            for _, f in ipairs(M.FIELDS) do
                cfg[f] = g[f]
            end
            out[#out + 1] = { clusterName = b.cluster, brokerName = b.name, brokerAddr = b.addr, config = cfg }
        end
    end
    if #out == 0 then
        return nil, ("getConsumerConfig: no broker has subscription group %s"):format(o.g), rpc.EXIT_REFUSED
    end
    return out
end

M.commands = {
    {
        name = "updateSubGroup", desc = "Update or create subscription group",
        options = {
            { "b", "brokerAddr", true, "create subscription group to which broker" },
            { "c", "clusterName", true, "create subscription group to which cluster" },
            { "g", "groupName", true, "consumer group name", true },
            { "s", "consumeEnable", true, "consume enable" },
            { "m", "consumeFromMinEnable", true, "from min offset" },
            { "d", "consumeBroadcastEnable", true, "broadcast" },
            { "q", "retryQueueNums", true, "retry queue nums" },
            { "r", "retryMaxTimes", true, "retry max times" },
            { "i", "brokerId", true, "consumer from which broker id" },
            { "w", "whichBrokerWhenConsumeSlowly", true, "which broker id when consume slowly" },
            { "a", "notifyConsumerIdsChanged", true, "notify consumerId changed" },
        },
        run = update,
        text = function(r)
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
            { "b", "brokerAddr", true, "delete subscription group from which broker" },
            { "c", "clusterName", true, "delete subscription group from which cluster" },
            { "g", "groupName", true, "subscription group name", true },
            { "r", "removeOffset", true, "remove offset" },
        },
        run = delete,
        text = function(r)
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
        options = { { "g", "groupName", true, "subscription group name", true } },
        run = get_config,
        text = function(list)
            local lines = {}
            for _, info in ipairs(list) do
                lines[#lines + 1] = ("=============================%s:%s============================="):format(
                    tostring(info.clusterName), info.brokerName)
                for _, f in ipairs(M.FIELDS) do
                    local v = info.config[f]
                    lines[#lines + 1] = ("%-40s=  %s"):format(f, v == nil and "" or tostring(v))
                end
            end
            return table.concat(lines, "\n")
        end,
    },
}

return M
