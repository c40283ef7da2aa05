-- ACL 1.0 (aclEnable, plain_acl.yml) on the 5.x POP codes and
-- RECALL_MESSAGE, with a real broker: the topic and the group of
-- POP_MESSAGE, ACK_MESSAGE, PEEK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
-- NOTIFICATION and POLLING_INFO need SUB (5.x's header annotations), those
-- of each entry of a BATCH_ACK_MESSAGE body too, RECALL_MESSAGE's topic
-- PUB; an account denied them is refused with the AclException text of
-- the other codes, and the broker keeps serving.
local net = require("rmq.net")
local acl = require("rmq.acl")
local server = require("support.server")

local EXC = "org.apache.rocketmq.acl.common.AclException: "
local CHECK_PERM = ", org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:"
local function no_perm(what, line) return EXC .. "No default permission for " .. what .. CHECK_PERM .. line .. ")" end

local USER, ADMIN, SECRET = "PopUser", "PopAdmin", "12345678"

local YML = [[
accounts:
- accessKey: PopUser
  secretKey: 12345678
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - PopTopic=SUB
  - PopPubOnly=PUB
  - PopDenied=DENY
  groupPerms:
  - PopDeniedGroup=DENY
- accessKey: PopAdmin
  secretKey: 12345678
  admin: true
]]

local function signed(cmd, ak)
    local ext = {}
    for k, v in pairs(cmd.ext or {}) do ext[k] = tostring(v) end
    ext.AccessKey = ak
    ext.Signature = acl.sign(ext, cmd.body, SECRET)
    local out = {}
    for k, v in pairs(cmd) do out[k] = v end
    out.ext = ext
    return out
end

local function header(code, group, topic)
    local ext = { consumerGroup = group, topic = topic, queueId = "0" }
    if code == 200050 then
        ext.maxMsgNums, ext.invisibleTime, ext.pollTime, ext.bornTime, ext.initMode = "1", "30000", "0", "0", "0"
        ext.queueId = "-1"
    elseif code == 200052 then
        ext.maxMsgNums = "1"
    elseif code == 200051 or code == 200053 then
        ext.extraInfo, ext.offset, ext.invisibleTime = "0 0 30000 0 0 broker-acl 0 0", "0", "30000"
    elseif code == 200054 then
        ext.pollTime, ext.bornTime = "0", "0"
    end
    return { code = code, ext = ext }
end

local function batch_ack(group, topic)
    return { code = 200151, body = ('{"acks":[{"b":"AQ==","c":"%s","it":30000,"pt":0,"q":0,"r":"0",'
        .. '"rq":0,"so":0,"t":"%s"}],"brokerName":"broker-acl"}'):format(group, topic) }
end

describe("ACL on the POP codes and RECALL_MESSAGE", function()
    local b, c

    setup(function()
        local dir = server.tmpdir()
        local f = assert(io.open(dir .. "/plain_acl.yml", "wb"))
        f:write(YML)
        f:close()
        b = server.start({
            role = "broker", workers = 2, brokerName = "broker-acl",
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", aclEnable = true, aclFile = dir .. "/plain_acl.yml",
        })
        c = assert(net.connect(b.addr))
        for _, t in ipairs({ "PopTopic", "PopPubOnly", "PopDenied", "PopOther" }) do
            local r = assert(c:call(signed({ code = 17, ext = { topic = t, defaultTopic = "TBW102",
                readQueueNums = "1", writeQueueNums = "1", perm = "6", topicFilterType = "SINGLE_TAG",
                topicSysFlag = "0", order = "false" } }, ADMIN)))
            assert.equal(0, r.code, r.remark)
        end
    end)

    teardown(function()
        c:close()
        assert.equal(0, b:stop())
    end)

    local CODES = { 200050, 200051, 200052, 200053, 200054, 200055 }

    it("lets an account with SUB on the topic and the group through", function()
        for _, code in ipairs(CODES) do
            local r = assert(c:call(signed(header(code, "PopGroup", "PopTopic"), USER)))
            assert.is_nil((r.remark or ""):find("AclException", 1, true), code .. ": " .. tostring(r.remark))
        end
        local r = assert(c:call(signed(batch_ack("PopGroup", "PopTopic"), USER)))
        assert.is_nil((r.remark or ""):find("AclException", 1, true), r.remark)
        -- A POP there finds the queue empty (not refused).
        r = assert(c:call(signed(header(200050, "PopGroup", "PopTopic"), USER)))
        assert.is_true(r.code ~= 1, tostring(r.code) .. " " .. tostring(r.remark))
    end)

    it("refuses a topic the account may not read, by its perm or the default", function()
        for _, code in ipairs(CODES) do
            local r = assert(c:call(signed(header(code, "PopGroup", "PopDenied"), USER)))
            assert.same({ 1, no_perm("topic:PopDenied", 611) }, { r.code, r.remark }, code)
            r = assert(c:call(signed(header(code, "PopGroup", "PopPubOnly"), USER)))
            assert.same({ 1, no_perm("topic:PopPubOnly", 611) }, { r.code, r.remark }, code)
            r = assert(c:call(signed(header(code, "PopGroup", "PopOther"), USER)))
            assert.same({ 1, no_perm("topic:PopOther", 606) }, { r.code, r.remark }, code)
        end
    end)

    it("refuses a denied group, also behind a retry topic", function()
        for _, code in ipairs(CODES) do
            local r = assert(c:call(signed(header(code, "PopDeniedGroup", "PopTopic"), USER)))
            assert.same({ 1, no_perm("group:PopDeniedGroup", 611) }, { r.code, r.remark }, code)
            r = assert(c:call(signed(header(code, "PopDeniedGroup", "%RETRY%PopDeniedGroup"), USER)))
            assert.same({ 1, no_perm("group:PopDeniedGroup", 611) }, { r.code, r.remark }, code)
        end
    end)

    it("refuses a BATCH_ACK_MESSAGE with an entry the account may not acknowledge", function()
        local r = assert(c:call(signed(batch_ack("PopGroup", "PopDenied"), USER)))
        assert.same({ 1, no_perm("topic:PopDenied", 611) }, { r.code, r.remark })
        r = assert(c:call(signed(batch_ack("PopDeniedGroup", "PopTopic"), USER)))
        assert.same({ 1, no_perm("group:PopDeniedGroup", 611) }, { r.code, r.remark })
        -- Long key names (BatchAck's alternateNames) are read too.
        local body = '{"acks":[{"consumerGroup":"PopGroup","topic":"PopDenied","q":0}],"brokerName":"broker-acl"}'
        r = assert(c:call(signed({ code = 200151, body = body }, USER)))
        assert.same({ 1, no_perm("topic:PopDenied", 611) }, { r.code, r.remark })
        -- Not a BatchAckMessageRequestBody: refused, never let through.
        for _, bad in ipairs({ "[]", '{"acks":[1]}', '{"acks":[{"c":5}]}', '{"acks":[' }) do
            r = assert(c:call(signed({ code = 200151, body = bad }, USER)))
            assert.equal(1, r.code, bad)
            assert.matches("AclException", r.remark, 1, true)
            assert.is_nil(r.remark:find("LOCK_BATCH_MQ", 1, true), r.remark)
        end
        -- The admin acknowledges anything.
        r = assert(c:call(signed(batch_ack("PopDeniedGroup", "PopDenied"), ADMIN)))
        assert.is_nil((r.remark or ""):find("AclException", 1, true), r.remark)
    end)

    it("needs PUB on the topic for RECALL_MESSAGE", function()
        local function recall(topic, ak)
            return assert(c:call(signed({ code = 370, ext = { topic = topic, producerGroup = "PopProducer",
                                                               recallHandle = "x" } }, ak)))
        end
        local r = recall("PopTopic", USER)
        assert.same({ 1, no_perm("topic:PopTopic", 611) }, { r.code, r.remark })
        r = recall("PopDenied", USER)
        assert.same({ 1, no_perm("topic:PopDenied", 611) }, { r.code, r.remark })
        r = recall("PopPubOnly", USER)
        assert.is_nil((r.remark or ""):find("AclException", 1, true), r.remark)
        -- and still serving
        r = assert(c:call(signed(header(200055, "PopGroup", "PopTopic"), USER)))
        assert.is_nil((r.remark or ""):find("AclException", 1, true), r.remark)
    end)
end)
