-- Request-reply with real processes (a NameServer and a broker with four
-- workers) and rmq's own clients: a requester's p:request() gets the
-- responder's reply, pushed by the broker (PUSH_REPLY_MESSAGE_TO_CLIENT)
-- over the requester's own channel -- which is on another worker than
-- the responder's send for most of the requesters below; the reply is
-- stored in the cluster's reply topic too; a request nobody answers
-- times out; a reply to a requester that is gone is refused as 4.9.8
-- refuses it.
local net = require("rmq.net")
local core = require("rmq.core")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local consumer = require("rmq.client.consumer")
local request = require("rmq.client.request")
local env = require("support.broker_consume_env")
local server = require("support.server")

local REPLY_TOPIC = env.CLUSTER .. "_REPLY_TOPIC"

local function mq(topic, qid)
    return { topic = topic, brokerName = env.BROKER, queueId = qid }
end

-- A responder: c pulls the request topic's queues and p answers each
-- request with answer(body), until h.running is false.  Returns h, with
-- h.results = { {res=, err=, code=} per reply sent } and h.answered.
local function serve(c, p, topic, queues, answer)
    local h = { running = true, answered = 0, results = {} }
    local next_off = {}
    net.spawn(function()
        while h.running do
            for q = 0, queues - 1 do
                local r = c:pull(mq(topic, q), next_off[q] or 0, 32)
                if r then
                    next_off[q] = r.nextBeginOffset or next_off[q]
                    for _, m in ipairs(r.messages) do
                        local rep = assert(request.create_reply(m, answer(m.body)))
                        local res, err, code = p:send_reply(rep)
                        h.results[#h.results + 1] = { res = res, err = err, code = code }
                        h.answered = h.answered + 1
                    end
                end
            end
            net.sleep(5)
        end
    end)
    return h
end

-- Waits (bounded) until h has answered n requests, then stops it.  The
-- requester gets the pushed reply before the responder's own SEND_REPLY
-- answer arrives, so a returned request() says nothing about h yet.
local function finish(h, n)
    server.eventually(function() return h.answered >= n end, 5000)
    h.running = false
end

describe("request-reply", function()
    local e

    setup(function()
        e = env.start({ workers = 4 })
        e:route(REPLY_TOPIC, 1)
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    local function new_producer(group)
        return producer.new({ namesrvAddr = e.ns_addr, producerGroup = group })
    end

    local function new_consumer(group)
        return consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = group,
                              consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET" })
    end

    -- Every message of topic's queues from offset 0.
    local function all_messages(c, topic, queues)
        local out = {}
        for q = 0, queues - 1 do
            local r = c:pull(mq(topic, q), 0, 64)
            for _, m in ipairs(r and r.messages or {}) do
                out[#out + 1] = m
            end
        end
        return out
    end

    local function responder(topic, queues)
        return serve(new_consumer("FxResponder"), new_producer("FxResponderProducer"), topic, queues,
                     function(body) return "re:" .. body end)
    end

    it("answers requests from requesters on any worker, and stores the replies", function()
        local topic = "FxRequest"
        -- Auto-created by the first request with TBW102's 4 queues.
        e:route(topic, 4)
        local h = responder(topic, 4)
        local c = new_consumer("FxReplyReader")
        local before = #all_messages(c, REPLY_TOPIC, 1)
        -- Six requesters, each with its own connections: with four
        -- workers, the broker sees most of their channels on another
        -- worker than the responder's connection.
        local got = {}
        for i = 1, 6 do
            local p = new_producer("FxRequester" .. i)
            local t0 = core.mono_ms()
            local rep, err = p:request({ topic = topic, body = "q" .. i, tags = "Q" }, 5000)
            assert(rep, err)
            assert.is_true(core.mono_ms() - t0 < 5000)
            assert.equal("re:q" .. i, rep.body)
            assert.equal(REPLY_TOPIC, rep.topic)
            assert.equal("reply", rep.properties.MSG_TYPE)
            assert.equal(p.clientId, rep.properties.REPLY_TO_CLIENT)
            assert.equal("5000", rep.properties.TTL)
            assert.truthy(rep.properties.CORRELATION_ID)
            assert.truthy(rep.properties.PUSH_REPLY_TIME)
            assert.truthy(rep.properties.ARRIVE_TIME)
            -- as 4.9.8 writes them (getHostAddress() + ":" + port): a
            -- leading "/" makes a Java client's getBornHostString() null
            assert.matches("^127%.0%.0%.1:%d+$", rep.bornHost)
            assert.equal(e.addr, rep.storeHost)
            assert.is_nil(got[rep.properties.CORRELATION_ID])
            got[rep.properties.CORRELATION_ID] = rep.body
            request.close(p)
        end
        finish(h, 6)
        -- Each reply was pushed (SUCCESS) and stored (the stored record's
        -- offset message id, not Java's "0" of a push alone).
        assert.equal(6, h.answered)
        for _, r in ipairs(h.results) do
            assert(r.res, r.err)
            assert.equal("SEND_OK", r.res.status)
            assert.equal(32, #r.res.offsetMsgId)
        end
        local stored = all_messages(c, REPLY_TOPIC, 1)
        assert.equal(before + 6, #stored)
        for i = before + 1, #stored do
            local m = stored[i]
            assert.equal(got[m.properties.CORRELATION_ID], m.body)
            assert.equal("reply", m.properties.MSG_TYPE)
        end
    end)

    it("times out a request nobody answers", function()
        local topic = "FxRequestNobody"
        e:route(topic, 1)
        local p = new_producer("FxLonelyRequester")
        local t0 = core.mono_ms()
        local rep, err, code = p:request({ topic = topic, body = "anyone?" }, 400)
        local spent = core.mono_ms() - t0
        assert.is_nil(rep)
        assert.equal("timeout", code)
        assert.equal("send request message to <FxRequestNobody> OK, but wait reply message timeout, 400 ms.", err)
        assert.is_true(spent >= 390, "returned after " .. spent .. " ms")
        -- The request itself was delivered, marked for a reply.
        local m = all_messages(new_consumer("FxNobodyReader"), topic, 1)[1]
        assert.equal("anyone?", m.body)
        assert.equal(p.clientId, m.properties.REPLY_TO_CLIENT)
        assert.equal("400", m.properties.TTL)
        assert.equal(env.CLUSTER, m.properties.CLUSTER)
        request.close(p)
    end)

    it("refuses a reply to a requester that is gone, as 4.9.8 does, and still stores it", function()
        local topic = "FxRequestGone"
        e:route(topic, 1)
        local p = new_producer("FxGoneRequester")
        -- Long enough for the request's own send on a loaded machine (it
        -- has what is left of the timeout: 200 ms expired before the
        -- store answered at load 16, and nothing was stored to reply to).
        assert.is_nil((p:request({ topic = topic, body = "late" }, 1500)))
        request.close(p)  -- the broker drops the channel
        local c = new_consumer("FxGoneReader")
        local req_msg = all_messages(c, topic, 1)[1]
        local replier = new_producer("FxGoneResponder")
        local rep = assert(request.create_reply(req_msg, "too late"))
        local before = #all_messages(c, REPLY_TOPIC, 1)
        local res, err, code
        assert(server.eventually(function()
            res, err, code = replier:send_reply(rep)
            return res == nil
        end, 3000), "the requester's channel is still known")
        assert.equal(codes.response.SYSTEM_ERROR, code)
        assert.matches("push reply message fail, channel of <" .. p.clientId .. "> not found.", err, 1, true)
        -- storeReplyMessageEnable (default true): stored anyway, once per
        -- attempt (the producer retries SYSTEM_ERROR, as Java's does).
        local after = all_messages(c, REPLY_TOPIC, 1)
        assert.is_true(#after > before)
        assert.equal("too late", after[#after].body)
        -- A reply without REPLY_TO_CLIENT names the missing property.
        rep.properties.REPLY_TO_CLIENT = nil
        res, err, code = replier:send_reply(rep)
        assert.is_nil(res)
        assert.equal(codes.response.SYSTEM_ERROR, code)
        assert.matches("reply message properties[REPLY_TO_CLIENT] is null", err, 1, true)
    end)

    it("refuses to make a reply to a message without CLUSTER", function()
        local r, err = request.create_reply({ properties = {} }, "x")
        assert.is_nil(r)
        assert.equal("create reply message fail, requestMessage error, property[CLUSTER] is null.", err)
    end)
end)

describe("request-reply with storeReplyMessageEnable = false", function()
    it("pushes the reply without storing it", function()
        local e = env.start({ workers = 2, storeReplyMessageEnable = false })
        local ok, err = pcall(function()
            e:route(REPLY_TOPIC, 1)
            e:route("FxRequestNoStore", 4)
            local requester = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxNoStoreRequester" })
            local replier = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxNoStoreReplier" })
            local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "FxNoStoreReader" })
            local h = serve(c, replier, "FxRequestNoStore", 4, function() return "pong" end)
            local rep, rerr = requester:request({ topic = "FxRequestNoStore", body = "ping" }, 5000)
            assert(rep, rerr)
            finish(h, 1)
            assert.equal("pong", rep.body)
            -- Pushed only: Java's "0" msgId and offset 0 in the answer.
            assert.equal(1, #h.results)
            local res = assert(h.results[1].res, h.results[1].err)
            assert.equal("SEND_OK", res.status)
            assert.equal("0", res.offsetMsgId)
            assert.equal(0, res.queueOffset)
            local r = assert(c:pull(mq(REPLY_TOPIC, 0), 0, 32))
            assert.equal(0, r.maxOffset)
            assert.equal(0, #r.messages)
            request.close(requester)
        end)
        assert.equal(0, (e:stop()))
        assert(ok, err)
    end)
end)
