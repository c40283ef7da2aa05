-- Broker: request-reply, SEND_REPLY_MESSAGE (324) and
-- SEND_REPLY_MESSAGE_V2 (325), as RocketMQ 4.9.8's ReplyMessageProcessor.
--
-- A requester (DefaultMQProducer.request, rmq.client.request) sends a
-- plain message carrying CORRELATION_ID, REPLY_TO_CLIENT (its clientId)
-- and TTL; the send path adds CLUSTER.  The responder builds the reply
-- (MessageUtil.createReplyMessage: topic "<CLUSTER>_REPLY_TOPIC",
-- MSG_TYPE=reply and the three properties copied) and its producer sends
-- it with code 324/325 (same headers as SEND_MESSAGE / _V2).  Here:
--
--   1. the checks of a send (broker and topic permission, the topic,
--      the queue, the body's size): the C send processor's own
--      (checksOnly), which answers their refusals;
--   2. PUSH_REPLY_MESSAGE_TO_CLIENT (326) with the message (header
--      ReplyMessageRequestHeader, body as sent) to the channel of the
--      client named in REPLY_TO_CLIENT: a producer channel of the client
--      registry, on whichever worker owns it (net.send_to);
--   3. with storeReplyMessageEnable (default true) the reply is also
--      stored in its topic, like any message.
--
-- The answer to the responder is 4.9.8's: SUCCESS with msgId "0" and
-- queueOffset 0 when pushed; SYSTEM_ERROR naming the reason when not
-- (no REPLY_TO_CLIENT, no channel of that client: the requester is
-- gone); when stored, msgId / queueOffset are the stored record's, the
-- code staying what the push decided.
--
-- One difference: Java calls the requester synchronously and waits for
-- its answer (up to 10 s) before answering the responder; rmq hands the
-- push to the requester's connection one-way and answers at once, so a
-- responder is never held by a slow requester.  The requester's own
-- answer to the push (Java's client sends one) is dropped as a stray
-- response.  The only case this changes: a requester whose connection
-- dies while the push is in flight gets SUCCESS instead of SYSTEM_ERROR;
-- its request times out either way.
local codes = require("rmq.codes")
local core = require("rmq.core")
local header = require("rmq.header")
local log = require("rmq.log")
local message = require("rmq.message")
local metrics = require("rmq.metrics")
local net = require("rmq.net")
local replies = require("rmq.reply")
local send = require("rmq.broker.send")
local clients = require("rmq.broker.clients")
local native = require("rmq.native")
local tables = require("rmq.broker.tables")
local processors = require("rmq.processors")

local M = {}

local R = codes.response
local req = codes.request

-- MessageConst names.
M.REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
M.CORRELATION_ID = "CORRELATION_ID"
M.PUSH_REPLY_TIME = "PUSH_REPLY_TIME"

local PUT_OK = codes.put_stored   -- the put statuses after which the message is stored

local function str(v)
    return v ~= nil and tostring(v) or nil
end

function M.processors(b)
    local conf = b.conf
    local st, topics = b.store, b.topics
    local region = conf.regionId or "DefaultRegion"
    local trace_on = conf.traceOn == false and "false" or "true"
    local not_allowed = {}
    for t in pairs(topics.NOT_ALLOWED_SEND) do
        not_allowed[#not_allowed + 1] = t
    end
    -- 4.9.8 writes both as getHostAddress() + ":" + port: no leading
    -- "/" (InetSocketAddress.toString's), which a Java client would take
    -- for part of the host name (getBornHostString() null), and an IPv6
    -- address without brackets.
    local function java_host(hp)
        hp = tostring(hp)
        local h, port = hp:match("^%[(.*)%]:(%d+)$")
        return h and (h .. ":" .. port) or hp
    end
    local store_host = java_host(b.store_host)

    -- PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: true, or false and
    -- the remark 4.9.8 answers the responder with.
    local function push(ctx, h, props, body)
        local target = props[M.REPLY_TO_CLIENT]
        if target == nil then
            log.warn("REPLY_TO_CLIENT is null, can not reply message (from %s)", tostring(ctx.peer))
            return false, "reply message properties[REPLY_TO_CLIENT] is null"
        end
        local conn = clients.registry:find_client("producer", target)
        if conn == nil then
            local why = ("push reply message fail, channel of <%s> not found."):format(target)
            log.warn("%s", why)
            return false, why
        end
        props[M.PUSH_REPLY_TIME] = tostring(core.now_ms())
        -- ReplyMessageRequestHeader: every field but properties is
        -- @CFNotNull on the client, so each is sent.
        local cmd = {
            code = req.PUSH_REPLY_MESSAGE_TO_CLIENT,
            ext = {
                producerGroup = h.producerGroup or "",
                topic = h.topic,
                defaultTopic = h.defaultTopic or "",
                defaultTopicQueueNums = str(h.defaultTopicQueueNums or 0),
                queueId = str(h.queueId),  -- as asked, as Java sends it
                sysFlag = str(h.sysFlag),
                bornTimestamp = str(h.bornTimestamp),
                flag = str(h.flag),
                properties = message.encode_properties(props),
                reconsumeTimes = str(h.reconsumeTimes or 0),
                unitMode = h.unitMode and "true" or "false",
                bornHost = java_host(ctx.peer),
                storeHost = store_host,
                storeTimestamp = str(core.now_ms()),
            },
            body = body,
        }
        local ok, err = net.send_to(conn, cmd)
        if not ok then
            local why = ("push reply message to %sfail."):format(target)
            log.warn("push reply message to <%s> fail: %s", target, tostring(err))
            return false, why
        end
        return true
    end

    -- The checks a reply message shares with a send (the broker's and the
    -- topic's permission, the topic, its queue, the body's size): C's,
    -- which answers their refusals (send_processor.h, checksOnly).
    local checks = processors.send({
        store = st, v1 = send.HEADER_V1, v2 = send.HEADER_V2,
        cluster = conf.brokerClusterName, region = region, traceOn = trace_on == "true",
        brokerPermission = conf.brokerPermission, maxMessageSize = conf.maxMessageSize,
        notAllowed = not_allowed, ip = b.ip, checksOnly = true,
    })

    local function run(ctx, cmd, h)
        if native.run(checks, ctx, cmd) then
            return nil   -- refused
        end
        tables.sync_conf(conf)   -- UPDATE_BROKER_CONFIG may change it at run time
        local topic, body = h.topic, cmd.body or ""
        local qid = h.queueId
        if qid < 0 then   -- any queue: one of the topic's write queues
            qid = math.random(0, topics.get(topic).writeQueueNums - 1)
        end
        local props_s = h.properties or ""
        local props = message.decode_properties(props_s)

        local pushed, why = push(ctx, h, props, body)
        local ext = { MSG_REGION = region, TRACE_ON = trace_on }
        local r
        if pushed then
            ext.msgId, ext.queueId, ext.queueOffset = "0", qid, 0
            r = { code = R.SUCCESS, ext = ext }
        else
            r = replies.error(R.SYSTEM_ERROR, why, ext)
        end

        if conf.storeReplyMessageEnable ~= false and (st:role()) ~= "SLAVE" then
            -- Stored as sent: the properties string unchanged (no CLUSTER
            -- added, unlike a send), as ReplyMessageProcessor stores it.
            local status, phy_or_reason, qoff, wrote, _, ids = st:put({
                topic = topic, queueId = qid, body = body, flag = h.flag,
                properties = props_s, tags = props.TAGS,
                bornTimestamp = h.bornTimestamp, bornHost = ctx.peer,
                sysFlag = h.sysFlag, reconsumeTimes = h.reconsumeTimes or 0,
                wait = props.WAIT ~= "false",
            })
            if PUT_OK[status] then
                metrics.messages_in(topic, 1, wrote)
                net.raise(topic .. "@" .. qid)
                ext.msgId, ext.queueId, ext.queueOffset = ids, qid, qoff
            else
                log.warn("reply message to %s@%d from %s not stored: %s %s", topic, qid,
                         tostring(ctx.peer), tostring(status), header.scrub(tostring(phy_or_reason)))
            end
        end
        return r
    end

    return {
        [req.SEND_REPLY_MESSAGE] = { header = send.HEADER_V1, run = run },
        [req.SEND_REPLY_MESSAGE_V2] = { header = send.HEADER_V2, run = run },
    }
end

return M
