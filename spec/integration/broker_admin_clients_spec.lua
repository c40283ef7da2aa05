-- The admin requests of mqadmin's consumer, producer and offset commands
-- (lua/rmq/broker/admin_clients.lua) against a real NameServer and a
-- broker with two workers, with rmq's own push consumer running: each
-- reply decoded and checked against what the clients did.  Admin
-- requests go over several connections, so some land on the worker that
-- does not own the client's channel.
local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local codes = require("rmq.codes")
local message = require("rmq.message")
local producer = require("rmq.client.producer")
local adm = require("support.admin")
local server = require("support.server")
local env = require("support.broker_consume_env")

local req, R = codes.request, codes.response

-- fastjson writes MessageQueue map keys as objects; cjson wants strings:
-- {"brokerName":"b","queueId":1,"topic":"T"}: becomes "T/1":.
local function decode_mq_keys(body)
    return cjson.decode((body:gsub('{"brokerName":"[^"]*","queueId":(%d+),"topic":"([^"]*)"}:', '"%2/%1":')))
end

local function heartbeat_body(client_id, consumer_group, topic, producer_group)
    local cds, pds = setmetatable({}, cjson.array_mt), setmetatable({}, cjson.array_mt)
    if consumer_group then
        cds[1] = {
            groupName = consumer_group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = { { topic = topic, subString = "*", tagsSet = setmetatable({}, cjson.array_mt),
                                      codeSet = setmetatable({}, cjson.array_mt), subVersion = 1 } },
        }
    end
    if producer_group then
        pds[1] = { groupName = producer_group }
    end
    return cjson.encode({ clientID = client_id, consumerDataSet = cds, producerDataSet = pds })
end

describe("broker admin: clients and consumer progress", function()
    local e, p, admins

    setup(function()
        e = env.start({ workers = 2, adminClientCallTimeoutMillis = 600, consumeStatsTpsSampleMillis = 200 })
        p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxAcProducer" })
        admins = {}
        for i = 1, 4 do
            admins[i] = assert(net.connect(e.addr))
        end
    end)

    teardown(function()
        for _, c in ipairs(admins) do
            c:close()
        end
        assert.equal(0, (e:stop()))
    end)

    -- The same request on every admin connection: the replies must agree.
    local function call_all(cmd)
        local first
        for _, c in ipairs(admins) do
            local r = assert(c:call({ code = cmd.code, ext = cmd.ext, body = cmd.body }, 5000))
            if first == nil then
                first = r
            else
                assert.equal(first.code, r.code)
                assert.equal(first.remark, r.remark)
            end
        end
        return first
    end

    local function consume_stats(group, topic)
        local r = call_all({ code = req.GET_CONSUME_STATS, ext = { consumerGroup = group, topic = topic } })
        assert.equal(0, r.code)
        return decode_mq_keys(r.body), r.body
    end

    local function lag(stats)
        local d = 0
        for _, w in pairs(stats.offsetTable) do
            d = d + (w.brokerOffset - w.consumerOffset)
        end
        return d
    end

    local function send_n(topic, n, tag)
        local t0 = core.now_ms()
        for i = 1, n do
            assert(p:send({ topic = topic, body = ("%s-%d"):format(tag, i) }))
        end
        return t0
    end

    local function start_consumer(group, topic, got)
        return adm.start_consumer(e.ns_addr, group, topic, got, 2000)
    end

    it("lists a live consumer's connection, shows its lag, and resets it while it runs", function()
        local topic, group = "FxAcTopic", "FxAcGroup"
        e:route(topic)
        e:route("%RETRY%" .. group, 1)
        local t_before = send_n(topic, 12, "a")
        local got = {}
        local c = start_consumer(group, topic, got)
        assert.truthy(server.eventually(function() return #got >= 12 end, 10000))
        -- consumeTps: the committed offsets moved 12 within the last
        -- window of samples (6 x 200 ms here).
        local tps_seen = server.eventually(function()
            local st = consume_stats(group, topic)
            return st.consumeTps > 0 and st.consumeTps
        end, 3000)
        assert.truthy(tps_seen)
        -- (at most 12 messages over one sample interval, timer jitter allowed)
        assert.is_true(tps_seen <= 12 / 0.1, tostring(tps_seen))

        -- 203: the connection, the settings and the subscription.
        local r = call_all({ code = req.GET_CONSUMER_CONNECTION_LIST, ext = { consumerGroup = group } })
        assert.equal(0, r.code)
        -- Sets are JSON arrays even when empty (fastjson cannot read {}
        -- as a Set<Integer>: mqadmin's consumerConnection failed on it).
        assert.truthy(r.body:find('"codeSet":[]', 1, true))
        assert.falsy(r.body:find('{}', 1, true))
        local cc = cjson.decode(r.body)
        assert.equal(1, #cc.connectionSet)
        assert.equal(c.clientId, cc.connectionSet[1].clientId)
        assert.matches("^127%.0%.0%.1:%d+$", cc.connectionSet[1].clientAddr)
        assert.equal("CONSUME_PASSIVELY", cc.consumeType)
        assert.equal("CLUSTERING", cc.messageModel)
        assert.equal("CONSUME_FROM_FIRST_OFFSET", cc.consumeFromWhere)
        assert.equal("*", cc.subscriptionTable[topic].subString)
        assert.truthy(cc.subscriptionTable["%RETRY%" .. group])
        -- What the consumer sent has [] for its empty sets too (a Java
        -- 4.9.8 broker refuses a heartbeat with {} there).
        local hb = c:heartbeat_body()
        assert.truthy(hb:find('"producerDataSet":[]', 1, true))
        assert.truthy(hb:find('"tagsSet":[]', 1, true))

        -- 307 relayed to rmq's own push consumer: its ConsumerRunningInfo.
        r = call_all({ code = req.GET_CONSUMER_RUNNING_INFO, ext = {
            consumerGroup = group, clientId = c.clientId, jstackEnable = "false" } })
        assert.equal(0, r.code, r.remark)
        local info = decode_mq_keys(r.body)
        assert.equal(group, info.properties.consumerGroup)
        assert.equal("CONSUME_PASSIVELY", info.properties.PROP_CONSUME_TYPE)
        assert.is_true(tonumber(info.properties.PROP_CONSUMER_START_TIMESTAMP) >= t_before)
        local owned = 0
        for key, pq in pairs(info.mqTable) do
            if key:match("^(.*)/%d+$") == topic then
                owned = owned + 1
                assert.is_true(pq.lastPullTimestamp >= t_before)
            end
        end
        assert.equal(4, owned)
        local subs = {}
        for _, sd in ipairs(info.subscriptionSet) do
            subs[sd.topic] = sd.subString
        end
        assert.equal("*", subs[topic])

        -- 208: caught up once the consumer committed; 4 queues listed.
        assert.truthy(server.eventually(function()
            return lag(consume_stats(group, topic)) == 0
        end, 5000))
        local stats, raw = consume_stats(group, topic)
        assert.truthy(raw:find('^{"consumeTps":%d[%d.E-]*,"offsetTable":{{"brokerName":"broker%-a","queueId":%d,"topic":"FxAcTopic"}:'
                               .. '{"brokerOffset":%d+,"consumerOffset":%d+,"lastTimestamp":%d+}'))
        local queues, total = 0, 0
        for key, w in pairs(stats.offsetTable) do
            queues = queues + 1
            total = total + w.brokerOffset
            assert.equal(topic, key:match("^(.*)/%d+$"))
            if w.consumerOffset > 0 then
                assert.is_true(w.lastTimestamp >= t_before)
            end
        end
        assert.equal(4, queues)
        assert.equal(12, total)
        -- ... and 0 once a whole window passed without consuming.
        assert.truthy(server.eventually(function() return consume_stats(group, topic).consumeTps == 0 end, 5000))
        -- Without a topic: every topic the group committed (its retry topic
        -- has no offset yet).
        local all = consume_stats(group, nil)
        for key in pairs(all.offsetTable) do
            assert.equal(topic, key:match("^(.*)/%d+$"))
        end

        -- 300: who consumes the topic.
        r = call_all({ code = req.QUERY_TOPIC_CONSUME_BY_WHO, ext = { topic = topic } })
        assert.equal(0, r.code)
        assert.same({ group }, cjson.decode(r.body).groupList)

        -- 222 resetOffsetByTime to before the first send, forced: the
        -- reply has offset 0 for every queue, the running consumer gets
        -- every message again.
        local before = #got
        r = assert(admins[2]:call({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = topic, group = group, timestamp = tostring(t_before - 1000), isForce = "true" } }))
        assert.equal(0, r.code, r.remark)
        assert.equal("not set any response code", r.remark)  -- as 4.9.8's Broker2Client.resetOffset
        local body = decode_mq_keys(r.body)
        local n = 0
        for _, off in pairs(body.offsetTable) do
            n = n + 1
            assert.equal(0, off)
        end
        assert.equal(4, n)
        assert.truthy(server.eventually(function() return #got >= before + 12 end, 10000))
        local again = {}
        for i = before + 1, #got do
            again[got[i]] = true
        end
        for i = 1, 12 do
            assert.truthy(again["a-" .. i], "a-" .. i .. " consumed again")
        end
        assert.truthy(server.eventually(function()
            return lag(consume_stats(group, topic)) == 0
        end, 5000))

        -- skipAccumulatedMessage (timestamp -1, forced) with the consumer
        -- stopped: CONSUMER_NOT_ONLINE, nothing moved.
        c:shutdown()
        assert.truthy(server.eventually(function()
            local x = assert(admins[1]:call({ code = req.GET_CONSUMER_CONNECTION_LIST,
                                              ext = { consumerGroup = group } }))
            return x.code == R.CONSUMER_NOT_ONLINE
        end, 3000))
        send_n(topic, 6, "b")
        assert.equal(6, lag(consume_stats(group, topic)))
        r = assert(admins[3]:call({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = topic, group = group, timestamp = "-1", isForce = "true" } }))
        assert.equal(R.CONSUMER_NOT_ONLINE, r.code)
        assert.matches("Consumer not online, so can not reset offset, Group: FxAcGroup Topic: FxAcTopic", r.remark,
                       1, true)
        assert.equal(6, lag(consume_stats(group, topic)))

        -- With a consumer online again: skip makes the lag 0 and the
        -- consumer receives none of the 6.
        local got2 = {}
        local c2 = start_consumer(group, topic, got2)
        -- (it starts from the committed offsets: it may consume the 6)
        assert.truthy(server.eventually(function()
            local x = assert(admins[1]:call({ code = req.GET_CONSUMER_CONNECTION_LIST,
                                              ext = { consumerGroup = group } }))
            return x.code == 0
        end, 3000))
        r = assert(admins[4]:call({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = topic, group = group, timestamp = "-1", isForce = "true" } }))
        assert.equal(0, r.code, r.remark)
        local maxes = decode_mq_keys(r.body).offsetTable
        local sum = 0
        for _, off in pairs(maxes) do
            sum = sum + off
        end
        assert.equal(18, sum)
        assert.equal(0, lag(consume_stats(group, topic)))
        c2:shutdown()
    end)

    it("answers unknown groups and topics with 4.9.8's codes and remarks", function()
        local r = call_all({ code = req.GET_CONSUMER_CONNECTION_LIST, ext = { consumerGroup = "FxNoSuchGroup" } })
        assert.equal(R.CONSUMER_NOT_ONLINE, r.code)
        assert.equal("the consumer group[FxNoSuchGroup] not online", r.remark)
        r = call_all({ code = req.GET_PRODUCER_CONNECTION_LIST, ext = { producerGroup = "FxNoSuchGroup" } })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("the producer group[FxNoSuchGroup] not exist", r.remark)
        r = call_all({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = "FxNoSuchTopic", group = "g", timestamp = "0", isForce = "false" } })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("[reset-offset] reset offset failed, no topic in this broker. topic=FxNoSuchTopic", r.remark)
        e:route("FxAcOther")
        assert(p:send({ topic = "FxAcOther", body = "x" }))
        r = call_all({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = "FxAcOther", group = "FxNoOffsets", timestamp = "0", isForce = "false" } })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("THe consumer group <FxNoOffsets> not exist", r.remark)
        r = call_all({ code = req.GET_CONSUME_STATS, ext = { consumerGroup = "FxNoSuchGroup" } })
        assert.equal(0, r.code)
        assert.equal('{"consumeTps":0.0,"offsetTable":{}}', r.body)
        -- Bad fields are refused by name and the broker keeps serving.
        r = call_all({ code = req.INVOKE_BROKER_TO_RESET_OFFSET, ext = {
            topic = "FxAcOther", group = "g", timestamp = "soon", isForce = "false" } })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.matches("timestamp", r.remark)
        r = call_all({ code = req.GET_CONSUMER_CONNECTION_LIST, ext = {} })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.matches("consumerGroup", r.remark)
        r = call_all({ code = req.QUERY_TOPIC_CONSUME_BY_WHO, ext = { topic = "FxAcOther" } })
        assert.equal(0, r.code)
        assert.same({}, cjson.decode(r.body).groupList)
    end)

    it("lists producer connections (204) and every producer (328)", function()
        local pc = assert(net.connect(e.addr))
        assert.equal(0, assert(pc:call({ code = req.HEART_BEAT,
            body = heartbeat_body("127.0.0.1@fxprod", nil, nil, "FxAcProducers") })).code)
        local r = call_all({ code = req.GET_PRODUCER_CONNECTION_LIST, ext = { producerGroup = "FxAcProducers" } })
        assert.equal(0, r.code)
        local set = cjson.decode(r.body).connectionSet
        assert.equal(1, #set)
        assert.equal("127.0.0.1@fxprod", set[1].clientId)
        assert.equal("JAVA", set[1].language)
        assert.matches("^127%.0%.0%.1:%d+$", set[1].clientAddr)
        r = call_all({ code = req.GET_ALL_PRODUCER_INFO, ext = {} })
        assert.equal(0, r.code)
        local data = cjson.decode(r.body).data
        assert.equal("127.0.0.1@fxprod", data.FxAcProducers[1].clientId)
        assert.matches("^/127%.0%.0%.1:%d+$", data.FxAcProducers[1].remoteIP)
        assert.is_true(data.FxAcProducers[1].lastUpdateTimestamp > 0)
        pc:close()
        assert.truthy(server.eventually(function()
            local x = assert(admins[1]:call({ code = req.GET_PRODUCER_CONNECTION_LIST,
                                              ext = { producerGroup = "FxAcProducers" } }))
            return x.code == R.SYSTEM_ERROR
        end, 3000))
    end)

    it("relays GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY to the client and its answer back", function()
        local topic, group, cid = "FxAcRelay", "FxAcRelayGroup", "127.0.0.1@fxrelay"
        e:route(topic)
        local sent = assert(p:send({ topic = topic, body = "directly-body" }))
        local asked = {}
        local silent = false
        local client = assert(net.connect(e.addr, { on_request = function(ctx, cmd)
            if cmd.code == req.NOTIFY_CONSUMER_IDS_CHANGED then
                return nil
            end
            asked[#asked + 1] = { code = cmd.code, ext = cmd.ext, body = cmd.body }
            if silent then
                return nil
            end
            if cmd.code == req.GET_CONSUMER_RUNNING_INFO then
                return { code = 0, body = '{"properties":{"me":"' .. cmd.ext.clientId .. '"}}' }
            elseif cmd.code == req.CONSUME_MESSAGE_DIRECTLY then
                return { code = 0, ext = { seen = "yes" }, body = '{"consumeResult":"CR_SUCCESS"}' }
            end
        end }))
        assert.equal(0, assert(client:call({ code = req.HEART_BEAT,
            body = heartbeat_body(cid, group, topic) })).code)

        for i, a in ipairs(admins) do
            local r = assert(a:call({ code = req.GET_CONSUMER_RUNNING_INFO, ext = {
                consumerGroup = group, clientId = cid, jstackEnable = "false" } }, 5000))
            assert.equal(0, r.code, r.remark)
            assert.equal('{"properties":{"me":"' .. cid .. '"}}', r.body)
            assert.equal(req.GET_CONSUMER_RUNNING_INFO, asked[i].code)
            assert.equal("false", asked[i].ext.jstackEnable)
        end

        asked = {}
        local r = assert(admins[1]:call({ code = req.CONSUME_MESSAGE_DIRECTLY, ext = {
            consumerGroup = group, clientId = cid, msgId = sent.offsetMsgId } }, 5000))
        assert.equal(0, r.code, r.remark)
        assert.equal('{"consumeResult":"CR_SUCCESS"}', r.body)
        assert.equal("yes", r.ext.seen)
        assert.equal(env.BROKER, asked[1].ext.brokerName)
        local rec = assert(message.decode_record(asked[1].body))
        assert.equal("directly-body", rec.body)
        assert.equal(topic, rec.topic)

        r = assert(admins[2]:call({ code = req.GET_CONSUMER_RUNNING_INFO, ext = {
            consumerGroup = group, clientId = "127.0.0.1@nobody" } }))
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("The Consumer <FxAcRelayGroup> <127.0.0.1@nobody> not online", r.remark)

        -- A client that never answers: CONSUME_MSG_TIMEOUT after
        -- adminClientCallTimeoutMillis (600 ms here), then it works again.
        silent = true
        r = assert(admins[3]:call({ code = req.GET_CONSUMER_RUNNING_INFO, ext = {
            consumerGroup = group, clientId = cid } }, 5000))
        assert.equal(R.CONSUME_MSG_TIMEOUT, r.code)
        assert.matches("consumer <FxAcRelayGroup> <127.0.0.1@fxrelay> Timeout: "
                       .. "org.apache.rocketmq.remoting.exception.RemotingTimeoutException: wait response on the "
                       .. "channel <127.0.0.1:", r.remark, 1, true)
        silent = false
        r = assert(admins[4]:call({ code = req.GET_CONSUMER_RUNNING_INFO, ext = {
            consumerGroup = group, clientId = cid } }, 5000))
        assert.equal(0, r.code)
        client:close()
    end)
end)
