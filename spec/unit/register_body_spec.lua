-- REGISTER_BROKER bodies without a server (protocol.md 3.1): what the
-- broker writes (rmq.broker.register) and how the NameServer reads the
-- compressed form (rmq.namesrv.register), against what a 4.9.8 broker
-- sent in the captures (../shared/fixtures/frames/register-broker*.jsonl).
-- What goes over the wire, and when, is spec/integration/broker_register_spec.
local cjson = require("cjson")
local codec = require("rmq.codec")
local core = require("rmq.core")
local register = require("rmq.broker.register")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)

-- The captured request of a fixture file (its first c2s frame).
local function captured(name)
    return fixtures.pairs_of(name)[1].req
end

describe("the broker's RegisterBrokerBody", function()
    fx_it("writes RegisterBrokerBody JSON byte for byte as the 4.9.8 broker did", function()
        for _, file in ipairs({ "register-broker.jsonl", "register-broker-oneway.jsonl" }) do
            local want = captured(file).decoded.body_text
            local w = cjson.decode(want).topicConfigSerializeWrapper
            assert.equal(want, register.body(w, false), file)
        end
    end)

    fx_it("writes the compressed form byte for byte as the 4.9.8 broker did", function()
        local f = captured("register-broker-compressed.jsonl")
        local cmd = assert(codec.decode(f.raw))
        local inflated = f.decoded.body_inflated
        local tbl = {}
        for _, text in ipairs(inflated.topicConfigs) do
            local name, r, w, perm, ft = text:match("^(%S+) (%d+) (%d+) (%d+) (%S+)$")
            tbl[name] = { topicName = name, readQueueNums = tonumber(r), writeQueueNums = tonumber(w),
                          perm = tonumber(perm), topicFilterType = ft, topicSysFlag = 0, order = false }
        end
        local body = register.body({ dataVersion = inflated.dataVersion, topicConfigTable = tbl }, true)
        assert.equal(#cmd.body, #body)
        assert.is_true(cmd.body == body, "compressed body differs from the capture")
        assert.equal(f.decoded.extFields.bodyCrc32, tostring(core.crc32(body) & 0x7FFFFFFF))
    end)

    it("registers the broker's permission instead of the topics' when it is not read+write", function()
        local w = { dataVersion = { counter = 3, timestamp = 5 }, topicConfigTable = {
            T = { topicName = "T", readQueueNums = 2, writeQueueNums = 4, perm = 6,
                  topicFilterType = "MULTI_TAG", topicSysFlag = 1, order = true } } }
        local own = cjson.decode(register.body(w, false)).topicConfigSerializeWrapper
        assert.same(w.topicConfigTable, own.topicConfigTable)
        local ro = cjson.decode(register.body(w, false, 4)).topicConfigSerializeWrapper
        assert.same({ topicName = "T", readQueueNums = 2, writeQueueNums = 4, perm = 4,
                      topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false },
                    ro.topicConfigTable.T)
        assert.same(w.dataVersion, ro.dataVersion)
    end)

    it("clamps the period as BrokerController does", function()
        assert.equal(10000, register.period({ registerNameServerPeriod = 1000 }))
        assert.equal(30000, register.period({ registerNameServerPeriod = 30000 }))
        assert.equal(60000, register.period({ registerNameServerPeriod = 600000 }))
        assert.same({ "a:1", "b:2" }, register.namesrvs({ namesrvAddr = "a:1;b:2" }))
        assert.same({ "127.0.0.1:9876" },
            register.namesrvs({ role = "standalone", namesrvListenPort = 9876 }))
    end)
end)

describe("the NameServer's reading of a RegisterBrokerBody", function()
    fx_it("decodes the captured compressed body as the fixture tooling split it", function()
        local decode = require("rmq.namesrv.register").decode
        local f = captured("register-broker-compressed.jsonl")
        local hlen = string.unpack(">I4", f.raw, 5) & 0xFFFFFF
        local body = f.raw:sub(9 + hlen)
        assert.equal(f.decoded.body_len, #body)
        local reg = assert(decode(body, { compressed = true }))
        local want = f.decoded.body_inflated
        assert.same({ counter = want.dataVersion.counter, timestamp = want.dataVersion.timestamp },
            reg.dv)
        local names = {}
        for _, t in ipairs(want.topicConfigs) do
            names[#names + 1] = t:match("^(%S+)")
        end
        table.sort(names)
        local got = {}
        for _, t in ipairs(reg.topics) do
            got[#got + 1] = t.name
        end
        assert.same(names, got)
        assert.same({}, reg.filters)
    end)
end)
