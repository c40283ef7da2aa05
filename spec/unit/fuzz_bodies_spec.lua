-- Regressions found by fuzz_bodies (fuzz/fuzz_bodies.c + fuzz/bodies.lua,
-- run by scripts/fuzz.sh): each input is the fuzzer's, minimized, and
-- the spec asserts the clean behaviour.  The last case runs the fuzz
-- driver itself over all of them, so its shape checks hold here too.
local cjson = require("cjson")
local fastjson = require("rmq.fastjson")
local register = require("rmq.namesrv.register")
local creg = require("rmq.client_registry")
local topics = require("rmq.broker.topics")

local INT32_MIN, INT32_MAX = -2147483648, 2147483647

-- Minimized inputs, by finding.
local INPUTS = {
    -- fastjson.quote_keys met a '-' that starts no number where a key
    -- belongs and raised ("attempt to get length of a nil value").
    bare_minus = "{-{5",
    -- register.decode passed a topicSysFlag beyond a Java int; the C
    -- registry stored it truncated to int32.
    sysflag_big = '{"topicConfigSerializeWrapper":{"topicConfigTable":{"\xFF":'
        .. '{"topicSysFlag":2147486481}}}}',
    -- filter.normalize (Lua; the C registry normalises now) returned a float subVersion (math.floor of a
    -- number beyond 2^63): not an integer, inf/NaN not even encodable.
    subversion_huge = '{"consumerDataSet":[{"groupName":"F","subscriptionDataSet":'
        .. '[{"subVersion":"15942949672962069366","topic":"%"}]}]}',
    -- filter's trim() was quadratic in a run of inner blanks: this
    -- heartbeat took seconds (a 1 MiB one, hours).
    subscription_blanks = '{"consumerDataSet":[{"groupName":"g","subscriptionDataSet":'
        .. '[{"topic":"t","subString":"a' .. (" "):rep(30000) .. 'b"}]}]}',
    -- topics.normalize accepted queue counts beyond a Java int and
    -- negative ones, and a topic named "".
    queues_big = '{"topicConfigTable":{"T":{"readQueueNums":42949672964}}}',
    queues_negative = '{"topicConfigTable":{"T":{"writeQueueNums":-1}}}',
    topic_unnamed = '{"topicConfigTable":{"":{}}}',
    -- A subscription group config (the fixture store's own file was a
    -- seed): the driver encoded it through a Lua encoder that moved to C.
    group_config = '{"dataVersion":{"counter":1,"timestamp":1},"subscriptionGroupTable":'
        .. '{"G":{"groupName":"G","retryMaxTimes":3,"consumeEnable":true}},'
        .. '"groupName":"G","retryMaxTimes":3}',

}

-- The subscriptions of a heartbeat as the client registry (the one place
-- they are normalised) stores them; `sub_fields` is the JSON text of one
-- SubscriptionData's fields, so that numbers JSON has and Lua cannot
-- encode (1e999) can be sent.
local function stored_sub(body, group, topic)
    local r = creg.new()
    local ok, err = r:heartbeat(1, body, "JAVA", 409, "a:1")
    if not ok then
        return nil, err
    end
    return r:subscription(group, topic)
end

local function normalize(sub_fields)
    return stored_sub('{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY",'
        .. '"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
        .. '"subscriptionDataSet":[{"topic":"T",' .. sub_fields .. '}]}]}', "G", "T")
end

local function first_sub(body)
    local cd = assert(fastjson.decode(body)).consumerDataSet[1]
    return stored_sub((body:gsub("^{", '{"clientID":"c",', 1)), cd.groupName, cd.subscriptionDataSet[1].topic)
end

describe("fuzz_bodies regressions", function()
    it("fastjson.decode refuses a '-' that is not a bare key, without raising", function()
        local ok, v, err = pcall(fastjson.decode, INPUTS.bare_minus)
        assert.is_true(ok)
        assert.is_nil(v)
        assert.is_string(err)
        for _, s in ipairs({ "{-}", "[{-,0:1}]", '{"a":{-x:1}}' }) do
            ok, v = pcall(fastjson.decode, s)
            assert.is_true(ok, s)
            assert.is_nil(v, s)
        end
        -- Bare numeric keys, negative ones included, are still quoted.
        assert.same({ a = { ["0"] = 25, ["-1"] = 2 } }, fastjson.decode('{"a":{0:25,-1:2}}'))
    end)

    it("register.decode refuses numbers a Java int cannot hold and negative queue counts", function()
        local reg, err = register.decode(INPUTS.sysflag_big, { compressed = false })
        assert.is_nil(reg)
        assert.matches("topicSysFlag is 2147486481, outside", err, 1, true)
        local function json(tc)
            return register.decode(cjson.encode({ topicConfigSerializeWrapper = {
                topicConfigTable = { T = tc } } }))
        end
        for _, tc in ipairs({ { readQueueNums = -1 }, { writeQueueNums = INT32_MAX + 1 },
                              { perm = INT32_MIN - 1 }, { topicSysFlag = 2 ^ 40 } }) do
            local r, e = json(tc)
            assert.is_nil(r, cjson.encode(tc))
            assert.matches("outside", e)
        end
        -- The limits themselves are Java ints.
        reg = assert(json({ readQueueNums = INT32_MAX, writeQueueNums = 0, perm = INT32_MIN,
                            topicSysFlag = INT32_MAX }))
        assert.same({ { name = "T", read = INT32_MAX, write = 0, perm = INT32_MIN,
                        sysflag = INT32_MAX } }, reg.topics)
    end)

    it("register.decode refuses the same in a compressed body's topic records", function()
        local core = require("rmq.core")
        local function compressed(text)
            local dv = '{"counter":1,"timestamp":2}'
            local raw = string.pack(">s4i4s4s4", dv, 1, text, "[]")
            return register.decode(core.deflate(raw), { compressed = true })
        end
        for _, text in ipairs({ "T -1 8 6 SINGLE_TAG", "T 8 4294967296 6 SINGLE_TAG",
                                "T 8 8 2147483648 SINGLE_TAG" }) do
            local r, e = compressed(text)
            assert.is_nil(r, text)
            assert.matches("outside", e)
        end
        local reg = assert(compressed("T 8 8 6 SINGLE_TAG"))
        assert.same({ { name = "T", read = 8, write = 8, perm = 6, sysflag = 0 } }, reg.topics)
    end)

    it("the registry gives an integer subVersion, or refuses the heartbeat", function()
        -- Beyond a Java long (a number, or a string of one): the heartbeat
        -- is refused with the field named, as the C decoder refuses it
        -- everywhere; nothing half-stored.
        local none, err = first_sub(INPUTS.subversion_huge)
        assert.is_nil(none)
        assert.matches("subVersion", err, 1, true)
        for _, v in ipairs({ "1e999", "-1e999", "1e300" }) do
            none, err = normalize('"subVersion":' .. v)
            assert.is_nil(none, v)
            assert.matches("subVersion", err, 1, true)
        end
        -- What clients send is kept: integers, integral floats, strings.
        assert.equal(1796034695487, normalize('"subVersion":1.796034695487e12').subVersion)
        assert.equal(1796034683463, normalize('"subVersion":"1796034683463"').subVersion)
        assert.equal("integer", math.type(normalize('"subVersion":-2.5').subVersion))
        for _, v in ipairs({ '"-1e300"', '"nan"' }) do
            local sub, why = normalize('"subVersion":' .. v)
            assert.is_true(sub == nil and why:find("subVersion", 1, true) ~= nil
                           or sub ~= nil and math.type(sub.subVersion) == "integer", v)
        end
    end)

    it("the registry trims a subString in linear time", function()
        local sub = assert(first_sub(INPUTS.subscription_blanks))
        assert.same({ "a" .. (" "):rep(30000) .. "b" }, sub.tagsSet)
        -- Trimming: blanks around the expression and each tag.
        sub = normalize('"subString":" \\t a ||  b c \\n|| a||||  "')
        assert.same({ "a", "b c" }, sub.tagsSet)
        assert.equal(" \t a ||  b c \n|| a||||  ", sub.subString)
        assert.equal("*", normalize('"subString":"  *\\t"').subString)
        assert.same({}, normalize('"subString":"   "').tagsSet)
    end)

    it("topics.normalize refuses queue counts outside 0..65535 and a topic without a name", function()
        for _, key in ipairs({ "queues_big", "queues_negative", "topic_unnamed" }) do
            local doc = assert(fastjson.decode(INPUTS[key]))
            local name, raw = next(doc.topicConfigTable)
            local cfg, err = topics.normalize(name, raw)
            assert.is_nil(cfg, key)
            assert.is_string(err)
        end
        local cfg = assert(topics.normalize("T", { readQueueNums = 65535, writeQueueNums = 0,
                                                   perm = 15, topicSysFlag = INT32_MIN }))
        assert.equal(65535, cfg.readQueueNums)
        assert.is_nil(topics.normalize("T", { readQueueNums = 65536 }))
        assert.is_nil(topics.normalize("T", { perm = -1 }))
        assert.equal(0, cfg.writeQueueNums)
        -- The name may come from the config when the key is empty.
        assert.equal("X", topics.normalize("", { topicName = "X" }).topicName)
    end)

    it("the fuzz driver finds nothing in these inputs", function()
        local driver = dofile("fuzz/bodies.lua")
        for key, body in pairs(INPUTS) do
            local ok, err = pcall(driver, body)
            assert(ok, key .. ": " .. tostring(err))
        end
    end)
end)
