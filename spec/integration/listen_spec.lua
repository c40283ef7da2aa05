-- Listening sockets with real processes: one server per port (a second
-- one on an occupied port refuses to start instead of sharing it), one
-- acceptor spreading connections over the workers, and accepting that
-- survives running out of file descriptors.
local net = require("rmq.net")
local children = require("support.children")
local server = require("support.server")

-- A NameServer whose conf adds a request that answers the worker serving
-- the connection.
local CONF = [[
local net = require("rmq.net")
return {
    role = "namesrv",
    workers = %d,
    kvConfigPath = %q,
    processors = {
        [7010] = function(ctx, cmd) return { code = 0, ext = { worker = net.worker_id() } } end,
    },
}
]]

local function conf_source(workers)
    return { source = CONF:format(workers, server.tmpdir() .. "/kv.json") }
end

local function worker_of(c)
    return assert(tonumber(assert(c:call({ code = 7010 })).ext.worker))
end

-- Starts a server that must refuse to start; returns the message
-- server.start raised (it has the exit status and the server's stderr).
-- A server that comes up anyway is stopped, and the spec fails.
local function start_refused(conf, overrides)
    local ok, s = pcall(server.start, conf, overrides)
    if ok then
        s:stop()
        error("a second server started on the port: " .. s.ready_line, 2)
    end
    return tostring(s)
end

local function count(text, plain)
    local n, from = 0, 1
    while true do
        local i, j = text:find(plain, from, true)
        if i == nil then
            return n
        end
        n, from = n + 1, j + 1
    end
end

describe("one server per port", function()
    local ns

    setup(function()
        ns = server.start(conf_source(2))
    end)

    teardown(function()
        if ns then ns:stop() end
    end)

    it("refuses a second NameServer on the port, before READY", function()
        local msg = start_refused(conf_source(2), { "listenPort=" .. ns.ports.listen })
        assert.matches("exited %(status 1%) before READY", msg)
        assert.matches("port in use", msg)
        assert.matches("127%.0%.0%.1:" .. ns.ports.listen, msg)
        -- The first one keeps serving, new connections included.
        local c = assert(net.connect(ns.addr))
        assert.equal(3, assert(c:call({ code = 9999 })).code)
        c:close()
    end)

    it("refuses a second broker, with a store of its own, on a broker's port", function()
        local function broker()
            return {
                role = "broker", workers = 2, brokerName = "broker-a",
                storePathRootDir = server.tmpdir() .. "/store",
                mappedFileSizeCommitLog = 1024 * 1024,
                namesrvAddr = ns.addr,
            }
        end
        local b = server.start(broker())
        local ok, err = pcall(function()
            local msg = start_refused(broker(), { "listenPort=" .. b.ports.listen })
            assert.matches("exited %(status 1%) before READY", msg)
            assert.matches("port in use", msg)
            assert.matches("127%.0%.0%.1:" .. b.ports.listen, msg)
            local c = assert(net.connect(b.addr))
            assert.equal(0, assert(c:call({ code = 26 })).code)  -- GET_BROKER_CONFIG
            c:close()
        end)
        assert.equal(0, b:stop())
        assert(ok, err)
    end)

    it("says so on stderr when it logs to a file", function()
        local log = server.tmpdir() .. "/rmq.log"
        local msg = start_refused(conf_source(1),
            { "listenPort=" .. ns.ports.listen, "logFile=" .. log })
        assert.matches("rmq%-server: cannot listen on 127%.0%.0%.1:" .. ns.ports.listen
            .. ": port in use", msg)
        assert.matches("port in use", server.read_file(log))
    end)
end)

describe("accepting", function()
    it("spreads a burst of connections evenly over the workers", function()
        local s = server.start(conf_source(4))
        local conns, opened = {}, 0
        -- Connect all at once: whichever loop wakes first must not take
        -- the whole burst.
        for i = 1, 32 do
            net.spawn(function()
                conns[i] = assert(net.connect(s.addr))
                opened = opened + 1
            end)
        end
        assert.truthy(server.eventually(function() return opened == 32 end, 10000))
        local per_worker = {}
        for _, c in ipairs(conns) do
            local w = worker_of(c)
            per_worker[w] = (per_worker[w] or 0) + 1
        end
        assert.same({ [0] = 8, [1] = 8, [2] = 8, [3] = 8 }, per_worker)
        for _, c in ipairs(conns) do c:close() end
        assert.equal(0, s:stop())
    end)

    it("waits out a shortage of file descriptors, logging it once", function()
        local dir = server.tmpdir()
        local path = dir .. "/conf.lua"
        local f = assert(io.open(path, "w"))
        f:write(conf_source(1).source)
        f:close()
        -- A low descriptor limit for the server alone (sh's ulimit, then
        -- exec: the PID is the server's).
        local out, err = dir .. "/stdout", dir .. "/stderr"
        local p = assert(children.spawn({
            file = "/bin/sh",
            -- serverReservedDescriptors off: this is the fallback when
            -- the limit is reached anyway (descriptor_reserve_spec has
            -- the reserve)
            args = { "-c", 'ulimit -n 40 && exec "$0" "$@"', server.binary, path,
                     "--listenPort=0", "--bindAddress=127.0.0.1", "--serverReservedDescriptors=0" },
            stdout = out, stderr = err, env = server.env_with_home(dir),
        }))
        local ready = server.eventually(function()
            return server.read_file(out):match("listen=(%S+)")
        end, 15000)
        if not ready then
            p:kill(9)
            p:wait(5000)
            error("no READY:\n" .. server.read_file(err))
        end
        local ok, why = pcall(function()
            local conns = {}
            for i = 1, 60 do
                -- The kernel completes the handshake of each (backlog
                -- 1024) whether or not the server could accept it.
                conns[i] = assert(net.connect(ready))
            end
            assert.truthy(server.eventually(function()
                return server.read_file(err):find("Too many open files", 1, true)
            end, 5000), server.read_file(err))
            -- The connections it did accept are served meanwhile.
            assert.equal(3, assert(conns[1]:call({ code = 9999 })).code)
            -- Several retry rounds while nothing frees up: one line.
            net.sleep(500)
            assert.equal(1, count(server.read_file(err), "Too many open files"))
            for _, c in ipairs(conns) do c:close() end
            -- Once descriptors free up, it accepts again: the queued
            -- connections, then a new one.
            local c = server.eventually(function()
                local x = net.connect(ready)
                if x and x:call({ code = 9999 }, 1000) then
                    return x
                end
                if x then x:close() end
            end, 10000)
            assert.truthy(c, server.read_file(err))
            c:close()
            assert.matches("accepting again", server.read_file(err))
        end)
        p:kill(15)
        local status = p:wait(10000)
        assert(ok, why)
        assert.equal(0, status)
    end)
end)
