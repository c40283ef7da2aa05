-- `rmq bench produce --grpc` keeps its concurrency when a call cannot
-- start on a connection: the slot takes another connection (or waits for
-- the generator's next tick), its failure counted.  Before, a slot whose
-- call could not start (the connection closed, or past the server's
-- GOAWAY) was dropped for the rest of the run: the generator's concurrency
-- shrank with each, and with one slot the run stopped sending.
local cjson = require("cjson")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC = "GrpcBenchSlots"
-- The flood guard's allowance a connection: the slot's first connection
-- is past it (GOAWAY ENHANCE_YOUR_CALM) after this many calls.
local PER_CONN = 20

local function cli(args)
    local q = {}
    for i, a in ipairs(args) do
        q[i] = "'" .. tostring(a):gsub("'", "'\\''") .. "'"
    end
    return server.rmq(table.concat(q, " "))
end

describe("rmq bench produce --grpc", function()
    local s

    setup(function()
        s = gn.start({ grpcMaxStreamsPerSecond = PER_CONN }, { topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("moves a slot whose connection refuses calls to another, counting the refusal as failed", function()
        local code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-s", "64",
                                "-c", "1", "--connections", "2", "-d", "3", "--json" })
        assert.is_true(code == 0 or code == 2, out)
        local row
        for l in out:gmatch("[^\n]+") do
            if l:match("^{") then
                row = cjson.decode(l)
            end
        end
        assert.is_not_nil(row, out)
        -- More than one connection's allowance: the one slot went on
        -- over the second connection once the first sent GOAWAY.
        assert.is_true(row.ok > PER_CONN, ("%d sent: the slot stopped with its first connection\n%s")
            :format(row.ok, out))
        assert.is_true(row.failed > 0, out)
        -- and the server serves a new connection
        code, out = cli({ "send", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "after" })
        assert.equal(0, code, out)
    end)

    it("counts a slot that no connection takes any more as one failure, not one a tick", function()
        -- Both connections past their allowance within the first second:
        -- the one slot has nowhere to send for the rest of the run, and
        -- tries again every tick of the generator (10 ms).
        local code, out = cli({ "bench", "produce", "--grpc", "-n", s.grpc_addr, "-t", TOPIC, "-s", "64",
                                "-c", "1", "--connections", "2", "-d", "3", "--json" })
        assert.is_true(code == 0 or code == 2, out)
        local row
        for l in out:gmatch("[^\n]+") do
            if l:match("^{") then
                row = cjson.decode(l)
            end
        end
        assert.is_not_nil(row, out)
        assert.is_true(row.ok >= 2 * PER_CONN, out)
        -- Each connection's refusal of the call in flight, and the slot
        -- left with none: a few, whatever the run's length (before:
        -- ~100 a second once no connection was left).
        assert.is_true(row.failed >= 1 and row.failed <= 10, ("%d failed\n%s"):format(row.failed, out))
    end)
end)
