-- An AckMessage's entries in the broker's own request metrics: each one
-- counted as the ACK_MESSAGE the remoting port would count
-- (rocketmq_rpc_latency and rmq_requests_total, protocol_type remoting,
-- with the broker's code), also in local mode without aclEnable, where
-- the entries go to the POP processor typed and together instead of as
-- one ACK_MESSAGE each: those were missing from the remoting series
-- (only the gRPC AckMessage call was counted).
local codes = require("rmq.codes")
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local prom = require("support.prom")
local server = require("support.server")

local TOPIC, GROUP = "GrpcAckMetrics", "GrpcAckMetricsGroup"
local N = 5

-- The sum of `name`'s series whose labels hold `labels` (plain text), by
-- response code: { [code] = value }.
local function by_code(text, name, labels)
    local out = {}
    for line in text:gmatch("[^\n]+") do
        local n, l, v = line:match("^([%w_]+){(.-)} (%S+)$")
        if n == name and l:find(labels, 1, true) then
            local code = l:match('response_code="([^"]*)"')
            out[code] = (out[code] or 0) + tonumber(v)
        end
    end
    return out
end

describe("AckMessage in the broker's request metrics", function()
    local s

    setup(function()
        s = gn.start({}, { metrics = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("counts each entry as one ACK_MESSAGE with the broker's code", function()
        local c = assert(grpc.connect(s.grpc_addr))
        -- The group placed at the queues' start (a first receive), then
        -- N messages for it.
        assert(c:receive(GROUP, TOPIC, { batch = 1, poll_ms = 0 }))
        for i = 1, N do
            assert(c:send(TOPIC, "ack-metrics-" .. i))
        end
        local got = {}
        assert.is_truthy(server.eventually(function()
            for _, m in ipairs(assert(c:receive(GROUP, TOPIC, { batch = 32, poll_ms = 1000 }))) do
                got[#got + 1] = m
            end
            return #got >= N
        end, 30000), "received " .. #got .. " of " .. N)
        assert.equal(N, #got)
        -- One AckMessage of all N: each acknowledged.
        assert(c:ack(GROUP, TOPIC, got))
        -- The same again: no lease any more, each refused by the broker.
        local ok, err = c:ack(GROUP, TOPIC, got)
        assert.is_nil(ok)
        assert.matches("code 40013", err)
        c:close()

        local text = prom.scrape(s.metrics_addr)
        local ack = ('request_code="%d"'):format(codes.request.ACK_MESSAGE)
        local counts = by_code(text, "rmq_requests_total", ack)
        local latency = by_code(text, "rocketmq_rpc_latency_count", ack)
        -- N acknowledged (SUCCESS, 0), N refused, with the code the
        -- remoting answer carries (no lease: NO_MESSAGE).
        assert.equal(N, counts["0"], text)
        assert.equal(N, latency["0"], text)
        local refused = 0
        for code, v in pairs(counts) do
            if code ~= "0" then
                refused = refused + v
                assert.equal(tostring(codes.response.NO_MESSAGE), code, text)
            end
        end
        assert.equal(N, refused, text)
        -- and the gRPC calls themselves, twice
        assert.equal(1, prom.value(text, "rocketmq_rpc_latency_count",
            'protocol_type="grpc",request_code="ack_message",response_code="ok"'), text)
    end)
end)
