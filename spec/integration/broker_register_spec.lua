-- The broker's registration with its NameServers (protocol.md 3.1-3.3,
-- 6.5): what it sends, compared with what a 4.9.8 broker sent in the
-- captures (../shared/fixtures/frames/register-broker*.jsonl,
-- unregister-broker.jsonl), and what our NameServer makes of it.  A
-- fake NameServer made of conf handlers records the frames
-- (spec/support/fake_namesrv.lua); real rmq-server NameServers
-- show the effect.
local net = require("rmq.net")
local core = require("rmq.core")
local cjson = require("cjson")
local codec = require("rmq.codec")
local server = require("support.server")
local rq = require("support.requests")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)
local ns = require("support.nsclient")
local fake = require("support.fake_namesrv")

local function real_ns()
    local dir = server.tmpdir()
    return server.start({ role = "namesrv", workers = 2, kvConfigPath = dir .. "/kv.json" })
end

local function broker(namesrv, extra)
    local conf = {
        role = "broker", workers = 2, brokerName = "broker-a",
        storePathRootDir = server.tmpdir() .. "/store",
        mappedFileSizeCommitLog = 1024 * 1024,
        namesrvAddr = namesrv,
    }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return server.start(conf)
end

local function stop_all(list)
    for _, s in ipairs(list) do
        s:stop()
    end
end

-- The captured request (first c2s frame) of a fixture file, decoded.
local function captured(name)
    for _, f in ipairs(fixtures.frames(name)) do
        if f.dir == "c2s" then
            return f, assert(codec.decode(f.raw))
        end
    end
end

local function keys(t)
    local out = {}
    for k in pairs(t or {}) do
        out[#out + 1] = k
    end
    table.sort(out)
    return out
end

local function with_timestamp(text, ts)
    return (text:gsub('"timestamp":%d+', '"timestamp":' .. ts, 1))
end

local function admin(addr, cmd)
    return assert(net.call(addr, cmd, 10000))
end

local function create_topic(addr, topic, n, perm)
    return admin(addr, { code = 17, ext = {
        topic = topic, defaultTopic = "TBW102", readQueueNums = tostring(n or 4),
        writeQueueNums = tostring(n or 4), perm = tostring(perm or 6),
        topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } })
end

local function send(addr, topic)
    return admin(addr, rq.send({ group = "FxGroup", topic = topic, tags = "TagA", body = "hello" }))
end

describe("broker registration", function()
    describe("with a recording NameServer", function()
        local fns
        before_each(function()
            fns = fake.start()
        end)
        after_each(function()
            fns:stop()
        end)

        fx_it("registers at start with the header and body broker-a sent (uncompressed)", function()
            local b = broker(fns.addr)
            local got = fake.frames(fns.addr, 103)
            assert.equal(1, #got)   -- before READY
            local f = got[1]
            local cap = captured("register-broker.jsonl")
            local want = cap.decoded
            assert.is_false(f.oneway)
            assert.equal(want.version, f.version)
            assert.equal(want.language, f.language)
            assert.same(keys(want.extFields), keys(f.ext))
            assert.equal(b.addr, f.ext.brokerAddr)
            assert.equal(b.addr:gsub(":%d+$", ""), f.ext.haServerAddr:gsub(":%d+$", ""))
            for _, k in ipairs({ "brokerName", "clusterName", "brokerId", "compressed" }) do
                assert.equal(want.extFields[k], f.ext[k], k)
            end
            assert.equal(tostring(core.crc32(f.body) & 0x7FFFFFFF), f.ext.bodyCrc32)
            -- The same topics, values and order: only the time differs.
            local ts = cjson.decode(want.body_text).topicConfigSerializeWrapper.dataVersion.timestamp
            assert.equal(want.body_text, with_timestamp(f.body, ("%d"):format(ts)))
            assert.equal(0, b:stop())
            -- SIGTERM: UNREGISTER_BROKER with the captured header fields.
            local un = fake.frames(fns.addr, 104)
            assert.equal(1, #un)
            local uw = captured("unregister-broker.jsonl").decoded
            assert.same(keys(uw.extFields), keys(un[1].ext))
            assert.same({ brokerAddr = b.addr, brokerId = "0", brokerName = "broker-a",
                          clusterName = "DefaultCluster" }, un[1].ext)
            assert.is_nil(un[1].body)
        end)

        fx_it("registers the compressed form broker-b sent", function()
            local b = broker(fns.addr, { brokerName = "broker-b", compressedRegister = true })
            local f = fake.frames(fns.addr, 103)[1]
            local cap, cmd = captured("register-broker-compressed.jsonl")
            assert.same(keys(cap.decoded.extFields), keys(f.ext))
            assert.equal("true", f.ext.compressed)
            assert.equal(tostring(core.crc32(f.body) & 0x7FFFFFFF), f.ext.bodyCrc32)
            local ours, theirs = assert(core.inflate(f.body)), assert(core.inflate(cmd.body))
            local ts = ("%d"):format(cap.decoded.body_inflated.dataVersion.timestamp)
            assert.equal(#theirs, #ours)
            assert.is_true(theirs == with_timestamp(ours, ts), "inflated body differs from the capture")
            b:stop()
        end)

        fx_it("registers at once and two-way after UPDATE_AND_CREATE_TOPIC, one-way after an auto-create", function()
            local b = broker(fns.addr)
            local r = create_topic(b.addr, "FxTopic")
            assert.equal(0, r.code)
            -- Answered after the NameServer had it.
            local got = fake.frames(fns.addr, 103)
            assert.equal(2, #got)
            assert.is_false(got[2].oneway)
            local w = cjson.decode(got[2].body).topicConfigSerializeWrapper
            assert.equal(1, w.dataVersion.counter)
            assert.equal(4, w.topicConfigTable.FxTopic.writeQueueNums)

            assert.equal(0, send(b.addr, "FxAutoTopic").code)
            got = server.eventually(function()
                local list = fake.frames(fns.addr, 103)
                return #list == 3 and list
            end, 3000)
            assert.truthy(got, "no registration after the auto-create")
            local one = got[3]
            assert.is_true(one.oneway)
            w = cjson.decode(one.body).topicConfigSerializeWrapper
            assert.equal(2, w.dataVersion.counter)
            assert.same({ order = false, perm = 6, readQueueNums = 4, topicFilterType = "SINGLE_TAG",
                          topicName = "FxAutoTopic", topicSysFlag = 0, writeQueueNums = 4 },
                        w.topicConfigTable.FxAutoTopic)
            -- The oneway frame has the captured one's header fields.
            local cap = captured("register-broker-oneway.jsonl")
            assert.is_true(cap.decoded.flag == 2)
            assert.same(keys(cap.decoded.extFields), keys(one.ext))
            b:stop()
        end)

        it("registers only the changed topics after a change, every topic on the next full round", function()
            local b = broker(fns.addr)
            assert.equal(0, create_topic(b.addr, "IncA").code)
            assert.equal(0, create_topic(b.addr, "IncB").code)
            -- The registrations are asynchronous (oneway): wait for the
            -- one that carries IncB.  A round that ran while both were
            -- being made carries both, and the round after it none.
            local wrappers = function()
                local out = {}
                for _, f in ipairs(fake.frames(fns.addr, 103)) do
                    out[#out + 1] = cjson.decode(f.body).topicConfigSerializeWrapper
                end
                return out
            end
            local got = server.eventually(function()
                local ws = wrappers()
                for i = 2, #ws do
                    if ws[i].topicConfigTable.IncB then
                        return ws
                    end
                end
            end, 30000)
            assert.truthy(got, "no registration carried IncB")
            local start = got[1]
            assert.truthy(start.topicConfigTable.TBW102)
            -- After the start-up round, each registration carries only the
            -- topics made since the one before (what 4.9.8's
            -- registerIncrementBrokerData sends), with a newer version.
            -- (A periodic full round, if the machine is slow enough for
            -- one to come meanwhile, carries every topic: skipped.)
            local seen = {}
            for i = 2, #got do
                for _, name in ipairs(got[i].topicConfigTable.TBW102 and {} or keys(got[i].topicConfigTable)) do
                    assert.is_true(name == "IncA" or name == "IncB", "a registration carried " .. name)
                    seen[name] = got[i].dataVersion.counter
                end
            end
            assert.truthy(seen.IncA, "no registration carried IncA")
            assert.is_true(seen.IncB > start.dataVersion.counter)
            -- A permission change is a full round: every topic, new perm.
            local before = #got
            assert.equal(0, admin(b.addr, { code = 25, body = "brokerPermission=4" }).code)
            local full = server.eventually(function()
                local ws = wrappers()
                for i = before + 1, #ws do
                    local t = ws[i].topicConfigTable
                    if t.IncA and t.TBW102 then
                        return ws[i]
                    end
                end
            end, 30000)
            assert.truthy(full, "no full round after the permission change")
            assert.equal(4, full.topicConfigTable.IncA.perm)
            b:stop()
        end)

        it("splits a full registration into parts with enableSplitRegistration", function()
            local store = server.tmpdir() .. "/store"
            local b = broker(fns.addr, { storePathRootDir = store })
            for i = 1, 7 do
                assert.equal(0, create_topic(b.addr, "Split" .. i).code)
            end
            b:stop()
            -- The same store with split registration on: the start-up
            -- round comes in parts of 4 topics, each a DataVersion of
            -- its own, together the whole table.
            local before = #fake.frames(fns.addr, 103)
            b = broker(fns.addr, { storePathRootDir = store, enableSplitRegistration = true,
                                   splitRegistrationSize = 4 })
            local got = fake.frames(fns.addr, 103)
            local union, counters, nparts = {}, {}, 0
            for i = before + 1, #got do
                local w = cjson.decode(got[i].body).topicConfigSerializeWrapper
                nparts = nparts + 1
                assert.is_true(#keys(w.topicConfigTable) <= 4)
                assert.is_nil(counters[w.dataVersion.counter], "two parts with one DataVersion")
                counters[w.dataVersion.counter] = true
                for name in pairs(w.topicConfigTable) do union[name] = true end
            end
            local all = cjson.decode(admin(b.addr, { code = 21 }).body).topicConfigTable
            assert.same(keys(all), keys(union))
            assert.equal(math.ceil(#keys(all) / 4), nparts)
            b:stop()
        end)

        it("passes a slave the master's addresses and takes ORDER_TOPIC_CONFIG", function()
            fake.set(fns.addr, { masterAddr = "10.0.0.1:10911", haServerAddr = "10.0.0.1:10912",
                                 kv = '{"table":{"OrderTopic":"broker-a:4"}}' })
            local b = broker(fns.addr)
            -- The start-up registration made OrderTopic... it did not
            -- exist yet; create it, the reply's KV marks it ordered.
            assert.equal(0, create_topic(b.addr, "OrderTopic").code)
            assert.equal(0, create_topic(b.addr, "PlainTopic").code)
            local info = cjson.decode(admin(b.addr, { code = 28 }).body).table
            assert.equal("10.0.0.1:10911", info.masterAddr)
            assert.equal("10.0.0.1:10912", info.haMasterAddr)
            local all = cjson.decode(admin(b.addr, { code = 21 }).body).topicConfigTable
            assert.is_true(all.OrderTopic.order)
            assert.is_false(all.PlainTopic.order)
            b:stop()
        end)
    end)

    it("registers every period, asking QUERY_DATA_VERSION first without forceRegister", function()
        local fns = fake.start()
        local period = { registerNameServerPeriod = 10000 }
        local function with(t)
            for k, v in pairs(period) do t[k] = v end
            return t
        end
        local forced = broker(fns.addr, with({ brokerName = "broker-a" }))
        local same = broker(fns.addr, with({ brokerName = "broker-b", forceRegister = false }))
        local changed = broker(fns.addr, with({ brokerName = "broker-c", forceRegister = false }))
        fake.forget(fns.addr, changed.addr)
        local function count(code, s)
            local n = 0
            for _, f in ipairs(fake.frames(fns.addr, code)) do
                if f.ext.brokerAddr == s.addr then
                    n = n + 1
                    assert.is_false(f.oneway)
                end
            end
            return n
        end
        -- The first periodic round comes 10 s after start (on a slow
        -- machine the three starts can take long enough for a second one
        -- of the first broker's: at least).
        assert.truthy(server.eventually(function() return count(103, forced) >= 2 end, 30000),
                      "no periodic registration")
        assert.truthy(server.eventually(function()
            return count(322, same) >= 1 and count(322, changed) >= 1 and count(103, changed) >= 2
        end, 15000))
        assert.equal(1, count(103, same))     -- unchanged: only the query
        assert.equal(0, count(322, forced))   -- forced: no query
        stop_all({ forced, same, changed, fns })
    end)

    describe("with our NameServers", function()
        it("shows in the cluster info and routes, and goes at shutdown", function()
            local n1, n2 = real_ns(), real_ns()
            -- A NameServer that is down does not hold the others back.
            local b = broker("127.0.0.1:1;" .. n1.addr .. ";" .. n2.addr)
            for _, n in ipairs({ n1, n2 }) do
                local c = assert(net.connect(n.addr))
                local info = ns.cluster_info(c)
                assert.same({ "broker-a" }, info.clusterAddrTable.DefaultCluster)
                assert.same({ ["0"] = b.addr }, info.brokerAddrTable["broker-a"].brokerAddrs)
                local rt = ns.route(c, "TBW102")
                assert.same({ brokerName = "broker-a", perm = 7, readQueueNums = 8,
                              writeQueueNums = 8, topicSysFlag = 0 }, ns.queue(rt, "broker-a"))
                c:close()
            end
            assert.equal(0, b:stop())
            for _, n in ipairs({ n1, n2 }) do
                local c = assert(net.connect(n.addr))
                assert.is_nil(ns.route(c, "TBW102"))
                assert.same({}, ns.cluster_info(c).brokerAddrTable)
                c:close()
            end
            stop_all({ n1, n2 })
        end)

        it("accepts the compressed registration, and the broker's permission", function()
            local n = real_ns()
            local b = broker(n.addr, { brokerName = "broker-b", compressedRegister = true,
                                       brokerPermission = 4 })
            local c = assert(net.connect(n.addr))
            local qd = ns.queue(ns.route(c, "TBW102"), "broker-b")
            assert.same({ brokerName = "broker-b", perm = 4, readQueueNums = 8, writeQueueNums = 8,
                          topicSysFlag = 0 }, qd)
            -- Back to read+write at run time: registered at once.
            local r = admin(b.addr, { code = 25, body = "brokerPermission=6\n" })
            assert.equal(0, r.code, r.remark)
            assert.equal(7, ns.queue(ns.route(c, "TBW102"), "broker-b").perm)
            c:close()
            stop_all({ b, n })
        end)

        it("gives a slave its master's address", function()
            local n = real_ns()
            local m = broker(n.addr)
            local s = broker(n.addr, { brokerId = 1, brokerRole = "SLAVE" })
            local info = cjson.decode(admin(s.addr, { code = 28 }).body).table
            assert.equal(m.addr, info.masterAddr)
            local c = assert(net.connect(n.addr))
            assert.same({ [0] = m.addr, [1] = s.addr }, ns.addrs(ns.route(c, "TBW102"), "broker-a"))
            c:close()
            stop_all({ s, m, n })
        end)

        it("is dropped at once when the broker dies", function()
            local n = real_ns()
            local b = broker(n.addr)
            local c = assert(net.connect(n.addr))
            assert.truthy(ns.route(c, "TBW102"))
            b:kill()
            assert.truthy(server.eventually(function() return ns.route(c, "TBW102") == nil end, 2000))
            c:close()
            n:stop()
        end)
    end)
end)
