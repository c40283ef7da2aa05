-- A gRPC connection ended by a connection error lingers up to
-- serverChannelCloseLingerMillis so the client can read the GOAWAY
-- (conn_close_drained).  Its calls end at once, and the POP a
-- ReceiveMessage of it had the broker hold must end too: before, that
-- POP stayed held for the whole linger (the session's shadow connection
-- to the broker was closed only at the real close), so a message that
-- arrived meanwhile was taken by it, its answer dropped, and it stayed
-- invisible for the ReceiveMessage's invisible duration before another
-- consumer could have it (and then as a redelivery).  Now the session
-- ends at the broker as the drain starts (h2 on_draining), and the
-- message goes to the next consumer at once, as its first delivery.
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local net = require("rmq.net")
local producer = require("rmq.client.producer")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC, GROUP = "GrpcDrainPop", "GrpcDrainPopGroup"
-- Long enough that the test never sees the message come back by its
-- invisible time, or the drained connection close by its linger.
local INVISIBLE_S = 600
local LINGER_MS = 60000

-- Opens a raw ReceiveMessage (one message at most, INVISIBLE_S, a 30 s
-- long poll) for GROUP on c; returns its stream id.
local function receive_on(c, client_id, auto_renew)
    local block = h2.headers_block("ReceiveMessage", {
        ["x-mq-client-id"] = client_id, ["x-mq-language"] = "JAVA", ["x-mq-protocol"] = "v2",
    })
    local id = c:open("ReceiveMessage", block)
    c:data(id, cgrpc.encode("ReceiveMessageRequest", {
        group = { name = GROUP },
        message_queue = { topic = { name = TOPIC }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
        filter_expression = { type = "TAG", expression = "*" },
        batch_size = 1,
        invisible_duration = { seconds = INVISIBLE_S, nanos = 0 },
        auto_renew = auto_renew,
        long_polling_timeout = { seconds = 30, nanos = 0 },
    }), true)
    return id
end

describe("a gRPC connection draining its GOAWAY", function()
    local s, c

    setup(function()
        s = gn.start({ serverChannelCloseLingerMillis = LINGER_MS }, { topics = { TOPIC } })
    end)

    teardown(function()
        if c then
            c:close()
        end
        gn.stop(s)
    end)

    -- POLLING_INFO's pollingNum: POPs the broker holds for the group
    -- on every queue (the queueId -1 of a gRPC receive).
    local function held()
        local r = assert(net.call(s.broker_addr or s.addr, { code = 200055, ext = {
            consumerGroup = GROUP, topic = TOPIC, queueId = "-1" } }, 10000))
        assert.equal(0, r.code, r.remark)
        return tonumber(r.ext.pollingNum)
    end

    it("ends its held POP before a message comes, so the next consumer gets it first", function()
        c = h2.connect(s.grpc_addr)
        local id = receive_on(c, "drain-pop-client", false)
        -- The broker holds a POP for it (nothing to receive yet).
        assert.is_truthy(server.eventually(function()
            c:pump()
            return held() == 1
        end, 30000), "the ReceiveMessage's POP was never held")
        assert.is_nil(c.ended[id])

        -- A connection error: GOAWAY PROTOCOL_ERROR, then the server
        -- lingers (the client keeps its socket open, reading).
        c:frame(0, 0, 0, "x")   -- DATA on stream 0
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.goaway ~= nil
        end, 30000), "no GOAWAY")
        assert.equal(1, c.goaway)   -- PROTOCOL_ERROR

        local p = producer.new({ namesrvAddr = s.listen_addr, producerGroup = "GrpcDrainPopProducer" })
        assert(p:send({ topic = TOPIC, body = "after-the-drain" }))

        -- Another consumer of the group gets it now, as its first
        -- delivery (before: invisible for INVISIBLE_S, taken by the
        -- draining connection's POP, whose answer was dropped).
        local other = assert(grpc.connect(s.grpc_addr))
        local got
        local t0 = core.mono_ms()
        while got == nil and core.mono_ms() - t0 < 40000 do
            c:pump()
            got = assert(other:receive(GROUP, TOPIC, { batch = 1, poll_ms = 2000, invisible_ms = 30000 }))[1]
        end
        assert.is_not_nil(got, "the message stayed invisible: the draining connection's POP took it")
        assert.equal("after-the-drain", got.body)
        assert.equal(1, got.system_properties.delivery_attempt)
        assert(other:ack(GROUP, TOPIC, { got }))
        -- The drained POP is not held any more.
        assert.is_truthy(server.eventually(function() return held() == 0 end, 30000))
        other:close()
        c:close()
        c = nil
    end)
end)

-- With serverChannelCloseLingerMillis = 0 the drain closes at once.  A
-- session ending then gives its auto-renewed leases back
-- (CHANGE_INVISIBLE_TIME through the session's own connection to the
-- broker, answered at once): that answer's flush closed the connection,
-- freeing the session the drain was still walking (found in review,
-- heap-use-after-free under ASan).
describe("a gRPC connection closed at once on a connection error", function()
    local s

    setup(function()
        s = gn.start({ serverChannelCloseLingerMillis = 0 }, { topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("gives its auto-renewed leases back and the server serves on", function()
        local p = producer.new({ namesrvAddr = s.listen_addr, producerGroup = "GrpcDrainPopProducer0" })
        assert(p:send({ topic = TOPIC, body = "leased" }))
        local c = h2.connect(s.grpc_addr)
        local id = receive_on(c, "drain-renew-client", true)
        -- The call answers the message and ends; its lease stays with
        -- the session, renewed.
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.ended[id] ~= nil
        end, 30000), "the ReceiveMessage never ended")
        c:frame(0, 0, 0, "x")   -- DATA on stream 0: a connection error
        server.eventually(function()
            c:pump()
            return c.goaway ~= nil
        end, 10000)
        c:close()
        -- The session gave the lease back (the message is visible again
        -- at once, not after INVISIBLE_S) and the server still serves.
        local other = assert(grpc.connect(s.grpc_addr))
        local got
        local t0 = core.mono_ms()
        while got == nil and core.mono_ms() - t0 < 40000 do
            got = assert(other:receive(GROUP, TOPIC, { batch = 1, poll_ms = 2000, invisible_ms = 30000 }))[1]
        end
        assert.is_not_nil(got, "the lease was not given back")
        assert.equal("leased", got.body)
        assert(other:ack(GROUP, TOPIC, { got }))
        other:close()
    end)
end)
