-- gRPC with TLS and ACL: RocketMQ 5's Node.js SDK (npm
-- rocketmq-client-nodejs, unmodified) against a standalone rmq with
-- grpcServerPort.  TLS: the remoting TLS settings serve the gRPC port
-- too, with ALPN h2 (the SDK's sslEnabled, the certificate trusted by
-- grpc-js through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), and permissive mode takes plaintext
-- as well.  ACL: the SDK's sessionCredentials sign every call (5.x's
-- authorization header); the right secret produces and consumes, a
-- wrong secret or an unknown AccessKey is refused UNAUTHENTICATED at
-- startup, and a topic the account may not publish to is refused
-- FORBIDDEN while the rest keeps working.
local gn = require("support.grpc_node")
local server = require("support.server")

local TOPIC, DENIED = "GrpcSecTopic", "GrpcSecDenied"

local ADMIN, ADMIN_SECRET, USER, USER_SECRET = "rmqadmin", "adminsecret1", "grpcuser", "grpcsecret1"

describe("gRPC over TLS (the Node.js SDK with sslEnabled)", function()
    local s, pem


    setup(function()
        local key
        pem, key = gn.make_cert(server.tmpdir())
        s = gn.start({ ["tls.server.mode"] = "permissive", ["tls.server.certPath"] = pem,
                       ["tls.server.keyPath"] = key }, { node = true, topics = { TOPIC } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("produces and consumes over TLS; plaintext is served too in permissive mode", function()
        local status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC, SSL = 1, GROUP = "GrpcSecTls",
                                                          GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = pem }, "tls")
        assert.equal(0, status, why)
        assert.truthy(res.started, why)
        assert.truthy(res.sent, why)
        assert.equal("secure-1", res.received, why)
        assert.truthy(res.acked, why)
        status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC }, "plain")
        assert.equal(0, status, why)
        assert.truthy(res.sent, why)
    end)

    it("a client that does not trust the certificate fails its startup, and the server serves on", function()
        local status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC, SSL = 1 }, "untrusted")
        assert.equal(0, status, why)
        assert.falsy(res.started, why)
        assert.truthy(res.startError, why)
        status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC, SSL = 1, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = pem }, "again")
        assert.equal(0, status, why)
        assert.truthy(res.sent, why)
    end)
end)

describe("gRPC with ACL (the Node.js SDK with sessionCredentials)", function()
    local s


    setup(function()
        local path = gn.acl_file(server.tmpdir(), { ADMIN, ADMIN_SECRET }, { USER, USER_SECRET },
                                 { TOPIC .. "=PUB|SUB", DENIED .. "=SUB" })
        s = gn.start({ aclEnable = true, aclFile = path, accessKey = ADMIN, secretKey = ADMIN_SECRET },
                     { node = true, topics = { TOPIC, DENIED }, signer = { ADMIN, ADMIN_SECRET } })
    end)

    teardown(function()
        gn.stop(s)
    end)

    it("the right secret produces and consumes; a topic without PUB is refused FORBIDDEN", function()
        local status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC, AK = USER, SK = USER_SECRET,
                                                          DENIED = DENIED, GROUP = "GrpcSecAcl" }, "right")
        assert.equal(0, status, why)
        assert.truthy(res.started, why)
        assert.truthy(res.sent, why)
        assert.equal("secure-1", res.received, why)
        assert.truthy(res.acked, why)
        assert.falsy(res.deniedSent, why)
        assert.matches("40300", res.deniedError or "", 1, true)
        assert.matches("No default permission for topic:" .. DENIED, res.deniedError or "", 1, true)
    end)

    it("a wrong secret, an unknown AccessKey, no credentials and a stale date are refused UNAUTHENTICATED", function()
        local cases = {
            { "wrong", { AK = USER, SK = "not-the-secret" }, "Check signature failed for accessKey=" .. USER },
            { "unknown", { AK = "nobody", SK = USER_SECRET }, "No acl config for nobody" },
            { "anonymous", {}, "No accessKey is configured" },
        }
        -- The SDK reports only that its QueryRoute failed; the reason is
        -- in the server's log line (and the call's grpc-message).
        for _, c in ipairs(cases) do
            local vars = { TOPIC = TOPIC }
            for k, v in pairs(c[2]) do vars[k] = v end
            local status, res, why = gn.run(s, "secure.js", vars, c[1])
            assert.equal(0, status, why)
            assert.falsy(res.started, c[1] .. ": " .. why)
            assert.truthy(res.startError, why)
            server.eventually(function()
                return s:log():find("gRPC call QueryRoute from 127%.0%.0%.1:%d+ refused: [^\n]*" .. c[3]:gsub("%p", "%%%0"))
            end, 10000)
        end
        -- Signed by hand: a fresh date passes (either case of hex), one
        -- an hour old (a replay of a captured header) or unparsable does
        -- not, nor another scheme.
        local status, res, why = gn.run(s, "wire.js", { CASE = "auth", TOPIC = TOPIC, AK = USER,
                                                        SK = USER_SECRET }, "auth")
        assert.equal(0, status, why)
        assert.same({ code = 0, status = 20000 }, res.fresh)
        assert.same({ code = 0, status = 20000 }, res.lower)
        assert.equal(16, res.replay.code)
        assert.matches("ms from the server's clock (grpcAuthDateTimeWindowMillis 900000)", res.replay.details, 1, true)
        assert.equal(16, res.baddate.code)
        assert.matches("x-mq-date-time missing or not yyyyMMddTHHmmssZ", res.baddate.details, 1, true)
        assert.equal(16, res.scheme.code)
        assert.matches("authorization is not MQv2-HMAC-SHA1", res.scheme.details, 1, true)
        -- and the server still serves the right account
        status, res, why = gn.run(s, "secure.js", { TOPIC = TOPIC, AK = USER, SK = USER_SECRET }, "after")
        assert.equal(0, status, why)
        assert.truthy(res.sent, why)
    end)
end)
