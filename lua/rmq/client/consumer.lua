-- Consumers: a pull consumer (pull a queue at an offset) and a push
-- consumer (a long-polling loop per assigned queue, rebalanced across the
-- group), as RocketMQ's DefaultLitePullConsumer / DefaultMQPushConsumer
-- behave on the wire (protocol.md 4.2-4.7, 6.6-6.9).
--
--   local c = consumer.new{ namesrvAddr=, consumerGroup=, ... }
--   c:subscribe("Topic", "TagA || TagB")
--   c:subscribe("Topic", "a > 5 AND b IS NULL", "SQL92")  -- property filter
--       (MessageSelector.bySql; the broker needs enablePropertyFilter:
--       start() checks each SQL92 subscription with CHECK_CLIENT_CONFIG
--       and raises the broker's reason when it is refused)
--   c:on_message(function(msgs, ctx) return "CONSUME_SUCCESS" end)
--   c:start() ... c:shutdown()
--
--   local r = c:pull(mq, offset, maxNums [, expr]) -- one pull, no hold
--
-- Options (RocketMQ names, defaults): messageModel "CLUSTERING",
-- consumeFromWhere "CONSUME_FROM_LAST_OFFSET", pullBatchSize 32,
-- consumeMessageBatchMaxSize 1, consumeThreadMax 20, orderly false,
-- suspendTimeoutMillis 15000 (brokerSuspendMaxTimeMillis),
-- persistConsumerOffsetInterval 5000, rebalanceInterval 20000,
-- heartbeatBrokerInterval 30000, pollNameServerInterval 30000,
-- maxReconsumeTimes 16, pullTimeDelayMillsWhenException 1000,
-- enableMsgTrace false (SubBefore / SubAfter records, rmq.client.trace),
-- allocateStrategy (policy: "averagely", "circle", a function, or a
-- module name), consumeTimestamp (ms, for CONSUME_FROM_TIMESTAMP),
-- accessKey / secretKey / securityToken (ACL: every request signed,
-- route lookups too; rmq.client.credentials).
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local conns = require("rmq.client.conns")
local message = require("rmq.client.message")
local strings = require("rmq.strings")
local route = require("rmq.client.route")
local credentials = require("rmq.client.credentials")
local policy = require("rmq.policy")
local allocate = require("rmq.policy.allocate")
local log = require("rmq.log")

local M = {}

local PULL_COMMIT, PULL_SUSPEND, PULL_SUBSCRIPTION = 0x1, 0x2, 0x4
-- The Java client waits 30 s for a held pull (protocol.md 6.7).
local PULL_RPC_TIMEOUT = 30000

local DEFAULTS = {
    consumerGroup = "DEFAULT_CONSUMER",
    messageModel = "CLUSTERING",
    consumeFromWhere = "CONSUME_FROM_LAST_OFFSET",
    pullBatchSize = 32,
    consumeMessageBatchMaxSize = 1,
    consumeThreadMax = 20,
    orderly = false,
    suspendTimeoutMillis = 15000,
    persistConsumerOffsetInterval = 5000,
    rebalanceInterval = 20000,
    heartbeatBrokerInterval = 30000,
    pollNameServerInterval = 30000,
    maxReconsumeTimes = 16,
    pullTimeDelayMillsWhenException = 1000,
    allocateStrategy = "averagely",
    timeout = 3000,
}

local STATUS = {
    [codes.response.SUCCESS] = "FOUND",
    [codes.response.PULL_NOT_FOUND] = "NO_NEW_MSG",
    [codes.response.PULL_RETRY_IMMEDIATELY] = "NO_MATCHED_MSG",
    [codes.response.PULL_OFFSET_MOVED] = "OFFSET_ILLEGAL",
}

--- Parses a subscription: TAG ("*" or "A || B"), or an expression of
--- another type (SQL92) kept as written for the broker to compile.
function M.parse_subscription(topic, expr, expression_type)
    if expression_type ~= nil and expression_type ~= "TAG" then
        assert(type(expr) == "string" and expr ~= "", "a " .. expression_type .. " subscription needs an expression")
        return { topic = topic, subString = expr, tagsSet = {}, codeSet = {},
                 expressionType = expression_type, classFilterMode = false,
                 subVersion = core.now_ms() }
    end
    expr = expr or "*"
    local sub = { topic = topic, subString = expr, tagsSet = {}, codeSet = {},
                  expressionType = "TAG", classFilterMode = false,
                  subVersion = core.now_ms() }
    if expr == "" or expr == "*" then
        sub.subString = "*"
        return sub
    end
    for tag in expr:gmatch("[^|]+") do
        tag = strings.trim(tag)
        if tag ~= "" then
            sub.tagsSet[#sub.tagsSet + 1] = tag
            sub.codeSet[#sub.codeSet + 1] = message.java_hash(tag)
        end
    end
    return sub
end

local function mq_key(mq)
    return mq.topic .. "@" .. mq.brokerName .. "@" .. mq.queueId
end

M.mq_key = mq_key

local Consumer = {}
Consumer.__index = Consumer

function M.new(opts)
    local c = setmetatable({}, Consumer)
    for k, v in pairs(DEFAULTS) do
        c[k] = v
    end
    for k, v in pairs(opts or {}) do
        c[k] = v
    end
    c.namesrvs = route.parse_namesrv(c.namesrvAddr)
    c.credentials = credentials.option(c)
    assert(require("rmq.client.tls").apply(c.tls))   -- opts.tls: the process's connections
    local strategy = c.allocateStrategy
    if strategy == "averagely" or strategy == "circle" then
        c.allocate = allocate[strategy]
    else
        c.allocate = assert(policy.resolve(strategy, "allocate"))
    end
    c.clientId = c.clientId or ("127.0.0.1@%d#%d"):format(core.pid(), math.floor(core.mono_ms() * 1000))
    c.subscriptions = {}     -- topic -> subscription data
    c.routes = {}            -- topic -> {route=, fetched=}
    c.conns = conns.new({    -- broker addr -> conn (with our request handler)
        on_request = function(_, ctx, cmd) return c:on_broker_request(ctx, cmd) end,
    })
    c.pull_from = {}         -- mq key -> suggested broker id
    c.offsets = {}           -- mq key -> {mq=, offset=} (to commit)
    c.queues = {}            -- mq key -> process state of assigned queues
    c.running = false
    c.events = { rebalanced = 0, notified = 0 }
    return c
end

function Consumer:subscribe(topic, expr, expression_type)
    self.subscriptions[topic] = M.parse_subscription(topic, expr, expression_type)
end

-- The subscriptions for fastjson's writer: empty sets go out as [] (this
-- lua-cjson has no array_mt, and a Java broker refuses {} where a Set
-- belongs).
local function wire_sub(s)
    local sub = {}
    for k, v in pairs(s) do
        sub[k] = v
    end
    sub.tagsSet = setmetatable({ table.unpack(sub.tagsSet or {}) }, fastjson.array_mt)
    sub.codeSet = setmetatable({ table.unpack(sub.codeSet or {}) }, fastjson.array_mt)
    return sub
end

local function wire_subs(self)
    local subs = {}
    for _, topic in ipairs(self:topics()) do
        subs[#subs + 1] = wire_sub(self.subscriptions[topic])
    end
    return setmetatable(subs, fastjson.array_mt)
end

-- DefaultMQPushConsumerImpl.checkClientInBroker: a subscription that is
-- not TAG is checked by every broker of its topic before the start.
function Consumer:check_client_config()
    for _, topic in ipairs(self:topics()) do
        local sub = self.subscriptions[topic]
        if sub.expressionType ~= "TAG" then
            local r = self:route_of(topic)
            for _, bd in ipairs(r and r.brokerDatas or {}) do
                local addr = (bd.brokerAddrs or {})["0"]
                if addr then
                    local rep, err = self:call(addr, { code = codes.request.CHECK_CLIENT_CONFIG,
                        body = fastjson.encode({ clientId = self.clientId, group = self.consumerGroup,
                                                 subscriptionData = wire_sub(sub) }) })
                    if not rep then
                        error(("check client config at %s: %s"):format(addr, err), 0)
                    elseif rep.code ~= 0 then
                        error(("check client config at %s: code %d %s"):format(addr, rep.code,
                              rep.remark or ""), 0)
                    end
                end
            end
        end
    end
end

function Consumer:on_message(fn)
    self.handler = fn
end

-- {{{ Routes and connections

function Consumer:route_of(topic, force)
    local e = self.routes[topic]
    if e and not force and core.now_ms() - e.fetched < self.pollNameServerInterval then
        return e.route
    end
    local r, err, code = route.fetch(self.namesrvs, topic, self.timeout, nil, self.credentials)
    if not r then
        if e then
            return e.route
        end
        return nil, err, code
    end
    self.routes[topic] = { route = r, fetched = core.now_ms() }
    return r
end

function Consumer:broker_addrs(topic, broker_name)
    local r = self:route_of(topic)
    for _, bd in ipairs(r and r.brokerDatas or {}) do
        if bd.brokerName == broker_name then
            return bd.brokerAddrs or {}
        end
    end
    return {}
end

--- ResetOffsetBody's offsetTable (fastjson writes MessageQueue keys as
--- objects: {{"brokerName":"b","queueId":0,"topic":"T"}:5}) ->
--- {{mq=, offset=}, ...}.  Names cannot hold quotes (topic and broker
--- name rules), so a pattern reads them.
function M.parse_reset_body(body)
    local out = {}
    for bn, qid, topic, off in (body or ""):gmatch(
            '{"brokerName":"([^"]*)","queueId":(%d+),"topic":"([^"]*)"}:(%-?%d+)') do
        out[#out + 1] = { mq = { topic = topic, brokerName = bn, queueId = math.tointeger(tonumber(qid)) },
                          offset = math.tointeger(tonumber(off)) }
    end
    return out
end

--- RESET_CONSUMER_CLIENT_OFFSET (ResetOffsetRequestHeader + body): every
--- queue of ours the table names restarts from its offset, which is
--- also committed (as the Java client's resetOffset does).
function Consumer:reset_offsets(topic, entries)
    for _, e in ipairs(entries) do
        local key = mq_key(e.mq)
        if e.mq.topic == topic and e.offset and e.offset >= 0 then
            self.offsets[key] = { mq = e.mq, offset = e.offset }
            self:update_offset(e.mq, e.offset, true)
            local q = self.queues[key]
            if q and self.running then
                q.dropped = true
                local nq = { mq = q.mq, dropped = false, start = e.offset }
                self.queues[key] = nq
                net.spawn(function() self:pull_loop(nq) end)
            end
        end
    end
    self.events.reset = (self.events.reset or 0) + 1
end

--- CONSUME_MESSAGE_DIRECTLY (mqadmin queryMsgById -g -d): the message
--- given to the handler; ConsumeMessageDirectlyResult as the Java
--- client's consumeMessageDirectly writes it.
function Consumer:consume_directly(cmd)
    local msgs = message.decode_records(cmd.body or "")
    if not msgs or #msgs == 0 then
        return { code = codes.response.SYSTEM_ERROR, remark = "the message in the request could not be decoded" }
    end
    local t0 = core.now_ms()
    local mq = { topic = msgs[1].topic, brokerName = (cmd.ext or {}).brokerName, queueId = msgs[1].queueId }
    local ok, res = pcall(self.handler, msgs, { mq = mq, consumer = self, directly = true })
    local result
    if not ok then
        result = { consumeResult = "CR_THROW_EXCEPTION", remark = tostring(res) }
    elseif res == nil then
        result = { consumeResult = "CR_RETURN_NULL" }
    elseif res == "CONSUME_SUCCESS" or res == "SUCCESS" or res == true then
        result = { consumeResult = "CR_SUCCESS" }
    else
        result = { consumeResult = "CR_LATER" }
    end
    result.order, result.autoCommit, result.spentTimeMills = self.orderly == true, true, core.now_ms() - t0
    return { code = codes.response.SUCCESS, body = fastjson.encode(result) }
end

-- Requests the broker pushes to us (NOTIFY_CONSUMER_IDS_CHANGED,
-- RESET_CONSUMER_CLIENT_OFFSET) or relays from an admin
-- (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY).
function Consumer:on_broker_request(ctx, cmd)
    if cmd.code == codes.request.CONSUME_MESSAGE_DIRECTLY then
        return self:consume_directly(cmd)
    end
    if cmd.code == codes.request.NOTIFY_CONSUMER_IDS_CHANGED then
        self.events.notified = self.events.notified + 1
        if self.running then
            net.spawn(function() self:rebalance() end)
        end
        return nil
    end
    if cmd.code == codes.request.GET_CONSUMER_RUNNING_INFO then
        return { code = 0, body = self:running_info() }
    end
    if cmd.code == codes.request.RESET_CONSUMER_CLIENT_OFFSET then
        local ext = cmd.ext or {}
        if ext.group == self.consumerGroup and type(ext.topic) == "string" then
            local entries = M.parse_reset_body(cmd.body)
            net.spawn(function() self:reset_offsets(ext.topic, entries) end)
        end
        return nil
    end
    return nil
end

function Consumer:conn(addr)
    return self.conns:get(addr, self.timeout)
end

function Consumer:call(addr, cmd, timeout)
    local c, err = self:conn(addr)
    if not c then
        return nil, err
    end
    cmd.credentials = self.credentials
    return c:call(cmd, timeout or self.timeout)
end

-- }}}

-- {{{ Pull

--- The address to pull mq from: the node the broker suggested last,
-- falling back to the master, then to any node.
function Consumer:pull_addr(mq)
    local addrs = self:broker_addrs(mq.topic, mq.brokerName)
    local id = self.pull_from[mq_key(mq)] or 0
    local a = addrs[tostring(id)] or addrs["0"]
    if a == nil then
        local _, any = next(addrs)
        if any ~= nil then
            return any, false
        end
    end
    return a, (a == addrs["0"])
end

--- One pull.  opts: {expr=, suspend=bool, commitOffset=n|nil}.
-- Returns {status=, nextBeginOffset=, minOffset=, maxOffset=,
-- suggestWhichBrokerId=, messages=}, or nil, err.
function Consumer:pull(mq, offset, max_nums, opts)
    opts = opts or {}
    local addr, is_master = self:pull_addr(mq)
    if not addr then
        return nil, "no address for broker " .. mq.brokerName
    end
    local sub = opts.sub or M.parse_subscription(mq.topic, opts.expr)
    local flag = PULL_SUBSCRIPTION
    if opts.suspend then
        flag = flag | PULL_SUSPEND
    end
    -- Java commits only to a master, and only an offset it has.
    local commit = opts.commitOffset
    if commit and commit > 0 and is_master then
        flag = flag | PULL_COMMIT
    else
        commit = 0
    end
    local r, err = self:call(addr, {
        code = codes.request.PULL_MESSAGE,
        ext = {
            consumerGroup = self.consumerGroup, topic = mq.topic, queueId = mq.queueId,
            queueOffset = offset, maxMsgNums = max_nums or self.pullBatchSize,
            sysFlag = flag, commitOffset = commit,
            suspendTimeoutMillis = opts.suspend and self.suspendTimeoutMillis or 0,
            subscription = sub.subString, subVersion = sub.subVersion,
            expressionType = sub.expressionType or "TAG",
        },
    }, opts.suspend and PULL_RPC_TIMEOUT or self.timeout)
    if not r then
        return nil, ("pull from %s: %s"):format(addr, err)
    end
    local status = STATUS[r.code]
    if not status then
        return nil, ("pull from %s: code %d %s"):format(addr, r.code, r.remark or ""), r.code
    end
    local ext = r.ext
    local res = {
        status = status,
        nextBeginOffset = tonumber(ext.nextBeginOffset),
        minOffset = tonumber(ext.minOffset),
        maxOffset = tonumber(ext.maxOffset),
        suggestWhichBrokerId = tonumber(ext.suggestWhichBrokerId) or 0,
        messages = {},
        addr = addr,
    }
    self.pull_from[mq_key(mq)] = res.suggestWhichBrokerId
    if status == "FOUND" and r.body then
        local msgs, derr = message.decode_records(r.body)
        if not msgs then
            return nil, ("pull from %s: %s"):format(addr, derr)
        end
        -- The broker filters by tag hash; check the tag itself (as Java).
        local want = nil
        if #sub.tagsSet > 0 then
            want = {}
            for _, t in ipairs(sub.tagsSet) do want[t] = true end
        end
        for _, m in ipairs(msgs) do
            if want == nil or (m.tags and want[m.tags]) then
                m.properties.MIN_OFFSET = tostring(res.minOffset)
                m.properties.MAX_OFFSET = tostring(res.maxOffset)
                res.messages[#res.messages + 1] = m
            end
        end
    end
    return res
end

local function master_of(self, mq)
    return self:broker_addrs(mq.topic, mq.brokerName)["0"]
end

function Consumer:query_offset(mq)
    local addr = master_of(self, mq)
    if not addr then
        return nil, "no master for " .. mq.brokerName
    end
    local r, err = self:call(addr, { code = codes.request.QUERY_CONSUMER_OFFSET, ext = {
        consumerGroup = self.consumerGroup, topic = mq.topic, queueId = mq.queueId } })
    if not r then
        return nil, err
    end
    if r.code ~= 0 then
        return -1  -- no offset stored: consumeFromWhere decides
    end
    return tonumber(r.ext.offset)
end

function Consumer:offset_request(mq, code, ext)
    local addr = master_of(self, mq)
    if not addr then
        return nil, "no master for " .. mq.brokerName
    end
    ext.topic, ext.queueId = mq.topic, mq.queueId
    local r, err = self:call(addr, { code = code, ext = ext })
    if not r then
        return nil, err
    end
    if r.code ~= 0 then
        return nil, ("code %d %s"):format(r.code, r.remark or "")
    end
    return tonumber(r.ext.offset)
end

function Consumer:max_offset(mq)
    return self:offset_request(mq, codes.request.GET_MAX_OFFSET, {})
end

function Consumer:min_offset(mq)
    return self:offset_request(mq, codes.request.GET_MIN_OFFSET, {})
end

function Consumer:search_offset(mq, timestamp)
    return self:offset_request(mq, codes.request.SEARCH_OFFSET_BY_TIMESTAMP, { timestamp = timestamp })
end

function Consumer:update_offset(mq, offset, oneway)
    local addr = master_of(self, mq)
    if not addr then
        return nil, "no master for " .. mq.brokerName
    end
    local cmd = { code = codes.request.UPDATE_CONSUMER_OFFSET, ext = {
        consumerGroup = self.consumerGroup, topic = mq.topic, queueId = mq.queueId,
        commitOffset = offset }, credentials = self.credentials }
    if oneway then
        local c, err = self:conn(addr)
        if not c then
            return nil, err
        end
        return c:oneway(cmd)
    end
    local r, err = self:call(addr, cmd)
    return r and r.code == 0, err
end

-- }}}

-- {{{ Push consumer: heartbeat, rebalance, pull loops

function Consumer:topics()
    local t = {}
    for topic in pairs(self.subscriptions) do
        t[#t + 1] = topic
    end
    table.sort(t)
    return t
end

--- ConsumerRunningInfo, the answer to GET_CONSUMER_RUNNING_INFO (307,
--- relayed by the broker for mqadmin consumerStatus): the Java push
--- consumer's properties and PROP_* keys, the subscriptions, and per
--- assigned queue a ProcessQueueInfo (commit offset, messages in
--- flight, last pull time).  statusTable (per-topic RT/TPS) is empty:
--- this client keeps no such statistics.
function Consumer:running_info()
    local props = {
        consumerGroup = self.consumerGroup, messageModel = self.messageModel,
        consumeFromWhere = self.consumeFromWhere, pullBatchSize = tostring(self.pullBatchSize),
        consumeThreadMax = tostring(self.consumeThreadMax), maxReconsumeTimes = tostring(self.maxReconsumeTimes),
        consumeMessageBatchMaxSize = tostring(self.consumeMessageBatchMaxSize),
        PROP_NAMESERVER_ADDR = tostring(self.namesrvAddr), PROP_CONSUME_TYPE = "CONSUME_PASSIVELY",
        PROP_CLIENT_VERSION = "V4_9_8", PROP_CONSUMEORDERLY = tostring(self.orderly),
        PROP_THREADPOOL_CORE_SIZE = tostring(self.consumeThreadMax),
        PROP_CONSUMER_START_TIMESTAMP = tostring(self.started_at or 0),
    }
    local mqs = {}
    for _, mq in ipairs(self:assigned()) do
        local q = self.queues[mq_key(mq)]
        local n, lo, hi = 0, 0, 0
        for off in pairs(q.inflight or {}) do
            n = n + 1
            lo = (n == 1 or off < lo) and off or lo
            hi = off > hi and off or hi
        end
        local commit = self.offsets[mq_key(mq)]
        mqs[#mqs + 1] = fastjson.encode({ brokerName = mq.brokerName, queueId = mq.queueId, topic = mq.topic })
            .. ":" .. fastjson.encode({
                cachedMsgCount = n, cachedMsgMinOffset = lo, cachedMsgMaxOffset = hi, cachedMsgSizeInMiB = 0,
                commitOffset = commit and commit.offset or 0, droped = q.dropped == true,
                lastPullTimestamp = q.last_pull or 0, lastConsumeTimestamp = q.last_consume or 0,
                lastLockTimestamp = 0,
                locked = false, tryUnlockTimes = 0, transactionMsgCount = 0, transactionMsgMaxOffset = 0,
                transactionMsgMinOffset = 0,
            })
    end
    return '{"mqTable":{' .. table.concat(mqs, ",") .. '},"properties":' .. fastjson.encode(props)
        .. ',"statusTable":{},"subscriptionSet":' .. fastjson.encode(wire_subs(self)) .. "}"
end

function Consumer:heartbeat_body()
    local subs = wire_subs(self)
    return fastjson.encode({
        clientID = self.clientId,
        consumerDataSet = { {
            groupName = self.consumerGroup,
            consumeType = "CONSUME_PASSIVELY",
            messageModel = self.messageModel,
            consumeFromWhere = self.consumeFromWhere,
            subscriptionDataSet = subs,
            unitMode = false,
        } },
        producerDataSet = setmetatable({}, fastjson.array_mt),
    })
end

--- Every broker address that serves a subscribed topic.
function Consumer:all_broker_addrs()
    local set, list = {}, {}
    for _, topic in ipairs(self:topics()) do
        local r = self:route_of(topic)
        for _, bd in ipairs(r and r.brokerDatas or {}) do
            for _, a in pairs(bd.brokerAddrs or {}) do
                if not set[a] then
                    set[a] = true
                    list[#list + 1] = a
                end
            end
        end
    end
    table.sort(list)
    return list
end

--- HEART_BEAT to every broker of the subscriptions.  Returns how many
--- were asked and the refusals: a list of "addr: code N remark" (a
--- broker that answered with an error code; one that did not answer is
--- only logged).
function Consumer:heartbeat()
    local body = self:heartbeat_body()
    local addrs, refused = self:all_broker_addrs(), {}
    for _, addr in ipairs(addrs) do
        local r, err = self:call(addr, { code = codes.request.HEART_BEAT, body = body })
        if not r or r.code ~= 0 then
            log.warn("heartbeat to %s: %s", addr, err or (r.remark or r.code))
        end
        if r and r.code ~= 0 then
            refused[#refused + 1] = ("%s: code %d %s"):format(addr, r.code, r.remark or "")
        end
    end
    return #addrs, refused
end

function Consumer:consumer_ids(topic)
    local r = self:route_of(topic)
    for _, bd in ipairs(r and r.brokerDatas or {}) do
        local addr = (bd.brokerAddrs or {})["0"]
        if addr then
            local rep = self:call(addr, { code = codes.request.GET_CONSUMER_LIST_BY_GROUP,
                                          ext = { consumerGroup = self.consumerGroup } })
            if rep and rep.code == 0 and rep.body then
                local list = (route.decode_json(rep.body) or {}).consumerIdList or {}
                table.sort(list)
                return list
            end
        end
    end
    return nil
end

-- Where a newly assigned queue starts (protocol.md 4.7).
function Consumer:start_offset(mq)
    local off = self:query_offset(mq)
    if off and off >= 0 then
        return off
    end
    local w = self.consumeFromWhere
    if w == "CONSUME_FROM_FIRST_OFFSET" or mq.topic:sub(1, 7) == "%RETRY%" then
        return 0
    elseif w == "CONSUME_FROM_TIMESTAMP" then
        return self:search_offset(mq, self.consumeTimestamp or (core.now_ms() - 1800000)) or 0
    end
    return self:max_offset(mq) or 0
end

--- Recomputes which queues this consumer owns and starts/stops loops.
function Consumer:rebalance()
    local wanted = {}
    for _, topic in ipairs(self:topics()) do
        local r = self:route_of(topic)
        if r then
            local mqs = route.subscribe_queues(topic, r)
            local mine
            if self.messageModel == "BROADCASTING" then
                mine = mqs
            else
                local cids = self:consumer_ids(topic)
                mine = cids and self.allocate({ queues = mqs, consumers = cids, me = self.clientId }) or {}
            end
            for _, mq in ipairs(mine) do
                wanted[mq_key(mq)] = mq
            end
        end
    end
    for key, q in pairs(self.queues) do
        if not wanted[key] then
            q.dropped = true
            self.queues[key] = nil
            self:persist_one(key)
        end
    end
    for key, mq in pairs(wanted) do
        if not self.queues[key] then
            local q = { mq = mq, dropped = false }
            self.queues[key] = q
            net.spawn(function() self:pull_loop(q) end)
        end
    end
    self.events.rebalanced = self.events.rebalanced + 1
end

--- The queues this consumer currently owns, sorted (for specs, admin).
function Consumer:assigned()
    local out = {}
    for _, q in pairs(self.queues) do
        out[#out + 1] = q.mq
    end
    table.sort(out, function(a, b)
        if a.topic ~= b.topic then return a.topic < b.topic end
        if a.brokerName ~= b.brokerName then return a.brokerName < b.brokerName end
        return a.queueId < b.queueId
    end)
    return out
end

-- Sends a failed message back for redelivery (CONSUMER_SEND_MSG_BACK).
function Consumer:send_back(msg, mq)
    local addr = master_of(self, mq)
    if not addr then
        return false
    end
    local r = self:call(addr, { code = codes.request.CONSUMER_SEND_MSG_BACK, ext = {
        offset = msg.commitLogOffset, group = self.consumerGroup, delayLevel = 0,
        originMsgId = msg.msgId, originTopic = msg.topic, unitMode = false,
        maxReconsumeTimes = self.maxReconsumeTimes } })
    return r ~= nil and r.code == 0
end

-- Calls the handler; returns true when consumed.
function Consumer:consume(msgs, mq)
    local tr = self.enableMsgTrace and require("rmq.client.trace")
    local before = tr and tr.before_consume(self, msgs)
    local ok, res = pcall(self.handler, msgs, { mq = mq, consumer = self })
    if not ok then
        log.warn("consumer %s: handler failed: %s", self.consumerGroup, tostring(res))
        if tr then
            tr.after_consume(self, before, false, "EXCEPTION")
        end
        return false
    end
    local consumed = res == nil or res == "CONSUME_SUCCESS" or res == "SUCCESS" or res == true
    if tr then
        tr.after_consume(self, before, consumed, consumed and "SUCCESS" or "FAILED")
    end
    return consumed
end

-- Offsets in flight: the committed offset of a queue is the smallest
-- offset still being consumed, or where the next pull starts.
local function commit_point(q)
    local low = q.next_offset
    for off in pairs(q.inflight) do
        if off < low then low = off end
    end
    return low
end

-- Moves the queue's offset to commit forward (never back).
function Consumer:advance(q)
    if q.dropped then
        return  -- reset or rebalanced away: its offsets are no longer ours
    end
    local key = mq_key(q.mq)
    local cp = commit_point(q)
    local cur = self.offsets[key]
    if cur == nil or cp > cur.offset then
        self.offsets[key] = { mq = q.mq, offset = cp }
    end
end

function Consumer:process(q, msgs)
    local mq = q.mq
    q.last_consume = core.now_ms()
    if self.orderly then
        for _, m in ipairs(msgs) do
            while not q.dropped and self.running and not self:consume({ m }, mq) do
                net.sleep(1000)  -- suspendCurrentQueueTimeMillis: retry in order
            end
        end
        return
    end
    local batch = self.consumeMessageBatchMaxSize
    for i = 1, #msgs, batch do
        local part = { table.unpack(msgs, i, math.min(#msgs, i + batch - 1)) }
        for _, m in ipairs(part) do q.inflight[m.queueOffset] = true end
        while self.busy >= self.consumeThreadMax do
            net.sleep(5)
        end
        self.busy = self.busy + 1
        net.spawn(function()
            local ok = self:consume(part, mq)
            if not ok then
                for _, m in ipairs(part) do
                    if not self:send_back(m, mq) then
                        -- Could not hand it back: consume it again later.
                        net.sleep(5000)
                        self:consume({ m }, mq)
                    end
                end
            end
            for _, m in ipairs(part) do q.inflight[m.queueOffset] = nil end
            self.busy = self.busy - 1
            self:advance(q)
        end)
    end
end

function Consumer:pull_loop(q)
    local mq = q.mq
    q.inflight = {}
    local start, err = q.start, nil
    if start == nil then
        start, err = self:start_offset(mq)
    end
    if not start then
        log.warn("consumer %s: no start offset for %s: %s", self.consumerGroup, mq_key(mq), tostring(err))
        start = 0
    end
    q.next_offset = start
    local sub = self.subscriptions[mq.topic] or M.parse_subscription(mq.topic, "*")
    while self.running and not q.dropped do
        local commit = self.offsets[mq_key(mq)]
        local r, perr = self:pull(mq, q.next_offset, self.pullBatchSize, {
            sub = sub, suspend = true, commitOffset = commit and commit.offset })
        if q.dropped or not self.running then
            break
        end
        q.last_pull = core.now_ms()
        if not r then
            log.warn("consumer %s: %s", self.consumerGroup, perr)
            net.sleep(self.pullTimeDelayMillsWhenException)
        else
            if r.status == "OFFSET_ILLEGAL" then
                q.next_offset = r.nextBeginOffset
                self.offsets[mq_key(mq)] = { mq = mq, offset = q.next_offset }
            else
                q.next_offset = r.nextBeginOffset or q.next_offset
                if #r.messages > 0 then
                    self:process(q, r.messages)
                end
                self:advance(q)
            end
        end
    end
end

function Consumer:persist_one(key)
    local e = self.offsets[key]
    if e then
        self:update_offset(e.mq, e.offset, true)
    end
end

function Consumer:persist_offsets()
    for key in pairs(self.offsets) do
        self:persist_one(key)
    end
end

--- Starts heartbeats, rebalancing, pull loops and offset persistence.
-- In clustering mode it also consumes the group's retry topic.
function Consumer:start()
    assert(self.handler, "on_message(fn) before start()")
    if self.messageModel == "CLUSTERING" then
        local retry = "%RETRY%" .. self.consumerGroup
        if not self.subscriptions[retry] then
            self.subscriptions[retry] = M.parse_subscription(retry, "*")
        end
    end
    self:check_client_config()
    self.running = true
    self.started_at = core.now_ms()
    self.busy = 0
    -- Every broker refusing the first heartbeat (ACL: no or wrong
    -- credentials, no SUB permission) is an error of start(), where Java
    -- only logs it: the consumer would otherwise poll refusals forever.
    local asked, refused = self:heartbeat()
    if asked > 0 and #refused == asked then
        self.running = false
        error("heartbeat refused by " .. table.concat(refused, "; "), 0)
    end
    self:rebalance()
    self.timers = {
        net.timer(self.heartbeatBrokerInterval, self.heartbeatBrokerInterval, function() self:heartbeat() end),
        net.timer(self.rebalanceInterval, self.rebalanceInterval, function() self:rebalance() end),
        net.timer(self.persistConsumerOffsetInterval, self.persistConsumerOffsetInterval,
            function() self:persist_offsets() end),
    }
end

function Consumer:shutdown()
    self.running = false
    for _, t in ipairs(self.timers or {}) do
        t:stop()
    end
    self.timers = nil
    for _, q in pairs(self.queues) do
        q.dropped = true
    end
    self:persist_offsets()
    -- UNREGISTER_CLIENT so the group rebalances without us at once.
    for _, addr in ipairs(self:all_broker_addrs()) do
        local c = self.conns:peek(addr)
        if c then
            c:call({ code = codes.request.UNREGISTER_CLIENT, ext = {
                clientID = self.clientId, consumerGroup = self.consumerGroup },
                credentials = self.credentials }, 1000)
            c:close()
        end
    end
    self.queues = {}
end

-- }}}

M.Consumer = Consumer

return M
