-- gRPC SendMessage beside remoting SEND_MESSAGE_V2 on one standalone
-- rmq (grpcServerPort set), same machine, same topic, in one run, rounds
-- alternating: `rmq bench produce` (rmq's C load generator) for remoting,
-- h2load (nghttp2's C HTTP/2 load generator, Debian nghttp2-client)
-- posting one gRPC-framed SendMessageRequest (1 message, made here with
-- the Node SDK's protobuf classes) for gRPC.  Figures only; spec/
-- integration/grpc_*_spec.lua assert the behaviour.
--
--   lua5.4 scripts/bench/grpc.lua [SECONDS [ROUNDS [SIZE [CONCURRENCY [WORKERS]]]]]
--
-- (from the repo root, after scripts/test.sh has installed the Node
-- packages; RMQ_BUILD picks the build dir).  Defaults: 10 s per round,
-- 2 rounds each, 1024-byte bodies, 64 in flight (h2load: 4 connections
-- x 16 streams), 2 workers.  Printed per round: messages stored per
-- second (counted in the topic's queues, not by the client), the
-- client's average RT (h2load prints no percentiles), and the server's
-- CPU time per message from /proc/PID/stat, less what the server spends
-- idle over as long (timers, flushes, its NameServer: measured first).
-- The load generators share the machine with the server.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cjson = require("cjson")
local cgrpc = require("rmq.grpc")
local net = require("rmq.net")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local ROUNDS = tonumber(arg[2]) or 2
local SIZE = tonumber(arg[3]) or 1024
local CONC = tonumber(arg[4]) or 64
local WORKERS = tonumber(arg[5]) or 2
local TOPIC = "BenchGrpcTopic"
local QUEUES = 8

assert(os.execute("command -v h2load >/dev/null 2>&1"), "h2load (Debian nghttp2-client) is needed")

local dir = server.tmpdir()
local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = WORKERS, brokerName = "bench-grpc",
                         storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                         mappedFileSizeCommitLog = 256 * 1024 * 1024, grpcServerPort = 0 })
local r = assert(net.call(s.broker_addr, { code = 17, ext = {
    topic = TOPIC, defaultTopic = "TBW102", readQueueNums = QUEUES, writeQueueNums = QUEUES, perm = 6,
    topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 5000))
assert(r.code == 0, r.remark)
assert(server.eventually(function()
    local q = net.call(s.listen_addr, { code = 105, ext = { topic = TOPIC } }, 2000)
    return q and q.code == 0
end, 5000), "topic not routed")

-- The request h2load posts: gRPC's 5-byte prefix and a SendMessageRequest.
local req = dir .. "/send.bin"
do
    local body = cgrpc.encode("SendMessageRequest", { messages = { {
        topic = { name = TOPIC }, body = string.rep("a", SIZE),
        system_properties = { message_id = "BENCHGRPC", tag = "Bench", message_type = "NORMAL", queue_id = -1 },
    } } })
    local f = assert(io.open(req, "wb"))
    f:write(string.pack(">BI4", 0, #body), body)
    f:close()
end

local function stored()
    local n = 0
    for q = 0, QUEUES - 1 do
        local m = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = q } }, 5000))
        n = n + tonumber(m.ext.offset)
    end
    return n
end

local idle_cpu
do
    local c0 = s:cpu_seconds()
    net.sleep(SECONDS * 1000)
    idle_cpu = s:cpu_seconds() - c0
end

local function run(cmd, parse)
    local c0, n0 = s:cpu_seconds(), stored()
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    local res = parse(out)
    res.ok = stored() - n0
    res.tps = res.ok / res.elapsed
    res.cpu_us = math.max(0, s:cpu_seconds() - c0 - idle_cpu) * 1e6 / math.max(1, res.ok)
    return res
end

local function remoting()
    return run(("%s/rmq bench produce -n %s -t %s -s %d -c %d -d %d --json 2>&1")
        :format(build, s.listen_addr, TOPIC, SIZE, CONC, SECONDS), function(out)
        local line
        for l in out:gmatch("[^\n]+") do
            line = l:match("^(%b{})%s*$") or line
        end
        local j = cjson.decode((assert(line, out)))
        return { elapsed = j.elapsed, avg_ms = j.avg_ms, failed = j.failed }
    end)
end

local function grpc()
    local conns = 4
    return run(("h2load -D %d -c %d -m %d -d %s -H 'content-type: application/grpc' -H 'te: trailers' "
        .. "http://%s/apache.rocketmq.v2.MessagingService/SendMessage 2>&1")
        :format(SECONDS, conns, math.max(1, CONC // conns), req, s.grpc_addr), function(out)
        local el = tonumber(out:match("finished in ([%d.]+)s"))
        local failed = tonumber(out:match("(%d+) failed"))
        local mean, unit = out:match("time for request:%s+%S+%s+%S+%s+([%d.]+)(%a+)")
        assert(el and mean, out)
        local ms = tonumber(mean) * (unit == "us" and 0.001 or unit == "s" and 1000 or 1)
        return { elapsed = el, avg_ms = ms, failed = failed or 0 }
    end)
end

print(("SendMessage, %d-byte bodies, %d in flight, %d s rounds, %d workers, one standalone;"
    .. " idle server CPU %.3f s per round (subtracted)"):format(SIZE, CONC, SECONDS, WORKERS, idle_cpu))
local sum = { remoting = { tps = 0, cpu = 0 }, grpc = { tps = 0, cpu = 0 } }
for round = 1, ROUNDS do
    for _, mode in ipairs({ "remoting", "grpc" }) do
        local res = mode == "remoting" and remoting() or grpc()
        sum[mode].tps = sum[mode].tps + res.tps
        sum[mode].cpu = sum[mode].cpu + res.cpu_us
        print(("round %d %-8s stored/s %8.0f | avg RT %.3f ms | failed %d | server CPU %.1f us/msg")
            :format(round, mode, res.tps, res.avg_ms, res.failed, res.cpu_us))
    end
end
print(("mean: remoting %.0f msg/s %.1f us/msg, gRPC %.0f msg/s %.1f us/msg (gRPC/remoting CPU per message %.2f)")
    :format(sum.remoting.tps / ROUNDS, sum.remoting.cpu / ROUNDS, sum.grpc.tps / ROUNDS, sum.grpc.cpu / ROUNDS,
            sum.grpc.cpu / sum.remoting.cpu))
s:stop()
os.execute("rm -rf '" .. dir .. "'")
