-- Broker: CONSUMER_SEND_MSG_BACK (36), protocol.md 4.2 and 6.3
-- (SendMessageProcessor.consumerSendMsgBack): a consumer hands back a
-- message it failed to consume; the broker re-puts the stored record into
-- %RETRY%<group>, delayed by level 3 + reconsumeTimes (or the level the
-- consumer asked for) through SCHEDULE_TOPIC_XXXX (rmq.broker.schedule),
-- or straight into %DLQ%<group> once reconsumeTimes reaches the maximum
-- (or when the consumer asks with delayLevel < 0).
--
-- The new record copies body (as stored), flag, sysFlag, bornTimestamp
-- and bornHost; reconsumeTimes is the original's + 1; its properties are
-- the original's plus RETRY_TOPIC (the original topic, unless already
-- set), WAIT=false, DELAY (the level; 0 for the DLQ) and
-- ORIGIN_MESSAGE_ID (kept, else the original's offset message id).  Once
-- the delay has passed, the record in %RETRY%<group> carries REAL_TOPIC
-- and REAL_QID and no DELAY, as from the Java broker.
--
-- With ACL on (rmq extension; 4.9.8 and 5.x check only SUB on the group,
-- so an account reads any record into its own retry topic by naming its
-- commit log offset), the record named must be one the group consumes:
-- its topic is %RETRY%<group>, or a topic the group subscribes (its
-- heartbeats) or has committed offsets on (the record's queue); and the
-- account needs SUB on the record's original topic (RETRY_TOPIC for a
-- retry record), refused as a pull of that topic is (acl.check_topic).
local codes = require("rmq.codes")
local log = require("rmq.log")
local net = require("rmq.net")
local message = require("rmq.message")
local metrics = require("rmq.metrics")
local schedule = require("rmq.broker.schedule")
local tables = require("rmq.broker.tables")
local header = require("rmq.header")
local names = require("rmq.names")
local reply = require("rmq.reply")
local clients = require("rmq.broker.clients")
local offsets = require("rmq.broker.offsets")

local M = {}

local R = codes.response

M.RETRY_PREFIX = "%RETRY%"
M.DLQ_PREFIX = "%DLQ%"

--- The retry/DLQ choice, one rule for a send back and a send into
--- %RETRY%group (the C send path's retry hook): a message consumed
--- `reconsume` times goes to %DLQ%group once that reaches the group's
--- retryMaxTimes, or `max` (the consumer's maxReconsumeTimes, from clients
--- of V3_4_9 on; nil: none given).  Returns true (the DLQ), false (a
--- retry again), or nil when the group does not exist; and the group.
function M.past_max(conf, groups, group, reconsume, max)
    local g = groups.find(conf, group)
    if g == nil then
        return nil
    end
    return reconsume >= (max or g.retryMaxTimes or 16), g
end

-- ConsumerSendMsgBackRequestHeader (protocol.md 4.2), read by dispatch:
-- the group becomes a topic name (%RETRY%group, %DLQ%group), so it must
-- pass RocketMQ's group rule; offset is a commit log position.
M.HEADER = header.compile({
    { "offset", "long", true, min = 0 },
    { "group", "group", true },
    { "delayLevel", "int", true },
    { "originMsgId", "string", false },
    { "originTopic", "string", false },
    { "unitMode", "bool", false },
    { "maxReconsumeTimes", "int", false },
})

function M.processors(b)
    local conf = b.conf
    local st, topics, groups = b.store, b.topics, b.groups
    local RW = topics.PERM_READ | topics.PERM_WRITE

    local function ensure_topic(name, n)
        local cfg, created = topics.ensure(name, n, RW)
        if created then
            -- topics.ensure has asked for a registration already.
            log.info("created topic %s (%d queues) for sent-back messages", name, n)
        end
        return cfg
    end

    local acl_on = conf.aclEnable
    local cacl = acl_on and require("rmq.acl")

    -- nil, or the refusal of a send back of rec for group (ACL on).
    local function refuse_record(ctx, cmd, group, rec)
        local retry = M.RETRY_PREFIX .. group
        if rec.topic ~= retry and clients.find_subscription(group, rec.topic) == nil
            and offsets.query(group, rec.topic, rec.queueId) == nil then
            return reply.error(R.NO_PERMISSION, ("the message's topic[%s] is neither subscribed by group[%s] nor its retry topic")
                :format(names.show(rec.topic), names.show(group)))
        end
        -- A retry record's RETRY_TOPIC was written by a broker; on any
        -- other record it is a producer's property, not the topic read.
        local origin = rec.topic
        if rec.topic:sub(1, #M.RETRY_PREFIX) == M.RETRY_PREFIX and rec.properties.RETRY_TOPIC then
            origin = rec.properties.RETRY_TOPIC
        end
        local ok, remark = cacl.check_topic(cmd.ext.AccessKey, ctx.peer, origin, "SUB")
        if not ok then
            return reply.system_error(remark)
        end
        return nil
    end

    local function send_back(ctx, cmd, h)
        tables.sync_conf(conf)  -- UPDATE_BROKER_CONFIG may change it at run time
        local phy, group, delay_level = h.offset, h.group, h.delayLevel
        local bad = names.topic(M.RETRY_PREFIX .. group)
        if bad then
            -- A legal group name can still be too long for its retry topic.
            return reply.system_error(("the retry topic of group %s: %s"):format(names.show(group), bad))
        end
        local g = groups.find(conf, group)
        if g == nil then
            return reply.error(R.SUBSCRIPTION_GROUP_NOT_EXIST,
                               reply.faq("subscription group not exist, " .. group .. " "))
        end
        if (conf.brokerPermission & topics.PERM_WRITE) == 0 then
            return reply.broker_forbidden(b.ip, "sending")
        end
        local nq = g.retryQueueNums or 1
        if nq <= 0 then
            return reply.ok()
        end
        local topic = M.RETRY_PREFIX .. group
        local qid = math.random(0, nq - 1)
        local cfg = ensure_topic(topic, nq)
        if cfg == nil then
            return reply.system_error("topic[" .. topic .. "] not exist")
        end
        if (cfg.perm & topics.PERM_WRITE) == 0 then
            return reply.topic_forbidden(topic, "sending")
        end
        local recs = st:message(phy)
        local rec = recs and message.decode_record(recs:get(1))
        if recs then
            recs:release()
        end
        if rec == nil then
            return reply.system_error("look message by offset failed, " .. phy)
        end
        if acl_on then
            local refused = refuse_record(ctx, cmd, group, rec)
            if refused then
                return refused
            end
        end
        local edits = {}
        local function set(k, v)
            local n = #edits
            edits[n + 1] = k
            edits[n + 2] = v
        end
        if rec.properties.RETRY_TOPIC == nil then
            set("RETRY_TOPIC", rec.topic)
        end
        set("WAIT", "false")
        local max = cmd.version >= codes.version.V3_4_9 and h.maxReconsumeTimes or nil
        if M.past_max(conf, groups, group, rec.reconsumeTimes, max) or delay_level < 0 then
            topic = M.DLQ_PREFIX .. group
            qid = 0
            if ensure_topic(topic, 1) == nil then
                return reply.system_error("topic[" .. topic .. "] not exist")
            end
            set("DELAY", "0")
            delay_level = 0
        else
            if delay_level == 0 then
                delay_level = 3 + rec.reconsumeTimes
            end
            set("DELAY", tostring(delay_level))
        end
        local origin = rec.properties.ORIGIN_MESSAGE_ID
        if origin == nil or origin:match("^%s*$") then
            set("ORIGIN_MESSAGE_ID", rec.offsetMsgId)
        end
        local msg = {
            topic = topic, queueId = qid, body = rec.body, flag = rec.flag,
            properties = message.edit_properties(rec.propertiesString, edits),
            tags = rec.properties.TAGS or "",
            sysFlag = rec.sysFlag, bornTimestamp = rec.bornTimestamp, bornHost = rec.bornHost,
            reconsumeTimes = rec.reconsumeTimes + 1, wait = false,
        }
        if delay_level > 0 then
            schedule.redirect(conf, msg, delay_level)
        end
        local status, reason = st:put(msg)
        if status ~= "PUT_OK" then
            log.warn("send back of %d for %s failed: %s %s", phy, group, tostring(status), tostring(reason))
            return reply.system_error(status)
        end
        if delay_level == 0 then
            -- Into %DLQ%group: counted under the message's first topic.
            metrics.send_to_dlq(rec.properties.RETRY_TOPIC or h.originTopic or rec.topic, group, 1)
        end
        net.raise(msg.topic .. "@" .. msg.queueId)
        return reply.ok()
    end

    return { [codes.request.CONSUMER_SEND_MSG_BACK] = { header = M.HEADER, run = send_back } }
end

return M
