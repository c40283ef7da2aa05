-- Operating the gRPC port (issue 23): every call in /metrics as RocketMQ
-- 5's rocketmq_rpc_latency with protocol_type="grpc" (src/grpc/metrics.h),
-- made here by rmq's own gRPC client (rmq.client.grpc and `rmq send
-- --grpc`: src/grpc/client.c) against a standalone with metrics on; and
-- ReceiveMessage's auto_renew (src/grpc/renew.h): a message held by a
-- live client past its invisible time is not handed to another, and
-- comes back once its client has gone.
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local gn = require("support.grpc_node")
local prom = require("support.prom")
local server = require("support.server")

local TOPIC = "GrpcOpsTopic"
local RENEW_TOPIC, RENEW_GROUP = "GrpcOpsRenew", "GrpcOpsRenewGroup"
-- defaultInvisibleTimeMills: a receive with auto_renew is invisible this
-- long, and renewed (to 5.x's first step, 60 s) once within
-- renewAheadTimeMillis (8 s) of it: 8 s of slack for a late timer on a
-- loaded machine.
local INVISIBLE_MS = 10000

local function series(labels)
    return 'protocol_type="grpc",' .. labels
end

describe("gRPC operations", function()
    local s

    setup(function()
        s = gn.start({ defaultInvisibleTimeMills = INVISIBLE_MS, renewAheadTimeMillis = 8000,
                       renewSchedulePeriodMillis = 200, invisibleTimeMillisWhenClear = 1000 },
                     { metrics = true, topics = { TOPIC, RENEW_TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("records every call in rocketmq_rpc_latency with protocol_type grpc, method and v2 code", function()
        local c = assert(grpc.connect(s.grpc_addr))
        assert(c:query_route(TOPIC))
        assert(c:query_route(TOPIC))
        local _, nf = c:query_route("NoSuchGrpcOpsTopic")
        assert.matches("code 40402", nf)
        for i = 1, 3 do
            assert(c:send(TOPIC, "ops-" .. i))
        end
        -- The CLI's send: the same C client, a process of its own.
        local code, out = server.rmq(("send --grpc -n %s -t %s --json cli-body"):format(s.grpc_addr, TOPIC))
        assert.equal(0, code, out)
        -- An ack of a forged handle, a request that does not parse, a
        -- method MessagingService does not have, and a receive whose
        -- deadline (grpc-timeout) passes before its long poll ends.
        local _, ack_err = c:ack("GrpcOpsGroup", TOPIC,
                                 { { system_properties = { message_id = "x", receipt_handle = "forged" } } })
        assert.matches("code 40013", ack_err)
        local r = assert(c.c:call("SendMessage", "\255\255\255", {}, 10000))
        assert.equal(3, r.status)
        r = assert(c.c:call("NoSuchMethod", "", {}, 10000))
        assert.equal(12, r.status)
        local rq = cgrpc.encode("ReceiveMessageRequest", {
            group = { name = "GrpcOpsIdle" },
            message_queue = { topic = { name = TOPIC }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
            filter_expression = { type = "TAG", expression = "NoSuchTag" }, batch_size = 1,
            invisible_duration = { seconds = 30, nanos = 0 },
            long_polling_timeout = { seconds = 20, nanos = 0 },
        })
        -- A long poll never outlives its call's deadline (grpc-timeout
        -- 7 s: held until 1 s before it, then answered empty); on a
        -- loaded machine the client's own clock (it resets the stream:
        -- CANCEL) may run out first: whichever it was is what the
        -- server recorded.
        local cr = c.c:call("ReceiveMessage", rq, {}, 7000)
        local receive_lbl
        if cr then
            assert.equal(0, cr.status)
            receive_lbl = series('request_code="receive_message",response_code="message_not_found",result="success"')
        else
            receive_lbl = series('request_code="receive_message",response_code="cancelled",result="cancelled"')
        end
        c:close()

        local want = {
            [series('request_code="query_route",response_code="ok",result="success"')] = 2,
            [series('request_code="query_route",response_code="topic_not_found",result="success"')] = 1,
            [series('request_code="send_message",response_code="ok",result="success"')] = 4,
            [series('request_code="ack_message",response_code="invalid_receipt_handle",result="success"')] = 1,
            [series('request_code="send_message",response_code="invalid_argument",result="process_request_failed"')] = 1,
            [series('request_code="unknown",response_code="unimplemented",result="process_request_failed"')] = 1,
            [receive_lbl] = 1,
        }
        local text
        local ok = server.eventually(function()
            text = prom.scrape(s.metrics_addr)
            for labels, n in pairs(want) do
                -- The CLI may ask the route first: at least, for QueryRoute.
                local v = prom.value(text, "rocketmq_rpc_latency_count", labels)
                if v == nil or (labels:find("query_route", 1, true) and v < n) or
                   (not labels:find("query_route", 1, true) and v ~= n) then
                    return false
                end
            end
            return true
        end, 20000)
        assert.is_truthy(ok, text)
        for labels, n in pairs(want) do
            local count = prom.value(text, "rocketmq_rpc_latency_count", labels)
            assert.equal(count, prom.value(text, "rocketmq_rpc_latency_bucket", labels .. ',le="+Inf"'), labels)
            assert.equal(count, prom.value(text, "rmq_requests_total", labels), labels)
            assert.is_true(count >= n)
            assert.is_true(prom.value(text, "rocketmq_rpc_latency_sum", labels) > 0, labels)
        end
        -- The receive was held for seconds: none in the buckets up to 100 ms.
        assert.equal(0, prom.value(text, "rocketmq_rpc_latency_bucket", receive_lbl .. ',le="100"'))
        -- A bounded label set: known methods, code names in lower case.
        local methods = { query_route = 1, heartbeat = 1, send_message = 1, query_assignment = 1, receive_message = 1,
                          ack_message = 1, forward_message_to_dead_letter_queue = 1, pull_message = 1,
                          update_offset = 1, get_offset = 1, query_offset = 1, end_transaction = 1, telemetry = 1,
                          notify_client_termination = 1, change_invisible_duration = 1, recall_message = 1,
                          sync_lite_subscription = 1, unknown = 1 }
        local n = 0
        for line in text:gmatch("[^\n]+") do
            local l = line:match('^rocketmq_rpc_latency_count{(.-)}')
            if l and l:find('protocol_type="grpc"', 1, true) then
                n = n + 1
                assert.truthy(methods[l:match('request_code="([^"]*)"')], line)
                assert.truthy(l:match('response_code="[a-z0-9_]+"'), line)
            elseif l then
                -- The remoting series say theirs, as 5.x's.
                assert.truthy(l:find('protocol_type="remoting"', 1, true), line)
            end
        end
        assert.is_true(n >= 7, text)
        local verdict, said = prom.promtool_check(s.dir, text, "grpc_metrics.txt")
        assert.is_true(verdict == "absent" or verdict == true, said)
    end)

    -- What the SDKs' PushConsumer does (Node's sets auto_renew on every
    -- receive): a long consume is not redelivered; a client gone gives
    -- its messages back.
    -- The first message a receive hands out within `within` ms (each
    -- receive long-polls 2 s), or nil.
    local function receive_one(c, o, within)
        local t0 = core.mono_ms()
        repeat
            local m = assert(c:receive(RENEW_GROUP, RENEW_TOPIC, o))[1]
            if m then
                return m
            end
        until core.mono_ms() - t0 > within
        return nil
    end

    local function change(c, m, ms)
        local _, last = c:call("ChangeInvisibleDuration", "ChangeInvisibleDurationRequest", {
            group = { name = RENEW_GROUP }, topic = { name = RENEW_TOPIC },
            receipt_handle = m.system_properties.receipt_handle, message_id = m.system_properties.message_id,
            invisible_duration = { seconds = ms // 1000, nanos = (ms % 1000) * 1000000 },
        }, "ChangeInvisibleDurationResponse")
        return last
    end

    it("auto_renew keeps a received message invisible while its client is connected, not after", function()
        local p = assert(grpc.connect(s.grpc_addr))
        assert(p:send(RENEW_TOPIC, "held"))
        local a = assert(grpc.connect(s.grpc_addr))
        local b = assert(grpc.connect(s.grpc_addr))
        local m = receive_one(a, { auto_renew = true, batch = 1, poll_ms = 2000 }, 60000)
        assert.truthy(m, "nothing received")
        assert.equal("held", m.body)
        assert.equal(1, m.system_properties.delivery_attempt)
        -- The lease asked for is defaultInvisibleTimeMills, not the request's 30 s.
        assert.equal(INVISIBLE_MS // 1000, m.system_properties.invisible_duration.seconds)
        -- Held two and a half invisible times: another consumer of the
        -- group is never handed it (without renewal it would be at 10 s).
        local t0 = core.mono_ms()
        while core.mono_ms() - t0 < 2.5 * INVISIBLE_MS do
            local msgs = assert(b:receive(RENEW_GROUP, RENEW_TOPIC, { poll_ms = 2000 }))
            assert.equal(0, #msgs, "handed to another consumer while its client held it")
        end
        -- The client's handle is the one it was given; a renewal has
        -- replaced it at the broker, and the server acts on the newest:
        -- a nack of 1 s through the old handle works.
        local st = change(a, m, 1000)
        assert.equal(20000, st.status.code, st.status.message)
        local again = receive_one(b, { batch = 1, poll_ms = 2000 }, 60000)
        assert.truthy(again, "the nacked message did not come back")
        assert.equal("held", again.body)
        assert.is_true(again.system_properties.delivery_attempt >= 2)
        assert(b:ack(RENEW_GROUP, RENEW_TOPIC, { again }))

        -- The client goes away with a message it holds: it comes back
        -- (invisibleTimeMillisWhenClear), though its lease was renewed
        -- to a minute.
        assert(p:send(RENEW_TOPIC, "orphaned"))
        local a2 = assert(grpc.connect(s.grpc_addr))
        local m2 = receive_one(a2, { auto_renew = true, batch = 1, poll_ms = 2000 }, 60000)
        assert.truthy(m2, "nothing received")
        assert.equal("orphaned", m2.body)
        local t1 = core.mono_ms()
        while core.mono_ms() - t1 < 3000 do   -- past the first renewal (~2 s in)
            assert.equal(0, #assert(b:receive(RENEW_GROUP, RENEW_TOPIC, { poll_ms = 1000 })))
        end
        a2:close()
        -- Within 30 s: its renewed lease (60 s) would still hold it.
        local back = receive_one(b, { batch = 1, poll_ms = 2000 }, 30000)
        assert.truthy(back, "the message of a client gone did not come back")
        assert.equal("orphaned", back.body)
        assert(b:ack(RENEW_GROUP, RENEW_TOPIC, { back }))
        for _, c in ipairs({ p, a, b }) do
            c:close()
        end
    end)
end)
