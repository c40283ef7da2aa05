-- What mqadmin's consumer commands cost a broker (lua/rmq/broker/
-- admin_clients.lua): the round trip of GET_CONSUMER_CONNECTION_LIST
-- (203), GET_CONSUME_STATS (208) and GET_CONSUMER_RUNNING_INFO (307,
-- relayed to a client and back), on an admin connection of each worker.
--
--   lua5.4 scripts/bench/admin_clients.lua [N [QUEUES]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: N = 2000 requests per figure, QUEUES = 64
-- (the topic's queues, each with a committed offset and messages).
-- Set-up: a NameServer and a broker (2 workers) on 127.0.0.1, as the
-- consume specs start them; one client connection heartbeats as a
-- consumer of the group and answers 307 at once with a 200-byte body.
-- Two admin connections (round robin: one per worker), so half the 307s
-- cross workers (client channel on the other one).  Figures: median,
-- p99 and max of the round trip in ms; requests are sequential.  The
-- client and the broker share this machine's cores.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cjson = require("cjson")
local core = require("rmq.core")
local net = require("rmq.net")
local codes = require("rmq.codes")
local env = require("support.broker_consume_env")

local req = codes.request
local N = tonumber(arg[1]) or 2000
local QUEUES = tonumber(arg[2]) or 64
local TOPIC, GROUP, CID = "BenchAdminTopic", "BenchAdminGroup", "127.0.0.1@benchadmin"

local function pct(t, p)
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))]
end

net.run(function()
    local e = env.start({ workers = 2, logLevel = "warn" })
    local ok, err = pcall(function()
        local admins = { assert(net.connect(e.addr)), assert(net.connect(e.addr)) }
        local client = assert(net.connect(e.addr, { on_request = function(_, cmd)
            if cmd.code == req.GET_CONSUMER_RUNNING_INFO then
                return { code = 0, body = '{"properties":{"x":"' .. string.rep("y", 180) .. '"}}' }
            end
        end }))
        local r = assert(admins[1]:call({ code = req.UPDATE_AND_CREATE_TOPIC, ext = {
            topic = TOPIC, defaultTopic = "TBW102", readQueueNums = tostring(QUEUES),
            writeQueueNums = tostring(QUEUES), perm = "6", topicFilterType = "SINGLE_TAG", order = "false" } }))
        assert(r.code == 0, r.remark)
        local body = cjson.encode({ clientID = CID, producerDataSet = {}, consumerDataSet = { {
            groupName = GROUP, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_FIRST_OFFSET", unitMode = false,
            subscriptionDataSet = { { topic = TOPIC, subString = "*", tagsSet = {}, codeSet = {},
                                      subVersion = 1 } } } } })
        assert(assert(client:call({ code = req.HEART_BEAT, body = body })).code == 0)
        for q = 0, QUEUES - 1 do
            for i = 1, 4 do
                local s = assert(admins[1]:call({ code = req.SEND_MESSAGE_V2, ext = {
                    a = "BenchAdminP", b = TOPIC, c = "TBW102", d = tostring(QUEUES), e = tostring(q),
                    f = "0", g = tostring(core.now_ms()), h = "0", i = "", j = "0", k = "false" },
                    body = "m" .. i }))
                assert(s.code == 0, s.remark)
            end
            assert(assert(admins[1]:call({ code = req.UPDATE_CONSUMER_OFFSET, ext = {
                consumerGroup = GROUP, topic = TOPIC, queueId = tostring(q), commitOffset = "2" } })).code == 0)
        end
        local cases = {
            { "203 GET_CONSUMER_CONNECTION_LIST", { code = req.GET_CONSUMER_CONNECTION_LIST,
                                                    ext = { consumerGroup = GROUP } } },
            { ("208 GET_CONSUME_STATS (%d queues)"):format(QUEUES), { code = req.GET_CONSUME_STATS,
                                                    ext = { consumerGroup = GROUP, topic = TOPIC } } },
            { "307 GET_CONSUMER_RUNNING_INFO (relayed)", { code = req.GET_CONSUMER_RUNNING_INFO,
                                                    ext = { consumerGroup = GROUP, clientId = CID } } },
        }
        for _, c in ipairs(cases) do
            local times = {}
            for i = 1, N do
                local t0 = core.mono_ms()
                local rep = assert(admins[i % 2 + 1]:call(c[2], 15000))
                times[#times + 1] = core.mono_ms() - t0
                assert(rep.code == 0, rep.remark)
            end
            print(("%-42s n=%d  median %.3f ms  p99 %.3f ms  max %.3f ms"):format(c[1], N, pct(times, 0.5),
                  pct(times, 0.99), times[#times]))
        end
        client:close()
        for _, a in ipairs(admins) do
            a:close()
        end
    end)
    e:stop()
    if not ok then
        error(err, 0)
    end
end)
