-- What the Java 5.x SDK (apache/rocketmq-clients java) does on the wire
-- that the Node SDK does not, reproduced below the SDK
-- (spec/interop/grpc_node/java_sdk.js); the by-hand runs of the Java SDK's
-- examples that found them are in docs/grpc.md, "Compatibility with the
-- Java 5.x SDK".
local gn = require("support.grpc_node")

local TOPIC = "JavaSdkTopic"
local OK, BAD_REQUEST, CRC32 = 20000, 40000, 1   -- v2 Code.OK, BAD_REQUEST, DigestType.CRC32
local ILLEGAL_POLLING_TIME = 40018

describe("the Java 5.x SDK's receive, on rmq's gRPC port", function()
    local s

    setup(function()
        s = gn.start({}, { node = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("pops every queue whatever queue a receive names; each message has its body's CRC-32, its born host, no broker properties", function()
        local status, r, why = gn.run(s, "java_sdk.js", { TOPIC = TOPIC, GROUP = "JavaSdkGroup" }, "java_sdk")
        assert.equal(0, status, why)
        assert.truthy(r and not r.error, why)
        assert.equal(OK, r.sent.status, why)
        -- Held naming queue 2 (as Java's SimpleConsumer names the route's
        -- queues in turn), it returns the message sent to queue 0 meanwhile,
        -- as 5.x's proxy does; before, it waited out its long poll empty.
        assert.is_nil(r.got.grpc, why)
        assert.equal(1, #r.got.messages, why)
        local m = r.got.messages[1]
        assert.equal(r.sent.id, m.id)
        assert.equal(0, m.queueId)
        assert.equal("java-sdk-wire", m.body)
        -- The digest the SDK checks (Java logs "Unsupported message body
        -- digest algorithm" for none): CRC-32 of the body, in its format.
        assert.equal(CRC32, m.digestType, why)
        assert.equal(m.crc32, m.checksum, why)
        -- No user properties were sent, and none of the broker's own
        -- (CLUSTER, set by every store) is passed on as one, as 5.x.
        assert.same({}, m.properties, why)
        -- The SDK's born_host comes back (5.x: __BORNHOST); without one,
        -- the sender's address (the proxy's context.getRemoteAddress()).
        assert.equal("jsdk-born-host", m.bornHost, why)
        assert.equal(OK, r.sent2.status, why)
        assert.equal(1, #r.got2.messages, why)
        assert.equal("no-born-host", r.got2.messages[1].body, why)
        assert.matches("^127%.0%.0%.1:%d+$", r.got2.messages[1].bornHost, why)
        assert.same({}, r.got2.messages[1].properties, why)
        assert.equal(BAD_REQUEST, r.badHost.status, why)
    end)

    it("answers a receive whose deadline leaves too little for its long poll at once, and holds none past it", function()
        local status, r, why = gn.run(s, "java_sdk.js", { TOPIC = TOPIC, GROUP = "JavaSdkLate", MODE = "deadline" },
            "java_sdk_deadline")
        assert.equal(0, status, why)
        assert.truthy(r and not r.error, why)
        -- 30 s asked, 3 s to the deadline (under the 5 s minimum): 5.x's
        -- answer, a status, not the call dying DEADLINE_EXCEEDED.
        assert.is_nil(r.late.grpc, why)
        assert.equal(ILLEGAL_POLLING_TIME, r.late.status, why)
        assert.equal(0, #r.late.messages, why)
        -- 2^60 s asked: saturated, bounded the same way (its ms would
        -- overflow an int64 and wrap to a negative poll).
        assert.is_nil(r.huge.grpc, why)
        assert.equal(ILLEGAL_POLLING_TIME, r.huge.status, why)
        -- Nothing of it stays held in the broker to pop the next message
        -- for a call already gone: the next receive gets it.
        assert.equal(OK, r.sent.status, why)
        assert.is_nil(r.got.grpc, why)
        assert.equal(1, #r.got.messages, why)
        assert.equal("after-late", r.got.messages[1].body, why)
    end)
end)
