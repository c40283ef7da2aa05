-- SQL92 property filters (enablePropertyFilter) and Lua pull filters
-- (pullFilters), through real pulls against a real broker: each
-- expression delivers exactly the messages a plain Lua predicate over
-- the same properties picks, under RocketMQ 4.9.8's three-valued rules;
-- bad expressions are refused at CHECK_CLIENT_CONFIG and at pull with
-- 4.9.8's codes.
local net = require("rmq.net")
local cjson = require("cjson")
local codes = require("rmq.codes")
local message = require("rmq.message")
local producer = require("rmq.client.producer")
local server = require("support.server")
local rq = require("support.requests")
local env = require("support.broker_consume_env")

local req, R = codes.request, codes.response
local FLAG_SUBSCRIPTION = 0x4

-- The messages: a = 0..N-1 (none for every 5th), s cycling x/y/z,
-- tags TagA for even a, TagB for odd.
local N = 40
local function props_of(i)
    local p = { s = ({ "x", "y", "z" })[i % 3 + 1], n = tostring(i) }
    if i % 5 ~= 4 then
        p.a = tostring(i)
    end
    if i % 7 == 0 then
        p.drop = "yes"
    end
    return p, (i % 2 == 0) and "TagA" or "TagB"
end

local function send_all(e, topic)
    e:route(topic, 1)
    local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxSqlProducer" })
    for i = 0, N - 1 do
        local props, tags = props_of(i)
        local r = assert(p:send({ topic = topic, body = "m" .. i, tags = tags, properties = props }))
        assert.equal("SEND_OK", r.status)
    end
    if p.close then p:close() end
end

-- Every message of queue 0 a pull loop delivers, as the list of n.
local function pull_all(conn, ext)
    local got, offset = {}, 0
    for _ = 1, 200 do
        local x = { consumerGroup = "FxSqlGroup", queueId = 0, queueOffset = offset, maxMsgNums = 7,
                    sysFlag = FLAG_SUBSCRIPTION, commitOffset = 0, suspendTimeoutMillis = 0, subVersion = 0 }
        for k, v in pairs(ext) do x[k] = v end
        local r = assert(conn:call({ code = req.PULL_MESSAGE, ext = x }))
        if r.code == R.SUCCESS then
            local pos = 1
            while pos <= #r.body do
                local rec, nxt = assert(message.decode_record(r.body, pos))
                got[#got + 1] = tonumber(rec.properties.n)
                pos = nxt
            end
        elseif r.code ~= R.PULL_RETRY_IMMEDIATELY then
            assert(r.code == R.PULL_NOT_FOUND or r.code == R.PULL_OFFSET_MOVED,
                   ("code %d %s"):format(r.code, tostring(r.remark)))
            return got
        end
        offset = tonumber(r.ext.nextBeginOffset)
    end
    error("pull loop did not end")
end

local function expected(pred)
    local out = {}
    for i = 0, N - 1 do
        local props, tags = props_of(i)
        props.TAGS = tags
        if pred(props) then
            out[#out + 1] = i
        end
    end
    return out
end

local function num(v) return v and tonumber(v) end

-- The C pull processor evaluates SQL92 and runs the Lua pull filters;
-- with nativeProcessors = false the request reaches pull.lua's entry
-- first, which runs the same processor: both must deliver the same.
for _, native in ipairs({ true, false }) do
describe("SQL92 filters, nativeProcessors = " .. tostring(native), function()
    local e, conn
    local topic = "FxSqlTopic"

    setup(function()
        e = env.start({ workers = 2, enablePropertyFilter = true, nativeProcessors = native,
                        luaSource = [[
            return { pullFilters = {
                FxLuaTopic = function(props, tags, size) return props.drop ~= "yes" and size > 0 end,
                ["FxLuaBroken@FxSqlGroup"] = function(props) return props.a + nil end,
                FxLuaHeld = function(props) return props.drop ~= "yes" end,
            } } ]] })
        send_all(e, topic)
        conn = assert(net.connect(e.addr))
    end)

    teardown(function()
        if conn then conn:close() end
        e:stop()
    end)

    local cases = {
        { "a > 10", function(p) return num(p.a) and num(p.a) > 10 end },
        { "a > 10 AND s = 'y'", function(p) return num(p.a) and num(p.a) > 10 and p.s == "y" end },
        { "a BETWEEN 3 AND 12", function(p) return num(p.a) and num(p.a) >= 3 and num(p.a) <= 12 end },
        { "a NOT BETWEEN 3 AND 30", function(p) return num(p.a) and (num(p.a) < 3 or num(p.a) > 30) end },
        { "s IN ('x', 'z')", function(p) return p.s == "x" or p.s == "z" end },
        { "s NOT IN ('x')", function(p) return p.s ~= "x" end },
        { "a IS NULL", function(p) return p.a == nil end },
        { "a IS NOT NULL AND TAGS = 'TagB'", function(p) return p.a ~= nil and p.TAGS == "TagB" end },
        { "s = 'z'", function(p) return p.s == "z" end },
        -- three-valued: a missing a makes NOT (a > 10) unknown, not true
        { "NOT (a > 10)", function(p) return num(p.a) and num(p.a) <= 10 end },
        { "a > 10 OR s = 'x'", function(p) return (num(p.a) and num(p.a) > 10) or p.s == "x" end },
        { "a <> '5'", function(p) return p.a ~= nil and p.a ~= "5" end },
        { "missing = 'q' OR TRUE", function() return true end },
        { "(missing > 1) IS NULL", function() return true end },
        { "a = 1.0E1", function(p) return p.a == "10" end },
        { "TAGS = 'TagA' AND drop IS NULL", function(p) return p.TAGS == "TagA" and p.drop == nil end },
        -- a conversion Java throws on makes the message not match
        { "s > 1", function() return false end },
    }
    for _, c in ipairs(cases) do
        it("delivers exactly what " .. c[1] .. " matches", function()
            local got = pull_all(conn, { topic = topic, subscription = c[1], expressionType = "SQL92" })
            assert.same(expected(c[2]), got)
        end)
    end

    it("refuses a bad expression at pull with SUBSCRIPTION_PARSE_FAILED", function()
        for _, bad in ipairs({ "a >", "a = NULL", "a > 'x'", "1", "a != 1", "a BETWEEN 5 AND 1",
                               string.rep("(", 500) .. "a > 1" .. string.rep(")", 500) }) do
            local r = assert(conn:call({ code = req.PULL_MESSAGE, ext = {
                consumerGroup = "FxSqlGroup", topic = topic, queueId = 0, queueOffset = 0, maxMsgNums = 8,
                sysFlag = FLAG_SUBSCRIPTION, subscription = bad, expressionType = "SQL92" } }))
            assert.equal(R.SUBSCRIPTION_PARSE_FAILED, r.code)
            assert.equal("parse the consumer's subscription failed", r.remark)
        end
    end)

    it("checks SQL92 at CHECK_CLIENT_CONFIG: compiles or says why", function()
        local function check(expr)
            return assert(conn:call({ code = req.CHECK_CLIENT_CONFIG, body = cjson.encode({
                clientId = "127.0.0.1@x", group = "FxSqlGroup",
                subscriptionData = { topic = topic, subString = expr, expressionType = "SQL92" } }) }))
        end
        assert.equal(0, check("a BETWEEN 0 AND 3").code)
        local r = check("a > ")
        assert.equal(R.SUBSCRIPTION_PARSE_FAILED, r.code)
        assert.matches("^org%.apache%.rocketmq%.filter%.parser%.ParseException: Encountered", r.remark)
        r = check("a = NULL")
        assert.equal(R.SUBSCRIPTION_PARSE_FAILED, r.code)
        assert.equal("java.lang.RuntimeException: 'NULL' cannot be compared.", r.remark)
    end)

    it("filters a heartbeat's SQL92 subscription on pulls without FLAG_SUBSCRIPTION", function()
        local function heartbeat(expr, version)
            return assert(conn:call({ code = req.HEART_BEAT, body = cjson.encode({
                clientID = "127.0.0.1@sql", producerDataSet = setmetatable({}, cjson.array_mt),
                consumerDataSet = { { groupName = "FxSqlGroup", consumeType = "CONSUME_PASSIVELY",
                    messageModel = "CLUSTERING", consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET", unitMode = false,
                    subscriptionDataSet = { { topic = topic, subString = expr, expressionType = "SQL92",
                        tagsSet = setmetatable({}, cjson.array_mt), codeSet = setmetatable({}, cjson.array_mt),
                        subVersion = version } } } } }) }))
        end
        assert.equal(0, heartbeat("a >= 30", 100).code)
        local got = pull_all(conn, { topic = topic, sysFlag = 0, subVersion = 100 })
        assert.same(expected(function(p) return num(p.a) and num(p.a) >= 30 end), got)
        -- A newer version that does not compile: the broker has no filter data.
        assert.equal(0, heartbeat("a >= ", 200).code)
        local r = assert(conn:call({ code = req.PULL_MESSAGE, ext = {
            consumerGroup = "FxSqlGroup", topic = topic, queueId = 0, queueOffset = 0, maxMsgNums = 8,
            sysFlag = 0, subVersion = 200 } }))
        assert.equal(R.FILTER_DATA_NOT_EXIST, r.code)
        assert.equal("The broker's consumer filter data is not exist!Your expression may be wrong!", r.remark)
    end)

    it("delivers to the project's push consumer and to rmq consume --sql only the matching messages", function()
        local consumer = require("rmq.client.consumer")
        local c = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "FxSqlPush",
                                 consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET" })
        c:subscribe(topic, "a BETWEEN 10 AND 19 AND s = 'x'", "SQL92")
        local got = {}
        c:on_message(function(msgs)
            for _, m in ipairs(msgs) do got[#got + 1] = tonumber(m.properties.n) end
            return "CONSUME_SUCCESS"
        end)
        c:start()
        local want = expected(function(p) return num(p.a) and num(p.a) >= 10 and num(p.a) <= 19 and p.s == "x" end)
        assert.truthy(server.eventually(function() return #got >= #want end, 10000))
        net.sleep(300)
        c:shutdown()
        table.sort(got)
        assert.same(want, got)
        -- A bad expression: start() raises the broker's reason.
        local bad = consumer.new({ namesrvAddr = e.ns_addr, consumerGroup = "FxSqlPushBad" })
        bad:subscribe(topic, "a >", "SQL92")
        bad:on_message(function() return "CONSUME_SUCCESS" end)
        local ok, err = pcall(bad.start, bad)
        assert.is_false(ok)
        assert.matches("code 23 org%.apache%.rocketmq%.filter%.parser%.ParseException", err)

        local p = io.popen(server.home_prefix() .. ("%s/rmq consume -n %s -t %s -g FxSqlCli -c 3 --from first --json --sql \"%s\" 2>&1")
            :format(server.build, e.ns_addr, topic, "s = 'z' AND a IS NOT NULL"))
        local out = p:read("a")
        p:close()
        local n = 0
        for line in out:gmatch("[^\n]+") do
            local m = cjson.decode(line)
            n = n + 1
            local i = tonumber(m.body:match("^m(%d+)$"))
            local props = props_of(i)
            assert.equal("z", props.s, line)
            assert.is_not_nil(props.a, line)
        end
        assert.equal(3, n, out)
    end)

    it("drops messages by property with a Lua pull filter, keeps them when it fails", function()
        send_all(e, "FxLuaTopic")
        local got = pull_all(conn, { topic = "FxLuaTopic", subscription = "*", expressionType = "TAG" })
        assert.same(expected(function(p) return p.drop ~= "yes" end), got)
        -- with a tag filter too
        got = pull_all(conn, { topic = "FxLuaTopic", subscription = "TagA" })
        assert.same(expected(function(p) return p.drop ~= "yes" and p.TAGS == "TagA" end), got)
        send_all(e, "FxLuaBroken")
        got = pull_all(conn, { topic = "FxLuaBroken", subscription = "*" })
        assert.equal(N, #got)
        assert.truthy(server.eventually(function()
            return e.broker:log():find("pull filter FxLuaBroken@FxSqlGroup failed (the message is kept; logged once)",
                                       1, true)
        end, 3000), e.broker:log())
    end)

    -- The Lua filter runs inside the C read, held pulls included: a
    -- long poll on a filtered queue is answered with what the filter
    -- keeps (a message it drops does not answer it with nothing).
    it("holds a long poll on a Lua-filtered topic and answers it with what the filter keeps", function()
        local held = "FxLuaHeld"
        e:route(held, 1)
        -- The first message makes the topic (the producer's auto-create).
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxSqlProducer" })
        assert.equal("SEND_OK", assert(p:send({ topic = held, body = "f", properties = { n = "0" } })).status)
        local c2 = assert(net.connect(e.addr))
        local res
        net.spawn(function()
            res = assert(c2:call(rq.pull({ group = "FxSqlGroup", topic = held, offset = 1,
                                           sysflag = FLAG_SUBSCRIPTION | 0x2, suspend = 20000, expr = "TAG" }),
                                 60000))
        end)
        -- Requests on a connection are read in order: once this one is
        -- answered, the pull before it is held.
        assert.equal(0, assert(c2:call({ code = req.GET_BROKER_RUNTIME_INFO }, 30000)).code)
        assert.is_nil(res)
        assert.equal("SEND_OK", assert(p:send({ topic = held, body = "d", properties = { n = "1", drop = "yes" } })).status)
        assert.equal("SEND_OK", assert(p:send({ topic = held, body = "k", properties = { n = "2" } })).status)
        if p.close then p:close() end
        assert.truthy(server.eventually(function() return res end, 30000), "the held pull was not answered")
        assert.equal(R.SUCCESS, res.code, res.remark)
        local got, pos = {}, 1
        while pos <= #res.body do
            local rec, nxt = assert(message.decode_record(res.body, pos))
            got[#got + 1] = tonumber(rec.properties.n)
            pos = nxt
        end
        assert.same({ 2 }, got)
        assert.equal("3", res.ext.nextBeginOffset)
        c2:close()
    end)
end)
end

describe("SQL92 with filterSupportRetry", function()
    local e

    setup(function()
        e = env.start({ workers = 2, enablePropertyFilter = true, filterSupportRetry = true })
    end)

    teardown(function()
        e:stop()
    end)

    it("judges each message of a retry topic by the group's filter of its RETRY_TOPIC", function()
        local group = "FxRetryGroup"
        local retry = "%RETRY%" .. group
        e:route("FxRetryReal", 1)
        e:route(retry, 1)
        local conn = assert(net.connect(e.addr))
        local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FxRetryProducer" })
        for i = 0, 9 do
            local r = assert(p:send({ topic = retry, body = "m" .. i,
                                      properties = { a = tostring(i), n = tostring(i), RETRY_TOPIC = "FxRetryReal" } }))
            assert.equal("SEND_OK", r.status)
        end
        -- one retried message of a topic the group filters by tag: passes
        assert(p:send({ topic = retry, body = "m10", properties = { n = "10", RETRY_TOPIC = "FxTagTopic" } }))
        local function sub(topic, expr, etype)
            return { topic = topic, subString = expr, expressionType = etype, subVersion = 1,
                     tagsSet = setmetatable({}, cjson.array_mt), codeSet = setmetatable({}, cjson.array_mt) }
        end
        local r = assert(conn:call({ code = req.HEART_BEAT, body = cjson.encode({
            clientID = "127.0.0.1@retry", producerDataSet = setmetatable({}, cjson.array_mt),
            consumerDataSet = { { groupName = group, consumeType = "CONSUME_PASSIVELY",
                messageModel = "CLUSTERING", consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET", unitMode = false,
                subscriptionDataSet = { sub("FxRetryReal", "a >= 7", "SQL92"), sub(retry, "*", "TAG"),
                                        sub("FxTagTopic", "*", "TAG") } } } }) }))
        assert.equal(0, r.code)
        local got = pull_all(conn, { consumerGroup = group, topic = retry, sysFlag = 0, subVersion = 1 })
        assert.same({ 7, 8, 9, 10 }, got)
        conn:close()
    end)
end)

describe("SQL92 with enablePropertyFilter = false", function()
    local e

    setup(function()
        e = env.start({ workers = 1 })
    end)

    teardown(function()
        e:stop()
    end)

    it("refuses as 4.9.8 at CHECK_CLIENT_CONFIG and at pull", function()
        send_all(e, "FxSqlOff")
        local conn = assert(net.connect(e.addr))
        local r = assert(conn:call({ code = req.CHECK_CLIENT_CONFIG, body = cjson.encode({
            clientId = "x", group = "G", subscriptionData = { topic = "FxSqlOff", subString = "a > 1",
                                                                expressionType = "SQL92" } }) }))
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("The broker does not support consumer to filter message by SQL92", r.remark)
        r = assert(conn:call({ code = req.PULL_MESSAGE, ext = {
            consumerGroup = "FxSqlGroup", topic = "FxSqlOff", queueId = 0, queueOffset = 0, maxMsgNums = 8,
            sysFlag = FLAG_SUBSCRIPTION, subscription = "a > 1", expressionType = "SQL92" } }))
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.equal("The broker does not support consumer to filter message by SQL92", r.remark)
        -- Switched on at run time (UPDATE_BROKER_CONFIG), in C and Lua alike.
        r = assert(conn:call({ code = 25, body = "enablePropertyFilter=true\n" }))
        assert.equal(0, r.code, r.remark)
        local ext = { topic = "FxSqlOff", subscription = "a < 3", expressionType = "SQL92" }
        assert.same(expected(function(p) return num(p.a) and num(p.a) < 3 end), pull_all(conn, ext))
        r = assert(conn:call({ code = 25, body = "enablePropertyFilter=false\n" }))
        assert.equal(0, r.code, r.remark)
        r = assert(conn:call({ code = req.PULL_MESSAGE, ext = {
            consumerGroup = "FxSqlGroup", topic = "FxSqlOff", queueId = 0, queueOffset = 0, maxMsgNums = 8,
            sysFlag = FLAG_SUBSCRIPTION, subscription = "a < 3", expressionType = "SQL92" } }))
        assert.equal(R.SYSTEM_ERROR, r.code)
        conn:close()
    end)
end)
