-- NameServer route lookups under load, next to redis GET on the same
-- machine in the same run.
--
--   lua5.4 scripts/bench/route.lua [SECONDS [CONNECTIONS [WORKERS [ROUNDS]]]]
--
-- (from the repo root, after a build; RMQ_BUILD picks the build dir,
-- default build/).  Defaults: 10 s per measurement, 64 connections,
-- workers = CPU cores, 3 rounds.
--
-- Set-up:
--  - an rmq-server NameServer on 127.0.0.1 (ephemeral port, own temp
--    dir) with 4 broker groups registered (a master and a slave each,
--    4.9.8-style JSON bodies, connections kept open) holding the same
--    1,000 topics, so every route names 4 groups of 2 addresses;
--  - a redis-server on a free 127.0.0.1 port (--save '', no AOF) holding,
--    under the key redis-benchmark's GET reads, a value as large as the
--    route body.
-- Each round then measures, one after the other:
--  - rmq: GET_ROUTEINFO_BY_TOPIC as the 4.9.8 Java client sends it
--    (version 409), CONNECTIONS connections with one request in flight
--    each (no pipelining), from a C closed loop (rmq.bench.requests),
--    SECONDS after a 0.5 s warm-up;
--  - redis: `redis-benchmark -t get -c CONNECTIONS -P 1 -n N`, N sized
--    to last about SECONDS.
-- Rounds alternate the two so that other load on the machine hits both
-- alike; the summary gives each one's median round.  Both servers and
-- both load generators share this machine's cores.  Every process
-- started here is stopped by its PID.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local bench = require("rmq.bench")
local codec = require("rmq.codec")
local core = require("rmq.core")
local net = require("rmq.net")
local proc = require("rmq.proc")
local ns = require("support.nsclient")
local server = require("support.server")

local SECONDS = tonumber(arg[1]) or 10
local CONNS = tonumber(arg[2]) or 64
local WORKERS = tonumber(arg[3]) or core.cpu_count()
local ROUNDS = tonumber(arg[4]) or 3
local TOPICS = 1000
local GROUPS = 4
local REDIS_SERVER = "/usr/bin/redis-server"
local REDIS_BENCHMARK = "/usr/bin/redis-benchmark"

-- The same helpers the specs use.
local tmpdir = server.tmpdir
local read_file = server.read_file

local function exists(path)
    local f = io.open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

local function wait_for(fn, ms, what)
    local waited = 0
    while waited < ms do
        local v = fn()
        if v then
            return v
        end
        net.sleep(20)
        waited = waited + 20
    end
    error("timed out waiting for " .. what)
end

local dir = tmpdir()
local children = {}

local function spawn(o)
    local p = assert(proc.spawn(o))
    children[#children + 1] = p
    return p
end

local function stop_all()
    for _, p in ipairs(children) do
        if not p.exited then
            p:kill(15)
            p:wait(5000)
        end
    end
end

-- {{{ rmq

local function start_rmq()
    local conf = dir .. "/namesrv.lua"
    local f = assert(io.open(conf, "w"))
    f:write(("return { role = 'namesrv', workers = %d, kvConfigPath = %q, logLevel = 'warn' }\n")
        :format(WORKERS, dir .. "/kvConfig.json"))
    f:close()
    local out = dir .. "/rmq.out"
    local p = spawn({ file = build .. "/rmq-server",
        args = { conf, "--listenPort=0", "--bindAddress=127.0.0.1" },
        stdout = out, stderr = dir .. "/rmq.err" })
    local line = wait_for(function()
        if p.exited then
            error("rmq-server exited:\n" .. read_file(dir .. "/rmq.err"))
        end
        return read_file(out):match("READY[^\n]*")
    end, 15000, "rmq-server READY")
    return line:match("listen=(%S+)")
end

-- Registers the broker groups; returns their (open) connections.
local function register_brokers(addr)
    local topics = {}
    for i = 1, TOPICS do
        topics[i] = { ("BenchTopic-%04d"):format(i), 8, 8, 6 }
    end
    local conns = {}
    for g = 1, GROUPS do
        for id = 0, 1 do
            local c = assert(net.connect(addr))
            local r = assert(ns.register(c, { cluster = "BenchCluster",
                name = ("broker-%d"):format(g), id = id,
                addr = ("10.1.%d.%d:10911"):format(g, id + 1), counter = 1, topics = topics }))
            assert(r.code == 0, r.remark)
            conns[#conns + 1] = c   -- kept open: closing would unregister
        end
    end
    return conns
end

-- }}}

-- {{{ redis

local function free_port()
    -- Nothing answers a connect there (a race, but on loopback a tiny one).
    for _ = 1, 200 do
        local port = 20000 + math.random(0, 30000)
        local c = net.connect("127.0.0.1:" .. port, { timeout = 200 })
        if not c then
            return port
        end
        c:close()
    end
    error("no free port found")
end

local function start_redis()
    local port = free_port()
    local p = spawn({ file = REDIS_SERVER,
        args = { "--port", tostring(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--protected-mode", "yes", "--dir", dir },
        stdout = dir .. "/redis.out", stderr = dir .. "/redis.err" })
    wait_for(function()
        if p.exited then
            error("redis-server exited:\n" .. read_file(dir .. "/redis.out"))
        end
        local c = net.connect("127.0.0.1:" .. port, { timeout = 200 })
        if c then
            c:close()
            return true
        end
    end, 10000, "redis-server")
    return port
end

-- Runs redis-benchmark; `out` must be a new file (proc appends).
local function redis_benchmark(port, args, out)
    local all = { "-h", "127.0.0.1", "-p", tostring(port) }
    for _, a in ipairs(args) do
        all[#all + 1] = a
    end
    local p = spawn({ file = REDIS_BENCHMARK, args = all, stdout = out, stderr = out .. ".err" })
    local status = p:wait(600000)
    assert(status == 0, "redis-benchmark failed: " .. read_file(out .. ".err"))
    return read_file(out)
end

-- "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
-- "p95_latency_ms","p99_latency_ms","max_latency_ms"
local function parse_csv(csv)
    local f = {}
    for v in (csv:match('"GET"[^\n]*') or ""):gmatch('"([^"]*)"') do
        f[#f + 1] = v
    end
    assert(#f >= 8, "unexpected redis-benchmark output: " .. csv)
    return { rps = tonumber(f[2]), p50_us = tonumber(f[5]) * 1000, p99_us = tonumber(f[7]) * 1000,
             max_us = tonumber(f[8]) * 1000 }
end

-- }}}

local function ms(us)
    return ("%7.3f ms"):format(us / 1000)
end

local function line(name, r, n)
    return ("  %-28s %9.0f req/s   p50 %s   p99 %s   max %s   (%d requests)")
        :format(name, r.rps, ms(r.p50_us), ms(r.p99_us), ms(r.max_us), n)
end

local function median(list, key)
    local t = {}
    for _, r in ipairs(list) do
        t[#t + 1] = r
    end
    table.sort(t, function(a, b) return a[key] < b[key] end)
    return t[(#t + 1) // 2]
end

local function run()
    local addr = start_rmq()
    local brokers = register_brokers(addr)
    local topic = "BenchTopic-0500"
    local probe = assert(net.connect(addr))
    local reply = assert(probe:call({ code = 105, ext = { topic = topic }, version = 409 }))
    assert(reply.code == 0, reply.remark)
    local body_len = #reply.body
    probe:close()
    local frame = codec.encode({ code = 105, opaque = 1, version = 409, ext = { topic = topic } })

    local have_redis = exists(REDIS_SERVER) and exists(REDIS_BENCHMARK)
    local port, n
    if have_redis then
        port = start_redis()
        -- The key redis-benchmark's GET reads, as large as the route body.
        redis_benchmark(port, { "-t", "set", "-n", "1", "-c", "1", "-d", tostring(body_len), "-q" },
            dir .. "/set.out")
        local pilot = parse_csv(redis_benchmark(port, { "-t", "get", "-c", tostring(CONNS), "-P", "1",
            "-n", "50000", "--csv" }, dir .. "/pilot.csv"))
        n = math.max(50000, math.floor(pilot.rps * SECONDS))
    else
        print("redis-server / redis-benchmark are not installed"
            .. " (apt-get install redis-server redis-tools): rmq alone")
    end

    print(("rmq NameServer %s (%d workers): %d topics on %d broker groups of 2, route body %d bytes")
        :format(addr, WORKERS, TOPICS, GROUPS, body_len))
    if have_redis then
        print(("redis-server 127.0.0.1:%d: GET of a %d-byte value"):format(port, body_len))
    end
    print(("%d connections, 1 request in flight each; %d rounds of %g s each"):format(CONNS, ROUNDS,
        SECONDS))
    local rmq_runs, redis_runs = {}, {}
    for round = 1, ROUNDS do
        print(("round %d"):format(round))
        local r = assert(bench.requests({ addr = addr, frame = frame, connections = CONNS,
                                          seconds = SECONDS, warmup_ms = 500 }))
        if r.errors > 0 or r.failed_connects > 0 then
            print(("  WARNING: %d error replies, %d failed connections"):format(r.errors,
                r.failed_connects))
        end
        rmq_runs[#rmq_runs + 1] = r
        print(line("rmq GET_ROUTEINFO_BY_TOPIC", r, r.ok))
        if have_redis then
            local g = parse_csv(redis_benchmark(port, { "-t", "get", "-c", tostring(CONNS), "-P", "1",
                "-n", tostring(n), "--csv" }, dir .. "/get" .. round .. ".csv"))
            redis_runs[#redis_runs + 1] = g
            print(line("redis GET", g, n))
        end
    end
    local mr = median(rmq_runs, "rps")
    print("median round")
    print(line("rmq GET_ROUTEINFO_BY_TOPIC", mr, mr.ok))
    if have_redis then
        local mg = median(redis_runs, "rps")
        print(line("redis GET", mg, n))
        print(("rmq / redis: %.2f x the requests per second"):format(mr.rps / mg.rps))
    end
    for _, c in ipairs(brokers) do
        c:close()
    end
end

local ok, err = pcall(net.run, run)
stop_all()
os.execute("rm -rf '" .. dir .. "'")
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
