-- rmq.tools.bench: `rmq bench produce` and `rmq bench consume`, reported
-- with the labels of RocketMQ's benchmark tools (cli.lua parses the
-- options; see its usage text).
--
--   bench.produce(opts, namesrv, topic) -> exit code | nil, err
--   bench.consume(opts, namesrv, topic) -> exit code | nil, err
local cjson = require("cjson")
local core = require("rmq.core")
local codes = require("rmq.codes")
local net = require("rmq.net")
local loadgen = require("rmq.bench")
local producer = require("rmq.client.producer")
local route = require("rmq.client.route")

local M = {}

-- The bench's lines, labelled like RocketMQ's benchmark tool so results
-- can be compared side by side.
local function bench_line(s)
    return ("Send TPS: %d | Max RT(ms): %.3f | Average RT(ms): %.3f | p50 RT(ms): %.3f | "
        .. "p99 RT(ms): %.3f | Send Failed: %d | Response Failed: 0%s")
        :format(math.floor(s.tps + 0.5), s.max_ms, s.avg_ms, s.p50_ms, s.p99_ms, s.failed,
                -- SYSTEM_BUSY replies (flow control), not among the failed
                (s.busy or 0) > 0 and (" | Send Busy: %d"):format(s.busy) or "")
end

-- `rmq bench consume`: one long-polling pull loop per queue, records
-- counted and timed from their own born/store timestamps (no decode),
-- reported with the labels of RocketMQ's Consumer benchmark.
function M.consume(opts, namesrv, topic)
    local r, err = route.fetch(route.parse_namesrv(namesrv), topic, 3000)
    if not r then
        return nil, "bench: no route for " .. topic .. ": " .. tostring(err)
    end
    local addrs = {}
    for _, bd in ipairs(r.brokerDatas or {}) do
        addrs[bd.brokerName] = (bd.brokerAddrs or {})["0"]
    end
    local queues = route.subscribe_queues(topic, r)
    local seconds = tonumber(opts.seconds) or 10
    local group = opts.group or "benchmark_consumer"
    local from_start = opts.from == "first"
    local sec = { n = 0, b2c = 0, s2c = 0, max_b2c = 0, max_s2c = 0 }
    local total, stop, done = 0, false, 0
    local conns = {}
    local function conn(addr)
        if not conns[addr] or conns[addr].closed then
            conns[addr] = assert(net.connect(addr))
        end
        return conns[addr]
    end
    local function tally(rep, now)
        -- In C (rmq.bench), on the reply itself (no body string): at a
        -- million records a second this loop in Lua was the consumer's
        -- ceiling.
        local n, b2c, s2c, max_b2c, max_s2c = loadgen.tally(rep, now)
        sec.n, sec.b2c, sec.s2c = sec.n + n, sec.b2c + b2c, sec.s2c + s2c
        if max_b2c > sec.max_b2c then sec.max_b2c = max_b2c end
        if max_s2c > sec.max_s2c then sec.max_s2c = max_s2c end
    end
    local function loop(mq)
        local addr = addrs[mq.brokerName]
        local c = conn(addr)
        local off = 0
        if not from_start then
            local m = c:call({ code = codes.request.GET_MAX_OFFSET, ext = { topic = topic, queueId = mq.queueId } })
            off = m and m.code == 0 and tonumber(m.ext.offset) or 0
        end
        while not stop do
            local rep = c:call({ code = codes.request.PULL_MESSAGE, ext = {
                consumerGroup = group, topic = topic, queueId = mq.queueId, queueOffset = off,
                maxMsgNums = 32, sysFlag = 6, commitOffset = 0, suspendTimeoutMillis = 1000,
                subscription = "*", subVersion = 0 } }, 5000)
            if rep == nil then
                net.sleep(100)
            else
                if rep.code == 0 then
                    tally(rep, core.now_ms())
                end
                off = tonumber(rep:get("nextBeginOffset")) or off
            end
        end
        done = done + 1
    end
    local function line(s, span)
        local avg_b2c = s.n > 0 and s.b2c / s.n or 0
        local avg_s2c = s.n > 0 and s.s2c / s.n or 0
        return ("Consume TPS: %d | Average(B2C) RT(ms): %.3f | Average(S2C) RT(ms): %.3f | "
            .. "MAX(B2C) RT(ms): %d | MAX(S2C) RT(ms): %d"):format(math.floor(s.n / span + 0.5),
            avg_b2c, avg_s2c, s.max_b2c, s.max_s2c)
    end
    local all = { n = 0, b2c = 0, s2c = 0, max_b2c = 0, max_s2c = 0 }
    -- Each pull's reply (33 KiB at 32 records of 1 KiB) is garbage at
    -- once: the generational collector frees it young instead of
    -- walking the whole heap a cycle every few pulls.
    collectgarbage("generational")
    net.run(function()
        for _, mq in ipairs(queues) do
            net.spawn(loop, mq)
        end
        for _ = 1, seconds do
            net.sleep(1000)
            print(os.date("Current Time: %Y-%m-%d %H:%M:%S | ") .. line(sec, 1))
            io.stdout:flush()
            total = total + sec.n
            for k, v in pairs(sec) do
                if k:match("^max") then
                    if v > all[k] then all[k] = v end
                else
                    all[k] = all[k] + v
                end
            end
            sec = { n = 0, b2c = 0, s2c = 0, max_b2c = 0, max_s2c = 0 }
        end
        stop = true
        while done < #queues do
            net.sleep(50)
        end
    end)
    print(("[Complete] Consume Total: %d | "):format(total) .. line(all, seconds))
    return 0
end

-- --grpc: the topic's writable queues at the gRPC endpoint (QueryRoute,
-- as a 5.x producer asks; with --broker, queues 0..QUEUES-1 there), and
-- the headers a 5.x SDK sends with every call (signed when the CLI has
-- credentials), from rmq.client.grpc.
local function grpc_targets(opts, endpoint, topic)
    local c, err = require("rmq.client.grpc").connect(endpoint)
    if not c then
        return nil, "bench: " .. err
    end
    local headers = c:headers()
    local targets = {}
    if opts.broker then
        c:close()
        for q = 0, (tonumber(opts.queues) or 4) - 1 do
            targets[#targets + 1] = { addr = endpoint, brokerName = "broker", queueId = q }
        end
        return targets, headers
    end
    local r, rerr = c:query_route(topic)
    c:close()
    if not r then
        return nil, "bench: no route for " .. topic .. ": " .. tostring(rerr)
    end
    for _, mq in ipairs(r.message_queues or {}) do
        -- apache.rocketmq.v2.Permission: WRITE 3, READ_WRITE 4
        if mq.permission == 3 or mq.permission == 4 then
            targets[#targets + 1] = { addr = endpoint, brokerName = mq.broker and mq.broker.name, queueId = mq.id }
        end
    end
    if #targets == 0 then
        return nil, "bench: " .. topic .. " has no writable queue at " .. endpoint
    end
    return targets, headers
end

-- `rmq bench produce`: the C load generator (rmq.bench, tools/loadgen.h)
-- over the topic's queues, or straight to one broker with opts.broker;
-- --grpc: gRPC SendMessage through the same generator.
function M.produce(opts, namesrv, topic)
    local rate = tonumber(opts.rate or 0)
    if rate == nil or rate < 0 then
        return nil, "bench: --rate N takes a number of sends a second"
    end
    if opts.grpc and (opts.serialize or opts.uniq_key) then
        return nil, "bench: --grpc sends a message id with every message; no --serialize or --uniq-key"
    end
    local targets, headers = {}, nil
    if opts.grpc then
        targets, headers = grpc_targets(opts, opts.broker or namesrv, topic)
        if not targets then
            return nil, headers
        end
    elseif opts.broker then
        -- Straight to one broker (or a stub), no NameServer.
        for q = 0, (tonumber(opts.queues) or 4) - 1 do
            targets[#targets + 1] = { addr = opts.broker, brokerName = "broker", queueId = q }
        end
    else
        local p = producer.new({ namesrvAddr = namesrv })
        local info, err = p:publish_info(topic)
        if not info then
            return nil, "bench: no route for " .. topic .. ": " .. tostring(err)
        end
        for _, q in ipairs(info.queues) do
            targets[#targets + 1] = { addr = p:broker_addr(info, q.brokerName),
                                      brokerName = q.brokerName, queueId = q.queueId }
        end
    end
    local s, err = loadgen.produce({
        targets = targets, topic = topic,
        size = tonumber(opts.size) or 1024,
        concurrency = tonumber(opts.concurrency) or 64,
        seconds = tonumber(opts.seconds) or 10,
        connections = tonumber(opts.connections) or 4,
        serialize = opts.serialize or "JSON",
        uniq_key = opts.uniq_key and true or false,
        grpc = opts.grpc and true or false, headers = headers, rate = rate,
        -- the process's (rmq --access-key): signed once per queue, in C
        -- (gRPC: in the headers, as 5.x signs)
        credentials = not opts.grpc and net.credentials() or nil,
        tick = function(sec)
            if sec.elapsed < 0.5 then
                return  -- the tail after the last full second
            end
            print(os.date("Current Time: %Y-%m-%d %H:%M:%S | ") .. bench_line(sec))
            io.stdout:flush()
        end,
    })
    if not s then
        return nil, err
    end
    if opts.json then
        print(cjson.encode(s))
    end
    print(("[Complete] Send Total: %d | "):format(s.ok + s.failed + (s.busy or 0)) .. bench_line(s))
    return s.failed == 0 and (s.busy or 0) == 0 and 0 or 2
end

return M
