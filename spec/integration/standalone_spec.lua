-- A standalone server (NameServer and broker in one process, what
-- scripts/run.sh starts): its broker is registered with its own
-- NameServer before READY, it serves a send, and SIGTERM stops it at
-- once (nothing waits for a request to its own, stopping, NameServer).
local net = require("rmq.net")
local core = require("rmq.core")
local cjson = require("cjson")
local server = require("support.server")
local rq = require("support.requests")

describe("a standalone server", function()
    it("is registered with its own NameServer before READY and stops at once", function()
        local dir = server.tmpdir()
        local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
                                 brokerName = "broker-sa", storePathRootDir = dir .. "/store",
                                 kvConfigPath = dir .. "/kv.json",
                                 mappedFileSizeCommitLog = 1024 * 1024 })
        -- No waiting: the route is there when READY is.
        local r = assert(net.call(s.addr, { code = 105, ext = { topic = "TBW102" } }, 5000))
        assert.equal(0, r.code, r.remark)
        local route = cjson.decode(r.body)
        assert.equal("broker-sa", route.brokerDatas[1].brokerName)
        local sent = assert(net.call(s.broker_addr,
                                     rq.send({ group = "SaGroup", topic = "SaTopic", body = "hello" }), 5000))
        assert.equal(0, sent.code, sent.remark)
        local t0 = core.mono_ms()
        assert.equal(0, s:stop())
        assert.is_true(core.mono_ms() - t0 < 5000, "stopping waited for something")
        assert.falsy(s:log():find("timeout", 1, true))
    end)

    it("routes a new consumer group's retry topic by the time its first heartbeat is answered", function()
        -- The client's rebalance, which the heartbeat's NOTIFY starts,
        -- looks the retry topic up at once (4.9.8 registers it first).
        local dir = server.tmpdir()
        local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 2,
                                 brokerName = "broker-sa", storePathRootDir = dir .. "/store",
                                 kvConfigPath = dir .. "/kv.json",
                                 mappedFileSizeCommitLog = 1024 * 1024 })
        local ok, err = pcall(function()
            local c = assert(net.connect(s.broker_addr))
            for i = 1, 5 do
                local group = "SaRetryGroup" .. i
                local hb = assert(c:call({ code = 34, body = cjson.encode({
                    clientID = "sa-client@" .. i,
                    consumerDataSet = { {
                        groupName = group, consumeType = "CONSUME_PASSIVELY",
                        messageModel = "CLUSTERING", consumeFromWhere = "CONSUME_FROM_LAST_OFFSET",
                        unitMode = false,
                        subscriptionDataSet = { { topic = "TBW102", subString = "*", tagsSet = {},
                                                  codeSet = {}, subVersion = 1, expressionType = "TAG",
                                                  classFilterMode = false } },
                    } },
                }) }))
                assert.equal(0, hb.code, hb.remark)
                local r = assert(net.call(s.addr, { code = 105, ext = { topic = "%RETRY%" .. group } }, 5000))
                assert.equal(0, r.code, group .. ": " .. tostring(r.remark))
            end
            c:close()
        end)
        assert.equal(0, s:stop())
        assert(ok, err)
    end)
end)
