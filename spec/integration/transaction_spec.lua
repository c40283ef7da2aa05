-- Transactions end to end (protocol.md 4.11, 6.4): a standalone server
-- and the project's transactional producer.  Committed messages reach
-- the real topic once, rolled back ones never; undecided ones are asked
-- about with CHECK_TRANSACTION_STATE and the answer decides them; a
-- producer that is gone gets its half messages moved to
-- TRANS_CHECK_MAX_TIME_TOPIC after transactionCheckMax checks; a restart
-- between half and commit loses nothing; bad END_TRANSACTION requests
-- change nothing.
local net = require("rmq.net")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")
local message = require("rmq.client.message")
local transaction = require("rmq.client.transaction")

local CL = 1024 * 1024

local function start(dir, extra)
    local conf = {
        role = "standalone", namesrvListenPort = 0, workers = 2,
        brokerName = "broker-tx", storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
        mappedFileSizeCommitLog = CL, mappedFileSizeConsumeQueue = 20 * 1000,
        transactionCheckInterval = 300, transactionTimeOut = 600, transactionCheckMax = 3,
        flushConsumerOffsetInterval = 200,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function call(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

-- decode(body) of every pull of topic's queues 0..3 from offset 0, joined.
local function pull_all(addr, topic, decode)
    local out = {}
    for q = 0, 3 do
        local r = call(addr, { code = 11, ext = {
            consumerGroup = "FxTxReader", topic = topic, queueId = tostring(q), queueOffset = "0",
            maxMsgNums = "64", sysFlag = "4", commitOffset = "0", suspendTimeoutMillis = "0",
            subscription = "*", subVersion = "0" } })
        if r.code == 0 then
            for _, m in ipairs(assert(decode(r.body))) do
                out[#out + 1] = m
            end
        end
    end
    return out
end

-- Every message of topic's queues 0..3, as a consumer decodes them.
local function drain(addr, topic)
    return pull_all(addr, topic, message.decode_records)
end

-- The messages of topic once there are at least n, or false after ms.
local function arrived(addr, topic, n, ms)
    return server.eventually(function()
        local m = drain(addr, topic)
        return #m >= n and m
    end, ms)
end

local function bodies(msgs)
    local t = {}
    for _, m in ipairs(msgs) do
        t[#t + 1] = m.body
    end
    table.sort(t)
    return table.concat(t, ",")
end

local function max_offset(addr, topic)
    local r = call(addr, { code = 30, ext = { topic = topic, queueId = "0" } })
    return r.code == 0 and tonumber(r.ext.offset) or 0
end

-- A half message sent by hand (SEND_MESSAGE_V2, TRAN_MSG, sysFlag 4):
-- the reply and the offsets END_TRANSACTION names.
local function send_half(addr, group, topic, body, uniq)
    local r = call(addr, rq.send({ group = group, topic = topic, qid = 1, sysflag = 4, body = body,
        props = "TRAN_MSG\1true\2PGROUP\1" .. group .. "\2UNIQ_KEY\1" .. uniq .. "\2WAIT\1true" }))
    assert.equal(0, r.code, r.remark)
    local _, phy = message.decode_offset_msg_id(r.ext.msgId)
    return r, phy
end

local function end_tx(addr, ext)
    return net.call(addr, { code = 37, ext = ext }, 5000)
end

describe("transactions", function()
    local s, dir

    before_each(function()
        dir = server.tmpdir()
        s = start(dir)
    end)

    after_each(function()
        if s then
            s:stop()
        end
    end)

    local function producer(group, check)
        return transaction.new({ namesrvAddr = s.addr, producerGroup = group, check = check })
    end

    -- The positive signal that the check service went over every half
    -- message there is now: a barrier half message sent now, left
    -- undecided, is asked about only by a check round after
    -- transactionTimeOut, and a round reads the half queue in order, so
    -- by then every earlier one was looked at again.  Its producer rolls
    -- it back: no message, one op record.
    local barriers = 0
    local function check_round_passed()
        barriers = barriers + 1
        local asked = false
        local bp = producer("FxTxBarrier" .. barriers, function()
            asked = true
            return "ROLLBACK"
        end)
        assert(bp:send_in_transaction({ topic = "FxTxBarrier", body = "barrier" }, function() return "UNKNOWN" end))
        assert(server.eventually(function() return asked end, 20000), "the check service never reached the barrier")
        bp:shutdown()
    end

    it("delivers a committed message once and a rolled-back one never", function()
        local checked = 0
        local tp = producer("FxTxGroup", function() checked = checked + 1; return "UNKNOWN" end)
        local ran
        local r = assert(tp:send_in_transaction({ topic = "FxTxTopic", body = "committed", tags = "TagT" },
            function(msg, arg) ran = arg .. ":" .. msg.body; return "COMMIT" end, "local"))
        assert.equal("SEND_OK", r.status)
        assert.equal("COMMIT", r.localTransactionState)
        assert.equal("local:committed", ran)
        local r2 = assert(tp:send_in_transaction({ topic = "FxTxTopic", body = "rolledback" },
            function() return "ROLLBACK" end))
        assert.equal("ROLLBACK", r2.localTransactionState)
        local got = arrived(s.broker_addr, "FxTxTopic", 1, 5000)
        assert.truthy(got, "the committed message never arrived")
        -- Both decisions recorded as op messages.
        assert(server.eventually(function() return max_offset(s.broker_addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC") >= 2 end,
            10000))
        assert.equal(2, max_offset(s.broker_addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC"))
        -- A check round later: still exactly the committed one.
        check_round_passed()
        got = drain(s.broker_addr, "FxTxTopic")
        assert.equal("committed", bodies(got))
        local m = got[1]
        assert.equal(r.msgId, m.msgId)   -- the client's id survives
        assert.equal("TagT", m.tags)
        assert.equal(r.queue.queueId, m.queueId)
        assert.equal(8, m.sysFlag & 0xC)
        assert.equal("true", m.properties.TRAN_MSG)
        assert.equal(0, checked, "a decided transaction was checked")
        tp:shutdown()
    end)

    it("commits and rolls back from the command line (rmq send --transaction)", function()
        local function rmq(args)
            local p = io.popen(server.home_prefix() .. server.build .. "/rmq send -n " .. s.addr .. " -t FxTxCli " .. args .. " 2>&1")
            local out = p:read("a")
            local _, _, code = p:close()
            return code, out
        end
        local code, out = rmq("--transaction commit yes")
        assert.equal(0, code, out)
        assert.matches("^SEND_OK .* transaction=COMMIT", out)
        code, out = rmq("--transaction ROLLBACK no")
        assert.equal(0, code, out)
        assert.matches("transaction=ROLLBACK", out)
        code, out = rmq("--transaction maybe no")
        assert.equal(2, code)
        assert.matches("commit or rollback", out)
        assert.truthy(arrived(s.broker_addr, "FxTxCli", 1, 5000))
        -- The rollback was handled: its op record is there (the commit's
        -- is the other).
        assert(server.eventually(function() return max_offset(s.broker_addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC") >= 2 end,
            10000), "the rollback was never recorded")
        assert.equal("yes", bodies(drain(s.broker_addr, "FxTxCli")))
    end)

    it("asks about an unknown transaction and commits it on the producer's answer", function()
        local asked = {}
        local tp = producer("FxTxCheckCommit", function(msg)
            asked[#asked + 1] = msg
            return "COMMIT"
        end)
        local r = assert(tp:send_in_transaction({ topic = "FxTxCheck", body = "later", keys = "k1" },
            function() return "UNKNOWN" end))
        assert.same({}, drain(s.broker_addr, "FxTxCheck"))
        local got = arrived(s.broker_addr, "FxTxCheck", 1, 8000)
        assert.truthy(got, "never checked back:\n" .. s:log())
        check_round_passed()
        got = drain(s.broker_addr, "FxTxCheck")
        assert.equal("later", bodies(got))
        assert.equal(1, #asked)
        -- The check names the real topic, queue and the client's id.
        assert.equal("FxTxCheck", asked[1].topic)
        assert.equal(r.queue.queueId, asked[1].queueId)
        assert.equal(r.msgId, asked[1].msgId)
        assert.equal("later", asked[1].body)
        assert.equal("k1", asked[1].keys)
        assert.equal(r.msgId, got[1].msgId)
        tp:shutdown()
    end)

    it("ages half messages by the broker's clock, not a skewed producer's", function()
        local asked = 0
        local tp = producer("FxTxSkew", function()
            asked = asked + 1
            return "COMMIT"
        end)
        -- The producer's clock is 100 hours behind (fileReservedTime is
        -- 72): its bornTimestamp says the half message is long expired.
        local now_ms = core.now_ms
        core.now_ms = function() return now_ms() - 100 * 3600 * 1000 end
        local ok, r = pcall(tp.send_in_transaction, tp, { topic = "FxTxSkewT", body = "skewed" },
            function() return "UNKNOWN" end)
        core.now_ms = now_ms
        assert(ok, r)
        assert.equal("SEND_OK", assert(r).status)
        local got = arrived(s.broker_addr, "FxTxSkewT", 1, 8000)
        assert.truthy(got, "the half message was not checked:\n" .. s:log())
        assert.equal("skewed", bodies(got))
        assert.equal(1, asked)
        assert.is_nil(s:log():find("discarded after 0 checks", 1, true))
        tp:shutdown()
    end)

    it("asks about an unknown transaction and drops it on a rollback answer", function()
        local asked = 0
        local tp = producer("FxTxCheckRollback", function() asked = asked + 1; return "ROLLBACK" end)
        assert(tp:send_in_transaction({ topic = "FxTxCheckRb", body = "never" }, function() return "UNKNOWN" end))
        assert.truthy(server.eventually(function() return asked > 0 end, 8000), "never checked back")
        check_round_passed()
        assert.equal(1, asked)
        assert.same({}, drain(s.broker_addr, "FxTxCheckRb"))
        assert.equal(0, max_offset(s.broker_addr, "TRANS_CHECK_MAX_TIME_TOPIC"))
        tp:shutdown()
    end)

    it("checks a transaction whose producer is gone up to the limit, then discards it", function()
        local tp = producer("FxTxGone", function() return "UNKNOWN" end)
        local r = assert(tp:send_in_transaction({ topic = "FxTxGoneTopic", body = "orphan" },
            function() return "UNKNOWN" end))
        tp:shutdown()
        local got = arrived(s.broker_addr, "TRANS_CHECK_MAX_TIME_TOPIC", 1, 10000)
        assert.truthy(got, "never discarded:\n" .. s:log())
        assert.equal(1, #got)
        assert.equal("orphan", got[1].body)
        assert.equal(r.msgId, got[1].msgId)
        assert.equal("3", got[1].properties.TRANSACTION_CHECK_TIMES)
        assert.equal("FxTxGoneTopic", got[1].properties.REAL_TOPIC)
        assert.same({}, drain(s.broker_addr, "FxTxGoneTopic"))
        assert.matches("discarded after 3 checks", s:log(), 1, true)
        check_round_passed()
        assert.equal(1, #drain(s.broker_addr, "TRANS_CHECK_MAX_TIME_TOPIC"))
    end)

    it("loses no half message and no decision across a restart", function()
        s:stop()
        s = start(dir, { transactionCheckInterval = 60000 })
        local _, phy_a = send_half(s.broker_addr, "FxTxRestart", "FxTxRestartTopic", "a", "AAAA0000000000000000000000000001")
        local _, phy_b = send_half(s.broker_addr, "FxTxRestart", "FxTxRestartTopic", "b", "AAAA0000000000000000000000000002")
        local ra = call(s.broker_addr, { code = 30, ext = { topic = "RMQ_SYS_TRANS_HALF_TOPIC", queueId = "0" } })
        assert.equal("2", ra.ext.offset)
        -- a committed before the restart, b only half.
        local c = assert(end_tx(s.broker_addr, {
            producerGroup = "FxTxRestart", tranStateTableOffset = "0", commitLogOffset = tostring(phy_a),
            commitOrRollback = "8", fromTransactionCheck = "false", msgId = "AAAA0000000000000000000000000001" }))
        assert.equal(0, c.code, c.remark)
        assert.equal(0, s:stop())
        s = start(dir)
        -- b: decided after the restart by a check; a: never asked again.
        local asked = {}
        local tp = producer("FxTxRestart", function(msg)
            asked[#asked + 1] = msg.body
            return "COMMIT"
        end)
        assert(tp:register("FxTxRestartTopic"))
        local got = arrived(s.broker_addr, "FxTxRestartTopic", 2, 8000)
        assert.truthy(got, "b was lost:\n" .. s:log())
        check_round_passed()
        assert.equal("a,b", bodies(drain(s.broker_addr, "FxTxRestartTopic")))
        assert.same({ "b" }, asked)
        tp:shutdown()
        -- b's END_TRANSACTION from before the restart, late: refused now.
        local late = assert(end_tx(s.broker_addr, {
            producerGroup = "FxTxRestart", tranStateTableOffset = "1", commitLogOffset = tostring(phy_b),
            commitOrRollback = "8", msgId = "AAAA0000000000000000000000000002" }))
        assert.equal(1, late.code)
        assert.equal("a,b", bodies(drain(s.broker_addr, "FxTxRestartTopic")))
        -- The check's progress is kept as CID_RMQ_SYS_TRANS's offsets: a
        -- third run asks about nothing again.
        assert.equal(0, s:stop())
        local offsets_json = server.read_file(dir .. "/store/config/consumerOffset.json")
        assert.matches('"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS"', offsets_json, 1, true)
        assert.matches('"RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS"', offsets_json, 1, true)
        s = start(dir)
        local again = producer("FxTxRestart", function(msg)
            asked[#asked + 1] = msg.body
            return "COMMIT"
        end)
        assert(again:register("FxTxRestartTopic"))
        check_round_passed()
        assert.same({ "b" }, asked)
        assert.equal("a,b", bodies(drain(s.broker_addr, "FxTxRestartTopic")))
        again:shutdown()
    end)

    it("refuses bad END_TRANSACTION requests and changes nothing", function()
        s:stop()
        s = start(dir, { transactionCheckInterval = 60000 })
        local addr = s.broker_addr
        local G, U = "FxTxBad", "BBBB0000000000000000000000000001"
        local r, phy = send_half(addr, G, "FxTxBadTopic", "x", U)
        local plain = call(addr, rq.send({ group = G, topic = "FxTxBadTopic", props = "PGROUP\1" .. G,
                                           body = "plain" }))
        assert.equal(0, plain.code)
        local _, plain_phy = message.decode_offset_msg_id(plain.ext.msgId)
        local good = { producerGroup = G, tranStateTableOffset = r.ext.queueOffset,
                       commitLogOffset = tostring(phy), commitOrRollback = "8", msgId = U }
        local function with(changes)
            local t = {}
            for k, v in pairs(good) do
                t[k] = v
            end
            for k, v in pairs(changes) do
                t[k] = v ~= false and v or nil
            end
            return t
        end
        local cases = {
            { { commitLogOffset = "99999999999" }, "Find prepared transaction message failed" },
            { { commitLogOffset = "-5" }, "commitLogOffset" },
            { { commitLogOffset = tostring(phy + 3) }, "Find prepared transaction message failed" },
            { { commitLogOffset = tostring(plain_phy) }, "Find prepared transaction message failed" },
            { { producerGroup = "Other" }, "The producer group wrong" },
            { { tranStateTableOffset = "7" }, "The transaction state table offset wrong" },
            { { commitOrRollback = "5" }, "commitOrRollback 5" },
            { { commitOrRollback = "commit" }, "commitOrRollback" },
            { { commitLogOffset = false }, "commitLogOffset" },
            { { msgId = false }, "msgId" },
        }
        for _, case in ipairs(cases) do
            local a = assert(end_tx(addr, with(case[1])))
            assert.equal(1, a.code, case[2])
            assert.matches(case[2], a.remark, 1, true)
            assert.falsy(a.remark:find("traceback", 1, true))
        end
        -- Unknown (0): no reply, nothing decided.
        assert.is_nil((end_tx(addr, with({ commitOrRollback = "0" }))))
        assert.equal("plain", bodies(drain(addr, "FxTxBadTopic")))
        assert.equal(0, max_offset(addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC"))
        -- The half message is still there to decide, once.
        local ok = assert(end_tx(addr, good))
        assert.equal(0, ok.code, ok.remark)
        local again = assert(end_tx(addr, with({ commitOrRollback = "12" })))
        assert.equal(1, again.code)
        assert.matches("already decided", again.remark, 1, true)
        assert.equal("plain,x", bodies(drain(addr, "FxTxBadTopic")))
        assert.equal(1, max_offset(addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC"))
    end)

    it("stores half messages the same in C and in Lua (nativeProcessors = false)", function()
        local compare = require("support.native_compare")
        s:stop()
        local lua_s = start(dir .. "/lua", { nativeProcessors = false, transactionCheckInterval = 60000 })
        s = start(dir .. "/native", { transactionCheckInterval = 60000 })
        local ok, err = pcall(function()
            local cases = {
                { "4", "TRAN_MSG\1true\2PGROUP\1G\2TAGS\1TagH" },   -- creates the half topic (Lua both)
                { "4", "TRAN_MSG\1true\2PGROUP\1G\2KEYS\1k" },
                { "0", "TRAN_MSG\1TRUE\2PGROUP\1G" },               -- TRAN_MSG decides, not the sysFlag
                { "5", "TRAN_MSG\1true\2PGROUP\1G" },               -- compressed bit kept
                { "4", "TRAN_MSG\1true\2PGROUP\1G\2DELAY\0013" },  -- no schedule detour
                { "4", "REAL_TOPIC\1x\2TRAN_MSG\1true\2PGROUP\1G" },
                { "4", "TRAN_MSG\1false\2PGROUP\1G" },              -- a bare prepared flag
                { "12", "TRAN_MSG\1true\2PGROUP\1G" },
                { "4", "TRAN_MSG\1true\2TRAN_MSG\1no" },           -- the last pair wins
            }
            for i, case in ipairs(cases) do
                local function send(addr)
                    return call(addr, rq.send({ group = "G", topic = "FxTxSame", qid = 2, sysflag = case[1],
                                                born = 1700000000000, props = case[2], body = "b" .. i }))
                end
                local a, b = send(s.broker_addr), send(lua_s.broker_addr)
                assert.same(compare.comparable(b), compare.comparable(a), "case " .. i)
            end
            for _, topic in ipairs({ "RMQ_SYS_TRANS_HALF_TOPIC", "FxTxSame", "SCHEDULE_TOPIC_XXXX" }) do
                local function records(addr)
                    local out = pull_all(addr, topic, compare.records)   -- as stored
                    for _, m in ipairs(out) do
                        m.commitLogOffset = nil   -- the stores differ in what came before
                    end
                    return out
                end
                assert.same(records(lua_s.broker_addr), records(s.broker_addr), topic)
            end
            assert.equal(7, max_offset(s.broker_addr, "RMQ_SYS_TRANS_HALF_TOPIC"))
        end)
        lua_s:stop()
        assert(ok, err)
    end)

    it("refuses half messages with rejectTransactionMessage", function()
        s:stop()
        s = start(dir, { rejectTransactionMessage = true })
        local r = call(s.broker_addr, rq.send({ group = "G", topic = "FxTxRejected", sysflag = 4,
                                                props = "TRAN_MSG\1true\2PGROUP\1G", body = "x" }))
        assert.equal(16, r.code)
        assert.matches("sending transaction message is forbidden", r.remark, 1, true)
        assert.equal(0, max_offset(s.broker_addr, "RMQ_SYS_TRANS_HALF_TOPIC"))
    end)

    it("refuses END_TRANSACTION on a slave", function()
        local slave = server.start({
            role = "broker", workers = 1, brokerName = "broker-tx", brokerId = 1, brokerRole = "SLAVE",
            storePathRootDir = dir .. "/slave", mappedFileSizeCommitLog = CL, namesrvAddr = "127.0.0.1:1",
        })
        local ok, err = pcall(function()
            local r = assert(end_tx(slave.addr, {
                producerGroup = "G", tranStateTableOffset = "0", commitLogOffset = "0",
                commitOrRollback = "8", msgId = "CCCC0000000000000000000000000001" }))
            assert.equal(11, r.code)
            assert.matches("slave", r.remark, 1, true)
        end)
        slave:stop()
        assert(ok, err)
    end)
end)
