-- Pull throughput with no filter, a tag filter, SQL92 filters and a Lua
-- pull filter, in one run against one broker.  Figures only;
-- spec/integration/sql92_filter_spec.lua asserts what is delivered.
--
--   lua5.4 scripts/bench/filter.lua [MESSAGES [SECONDS_PER_CASE [WORKERS]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir).
-- Defaults: 20,000 messages, 3 s per case, 2 workers.
--
-- Set-up: a NameServer and a broker (enablePropertyFilter = true) on
-- 127.0.0.1, own temp dirs; MESSAGES messages of 100 bytes sent to one
-- queue of each of two topics, with properties a = i % 10 and tags TagA
-- (even i) / TagB (odd i); the second topic has a Lua pull filter
-- keeping a < 5.  Each case then pulls the queue from offset 0 to its
-- end, over and over for SECONDS_PER_CASE, one connection, 32 messages
-- per pull (FLAG_SUBSCRIPTION, as a lite pull consumer).  Printed per
-- case: messages delivered per second, queue entries scanned per second
-- (delivered + filtered out), and pulls per second.  Every filtered case
-- matches half the messages.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local producer = require("rmq.client.producer")
local env = require("support.broker_consume_env")

local N = tonumber(arg[1]) or 20000
local SECONDS = tonumber(arg[2]) or 3
local WORKERS = tonumber(arg[3]) or 2
local TOPIC, LUA_TOPIC = "FilterBench", "FilterBenchLua"

local e = env.start({ workers = WORKERS, enablePropertyFilter = true,
                      luaSource = [[ return { pullFilters = { FilterBenchLua = function(props)
                          return tonumber(props.a) < 5 end } } ]] })

local ok, err = pcall(function()
    local p = producer.new({ namesrvAddr = e.ns_addr, producerGroup = "FilterBenchProducer" })
    local body = string.rep("b", 100)
    for _, topic in ipairs({ TOPIC, LUA_TOPIC }) do
        e:route(topic, 1)
        local t0 = core.mono_ms()
        for i = 0, N - 1 do
            local r = assert(p:send({ topic = topic, body = body, tags = (i % 2 == 0) and "TagA" or "TagB",
                                      properties = { a = tostring(i % 10) } }))
            assert(r.status == "SEND_OK", r.status)
        end
        io.stderr:write(("loaded %d messages into %s in %.1f s\n"):format(N, topic, (core.mono_ms() - t0) / 1000))
    end
    local conn = assert(net.connect(e.addr))

    local function run(name, topic, sub, etype)
        local delivered, scanned, pulls = 0, 0, 0
        local t0 = core.mono_ms()
        local deadline = t0 + SECONDS * 1000
        while core.mono_ms() < deadline do
            local offset = 0
            while offset < N do
                local r = assert(conn:call({ code = 11, ext = {
                    consumerGroup = "FilterBenchGroup", topic = topic, queueId = 0, queueOffset = offset,
                    maxMsgNums = 32, sysFlag = 4, commitOffset = 0, suspendTimeoutMillis = 0,
                    subscription = sub, subVersion = 0, expressionType = etype } }))
                pulls = pulls + 1
                if r.code == 0 then
                    local n = 0
                    local pos = 1
                    while pos + 4 <= #r.body do
                        n = n + 1
                        pos = pos + string.unpack(">i4", r.body, pos)
                    end
                    delivered = delivered + n
                elseif r.code ~= 20 then
                    error(("%s: pull answered %d %s"):format(name, r.code, tostring(r.remark)))
                end
                local nxt = tonumber(r.ext.nextBeginOffset)
                scanned = scanned + (nxt - offset)
                offset = nxt
            end
        end
        local s = (core.mono_ms() - t0) / 1000
        print(("%-44s %12.0f %12.0f %10.0f"):format(name, delivered / s, scanned / s, pulls / s))
    end

    print(("%-44s %12s %12s %10s"):format("case", "delivered/s", "scanned/s", "pulls/s"))
    run("none (TAG *)", TOPIC, "*", "TAG")
    run("tag filter (TagA)", TOPIC, "TagA", "TAG")
    run("SQL92 a < 5", TOPIC, "a < 5", "SQL92")
    run("SQL92 TAGS = 'TagA'", TOPIC, "TAGS = 'TagA'", "SQL92")
    run("SQL92 a BETWEEN 0 AND 4 AND a IS NOT NULL", TOPIC, "a BETWEEN 0 AND 4 AND a IS NOT NULL", "SQL92")
    run("Lua pull filter a < 5", LUA_TOPIC, "*", "TAG")
    conn:close()
end)
e:stop()
if not ok then
    io.stderr:write(tostring(err) .. "\n")
    os.exit(1)
end
