-- The web console on a broker with ACL on reads with its own account
-- (consoleAccessKey/consoleSecretKey), never the broker's admin
-- credential: the reviewer's repro (issue 15, finding 1) of a topic
-- Secret with "TOP SECRET PAYLOAD" that an account with topic perm DENY
-- cannot read through /api/message, while one granted SUB can; unsigned
-- (no console account) it shows the broker's refusal; consolePassword
-- guards every /api/* route (not /metrics); and a wrong password delays
-- the peer address that gave it, not everyone (finding 7).
local net = require("rmq.net")
local server = require("support.server")
local rq = require("support.requests")
local http = require("support.http")

local SECRET = "12345678"
local YML = [[
accounts:
- accessKey: RocketMQ
  secretKey: 12345678
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
- accessKey: ConsoleReader
  secretKey: reader-secret-1
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - Secret=SUB
- accessKey: rocketmq2
  secretKey: 12345678
  admin: true
]]

local base64 = require("support.base64").encode

local dir = server.tmpdir()
local acl_file = dir .. "/plain_acl.yml"

local function broker(extra)
    local conf = {
        role = "broker", workers = 1, brokerName = "broker-cacl",
        storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = "127.0.0.1:1", aclEnable = true, aclFile = acl_file,
        autoCreateTopicEnable = true,
        -- the broker's own credential is an admin account (as on an ACL NameServer)
        accessKey = "rocketmq2", secretKey = SECRET,
        metricsExporterType = "PROM", metricsPromExporterPort = 0, consoleSampleSeconds = 1,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function get(s, path, auth, from)
    local headers = auth and { Authorization = "Basic " .. base64(auth) } or nil
    local status, body = http.request(s.metrics_addr, "GET", path, nil, headers, from)
    return status, body
end

local LOOKUP = "/api/message?topic=Secret&key=k1"

describe("web console with ACL on", function()
    setup(function()
        local f = assert(io.open(acl_file, "wb"))
        f:write(YML)
        f:close()
        -- The admin sends the secret message (as the reviewer did).
        local s = broker()
        local send = rq.send({ group = "SecretProducer", topic = "Secret", queues = 1, born = os.time() * 1000,
                               props = "KEYS\1k1\2WAIT\1true", body = "TOP SECRET PAYLOAD" })
        send.credentials = { accessKey = "rocketmq2", secretKey = SECRET }
        local r = assert(net.call(s.addr, send, 10000))
        assert.equal(0, r.code, r.remark)
        -- Signed by the admin, the key is found (the index has it).
        assert.truthy(server.eventually(function()
            local q = assert(net.call(s.addr, { code = 12, ext = { topic = "Secret", key = "k1", maxNum = "32",
                beginTimestamp = "0", endTimestamp = tostring(os.time() * 1000 + 60000) },
                credentials = { accessKey = "rocketmq2", secretKey = SECRET } }, 10000))
            return q.code == 0 and (q.body or ""):find("TOP SECRET PAYLOAD", 1, true) ~= nil
        end, 60000))
        -- Unsigned (no console account): the broker refuses, the console says
        -- so; the broker's admin credential is not used.
        local status, body = get(s, LOOKUP)
        assert.equal(403, status, body)
        assert.matches("No accessKey is configured", body, 1, true)
        assert.is_nil(body:find("TOP SECRET", 1, true))
        assert.is_nil(body:find("stack traceback", 1, true))
        assert.equal(0, s:stop())
    end)

    it("refuses an account with topic perm DENY what that account cannot read", function()
        local s = broker({ consoleAccessKey = "RocketMQ", consoleSecretKey = SECRET })
        local status, body = get(s, LOOKUP)
        assert.equal(403, status, body)
        assert.matches("No default permission for topic:Secret", body, 1, true)
        assert.is_nil(body:find("TOP SECRET", 1, true))
        -- The secret of the console's account is never shown.
        local r = assert(net.call(s.addr, { code = 26, ext = {},
            credentials = { accessKey = "rocketmq2", secretKey = SECRET } }, 10000))
        assert.equal(0, r.code, r.remark)
        assert.matches("consoleAccessKey=RocketMQ", r.body or "", 1, true)
        assert.is_nil((r.body or ""):find("consoleSecretKey", 1, true))
        assert.equal(0, s:stop())
    end)

    it("reads with an account granted SUB, behind consolePassword on every /api route", function()
        local s = broker({ consoleAccessKey = "ConsoleReader", consoleSecretKey = "reader-secret-1",
                           consolePassword = "pw-cacl-7", consoleAuthFailDelayMillis = 60000 })
        local status, body = get(s, LOOKUP)
        assert.equal(401, status, body)
        assert.matches("needs the console password", body, 1, true)
        assert.is_nil(body:find("TOP SECRET", 1, true))
        for _, path in ipairs({ "/api/topics", "/api/groups", "/api/cluster", "/api/group?name=G" }) do
            status = get(s, path)
            assert.equal(401, status, path)
        end
        status, body = get(s, LOOKUP, "ops:pw-cacl-7")
        assert.equal(200, status, body)
        assert.matches("TOP SECRET PAYLOAD", body, 1, true)
        -- Prometheus scrapes without it.
        status, body = get(s, "/metrics")
        assert.equal(200, status)
        assert.matches("rmq_", body)

        -- A wrong password from one peer (127.0.0.2) delays that peer, even
        -- with the right one next; the operator on 127.0.0.1 is served.
        status, body = get(s, LOOKUP, "x:guess", "127.0.0.2")
        assert.equal(401, status, body)
        assert.matches("wrong console password", body, 1, true)
        status = get(s, LOOKUP, "x:pw-cacl-7", "127.0.0.2")
        assert.equal(429, status)
        status, body = get(s, LOOKUP, "ops:pw-cacl-7")
        assert.equal(200, status, body)
        assert.matches("TOP SECRET PAYLOAD", body, 1, true)
        -- ... until it gives a wrong one too.
        status = get(s, LOOKUP, "ops:wrong")
        assert.equal(401, status)
        status = get(s, LOOKUP, "ops:pw-cacl-7")
        assert.equal(429, status)
        assert.is_nil(s:log():find("pw-cacl-7", 1, true))
        assert.is_nil(s:log():find("reader-secret-1", 1, true))
        assert.equal(0, s:stop())
    end)

    it("keeps at most consoleAuthFailMaxPeers delayed peers, forgetting the oldest", function()
        local s = broker({ consoleAccessKey = "ConsoleReader", consoleSecretKey = "reader-secret-1",
                           consolePassword = "pw-cacl-8", consoleAuthFailDelayMillis = 60000,
                           consoleAuthFailMaxPeers = 2 })
        for _, peer in ipairs({ "127.0.0.2", "127.0.0.3", "127.0.0.4" }) do
            assert.equal(401, (get(s, LOOKUP, "x:bad", peer)))
        end
        -- 127.0.0.2 was forgotten when 127.0.0.4 came: it may try again.
        assert.equal(200, (get(s, LOOKUP, "x:pw-cacl-8", "127.0.0.2")))
        assert.equal(429, (get(s, LOOKUP, "x:pw-cacl-8", "127.0.0.3")))
        assert.equal(429, (get(s, LOOKUP, "x:pw-cacl-8", "127.0.0.4")))
        assert.equal(0, s:stop())
    end)

    it("refuses half a console account at start", function()
        local ok, err = pcall(broker, { consoleAccessKey = "RocketMQ" })
        assert.is_false(ok)
        assert.matches("key 'consoleAccessKey' needs consoleSecretKey too", err, 1, true)
    end)
end)
