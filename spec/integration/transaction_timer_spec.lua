-- Timer messages inside transactions (RIP-43 with a half message), with
-- a real broker: a half message carrying a delivery time is held by the
-- timer once committed, not delivered early, and delivered within the
-- precision of its time; a time already past at the commit is delivered
-- at once; a rolled-back one never; a half message with a bad timer
-- field is refused at its send, naming the field.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function start(dir)
    return server.start({
        role = "standalone", namesrvListenPort = 0, workers = 2,
        brokerName = "broker-txt", storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
        mappedFileSizeCommitLog = 4 * 1024 * 1024, mappedFileSizeConsumeQueue = 20 * 1000,
        -- checks late enough not to decide the half messages themselves
        transactionCheckInterval = 60000, transactionTimeOut = 60000,
    })
end

local seq = 0

-- A half message (TRAN_MSG) to queue 0 with extra properties; the reply
-- and its commit log offset.
local function send_half(addr, topic, body, extra)
    seq = seq + 1
    local uniq = ("AAAA%028d"):format(seq)
    local r = call(addr, rq.send({ group = "FxTxtGroup", topic = topic, queues = 1, sysflag = 4, body = body,
        props = "TRAN_MSG\1true\2PGROUP\1FxTxtGroup\2UNIQ_KEY\1" .. uniq .. "\2WAIT\1true" .. (extra or "") }))
    if r.code ~= 0 then
        return r
    end
    local _, phy = message.decode_offset_msg_id(r.ext.msgId)
    return r, phy, uniq
end

local function end_tx(addr, r, phy, uniq, what)
    return call(addr, { code = 37, ext = {
        producerGroup = "FxTxtGroup", tranStateTableOffset = r.ext.queueOffset,
        commitLogOffset = tostring(phy), commitOrRollback = what, fromTransactionCheck = "false",
        msgId = uniq } })
end

local function drain(addr, topic)
    local r = call(addr, { code = 11, ext = {
        consumerGroup = "FxTxtReader", topic = topic, queueId = "0", queueOffset = "0",
        maxMsgNums = "32", sysFlag = "4", commitOffset = "0", suspendTimeoutMillis = "0",
        subscription = "*", subVersion = "0" } })
    if r.code ~= 0 then
        return {}
    end
    return message.decode_records(r.body)
end

describe("timer messages in transactions", function()
    local s

    setup(function()
        s = start(server.tmpdir())
        -- the topic, created by an ordinary send
        local r = call(s.broker_addr, rq.send({ group = "FxTxtGroup", topic = "FxTxtTopic", queues = 1,
                                                body = "first" }))
        assert.equal(0, r.code, r.remark)
    end)

    teardown(function()
        assert.equal(0, s:stop())
    end)

    it("holds a committed timer message until its time", function()
        local deliver = core.now_ms() + 3000
        local r, phy, uniq = send_half(s.broker_addr, "FxTxtTopic", "timed",
            "\2TIMER_DELIVER_MS\1" .. deliver)
        assert.equal(0, r.code, r.remark)
        local c = end_tx(s.broker_addr, r, phy, uniq, "8")
        assert.equal(0, c.code, c.remark)
        -- Committed, but not delivered early.
        local got
        while core.now_ms() < deliver - 500 do
            for _, m in ipairs(drain(s.broker_addr, "FxTxtTopic")) do
                assert.is_not.equal("timed", m.body, "delivered before its time")
            end
            net.sleep(200)
        end
        got = server.eventually(function()
            for _, m in ipairs(drain(s.broker_addr, "FxTxtTopic")) do
                if m.body == "timed" then
                    return m
                end
            end
        end, 15000)
        assert.truthy(got, "the committed timer message never arrived")
        assert.is_true(got.storeTimestamp >= deliver - 1000,
            ("stored at %d, due at %d"):format(got.storeTimestamp, deliver))
    end)

    it("delivers at once a timer whose time passed before the commit; never a rolled-back one", function()
        local r, phy, uniq = send_half(s.broker_addr, "FxTxtTopic", "late", "\2TIMER_DELAY_SEC\1" .. "1")
        assert.equal(0, r.code, r.remark)
        net.sleep(1500)
        assert.equal(0, end_tx(s.broker_addr, r, phy, uniq, "8").code)
        local r2, phy2, uniq2 = send_half(s.broker_addr, "FxTxtTopic", "rolled", "\2TIMER_DELAY_MS\1" .. "1500")
        assert.equal(0, r2.code, r2.remark)
        assert.equal(0, end_tx(s.broker_addr, r2, phy2, uniq2, "12").code)
        assert.truthy(server.eventually(function()
            for _, m in ipairs(drain(s.broker_addr, "FxTxtTopic")) do
                if m.body == "late" then
                    return true
                end
            end
        end, 5000), "the late timer message was not delivered at its commit")
        net.sleep(2500)
        for _, m in ipairs(drain(s.broker_addr, "FxTxtTopic")) do
            assert.is_not.equal("rolled", m.body)
        end
    end)

    it("refuses a half message whose timer field is bad, naming it", function()
        local r = send_half(s.broker_addr, "FxTxtTopic", "bad", "\2TIMER_DELAY_SEC\1" .. "soon")
        assert.equal(13, r.code)   -- MESSAGE_ILLEGAL
        assert.matches("TIMER_DELAY_SEC", r.remark, 1, true)
        r = send_half(s.broker_addr, "FxTxtTopic", "far", "\2TIMER_DELAY_SEC\1" .. tostring(10 * 86400))
        assert.equal(13, r.code)
        assert.matches("TIMER_DELAY_SEC", r.remark, 1, true)
    end)
end)
