-- 5.x topic attributes (docs/rocketmq5.md), with a real broker:
-- UPDATE_AND_CREATE_TOPIC's `attributes` modification (+k=v, -k) with
-- 5.x's rules and refusals, stored with the topic (across a restart),
-- returned by GET_TOPIC_CONFIG and GET_ALL_TOPIC_CONFIG; a topic without
-- attributes is written as 4.9.8 writes it.
local net = require("rmq.net")
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local env = require("support.broker_consume_env")
local server = require("support.server")

local req, resp = codes.request, codes.response

describe("topic attributes (5.x)", function()
    local e, c

    setup(function()
        e = env.start({ workers = 2 })
        c = assert(net.connect(e.addr))
    end)

    teardown(function()
        c:close()
        e:stop()
    end)

    local function create(topic, attributes)
        return assert(c:call({ code = req.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = topic, defaultTopic = "TBW102", readQueueNums = "4", writeQueueNums = "4",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false",
            attributes = attributes } }))
    end

    local function config(topic)
        local r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = { topic = topic } }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        return r.body
    end

    local function all_configs()
        local r = assert(c:call({ code = req.GET_ALL_TOPIC_CONFIG }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        return r.body
    end

    it("stores +message.type with the topic and returns it as 5.x writes it", function()
        local r = create("AttrFifo", "+message.type=FIFO")
        assert.equal(resp.SUCCESS, r.code, r.remark)
        assert.equal('{"attributes":{"message.type":"FIFO"},"order":false,"perm":6,"readQueueNums":4,'
            .. '"topicFilterType":"SINGLE_TAG","topicName":"AttrFifo","topicSysFlag":0,"writeQueueNums":4}',
            config("AttrFifo"))
        local all = all_configs()
        assert.truthy(all:find('"AttrFifo":{"attributes":{"message.type":"FIFO"},"order":false', 1, true))
        -- Its registration carries them; the NameServer routes it.
        assert.truthy(server.eventually(function() return e:lookup("AttrFifo") ~= nil end, 10000))
        -- A topic without attributes: 4.9.8's bytes (no "attributes").
        assert.equal(resp.SUCCESS, create("AttrNone").code)
        assert.truthy(all_configs():find('"AttrNone":{"order":false,"perm":6', 1, true))
    end)

    it("keeps the attributes through an update without them, changes and deletes them", function()
        assert.equal(resp.SUCCESS, create("AttrAlter", "+message.type=DELAY,+queue.type=SimpleCQ").code)
        assert.equal(resp.SUCCESS, create("AttrAlter").code)
        local t = fastjson.decode(config("AttrAlter"))
        assert.same({ ["message.type"] = "DELAY", ["queue.type"] = "SimpleCQ" }, t.attributes)
        assert.equal(resp.SUCCESS, create("AttrAlter", "+message.type=TRANSACTION").code)
        assert.equal("TRANSACTION", fastjson.decode(config("AttrAlter")).attributes["message.type"])
        assert.equal(resp.SUCCESS, create("AttrAlter", "-message.type").code)
        assert.same({ ["queue.type"] = "SimpleCQ" }, fastjson.decode(config("AttrAlter")).attributes)
    end)

    it("refuses what 5.x refuses, with its remarks, and changes nothing", function()
        assert.equal(resp.SUCCESS, create("AttrKeep", "+message.type=FIFO,+cleanup.policy=DELETE").code)
        local before = config("AttrKeep")
        local cases = {
            { "AttrNew1", "-message.type", resp.SYSTEM_ERROR,
              "only add attribute is supported while creating topic. key: message.type" },
            { "AttrNew2", "+message.type=BAD", resp.SYSTEM_ERROR,
              "value is not in set: [UNSPECIFIED, MIXED, TRANSACTION, FIFO, DELAY, NORMAL]" },
            { "AttrNew3", "+color=red", resp.SYSTEM_ERROR, "unsupported key: color" },
            { "AttrNew4", "message.type=FIFO", resp.SYSTEM_ERROR,
              "add/alter attribute format is wrong: message.type" },
            { "AttrNew5", "+message.type=FIFO,+message.type=NORMAL", resp.SYSTEM_ERROR,
              "key duplication: +message.type" },
            { "AttrNew6", "+message.type=MIXED", resp.INVALID_PARAMETER, "MIXED message type is not supported." },
            { "AttrNew7", "+queue.type=BatchCQ", resp.SYSTEM_ERROR, "attribute queue.type=BatchCQ is not served by rmq" },
            { "AttrKeep", "+queue.type=SimpleCQ", resp.SYSTEM_ERROR,
              "attempt to update an unchangeable attribute. key: queue.type" },
            { "AttrKeep", "-queue.type", resp.SYSTEM_ERROR, "attempt to delete a nonexistent key: queue.type" },
            { "AttrKeep", "+cleanup.policy=DELETE", resp.SYSTEM_ERROR,
              "attempt to update an unchangeable attribute. key: cleanup.policy" },
        }
        for _, k in ipairs(cases) do
            local r = create(k[1], k[2])
            assert.equal(k[3], r.code, k[2])
            assert.equal(k[4], r.remark, k[2])
        end
        for i = 1, 7 do
            local r = assert(c:call({ code = req.GET_TOPIC_CONFIG, ext = { topic = "AttrNew" .. i } }))
            assert.equal(resp.TOPIC_NOT_EXIST, r.code)
        end
        assert.equal(before, config("AttrKeep"))
    end)

    it("rmq admin updateTopic -a sets them and prints them as 5.x mqadmin does; a refusal is shown", function()
        local code, out = server.rmq(("admin updateTopic -n %s -b %s -t AttrCli -a +message.type=FIFO")
            :format(e.ns_addr, e.addr))
        assert.equal(0, code, out)
        assert.matches("create topic to " .. e.addr:gsub("%p", "%%%0") .. " success.", out)
        assert.matches("TopicConfig %[topicName=AttrCli, readQueueNums=8, writeQueueNums=8, perm=RW%-, "
            .. "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={%+message.type=FIFO}%]", out)
        assert.equal("FIFO", fastjson.decode(config("AttrCli")).attributes["message.type"])
        code, out = server.rmq(("admin updateTopic -n %s -b %s -t AttrCli -a +queue.type=BatchCQ")
            :format(e.ns_addr, e.addr))
        assert.is_not.equal(0, code)
        assert.matches("attempt to update an unchangeable attribute. key: queue.type", out, 1, true)
        -- Without -a: 4.9.8's line, and the attributes stay.
        code, out = server.rmq(("admin updateTopic -n %s -b %s -t AttrCli"):format(e.ns_addr, e.addr))
        assert.equal(0, code, out)
        assert.matches("order=false]", out, 1, true)
        assert.equal("FIFO", fastjson.decode(config("AttrCli")).attributes["message.type"])
    end)

    it("keeps the attributes across a restart", function()
        assert.equal(resp.SUCCESS, create("AttrDurable", "+message.type=NORMAL").code)
        c:close()
        e:restart()
        c = assert(net.connect(e.addr))
        assert.equal('{"attributes":{"message.type":"NORMAL"},"order":false,"perm":6,"readQueueNums":4,'
            .. '"topicFilterType":"SINGLE_TAG","topicName":"AttrDurable","topicSysFlag":0,"writeQueueNums":4}',
            config("AttrDurable"))
        assert.equal("FIFO", fastjson.decode(config("AttrFifo")).attributes["message.type"])
    end)
end)

describe("topic attributes in a compressed registration", function()
    it("reach the NameServer in the text form's sixth field, which it accepts", function()
        local e = env.start({ workers = 1, compressedRegister = true })
        local c = assert(net.connect(e.addr))
        local r = assert(c:call({ code = req.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = "AttrZ", defaultTopic = "TBW102", readQueueNums = "2", writeQueueNums = "2",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false",
            attributes = "+message.type=DELAY" } }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        assert.truthy(server.eventually(function() return e:lookup("AttrZ") ~= nil end, 10000))
        c:close()
        e:stop()
    end)
end)
