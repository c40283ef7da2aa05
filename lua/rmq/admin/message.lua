-- The message family of `rmq admin`: queryMsgById, queryMsgByKey,
-- queryMsgByUniqueKey, queryMsgByOffset, printMsg, printMsgByQueue,
-- sendMessage, consumeMessage, checkMsgSendRT and queryCq, as 4.9.8's
-- mqadmin (the SubCommands of tools/command/message and queue): the same
-- options, requests (VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, PULL_MESSAGE as
-- DefaultMQPullConsumer with group TOOLS_CONSUMER, SEND_MESSAGE_V2 through
-- rmq.client.producer, QUERY_CONSUME_QUEUE, and for the MessageTrack of
-- a looked-up message QUERY_TOPIC_CONSUME_BY_WHO, GET_CONSUMER_CONNECTION_LIST
-- and GET_CONSUME_STATS) and output.
--
-- Where mqadmin writes a message's body to /tmp/rocketmq/msgbodys, we
-- print it ("Message Body:"; --json has body, or bodyHex when it is not
-- UTF-8).  Pulling commands stop after --limit messages (10000): a result
-- is held whole before it is printed, so it stays bounded.
--
--   message.view(ctx, {msgId=}) / message.by_key(ctx, {topic=, msgKey=})
--   message.pull_queue(ctx, mq, expr, offset, max) -> {status=, nextBeginOffset=, msgs=}
--   message.send(ctx, {topic=, body=, key=, tags=, broker=, qid=}) -> {brokerName=, queueId=, sendStatus=, msgId=, ...}
local codes = require("rmq.codes")
local core = require("rmq.core")
local cmessage = require("rmq.client.message")
local remote = require("rmq.admin.remote")
local rpc = require("rmq.admin.rpc")

local req = codes.request
local resp = codes.response

local M = {}

M.TOOLS_CONSUMER = "TOOLS_CONSUMER"        -- MixAll.TOOLS_CONSUMER_GROUP
M.DEFAULT_LIMIT = 10000
M.FLAG_SUBSCRIPTION = 0x4                  -- PullSysFlag: the request carries the expression

-- A value as Java's string concatenation writes it (null for nil).
local function jstr(v)
    return v == nil and "null" or tostring(v)
end

local function array(t)
    return require("rmq.admin").array(t)
end

local function parse_bool(v)
    return v ~= nil and tostring(v):lower() == "true"
end

local function int_opt(o, name, default)
    local v = o[name]
    if v == nil then
        return default
    end
    local n = math.tointeger(tonumber(v))
    if n == nil then
        error(remote.usage(("--%s: %q is not an integer"):format(name, tostring(v))), 0)
    end
    return n
end

local function check_charset(o)
    local cs = o.charsetName
    if cs and not cs:upper():gsub("%-", ""):match("^UTF8$") then
        error(remote.usage(("--charsetName %s: rmq prints bodies as UTF-8 only"):format(cs)), 0)
    end
end

local function limit_of(o)
    local n = int_opt(o, "limit", M.DEFAULT_LIMIT)
    if n <= 0 then
        error(remote.usage("--limit must be positive"), 0)
    end
    return n
end

-- {{{ messages as tables

-- Java's Map.toString of the properties, keys sorted.
local function props_string(p)
    local parts = {}
    for _, k in ipairs(remote.sorted_keys(p or {})) do
        parts[#parts + 1] = k .. "=" .. tostring(p[k])
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end

--- A decoded record as the plain table the commands return.
function M.view_of(m)
    local v = {
        msgId = m.msgId, offsetMsgId = m.offsetMsgId, topic = m.topic, tags = m.tags, keys = m.keys,
        queueId = m.queueId, queueOffset = m.queueOffset, commitLogOffset = m.commitLogOffset,
        reconsumeTimes = m.reconsumeTimes, bornTimestamp = m.bornTimestamp, storeTimestamp = m.storeTimestamp,
        bornHost = m.bornHost, storeHost = m.storeHost, sysFlag = m.sysFlag, flag = m.flag,
        storeSize = m.storeSize, bodyCRC = m.bodyCRC, preparedTransactionOffset = m.preparedTransactionOffset,
        properties = m.properties, bodyLength = #(m.body or ""),
    }
    if utf8.len(m.body or "") then
        v.body = m.body
    else
        v.bodyHex = (m.body:gsub(".", function(c) return ("%02X"):format(c:byte()) end))
    end
    return v
end

local function body_text(v)
    return v.body or ("<%d bytes, not UTF-8: %s>"):format(v.bodyLength, v.bodyHex)
end

-- MessageExt.toString, without the body bytes.
local function ext_string(v)
    return ("MessageExt [queueId=%s, storeSize=%s, queueOffset=%s, sysFlag=%s, bornTimestamp=%s, bornHost=%s, "
        .. "storeTimestamp=%s, storeHost=%s, msgId=%s, commitLogOffset=%s, bodyCRC=%s, reconsumeTimes=%s, "
        .. "preparedTransactionOffset=%s, toString()=Message{topic='%s', flag=%s, properties=%s, transactionId='%s'}]")
        :format(tostring(v.queueId), tostring(v.storeSize), tostring(v.queueOffset), tostring(v.sysFlag),
            tostring(v.bornTimestamp), tostring(v.bornHost), tostring(v.storeTimestamp), tostring(v.storeHost),
            tostring(v.offsetMsgId), tostring(v.commitLogOffset), tostring(v.bodyCRC), tostring(v.reconsumeTimes),
            tostring(v.preparedTransactionOffset), tostring(v.topic), tostring(v.flag), props_string(v.properties),
            tostring((v.properties or {}).__transactionId__ or (v.properties or {}).UNIQ_KEY))
end

--- printMessage's line: "MSGID: id MessageExt [...] BODY: body".
local function msg_line(v, print_body)
    return ("MSGID: %s %s BODY: %s"):format(tostring(v.msgId), ext_string(v),
        print_body and body_text(v) or "NOT PRINT BODY")
end

-- QueryMsgByIdSubCommand.printMsg's block.
local function detail_text(v, offset_id_label)
    local rows = {
        { offset_id_label and "OffsetID:" or nil, v.offsetMsgId },
        { "Topic:", v.topic },
        { "Tags:", "[" .. tostring(v.tags) .. "]" },
        { "Keys:", "[" .. tostring(v.keys) .. "]" },
        { "Queue ID:", v.queueId },
        { "Queue Offset:", v.queueOffset },
        { "CommitLog Offset:", v.commitLogOffset },
        { "Reconsume Times:", v.reconsumeTimes },
        { "Born Timestamp:", rpc.date_ms(v.bornTimestamp) },
        { "Store Timestamp:", rpc.date_ms(v.storeTimestamp) },
        { "Born Host:", v.bornHost },
        { "Store Host:", v.storeHost },
        { "System Flag:", v.sysFlag },
        { "Properties:", props_string(v.properties) },
        { "Message Body:", body_text(v) },
    }
    local lines = {}
    for _, r in ipairs(rows) do
        if r[1] then
            lines[#lines + 1] = ("%-20s %s"):format(r[1], tostring(r[2]))
        end
    end
    if v.track then
        lines[#lines + 1] = ""
        if #v.track == 0 then
            lines[#lines + 1] = "WARN: No Consumer"
        end
        for _, t in ipairs(v.track) do
            lines[#lines + 1] = ("MessageTrack [consumerGroup=%s, trackType=%s, exceptionDesc=%s]"):format(
                t.consumerGroup, t.trackType, jstr(t.exceptionDesc))
        end
    elseif v.trackError then
        lines[#lines + 1] = ""
        lines[#lines + 1] = "MessageTrack: " .. v.trackError
    end
    return table.concat(lines, "\n")
end

local function records(body, addr)
    local msgs, err = cmessage.decode_records(body or "")
    if not msgs then
        error(remote.failed(addr, "undecodable messages: " .. tostring(err)), 0)
    end
    return msgs
end

-- }}}

-- {{{ message track

-- DefaultMQAdminExtImpl.consumed: the group's committed offset of the
-- message's queue is past it.
local function consumed(ctx, v, group)
    local broker
    for _, b in ipairs(rpc.brokers(ctx)) do
        for _, a in pairs(b.addrs) do
            if a == v.storeHost then
                broker = b.name
            end
        end
    end
    for _, w in ipairs(rpc.consume_stats(ctx, group).offsetTable) do
        if w.mq.topic == v.topic and w.mq.queueId == v.queueId and (broker == nil or w.mq.brokerName == broker) then
            return w.consumerOffset > v.queueOffset
        end
    end
    return false
end

local function subscribed_tags(cc, topic)
    for t, sd in pairs(cc.subscriptionTable or {}) do
        if t == topic and type(sd) == "table" then
            return sd
        end
    end
end

--- messageTrackDetail: per group consuming the topic (QUERY_TOPIC_CONSUME_BY_WHO
--- at the broker that stored it), whether it consumed the message.
function M.track(ctx, v, addr)
    local groups = rpc.json(ctx, addr, { code = req.QUERY_TOPIC_CONSUME_BY_WHO, ext = { topic = v.topic } })
    local list = {}
    for _, g in ipairs(groups.groupList or {}) do
        list[#list + 1] = g
    end
    table.sort(list)
    local out = {}
    for _, group in ipairs(list) do
        local mt = { consumerGroup = group, trackType = "UNKNOWN" }
        local ok, cc = pcall(rpc.consumer_connection, ctx, group)
        if not ok then
            if remote.is_error(cc) and cc.code == resp.CONSUMER_NOT_ONLINE then
                mt.trackType = "NOT_ONLINE"
                mt.exceptionDesc = ("CODE:%d DESC:%s"):format(cc.code, tostring(cc.remark))
            else
                mt.exceptionDesc = tostring(cc)
            end
        elseif cc.consumeType == "CONSUME_ACTIVELY" then
            mt.trackType = "PULL"
        else
            local cok, yes = pcall(consumed, ctx, v, group)
            if cok and yes then
                mt.trackType = "CONSUMED"
                local sd = subscribed_tags(cc, v.topic)
                if sd and sd.subString ~= "*" and v.tags then
                    local hit = false
                    for _, t in ipairs(sd.tagsSet or {}) do
                        hit = hit or t == v.tags
                    end
                    if not hit then
                        mt.trackType = "CONSUMED_BUT_FILTERED"
                    end
                end
            elseif cok then
                mt.trackType = "NOT_CONSUME_YET"
            else
                mt.exceptionDesc = tostring(yes)
            end
        end
        out[#out + 1] = mt
    end
    return array(out)
end

local function with_track(ctx, v, addr)
    local ok, t = pcall(M.track, ctx, v, addr)
    if ok then
        v.track = t
    else
        v.trackError = tostring(t)
    end
    return v
end

-- }}}

-- {{{ queries

-- QUERY_MESSAGE at every broker of the topic's route (selectBrokerAddr),
-- as MQAdminImpl.queryMessage: key (or unique key) matched again here.
function M.query(ctx, topic, key, max, unique)
    local out = {}
    for _, bd in ipairs((rpc.route_brokers(ctx, topic))) do
        local addr = rpc.select_addr(bd)
        if addr then
            local r = remote.ok(ctx, addr, {
                code = req.QUERY_MESSAGE,
                ext = { topic = topic, key = key, maxNum = max, beginTimestamp = 0,
                        endTimestamp = math.maxinteger, _UNIQUE_KEY_QUERY = unique and "true" or "false" },
            }, { [resp.QUERY_NOT_FOUND] = true })
            if r.code == 0 then
                for _, m in ipairs(records(r.body, addr)) do
                    local hit = false
                    if unique then
                        hit = m.msgId == key
                    else
                        for k in tostring(m.keys or ""):gmatch("%S+") do
                            hit = hit or k == key
                        end
                    end
                    if hit then
                        local v = M.view_of(m)
                        v.brokerAddr = addr
                        out[#out + 1] = v
                    end
                end
            end
        end
    end
    return out
end

--- viewMessage(offsetMsgId): VIEW_MESSAGE_BY_ID at the broker the id
--- names.  A client id (UNIQ_KEY) needs the topic (-t, rmq's addition:
--- 4.9.8's queryMsgById takes offset ids only).
function M.view(ctx, id, topic)
    local addr, off = cmessage.decode_offset_msg_id(id)
    local port = addr and tonumber(addr:match(":(%d+)$"))
    if not (id:match("^%x+$") and port and port > 0 and port < 65536) then
        addr = nil
    end
    if addr then
        -- A client id (UNIQ_KEY) decodes too, to an address that is no
        -- broker: with a topic, a failure here falls back to the query.
        local ok, r = pcall(remote.ok, ctx, addr, { code = req.VIEW_MESSAGE_BY_ID, ext = { offset = off } })
        if not ok and not topic then
            error(r, 0)
        end
        local msgs = ok and records(r.body, addr) or {}
        if #msgs > 0 then
            return with_track(ctx, M.view_of(msgs[1]), addr)
        end
    end
    if topic then
        local found = M.query(ctx, topic, id, 32, true)
        if #found > 0 then
            return with_track(ctx, found[1], found[1].brokerAddr)
        end
    end
    if not addr then
        error(remote.failed(nil, ("%s is not an offset message id (32 hex digits); for a client message id "
            .. "give its topic with -t"):format(id)), 0)
    end
    error(remote.failed(addr, "Message not found: " .. id), 0)
end

--- consumeMessageDirectly: the message looked up (by offset id, or by
--- client id in topic), then CONSUME_MESSAGE_DIRECTLY at the broker that
--- stored it, which hands it to the client's listener and relays its
--- ConsumeMessageDirectlyResult.
function M.consume_directly(ctx, group, client_id, id, topic)
    local v = M.view(ctx, id, topic)
    return rpc.json_slow(ctx, v.storeHost, { code = req.CONSUME_MESSAGE_DIRECTLY,
        ext = { consumerGroup = group, clientId = client_id, msgId = v.offsetMsgId } }, ctx.timeout * 3)
end

local function directly_string(r)
    return ("ConsumeMessageDirectlyResult [order=%s, autoCommit=%s, consumeResult=%s, remark=%s, spentTimeMills=%s]")
        :format(jstr(r.order), jstr(r.autoCommit), jstr(r.consumeResult), jstr(r.remark), jstr(r.spentTimeMills))
end

-- }}}

-- {{{ pulls

local PULL_STATUS = {
    [resp.SUCCESS] = "FOUND",
    [resp.PULL_NOT_FOUND] = "NO_NEW_MSG",
    [resp.PULL_RETRY_IMMEDIATELY] = "NO_MATCHED_MSG",
    [resp.PULL_OFFSET_MOVED] = "OFFSET_ILLEGAL",
}

local function tag_set(expr)
    if expr == nil or expr == "" or expr == "*" then
        return nil
    end
    local set = {}
    for t in expr:gmatch("[^|]+") do
        t = t:match("^%s*(.-)%s*$")
        if t ~= "" then
            set[t] = true
        end
    end
    return set
end

--- One pull of up to max messages of mq from offset (at the master).
--- {status = FOUND|NO_NEW_MSG|NO_MATCHED_MSG|OFFSET_ILLEGAL, nextBeginOffset=, msgs = {views}}.
function M.pull_queue(ctx, mq, expr, offset, max, group)
    local r = remote.ok(ctx, mq.addr, {
        code = req.PULL_MESSAGE,
        ext = { consumerGroup = group or M.TOOLS_CONSUMER, topic = mq.topic, queueId = mq.queueId,
                queueOffset = offset, maxMsgNums = max, sysFlag = M.FLAG_SUBSCRIPTION, commitOffset = 0,
                suspendTimeoutMillis = 0, subscription = expr or "*", subVersion = 0, expressionType = "TAG" },
    }, { [resp.PULL_NOT_FOUND] = true, [resp.PULL_RETRY_IMMEDIATELY] = true, [resp.PULL_OFFSET_MOVED] = true })
    local out = { status = PULL_STATUS[r.code], nextBeginOffset = math.tointeger(tonumber(r.ext.nextBeginOffset))
                  or offset, msgs = {} }
    if r.code == resp.SUCCESS then
        -- The broker filters by tag hash; the client by the tag itself.
        local tags = tag_set(expr)
        for _, m in ipairs(records(r.body, mq.addr)) do
            if tags == nil or (m.tags and tags[m.tags]) then
                out.msgs[#out.msgs + 1] = M.view_of(m)
            end
        end
        if #out.msgs == 0 then
            out.status = "NO_MATCHED_MSG"
        end
    end
    return out
end

--- The readable queues of a topic (fetchSubscribeMessageQueues), each
--- with the address to pull from: {{topic=, brokerName=, queueId=, addr=}...}.
function M.queues(ctx, topic)
    local bds, route = rpc.route_brokers(ctx, topic)
    local addr_of = {}
    for _, bd in ipairs(bds) do
        addr_of[bd.brokerName] = (bd.brokerAddrs or {})["0"] or rpc.select_addr(bd)
    end
    local out = {}
    for _, qd in ipairs(route.queueDatas or {}) do
        if (qd.perm & 4) ~= 0 and addr_of[qd.brokerName] then
            for q = 0, qd.readQueueNums - 1 do
                out[#out + 1] = { topic = topic, brokerName = qd.brokerName, queueId = q, addr = addr_of[qd.brokerName] }
            end
        end
    end
    table.sort(out, rpc.mq_less)
    return out
end

local function queue_of(ctx, topic, broker_name, qid)
    return { topic = topic, brokerName = broker_name, queueId = qid, addr = rpc.broker_addr(ctx, broker_name) }
end

local function mq_string(mq)
    return ("MessageQueue [topic=%s, brokerName=%s, queueId=%d]"):format(mq.topic, mq.brokerName, mq.queueId)
end

local function min_max(ctx, mq, begin_ts, end_ts)
    local min = rpc.queue_offset(ctx, mq.addr, req.GET_MIN_OFFSET, mq.topic, mq.queueId)
    local max = rpc.queue_offset(ctx, mq.addr, req.GET_MAX_OFFSET, mq.topic, mq.queueId)
    if begin_ts then
        min = rpc.queue_offset(ctx, mq.addr, req.SEARCH_OFFSET_BY_TIMESTAMP, mq.topic, mq.queueId, begin_ts)
    end
    if end_ts then
        max = rpc.queue_offset(ctx, mq.addr, req.SEARCH_OFFSET_BY_TIMESTAMP, mq.topic, mq.queueId, end_ts)
    end
    return min, max
end

-- Pulls [min, max) of mq by 32, as printMsg's READQ loop; appends to
-- section.msgs and stops at budget.left messages.
local function read_range(ctx, mq, expr, min, max, section, budget, stop_on_unmatched, group)
    local offset = min
    while offset < max do
        if budget.left <= 0 then
            section.truncated = true
            return
        end
        local p = M.pull_queue(ctx, mq, expr, offset, math.min(32, max - offset), group)
        local nxt = p.nextBeginOffset
        if p.status == "FOUND" then
            for _, v in ipairs(p.msgs) do
                if budget.left > 0 then
                    section.msgs[#section.msgs + 1] = v
                    budget.left = budget.left - 1
                end
            end
        elseif p.status == "NO_MATCHED_MSG" then
            section.events[#section.events + 1] = ("%s no matched msg. status=%s, offset=%s"):format(mq_string(mq),
                p.status, nxt)
            if stop_on_unmatched then
                return
            end
        else
            section.events[#section.events + 1] = ("%s print msg finished. status=%s, offset=%s"):format(
                mq_string(mq), p.status, nxt)
            return
        end
        if nxt <= offset then
            return
        end
        offset = nxt
    end
end

local function strip_addr(mq)
    return { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId }
end

function M.print_msg(ctx, o)
    check_charset(o)
    local budget = { left = limit_of(o) }
    local begin_ts = o.beginTimestamp and rpc.parse_time(o.beginTimestamp, "beginTimestamp")
    local end_ts = o.endTimestamp and rpc.parse_time(o.endTimestamp, "endTimestamp")
    local out = { topic = o.topic, printBody = o.printBody == nil or parse_bool(o.printBody), queues = {} }
    for _, mq in ipairs(M.queues(ctx, o.topic)) do
        local min, max = min_max(ctx, mq, begin_ts, end_ts)
        local section = { mq = strip_addr(mq), minOffset = min, maxOffset = max, msgs = {}, events = {} }
        read_range(ctx, mq, o.subExpression, min, max, section, budget, false)
        section.msgs, section.events = array(section.msgs), array(section.events)
        out.queues[#out.queues + 1] = section
    end
    out.queues = array(out.queues)
    return out
end

local function print_msg_text(r)
    local lines = {}
    for _, s in ipairs(r.queues) do
        lines[#lines + 1] = ("minOffset=%s, maxOffset=%s, %s"):format(s.minOffset, s.maxOffset, mq_string(s.mq))
        for _, v in ipairs(s.msgs) do
            lines[#lines + 1] = msg_line(v, r.printBody)
        end
        for _, e in ipairs(s.events) do
            lines[#lines + 1] = e
        end
        if s.truncated then
            lines[#lines + 1] = "(stopped at --limit messages)"
        end
        lines[#lines + 1] = "--------------------------------------------------------"
    end
    return table.concat(lines, "\n")
end

function M.print_by_queue(ctx, o)
    check_charset(o)
    local qid = int_opt(o, "queueId")
    local mq = queue_of(ctx, o.topic, o.brokerName, qid)
    local begin_ts = o.beginTimestamp and rpc.parse_time(o.beginTimestamp, "beginTimestamp")
    local end_ts = o.endTimestamp and rpc.parse_time(o.endTimestamp, "endTimestamp")
    local min, max = min_max(ctx, mq, begin_ts, end_ts)
    local section = { msgs = {}, events = {} }
    read_range(ctx, mq, o.subExpression, min, max, section, { left = limit_of(o) }, true)
    local counts = {}
    for _, v in ipairs(section.msgs) do
        if v.tags and v.tags:match("%S") then
            counts[v.tags] = (counts[v.tags] or 0) + 1
        end
    end
    local tags = {}
    for t, n in pairs(counts) do
        tags[#tags + 1] = { tag = t, count = n }
    end
    -- TagCountBean sorts by count, highest first.
    table.sort(tags, function(a, b)
        if a.count ~= b.count then
            return a.count > b.count
        end
        return a.tag < b.tag
    end)
    return { mq = strip_addr(mq), minOffset = min, maxOffset = max, printMsg = parse_bool(o.printMsg),
             printBody = parse_bool(o.printBody), calculate = parse_bool(o.calculate), tags = array(tags),
             msgs = array(section.msgs), truncated = section.truncated }
end

local function print_by_queue_text(r)
    local lines = {}
    if r.calculate then
        for _, t in ipairs(r.tags) do
            lines[#lines + 1] = ("Tag: %-30s Count: %s"):format(t.tag, t.count)
        end
    end
    if r.printMsg then
        for _, v in ipairs(r.msgs) do
            lines[#lines + 1] = msg_line(v, r.printBody)
        end
    end
    if r.truncated then
        lines[#lines + 1] = "(stopped at --limit messages)"
    end
    return table.concat(lines, "\n")
end

function M.by_offset(ctx, o)
    local mq = queue_of(ctx, o.topic, o.brokerName, int_opt(o, "queueId"))
    local p = M.pull_queue(ctx, mq, "*", int_opt(o, "offset"), 1)
    if p.status ~= "FOUND" then
        error(remote.failed(mq.addr, ("no message at offset %s of %s (%s)"):format(o.offset, mq_string(mq),
            p.status)), 0)
    end
    return with_track(ctx, p.msgs[1], mq.addr)
end

-- consumeMessage: from the oldest of each queue (or one queue, from an
-- offset), at most --MessageNumber messages, not committed (a pull
-- consumer that never updates offsets, as mqadmin's).
function M.consume(ctx, o)
    local count = int_opt(o, "MessageNumber", 128)
    if count <= 0 then
        error(remote.usage("Please input a positive messageNumber!"), 0)
    end
    if o.queueId and not o.brokerName then
        error(remote.usage("Please set the brokerName before queueId!"), 0)
    end
    if o.offset and not o.queueId then
        error(remote.usage("Please set queueId before offset!"), 0)
    end
    local now = core.now_ms()
    local begin_ts = o.beginTimestamp and rpc.parse_time(o.beginTimestamp, "beginTimestamp")
    local end_ts = o.endTimestamp and rpc.parse_time(o.endTimestamp, "endTimestamp")
    if (begin_ts and begin_ts > now) or (end_ts and end_ts > now) then
        error(remote.usage("Please set the beginTimestamp and endTimestamp before now!"), 0)
    end
    if begin_ts and end_ts and begin_ts > end_ts then
        error(remote.usage("Please make sure that the beginTimestamp is less than or equal to the endTimestamp"), 0)
    end
    local list
    if o.queueId then
        list = { queue_of(ctx, o.topic, o.brokerName, int_opt(o, "queueId")) }
    else
        list = M.queues(ctx, o.topic)
    end
    local out = { topic = o.topic, msgs = {}, events = {} }
    local left = count
    for _, mq in ipairs(list) do
        if left <= 0 then
            break
        end
        local min, max = min_max(ctx, mq, begin_ts, end_ts)
        min = math.max(min, int_opt(o, "offset", 0))
        local section = { msgs = {}, events = out.events }
        local budget = { left = left }
        read_range(ctx, mq, "*", min, max, section, budget, false, o.consumerGroup)
        for _, v in ipairs(section.msgs) do
            out.msgs[#out.msgs + 1] = v
        end
        left = budget.left
    end
    out.msgs, out.events = array(out.msgs), array(out.events)
    return out
end

local function consume_text(r)
    local lines = {}
    if #r.msgs > 0 then
        lines[1] = "Consume ok"
    end
    for _, v in ipairs(r.msgs) do
        lines[#lines + 1] = msg_line(v, true)
    end
    for _, e in ipairs(r.events) do
        lines[#lines + 1] = e
    end
    return table.concat(lines, "\n")
end

-- }}}

-- {{{ sends

local function producer_for(ctx, trace)
    return require("rmq.client.producer").new({
        namesrvAddr = table.concat(ctx.namesrv, ";"), producerGroup = tostring(core.now_ms()),
        enableMsgTrace = trace, sendMsgTimeout = ctx.timeout, credentials = ctx.credentials,
    })
end

local function send_failed(err, code)
    if code then
        error(remote.error(1, ("send refused: code %s %s"):format(tostring(code), tostring(err)),
                           { code = tonumber(code) }), 0)
    end
    error(remote.error(3, "send failed: " .. tostring(err)), 0)
end

function M.send(ctx, o)
    local qid
    if o.qid then
        if not o.broker then
            error(remote.usage("Broker name must be set if the queue is chosen!"), 0)
        end
        qid = int_opt(o, "qid")
    end
    local p = producer_for(ctx, parse_bool(o.msgTraceEnable))
    local msg = { topic = o.topic, body = o.body, keys = o.key, tags = o.tags }
    local r, err, code
    if qid then
        -- As mqadmin: -b alone does not pin the broker; -b with -i pins the queue.
        r, err, code = p:send_orderly(msg, nil, function(queues)
            for _, q in ipairs(queues) do
                if q.brokerName == o.broker and q.queueId == qid then
                    return q
                end
            end
            return { topic = o.topic, brokerName = o.broker, queueId = qid }
        end)
    else
        r, err, code = p:send(msg)
    end
    if p.enableMsgTrace then
        require("rmq.client.trace").flush(p, ctx.timeout)
    end
    if not r then
        send_failed(err, code)
    end
    return { brokerName = r.queue.brokerName, queueId = r.queue.queueId, sendStatus = r.status, msgId = r.msgId,
             offsetMsgId = r.offsetMsgId, queueOffset = r.queueOffset }
end

function M.check_rt(ctx, o)
    local amount = int_opt(o, "amount", 100)
    local size = int_opt(o, "size", 128)
    if amount <= 0 or size <= 0 then
        error(remote.usage("--amount and --size must be positive"), 0)
    end
    local p = producer_for(ctx, false)
    local body = ("a"):rep(size)
    local rows, total, ok_count = {}, 0, 0
    for i = 0, amount - 1 do
        local chosen
        local t0 = core.mono_ms()
        local r = p:send_orderly({ topic = o.topic, body = body }, i, function(queues, _, arg)
            chosen = queues[arg % #queues + 1]
            return chosen
        end)
        local rt = core.mono_ms() - t0
        if i ~= 0 then
            total = total + rt    -- as mqadmin: the first send (route lookup, connect) is left out
        end
        ok_count = ok_count + (r and 1 or 0)
        rows[#rows + 1] = { brokerName = chosen and chosen.brokerName or "-",
                            queueId = chosen and chosen.queueId or "-", success = r ~= nil, rt = rt }
    end
    return { topic = o.topic, sends = array(rows), ok = ok_count,
             avgRT = amount > 1 and total / (amount - 1) or rows[1].rt }
end

-- }}}

function M.query_cq(ctx, o)
    local broker = o.broker
    if broker == nil then
        local bds = rpc.route_brokers(ctx, o.topic)
        broker = bds[1] and (bds[1].brokerAddrs or {})["0"]
        if not broker then
            error(remote.failed(nil, "No topic route data!"), 0)
        end
    end
    local t = rpc.json(ctx, broker, { code = req.QUERY_CONSUME_QUEUE, ext = {
        topic = o.topic, queueId = int_opt(o, "queue"), index = int_opt(o, "index"), count = int_opt(o, "count", 10),
        consumerGroup = o.consumer } })
    local qd = {}
    for i, d in ipairs(t.queueData or {}) do
        qd[i] = { physicOffset = d.physicOffset, physicSize = d.physicSize, tagsCode = d.tagsCode,
                  extendDataJson = d.extendDataJson, bitMap = d.bitMap, eval = d.eval, msg = d.msg }
    end
    return { brokerAddr = broker, index = int_opt(o, "index"), maxQueueIndex = t.maxQueueIndex,
             minQueueIndex = t.minQueueIndex, subscriptionData = t.subscriptionData, filterData = t.filterData,
             queueData = array(qd) }
end

local function query_cq_text(r)
    local sep = "======================================"
    local lines = {}
    local function str(v)
        return v == nil and "null" or tostring(v)
    end
    if r.subscriptionData then
        lines[#lines + 1] = "Subscription data: \n" .. require("cjson").encode(r.subscriptionData)
        lines[#lines + 1] = sep
    end
    if r.filterData then
        lines[#lines + 1] = "Filter data: \n" .. tostring(r.filterData)
        lines[#lines + 1] = sep
    end
    lines[#lines + 1] = ("Queue data: \nmax: %s, min: %s"):format(str(r.maxQueueIndex), str(r.minQueueIndex))
    lines[#lines + 1] = sep
    for i, d in ipairs(r.queueData) do
        lines[#lines + 1] = "idx: " .. (r.index + i - 1)
        lines[#lines + 1] = ("ConsumeQueueData{physicOffset=%s, physicSize=%s, tagsCode=%s, extendDataJson='%s', "
            .. "bitMap='%s', eval=%s, msg='%s'}"):format(str(d.physicOffset), str(d.physicSize), str(d.tagsCode),
            str(d.extendDataJson), str(d.bitMap), str(d.eval), str(d.msg))
        lines[#lines + 1] = sep
    end
    return table.concat(lines, "\n")
end

local LIMIT = { nil, "limit", arg = true, desc = "stop after this many messages (rmq; default 10000)" }
local BEGIN = { "b", "beginTimestamp", arg = true, desc = "Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]" }
local END = { "e", "endTimestamp", arg = true, desc = "End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]" }

M.commands = {
    {
        name = "queryMsgById", desc = "Query Message by Id",
        options = {
            { "i", "msgId", arg = true, required = true, desc = "Message Id (offset message ids; a list with ,)" },
            { "t", "topic", arg = true, desc = "the topic, to look up a client message id (rmq)" },
            { "g", "consumerGroup", arg = true, desc = "consumer group name" },
            { "d", "clientId", arg = true, desc = "The consumer's client id" },
            { "s", "sendMessage", arg = true, desc = "resend message" },
            { "u", "unitName", arg = true, desc = "unit name" },
        },
        run = function(ctx, o)
            if o.unitName then
                error(remote.usage("-u unitName: rmq has no unit mode (a resend goes to the topic as it is)"), 0)
            end
            local out = {}
            for id in o.msgId:gmatch("[^,]+") do
                id = id:match("^%s*(.-)%s*$")
                if id ~= "" and o.consumerGroup and o.clientId then
                    out[#out + 1] = { msgId = id, directly = M.consume_directly(ctx, o.consumerGroup, o.clientId, id,
                                                                               o.topic) }
                elseif id ~= "" then
                    local v = M.view(ctx, id, o.topic)
                    if parse_bool(o.sendMessage) then
                        local body = v.body
                        if not body then
                            error(remote.failed(nil, "resend: the body of " .. id .. " is not UTF-8 text"), 0)
                        end
                        v.resend = M.send(ctx, { topic = v.topic, body = body, key = v.keys, tags = v.tags })
                    end
                    out[#out + 1] = v
                end
            end
            return array(out)
        end,
        format = function(list)
            local parts = {}
            for _, v in ipairs(list) do
                local t = v.directly and directly_string(v.directly) or detail_text(v, true)
                if v.resend then
                    t = ("prepare resend msg. originalMsgId=%s\nSendResult [sendStatus=%s, msgId=%s, "
                        .. "offsetMsgId=%s, queueId=%s]"):format(v.offsetMsgId, v.resend.sendStatus, v.resend.msgId,
                        tostring(v.resend.offsetMsgId), tostring(v.resend.queueId))
                end
                parts[#parts + 1] = t
            end
            return table.concat(parts, "\n\n")
        end,
    },
    {
        name = "queryMsgByKey", desc = "Query Message by Key",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "k", "msgKey", arg = true, required = true, desc = "Message Key" },
        },
        run = function(ctx, o) return array(M.query(ctx, o.topic, o.msgKey, 64, false)) end,
        format = function(list)
            local rows = {}
            for _, v in ipairs(list) do
                rows[#rows + 1] = { v.msgId, v.queueId, v.queueOffset }
            end
            return require("rmq.admin").table({ "#Message ID", "#QID", "#Offset" }, rows)
        end,
    },
    {
        name = "queryMsgByUniqueKey", desc = "Query Message by Unique key",
        options = {
            { "i", "msgId", arg = true, required = true, desc = "Message Id" },
            { "g", "consumerGroup", arg = true, desc = "consumer group name" },
            { "d", "clientId", arg = true, desc = "The consumer's client id" },
            { "t", "topic", arg = true, required = true, desc = "The topic of msg" },
            { "a", "showAll", desc = "Print all message, the limit is 32" },
        },
        run = function(ctx, o)
            if o.consumerGroup and o.clientId then
                return { directly = M.consume_directly(ctx, o.consumerGroup, o.clientId, o.msgId, o.topic) }
            end
            local list = M.query(ctx, o.topic, o.msgId, 32, true)
            table.sort(list, function(a, b) return (a.storeTimestamp or 0) < (b.storeTimestamp or 0) end)
            if #list == 0 then
                error(remote.failed(nil, ("no message %s in topic %s"):format(o.msgId, o.topic)), 0)
            end
            local out = {}
            for i = 1, o.showAll and #list or 1 do
                out[i] = with_track(ctx, list[i], list[i].brokerAddr)
            end
            return array(out)
        end,
        format = function(list)
            if list.directly then
                return directly_string(list.directly)
            end
            local parts = {}
            for _, v in ipairs(list) do
                parts[#parts + 1] = detail_text(v, false)
            end
            return table.concat(parts, "\n\n")
        end,
    },
    {
        name = "queryMsgByOffset", desc = "Query Message by offset",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "b", "brokerName", arg = true, required = true, desc = "Broker Name" },
            { "i", "queueId", arg = true, required = true, desc = "Queue Id" },
            { "o", "offset", arg = true, required = true, desc = "Queue Offset" },
        },
        run = M.by_offset,
        format = function(v) return detail_text(v, true) end,
    },
    {
        name = "printMsg", desc = "Print Message Detail",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "c", "charsetName", arg = true, desc = "CharsetName(eg: UTF-8,GBK)" },
            { "s", "subExpression", arg = true, desc = "Subscribe Expression(eg: TagA || TagB)" },
            BEGIN, END,
            { "d", "printBody", arg = true, desc = "print body" },
            LIMIT,
        },
        run = M.print_msg, format = print_msg_text,
    },
    {
        name = "printMsgByQueue", desc = "Print Message Detail",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "a", "brokerName", arg = true, required = true, desc = "broker name" },
            { "i", "queueId", arg = true, required = true, desc = "queue id" },
            { "c", "charsetName", arg = true, desc = "CharsetName(eg: UTF-8,GBK)" },
            { "s", "subExpression", arg = true, desc = "Subscribe Expression(eg: TagA || TagB)" },
            BEGIN, END,
            { "p", "printMsg", arg = true, desc = "print msg. eg: true | false(default)" },
            { "d", "printBody", arg = true, desc = "print body. eg: true | false(default)" },
            { "f", "calculate", arg = true, desc = "calculate by tag. eg: true | false(default)" },
            LIMIT,
        },
        run = M.print_by_queue, format = print_by_queue_text,
    },
    {
        name = "sendMessage", desc = "Send a message",
        options = {
            { "t", "topic", arg = true, required = true, desc = "Topic name" },
            { "p", "body", arg = true, required = true, desc = "UTF-8 string format of the message body" },
            { "k", "key", arg = true, desc = "Message keys" },
            { "c", "tags", arg = true, desc = "Message tags" },
            { "b", "broker", arg = true, desc = "Send message to target broker" },
            { "i", "qid", arg = true, desc = "Send message to target queue" },
            { "m", "msgTraceEnable", arg = true, desc = "Message Trace Enable, Default: false" },
        },
        run = M.send,
        format = function(r)
            return require("rmq.admin").table({ "#Broker Name", "#QID", "#Send Result", "#MsgId" },
                { { r.brokerName, r.queueId, r.sendStatus, r.msgId } })
        end,
    },
    {
        name = "consumeMessage", desc = "Consume message",
        options = {
            { "t", "topic", arg = true, required = true, desc = "Topic name" },
            { "b", "brokerName", arg = true, desc = "Broker name" },
            { "i", "queueId", arg = true, desc = "Queue Id" },
            { "o", "offset", arg = true, desc = "Queue offset" },
            { "g", "consumerGroup", arg = true, desc = "Consumer group name" },
            { "s", "beginTimestamp", arg = true,
              desc = "Begin timestamp(ms or yyyy-MM-dd#HH:mm:ss:SSS)" },
            { "e", "endTimestamp", arg = true, desc = "End timestamp(ms or yyyy-MM-dd#HH:mm:ss:SSS)" },
            { "c", "MessageNumber", arg = true, desc = "Number of message to be consumed" },
        },
        run = M.consume, format = consume_text,
    },
    {
        name = "checkMsgSendRT", desc = "check message send response time",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "a", "amount", arg = true, desc = "message amount | default 100" },
            { "s", "size", arg = true, desc = "message size | default 128 Byte" },
        },
        run = M.check_rt,
        format = function(r)
            local rows = {}
            for i, s in ipairs(r.sends) do
                rows[i] = { s.brokerName, s.queueId, tostring(s.success), ("%.3f"):format(s.rt) }
            end
            return require("rmq.admin").table({ "#Broker Name", "#QID", "#Send Result", "#RT(ms)" }, rows)
                .. ("\nAvg RT: %.2f"):format(r.avgRT)
        end,
    },
    {
        name = "queryCq", desc = "Query cq command.",
        options = {
            { "t", "topic", arg = true, required = true, desc = "topic name" },
            { "q", "queue", arg = true, required = true, desc = "queue num, ie. 1" },
            { "i", "index", arg = true, required = true, desc = "start queue index." },
            { "c", "count", arg = true, desc = "how many." },
            { "b", "broker", arg = true, desc = "broker addr." },
            { "g", "consumer", arg = true, desc = "consumer group." },
        },
        run = M.query_cq, format = query_cq_text,
    },
}

return M
