-- With aclEnable, a message a gRPC ReceiveMessage finds past the max
-- delivery attempts its consumer declared (Telemetry settings) is not
-- handed out: the server moves it to %DLQ%group (CONSUMER_SEND_MSG_BACK)
-- and then acks its lease, both as the receive's account.  The send back
-- carried no AccessKey and was refused ("No accessKey is configured": the
-- message never reached the DLQ and came back at each lease's end); the
-- ack, sent when the send back's reply arrives, went as the connection's
-- last call's account, so another account's call meanwhile got it
-- refused and the message came back once its lease ran out, to be moved
-- a second time.
local acl = require("rmq.acl")
local cgrpc = require("rmq.grpc")
local codes = require("rmq.codes")
local consumer = require("rmq.client.consumer")
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local net = require("rmq.net")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC, GROUP = "GrpcDlqMoveAcl", "GrpcDlqMoveAclGroup"
local DLQ = "%DLQ%" .. GROUP
local ADMIN, ADMIN_SK = "dlq-admin", "dlq-admin-secret"
local USER, USER_SK = "dlq-user", "dlq-user-secret"        -- may consume TOPIC
local OTHER, OTHER_SK = "dlq-other", "dlq-other-secret"   -- may do nothing
local ATTEMPTS = 2         -- the consumer's max delivery attempts (its Telemetry settings)
local LEASE_S = 2          -- each failed attempt's (minInvisibleTimeMillsForRecv 1000)
local MOVE_LEASE_S = 5     -- the lease of the receive that finds it past its attempts

-- Records in the DLQ (one queue; none before its first).
local function dlq_count(s)
    local ext = { topic = DLQ, queueId = "0", AccessKey = ADMIN }
    ext.Signature = acl.sign(ext, nil, ADMIN_SK)
    local r = assert(net.call(s.broker_addr, { code = codes.request.GET_MAX_OFFSET, ext = ext }, 10000))
    return r.code == codes.response.SUCCESS and tonumber(r.ext.offset) or 0
end

local function receive_request(invisible_s)
    return cgrpc.encode("ReceiveMessageRequest", {
        group = { name = GROUP },
        message_queue = { topic = { name = TOPIC }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
        filter_expression = { type = "TAG", expression = "*" },
        batch_size = 1,
        invisible_duration = { seconds = invisible_s, nanos = 0 },
        long_polling_timeout = { seconds = 0, nanos = 0 },
    })
end

-- The messages a raw ReceiveMessage call's answer carried (its DATA:
-- gRPC length-prefixed ReceiveMessageResponses).
local function messages_of(body)
    local out, pos = {}, 1
    body = body or ""
    while pos + 4 <= #body do
        local len = string.unpack(">I4", body, pos + 1)
        local m = assert(cgrpc.decode("ReceiveMessageResponse", body:sub(pos + 5, pos + 4 + len)))
        if m.message then
            out[#out + 1] = m.message
        end
        pos = pos + 5 + len
    end
    return out
end

local function block_as(method, ak, sk)
    return gn.signed_block(method, ak, sk, "dlq-move-client")
end

describe("the move to %DLQ%group past max delivery attempts with aclEnable", function()
    local s

    setup(function()
        local path = gn.acl_file(server.tmpdir(), { ADMIN, ADMIN_SK }, { USER, USER_SK }, { TOPIC .. "=PUB|SUB" },
                                 { OTHER, OTHER_SK })
        s = gn.start({ aclEnable = true, aclFile = path, accessKey = ADMIN, secretKey = ADMIN_SK,
                       minInvisibleTimeMillsForRecv = 1000 },
                     { topics = { TOPIC }, signer = { ADMIN, ADMIN_SK } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("goes as the receive's account, whatever call of another account comes meanwhile", function()
        local user = assert(grpc.connect(s.grpc_addr, { credentials = { accessKey = USER, secretKey = USER_SK } }))
        local sent = assert(user:send(TOPIC, "past-its-attempts"))
        user:close()

        -- A simple consumer of GROUP on one connection: its settings say
        -- ATTEMPTS delivery attempts (the group's own retryMaxTimes, 16,
        -- would take the broker's revive much longer to act on).
        local c = h2.connect(s.grpc_addr)
        local host, port = s.grpc_addr:match("^(.*):(%d+)$")
        local tel = c:open("Telemetry", block_as("Telemetry", USER, USER_SK))
        c:data(tel, cgrpc.encode("TelemetryCommand", { settings = {
            client_type = "SIMPLE_CONSUMER", request_timeout = { seconds = 10 },
            access_point = { scheme = "IPv4", addresses = { { host = host, port = tonumber(port) } } },
            backoff_policy = { max_attempts = ATTEMPTS },
            subscription = { group = { name = GROUP }, subscriptions = { {
                topic = { name = TOPIC }, expression = { type = "TAG", expression = "*" } } } },
        } }), false)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.bodies[tel] ~= nil
        end, 30000), "the Telemetry settings were never answered")

        -- USER's receive and, in the same write, a call of OTHER on the same
        -- connection (refused: it may not consume the group): the server
        -- reads both before the broker answers what the receive started.
        -- The messages the receive was handed.
        local function pair(invisible_s)
            local rcv = c:open("ReceiveMessage", block_as("ReceiveMessage", USER, USER_SK))
            c:data(rcv, receive_request(invisible_s), true)
            local probe = c:open("ReceiveMessage", block_as("ReceiveMessage", OTHER, OTHER_SK))
            c:data(probe, receive_request(30), true)
            assert.is_truthy(server.eventually(function()
                c:pump()
                return c.ended[rcv] ~= nil and c.ended[probe] ~= nil
            end, 30000), "the calls never ended")
            assert.equal(0, h2.grpc_status(c.block[rcv]), "the receive ended " .. tostring(c.ended[rcv])
                         .. " without grpc-status 0\n" .. s:log():sub(-2000))
            return messages_of(c.bodies[rcv])
        end

        -- Polls fn() until it returns true or ms pass on the clock
        -- (server.eventually counts only its own sleeps, and each fn()
        -- here takes a round trip and a sleep: 60 s were ~12 minutes).
        local function within(ms, fn)
            local deadline = core.mono_ms() + ms
            repeat
                if fn() then
                    return true
                end
            until core.mono_ms() >= deadline
            return false
        end

        -- ATTEMPTS attempts, none acked.
        for attempt = 1, ATTEMPTS do
            local got
            assert.is_truthy(within(60000, function()
                got = pair(LEASE_S)[1]
                if got == nil then
                    net.sleep(100)
                end
                return got ~= nil
            end), "attempt " .. attempt .. " never came")
            assert.equal("past-its-attempts", got.body)
            assert.equal(attempt, got.system_properties.delivery_attempt)
        end

        -- The next receive that finds it moves it instead of handing it out.
        assert.is_truthy(within(60000, function()
            assert.same({}, pair(MOVE_LEASE_S), "handed out past its max delivery attempts")
            net.sleep(100)
            return dlq_count(s) >= 1
        end), "the message never reached " .. DLQ .. "\n" .. s:log():sub(-3000))
        local moved_at = core.mono_ms()

        -- Past the move's lease (and some), receives get nothing and the
        -- DLQ holds it once: its lease was acked.  (A refused ack: it came
        -- back at the lease's end and was moved again.)
        while core.mono_ms() - moved_at < MOVE_LEASE_S * 1000 + 10000 do
            assert.same({}, pair(MOVE_LEASE_S), "handed out past its max delivery attempts")
            assert.equal(1, dlq_count(s), "moved more than once: the ack after the move was refused\n"
                         .. s:log():sub(-3000))
            net.sleep(200)
        end
        assert.is_nil(s:log():find("past its attempts failed", 1, true), s:log():sub(-3000))

        -- What is in the DLQ is the message sent, read back as the admin.
        local got = {}
        local dc = consumer.new({ namesrvAddr = s.listen_addr, consumerGroup = "GrpcDlqMoveAclCheck",
                                  consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET",
                                  accessKey = ADMIN, secretKey = ADMIN_SK })
        dc:subscribe(DLQ, "*")
        dc:on_message(function(msgs)
            for _, m in ipairs(msgs) do
                got[#got + 1] = m
            end
            return "CONSUME_SUCCESS"
        end)
        dc:start()
        server.eventually(function() return #got >= 1 end, 30000)
        dc:shutdown()
        assert.equal(1, #got)
        assert.equal("past-its-attempts", got[1].body)
        assert.equal(sent.message_id, got[1].msgId)
        c:close()
    end)
end)
