-- CLEAN_UNUSED_TOPIC empties the consume queues of topics missing from
-- the topic table.  A slave's table lags the queues it replicates by a
-- sync period, so a slave refuses the request; and a queue whose last
-- message is newer than cleanUnusedTopicIdleTime is kept (a topic
-- deleted and sent to again, a table that lags).
local server = require("support.server")
local admin = require("support.admin")
local rq = require("support.requests")

local call, create_topic = admin.call, admin.create_topic
local CL = 1024 * 1024

local function send(addr, topic, body)
    local r = call(addr, rq.send({ group = "P", topic = topic, body = body }))
    assert.equal(0, r.code, r.remark)
end

-- min and max offset of topic@q (GET_MIN_OFFSET 31, GET_MAX_OFFSET 30).
local function offsets(addr, topic, q)
    local function one(code)
        local r = call(addr, { code = code, ext = { topic = topic, queueId = tostring(q) } })
        return r.code == 0 and tonumber(r.ext.offset) or nil
    end
    return { one(31), one(30) }
end

describe("CLEAN_UNUSED_TOPIC", function()
    local procs = {}
    local function start(conf)
        local p = server.start(conf)
        procs[#procs + 1] = p
        return p
    end
    after_each(function()
        for i = #procs, 1, -1 do
            procs[i]:stop()
        end
        procs = {}
    end)

    it("is refused by a slave, which keeps the queues it replicated before its topic table", function()
        local n = start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        local function bconf(id)
            return { role = "broker", workers = 2, brokerName = "broker-clean", brokerClusterName = "DefaultCluster",
                brokerId = id, brokerRole = id == 0 and "ASYNC_MASTER" or "SLAVE",
                storePathRootDir = server.tmpdir() .. "/store-" .. id, mappedFileSizeCommitLog = CL,
                namesrvAddr = n.addr, slaveSynchronizePeriodMillis = 600000, registerNameServerPeriod = 1000,
                cleanUnusedTopicIdleTime = 0 }
        end
        local m = start(bconf(0))
        local s = start(bconf(1))
        create_topic(m.addr, "FxCleanFresh", 1)
        for i = 1, 5 do
            send(m.addr, "FxCleanFresh", "b" .. i)
        end
        assert.truthy(server.eventually(function()
            return offsets(s.addr, "FxCleanFresh", 0)[2] == 5
        end, 15000), "the slave replicated the 5 messages")
        local r = call(s.addr, { code = 316 })
        assert.equal(11, r.code)   -- SLAVE_NOT_AVAILABLE
        assert.matches("slave", r.remark)
        assert.same({ 0, 5 }, offsets(s.addr, "FxCleanFresh", 0))
        -- The master, whose table has the topic, keeps it too.
        assert.equal(0, call(m.addr, { code = 316 }).code)
        assert.same({ 0, 5 }, offsets(m.addr, "FxCleanFresh", 0))
    end)

    it("keeps a queue whose last message is newer than cleanUnusedTopicIdleTime", function()
        local dir = server.tmpdir()
        local b = start({ role = "standalone", namesrvListenPort = 0, workers = 2, brokerName = "broker-clean",
            storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
            mappedFileSizeCommitLog = CL, mappedFileSizeConsumeQueue = 4 * 20 })
        create_topic(b.broker_addr, "FxCleanRecent", 1)
        for i = 1, 3 do
            send(b.broker_addr, "FxCleanRecent", "r" .. i)
        end
        assert.equal(0, call(b.broker_addr, { code = 215, ext = { topic = "FxCleanRecent" } }).code)
        assert.equal(0, call(b.broker_addr, { code = 316 }).code)
        assert.same({ 0, 3 }, offsets(b.broker_addr, "FxCleanRecent", 0))
        assert.truthy(server.eventually(function()
            return b:log():find("1 queues with a message newer than cleanUnusedTopicIdleTime kept", 1, true)
        end, 5000))
    end)
end)
