-- The broker's consume side with real processes (a NameServer and a
-- broker with two workers on loopback) and rmq's own clients: messages
-- come back intact, tags filter, long polling wakes and times out,
-- consumer groups split queues on NOTIFY_CONSUMER_IDS_CHANGED, offsets
-- survive a restart, refusals carry RocketMQ's codes.
local net = require("rmq.net")
local core = require("rmq.core")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")
local env = require("support.broker_consume_env")

local req = codes.request

-- Wake-up budget (ms) of a held pull after the send it waits for.  A
-- held pull also re-reads its queue every pullHoldRecheckMillis (500 by
-- default), so the broker below re-checks only every RECHECK_MS: a wake
-- within WAKE_MS is the send's, and the budget leaves room for a loaded
-- machine (a process there can wait 100 ms and more for a core).
-- Sanitizer builds run several times slower.
local SLOW = os.getenv("RMQ_SERVER_ASAN_OPTIONS") and 3 or 1
local WAKE_MS = 1000 * SLOW
local RECHECK_MS = 10000

local mq, send_to = env.mq, env.send_to

describe("broker consume", function()
    local e, p

    setup(function()
        -- Short delay levels: a message sent back is due after 1 s (level
        -- 3, the first retry), 2 s from the second retry on.
        -- A send may wait 5 s in the worker's queue, not 200 ms, before
        -- the broker answers TIMEOUT_CLEAN_QUEUE: under ASan at load 12
        -- one of the bulk case's 200 in flight waited 248 ms (what this
        -- spec checks is the messages, not flow control).
        e = env.start({ workers = 2, messageDelayLevel = "1s 1s 1s 2s 2s",
                       pullHoldRecheckMillis = RECHECK_MS, waitTimeMillsInSendQueue = 5000 })
        -- 30 s, not RocketMQ's 3 s: the bulk case has 200 sends in flight,
        -- on a loaded machine under ASan a few outlived 3 s.
        p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxConsumeProducer",
                           sendMsgTimeout = 30000 })
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    -- A request on c's connection to q's broker, answered.  The broker
    -- reads a connection's requests in order, so a pull sent before it
    -- and still unanswered when it returns is held: the positive signal
    -- for "held" (the first call also makes the connection and caches
    -- the route, so that a pull spawned after it is written at once).
    local function roundtrip(c, q)
        local addr = assert(c:pull_addr(q))
        local r = assert(c:call(addr, { code = req.GET_MAX_OFFSET, ext = { topic = q.topic, queueId = q.queueId } }))
        assert.equal(0, r.code, r.remark)
    end

    local function new_consumer(opts)
        opts = opts or {}
        opts.namesrvAddr = e.ns_addr
        opts.consumerGroup = opts.consumerGroup or "FxConsumeGroup"
        opts.consumeFromWhere = opts.consumeFromWhere or "CONSUME_FROM_FIRST_OFFSET"
        return consumer.new(opts)
    end

    it("produces and consumes 10,000 messages with every body and property intact", function()
        local topic = "FxBulk"
        e:route(topic)
        local sent, n = {}, 10000
        local pending, failed = 0, {}
        for i = 1, n do
            -- Bodies: text, binary (every byte value), empty-ish, and
            -- some over compressMsgBodyOverHowmuch (4 KiB: compressed).
            local body
            if i % 100 == 0 then
                body = string.rep(("big-%d|"):format(i), 800)
            elseif i % 3 == 0 then
                local t = {}
                for b = 0, 255 do t[#t + 1] = string.char((b + i) % 256) end
                body = table.concat(t)
            else
                body = ("message %d \0 %s"):format(i, string.rep("x", i % 50))
            end
            local msg = { topic = topic, body = body, tags = "Tag" .. (i % 4),
                          keys = "key" .. i, properties = { seq = tostring(i), color = "blue" } }
            pending = pending + 1
            p:send_async(msg, function(r, err)
                pending = pending - 1
                if not r then
                    failed[#failed + 1] = tostring(err)
                    return
                end
                sent[r.msgId] = { body = body, i = i }
            end)
            if i % 500 == 0 then
                assert.truthy(server.eventually(function() return pending < 200 end, 10000), "pending " .. pending)
            end
        end
        assert.truthy(server.eventually(function() return pending == 0 end, 60000), "sends pending")
        assert.same({}, failed)
        local got, dup, bad = 0, 0, {}
        local seen = {}
        local c = new_consumer({ consumerGroup = "FxBulkGroup", pullBatchSize = 32 })
        c:subscribe(topic, "*")
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                local s = sent[m.msgId]
                if seen[m.msgId] then
                    dup = dup + 1
                elseif s == nil then
                    bad[#bad + 1] = "unknown " .. tostring(m.msgId)
                else
                    seen[m.msgId] = true
                    got = got + 1
                    if m.body ~= s.body then
                        bad[#bad + 1] = "body of #" .. s.i
                    elseif m.properties.seq ~= tostring(s.i) or m.properties.color ~= "blue"
                        or m.keys ~= "key" .. s.i or m.tags ~= "Tag" .. (s.i % 4) then
                        bad[#bad + 1] = "properties of #" .. s.i
                    end
                end
            end
            return "CONSUME_SUCCESS"
        end)
        c:start()
        local ok = server.eventually(function() return got == n end, 30000)
        c:shutdown()
        assert.same({}, bad)
        assert.truthy(ok, ("consumed %d of %d"):format(got, n))
        assert.equal(0, dup)
    end)

    it("filters by tag on the broker (the tag hash in the consume queue)", function()
        local topic = "FxTags"
        e:route(topic)
        for i = 1, 12 do
            assert(send_to(p, topic, 0, { body = "m" .. i, tags = ({ "TagA", "TagB", "TagC" })[i % 3 + 1] }))
        end
        local c = new_consumer()
        local r = assert(c:pull(mq(topic, 0), 0, 32, { expr = "TagA || TagC" }))
        assert.equal("FOUND", r.status)
        assert.equal(8, #r.messages)
        for _, m in ipairs(r.messages) do
            assert.is_true(m.tags == "TagA" or m.tags == "TagC")
        end
        assert.equal(12, r.nextBeginOffset)
        assert.equal(12, r.maxOffset)
        -- Nothing matches: 20 (NO_MATCHED_MSG), and the offset moves on.
        r = assert(c:pull(mq(topic, 0), 0, 32, { expr = "TagZ" }))
        assert.equal("NO_MATCHED_MSG", r.status)
        assert.equal(12, r.nextBeginOffset)
    end)

    it("holds a pull until a message arrives (woken by it) and times out cleanly", function()
        local topic = "FxLongPoll"
        e:route(topic)
        assert(send_to(p, topic, 1, { body = "first" }))
        local c = new_consumer({ suspendTimeoutMillis = 5000 })
        roundtrip(c, mq(topic, 1))
        local res, back
        net.spawn(function()
            res = assert(c:pull(mq(topic, 1), 1, 32, { suspend = true }))
            back = core.mono_ms()
        end)
        roundtrip(c, mq(topic, 1))
        assert.is_nil(res)  -- held
        local sent = core.mono_ms()
        assert(send_to(p, topic, 1, { body = "second" }))
        assert.truthy(server.eventually(function() return res end, 3000))
        assert.equal("FOUND", res.status)
        assert.equal(1, #res.messages)
        assert.equal("second", res.messages[1].body)
        assert.equal(2, res.nextBeginOffset)
        assert.is_true(back - sent < WAKE_MS, ("woken %.1f ms after the send"):format(back - sent))
        -- Nothing comes: the broker answers 19 when the hold time is over.
        c = new_consumer({ suspendTimeoutMillis = 400 })
        local t0 = core.mono_ms()
        local r = assert(c:pull(mq(topic, 1), 2, 32, { suspend = true }))
        local held = core.mono_ms() - t0
        assert.equal("NO_NEW_MSG", r.status)
        assert.equal(2, r.nextBeginOffset)
        assert.equal(2, r.maxOffset)
        assert.is_true(held >= 380 and held < 1500, ("held %.1f ms"):format(held))
    end)

    it("keeps holding a pull through messages its tags do not match", function()
        local topic = "FxLongPollTags"
        e:route(topic)
        assert(send_to(p, topic, 2, { body = "created", tags = "Other" }))
        local c = new_consumer({ suspendTimeoutMillis = 3000 })
        roundtrip(c, mq(topic, 2))
        local res, other
        net.spawn(function()
            res = assert(c:pull(mq(topic, 2), 1, 32, { suspend = true, expr = "Wanted" }))
        end)
        -- A second held pull on the same queue, for the other tag: the
        -- arrival that answers it is the one the first pull sees too.
        net.spawn(function()
            other = assert(c:pull(mq(topic, 2), 1, 32, { suspend = true, expr = "Other" }))
        end)
        roundtrip(c, mq(topic, 2))
        assert.is_nil(res)
        assert.is_nil(other)
        assert(send_to(p, topic, 2, { body = "other", tags = "Other" }))
        assert.truthy(server.eventually(function() return other end, 3000))
        assert.equal("other", other.messages[1].body)
        roundtrip(c, mq(topic, 2))   -- anything that woke answered before this
        assert.is_nil(res)
        assert(send_to(p, topic, 2, { body = "wanted", tags = "Wanted" }))
        assert.truthy(server.eventually(function() return res end, 1000))
        assert.equal("FOUND", res.status)
        assert.equal(1, #res.messages)
        assert.equal("wanted", res.messages[1].body)
        assert.equal(3, res.nextBeginOffset)
    end)

    it("wakes held pulls in every worker (workers = 2)", function()
        -- The main thread hands accepted connections to the workers in
        -- turn: with 12 of them both workers hold pulls, and the send
        -- lands on either.
        local topic = "FxWorkers"
        e:route(topic)
        assert(send_to(p, topic, 3, { body = "created" }))
        local conns, results = {}, {}
        for i = 1, 12 do
            conns[i] = assert(net.connect(e.addr))
        end
        local t_send
        for i = 1, 12 do
            net.spawn(function()
                local r = assert(conns[i]:call(rq.pull({ group = "FxWorkersGroup", topic = topic, qid = 3,
                                                         offset = 1, sysflag = 0x6, suspend = 5000 }), 10000))
                results[i] = { code = r.code, at = core.mono_ms(), next = r.ext.nextBeginOffset }
            end)
        end
        -- Each connection answers a later request: its pull is held.
        for i = 1, 12 do
            local r = assert(conns[i]:call({ code = req.GET_MAX_OFFSET, ext = { topic = topic, queueId = 3 } }))
            assert.equal(0, r.code, r.remark)
        end
        assert.same({}, results)
        t_send = core.mono_ms()
        assert(send_to(p, topic, 3, { body = "wake up" }))
        assert.truthy(server.eventually(function()
            for i = 1, 12 do if not results[i] then return false end end
            return true
        end, 3000))
        for i = 1, 12 do
            assert.equal(0, results[i].code)
            assert.equal("2", results[i].next)
            assert.is_true(results[i].at - t_send < WAKE_MS + 50, ("pull %d woken after %.1f ms"):format(i, results[i].at - t_send))
            conns[i]:close()
        end
    end)

    it("splits a group's queues between two consumers on NOTIFY_CONSUMER_IDS_CHANGED", function()
        local topic = "FxSplit"
        local group = "FxSplitGroup"
        e:route(topic)
        assert(send_to(p, topic, 0, { body = "creates the topic" }))
        e:route("%RETRY%" .. group, 1)
        local function owned(c)
            local n = 0
            for _, q in ipairs(c:assigned()) do
                if q.topic == topic then n = n + 1 end
            end
            return n
        end
        local function start(id)
            -- No periodic rebalance during the spec: only the broker's
            -- notification can make them split or merge.
            local c = new_consumer({ consumerGroup = group, clientId = "127.0.0.1@" .. id,
                                     rebalanceInterval = 600000 })
            c:subscribe(topic, "*")
            c:on_message(function() return "CONSUME_SUCCESS" end)
            c:start()
            return c
        end
        local c1 = start("split-1")
        assert.truthy(server.eventually(function() return owned(c1) == 4 end, 3000))
        local c2 = start("split-2")
        assert.truthy(server.eventually(function() return owned(c1) == 2 and owned(c2) == 2 end, 3000),
            ("c1 owns %d, c2 owns %d"):format(owned(c1), owned(c2)))
        assert.is_true(c1.events.notified >= 1)
        -- The consumer list has both, and the queues are owned once.
        local ids = c1:consumer_ids(topic)
        assert.same({ "127.0.0.1@split-1", "127.0.0.1@split-2" }, ids)
        local seen = {}
        for _, c in ipairs({ c1, c2 }) do
            for _, q in ipairs(c:assigned()) do
                local k = consumer.mq_key(q)
                assert.is_nil(seen[k])
                seen[k] = true
            end
        end
        -- c2 leaves (UNREGISTER_CLIENT): c1 is told and takes everything.
        local before = c1.events.notified
        c2:shutdown()
        assert.truthy(server.eventually(function() return owned(c1) == 4 end, 3000))
        assert.is_true(c1.events.notified > before)
        c1:shutdown()
    end)

    it("tells the group when a member's connection closes", function()
        local topic = "FxClose"
        local group = "FxCloseGroup"
        e:route(topic)
        local notified = 0
        local c1 = assert(net.connect(e.addr, { on_request = function(ctx, cmd)
            if cmd.code == req.NOTIFY_CONSUMER_IDS_CHANGED and cmd.ext.consumerGroup == group then
                notified = notified + 1
            end
        end }))
        local c2 = assert(net.connect(e.addr))
        local function hb(conn, id)
            local body = ('{"clientID":"%s","consumerDataSet":[{"groupName":"%s","consumeType":"CONSUME_PASSIVELY",'
                .. '"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
                .. '"subscriptionDataSet":[{"topic":"%s","subString":"*","tagsSet":[],"codeSet":[],'
                .. '"subVersion":1}],"unitMode":false}],"producerDataSet":[]}'):format(id, group, topic)
            local r = assert(conn:call({ code = req.HEART_BEAT, body = body }))
            assert.equal(0, r.code)
        end
        local function list()
            local r = assert(c1:call({ code = req.GET_CONSUMER_LIST_BY_GROUP, ext = { consumerGroup = group } }))
            return r.code == 0 and require("cjson").decode(r.body).consumerIdList or {}
        end
        hb(c1, "127.0.0.1@close-1")
        assert.truthy(server.eventually(function() return notified == 1 end, 2000))
        hb(c2, "127.0.0.1@close-2")
        assert.truthy(server.eventually(function() return notified == 2 end, 2000))
        assert.equal(2, #list())
        -- A heartbeat that changes nothing tells nobody: the next change's
        -- notice is the third c1 gets, not the fourth (a notice for the
        -- heartbeat would have been written to c1 before its reply).
        hb(c1, "127.0.0.1@close-1")
        c2:close()
        assert.truthy(server.eventually(function() return notified >= 3 end, 2000))
        assert.equal(3, notified)
        assert.same({ "127.0.0.1@close-1" }, list())
        c1:close()
    end)

    it("re-delivers a message sent back through %RETRY% after its delay, then the DLQ", function()
        local topic = "FxRetry"
        local group = "FxRetryGroup"
        local retry = "%RETRY%" .. group
        e:route(topic)
        assert(send_to(p, topic, 0, { body = "fail me", tags = "TagR", keys = "rk",
                                      properties = { color = "red" } }))
        local c = new_consumer({ consumerGroup = group })
        local r = assert(c:pull(mq(topic, 0), 0, 32))
        local m = assert(r.messages[1])
        local t_back = core.now_ms()
        assert.is_true(c:send_back(m, mq(topic, 0)))
        -- First it waits in SCHEDULE_TOPIC_XXXX queue 2 (level 3).
        local conn = assert(net.connect(e.addr))
        local function raw_pull(t, q, off)
            return assert(conn:call(rq.pull({ group = group, topic = t, qid = q, offset = off })))
        end
        local sr = raw_pull("SCHEDULE_TOPIC_XXXX", 2, 0)
        assert.equal(0, sr.code)
        local sched = message.decode_records(sr.body)
        local s1 = sched[#sched]
        assert.equal("SCHEDULE_TOPIC_XXXX", s1.topic)
        assert.equal("3", s1.properties.DELAY)
        assert.equal(retry, s1.properties.REAL_TOPIC)
        assert.equal("0", s1.properties.REAL_QID)
        assert.equal(topic, s1.properties.RETRY_TOPIC)
        assert.equal(1, s1.reconsumeTimes)
        assert.equal(codes.response.PULL_NOT_FOUND, raw_pull(retry, 0, 0).code)  -- not yet
        -- Then it is delivered to %RETRY%<group>.
        e:route(retry, 1)
        local m2
        assert.truthy(server.eventually(function()
            local rr = c:pull(mq(retry, 0), 0, 32)
            m2 = rr and rr.messages[1]
            return m2
        end, 4000))
        assert.is_true(m2.storeTimestamp - t_back >= 900, ("delivered after %d ms"):format(m2.storeTimestamp - t_back))
        assert.equal("fail me", m2.body)
        assert.equal(retry, m2.topic)
        assert.equal(1, m2.reconsumeTimes)
        assert.equal(topic, m2.properties.RETRY_TOPIC)
        assert.equal(m.offsetMsgId, m2.properties.ORIGIN_MESSAGE_ID)
        assert.equal(retry, m2.properties.REAL_TOPIC)
        assert.is_nil(m2.properties.DELAY)
        assert.equal(m.msgId, m2.msgId)  -- UNIQ_KEY kept
        assert.equal("red", m2.properties.color)
        assert.equal("TagR", m2.tags)
        assert.equal("rk", m2.keys)
        assert.equal(m.bornTimestamp, m2.bornTimestamp)
        -- Past maxReconsumeTimes: straight to the dead letter queue.
        c.maxReconsumeTimes = 1
        assert.is_true(c:send_back(m2, mq(topic, 0)))
        e:route("%DLQ%" .. group, 1)
        r = assert(c:pull(mq("%DLQ%" .. group, 0), 0, 32))
        local m3 = assert(r.messages[1])
        assert.equal("fail me", m3.body)
        assert.equal(2, m3.reconsumeTimes)
        assert.equal("0", m3.properties.DELAY)
        assert.equal(topic, m3.properties.RETRY_TOPIC)
        assert.equal(m.offsetMsgId, m3.properties.ORIGIN_MESSAGE_ID)
        -- An offset that is no record: SYSTEM_ERROR.
        local rep = assert(conn:call({ code = req.CONSUMER_SEND_MSG_BACK, ext = {
            offset = 3, group = group, delayLevel = 0 } }))
        assert.equal(codes.response.SYSTEM_ERROR, rep.code)
        assert.equal("look message by offset failed, 3", rep.remark)
        -- The slave-sync view of the schedule progress.
        rep = assert(conn:call({ code = req.GET_ALL_DELAY_OFFSET }))
        assert.equal(0, rep.code)
        assert.matches("^{\"offsetTable\":{1:0,2:0,3:1,4:0,5:0}}$", rep.body)
        conn:close()
    end)

    it("consumes a failed message again through the group's retry topic", function()
        local topic = "FxReconsume"
        local group = "FxReconsumeGroup"
        e:route(topic)
        e:route("%RETRY%" .. group, 1)
        assert(send_to(p, topic, 0, { body = "again" }))
        local deliveries = {}
        local c = new_consumer({ consumerGroup = group })
        c:subscribe(topic, "*")
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                deliveries[#deliveries + 1] = m
            end
            return #deliveries == 1 and "RECONSUME_LATER" or "CONSUME_SUCCESS"
        end)
        c:start()
        assert.truthy(server.eventually(function() return #deliveries >= 2 end, 5000))
        c:shutdown()
        assert.equal("again", deliveries[2].body)
        assert.equal(1, deliveries[2].reconsumeTimes)
        assert.equal(topic, deliveries[2].properties.RETRY_TOPIC)
        assert.equal(deliveries[1].msgId, deliveries[2].msgId)
    end)

    it("refuses bad pulls with RocketMQ's codes and keeps serving", function()
        local topic = "FxRefuse"
        e:route(topic)
        assert(send_to(p, topic, 0, { body = "still here" }))
        local conn = assert(net.connect(e.addr))
        local function pull(ext)
            return assert(conn:call(rq.pull({ group = "FxRefuseGroup", topic = topic, ext = ext })))
        end
        local R = codes.response
        local r = pull({ topic = "FxNoSuchTopic" })
        assert.equal(R.TOPIC_NOT_EXIST, r.code)
        assert.matches("topic[FxNoSuchTopic] not exist, apply first please!", r.remark, 1, true)
        r = pull({ queueId = 4 })
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.matches("queueId[4] is illegal", r.remark, 1, true)
        r = pull({ queueId = -1 })
        assert.equal(R.SYSTEM_ERROR, r.code)
        -- No subscription flag and no heartbeat: no group info (24).
        r = pull({ sysFlag = 0 })
        assert.equal(R.SUBSCRIPTION_NOT_EXIST, r.code)
        -- A header field missing.
        r = assert(conn:call({ code = req.PULL_MESSAGE, ext = { topic = topic } }))
        assert.equal(R.SYSTEM_ERROR, r.code)
        -- Offsets past the end and before a non-empty queue's start: 21.
        r = pull({ queueOffset = 5 })
        assert.equal(R.PULL_OFFSET_MOVED, r.code)
        assert.equal("OFFSET_OVERFLOW_BADLY", r.remark)
        assert.equal("0", r.ext.nextBeginOffset)
        r = pull({ queueId = 1, queueOffset = 3 })
        assert.equal(R.PULL_OFFSET_MOVED, r.code)
        assert.equal("NO_MESSAGE_IN_QUEUE", r.remark)
        r = pull({ queueId = 1, queueOffset = 0 })
        assert.equal(R.PULL_NOT_FOUND, r.code)
        assert.equal("NO_MESSAGE_IN_QUEUE", r.remark)
        -- Still serving.
        r = pull({})
        assert.equal(0, r.code)
        assert.equal("FOUND", r.remark)
        assert.same({ suggestWhichBrokerId = "0", nextBeginOffset = "1", minOffset = "0", maxOffset = "1" }, r.ext)
        conn:close()
    end)

    it("answers the offset requests", function()
        local topic = "FxOffsetReqs"
        e:route(topic)
        local t0 = core.now_ms()
        for i = 1, 5 do
            assert(send_to(p, topic, 0, { body = "o" .. i }))
        end
        local c = new_consumer({ consumerGroup = "FxOffsetReqGroup" })
        assert.equal(5, c:max_offset(mq(topic, 0)))
        assert.equal(0, c:min_offset(mq(topic, 0)))
        assert.equal(0, c:max_offset(mq(topic, 3)))
        assert.equal(0, c:search_offset(mq(topic, 0), t0 - 100000))
        assert.equal(4, c:search_offset(mq(topic, 0), core.now_ms() + 100000))
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = req.GET_EARLIEST_MSG_STORETIME, ext = { topic = topic, queueId = 0 } }))
        assert.equal(0, r.code)
        local ts = tonumber(r.ext.timestamp)
        assert.is_true(ts >= t0 - 1000 and ts <= core.now_ms())
        r = assert(conn:call({ code = req.GET_EARLIEST_MSG_STORETIME, ext = { topic = topic, queueId = 2 } }))
        assert.equal("-1", r.ext.timestamp)
        -- A new group on a young queue starts at 0 (offset 0 is in memory).
        assert.equal(0, c:query_offset(mq(topic, 0)))
        assert.is_true(c:update_offset(mq(topic, 0), 3))
        assert.equal(3, c:query_offset(mq(topic, 0)))
        -- A pull with FLAG_COMMIT_OFFSET commits too.
        local pr = assert(c:pull(mq(topic, 0), 3, 1, { commitOffset = 4 }))
        assert.equal("FOUND", pr.status)
        assert.equal(4, c:query_offset(mq(topic, 0)))
        conn:close()
    end)
end)
