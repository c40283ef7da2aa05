-- With aclEnable, ForwardMessageToDeadLetterQueue stores the message in
-- %DLQ% and then acks its lease, as the forward's account.  The ack is
-- sent when the broker's reply to the send back arrives; it went as the
-- connection's last call's account, so when another account's call came
-- on the same connection meanwhile (refused: it may not consume the
-- group), the ack was refused too: the client was told OK and the
-- message came back once its lease ran out.  (Before that, the send back
-- itself was refused with aclEnable: it carried no AccessKey for the
-- broker's SUB check, "No accessKey is configured".)
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC, GROUP = "GrpcForwardDlqAcl", "GrpcForwardDlqAclGroup"
local ADMIN, ADMIN_SK = "fwd-admin", "fwd-admin-secret"
local USER, USER_SK = "fwd-user", "fwd-user-secret"        -- may consume TOPIC
local OTHER, OTHER_SK = "fwd-other", "fwd-other-secret"   -- may do nothing
local INVISIBLE_MS = 10000

-- A call's headers signed as ak.
local function block_as(method, ak, sk)
    return gn.signed_block(method, ak, sk, "forward-dlq-client")
end

-- A length-delimited field (rmq.grpc's encode has no
-- ForwardMessageToDeadLetterQueueRequest: built here, by hand).
local function len_field(num, bytes)
    local n, v = #bytes, {}
    repeat
        local b = n & 0x7f
        n = n >> 7
        v[#v + 1] = string.char(n > 0 and (b | 0x80) or b)
    until n == 0
    return string.char(num << 3 | 2) .. table.concat(v) .. bytes
end

-- ForwardMessageToDeadLetterQueueRequest: group (1) and topic (2) as
-- Resource (name: 2), receipt_handle (3), message_id (4),
-- delivery_attempt (5), max_delivery_attempts (6).
local function forward_request(handle, id)
    return len_field(1, len_field(2, GROUP)) .. len_field(2, len_field(2, TOPIC))
        .. len_field(3, handle) .. len_field(4, id) .. "\x28\x01" .. "\x30\x10"
end

describe("ForwardMessageToDeadLetterQueue with aclEnable", function()
    local s

    setup(function()
        local path = gn.acl_file(server.tmpdir(), { ADMIN, ADMIN_SK }, { USER, USER_SK }, { TOPIC .. "=PUB|SUB" },
                                 { OTHER, OTHER_SK })
        s = gn.start({ aclEnable = true, aclFile = path, accessKey = ADMIN, secretKey = ADMIN_SK },
                     { topics = { TOPIC }, signer = { ADMIN, ADMIN_SK } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("acks the lease as the forward's account, whatever call of another account comes meanwhile", function()
        local user = assert(grpc.connect(s.grpc_addr, { credentials = { accessKey = USER, secretKey = USER_SK } }))
        assert(user:send(TOPIC, "to-the-dlq"))
        local got
        assert.is_truthy(server.eventually(function()
            got = assert(user:receive(GROUP, TOPIC, { batch = 1, poll_ms = 2000, invisible_ms = INVISIBLE_MS }))[1]
            return got ~= nil
        end, 30000), "the message never came")
        local leased_at = core.mono_ms()

        -- The forward as USER and, in the same write, a call of OTHER on
        -- the same connection: the server reads both before the broker
        -- answers the forward's send back.
        local c = h2.connect(s.grpc_addr)
        local fwd = c:open("ForwardMessageToDeadLetterQueue",
                           block_as("ForwardMessageToDeadLetterQueue", USER, USER_SK))
        c:data(fwd, forward_request(got.system_properties.receipt_handle, got.system_properties.message_id), true)
        local probe = c:open("ReceiveMessage", block_as("ReceiveMessage", OTHER, OTHER_SK))
        c:data(probe, cgrpc.encode("ReceiveMessageRequest", {
            group = { name = GROUP },
            message_queue = { topic = { name = TOPIC }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
            filter_expression = { type = "TAG", expression = "*" },
            batch_size = 1,
            invisible_duration = { seconds = 30, nanos = 0 },
            long_polling_timeout = { seconds = 0, nanos = 0 },
        }), true)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.ended[fwd] ~= nil and c.ended[probe] ~= nil
        end, 30000), "the calls never ended")
        assert.equal("end", c.ended[fwd])
        assert.equal(0, h2.grpc_status(c.block[fwd]))
        -- The response's Status (field 1): its code (field 1) must be OK
        -- (20000); the text says why not.
        local body = c.bodies[fwd] or ""
        local code = body:sub(6, 6) == "\x0a" and body:sub(8, 8) == "\x08"
            and (body:byte(9) & 0x7f | (body:byte(10) & 0x7f) << 7 | (body:byte(11) & 0x7f) << 14) or nil
        assert.equal(20000, code, "the forward was not OK: " .. body:sub(6):gsub("[^%w%p ]", "?"))

        -- Past the lease (and some), the message is not delivered again:
        -- its lease was acked.  (Refused ack: it came back at the lease's
        -- end.)
        local again
        while again == nil and core.mono_ms() - leased_at < INVISIBLE_MS + 10000 do
            c:pump()
            again = assert(user:receive(GROUP, TOPIC, { batch = 1, poll_ms = 2000, invisible_ms = INVISIBLE_MS }))[1]
        end
        assert.is_nil(again, "the forwarded message was delivered again: its ack was refused\n"
                      .. s:log():sub(-3000))
        user:close()
        c:close()
    end)
end)
