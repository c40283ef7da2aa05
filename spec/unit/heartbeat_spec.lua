-- The HEART_BEAT body reader (src/proto/heartbeat.c) and the client
-- registry (src/broker/client_registry.c) through rmq.client_registry,
-- in one Lua state: every captured heartbeat, every client dialect,
-- malformed and hostile bodies (clean errors, never a crash), RocketMQ's
-- name rules, the subscription normalisation rmq.broker.filter defines,
-- and the registry's rules (updateSubscription, channels, limits,
-- expiry).  broker_scale_groups_spec.lua runs it in a real broker.
local creg = require("rmq.client_registry")
local codec = require("rmq.codec")
local cjson = require("cjson")
local message = require("rmq.message")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)

local ENUM_NAMES = {
    consumeType = { [0] = "CONSUME_ACTIVELY", [1] = "CONSUME_PASSIVELY" },
    messageModel = { [0] = "BROADCASTING", [1] = "CLUSTERING" },
    consumeFromWhere = { [4] = "CONSUME_FROM_FIRST_OFFSET", [0] = "CONSUME_FROM_LAST_OFFSET" },
}

local function enum_name(field, v)
    if type(v) == "number" then
        return ENUM_NAMES[field][v]
    end
    return v
end

local function list(v)
    return type(v) == "table" and v or {}
end

-- Every captured HEART_BEAT request body (JSON and ROCKETMQ headers).
local function captured()
    local out = {}
    for _, file in ipairs(fixtures.frame_files()) do
        for _, row in ipairs(fixtures.frames(file)) do
            if row.dir == "c2s" and row.decoded.code == 34 then
                local cmd = assert(codec.decode(row.raw))
                out[#out + 1] = { file = file, body = cmd.body }
            end
        end
    end
    return out
end

local function body(t)
    return cjson.encode(t)
end

local function consumer(group, subs, extra)
    local cd = { groupName = group, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
                 consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
                 subscriptionDataSet = subs or {} }
    for k, v in pairs(extra or {}) do
        cd[k] = v
    end
    return cd
end

local function sub(topic, version, sub_string)
    return { topic = topic, subString = sub_string or "*", subVersion = version or 1,
             tagsSet = {}, codeSet = {}, classFilterMode = false, expressionType = "TAG" }
end

local function hb(client_id, consumers, producers)
    return body({ clientID = client_id, consumerDataSet = consumers or {}, producerDataSet = producers or {} })
end

local function parse_err(text, limits)
    local t, err = creg.parse(text, limits)
    assert.is_nil(t, "accepted: " .. text:sub(1, 200))
    assert.is_string(err)
    return err
end

describe("heartbeat reader", function()
    fx_it("reads every captured HEART_BEAT as lua-cjson reads it", function()
        local bodies = captured()
        assert.is_true(#bodies >= 5)
        for _, c in ipairs(bodies) do
            local t = assert(creg.parse(c.body))
            local want = cjson.decode(c.body)
            assert.equal(want.clientID, t.clientID, c.file)
            local cds = list(want.consumerDataSet)
            assert.equal(#cds, #t.consumerDataSet, c.file)
            for i, cd in ipairs(cds) do
                local got = t.consumerDataSet[i]
                assert.equal(cd.groupName, got.groupName, c.file)
                for _, f in ipairs({ "consumeType", "messageModel", "consumeFromWhere" }) do
                    assert.equal(enum_name(f, cd[f]), got[f], c.file .. " " .. f)
                end
                assert.equal(cd.unitMode == true, got.unitMode)
                local sds = list(cd.subscriptionDataSet)
                assert.equal(#sds, #got.subscriptionDataSet, c.file)
                for k, sd in ipairs(sds) do
                    local gs = got.subscriptionDataSet[k]
                    assert.equal(sd.topic, gs.topic)
                    assert.equal(sd.subString, gs.subString)
                    assert.equal(math.tointeger(tonumber(sd.subVersion)), gs.subVersion)
                    assert.equal(sd.classFilterMode == true, gs.classFilterMode)
                    assert.equal(sd.expressionType, gs.expressionType)
                    assert.same(list(sd.tagsSet), gs.tagsSet)
                end
            end
            local pds = list(want.producerDataSet)
            assert.equal(#pds, #t.producerDataSet, c.file)
            for i, pd in ipairs(pds) do
                assert.equal(pd.groupName, t.producerDataSet[i].groupName)
            end
        end
    end)

    it("keeps what a cpp consumer sends: ordinals, string subVersion, no arrays, a newline", function()
        local t = assert(creg.parse('{"clientID":"127.0.0.1@1#x","consumerDataSet":[{"consumeFromWhere":4,'
            .. '"consumeType":1,"groupName":"G","messageModel":"1","subscriptionDataSet":[{"subString":"a || b",'
            .. '"subVersion":"1796034683463","topic":"T","tagsSet":["a","b"],"codeSet":[0,0]}]}]}\n'))
        local cd = t.consumerDataSet[1]
        assert.equal("CONSUME_PASSIVELY", cd.consumeType)
        assert.equal("CLUSTERING", cd.messageModel)
        assert.equal("CONSUME_FROM_FIRST_OFFSET", cd.consumeFromWhere)
        assert.equal(1796034683463, cd.subscriptionDataSet[1].subVersion)
        assert.same({ 0, 0 }, cd.subscriptionDataSet[1].codeSet)
        assert.same({}, t.producerDataSet)
        -- lua-cjson writes an empty table as {}: an empty array here.
        t = assert(creg.parse('{"clientID":"x","consumerDataSet":{},"producerDataSet":null}'))
        assert.same({}, t.consumerDataSet)
        -- Numbers written as floats, nulls, unknown keys of any shape.
        t = assert(creg.parse('{"clientID":null,"extra":{"a":[1,{"b":null}],"c":-1.5e3},'
            .. '"consumerDataSet":[{"groupName":"G","consumeType":null,"future":[[]],'
            .. '"subscriptionDataSet":[{"topic":"T","subVersion":1.796034695487e12,"filterClassSource":null}]}]}'))
        assert.is_nil(t.clientID)
        assert.is_nil(t.consumerDataSet[1].consumeType)
        assert.equal(1796034695487, t.consumerDataSet[1].subscriptionDataSet[1].subVersion)
        -- Escapes are decoded; a key given twice counts once, the last.
        t = assert(creg.parse('{"clientID":"a\\"b\\u00e9\\ud83d\\ude00","consumerDataSet":[{"groupName":"X"}],'
            .. '"consumerDataSet":[{"groupName":"\\u0047roup"}]}'))
        assert.equal('a"b\u{e9}\u{1F600}', t.clientID)
        assert.equal(1, #t.consumerDataSet)
        assert.equal("Group", t.consumerDataSet[1].groupName)
    end)

    fx_it("refuses malformed bodies with the byte offset", function()
        assert.matches("empty body", parse_err(""))
        assert.matches("offset 1", parse_err("{nope"))
        assert.matches("expected a HeartbeatData object at offset 0", parse_err("[]"))
        assert.matches("object at offset 0", parse_err("null"))
        assert.matches("unexpected text after the object at offset 3", parse_err("{} {}"))
        assert.matches("bad escape", parse_err('{"clientID":"\\x"}'))
        assert.matches("bad \\u escape", parse_err('{"clientID":"\\u12"}'))
        assert.matches("bad number", parse_err('{"a":-}'))
        assert.matches("expected ':'", parse_err('{"a" 1}'))
        -- Every truncation of a real heartbeat is an error, never a crash.
        local full = captured()[1].body
        for n = 0, #full - 1 do
            local cut = full:sub(1, n)
            if not cut:match("^%s*{.*}%s*$") then
                local err = parse_err(cut)
                assert.matches("offset %d+", err)
            end
        end
    end)

    it("names the field of a value of the wrong type", function()
        local function bad(cd_json, pattern)
            local err = parse_err('{"consumerDataSet":[{"groupName":"G"},' .. cd_json .. ']}')
            assert.matches(pattern, err, 1, true)
        end
        bad('{"groupName":7}', "expected a string at offset 51 (consumerDataSet[1].groupName)")
        bad('{"groupName":"G","consumeType":"FOO"}', "not a ConsumeType")
        bad('{"groupName":"G","messageModel":9}', "not a MessageModel at offset 70 (consumerDataSet[1].messageModel)")
        bad('{"groupName":"G","consumeFromWhere":true}', "expected an enum name or ordinal")
        bad('{"groupName":"G","unitMode":"yes"}', "expected true or false")
        bad('{"groupName":"G","subscriptionDataSet":"T"}', "expected an array")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","subVersion":"abc"}]}',
            "expected a number in the string at offset 104 (consumerDataSet[1].subscriptionDataSet[0].subVersion)")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","subVersion":true}]}', "expected a number")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","subVersion":1e30}]}', "64-bit range")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","tagsSet":[1]}]}', "expected a string")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","codeSet":["x"]}]}', "expected a number")
        bad('{"groupName":"G","subscriptionDataSet":[{"topic":"T","codeSet":[4294967296]}]}', "not a 32-bit integer")
        bad('{"groupName":"G","subscriptionDataSet":[7]}', "expected a SubscriptionData object")
        bad('3', "expected a ConsumerData object at offset 38 (consumerDataSet[1])")
        assert.matches("expected a string at offset 12 (clientID)", parse_err('{"clientID":5}'), 1, true)
        assert.matches("expected a ProducerData object", parse_err('{"producerDataSet":[[]]}'), 1, true)
    end)

    it("applies RocketMQ's group and topic rules, naming the field", function()
        local function refused(cds, pds)
            return parse_err(hb("c", cds, pds))
        end
        assert.equal('consumerDataSet[3].groupName "../../x" contains illegal characters, '
            .. "allowing only ^[%|a-zA-Z0-9_-]+$",
            refused({ consumer("A"), consumer("B"), consumer("C"), consumer("../../x") }))
        assert.matches('consumerDataSet[0].groupName "" is blank', refused({ consumer("") }), 1, true)
        assert.matches('"a b" contains illegal', refused({ consumer("a b") }), 1, true)
        assert.matches('"\\x01" contains illegal', refused({ consumer("\1") }), 1, true)
        assert.matches('"\\x0A" is blank', refused({ consumer("\n") }), 1, true)
        assert.matches("is longer than 255 characters", refused({ consumer(("g"):rep(256)) }), 1, true)
        assert.matches('consumerDataSet[0].subscriptionDataSet[1].topic "T.x" contains illegal',
            refused({ consumer("G", { sub("T"), sub("T.x") }) }), 1, true)
        assert.matches("is longer than 127 characters",
            refused({ consumer("G", { sub(("t"):rep(128)) }) }), 1, true)
        assert.matches('producerDataSet[1].groupName "p/q" contains illegal',
            refused({}, { { groupName = "P" }, { groupName = "p/q" } }), 1, true)
        assert.matches("consumerDataSet[0].groupName is missing", parse_err('{"consumerDataSet":[{}]}'), 1, true)
        assert.matches("subscriptionDataSet[0].topic is missing",
            parse_err('{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":null}]}]}'), 1, true)
        -- The longest legal names and every allowed character.
        assert(creg.parse(hb("c", { consumer(("g"):rep(255), { sub(("t"):rep(127)) }),
                                   consumer("%RETRY%a|b_c-D9", { sub("%DLQ%x|y_z-0") }) })))
        -- Shown names are bounded.
        local err = refused({ consumer(("x"):rep(1000) .. "/") })
        assert.is_true(#err < 300)
    end)

    it("bounds nesting, array lengths and strings", function()
        assert.matches("nesting too deep", parse_err('{"a":' .. ("["):rep(100000) .. ("]"):rep(100000) .. "}"))
        assert.matches("nesting too deep", parse_err(("{\"a\":"):rep(50) .. "1" .. ("}"):rep(50)))
        assert.matches("nesting too deep", parse_err('{"a":[[1]]}', { maxDepth = 2 }))
        local many = {}
        for i = 1, 11 do
            many[i] = consumer("G" .. i, { sub("T") })
        end
        assert.matches("more than 10 consumer groups at offset", parse_err(hb("c", many), { maxConsumers = 10 }))
        assert.matches("more than 3 subscriptions in one consumer",
            parse_err(hb("c", { consumer("G", { sub("A"), sub("B"), sub("C"), sub("D") }) }), { maxSubscriptions = 3 }))
        assert.matches("more than 5 subscriptions in one heartbeat",
            parse_err(hb("c", { consumer("G", { sub("A"), sub("B"), sub("C") }),
                               consumer("H", { sub("A"), sub("B"), sub("C") }) }), { maxSubscriptionsTotal = 5 }))
        assert.matches("more than 2 producer groups",
            parse_err(hb("c", {}, { { groupName = "a" }, { groupName = "b" }, { groupName = "c" } }), { maxProducers = 2 }))
        assert.matches("more than 2 tags",
            parse_err('{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","tagsSet":["a","b","c"]}]}]}',
                { maxTags = 2 }))
        assert.matches("string of 11 bytes, more than 10", parse_err('{"clientID":"12345678901"}', { maxString = 10 }))
        -- A huge array of junk in an unknown key is walked, then refused
        -- only if malformed.
        assert(creg.parse('{"junk":[' .. ("1,"):rep(100000) .. '1],"clientID":"c"}'))
    end)

    fx_it("survives mutated heartbeats (clean results or clean errors)", function()
        local seed = 12345
        local function rand(n)
            seed = (seed * 1103515245 + 12345) % 2147483648
            return seed % n + 1
        end
        local alphabet = '{}[]",:\\u0123456789-.eEtrufalsn /%|_aZ'
        local r = creg.new()
        local applied = 0
        for _, c in ipairs(captured()) do
            for k = 1, 400 do
                local b = c.body
                for _ = 1, rand(3) do
                    local i = rand(#b)
                    local op = rand(4)
                    if op == 1 then
                        local ch = rand(#alphabet)
                        b = b:sub(1, i - 1) .. alphabet:sub(ch, ch) .. b:sub(i + 1)
                    elseif op == 2 then
                        b = b:sub(1, i - 1) .. b:sub(i + rand(8))
                    elseif op == 3 then
                        local j = math.min(#b, i + rand(40))
                        b = b:sub(1, j) .. b:sub(i, j) .. b:sub(j + 1)
                    else
                        local ch = rand(#alphabet)
                        b = b:sub(1, i) .. alphabet:sub(ch, ch) .. b:sub(i + 1)
                    end
                end
                local t, err = creg.parse(b)
                assert.is_true(type(t) == "table" or type(err) == "string")
                local res, herr = r:heartbeat(k % 7 + 1, b, "JAVA", 409, "a:1", k)
                assert.is_true(type(res) == "table" or type(herr) == "string")
                if res then
                    applied = applied + 1
                end
            end
        end
        assert.is_true(applied > 0)
        for conn = 1, 7 do
            r:conn_closed(conn)
        end
        assert.same({ consumerGroups = 0, producerGroups = 0, connections = 0, channels = 0, subscriptions = 0 },
            r:counts())
    end)
end)

describe("subscriptions in the registry", function()
    local function stored(sd)
        local r = creg.new()
        local t = { clientID = "c", consumerDataSet = { consumer("G", { sd }) } }
        assert(r:heartbeat(1, cjson.encode(t), "JAVA", 409, "a:1"))
        return (r:subscription("G", sd.topic))
    end

    -- What 4.9.8's FilterAPI.buildSubscriptionData makes of each (the
    -- registry is the one place subscriptions are normalised): subString
    -- as sent ("*" for an empty or absent one), the tags split on "||",
    -- trimmed, empty ones and repeats dropped, each tag's code its hash.
    it("are normalised as FilterAPI.buildSubscriptionData does", function()
        local cases = {
            { { topic = "T", subString = "*" }, "*", {} },
            { { topic = "T", subString = " * " }, "*", {} },
            { { topic = "T", subString = "" }, "*", {} },
            { { topic = "T" }, "*", {} },
            { { topic = "T", subString = "TagA" }, "TagA", { "TagA" } },
            { { topic = "T", subString = "TagA || TagB ||TagA" }, "TagA || TagB ||TagA", { "TagA", "TagB" } },
            { { topic = "T", subString = "a|||b" }, "a|||b", { "a", "|b" } },
            { { topic = "T", subString = "a||" }, "a||", { "a" } },
            { { topic = "T", subString = "a|" }, "a|", { "a|" } },
            { { topic = "T", subString = "x||a|" }, "x||a|", { "x", "a|" } },
            { { topic = "T", subString = "|" }, "|", { "|" } },
            { { topic = "T", subString = "a|||" }, "a|||", { "a", "|" } },
            { { topic = "T", subString = "||" }, "||", {} },
            { { topic = "T", subString = "   " }, "   ", {} },
            { { topic = "T", subString = "\tx\v||\fy\r" }, "\tx\v||\fy\r", { "x", "y" } },
            { { topic = "T", subString = "héllo || wörld ✓ || 😀" }, "héllo || wörld ✓ || 😀",
              { "héllo", "wörld ✓", "😀" } },
            { { topic = "T", subString = "1 || x", codeSet = { 1, 0 }, subVersion = "1796034683463" }, "1 || x",
              { "1", "x" }, { subVersion = 1796034683463 } },
            { { topic = "T", subString = "a > 1", expressionType = "SQL92" }, "a > 1", {}, { expressionType = "SQL92" } },
            { { topic = "T", subString = "a", expressionType = "" }, "a", { "a" } },
            { { topic = "T", subString = "a", expressionType = "TAG", classFilterMode = true, subVersion = 7 }, "a",
              { "a" }, { subVersion = 7, classFilterMode = true } },
        }
        local tags, want_tags = {}, {}
        for i = 1, 40 do
            tags[#tags + 1] = "t" .. (i % 25)
            if i <= 25 then
                want_tags[#want_tags + 1] = "t" .. (i % 25)
            end
        end
        cases[#cases + 1] = { { topic = "T", subString = table.concat(tags, " || ") }, table.concat(tags, " || "), want_tags }
        for _, c in ipairs(cases) do
            local sd, sub_string, tagset, extra = c[1], c[2], c[3], c[4] or {}
            local codes = {}
            for i, t in ipairs(tagset) do
                codes[i] = message.java_hash(t)
            end
            local want = { topic = "T", subString = sub_string, tagsSet = tagset, codeSet = codes,
                           expressionType = extra.expressionType or "TAG", subVersion = extra.subVersion or 0,
                           classFilterMode = extra.classFilterMode or false }
            local got = assert(stored(sd))
            assert.same(want, got, cjson.encode(sd))
        end
        -- The codes are Java's String.hashCode of the tags.
        local got = stored({ topic = "T", subString = "TagA||héllo" })
        assert.same({ message.java_hash("TagA"), message.java_hash("héllo") }, got.codeSet)
    end)
end)

describe("client registry", function()
    local r

    before_each(function()
        r = creg.new()
    end)

    local function beat(conn, client_id, cds, pds, now)
        local res, err = r:heartbeat(conn, hb(client_id, cds, pds), "JAVA", 409, "127.0.0.1:" .. conn, now)
        assert(res, err)
        return res
    end

    it("follows updateSubscription and reports the changed groups", function()
        local res = beat(1, "c1", { consumer("G", { sub("A", 5), sub("B", 5) }) })
        assert.same({ "G" }, res.changed)
        assert.same({ { 1 } }, res.conns)
        assert.same({ "G" }, res.new)
        -- Same again: nothing changed.
        res = beat(1, "c1", { consumer("G", { sub("A", 5), sub("B", 5) }) })
        assert.same({}, res.changed)
        assert.same({}, res.new)
        -- An older or equal subVersion keeps the stored one; a newer one
        -- replaces it without counting as a change (4.9.8).
        beat(1, "c1", { consumer("G", { sub("A", 4, "x"), sub("B", 5, "y") }) })
        assert.equal("*", r:subscription("G", "A").subString)
        assert.equal("*", r:subscription("G", "B").subString)
        res = beat(1, "c1", { consumer("G", { sub("A", 6, "x"), sub("B", 5) }) })
        assert.same({}, res.changed)
        assert.equal("x", r:subscription("G", "A").subString)
        assert.same({ "x" }, r:subscription("G", "A").tagsSet)
        assert.equal(6, r:subscription("G", "A").subVersion)
        -- A new topic, or one left out, is a change.
        res = beat(1, "c1", { consumer("G", { sub("A", 6), sub("B", 5), sub("C", 1) }) })
        assert.same({ "G" }, res.changed)
        res = beat(1, "c1", { consumer("G", { sub("C", 1) }) })
        assert.same({ "G" }, res.changed)
        assert.is_nil((r:subscription("G", "A")))
        local s, settings = r:subscription("G", "C")
        assert.equal("C", s.topic)
        assert.same({ consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
                      consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false }, settings)
        -- A topic listed twice: the first stays, the other topic goes.
        res = beat(1, "c1", { consumer("G", { sub("A", 1), sub("A", 1) }) })
        assert.same({ "G" }, res.changed)
        assert.equal(1, r:counts().subscriptions)
        -- No subscriptions at all: the group stays (its channel), empty.
        res = beat(1, "c1", { consumer("G", {}) })
        assert.same({ "G" }, res.changed)
        s, settings = r:subscription("G", "A")
        assert.is_nil(s)
        assert.truthy(settings)
    end)

    it("moves a group's generation exactly when its settings or subscriptions change", function()
        assert.is_nil(r:generation("G"))
        beat(1, "c1", { consumer("G", { sub("A", 5) }) })
        local g1 = assert(r:generation("G"))
        beat(1, "c1", { consumer("G", { sub("A", 5) }) })
        beat(2, "c2", { consumer("G", { sub("A", 4) }) })      -- a member joins: same table
        assert.equal(g1, r:generation("G"))
        beat(1, "c1", { consumer("G", { sub("A", 6) }) })      -- newer subVersion
        local g2 = r:generation("G")
        assert.is_true(g2 > g1)
        beat(1, "c1", { consumer("G", { sub("A", 6), sub("B") }) })
        local g3 = r:generation("G")
        assert.is_true(g3 > g2)
        beat(1, "c1", { consumer("G", { sub("B") }) })
        local g4 = r:generation("G")
        assert.is_true(g4 > g3)
        beat(1, "c1", { consumer("G", { sub("B") }, { messageModel = "BROADCASTING" }) })
        local g5 = r:generation("G")
        assert.is_true(g5 > g4)
        r:conn_closed(1)
        r:conn_closed(2)
        assert.is_nil(r:generation("G"))
        beat(1, "c1", { consumer("G", { sub("B") }) })
        assert.is_true(r:generation("G") > g5)
    end)

    it("keeps the settings of the last heartbeat; absent fields keep theirs", function()
        beat(1, "c1", { consumer("G", { sub("T") }, { messageModel = "BROADCASTING" }) })
        assert.equal("BROADCASTING", select(2, r:subscription("G", "T")).messageModel)
        local res = beat(1, "c1", { consumer("G", { sub("T") }, { messageModel = 1, consumeType = "CONSUME_ACTIVELY" }) })
        assert.same({}, res.changed)
        local _, st = r:subscription("G", "T")
        assert.equal("CLUSTERING", st.messageModel)
        assert.equal("CONSUME_ACTIVELY", st.consumeType)
        assert(r:heartbeat(1, '{"clientID":"c1","consumerDataSet":[{"groupName":"G",'
            .. '"subscriptionDataSet":[{"topic":"T","subVersion":1}]}]}', "JAVA", 409, "127.0.0.1:1"))
        _, st = r:subscription("G", "T")
        assert.equal("CONSUME_ACTIVELY", st.consumeType)
        assert.equal("CONSUME_FROM_LAST_OFFSET", st.consumeFromWhere)
    end)

    it("keeps channels in connection order, with distinct clientIds", function()
        assert.same({ "G" }, beat(5, "c5", { consumer("G", { sub("T") }) }).changed)
        local res = beat(2, "c2", { consumer("G", { sub("T") }) })
        assert.same({ "G" }, res.changed)
        assert.same({ { 2, 5 } }, res.conns)
        beat(9, "c2", { consumer("G", { sub("T") }) })  -- same clientId, another channel
        assert.same({ "c2", "c5" }, r:client_ids("G"))
        assert.same({ 2, 5, 9 }, r:conns("G"))
        local g = r:consumer_group("G")
        assert.equal("c5", g.members[5].clientId)
        assert.equal("127.0.0.1:5", g.members[5].addr)
        assert.equal("JAVA", g.members[5].language)
        assert.equal(409, g.members[5].version)
        assert.equal("T", g.subscriptionTable.T.topic)
        -- A known channel with another clientId: replaced, not a join.
        res = beat(5, "c5b", { consumer("G", { sub("T") }) })
        assert.same({}, res.changed)
        assert.same({ "c2", "c5b" }, r:client_ids("G"))
        -- Many channels: still distinct, in order.
        for conn = 100, 160 do
            beat(conn, "m" .. (conn % 7), { consumer("G", { sub("T") }) })
        end
        local ids = r:client_ids("G")
        assert.same({ "c2", "c5b", "m2", "m3", "m4", "m5", "m6", "m0", "m1" }, ids)
    end)

    it("forgets a connection on unregister, close and expiry", function()
        beat(1, "c1", { consumer("G", { sub("T") }), consumer("H", { sub("T") }) }, { { groupName = "P" } }, 1000)
        beat(2, "c2", { consumer("G", { sub("T") }) }, { { groupName = "P" } }, 1000)
        assert.same({ "G", "H" }, r:groups("consumer"))
        assert.same({ "P" }, r:groups("producer"))
        assert.equal("c1", r:members("producer", "P")[1].clientId)
        local p, c = r:unregister(2, "P", "H")
        assert.is_true(p)
        assert.is_false(c)
        assert.same({ 1 }, r:conns("P", "producer"))
        -- Closing 1: G keeps 2 (told), H and P go.
        local left, conns, removed = r:conn_closed(1)
        assert.same({ "G" }, left)
        assert.same({ { 2 } }, conns)
        assert.equal(3, removed)
        assert.same({ "G" }, r:groups("consumer"))
        assert.same({}, r:groups("producer"))
        assert.is_nil(r:consumer_group("H"))
        assert.equal(0, select(3, r:conn_closed(1)))
        -- Expiry: 2 is silent since 1000; 3 beats at 5000.
        beat(3, "c3", { consumer("G", { sub("T") }) }, nil, 5000)
        local dropped
        dropped = r:scan(3000, 120000)
        assert.same({}, dropped)
        dropped, left, conns = r:scan(122000, 120000)
        assert.equal(1, #dropped)
        assert.same({ kind = "consumer", group = "G", clientId = "c2", addr = "127.0.0.1:2", lastUpdate = 1000 },
            dropped[1])
        assert.same({ "G" }, left)
        assert.same({ { 3 } }, conns)
        -- A repeat heartbeat refreshes lastUpdate (the read-lock path).
        beat(3, "c3", { consumer("G", { sub("T") }) }, nil, 200000)
        assert.same({}, (r:scan(310000, 120000)))
        dropped, left = r:scan(330000, 120000)
        assert.equal(1, #dropped)
        assert.same({}, left)
        assert.same({ consumerGroups = 0, producerGroups = 0, connections = 0, channels = 0, subscriptions = 0 },
            r:counts())
        assert.is_true(beat(4, "c4", { consumer("G", { sub("T") }) }).new[1] == "G")
        assert.is_true(r:remove("consumer", "G", 4))
        assert.is_false(r:remove("consumer", "G", 4))
    end)

    it("refuses a heartbeat past its limits whole", function()
        r:set_limits({ maxConsumerGroups = 3, maxChannelsPerGroup = 2, maxSubscriptionsPerGroup = 2,
                       maxProducerGroups = 1 })
        assert.same({ maxConsumerGroups = 3, maxChannelsPerGroup = 2, maxSubscriptionsPerGroup = 2,
                      maxProducerGroups = 1 }, r:limits())
        beat(1, "c1", { consumer("A", { sub("T") }), consumer("B", { sub("T") }) })
        local res, err, kind = r:heartbeat(2, hb("c2", { consumer("A", { sub("T") }), consumer("C"), consumer("D") }))
        assert.is_nil(res)
        assert.equal("limit", kind)
        assert.matches("more than clientMaxConsumerGroups (3)", err, 1, true)
        assert.same({ 1 }, r:conns("A"))   -- nothing applied
        assert.equal(2, r:counts().consumerGroups)
        beat(2, "c2", { consumer("A", { sub("T") }) })
        res, err = r:heartbeat(3, hb("c3", { consumer("A", { sub("T") }) }))
        assert.is_nil(res)
        assert.matches("consumer group A has 2 channels already, clientMaxChannelsPerGroup (2)", err, 1, true)
        res, err, kind = r:heartbeat(3, hb("c3", { consumer("E", { sub("T"), sub("U"), sub("V") }) }))
        assert.is_nil(res)
        assert.equal("parse", kind)   -- the reader is bounded by the same limit
        assert.matches("more than 2 subscriptions in one consumer", err, 1, true)
        beat(3, "c3", {}, { { groupName = "P" } })
        res, err = r:heartbeat(3, hb("c3", {}, { { groupName = "P" }, { groupName = "Q" } }))
        assert.is_nil(res)
        assert.matches("more than 1 producer groups", err, 1, true)   -- parse limit
        r:set_limits({ maxProducerGroups = 2 })
        res, err = r:heartbeat(4, hb("c4", {}, { { groupName = "Q" }, { groupName = "R" } }))
        assert.is_nil(res)
        assert.matches("more than clientMaxProducerGroups (2)", err, 1, true)
        assert.same({ "P" }, r:groups("producer"))
        -- A malformed heartbeat applies nothing either.
        res, err, kind = r:heartbeat(9, '{"consumerDataSet":[{"groupName":"Z"},{"groupName":"a/b"}]}')
        assert.is_nil(res)
        assert.truthy(err)
        assert.equal("parse", kind)
        assert.is_nil(r:consumer_group("Z"))
    end)

    it("handles many groups and hostile names in linear time (behaviour only)", function()
        -- Names that collide under Java's String.hashCode ("Aa" = "BB").
        local names, cds = {}, {}
        local function gen(prefix, depth)
            if depth == 0 then
                names[#names + 1] = prefix
                return
            end
            gen(prefix .. "Aa", depth - 1)
            gen(prefix .. "BB", depth - 1)
        end
        gen("", 12)   -- 4096 names, one String.hashCode
        for i, n in ipairs(names) do
            cds[i] = consumer(n, { sub("T") })
        end
        local res = beat(1, "c1", cds)
        assert.equal(#names, #res.new)
        assert.equal(#names, r:counts().consumerGroups)
        assert.same({}, beat(1, "c1", cds).changed)
        assert.equal(names[100], r:subscription(names[100], "T") and names[100])
        local left, _, removed = r:conn_closed(1)
        assert.same({}, left)
        assert.equal(#names, removed)
        assert.equal(0, r:counts().consumerGroups)
    end)
end)
