-- Consumer offsets across broker restarts (a clean stop and a crash),
-- consumerOffset.json in the Java broker's format both ways, and a broker
-- that does not auto-create subscription groups.
local net = require("rmq.net")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local server = require("support.server")
local rq = require("support.requests")
local env = require("support.broker_consume_env")

local req, R = codes.request, codes.response

local mq, send_to = env.mq, env.send_to

describe("broker consume: offsets across restarts", function()
    local e

    setup(function()
        e = env.start({ workers = 2, flushConsumerOffsetInterval = 200,
                        flushDelayOffsetInterval = 200, messageDelayLevel = "2s 2s 2s" })
    end)

    teardown(function()
        e:stop()
    end)

    local function new_consumer(group)
        return consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = group })
    end

    it("keeps committed offsets through a crash and a clean stop", function()
        local topic, group = "FxOffsets", "FxOffsetsGroup"
        e:route(topic)
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxOffsetsProducer" })
        for i = 1, 10 do
            assert(send_to(p, topic, i % 2, { body = "m" .. i }))
        end
        local c = new_consumer(group)
        assert.is_true(c:update_offset(mq(topic, 0), 4))
        local r = assert(c:pull(mq(topic, 1), 3, 1, { commitOffset = 3 }))
        assert.equal("FOUND", r.status)
        -- Written within flushConsumerOffsetInterval, in fastjson's format.
        local path = e.store .. "/config/consumerOffset.json"
        local want = '{\n\t"offsetTable":{\n\t\t"FxOffsets@FxOffsetsGroup":{0:4,1:3\n\t\t}\n\t}\n}'
        assert.truthy(server.eventually(function() return server.read_file(path) == want end, 3000),
            server.read_file(path))
        -- A crash (SIGKILL) keeps what was written (once the topic's
        -- config is on disk too: the tables are saved every second, to
        -- topics.json or its journal).
        local topics_json = e.store .. "/config/topics.json"
        assert.truthy(server.eventually(function()
            return (server.read_file(topics_json) .. server.read_file(topics_json .. ".journal"))
                :find('"FxOffsets"', 1, true)
        end, 3000))
        e:restart({ kill = true })
        c = new_consumer(group)
        assert.equal(4, c:query_offset(mq(topic, 0)))
        assert.equal(3, c:query_offset(mq(topic, 1)))
        r = assert(c:pull(mq(topic, 0), 4, 32))
        assert.equal(1, #r.messages)
        assert.equal("m10", r.messages[1].body)
        -- A clean stop writes what changed since the last round.
        assert.is_true(c:update_offset(mq(topic, 0), 5))
        e:restart()
        c = new_consumer(group)
        assert.equal(5, c:query_offset(mq(topic, 0)))
        assert.equal(3, c:query_offset(mq(topic, 1)))
    end)

    it("delivers a delayed retry after a restart, progress in delayOffset.json", function()
        local topic, group = "FxDelayed", "FxDelayedGroup"
        e:route(topic)
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxDelayedProducer" })
        assert(send_to(p, topic, 0, { body = "later" }))
        local c = new_consumer(group)
        local m = assert(assert(c:pull(mq(topic, 0), 0, 1)).messages[1])
        assert.is_true(c:send_back(m, mq(topic, 0)))
        -- Stopped before it is due (2 s): delivered by the next process.
        e:restart()
        e:route("%RETRY%" .. group, 1)
        c = new_consumer(group)
        local got
        assert.truthy(server.eventually(function()
            local r = c:pull(mq("%RETRY%" .. group, 0), 0, 32)
            got = r and r.messages[1]
            return got
        end, 5000))
        assert.equal("later", got.body)
        assert.equal(1, got.reconsumeTimes)
        local path = e.store .. "/config/delayOffset.json"
        assert.truthy(server.eventually(function()
            return server.read_file(path) == '{\n\t"offsetTable":{1:0,2:0,3:1\n\t}\n}'
        end, 2000), server.read_file(path))
        -- Delivered once, also after another restart.
        e:restart()
        c = new_consumer(group)
        net.sleep(1500)
        local r = assert(c:pull(mq("%RETRY%" .. group, 0), 0, 32))
        assert.equal(1, #r.messages)
    end)

    it("reads a consumerOffset.json written by the Java broker", function()
        local topic = "FxOffsets"
        e:route(topic)
        assert.equal(0, (e.broker:stop()))
        local path = e.store .. "/config/consumerOffset.json"
        local f = assert(io.open(path, "w"))
        f:write('{\n\t"offsetTable":{\n\t\t"%RETRY%JavaGroup@JavaGroup":{0:0\n\t\t},\n'
            .. '\t\t"FxOffsets@JavaGroup":{0:2,1:1\n\t\t}\n\t}\n}')
        f:close()
        e:start_broker()
        local c = new_consumer("JavaGroup")
        assert.equal(2, c:query_offset(mq(topic, 0)))
        assert.equal(1, c:query_offset(mq(topic, 1)))
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = req.QUERY_CONSUMER_OFFSET, ext = {
            consumerGroup = "JavaGroup", topic = "%RETRY%JavaGroup", queueId = 0 } }))
        assert.equal(0, r.code)
        assert.equal("0", r.ext.offset)
        conn:close()
        -- The file replaced the table: FxOffsetsGroup's offsets are gone
        -- (a young queue answers 0 for a group with no offset).
        assert.equal(0, new_consumer("FxOffsetsGroup"):query_offset(mq(topic, 0)))
    end)
end)

describe("broker consume: autoCreateSubscriptionGroup = false", function()
    local e

    setup(function()
        e = env.start({ workers = 2, autoCreateSubscriptionGroup = false })
    end)

    teardown(function()
        e:stop()
    end)

    it("refuses unknown groups with 26 and keeps serving", function()
        local topic = "FxNoAutoGroup"
        e:route(topic)
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxNoAutoProducer" })
        local sent = assert(send_to(p, topic, 0, { body = "x" }))
        local conn = assert(net.connect(e.addr))
        local function pull(group)
            return assert(conn:call(rq.pull({ group = group, topic = topic })))
        end
        local r = pull("FxUnknownGroup")
        assert.equal(R.SUBSCRIPTION_GROUP_NOT_EXIST, r.code)
        assert.matches("subscription group [FxUnknownGroup] does not exist", r.remark, 1, true)
        r = assert(conn:call({ code = req.CONSUMER_SEND_MSG_BACK, ext = {
            offset = 0, group = "FxUnknownGroup", delayLevel = 0 } }))
        assert.equal(R.SUBSCRIPTION_GROUP_NOT_EXIST, r.code)
        -- A heartbeat still registers the client (as in Java), without
        -- creating the group or its retry topic.
        r = assert(conn:call({ code = req.HEART_BEAT, body = '{"clientID":"127.0.0.1@x",'
            .. '"consumerDataSet":[{"groupName":"FxUnknownGroup","consumeType":"CONSUME_PASSIVELY",'
            .. '"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
            .. '"subscriptionDataSet":[]}],"producerDataSet":[]}' }))
        assert.equal(0, r.code)
        assert.equal(R.SUBSCRIPTION_GROUP_NOT_EXIST, pull("FxUnknownGroup").code)
        -- System groups are always created; the broker keeps serving.
        r = pull("CID_RMQ_SYS_FxTest")
        assert.equal(0, r.code)
        assert.equal("1", r.ext.nextBeginOffset)
        assert.truthy(sent.msgId)
        conn:close()
    end)
end)
