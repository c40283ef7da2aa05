-- Thousands of consumer groups in heartbeats against a real broker (the
-- defect: a 1,000-group HEART_BEAT blocked the broker for seconds, as
-- its cost grew with the square of the groups).  Behaviour only, never
-- speed: the broker answers, stays alive, lists members, tells nobody
-- about a repeat heartbeat, forgets everything with the connection, and
-- refuses invalid or oversized heartbeats whole.
--
-- The broker runs with autoCreateSubscriptionGroup = false: what is
-- measured here is the client registry, not the creation of thousands
-- of subscription groups and %RETRY% topics by rmq.broker.groups /
-- topics (the consume specs cover auto-creation).
local net = require("rmq.net")
local cjson = require("cjson")
local server = require("support.server")
local env = require("support.broker_consume_env")

local HEART_BEAT, UNREGISTER, CONSUMER_LIST, NOTIFY = 34, 35, 38, 40

-- A 4.9.8 Java push consumer's HeartbeatData for groups prefix00001...
local function body_for(client_id, prefix, first, last)
    local parts = {}
    for i = first, last do
        local g = ("%s%05d"):format(prefix, i)
        parts[#parts + 1] = ('{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
            .. '"groupName":"%s","messageModel":"CLUSTERING","subscriptionDataSet":['
            .. '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
            .. '"subVersion":1796034607842,"tagsSet":[],"topic":"ScaleTopic"},'
            .. '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
            .. '"subVersion":1796034607861,"tagsSet":[],"topic":"%%RETRY%%%s"}],"unitMode":false}')
            :format(g, g)
    end
    return ('{"clientID":"%s","consumerDataSet":[%s],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}')
        :format(client_id, table.concat(parts, ","))
end

local function consumer_ids(conn, group)
    local r = assert(conn:call({ code = CONSUMER_LIST, ext = { consumerGroup = group } }, 10000))
    if r.code ~= 0 then
        return nil, r
    end
    return cjson.decode(r.body).consumerIdList
end

local function counting_conn(addr)
    local counts = { total = 0, by_group = {} }
    local c = assert(net.connect(addr, { on_request = function(ctx, cmd)
        if cmd.code == NOTIFY then
            counts.total = counts.total + 1
            local g = cmd.ext.consumerGroup
            counts.by_group[g] = (counts.by_group[g] or 0) + 1
        end
    end }))
    return c, counts
end

describe("broker with thousands of consumer groups", function()
    local e

    setup(function()
        e = env.start({ workers = 2, autoCreateSubscriptionGroup = false })
    end)

    teardown(function()
        e:stop()
    end)

    it("registers 5,000 groups from one heartbeat, ignores its repeat, forgets them on close", function()
        local N = 5000
        local body = body_for("127.0.0.1@scale-5000", "ScaleG", 1, N)
        assert.is_true(#body > 2000000)
        local c, counts = counting_conn(e.addr)
        local r = assert(c:call({ code = HEART_BEAT, body = body }, 120000))
        assert.equal(0, r.code)
        -- Every group is new: each is told once, as Java does.
        assert.truthy(server.eventually(function() return counts.total == N end, 20000))
        assert.equal(1, counts.by_group.ScaleG00001)
        assert.equal(1, counts.by_group.ScaleG05000)
        -- The broker serves other connections: members of a sample.
        local probe = assert(net.connect(e.addr))
        for i = 1, N, 499 do
            assert.same({ "127.0.0.1@scale-5000" }, (consumer_ids(probe, ("ScaleG%05d"):format(i))))
        end
        assert.same({ "127.0.0.1@scale-5000" }, (consumer_ids(probe, "ScaleG05000")))
        -- The same heartbeat again changes nothing and tells nobody.
        r = assert(c:call({ code = HEART_BEAT, body = body }, 120000))
        assert.equal(0, r.code)
        net.sleep(300)
        assert.equal(N, counts.total)
        -- A second member of one group: that group alone is told, and
        -- both members are listed.
        local c2, counts2 = counting_conn(e.addr)
        r = assert(c2:call({ code = HEART_BEAT, body = body_for("127.0.0.1@scale-b", "ScaleG", 42, 42) }))
        assert.equal(0, r.code)
        assert.truthy(server.eventually(function() return counts.total == N + 1 end, 5000))
        assert.equal(2, counts.by_group.ScaleG00042)
        assert.equal(1, counts2.total)
        local ids = consumer_ids(probe, "ScaleG00042")
        table.sort(ids)
        assert.same({ "127.0.0.1@scale-5000", "127.0.0.1@scale-b" }, ids)
        -- Closing the big connection: every group it alone had is gone;
        -- the shared one keeps its other member, who is told.
        c:close()
        assert.truthy(server.eventually(function()
            return consumer_ids(probe, ("ScaleG%05d"):format(N)) == nil
        end, 10000))
        assert.truthy(server.eventually(function() return counts2.total == 2 end, 5000))
        for i = 1, N do
            local g = ("ScaleG%05d"):format(i)
            local got, reply = consumer_ids(probe, g)
            if i == 42 then
                assert.same({ "127.0.0.1@scale-b" }, got)
            else
                assert.is_nil(got, g)
                assert.equal("no consumer for this group, " .. g, reply.remark)
            end
        end
        -- UNREGISTER_CLIENT of the last member empties the last group.
        r = assert(c2:call({ code = UNREGISTER, ext = { clientID = "127.0.0.1@scale-b",
                                                      consumerGroup = "ScaleG00042" } }))
        assert.equal(0, r.code)
        assert.is_nil((consumer_ids(probe, "ScaleG00042")))
        c2:close()
        probe:close()
    end)

    it("registers groups spread over several heartbeats of one connection", function()
        local c = counting_conn(e.addr)
        for k = 0, 4 do
            local r = assert(c:call({ code = HEART_BEAT,
                body = body_for("127.0.0.1@scale-parts", "PartG", k * 1000 + 1, k * 1000 + 1000) }, 60000))
            assert.equal(0, r.code)
        end
        for _, i in ipairs({ 1, 1000, 1001, 2500, 4001, 5000 }) do
            assert.same({ "127.0.0.1@scale-parts" }, (consumer_ids(c, ("PartG%05d"):format(i))))
        end
        c:close()
    end)

    it("keeps one consistent registry under concurrent heartbeats from both workers", function()
        local K, done, failed = 8, 0, {}
        local conns = {}
        for k = 1, K do
            conns[k] = counting_conn(e.addr)
        end
        for k = 1, K do
            net.spawn(function()
                local ok, err = pcall(function()
                    -- Overlapping windows of 400 groups out of 1,000.
                    local first = (k - 1) * 75 + 1
                    local body = body_for("127.0.0.1@conc-" .. k, "ConcG", first, first + 399)
                    for _ = 1, 3 do
                        local r = assert(conns[k]:call({ code = HEART_BEAT, body = body }, 60000))
                        assert(r.code == 0, r.remark)
                        assert(consumer_ids(conns[k], ("ConcG%05d"):format(first)))
                    end
                end)
                if not ok then
                    failed[#failed + 1] = err
                end
                done = done + 1
            end)
        end
        assert.truthy(server.eventually(function() return done == K end, 60000))
        assert.same({}, failed)
        local probe = assert(net.connect(e.addr))
        -- Group i has exactly the connections whose window covers it.
        for _, i in ipairs({ 1, 75, 76, 400, 401, 500, 925, 924 }) do
            local want = {}
            for k = 1, K do
                local first = (k - 1) * 75 + 1
                if i >= first and i <= first + 399 then
                    want[#want + 1] = "127.0.0.1@conc-" .. k
                end
            end
            local got = consumer_ids(probe, ("ConcG%05d"):format(i)) or {}
            table.sort(got)
            table.sort(want)
            assert.same(want, got, "group " .. i)
        end
        for k = 1, K do
            conns[k]:close()
        end
        assert.truthy(server.eventually(function()
            for _, i in ipairs({ 1, 300, 600, 924 }) do
                if consumer_ids(probe, ("ConcG%05d"):format(i)) then
                    return false
                end
            end
            return true
        end, 10000))
        probe:close()
    end)

    it("answers a 1,000-group heartbeat", function()
        local c, counts = counting_conn(e.addr)
        local r = assert(c:call({ code = HEART_BEAT, body = body_for("127.0.0.1@scale-1000", "KiloG", 1, 1000) },
            60000))
        assert.equal(0, r.code)
        assert.truthy(server.eventually(function() return counts.total == 1000 end, 10000))
        assert.same({ "127.0.0.1@scale-1000" }, (consumer_ids(c, "KiloG00777")))
        c:close()
    end)

    it("refuses a heartbeat naming an invalid group or topic whole", function()
        local c, counts = counting_conn(e.addr)
        local good = cjson.decode(body_for("127.0.0.1@bad", "BadG", 1, 4))
        good.consumerDataSet[4].groupName = "../../x"
        local r = assert(c:call({ code = HEART_BEAT, body = cjson.encode(good) }))
        assert.equal(1, r.code)
        assert.equal('consumerDataSet[3].groupName "../../x" contains illegal characters, '
            .. "allowing only ^[%|a-zA-Z0-9_-]+$", r.remark)
        good.consumerDataSet[4].groupName = "BadG00004"
        good.consumerDataSet[2].subscriptionDataSet[1].topic = "a/b"
        r = assert(c:call({ code = HEART_BEAT, body = cjson.encode(good) }))
        assert.equal(1, r.code)
        assert.matches('consumerDataSet[1].subscriptionDataSet[0].topic "a/b" contains illegal', r.remark, 1, true)
        r = assert(c:call({ code = HEART_BEAT, body = '{"clientID":"x","junk":' .. ("["):rep(5000) }))
        assert.equal(1, r.code)
        assert.matches("nesting too deep", r.remark, 1, true)
        net.sleep(100)
        assert.equal(0, counts.total)
        assert.is_nil((consumer_ids(c, "BadG00001")))
        assert.matches("HEART_BEAT from .* refused %(parse%): consumerDataSet%[3%]%.groupName", e.broker:log())
        c:close()
    end)
end)

describe("broker client registry limits", function()
    local e

    setup(function()
        e = env.start({ workers = 1, autoCreateSubscriptionGroup = false, clientMaxConsumerGroups = 100,
                        clientMaxChannelsPerGroup = 2 })
    end)

    teardown(function()
        e:stop()
    end)

    it("refuses heartbeats past clientMaxConsumerGroups and clientMaxChannelsPerGroup", function()
        local c = counting_conn(e.addr)
        local r = assert(c:call({ code = HEART_BEAT, body = body_for("127.0.0.1@l1", "LimG", 1, 60) }))
        assert.equal(0, r.code)
        r = assert(c:call({ code = HEART_BEAT, body = body_for("127.0.0.1@l1", "LimG", 41, 120) }))
        assert.equal(1, r.code)
        assert.equal("the heartbeat adds up to 60 consumer groups to 60, more than clientMaxConsumerGroups (100)",
            r.remark)
        assert.is_nil((consumer_ids(c, "LimG00061")))
        assert.truthy(server.eventually(function()
            return e.broker:log():find("refused (limit): the heartbeat adds up to 60", 1, true)
        end, 2000))
        -- More than the limit in one heartbeat: refused while reading.
        r = assert(c:call({ code = HEART_BEAT, body = body_for("127.0.0.1@l1", "LimH", 1, 101) }))
        assert.equal(1, r.code)
        assert.matches("more than 100 consumer groups", r.remark, 1, true)
        local c2 = counting_conn(e.addr)
        local c3 = counting_conn(e.addr)
        assert.equal(0, assert(c2:call({ code = HEART_BEAT, body = body_for("127.0.0.1@l2", "LimG", 1, 1) })).code)
        r = assert(c3:call({ code = HEART_BEAT, body = body_for("127.0.0.1@l3", "LimG", 1, 1) }))
        assert.equal(1, r.code)
        assert.equal("consumer group LimG00001 has 2 channels already, clientMaxChannelsPerGroup (2)", r.remark)
        c:close()
        c2:close()
        c3:close()
    end)
end)
