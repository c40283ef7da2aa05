-- The slave-read suggestion is the slaveReadPolicy's decision: the C pull
-- processor asks it through one hook call with the facts the policy
-- module documents (lua/rmq/policy/slave_read.lua), on every worker, and
-- a policy that fails or answers nonsense suggests the master while the
-- pull is still served.
local net = require("rmq.net")
local codes = require("rmq.codes")
local server = require("support.server")
local rq = require("support.requests")

local function call(addr, cmd)
    local c = assert(net.connect(addr))
    local r = assert(c:call(cmd, 5000))
    c:close()
    return r
end

local function send(addr, topic, qid, body)
    return call(addr, rq.send({ group = "HookProducer", topic = topic, qid = qid, props = "TAGS\1TagA",
                                body = body }))
end

local function pull(addr, group, topic, qid)
    return call(addr, rq.pull({ group = group, topic = topic, qid = qid }))
end

describe("slave-read hook", function()
    local s

    setup(function()
        local conf = {
            role = "broker", workers = 2, brokerName = "broker-hook",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", slaveReadEnable = true,
        }
        s = server.start({ source = "local c = " .. server.serialize(conf, "") .. [[

c.slaveReadPolicy = function(f)
    if f.topic == "HookBoom" then
        error("boom")
    elseif f.topic == "HookBad" then
        return "one"
    end
    -- Every fact, as the policy module documents it, or a wrong answer.
    local ok = f.slaveReadEnable == true and f.slave == false and f.group == "HookReader"
        and math.type(f.maxPhyOffset) == "integer" and math.type(f.lastPhyOffset) == "integer"
        and f.lastPhyOffset <= f.maxPhyOffset and f.physicalMemory > 0
        and f.accessMessageInMemoryMaxRatio == 40 and f.whichBrokerWhenConsumeSlowly == 1
        and f.groupBrokerId == 0
    return ok and 10 + f.queueId or 99
end
return c
]] })
    end)

    teardown(function()
        assert.equal(0, (s:stop()))
    end)

    it("gives the policy the pull's facts and answers what it suggests", function()
        for qid = 0, 3 do
            assert.equal(0, send(s.addr, "HookFacts", qid, "m" .. qid).code)
        end
        -- Several pulls a queue: the two workers both answer some.
        for _ = 1, 3 do
            for qid = 0, 3 do
                local r = pull(s.addr, "HookReader", "HookFacts", qid)
                assert.equal(codes.response.SUCCESS, r.code, r.remark)
                assert.equal(tostring(10 + qid), tostring(r.ext.suggestWhichBrokerId))
            end
        end
    end)

    it("suggests the master when the policy fails or answers nonsense, and serves the pull", function()
        for _, topic in ipairs({ "HookBoom", "HookBad" }) do
            assert.equal(0, send(s.addr, topic, 0, "x").code)
            local r = pull(s.addr, "HookReader", topic, 0)
            assert.equal(codes.response.SUCCESS, r.code, r.remark)
            assert.equal("0", tostring(r.ext.suggestWhichBrokerId))
            assert.truthy(r.body and #r.body > 0)
        end
        assert.truthy(server.eventually(function()
            return s:log():find("suggesting the master", 1, true)
        end, 3000), s:log())
    end)
end)
