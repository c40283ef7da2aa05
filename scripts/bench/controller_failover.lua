-- Failover in controller mode, measured over KILLS master kills, with
-- nothing acknowledged lost: three rmq brokers of one broker set with
-- allAckInSyncStateSet, a NameServer, one controller on a real etcd
-- (clean elections only), all started here as the specs start them
-- (spec/support/failover.lua).  `rmq audit produce` sends all along (4
-- tasks, 200 msgs/s).  Each kill: kill -9 the master, then measure from
-- the kill to (a) the NameServer's route naming a new master and (b)
-- the first acknowledged send on the new master (a probe producer
-- polling the route every 200 ms, one send at a time, the acknowledging
-- broker checked to be the new master); the killed broker is restarted
-- on its store and the next kill waits until the SyncStateSet holds all
-- three again.  At the end `rmq audit consume` reads everything back and
-- `rmq audit check` prints the lost / duplicated counts over all kills.
-- Prints each kill and min / median / max of both times.  Figures only;
-- spec/integration/controller_failover_spec.lua asserts the behaviour.
--
--   RMQ_TEST_TMP=$(mktemp -d) nice lua5.4 scripts/bench/controller_failover.lua [KILLS [HEARTBEAT_TIMEOUT_MS]]
--
-- Defaults: 20 kills, controllerHeartBeatTimeoutMills 1500 (brokers beat
-- every 300 ms, the controller scans every 300 ms).  The stores go under
-- RMQ_TEST_TMP (remove it after the run), with 8 MiB commit log files and
-- 60 KB consume queue files (a run writes some tens of MB per broker).
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")
local tmp = require("support.tmp")
local failover = require("support.failover")
local producer = require("rmq.client.producer")

local KILLS = tonumber(arg[1]) or 20
local HB_TIMEOUT = tonumber(arg[2]) or 1500

if not failover.available() then
    print(failover.why())
    os.exit(0)
end

local function median(t)
    table.sort(t)
    return t[(#t + 1) // 2]
end

local function mmm(t)
    local c = {}
    for i, v in ipairs(t) do c[i] = v end
    table.sort(c)
    return c[1], median(c), c[#c]
end

local g
local ok, err = pcall(function()
    g = failover.start({ name = "bench-fo", hb_timeout = HB_TIMEOUT,
                         broker = { mappedFileSizeCommitLog = 8 * 1024 * 1024, mappedFileSizeConsumeQueue = 60000 } })
    local dir = tmp.dir()
    local acked, got = dir .. "/acked.log", dir .. "/received.log"
    assert(g:wait_master(30000), "no master at start")
    local p = producer.new({ namesrvAddr = g.ns.addr, producerGroup = "bench-fo-probe", sendMsgTimeout = 1000,
        retryTimesWhenSendFailed = 0, pollNameServerInterval = 200 })
    assert(server.eventually(function()
        local r = p:send({ topic = g.topic, body = "warm" })
        return r and r.status == "SEND_OK"
    end, 30000), "no send at start")
    g:audit_produce(acked)
    local routes, sends = {}, {}
    for k = 1, KILLS do
        if not g:wait_sync_state_set(3, 120000) then
            for i, b in pairs(g.brokers) do
                local log = b:log()
                io.stderr:write(("--- broker %d (%s):\n%s\n"):format(i, b.addr, log:sub(-4000)))
            end
            io.stderr:write("--- controller:\n" .. g.ctl:log():sub(-3000) .. "\n")
            error("kill " .. k .. ": the SyncStateSet never reached 3")
        end
        local victim, old, t0 = g:kill_master()
        local new = g:wait_new_master(old, 60000)
        assert(new, "no new master within 60 s")
        local t_route = core.mono_ms() - t0
        assert(server.eventually(function()
            local r = p:send({ topic = g.topic, body = "probe " .. k })
            -- the acknowledging broker: the new master (its address in
            -- the offset message id)
            return r and r.status == "SEND_OK" and r.offsetMsgId and
                tonumber(r.offsetMsgId:sub(9, 16), 16) == tonumber(new:match(":(%d+)$"))
        end, 60000), "no send on the new master within 60 s")
        local t_send = core.mono_ms() - t0
        routes[#routes + 1], sends[#sends + 1] = t_route, t_send
        print(("kill %2d: route %5.0f ms, first send on the new master %5.0f ms"):format(k, t_route, t_send))
        io.stdout:flush()
        g:restart(victim)
    end
    g:stop_produce()
    g:audit_consume(got)
    local audit = require("rmq.tools.audit")
    server.eventually(function()
        local t = audit.tally({ acked, got })
        return t.lost == 0
    end, 120000)
    g:stop_consume()
    local r1, r2, r3 = mmm(routes)
    local s1, s2, s3 = mmm(sends)
    print(("route:      min %.0f / median %.0f / max %.0f ms over %d kills"):format(r1, r2, r3, #routes))
    print(("first send: min %.0f / median %.0f / max %.0f ms over %d kills"):format(s1, s2, s3, #sends))
    local t = audit.tally({ acked, got })
    print("audit over all kills: " .. audit.summary(t))
    if t.lost > 0 then
        -- what to look at: the records and every broker's log stay in
        -- RMQ_TEST_TMP
        print("records: " .. acked .. " " .. got)
        error(t.lost .. " acknowledged messages lost")
    end
end)
if g then
    g:stop()
end
net.sleep(0)
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
