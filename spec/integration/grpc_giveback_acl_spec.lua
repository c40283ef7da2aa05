-- With aclEnable, what a cancelled ReceiveMessage's POP took is given
-- back (CHANGE_MESSAGE_INVISIBLETIME to 1 s) as the receive's account.
-- The connection's later calls may be another account's: the give-back
-- went as the connection's last call's account, whose CHANGE the ACL
-- check refused when that account may not consume the group, and the
-- message stayed invisible for the receive's whole invisible duration
-- (here 600 s) before another consumer could have it.
local acl = require("rmq.acl")
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local grpc = require("rmq.client.grpc")
local h2 = require("support.h2raw")
local net = require("rmq.net")
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC, GROUP = "GrpcGiveBackAcl", "GrpcGiveBackAclGroup"
local ADMIN, ADMIN_SK = "giveback-admin", "giveback-admin-secret"
local USER, USER_SK = "giveback-user", "giveback-user-secret"        -- may consume TOPIC
local OTHER, OTHER_SK = "giveback-other", "giveback-other-secret"   -- may do nothing
local INVISIBLE_S = 600

-- A ReceiveMessage's headers signed as ak.
local function block_as(ak, sk)
    return gn.signed_block("ReceiveMessage", ak, sk, "giveback-client")
end

local function receive_request(poll_s, invisible_s)
    return cgrpc.encode("ReceiveMessageRequest", {
        group = { name = GROUP },
        message_queue = { topic = { name = TOPIC }, id = -1, permission = "READ_WRITE", broker = { name = "" } },
        filter_expression = { type = "TAG", expression = "*" },
        batch_size = 1,
        invisible_duration = { seconds = invisible_s, nanos = 0 },
        long_polling_timeout = { seconds = poll_s, nanos = 0 },
    })
end

describe("a cancelled ReceiveMessage's give-back with aclEnable", function()
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

    -- POLLING_INFO's pollingNum (signed as the admin): POPs the broker
    -- holds for the group.
    local function held()
        local ext = { consumerGroup = GROUP, topic = TOPIC, queueId = "-1", AccessKey = ADMIN }
        ext.Signature = acl.sign(ext, nil, ADMIN_SK)
        local r = assert(net.call(s.broker_addr or s.addr, { code = 200055, ext = ext }, 10000))
        assert.equal(0, r.code, r.remark)
        return tonumber(r.ext.pollingNum)
    end

    it("goes as the receive's account, whatever account the connection's last call was", function()
        local other = assert(grpc.connect(s.grpc_addr, { credentials = { accessKey = USER, secretKey = USER_SK } }))
        assert.same({}, assert(other:receive(GROUP, TOPIC, { batch = 1, poll_ms = 0, invisible_ms = 30000 })))

        -- USER's receive, held by the broker, then cancelled.
        local c = h2.connect(s.grpc_addr)
        local id = c:open("ReceiveMessage", block_as(USER, USER_SK))
        c:data(id, receive_request(30, INVISIBLE_S), true)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return held() == 1
        end, 30000), "the ReceiveMessage's POP was never held")
        c:reset(id)
        -- Then a call of another account on the same connection (refused:
        -- it may not consume the group); once it has ended, the server
        -- has read the reset before it.
        local probe = c:open("ReceiveMessage", block_as(OTHER, OTHER_SK))
        c:data(probe, receive_request(0, 30), true)
        assert.is_truthy(server.eventually(function()
            c:pump()
            return c.ended[probe] ~= nil
        end, 30000), "the other account's call never ended")

        -- A message: the held POP takes it for the cancelled call, which
        -- gives it back.
        assert(other:send(TOPIC, "after-the-cancel"))
        assert.is_truthy(server.eventually(function()
            c:pump()
            return held() == 0
        end, 30000), "the cancelled call's POP is still held")

        -- Another consumer of the group gets it within seconds (refused
        -- give-back: invisible for INVISIBLE_S).
        local got
        local t0 = core.mono_ms()
        while got == nil and core.mono_ms() - t0 < 45000 do
            c:pump()
            got = assert(other:receive(GROUP, TOPIC, { batch = 1, poll_ms = 2000, invisible_ms = 30000 }))[1]
        end
        assert.is_not_nil(got, "the message stayed invisible: its give-back was refused\n" .. s:log():sub(-3000))
        assert.equal("after-the-cancel", got.body)
        assert(other:ack(GROUP, TOPIC, { got }))
        other:close()
        c:close()
    end)
end)
