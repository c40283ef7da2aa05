-- ACL 1.0 (aclEnable, plain_acl.yml) with real processes: a broker and a
-- NameServer with ACL on accept requests signed as RocketMQ clients sign
-- them (rmq.acl.sign) and refuse the others with a 4.9.8 broker's reply
-- (code 1, the AclException's text and first stack frame), for the
-- requests answered in C and those answered in Lua alike (a broker with
-- nativeProcessors = false runs the same checks); per-topic and group
-- permissions; white-listed addresses; plain_acl.yml edited while the
-- server runs; and the ACL admin requests (codes 50-54).
local net = require("rmq.net")
local acl = require("rmq.acl")
local cjson = require("cjson")
local codec = require("rmq.codec")
local server = require("support.server")
local rq = require("support.requests")
local fixtures = require("support.fixtures")
local message = require("rmq.client.message")
local fx_it = fixtures.gate(it, pending)

local EXC = "org.apache.rocketmq.acl.common.AclException: "
local VALIDATE = ", org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:"
local CHECK_PERM = ", org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:"
local NO_AK = EXC .. "No accessKey is configured" .. VALIDATE .. "664)"
local function unknown_ak(ak) return EXC .. "No acl config for " .. ak .. VALIDATE .. "668)" end
local function bad_sig(ak) return EXC .. "Check signature failed for accessKey=" .. ak .. VALIDATE .. "684)" end
local function need_admin(code, ak)
    return EXC .. ("Need admin permission for request code=%d, but accessKey=%s is not"):format(code, ak)
        .. CHECK_PERM .. "581)"
end
local function no_perm(what, line) return EXC .. "No default permission for " .. what .. CHECK_PERM .. line .. ")" end

local USER, ADMIN, SECRET = "RocketMQ", "rocketmq2", "12345678"

local BASE_YML = [[
# plain_acl.yml as the 4.9.8 distribution ships it, plus topics of the specs
globalWhiteRemoteAddresses:
- 10.10.103.*
- 192.168.0.*

accounts:
- accessKey: RocketMQ
  secretKey: 12345678
  whiteRemoteAddress:
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - AclTopic=PUB|SUB
  - AclPubOnly=PUB
  - AclDenied=DENY
  - "RMQ_SYS_TRACE_TOPIC=DENY"
  groupPerms:
  - AclDeniedGroup=DENY
- accessKey: rocketmq2
  secretKey: 12345678
  whiteRemoteAddress: 192.168.1.*
  # if it is admin, it could access all resources
  admin: true
]]

-- Whole at once: a new file renamed over the old, so the server's reload
-- (a stat every aclReloadIntervalMillis) never reads half an edit (written
-- in place, a tick between the truncation and the write once loaded a
-- prefix without the account being added, under ASan at load 8).
local function write(path, text)
    local tmp = path .. ".spec-new"
    local f = assert(io.open(tmp, "wb"))
    f:write(text)
    f:close()
    assert(os.rename(tmp, path))
end

-- cmd signed by ak with secret: AccessKey added, then Signature.
local function signed(cmd, ak, secret)
    local ext = {}
    for k, v in pairs(cmd.ext or {}) do ext[k] = tostring(v) end
    ext.AccessKey = ak
    ext.Signature = acl.sign(ext, cmd.body, secret or SECRET)
    local out = {}
    for k, v in pairs(cmd) do out[k] = v end
    out.ext = ext
    return out
end

local function send_cmd(topic, body)
    return rq.send({ group = "AclProducer", topic = topic, born = 1796034593124, tags = "TagA",
                     body = body or "hello" })
end

local function pull_cmd(topic, group)
    return rq.pull({ group = group or "AclGroup", topic = topic, expr = "TAG" })
end

local function heartbeat_cmd(group, topic)
    return { code = 34, body = cjson.encode({
        clientID = "acl-client", producerDataSet = {}, consumerDataSet = { {
            groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = { { topic = topic, subString = "*", tagsSet = {}, codeSet = {},
                                      subVersion = 1, expressionType = "TAG", classFilterMode = false } } } } }) }
end

local function create_topic_cmd(topic)
    return { code = 17, ext = { topic = topic, defaultTopic = "TBW102", readQueueNums = "4",
        writeQueueNums = "4", perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0",
        order = "false" } }
end

local function start_broker(native, yml)
    local dir = server.tmpdir()
    local path = dir .. "/plain_acl.yml"
    write(path, yml or BASE_YML)
    local b = server.start({
        role = "broker", workers = 2, brokerName = "broker-acl",
        storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = "127.0.0.1:1", aclEnable = true, aclFile = path,
        aclReloadIntervalMillis = 100, nativeProcessors = native,
    })
    return b, path
end

-- A broker of its own for a describe block (its setup and teardown):
-- env.b, env.path (its plain_acl.yml), env.call(cmd).
local function own_broker()
    local env = {}
    setup(function()
        env.b, env.path = start_broker(true)
    end)
    teardown(function()
        assert.equal(0, env.b:stop())
    end)
    function env.call(cmd)
        return assert(net.call(env.b.addr, cmd, 10000))
    end
    return env
end

for _, native in ipairs({ true, false }) do
    describe(("ACL on a broker (%s processors)"):format(native and "native" or "Lua"), function()
        local b, c

        setup(function()
            b = start_broker(native)
            c = assert(net.connect(b.addr))
            -- topics exist for the sends and pulls (an admin creates them)
            for _, t in ipairs({ "AclTopic", "AclPubOnly", "AclDenied", "AclOther" }) do
                local r = assert(c:call(signed(create_topic_cmd(t), ADMIN)))
                assert.equal(0, r.code, r.remark)
            end
        end)

        teardown(function()
            c:close()
            assert.equal(0, b:stop())
        end)

        it("answers signed sends, pulls, heartbeats and offset commits", function()
            local r = assert(c:call(signed(send_cmd("AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            assert.truthy(r.ext.msgId)
            r = assert(c:call(signed(pull_cmd("AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            assert.truthy(r.body and #r.body > 0)
            r = assert(c:call(signed(heartbeat_cmd("AclGroup", "AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            r = assert(c:call(signed({ code = 15, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                           queueId = "0", commitOffset = "1" } }, USER)))
            assert.equal(0, r.code, r.remark)
            r = assert(c:call(signed({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                           queueId = "0" } }, USER)))
            assert.equal(0, r.code, r.remark)
            assert.equal("1", r.ext.offset)
        end)

        it("refuses unsigned, unknown, wrongly signed and tampered requests as 4.9.8 does", function()
            local r = assert(c:call(send_cmd("AclTopic")))
            assert.same({ 1, NO_AK }, { r.code, r.remark })
            r = assert(c:call(pull_cmd("AclTopic")))
            assert.same({ 1, NO_AK }, { r.code, r.remark })
            -- no extFields at all (a heartbeat has no header)
            r = assert(c:call(heartbeat_cmd("AclGroup", "AclTopic")))
            assert.same({ 1, NO_AK }, { r.code, r.remark })
            r = assert(c:call(signed(send_cmd("AclTopic"), "nobody-at-all")))
            assert.same({ 1, unknown_ak("nobody-at-all") }, { r.code, r.remark })
            r = assert(c:call(signed(send_cmd("AclTopic"), USER, "wrong-secret")))
            assert.same({ 1, bad_sig(USER) }, { r.code, r.remark })
            -- a body changed after signing, a header value changed
            local cmd = signed(send_cmd("AclTopic", "original"), USER)
            cmd.body = "tampered"
            r = assert(c:call(cmd))
            assert.same({ 1, bad_sig(USER) }, { r.code, r.remark })
            cmd = signed(pull_cmd("AclTopic"), USER)
            cmd.ext.queueOffset = "5"
            r = assert(c:call(cmd))
            assert.same({ 1, bad_sig(USER) }, { r.code, r.remark })
            -- the same connection still serves signed requests
            r = assert(c:call(signed(send_cmd("AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            -- nothing refused was stored: one pull sees only what was acknowledged
            r = assert(c:call(signed({ code = 30, ext = { topic = "AclTopic", queueId = "0" } }, USER)))
            assert.equal(0, r.code, r.remark)
            assert.equal("2", r.ext.offset)
        end)

        it("checks topic and group permissions, explicit and default", function()
            -- PUB only: sends pass, pulls are refused
            local r = assert(c:call(signed(send_cmd("AclPubOnly"), USER)))
            assert.equal(0, r.code, r.remark)
            r = assert(c:call(signed(pull_cmd("AclPubOnly"), USER)))
            assert.same({ 1, no_perm("topic:AclPubOnly", 611) }, { r.code, r.remark })
            -- DENY listed; a topic not listed falls to defaultTopicPerm DENY
            r = assert(c:call(signed(send_cmd("AclDenied"), USER)))
            assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
            r = assert(c:call(signed(send_cmd("AclOther"), USER)))
            assert.same({ 1, no_perm("topic:AclOther", 606) }, { r.code, r.remark })
            -- groups: a denied group, in a pull and in a heartbeat
            r = assert(c:call(signed(pull_cmd("AclTopic", "AclDeniedGroup"), USER)))
            assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
            r = assert(c:call(signed(heartbeat_cmd("AclDeniedGroup", "AclTopic"), USER)))
            assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
            r = assert(c:call(signed(heartbeat_cmd("AclGroup", "AclDenied"), USER)))
            assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
            -- a send to a retry topic needs SUB on the group (SEND_MESSAGE_V2's "a")
            local retry = send_cmd("%RETRY%AclDeniedGroup")
            retry.ext.a = "AclDeniedGroup"
            r = assert(c:call(signed(retry, USER)))
            assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
            -- an admin account without perms has every resource (an empty
            -- queue: PULL_NOT_FOUND, past the check)
            r = assert(c:call(signed(pull_cmd("AclOther", "AnyGroup"), ADMIN)))
            assert.equal(19, r.code, r.remark)
        end)

        it("reads a message by id only with SUB on its topic (rmq extension: 4.9.8 checks none)", function()
            local function offset_of(r)
                assert.equal(0, r.code, r.remark)
                return tostring(tonumber(r.ext.msgId:sub(-16), 16))
            end
            local readable = offset_of(assert(c:call(signed(send_cmd("AclTopic", "readable"), USER))))
            local pub_only = offset_of(assert(c:call(signed(send_cmd("AclPubOnly", "write only"), USER))))
            local other = offset_of(assert(c:call(signed(send_cmd("AclOther", "TOP SECRET"), ADMIN))))
            local function view(off, ak)
                return assert(c:call(signed({ code = 33, ext = { offset = off } }, ak)))
            end
            local r = view(readable, USER)
            assert.equal(0, r.code, r.remark)
            assert.truthy(r.body:find("readable", 1, true))
            r = view(pub_only, USER)
            assert.same({ 1, no_perm("topic:AclPubOnly", 611) }, { r.code, r.remark })
            r = view(other, USER)
            assert.same({ 1, no_perm("topic:AclOther", 606) }, { r.code, r.remark })
            assert.is_nil(r.body and r.body:find("TOP SECRET", 1, true))
            r = view(other, ADMIN)
            assert.equal(0, r.code, r.remark)
            assert.truthy(r.body:find("TOP SECRET", 1, true))
        end)

        it("sends back only a record of the group's topics with SUB on its original topic (rmq extension)", function()
            -- issue 21 item 4: SUB on any group used to put any record, named by its
            -- commit log offset, into that group's retry topic, which it may pull.
            local group = native and "AclBackN" or "AclBackL"
            local retry = "%RETRY%" .. group
            local r = assert(c:call(signed(heartbeat_cmd(group, "AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            local function offset_of(rr)
                assert.equal(0, rr.code, rr.remark)
                return tostring(tonumber(rr.ext.msgId:sub(-16), 16))
            end
            local secret = offset_of(assert(c:call(signed(send_cmd("AclOther", "TOP SECRET"), ADMIN))))
            local denied = offset_of(assert(c:call(signed(send_cmd("AclDenied", "DENIED SECRET"), ADMIN))))
            local pub_only = offset_of(assert(c:call(signed(send_cmd("AclPubOnly", "write only"), USER))))
            local readable = offset_of(assert(c:call(signed(send_cmd("AclTopic", "readable back"), USER))))
            local function back(off, g, ak)
                return assert(c:call(signed({ code = 36, ext = { offset = off, group = g or group, delayLevel = "1",
                    originTopic = "AclTopic", maxReconsumeTimes = "16" } }, ak or USER)))
            end
            -- a topic the group neither subscribes nor has offsets on
            r = back(secret)
            assert.same({ 16, "the message's topic[AclOther] is neither subscribed by group[" .. group
                               .. "] nor its retry topic" }, { r.code, r.remark })
            -- the group's offsets (an admin's commits: the account cannot commit
            -- on those topics) make a topic the group's, the account's
            -- permission on it still counts
            for _, t in ipairs({ "AclOther", "AclDenied", "AclPubOnly" }) do
                r = assert(c:call(signed({ code = 15, ext = { consumerGroup = group, topic = t,
                                                               queueId = "0", commitOffset = "0" } }, ADMIN)))
                assert.equal(0, r.code, r.remark)
            end
            r = back(secret)
            assert.same({ 1, no_perm("topic:AclOther", 606) }, { r.code, r.remark })
            r = back(denied)
            assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
            r = back(pub_only)
            assert.same({ 1, no_perm("topic:AclPubOnly", 611) }, { r.code, r.remark })
            -- the group's own topic passes; an admin passes for any record
            r = back(readable)
            assert.equal(0, r.code, r.remark)
            -- what reaches the retry topic (level 1: a second) is the readable record
            -- only: the refused ones were never put ahead of it
            local got
            assert.truthy(server.eventually(function()
                local pr = assert(c:call(signed(pull_cmd(retry, group), USER)))
                if pr.code ~= 0 then
                    return false
                end
                got = assert(message.decode_records(pr.body))
                return #got > 0
            end, 30000))
            assert.equal(1, #got)
            assert.equal("readable back", got[1].body)
            assert.equal("AclTopic", got[1].properties.RETRY_TOPIC)
            -- a retry record goes back on its RETRY_TOPIC's permission
            r = back(tostring(got[1].commitLogOffset))
            assert.equal(0, r.code, r.remark)
            r = back(secret, group, ADMIN)
            assert.equal(0, r.code, r.remark)
        end)

        it("refuses admin requests to a non-admin account: topic create/delete, config, write perm", function()
            local r = assert(c:call(signed(create_topic_cmd("AclNew"), USER)))
            assert.same({ 1, need_admin(17, USER) }, { r.code, r.remark })
            r = assert(c:call(signed({ code = 215, ext = { topic = "AclTopic" } }, USER)))
            assert.same({ 1, need_admin(215, USER) }, { r.code, r.remark })
            r = assert(c:call(signed({ code = 25, body = "brokerPermission=4\n" }, USER)))
            assert.same({ 1, need_admin(25, USER) }, { r.code, r.remark })
            r = assert(c:call(signed({ code = 205, ext = { brokerName = "broker-acl" } }, USER)))
            assert.same({ 1, need_admin(205, USER) }, { r.code, r.remark })
            r = assert(c:call(signed({ code = 50, ext = { accessKey = "sneaky-user", secretKey = "sneaky-secret",
                                                           admin = "true" } }, USER)))
            assert.same({ 1, need_admin(50, USER) }, { r.code, r.remark })
            -- unsigned: refused before anything else
            r = assert(c:call({ code = 25, body = "brokerPermission=4\n" }))
            assert.same({ 1, NO_AK }, { r.code, r.remark })
            -- the broker still takes sends: its permission did not change
            r = assert(c:call(signed(send_cmd("AclTopic"), USER)))
            assert.equal(0, r.code, r.remark)
            -- an admin may create topics and update the config
            r = assert(c:call(signed(create_topic_cmd("AclNew"), ADMIN)))
            assert.equal(0, r.code, r.remark)
            r = assert(c:call(signed({ code = 25, body = "enablePropertyFilter=true\n" }, ADMIN)))
            assert.equal(0, r.code, r.remark)
        end)

        it("sends no reply to a refused oneway request and does not run it", function()
            -- oneway then a call on the same pooled connection: in order
            assert(net.oneway(b.addr, { code = 15, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                   queueId = "1", commitOffset = "7" } }))
            local r = assert(net.call(b.addr, signed({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                                 queueId = "1" } }, USER), 10000))
            assert.is_not.equal("7", r.ext and r.ext.offset)
            assert.truthy(b:log():find("request code 15 from 127.0.0.1:%d+ refused: [^\n]*No accessKey"), b:log())
        end)

        it("logs a flood of refused requests as a few lines and a count, and keeps serving", function()
            local conn = assert(net.connect(b.addr))
            for _ = 1, 300 do
                local r = assert(conn:call({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                                queueId = "1" } }, 10000))
                assert.equal(1, r.code)
            end
            -- a refusal a second later (same connection: same worker) reports
            -- what the flood's window left out
            net.sleep(1100)
            local r = assert(conn:call({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                            queueId = "1" } }, 10000))
            conn:close()
            assert.equal(1, r.code)
            local log, lines = b:log(), 0
            for _ in log:gmatch("request code 14 from [^\n]* refused: [^\n]*No accessKey") do
                lines = lines + 1
            end
            local more = 0
            for n in log:gmatch("(%d+) more requests refused by ACL") do
                more = more + tonumber(n)
            end
            assert.is_true(lines < 60, ("%d lines for 301 refusals"):format(lines))
            assert.is_true(lines + more >= 301, ("%d lines + %d counted"):format(lines, more))
            r = assert(net.call(b.addr, signed({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclTopic",
                                                                   queueId = "1" } }, USER), 10000))
            assert.is_not.equal(1, r.code, r.remark)
        end)
    end)
end

describe("ACL white lists and reloads", function()
    local env = own_broker()
    local call = env.call

    it("takes an edited plain_acl.yml while running, and keeps the old one when an edit is broken", function()
        local r = call(signed(send_cmd("TBW102"), "newcomer-key", "newcomer-secret"))
        assert.same({ 1, unknown_ak("newcomer-key") }, { r.code, r.remark })
        write(env.path, BASE_YML .. [[
- accessKey: newcomer-key
  secretKey: newcomer-secret
  admin: true
]])
        assert(server.eventually(function()
            return call(signed(create_topic_cmd("FromNewcomer"), "newcomer-key", "newcomer-secret")).code == 0
        end, 10000), "not within 10 s")
        -- a broken edit (bad indentation): logged with its line, the accounts stay
        write(env.path, BASE_YML .. "- accessKey: x\n   secretKey: [unclosed\n")
        assert(server.eventually(function()
            return env.b:log():find("not reloaded", 1, true) ~= nil
        end, 10000), "not within 10 s")
        assert.matches("plain_acl%.yml: line %d+ column %d+", env.b:log())
        r = call(signed(create_topic_cmd("StillHere"), "newcomer-key", "newcomer-secret"))
        assert.equal(0, r.code, r.remark)
        -- a file that parses but names a bad address keeps them too
        write(env.path, BASE_YML .. "- accessKey: newcomer-key\n  secretKey: newcomer-secret\n"
            .. "  whiteRemoteAddress: 300.1.1.1\n")
        assert(server.eventually(function()
            return env.b:log():find("Netaddress examine Exception netaddress is 300.1.1.1", 1, true) ~= nil
        end, 10000), "not within 10 s")
        r = call(signed(create_topic_cmd("StillHere2"), "newcomer-key", "newcomer-secret"))
        assert.equal(0, r.code, r.remark)
    end)

    it("needs no signature from a white-listed address: global, and the account's own", function()
        -- the account's whiteRemoteAddress: its AccessKey is enough
        write(env.path, BASE_YML .. [[
- accessKey: loopback-key
  secretKey: loopback-secret
  whiteRemoteAddress: 127.0.0.1
  defaultTopicPerm: PUB
]])
        assert(server.eventually(function()
            return call({ code = 310, ext = { AccessKey = "loopback-key", a = "G", b = "TBW102", c = "TBW102",
                d = "4", e = "0", f = "0", g = "1", h = "0", i = "", j = "0", k = "false" }, body = "x" }).code == 0
        end, 10000), "not within 10 s")
        -- an unsigned request of no account is still refused
        local r = call(send_cmd("TBW102"))
        assert.same({ 1, NO_AK }, { r.code, r.remark })
        -- globalWhiteRemoteAddresses: no AccessKey at all, admin codes too
        write(env.path, (BASE_YML:gsub("%- 10%.10%.103%.%*", "- 127.0.0-5.*", 1)))
        assert(server.eventually(function()
            return call(create_topic_cmd("FromWhiteList")).code == 0
        end, 10000), "not within 10 s")
        r = call(heartbeat_cmd("AclGroup", "AclTopic"))
        assert.equal(0, r.code, r.remark)
    end)
end)

describe("ACL at start", function()
    it("creates a missing plain_acl.yml empty (as 4.9.8), then refuses everyone not white-listed", function()
        local dir = server.tmpdir()
        local path = dir .. "/conf/plain_acl.yml"
        os.execute("mkdir -p '" .. dir .. "/conf'")
        local b = server.start({ role = "broker", workers = 1, brokerName = "broker-acl",
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", aclEnable = true, rocketmqHome = dir })
        local f = io.open(path, "rb")
        assert.truthy(f, "plain_acl.yml created under rocketmqHome/conf")
        f:close()
        local r = assert(net.call(b.addr, signed(send_cmd("TBW102"), USER), 10000))
        assert.same({ 1, unknown_ak(USER) }, { r.code, r.remark })
        assert.equal(0, b:stop())
    end)

    it("refuses to start on a plain_acl.yml it cannot load, saying where", function()
        local dir = server.tmpdir()
        write(dir .. "/plain_acl.yml", "accounts:\n- accessKey: RocketMQ\n  secretKey: [12345678\n")
        local ok, err = pcall(server.start, { role = "broker", workers = 1, brokerName = "broker-acl",
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", aclEnable = true, aclFile = dir .. "/plain_acl.yml" })
        assert.is_false(ok)
        assert.matches("aclEnable: [^\n]*plain_acl%.yml: line %d+ column %d+", err)
        write(dir .. "/plain_acl.yml", "accounts:\n- accessKey: RocketMQ\n  secretKey: 123\n")
        ok, err = pcall(server.start, { role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json",
            aclEnable = true, aclFile = dir .. "/plain_acl.yml" })
        assert.is_false(ok)
        assert.matches("accounts%[1%]: The accessKey=RocketMQ and secretKey=123 cannot be null", err)
    end)
end)

describe("ACL admin requests (50-54)", function()
    local env = own_broker()
    local call = env.call

    fx_it("creates a topic from mqadmin's captured signed UPDATE_AND_CREATE_TOPIC", function()
        local sent = 0
        for _, row in ipairs(fixtures.frames("update-and-create-topic.jsonl")) do
            if row.dir == "c2s" and row.decoded.code == 17 then
                local cmd = assert(codec.decode(row.raw))
                assert.equal(ADMIN, cmd.ext.AccessKey)
                local r = call(cmd)
                assert.equal(0, r.code, r.remark)
                sent = sent + 1
            end
        end
        assert.equal(1, sent)
    end)

    it("creates, updates and deletes accounts and the global white list, writing plain_acl.yml", function()
        local r = call(signed({ code = 52 }, ADMIN))
        assert.equal(0, r.code, r.remark)
        assert.equal("broker-acl", r.ext.brokerName)
        assert.equal("DefaultCluster", r.ext.clusterName)
        -- 4.9.8 keys it by the file's full path: rmq by its name only
        assert.matches('^{"plain_acl%.yml":{"counter":%d+,"timestamp":%d+}}$', r.ext.allAclFileVersion)
        local v0 = cjson.decode(r.ext.version)
        -- UPDATE_AND_CREATE_ACL_CONFIG: a new account, usable at once
        r = call(signed({ code = 50, ext = { accessKey = "created-key", secretKey = "created-secret",
            admin = "false", defaultTopicPerm = "PUB", defaultGroupPerm = "SUB",
            topicPerms = "AclX=SUB,AclY=DENY", groupPerms = "GX=DENY" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        local text = server.read_file(env.path)
        assert.truthy(text:find("created-key", 1, true), text)
        assert.truthy(text:find("AclY=DENY", 1, true), text)
        r = call(signed(send_cmd("TBW102"), "created-key", "created-secret"))
        assert.equal(0, r.code, r.remark)
        r = call(signed(send_cmd("AclY"), "created-key", "created-secret"))
        assert.same({ 1, no_perm("topic:AclY", 611) }, { r.code, r.remark })
        -- the version moved
        r = call(signed({ code = 52 }, ADMIN))
        local v1 = cjson.decode(r.ext.version)
        assert.is_true(v1.counter > v0.counter)
        -- an update replaces the account's fields
        r = call(signed({ code = 50, ext = { accessKey = "created-key", secretKey = "created-secret",
            admin = "false", defaultTopicPerm = "DENY" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        r = call(signed(send_cmd("TBW102"), "created-key", "created-secret"))
        assert.same({ 1, no_perm("topic:TBW102", 606) }, { r.code, r.remark })
        -- refusals as 4.9.8 words them
        r = call(signed({ code = 50, ext = { accessKey = "short", secretKey = "12345678" } }, ADMIN))
        assert.same({ 209, "The accessKey=short and secretKey=12345678 cannot be null and length should longer than 6" },
            { r.code, r.remark })
        r = call(signed({ code = 50, ext = { accessKey = "created-key", secretKey = "created-secret",
                                              topicPerms = "AclX=ALL" } }, ADMIN))
        assert.equal(209, r.code)
        assert.equal("Parse resource permission error for AclX=ALL.\n"
            .. "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.", r.remark)
        -- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
        r = call(signed({ code = 53, ext = { globalWhiteAddrs = "10.0.0.*,127.0.0.1", aclFileFullPath = env.path } },
            ADMIN))
        assert.equal(0, r.code, r.remark)
        r = call(create_topic_cmd("ByWhiteList"))
        assert.equal(0, r.code, r.remark)
        r = call(signed({ code = 53, ext = { globalWhiteAddrs = "10.0.0.*", aclFileFullPath = "/etc/passwd" } },
            ADMIN))
        assert.same({ 211, "The globalWhiteAddresses[10.0.0.*] has been updated failed." }, { r.code, r.remark })
        r = call(signed({ code = 53, ext = { globalWhiteAddrs = "10.0.0.*", aclFileFullPath = env.path } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        r = call(create_topic_cmd("NoLongerWhite"))
        assert.same({ 1, NO_AK }, { r.code, r.remark })
        -- mqadmin updateGlobalWhiteAddr without -p sends no aclFileFullPath:
        -- 4.9.8 writes its default file (the header's @CFNotNull is only logged)
        r = call(signed({ code = 53, ext = { globalWhiteAddrs = "10.9.9.*,127.0.0.1" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.read_file(env.path):find("10.9.9.*", 1, true))
        r = call(create_topic_cmd("WhiteAgain"))
        assert.equal(0, r.code, r.remark)
        -- and without globalWhiteAddrs, 4.9.8's refusal
        r = call(signed({ code = 53, ext = { aclFileFullPath = env.path } }, ADMIN))
        assert.same({ 211, "The globalWhiteAddresses[null] has been updated failed." }, { r.code, r.remark })
        r = call(signed({ code = 53, ext = { globalWhiteAddrs = "10.0.0.*" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        -- DELETE_ACL_CONFIG
        r = call(signed({ code = 51, ext = { accessKey = "created-key" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        r = call(signed(send_cmd("TBW102"), "created-key", "created-secret"))
        assert.same({ 1, unknown_ak("created-key") }, { r.code, r.remark })
        r = call(signed({ code = 51, ext = { accessKey = "created-key" } }, ADMIN))
        assert.same({ 210, "The accesskey[created-key] corresponding to accessConfig has been deleted failed." },
            { r.code, r.remark })
        -- GET_BROKER_CLUSTER_ACL_CONFIG is not served by a 4.9.8 broker either
        r = call(signed({ code = 54 }, ADMIN))
        assert.same({ 3, " request type 54 not supported" }, { r.code, r.remark })
        -- non-admin accounts are refused every ACL admin request
        for _, cmd in ipairs({ { code = 50, ext = { accessKey = "by-a-user", secretKey = "12345678" } },
                               { code = 51, ext = { accessKey = ADMIN } },
                               { code = 52 },
                               { code = 53, ext = { globalWhiteAddrs = "*", aclFileFullPath = env.path } },
                               { code = 54 } }) do
            r = call(signed(cmd, USER))
            assert.same({ 1, need_admin(cmd.code, USER) }, { r.code, r.remark })
        end
    end)
end)

describe("ACL admin requests write plain_acl.yml safely", function()
    local function mode_of(path)
        local p = assert(io.popen("stat -c %a '" .. path .. "'"))
        local m = p:read("l")
        p:close()
        return m
    end

    it("keeps the file's mode, creates it 0600, follows no planted temp file", function()
        local dir = server.tmpdir()
        local path = dir .. "/conf/plain_acl.yml"
        os.execute("mkdir -p '" .. dir .. "/conf'")
        local conf = { role = "broker", workers = 1, brokerName = "broker-acl",
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", aclEnable = true, rocketmqHome = dir,
            aclReloadIntervalMillis = 100 }
        local b = server.start(conf)
        assert.equal("600", mode_of(path))
        assert.equal(0, b:stop())
        write(path, BASE_YML)
        os.execute("chmod 640 '" .. path .. "'")
        -- the names the temp file had before: a symlink there is not followed
        write(dir .. "/victim", "untouched")
        os.execute("ln -s '" .. dir .. "/victim' '" .. path .. ".tmp'")
        b = server.start(conf)
        local r = assert(net.call(b.addr, signed({ code = 50, ext = { accessKey = "created-key",
            secretKey = "created-secret", defaultTopicPerm = "PUB" } }, ADMIN), 10000))
        assert.equal(0, r.code, r.remark)
        assert.equal("640", mode_of(path))
        assert.equal("untouched", server.read_file(dir .. "/victim"))
        assert.truthy(server.read_file(path):find("created-key", 1, true))
        assert.equal(0, b:stop())
    end)

    it("writes what it reads back after a restart, and refuses what would not read back", function()
        local dir = server.tmpdir()
        local path = dir .. "/plain_acl.yml"
        write(path, BASE_YML)
        local conf = { role = "broker", workers = 2, brokerName = "broker-acl",
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", aclEnable = true, aclFile = path,
            aclReloadIntervalMillis = 100 }
        local b = server.start(conf)
        -- U+0085 (NEL) and U+2028 are line breaks to YAML: written raw, a
        -- restart would read another secret
        local secret = "nel\u{85}ls\u{2028}quote\"back\\slash"
        local r = assert(net.call(b.addr, signed({ code = 50, ext = { accessKey = "created-key",
            secretKey = secret, defaultTopicPerm = "PUB" } }, ADMIN), 10000))
        assert.equal(0, r.code, r.remark)
        -- a byte that is not UTF-8: refused, the file left alone
        local before = server.read_file(path)
        r = assert(net.call(b.addr, signed({ code = 50, ext = { accessKey = "broken-key",
            secretKey = "bad\xffsecret" } }, ADMIN), 10000))
        assert.same({ 209, "accounts[4].secretKey is not valid UTF-8" }, { r.code, r.remark })
        assert.equal(before, server.read_file(path))
        assert.equal(0, b:stop())
        -- what the broker loads after a restart: the created account signs
        b = server.start(conf)
        r = assert(net.call(b.addr, signed(send_cmd("TBW102"), "created-key", secret), 10000))
        assert.equal(0, r.code, r.remark)
        r = assert(net.call(b.addr, signed({ code = 51, ext = { accessKey = "created-key" } }, ADMIN), 10000))
        assert.equal(0, r.code, r.remark)
        assert.equal(0, b:stop())
    end)
end)

describe("ACL on a NameServer (rmq extension)", function()
    local n, path

    setup(function()
        local dir = server.tmpdir()
        path = dir .. "/plain_acl.yml"
        write(path, BASE_YML)
        n = server.start({ role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json",
                           aclEnable = true, aclFile = path })
    end)

    teardown(function()
        assert.equal(0, n:stop())
    end)

    local function call(cmd)
        return assert(net.call(n.addr, cmd, 10000))
    end

    local function register_cmd()
        return { code = 103, ext = { brokerName = "fake-broker", brokerAddr = "10.9.9.9:10911",
            clusterName = "DefaultCluster", haServerAddr = "10.9.9.9:10912", brokerId = "0",
            compressed = "false" },
            body = cjson.encode({ topicConfigSerializeWrapper = { topicConfigTable = {},
                dataVersion = { counter = 1, timestamp = 1 } }, filterServerList = {} }) }
    end

    it("refuses a fake broker registration, config changes and write-perm wipes but from an admin", function()
        local r = call(register_cmd())
        assert.same({ 1, NO_AK }, { r.code, r.remark })
        r = call(signed(register_cmd(), USER))
        assert.same({ 1, need_admin(103, USER) }, { r.code, r.remark })
        r = call(signed({ code = 318, body = "brokerChannelExpiredTime=1\n" }, USER))
        assert.same({ 1, need_admin(318, USER) }, { r.code, r.remark })
        r = call(signed({ code = 205, ext = { brokerName = "broker-a" } }, USER))
        assert.same({ 1, need_admin(205, USER) }, { r.code, r.remark })
        r = call(signed({ code = 216, ext = { topic = "T" } }, USER))
        assert.same({ 1, need_admin(216, USER) }, { r.code, r.remark })
        r = call(signed({ code = 100, ext = { namespace = "ORDER_TOPIC_CONFIG", key = "T", value = "x" } }, USER))
        assert.same({ 1, need_admin(100, USER) }, { r.code, r.remark })
        -- nothing was registered
        r = call(signed({ code = 106 }, USER))
        assert.equal(0, r.code, r.remark)
        assert.is_nil(r.body and r.body:find("fake-broker", 1, true))
        -- an admin may register
        r = call(signed(register_cmd(), ADMIN))
        assert.equal(0, r.code, r.remark)
    end)

    fx_it("takes mqadmin's captured signed requests (JSON and ROCKETMQ headers), and refuses them changed", function()
        local n_ok = 0
        for _, name in ipairs({ "route-rocketmq-header.jsonl", "cluster-info.jsonl" }) do
            for _, row in ipairs(fixtures.frames(name)) do
                local ext = row.decoded.extFields
                if row.dir == "c2s" and type(ext) == "table" and ext.AccessKey == ADMIN then
                    -- re-sent as decoded: the Signature is the captured one
                    local cmd = assert(codec.decode(row.raw))
                    local r = call(cmd)
                    assert.is_not.equal(1, r.code, name .. ": " .. tostring(r.remark))
                    n_ok = n_ok + 1
                    if cmd.ext.topic then
                        cmd.ext.topic = cmd.ext.topic .. "X"
                        r = call(cmd)
                        assert.same({ 1, bad_sig(ADMIN) }, { r.code, r.remark })
                    end
                end
            end
        end
        assert.equal(3, n_ok)
    end)

    it("answers route reads to any valid account and refuses the rest", function()
        local r = call(signed({ code = 105, ext = { topic = "NoSuchTopic" } }, USER))
        assert.equal(17, r.code)
        r = call({ code = 105, ext = { topic = "NoSuchTopic" } })
        assert.same({ 1, NO_AK }, { r.code, r.remark })
        r = call(signed({ code = 105, ext = { topic = "NoSuchTopic" } }, USER, "bad-secret"))
        assert.same({ 1, bad_sig(USER) }, { r.code, r.remark })
    end)
end)

describe("ACL on the codes 4.9.8 lets through (rmq extension, as 5.x)", function()
    local env = own_broker()
    local store_util = require("support.store")

    setup(function()
        for _, t in ipairs({ "AclTopic", "AclDenied" }) do
            local r = env.call(signed(create_topic_cmd(t), ADMIN))
            assert.equal(0, r.code, r.remark)
        end
    end)

    local function max_offset(topic)
        local r = env.call(signed({ code = 30, ext = { topic = topic, queueId = "0" } }, ADMIN))
        assert.equal(0, r.code, r.remark)
        return r.ext.offset
    end

    it("refuses a batch send (320) to a topic a plain send (310) may not reach, storing nothing", function()
        local body = store_util.batch({ { body = "one" }, { body = "two" } })
        local function batch(topic)
            local cmd = send_cmd(topic, body)
            cmd.code = 320
            cmd.ext.i = "WAIT\1true"
            cmd.ext.m = "true"
            return signed(cmd, USER)
        end
        local r = env.call(signed(send_cmd("AclDenied"), USER))
        assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
        r = env.call(batch("AclDenied"))
        assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
        assert.equal("0", max_offset("AclDenied"))
        r = env.call(batch("AclTopic"))
        assert.equal(0, r.code, r.remark)
        assert.equal("2", max_offset("AclTopic"))
    end)

    it("checks offset queries, queue locks and transaction ends against the topic and group", function()
        local r = env.call(signed({ code = 14, ext = { consumerGroup = "AclGroup", topic = "AclDenied",
                                                        queueId = "0" } }, USER))
        assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
        r = env.call(signed({ code = 14, ext = { consumerGroup = "AclDeniedGroup", topic = "AclTopic",
                                                  queueId = "0" } }, USER))
        assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
        local function lock(code, group, topic)
            return signed({ code = code, body = cjson.encode({ consumerGroup = group, clientId = "acl-client",
                mqSet = { { topic = topic, brokerName = "broker-acl", queueId = 0 } } }) }, USER)
        end
        for _, code in ipairs({ 41, 42 }) do
            r = env.call(lock(code, "AclDeniedGroup", "AclTopic"))
            assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
            r = env.call(lock(code, "AclGroup", "AclDenied"))
            assert.same({ 1, no_perm("topic:AclDenied", 611) }, { r.code, r.remark })
        end
        r = env.call(lock(41, "AclGroup", "AclTopic"))
        assert.equal(0, r.code, r.remark)
        assert.truthy(r.body:find("AclTopic", 1, true))
        r = env.call(signed({ code = 37, ext = { producerGroup = "AclDeniedGroup", tranStateTableOffset = "0",
            commitLogOffset = "0", commitOrRollback = "8", fromTransactionCheck = "false", msgId = "x" } }, USER))
        assert.same({ 1, no_perm("group:AclDeniedGroup", 611) }, { r.code, r.remark })
    end)

    it("asks an admin for GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309)", function()
        for _, code in ipairs({ 307, 309 }) do
            local r = env.call(signed({ code = code, ext = { consumerGroup = "AclGroup", clientId = "acl-client",
                                                              msgId = "x", brokerName = "broker-acl" } }, USER))
            assert.same({ 1, need_admin(code, USER) }, { r.code, r.remark })
            r = env.call(signed({ code = code, ext = { consumerGroup = "AclGroup", clientId = "acl-client",
                                                        msgId = "x", brokerName = "broker-acl" } }, ADMIN))
            -- past the ACL: the processor answers (no such consumer online)
            assert.is_nil(tostring(r.remark):find("AclException", 1, true), r.remark)
        end
    end)
end)
