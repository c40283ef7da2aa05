-- Issue 21's attacks, one after another, against one standalone rmq-server
-- (real process on loopback, own temp dir) while `rmq bench produce` keeps
-- sending to it.  For each attack it prints: another client's send p99 and
-- max during the attack (a probe sending one message every 20 ms on its
-- own connection, from 127.0.0.1 while the attackers use 127.0.0.2 where
-- they can), the broker's anonymous RSS (RssAnon: without the commit
-- log's mapped pages) before / peak / 15 s after, and what was
-- refused.  Figures only: the specs assert the behaviour
-- (memory_budget_spec, console_history_spec and the other engineers').
--
--   [ATTACK_CONF=key=value,...] lua5.4 scripts/bench/attacks.lua [TOPICS=26000] [GROUPS=6000]
--          [FLOOD_CONNS=200] [FLOOD_PER_CONN=1000] [ONLY=name,name]
--
-- Run from the repository root after a build (RMQ_BUILD picks the build
-- dir, default build/).  The attacks, in order (names for ONLY):
--   idle       nothing for 10 s: the probe's p99 with only the background
--              producer, the reference for the others on a shared machine
--   heldpull   FLOOD_CONNS connections each sending FLOOD_PER_CONN long-poll
--              PULLs (20 s) on an empty queue, held ~10 s, then closed
--   console    TOPICS topics and GROUPS groups (one committed offset each)
--              created (RSS "before" is taken after: they are data the
--              broker keeps), the web console viewed once, then left alone for
--              60 s (sampling every 2 s; consoleIdleStopSeconds 20)
--   hashflood  8,192 topic names of 13 "Aa"/"BB" pairs (one Java hash),
--              auto-created by sends; then 500 sends to one of them and
--              500 to an ordinary topic, timed
--   topicconf  two clients looping GET_ALL_TOPIC_CONFIG (TOPICS topics) for 15 s
--   slowloris  40 connections to the metrics port each sending one header
--              line a second for 15 s; /metrics probed every 500 ms
--   connflood  connections to the broker port until refused (the server
--              runs with `ulimit -n 4096`), held 5 s, then closed
-- The aim (issue 21): the probe's p99 under 50 ms and RSS growth under
-- memoryBudgetBytes (256 MiB) in every attack, RSS back within 10 % of its
-- start 15 s after each.
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path

local socket = require("socket")
local core = require("rmq.core")
local net = require("rmq.net")
local fastjson = require("rmq.fastjson")
local server = require("support.server")
local slow = require("support.slowreader")
local flood = require("support.flood")
local load = require("support.load")
local http = require("support.http")

-- The probe runs as a process of its own (this script with --probe), so
-- the attackers' work in this one never delays it: it sends to ADDR every
-- 20 ms and appends "mono_ms latency_ms code" lines to FILE until STOP exists.
if arg[1] == "--probe" then
    local addr, file, stop = arg[2], arg[3], arg[4]
    local out = assert(io.open(file, "w"))
    local c = assert(net.connect(addr))
    local cmd = slow.cmd((slow.send_frame(0, "ProbeTopic", 0, "probe")))
    local deadline = core.mono_ms() + 3 * 3600 * 1000
    while core.mono_ms() < deadline do
        local t0 = core.mono_ms()
        local r = c:call(cmd, 30000)
        out:write(("%.1f %.2f %d %s\n"):format(t0, core.mono_ms() - t0, r and r.code or -1,
                                              r and r.code ~= 0 and (r.remark or ""):sub(1, 60) or ""))
        out:flush()
        local f = io.open(stop)
        if f then
            f:close()
            break
        end
        net.sleep(20)
    end
    out:close()
    os.exit(0)
end

local TOPICS = tonumber(arg[1]) or 26000
local GROUPS = tonumber(arg[2]) or 6000
local FLOOD_CONNS = tonumber(arg[3]) or 200
local FLOOD_PER = tonumber(arg[4]) or 1000
local ONLY = {}
for name in (arg[5] or ""):gmatch("[^,]+") do
    ONLY[name] = true
end
local NOFILE = 4096
local MiB = 1024 * 1024

local conf = {
    role = "standalone", workers = 2, brokerName = "broker-attack", brokerClusterName = "AttackCluster",
    storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 64 * MiB,
    -- 6,000 entries a consume-queue file (6,000,000 bytes by default):
    -- the console and hashflood attacks make 58,000 queues, and at the
    -- default size their files took 24 GB of /tmp and filled the disk
    -- for everyone.  Mapped pages, not RssAnon: the figures are the same.
    mappedFileSizeConsumeQueue = 6000 * 20,
    messageIndexEnable = false,
    kvConfigPath = server.tmpdir() .. "/kv.json",
    autoCreateTopicEnable = true,
    metricsExporterType = "PROM", metricsPromExporterPort = 0,
    consoleSampleSeconds = 2, consoleIdleStopSeconds = 20,
}
-- ATTACK_CONF="key=value,key=value": conf keys set on the attacked
-- broker, e.g. serverPeerMaxFramesPerTurn=0 for an A/B of one setting
-- with the same binary (numbers and true/false as such).
for k, v in (os.getenv("ATTACK_CONF") or ""):gmatch("([%w%.]+)=([^,]*)") do
    conf[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v
end
local start_opts = { nofile = NOFILE, env = os.getenv("ATTACK_JEMALLOC") and {
    "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "MALLOC_CONF=" .. os.getenv("ATTACK_JEMALLOC"),
    "PATH=" .. os.getenv("PATH"), "HOME=" .. server.tmpdir() } or nil }
local s = server.start(conf, { "namesrvListenPort=0" }, start_opts)

-- Anonymous resident memory (RssAnon, KiB): the heap and stacks.  VmRSS
-- also counts the commit log's mapped pages, which grow with every
-- message `rmq bench produce` stores and are the page cache's, not ours.
local function rss(field)
    local f = io.open("/proc/" .. s.pid .. "/status")
    if not f then
        return 0
    end
    local text = f:read("a")
    f:close()
    return tonumber(text:match((field or "RssAnon") .. ":%s*(%d+)")) or 0
end

-- {{{ the probe and the background load

local probe_file = server.tmpdir() .. "/probe.txt"
local probe_stop = server.tmpdir() .. "/probe.stop"

local function send_cmd(topic)
    return slow.cmd((slow.send_frame(0, topic, 0, "probe")))
end

local function start_probe()
    os.execute(("lua5.4 %q --probe %s %q %q > /dev/null 2>&1 &"):format(arg[0], s.broker_addr, probe_file,
                                                                         probe_stop))
end

-- The probe's sends that started in [t0, t1): latencies, busy, failed.
local function probe_window(t0, t1)
    local lat, busy, failed, why = {}, 0, 0, nil
    local f = io.open(probe_file)
    if not f then
        return lat, busy, failed
    end
    for line in f:lines() do
        local t, ms, code, remark = line:match("^(%S+) (%S+) (%S+) ?(.*)$")
        t = tonumber(t)
        if t and t >= t0 and t < t1 then
            lat[#lat + 1] = tonumber(ms)
            if tonumber(code) == -1 then
                failed = failed + 1
            elseif tonumber(code) ~= 0 then
                busy = busy + 1
                why = why or ("code " .. code .. " " .. remark)
            end
        end
    end
    f:close()
    return lat, busy, failed, why
end

local function percentile(t, p)
    local c = { table.unpack(t) }
    table.sort(c)
    return c[math.max(1, math.ceil(#c * p))] or 0
end

local bench_out = server.tmpdir() .. "/bench_produce.txt"
local bench_pid
local function start_bench()
    local cmd = ("%s/rmq bench produce -n %s -t BenchLoad -s 256 -c 4 -d 3600 > %s 2>&1 & echo $!")
        :format(build, s.listen_addr, bench_out)
    local p = io.popen(cmd)
    bench_pid = tonumber(p:read("l"))
    p:close()
end

-- }}}

-- {{{ running one attack

local function runtime_info()
    local r = net.call(s.broker_addr, { code = 28 }, 30000)
    if r and r.code == 0 then
        return fastjson.decode(r.body).table
    end
    return {}
end


local results = {}

-- ATTACK_PROF=DIR: the broker runs with jemalloc's heap profiling
-- (Debian's libjemalloc is built with it; export
-- MALLOC_CONF=prof:true,lg_prof_sample:14,prof_prefix:DIR/jeprof before
-- running this script)
-- and a profile of what is allocated is dumped into DIR after each
-- attack's 15 s and for the data alone, through gdb calling
-- mallctl("prof.dump").  Read them with
-- `jeprof --text build/rmq-server DIR/NAME.heap`.
local function prof_dump(name)
    local dir = os.getenv("ATTACK_PROF")
    if not dir then
        return
    end
    -- The profile, then jemalloc's per-size-class figures (its text
    -- statistics, merged arenas, bins only) onto the broker's stderr,
    -- copied out to DIR/NAME.stats.
    os.execute(("gdb -p %d -batch -ex 'call ((int (*)(const char *, void *, void *, void *, unsigned long))"
                .. "mallctl)(\"prof.dump\", 0, 0, 0, 0)' -ex 'call ((void (*)(void *, void *, const char *))"
                .. "malloc_stats_print)(0, 0, \"gdalxeh\")' > /dev/null 2>&1; "
                .. "f=$(ls -t %s/jeprof.*.heap 2>/dev/null | head -1); [ -n \"$f\" ] && mv \"$f\" %s/%s.heap")
        :format(s.pid, dir, dir, name))
    local log = s:log()
    local at = 1
    while true do
        local b = log:find("___ Begin jemalloc statistics ___", at, true)
        if not b then
            break
        end
        at = b + 1
    end
    local f = io.open(("%s/%s.stats"):format(dir, name), "w")
    if f and at > 1 then
        f:write(log:sub(at - 1))
    end
    if f then
        f:close()
    end
end

-- What the broker says it holds (GET_BROKER_RUNTIME_INFO): each Lua
-- state's heap and the allocator's allocated / resident bytes, MB.
local function breakdown(info)
    local heaps = {}
    for name, bytes in (info.memoryLuaHeapBytes or ""):gmatch("(%S+):(%d+)") do
        heaps[#heaps + 1] = ("%s %.1f"):format(name, tonumber(bytes) / 1e6)
    end
    local function mb(k)
        return (tonumber(info[k]) or 0) / 1e6
    end
    return ("Lua heap MB: %s; %s allocated %.1f, active %.1f, metadata %.1f, resident %.1f MB; budget used %.1f MB")
        :format(#heaps > 0 and table.concat(heaps, ", ") or "?", info.memoryAllocator or "?",
                mb("memoryAllocatedBytes"), mb("memoryActiveBytes"), mb("memoryAllocatorMetadataBytes"),
                mb("memoryResidentBytes"),
                (tonumber(info.memoryBudgetUsed) or 0) / 1e6)
end

-- Runs fn(tick, rebase) (tick() samples RSS for the peak; call it
-- often), then watches RSS for 15 s; prints and keeps one line.  An
-- attack whose set-up makes data the broker must keep (the console
-- attack's 26,000 topics) calls rebase() once it is made: "before" is
-- then RSS with that data, and what creating it took is printed apart.
local function attack(name, what, fn)
    if next(ONLY) and not ONLY[name] then
        return
    end
    collectgarbage()
    local before, vm_before = rss(), rss("VmRSS")
    local peak = before
    local function tick()
        peak = math.max(peak, rss())
    end
    local setup
    local function rebase()
        local now = rss()
        setup = ("set-up (data kept) RssAnon %d -> %d MB; "):format(before // 1024, now // 1024)
        before, vm_before, peak = now, rss("VmRSS"), now
    end
    local t0 = core.mono_ms()
    local ok, refused = pcall(fn, tick, rebase)
    if ok and setup then
        refused = setup .. tostring(refused)
    end
    if not ok then
        refused = "attack failed: " .. tostring(refused)
    end
    local ms = core.mono_ms() - t0
    local lat, busy, failed, why = probe_window(t0, core.mono_ms())
    local t1 = core.mono_ms()
    while core.mono_ms() - t1 < 15000 do
        tick()
        net.sleep(250)
    end
    local after = rss()
    local info = runtime_info()
    prof_dump(name)
    local used = tonumber(info.memoryBudgetUsed) or 0
    local line = ("%-10s %-44s probe p99 %7.1f ms max %7.1f ms p90 %.1f ms (%d sends, %d busy, %d failed) | RSS %4d MB; RssAnon %4d -> peak %4d -> +15 s %4d MB (kept %+.0f %% of RSS; budget used %.1f MB) | %s")
        :format(name, what, percentile(lat, 0.99), percentile(lat, 1), percentile(lat, 0.9), #lat, busy, failed,
                vm_before // 1024,
                before // 1024, peak // 1024, after // 1024, (after - before) * 100 / vm_before, used / 1e6,
                tostring(refused)) .. (why and (" | probe's first refusal: " .. why) or "")
    print(line)
    print("           breakdown +15 s: " .. breakdown(info))
    io.stdout:flush()
    results[#results + 1] = { name = name, p99 = percentile(lat, 0.99), before = before // 1024,
                              peak = peak // 1024, after = after // 1024,
                              kept = (after - before) * 100 / vm_before, refused = tostring(refused),
                              busy = busy, breakdown = breakdown(info) }
    return ms
end

-- }}}

local ok, err = pcall(function()
    start_probe()
    if not os.getenv("ATTACK_NO_BENCH") then
        start_bench()
    end
    net.sleep(3000)   -- the bench's producer starts, the probe's topic exists

    -- The reference: the probe's p99 with only the background producer
    -- (and whatever else the machine runs), so each attack's figure can be
    -- read against what this machine gives without it.
    attack("idle", "no attack, 10 s (the reference)", function(tick)
        local t0 = core.mono_ms()
        while core.mono_ms() - t0 < 10000 do
            tick()
            net.sleep(250)
        end
        return "-"
    end)

    attack("heldpull", ("%d conns x %d held PULLs"):format(FLOOD_CONNS, FLOOD_PER), function(tick)
        local c = assert(net.connect(s.broker_addr))
        assert(c:call(send_cmd("FloodTopic"), 30000))
        c:close()
        local f = flood.open(s.broker_addr, FLOOD_CONNS, "127.0.0.2")
        f:queue_pulls(FLOOD_PER, { topic = "FloodTopic", queueId = 1, suspendMillis = 20000 })
        local t0 = core.mono_ms()
        while core.mono_ms() - t0 < 10000 do
            f:pump()
            tick()
            net.sleep(20)
        end
        f:pump()
        local info = runtime_info()
        f:close()
        return ("%d SYSTEM_BUSY read back, %d sent unanswered; broker: budget requests %s B, refusals %s")
            :format(f.codes[2] or 0, f.sent_frames - f.replies, tostring(info.memoryBudgetRequests),
                    tostring(info.memoryBudgetRefused))
    end)

    attack("console", ("%d topics, %d groups, console viewed once"):format(TOPICS, GROUPS), function(tick, rebase)
        local names = {}
        for i = 1, TOPICS do
            names[i] = ("AttackT%06d"):format(i)
        end
        local res = load.run(s.broker_addr, 16, names, function(c, topic)
            local r = assert(c:call({ code = 17, ext = {
                topic = topic, defaultTopic = "TBW102", readQueueNums = "1", writeQueueNums = "1",
                perm = "6", topicFilterType = "SINGLE_TAG", topicSysFlag = "0", order = "false" } }, 30000))
            tick()
            return r.code == 0
        end, 900000)
        local groups = {}
        for i = 1, GROUPS do
            groups[i] = { g = ("AttackG%05d"):format(i), t = names[(i - 1) % TOPICS + 1] }
        end
        local gres = load.run(s.broker_addr, 16, groups, function(c, x)
            local r = assert(c:call({ code = 15, ext = { consumerGroup = x.g, topic = x.t, queueId = 0,
                                                        commitOffset = 0 } }, 30000))
            tick()
            return r.code == 0
        end, 900000)
        -- The topics and groups are data the broker keeps (the restart at
        -- the end shows how much): the attack is what viewing them costs.
        rebase()
        local t0 = core.mono_ms()
        -- One view (at this size it takes seconds: a snapshot reads up to
        -- consoleMaxQueues queues and every group's members).
        local out = http.raw(s.metrics_addr, "GET /api/groups HTTP/1.1\r\nHost: rmq\r\nConnection: close\r\n\r\n",
                             300)
        local status = out:match("^HTTP/1%.%d (%d+)")
        local view_ms = core.mono_ms() - t0
        local console_max = 0
        t0 = core.mono_ms()
        while core.mono_ms() - t0 < 60000 do
            tick()
            console_max = math.max(console_max, tonumber(runtime_info().memoryBudgetConsole) or 0)
            net.sleep(1000)
        end
        return ("created %d/%d topics, %d/%d groups; /api/groups %s in %.0f ms; console heap max %.1f MiB, "
                .. "now %.1f MiB"):format(res.done, TOPICS, gres.done, GROUPS, tostring(status), view_ms,
            console_max / MiB, (tonumber(runtime_info().memoryBudgetConsole) or 0) / MiB)
    end)

    attack("hashflood", "8192 topics named with 13 Aa/BB pairs", function(tick)
        local names = {}
        for i = 0, 8191 do
            local parts = {}
            for b = 12, 0, -1 do
                parts[#parts + 1] = (i >> b) & 1 == 1 and "BB" or "Aa"
            end
            names[#names + 1] = table.concat(parts)
        end
        local res = load.run(s.broker_addr, 8, names, function(c, topic)
            local r = c:call(send_cmd(topic), 30000)
            tick()
            return r ~= nil and r.code == 0
        end, 600000)
        local c = assert(net.connect(s.broker_addr))
        local function timed(topic)
            local t = {}
            for _ = 1, 500 do
                local t0 = core.mono_ms()
                assert(c:call(send_cmd(topic), 30000))
                t[#t + 1] = core.mono_ms() - t0
            end
            return percentile(t, 0.5)
        end
        assert(c:call(send_cmd("OrdinaryTopic"), 30000))
        local colliding, ordinary = timed(names[4096]), timed("OrdinaryTopic")
        c:close()
        return ("created %d (%d failed); send p50 to a colliding topic %.2f ms, to an ordinary one %.2f ms")
            :format(res.done, res.failed, colliding, ordinary)
    end)

    attack("topicconf", "2 clients looping GET_ALL_TOPIC_CONFIG", function(tick)
        local replies, bytes, live = 0, 0, 2
        for _ = 1, 2 do
            net.spawn(function()
                local c = assert(net.connect(s.broker_addr))
                local t0 = core.mono_ms()
                while core.mono_ms() - t0 < 15000 do
                    local r = c:call({ code = 21, ext = {} }, 30000)
                    if r then
                        replies = replies + 1
                        bytes = bytes + #(r.body or "")
                    end
                end
                c:close()
                live = live - 1
            end)
        end
        while live > 0 do
            tick()
            net.sleep(100)
        end
        return ("%d replies, %.1f MB each"):format(replies, replies > 0 and bytes / replies / 1e6 or 0)
    end)

    attack("slowloris", "40 conns trickling headers to /metrics", function(tick)
        local host, port = s.metrics_addr:match("^(.+):(%d+)$")
        local conns, closed = {}, 0
        for i = 1, 40 do
            local c = socket.tcp()
            c:settimeout(2)
            if c:bind("127.0.0.2", 0) and c:connect(host, tonumber(port)) then
                c:settimeout(0)
                c:send("GET /metrics HTTP/1.1\r\n")
                conns[#conns + 1] = c
            end
            if i % 10 == 0 then tick() end
        end
        local scrapes = {}
        local t0 = core.mono_ms()
        local last_line = t0
        while core.mono_ms() - t0 < 15000 do
            if core.mono_ms() - last_line >= 1000 then
                last_line = core.mono_ms()
                for _, c in ipairs(conns) do
                    if c then
                        local _, e = c:send("X-Slow: 1\r\n")
                        if e == "closed" then closed = closed + 1 end
                    end
                end
            end
            local a = core.mono_ms()
            local st = http.request(s.metrics_addr, "GET", "/metrics")
            scrapes[#scrapes + 1] = st == 200 and core.mono_ms() - a or 60000
            tick()
            net.sleep(500)
        end
        for _, c in ipairs(conns) do
            c:close()
        end
        return ("%d connections, %d closed by the server; /metrics p99 %.0f ms max %.0f ms over %d scrapes")
            :format(#conns, closed, percentile(scrapes, 0.99), percentile(scrapes, 1), #scrapes)
    end)

    attack("connflood", "connections until refused (ulimit -n 4096)", function(tick)
        local host, port = s.broker_addr:match("^(.+):(%d+)$")
        local conns, failed = {}, 0
        for _ = 1, NOFILE + 200 do
            local c = socket.tcp()
            c:settimeout(1)
            if c:bind("127.0.0.2", 0) and c:connect(host, tonumber(port)) then
                conns[#conns + 1] = c
            else
                failed = failed + 1
                c:close()
            end
            if #conns % 200 == 0 then
                tick()
                net.sleep(1)
            end
        end
        local t0 = core.mono_ms()
        while core.mono_ms() - t0 < 5000 do
            tick()
            net.sleep(200)
        end
        -- Alive: how many did the broker close meanwhile?
        local closed = 0
        for _, c in ipairs(conns) do
            c:settimeout(0)
            local _, e = c:receive(1)
            if e == "closed" then closed = closed + 1 end
            c:close()
        end
        local log = s:log()
        local persist = select(2, log:gsub("cannot persist", ""))
        local emfile = select(2, log:gsub("Too many open files", ""))
        return ("%d connected, %d failed, %d closed by the server; log: %d \"cannot persist\", %d EMFILE lines")
            :format(#conns, failed, closed, persist, emfile)
    end)
end)

-- The summary, one row per attack (the figures printed above).
local ld = io.open("/proc/loadavg")
local loadavg = ld and ld:read("l") or "?"
if ld then ld:close() end
print(("\nSummary (load average at the end: %s)\n"):format(loadavg))
print("| attack | probe p99 | RssAnon before -> peak -> +15 s | kept | refused / what it did | breakdown at +15 s |")
print("|---|---|---|---|---|---|")
for _, r in ipairs(results) do
    print(("| %s | %.1f ms%s | %d -> %d -> %d MB | %+.0f %% | %s | %s |"):format(r.name, r.p99,
        r.busy > 0 and (" (" .. r.busy .. " busy)") or "", r.before, r.peak, r.after, r.kept,
        r.refused:gsub("|", "/"), r.breakdown))
end

assert(io.open(probe_stop, "w")):close()
if bench_pid then
    os.execute("kill " .. bench_pid .. " 2>/dev/null")
end
net.sleep(500)
local f = io.open(bench_out)
local bench_text = f and f:read("a") or ""
if f then f:close() end
local last = {}
for l in bench_text:gmatch("[^\n]+") do
    last[#last + 1] = l
end
print("\nrmq bench produce (background load, -c 4), its last lines:\n  "
      .. table.concat({ table.unpack(last, math.max(1, #last - 2)) }, "\n  "))
local status = s:stop(30000)
if not ok then
    print("attacks stopped: " .. tostring(err))
end
print(("broker exit status %s"):format(tostring(status)))

-- The data alone: a broker restarted over the same store holds the
-- topics, groups and offsets the attacks created and nothing of how
-- they were made (no garbage, no grown buffers, no history).  What the
-- attacked broker kept beyond this is what it should have given back
-- (docs/memory.md).  Idle, without the background producer, after 20 s.
if ok and not os.getenv("ATTACK_NO_RESTART") then
    -- (in a pcall: whatever happens, the store is removed below)
    local rok, rerr = pcall(function()
        local s2 = server.start(conf, { "namesrvListenPort=0" }, start_opts)
        s = s2
        net.sleep(20000)
        local info = runtime_info()
        prof_dump("data-alone")
        print(("\nThe same store, broker restarted (the data alone, 20 s idle): RssAnon %d MB, RSS %d MB | %s")
            :format(rss() // 1024, rss("VmRSS") // 1024, breakdown(info)))
        s2:stop(30000)
    end)
    if not rok then
        print("the data alone: " .. tostring(rerr))
    end
end

-- The store holds what `rmq bench produce` wrote (about 4 GB a minute
-- on a quiet machine): removed unless ATTACK_KEEP_STORE is set.
if not os.getenv("ATTACK_KEEP_STORE") then
    os.execute(("rm -rf %q"):format(conf.storePathRootDir))
end
