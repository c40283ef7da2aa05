-- ReceiveMessage's auto_renew at scale (src/grpc/renew.h): 5,000
-- messages one client received with auto_renew and has not acknowledged
-- stay invisible past their invisible time while it is connected (a
-- second consumer of the group polls meanwhile and gets none), each
-- lease renewed through the broker; acknowledged, the connection's
-- renewal table drains (rmq_grpc_auto_renew_leases back to 0) and the
-- memory the leases were charged (memoryBudget*, docs/memory.md) is
-- given back.  If renewing stopped, the messages would reach the second
-- consumer once their first invisible time ran out.
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local producer = require("rmq.client.producer")
local gn = require("support.grpc_node")
local prom = require("support.prom")
local server = require("support.server")

local TOPIC, GROUP = "GrpcRenewMany", "GrpcRenewManyGroup"
local N = 5000
-- defaultInvisibleTimeMills: each receive's lease; renewed (to 5.x's
-- first step, 60 s) once within renewAheadTimeMillis (8 s) of running
-- out: 8 s of slack for a late timer on a loaded machine.
local INVISIBLE_MS = 10000
-- What a lease may be charged at most (renew.c charges its table entry
-- and keys, about 2.2 KiB): the table is bounded by it per connection.
local LEASE_MAX_BYTES = 4096

describe("auto_renew with thousands of leases", function()
    local s

    setup(function()
        s = gn.start({ defaultInvisibleTimeMills = INVISIBLE_MS, renewAheadTimeMillis = 8000,
                       renewSchedulePeriodMillis = 200 }, { metrics = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    local function figures()
        local text = prom.scrape(s.metrics_addr)
        return {
            leases = prom.value(text, "rmq_grpc_auto_renew_leases"),
            renewed = prom.value(text, "rmq_grpc_auto_renew_renewals_total"),
            charged = prom.value(text, "rmq_memory_budget_used_bytes", 'kind="requests"'),
        }, text
    end

    it("keeps 5,000 unacknowledged messages invisible past their invisible time; acked, the table drains", function()
        local p = producer.new({ namesrvAddr = s.listen_addr, producerGroup = "GrpcRenewManyProducer" })
        for b = 0, N // 100 - 1 do
            local batch = {}
            for i = 1, 100 do
                batch[i] = { topic = TOPIC, body = "renew-" .. (b * 100 + i) }
            end
            assert(p:send_batch(batch))
        end
        local a = assert(grpc.connect(s.grpc_addr))
        local other = assert(grpc.connect(s.grpc_addr))
        -- Both connections served (a call each) and charged, no call in
        -- flight: what the leases add to, once two scrapes agree.
        assert(a:query_route(TOPIC))
        assert(other:query_route(TOPIC))
        local base, text, last
        assert.is_truthy(server.eventually(function()
            last = base
            base, text = figures()
            return last ~= nil and last.charged == base.charged
        end, 30000), text)
        assert.equal(0, base.leases, text)

        local held, seen = {}, {}
        local t0 = core.mono_ms()
        while #held < N and core.mono_ms() - t0 < 240000 do
            for _, m in ipairs(assert(a:receive(GROUP, TOPIC, { auto_renew = true, batch = 32, poll_ms = 2000 }))) do
                local id = m.system_properties.message_id
                assert.is_nil(seen[id], "received twice: " .. id)
                assert.equal(1, m.system_properties.delivery_attempt)
                seen[id] = true
                held[#held + 1] = m
            end
        end
        assert.equal(N, #held)
        local f
        f, text = figures()
        assert.equal(N, f.leases, text)
        -- Charged to the memory budget, and bounded by what it charges.
        local per = (f.charged - base.charged) / N
        assert.is_true(per > 0 and per <= LEASE_MAX_BYTES, ("%.0f bytes a lease\n%s"):format(per, text))

        -- Two and a half invisible times after the last receive: every
        -- lease has outlived its first invisible time, and none reached
        -- the other consumer.
        local t1 = core.mono_ms()
        while core.mono_ms() - t1 < 2.5 * INVISIBLE_MS do
            local got = assert(other:receive(GROUP, TOPIC, { batch = 32, poll_ms = 2000 }))
            assert.equal(0, #got, "a held message was handed to another consumer: its lease was not renewed")
        end
        f, text = figures()
        assert.equal(N, f.leases, text)
        assert.is_true(f.renewed >= N, text)

        -- Acknowledged with the handles the client was given (renewals
        -- replaced them at the broker: the server acts on the newest).
        for i = 1, N, 32 do
            assert(a:ack(GROUP, TOPIC, { table.unpack(held, i, math.min(i + 31, N)) }))
        end
        local drained = server.eventually(function()
            f, text = figures()
            -- (<=: a call's stream may still have been charged in the base)
            return f.leases == 0 and f.charged <= base.charged
        end, 30000)
        assert.is_truthy(drained, text)
        -- Gone for good: the other consumer gets nothing, and the client
        -- leaving gives nothing back.
        a:close()
        local t2 = core.mono_ms()
        while core.mono_ms() - t2 < 5000 do
            assert.equal(0, #assert(other:receive(GROUP, TOPIC, { batch = 32, poll_ms = 1000 })))
        end
        other:close()
    end)
end)
