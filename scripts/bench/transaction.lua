-- Transactional send (half message + END_TRANSACTION commit) against
-- plain send, in one run, on one standalone rmq-server.  Figures only;
-- spec/integration/transaction_spec.lua asserts the behaviour.
--
--   lua5.4 scripts/bench/transaction.lua [SECONDS [CONCURRENCY [SIZE [WORKERS]]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 10 s per phase, 32 concurrent senders,
-- 256-byte bodies, 2 workers.  Phase 1: the project's producer sends
-- plain messages (SEND_MESSAGE_V2) for SECONDS.  Phase 2: its
-- transactional producer runs send_in_transaction with a local
-- transaction that commits, for SECONDS; END_TRANSACTION is one-way (as
-- in Java), so the phase ends when every committed message is in the
-- real topic, and that wait is counted in its time.  Printed per phase:
-- messages, TPS, average and p99 latency of one send (one
-- send_in_transaction), the server's CPU time per message (from
-- /proc/PID/stat: what the broker spends, the client aside); then the
-- ratio.  The server and its temp dir are
-- removed at the end.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")
local producer = require("rmq.client.producer")
local transaction = require("rmq.client.transaction")

local SECONDS = tonumber(arg[1]) or 10
local CONC = tonumber(arg[2]) or 32
local SIZE = tonumber(arg[3]) or 256
local WORKERS = tonumber(arg[4]) or 2

local dir = server.tmpdir()
local s = server.start({
    role = "standalone", namesrvListenPort = 0, workers = WORKERS, brokerName = "broker-bench",
    storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
    mappedFileSizeCommitLog = 256 * 1024 * 1024,
})

local function percentile(t, p)
    table.sort(t)
    return t[math.max(1, math.ceil(#t * p))] or 0
end

-- Runs `one()` from CONC tasks for SECONDS; returns count, latencies.
local function phase(one)
    local lat, n, fails = {}, 0, 0
    local t_end = core.mono_ms() + SECONDS * 1000
    local running = CONC
    for _ = 1, CONC do
        net.spawn(function()
            while core.mono_ms() < t_end do
                local t0 = core.mono_ms()
                if one() then
                    n = n + 1
                    lat[#lat + 1] = core.mono_ms() - t0
                else
                    fails = fails + 1
                end
            end
            running = running - 1
        end)
    end
    while running > 0 do
        net.sleep(5)
    end
    return n, lat, fails
end

local function in_topic(topic)
    local total = 0
    for q = 0, 3 do
        local r = net.call(s.broker_addr, { code = 30, ext = { topic = topic, queueId = tostring(q) } }, 5000)
        total = total + (r and r.code == 0 and tonumber(r.ext.offset) or 0)
    end
    return total
end

local function report(name, n, lat, fails, ms, cpu)
    local sum = 0
    for _, v in ipairs(lat) do
        sum = sum + v
    end
    print(("%-30s %8d msgs  %8.0f TPS  avg %5.2f ms  p99 %6.2f ms  failed %d  server CPU %5.1f us/msg"):format(
        name, n, n * 1000 / ms, #lat > 0 and sum / #lat or 0, percentile(lat, 0.99), fails,
        n > 0 and cpu * 1e6 / n or 0))
    return n * 1000 / ms
end

local ok, err = pcall(function()
    local body = string.rep("t", SIZE)
    local p = producer.new({ namesrvAddr = s.addr, producerGroup = "BenchPlain" })
    assert(p:send({ topic = "BenchTxPlain", body = body }))   -- route and topic
    local t0, c0 = core.mono_ms(), s:cpu_seconds()
    local n, lat, fails = phase(function() return p:send({ topic = "BenchTxPlain", body = body }) end)
    local plain = report("plain send", n, lat, fails, core.mono_ms() - t0, s:cpu_seconds() - c0)

    local tp = transaction.new({ namesrvAddr = s.addr, producerGroup = "BenchTx" })
    local commit = function() return "COMMIT" end
    assert(tp:send_in_transaction({ topic = "BenchTxCommit", body = body }, commit))
    while in_topic("BenchTxCommit") < 1 do
        net.sleep(5)   -- the warm-up's commit (one-way) is in
    end
    local base = in_topic("BenchTxCommit")
    t0, c0 = core.mono_ms(), s:cpu_seconds()
    n, lat, fails = phase(function()
        local r = tp:send_in_transaction({ topic = "BenchTxCommit", body = body }, commit)
        return r and r.status == "SEND_OK"
    end)
    local want = base + n
    local deadline = core.mono_ms() + 30000
    while in_topic("BenchTxCommit") < want and core.mono_ms() < deadline do
        net.sleep(5)
    end
    local got = in_topic("BenchTxCommit") - base
    local tx = report("transactional (half + commit)", n, lat, fails, core.mono_ms() - t0, s:cpu_seconds() - c0)
    print(("committed messages in the topic: %d of %d"):format(got, n))
    print(("transactional / plain: %.2f  (%d senders, %d-byte bodies, %d workers, %d s per phase)"):format(
        tx / plain, CONC, SIZE, WORKERS, SECONDS))
    tp:shutdown()
end)
s:stop()
os.execute("rm -rf '" .. dir .. "'")
assert(ok, err)
