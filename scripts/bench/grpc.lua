-- gRPC SendMessage beside remoting SEND_MESSAGE_V2 on one standalone
-- rmq (grpcServerPort set), same machine, same topic, in one run, rounds
-- alternating: `rmq bench produce` (the C load generator) for remoting,
-- spec/interop/grpc_node/bench.js (@grpc/grpc-js, the Node SDK's
-- transport, request serialized once) for gRPC.  Figures only;
-- spec/integration/grpc_*_spec.lua assert the behaviour.
--
--   lua5.4 scripts/bench/grpc.lua [SECONDS [ROUNDS [SIZE [CONCURRENCY [WORKERS]]]]]
--
-- (from the repo root, after scripts/test.sh has installed the Node
-- packages; RMQ_BUILD picks the build dir).  Defaults: 10 s per round,
-- 2 rounds each, 1024-byte bodies, 64 in flight, 2 workers.  Printed per
-- round: Send TPS, average and p99 RT, failed sends and the server's CPU
-- time per message (from /proc/PID/stat), less what the server spends
-- idle over as long (its timers, flushes and NameServer: measured first
-- and subtracted, as it would otherwise dominate at the Node client's
-- rates).  The load generators share the machine with the server: TPS
-- says as much about them (a Node process is one thread) as about rmq;
-- CPU per message is the server's own cost.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cjson = require("cjson")
local net = require("rmq.net")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local ROUNDS = tonumber(arg[2]) or 2
local SIZE = tonumber(arg[3]) or 1024
local CONC = tonumber(arg[4]) or 64
local WORKERS = tonumber(arg[5]) or 2
local TOPIC = "BenchGrpcTopic"

local dir = server.tmpdir()
local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = WORKERS, brokerName = "bench-grpc",
                         storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                         mappedFileSizeCommitLog = 256 * 1024 * 1024, grpcServerPort = 0 })
local r = assert(net.call(s.broker_addr, { code = 17, ext = {
    topic = TOPIC, defaultTopic = "TBW102", readQueueNums = 8, writeQueueNums = 8, perm = 6,
    topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 5000))
assert(r.code == 0, r.remark)
assert(server.eventually(function()
    local q = net.call(s.listen_addr, { code = 105, ext = { topic = TOPIC } }, 2000)
    return q and q.code == 0
end, 5000), "topic not routed")

local net_sleep = net.sleep
local idle_cpu
do
    local c0 = s:cpu_seconds()
    net_sleep(SECONDS * 1000)
    idle_cpu = s:cpu_seconds() - c0
end

local function run(cmd)
    local c0 = s:cpu_seconds()
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    local line
    for l in out:gmatch("[^\n]+") do
        line = l:match("^(%b{})%s*$") or line
    end
    local res = cjson.decode((assert(line, out)))
    res.cpu_us = math.max(0, s:cpu_seconds() - c0 - idle_cpu) * 1e6 / math.max(1, res.ok)
    return res
end

local function remoting()
    return run(("%s/rmq bench produce -n %s -t %s -s %d -c %d -d %d --json 2>&1")
        :format(build, s.listen_addr, TOPIC, SIZE, CONC, SECONDS))
end

local function grpc()
    return run(("cd spec/interop/grpc_node && ENDPOINT=%s TOPIC=%s SIZE=%d CONCURRENCY=%d CONNECTIONS=4 "
        .. "SECONDS=%d node bench.js 2>&1"):format(s.grpc_addr, TOPIC, SIZE, CONC, SECONDS))
end

print(("SendMessage, %d-byte bodies, %d in flight, %d s rounds, %d workers, one standalone;"
    .. " idle server CPU %.3f s per round (subtracted)"):format(SIZE, CONC, SECONDS, WORKERS, idle_cpu))
local sum = { remoting = { tps = 0, cpu = 0 }, grpc = { tps = 0, cpu = 0 } }
for round = 1, ROUNDS do
    for _, mode in ipairs({ "remoting", "grpc" }) do
        local res = mode == "remoting" and remoting() or grpc()
        sum[mode].tps = sum[mode].tps + res.tps
        sum[mode].cpu = sum[mode].cpu + res.cpu_us
        print(("round %d %-8s Send TPS %8.0f | avg RT %.3f ms | p99 RT %.3f ms | failed %d | server CPU %.1f us/msg")
            :format(round, mode, res.tps, res.avg_ms, res.p99_ms, res.failed, res.cpu_us))
    end
end
print(("mean: remoting %.0f TPS %.1f us/msg, gRPC %.0f TPS %.1f us/msg (gRPC/remoting CPU per message %.2f)")
    :format(sum.remoting.tps / ROUNDS, sum.remoting.cpu / ROUNDS, sum.grpc.tps / ROUNDS, sum.grpc.cpu / ROUNDS,
            sum.grpc.cpu / sum.remoting.cpu))
s:stop()
os.execute("rm -rf '" .. dir .. "'")
