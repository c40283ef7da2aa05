-- The consumer family of `rmq admin`: consumerProgress,
-- consumerConnection, consumerStatus and brokerConsumeStats, as 4.9.8's
-- mqadmin (ConsumerProgressSubCommand, ConsumerConnectionSubCommand,
-- ConsumerStatusSubCommand, BrokerConsumeStatsSubCommad): the same
-- options, requests (GET_CONSUME_STATS 208, GET_CONSUMER_CONNECTION_LIST
-- 203, GET_CONSUMER_RUNNING_INFO 307, GET_BROKER_CONSUME_STATS 317) and
-- columns.
--
--   consumer.progress(ctx, {groupName=}) -> {group=, queues={...}, consumeTps=, diffTotal=}
--   consumer.progress(ctx, {}) -> {groups = {{group=, count=, version=, consumeType=, ...}}}
--   consumer.connection(ctx, {consumerGroup=, brokerAddr=}) -> {connections=, subscriptions=, ...}
--   consumer.status(ctx, {consumerGroup=, clientId=}) -> {clients = {{clientId=, info=}}}
--   consumer.broker_stats(ctx, {brokerAddr=}) -> {queues=, totalDiff=}
local codes = require("rmq.codes")
local remote = require("rmq.admin.remote")
local rpc = require("rmq.admin.rpc")

local req = codes.request

local M = {}

local function tbl(headings, rows)
    return require("rmq.admin").table(headings, rows)
end

local function array(t)
    return require("rmq.admin").array(t)
end

-- ConsumerConnection as a plain table: connections sorted by client id.
function M.connection_view(cc)
    local conns = rpc.connections(cc.connectionSet)
    local subs = {}
    for topic, sd in pairs(cc.subscriptionTable or {}) do
        if type(topic) == "string" then
            subs[#subs + 1] = { topic = sd.topic or topic, subString = sd.subString, subVersion = sd.subVersion,
                                expressionType = sd.expressionType }
        end
    end
    table.sort(subs, function(a, b) return a.topic < b.topic end)
    local minv
    for _, c in ipairs(conns) do
        local v = tonumber(c.version)
        if v and (minv == nil or v < minv) then
            minv = v
        end
    end
    return { connections = array(conns), subscriptions = array(subs), consumeType = cc.consumeType,
             messageModel = cc.messageModel, consumeFromWhere = cc.consumeFromWhere, minVersion = minv }
end

local function total_diff(stats)
    local d = 0
    for _, w in ipairs(stats.offsetTable) do
        d = d + (w.brokerOffset - w.consumerOffset)
    end
    return d
end

local function mq_key(mq)
    return mq.topic .. "@" .. mq.brokerName .. "@" .. tostring(mq.queueId)
end

-- mq key -> client ip, from every member's running info (-s true); as
-- mqadmin, any failure leaves the queue "N/A".
local function allocation(ctx, group)
    local out = {}
    pcall(function()
        for _, conn in ipairs(rpc.consumer_connection(ctx, group).connectionSet or {}) do
            local info = rpc.running_info(ctx, group, conn.clientId, false)
            for _, kv in ipairs(remote.entries(info.mqTable)) do
                if type(kv.key) == "table" then
                    out[mq_key(kv.key)] = tostring(conn.clientId):match("^[^@]*")
                end
            end
        end
    end)
    return out
end

function M.progress(ctx, o)
    if o.groupName then
        local stats = rpc.consume_stats(ctx, o.groupName)
        local ips = (o.showClientIP and o.showClientIP:lower() == "true") and allocation(ctx, o.groupName) or nil
        local rows = {}
        for _, w in ipairs(stats.offsetTable) do
            local mq = w.mq
            rows[#rows + 1] = {
                topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId,
                brokerOffset = w.brokerOffset, consumerOffset = w.consumerOffset,
                diff = w.brokerOffset - w.consumerOffset, lastTimestamp = w.lastTimestamp,
                clientIp = ips and (ips[mq_key(mq)] or "N/A"),
            }
        end
        return { group = o.groupName, queues = array(rows), consumeTps = stats.consumeTps,
                 diffTotal = total_diff(stats), showClientIp = ips ~= nil }
    end
    local r, addr = remote.ns(ctx, { code = req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER })
    local groups = {}
    for _, topic in ipairs(remote.json(r.body, addr).topicList or {}) do
        local g = topic:match("^%%RETRY%%(.+)$")
        if g then
            groups[#groups + 1] = g
        end
    end
    table.sort(groups)
    local out = {}
    for _, g in ipairs(groups) do
        -- As mqadmin: what cannot be read of a group shows as OFFLINE, 0.
        local row = { group = g, count = 0, consumeTps = 0, diffTotal = 0 }
        local ok, stats = pcall(rpc.consume_stats, ctx, g)
        if ok then
            row.consumeTps = math.floor(stats.consumeTps)
            row.diffTotal = total_diff(stats)
        end
        local cok, cc = pcall(rpc.consumer_connection, ctx, g)
        if cok then
            local v = M.connection_view(cc)
            row.count = #v.connections
            row.version = v.minVersion
            row.consumeType = v.consumeType
            row.messageModel = v.messageModel
        end
        out[#out + 1] = row
    end
    return { groups = array(out) }
end

local function progress_text(r)
    if r.group then
        local head = { "#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset" }
        if r.showClientIp then
            head[#head + 1] = "#Client IP"
        end
        head[#head + 1] = "#Diff"
        head[#head + 1] = "#LastTime"
        local rows = {}
        for _, q in ipairs(r.queues) do
            local vals = { q.topic, q.brokerName, q.queueId, q.brokerOffset, q.consumerOffset }
            if r.showClientIp then
                vals[#vals + 1] = q.clientIp
            end
            vals[#vals + 1] = q.diff
            vals[#vals + 1] = q.lastTimestamp == 0 and "N/A" or rpc.date(q.lastTimestamp)
            rows[#rows + 1] = vals
        end
        return tbl(head, rows) .. ("\n\nConsume TPS: %.2f\nDiff Total: %d"):format(r.consumeTps, r.diffTotal)
    end
    local rows = {}
    for _, g in ipairs(r.groups) do
        local online = g.count > 0
        local push = g.consumeType ~= "CONSUME_ACTIVELY"
        rows[#rows + 1] = {
            g.group, g.count, online and rpc.version_desc(g.version) or "OFFLINE",
            online and (push and "PUSH" or "PULL") or "",
            (online and push) and tostring(g.messageModel or "") or "", g.consumeTps, g.diffTotal,
        }
    end
    return tbl({ "#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total" }, rows)
end

function M.connection(ctx, o)
    return M.connection_view((rpc.consumer_connection(ctx, o.consumerGroup, o.brokerAddr)))
end

local function connection_text(v)
    local rows = {}
    for _, c in ipairs(v.connections) do
        rows[#rows + 1] = { c.clientId, c.clientAddr, c.language, c.versionDesc }
    end
    local subs = {}
    for _, s in ipairs(v.subscriptions) do
        subs[#subs + 1] = { s.topic, s.subString }
    end
    return table.concat({
        tbl({ "#ClientId", "#ClientAddr", "#Language", "#Version" }, rows), "",
        "Below is subscription:", tbl({ "#Topic", "#SubExpression" }, subs), "",
        "ConsumeType: " .. tostring(v.consumeType),
        "MessageModel: " .. tostring(v.messageModel),
        "ConsumeFromWhere: " .. tostring(v.consumeFromWhere),
    }, "\n")
end

-- ConsumerRunningInfo as a plain table: properties, subscriptions, and
-- per queue its ProcessQueueInfo, sorted as MessageQueue sorts.
function M.running_view(info)
    local queues = {}
    for _, kv in ipairs(remote.entries(info.mqTable)) do
        local mq, pq = kv.key, kv.value
        if type(mq) == "table" then
            local q = { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId }
            for k, v in pairs(type(pq) == "table" and pq or {}) do
                if type(k) == "string" then
                    q[k] = v
                end
            end
            queues[#queues + 1] = q
        end
    end
    table.sort(queues, rpc.mq_less)
    local subs = {}
    for _, sd in ipairs(info.subscriptionSet or {}) do
        subs[#subs + 1] = { topic = sd.topic, subString = sd.subString, expressionType = sd.expressionType,
                            subVersion = sd.subVersion, classFilterMode = sd.classFilterMode }
    end
    table.sort(subs, function(a, b) return tostring(a.topic) < tostring(b.topic) end)
    local status = {}
    for topic, st in pairs(info.statusTable or {}) do
        if type(topic) == "string" and type(st) == "table" then
            status[topic] = st
        end
    end
    local props = {}
    for k, v in pairs(info.properties or {}) do
        if type(k) == "string" then
            props[k] = v
        end
    end
    return { properties = props, subscriptions = array(subs), queues = array(queues), status = status,
             jstack = type(info.jstack) == "string" and info.jstack or nil }
end

-- UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS, local time.
local function human(ms)
    ms = math.tointeger(tonumber(ms)) or 0
    return os.date("%Y%m%d%H%M%S", ms // 1000) .. ("%03d"):format(ms % 1000)
end

local function pq_string(q)
    local function f(k)
        return tostring(q[k])
    end
    return ("ProcessQueueInfo [commitOffset=%s, cachedMsgMinOffset=%s, cachedMsgMaxOffset=%s, cachedMsgCount=%s, "
        .. "cachedMsgSizeInMiB=%s, transactionMsgMinOffset=%s, transactionMsgMaxOffset=%s, transactionMsgCount=%s, "
        .. "locked=%s, tryUnlockTimes=%s, lastLockTimestamp=%s, droped=%s, lastPullTimestamp=%s, "
        .. "lastConsumeTimestamp=%s]"):format(f("commitOffset"), f("cachedMsgMinOffset"), f("cachedMsgMaxOffset"),
        f("cachedMsgCount"), f("cachedMsgSizeInMiB"), f("transactionMsgMinOffset"), f("transactionMsgMaxOffset"),
        f("transactionMsgCount"), f("locked"), f("tryUnlockTimes"), human(q.lastLockTimestamp), f("droped"),
        human(q.lastPullTimestamp), human(q.lastConsumeTimestamp))
end

local function num(v)
    return tonumber(v) or 0
end

-- ConsumerRunningInfo.formatString, with the client id in the heading.
local function running_text(client_id, v)
    local out = { "#Consumer Properties# (" .. client_id .. ")" }
    for _, k in ipairs(remote.sorted_keys(v.properties)) do
        out[#out + 1] = ("%-40s: %s"):format(k, tostring(v.properties[k]))
    end
    out[#out + 1] = "\n#Consumer Subscription#"
    for i, sd in ipairs(v.subscriptions) do
        out[#out + 1] = ("%03d Topic: %-40s ClassFilter: %-8s SubExpression: %s"):format(i, tostring(sd.topic),
            tostring(sd.classFilterMode == true), tostring(sd.subString))
    end
    out[#out + 1] = "\n#Consumer Offset#"
    out[#out + 1] = ("%-64s  %-32s  %-4s  %-20s"):format("#Topic", "#Broker Name", "#QID", "#Consumer Offset")
    for _, q in ipairs(v.queues) do
        out[#out + 1] = ("%-32s  %-32s  %-4d  %-20s"):format(q.topic, q.brokerName, q.queueId,
            tostring(q.commitOffset))
    end
    out[#out + 1] = "\n#Consumer MQ Detail#"
    out[#out + 1] = ("%-64s  %-32s  %-4s  %-20s"):format("#Topic", "#Broker Name", "#QID", "#ProcessQueueInfo")
    for _, q in ipairs(v.queues) do
        out[#out + 1] = ("%-64s  %-32s  %-4d  %s"):format(q.topic, q.brokerName, q.queueId, pq_string(q))
    end
    out[#out + 1] = "\n#Consumer RT&TPS#"
    out[#out + 1] = ("%-64s  %14s %14s %14s %14s %18s %25s"):format("#Topic", "#Pull RT", "#Pull TPS",
        "#Consume RT", "#ConsumeOK TPS", "#ConsumeFailed TPS", "#ConsumeFailedMsgsInHour")
    for _, topic in ipairs(remote.sorted_keys(v.status)) do
        local st = v.status[topic]
        out[#out + 1] = ("%-32s  %14.2f %14.2f %14.2f %14.2f %18.2f %25d"):format(topic, num(st.pullRT),
            num(st.pullTPS), num(st.consumeRT), num(st.consumeOKTPS), num(st.consumeFailedTPS),
            math.tointeger(num(st.consumeFailedMsgs)) or 0)
    end
    if v.jstack then
        out[#out + 1] = "\n#Consumer jstack#"
        out[#out + 1] = v.jstack
    end
    return table.concat(out, "\n")
end

function M.status(ctx, o)
    local out = { group = o.consumerGroup, clients = {} }
    if o.clientId then
        local info = rpc.running_info(ctx, o.consumerGroup, o.clientId, o.jstack)
        out.clients[1] = { clientId = o.clientId, info = M.running_view(info) }
        return out
    end
    local view = M.connection_view((rpc.consumer_connection(ctx, o.consumerGroup, o.brokerAddr)))
    for _, conn in ipairs(view.connections) do
        local ok, info = pcall(rpc.running_info, ctx, o.consumerGroup, conn.clientId, o.jstack)
        out.clients[#out.clients + 1] = { clientId = conn.clientId, version = conn.versionDesc,
                                          info = ok and M.running_view(info) or nil,
                                          error = not ok and tostring(info) or nil }
    end
    -- ConsumerRunningInfo.analyzeSubscription: every member that answered
    -- subscribes alike (nothing said when none answered).
    local first
    out.sameSubscription = false
    for _, cl in ipairs(out.clients) do
        if cl.info then
            out.sameSubscription = true
            local subs = {}
            for _, s in ipairs(cl.info.subscriptions) do
                subs[#subs + 1] = s.topic .. "=" .. tostring(s.subString)
            end
            local key = table.concat(subs, ";")
            first = first or key
            if key ~= first then
                out.sameSubscription = "different"
            end
        end
    end
    out.sameSubscription = out.sameSubscription == true
    out.clients = array(out.clients)
    return out
end

local function status_text(r)
    if r.sameSubscription == nil then
        return running_text(r.clients[1].clientId, r.clients[1].info)
    end
    local rows = {}
    for i, cl in ipairs(r.clients) do
        rows[i] = { i, cl.clientId, cl.version or "",
                    cl.info and ("%d queues, %d subscriptions"):format(#cl.info.queues, #cl.info.subscriptions)
                        or ("error: " .. tostring(cl.error)) }
    end
    local out = { tbl({ "#Index", "#ClientId", "#Version", "#ConsumerRunningInfo" }, rows) }
    local answered = 0
    for _, cl in ipairs(r.clients) do
        answered = answered + (cl.info and 1 or 0)
    end
    if answered > 0 then
        out[#out + 1] = ""
        out[#out + 1] = r.sameSubscription and "Same subscription in the same group of consumer"
            or "WARN: Different subscription in the same group of consumer!!!"
    end
    for _, cl in ipairs(r.clients) do
        if cl.info then
            out[#out + 1] = ""
            out[#out + 1] = running_text(cl.clientId, cl.info)
        end
    end
    return table.concat(out, "\n")
end

function M.broker_stats(ctx, o)
    local timeout, level = 50000, 0
    if o.timeoutMillis then
        timeout = math.tointeger(tonumber(o.timeoutMillis))
        if not timeout or timeout <= 0 then
            error(remote.usage("--timeoutMillis must be a positive integer"), 0)
        end
    end
    if o.level then
        level = math.tointeger(tonumber(o.level))
        if not level then
            error(remote.usage("--level must be an integer"), 0)
        end
    end
    local order = o.order ~= nil and o.order:lower() == "true"
    local t = rpc.json_slow(ctx, o.brokerAddr, { code = req.GET_BROKER_CONSUME_STATS, ext = { isOrder = order } },
                            timeout)
    local rows = {}
    for _, map in ipairs(t.consumeStatsList or {}) do
        for group, list in pairs(map) do
            if type(group) == "string" then
                for _, cs in ipairs(list) do
                    for _, kv in ipairs(remote.entries(cs.offsetTable)) do
                        local mq, w = kv.key, kv.value
                        local diff = (w.brokerOffset or 0) - (w.consumerOffset or 0)
                        -- mqadmin prints only queues past the level that were consumed.
                        if diff >= level and (w.lastTimestamp or 0) > 0 then
                            rows[#rows + 1] = { topic = mq.topic, group = group, brokerName = mq.brokerName,
                                                queueId = mq.queueId, brokerOffset = w.brokerOffset,
                                                consumerOffset = w.consumerOffset, diff = diff,
                                                lastTimestamp = w.lastTimestamp }
                        end
                    end
                end
            end
        end
    end
    table.sort(rows, function(a, b)
        if a.group ~= b.group then
            return a.group < b.group
        end
        return rpc.mq_less(a, b)
    end)
    return { brokerAddr = t.brokerAddr or o.brokerAddr, totalDiff = t.totalDiff or 0, queues = array(rows) }
end

local function broker_stats_text(r)
    local rows = {}
    for _, q in ipairs(r.queues) do
        rows[#rows + 1] = { q.topic, q.group, q.brokerName, q.queueId, q.brokerOffset, q.consumerOffset, q.diff,
                            rpc.date(q.lastTimestamp) }
    end
    return tbl({ "#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff",
                 "#LastTime" }, rows) .. ("\n\nDiff Total: %d"):format(r.totalDiff)
end

M.commands = {
    {
        name = "consumerProgress", desc = "Query consumers's progress, speed",
        options = {
            { "g", "groupName", arg = true, desc = "consumer group name" },
            { "s", "showClientIP", arg = true, desc = "Show Client IP per Queue" },
        },
        run = M.progress, format = progress_text,
    },
    {
        name = "consumerConnection", desc = "Query consumer's socket connection, client version and subscription",
        options = {
            { "g", "consumerGroup", arg = true, required = true, desc = "consumer group name" },
            { "b", "brokerAddr", arg = true, desc = "broker address" },
        },
        run = M.connection, format = connection_text,
    },
    {
        name = "consumerStatus", desc = "Query consumer's internal data structure",
        options = {
            { "g", "consumerGroup", arg = true, required = true, desc = "consumer group name" },
            { "i", "clientId", arg = true, desc = "The consumer's client id" },
            { "b", "brokerAddr", arg = true, desc = "broker address" },
            { "s", "jstack", desc = "Run jstack command in the consumer progress" },
        },
        run = M.status, format = status_text,
    },
    {
        name = "brokerConsumeStats", desc = "Fetch broker consume stats data",
        options = {
            { "b", "brokerAddr", arg = true, required = true, desc = "Broker address" },
            { "t", "timeoutMillis", arg = true, desc = "request timeout Millis" },
            { "l", "level", arg = true, desc = "threshold of print diff" },
            { "o", "order", arg = true, desc = "order topic" },
        },
        run = M.broker_stats, format = broker_stats_text,
    },
}

return M
