-- Server-side assignment (RocketMQ 5) with real processes: QUERY_ASSIGNMENT
-- splits a topic's queues between a group's consumers with the
-- strategy they name (rmq.policy.assignment, 5.x's doLoadBalance), in
-- the mode SET_MESSAGE_REQUEST_MODE set (kept across a restart in
-- messageRequestMode.json); a conf's assignmentPolicy replaces the rule.
local cjson = require("cjson")
local consumer = require("rmq.client.consumer")
local admin = require("support.admin")
local env = require("support.broker_consume_env")

local function member(e, group, topic, client_id)
    local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = group, clientId = client_id })
    c:subscribe(topic, "*")
    local n, refused = c:heartbeat()
    assert(n > 0 and #refused == 0, table.concat(refused, "; "))
    return c
end

local function query(addr, group, topic, client_id, strategy)
    local r = admin.call(addr, { code = 400, body = cjson.encode({
        topic = topic, consumerGroup = group, clientId = client_id,
        strategyName = strategy or "AVG", messageModel = "CLUSTERING" }) })
    assert.equal(0, r.code, r.remark)
    return cjson.decode(r.body).messageQueueAssignments
end

local function ids(list)
    local out = {}
    for _, a in ipairs(list) do
        out[#out + 1] = a.messageQueue.queueId
    end
    table.sort(out)
    return out
end

describe("server-side assignment", function()
    local e

    setup(function()
        e = env.start({ workers = 2 })
    end)

    teardown(function()
        assert.equal(0, (e:stop()))
    end)

    it("splits the queues between the group's consumers, PULL by default", function()
        admin.create_topic(e.addr, "AsgT", 4)
        e:route("AsgT", 4)
        local a = member(e, "AsgG", "AsgT", "10.0.0.1@a")
        local b = member(e, "AsgG", "AsgT", "10.0.0.2@b")
        local qa = query(e.addr, "AsgG", "AsgT", "10.0.0.1@a")
        local qb = query(e.addr, "AsgG", "AsgT", "10.0.0.2@b")
        assert.same({ 0, 1 }, ids(qa))
        assert.same({ 2, 3 }, ids(qb))
        assert.equal("PULL", qa[1].mode)
        assert.equal(env.BROKER, qa[1].messageQueue.brokerName)
        -- by circle
        assert.same({ 0, 2 }, ids(query(e.addr, "AsgG", "AsgT", "10.0.0.1@a", "AVG_BY_CIRCLE")))
        -- an unknown strategy: no answer (the client keeps what it has)
        assert.is_nil(query(e.addr, "AsgG", "AsgT", "10.0.0.1@a", "NOPE"))
        a:shutdown()
        b:shutdown()
    end)

    it("answers POP assignments after SET_MESSAGE_REQUEST_MODE, and keeps the mode across a restart", function()
        admin.create_topic(e.addr, "AsgP", 4)
        e:route("AsgP", 4)
        local r = admin.call(e.addr, { code = 401, body = cjson.encode({
            topic = "AsgP", consumerGroup = "AsgPG", mode = "POP", popShareQueueNum = -1 }) })
        assert.equal(0, r.code, r.remark)
        local a = member(e, "AsgPG", "AsgP", "10.0.0.1@a")
        local q = query(e.addr, "AsgPG", "AsgP", "10.0.0.1@a")
        assert.equal(1, #q)
        assert.equal(-1, q[1].messageQueue.queueId)
        assert.equal("POP", q[1].mode)
        -- popShareQueueNum 1 with two consumers of four queues: own two and the next one's
        r = admin.call(e.addr, { code = 401, body = cjson.encode({
            topic = "AsgP", consumerGroup = "AsgPG", mode = "POP", popShareQueueNum = 1 }) })
        assert.equal(0, r.code, r.remark)
        local b = member(e, "AsgPG", "AsgP", "10.0.0.2@b")
        assert.same({ 0, 1, 2, 3 }, ids(query(e.addr, "AsgPG", "AsgP", "10.0.0.1@a")))
        -- retry topics: refused as 5.x
        r = admin.call(e.addr, { code = 401, body = cjson.encode({
            topic = "%RETRY%AsgPG", consumerGroup = "AsgPG", mode = "POP" }) })
        assert.equal(16, r.code)
        assert.equal("retry topic is not allowed to set mode", r.remark)
        a:shutdown()
        b:shutdown()
        e:restart()
        r = admin.call(e.addr, { code = 402 })
        assert.equal(0, r.code, r.remark)
        local all = cjson.decode(r.body).messageRequestModeMap
        assert.equal("POP", all.AsgP.AsgPG.mode)
        assert.equal(1, all.AsgP.AsgPG.popShareQueueNum)
    end)

    it("takes the allocation from a conf's assignmentPolicy", function()
        e:restart({ conf = { luaSource = [[
            return { assignmentPolicy = function(facts)
                -- everything to the first consumer
                if facts.clientId == facts.consumers[1] then
                    return facts.queues
                end
                return {}
            end }
        ]] } })
        admin.create_topic(e.addr, "AsgX", 3)
        e:route("AsgX", 3)
        local a = member(e, "AsgXG", "AsgX", "10.0.0.1@a")
        local b = member(e, "AsgXG", "AsgX", "10.0.0.2@b")
        assert.same({ 0, 1, 2 }, ids(query(e.addr, "AsgXG", "AsgX", "10.0.0.1@a")))
        assert.same({}, ids(query(e.addr, "AsgXG", "AsgX", "10.0.0.2@b")))
        a:shutdown()
        b:shutdown()
    end)
end)
