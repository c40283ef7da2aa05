-- ali-ons (the npm RocketMQ client, spec/interop/ali_ons) subscribing
-- with SQL92 against rmq with enablePropertyFilter: its push consumer
-- gets exactly the messages the expression matches
-- (spec/interop/ali_ons/sql92_filter.js).
local cjson = require("cjson")
local net = require("rmq.net")
local codes = require("rmq.codes")
local proc = require("rmq.proc")
local server = require("support.server")
local env = require("support.broker_consume_env")

local DIR = "spec/interop/ali_ons"
local TOPIC = "FxAliOnsSql"
local COUNT = 30

describe("ali-ons SQL92 subscription against rmq", function()
    local e

    setup(function()
        e = env.start({ workers = 2, enablePropertyFilter = true })
    end)

    teardown(function()
        if e then
            e:stop()
        end
    end)

    it("delivers only the messages the expression matches", function()
        local f = io.open(DIR .. "/node_modules/ali-ons/package.json", "r")
        assert.truthy(f and os.execute("command -v node >/dev/null 2>&1"),
                      "node and " .. DIR .. "/node_modules (npm ci) are needed")
        f:close()
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = 4, writeQueueNums = 4,
            perm = 6, topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }))
        conn:close()
        assert.equal(0, r.code, r.remark)
        assert.truthy(server.eventually(function() return e:lookup(TOPIC) end, 3000))
        local want = {}
        for i = 0, COUNT - 1 do
            if i >= 5 and i <= 20 and i % 2 == 1 then
                want[#want + 1] = i
            end
        end
        local out = e.dir .. "/ali-ons-sql.out"
        local p = assert(proc.spawn({
            file = "node", args = { "sql92_filter.js" }, cwd = DIR,
            stdout = out, stderr = e.dir .. "/ali-ons-sql.err",
            env = { "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin"), "HOME=" .. e.dir,
                    "NAMESRV=" .. e.ns_addr, "TOPIC=" .. TOPIC, "GROUP=FxAliOnsSqlGroup",
                    "COUNT=" .. COUNT, "EXPR=a BETWEEN 5 AND 20 AND TAGS = 'TagOdd'",
                    "EXPECTED=" .. #want, "TIMEOUT_MS=60000" },
        }))
        local status = p:wait(90000)
        if status == nil then
            p:kill(9)
            p:wait(5000)
        end
        local text = server.read_file(out)
        local why = ("exit %s\nstdout: %s\nstderr: %s\nbroker: %s"):format(tostring(status), text,
            server.read_file(e.dir .. "/ali-ons-sql.err"):sub(-3000), e.broker:log():sub(-3000))
        assert.equal(0, status, why)
        local res = assert(cjson.decode(text:match("(%b{})%s*$") or "null"), why)
        assert.equal(COUNT, res.sent)
        assert.same(want, res.received)
    end)
end)
