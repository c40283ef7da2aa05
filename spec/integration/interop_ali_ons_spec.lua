-- rmq driven by a RocketMQ client nobody on this team wrote: ali-ons, the
-- npm package (spec/interop/ali_ons, installed by scripts/test.sh).  Its
-- unmodified producer and push consumer go through a real NameServer to
-- a real broker (two processes on loopback): spec/interop/ali_ons/
-- produce_consume.js sends COUNT messages, consumes them back and prints
-- one JSON line; it exits 0 only when every message came back intact.
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local proc = require("rmq.proc")
local server = require("support.server")
local env = require("support.broker_consume_env")

local DIR = "spec/interop/ali_ons"
local TOPIC = "FxAliOns"
local GROUP = "FxAliOnsGroup"
local COUNT = 40

local function have_node()
    local ok = os.execute("command -v node >/dev/null 2>&1")
    local f = io.open(DIR .. "/node_modules/ali-ons/package.json", "r")
    if f then
        f:close()
    end
    return ok and f ~= nil
end

describe("ali-ons 3.12 against rmq", function()
    local e

    setup(function()
        e = env.start({ workers = 2 })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    it("produces and consumes through the NameServer, every message intact", function()
        assert.is_true(have_node(), "node and " .. DIR .. "/node_modules (npm ci) are needed")
        -- The topic exists before the consumer subscribes (ali-ons would
        -- otherwise find its route only at its next 30 s poll): created
        -- as mqadmin updateTopic does, which registers it at once.
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4,
            perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }))
        conn:close()
        assert.equal(0, r.code, r.remark)
        local route = server.eventually(function() return e:lookup(TOPIC) end, 3000)
        assert.truthy(route, "the broker did not register " .. TOPIC .. " with the NameServer")
        local out = e.dir .. "/ali-ons.out"
        local p = assert(proc.spawn({
            file = "node", args = { "produce_consume.js" }, cwd = DIR,
            stdout = out, stderr = e.dir .. "/ali-ons.err",
            env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"),
                    "HOME=" .. e.dir,
                    "NAMESRV=" .. e.ns_addr, "TOPIC=" .. TOPIC, "GROUP=" .. GROUP,
                    "COUNT=" .. COUNT, "TIMEOUT_MS=60000" },
        }))
        local status = p:wait(90000)
        if status == nil then
            p:kill(9)
            p:wait(5000)
        end
        local text = server.read_file(out)
        local line = text:match("(%b{})%s*$")
        local why = ("exit %s\nstdout: %s\nstderr: %s\nbroker: %s"):format(tostring(status), text,
            server.read_file(e.dir .. "/ali-ons.err"):sub(-3000), e.broker:log():sub(-3000))
        assert.equal(0, status, why)
        local res = assert(line and cjson.decode(line), why)
        assert.equal(COUNT, res.sent)
        assert.equal(COUNT, res.received)
        assert.equal(COUNT, res.intact)
        assert.equal(4, res.queues)
        assert.matches("^%x+$", res.firstMsgId)
    end)
end)
