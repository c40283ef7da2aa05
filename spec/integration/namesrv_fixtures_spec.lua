-- Replays the NameServer traffic captured from Apache RocketMQ 4.9.8
-- (../shared/fixtures/frames: a real broker, the Java client, mqadmin,
-- rocketmq-client-cpp and ali-ons against a real NameServer) and compares
-- our replies with the captured ones byte for byte: the whole frame,
-- header and body.  The state is rebuilt from the captured registrations,
-- in capture order, so that it is the one the replies were made from.
--
-- Only FxTopic needs a registration that is not in the captures (the
-- capture has the admin's UPDATE_AND_CREATE_TOPIC going to the broker,
-- not the broker's re-registration): it is registered with the same
-- broker identity, and the route replies for it still match exactly.
local net = require("rmq.net")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)
local ns = require("support.nsclient")

describe("NameServer against captured RocketMQ 4.9.8 traffic", function()
    local s, broker_a, broker_b

    setup(function()
        local dir = server.tmpdir()
        s = server.start({ role = "namesrv", workers = 2, kvConfigPath = dir .. "/kv.json" })
        broker_a = assert(net.connect(s.addr))
        broker_b = assert(net.connect(s.addr))
    end)

    teardown(function()
        broker_a:close()
        broker_b:close()
        assert.equal(0, (s:stop()))
    end)

    fx_it("answers the captured REGISTER_BROKER (JSON body, bodyCrc32) byte for byte", function()
        local p = fixtures.pairs_of("register-broker.jsonl")[1]
        local r, raw = assert(broker_a:call_raw(p.req.raw))
        assert.equal(0, r.code)
        fixtures.same_frame(p.resp.raw, raw, "register-broker.jsonl")
    end)

    fx_it("takes the captured one-way REGISTER_BROKER and sends nothing back", function()
        local f = fixtures.frames("register-broker-oneway.jsonl")[1]
        assert.equal(2, f.decoded.flag)
        assert(broker_a:send_raw(f.raw))
        -- Its DataVersion moved on (counter 1): the topic it added is in.
        local c = assert(net.connect(s.addr))
        assert.truthy(server.eventually(function()
            return ns.route(c, "RMQ_SYS_TRANS_HALF_TOPIC") ~= nil
        end, 3000))
        c:close()
        assert.equal(0, broker_a.stray)
    end)

    fx_it("answers the captured GET_ROUTEINFO_BY_TOPIC of every client byte for byte", function()
        -- FxTopic (4 queues, perm 6) on broker-a, as the captured routes show.
        local topics = {}
        local body = assert(fastjson.decode(fixtures.frames("register-broker-oneway.jsonl")[1]
            .decoded.body_text))
        for name, tc in pairs(body.topicConfigSerializeWrapper.topicConfigTable) do
            topics[#topics + 1] = { name, tc.readQueueNums, tc.writeQueueNums, tc.perm }
        end
        topics[#topics + 1] = { "FxTopic", 4, 4, 6 }
        local r = assert(ns.register(broker_a, { cluster = "DefaultCluster", name = "broker-a",
            id = 0, addr = "127.0.0.1:30911", ha = "127.0.0.1:30912", counter = 2,
            timestamp = 1796034550000, topics = topics }))
        assert.equal(0, r.code)

        local n = 0
        for _, file in ipairs({ "route.jsonl", "route-cpp.jsonl", "route-ali-ons.jsonl",
                                "route-rocketmq-header.jsonl" }) do
            local conns = {}
            for _, p in ipairs(fixtures.pairs_of(file)) do
                local cn = p.req.conn
                conns[cn] = conns[cn] or assert(net.connect(s.addr))
                local reply, raw = assert(conns[cn]:call_raw(p.req.raw))
                assert.equal(p.resp.decoded.code, reply.code)
                fixtures.same_frame(p.resp.raw, raw, file .. ":" .. p.req.line)
                n = n + 1
            end
            for _, c in pairs(conns) do
                c:close()
            end
        end
        -- Known topic, unknown topic, TBW102, %RETRY%, from Java (both
        -- JSON forms), cpp, ali-ons, and in the ROCKETMQ binary header.
        assert.equal(10, n)
    end)

    fx_it("answers the captured compressed REGISTER_BROKER and GET_BROKER_CLUSTER_INFO byte for byte", function()
        local p = fixtures.pairs_of("register-broker-compressed.jsonl")[1]
        assert.equal("true", p.req.decoded.extFields.compressed)
        local r, raw = assert(broker_b:call_raw(p.req.raw))
        assert.equal(0, r.code)
        fixtures.same_frame(p.resp.raw, raw, "register-broker-compressed.jsonl")

        -- mqadmin clusterList with both brokers: broker-b first, as
        -- java.util.HashMap orders them.
        local info = fixtures.pairs_of("cluster-info.jsonl")
        local admin = assert(net.connect(s.addr))
        local reply, iraw = assert(admin:call_raw(info[1].req.raw))
        assert.equal(0, reply.code)
        fixtures.same_frame(info[1].resp.raw, iraw, "cluster-info.jsonl first reply")
        admin:close()
    end)

    fx_it("answers the captured UNREGISTER_BROKER, then the second cluster info, byte for byte", function()
        local p = fixtures.pairs_of("unregister-broker.jsonl")[1]
        local r, raw = assert(broker_b:call_raw(p.req.raw))
        assert.equal(0, r.code)
        fixtures.same_frame(p.resp.raw, raw, "unregister-broker.jsonl")

        local info = fixtures.pairs_of("cluster-info.jsonl")
        local admin = assert(net.connect(s.addr))
        local reply, iraw = assert(admin:call_raw(info[2].req.raw))
        assert.equal(0, reply.code)
        fixtures.same_frame(info[2].resp.raw, iraw, "cluster-info.jsonl second reply")
        admin:close()
    end)
end)
