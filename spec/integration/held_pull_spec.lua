-- The long poll held in C (src/broker/pull_processor.c, issue 27): a
-- PULL_MESSAGE with FLAG_SUSPEND that finds nothing new is held by the
-- native processor (no Lua task), woken by a send to its queue, re-read at
-- each pullHoldRecheckMillis, answered at its deadline.  What a consumer
-- can see of it: its commitOffset is stored once, when the pull arrives
-- (not again when it is answered); the hold is the client's
-- suspendTimeoutMillis capped by brokerSuspendMaxTimeMillis, or
-- shortPollingTimeMills with longPollingEnable off; a held pull whose
-- connection closed gives its memory budget back.
local net = require("rmq.net")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local slow = require("support.slowreader")
local rq = require("support.requests")

local MiB = 1024 * 1024

local function broker(extra)
    local conf = {
        role = "broker", workers = 1, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 16 * MiB,
        namesrvAddr = "127.0.0.1:1",  -- no NameServer: clients go direct
    }
    for k, v in pairs(extra or {}) do conf[k] = v end
    return server.start(conf)
end

local function send(c, topic, qid, body)
    local r = assert(c:call(slow.cmd((slow.send_frame(0, topic, qid, body))), 30000))
    assert.equal(0, r.code, r.remark)
end

-- A pull of queue qid from offset with FLAG_SUBSCRIPTION ("*"), and
-- FLAG_SUSPEND (held up to suspend ms) and FLAG_COMMIT_OFFSET when given.
local function pull_cmd(group, topic, qid, offset, o)
    o = o or {}
    local flag = 0x4 | (o.suspend and 0x2 or 0) | (o.commit and 0x1 or 0)
    return rq.pull({ group = group, topic = topic, qid = qid, offset = offset, sysflag = flag,
                     commit = o.commit, suspend = o.suspend, expr = "TAG" })
end

local function query_offset(c, group, topic, qid)
    local r = assert(c:call({ code = 14, ext = { consumerGroup = group, topic = topic, queueId = qid } }, 30000))
    assert.equal(0, r.code, r.remark)
    return tonumber(r.ext.offset)
end

-- The broker's memory budget figures (GET_BROKER_RUNTIME_INFO).
local function requests_bytes(c)
    local r = assert(c:call({ code = 28 }, 30000))
    assert.equal(0, r.code, r.remark)
    return tonumber(fastjson.decode(r.body).table.memoryBudgetRequests)
end

describe("held pulls (the long poll in C)", function()
    it("stores a held pull's commitOffset when it arrives, not again when it is answered", function()
        local s = broker({ pullHoldRecheckMillis = 60000 })
        local ok, err = pcall(function()
            local c = assert(net.connect(s.addr))
            local topic, group = "HeldCommit", "HeldCommitGroup"
            send(c, topic, 0, "m0")
            -- The group exists from here on (auto-created by this pull).
            assert.equal(0, assert(c:call(pull_cmd(group, topic, 0, 0), 30000)).code)
            local res
            net.spawn(function()
                res = assert(c:call(pull_cmd(group, topic, 0, 1, { suspend = 20000, commit = 1 }), 30000))
            end)
            -- Requests on the connection are read in order: when this is
            -- answered, the pull before it is held, its offset stored.
            assert.equal(1, query_offset(c, group, topic, 0))
            assert.is_nil(res)
            -- The consumer's offset moves on meanwhile (another pull, an
            -- UPDATE_CONSUMER_OFFSET): the held pull must not put 1 back.
            local u = assert(c:call({ code = 15, ext = { consumerGroup = group, topic = topic, queueId = 0,
                                                         commitOffset = 2 } }, 30000))
            assert.equal(0, u.code, u.remark)
            send(c, topic, 0, "m1")
            -- The send wakes it (the re-check is a minute away).
            assert.truthy(server.eventually(function() return res end, 15000), "the held pull was not woken")
            assert.equal(0, res.code, res.remark)
            assert.equal("2", res.ext.nextBeginOffset)
            assert.equal(2, query_offset(c, group, topic, 0))
            c:close()
        end)
        s:stop()
        assert(ok, err)
    end)

    -- The hold a conf allows, whatever the consumer asks (60 s): answered
    -- PULL_NOT_FOUND (19) well inside the 20 s this call waits.
    for _, case in ipairs({
        { "holds at most brokerSuspendMaxTimeMillis", { brokerSuspendMaxTimeMillis = 300, pullHoldRecheckMillis = 100 } },
        { "holds shortPollingTimeMills with longPollingEnable off", { longPollingEnable = false, shortPollingTimeMills = 200 } },
    }) do
        it(case[1] .. ", whatever the consumer asks", function()
            local s = broker(case[2])
            local ok, err = pcall(function()
                local c = assert(net.connect(s.addr))
                local topic, group = "HeldCap", "HeldCapGroup"
                send(c, topic, 0, "m0")
                assert.equal(0, assert(c:call(pull_cmd(group, topic, 0, 0), 30000)).code)
                local r = assert(c:call(pull_cmd(group, topic, 0, 1, { suspend = 60000 }), 20000))
                assert.equal(19, r.code, r.remark)
                assert.equal("1", r.ext.nextBeginOffset)
                c:close()
            end)
            s:stop()
            assert(ok, err)
        end)
    end

    it("forgets the held pulls of a closed connection: their memory budget comes back", function()
        local s = broker({ pullHoldRecheckMillis = 200 })
        local ok, err = pcall(function()
            local c = assert(net.connect(s.addr))
            local topic, group = "HeldClosed", "HeldClosedGroup"
            send(c, topic, 0, "m0")
            assert.equal(0, assert(c:call(pull_cmd(group, topic, 0, 0), 30000)).code)
            local idle = requests_bytes(c)
            local h = assert(net.connect(s.addr))
            for _ = 1, 50 do
                net.spawn(function()
                    h:call(pull_cmd(group, topic, 0, 1, { suspend = 20000 }), 30000)
                end)
            end
            -- 50 held: each charged as a waiting request (frame + 5 KiB).
            assert.truthy(server.eventually(function()
                return requests_bytes(c) >= idle + 50 * 5120
            end, 15000), "the held pulls were not charged")
            h:close()
            assert.truthy(server.eventually(function()
                return requests_bytes(c) <= idle
            end, 15000), "the closed connection's held pulls kept their budget")
            -- The broker still serves (and holds) pulls.
            local res
            net.spawn(function()
                res = assert(c:call(pull_cmd(group, topic, 0, 1, { suspend = 20000 }), 30000))
            end)
            send(c, topic, 0, "m1")
            assert.truthy(server.eventually(function() return res end, 15000))
            assert.equal(0, res.code, res.remark)
            c:close()
        end)
        s:stop()
        assert(ok, err)
    end)
end)
