-- Instructions per message of a gRPC SendMessage beside a remoting
-- SEND_MESSAGE_V2, counted by callgrind in one standalone rmq (one
-- worker, grpcServerPort set): CPU measured without the machine's load in
-- it.  The server runs under `valgrind --tool=callgrind`; the counters are
-- zeroed (callgrind_control -z) before each load and dumped (-d) after,
-- and the dump's total instructions (Ir, every thread: the store's flush
-- too) are divided by the messages stored meanwhile (counted in the
-- topic's queues).  Both sides in one run, same server.  What the idle
-- server spends a second (its Lua timers, the NameServer: wall-clock
-- work that valgrind's slowness would charge to the slower load) is
-- measured first and subtracted.  A second figure leaves the main thread
-- out instead (the worker's and the store's threads: every instruction of
-- a local send, but the worker's own timers too, which grow with a slow
-- run), and a third counts only what the worker does under its socket
-- reads (conn.c's on_read, inclusive: decoding, the broker's send
-- processor, the answer's encoding; not the store thread's indexing or
-- the write syscalls): the one that does not move with the load.
--
--   lua5.4 scripts/bench/grpc_callgrind.lua [MESSAGES [SIZE]] [--binary PATH] [--annotate] [--receive]
--
-- (from the repo root, after scripts/test.sh installed the Node packages;
-- RMQ_BUILD picks the build).  Defaults: 20000 messages of 1024 bytes a
-- side.  gRPC: h2load -n MESSAGES (1 connection x 16 streams); remoting:
-- `rmq bench produce --uniq-key` (16 in flight; each message with a UNIQ_KEY, as
-- every gRPC SendMessage carries a message id the store indexes) until as many are stored.
-- --binary runs another build's rmq-server (e.g. the base of a change)
-- under the same load; --annotate prints callgrind_annotate's top
-- functions of each dump; --keep leaves the dumps (callgrind.out files).
--
-- --receive counts a received message instead: MESSAGES are stored first
-- (remoting, outside the counts), then consumed whole three times, one
-- fresh consumer group each, one after the other, a side's load alone in
-- its count: gRPC ReceiveMessage (32 a call, over POP) + one AckMessage
-- for them (rmq.client.grpc); remoting POP_MESSAGE (32) + one
-- BATCH_ACK_MESSAGE for them (the 5.x remoting POP consumer's way,
-- rmq.client.pop); remoting PULL_MESSAGE (32 a queue) with the offset
-- committed by the next pull.  Per message consumed.  A 5.x gRPC receive
-- is a POP: gRPC against POP is the gRPC layer's own cost, against PULL
-- the POP's too.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local cgrpc = require("rmq.grpc")
local core = require("rmq.core")
local net = require("rmq.net")
local server = require("support.server")

local pos, binary, annotate, keep, receive = {}, build .. "/rmq-server", false, false, false
do
    local i = 1
    while i <= #arg do
        if arg[i] == "--binary" then
            binary = arg[i + 1]
            i = i + 1
        elseif arg[i] == "--annotate" then
            annotate = true
        elseif arg[i] == "--receive" then
            receive = true
        elseif arg[i] == "--keep" then
            keep = true
        else
            pos[#pos + 1] = arg[i]
        end
        i = i + 1
    end
end
local N = tonumber(pos[1]) or 20000
local SIZE = tonumber(pos[2]) or 1024
local TOPIC = "BenchGrpcCgTopic"
local QUEUES = 4

for _, tool in ipairs({ "valgrind", "callgrind_control", "h2load" }) do
    assert(os.execute("command -v " .. tool .. " >/dev/null 2>&1"), tool .. " is needed")
end

local dir = server.tmpdir()
local wrapper = dir .. "/callgrind.sh"
do
    local f = assert(io.open(wrapper, "w"))
    f:write(("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/cg.%%p.out --dump-instr=no "
        .. "--collect-atstart=yes %q \"$@\" 2>%s/valgrind.log\n"):format(dir, binary, dir))
    f:close()
    os.execute("chmod +x '" .. wrapper .. "'")
end

local s = server.start({ role = "standalone", namesrvListenPort = 0, workers = 1, brokerName = "bench-cg",
                         storePathRootDir = dir .. "/store", kvConfigPath = dir .. "/kv.json",
                         mappedFileSizeCommitLog = 64 * 1024 * 1024, grpcServerPort = 0 },
                       nil, { binary = wrapper })
local ok, err = pcall(function()
local r = assert(net.call(s.broker_addr, { code = 17, ext = {
    topic = TOPIC, defaultTopic = "TBW102", readQueueNums = QUEUES, writeQueueNums = QUEUES, perm = 6,
    topicFilterType = "SINGLE_TAG", topicSysFlag = 0, order = false } }, 30000))
assert(r.code == 0, r.remark)
assert(server.eventually(function()
    local q = net.call(s.listen_addr, { code = 105, ext = { topic = TOPIC } }, 20000)
    return q and q.code == 0
end, 60000), "topic not routed")

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
        local m = assert(net.call(s.broker_addr, { code = 30, ext = { topic = TOPIC, queueId = q } }, 30000))
        n = n + tonumber(m.ext.offset)
    end
    return n
end

local dumps = 0
local idle_rate   -- Ir a second of the idle server (its timers, the NameServer)
-- load() returns the messages it consumed, or nothing: then the
-- messages stored meanwhile count.
local function measure(label, load)
    os.execute(("callgrind_control -z %d >/dev/null 2>&1"):format(s.pid))
    local n0 = stored()
    local t0 = core.now_ms()
    local consumed = load()
    local n = consumed or (stored() - n0)
    local secs = (core.now_ms() - t0) / 1000
    dumps = dumps + 1
    os.execute(("callgrind_control -d %s %d >/dev/null 2>&1"):format(label, s.pid))
    -- The newest dump of this process: its totals line.
    local p = io.popen(("ls -t %s/cg.%d.out.* 2>/dev/null | head -1"):format(dir, s.pid))
    local file = p:read("l")
    p:close()
    local ir
    for l in io.lines(file) do
        ir = tonumber(l:match("^totals:%s+(%d+)")) or tonumber(l:match("^summary:%s+(%d+)")) or ir
    end
    ir = ir or 0
    -- The main thread's share (its Lua timers, the NameServer: no part of
    -- a local send) from the inclusive profile: what is left, the worker
    -- and store threads, is a figure without the idle subtraction's noise
    -- (that scales with each load's wall-clock duration).
    local main_ir, read_ir = 0, 0
    do
        local a = io.popen(("callgrind_annotate --inclusive=yes --threshold=100 %q 2>/dev/null"):format(file))
        for l in a:lines() do
            local v = l:match("^%s*([%d,]+) .-main%.c:main ")
            if v then
                main_ir = tonumber((v:gsub(",", "")))
            end
            v = l:match("^%s*([%d,]+) .-net/conn%.c:on_read ")
            if v then
                read_ir = tonumber((v:gsub(",", "")))
            end
        end
        a:close()
    end
    if idle_rate == nil then
        idle_rate = ir / secs
        print(("idle      %.0f Ir a second over %.1f s (subtracted below, by each load's duration)")
            :format(idle_rate, secs))
    else
        local net_ir = math.max(0, ir - idle_rate * secs)
        print(("%-9s %8d messages %s in %5.1f s, %14d Ir, %8.0f Ir/message (%8.0f less idle, "
            .. "%8.0f off the main thread, %8.0f in socket reads)")
            :format(label, n, consumed and "consumed" or "stored", secs, ir, ir / math.max(1, n), net_ir / math.max(1, n),
                    (ir - main_ir) / math.max(1, n), read_ir / math.max(1, n)))
    end
    if annotate then
        os.execute(("callgrind_annotate --threshold=100 %q 2>/dev/null | grep -E '^ *[0-9,]+ ' | sed -n '2,41p'")
            :format(file))
    end
    io.stdout:flush()
end

if receive then
    local grpc = require("rmq.client.grpc")
    local pop = require("rmq.client.pop")
    local consumer = require("rmq.client.consumer")
    local G_GRPC, G_POP, G_PULL = "BenchCgGrpc", "BenchCgPop", "BenchCgPull"
    -- A new gRPC (POP initMode MAX) group starts at the queues' end: one
    -- receive places it before anything is stored.
    do
        local c = assert(grpc.connect(s.grpc_addr, { call_timeout = 60000 }))
        assert(c:receive(G_GRPC, TOPIC, { batch = 1, poll_ms = 0 }))
        c:close()
    end
    local function fill(n)
        local n0 = stored()
        while stored() - n0 < n do
            os.execute(("%s/rmq bench produce -n %s -t %s -s %d -c 16 -d 2 --uniq-key >/dev/null 2>&1")
                :format(build, s.listen_addr, TOPIC, SIZE))
        end
    end
    local function grpc_receive(limit)
        local c = assert(grpc.connect(s.grpc_addr, { call_timeout = 60000 }))
        local n, empty = 0, 0
        while n < limit and empty < 3 do
            local msgs = assert(c:receive(G_GRPC, TOPIC, { batch = 32, poll_ms = 0, invisible_ms = 600000 }))
            if #msgs == 0 then
                empty = empty + 1
            else
                empty = 0
                assert(c:ack(G_GRPC, TOPIC, msgs))
                n = n + #msgs
            end
        end
        c:close()
        return n
    end
    local function pop_receive(limit)
        local c = pop.new({ namesrvAddr = s.listen_addr, consumerGroup = G_POP, invisibleTime = 600000 })
        local n, empty = 0, 0
        while n < limit and empty < 3 do
            local pr = assert(c:pop(TOPIC, { maxMsgNums = 32, pollTime = 0, initMode = 0, timeout = 60000 }))
            if #pr.messages == 0 then
                empty = empty + 1
            else
                empty = 0
                assert(c:batch_ack(pr.messages))
                n = n + #pr.messages
            end
        end
        c:shutdown()
        return n
    end
    local pull_at = {}
    local function pull_receive(limit)
        local c = consumer.new({ namesrvAddr = s.listen_addr, consumerGroup = G_PULL })
        local n = 0
        for q = 0, QUEUES - 1 do
            local mq = { topic = TOPIC, brokerName = "bench-cg", queueId = q }
            local off = pull_at[q] or 0
            while n < limit do
                local pr = assert(c:pull(mq, off, 32, { commitOffset = off }))
                if pr.status ~= "FOUND" then
                    break
                end
                n = n + #pr.messages
                off = pr.nextBeginOffset
            end
            pull_at[q] = off
        end
        c:shutdown()
        return n
    end
    -- A first round each, unmeasured (connections, tables, the groups'
    -- first leases), then the counted ones on what is left.
    fill(N + 2000)
    grpc_receive(1000)
    pop_receive(1000)
    pull_receive(1000)
    print(("%s: %d-byte bodies, %d messages a side, 1 worker, under callgrind (%s), receive")
        :format(binary, SIZE, N, os.date("!%H:%M:%SZ")))
    measure("idle", function()
        net.sleep(10000)
    end)
    measure("grpc", function() return grpc_receive(N) end)
    measure("pop", function() return pop_receive(N) end)
    measure("pull", function() return pull_receive(N) end)
    return
end

-- A first round each, unmeasured: connections, mapped files, tables.
os.execute(("h2load -n 2000 -c 1 -m 16 -d %s -H 'content-type: application/grpc' -H 'te: trailers' "
    .. "http://%s/apache.rocketmq.v2.MessagingService/SendMessage >/dev/null 2>&1"):format(req, s.grpc_addr))
os.execute(("%s/rmq bench produce -n %s -t %s -s %d -c 16 -d 3 --uniq-key >/dev/null 2>&1")
    :format(build, s.listen_addr, TOPIC, SIZE))

print(("%s: %d-byte bodies, %d messages a side, 1 worker, under callgrind (%s)")
    :format(binary, SIZE, N, os.date("!%H:%M:%SZ")))
measure("idle", function()
    net.sleep(10000)
end)
measure("grpc", function()
    os.execute(("timeout 900 h2load -n %d -c 1 -m 16 -d %s -H 'content-type: application/grpc' -H 'te: trailers' "
        .. "http://%s/apache.rocketmq.v2.MessagingService/SendMessage >/dev/null 2>&1")
        :format(N, req, s.grpc_addr))
end)
measure("remoting", function()
    -- rmq bench produce runs for a time: rounds of a few seconds until N are stored.
    local n0 = stored()
    while stored() - n0 < N do
        os.execute(("%s/rmq bench produce -n %s -t %s -s %d -c 16 -d 2 --uniq-key >/dev/null 2>&1")
            :format(build, s.listen_addr, TOPIC, SIZE))
    end
end)
end)
s:stop(120000)
if keep then
    print("dumps kept in " .. dir)
else
    os.execute("rm -rf '" .. dir .. "'")
end
assert(ok, err)
