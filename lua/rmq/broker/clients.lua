-- Clients (RocketMQ's ClientManageProcessor, ConsumerManager,
-- ProducerManager, ClientHousekeepingService; protocol.md 4.4-4.6, 4.12):
--
--   HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP
--   (38), CHECK_CLIENT_CONFIG (46); NOTIFY_CONSUMER_IDS_CHANGED (40)
--   pushed one-way to every member of a group whose members or
--   subscribed topics changed.
--
-- The registry is shared by every worker (rmq.shared maps), so a
-- consumer connected to worker 1 is seen by a PULL or a consumer list on
-- worker 2, and its channel is reached from anywhere with net.send_to:
--
--   "broker.consumers"          group -> JSON {consumeType, messageModel,
--                               consumeFromWhere, subscriptionTable =
--                               {topic -> sub (rmq.broker.filter)}}
--   "broker.consumer.<group>"   connection id -> JSON {clientId, language,
--                               version, addr, lastUpdate}
--   "broker.producers"          group -> "1"
--   "broker.producer.<group>"   connection id -> JSON (as above)
--
-- A member is one channel (connection), as in Java: it is added by its
-- first heartbeat, refreshed by the next ones, and removed by
-- UNREGISTER_CLIENT on that channel, by the channel closing (on_close),
-- or by the main thread's scan when its last heartbeat is older than
-- channelExpiredTimeout (120 s).  A group disappears with its last member
-- (and with it its subscriptions: a PULL without FLAG_SUBSCRIPTION then
-- gets 24, as from Java).
--
-- For other modules (pull, admin, transactions):
--   clients.consumer_group(group) -> {consumeType=, messageModel=,
--       consumeFromWhere=, subscriptionTable=, members={[connId]=info}}
--       | nil when the group has no member
--   clients.find_subscription(group, topic) -> sub | nil, group_info
--   clients.producer_members(group) -> {[connId] = info}
--   clients.consumer_groups() / producer_groups() -> {name, ...} sorted
--   clients.notify(b, group)   NOTIFY_CONSUMER_IDS_CHANGED to every member
local cjson = require("cjson")
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local filter = require("rmq.broker.filter")
local groups = require("rmq.broker.groups")
local log = require("rmq.log")
local net = require("rmq.net")
local shared = require("rmq.shared")
local topics = require("rmq.broker.topics")

local req, resp = codes.request, codes.response

local M = {}

local consumers = shared.map("broker.consumers")
local producers = shared.map("broker.producers")

M.RETRY_PREFIX = "%RETRY%"
M.SCAN_INTERVAL = 10000  -- ClientHousekeepingService: every 10 s

-- Enum ordinals (rocketmq-client-cpp sends these) -> Java names.
local ENUMS = {
    consumeType = { [0] = "CONSUME_ACTIVELY", [1] = "CONSUME_PASSIVELY" },
    messageModel = { [0] = "BROADCASTING", [1] = "CLUSTERING" },
    consumeFromWhere = {
        [0] = "CONSUME_FROM_LAST_OFFSET",
        [1] = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        [2] = "CONSUME_FROM_MIN_OFFSET",
        [3] = "CONSUME_FROM_MAX_OFFSET",
        [4] = "CONSUME_FROM_FIRST_OFFSET",
        [5] = "CONSUME_FROM_TIMESTAMP",
    },
}
M.ENUMS = ENUMS

--- An enum field as its Java name, whether sent as name or ordinal.
function M.enum(field, v)
    if type(v) == "string" then
        local n = tonumber(v)
        if n == nil then
            return v
        end
        v = n
    end
    if type(v) == "number" then
        return ENUMS[field][math.tointeger(v) or -1]
    end
    return nil
end

-- {{{ The shared registry

local member_maps = {}

local function member_map(kind, group)
    local k = kind .. group
    local m = member_maps[k]
    if m == nil then
        m = shared.map("broker." .. kind .. "." .. group)
        member_maps[k] = m
    end
    return m
end

local function decode(text)
    if text == nil then
        return nil
    end
    local ok, v = pcall(cjson.decode, text)
    return ok and v or nil
end

local function arrays(sub)
    setmetatable(sub.tagsSet, cjson.array_mt)
    setmetatable(sub.codeSet, cjson.array_mt)
    return sub
end

local function decode_meta(text)
    local meta = decode(text)
    if meta == nil then
        return nil
    end
    local subs = {}
    for topic, sub in pairs(meta.subscriptionTable or {}) do
        sub.subVersion = math.tointeger(sub.subVersion) or 0
        for i, c in ipairs(sub.codeSet or {}) do
            sub.codeSet[i] = math.tointeger(c) or c
        end
        sub.tagsSet = type(sub.tagsSet) == "table" and sub.tagsSet or {}
        sub.codeSet = type(sub.codeSet) == "table" and sub.codeSet or {}
        subs[topic] = arrays(sub)
    end
    meta.subscriptionTable = subs
    return meta
end

local function encode_meta(meta)
    local subs = meta.subscriptionTable
    if next(subs) == nil then
        subs = setmetatable({}, { __jsontype = "object" })
    end
    return cjson.encode({
        consumeType = meta.consumeType, messageModel = meta.messageModel,
        consumeFromWhere = meta.consumeFromWhere, subscriptionTable = subs,
    })
end

local function members_of(kind, group)
    local out = {}
    for id, text in pairs(member_map(kind, group):all()) do
        local info = decode(text)
        if info then
            out[math.tointeger(tonumber(id))] = info
        end
    end
    return out
end

function M.consumer_group(group)
    local members = members_of("consumer", group)
    if next(members) == nil then
        return nil
    end
    local meta = decode_meta(consumers:get(group)) or { subscriptionTable = {} }
    meta.members = members
    return meta
end

-- Decoded group settings, cached per worker until the text changes (a
-- PULL without FLAG_SUBSCRIPTION reads them every time).  Read-only.
local meta_cache = {}

local function group_meta(group)
    local text = consumers:get(group)
    if text == nil then
        meta_cache[group] = nil
        return nil
    end
    local c = meta_cache[group]
    if c and c.text == text then
        return c.meta
    end
    local meta = decode_meta(text)
    meta_cache[group] = { text = text, meta = meta }
    return meta
end

--- The group's subscription of topic (read-only), and the group's
--- settings; nil, nil when the group has no member.
function M.find_subscription(group, topic)
    local meta = group_meta(group)
    if meta == nil or member_map("consumer", group):count() == 0 then
        return nil, nil
    end
    return meta.subscriptionTable[topic], meta
end

function M.producer_members(group)
    return members_of("producer", group)
end

local function names(m)
    local out = {}
    for k in pairs(m:all()) do
        out[#out + 1] = k
    end
    table.sort(out)
    return out
end

function M.consumer_groups()
    return names(consumers)
end

function M.producer_groups()
    return names(producers)
end

--- The clientIDs of a group's live members, in channel order.
function M.client_ids(group)
    local ids, seen = {}, {}
    local members = members_of("consumer", group)
    local conns = {}
    for id in pairs(members) do
        conns[#conns + 1] = id
    end
    table.sort(conns)
    for _, id in ipairs(conns) do
        local cid = members[id].clientId
        if cid and not seen[cid] then
            seen[cid] = true
            ids[#ids + 1] = cid
        end
    end
    return ids
end

--- NOTIFY_CONSUMER_IDS_CHANGED to every member of the group (the
--- broker's and the group's notifyConsumerIdsChangedEnable permitting).
--- Members whose connection is gone are dropped on the way.
function M.notify(b, group)
    if b.conf.notifyConsumerIdsChangedEnable == false then
        return 0
    end
    local g = groups.get(group)
    if g and g.notifyConsumerIdsChangedEnable == false then
        return 0
    end
    local m = member_map("consumer", group)
    local n = 0
    for id in pairs(m:all()) do
        local ok, err = net.send_to(math.tointeger(tonumber(id)),
            { code = req.NOTIFY_CONSUMER_IDS_CHANGED, ext = { consumerGroup = group } })
        if ok then
            n = n + 1
        elseif err == "no such connection" then
            m:del(id)
        end
    end
    return n
end

-- Removes one channel from a group; true when it was a member.
local function remove_member(kind, group, conn_id)
    local m = member_map(kind, group)
    if not m:del(tostring(conn_id)) then
        return false
    end
    if m:count() == 0 then
        -- The group goes with its last member (subscriptions too).
        if kind == "consumer" then
            consumers:del(group)
        else
            producers:del(group)
        end
    end
    return true
end

M.remove_member = remove_member

-- }}}

-- {{{ Heartbeat

-- Java's ConsumerGroupInfo.updateSubscription: adds new topics, replaces
-- a topic only for a newer subVersion, drops topics not in the list.
-- Returns the new table and whether a topic was added or removed
-- ("changed"), and whether anything is to be written at all.
local function update_subscriptions(old, list)
    local new, changed, dirty = {}, false, false
    for _, sub in ipairs(list) do
        local o = old[sub.topic]
        if o == nil then
            new[sub.topic] = sub
            changed, dirty = true, true
        elseif sub.subVersion > o.subVersion then
            new[sub.topic] = sub
            dirty = true
        else
            new[sub.topic] = o
        end
    end
    for topic in pairs(old) do
        if new[topic] == nil then
            changed, dirty = true, true
        end
    end
    return new, changed, dirty
end

local function member_info(ctx, cmd, client_id)
    return cjson.encode({
        clientId = client_id, language = cmd.language, version = cmd.version,
        addr = ctx.peer, lastUpdate = core.now_ms(),
    })
end

-- Per worker: the groups each of its connections joined, for on_close.
local joined = {}

local function remember(ctx, kind, group)
    local j = joined[ctx.id]
    if j == nil then
        j = { consumer = {}, producer = {} }
        joined[ctx.id] = j
    end
    j[kind][group] = true
end

local function register_consumer(b, ctx, cmd, client_id, cd)
    local group = cd.groupName
    if type(group) ~= "string" or group == "" then
        return
    end
    local cfg = groups.find(b.conf, group)
    if cfg then
        topics.ensure(M.RETRY_PREFIX .. group, cfg.retryQueueNums or 1,
                      topics.PERM_READ | topics.PERM_WRITE)
    end
    local subs = {}
    for _, sd in ipairs(type(cd.subscriptionDataSet) == "table" and cd.subscriptionDataSet or {}) do
        local sub = filter.normalize(sd)
        if sub then
            subs[#subs + 1] = arrays(sub)
        end
    end
    -- The channel: a new one joins (changed), a known one is refreshed.
    local m = member_map("consumer", group)
    local info = member_info(ctx, cmd, client_id)
    local joined_now = m:set(tostring(ctx.id), info, true)
    if not joined_now then
        m:set(tostring(ctx.id), info)
    end
    remember(ctx, "consumer", group)
    -- The group's one subscription table and settings (last heartbeat wins).
    local text = consumers:get(group)
    local meta = decode_meta(text) or { subscriptionTable = {} }
    local table_new, changed, dirty = update_subscriptions(meta.subscriptionTable, subs)
    local ct = M.enum("consumeType", cd.consumeType) or meta.consumeType
    local mm = M.enum("messageModel", cd.messageModel) or meta.messageModel
    local cf = M.enum("consumeFromWhere", cd.consumeFromWhere) or meta.consumeFromWhere
    if text == nil or dirty or ct ~= meta.consumeType or mm ~= meta.messageModel
        or cf ~= meta.consumeFromWhere then
        consumers:set(group, encode_meta({
            consumeType = ct, messageModel = mm, consumeFromWhere = cf,
            subscriptionTable = table_new,
        }))
    end
    if joined_now or changed then
        log.info("consumer group %s changed: %s %s (%s), %d member(s)", group,
                 joined_now and "joined" or "resubscribed", client_id, ctx.peer, m:count())
        M.notify(b, group)
    end
end

local function register_producer(ctx, cmd, client_id, pd)
    local group = pd.groupName
    if type(group) ~= "string" or group == "" then
        return
    end
    producers:set(group, "1")
    member_map("producer", group):set(tostring(ctx.id), member_info(ctx, cmd, client_id))
    remember(ctx, "producer", group)
end

local function list(v)
    return type(v) == "table" and v or {}
end

-- }}}

function M.processors(b)
    local P = {}

    P[req.HEART_BEAT] = function(ctx, cmd)
        local hb, err = fastjson.decode(cmd.body or "")
        if type(hb) ~= "table" then
            return { code = resp.SYSTEM_ERROR,
                     remark = "HeartbeatData body is not JSON: " .. tostring(err or "not an object") }
        end
        local client_id = hb.clientID
        if type(client_id) ~= "string" then
            client_id = tostring(client_id or "")
        end
        for _, cd in ipairs(list(hb.consumerDataSet)) do
            if type(cd) == "table" then
                register_consumer(b, ctx, cmd, client_id, cd)
            end
        end
        for _, pd in ipairs(list(hb.producerDataSet)) do
            if type(pd) == "table" then
                register_producer(ctx, cmd, client_id, pd)
            end
        end
        return { code = 0 }
    end

    -- Removes this channel from the named groups (clients send it from
    -- shutdown, once per group; C++ may send it without a heartbeat).
    P[req.UNREGISTER_CLIENT] = function(ctx, cmd)
        local pg, cg = cmd:get("producerGroup"), cmd:get("consumerGroup")
        if pg and pg ~= "" then
            remove_member("producer", pg, ctx.id)
        end
        if cg and cg ~= "" then
            remove_member("consumer", cg, ctx.id)
            -- Java notifies the rest of the group whether or not this
            -- channel was a member.
            M.notify(b, cg)
        end
        return { code = 0, ext = {} }
    end

    P[req.GET_CONSUMER_LIST_BY_GROUP] = function(ctx, cmd)
        local group = cmd:get("consumerGroup")
        if group == nil then
            return { code = resp.SYSTEM_ERROR, remark = "the custom field <consumerGroup> is null" }
        end
        local ids = M.client_ids(group)
        if #ids == 0 then
            return { code = resp.SYSTEM_ERROR, ext = {},
                     remark = "no consumer for this group, " .. group }
        end
        return { code = 0, ext = {},
                 body = cjson.encode({ consumerIdList = setmetatable(ids, cjson.array_mt) }) }
    end

    P[req.CHECK_CLIENT_CONFIG] = function(ctx, cmd)
        local body = fastjson.decode(cmd.body or "")
        local sd = type(body) == "table" and body.subscriptionData or nil
        if type(sd) == "table" and not filter.is_tag(sd.expressionType) then
            -- rmq filters by tag only (no SQL92 engine), whatever
            -- enablePropertyFilter says.
            return { code = resp.SYSTEM_ERROR,
                     remark = "The broker does not support consumer to filter message by "
                         .. tostring(sd.expressionType) }
        end
        return { code = 0 }
    end

    return P
end

--- A connection of this worker closed: it leaves every group it joined;
--- the rest of each consumer group is told.
function M.on_close(b, ctx)
    local j = joined[ctx.id]
    if j == nil then
        return
    end
    joined[ctx.id] = nil
    for group in pairs(j.producer) do
        remove_member("producer", group, ctx.id)
    end
    for group in pairs(j.consumer) do
        if remove_member("consumer", group, ctx.id) then
            log.info("consumer group %s: channel %s closed", group, tostring(ctx.peer))
            M.notify(b, group)
        end
    end
end

-- {{{ Expiry (main thread)

--- Drops members silent for longer than channelExpiredTimeout; consumer
--- groups that lost members are told.  Returns the number dropped.
function M.scan(b, now)
    now = now or core.now_ms()
    local timeout = b.conf.channelExpiredTimeout or 120000
    local dropped = 0
    for _, kind in ipairs({ "consumer", "producer" }) do
        local registry = kind == "consumer" and consumers or producers
        for group in pairs(registry:all()) do
            local lost = false
            for id, text in pairs(member_map(kind, group):all()) do
                local info = decode(text)
                if info == nil or now - (tonumber(info.lastUpdate) or 0) > timeout then
                    if remove_member(kind, group, id) then
                        dropped = dropped + 1
                        lost = true
                        log.warn("%s group %s: channel %s (%s) expired, no heartbeat for %d ms",
                                 kind, group, info and tostring(info.clientId) or "?",
                                 info and tostring(info.addr) or "?", timeout)
                    end
                end
            end
            -- RocketMQ 4.9.8 closes an expired channel and says nothing;
            -- telling the rest of the group lets it rebalance at once.
            if lost and kind == "consumer" then
                M.notify(b, group)
            end
        end
    end
    return dropped
end

local scan_timer

function M.main_init(b)
    -- A new process starts with no clients.
    for _, registry in ipairs({ consumers, producers }) do
        registry:clear()
    end
end

function M.main_start(b)
    -- Every 10 s as in Java; more often when the timeout is that short.
    local timeout = b.conf.channelExpiredTimeout or 120000
    local every = math.max(50, math.min(M.SCAN_INTERVAL, timeout // 4))
    scan_timer = net.timer(every, every, function() M.scan(b) end)
end

function M.main_stop(b)
    if scan_timer then
        scan_timer:stop()
        scan_timer = nil
    end
end

-- }}}

return M
