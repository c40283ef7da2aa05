-- The consumer family of `rmq admin`: consumerProgress,
-- consumerConnection, consumerStatus and brokerConsumeStats, as 4.9.8's
-- mqadmin (ConsumerProgressSubCommand, ConsumerConnectionSubCommand,
-- ConsumerStatusSubCommand, BrokerConsumeStatsSubCommad): the same
-- option letters, requests (GET_CONSUME_STATS 208,
-- GET_CONSUMER_CONNECTION_LIST 203, GET_CONSUMER_RUNNING_INFO 307,
-- GET_BROKER_CONSUME_STATS 317) and columns.  The command shape is
-- group.lua's.
local codes = require("rmq.codes")
local rpc = require("rmq.admin.rpc")

local req = codes.request

local M = {}

local function list_of(set)
    local out = {}
    for _, v in ipairs(set or {}) do
        out[#out + 1] = v
    end
    return out
end

-- ConsumerConnection as a plain table: connections sorted by client id.
local function connection_view(cc)
    local conns = list_of(cc.connectionSet)
    table.sort(conns, function(a, b) return tostring(a.clientId) < tostring(b.clientId) end)
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
    return { connections = conns, subscriptions = subs, consumeType = cc.consumeType,
             messageModel = cc.messageModel, consumeFromWhere = cc.consumeFromWhere, minVersion = minv }
end

local function total_diff(stats)
    local d = 0
    for _, w in ipairs(stats.offsetTable) do
        d = d + (w.brokerOffset - w.consumerOffset)
    end
    return d
end

-- {mq key -> client ip} from every member's running info (-s true).
local function allocation(c, group)
    local out = {}
    local cc = c:consumer_connection(group)
    for _, conn in ipairs(cc and cc.connectionSet or {}) do
        local info = c:running_info(group, conn.clientId, false)
        for _, kv in ipairs(info and rpc.entries(info.mqTable) or {}) do
            local mq = kv[1]
            if type(mq) == "table" then
                out[mq.topic .. "@" .. mq.brokerName .. "@" .. tostring(mq.queueId)] =
                    tostring(conn.clientId):match("^[^@]*")
            end
        end
    end
    return out
end

local function progress(c, o)
    if o.g then
        local stats, err, exit = c:consume_stats(o.g)
        if not stats then
            return nil, err, exit
        end
        local ips = (o.s and o.s:lower() == "true") and allocation(c, o.g) or nil
        local rows = {}
        for _, w in ipairs(stats.offsetTable) do
            local mq = w.mq
            rows[#rows + 1] = {
                topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId,
                brokerOffset = w.brokerOffset, consumerOffset = w.consumerOffset,
                diff = w.brokerOffset - w.consumerOffset, lastTimestamp = w.lastTimestamp,
                clientIp = ips and (ips[mq.topic .. "@" .. mq.brokerName .. "@" .. tostring(mq.queueId)] or "N/A"),
            }
        end
        return { group = o.g, queues = rows, consumeTps = stats.consumeTps, diffTotal = total_diff(stats),
                 showClientIp = ips ~= nil }
    end
    local tl, err, exit = c:namesrv_json({ code = req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER })
    if not tl then
        return nil, err, exit
    end
    local groups = {}
    for _, topic in ipairs(tl.topicList or {}) do
        local g = topic:match("^%%RETRY%%(.+)$")
        if g then
            groups[#groups + 1] = g
        end
    end
    table.sort(groups)
    local out = { groups = {} }
    for _, g in ipairs(groups) do
        -- As mqadmin: a group whose stats or members cannot be read is
        -- shown with what could be (OFFLINE, 0).
        local row = { group = g, count = 0, consumeTps = 0, diffTotal = 0 }
        local stats = c:consume_stats(g)
        if stats then
            row.consumeTps = math.floor(stats.consumeTps)
            row.diffTotal = total_diff(stats)
        end
        local cc = c:consumer_connection(g)
        if cc then
            local v = connection_view(cc)
            row.count = #v.connections
            row.version = v.minVersion
            row.consumeType = v.consumeType
            row.messageModel = v.messageModel
        end
        out.groups[#out.groups + 1] = row
    end
    return out
end

local function progress_text(r)
    local lines = {}
    if r.group then
        local w = r.showClientIp and { 64, 32, 4, 20, 20, 20, 20 } or { 64, 32, 4, 20, 20, 20 }
        local head = { "#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset" }
        if r.showClientIp then
            head[#head + 1] = "#Client IP"
        end
        head[#head + 1] = "#Diff"
        head[#head + 1] = "#LastTime"
        lines[1] = rpc.row(w, head)
        for _, q in ipairs(r.queues) do
            local vals = { q.topic, q.brokerName, q.queueId, q.brokerOffset, q.consumerOffset }
            if r.showClientIp then
                vals[#vals + 1] = q.clientIp
            end
            vals[#vals + 1] = q.diff
            vals[#vals + 1] = q.lastTimestamp == 0 and "N/A" or rpc.date(q.lastTimestamp)
            lines[#lines + 1] = rpc.row(w, vals)
        end
        lines[#lines + 1] = ""
        lines[#lines + 1] = ("Consume TPS: %.2f"):format(r.consumeTps)
        lines[#lines + 1] = ("Diff Total: %d"):format(r.diffTotal)
        return table.concat(lines, "\n")
    end
    local w = { 64, 6, 24, 5, 14, 7 }
    lines[1] = rpc.row(w, { "#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total" })
    for _, g in ipairs(r.groups) do
        local online = g.count > 0
        local push = g.consumeType ~= "CONSUME_ACTIVELY"
        lines[#lines + 1] = rpc.row(w, {
            g.group, g.count, online and rpc.version_desc(g.version) or "OFFLINE",
            online and (push and "PUSH" or "PULL") or "",
            (online and push) and tostring(g.messageModel or "") or "", g.consumeTps, g.diffTotal,
        })
    end
    return table.concat(lines, "\n")
end

local function connection(c, o)
    local cc, err, exit = c:consumer_connection(o.g, o.b)
    if not cc then
        return nil, err, exit
    end
    return connection_view(cc)
end

local function connection_text(v)
    local lines = { rpc.row({ 36, 22, 10 }, { "#ClientId", "#ClientAddr", "#Language", "#Version" }, " ") }
    for _, conn in ipairs(v.connections) do
        lines[#lines + 1] = rpc.row({ 36, 22, 10 }, { conn.clientId, conn.clientAddr, conn.language,
                                                     rpc.version_desc(conn.version) }, " ")
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Below is subscription:"
    lines[#lines + 1] = rpc.row({ 20 }, { "#Topic", "#SubExpression" }, " ")
    for _, s in ipairs(v.subscriptions) do
        lines[#lines + 1] = rpc.row({ 20 }, { s.topic, s.subString }, " ")
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "ConsumeType: " .. tostring(v.consumeType)
    lines[#lines + 1] = "MessageModel: " .. tostring(v.messageModel)
    lines[#lines + 1] = "ConsumeFromWhere: " .. tostring(v.consumeFromWhere)
    return table.concat(lines, "\n")
end

-- ConsumerRunningInfo as a plain table: properties, subscriptions, and
-- per queue its process-queue figures, sorted as MessageQueue sorts.
local function running_view(info)
    local queues = {}
    for _, kv in ipairs(rpc.entries(info.mqTable)) do
        local mq, pq = kv[1], kv[2]
        if type(mq) == "table" then
            local q = { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId }
            for k, v in pairs(type(pq) == "table" and pq or {}) do
                if type(k) == "string" and k ~= rpc.ENTRIES then
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
                            subVersion = sd.subVersion }
    end
    table.sort(subs, function(a, b) return tostring(a.topic) < tostring(b.topic) end)
    local props = {}
    for k, v in pairs(info.properties or {}) do
        if type(k) == "string" and k ~= rpc.ENTRIES then
            props[k] = v
        end
    end
    return { properties = props, subscriptions = subs, queues = queues, jstack = info.jstack }
end

local function running_text(clientId, v)
    local lines = { "#Consumer Properties# (" .. clientId .. ")" }
    local keys = {}
    for k in pairs(v.properties) do
        keys[#keys + 1] = k
    end
    table.sort(keys)
    for i, k in ipairs(keys) do
        lines[#lines + 1] = ("%-40s: %s"):format(("%03d %s"):format(i, k), tostring(v.properties[k]))
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "#Consumer Subscription#"
    for i, s in ipairs(v.subscriptions) do
        lines[#lines + 1] = ("%03d Topic: %-40s ClassFilter: false SubExpression: %s"):format(i, s.topic,
            tostring(s.subString))
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "#Consumer Offset#"
    lines[#lines + 1] = rpc.row({ 64, 20, 4 }, { "#Topic", "#Broker Name", "#QID", "#Consumer Offset" })
    for _, q in ipairs(v.queues) do
        lines[#lines + 1] = rpc.row({ 64, 20, 4 }, { q.topic, q.brokerName, q.queueId,
                                                    tostring(q.commitOffset or "-") })
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "#Consumer MQ Detail#"
    lines[#lines + 1] = rpc.row({ 64, 20, 4 }, { "#Topic", "#Broker Name", "#QID", "#ProcessQueueInfo" })
    for _, q in ipairs(v.queues) do
        lines[#lines + 1] = rpc.row({ 64, 20, 4 }, { q.topic, q.brokerName, q.queueId,
            ("ProcessQueueInfo [commitOffset=%s, cachedMsgMinOffset=%s, cachedMsgMaxOffset=%s, cachedMsgCount=%s, "
             .. "locked=%s, droped=%s]"):format(tostring(q.commitOffset), tostring(q.cachedMsgMinOffset),
                tostring(q.cachedMsgMaxOffset), tostring(q.cachedMsgCount), tostring(q.locked), tostring(q.droped)) })
    end
    return table.concat(lines, "\n")
end

local function status(c, o)
    local cc, err, exit = c:consumer_connection(o.g, o.b)
    if not cc then
        return nil, err, exit
    end
    local view = connection_view(cc)
    local out = { group = o.g, clients = {} }
    local ids = {}
    if o.i then
        ids[1] = { clientId = o.i }
    else
        ids = view.connections
    end
    for _, conn in ipairs(ids) do
        local info, e, x = c:running_info(o.g, conn.clientId, o.s == true)
        if info then
            out.clients[#out.clients + 1] = { clientId = conn.clientId, version = conn.version,
                                              info = running_view(info) }
        elseif o.i then
            return nil, e, x
        else
            out.clients[#out.clients + 1] = { clientId = conn.clientId, version = conn.version, error = e }
        end
    end
    if not o.i then
        -- ConsumerRunningInfo.analyzeSubscription: every member subscribes alike.
        local first
        out.sameSubscription = true
        for _, cl in ipairs(out.clients) do
            if cl.info then
                local subs = {}
                for _, s in ipairs(cl.info.subscriptions) do
                    subs[#subs + 1] = s.topic .. "=" .. tostring(s.subString)
                end
                local key = table.concat(subs, ";")
                first = first or key
                if key ~= first then
                    out.sameSubscription = false
                end
            end
        end
    end
    return out
end

local function status_text(r)
    local lines = {}
    if #r.clients == 1 and r.clients[1].info and r.sameSubscription == nil then
        return running_text(r.clients[1].clientId, r.clients[1].info)
    end
    lines[1] = rpc.row({ 10, 40, 20 }, { "#Index", "#ClientId", "#Version", "#ConsumerRunningInfo" }, " ")
    for i, cl in ipairs(r.clients) do
        local what = cl.info and (("%d queues, %d subscriptions"):format(#cl.info.queues, #cl.info.subscriptions))
            or ("error: " .. tostring(cl.error))
        lines[#lines + 1] = rpc.row({ 10, 40, 20 }, { i, cl.clientId, rpc.version_desc(cl.version), what }, " ")
    end
    if r.sameSubscription ~= nil and #r.clients > 0 then
        lines[#lines + 1] = ""
        lines[#lines + 1] = r.sameSubscription and "Same subscription in the same group of consumer"
            or "WARN: Different subscription in the same group of consumer!!!"
    end
    for _, cl in ipairs(r.clients) do
        if cl.info then
            lines[#lines + 1] = ""
            lines[#lines + 1] = running_text(cl.clientId, cl.info)
        end
    end
    return table.concat(lines, "\n")
end

local function broker_stats(c, o)
    local timeout, level = 50000, 0
    if o.t then
        timeout = math.tointeger(tonumber(o.t))
        if not timeout or timeout <= 0 then
            return nil, "brokerConsumeStats: -t timeoutMillis must be a positive integer", rpc.EXIT_USAGE
        end
    end
    if o.l then
        level = math.tointeger(tonumber(o.l))
        if not level then
            return nil, "brokerConsumeStats: -l level must be an integer", rpc.EXIT_USAGE
        end
    end
    local order = o.o ~= nil and tostring(o.o):lower() == "true"
    local t, err, exit = c:json(o.b, { code = req.GET_BROKER_CONSUME_STATS, ext = { isOrder = order } }, timeout)
    if not t then
        return nil, err, exit
    end
    local rows = {}
    for _, map in ipairs(t.consumeStatsList or {}) do
        for group, list in pairs(map) do
            if type(group) == "string" and group ~= rpc.ENTRIES then
                for _, cs in ipairs(list) do
                    for _, kv in ipairs(rpc.entries(cs.offsetTable)) do
                        local mq, w = kv[1], kv[2]
                        local diff = (w.brokerOffset or 0) - (w.consumerOffset or 0)
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
    return { brokerAddr = t.brokerAddr or o.b, totalDiff = t.totalDiff or 0, queues = rows }
end

local function broker_stats_text(r)
    local w = { 64, 64, 32, 4, 20, 20, 20 }
    local lines = { rpc.row(w, { "#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset",
                                 "#Diff", "#LastTime" }) }
    for _, q in ipairs(r.queues) do
        lines[#lines + 1] = rpc.row(w, { q.topic, q.group, q.brokerName, q.queueId, q.brokerOffset,
                                         q.consumerOffset, q.diff, rpc.date(q.lastTimestamp) })
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = ("Diff Total: %d"):format(r.totalDiff)
    return table.concat(lines, "\n")
end

M.commands = {
    {
        name = "consumerProgress", desc = "Query consumers's progress, speed",
        options = {
            { "g", "groupName", true, "consumer group name" },
            { "s", "showClientIP", true, "Show Client IP per Queue" },
        },
        run = progress, text = progress_text,
    },
    {
        name = "consumerConnection", desc = "Query consumer's socket connection, client version and subscription",
        options = {
            { "g", "consumerGroup", true, "consumer group name", true },
            { "b", "brokerAddr", true, "broker address" },
        },
        run = connection, text = connection_text,
    },
    {
        name = "consumerStatus", desc = "Query consumer's internal data structure",
        options = {
            { "g", "consumerGroup", true, "consumer group name", true },
            { "i", "clientId", true, "The consumer's client id" },
            { "b", "brokerAddr", true, "broker address" },
            { "s", "jstack", false, "Run jstack command in the consumer progress" },
        },
        run = status, text = status_text,
    },
    {
        name = "brokerConsumeStats", desc = "Fetch broker consume stats data",
        options = {
            { "b", "brokerAddr", true, "Broker address", true },
            { "t", "timeoutMillis", true, "request timeout Millis" },
            { "l", "level", true, "threshold of print diff" },
            { "o", "order", true, "order topic" },
        },
        run = broker_stats, text = broker_stats_text,
    },
}

return M
