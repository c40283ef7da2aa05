-- `rmq admin`'s group, consumer, producer, message and offset commands
-- (lua/rmq/admin/{group,consumer,producer,message,offset}.lua) against a
-- real NameServer and a broker with two workers: each command run as a
-- user runs it (build/rmq admin ...), its effect checked on the broker or
-- through another command, with rmq's own push consumer running where a
-- live group matters.
local net = require("rmq.net")
local cjson = require("cjson")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local admin = require("rmq.admin")
local server = require("support.server")
local env = require("support.broker_consume_env")
local adm = require("support.admin")

local req = codes.request

describe("rmq admin: group, consumer, producer, message and offset commands", function()
    local e, p

    setup(function()
        e = env.start({ workers = 2, traceTopicEnable = true })
        p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxAdmProducer" })
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    -- build/rmq admin ARGS -n NAMESRV: exit code, output.
    local function run(args)
        return server.rmq(("admin %s -n %s"):format(args, e.ns_addr))
    end

    local function run_json(args)
        local code, out = run(args .. " --json")
        assert.equal(0, code, out)
        return cjson.decode(out)
    end

    local function start_consumer(group, topic, got)
        return adm.start_consumer(e.ns_addr, group, topic, got, 1000)
    end

    -- A topic of n queues on the broker, routed by the NameServer.
    local function topic_of(name, n)
        adm.create_topic(e.addr, name, n)
        e:route(name, n)
        return name
    end

    local function diff_total(out)
        return tonumber(out:match("Diff Total: (%-?%d+)"))
    end

    it("updateSubGroup then getConsumerConfig shows the group's config; deleteSubGroup removes it", function()
        local code, out = run("updateSubGroup -c DefaultCluster -g FxAdmSub -r 5 -q 2 -m true")
        assert.equal(0, code, out)
        assert.matches("create subscription group to " .. e.addr:gsub("%p", "%%%0") .. " success%.", out)
        assert.matches("retryMaxTimes=5", out)
        code, out = run("getConsumerConfig -g FxAdmSub")
        assert.equal(0, code, out)
        assert.matches("=+DefaultCluster:broker%-a=+", out)
        assert.matches("retryMaxTimes%s+=  5\n", out)
        assert.matches("retryQueueNums%s+=  2\n", out)
        assert.matches("consumeFromMinEnable%s+=  true\n", out)
        local list = run_json("getConsumerConfig -g FxAdmSub")
        assert.equal(1, #list)
        assert.equal("broker-a", list[1].brokerName)
        assert.equal(5, list[1].config.retryMaxTimes)
        -- The broker itself holds it.
        local r = assert(net.call(e.addr, { code = req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG }, 5000))
        assert.equal(5, cjson.decode(r.body).subscriptionGroupTable.FxAdmSub.retryMaxTimes)

        code, out = run("deleteSubGroup -b " .. e.addr .. " -g FxAdmSub")
        assert.equal(0, code, out)
        assert.matches("delete subscription group %[FxAdmSub%] from broker", out)
        code, out = run("getConsumerConfig -g FxAdmSub")
        assert.equal(1, code, out)
        assert.matches("no broker has subscription group FxAdmSub", out)
    end)

    it("refuses bad options with exit 2 and names the server and code of a refusal", function()
        local code, out = run("updateSubGroup -g FxAdmSub")
        assert.equal(2, code, out)
        assert.matches("%-b brokerAddr or %-c clusterName", out)
        code, out = run("updateSubGroup -b " .. e.addr .. " -g FxAdmSub -r lots")
        assert.equal(2, code, out)
        code, out = run("resetOffsetByTime -g G -t T -s yesterday")
        assert.equal(2, code, out)
        code, out = run("consumerConnection")
        assert.equal(2, code, out)
        assert.matches("Missing required option: g", out)
        -- A group nobody runs: the broker's refusal, in one line.
        topic_of("FxAdmNoTopic", 1)
        code, out = run("producerConnection -g FxAdmNobody -t FxAdmNoTopic")
        assert.equal(1, code, out)
        assert.matches("^rmq admin producerConnection: 127%.0%.0%.1:%d+ refused GET_PRODUCER_CONNECTION_LIST: "
            .. "SYSTEM_ERROR %(code 1%)", out)
        assert.equal(1, select(2, out:gsub("\n", "")))
        code, out = server.rmq("admin consumerProgress -g X -n 127.0.0.1:1")
        assert.equal(3, code, out)
    end)

    it("sendMessage, then queryMsgByKey, queryMsgById, queryMsgByUniqueKey and queryMsgByOffset find it", function()
        local topic = topic_of("FxAdmQuery", 2)
        local sent = run_json(("sendMessage -t %s -p query-body-1 -k fx-key-1 -c TagQ"):format(topic))
        assert.equal("SEND_OK", sent.sendStatus)
        assert.equal("broker-a", sent.brokerName)
        local code, out = run(("sendMessage -t %s -p query-body-2 -k fx-key-2 -b broker-a -i 1"):format(topic))
        assert.equal(0, code, out)
        assert.matches("#Broker Name%s+#QID%s+#Send Result%s+#MsgId\nbroker%-a%s+1%s+SEND_OK%s+%x+", out)

        local found = run_json(("queryMsgByKey -t %s -k fx-key-1"):format(topic))
        assert.equal(1, #found)
        assert.equal(sent.msgId, found[1].msgId)
        assert.equal("query-body-1", found[1].body)
        code, out = run(("queryMsgByKey -t %s -k fx-key-1"):format(topic))
        assert.equal(0, code, out)
        assert.matches(("#Message ID%%s+#QID%%s+#Offset\n%s%%s+%d"):format(sent.msgId, sent.queueId), out)

        code, out = run("queryMsgById -i " .. sent.offsetMsgId)
        assert.equal(0, code, out)
        assert.matches("OffsetID:%s+" .. sent.offsetMsgId, out)
        assert.matches("Topic:%s+" .. topic, out)
        assert.matches("Tags:%s+%[TagQ%]", out)
        assert.matches("Keys:%s+%[fx%-key%-1%]", out)
        assert.matches("Message Body:%s+query%-body%-1", out)
        -- A client message id needs its topic.
        code, out = run("queryMsgById -i " .. sent.msgId)
        assert.equal(1, code, out)
        code, out = run(("queryMsgById -i %s -t %s"):format(sent.msgId, topic))
        assert.equal(0, code, out)
        assert.matches("Message Body:%s+query%-body%-1", out)

        local u = run_json(("queryMsgByUniqueKey -t %s -i %s"):format(topic, sent.msgId))
        assert.equal(sent.offsetMsgId, u[1].offsetMsgId)
        assert.equal("TagQ", u[1].tags)

        code, out = run(("queryMsgByOffset -t %s -b broker-a -i %d -o %d"):format(topic, sent.queueId,
            sent.queueOffset))
        assert.equal(0, code, out)
        assert.matches("OffsetID:%s+" .. sent.offsetMsgId, out)
        code, out = run(("queryMsgByOffset -t %s -b broker-a -i %d -o 99"):format(topic, sent.queueId))
        assert.equal(1, code, out)
    end)

    it("sendMessage -m true writes the send's trace before it exits", function()
        local topic = topic_of("FxAdmTrace", 1)
        local sent = run_json(("sendMessage -t %s -p traced-body -m true"):format(topic))
        local code, out = server.rmq(("trace -n %s --json %s"):format(e.ns_addr, sent.msgId))
        assert.equal(0, code, out)
        local recs = cjson.decode(out)
        assert.equal(1, #recs, out)
        assert.equal("Pub", recs[1].type)
        assert.equal(topic, recs[1].topic)
        assert.equal(sent.offsetMsgId, recs[1].offsetMsgId)
    end)

    it("printMsg prints every body, filtered by tag; printMsgByQueue counts tags; consumeMessage reads", function()
        local topic = topic_of("FxAdmPrint", 2)
        for i = 1, 6 do
            assert(p:send({ topic = topic, body = "print-" .. i, tags = (i % 2 == 0) and "Even" or "Odd" }))
        end
        local code, out = run("printMsg -t " .. topic)
        assert.equal(0, code, out)
        for i = 1, 6 do
            assert.matches("BODY: print%-" .. i .. "\n", out)
        end
        assert.equal(2, select(2, out:gsub("minOffset=0, maxOffset=%d+, MessageQueue %[topic=" .. topic, "")))
        code, out = run("printMsg -t " .. topic .. " -s Even -d false")
        assert.equal(0, code, out)
        assert.equal(3, select(2, out:gsub("BODY: NOT PRINT BODY", "")))
        assert.not_matches("Odd", out)

        local total = 0
        for q = 0, 1 do
            local r = run_json(("printMsgByQueue -t %s -a broker-a -i %d -f true -p true -d true"):format(topic, q))
            for _, t in ipairs(r.tags) do
                total = total + t.count
            end
            code, out = run(("printMsgByQueue -t %s -a broker-a -i %d -f true"):format(topic, q))
            assert.equal(0, code, out)
            assert.matches("Tag: %a+%s+Count: %d+", out)
        end
        assert.equal(6, total)

        code, out = run("consumeMessage -t " .. topic .. " -c 4")
        assert.equal(0, code, out)
        assert.matches("^Consume ok\n", out)
        assert.equal(4, select(2, out:gsub("BODY: print%-%d", "")))
        code, out = run("checkMsgSendRT -t " .. topic .. " -a 3 -s 10")
        assert.equal(0, code, out)
        assert.equal(3, select(2, out:gsub("broker%-a%s+%d%s+true", "")))
        assert.matches("Avg RT: %d+%.%d%d", out)
    end)

    it("consumerProgress shows the lag after sends and zero after consuming; resetOffsetByTime re-reads", function()
        local topic, group = topic_of("FxAdmLag", 2), "FxAdmLagGroup"
        local got = {}
        -- One message per queue consumed and committed: the group has offsets.
        local bodies = 0
        for q = 0, 1 do
            assert(p:send_orderly({ topic = topic, body = "first-" .. q }, q, function(qs, _, a) return qs[a + 1] end))
            bodies = bodies + 1
        end
        local c = start_consumer(group, topic, got)
        e:route("%RETRY%" .. group, 1)
        assert.truthy(server.eventually(function() return #got == bodies end, 8000))
        assert.truthy(server.eventually(function()
            local code, out = run("consumerProgress -g " .. group)
            return code == 0 and diff_total(out) == 0 and select(2, out:gsub(topic, "")) == 2
        end, 5000))
        c:shutdown()
        got = {}
        -- Offline now: sends pile up as lag.
        for i = 1, 7 do
            assert(p:send({ topic = topic, body = "lag-" .. i }))
        end
        local code, out = run("consumerProgress -g " .. group)
        assert.equal(0, code, out)
        assert.matches("#Topic%s+#Broker Name%s+#QID%s+#Broker Offset%s+#Consumer Offset%s+#Diff%s+#LastTime", out)
        assert.equal(7, diff_total(out), out)
        local j = run_json("consumerProgress -g " .. group)
        assert.equal(7, j.diffTotal)
        assert.equal(2, #j.queues)

        c = start_consumer(group, topic, got)
        assert.truthy(server.eventually(function() return #got == 7 end, 8000))
        assert.truthy(server.eventually(function()
            return diff_total(select(2, run("consumerProgress -g " .. group))) == 0
        end, 5000))
        code, out = run("consumerProgress")
        assert.equal(0, code, out)
        assert.matches(group .. "%s+1%s+V4_9_8%s+PUSH%s+CLUSTERING%s+%d+%s+0", out)

        code, out = run("consumerConnection -g " .. group)
        assert.equal(0, code, out)
        assert.matches("ConsumeType: CONSUME_PASSIVELY", out)
        assert.matches(topic .. "%s+%*", out)
        -- The broker's view of its online groups.
        local s = run_json("brokerConsumeStats -b " .. e.addr)
        local offsets = 0
        for _, q in ipairs(s.queues) do
            if q.group == group and q.topic == topic then
                assert.equal(q.brokerOffset, q.consumerOffset)
                offsets = offsets + q.consumerOffset
            end
        end
        assert.equal(9, offsets, cjson.encode(s))
        code, out = run("brokerConsumeStats -b " .. e.addr)
        assert.equal(0, code, out)
        assert.matches("#Topic%s+#Group%s+#Broker Name%s+#QID%s+#Broker Offset%s+#Consumer Offset%s+#Diff", out)

        -- Back to the start while it runs: the consumer gets all 7 again.
        code, out = run(("resetOffsetByTime -g %s -t %s -s 0"):format(group, topic))
        assert.equal(0, code, out)
        assert.matches("rollback consumer offset by specified group%[" .. group .. "%]", out)
        assert.equal(2, select(2, out:gsub("broker%-a%s+%d%s+0", "")), out)
        assert.truthy(server.eventually(function() return #got == 16 end, 8000), #got)
        assert.truthy(server.eventually(function()
            return diff_total(select(2, run("consumerProgress -g " .. group))) == 0
        end, 5000))

        -- cloneGroupOffset: a second group starts where the first is.
        code, out = run(("cloneGroupOffset -s %s -d FxAdmClone -t %s"):format(group, topic))
        assert.equal(0, code, out)
        local sum = 0
        for q = 0, 1 do
            local r = assert(net.call(e.addr, { code = req.QUERY_CONSUMER_OFFSET,
                ext = { consumerGroup = "FxAdmClone", topic = topic, queueId = q } }, 5000))
            assert.equal(0, r.code, r.remark)
            sum = sum + tonumber(r.ext.offset)
        end
        assert.equal(9, sum)
        c:shutdown()

        -- skipAccumulatedMessage with nobody online: mqadmin's fallback
        -- writes the max offsets itself.
        assert(p:send({ topic = topic, body = "lag-8" }))
        assert.truthy(server.eventually(function()
            local _, o = run("consumerProgress -g " .. group)
            return diff_total(o) == 1
        end, 5000))
        code, out = run(("skipAccumulatedMessage -g %s -t %s"):format(group, topic))
        assert.equal(0, code, out)
        assert.equal(0, diff_total(select(2, run("consumerProgress -g " .. group))))
    end)

    it("consumerStatus and queryMsgById -g -d reach the client through the broker", function()
        local topic, group, cid = topic_of("FxAdmStatus", 1), "FxAdmStatusGroup", "127.0.0.1@fxadmstatus"
        -- A client that answers as Java's ClientRemotingProcessor does.
        local client = assert(net.connect(e.addr, { on_request = function(_, cmd)
            if cmd.code == req.CONSUME_MESSAGE_DIRECTLY then
                local rec = assert(require("rmq.message").decode_record(cmd.body))
                return { code = 0, body = cjson.encode({ order = false, autoCommit = true,
                    consumeResult = rec.body == "directly-body" and "CR_SUCCESS" or "CR_THROW_EXCEPTION",
                    spentTimeMills = 1 }) }
            elseif cmd.code == req.GET_CONSUMER_RUNNING_INFO then
                return { code = 0, body = '{"jstack":null,"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"'
                    .. topic .. '"}:{"cachedMsgCount":3,"commitOffset":11,"locked":false,"droped":false}},'
                    .. '"properties":{"consumerGroup":"' .. cmd.ext.consumerGroup .. '"},"statusTable":{},'
                    .. '"subscriptionSet":[{"subString":"*","topic":"' .. topic .. '"}]}' }
            end
        end }))
        local body = cjson.encode({ clientID = cid, producerDataSet = setmetatable({}, cjson.array_mt),
            consumerDataSet = { { groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
                consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
                subscriptionDataSet = { { topic = topic, subString = "*", subVersion = 1,
                    tagsSet = setmetatable({}, cjson.array_mt), codeSet = setmetatable({}, cjson.array_mt) } } } } })
        assert.equal(0, assert(client:call({ code = req.HEART_BEAT, body = body })).code)
        e:route("%RETRY%" .. group, 1)
        -- In this process (the client above must be free to answer).
        local r = assert(admin.run("consumerStatus", { consumerGroup = group }, { namesrvAddr = e.ns_addr }))
        assert.equal(1, #r.clients)
        assert.equal(cid, r.clients[1].clientId)
        local q = r.clients[1].info.queues[1]
        assert.equal(topic, q.topic)
        assert.equal(11, q.commitOffset)
        assert.is_true(r.sameSubscription)
        local text = admin.commands()["consumerStatus"].format(r)
        assert.matches("Same subscription in the same group of consumer", text)
        assert.matches("commitOffset=11", text)
        r = assert(admin.run("consumerStatus", { consumerGroup = group, clientId = cid }, { namesrvAddr = e.ns_addr }))
        assert.equal(group, r.clients[1].info.properties.consumerGroup)
        -- queryMsgById -g -d: the message handed to that client's listener.
        local sent = assert(p:send({ topic = topic, body = "directly-body" }))
        r = assert(admin.run("queryMsgById", { msgId = sent.offsetMsgId, consumerGroup = group, clientId = cid },
                             { namesrvAddr = e.ns_addr }))
        assert.equal("CR_SUCCESS", r[1].directly.consumeResult)
        assert.matches("^ConsumeMessageDirectlyResult %[order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
            .. "remark=null, spentTimeMills=1%]$", admin.commands()["queryMsgById"].format(r))
        r = assert(admin.run("queryMsgByUniqueKey", { msgId = sent.msgId, topic = topic, consumerGroup = group,
                                                      clientId = cid }, { namesrvAddr = e.ns_addr }))
        assert.equal("CR_SUCCESS", r.directly.consumeResult)
        client:close()
    end)

    it("consumerStatus and queryMsgById -g -d with rmq's own push consumer", function()
        local topic, group = topic_of("FxAdmOwn", 2), "FxAdmOwnGroup"
        local got = {}
        local c = start_consumer(group, topic, got)
        e:route("%RETRY%" .. group, 1)
        local sent = assert(p:send({ topic = topic, body = "own-1" }))
        assert.truthy(server.eventually(function() return #got == 1 end, 8000))
        local ctx = { namesrvAddr = e.ns_addr }
        local r = assert(admin.run("consumerStatus", { consumerGroup = group }, ctx))
        assert.equal(1, #r.clients)
        local info = assert(r.clients[1].info, r.clients[1].error)
        assert.equal(group, info.properties.consumerGroup)
        assert.equal("V4_9_8", info.properties.PROP_CLIENT_VERSION)
        local owned = {}
        for _, q in ipairs(info.queues) do
            owned[#owned + 1] = q.topic .. "/" .. q.queueId
        end
        assert.same({ "%RETRY%" .. group .. "/0", topic .. "/0", topic .. "/1" }, owned)
        assert.matches("#Consumer MQ Detail#", admin.commands()["consumerStatus"].format(r))
        -- The broker hands the message to this consumer's handler again.
        r = assert(admin.run("queryMsgById", { msgId = sent.offsetMsgId, consumerGroup = group,
                                               clientId = c.clientId }, ctx))
        assert.equal("CR_SUCCESS", r[1].directly.consumeResult)
        assert.same({ "own-1", "own-1" }, got)
        c:shutdown()
    end)

    it("producerConnection lists a producer's connection", function()
        local topic = topic_of("FxAdmProd", 1)
        local pc = assert(net.connect(e.addr))
        assert.equal(0, assert(pc:call({ code = req.HEART_BEAT, body = cjson.encode({
            clientID = "127.0.0.1@fxadmprod", consumerDataSet = setmetatable({}, cjson.array_mt),
            producerDataSet = { { groupName = "FxAdmProducers" } } }) })).code)
        local code, out = run("producerConnection -g FxAdmProducers -t " .. topic)
        assert.equal(0, code, out)
        assert.matches("0001%s+127%.0%.0%.1@fxadmprod%s+127%.0%.0%.1:%d+%s+JAVA%s+V4_9_8", out)
        pc:close()
    end)

    it("queryCq reads a consume queue", function()
        local topic = topic_of("FxAdmCq", 1)
        for i = 1, 3 do
            assert(p:send({ topic = topic, body = "cq-" .. i, tags = "T" .. i }))
        end
        local code, out = run("queryCq -t " .. topic .. " -q 0 -i 0 -c 3")
        assert.equal(0, code, out)
        assert.matches("max: 3, min: 0", out)
        assert.equal(3, select(2, out:gsub("ConsumeQueueData{physicOffset=%d+, physicSize=%d+", "")))
    end)
end)
