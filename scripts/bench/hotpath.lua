-- The measuring half of scripts/bench/hotpath.sh (which builds the two
-- revisions and runs this); see the header there for what is measured
-- and why.  By hand, after building both:
--
--   lua5.4 scripts/bench/hotpath.lua WORK BASE_BUILD CURRENT_BUILD \
--          [REQUESTS=2000 [ROUNDS=3 [SECONDS=10 [TPS_ROUNDS=3]]]]
--
-- WORK is an empty directory for confs, stores and callgrind dumps (the
-- caller removes it); the PIDs of the servers started are appended to
-- WORK/pids.  The client side (this script's rmq.so and `rmq bench`) is
-- CURRENT_BUILD's for both servers, so only the servers differ.
local WORK, BASE, CUR = arg[1], arg[2], arg[3]
assert(WORK and BASE and CUR, "usage: hotpath.lua WORK BASE_BUILD CURRENT_BUILD [N [ROUNDS [SECONDS [TPS_ROUNDS]]]]")
package.cpath = CUR .. "/?.so;" .. package.cpath
package.path = "./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local proc = require("rmq.proc")
local read_file = require("support.server").read_file

local N = tonumber(arg[4]) or 2000
local ROUNDS = tonumber(arg[5]) or 3
local SECONDS = tonumber(arg[6]) or 10
local TPS_ROUNDS = tonumber(arg[7]) or 3
-- Conf fields for the current build only (--current-conf), e.g. to
-- measure a feature on against off with --base HEAD.
local CUR_CONF = os.getenv("RMQ_HOTPATH_CURRENT_CONF") or ""
local TIMEOUT = 30000           -- ms per request, the server being under valgrind
local HOLD_MS = 2               -- an empty long poll's hold: short, the cost is per request

-- The names and lengths of the 4.9.8 Java fixtures (send-java.jsonl,
-- pull-java.jsonl, heartbeat-java-consumer.jsonl, route.jsonl).
local TOPIC, PGROUP, CGROUP = "FxTopic", "FxProducerGroup", "FxConsumerGroup"
local SUB_VERSION = "1796034607842"
local BODY = string.rep("0123456789abcdef", 64)  -- 1 KiB, below the 4 KiB compression threshold

-- What ran, printed at the end.
local commands = { "around each phase: callgrind_control -z PID; N requests; callgrind_control -d PID" }

local function sh(cmd)
    local ok = os.execute(cmd)
    if not ok then
        error("failed: " .. cmd)
    end
end

local function write_file(path, s)
    local f = assert(io.open(path, "wb"))
    f:write(s)
    f:close()
end

-- {{{ frames, byte for byte in the 4.9.8 Java client's shape (JSON header)

local function frame(header, body)
    body = body or ""
    return string.pack(">I4I4", 4 + #header + #body, #header) .. header .. body
end

local function java_header(code, opaque, ext_json)
    return ('{"code":%d,%s"flag":0,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":409}')
        :format(code, ext_json and ('"extFields":{' .. ext_json .. '},') or "", opaque)
end

local function send_frame(opaque, i)
    -- KEYS and UNIQ_KEY differ per message (both are indexed), as a
    -- producer's do; the header is as long as the fixture's (398 bytes).
    local props = ("KEYS\\u0001fx-%09d\\u0002fxSeq\\u00010\\u0002UNIQ_KEY\\u0001C0000202110C5FFD2B279799%08X"
        .. "\\u0002WAIT\\u0001true\\u0002TAGS\\u0001TagA"):format(i, i)
    local ext = ('"a":"%s","b":"%s","c":"TBW102","d":"4","e":"%d","f":"0","g":"%d","h":"0","i":"%s",'
        .. '"j":"0","k":"false","m":"false","n":"broker-a"'):format(PGROUP, TOPIC, i % 4, core.now_ms(), props)
    return frame(java_header(310, opaque, ext), BODY)
end

local function pull_frame(opaque, queue_offset, max, suspend_ms)
    local ext = ('"queueId":"0","maxMsgNums":"%d","sysFlag":"2","suspendTimeoutMillis":"%d",'
        .. '"commitOffset":"0","bname":"broker-a","topic":"%s","queueOffset":"%d","expressionType":"TAG",'
        .. '"subVersion":"%s","consumerGroup":"%s"'):format(max, suspend_ms or 15000, TOPIC, queue_offset,
                                                             SUB_VERSION, CGROUP)
    return frame(java_header(11, opaque, ext))
end

-- A consumer's offset commit (UPDATE_CONSUMER_OFFSET, answered: the
-- Java client's sync form) and its look-up (QUERY_CONSUMER_OFFSET), the
-- fixture's key order.
local function update_offset_frame(opaque, offset)
    local ext = ('"queueId":"0","bname":"broker-a","commitOffset":"%d","topic":"%s","consumerGroup":"%s"')
        :format(offset, TOPIC, CGROUP)
    return frame(java_header(15, opaque, ext))
end

local function query_offset_frame(opaque)
    local ext = ('"queueId":"0","bname":"broker-a","topic":"%s","consumerGroup":"%s"'):format(TOPIC, CGROUP)
    return frame(java_header(14, opaque, ext))
end

local function route_frame(opaque)
    return frame(java_header(105, opaque, ('"topic":"%s"'):format(TOPIC)))
end

local function heartbeat_frame(opaque)
    local sub = '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":%s,'
        .. '"tagsSet":[],"topic":"%s"}'
    local body = ('{"clientID":"127.0.0.1@hotpath","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
        .. '"consumeType":"CONSUME_PASSIVELY","groupName":"%s","messageModel":"CLUSTERING","subscriptionDataSet":['
        .. sub .. ',' .. sub .. '],"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}')
        :format(CGROUP, SUB_VERSION, TOPIC, SUB_VERSION, "%RETRY%" .. CGROUP)
    return frame(java_header(34, opaque), body)
end

local function count_records(body)
    local n, pos = 0, 1
    while pos <= #body do
        pos = pos + string.unpack(">i4", body, pos)
        n = n + 1
    end
    return n
end

-- }}}
-- {{{ servers

local Server = {}
Server.__index = Server

--- Starts build/rmq-server on a standalone conf (1 worker unless
-- `workers` is given), under `wrap` (a list of argv words) if any; the
-- command goes into `commands` unless `record` is false.
local function start(label, build, wrap, workers, record)
    local dir = ("%s/%s"):format(WORK, label)
    sh(("mkdir -p '%s'"):format(dir))
    local conf = dir .. "/conf.lua"
    write_file(conf, ([[
return {
    role = "standalone", workers = %d, logLevel = "warn",
    bindAddress = "127.0.0.1", listenPort = 0, namesrvListenPort = 0,
    brokerName = "broker-a", brokerClusterName = "DefaultCluster",
    storePathRootDir = %q, kvConfigPath = %q,
    mappedFileSizeCommitLog = 64 * 1024 * 1024,
    -- Registrations land on the worker: as rare as RocketMQ allows.
    registerNameServerPeriod = 60000,
    -- Under valgrind on a loaded machine a send can wait past the
    -- default 200 ms for its turn: answered busy, the run gives no figure.
    -- The flow control's cost is the same either way.
    waitTimeMillsInSendQueue = 60000, osPageCacheBusyTimeOutMills = 60000,
%s}
]]):format(workers or 1, dir .. "/store", dir .. "/kvConfig.json",
           build == CUR and CUR_CONF ~= "" and ("    " .. CUR_CONF .. ",\n") or ""))
    local argv = {}
    for _, w in ipairs(wrap or {}) do
        argv[#argv + 1] = w
    end
    argv[#argv + 1] = build .. "/rmq-server"
    argv[#argv + 1] = conf
    if record ~= false then
        commands[#commands + 1] = table.concat(argv, " ")
    end
    local file = table.remove(argv, 1)
    local p = assert(proc.spawn({
        file = file, args = argv, stdout = dir .. "/stdout", stderr = dir .. "/stderr",
        env = { "HOME=" .. dir, "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") },
    }))
    local pids = assert(io.open(WORK .. "/pids", "a"))
    pids:write(p.pid, "\n")
    pids:close()
    local s = setmetatable({ label = label, proc = p, pid = p.pid, dir = dir }, Server)
    local deadline = core.mono_ms() + 120000   -- a Lua start-up under callgrind is slow
    while core.mono_ms() < deadline do
        local line = read_file(dir .. "/stdout"):match("READY[^\n]*")
        if line then
            s.namesrv = line:match(" listen=(%S+)")
            s.broker = line:match(" broker=(%S+)")
            return s
        end
        if p.exited then
            error(("%s: rmq-server exited before READY:\n%s"):format(label, read_file(dir .. "/stderr")))
        end
        net.sleep(20)
    end
    p:kill(9)
    p:wait(5000)
    error(label .. ": no READY line within 120 s:\n" .. read_file(dir .. "/stderr"))
end

function Server:stop()
    if not self.proc.exited then
        self.proc:kill(15)
        if not self.proc:wait(60000) then
            self.proc:kill(9)
            self.proc:wait(5000)
        end
    end
end

-- }}}
-- {{{ the client: one connection each to the broker and the NameServer

local Client = {}
Client.__index = Client

local function client(s)
    return setmetatable({
        b = assert(net.connect(s.broker, { on_request = function() end })),
        ns = assert(net.connect(s.namesrv)),
        opaque = 0, sent = 0, failed = 0, first_error = nil,
    }, Client)
end

--- One request; true when its reply is what `check` wants.
function Client:call(conn, make, check)
    self.opaque = self.opaque + 1
    local r, err = conn:call_raw(make(self.opaque), TIMEOUT)
    local ok, why = false, err
    if r then
        ok, why = check(r)
    end
    if not ok then
        self.failed = self.failed + 1
        self.first_error = self.first_error or tostring(why)
    end
    return ok
end

local function code0(r)
    return r.code == 0, ("code %s: %s"):format(r.code, r.remark)
end

function Client:send()
    self.sent = self.sent + 1
    local i = self.sent
    return self:call(self.b, function(o) return send_frame(o, i) end, code0)
end

function Client:pull(offset, max)
    return self:call(self.b, function(o) return pull_frame(o, offset, max) end, function(r)
        if r.code ~= 0 then
            return code0(r)
        end
        local n = count_records(r.body or "")
        return n == max, ("%d messages, %d asked"):format(n, max)
    end)
end

--- The empty long poll: a pull at the queue's end, held its
-- suspendTimeoutMillis (HOLD_MS) and answered PULL_NOT_FOUND (19).
function Client:empty_poll(offset)
    return self:call(self.b, function(o) return pull_frame(o, offset, 32, HOLD_MS) end, function(r)
        return r.code == 19, ("code %s: %s"):format(r.code, r.remark)
    end)
end

function Client:heartbeat()
    return self:call(self.b, heartbeat_frame, code0)
end

function Client:update_offset(offset)
    return self:call(self.b, function(o) return update_offset_frame(o, offset) end, code0)
end

function Client:query_offset()
    return self:call(self.b, query_offset_frame, code0)
end

function Client:route()
    return self:call(self.ns, route_frame, code0)
end

function Client:close()
    self.b:close()
    self.ns:close()
end

--- Messages in queue 0 (GET_MAX_OFFSET).
function Client:queue_size()
    local r = assert(self.b:call({ code = 30, ext = { topic = TOPIC, queueId = 0 } }, TIMEOUT))
    assert(r.code == 0, r.remark)
    return tonumber(r.ext.offset)
end

--- The topic exists, the NameServer routes it, the broker knows the
-- consumer group's subscription: what a Java producer and push
-- consumer have done before their steady state.
function Client:warm_up()
    for _ = 1, 300 do
        self:send()
    end
    local deadline = core.mono_ms() + 60000
    while not self:route() and core.mono_ms() < deadline do
        self.failed, self.first_error = 0, nil  -- until the broker registered the topic
        net.sleep(200)
    end
    assert(self:call(self.b, heartbeat_frame, code0), self.first_error)
    for k = 0, 19 do
        self:pull(k, 1)
        self:pull(k, 32)
        self:route()
        self:heartbeat()
    end
    local m = self:queue_size()
    for _ = 1, 20 do
        self:empty_poll(m)
    end
    for k = 1, 20 do
        self:update_offset(k)
        self:query_offset()
    end
    assert(self.failed == 0, "warm-up: " .. tostring(self.first_error))
end

-- }}}
-- {{{ callgrind

local PHASES = {
    { name = "SEND_MESSAGE_V2 1 KiB", run = function(c) c:send() end },
    { name = "PULL_MESSAGE 1 msg", run = function(c, k, m) c:pull(k % m, 1) end },
    { name = "PULL_MESSAGE 32 msgs", run = function(c, k, m) c:pull((32 * k) % (m - 32), 32) end },
    { name = "GET_ROUTEINFO_BY_TOPIC", run = function(c) c:route() end },
    { name = "HEART_BEAT consumer", run = function(c) c:heartbeat() end },
    { name = "PULL empty long poll", run = function(c, _, m) c:empty_poll(m) end },
    { name = "UPDATE_CONSUMER_OFFSET", run = function(c, k) c:update_offset(k) end },
    { name = "QUERY_CONSUMER_OFFSET", run = function(c) c:query_offset() end },
}

--- Sums the Ir of the dump just written: the busiest thread other than
-- thread 1 (main) is the worker; the rest but main are "other".
local function read_dump(s, dump)
    local worker, other = 0, 0
    local files = 0
    local p = assert(io.popen(("ls '%s'"):format(s.dir)))
    for name in p:lines() do
        local d, tid = name:match("^cg%.%d+%.(%d+)%-(%d+)$")
        if d and tonumber(d) == dump then
            files = files + 1
            local ir = tonumber(read_file(s.dir .. "/" .. name):match("\nsummary: (%d+)")) or 0
            if tonumber(tid) ~= 1 then
                if ir > worker then
                    worker, ir = ir, worker
                end
                other = other + ir
            end
        end
    end
    p:close()
    assert(files > 1, ("%s: no callgrind dump %d in %s"):format(s.label, dump, s.dir))
    return worker, other
end

--- ROUNDS x every phase on one server under callgrind; per phase the
-- list of {worker, other} Ir per request, one entry per round.
local function measure_instr(label, build)
    local s = start(label, build, { "valgrind", "--tool=callgrind", "--separate-threads=yes",
                                    -- Names in full in every dump: each dump can be
                                    -- read alone by callgrind_annotate.
                                    "--compress-strings=no",
                                    "--callgrind-out-file=" .. WORK .. "/" .. label .. "/cg.%p" })
    local out = {}
    local ok, err = pcall(function()
        local c = client(s)
        c:warm_up()
        local dumps = 0
        for round = 1, ROUNDS do
            for pi, ph in ipairs(PHASES) do
                local m = c:queue_size()
                sh(("callgrind_control -z %d >/dev/null 2>&1"):format(s.pid))
                for k = 1, N do
                    ph.run(c, k, m)
                end
                sh(("callgrind_control -d %d >/dev/null 2>&1"):format(s.pid))
                dumps = dumps + 1
                if c.failed > 0 then
                    error(("%s, %s: %d of %d requests failed (first: %s): no figure"):format(
                        label, ph.name, c.failed, N, c.first_error))
                end
                local w, o = read_dump(s, dumps)
                out[pi] = out[pi] or {}
                out[pi][round] = { w / N, o / N }
                io.stderr:write(("hotpath: %-8s round %d  %-24s %9.0f Ir/req worker, %7.0f other\n")
                    :format(label, round, ph.name, w / N, o / N))
            end
        end
        c:close()
    end)
    s:stop()
    assert(ok, err)
    return out
end

-- }}}
-- {{{ TPS

local function measure_tps(label, build, record)
    local s = start(label, build, nil, 0, record)
    local ok, res = pcall(function()
        local c = client(s)
        c:send()                  -- creates the topic, then wait for its route
        local deadline = core.mono_ms() + 20000
        while not c:route() and core.mono_ms() < deadline do
            c.failed = 0
            net.sleep(100)
        end
        assert(c.failed == 0, "no route: " .. tostring(c.first_error))
        c:close()
        local cmd = ("%s/rmq bench produce -n %s -t %s -s 1024 -c 64 -d %d"):format(CUR, s.namesrv, TOPIC, SECONDS)
        if record then
            commands[#commands + 1] = cmd
        end
        local p = assert(io.popen(cmd .. " 2>&1"))
        local text = p:read("a")
        p:close()
        local total, tps, failed = text:match("%[Complete%] Send Total: (%d+) | Send TPS: (%d+) .*Send Failed: (%d+)")
        if not tps or tonumber(failed) ~= 0 then
            error(("%s: rmq bench produce failed or had failures:\n%s"):format(label, text))
        end
        io.stderr:write(("hotpath: %-8s %s sends, %s TPS\n"):format(label, total, tps))
        return tonumber(tps)
    end)
    s:stop()
    sh(("rm -rf '%s/store'"):format(s.dir))  -- ~1 GiB per 10 s of sends
    assert(ok, res)
    return res
end

-- }}}

local function best(rounds, k)
    local b = math.huge
    for _, r in ipairs(rounds) do
        b = math.min(b, r[k])
    end
    return b
end

local function spread(rounds, k)
    local lo, hi = math.huge, 0
    for _, r in ipairs(rounds) do
        lo, hi = math.min(lo, r[k]), math.max(hi, r[k])
    end
    return (hi - lo) / lo * 100
end

local function num(x)
    local s = ("%.0f"):format(x)
    return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

local instr = { base = measure_instr("base", BASE), current = measure_instr("current", CUR) }
local tps = { base = {}, current = {} }
for r = 1, TPS_ROUNDS do       -- alternated, so that other load on the machine hits both alike
    tps.base[r] = measure_tps("tps-base" .. r, BASE, r == 1)
    tps.current[r] = measure_tps("tps-cur" .. r, CUR, r == 1)
end

print(("callgrind Ir per request, 1-worker standalone server, %d requests one at a time, best of %d rounds"
    .. " (spread over rounds in brackets)"):format(N, ROUNDS))
print(("%-24s %18s %18s %7s   %s"):format("request", "base", "current", "cur/base", "other threads base / current"))
for pi, ph in ipairs(PHASES) do
    local b, c = instr.base[pi], instr.current[pi]
    print(("%-24s %9s (%4.1f%%) %9s (%4.1f%%) %7.3fx   %s / %s"):format(ph.name,
        num(best(b, 1)), spread(b, 1), num(best(c, 1)), spread(c, 1), best(c, 1) / best(b, 1),
        num(best(b, 2)), num(best(c, 2))))
end
if TPS_ROUNDS > 0 then
    print(("rmq bench produce -s 1024 -c 64 -d %d, workers = 0 (default), best of %d rounds"):format(SECONDS, TPS_ROUNDS))
    local b, c = math.max(table.unpack(tps.base)), math.max(table.unpack(tps.current))
    print(("%-24s %18s %18s %7.3fx   rounds: %s / %s"):format("TPS", num(b), num(c), c / b,
        table.concat(tps.base, " "), table.concat(tps.current, " ")))
end
print("commands:")
for _, c in ipairs(commands) do
    print("  " .. c)
end
