-- Broker: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE
-- (320), protocol.md 4.1.  C serves them whole (src/broker/send_processor.c:
-- RocketMQ's checks in its order, every refusal's text, the store append,
-- the wake of held pulls, the reply); this module declares their header
-- specs and the decisions C asks Lua for, each one call with the facts:
--
--   createTopic(topic, defaultTopic, defaultTopicQueueNums, v1)
--       -> true (the topic exists now) | false, refusal (SYSTEM_ERROR's
--       remark; false alone: TOPIC_NOT_EXIST)
--   retry(group, reconsumeTimes, maxReconsumeTimes | nil)
--       -> true (a retry) | "%DLQ%group" (made) | false (no such group):
--       sendback.lua's retry/DLQ choice
--   delayLevel(properties, topic, queueId, level)
--       -> stored properties, SCHEDULE_TOPIC_XXXX queue, due time (ms)
--   halfTopic() makes RMQ_SYS_TRANS_HALF_TOPIC
--
-- A conf mapping these codes to its own Lua handler replaces the entry
-- (and with it the C processor), as for any code.
local codes = require("rmq.codes")
local log = require("rmq.log")
local tables = require("rmq.broker.tables")
local schedule = require("rmq.broker.schedule")
local transaction = require("rmq.broker.transaction")
local sendback = require("rmq.broker.sendback")
local native = require("rmq.native")
local header = require("rmq.header")
local names = require("rmq.names")
local processors = require("rmq.processors")
local reply = require("rmq.reply")

local M = {}

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
            notAllowed = not_allowed, ip = b.ip,
            -- rejectTransactionMessage is fixed at start (not LIVE).
            halfMessages = not conf.rejectTransactionMessage,
            -- A decision: a topic the table does not have, created from
            -- the producer's template when the rule above allows; then C
            -- stores the message (false: C refuses, with the reason given).
            createTopic = function(topic, template, queue_nums, v1)
                tables.sync_conf(conf)
                local cfg, refusal = topic_config(topic, { defaultTopic = template,
                                                           defaultTopicQueueNums = queue_nums }, v1)
                return cfg ~= nil, refusal and refusal.remark
            end,
            -- The retry/DLQ choice of a send into %RETRY%group.
            retry = function(group, reconsume, max)
                local past = sendback.past_max(conf, groups, group, reconsume, max)
                if past == nil then
                    return false
                elseif past then
                    local dlq = sendback.DLQ_PREFIX .. group
                    topics.ensure(dlq, 1)
                    return dlq
                end
                return true
            end,
            halfTopic = function()
                transaction.ensure_half()
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
    -- Reached when the request did not come to C first (nativeProcessors
    -- = false, a draining worker): C serves it all the same.
    local function run(ctx, cmd)
        native.run(np, ctx, cmd)
    end
    return {
        [codes.request.SEND_MESSAGE] = { header = M.HEADER_V1, run = run, native = np },
        [codes.request.SEND_MESSAGE_V2] = { header = M.HEADER_V2, run = run, native = np },
        [codes.request.SEND_BATCH_MESSAGE] = { header = M.HEADER_V2, run = run, native = np },
    }
end

return M
