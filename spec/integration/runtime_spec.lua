-- The rmq-server runtime end to end: a real process on a loopback
-- ephemeral port, driven over TCP by rmq's own client.
local net = require("rmq.net")
local server = require("support.server")
local rq = require("support.requests")
local fixtures = require("support.fixtures")
local fx_it = fixtures.gate(it, pending)

-- A conf whose handlers exercise the dispatcher: they are plain Lua in
-- the conf, as a user would write them.
local HANDLERS = [[
local net = require("rmq.net")
local count, started = 0, 0
return {
    role = "namesrv",
    workers = %d,
    serverChannelMaxIdleTimeSeconds = %d,
    processors = {
        [7001] = function(ctx, cmd)
            return { code = 0, remark = "hello " .. (cmd.ext.name or "?"),
                     ext = { name = cmd.ext.name, role = ctx.role },
                     body = cmd.body }
        end,
        [7002] = function(ctx, cmd) error("handler exploded") end,
        [7003] = function(ctx, cmd)
            started = started + 1
            net.sleep(tonumber(cmd.ext.ms))
            return { code = 0, remark = "slept " .. cmd.ext.ms }
        end,
        [7004] = function(ctx, cmd) count = count + 1 end,
        [7005] = function(ctx, cmd)
            return { code = 0, ext = { count = count } }
        end,
        -- An outbound call from inside a handler: ask this very server.
        [7006] = function(ctx, cmd)
            local r, err = net.call(cmd.ext.addr, { code = 7001, ext = { name = "inner" } })
            if not r then
                return { code = 1, remark = err }
            end
            return { code = 0, remark = "via " .. r.remark }
        end,
        [7007] = function(ctx, cmd) return 42 end,
        [7009] = function(ctx, cmd) return { code = 0, ext = { started = started } } end,
        -- Which worker serves this connection.
        [7010] = function(ctx, cmd) return { code = 0, ext = { worker = net.worker_id() } } end,
    },
}
]]

local function start(workers, idle)
    return server.start({ source = HANDLERS:format(workers or 2, idle or 120) })
end

describe("rmq-server runtime", function()
    local s, c

    setup(function()
        s = start(2)
        c = assert(net.connect(s.addr))
    end)

    teardown(function()
        if c then c:close() end
        if s then s:stop() end
    end)

    it("prints READY with the role and the port it listens on", function()
        assert.matches("^READY role=namesrv listen=127%.0%.0%.1:%d+ pid=%d+\n$", s.ready_line)
        assert.is_true(s.ports.listen > 0)
    end)

    it("answers an unknown code with REQUEST_CODE_NOT_SUPPORTED, as RocketMQ does", function()
        local r = assert(c:call({ code = 9999 }))
        assert.equal(3, r.code)
        assert.equal(" request type 9999 not supported", r.remark)
        assert.is_true(r.response)
        assert.equal("JSON", r.serialize)
    end)

    it("replies in the serialize type of the request", function()
        local r = assert(c:call({ code = 9999, serialize = "ROCKETMQ" }))
        assert.equal("ROCKETMQ", r.serialize)
        assert.equal(3, r.code)
        assert.equal(" request type 9999 not supported", r.remark)
    end)

    it("dispatches to a handler supplied by the conf", function()
        local r = assert(c:call({ code = 7001, ext = { name = "bob" }, body = "payload\0bytes" }))
        assert.equal(0, r.code)
        assert.equal("hello bob", r.remark)
        assert.same({ name = "bob", role = "namesrv" }, r.ext)
        assert.equal("payload\0bytes", r.body)
    end)

    it("turns a handler error into SYSTEM_ERROR and keeps serving", function()
        local r = assert(c:call({ code = 7002 }))
        assert.equal(1, r.code)
        assert.matches("handler exploded", r.remark)
        assert.matches("request code 7002 failed: .*handler exploded", s:log())
        r = assert(c:call({ code = 7001, ext = { name = "again" } }))
        assert.equal("hello again", r.remark)
    end)

    it("answers SYSTEM_ERROR when a handler returns something that is not a reply", function()
        local r = assert(c:call({ code = 7007 }))
        assert.equal(1, r.code)
        assert.matches("not a reply table", r.remark)
    end)

    it("runs a oneway request and sends nothing back", function()
        local before = assert(c:call({ code = 7005 })).ext.count
        assert(c:oneway({ code = 7004 }))
        assert(c:oneway({ code = 7004 }))
        -- Same connection, same worker: the count is that worker's.
        local after = assert(c:call({ code = 7005 })).ext.count
        assert.equal(tonumber(before) + 2, tonumber(after))
        assert.equal(0, c.stray)
    end)

    it("lets a handler wait on a timer without blocking other requests", function()
        local order = {}
        net.spawn(function()
            local r = assert(c:call({ code = 7003, ext = { ms = 200 } }))
            order[#order + 1] = r.remark
        end)
        net.spawn(function()
            local r = assert(c:call({ code = 7001, ext = { name = "quick" } }))
            order[#order + 1] = r.remark
        end)
        assert.truthy(server.eventually(function() return #order == 2 end, 3000))
        -- Replies go out in completion order, not arrival order.
        assert.same({ "hello quick", "slept 200" }, order)
    end)

    it("lets a handler make an outbound call and wait for it", function()
        local r = assert(c:call({ code = 7006, ext = { addr = s.addr } }))
        assert.equal(0, r.code)
        assert.equal("via hello inner", r.remark)
    end)

    it("carries many requests at once on one connection", function()
        local done = 0
        for i = 1, 50 do
            net.spawn(function()
                local r = assert(c:call({ code = 7001, ext = { name = tostring(i) } }))
                assert.equal("hello " .. i, r.remark)
                done = done + 1
            end)
        end
        assert.truthy(server.eventually(function() return done == 50 end, 5000))
    end)

    it("closes only the connection that sends an oversized frame", function()
        local bad = assert(net.connect(s.addr))
        local good = assert(net.connect(s.addr))
        -- L = 16 MiB: with the 4-byte length that is over frameMaxLength.
        assert(bad:send_raw(string.pack(">I4I4", 16 * 1024 * 1024, 0x0000000f) .. "{}"))
        assert.truthy(server.eventually(function() return bad.closed end, 3000))
        assert.matches("closing connection from 127%.0%.0%.1:%d+: .*frame", s:log())
        local r = assert(good:call({ code = 7001, ext = { name = "still here" } }))
        assert.equal("hello still here", r.remark)
        good:close()
    end)

    it("closes a connection whose header cannot be decoded, and keeps serving", function()
        local bad = assert(net.connect(s.addr))
        local hdr = "{\"code\":oops}"
        assert(bad:send_raw(rq.frame(hdr)))
        assert.truthy(server.eventually(function() return bad.closed end, 3000))
        local r = assert(c:call({ code = 9999 }))
        assert.equal(3, r.code)
    end)

    fx_it("decodes every request frame real clients sent and answers with its opaque", function()
        local n = 0
        for _, name in ipairs(fixtures.frame_files()) do
            for _, f in ipairs(fixtures.frames(name)) do
                local d = f.decoded
                if f.dir == "c2s" and d.flag % 2 == 0 and d.code ~= 9999 then
                    local conn = assert(net.connect(s.addr))
                    assert(conn:send_raw(f.raw))
                    if (d.flag & 2) == 0 then
                        -- The reply has the request's opaque, so the
                        -- client's table does not know it: a stray.
                        assert.truthy(server.eventually(function() return conn.stray == 1 end, 3000),
                            name .. ":" .. f.line .. " got no reply")
                    end
                    conn:close()
                    n = n + 1
                end
            end
        end
        assert.is_true(n > 30)
    end)
end)

describe("rmq-server process", function()
    it("exits 0 on SIGTERM", function()
        local s = start(2)
        local status, sig = s:stop()
        assert.equal(0, status)
        assert.equal(0, sig)
        assert.matches("SIGTERM: shutting down", s:log())
    end)

    it("finishes a request in flight before exiting on SIGTERM", function()
        local s = start(1)
        local c = assert(net.connect(s.addr))
        local reply
        net.spawn(function() reply = c:call({ code = 7003, ext = { ms = 300 } }, 5000) end)
        -- SIGTERM only once the handler is running (one worker: the
        -- second connection reaches the same Lua state).
        local probe = assert(net.connect(s.addr))
        assert.truthy(server.eventually(function()
            return tonumber(assert(probe:call({ code = 7009 })).ext.started) > 0
        end, 5000))
        s.proc:kill(15)
        local status = s.proc:wait(5000)
        assert.equal(0, status)
        assert.truthy(reply)
        assert.equal("slept 300", reply.remark)
    end)

    it("works with one worker", function()
        local s = start(1)
        local c = assert(net.connect(s.addr))
        assert.equal("hello one", assert(c:call({ code = 7001, ext = { name = "one" } })).remark)
        c:close()
        assert.equal(0, s:stop())
    end)

    it("writes its log to logFile at logLevel", function()
        local dir = server.tmpdir()
        local s = server.start({ source = HANDLERS:format(1, 120) },
            { "logFile=" .. dir .. "/rmq.log", "logLevel=debug" })
        local c = assert(net.connect(s.addr))
        assert(c:call({ code = 9999 }))
        c:close()
        assert.equal(0, s:stop())
        local log = server.read_file(dir .. "/rmq.log")
        assert.matches("%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d%d%d INFO  %[main%] rmq%-server %S+ ready", log)
        assert.matches("DEBUG %[w0%] connection from 127%.0%.0%.1", log)
        assert.equal("", s:log():match("INFO  %[main%] rmq%-server") or "")
    end)

    it("closes idle connections after serverChannelMaxIdleTimeSeconds", function()
        local s = start(1, 1)
        local c = assert(net.connect(s.addr))
        assert.truthy(server.eventually(function() return c.closed end, 4000))
        assert.matches("idle", s:log())
        assert.equal(0, s:stop())
    end)

    it("serves the same port from every worker", function()
        local s = start(4)
        local conns, per_worker = {}, {}
        for i = 1, 16 do
            conns[i] = assert(net.connect(s.addr))
            assert.equal(3, assert(conns[i]:call({ code = 9999 })).code)
            local w = assert(tonumber(assert(conns[i]:call({ code = 7010 })).ext.worker))
            per_worker[w] = (per_worker[w] or 0) + 1
        end
        -- One acceptor hands connections to the workers in turn.
        assert.same({ [0] = 4, [1] = 4, [2] = 4, [3] = 4 }, per_worker)
        for _, c in ipairs(conns) do c:close() end
        assert.equal(0, s:stop())
    end)
end)

describe("rmq-server command line", function()
    local function run(args)
        local p = io.popen(server.home_prefix() .. server.binary .. " " .. args .. " 2>&1")
        local out = p:read("a")
        local ok, _, code = p:close()
        return code, out, ok
    end

    it("checks a conf with -t", function()
        local code, out = run("-t conf/namesrv.lua")
        assert.equal(0, code)
        assert.matches("configuration ok", out)
    end)

    it("names an unknown key and suggests the closest one", function()
        local dir = server.tmpdir()
        local f = assert(io.open(dir .. "/bad.lua", "w"))
        f:write('return { role = "namesrv", listenPrt = 1 }')
        f:close()
        local code, out = run("-t " .. dir .. "/bad.lua")
        assert.equal(1, code)
        assert.matches("unknown key 'listenPrt' %(did you mean 'listenPort'%?%)", out)
    end)

    it("takes --KEY=VALUE overrides and refuses unknown ones", function()
        local code, out = run("-t conf/namesrv.lua --listenPort=19876")
        assert.equal(0, code, out)
        code, out = run("-t conf/namesrv.lua --lisenPort=1")
        assert.equal(1, code)
        assert.matches("did you mean 'listenPort'", out)
    end)

    it("prints --version and --help", function()
        local code, out = run("--version")
        assert.equal(0, code)
        assert.matches("^rmq%-server %d+%.%d+%.%d+", out)
        code, out = run("--help")
        assert.equal(0, code)
        assert.matches("usage: rmq%-server", out)
    end)

    it("refuses with -t a conf that asks for what rmq does not implement", function()
        local dir = server.tmpdir()
        local function conf_file(name, text)
            local f = assert(io.open(dir .. "/" .. name, "w"))
            f:write(text)
            f:close()
            return dir .. "/" .. name
        end
        local code, out = run("-t " .. conf_file("addrsrv.lua",
            'return { role = "broker", namesrvAddr = "127.0.0.1:9876", fetchNamesrvAddrByAddressServer = true }'))
        assert.equal(1, code)
        assert.matches("key 'fetchNamesrvAddrByAddressServer' = true is not supported: rmq has no address server"
            .. " client %(set namesrvAddr%); remove it or set false\n$", out)
        code, out = run("-t " .. conf_file("tls.lua", 'return { role = "namesrv", tlsEnable = true }'))
        assert.equal(1, code)
        assert.matches("key 'tlsEnable' = true is not supported: rmq's TLS keys are", out)
        code, out = run("-t conf/namesrv.lua --tls.server.mode=enforcing")
        assert.equal(1, code)
        assert.matches("'tls%.server%.mode' = \"enforcing\" needs tls%.server%.certPath", out)
        code, out = run("-t conf/broker-a.lua --brokerRole=SYNC_MASTER")
        assert.equal(0, code, out)   -- HA replication (src/ha/) makes it real
        -- The values meaning what rmq does anyway pass, without a warning.
        code, out = run("-t " .. conf_file("off.lua", 'return { role = "broker", namesrvAddr = "127.0.0.1:9876",'
            .. ' fetchNamesrvAddrByAddressServer = false, transientStorePoolEnable = false, enableDLegerCommitLog = false }'))
        assert.equal(0, code, out)
        assert.matches("^rmq%-server: [^\n]*: configuration ok %(role broker%)\n$", out)
    end)

    it("refuses a bad bindAddress with one clear line", function()
        local code, out = run("conf/namesrv.lua --bindAddress=not-an-ip --listenPort=0")
        assert.equal(1, code)
        assert.matches("bindAddress 'not%-an%-ip' is not an IPv4 or IPv6 address", out)
    end)

end)
