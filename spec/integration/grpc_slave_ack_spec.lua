-- AckMessage on a slave broker (brokerRole SLAVE serves no POP: every
-- ACK_MESSAGE is refused REQUEST_CODE_NOT_SUPPORTED).  The broker answers
-- an entry sent to it inside the call that sends it, while the other
-- entries are still being read: the refusal is answered once, as
-- UNIMPLEMENTED for the whole call, after the last entry (ending the call
-- at the first freed what the loop still wrote to: a use-after-free under
-- --asan, a crash or garbage without it).  The first entry's offset "+5"
-- takes the path that sends one ACK_MESSAGE an entry.
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")

describe("AckMessage on a slave", function()
    local s

    setup(function()
        s = gn.start({ brokerRole = "SLAVE", brokerId = 1 })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("is refused as UNIMPLEMENTED once, whatever its entries, and the server serves on", function()
        local c = assert(grpc.connect(s.grpc_addr))
        local handle = "0 1700000000000 30000 0 0 broker-grpc %d %s"
        for round = 1, 3 do
            local entries = {}
            for i = 1, 8 do
                entries[i] = { message_id = ("ID%d_%d"):format(round, i),
                               receipt_handle = handle:format(i % 4, i % 2 == 1 and "+" .. i or tostring(i)) }
            end
            local r, err = c:call("AckMessage", "AckMessageRequest",
                { group = { name = "SlaveAckGroup" }, topic = { name = "SlaveAckTopic" }, entries = entries },
                "AckMessageResponse")
            assert.is_nil(r)
            assert.matches("gRPC status 12: AckMessage is not served", err)
        end
        -- The same connection is served after them.
        local route, rerr = c:query_route("TBW102")
        assert.is_truthy(route, rerr)
        c:close()
    end)
end)
