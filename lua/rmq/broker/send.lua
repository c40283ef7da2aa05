-- Broker: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE
-- (320), protocol.md 4.1.  The checks are RocketMQ's, in its order; the
-- byte work (record encoding, CRC, the append under the lock, the consume
-- queue entry) is one call into the store.  After a message is stored,
-- held pulls on its queue are woken: net.raise("topic@queueId") reaches
-- every worker.
local core = require("rmq.core")
local net = require("rmq.net")
local codes = require("rmq.codes")
local log = require("rmq.log")
local tables = require("rmq.broker.tables")
local schedule = require("rmq.broker.schedule")

local M = {}

local R = codes.response
local FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

-- V1 header names for the V2 short ones.
local V1 = {
    a = "producerGroup", b = "topic", c = "defaultTopic", d = "defaultTopicQueueNums",
    e = "queueId", f = "sysFlag", g = "bornTimestamp", h = "flag", i = "properties",
    j = "reconsumeTimes", k = "unitMode", l = "maxReconsumeTimes", m = "batch",
}

-- Store statuses -> reply codes (protocol.md 4.1, step 12).
local PUT_CODE = {
    PUT_OK = R.SUCCESS,
    FLUSH_DISK_TIMEOUT = R.FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT = R.FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE = R.SLAVE_NOT_AVAILABLE,
    MESSAGE_ILLEGAL = R.MESSAGE_ILLEGAL,
    PROPERTIES_SIZE_EXCEEDED = R.MESSAGE_ILLEGAL,
    SERVICE_NOT_AVAILABLE = R.SERVICE_NOT_AVAILABLE,
}

-- Codes whose reply says "stored" (the message is in the commit log).
local STORED = {
    [R.SUCCESS] = true, [R.FLUSH_DISK_TIMEOUT] = true,
    [R.FLUSH_SLAVE_TIMEOUT] = true, [R.SLAVE_NOT_AVAILABLE] = true,
}

-- MessageSysFlag transaction bits (protocol.md 5.3).
local TRANSACTION_TYPE, TRANSACTION_ROLLBACK = 0xC, 0xC

local function refuse(code, remark)
    return { code = code, remark = remark }
end

function M.processors(b)
    local conf = b.conf
    local st, topics, groups = b.store, b.topics, b.groups
    local cluster = conf.brokerClusterName
    local region = conf.regionId or "DefaultRegion"
    local trace_on = conf.traceOn == false and "false" or "true"
    local is_slave = conf.brokerRole == "SLAVE"
    local max_size = conf.maxMessageSize

    -- The topic config, auto-creating it as RocketMQ does (6.2).
    local function topic_config(topic, ext)
        local cfg = topics.get(topic)
        if cfg then
            return cfg
        end
        local created
        local template = ext.c
        if template and template ~= "" then
            local n = tonumber(ext.d) or conf.defaultTopicQueueNums
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

    local function send(ctx, cmd)
        local ext
        if cmd.code == codes.request.SEND_MESSAGE then
            local v2 = {}
            for short, long in pairs(V1) do
                v2[short] = cmd:get(long)
            end
            ext = v2
        else
            -- One C call for every field the send path reads.
            local a, b_, c, d, e, f, g, h, i, j, l, m = cmd:fields(
                "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "m")
            ext = { a = a, b = b_, c = c, d = d, e = e, f = f, g = g, h = h, i = i,
                    j = j, l = l, m = m }
        end
        local topic = ext.b
        local batch = ext.m == "true"
        tables.sync_conf(conf)  -- UPDATE_BROKER_CONFIG may change it at run time
        local perm = conf.brokerPermission or 6
        if (perm & topics.PERM_WRITE) == 0 then
            return refuse(R.NO_PERMISSION, ("the broker[%s] sending message is forbidden"):format(b.ip))
        end
        local bad = topics.check_name(topic)
        if bad then
            return refuse(R.SYSTEM_ERROR, bad)
        end
        if topics.NOT_ALLOWED_SEND[topic] then
            return refuse(R.NO_PERMISSION, ("Sending message to topic[%s] is forbidden."):format(topic))
        end
        if is_slave then
            return refuse(R.SERVICE_NOT_AVAILABLE,
                "service not available now. It may be caused by one of the following reasons: "
                .. "the broker's disk is full, messages are put to the slave, message store has been shut down, etc.")
        end
        local cfg = topic_config(topic, ext)
        if cfg == nil then
            return refuse(R.TOPIC_NOT_EXIST, ("topic[%s] not exist, apply first please!%s"):format(topic, FAQ))
        end
        if (cfg.perm & topics.PERM_WRITE) == 0 then
            return refuse(R.NO_PERMISSION, ("the topic[%s] sending message is forbidden"):format(topic))
        end
        local qid = tonumber(ext.e) or 0
        local nq = math.max(cfg.writeQueueNums, cfg.readQueueNums)
        if qid >= nq then
            return refuse(R.SYSTEM_ERROR, ("request queueId[%d] is illegal, %s Producer: %s")
                :format(qid, topic, ctx.peer))
        end
        if qid < 0 then
            qid = math.random(0, cfg.writeQueueNums - 1)
        end
        local body = cmd.body or ""
        if #body > max_size then
            return refuse(R.MESSAGE_ILLEGAL, ("the message body size %d is over %d"):format(#body, max_size))
        end
        local props = ext.i or ""
        local reconsume = tonumber(ext.j) or 0
        local sys_flag = tonumber(ext.f) or 0
        if not batch and topic:sub(1, 7) == "%RETRY%" then
            local group = topic:sub(8)
            local g = groups.find(conf, group)
            if g == nil then
                return refuse(R.SUBSCRIPTION_GROUP_NOT_EXIST,
                    ("subscription group not exist, %s%s"):format(group, FAQ))
            end
            local max = g.retryMaxTimes
            if ext.l and cmd.version >= 121 then
                max = tonumber(ext.l) or max
            end
            if reconsume >= max then
                topic = "%DLQ%" .. group
                topics.ensure(topic, 1)
                qid = 0
            end
        end
        -- One C pass: the stored string (WAIT and empty values dropped,
        -- CLUSTER added, as a 4.9.8 broker stores), TAGS, WAIT, DELAY.
        local stored, tags, wait, delay = core.send_properties(props, cluster, batch)
        if delay > 0 and batch then
            return refuse(R.MESSAGE_ILLEGAL, "batch messages cannot be delayed")
        end
        local msg = {
            topic = topic, queueId = qid, body = body,
            flag = tonumber(ext.h) or 0,
            properties = stored,
            tags = tags,
            bornTimestamp = tonumber(ext.g),
            bornHost = ctx.peer,
            sysFlag = sys_flag,
            reconsumeTimes = reconsume,
            wait = wait,
        }
        if delay > 0 and (sys_flag & TRANSACTION_TYPE) ~= TRANSACTION_ROLLBACK then
            -- Parked in SCHEDULE_TOPIC_XXXX until due (protocol.md 6.3);
            -- the reply still names the queue the producer chose.
            schedule.redirect(conf, msg, delay)
        end
        local status, phy_or_reason, qoff, _, _, ids
        if batch then
            status, phy_or_reason, qoff, _, _, ids = st:put_batch(msg)
        else
            status, phy_or_reason, qoff, _, _, ids = st:put(msg)
        end
        local code = PUT_CODE[status] or R.SYSTEM_ERROR
        if not STORED[code] then
            return refuse(code, ("%s: %s"):format(status, tostring(phy_or_reason)))
        end
        net.raise(msg.topic .. "@" .. msg.queueId)
        return {
            code = code,
            ext = {
                msgId = ids, queueId = qid, queueOffset = qoff,
                MSG_REGION = region, TRACE_ON = trace_on,
            },
        }
    end

    return {
        [codes.request.SEND_MESSAGE] = send,
        [codes.request.SEND_MESSAGE_V2] = send,
        [codes.request.SEND_BATCH_MESSAGE] = send,
    }
end

return M
