-- 5.x subscription group fields (docs/rocketmq5.md), with real processes:
-- consumeMessageOrderly and groupRetryPolicy set by `rmq admin
-- updateSubGroup -o/-p` (or a raw UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
-- returned by GET_ALL_SUBSCRIPTIONGROUP_CONFIG as 5.x writes them, kept
-- across a restart, malformed values refused; a group without them stays
-- 4.9.8's bytes; and a 5.x gRPC consumer told fifo and backoff from them.
local net = require("rmq.net")
local codes = require("rmq.codes")
local env = require("support.broker_consume_env")
local server = require("support.server")

local req, resp = codes.request, codes.response

describe("subscription group 5.x fields", function()
    local e, c

    setup(function()
        e = env.start({ workers = 2 })
        c = assert(net.connect(e.addr))
    end)

    teardown(function()
        c:close()
        assert.equal(0, (e:stop()))
    end)

    local function admin(args)
        return server.rmq(("admin %s -n %s"):format(args, e.ns_addr))
    end

    -- The group's JSON as GET_ALL_SUBSCRIPTIONGROUP_CONFIG carries it.
    local function group_json(name)
        local r = assert(c:call({ code = req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG }))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        local key = '"' .. name .. '":{'
        local at = r.body:find(key, 1, true)
        if not at then
            return nil
        end
        local from = at + #key - 1
        local depth, i = 0, from
        repeat
            local ch = r.body:sub(i, i)
            depth = depth + (ch == "{" and 1 or ch == "}" and -1 or 0)
            i = i + 1
        until depth == 0
        return r.body:sub(from, i - 1)
    end

    local function update(body)
        return assert(c:call({ code = req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = body }))
    end

    it("updateSubGroup -o -p stores both; the broker returns them as 5.x writes them", function()
        local code, out = admin(("updateSubGroup -b %s -g G5Exp -o true -r 3 -p "
            .. "'{\"type\":\"EXPONENTIAL\",\"exponentialRetryPolicy\":{\"initial\":2000,\"max\":60000,\"multiplier\":3}}'")
            :format(e.addr))
        assert.equal(0, code, out)
        assert.matches("create subscription group to " .. e.addr:gsub("%p", "%%%0") .. " success.", out)
        assert.matches("consumeBroadcastEnable=false, consumeMessageOrderly=true, retryQueueNums=1", out, 1, true)
        assert.equal('{"brokerId":0,"consumeBroadcastEnable":false,"consumeEnable":true,"consumeFromMinEnable":false,'
            .. '"consumeMessageOrderly":true,"groupName":"G5Exp","groupRetryPolicy":{"exponentialRetryPolicy":'
            .. '{"initial":2000,"max":60000,"multiplier":3},"type":"EXPONENTIAL"},'
            .. '"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":3,"retryQueueNums":1,'
            .. '"whichBrokerWhenConsumeSlowly":1}', group_json("G5Exp"))

        code, out = admin(("updateSubGroup -b %s -g G5Cust -p "
            .. "'{\"type\":\"CUSTOMIZED\",\"customizedRetryPolicy\":{\"next\":[1000,5000,10000]}}'"):format(e.addr))
        assert.equal(0, code, out)
        assert.truthy(group_json("G5Cust"):find('"consumeMessageOrderly":false,"groupName":"G5Cust",'
            .. '"groupRetryPolicy":{"customizedRetryPolicy":{"next":[1000,5000,10000]},"type":"CUSTOMIZED"},', 1, true),
            group_json("G5Cust"))

        -- -o alone: the policy takes 5.x's default, written as 5.x does.
        code, out = admin(("updateSubGroup -b %s -g G5Ord -o true"):format(e.addr))
        assert.equal(0, code, out)
        assert.truthy(group_json("G5Ord"):find('"consumeMessageOrderly":true,"groupName":"G5Ord",'
            .. '"groupRetryPolicy":{"type":"CUSTOMIZED"},"notify', 1, true), group_json("G5Ord"))

        -- Both policies given: both kept, customized first (sorted).
        assert.equal(resp.SUCCESS, update('{"groupName":"G5Both","groupRetryPolicy":{"type":"EXPONENTIAL",'
            .. '"exponentialRetryPolicy":{"initial":1},"customizedRetryPolicy":{"next":[7]}}}').code)
        assert.truthy(group_json("G5Both"):find('"groupRetryPolicy":{"customizedRetryPolicy":{"next":[7]},'
            .. '"exponentialRetryPolicy":{"initial":1,"max":7200000,"multiplier":2},"type":"EXPONENTIAL"}', 1, true),
            group_json("G5Both"))

        code, out = admin("getConsumerConfig -g G5Exp")
        assert.equal(0, code, out)
        assert.matches("consumeMessageOrderly%s+=  true\n", out)
        assert.matches('groupRetryPolicy%s+=  {"exponentialRetryPolicy":{"initial":2000,"max":60000,"multiplier":3},'
            .. '"type":"EXPONENTIAL"}', out)
    end)

    it("keeps a group without them byte for byte as 4.9.8 writes it", function()
        local code, out = admin(("updateSubGroup -b %s -g G4Plain -r 5"):format(e.addr))
        assert.equal(0, code, out)
        assert.not_matches("consumeMessageOrderly", out)
        assert.equal('{"brokerId":0,"consumeBroadcastEnable":false,"consumeEnable":true,"consumeFromMinEnable":false,'
            .. '"groupName":"G4Plain","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":5,"retryQueueNums":1,'
            .. '"whichBrokerWhenConsumeSlowly":1}', group_json("G4Plain"))
        -- A 4.9.8 client's body (no 5.x fields) over a 5.x group: 4.x again.
        assert.equal(resp.SUCCESS, update('{"groupName":"G5Ord","retryMaxTimes":16}').code)
        assert.not_matches("consumeMessageOrderly", group_json("G5Ord"))
    end)

    it("refuses malformed values naming the field, and changes nothing", function()
        assert.equal(resp.SUCCESS, update('{"groupName":"GBad","consumeMessageOrderly":true}').code)
        local before = group_json("GBad")
        local cases = {
            { '{"groupName":"GBad","consumeMessageOrderly":"maybe"}', "consumeMessageOrderly must be true or false" },
            { '{"groupName":"GBad","groupRetryPolicy":{"type":"LINEAR"}}',
              "groupRetryPolicy.type must be CUSTOMIZED or EXPONENTIAL, got LINEAR" },
            { '{"groupName":"GBad","groupRetryPolicy":[1,2]}', "groupRetryPolicy must be a JSON object" },
            { '{"groupName":"GBad","groupRetryPolicy":{"customizedRetryPolicy":{"next":[]}}}',
              "customizedRetryPolicy.next must have 1..32 levels, got 0" },
            { '{"groupName":"GBad","groupRetryPolicy":{"customizedRetryPolicy":{"next":[1000,"soon"]}}}',
              "groupRetryPolicy.customizedRetryPolicy.next[1] must be a whole number >= 0, got soon" },
            { '{"groupName":"GBad","groupRetryPolicy":{"customizedRetryPolicy":{"next":[' .. ("1,"):rep(32) .. '1]}}}',
              "must have 1..32 levels, got 33" },
            { '{"groupName":"GBad","groupRetryPolicy":{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":-5}}}',
              "groupRetryPolicy.exponentialRetryPolicy.initial must be a whole number >= 0, got -5" },
        }
        for _, k in ipairs(cases) do
            local r = update(k[1])
            assert.equal(resp.SYSTEM_ERROR, r.code, k[1])
            assert.truthy(r.remark:find(k[2], 1, true), r.remark)
        end
        assert.equal(before, group_json("GBad"))
        -- The admin tool refuses a -p that is not JSON before sending.
        local code, out = admin(("updateSubGroup -b %s -g GBad -p notjson"):format(e.addr))
        assert.equal(2, code, out)
        assert.matches("groupRetryPolicy", out)
        assert.equal(before, group_json("GBad"))
    end)

    it("keeps them across a restart", function()
        local exp, plain = group_json("G5Exp"), group_json("G4Plain")
        assert.truthy(exp and plain)
        c:close()
        e:restart()
        c = assert(net.connect(e.addr))
        assert.equal(exp, group_json("G5Exp"))
        assert.equal(plain, group_json("G4Plain"))
    end)
end)

describe("subscription group 5.x fields over gRPC", function()
    local gn = require("support.grpc_node")
    local s

    setup(function()
        gn.check()
        s = gn.start({})
        gn.create_topic(s, "GroupV5Topic")
    end)

    teardown(function()
        if s then
            assert.equal(0, s:stop())
        end
    end)

    local function settings(group, fifo)
        local status, res, why = gn.run(s, "wire.js",
            { TOPIC = "GroupV5Topic", CASE = "settings", GROUP = group, FIFO = tostring(fifo) }, "settings")
        assert.equal(0, status, why)
        assert.truthy(res and not res.error, why)
        return res
    end

    local function update(body)
        local r = assert(net.call(s.broker_addr, { code = req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body = body }, 10000))
        assert.equal(resp.SUCCESS, r.code, r.remark)
    end

    it("tells a consumer fifo from consumeMessageOrderly and its backoff from groupRetryPolicy", function()
        update('{"groupName":"GV5Fifo","consumeMessageOrderly":true,"retryMaxTimes":4,'
            .. '"groupRetryPolicy":{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,2500,60000]}}}')
        local r = settings("GV5Fifo", false)
        assert.is_true(r.fifo)
        assert.equal(5, r.maxAttempts)
        assert.same({ 1000, 2500, 60000 }, r.customized)

        update('{"groupName":"GV5Exp","consumeMessageOrderly":false,'
            .. '"groupRetryPolicy":{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":500,"max":30000,"multiplier":4}}}')
        r = settings("GV5Exp", true)
        assert.is_false(r.fifo)
        assert.equal(17, r.maxAttempts)
        assert.same({ initial = 500, max = 30000, multiplier = 4 }, r.exponential)

        -- EXPONENTIAL without its policy: 5.x's ExponentialRetryPolicy defaults.
        update('{"groupName":"GV5ExpDflt","consumeMessageOrderly":true,"groupRetryPolicy":{"type":"EXPONENTIAL"}}')
        r = settings("GV5ExpDflt", false)
        assert.same({ initial = 5000, max = 7200000, multiplier = 2 }, r.exponential)

        -- retryMaxTimes at Java's int maximum: no overflow.
        update('{"groupName":"GV5Max","retryMaxTimes":2147483647,"consumeMessageOrderly":false}')
        assert.equal(2147483647, settings("GV5Max", false).maxAttempts)

        -- A live change reaches the next session.
        update('{"groupName":"GV5Fifo","consumeMessageOrderly":false,"groupRetryPolicy":{"type":"CUSTOMIZED"}}')
        r = settings("GV5Fifo", false)
        assert.is_false(r.fifo)
        assert.equal(18, #r.customized)
        assert.equal(1000, r.customized[1])
        assert.equal(7200000, r.customized[18])
    end)

    it("pops a consumeMessageOrderly group orderly: a queue's next waits for the leased one", function()
        local r = assert(net.call(s.broker_addr, { code = req.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = "GroupV5One", defaultTopic = "TBW102", readQueueNums = "1", writeQueueNums = "1",
            perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 10000))
        assert.equal(resp.SUCCESS, r.code, r.remark)
        update('{"groupName":"GV5Orderly","consumeMessageOrderly":true}')
        update('{"groupName":"GV5Concurrent","consumeMessageOrderly":false}')
        local function run(group)
            local status, res, why = gn.run(s, "fifo_group.js", { TOPIC = "GroupV5One", GROUP = group }, group, 90000)
            assert.equal(0, status, why)
            assert.truthy(res and not res.error, why)
            return res
        end
        local o = run("GV5Orderly")
        assert.same({ first = "m0", whileLeased = "none", afterAck = "m1" }, o)
        local n = run("GV5Concurrent")
        assert.equal("m0", n.first)
        assert.equal("m1", n.whileLeased)
        assert.equal("m2", n.afterAck)
    end)

    it("leaves a group without them as before: the client's fifo, the default backoff", function()
        update('{"groupName":"GV4Plain","retryMaxTimes":7}')
        local r = settings("GV4Plain", true)
        assert.is_true(r.fifo)
        assert.equal(3, r.maxAttempts)
        assert.same({ initial = 10, max = 1000, multiplier = 2 }, r.exponential)
    end)
end)
