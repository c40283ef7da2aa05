-- Broker: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE
-- (320), protocol.md 4.1.  The checks are RocketMQ's, in its order; the
-- byte work (record encoding, CRC, the append under the lock, the consume
-- queue entry) is one call into the store.  After a message is stored,
-- held pulls on its queue are woken: net.raise("topic@queueId") reaches
-- every worker.
local message = require("rmq.message")
local metrics = require("rmq.metrics")
local net = require("rmq.net")
local codes = require("rmq.codes")
local log = require("rmq.log")
local tables = require("rmq.broker.tables")
local schedule = require("rmq.broker.schedule")
local transaction = require("rmq.broker.transaction")
local timer = require("rmq.broker.timer")
local header = require("rmq.header")
local names = require("rmq.names")
local processors = require("rmq.processors")
local reply = require("rmq.reply")

local M = {}

local R = codes.response

-- The request headers (protocol.md 4.1), read by dispatch before the
-- handler runs, into the same typed table for every code.  V1 is a
-- plain header: Java refuses a missing @CFNotNull field.  V2 (310, 320)
-- is a FastCodesHeader: Java only logs a missing field, then fails on
-- the ones it unboxes (topic, queueId, sysFlag, bornTimestamp, flag); a
-- number that does not parse is refused in both.  queueId < 0 means "any
-- queue" (the broker picks one).
local function send_header(n)
    local function f(v1, v2, ty, required, extra)
        local e = { n == 1 and v1 or v2, ty, required, as = v1 }
        for k, v in pairs(extra or {}) do
            e[k] = v
        end
        return e
    end
    local v1 = n == 1
    return header.compile({
        f("producerGroup", "a", "string", v1),
        f("topic", "b", "topic", true),
        f("defaultTopic", "c", "string", v1),
        f("defaultTopicQueueNums", "d", "int", v1),
        f("queueId", "e", "int", true),
        f("sysFlag", "f", "int", true),
        f("bornTimestamp", "g", "long", true),
        f("flag", "h", "int", true),
        f("properties", "i", "string", false),
        f("reconsumeTimes", "j", "int", false, { default = 0 }),
        f("unitMode", "k", "bool", false),
        f("maxReconsumeTimes", "l", "int", false),
        f("batch", "m", "bool", false),
    })
end
M.HEADER_V1 = send_header(1)
M.HEADER_V2 = send_header(2)

-- Store statuses -> reply codes (protocol.md 4.1, step 12), and those
-- after which the message is in the commit log: the one table, shared
-- with the C send processor (rmq.codes, docs/request-codes.md).
local PUT_CODE, STORED = codes.put_status, codes.put_stored

-- MessageSysFlag transaction bits (protocol.md 5.3).
local TRANSACTION_TYPE, TRANSACTION_ROLLBACK = 0xC, 0xC

--- The queue a send goes to: queueId as asked (checked against the
--- topic's queues), or a random write queue for queueId < 0.  Returns
--- qid, or nil and the refusal.
function M.queue_of(cfg, qid, topic, peer)
    if qid >= math.max(cfg.writeQueueNums, cfg.readQueueNums) then
        return nil, reply.system_error(("request queueId[%d] is illegal, %s Producer: %s")
            :format(qid, topic, peer))
    end
    if qid < 0 then
        if cfg.writeQueueNums < 1 then
            return nil, reply.system_error(("topic[%s] has no write queue to pick, Producer: %s")
                :format(topic, peer))
        end
        qid = math.random(0, cfg.writeQueueNums - 1)
    end
    return qid
end

function M.processors(b)
    local conf = b.conf
    local st, topics, groups = b.store, b.topics, b.groups
    local cluster = conf.brokerClusterName
    local region = conf.regionId or "DefaultRegion"
    local trace_on = conf.traceOn == false and "false" or "true"
    local max_size = conf.maxMessageSize

    -- The topic config, auto-creating it as RocketMQ does (6.2): from the
    -- template the producer names, with its defaultTopicQueueNums capped
    -- at the template's write queues; never with fewer than one queue.
    -- Returns cfg, or nil and a refusal (nil, nil: no such topic).
    local function topic_config(topic, h, v1)
        local cfg = topics.get(topic)
        if cfg then
            return cfg
        end
        local created
        local template = h.defaultTopic
        if template and template ~= "" then
            local n = h.defaultTopicQueueNums or conf.defaultTopicQueueNums
            local tpl = topics.get(template)
            if tpl and (tpl.perm & topics.PERM_INHERIT) ~= 0 then
                if n > tpl.writeQueueNums then
                    n = tpl.writeQueueNums
                end
                if n < 1 then
                    return nil, reply.system_error(
                        ("the custom field %s must be >= 1 to create topic[%s] from %s (%d write queues): \"%d\"")
                            :format(v1 and "<defaultTopicQueueNums>" or "<d> (defaultTopicQueueNums)", topic,
                                    names.show(template), tpl.writeQueueNums,
                                    h.defaultTopicQueueNums or conf.defaultTopicQueueNums))
                end
            end
            local _
            cfg, _, created = topics.create_from_template(topic, template, n)
        end
        if cfg == nil and topic:sub(1, 7) == "%RETRY%" then
            cfg, created = topics.ensure(topic, 1)
        end
        if cfg and created then
            -- topics.* registers the new topic with the NameServers.
            log.info("auto-created topic %s from %s: %d queues", topic, tostring(template),
                     cfg.writeQueueNums)
        end
        return cfg
    end

    local function send(ctx, cmd, h)
        local topic = h.topic
        local batch = h.batch == true
        tables.sync_conf(conf)  -- UPDATE_BROKER_CONFIG may change it at run time
        local perm = conf.brokerPermission
        if (perm & topics.PERM_WRITE) == 0 then
            return reply.broker_forbidden(b.ip, "sending")
        end
        if topics.NOT_ALLOWED_SEND[topic] then
            return reply.error(R.NO_PERMISSION, ("Sending message to topic[%s] is forbidden."):format(topic))
        end
        if (st:role()) == "SLAVE" then   -- (the role at run time: a controller may switch it)
            return reply.error(R.SERVICE_NOT_AVAILABLE,
                "service not available now. It may be caused by one of the following reasons: "
                .. "the broker's disk is full, messages are put to the slave, message store has been shut down, etc.")
        end
        local cfg, refusal = topic_config(topic, h, cmd.code == codes.request.SEND_MESSAGE)
        if cfg == nil then
            return refusal or reply.error(R.TOPIC_NOT_EXIST,
                reply.faq(("topic[%s] not exist, apply first please!"):format(topic)))
        end
        if (cfg.perm & topics.PERM_WRITE) == 0 then
            return reply.topic_forbidden(topic, "sending")
        end
        local qid, bad_queue = M.queue_of(cfg, h.queueId, topic, ctx.peer)
        if qid == nil then
            return bad_queue
        end
        local body = cmd.body or ""
        if #body > max_size then
            return reply.error(R.MESSAGE_ILLEGAL, ("the message body size %d is over %d"):format(#body, max_size))
        end
        local props = h.properties or ""
        local reconsume = h.reconsumeTimes
        local sys_flag = h.sysFlag
        local dlq_of   -- the first topic of a retry that goes to the DLQ
        if not batch and topic:sub(1, 7) == "%RETRY%" then
            local group = topic:sub(8)
            local g = groups.find(conf, group)
            if g == nil then
                return reply.error(R.SUBSCRIPTION_GROUP_NOT_EXIST,
                    reply.faq("subscription group not exist, " .. group))
            end
            local max = g.retryMaxTimes
            if h.maxReconsumeTimes and cmd.version >= codes.version.V3_4_9 then
                max = h.maxReconsumeTimes
            end
            if reconsume >= max then
                dlq_of = (props:match("RETRY_TOPIC\1([^\2]*)")) or topic
                topic = "%DLQ%" .. group
                topics.ensure(topic, 1)
                qid = 0
            end
        end
        -- One C pass: the stored string (WAIT and empty values dropped,
        -- CLUSTER added, as a 4.9.8 broker stores), TAGS, WAIT, DELAY.
        local stored, tags, wait, delay = message.send_properties(props, cluster, batch)
        if delay > 0 and batch then
            return reply.error(R.MESSAGE_ILLEGAL, "batch messages cannot be delayed")
        end
        local msg = {
            topic = topic, queueId = qid, body = body,
            flag = h.flag,
            properties = stored,
            tags = tags,
            bornTimestamp = h.bornTimestamp,
            bornHost = ctx.peer,
            sysFlag = sys_flag,
            reconsumeTimes = reconsume,
            wait = wait,
        }
        local recall   -- a held timer message's recall handle
        if not batch and transaction.is_prepared(stored) then
            -- A half message (protocol.md 6.4); the Java producer clears
            -- DELAY on these, so no schedule detour.
            if conf.rejectTransactionMessage then
                return reply.broker_forbidden(b.ip, "sending transaction")
            end
            transaction.to_half(msg)
        elseif delay > 0 and (sys_flag & TRANSACTION_TYPE) ~= TRANSACTION_ROLLBACK then
            -- Parked in SCHEDULE_TOPIC_XXXX until due (protocol.md 6.3);
            -- the reply still names the queue the producer chose.
            schedule.redirect(conf, msg, delay)
        elseif not batch and (sys_flag & TRANSACTION_TYPE) == 0 and stored:find("TIMER_", 1, true) then
            -- A timer message (RIP-43): C's rule (store/timer.h), as the
            -- C send path applies it.
            local held, bucket, why = st:timer_hold(stored, topic, qid)
            if held == false then
                return reply.error(bucket == "illegal" and R.MESSAGE_ILLEGAL or R.SYSTEM_ERROR, why)
            elseif held then
                msg.topic, msg.queueId, msg.properties = timer.TOPIC, 0, held
                msg.tags, msg.tagsCode = nil, bucket
                recall = timer.recall_handle(conf, topic, bucket, stored)
            end
        end
        local status, phy_or_reason, qoff, wrote, _, ids, count
        if batch then
            status, phy_or_reason, qoff, wrote, _, ids, count = st:put_batch(msg)
        else
            status, phy_or_reason, qoff, wrote, _, ids = st:put(msg)
        end
        local code = PUT_CODE[status] or R.SYSTEM_ERROR
        if not STORED[status] then
            -- The store's reason may name files: the reply has it
            -- without them, the log whole.
            local reason = tostring(phy_or_reason)
            local shown = header.scrub(reason)
            if shown ~= reason then
                log.warn("send to %s@%d from %s not stored: %s %s", msg.topic, msg.queueId,
                         tostring(ctx.peer), tostring(status), reason)
            end
            return reply.error(code, ("%s: %s"):format(status, shown))
        end
        metrics.messages_in(msg.topic, count or 1, wrote, #body)
        if dlq_of then
            metrics.send_to_dlq(dlq_of, topic:sub(6), 1)
        end
        net.raise(msg.topic .. "@" .. msg.queueId)
        return {
            code = code,
            ext = {
                msgId = ids, queueId = qid, queueOffset = qoff,
                MSG_REGION = region, TRACE_ON = trace_on, recallHandle = recall,
            },
        }
    end

    -- The common case in C (rmq.processors.send): everything the checks
    -- above would pass, stored and answered without Lua; the rest comes
    -- to `send` as before (a slave refuses every send there; C's put is
    -- refused by the store, fenced while a slave).  With SYNC_FLUSH, C
    -- answers when the flush covers the message.
    local np
    do
        local not_allowed = {}
        for t in pairs(topics.NOT_ALLOWED_SEND) do
            not_allowed[#not_allowed + 1] = t
        end
        np = processors.send({
            store = st, v1 = M.HEADER_V1, v2 = M.HEADER_V2,
            cluster = cluster, region = region, traceOn = trace_on == "true", brokerName = conf.brokerName,
            brokerPermission = conf.brokerPermission, maxMessageSize = max_size,
            notAllowed = not_allowed,
            -- rejectTransactionMessage is fixed at start (not LIVE).
            halfMessages = not conf.rejectTransactionMessage,
            -- A decision: a topic the table does not have, created from
            -- the producer's template when the rule above allows; then C
            -- stores the message (false: `send` answers the refusal).
            createTopic = function(topic, template, queue_nums, v1)
                tables.sync_conf(conf)
                return topic_config(topic, { defaultTopic = template,
                                             defaultTopicQueueNums = queue_nums }, v1) ~= nil
            end,
            -- And where a message with a delay level waits (the rule is
            -- schedule.redirect's; the levels may change at run time).
            delayLevel = function(props, topic, qid, level)
                tables.sync_conf(conf)
                local m = schedule.redirect(conf, { properties = props, topic = topic, queueId = qid }, level)
                return m.properties, m.queueId, m.tagsCode
            end,
        })
    end
    return {
        [codes.request.SEND_MESSAGE] = { header = M.HEADER_V1, run = send, native = np },
        [codes.request.SEND_MESSAGE_V2] = { header = M.HEADER_V2, run = send, native = np },
        [codes.request.SEND_BATCH_MESSAGE] = { header = M.HEADER_V2, run = send, native = np },
    }
end

return M
