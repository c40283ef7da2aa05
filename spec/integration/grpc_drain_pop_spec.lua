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
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local producer = require("rmq.client.producer")
local gn = require("support.grpc_node")
local grpc_receive = require("support.grpc_receive")
local server = require("support.server")

local TOPIC, GROUP = "GrpcDrainPop", "GrpcDrainPopGroup"
-- Long enough that the test never sees the message come back by its
-- invisible time, or the drained connection close by its linger.
local INVISIBLE_S = 600
local LINGER_MS = 60000

-- Opens a raw ReceiveMessage (one message at most, INVISIBLE_S, a 30 s
-- long poll) for GROUP on c; returns its stream id.
local function receive_on(rx, c, client_id, auto_renew)
    return rx:open(c, { client_id = client_id, invisible_s = INVISIBLE_S, poll_s = 30, auto_renew = auto_renew })
end

describe("a gRPC connection draining its GOAWAY", function()
    local s, c, rx

    setup(function()
        s = gn.start({ serverChannelCloseLingerMillis = LINGER_MS }, { topics = { TOPIC } })
        rx = grpc_receive.new(s, GROUP, TOPIC)
    end)

    teardown(function()
        if c then
            c:close()
        end
        gn.stop(s)
    end)

    it("ends its held POP before a message comes, so the next consumer gets it first", function()
        c = h2.connect(s.grpc_addr)
        local id = receive_on(rx, c, "drain-pop-client", false)
        -- The broker holds a POP for it (nothing to receive yet).
        assert.is_truthy(server.eventually(function()
            c:pump()
            return rx:held() == 1
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
        local got = rx:next_message(other, 40000, c)
        assert.is_not_nil(got, "the message stayed invisible: the draining connection's POP took it")
        assert.equal("after-the-drain", got.body)
        assert.equal(1, got.system_properties.delivery_attempt)
        assert(other:ack(GROUP, TOPIC, { got }))
        -- The drained POP is not held any more.
        assert.is_truthy(server.eventually(function() return rx:held() == 0 end, 30000))
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
    local s, rx

    setup(function()
        s = gn.start({ serverChannelCloseLingerMillis = 0 }, { topics = { TOPIC } })
        rx = grpc_receive.new(s, GROUP, TOPIC)
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("gives its auto-renewed leases back and the server serves on", function()
        local p = producer.new({ namesrvAddr = s.listen_addr, producerGroup = "GrpcDrainPopProducer0" })
        assert(p:send({ topic = TOPIC, body = "leased" }))
        local c = h2.connect(s.grpc_addr)
        local id = receive_on(rx, c, "drain-renew-client", true)
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
        local got = rx:next_message(other, 40000)
        assert.is_not_nil(got, "the lease was not given back")
        assert.equal("leased", got.body)
        assert(other:ack(GROUP, TOPIC, { got }))
        other:close()
    end)
end)
