-- Hostile HTTP at the metrics/console endpoint, over real sockets: a
-- request trickled a byte at a time (slowloris) is closed at
-- metricsHttpTimeoutSeconds although it is never idle that long; many at
-- once take no more than metricsHttpMaxConnections and the remoting port
-- keeps answering meanwhile; bodies past metricsHttpMaxBodyBytes get 413;
-- malformed request lines are answered 4xx or closed, and the server goes
-- on serving.
local net = require("rmq.net")
local socket = require("socket")
local codes = require("rmq.codes")
local server = require("support.server")
local http = require("support.http")
local env = require("support.console_env")

local req = codes.request

local TIMEOUT_S, MAX_CONN, MAX_BODY = 2, 4, 1024

local function remoting_ok(s)
    local r, err = net.call(s.broker_addr, { code = req.GET_BROKER_RUNTIME_INFO }, 2000)
    assert(r, err)
    assert.equal(0, r.code)
end

local function metrics_ok(s)
    local status = http.request(s.metrics_addr, "GET", "/metrics")
    return status == 200
end

-- Sockets process pid holds on local port `port` (what /proc shows an
-- operator): its fds' socket inodes that /proc/net/tcp{,6} lists with
-- that local port.  Only those: the server's own loopback connections
-- (the console's sampler, registration) come and go beside them, and
-- connections still in the listen backlog are no fd of the process.
local function sockets_of(pid, port)
    local inodes = {}
    local p = io.popen("ls -l /proc/" .. pid .. "/fd 2>/dev/null")
    for line in p:lines() do
        local inode = line:match("socket:%[(%d+)%]")
        if inode then
            inodes[inode] = true
        end
    end
    p:close()
    local n, hex = 0, (":%04X"):format(port)
    for _, f in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
        local fh = io.open(f)
        if fh then
            for line in fh:lines() do
                local fields = {}
                for x in line:gmatch("%S+") do
                    fields[#fields + 1] = x
                end
                -- sl local rem st tx:rx tr:when retrnsmt uid timeout inode
                -- (ESTABLISHED only: a connection its client closed,
                -- CLOSE_WAIT, is on its way out, not held)
                if fields[2] and fields[2]:sub(-5) == hex and fields[4] == "01" and inodes[fields[10]] then
                    n = n + 1
                end
            end
            fh:close()
        end
    end
    return n
end

-- A connection that sends `bytes` one every `every` seconds; closed?()
-- tells whether the server has closed it.
local function trickler(addr)
    local c = assert(http.connect(addr))
    local t = { c = c, sent = 0, opened = socket.gettime() }
    function t.closed()
        c:settimeout(0)
        local _, e, partial = c:receive(1)
        if partial and #partial > 0 then
            t.answered = true
        end
        return e == "closed"
    end
    function t.step(bytes)
        t.sent = t.sent + 1
        c:settimeout(0)
        local _, e = c:send(bytes:sub(t.sent, t.sent))
        return e ~= "closed"
    end
    return t
end

describe("metrics endpoint under hostile HTTP", function()
    local s

    setup(function()
        s = server.start({
            role = "standalone", workers = 1, brokerName = "broker-h", storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 1024 * 1024, metricsExporterType = "PROM", metricsPromExporterPort = 0,
            metricsHttpTimeoutSeconds = TIMEOUT_S, metricsHttpMaxConnections = MAX_CONN,
            metricsHttpMaxBodyBytes = MAX_BODY,
        }, { "namesrvListenPort=0" })
    end)

    teardown(function()
        env.stop(s)
    end)

    it("closes a request trickled a byte every half second at the timeout", function()
        local request = "GET /metrics HTTP/1.1\r\nHost: rmq\r\nX-Slow: " .. ("a"):rep(60) .. "\r\n\r\n"
        local t = trickler(s.metrics_addr)
        local closed_at
        -- The whole request would take ~45 s; the idle timeout alone
        -- (2 s, reset by every byte) would never fire.
        for _ = 1, #request do
            if t.closed() or not t.step(request) then
                closed_at = socket.gettime() - t.opened
                break
            end
            socket.sleep(0.5)
        end
        t.c:close()
        assert.is_number(closed_at, "the trickled request was never closed")
        assert.is_true(closed_at >= TIMEOUT_S - 0.6, "closed too early: " .. closed_at)
        assert.is_true(closed_at < TIMEOUT_S + 3, "closed late: " .. closed_at)
        assert.is_nil(t.answered)
        assert.is_true(metrics_ok(s))
    end)

    it("holds the connection limit against many trickled requests; remoting keeps answering", function()
        local request = "GET /metrics HTTP/1.1\r\nHost: rmq\r\n"
        local mport = tonumber(s.metrics_addr:match(":(%d+)$"))
        -- The earlier cases' connections (a kept-alive scrape) are gone
        -- first: the count below is of the trickled ones.
        assert.truthy(server.eventually(function() return sockets_of(s.pid, mport) == 0 end, 15000),
                      "the earlier cases' connections are still open")
        local ts = {}
        for i = 1, MAX_CONN * 3 do
            ts[i] = trickler(s.metrics_addr)
        end
        local ok, err = pcall(function()
            local most = 0
            for _ = 1, 6 do
                for _, t in ipairs(ts) do
                    if not t.closed() then
                        t.step(request)
                    end
                end
                -- The remoting port is another thread's: it answers meanwhile.
                remoting_ok(s)
                -- The server holds at most MAX_CONN of them (the rest wait
                -- in the listen backlog, unaccepted).
                -- Held, not passing: a connection the server accepts
                -- and refuses at once (the limit reached) is an fd for a
                -- moment, which one look can catch; three looks 20 ms
                -- apart all see a held one.
                local held = math.huge
                for _ = 1, 3 do
                    held = math.min(held, sockets_of(s.pid, mport))
                    socket.sleep(0.02)
                end
                most = math.max(most, held)
                socket.sleep(0.25)
            end
            assert.is_true(most >= MAX_CONN, ("only %d trickled connections were seen in the server"):format(most))
            assert.is_true(most <= MAX_CONN,
                           ("%d more sockets in the server, the limit is %d"):format(most, MAX_CONN))
            -- Past the deadlines the slots are free again: a plain scrape
            -- is answered while the trickling goes on.
            assert.truthy(server.eventually(function()
                for _, t in ipairs(ts) do
                    if not t.closed() then
                        t.step(request)
                    end
                end
                return metrics_ok(s)
            end, (TIMEOUT_S * 4 + 4) * 1000))
        end)
        for _, t in ipairs(ts) do
            t.c:close()
        end
        assert(ok, err)
    end)

    it("answers 413 to a body past metricsHttpMaxBodyBytes, declared or chunked", function()
        local big = ("x"):rep(MAX_BODY + 1)
        local status = http.request(s.metrics_addr, "POST", "/api/send", big)
        assert.equal(413, status)
        local chunked = "POST /api/send HTTP/1.1\r\nHost: rmq\r\nConnection: close\r\n"
            .. "Transfer-Encoding: chunked\r\n\r\n"
        for _ = 1, 3 do
            chunked = chunked .. ("%x\r\n%s\r\n"):format(600, ("y"):rep(600))
        end
        chunked = chunked .. "0\r\n\r\n"
        local out = http.raw(s.metrics_addr, chunked)
        assert.equal("413", out:match("^HTTP/1%.%d (%d+)"))
        -- Within the limit the body reaches the console (writes are off).
        status = http.request(s.metrics_addr, "POST", "/api/send", '{"topic":"T","body":"x"}',
                              { ["Content-Type"] = "application/json" })
        assert.equal(403, status)
        -- A body where none is taken.
        status = http.request(s.metrics_addr, "POST", "/metrics", "x")
        assert.equal(405, status)
    end)

    -- (metrics_spec.lua has GARBAGE and a header without a colon)
    it("answers malformed request lines with 4xx or a close, and serves on", function()
        for _, bad in ipairs({
            "GET\r\n\r\n",
            "GET /metrics HTTP/1.1 extra words\r\n\r\n",
            "GET /metrics HTTP/7.0\r\nHost: x\r\n\r\n",
            "\0\1\2\255\254 / HTTP/1.1\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " .. ("h"):rep(20000) .. "\r\n\r\n",
        }) do
            local out, closed = http.raw(s.metrics_addr, bad, 3)
            local status = tonumber(out:match("^HTTP/1%.%d (%d+)"))
            assert.is_true(closed, ("not closed after %q"):format(bad:sub(1, 40)))
            assert.is_true(status == nil or (status >= 400 and status < 600),
                           ("%q answered %s"):format(bad:sub(1, 40), tostring(status)))
        end
        assert.is_true(metrics_ok(s))
        remoting_ok(s)
    end)
end)
