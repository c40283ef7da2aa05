-- gRPC beside remoting on one standalone rmq (grpcServerPort set), same
-- machine, same topic, in one run, rounds alternating.  Figures only;
-- spec/integration/grpc_*_spec.lua assert the behaviour.
--
--   lua5.4 scripts/bench/grpc.lua [SECONDS [ROUNDS [SIZE [CONCURRENCY [WORKERS]]]]]
--                                 [--vs ADDR [--vs-pid PID[,PID...]] [--vs-broker ADDR] [--vs-name NAME]]...
--                                 [--vs-binary PATH] [--no-consume] [--rate N|max[,...]] [--h2load]
--
-- (from the repo root; RMQ_BUILD picks the build dir).  Defaults: 10 s
-- per round, 2 rounds each, 1024-byte bodies, 64 in flight, 2 workers.
--
-- Send: one generator for both protocols, `rmq bench produce` (rmq's C
-- load generator, src/tools/loadgen.c: CONCURRENCY requests in flight
-- over 4 connections, each reply sending the next, one write a loop
-- turn): remoting SEND_MESSAGE_V2 with --uniq-key (a UNIQ_KEY each, as
-- Java producers send), gRPC SendMessage with --grpc (one message a
-- call with its message id and queue, the 5.x SDK's headers and
-- grpc-timeout; one HTTP/2 stream a request).  --rate N,M runs every
-- send round once per rate, both protocols offered the same N sends a
-- second (the generator's --rate), so each server wake-up, read and
-- write carries alike; without it each runs as fast as its replies
-- come ("max" in the list: a round that way too).  --h2load drives the
-- gRPC side with h2load instead (nghttp2's load generator, Debian
-- nghttp2-client; one pre-encoded request over 4 connections x
-- CONCURRENCY/4 streams; no rate), as this script did before; gRPC
-- endpoints given by --vs (another vendor's proxy) are always driven by
-- h2load, and then so is rmq's, so both go through one generator.  Printed:
-- messages stored a second (counted in the topic's queues, not by the
-- client; the generator's count for an endpoint that is not ours), the
-- client's average and p99 RT, the server's CPU time per message (user +
-- system, and each), the generator's own CPU (near 100 %: it, not the
-- server, set the pace) and the load average.
--
-- Receive: the messages the send rounds stored, consumed for SECONDS by
-- CONCURRENCY / 8 loops a side (at least 4) in this process: remoting
-- PULL_MESSAGE (32 at a time, the offset committed with the next pull,
-- as the 4.x push consumer does) per queue; remoting POP_MESSAGE (32 at a
-- time, every queue) then one BATCH_ACK_MESSAGE for them (the 5.x
-- remoting POP consumer's way, rmq.client.pop), as many loops as gRPC's;
-- and gRPC ReceiveMessage (32 at a time over POP) then one AckMessage for
-- them (the C client of src/grpc/client.c).  A 5.x gRPC receive is a
-- POP: gRPC against remoting POP is what the gRPC layer itself costs,
-- against PULL what POP costs too; the summary prints both ratios.
-- Printed: messages a second, p50/p99 of a loop's round trip (pull; pop
-- + batch ack; receive + ack), the round trips that failed (a loop waits
-- 50 ms after one), the server's CPU per message.  The Lua
-- loops share the machine's CPU with the server: messages a second are
-- bounded by them, CPU per message is the server's own.
--
-- Server CPU comes from /proc/PID/stat, less what the server spends idle
-- over as long (timers, flushes, its NameServer: measured first).
--
-- --vs ADDR runs the same gRPC loads against another gRPC endpoint (a
-- RocketMQ 5.x proxy, or rmq's cluster-mode proxy: the topic
-- BenchGrpcTopic, 8 queues, message.type NORMAL, must exist behind it)
-- and prints its figures in the same run; --vs may be given more than
-- once, and the options after a --vs apply to it: --vs-pid PID[,PID...]
-- adds those processes' CPU per message, summed (a 5.x deployment's is
-- its proxy's and its broker's); --vs-broker ADDR counts its sends as
-- messages stored in that broker's queues (remoting GET_MAX_OFFSET),
-- where otherwise h2load's succeeded count is taken; --vs-name NAME
-- names it in the output (vs, vs2, ...).  Each endpoint gets one
-- SendMessage first, which must answer OK (the topic exists, the request
-- is accepted).  --vs-binary PATH starts a second standalone from another
-- build's rmq-server (e.g. the base of a change) as an endpoint.
--
-- Every gRPC call carries the headers the SDKs send (x-mq-client-id,
-- x-mq-language, x-mq-protocol, x-mq-client-version), one client id for
-- the run: a 5.x proxy refuses a call without a client id.  Before each
-- receive round (outside its timing) the consumer is registered as the
-- SDKs do: a Telemetry stream carrying the SimpleConsumer's settings,
-- then a Heartbeat (a 5.x proxy answers ReceiveMessage from a client it
-- holds no settings for with an internal error, and drops the settings
-- of a client no Heartbeat registered).  Each endpoint pops with its own
-- consumer group (BenchGrpcPop-NAME).
--
-- At the end: each server process's resident memory (VmRSS, and its
-- anonymous part: without the store's mapped files).
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cjson = require("cjson")
local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")

local pos, vs, vs_binary, consume, use_h2load, rates = {}, {}, nil, true, false, { false }
do
    local i = 1
    while i <= #arg do
        local a = arg[i]
        if a == "--rate" then
            rates = {}
            for r in assert(arg[i + 1], "--rate needs N[,N...]"):gmatch("[^,]+") do
                rates[#rates + 1] = r == "max" or assert(tonumber(r), "--rate: " .. r)
            end
            i = i + 1
        elseif a == "--h2load" then
            use_h2load = true
        elseif a == "--vs" or a == "--vs-pid" or a == "--vs-broker" or a == "--vs-name" or a == "--vs-binary" then
            local v = assert(arg[i + 1], a .. " needs a value")
            local last = vs[#vs]
            if a == "--vs" then
                vs[#vs + 1] = { addr = v }
            elseif a == "--vs-binary" then
                vs_binary = v
            else
                assert(last, a .. " applies to the --vs before it")
                if a == "--vs-pid" then
                    last.pids = {}
                    for p in v:gmatch("[^,]+") do
                        last.pids[#last.pids + 1] = assert(math.tointeger(tonumber(p)), "--vs-pid takes PID[,PID...]")
                    end
                elseif a == "--vs-broker" then
                    last.broker = v
                else
                    last.name = v
                end
            end
            i = i + 1
        elseif a == "--no-consume" then
            consume = false
        else
            pos[#pos + 1] = a
        end
        i = i + 1
    end
end
-- Every endpoint's name, unique (they name the output's lines and the
-- POP groups), checked before anything starts.
do
    local names = { grpc = true, remoting = true, vs = vs_binary ~= nil }
    for i, v in ipairs(vs) do
        local n = i + (vs_binary and 1 or 0)
        v.name = v.name or (n == 1 and "vs" or "vs" .. n)
        assert(not names[v.name], ("--vs-name %s is taken"):format(v.name))
        names[v.name] = true
    end
end
local SECONDS = tonumber(pos[1]) or 10
local ROUNDS = tonumber(pos[2]) or 2
local SIZE = tonumber(pos[3]) or 1024
local CONC = tonumber(pos[4]) or 64
local WORKERS = tonumber(pos[5]) or 2
local TOPIC = "BenchGrpcTopic"
local QUEUES = 8
local GROUP_PULL = "BenchGrpcPull"
local CLIENT_ID = ("rmq-bench@%d@%d"):format(os.time(), math.random(1 << 30))
local HEADERS = { ["x-mq-client-id"] = CLIENT_ID, ["x-mq-language"] = "CPP", ["x-mq-protocol"] = "v2",
                  ["x-mq-client-version"] = "rmq-bench" }

-- Another vendor's endpoint is driven by h2load (what it was measured
-- with), and then rmq's too: one generator for all gRPC targets.
use_h2load = use_h2load or #vs > 0
assert(not use_h2load or os.execute("command -v h2load >/dev/null 2>&1"),
       "h2load (Debian nghttp2-client) is needed for --h2load and --vs")
for i, r in ipairs(rates) do
    if r == true then
        rates[i] = false   -- "max": as fast as replies come
    end
end
assert(not (use_h2load and rates[1]), "h2load (--h2load, --vs) has no --rate here")

-- CPU seconds of a process (all, user, system), or the sums over a list
-- of them.
local function cpu_of(pid)
    if type(pid) == "table" then
        local sum, us, ss = 0, 0, 0
        for _, p in ipairs(pid) do
            local c, u, sy = cpu_of(p)
            sum, us, ss = sum + c, us + u, ss + sy
        end
        return sum, us, ss
    end
    local f = pid and io.open("/proc/" .. pid .. "/stat")
    if not f then
        return 0, 0, 0
    end
    local line = f:read("l")
    f:close()
    local fields = {}
    for x in line:match("%) (.*)$"):gmatch("%S+") do
        fields[#fields + 1] = x
    end
    return (tonumber(fields[12]) + tonumber(fields[13])) / 100, tonumber(fields[12]) / 100, tonumber(fields[13]) / 100
end

-- The load average: the 1-minute figure, or all three.
local function loadavg(all)
    local f = io.open("/proc/loadavg")
    local l = f and f:read("l") or ""
    if f then
        f:close()
    end
    return l:match(all and "^(%S+ %S+ %S+)" or "^(%S+)") or "?"
end

local function standalone(binary)
    local dir = server.tmpdir()
    local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = WORKERS, brokerName = "bench-grpc",
                             storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                             mappedFileSizeCommitLog = 256 * 1024 * 1024, grpcServerPort = 0,
                             -- 4 connections carry the whole load: past 20,000 streams a
                             -- second on one, the flood guard's default says GOAWAY
                             grpcMaxStreamsPerSecond = 0 },
                           nil, { binary = binary })
    local r = assert(net.call(s.broker_addr, { code = 17, ext = {
        topic = TOPIC, defaultTopic = "TBW102", readQueueNums = QUEUES, writeQueueNums = QUEUES, perm = 6,
        topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 5000))
    assert(r.code == 0, r.remark)
    assert(server.eventually(function()
        local q = net.call(s.listen_addr, { code = 105, ext = { topic = TOPIC } }, 2000)
        return q and q.code == 0
    end, 5000), "topic not routed")
    s.tmp = dir
    return s
end

local s = standalone()
-- Every standalone started here is stopped and its store removed however
-- the script ends, a failed assertion included.
local started = { s }
local _ <close> = setmetatable({}, { __close = function()
    for _, srv in ipairs(started) do
        srv:stop()
        os.execute("rm -rf '" .. srv.tmp .. "'")
    end
end })
-- The gRPC targets: ours, and the ones to compare with.  t.count: the
-- broker whose queues count the messages stored (nil: h2load's count).
local targets = { { name = "grpc", addr = s.grpc_addr, pid = s.pid, count = s.broker_addr } }
local vs_server
if vs_binary then
    vs_server = standalone(vs_binary)
    started[#started + 1] = vs_server
    targets[#targets + 1] = { name = "vs", addr = vs_server.grpc_addr, pid = vs_server.pid,
                              count = vs_server.broker_addr }
end
for _, v in ipairs(vs) do
    targets[#targets + 1] = { name = v.name, addr = v.addr, pid = v.pids, count = v.broker }
end
local function group_of(t)
    return "BenchGrpcPop-" .. t.name
end

local req = s.tmp .. "/send.bin"
local SEND_REQ = { messages = { {
    topic = { name = TOPIC }, body = string.rep("a", SIZE),
    system_properties = { message_id = "BENCHGRPC", tag = "Bench", message_type = "NORMAL", queue_id = -1 },
} } }
do
    local body = cgrpc.encode("SendMessageRequest", SEND_REQ)
    local f = assert(io.open(req, "wb"))
    f:write(string.pack(">BI4", 0, #body), body)
    f:close()
end

local function stored(broker)
    if broker == nil then
        return nil
    end
    local n = 0
    for q = 0, QUEUES - 1 do
        local m = assert(net.call(broker, { code = 30, ext = { topic = TOPIC, queueId = q } }, 5000))
        assert(m.code == 0, ("GET_MAX_OFFSET %s queue %d: %s %s"):format(broker, q, m.code, m.remark))
        n = n + tonumber(m.ext.offset)
    end
    return n
end

-- Idle CPU a second of every server process measured, over one span.
local function pids_of(t)
    return type(t.pid) == "table" and t.pid or { t.pid }
end
local idle = {}
do
    local c0 = {}
    for _, t in ipairs(targets) do
        for _, p in ipairs(pids_of(t)) do
            c0[p] = cpu_of(p)
        end
    end
    net.sleep(SECONDS * 1000)
    for _, t in ipairs(targets) do
        for _, p in ipairs(pids_of(t)) do
            idle[p] = (cpu_of(p) - c0[p]) / SECONDS
        end
    end
end

-- Runs load() (which returns {elapsed=, ok=?, ...}) against target t and
-- adds the server's CPU per message.
-- adds the server's CPU per message (res.cpu_parts: each process's, when
-- there are several).
local function run(t, load)
    local c0 = {}
    for _, p in ipairs(pids_of(t)) do
        c0[p] = cpu_of(p)
    end
    local _, u0, s0 = cpu_of(pids_of(t))
    local n0 = stored(t.count)
    local res = load()
    local n1 = stored(t.count)
    if n0 and n1 and (res.ok == nil or res.sent) then
        res.ok = n1 - n0   -- a send: what the topic holds, not what the client counted
    end
    res.ok = res.ok or 0
    res.tps = res.ok / res.elapsed
    res.load = loadavg()
    if t.pid then
        -- user and system as they grew, the idle server's not taken off
        local _, u1, s1 = cpu_of(pids_of(t))
        local n = math.max(1, res.ok)
        res.user_us, res.sys_us = (u1 - u0) * 1e6 / n, (s1 - s0) * 1e6 / n
        res.cpu_us, res.cpu_parts = 0, {}
        for i, p in ipairs(pids_of(t)) do
            local us = math.max(0, cpu_of(p) - c0[p] - idle[p] * res.elapsed) * 1e6 / math.max(1, res.ok)
            res.cpu_parts[i] = ("%.1f"):format(us)
            res.cpu_us = res.cpu_us + us
        end
        res.cpu_parts = #res.cpu_parts > 1 and table.concat(res.cpu_parts, " + ") or nil
    end
    return res
end

-- `rmq bench produce` at addr: remoting (a NameServer's address, with
-- --uniq-key) or gRPC (an endpoint, --grpc); rate: sends a second or false.
local function produce(addr, grpc, rate)
    local p = io.popen(("%s/rmq bench produce -n %s -t %s -s %d -c %d -d %d %s%s --json 2>&1")
        :format(build, addr, TOPIC, SIZE, CONC, SECONDS, grpc and "--grpc" or "--uniq-key",
                rate and (" --rate " .. rate) or ""))
    local out = p:read("a")
    p:close()
    local line
    for l in out:gmatch("[^\n]+") do
        line = l:match("^(%b{})%s*$") or line
    end
    local j = cjson.decode((assert(line, out)))
    return { elapsed = j.elapsed, avg_ms = j.avg_ms, p99_ms = j.p99_ms, failed = j.failed + (j.busy or 0),
             ok = j.ok, sent = true, client_cpu = j.cpu_s }
end

local function remoting_send(rate)
    return produce(s.listen_addr, false, rate)
end

local function h2load_send(t)
    local conns = 4
    local hs = {}
    for k, v in pairs(HEADERS) do
        hs[#hs + 1] = ("-H '%s: %s'"):format(k, v)
    end
    table.sort(hs)
    local p = io.popen(("h2load -D %d -c %d -m %d -d %s -H 'content-type: application/grpc' -H 'te: trailers' %s "
        .. "http://%s/apache.rocketmq.v2.MessagingService/SendMessage 2>&1")
        :format(SECONDS, conns, math.max(1, CONC // conns), req, table.concat(hs, " "), t.addr))
    local out = p:read("a")
    p:close()
    local el = tonumber(out:match("finished in ([%d.]+)s"))
    local failed = tonumber(out:match("(%d+) failed"))
    local mean, unit = out:match("time for request:%s+%S+%s+%S+%s+([%d.]+)(%a+)")
    assert(el and mean, out)
    local ms = tonumber(mean) * (unit == "us" and 0.001 or unit == "s" and 1000 or 1)
    -- h2load counts HTTP 200s: a gRPC error is a 200 too, so an endpoint
    -- is counted by the messages its broker stored when we know that
    -- broker (t.count), else by "succeeded" (checked once, before the
    -- rounds, to answer OK).
    local ok = t.count == nil and tonumber(out:match("(%d+) succeeded")) or nil
    return { elapsed = el, avg_ms = ms, failed = failed or 0, ok = ok }
end

local function grpc_send(t, rate)
    if use_h2load then
        return h2load_send(t)
    end
    return produce(t.addr, true, rate)
end

-- {sorted RTs} -> the q-quantile, in ms.
local function quantile(rts, q)
    if #rts == 0 then
        return 0
    end
    table.sort(rts)
    return rts[math.max(1, math.ceil(#rts * q))]
end

local function loops_n()
    return math.max(4, CONC // 8)
end

-- One receive round: n loops at once for SECONDS (each a task of one
-- net.run), then its figures for run(): messages consumed, p50/p99 of a
-- loop's round trip, failed round trips.  new_loop(i, shared), called
-- in loop i's task, returns its step and, optionally, what ends it:
-- step() consumes once and returns how many messages it consumed, or nil
-- when it failed (the loop then waits 50 ms, inside that round trip: a
-- refusing server does not spin it).  open_shared(), when given, makes
-- what the loops share (connections) inside net.run, and
-- close_shared(shared) ends it once every loop has ended.
local function receive_round(n, new_loop, open_shared, close_shared)
    local got, rts, stop, errs = 0, {}, false, 0
    local t0 = core.now_ms()
    net.run(function()
        local shared = open_shared and open_shared()
        local done = 0
        for i = 1, n do
            net.spawn(function()
                local step, finish = new_loop(i, shared)
                while not stop do
                    local a = core.now_ms()
                    local k = step()
                    if k then
                        got = got + k
                    else
                        errs = errs + 1
                        net.sleep(50)
                    end
                    rts[#rts + 1] = core.now_ms() - a
                end
                if finish then
                    finish()
                end
                done = done + 1
            end)
        end
        net.sleep(SECONDS * 1000)
        stop = true
        while done < n do
            net.sleep(20)
        end
        if close_shared then
            close_shared(shared)
        end
    end)
    return { elapsed = (core.now_ms() - t0) / 1000, ok = got, p50 = quantile(rts, 0.5), p99 = quantile(rts, 0.99),
             failed = errs }
end

-- Remoting: a pull loop per queue (offsets committed with each pull).
local offsets = {}
local function remoting_consume()
    return receive_round(QUEUES, function(i)
        local q = i - 1
        local c = assert(net.connect(s.broker_addr))
        local off = offsets[q] or 0
        return function()
            local rep = c:call({ code = 11, ext = {
                consumerGroup = GROUP_PULL, topic = TOPIC, queueId = q, queueOffset = off,
                maxMsgNums = 32, sysFlag = 7, commitOffset = off, suspendTimeoutMillis = 1000,
                subscription = "*", subVersion = 0 } }, 5000)
            if not rep then
                return nil
            end
            local n = 0
            if rep.code == 0 and rep.body then
                local p, len = 1, #rep.body
                while p + 4 <= len do
                    n = n + 1
                    p = p + string.unpack(">i4", rep.body, p)
                end
            end
            off = tonumber(rep.ext.nextBeginOffset) or off
            return n
        end, function()
            offsets[q] = off
            c:close()
        end
    end)
end

-- Remoting POP: loops_n() loops, each POP_MESSAGE of 32 (queueId -1)
-- then one BATCH_ACK_MESSAGE for what it got.  The group starts at the
-- queues' beginning (initMode 0), as the pull side does.
local GROUP_POP = "BenchGrpcPopRemoting"
local function pop_consume()
    local pop = require("rmq.client.pop")
    return receive_round(loops_n(), function()
        local c = pop.new({ namesrvAddr = s.listen_addr, consumerGroup = GROUP_POP, invisibleTime = 60000 })
        return function()
            local r = c:pop(TOPIC, { maxMsgNums = 32, pollTime = 1000, initMode = 0, timeout = 5000 })
            if r == nil then
                return nil
            elseif #r.messages == 0 then
                return 0
            end
            return c:batch_ack(r.messages) and #r.messages or nil
        end, function()
            c:shutdown()
        end
    end)
end

local function grpc_call(c, method, req_type, msg, resp_type, timeout)
    local r, err = c:call(method, cgrpc.encode(req_type, msg), HEADERS, timeout)
    if not r or r.status ~= 0 then
        return nil, err or (r.status .. " " .. r.message)
    end
    local out = {}
    for i, b in ipairs(r.messages) do
        out[i] = cgrpc.decode(resp_type, b)
    end
    return out
end

local function grpc_receive_msg(t)
    return { group = { name = group_of(t) }, message_queue = { topic = { name = TOPIC }, id = -1 },
             filter_expression = { type = "TAG", expression = "*" }, batch_size = 32,
             invisible_duration = { seconds = 60 }, long_polling_timeout = { seconds = 1 } }
end

-- The SimpleConsumer registered as the SDKs do it: its settings over a
-- Telemetry stream (one command, then the stream's end), then a
-- Heartbeat.  Either failing ends the run with the endpoint's answer.
local function grpc_register(t)
    local c = assert(cgrpc.connect(t.addr))
    local group = { name = group_of(t) }
    local host, port = t.addr:match("^(.*):(%d+)$")
    local _, err = grpc_call(c, "Telemetry", "TelemetryCommand", { settings = {
        client_type = "SIMPLE_CONSUMER", request_timeout = { seconds = 10 },
        access_point = { scheme = "IPv4", addresses = { { host = host, port = tonumber(port) } } },
        subscription = { group = group, subscriptions = { {
            topic = { name = TOPIC }, expression = { type = "TAG", expression = "*" } } } },
    } }, "TelemetryCommand", 10000)
    assert(err == nil, ("%s Telemetry settings: %s"):format(t.addr, tostring(err)))
    -- A 5.x proxy ends the stream when the client does, and may take the
    -- settings after that (its executor): its Heartbeat answers
    -- UNRECOGNIZED_CLIENT_TYPE until then.  (The SDKs keep the stream.)
    local hb, herr
    local deadline = core.now_ms() + 10000
    repeat
        hb, herr = grpc_call(c, "Heartbeat", "HeartbeatRequest", { group = group, client_type = "SIMPLE_CONSUMER" },
                             "HeartbeatResponse", 10000)
        local ok = hb and hb[1] and hb[1].status.code == 20000
        if not ok then
            net.sleep(100)
        end
    until ok or core.now_ms() > deadline
    assert(hb and hb[1] and hb[1].status.code == 20000,
           ("%s Heartbeat: %s"):format(t.addr, herr or (hb and hb[1] and hb[1].status.message) or "no answer"))
    c:close()
end

-- One SendMessage that must answer OK: the topic is there and the
-- request is taken (h2load would count refusals as successes).
local function grpc_check_send(t)
    local c = assert(cgrpc.connect(t.addr))
    local r, err = grpc_call(c, "SendMessage", "SendMessageRequest", SEND_REQ,
                             "SendMessageResponse", 10000)
    c:close()
    assert(r and r[1] and r[1].status.code == 20000, ("%s SendMessage: %s"):format(t.addr,
        err or (r and r[1] and (r[1].status.code .. " " .. tostring(r[1].status.message))) or "no answer"))
end

-- A new POP group starts at the queues' end (5.x): one receive places it
-- before anything is sent.
local function grpc_place(t)
    grpc_register(t)
    local c = assert(cgrpc.connect(t.addr))
    grpc_call(c, "ReceiveMessage", "ReceiveMessageRequest", grpc_receive_msg(t), "ReceiveMessageResponse", 10000)
    c:close()
end

-- gRPC: receive (32, over POP) then one ack, per loop, two connections.
local function grpc_consume(t)
    return receive_round(loops_n(), function(i, conns)
        local c = conns[1 + i % #conns]
        return function()
            local rs = grpc_call(c, "ReceiveMessage", "ReceiveMessageRequest", grpc_receive_msg(t),
                                 "ReceiveMessageResponse", 10000)
            if rs == nil then
                return nil
            end
            local entries = {}
            for _, r in ipairs(rs) do
                if r.message then
                    local sp = r.message.system_properties
                    entries[#entries + 1] = { message_id = sp.message_id, receipt_handle = sp.receipt_handle }
                end
            end
            if #entries == 0 then
                return 0
            end
            local ok = grpc_call(c, "AckMessage", "AckMessageRequest", {
                group = { name = group_of(t) }, topic = { name = TOPIC }, entries = entries,
            }, "AckMessageResponse", 10000)
            return ok and #entries or nil
        end
    end, function()
        return { assert(cgrpc.connect(t.addr)), assert(cgrpc.connect(t.addr)) }
    end, function(conns)
        for _, c in ipairs(conns) do
            c:close()
        end
    end)
end

for _, t in ipairs(targets) do
    grpc_check_send(t)
    if consume then
        grpc_place(t)
    end
end

local function cpu_s(v, parts)
    return v and ("%.1f us/msg%s"):format(v, parts and (" (" .. parts .. ")") or "") or "n/a (no --vs-pid)"
end

local others = {}
for i = 2, #targets do
    local t = targets[i]
    others[#others + 1] = ("%s %s (idle CPU %.3f s a second)"):format(t.name, t.addr, (function()
        local sum = 0
        for _, p in ipairs(pids_of(t)) do
            sum = sum + (idle[p] or 0)
        end
        return sum
    end)())
end
print(("SendMessage, %d-byte bodies, %d in flight, %d s rounds, %d workers, one standalone%s; gRPC by %s;"
    .. " idle server CPU %.3f s a second (subtracted); load average %s")
    :format(SIZE, CONC, SECONDS, WORKERS, #others > 0 and (", " .. table.concat(others, ", ")) or "",
            use_h2load and "h2load" or "rmq bench produce --grpc", idle[s.pid], loadavg(true)))
local sum = {}
local function add(mode, res)
    local m = sum[mode] or { tps = 0, cpu = 0, p99 = 0, n = 0 }
    sum[mode] = m
    m.tps, m.cpu, m.n = m.tps + res.tps, m.cpu + (res.cpu_us or 0), m.n + 1
    m.p99 = m.p99 + (res.p99 or 0)
    m.has_cpu = res.cpu_us ~= nil
end
local function rate_s(rate)
    return rate and ("rate %d/s"):format(rate) or "unlimited"
end
local function send_line(round, t, rate, res)
    print(("round %d send %-4s %-8s %s/s %7.0f | avg RT %.3f ms%s | failed %d | server CPU %s%s%s | load %s")
        :format(round, rate and ("%dk"):format(rate // 1000) or "max", t.name, t.count and "stored" or "ok",
                res.tps, res.avg_ms, res.p99_ms and (" p99 %.3f ms"):format(res.p99_ms) or "", res.failed,
                cpu_s(res.cpu_us, res.cpu_parts),
                res.user_us and (" (user %.1f sys %.1f)"):format(res.user_us, res.sys_us) or "",
                -- near 100 %: the generator, not the server, set the pace
                res.client_cpu and (" | generator CPU %.0f %%"):format(100 * res.client_cpu / res.elapsed) or "",
                res.load))
end
for round = 1, ROUNDS do
    for _, rate in ipairs(rates) do
        local res = run(targets[1], function() return remoting_send(rate) end)
        add("send remoting " .. rate_s(rate), res)
        send_line(round, { name = "remoting", count = true }, rate, res)
        for _, t in ipairs(targets) do
            res = run(t, function() return grpc_send(t, rate) end)
            add("send " .. t.name .. " " .. rate_s(rate), res)
            send_line(round, t, rate, res)
        end
    end
end
if consume then
    for round = 1, ROUNDS do
        local res = run(targets[1], remoting_consume)
        add("receive remoting", res)
        print(("round %d receive remoting msgs/s %8.0f | pull RT p50 %d ms p99 %d ms | failed %d | server CPU %s")
            :format(round, res.tps, res.p50, res.p99, res.failed, cpu_s(res.cpu_us)))
        res = run(targets[1], pop_consume)
        add("receive pop", res)
        print(("round %d receive pop      msgs/s %8.0f | pop+batchack RT p50 %d ms p99 %d ms | failed %d | "
            .. "server CPU %s"):format(round, res.tps, res.p50, res.p99, res.failed, cpu_s(res.cpu_us)))
        for _, t in ipairs(targets) do
            grpc_register(t)
            res = run(t, function() return grpc_consume(t) end)
            add("receive " .. t.name, res)
            print(("round %d receive %-8s msgs/s %8.0f | receive+ack RT p50 %d ms p99 %d ms | failed %d | "
                .. "server CPU %s"):format(round, t.name, res.tps, res.p50, res.p99, res.failed,
                                          cpu_s(res.cpu_us, res.cpu_parts)))
        end
    end
end
local function mean(mode)
    local m = sum[mode]
    return m.tps / m.n, m.has_cpu and m.cpu / m.n or nil, m.p99 / m.n
end
for _, rate in ipairs(rates) do
    local rt, rc = mean("send remoting " .. rate_s(rate))
    local gt, gc = mean("send grpc " .. rate_s(rate))
    print(("mean send, %s: remoting %.0f msg/s %s, gRPC %.0f msg/s %s (gRPC/remoting CPU per message %.2f)")
        :format(rate_s(rate), rt, cpu_s(rc), gt, cpu_s(gc), gc / rc))
    for i = 2, #targets do
        local n = targets[i].name
        local vt, vc = mean("send " .. n .. " " .. rate_s(rate))
        print(("mean send %s, %s: %.0f msg/s %s%s"):format(n, rate_s(rate), vt, cpu_s(vc),
            vc and (" (%s/gRPC CPU per message %.2f)"):format(n, vc / gc) or ""))
    end
end
if consume then
    local rrt, rrc, rrp = mean("receive remoting")
    local prt, prc, prp = mean("receive pop")
    local grt, grc, grp = mean("receive grpc")
    print(("mean receive: remoting pull+commit %.0f msg/s %s p99 %.0f ms, remoting pop+batchack %.0f msg/s %s"
        .. " p99 %.0f ms, gRPC receive+ack %.0f msg/s %s p99 %.0f ms (gRPC/POP CPU per message %.2f,"
        .. " gRPC/PULL %.2f, POP/PULL %.2f)")
        :format(rrt, cpu_s(rrc), rrp, prt, cpu_s(prc), prp, grt, cpu_s(grc), grp, grc / prc, grc / rrc, prc / rrc))
    for i = 2, #targets do
        local n = targets[i].name
        local vt, vc, vp = mean("receive " .. n)
        print(("mean receive %s: %.0f msg/s %s p99 %.0f ms%s"):format(n, vt, cpu_s(vc), vp,
            vc and (" (%s/gRPC CPU per message %.2f)"):format(n, vc / grc) or ""))
    end
end
-- Resident memory of every server process after the run: all of it, and
-- the anonymous part (without the store's mapped files in the page cache).
local function rss_mib(pid)
    local f = io.open("/proc/" .. pid .. "/status")
    if not f then
        return nil
    end
    local st = f:read("a")
    f:close()
    local all, anon = st:match("VmRSS:%s+(%d+)"), st:match("RssAnon:%s+(%d+)")
    return all and ("%.0f MiB (anonymous %.0f)"):format(tonumber(all) / 1024, tonumber(anon or 0) / 1024)
end
local rss = {}
for _, t in ipairs(targets) do
    for _, p in ipairs(pids_of(t)) do
        rss[#rss + 1] = ("%s pid %d %s"):format(t.name, p, rss_mib(p) or "gone")
    end
end
print(("RSS after the run: %s; load average %s"):format(table.concat(rss, ", "), loadavg()))
