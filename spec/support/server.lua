-- Starts real rmq-server processes for integration specs: on loopback,
-- on ports the kernel picks (listenPort = 0), with their own temp dirs.
-- It reads the READY line for the ports, ends only the process it
-- started (by PID), and can show the server's log in a failure message.
--
--   local server = require("support.server")
--   local s = server.start({ role = "namesrv", ... } | "conf/x.lua",
--                          { "KEY=VALUE", ... } [, { env = {...}, nofile = n,
--                                                  binary = path, cwd = dir }])
--   s.addr            "127.0.0.1:PORT" of the first listener
--   s.ports.NAME      every listener (listen, vip, broker, ...)
--   s:log()           everything it wrote to stderr so far
--   s:stop()          SIGTERM, then wait: returns exit status, signal
--   s:kill()          SIGKILL, then wait
--   server.rmq(args)  runs build/rmq ARGS: exit code, output
--
-- A server's HOME is its temp dir, and build/rmq's a temp dir of its own
-- (server.env_with_home, server.home_prefix for other processes): a
-- default path under ~ never reaches the user's home.
local net = require("rmq.net")
local children = require("support.children")

local tmp = require("support.tmp")

local M = {}

M.build = os.getenv("RMQ_BUILD") or "build"
M.binary = M.build .. "/rmq-server"

local function serialize(v, indent)
    local t = type(v)
    if t == "string" then
        return string.format("%q", v)
    elseif t == "number" or t == "boolean" then
        return tostring(v)
    elseif t == "table" then
        local parts = {}
        for k, x in pairs(v) do
            local key = type(k) == "string" and k:match("^[%a_][%w_]*$") and k
                or ("[" .. serialize(k) .. "]")
            parts[#parts + 1] = indent .. "    " .. key .. " = " .. serialize(x, indent .. "    ")
        end
        return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
    end
    error("cannot write a " .. t .. " into a conf file; use a conf file with source")
end

local tmpdir = tmp.dir

local function read_file(path)
    local f = io.open(path, "rb")
    if not f then
        return ""
    end
    local s = f:read("a")
    f:close()
    return s
end

M.read_file = read_file
M.serialize = serialize   -- plain data as Lua source (the conf files)
M.tmpdir = tmpdir

local Server = {}
Server.__index = Server

-- The server's log counts (src/core/log.h): bytes its threads queued for
-- the "log" thread and bytes that thread wrote, from the file the server
-- keeps them in (RMQ_LOG_COUNTS, set by M.start).  nil: no file (no ring:
-- every line was written by the thread that logged it).  Read until two
-- reads agree, so a read is never half of one update.
local function log_counts(s)
    local last
    for _ = 1, 100 do
        local f = io.open(s.counts_path, "rb")
        if not f then
            return nil
        end
        local raw = f:read(24)
        f:close()
        if raw == nil or #raw < 24 then
            return nil
        end
        if raw == last then
            local queued, written, dropped = string.unpack("=I8I8I8", raw)
            return queued, written, dropped
        end
        last = raw
    end
    local queued, written, dropped = string.unpack("=I8I8I8", last)
    return queued, written, dropped
end

-- Whether the server process is gone (exited, reaped or not).
local function gone(s)
    if s.proc.exited then
        return true
    end
    local f = io.open("/proc/" .. s.pid .. "/stat")
    if not f then
        return true
    end
    local st = (f:read("a") or ""):match("%) (%a)")
    f:close()
    return st == nil or st == "Z"
end

-- What the server has logged so far: its lines from every thread up to
-- now.  A line of any thread logged before this call (a worker's, before
-- the reply a spec has read) was queued by now, so once the log thread
-- has written as many bytes as were queued then, it is in the file.
-- Second value: the lines dropped so far (a full ring; nil when the
-- server keeps no counts): a check that a line is absent holds only
-- when none were.
function Server:log()
    local queued = log_counts(self)
    if queued then
        local deadline = os.time() + 30   -- a log file that takes nothing
        while true do
            local _, written = log_counts(self)
            if written >= queued or gone(self) then
                break
            end
            if os.time() > deadline then
                io.stderr:write(("s:log(): %d of %d queued bytes written after 30 s\n")
                    :format(written, queued))
                break
            end
            net.sleep(1)
        end
    end
    local _, _, dropped = log_counts(self)
    return read_file(self.err_path), dropped
end

function Server:stop(timeout)
    self.proc:kill(15)
    return self.proc:wait(timeout or 30000)
end

function Server:kill()
    self.proc:kill(9)
    return self.proc:wait(5000)
end

--- CPU seconds (user + system) the server has used so far, from
--- /proc/PID/stat (0 once it is gone): what benchmarks divide by work.
function Server:cpu_seconds()
    local f = io.open("/proc/" .. self.pid .. "/stat")
    if not f then
        return 0
    end
    local line = f:read("l")
    f:close()
    local fields = {}
    for x in line:match("%) (.*)$"):gmatch("%S+") do
        fields[#fields + 1] = x
    end
    return (tonumber(fields[12]) + tonumber(fields[13])) / 100   -- utime, stime (after pid, comm)
end

--- Starts a server and waits for its READY line.
-- @param conf       a conf table (written to a temp file; values must be
--                   plain data) or the path of a conf file; source text
--                   is also accepted as {source = "return {...}"}
-- @param overrides  list of "KEY=VALUE" (listenPort=0 and
--                   bindAddress=127.0.0.1 are always added)
function M.start(conf, overrides, opts)
    opts = opts or {}
    local dir = tmpdir()
    local path
    if type(conf) == "string" then
        path = conf
    else
        path = dir .. "/conf.lua"
        local f = assert(io.open(path, "w"))
        if conf.source then
            f:write(conf.source)
        else
            f:write("return " .. serialize(conf, "") .. "\n")
        end
        f:close()
    end
    -- A proxy (role = "proxy") has no listenPort: its port is grpcServerPort.
    local args = { path, "--listenPort=0", "--bindAddress=127.0.0.1" }
    if type(conf) == "table" and conf.role == "proxy" then
        table.remove(args, 2)
    end
    for _, o in ipairs(overrides or {}) do
        args[#args + 1] = "--" .. o
    end
    local out_path, err_path = dir .. "/stdout", dir .. "/stderr"
    -- Under scripts/test.sh --asan, servers check for leaks at exit (the
    -- lua5.4 running the specs cannot: it is not instrumented).
    local env = opts.env
    local server_asan = os.getenv("RMQ_SERVER_ASAN_OPTIONS")
    if env == nil and server_asan then
        env = { "ASAN_OPTIONS=" .. server_asan,
                "UBSAN_OPTIONS=" .. (os.getenv("UBSAN_OPTIONS") or ""),
                "PATH=" .. (os.getenv("PATH") or "/usr/bin:/bin") }
    end
    -- Every server's HOME is its own temp dir: a default path under ~
    -- (kvConfigPath, storePathRootDir, ...) stays there.
    env = M.env_with_home(dir, env)
    -- Its log counts in a file, for s:log() (src/core/log.h).
    local counts_path = dir .. "/logcounts"
    for i = #env, 1, -1 do
        if env[i]:sub(1, 15) == "RMQ_LOG_COUNTS=" then
            table.remove(env, i)
        end
    end
    env[#env + 1] = "RMQ_LOG_COUNTS=" .. counts_path
    local binary = opts.binary or M.binary
    local file = binary
    if opts.nofile then
        -- A descriptor limit for the server alone: sh sets it, then execs
        -- the server (the PID stays the server's).
        table.insert(args, 1, binary)
        table.insert(args, 1, ('ulimit -n %d && exec "$0" "$@"'):format(opts.nofile))
        table.insert(args, 1, "-c")
        file = "/bin/sh"
    end
    local p = assert(children.spawn({
        file = file, args = args, stdout = out_path, stderr = err_path,
        env = env, cwd = opts.cwd,
    }))
    local s = setmetatable({ proc = p, dir = dir, conf_path = path,
                             out_path = out_path, err_path = err_path,
                             counts_path = counts_path, pid = p.pid }, Server)
    -- READY comes within milliseconds; allow a slow sanitizer build on a
    -- loaded machine.
    local deadline = 60000
    local waited = 0
    while waited < deadline do
        local out = read_file(out_path)
        local line = out:match("READY[^\n]*\n")
        if line then
            s.ready_line = line
            s.role = line:match("role=(%S+)")
            s.ports = {}
            for name, hp in line:gmatch("(%w+)=(%S+:%d+)") do
                s.ports[name] = tonumber(hp:match(":(%d+)$"))
                s[name .. "_addr"] = hp
            end
            s.addr = line:match("listen=(%S+)")
            return s
        end
        if p.exited then
            error(("rmq-server exited (status %s) before READY:\n%s")
                :format(tostring(p.exit_status), read_file(err_path)), 2)
        end
        net.sleep(5)
        waited = waited + 5
    end
    p:kill(9)
    error("rmq-server printed no READY line within 60 s:\n" .. read_file(err_path), 2)
end

--- The environment for a process a spec starts, with HOME=home: `env`
--- (a list of "K=V") when given, else this process's own (as it was
--- started: /proc/self/environ), HOME replaced either way.
function M.env_with_home(home, env)
    local out = {}
    if env == nil then
        env = {}
        local f = io.open("/proc/self/environ", "rb")
        if f then
            for kv in f:read("a"):gmatch("([^%z]+)") do
                env[#env + 1] = kv
            end
            f:close()
        end
    end
    for _, kv in ipairs(env) do
        if kv:sub(1, 5) ~= "HOME=" then
            out[#out + 1] = kv
        end
    end
    out[#out + 1] = "HOME=" .. home
    return out
end

--- A shell command's prefix that runs it with HOME set to a new temp dir.
function M.home_prefix()
    return ("HOME='%s' "):format(tmpdir())
end

--- Runs the `rmq` command line with args (a shell string): exit code,
--- stdout and stderr together.  HOME is a temp dir of its own.
function M.rmq(args)
    local p = io.popen(M.home_prefix() .. M.build .. "/rmq " .. args .. " 2>&1")
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

--- Returns a base port B such that B .. B+n-1 are free on 127.0.0.1 and
-- below the kernel's ephemeral range (ip_local_port_range), for a spec
-- that must restart a server on the ports it had: listenPort = 0 would
-- not give them back, and a port in the ephemeral range (or a derived
-- one, haListenPort = listenPort + 1) can meanwhile become the local
-- port of any connection on the machine.  No connect() is given a port
-- below that range; a TIME_WAIT left there does not block the server's
-- SO_REUSEADDR listeners.
function M.fixed_ports(n)
    local socket = require("socket")
    local low = 32768
    local f = io.open("/proc/sys/net/ipv4/ip_local_port_range")
    if f then
        low = f:read("n") or low
        f:close()
    end
    -- Above the well-known and common services' ports.
    assert(low - n > 10000, "the ephemeral port range starts at " .. low)
    for _ = 1, 100 do
        local base = math.random(10000, low - n)
        local held = {}
        for p = base, base + n - 1 do
            local t = socket.bind("127.0.0.1", p)
            if not t then
                break
            end
            held[#held + 1] = t
        end
        for _, t in ipairs(held) do
            t:close()
        end
        if #held == n then
            return base
        end
    end
    error("no " .. n .. " free ports in a row below " .. low)
end

--- Polls fn() every 10 ms until it returns a truthy value or ms pass.
function M.eventually(fn, ms)
    local waited = 0
    while waited < (ms or 3000) do
        local v = fn()
        if v then
            return v
        end
        net.sleep(10)
        waited = waited + 10
    end
    return fn()
end

--- Runs fn(s), then stops server s whatever fn did: fn's error is raised
--- after the stop (a failed case leaves no server running), and a stop
--- that is not clean (exit status not 0: a crash, a leak or UB under
--- ASan) fails the case, with the end of the server's log.
function M.with(s, fn)
    local ok, err = pcall(fn, s)
    local status = s:stop()
    if not ok then
        error(err, 0)
    end
    if status ~= 0 then
        error(("%s stopped with status %s; its log ends:\n%s"):format(s.addr, tostring(status),
                                                                   s:log():sub(-2000)), 2)
    end
end

return M
