-- A broker with tens of thousands of topics (real NameServer and broker
-- processes): 10,000 topics created through UPDATE_AND_CREATE_TOPIC and
-- 10,000 auto-created by their first send, with requests in flight on
-- many connections.  The broker stays up, every topic is routable from
-- the NameServer, topics.json holds them all, and a restart brings them
-- back.  (How fast each step is, is scripts/bench/topics.lua's job.)
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local load = require("support.load")
local rq = require("support.requests")

local ADMIN, AUTO = 10000, 10000

local function topic_ext(topic)
    return { topic = topic, defaultTopic = "TBW102", readQueueNums = "2", writeQueueNums = "2",
             perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" }
end

local function send_ext(topic)
    return rq.send_ext({ group = "ScaleGroup", topic = topic })
end

local function names(prefix, n)
    local out = {}
    for i = 1, n do
        out[i] = ("%s%05d"):format(prefix, i)
    end
    return out
end

describe("a broker with 20,000 topics #scale", function()
    local ns, b, store

    local function start_broker()
        return server.start({
            role = "broker", workers = 2, brokerName = "broker-scale",
            storePathRootDir = store, namesrvAddr = ns.addr,
            mappedFileSizeCommitLog = 16 * 1024 * 1024,
            mappedFileSizeConsumeQueue = 20 * 64,   -- 10,000 queue files stay small
            messageIndexEnable = false,
            -- 20,000 first sends from 32 clients, each creating its
            -- topic and queue files on the worker: on a loaded machine a
            -- frame can wait 200 ms behind the others of its loop
            -- iteration, and flow control (README "Flow control") answers
            -- it SYSTEM_BUSY, as 4.9.8 does a send queued that long.
            -- This spec is about scale, not latency.
            brokerFastFailureEnable = false,
        })
    end

    setup(function()
        store = server.tmpdir() .. "/store"
        ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        b = start_broker()
    end)

    teardown(function()
        if b then b:stop() end
        if ns then ns:stop() end
    end)

    it("creates them by admin request and by first send, and routes every one", function()
        local admin = load.run(b.addr, 32, names("ScaleAdmin", ADMIN), function(c, topic)
            local r = assert(c:call({ code = 17, ext = topic_ext(topic) }, 30000))
            assert(r.code == 0, r.remark)
        end)
        assert.same({}, admin.errors)
        assert.equal(ADMIN, admin.done)
        local auto = load.run(b.vip_addr, 32, names("ScaleAuto", AUTO), function(c, topic)
            local r = assert(c:call({ code = 310, ext = send_ext(topic), body = "x" }, 30000))
            assert(r.code == 0, r.remark)
        end)
        assert.same({}, auto.errors)
        assert.equal(AUTO, auto.done)
        assert.is_false(b.proc.exited)

        -- The broker's own table.
        local r = assert(net.call(b.addr, { code = 21 }, 30000))
        assert.equal(0, r.code)
        local tct = cjson.decode(r.body).topicConfigTable
        for _, t in ipairs({ "ScaleAdmin00001", "ScaleAdmin10000", "ScaleAuto00001", "ScaleAuto10000" }) do
            assert.truthy(tct[t], t)
        end
        assert.equal(2, tct.ScaleAdmin05000.writeQueueNums)
        assert.equal(4, tct.ScaleAuto05000.writeQueueNums)

        -- Every topic is known to the NameServer, once the registrations
        -- asked for have gone out (auto-create registers one-way).
        local want = {}
        for _, t in ipairs(names("ScaleAdmin", ADMIN)) do want[t] = true end
        for _, t in ipairs(names("ScaleAuto", AUTO)) do want[t] = true end
        local missing
        assert.truthy(server.eventually(function()
            local lr = net.call(ns.addr, { code = 206 }, 30000)
            if not lr or lr.code ~= 0 then return false end
            local have = {}
            for _, t in ipairs(cjson.decode(lr.body).topicList) do have[t] = true end
            missing = 0
            for t in pairs(want) do
                if not have[t] then missing = missing + 1 end
            end
            return missing == 0
        end, 30000), ("%s topics missing from the NameServer"):format(tostring(missing)))
        -- A sample of full routes, from both halves.
        local sample = {}
        for i = 1, ADMIN, 97 do sample[#sample + 1] = ("ScaleAdmin%05d"):format(i) end
        for i = 1, AUTO, 97 do sample[#sample + 1] = ("ScaleAuto%05d"):format(i) end
        local routes = load.run(ns.addr, 8, sample, function(c, topic)
            local rr = assert(c:call({ code = 105, ext = { topic = topic } }, 10000))
            assert(rr.code == 0, topic .. ": " .. tostring(rr.remark))
            local route = cjson.decode(rr.body)
            assert(route.queueDatas[1].brokerName == "broker-scale", topic)
        end)
        assert.same({}, routes.errors)
    end)

    it("keeps them all across a restart", function()
        assert.equal(0, b:stop())
        b = start_broker()
        local r = assert(net.call(b.addr, { code = 21 }, 30000))
        local tct = cjson.decode(r.body).topicConfigTable
        local n = 0
        for name in pairs(tct) do
            if name:match("^Scale") then n = n + 1 end
        end
        assert.equal(ADMIN + AUTO, n)
        -- And a send to one of them still works.
        local s = assert(net.call(b.addr, { code = 310, ext = send_ext("ScaleAuto00042"), body = "y" }, 10000))
        assert.equal(0, s.code, s.remark)
    end)

    -- A mapped file keeps no descriptor: a broker limited to 256 open
    -- files serves 1,000 queues (it used to fail the file after the
    -- limit and then refuse every put: "the store is read-only").
    it("serves more queues than it may open files", function()
        local small = server.start({
            role = "broker", workers = 1, brokerName = "broker-fds",
            storePathRootDir = server.tmpdir() .. "/store", namesrvAddr = ns.addr,
            mappedFileSizeCommitLog = 1024 * 1024, mappedFileSizeConsumeQueue = 20 * 64,
            messageIndexEnable = false,
        }, nil, { nofile = 256 })
        local res = load.run(small.addr, 8, names("FdTopic", 1000), function(c, topic)
            local r = assert(c:call({ code = 310, ext = send_ext(topic), body = "z" }, 30000))
            assert(r.code == 0, r.remark)
        end)
        assert.same({}, res.errors)
        assert.equal(1000, res.done)
        local r = assert(net.call(small.addr, { code = 310, ext = send_ext("FdTopic00001"), body = "again" }, 10000))
        assert.equal(0, r.code, r.remark)
        assert.equal(0, small:stop())
    end)
end)
