-- A ReceiveMessage cancelled by its client (RST_STREAM CANCEL) while the
-- broker holds its POP: the POP still takes the next message, and its
-- answer finds no call to write to.  5.x's proxy gives what it could not
-- write back at once (ReceiveMessageResponseStreamWriter: each message
-- not written gets changeInvisibleTime of 1 s, NACK_INVISIBLE_TIME);
-- rmq dropped the answer, so the message stayed invisible for the
-- cancelled call's whole invisible duration (here 600 s) before any
-- other consumer of the group could have it.  A call ended by its
-- deadline takes the same path (its stream is gone when the POP answers).
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local producer = require("rmq.client.producer")
local gn = require("support.grpc_node")
local grpc_receive = require("support.grpc_receive")
local server = require("support.server")

local TOPIC, GROUP = "GrpcReceiveCancel", "GrpcReceiveCancelGroup"
-- Far longer than the test waits: a message that comes back came back
-- because it was given back.
local INVISIBLE_S = 600

describe("a ReceiveMessage cancelled while its POP is held", function()
    local s, rx

    setup(function()
        s = gn.start({}, { topics = { TOPIC } })
        rx = grpc_receive.new(s, GROUP, TOPIC)
    end)

    teardown(function()
        gn.stop(s)
    end)

    -- A ReceiveMessage of one message of the group on c, long polling poll_s.
    local function receive(c, poll_s, invisible_s)
        return rx:open(c, { client_id = "receive-cancel-client", poll_s = poll_s, invisible_s = invisible_s })
    end

    it("gives the message its POP took back at once, not after the invisible duration", function()
        -- The group placed (a new group starts at the queues' end) and
        -- nothing waiting: a first receive answers empty.
        local other = assert(grpc.connect(s.grpc_addr))
        assert.same({}, assert(other:receive(GROUP, TOPIC, { batch = 1, poll_ms = 0, invisible_ms = 30000 })))

        local c = h2.connect(s.grpc_addr)
        local id = receive(c, 30, INVISIBLE_S)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return rx:held() == 1
        end, 30000), "the ReceiveMessage's POP was never held")

        -- The client gives up on the call; its connection stays.  A
        -- receive that answers at once, opened after the reset on the
        -- same connection, has ended only once the server read the
        -- reset before it (frames are read in order): only then is
        -- the message sent, so the held POP answers a cancelled call.
        c:reset(id)
        local probe = receive(c, 0, 30)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.ended[probe] ~= nil
        end, 30000), "the receive after the reset never ended")
        local p = producer.new({ namesrvAddr = s.listen_addr, producerGroup = "GrpcReceiveCancelProducer" })
        assert(p:send({ topic = TOPIC, body = "after-the-cancel" }))
        -- The held POP took it (it is held no more) ...
        assert.is_truthy(server.eventually(function()
            c:pump()
            return rx:held() == 0
        end, 30000), "the cancelled call's POP is still held")

        -- ... and another consumer of the group gets it within seconds
        -- (before: invisible for INVISIBLE_S).
        local got = rx:next_message(other, 60000, c)
        assert.is_not_nil(got, "the message stayed invisible: the cancelled call's POP took it for good")
        assert.equal("after-the-cancel", got.body)
        assert(other:ack(GROUP, TOPIC, { got }))
        -- The connection whose call was cancelled still serves.
        local again = receive(c, 0, 30)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.ended[again] ~= nil
        end, 30000), "the connection no longer answers")
        other:close()
        c:close()
    end)
end)
