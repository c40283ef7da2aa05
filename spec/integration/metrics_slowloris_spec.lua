-- Slowloris at the metrics / web console endpoint (issue 21 item 6), over
-- real sockets from several loopback addresses (127.0.0.0/8 is all local):
-- 40 connections each trickling one header line a second, from one address
-- and then from 40, while a scraper asks /metrics once a second.  A request
-- whose line and headers are not in within metricsHttpHeaderTimeoutMillis
-- is closed; one address holds at most metricsHttpMaxConnectionsPerAddress
-- connections; metricsAllowedAddresses (the scraper) have a pool of their
-- own.  Each attack prints the scrapes' latencies.
local socket = require("socket")
local server = require("support.server")
local http = require("support.http")
local env = require("support.console_env")

local ALLOWED, OTHER = "127.0.0.2", "127.0.0.3"
local HEADER_MS, TIMEOUT_S = 1500, 10
-- A scrape answered within this is "available" (generous: a loaded
-- machine; on main a scrape under this attack waits over 15 s).
local PROBE_BOUND_S = 8

-- One attacking connection from `from`: a request line, then a header
-- line a second, never the blank line; reconnects a second after the
-- server closes it.
local function trickler(addr, from)
    local t = { lines = 0, next_at = 0 }
    function t.tick(now)
        if now < t.next_at then
            return
        end
        t.next_at = now + 1
        if t.c then
            t.c:settimeout(0)
            local _, e = t.c:receive(1)
            if e == "closed" then
                t.c:close()
                t.c = nil
                t.closed = (t.closed or 0) + 1
                return
            end
        end
        if t.c == nil then
            t.c = http.connect(addr, 2, from)
            t.lines = 0
            if t.c == nil then
                return
            end
        end
        t.c:settimeout(0)
        local line = t.lines == 0 and "GET /metrics HTTP/1.1\r\n" or ("X-Slow-%d: x\r\n"):format(t.lines)
        t.lines = t.lines + 1
        local _, e = t.c:send(line)
        if e == "closed" then
            t.c:close()
            t.c = nil
        end
    end
    function t.close()
        if t.c then
            t.c:close()
        end
    end
    return t
end

-- A scrape from `from` that does not block the attackers: connect, send,
-- then polled; done(now) -> nil while waiting, else status|false, seconds.
local function probe(addr, from)
    local p = { t0 = socket.gettime(), chunks = {} }
    p.c = http.connect(addr, PROBE_BOUND_S, from)
    if p.c then
        p.c:send("GET /metrics HTTP/1.1\r\nHost: rmq\r\nConnection: close\r\n\r\n")
    end
    function p.done(now)
        local took = now - p.t0
        if p.c == nil then
            return false, took
        end
        p.c:settimeout(0)
        while true do
            local data, e, partial = p.c:receive(65536)
            local got = data or partial
            if got and #got > 0 then
                p.chunks[#p.chunks + 1] = got
            end
            if e == "closed" then
                p.c:close()
                local out = table.concat(p.chunks)
                return tonumber(out:match("^HTTP/1%.%d (%d+)")) or false, took
            elseif e == "timeout" or not got or #got == 0 then
                break
            end
        end
        if took > PROBE_BOUND_S * 2 then
            p.c:close()
            return false, took
        end
        return nil
    end
    return p
end

-- Runs the attack (`froms`: one source address per trickler) for
-- `seconds`, scraping from `scrape_from` whenever the previous scrape
-- is done (and a second has passed).  -> {{status, seconds}, ...}
local function attack(addr, froms, scrape_from, seconds)
    local ts = {}
    for i, from in ipairs(froms) do
        ts[i] = trickler(addr, from)
    end
    local results, p, last = {}, nil, 0
    local t_end = socket.gettime() + seconds
    local ok, err = pcall(function()
        while true do
            local now = socket.gettime()
            for _, t in ipairs(ts) do
                t.tick(now)
            end
            if p then
                local status, took = p.done(socket.gettime())
                if status ~= nil then
                    results[#results + 1] = { status, took }
                    p, last = nil, socket.gettime()
                end
            elseif now >= t_end then
                break
            elseif now - last >= 1 then
                p = probe(addr, scrape_from)
            end
            socket.sleep(0.05)
        end
    end)
    for _, t in ipairs(ts) do
        t.close()
    end
    assert(ok, err)
    return results
end

local function report(what, results)
    local worst, sum, answered = 0, 0, 0
    for _, r in ipairs(results) do
        worst = math.max(worst, r[2])
        sum = sum + r[2]
        if r[1] == 200 then
            answered = answered + 1
        end
    end
    print(("\n%s: %d/%d scrapes answered 200, latency mean %.0f ms, worst %.0f ms"):format(what, answered,
        #results, #results > 0 and sum / #results * 1000 or 0, worst * 1000))
    return answered, worst
end

local function addresses(n, fmt)
    local out = {}
    for i = 1, n do
        out[i] = fmt:format(i)
    end
    return out
end

describe("metricsAllowedAddresses conf", function()
    it("takes ';'-separated IPs, at most 128, and refuses the rest at conf check", function()
        local function check(v)
            local path = server.tmpdir() .. "/c.lua"
            local f = assert(io.open(path, "w"))
            f:write(("return { role = 'broker', brokerName = 'b', storePathRootDir = '/tmp/x',"
                .. " namesrvAddr = '127.0.0.1:1', metricsAllowedAddresses = %q }\n"):format(v))
            f:close()
            local p = io.popen(("%s -t %s 2>&1"):format(server.binary, path))
            local out = p:read("a")
            local _, _, code = p:close()
            return code, out
        end
        local code, out = check("127.0.0.2; 10.0.0.1;::1")
        assert.equal(0, code, out)
        code, out = check("prometheus.example")
        assert.equal(1, code, out)
        assert.matches("key 'metricsAllowedAddresses' must be ';'-separated IP addresses", out, 1, true)
        code, out = check(("::1;"):rep(129))
        assert.equal(1, code, out)
        assert.matches("must hold at most 128 addresses, got 129", out, 1, true)
    end)
end)

describe("metrics endpoint under slowloris from many connections", function()
    local s

    setup(function()
        s = server.start({
            role = "standalone", workers = 1, brokerName = "broker-sl", storePathRootDir = server.tmpdir() .. "/store",
            mappedFileSizeCommitLog = 1024 * 1024, metricsExporterType = "PROM", metricsPromExporterPort = 0,
            metricsHttpTimeoutSeconds = TIMEOUT_S, metricsHttpHeaderTimeoutMillis = HEADER_MS,
            metricsAllowedAddresses = ALLOWED,
        }, { "namesrvListenPort=0" })
    end)

    teardown(function()
        env.stop(s)
    end)

    it("closes a request whose headers trickle past metricsHttpHeaderTimeoutMillis", function()
        local t = trickler(s.metrics_addr, OTHER)
        local t0, closed_at = socket.gettime(), nil
        while socket.gettime() - t0 < TIMEOUT_S + 5 do
            t.tick(socket.gettime())
            if t.closed then
                closed_at = socket.gettime() - t0
                break
            end
            socket.sleep(0.05)
        end
        t.close()
        assert.is_number(closed_at, "the trickled headers were never closed")
        print(("\nheaders trickled a line a second: closed after %.1f s (metricsHttpHeaderTimeoutMillis %d)")
            :format(closed_at, HEADER_MS))
        -- Well before the whole request's deadline (metricsHttpTimeoutSeconds).
        assert.is_true(closed_at >= HEADER_MS / 1000 - 0.6, "closed too early: " .. closed_at)
        assert.is_true(closed_at < TIMEOUT_S - 1, "closed at the request timeout, not the headers': " .. closed_at)
    end)

    it("keeps scrapes answered with 40 trickling connections from one address", function()
        local froms = addresses(40, "127.0.0.1")
        -- The allowed scraper, and another address with no privilege: the
        -- per-address limit leaves the attacker 8 of the 16 slots.
        for _, scraper in ipairs({ ALLOWED, OTHER }) do
            local results = attack(s.metrics_addr, froms, scraper, 10)
            local answered, worst = report(("40 tricklers from 127.0.0.1, scrapes from %s"):format(scraper), results)
            assert.is_true(#results >= 3, "too few scrapes ended: " .. #results)
            assert.equal(#results, answered)
            assert.is_true(worst < PROBE_BOUND_S, ("a scrape took %.1f s"):format(worst))
        end
    end)

    it("keeps scrapes from metricsAllowedAddresses answered with 40 tricklers from 40 addresses", function()
        local froms = addresses(40, "127.0.1.%d")
        local results = attack(s.metrics_addr, froms, ALLOWED, 10)
        local answered, worst = report("40 tricklers from 127.0.1.1-40, scrapes from " .. ALLOWED, results)
        assert.is_true(#results >= 3, "too few scrapes ended: " .. #results)
        assert.equal(#results, answered)
        assert.is_true(worst < PROBE_BOUND_S, ("a scrape took %.1f s"):format(worst))
        -- The server serves on once the attack ends.
        assert.truthy(server.eventually(function()
            return http.request(s.metrics_addr, "GET", "/metrics", nil, nil, OTHER) == 200
        end, 20000))
    end)
end)
