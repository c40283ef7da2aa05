-- Clients (RocketMQ's ClientManageProcessor, ConsumerManager,
-- ProducerManager, ClientHousekeepingService; protocol.md 4.4-4.6, 4.12):
--
--   HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP
--   (38), CHECK_CLIENT_CONFIG (46); NOTIFY_CONSUMER_IDS_CHANGED (40)
--   pushed one-way to every member of a group whose members or
--   subscribed topics changed.
--
-- The registry is C (src/broker/client_registry.c, rmq.client_registry):
-- typed tables behind one rwlock shared by every worker, so a consumer
-- connected to worker 1 is seen by a PULL or a consumer list on worker
-- 2, and its channel is reached from anywhere with net.send_to.  A
-- HEART_BEAT is one C call that reads the body (src/broker/heartbeat.c,
-- no JSON tree) and applies it; its cost is linear in the heartbeat,
-- and a repeat heartbeat changes nothing but lastUpdate.  Lua only acts
-- on what changed: a group new to the registry gets its subscription
-- group (auto-created) and its %RETRY% topic, a changed group is told.
--
-- A heartbeat naming an invalid group or topic, or one past the
-- registry's limits (clientMaxConsumerGroups, clientMaxProducerGroups,
-- clientMaxSubscriptionsPerGroup, clientMaxChannelsPerGroup), is refused
-- whole with SYSTEM_ERROR and a remark naming the field or the limit.
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
--       consumeFromWhere=, unitMode=, subscriptionTable=,
--       members={[connId]=info}} | nil when the group has no member
--   clients.find_subscription(group, topic) -> sub | nil, settings
--       (read-only, cached per worker until the group changes)
--   clients.producer_members(group) -> {[connId] = info}
--   clients.consumer_groups() / producer_groups() -> {name, ...} sorted
--   clients.client_ids(group) -> {clientId, ...} in channel order
--   clients.notify(b, group)   NOTIFY_CONSUMER_IDS_CHANGED to every member
--   clients.registry           the rmq.client_registry handle
local cjson = require("cjson")
local codes = require("rmq.codes")
local core = require("rmq.core")
local creg = require("rmq.client_registry")
local fastjson = require("rmq.fastjson")
local filter = require("rmq.broker.filter")
local groups = require("rmq.broker.groups")
local log = require("rmq.log")
local net = require("rmq.net")
local register = require("rmq.broker.register")
local reply = require("rmq.reply")
local tables = require("rmq.broker.tables")
local topics = require("rmq.broker.topics")
local processors = require("rmq.processors")

local req = codes.request

local M = {}

local reg = creg.shared()
M.registry = reg

M.RETRY_PREFIX = "%RETRY%"
M.SCAN_INTERVAL = 10000  -- ClientHousekeepingService: every 10 s
M.LOG_CHANGES = 10       -- per heartbeat, then one summary line
-- A group whose retry topic a heartbeat created is told again of its
-- members this long after (ms): see heartbeat().
M.RETRY_RENOTIFY_MS = { 1000, 5000 }

-- Enum ordinals (rocketmq-client-cpp sends these) -> Java names.
local ENUMS = {
    consumeType = { [0] = "CONSUME_ACTIVELY", [1] = "CONSUME_PASSIVELY", [2] = "CONSUME_POP" },
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

-- The registry's limits from the conf (RocketMQ has none).
local function limits(conf)
    return {
        maxConsumerGroups = conf.clientMaxConsumerGroups,
        maxProducerGroups = conf.clientMaxProducerGroups,
        maxSubscriptionsPerGroup = conf.clientMaxSubscriptionsPerGroup,
        maxChannelsPerGroup = conf.clientMaxChannelsPerGroup,
    }
end

-- {{{ Views

local function arrays(sub)
    setmetatable(sub.tagsSet, cjson.array_mt)
    setmetatable(sub.codeSet, cjson.array_mt)
    return sub
end

function M.consumer_group(group)
    local g = reg:consumer_group(group)
    if g == nil then
        return nil
    end
    for _, sub in pairs(g.subscriptionTable) do
        arrays(sub)
    end
    return g
end

-- What find_subscription() returned, per worker, until the group's
-- generation moves (a PULL without FLAG_SUBSCRIPTION, Java's default,
-- asks every time): cache[group][topic] = {gen, sub, info}.
local sub_cache, sub_cached = {}, 0
M.SUB_CACHE_MAX = 4096

--- The group's subscription of topic (read-only), and the group's
--- settings {consumeType=, messageModel=, consumeFromWhere=, unitMode=}
--- (read-only); nil, nil when the group has no member.
function M.find_subscription(group, topic)
    local gen = reg:generation(group)
    if gen == nil then
        return nil, nil
    end
    local by_topic = sub_cache[group]
    local c = by_topic and by_topic[topic]
    if c and c[1] == gen then
        return c[2], c[3]
    end
    -- Read after the generation: at least as new as `gen` says.
    local sub, info = reg:subscription(group, topic)
    if info == nil then
        return nil, nil
    end
    if sub then
        arrays(sub)
    end
    if sub_cached >= M.SUB_CACHE_MAX then
        sub_cache, sub_cached = {}, 0
        by_topic = nil
    end
    if by_topic == nil then
        by_topic = {}
        sub_cache[group] = by_topic
    end
    if by_topic[topic] == nil then
        sub_cached = sub_cached + 1
    end
    by_topic[topic] = { gen, sub, info }
    return sub, info
end

function M.producer_members(group)
    return reg:members("producer", group)
end

function M.consumer_groups()
    return reg:groups("consumer")
end

function M.producer_groups()
    return reg:groups("producer")
end

--- The clientIDs of a group's live members, in channel order.
function M.client_ids(group)
    return reg:client_ids(group)
end

--- NOTIFY_CONSUMER_IDS_CHANGED to every member of the group (the
--- broker's and the group's notifyConsumerIdsChangedEnable permitting);
--- `conns` the members when the caller has them.  Members whose
--- connection is gone are dropped on the way.
function M.notify(b, group, conns)
    if b.conf.notifyConsumerIdsChangedEnable == false then
        return 0
    end
    local g = groups.get(group)
    if g and g.notifyConsumerIdsChangedEnable == false then
        return 0
    end
    local cmd = { code = req.NOTIFY_CONSUMER_IDS_CHANGED, ext = { consumerGroup = group } }
    local n = 0
    for _, id in ipairs(conns or reg:conns(group)) do
        local ok, err = net.send_to(id, cmd)
        if ok then
            n = n + 1
        elseif err == "no such connection" then
            reg:remove("consumer", group, id)
        end
    end
    return n
end

--- Removes one channel from a group; true when it was a member.
function M.remove_member(kind, group, conn_id)
    return reg:remove(kind, group, math.tointeger(tonumber(conn_id)))
end

-- }}}

-- {{{ Heartbeat

-- What Java does for a group it registers (ClientManageProcessor
-- .heartBeat): the subscription group (auto-created when allowed) and
-- its retry topic.  Here only for groups new to the registry.
-- Returns true when it created the group's retry topic.
local function new_group(b, group)
    local cfg = groups.find(b.conf, group)
    if cfg then
        local _, created = topics.ensure(M.RETRY_PREFIX .. group, cfg.retryQueueNums or 1,
                                         topics.PERM_READ | topics.PERM_WRITE)
        return created
    end
    return false
end

local function heartbeat(b, ctx, cmd)
    local res, err, kind = reg:heartbeat(ctx.id, cmd.body, cmd.language, cmd.version, ctx.peer)
    if res == nil then
        log.warn("HEART_BEAT from %s refused (%s): %s", tostring(ctx.peer), kind, err)
        return reply.system_error(err)
    end
    local created = {}
    for _, group in ipairs(res.new) do
        if new_group(b, group) then
            created[#created + 1] = group
        end
    end
    if #created > 0 then
        -- As 4.9.8 (createTopicInSendMessageBackMethod, then
        -- registerBrokerAll): the NameServers have the retry topics before
        -- the group is told of its members, so the client's rebalance
        -- finds their routes (else it retries 20 s later).  A round ends
        -- at once when a NameServer refuses the connection.
        local ok, why = register.sync(b, b.conf.registerBrokerTimeoutMills)
        if not ok then
            log.warn("retry topics of new consumer groups not registered yet: %s", tostring(why))
        end
    end
    local changed = res.changed
    for i, group in ipairs(changed) do
        if i <= M.LOG_CHANGES then
            log.info("consumer group %s changed: %s (%s), %d member(s)", group,
                     tostring(ctx.peer), cmd.language or "?", #res.conns[i])
        end
        M.notify(b, group, res.conns[i])
    end
    if #changed > M.LOG_CHANGES then
        log.info("... and %d more consumer groups changed by %s (%d new)",
                 #changed - M.LOG_CHANGES, tostring(ctx.peer), #res.new)
    end
    -- A 4.9.8 client's rebalance reads a topic's queues before it asks
    -- for the consumer ids, and only the asking fetches a missing route:
    -- the rebalance this notification starts fetches the new retry
    -- topic's route but assigns its queue only at the next rebalance, 20 s
    -- later (the first retry came at +20 s, not +10 s).  With 4.9.8 a
    -- second rebalance follows at once, by timing: a slave's NOTIFY, or
    -- the client's own rebalance after its start's heartbeat when the
    -- (slower) broker's NOTIFY has already begun the first.  Here the
    -- group is told again, twice, a little later, whatever the timing
    -- (the members then: a client gone meanwhile is not told).
    if #created > 0 then
        net.spawn(function()
            local waited = 0
            for _, at in ipairs(M.RETRY_RENOTIFY_MS) do
                net.sleep(at - waited)
                waited = at
                for _, group in ipairs(created) do
                    M.notify(b, group)
                end
            end
        end)
    end
    -- 5.x heartbeat v2: IS_SUPPORT_HEART_BEAT_V2 / IS_SUB_CHANGE (nil
    -- for a 4.x client; the rule is C's, src/broker/heartbeat.h).
    return { code = 0, ext = res.v2 }
end

-- }}}

function M.processors(b)
    reg:set_limits(limits(b.conf))
    local P = {}

    -- A repeat heartbeat is answered in C (rmq.processors.heartbeat); one
    -- that changes the registry comes here.
    P[req.HEART_BEAT] = {
        run = function(ctx, cmd)
            return heartbeat(b, ctx, cmd)
        end,
        native = processors.heartbeat(),
    }

    -- Removes this channel from the named groups (clients send it from
    -- shutdown, once per group; C++ may send it without a heartbeat).
    P[req.UNREGISTER_CLIENT] = function(ctx, cmd)
        local pg, cg = cmd:get("producerGroup"), cmd:get("consumerGroup")
        if pg == "" then
            pg = nil
        end
        if cg == "" then
            cg = nil
        end
        reg:unregister(ctx.id, pg, cg)
        if cg then
            -- Java notifies the rest of the group whether or not this
            -- channel was a member.
            M.notify(b, cg)
        end
        return { code = 0, ext = {} }
    end

    -- GetConsumerListByGroupRequestHeader: consumerGroup is @CFNotNull
    -- (a missing one is refused by rmq.header, as Java's decoding does).
    P[req.GET_CONSUMER_LIST_BY_GROUP] = { header = { { "consumerGroup", "string", true } },
                                          run = function(ctx, cmd, h)
        local group = h.consumerGroup
        local ids = reg:client_ids(group)
        if #ids == 0 then
            return reply.system_error("no consumer for this group, " .. group, {})
        end
        return reply.ok({}, fastjson.encode({ consumerIdList = setmetatable(ids, fastjson.array_mt) }))
    end }

    P[req.CHECK_CLIENT_CONFIG] = function(ctx, cmd)
        local body = fastjson.decode(cmd.body or "")
        local sd = type(body) == "table" and body.subscriptionData or nil
        if type(sd) == "table" and not filter.is_tag(sd.expressionType) then
            -- ClientManageProcessor.checkClientConfig
            tables.sync_conf(b.conf)
            if not b.conf.enablePropertyFilter then
                return reply.filter_not_supported(sd.expressionType)
            end
            local f, err = filter.compile_sql(b.conf, tostring(sd.expressionType), sd.subString)
            if f == nil then
                log.warn("Client %s@%s filter message, but failed to compile expression! sub=%s, error=%s",
                         tostring(body.clientId), tostring(body.group), tostring(sd.subString), err)
                return reply.error(codes.response.SUBSCRIPTION_PARSE_FAILED, err)
            end
        end
        return { code = 0 }
    end

    return P
end

--- A connection of this worker closed: it leaves every group it joined;
--- the rest of each consumer group is told.
function M.on_close(b, ctx)
    local left, conns, removed = reg:conn_closed(ctx.id)
    if removed == 0 then
        return
    end
    for i, group in ipairs(left) do
        if i <= M.LOG_CHANGES then
            log.info("consumer group %s: channel %s closed", group, tostring(ctx.peer))
        end
        M.notify(b, group, conns[i])
    end
    if #left > M.LOG_CHANGES then
        log.info("... and %d more consumer groups lost channel %s", #left - M.LOG_CHANGES,
                 tostring(ctx.peer))
    end
end

-- {{{ Expiry (main thread)

--- Drops members silent for longer than channelExpiredTimeout; consumer
--- groups that lost members are told.  Returns the number dropped.
function M.scan(b, now)
    now = now or core.now_ms()
    local timeout = b.conf.channelExpiredTimeout or 120000
    local dropped, left, conns = reg:scan(now, timeout)
    for i, d in ipairs(dropped) do
        if i <= M.LOG_CHANGES then
            log.warn("%s group %s: channel %s (%s) expired, no heartbeat for %d ms",
                     d.kind, d.group, d.clientId, d.addr, timeout)
        end
    end
    if #dropped > M.LOG_CHANGES then
        log.warn("... and %d more channels expired", #dropped - M.LOG_CHANGES)
    end
    -- RocketMQ 4.9.8 closes an expired channel and says nothing;
    -- telling the rest of the group lets it rebalance at once.
    for i, group in ipairs(left) do
        M.notify(b, group, conns[i])
    end
    return #dropped
end

local scan_timer

function M.main_init(b)
    -- A new process starts with no clients.
    reg:clear()
    reg:set_limits(limits(b.conf))
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
