-- Cluster mode (role proxy) against RocketMQ 5.x's proxy: the rules 5.x's
-- proxy applies itself, whatever broker is behind it, that rmq's proxy
-- left to the broker (docs/grpc.md, "Compatibility with the Java 5.x
-- SDK", found running the SDKs through both proxies in front of a 5.3.3
-- broker).  A NameServer, an rmq broker and the proxy; the calls are the
-- SDKs' (rmq.client.grpc, the C client, and the Node.js SDK's scripts),
-- pointed at the proxy only.
--
--   EndTransaction: 5.x's proxy ends only a transaction it keeps in its
--   table (TransactionDataManager: added when the transactional send is
--   answered or a broker's check is relayed, taken by the end, kept
--   transactionDataExpireMillis).  A second COMMIT never reaches the
--   broker (a 5.3.3 broker stores the message a second time), nor a
--   late one: the broker's check asks the producer instead.
--   ReceiveMessage: an invisible duration under minInvisibleTimeMillsForRecv
--   (10 s) is refused ILLEGAL_INVISIBLE_TIME, auto_renew excepted.
--   Message types: 5.x's proxy reads a topic's message.type from one of
--   its brokers (GET_TOPIC_CONFIG, cached): QueryRoute lists it as the
--   queues' one accepted type and SendMessage refuses another type with
--   MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as rmq's local mode does.
--   FIFO groups: likewise a group's consumeMessageOrderly
--   (GET_SUBSCRIPTIONGROUP_CONFIG, cached): a consumer's Settings say
--   fifo, and its POPs are orderly (a queue's next message waits while
--   one is leased).
local net = require("rmq.net")
local codes = require("rmq.codes")
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local server = require("support.server")

local OK, INVALID_TRANSACTION_ID, ILLEGAL_INVISIBLE_TIME = 20000, 40008, 40011
local TYPE_CONFLICT = 40014   -- MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
local NORMAL, FIFO, DELAY, TRANSACTION = 1, 2, 3, 4   -- v2 MessageType
local NOT_FOUND_MSG = "cannot found transaction data"

describe("the gRPC proxy (cluster mode) applies 5.x proxy's own rules", function()
    local ns, b, px
    local servers = {}

    setup(function()
        gn.check()
        ns = server.start({ role = "namesrv" })
        servers[#servers + 1] = ns
        local dir = server.tmpdir()
        b = server.start({ role = "broker", brokerName = "px5-b1", namesrvAddr = ns.addr, workers = 1,
                           storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 4 * 1024 * 1024 })
        servers[#servers + 1] = b
        -- Ends taken within 10 s (5.x's default 30 s, the late case would
        -- wait it out): the other ends come well within it, even loaded.
        -- A topic's config asked again after 1 s (5.x's default 20 s).
        px = server.start({ role = "proxy", namesrvAddr = ns.addr, grpcServerPort = 0, workers = 1,
                            transactionDataExpireMillis = 10000, topicConfigCacheRefreshSeconds = 1 })
        servers[#servers + 1] = px
    end)

    teardown(function()
        for i = #servers, 1, -1 do
            assert.equal(0, servers[i]:stop())
        end
    end)

    local function create_topic(topic, attributes)
        local r = assert(net.call(b.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = topic, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4, perm = 6,
            topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false, attributes = attributes } }, 5000))
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.eventually(function()
            local q = net.call(ns.addr, { code = codes.request.GET_ROUTEINFO_BY_TOPIC, ext = { topic = topic } }, 5000)
            return q ~= nil and q.code == 0
        end, 60000))
    end

    -- Messages stored in topic (its queues' max offsets, summed).
    local function stored(topic)
        local n = 0
        for q = 0, 3 do
            local r = assert(net.call(b.addr, { code = codes.request.GET_MAX_OFFSET,
                                                ext = { topic = topic, queueId = q } }, 5000))
            n = n + (r.code == 0 and tonumber(r.ext.offset) or 0)
        end
        return n
    end

    local function why()
        return ("proxy: %s\nbroker: %s"):format(px:log():sub(-2000), b:log():sub(-2000))
    end

    local function connect()
        return assert(grpc.connect(px.grpc_addr, { credentials = false }))
    end

    -- A transactional message's send through the proxy: its SendResultEntry.
    local function send_half(c, topic, body)
        local _, last = c:call("SendMessage", "SendMessageRequest", {
            messages = { { topic = { name = topic }, body = body, system_properties = {
                message_id = "01PX5" .. body, message_type = "TRANSACTION", body_encoding = "IDENTITY",
                born_timestamp = { seconds = os.time(), nanos = 0 }, queue_id = -1 } } },
        }, "SendMessageResponse")
        assert.truthy(_, last)
        local e = last.entries[1]
        assert.equal(OK, e.status.code, e.status.message)
        assert.truthy(e.transaction_id ~= nil and e.transaction_id ~= "")
        return e
    end

    local function end_tx(c, topic, e, resolution)
        local _, last = c:call("EndTransaction", "EndTransactionRequest", {
            topic = { name = topic }, message_id = e.message_id, transaction_id = e.transaction_id,
            resolution = resolution, source = "SOURCE_CLIENT",
        }, "EndTransactionResponse")
        assert.truthy(_, last)
        return last.status
    end

    it("ends a transaction once: a second COMMIT, one after a ROLLBACK, a late one are refused before the broker", function()
        local T = "Px5TxT"
        create_topic(T, "+message.type=TRANSACTION")
        local c = connect()
        -- Ended after transactionDataExpireMillis: refused; the half
        -- message stays undecided (the broker's check asks a producer,
        -- whose answer the proxy takes), nothing is stored.
        local late = send_half(c, T, "late")
        local t0 = os.time()
        while os.time() - t0 < 12 do
            net.sleep(200)
        end
        local st = end_tx(c, T, late, "COMMIT")
        assert.equal(INVALID_TRANSACTION_ID, st.code, st.message)
        assert.equal(NOT_FOUND_MSG, st.message)
        assert.equal(0, stored(T), why())
        -- Committed once: stored once.
        local e = send_half(c, T, "commit-me")
        st = end_tx(c, T, e, "COMMIT")
        assert.equal(OK, st.code, st.message .. "\n" .. why())
        assert.truthy(server.eventually(function() return stored(T) == 1 end, 30000), why())
        -- The same COMMIT again: refused by the proxy, as 5.x's (a 5.x
        -- broker would commit it again); the broker never sees it.
        st = end_tx(c, T, e, "COMMIT")
        assert.equal(INVALID_TRANSACTION_ID, st.code)
        assert.equal(NOT_FOUND_MSG, st.message)
        -- Rolled back, then a COMMIT of it: refused the same way.
        local r = send_half(c, T, "roll-me")
        st = end_tx(c, T, r, "ROLLBACK")
        assert.equal(OK, st.code, st.message)
        st = end_tx(c, T, r, "COMMIT")
        assert.equal(INVALID_TRANSACTION_ID, st.code)
        assert.equal(NOT_FOUND_MSG, st.message)
        -- A transaction id this proxy never issued (well formed: it names
        -- the broker and the committed message's offsets): refused.
        local forged = { message_id = e.message_id, transaction_id = e.transaction_id:gsub("@%d+$", "@7") }
        st = end_tx(c, T, forged, "COMMIT")
        assert.equal(INVALID_TRANSACTION_ID, st.code)
        -- A fresh one is still ended as usual, and the proxy serves on.
        local fresh = send_half(c, T, "fresh")
        st = end_tx(c, T, fresh, "COMMIT")
        assert.equal(OK, st.code, st.message)
        assert.truthy(server.eventually(function() return stored(T) == 2 end, 30000), why())
        c:close()
    end)

    -- The proxy's transactions are one table for all its workers (5.x's
    -- TransactionDataManager is one per proxy): a producer's end comes on
    -- whatever connection it has then, and the proxy spreads connections
    -- over its workers (in turn).  With a table per worker, an end on a
    -- connection of another worker than the send's was refused and the
    -- half message waited for the broker's check.
    it("ends a transaction sent on one connection from another, whichever worker serves it", function()
        local T = "Px5TxWorkers"
        create_topic(T, "+message.type=TRANSACTION")
        local px2 = server.start({ role = "proxy", namesrvAddr = ns.addr, grpcServerPort = 0, workers = 2,
                                   logLevel = "debug" })
        servers[#servers + 1] = px2
        local c1 = assert(grpc.connect(px2.grpc_addr, { credentials = false }))
        local N = 4
        local sent = {}
        for i = 1, N do
            sent[i] = send_half(c1, T, "w" .. i)
        end
        -- N more connections, one after another: the workers take them
        -- in turn, so some are served by another worker than c1's.
        local others = {}
        for i = 1, N do
            others[i] = assert(grpc.connect(px2.grpc_addr, { credentials = false }))
        end
        for i = 1, N do
            local st = end_tx(others[i], T, sent[i], "COMMIT")
            assert.equal(OK, st.code, ("end %d: %s\n%s"):format(i, st.message, px2:log():sub(-2000)))
        end
        assert.truthy(server.eventually(function() return stored(T) == N end, 30000), why())
        -- Each end is taken once, whichever connection asks again.
        local st = end_tx(c1, T, sent[1], "COMMIT")
        assert.equal(INVALID_TRANSACTION_ID, st.code)
        assert.equal(NOT_FOUND_MSG, st.message)
        -- Both workers served these connections (this proxy has no
        -- others): so at least one end came on another worker than c1's.
        local log = px2:log()
        assert.truthy(log:find("%[w0%][^\n]*gRPC connection from") and log:find("%[w1%][^\n]*gRPC connection from"),
                      log:sub(-3000))
        c1:close()
        for i = 1, N do
            others[i]:close()
        end
    end)

    it("refuses an invisible duration under minInvisibleTimeMillsForRecv (unless auto_renew) or past maxInvisibleTimeMills", function()
        local T, G = "Px5InvT", "Px5InvG"
        create_topic(T)
        local c = connect()
        local function receive(inv_ms, auto_renew)
            local list, last = c:call("ReceiveMessage", "ReceiveMessageRequest", {
                group = { name = G },
                message_queue = { topic = { name = T }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
                filter_expression = { type = "TAG", expression = "*" },
                batch_size = 1, auto_renew = auto_renew or false,
                invisible_duration = { seconds = inv_ms // 1000, nanos = (inv_ms % 1000) * 1000000 },
                long_polling_timeout = { seconds = 1, nanos = 0 },
            }, "ReceiveMessageResponse", 15000)
            assert.truthy(list, last)
            for _, r in ipairs(list) do
                if r.status then
                    return r.status
                end
            end
            return nil
        end
        -- 5 s: 5.x's proxy refuses it (min 10 s), whatever the broker takes.
        local st = receive(5000)
        assert.equal(ILLEGAL_INVISIBLE_TIME, st.code)
        assert.equal("the invisibleTime is too small. min is 10000", st.message)
        st = receive(9999)
        assert.equal(ILLEGAL_INVISIBLE_TIME, st.code)
        -- Past maxInvisibleTimeMills (12 h): refused too.
        st = receive(43200000 + 1000)
        assert.equal(ILLEGAL_INVISIBLE_TIME, st.code)
        assert.equal("the invisibleTime is too large. max is 43200000", st.message)
        -- 10 s and more: popped (nothing there: MESSAGE_NOT_FOUND).
        st = receive(10000)
        assert.are_not.equal(ILLEGAL_INVISIBLE_TIME, st and st.code)
        -- auto_renew: the server's lease (defaultInvisibleTimeMills), the
        -- duration asked is not checked, as 5.x.
        st = receive(1000, true)
        assert.are_not.equal(ILLEGAL_INVISIBLE_TIME, st and st.code)
        -- A message is received with a lease of 10 s.
        local sent = assert(c:send(T, "inv-body"))
        local got
        assert.truthy(server.eventually(function()
            got = c:receive(G, T, { invisible_ms = 10000, poll_ms = 2000, batch = 1 })
            return got ~= nil and #got == 1
        end, 30000), why())
        assert.equal(sent.message_id, got[1].system_properties.message_id)
        assert.equal(10, got[1].system_properties.invisible_duration.seconds)
        -- Its lease changed past 12 h: refused (5.x's ChangeInvisibleDuration).
        local _, last = c:call("ChangeInvisibleDuration", "ChangeInvisibleDurationRequest", {
            group = { name = G }, topic = { name = T }, message_id = sent.message_id,
            receipt_handle = got[1].system_properties.receipt_handle,
            invisible_duration = { seconds = 43201, nanos = 0 },
        }, "ChangeInvisibleDurationResponse")
        assert.truthy(_, last)
        assert.equal(ILLEGAL_INVISIBLE_TIME, last.status.code)
        assert.equal("the invisibleTime is too large. max is 43200000", last.status.message)
        assert(c:ack(G, T, got))
        c:close()
    end)

    it("reads each topic's message.type from its broker: QueryRoute lists it, SendMessage checks it", function()
        local TN, TF, TX, TA = "Px5TypeNormal", "Px5TypeFifo", "Px5TypeTx", "Px5TypeAny"
        create_topic(TN, "+message.type=NORMAL")
        create_topic(TF, "+message.type=FIFO")
        create_topic(TX, "+message.type=TRANSACTION")
        create_topic(TA)
        local c = connect()
        -- A send to a topic the proxy has not seen (no QueryRoute first):
        -- checked all the same (it waits for the config as for the route).
        local _, err = c:send(TN, "fifo-to-normal", { group = "g1" })
        assert.matches("TopicMessageType validate failed, the expected type is NORMAL, but actual type is FIFO", err)
        assert.matches("code " .. TYPE_CONFLICT, err)
        local function accepted(topic)
            local r = assert(c:query_route(topic))
            assert.truthy(#r.message_queues > 0)
            local types = r.message_queues[1].accept_message_types
            table.sort(types)
            return types
        end
        assert.same({ NORMAL }, accepted(TN))
        assert.same({ FIFO }, accepted(TF))
        assert.same({ TRANSACTION }, accepted(TX))
        -- A topic without the attribute (every 4.x topic): every type.
        assert.same({ NORMAL, FIFO, DELAY, TRANSACTION }, accepted(TA))
        -- Sends: the topic's type goes, another is refused and not stored.
        assert(c:send(TN, "normal"))
        assert(c:send(TF, "fifo", { group = "g1" }))
        _, err = c:send(TF, "normal-to-fifo")
        assert.matches("expected type is FIFO, but actual type is NORMAL", err)
        _, err = c:send(TF, "delay-to-fifo", { deliver_at_ms = (os.time() + 60) * 1000 })
        assert.matches("expected type is FIFO, but actual type is DELAY", err)
        _, err = c:send(TX, "normal-to-tx")
        assert.matches("expected type is TRANSACTION, but actual type is NORMAL", err)
        for _, o in ipairs({ {}, { group = "g2" }, { deliver_at_ms = (os.time() + 60) * 1000 } }) do
            assert(c:send(TA, "any", o))
        end
        assert.truthy(server.eventually(function()
            return stored(TN) == 1 and stored(TF) == 1 and stored(TA) == 2   -- TA's delay one waits for its time
        end, 30000), why())
        assert.equal(1, stored(TN), why())
        assert.equal(1, stored(TF), why())
        assert.equal(0, stored(TX), why())
        -- The type changed on the broker: followed once the config is
        -- asked again (topicConfigCacheRefreshSeconds 1).
        local r = assert(net.call(b.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = TN, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4, perm = 6,
            topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false,
            attributes = "+message.type=FIFO" } }, 5000))
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.eventually(function()
            return c:send(TN, "fifo-now", { group = "g3" }) ~= nil
        end, 30000), why())
        assert.same({ FIFO }, accepted(TN))
        _, err = c:send(TN, "normal-now")
        assert.matches("expected type is FIFO, but actual type is NORMAL", err)
        c:close()
    end)

    it("reads each consumer group's config from a broker: Settings' fifo and retry policy, orderly POPs", function()
        local T = "Px5FifoOne"
        local r = assert(net.call(b.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = T, defaultTopic = "TBW102", readQueueNums = 1, writeQueueNums = 1, perm = 6,
            topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 5000))
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.eventually(function()
            local q = net.call(ns.addr, { code = codes.request.GET_ROUTEINFO_BY_TOPIC, ext = { topic = T } }, 5000)
            return q ~= nil and q.code == 0
        end, 60000))
        for _, body in ipairs({
            '{"groupName":"Px5Orderly","consumeMessageOrderly":true,"retryMaxTimes":4,'
                .. '"groupRetryPolicy":{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,2500,60000]}}}',
            '{"groupName":"Px5Concurrent","consumeMessageOrderly":false,"groupRetryPolicy":'
                .. '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":500,"max":30000,"multiplier":4}}}' }) do
            r = assert(net.call(b.addr, { code = codes.request.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = body }, 5000))
            assert.equal(0, r.code, r.remark)
        end
        -- What gn.run needs of "the server": the proxy's address, a dir, a log.
        local target = { grpc_addr = px.grpc_addr, dir = server.tmpdir(),
                         log = function() return px:log() .. "\nbroker: " .. b:log():sub(-1500) end }
        local function run(script, vars, name)
            local status, res, w = gn.run(target, script, vars, name, 90000)
            assert.equal(0, status, w)
            assert.truthy(res and not res.error, w)
            return res
        end
        -- The Settings a consumer gets: fifo as its group's config says,
        -- whatever the client said, and the group's retry policy (5.x's
        -- mergeSubscriptionData; local mode's group_v5_spec).
        local o = run("wire.js", { TOPIC = T, CASE = "settings", GROUP = "Px5Orderly", FIFO = "false" },
                      "settings-orderly")
        assert.is_true(o.fifo)
        assert.equal(5, o.maxAttempts)
        assert.same({ 1000, 2500, 60000 }, o.customized)
        local c = run("wire.js", { TOPIC = T, CASE = "settings", GROUP = "Px5Concurrent", FIFO = "true" },
                      "settings-concurrent")
        assert.is_false(c.fifo)
        assert.same({ initial = 500, max = 30000, multiplier = 4 }, c.exponential)
        -- Orderly: the queue's next waits while the first is leased.
        assert.same({ first = "m0", whileLeased = "none", afterAck = "m1" },
                    run("fifo_group.js", { TOPIC = T, GROUP = "Px5Orderly" }, "fifo-orderly"))
        local n = run("fifo_group.js", { TOPIC = T, GROUP = "Px5Concurrent" }, "fifo-concurrent")
        assert.equal("m0", n.first)
        assert.equal("m1", n.whileLeased)
        assert.equal("m2", n.afterAck)
    end)
end)
