-- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: one orderly consumer per queue.
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")

local function body(client, queues)
    local set = {}
    for _, q in ipairs(queues) do
        set[#set + 1] = { topic = "FxOrder", brokerName = "broker-a", queueId = q }
    end
    return cjson.encode({ consumerGroup = "FxOrderGroup", clientId = client, mqSet = set })
end

local function locked(c, client, queues)
    local r = assert(c:call({ code = 41, body = body(client, queues) }))
    assert.equal(0, r.code)
    local got = {}
    for _, mq in ipairs(cjson.decode(r.body).lockOKMQSet) do
        got[#got + 1] = math.tointeger(mq.queueId)
    end
    table.sort(got)
    return table.concat(got, ",")
end

describe("broker queue locks", function()
    local s, a, b

    setup(function()
        s = server.start({ role = "broker", workers = 2, brokerName = "broker-a",
                           storePathRootDir = server.tmpdir() .. "/store", namesrvAddr = "127.0.0.1:1",
                           rebalanceLockMaxLiveTime = 300 })
        a = assert(net.connect(s.addr))
        b = assert(net.connect(s.addr))
    end)

    teardown(function()
        a:close()
        b:close()
        s:stop()
    end)

    it("grants free queues, refuses queues another client holds, renews its own", function()
        assert.equal("0,1", locked(a, "client-a", { 0, 1 }))
        assert.equal("2", locked(b, "client-b", { 0, 1, 2 }))
        assert.equal("0,1", locked(a, "client-a", { 0, 1 }))  -- renewal
    end)

    it("releases on UNLOCK only for the holder", function()
        assert(b:call({ code = 42, body = body("client-b", { 0 }) }))  -- not b's: no effect
        assert.equal("", locked(b, "client-b", { 0 }))
        assert.equal(0, assert(a:call({ code = 42, body = body("client-a", { 0 }) })).code)
        assert.equal("0", locked(b, "client-b", { 0 }))
    end)

    it("lets a lock lapse after rebalanceLockMaxLiveTime without renewal", function()
        assert.equal("5", locked(a, "client-a", { 5 }))
        assert.equal("", locked(b, "client-b", { 5 }))
        -- b's own tries renew nothing of a's: the lock is b's once a's lapses.
        assert.truthy(server.eventually(function() return locked(b, "client-b", { 5 }) == "5" end, 10000),
            "a's lock never lapsed")
    end)

    it("answers a malformed body with SYSTEM_ERROR and keeps serving", function()
        local r = assert(a:call({ code = 41, body = "{not json" }))
        assert.equal(1, r.code)
        assert.matches("bad body", r.remark)
        assert.equal("7", locked(a, "client-a", { 7 }))
    end)
end)
