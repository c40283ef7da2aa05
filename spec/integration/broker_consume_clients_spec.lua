-- Client channels that stop heartbeating expire (channelExpiredTimeout,
-- shortened here) and the rest of their group is told; a broker that is
-- stopped answers its held pulls and exits cleanly; heartbeats from every
-- client variant are understood.
local net = require("rmq.net")
local cjson = require("cjson")
local core = require("rmq.core")
local codes = require("rmq.codes")
local producer = require("rmq.client.producer")
local server = require("support.server")
local rq = require("support.requests")
local env = require("support.broker_consume_env")

local req = codes.request

local function heartbeat_body(client_id, group, topic, extra)
    local cd = {
        groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
        consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
        subscriptionDataSet = { { topic = topic, subString = "*", tagsSet = setmetatable({}, cjson.array_mt),
                                  codeSet = setmetatable({}, cjson.array_mt), subVersion = 1 } },
    }
    for k, v in pairs(extra or {}) do cd[k] = v end
    return cjson.encode({ clientID = client_id, consumerDataSet = { cd },
                          producerDataSet = setmetatable({}, cjson.array_mt) })
end

local function consumer_list(conn, group)
    local r = assert(conn:call({ code = req.GET_CONSUMER_LIST_BY_GROUP, ext = { consumerGroup = group } }))
    if r.code ~= 0 then
        return {}
    end
    local ids = cjson.decode(r.body).consumerIdList
    table.sort(ids)
    return ids
end

describe("broker clients", function()
    local e

    setup(function()
        -- Holds up to 120 s (the SIGTERM case below shows they are not waited out).
        e = env.start({ workers = 2, channelExpiredTimeout = 600, brokerSuspendMaxTimeMillis = 120000 })
    end)

    teardown(function()
        e:stop()
    end)

    it("drops a channel silent for channelExpiredTimeout and tells the group", function()
        local group, topic = "FxExpireGroup", "FxExpire"
        local notified = 0
        local live = assert(net.connect(e.addr, { on_request = function(ctx, cmd)
            if cmd.code == req.NOTIFY_CONSUMER_IDS_CHANGED then notified = notified + 1 end
        end }))
        local silent = assert(net.connect(e.addr))
        assert.equal(0, assert(live:call({ code = req.HEART_BEAT,
            body = heartbeat_body("127.0.0.1@live", group, topic) })).code)
        -- Silent's last heartbeat reaches the broker after t0: it cannot
        -- expire before t0 + channelExpiredTimeout, however slow the
        -- machine (less a little for the broker's loop clock).
        local t0 = core.mono_ms()
        assert.equal(0, assert(silent:call({ code = req.HEART_BEAT,
            body = heartbeat_body("127.0.0.1@silent", group, topic) })).code)
        assert.same({ "127.0.0.1@live", "127.0.0.1@silent" }, consumer_list(live, group))
        local before = notified
        -- live keeps heartbeating, silent does not (its connection stays).
        local gone = server.eventually(function()
            live:call({ code = req.HEART_BEAT, body = heartbeat_body("127.0.0.1@live", group, topic) })
            return #consumer_list(live, group) == 1
        end, 3000)
        assert.truthy(gone)
        local waited = core.mono_ms() - t0
        assert.is_true(waited >= 500, ("dropped %.1f ms after its heartbeat"):format(waited))
        assert.same({ "127.0.0.1@live" }, consumer_list(live, group))
        assert.truthy(server.eventually(function() return notified > before end, 1000))
        -- A heartbeat brings it back (a new member: everyone is told).
        before = notified
        assert.equal(0, assert(silent:call({ code = req.HEART_BEAT,
            body = heartbeat_body("127.0.0.1@silent", group, topic) })).code)
        assert.equal(2, #consumer_list(live, group))
        assert.truthy(server.eventually(function() return notified > before end, 1000))
        live:close()
        silent:close()
    end)

    it("understands heartbeats with enum ordinals, string subVersion and missing arrays", function()
        local conn = assert(net.connect(e.addr))
        -- rocketmq-client-cpp: ordinals, subVersion as a string, no
        -- tagsSet/codeSet/producerDataSet, and codeSet as atoi(tag) when
        -- present (the broker rebuilds the hash codes from the tags).
        local body = '{"clientID":"127.0.0.1@cpp","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,'
            .. '"groupName":"FxCppStyle","messageModel":1,"subscriptionDataSet":['
            .. '{"subString":"TagA || TagB","subVersion":"1796034683463","topic":"FxCppStyleTopic",'
            .. '"tagsSet":["TagA","TagB"],"codeSet":[0,0]}]}]}\n'
        -- Channels expire after 600 ms here (channelExpiredTimeout, for the
        -- case above): each step below that needs the registration sends
        -- the heartbeat again first, so a slow machine does not expire it.
        local function hb()
            return assert(conn:call({ code = req.HEART_BEAT, body = body }))
        end
        local r = hb()
        assert.equal(0, r.code)
        assert.same({ "127.0.0.1@cpp" }, consumer_list(conn, "FxCppStyle"))
        -- A pull without FLAG_SUBSCRIPTION filters by the heartbeat's tags.
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxCppStyleProducer" })
        e:route("FxCppStyleTopic")
        for _, tag in ipairs({ "TagA", "TagC", "TagB" }) do
            assert(p:send_orderly({ topic = "FxCppStyleTopic", body = tag, tags = tag }, 0,
                function(queues) for _, q in ipairs(queues) do if q.queueId == 0 then return q end end end))
        end
        assert.equal(0, hb().code)
        r = assert(conn:call(rq.pull({ group = "FxCppStyle", topic = "FxCppStyleTopic", sysflag = 0,
                                       subversion = 1796034683463, ext = { subscription = false } })))
        assert.equal(0, r.code)
        local msgs = require("rmq.client.message").decode_records(r.body)
        assert.equal(2, #msgs)
        assert.equal("TagA", msgs[1].tags)
        assert.equal("TagB", msgs[2].tags)
        -- A newer subVersion in the pull than the heartbeat's: 25.
        assert.equal(0, hb().code)
        r = assert(conn:call(rq.pull({ group = "FxCppStyle", topic = "FxCppStyleTopic", sysflag = 0,
                                       subversion = 1796034683464, ext = { subscription = false } })))
        assert.equal(25, r.code)
        -- Neither array: accepted, nothing registered.
        r = assert(conn:call({ code = req.HEART_BEAT, body = '{"clientID":"127.0.0.1@empty"}' }))
        assert.equal(0, r.code)
        -- Not JSON: refused, the broker keeps serving.
        assert.equal(0, hb().code)
        r = assert(conn:call({ code = req.HEART_BEAT, body = "{nope" }))
        assert.equal(1, r.code)
        assert.same({ "127.0.0.1@cpp" }, consumer_list(conn, "FxCppStyle"))
        -- SQL92 is refused: enablePropertyFilter is false (4.9.8's default).
        r = assert(conn:call({ code = req.CHECK_CLIENT_CONFIG, body = cjson.encode({
            clientId = "x", group = "FxCppStyle",
            subscriptionData = { topic = "FxCppStyleTopic", subString = "a > 1", expressionType = "SQL92" } }) }))
        assert.equal(1, r.code)
        r = assert(conn:call({ code = req.CHECK_CLIENT_CONFIG, body = cjson.encode({
            clientId = "x", group = "FxCppStyle",
            subscriptionData = { topic = "FxCppStyleTopic", subString = "*", expressionType = "TAG" } }) }))
        assert.equal(0, r.code)
        conn:close()
    end)

    it("answers held pulls and exits cleanly on SIGTERM", function()
        local topic = "FxStopHeld"
        e:route(topic)
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxStopProducer" })
        assert(p:send_orderly({ topic = topic, body = "x" }, 0,
            function(queues) for _, q in ipairs(queues) do if q.queueId == 0 then return q end end end))
        local conn = assert(net.connect(e.addr))
        local res
        net.spawn(function()
            res = conn:call(rq.pull({ group = "FxStopGroup", topic = topic, offset = 1, sysflag = 0x6,
                                      suspend = 120000 }), 150000) or false
        end)
        net.sleep(200)
        assert.is_nil(res)
        -- The stop does not wait out the 120 s hold (a bound, not a speed:
        -- a loaded machine under the sanitizers restarts in seconds).
        local t0 = core.mono_ms()
        e:restart()
        assert.is_true(core.mono_ms() - t0 < 60000)
        assert.truthy(server.eventually(function() return res ~= nil end, 30000))
        if res then
            assert.equal(19, res.code)
            assert.equal("OFFSET_OVERFLOW_ONE", res.remark)
        end
        conn:close()
    end)
end)

describe("a new consumer group's retry queue", function()
    local ns = require("support.nsclient")
    local e

    setup(function()
        e = env.start({ workers = 2 })
    end)

    teardown(function()
        e:stop()
    end)

    -- 4.9.8's RebalanceImpl.rebalanceByTopic, run on NOTIFY_CONSUMER_IDS_CHANGED
    -- (wake-ups that come before it runs make one rebalance): it takes the
    -- queues of the routes it knows first; asking for the consumer ids
    -- fetches a missing route (MQClientInstance.findConsumerIdList), which
    -- only the next rebalance uses.  Else the route comes with the 30 s
    -- poll or the 20 s periodic rebalance: the first retry came at +20 s.
    it("is assigned by a 4.9.8 client's rebalance seconds after the group's first heartbeat", function()
        local group, topic = "FxRetryRouteGroup", "FxRetryRoute"
        local retry = "%RETRY%" .. group
        local nsconn = assert(net.connect(e.ns_addr))
        assert.is_nil((ns.route(nsconn, retry)))
        local wakeups = 0
        local conn = assert(net.connect(e.addr, { on_request = function(_, cmd)
            if cmd.code == req.NOTIFY_CONSUMER_IDS_CHANGED then
                wakeups = wakeups + 1
            end
        end }))
        local t0 = core.mono_ms()
        assert.equal(0, assert(conn:call({ code = req.HEART_BEAT,
            body = heartbeat_body("127.0.0.1@retryroute", group, topic) })).code)
        -- the heartbeat's answer comes once the NameServer has the route
        assert.truthy(ns.route(nsconn, retry), "no route for " .. retry .. " after the heartbeat")
        local known, rebalances
        local assigned_ms = server.eventually(function()
            if wakeups > 0 then
                wakeups = 0
                rebalances = (rebalances or 0) + 1
                if known then
                    return core.mono_ms() - t0
                end
                known = ns.route(nsconn, retry) ~= nil
            end
        end, 15000)
        assert.truthy(assigned_ms, ("the retry queue was not assigned within 15 s (%s rebalances)"):format(
            tostring(rebalances)))
        print(("retry queue assigned %.0f ms after the first heartbeat, rebalance %d"):format(assigned_ms, rebalances))
        assert.is_true(assigned_ms < 10000, assigned_ms)
        conn:close()
        nsconn:close()
    end)
end)
