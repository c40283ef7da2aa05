-- ali-ons 3.12 (the npm client, spec/interop/ali_ons) against a broker
-- with aclEnable: it signs every request (AccessKey, OnsChannel,
-- Signature over the sorted header fields' toString() and the body), so
-- with an account of plain_acl.yml it produces and consumes as without
-- ACL; with a wrong secret its requests are refused with 4.9.8's remark.
local net = require("rmq.net")
local codes = require("rmq.codes")
local ali_ons = require("support.ali_ons")
local env = require("support.broker_consume_env")

local TOPIC = "FxAliOnsAcl"
local GROUP = "FxAliOnsAclGroup"
local COUNT = 20

describe("ali-ons 3.12 against a broker with aclEnable", function()
    local e

    setup(function()
        local path = require("support.acl_yml").write({ accounts = {
            { accessKey = "AliOnsKey", secretKey = "AliOnsSecret1", defaultTopicPerm = "DENY",
              defaultGroupPerm = "DENY", topicPerms = { TOPIC .. "=PUB|SUB" }, groupPerms = { GROUP .. "=SUB" } },
            { accessKey = "rocketmq2", secretKey = "12345678", admin = true },
        } })
        e = env.start({ workers = 2, aclEnable = true, aclFile = path })
        -- The topic, created by the admin account before the consumer
        -- subscribes.
        ali_ons.create_topic(e, TOPIC, { accessKey = "rocketmq2", secretKey = "12345678" })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    local function run(ak, sk, name)
        return ali_ons.run(e, "produce_consume.js", { TOPIC = TOPIC, GROUP = GROUP, COUNT = COUNT,
                                                      ACCESS_KEY = ak, SECRET_KEY = sk }, name, 30000)
    end

    it("produces and consumes with its accessKey/secretKey, every message intact", function()
        ali_ons.check()
        local status, res, why = run("AliOnsKey", "AliOnsSecret1", "signed")
        assert.equal(0, status, why)
        assert.truthy(res, why)
        assert.equal(COUNT, res.sent)
        assert.equal(COUNT, res.received)
        assert.equal(COUNT, res.intact)
    end)

    it("is refused with a wrong secret: 4.9.8's remark reaches the client", function()
        ali_ons.check()
        local status, res, why = run("AliOnsKey", "wrong", "wrong")
        assert.equal(1, status, why)
        assert.truthy(res and res.error, why)
        assert.matches("Check signature failed for accessKey=AliOnsKey", res.error, 1, true)
        -- and the broker still serves the right one
        local r = assert(net.call(e.addr, { code = codes.request.GET_MAX_OFFSET, ext = { topic = TOPIC, queueId = 0 },
                                            credentials = { accessKey = "AliOnsKey", secretKey = "AliOnsSecret1" } }))
        assert.equal(0, r.code, r.remark)
    end)
end)
