-- topics.json and subscriptionGroup.json through their journals: a
-- created topic or group is on disk before the admin reply (so a SIGKILL
-- right after keeps it), a deleted one stays deleted, and a clean stop
-- leaves the files whole, as a Java broker writes them, with no journal.
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")

local function topic_ext(topic)
    return { topic = topic, defaultTopic = "TBW102", readQueueNums = "3", writeQueueNums = "3",
             perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" }
end

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function topics_of(addr)
    return cjson.decode(call(addr, { code = 21 }).body).topicConfigTable
end

describe("broker config journals", function()
    local ns, store, b

    local function start()
        return server.start({ role = "broker", workers = 2, brokerName = "broker-j",
                              storePathRootDir = store, namesrvAddr = ns.addr,
                              mappedFileSizeCommitLog = 1024 * 1024 })
    end

    setup(function()
        ns = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        store = server.tmpdir() .. "/store"
        b = start()
    end)

    teardown(function()
        if b then b:stop() end
        ns:stop()
    end)

    it("keeps what was created and what was deleted across a SIGKILL", function()
        -- Let the start-up rewrite happen, so later changes go to the journal.
        net.sleep(1200)
        for i = 1, 50 do
            assert.equal(0, call(b.addr, { code = 17, ext = topic_ext("J" .. i) }).code)
        end
        local journal = server.read_file(store .. "/config/topics.json.journal")
        assert.truthy(journal:find('"topicName":"J50"', 1, true), "the creations went to the journal")
        assert.falsy(server.read_file(store .. "/config/topics.json"):find('"J50"', 1, true))
        -- A deletion rewrites the file (a journal cannot say "gone").
        assert.equal(0, call(b.addr, { code = 215, ext = { topic = "J7" } }).code)
        assert.equal("", server.read_file(store .. "/config/topics.json.journal"))
        for i = 51, 60 do
            assert.equal(0, call(b.addr, { code = 17, ext = topic_ext("J" .. i) }).code)
        end
        assert.equal(0, call(b.addr, { code = 200, body = cjson.encode({ groupName = "JGroup", retryMaxTimes = 3 }) }).code)
        b:kill()
        b = start()
        assert.matches("replayed from", b:log())
        local t = topics_of(b.addr)
        for i = 1, 60 do
            if i == 7 then
                assert.is_nil(t.J7, "J7 was deleted")
            else
                assert.truthy(t["J" .. i], "J" .. i)
                assert.equal(3, t["J" .. i].writeQueueNums)
            end
        end
        local groups = cjson.decode(call(b.addr, { code = 201 }).body).subscriptionGroupTable
        assert.equal(3, groups.JGroup.retryMaxTimes)
    end)

    it("leaves whole files and no journal after a clean stop", function()
        assert.equal(0, call(b.addr, { code = 17, ext = topic_ext("JLast") }).code)
        assert.equal(0, b:stop())
        b = nil
        assert.equal("", server.read_file(store .. "/config/topics.json.journal"))
        assert.equal("", server.read_file(store .. "/config/subscriptionGroup.json.journal"))
        local doc = cjson.decode(server.read_file(store .. "/config/topics.json"))
        assert.truthy(doc.topicConfigTable.JLast and doc.topicConfigTable.J50)
        assert.is_nil(doc.topicConfigTable.J7)
        b = start()
        assert.truthy(topics_of(b.addr).JLast)
    end)
end)
