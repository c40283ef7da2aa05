-- acl_credentials_spec: `credentials = false` among a client object's
-- options (producer.new, consumer.new, admin.context) sends every one of
-- its requests unsigned, even when the Lua state has a default
-- (net.credentials), as a single request with `credentials = false` is.
local admin = require("rmq.admin")
local codes = require("rmq.codes")
local consumer = require("rmq.client.consumer")
local credentials = require("rmq.client.credentials")
local env = require("support.broker_consume_env")
local net = require("rmq.net")
local producer = require("rmq.client.producer")
local server = require("support.server")

local TOPIC, GROUP = "FxAclOffTopic", "FxAclOffGroup"
local USER = { accessKey = "RocketMQ", secretKey = "12345678" }
local ADMIN = { accessKey = "rocketmq2", secretKey = "12345678" }

describe("credentials = false on a client object", function()
    it("is false from credentials.option, and only a table or false is taken", function()
        assert.is_false(credentials.option({ credentials = false, accessKey = "ak", secretKey = "sk" }))
        assert.same({ accessKey = "ak", secretKey = "sk" }, credentials.option({ credentials = { accessKey = "ak",
            secretKey = "sk" }, accessKey = "other", secretKey = "other" }))
        assert.same({ accessKey = "ak", secretKey = "sk" }, credentials.option({ accessKey = "ak", secretKey = "sk" }))
        assert.is_nil(credentials.option({}))
        assert.is_false(credentials.redacted(false))
        local ok, err = pcall(credentials.option, { credentials = "RocketMQ" })
        assert.is_false(ok)
        assert.equal("credentials: must be a table or false, got string", err)
        ok, err = pcall(producer.new, { credentials = true })
        assert.is_false(ok)
        assert.matches("credentials: must be a table or false, got boolean", err)
    end)
end)

describe("credentials = false against a broker with aclEnable, with a default set", function()
    local e

    setup(function()
        e = env.start({ aclEnable = true, aclFile = require("support.acl_yml").write({
            white = { "10.10.103.*" },
            accounts = {
                { accessKey = USER.accessKey, secretKey = USER.secretKey, defaultTopicPerm = "DENY",
                  defaultGroupPerm = "SUB", topicPerms = { TOPIC .. "=PUB|SUB" }, groupPerms = { GROUP .. "=SUB" } },
                { accessKey = ADMIN.accessKey, secretKey = ADMIN.secretKey, admin = true },
            },
        }) })
        local o = { clusterName = env.CLUSTER, topic = TOPIC, readQueueNums = "4", writeQueueNums = "4" }
        local ctx = { namesrvAddr = e.ns_addr, timeout = 3000, accessKey = ADMIN.accessKey,
                      secretKey = ADMIN.secretKey }
        assert(admin.run("updateTopic", o, ctx))
        assert.truthy(server.eventually(function() return e:lookup(TOPIC) end, 5000))
    end)

    teardown(function()
        net.credentials(nil)
        if e then
            e:stop()
        end
    end)

    before_each(function()
        net.credentials(USER)
    end)

    after_each(function()
        net.credentials(nil)
    end)

    it("a producer: signed with the default without the option, unsigned with it", function()
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxAclOffProducer" })
        local r, err = p:send({ topic = TOPIC, body = "default" })
        assert.truthy(r, err)
        assert.equal("SEND_OK", r.status)
        local q = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxAclOffProducer",
                                 retryTimesWhenSendFailed = 0, credentials = false })
        local r2, err2, code = q:send({ topic = TOPIC, body = "unsigned" })
        assert.is_nil(r2)
        assert.equal(codes.response.SYSTEM_ERROR, code)
        assert.matches("AclException: No accessKey is configured", err2, 1, true)
    end)

    it("a consumer: its heartbeat unsigned fails start(), its pull is refused", function()
        local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = GROUP, credentials = false })
        c:subscribe(TOPIC, "*")
        c:on_message(function() return "CONSUME_SUCCESS" end)
        local ok, err = pcall(c.start, c)
        assert.is_false(ok)
        assert.matches("No accessKey is configured", err, 1, true)
        local pull = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = GROUP, credentials = false })
        local res, perr, pcode = pull:pull({ topic = TOPIC, brokerName = env.BROKER, queueId = 0 }, 0, 8)
        assert.is_nil(res)
        assert.equal(codes.response.SYSTEM_ERROR, pcode)
        assert.matches("No accessKey is configured", perr, 1, true)
        -- the default still signs the same pull
        local signed = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = GROUP })
        local res2, serr = signed:pull({ topic = TOPIC, brokerName = env.BROKER, queueId = 0 }, 0, 8)
        assert.truthy(res2, serr)
    end)

    it("an admin context: its requests unsigned", function()
        net.credentials(ADMIN)
        local o = { clusterName = env.CLUSTER, topic = TOPIC .. "2", readQueueNums = "1", writeQueueNums = "1" }
        local _, err = admin.run("updateTopic", o, admin.context({ namesrvAddr = e.ns_addr, timeout = 3000,
                                                                   credentials = false }))
        assert.truthy(err)
        assert.matches("No accessKey is configured", tostring(err), 1, true)
    end)
end)
