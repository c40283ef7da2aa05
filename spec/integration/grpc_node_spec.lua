-- RocketMQ 5's Node.js SDK (npm rocketmq-client-nodejs 1.0.8, unmodified)
-- producing to a standalone rmq over gRPC (grpcServerPort): its startup
-- (QueryRoute, the Telemetry settings handshake, Heartbeat), normal
-- messages with tag, keys and properties, FIFO messages by message group;
-- then rmq's own remoting consumer reads them back from the broker.
local net = require("rmq.net")
local gn = require("support.grpc_node")

local TOPIC = "GrpcNodeTopic"
local FIFO = "GrpcNodeFifo"
local COUNT = 20
local GROUPS = 3

-- Every message of topic, read with rmq's remoting push consumer.
local function consume_all(s, topic, group, want)
    return gn.consume_all(s.listen_addr, topic, group, want)
end

describe("the Node.js RocketMQ 5 SDK over gRPC", function()
    local s

    setup(function()
        gn.check()
        s = gn.start()
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("starts, sends normal and FIFO messages, and a remoting consumer reads them intact", function()
        assert.matches("grpc=127%.0%.0%.1:%d+", s.ready_line)
        gn.create_topic(s, TOPIC)
        gn.create_topic(s, FIFO)
        local status, res, why = gn.run(s, "produce.js",
            { TOPIC = TOPIC, FIFO_TOPIC = FIFO, COUNT = COUNT, GROUPS = GROUPS }, "produce")
        assert.equal(0, status, why)
        assert.truthy(res and res.normal, why)
        assert.equal(COUNT, #res.normal, why)
        assert.equal(COUNT, #res.fifo, why)
        -- A send to a topic that does not exist fails cleanly (5.x's
        -- TOPIC_NOT_FOUND, from QueryRoute), it does not hang.
        assert.matches("40402", res.unknownTopic or "", 1, true)

        local normal = consume_all(s, TOPIC, "GrpcNodeCheckA", COUNT)
        assert.equal(COUNT, #normal)
        local by_id = {}
        for _, m in ipairs(normal) do
            by_id[m.msgId] = m
        end
        for _, r in ipairs(res.normal) do
            r.i, r.offset = math.tointeger(r.i), math.tointeger(r.offset)
            local m = by_id[r.messageId]
            assert.truthy(m, "message " .. r.messageId .. " (#" .. r.i .. ") not consumed")
            assert.equal(("normal-%d-"):format(r.i) .. string.rep("x", r.i), m.body)
            assert.equal("TagA", m.tags)
            assert.equal(("key-%d k2-%d"):format(r.i, r.i), m.keys)
            assert.equal(r.i % 2 == 1 and "red" or "blue", m.properties.color)
            assert.equal(tostring(r.i), m.properties.seq)
            assert.equal(r.offset, m.queueOffset)
        end

        local fifo = consume_all(s, FIFO, "GrpcNodeCheckF", COUNT)
        assert.equal(COUNT, #fifo)
        -- Each message group is on one queue, in the order it was sent.
        local queue_of, seqs = {}, {}
        table.sort(fifo, function(a, b)
            if a.queueId ~= b.queueId then return a.queueId < b.queueId end
            return a.queueOffset < b.queueOffset
        end)
        for _, m in ipairs(fifo) do
            local g, i = m.body:match("^(group%-%d+):(%d+)$")
            assert.truthy(g, m.body)
            assert.equal(g, m.properties.__SHARDINGKEY)
            assert.equal("TagF", m.tags)
            queue_of[g] = queue_of[g] or m.queueId
            assert.equal(queue_of[g], m.queueId, g .. " spread over two queues")
            seqs[g] = seqs[g] or {}
            table.insert(seqs[g], tonumber(i))
        end
        for g, list in pairs(seqs) do
            for k = 2, #list do
                assert.is_true(list[k - 1] < list[k], g .. " out of order: " .. table.concat(list, ","))
            end
        end
        assert.equal(GROUPS, (function() local n = 0 for _ in pairs(seqs) do n = n + 1 end return n end)())
        -- The server kept serving remoting clients throughout.
        assert(net.call(s.broker_addr, { code = 105, ext = { topic = TOPIC } }, 5000))
    end)

    it("commits and rolls back transactional messages (EndTransaction)", function()
        local TX = "GrpcNodeTx"
        gn.create_topic(s, TX)
        local status, res, why = gn.run(s, "transaction.js", { TOPIC = TX }, "transaction")
        assert.equal(0, status, why)
        assert.truthy(res and res.committed, why)
        -- Deciding twice, or a transaction id never issued: 5.x's
        -- INVALID_TRANSACTION_ID (40008), with the broker's reason.
        assert.matches("40008.*already decided", res.second)
        assert.matches("40008.*not one this server issued", res.forged)
        -- The topic holds the committed message and the marker, never
        -- the rolled-back one.
        local total = 0
        for q = 0, 3 do
            local r = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TX, queueId = q } }, 5000))
            assert.equal(0, r.code, r.remark)
            total = total + tonumber(r.ext.offset)
        end
        assert.equal(2, total)
        local got = consume_all(s, TX, "GrpcNodeTxCheck", 2)
        local bodies = {}
        for _, m in ipairs(got) do
            bodies[#bodies + 1] = m.body
        end
        table.sort(bodies)
        assert.same({ "commit-me", "marker" }, bodies)
        assert.equal(res.committed.messageId, (got[1].body == "commit-me" and got[1] or got[2]).msgId)
    end)

    it("asks the producer about an orphaned transaction over Telemetry; its COMMIT is delivered", function()
        local s2 = gn.start({ transactionCheckInterval = 1000, transactionTimeOut = 1000 })
        local ok, err = pcall(function()
            local TX = "GrpcNodeOrphan"
            gn.create_topic(s2, TX)
            local status, res, why = gn.run(s2, "tx_check.js", { TOPIC = TX, WAIT_MS = 30000 }, "tx_check")
            assert.equal(0, status, why)
            gn.check_orphan(res, why, TX)
            local got = consume_all(s2, TX, "GrpcNodeOrphanCheck", 1)
            assert.equal(1, #got)
            assert.equal("orphan-body", got[1].body)
            assert.equal(res.sent.messageId, got[1].msgId)
        end)
        local rc = s2:stop()
        assert(ok, err)
        assert.equal(0, rc)
    end)

    it("starts a SimpleConsumer; receives and acknowledges over POP, or fails cleanly without it", function()
        local T = "GrpcNodeSimpleTopic"
        gn.create_topic(s, T)
        local status, res, why = gn.run(s, "simple_consumer.js", { TOPIC = T, GROUP = "GrpcNodeSimple", COUNT = 8 },
            "simple", 90000)
        assert.equal(0, status, why)
        assert.truthy(res and res.startupMs, why)
        if res.unimplemented then
            -- A broker without POP (REQUEST_CODE_NOT_SUPPORTED to POP_MESSAGE).
            assert.matches("UNIMPLEMENTED: ReceiveMessage is not served", res.unimplemented, 1, true)
            return
        end
        gn.check_simple(res, why, T, 8)
    end)

end)
