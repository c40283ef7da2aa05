-- ali-ons 3.12 (the npm client, spec/interop/ali_ons) against a broker
-- with aclEnable: it signs every request (AccessKey, OnsChannel,
-- Signature over the sorted header fields' toString() and the body), so
-- with an account of plain_acl.yml it produces and consumes as without
-- ACL; with a wrong secret its requests are refused with 4.9.8's remark.
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local proc = require("rmq.proc")
local server = require("support.server")
local env = require("support.broker_consume_env")

local DIR = "spec/interop/ali_ons"
local TOPIC = "FxAliOnsAcl"
local GROUP = "FxAliOnsAclGroup"
local COUNT = 20

local YML = table.concat({
    "accounts:",
    "  - accessKey: AliOnsKey",
    "    secretKey: AliOnsSecret1",
    "    admin: false",
    "    defaultTopicPerm: DENY",
    "    defaultGroupPerm: DENY",
    "    topicPerms:",
    "      - " .. TOPIC .. "=PUB|SUB",
    "    groupPerms:",
    "      - " .. GROUP .. "=SUB",
    "  - accessKey: rocketmq2",
    "    secretKey: 12345678",
    "    admin: true",
    "",
}, "\n")

local function have_node()
    local ok = os.execute("command -v node >/dev/null 2>&1")
    local f = io.open(DIR .. "/node_modules/ali-ons/package.json", "r")
    if f then
        f:close()
    end
    return ok and f ~= nil
end

describe("ali-ons 3.12 against a broker with aclEnable", function()
    local e

    setup(function()
        local path = server.tmpdir() .. "/plain_acl.yml"
        local f = assert(io.open(path, "w"))
        f:write(YML)
        f:close()
        e = env.start({ workers = 2, aclEnable = true, aclFile = path })
        -- The topic, created by the admin account before the consumer
        -- subscribes (see interop_ali_ons_spec).
        local r = assert(net.call(e.addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4,
            perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false },
            credentials = { accessKey = "rocketmq2", secretKey = "12345678" } }, 5000))
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.eventually(function() return e:lookup(TOPIC) end, 3000))
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    -- Runs produce_consume.js with the credentials: exit status and its
    -- JSON line; `why` for assertion messages.
    local function run(ak, sk, name)
        local out, err = e.dir .. "/" .. name .. ".out", e.dir .. "/" .. name .. ".err"
        local p = assert(proc.spawn({
            file = "node", args = { "produce_consume.js" }, cwd = DIR, stdout = out, stderr = err,
            env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. e.dir,
                    "NAMESRV=" .. e.ns_addr, "TOPIC=" .. TOPIC, "GROUP=" .. GROUP, "COUNT=" .. COUNT,
                    "TIMEOUT_MS=30000", "ACCESS_KEY=" .. ak, "SECRET_KEY=" .. sk },
        }))
        local status = p:wait(45000)
        if status == nil then
            p:kill(9)
            p:wait(5000)
        end
        local text = server.read_file(out)
        local line = text:match("(%b{})%s*$")
        local why = ("exit %s\nstdout: %s\nstderr: %s\nbroker: %s"):format(tostring(status), text,
            server.read_file(err):sub(-3000), e.broker:log():sub(-3000))
        return status, line and cjson.decode(line), why
    end

    it("produces and consumes with its accessKey/secretKey, every message intact", function()
        assert.is_true(have_node(), "node and " .. DIR .. "/node_modules (npm ci) are needed")
        local status, res, why = run("AliOnsKey", "AliOnsSecret1", "signed")
        assert.equal(0, status, why)
        assert.truthy(res, why)
        assert.equal(COUNT, res.sent)
        assert.equal(COUNT, res.received)
        assert.equal(COUNT, res.intact)
    end)

    it("is refused with a wrong secret: 4.9.8's remark reaches the client", function()
        assert.is_true(have_node(), "node and " .. DIR .. "/node_modules (npm ci) are needed")
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
