-- The measuring half of scripts/bench/hashflood.sh (see its header).
--   lua5.4 scripts/bench/hashflood.lua WORK BASE_BUILD CURRENT_BUILD [NAMES [REQUESTS]]
local WORK, BASE, CUR = arg[1], arg[2], arg[3]
assert(WORK and BASE and CUR, "usage: hashflood.lua WORK BASE_BUILD CURRENT_BUILD [NAMES [REQUESTS]]")
package.cpath = CUR .. "/?.so;" .. package.cpath
package.path = "./spec/?.lua;" .. package.path

local core = require("rmq.core")
local net = require("rmq.net")
local proc = require("rmq.proc")
local message = require("rmq.message")
local read_file = require("support.server").read_file

local NAMES = tonumber(arg[4]) or 8192
local N = tonumber(arg[5]) or 1000
local TIMEOUT = 120000
local BODY = string.rep("0123456789abcdef", 16)

-- "Flood" .. one of "Aa"/"BB" per bit: all share one String.hashCode.
local bits = 0
while (1 << bits) < NAMES do
    bits = bits + 1
end
local function colliding(i)
    local parts = { "Flood" }
    for b = 0, bits - 1 do
        parts[#parts + 1] = (i >> b) & 1 == 1 and "BB" or "Aa"
    end
    return table.concat(parts)
end
local ORDINARY = "Ordin" .. string.rep("x", 2 * bits)   -- same length, its own hash
local LAST = colliding(NAMES - 1)
assert(message.java_hash(LAST) == message.java_hash(colliding(0)))
assert(message.java_hash(ORDINARY) ~= message.java_hash(LAST))

local function sh(cmd)
    assert(os.execute(cmd), "failed: " .. cmd)
end

local function frame(header, body)
    body = body or ""
    return string.pack(">I4I4", 4 + #header + #body, #header) .. header .. body
end

local function java_header(code, opaque, ext_json)
    return ('{"code":%d,"extFields":{%s},"flag":0,"language":"JAVA","opaque":%d,'
        .. '"serializeTypeCurrentRPC":"JSON","version":409}'):format(code, ext_json, opaque)
end

local function send_frame(opaque, topic, i)
    local ext = ('"a":"FloodProducer","b":"%s","c":"TBW102","d":"4","e":"%d","f":"0","g":"%d","h":"0",'
        .. '"i":"UNIQ_KEY\\u0001C0A8000100002A9F0000%012X\\u0002WAIT\\u0001true","j":"0","k":"false",'
        .. '"m":"false","n":"broker-a"'):format(topic, i % 4, core.now_ms(), i)
    return frame(java_header(310, opaque, ext), BODY)
end

local function route_frame(opaque, topic)
    return frame(java_header(105, opaque, ('"topic":"%s"'):format(topic)))
end

local function start(label, build, valgrind)
    local dir = ("%s/%s"):format(WORK, label)
    sh(("mkdir -p '%s'"):format(dir))
    local conf = dir .. "/conf.lua"
    local f = assert(io.open(conf, "w"))
    f:write(([[
return {
    role = "standalone", workers = 1, logLevel = "warn",
    bindAddress = "127.0.0.1", listenPort = 0, namesrvListenPort = 0,
    brokerName = "broker-a", brokerClusterName = "DefaultCluster",
    storePathRootDir = %q, kvConfigPath = %q,
    mappedFileSizeCommitLog = 64 * 1024 * 1024,
    mappedFileSizeConsumeQueue = 20 * 1000,   -- 8,192 topics: small files
    registerNameServerPeriod = 60000,
    -- under callgrind a request can wait long behind a registration
    waitTimeMillsInSendQueue = 60000, osPageCacheBusyTimeOutMills = 60000,
    -- the base NameServer takes minutes over 8,192 colliding topics under callgrind
    registerBrokerTimeoutMills = 1800000,
    serverChannelMaxIdleTimeSeconds = 3600,   -- a request in progress that long is not idle
}
]]):format(dir .. "/store", dir .. "/kvConfig.json"))
    f:close()
    local file, args = build .. "/rmq-server", { conf }
    if valgrind then
        file, args = "valgrind", { "--tool=callgrind", "--separate-threads=yes",
                                   "--callgrind-out-file=" .. dir .. "/cg.%p", build .. "/rmq-server", conf }
    end
    local p = assert(proc.spawn({
        file = file, args = args,
        stdout = dir .. "/stdout" .. (valgrind and ".cg" or ""), stderr = dir .. "/stderr" .. (valgrind and ".cg" or ""),
        env = { "HOME=" .. dir, "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") },
    }))
    local pids = assert(io.open(WORK .. "/pids", "a"))
    pids:write(p.pid, "\n")
    pids:close()
    local s = { label = label, proc = p, pid = p.pid, dir = dir, dumps = 0 }
    -- the base build loads 8,192 colliding names in O(n^2): minutes under callgrind
    local deadline = core.mono_ms() + 1800000
    while core.mono_ms() < deadline do
        local line = read_file(dir .. "/stdout" .. (valgrind and ".cg" or "")):match("READY[^\n]*")
        if line then
            s.namesrv = line:match(" listen=(%S+)")
            s.broker = line:match(" broker=(%S+)")
            return s
        end
        assert(not p.exited, label .. ": rmq-server exited:\n" .. read_file(dir .. "/stderr" .. (valgrind and ".cg" or "")))
        net.sleep(20)
    end
    p:kill(9)
    p:wait(5000)
    error(label .. ": no READY line within 30 minutes")
end

local function stop(s)
    if not s.proc.exited then
        s.proc:kill(15)
        if not s.proc:wait(60000) then
            s.proc:kill(9)
            s.proc:wait(5000)
        end
    end
end

local function read_dump(s, dump)
    local worker = 0
    local p = assert(io.popen(("ls '%s'"):format(s.dir)))
    for name in p:lines() do
        local d, tid = name:match("^cg%.%d+%.(%d+)%-(%d+)$")
        if d and tonumber(d) == dump and tonumber(tid) ~= 1 then
            worker = math.max(worker, tonumber(read_file(s.dir .. "/" .. name):match("\nsummary: (%d+)")) or 0)
        end
    end
    p:close()
    assert(worker > 0, s.label .. ": no callgrind dump " .. dump)
    return worker
end

local function connect(s)
    local b = assert(net.connect(s.broker, { on_request = function() end }))
    local ns = assert(net.connect(s.namesrv))
    local opaque, sent = 0, 0
    local c = {}
    function c.call(conn, make)
        opaque = opaque + 1
        local r, e = conn:call_raw(make(opaque), TIMEOUT)
        return r and r.code == 0, r and ("code %s: %s"):format(r.code, r.remark) or e
    end
    function c.send(topic)
        sent = sent + 1
        local i = sent
        local ok, why = c.call(b, function(o) return send_frame(o, topic, i) end)
        assert(ok, ("%s: send to %s: %s"):format(s.label, topic, why))
    end
    function c.route(topic)
        return c.call(ns, function(o) return route_frame(o, topic) end)
    end
    function c.wait_route(topic)
        local deadline = core.mono_ms() + 1800000
        while not c.route(topic) do
            assert(core.mono_ms() < deadline, s.label .. ": the NameServer never routed " .. topic)
            net.sleep(500)
        end
    end
    function c.close()
        b:close()
        ns:close()
    end
    return c
end

-- The topics (and their consume queues) are made natively, then the
-- same store is served again under callgrind: the measurement is of
-- lookups in full tables, not of how slowly they fill under valgrind.
local function measure(label, build)
    local s = start(label, build, false)
    local ok, err = pcall(function()
        local c = connect(s)
        local t0 = core.mono_ms()
        c.send(ORDINARY)
        for i = 0, NAMES - 1 do
            c.send(colliding(i))
        end
        c.wait_route(LAST)
        io.stderr:write(("hashflood: %-8s %d topics auto-created by sends and routed in %.1f s (native)\n"):format(
            label, NAMES + 1, (core.mono_ms() - t0) / 1000))
        c.close()
    end)
    stop(s)
    assert(ok, err)
    s = start(label, build, true)
    local res = {}
    ok, err = pcall(function()
        local c = connect(s)
        c.wait_route(LAST)
        for _ = 1, 50 do
            c.send(ORDINARY); c.send(LAST)
            c.route(ORDINARY); c.route(LAST)
        end
        local phases = {
            { "SEND ordinary topic", function() c.send(ORDINARY) end },
            { "SEND colliding topic", function() c.send(LAST) end },
            { "ROUTE ordinary topic", function() assert(c.route(ORDINARY)) end },
            { "ROUTE colliding topic", function() assert(c.route(LAST)) end },
        }
        for _, ph in ipairs(phases) do
            sh(("callgrind_control -z %d >/dev/null 2>&1"):format(s.pid))
            for _ = 1, N do
                ph[2]()
            end
            sh(("callgrind_control -d %d >/dev/null 2>&1"):format(s.pid))
            s.dumps = s.dumps + 1
            res[#res + 1] = { ph[1], read_dump(s, s.dumps) / N }
            io.stderr:write(("hashflood: %-8s %-22s %9.0f Ir/req\n"):format(label, ph[1], res[#res][2]))
        end
        c.close()
    end)
    stop(s)
    assert(ok, err)
    return res
end

local base = measure("base", BASE)
local cur = measure("current", CUR)
local function num(x)
    local s = ("%.0f"):format(x)
    return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end
print(("callgrind Ir per request (worker thread), 1-worker standalone server, %d topics colliding in "
    .. "String.hashCode, %d requests one at a time"):format(NAMES, N))
print(("%-24s %12s %12s %9s"):format("request", "base", "current", "cur/base"))
for i = 1, #base do
    print(("%-24s %12s %12s %8.3fx"):format(base[i][1], num(base[i][2]), num(cur[i][2]), cur[i][2] / base[i][2]))
end
print(("colliding/ordinary: send base %.2fx current %.2fx; route base %.2fx current %.2fx"):format(
    base[2][2] / base[1][2], cur[2][2] / cur[1][2], base[4][2] / base[3][2], cur[4][2] / cur[3][2]))
print("commands: valgrind --tool=callgrind --separate-threads=yes BUILD/rmq-server CONF;"
    .. " around each phase callgrind_control -z PID / -d PID")
