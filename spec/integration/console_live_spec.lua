-- The live console against real servers: a broker with two workers and
-- its console on a unix socket; the slave-read policy replaced over the
-- console and the next pull reply of every worker (connections are
-- dealt to the workers in turn) suggesting what the new code says; a
-- broken snippet refused while the old policy keeps answering; a reload
-- from the file; SIGHUP; set(); the bounds; the conf checks; --diff and
-- --apply.
local net = require("rmq.net")
local lfs = require("lfs")
local codes = require("rmq.codes")
local server = require("support.server")
local rq = require("support.requests")
local client = require("rmq.console_live.client")

local req, R = codes.request, codes.response

local TOPIC, GROUP = "LcTopic", "LcGroup"
local PROBE = 9901   -- a request code the spec installs: answers its worker's id

local function pull_req(qid)
    return rq.pull({ group = GROUP, topic = TOPIC, qid = qid, expr = "TAG" })
end

local function send_req(qid)
    return rq.send({ group = "LcProducer", topic = TOPIC, qid = qid, born = 1796034593124, tags = "TagA",
                     body = "hello console" })
end

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

local function conf_text(dir, extra)
    return ([[return {
    role = "broker", workers = 2, brokerName = "broker-lc",
    storePathRootDir = %q, mappedFileSizeCommitLog = 1048576,
    namesrvAddr = "127.0.0.1:1", console = "unix", slaveReadEnable = true,
    %s
}
]]):format(dir .. "/store", extra or "")
end

-- A policy that suggests `id` to everyone (rmq.policy.slave_read's shape).
local function policy_src(id)
    return ([[local M = {}
function M.is_slow() return false end
function M.suggest(facts) return %d end
return M]]):format(id)
end

describe("live console", function()
    local s, dir, sock, conns

    local function eval(code)
        local c = assert(client.open("unix:" .. sock))
        local ok, text = c:eval(code)
        c:close()
        return ok, text
    end

    -- The suggestion every connection (so every worker) gets now.
    local function suggestions()
        local out = {}
        for i, c in ipairs(conns) do
            local r = assert(c:call(pull_req(0)))
            assert.equal(R.SUCCESS, r.code, r.remark)
            out[i] = r.ext.suggestWhichBrokerId
        end
        return table.concat(out, ",")
    end

    setup(function()
        dir = server.tmpdir()
        write(dir .. "/conf.lua", conf_text(dir))
        s = server.start(dir .. "/conf.lua")
        sock = dir .. "/store/console.sock"
        conns = {}
        for i = 1, 4 do
            conns[i] = assert(net.connect(s.addr))
        end
        assert.equal(R.SUCCESS, assert(conns[1]:call(send_req(0))).code)
    end)

    teardown(function()
        for _, c in ipairs(conns or {}) do
            c:close()
        end
        if s then
            assert.equal(0, (s:stop()))
        end
    end)

    it("listens on a unix socket of mode 0600 in the store directory, named on the READY line", function()
        assert.matches("console=unix:" .. sock, s.ready_line, 1, true)
        assert.equal("socket", lfs.attributes(sock, "mode"))
        assert.equal("rw-------", lfs.attributes(sock, "permissions"))
        local c = assert(client.open("unix:" .. sock))
        assert.matches("role=broker name=broker-lc workers=2", c.hello, 1, true)
        c:close()
    end)

    it("refuses a peer of another uid even when the socket file is opened up (SO_PEERCRED)", function()
        -- issue 21 item 5: the file mode was the only guard.  Needs root
        -- (to run a client as nobody) and setpriv.
        local uid = io.popen("id -u"):read("l")
        if uid ~= "0" or not os.execute("command -v setpriv >/dev/null") then
            pending("needs root and setpriv (a client of another uid)")
            return
        end
        -- Open the socket and the directories to it (this run's own temp
        -- tree: up to the run's root, above the shard's own directory when
        -- scripts/test.sh runs shards) to everyone, as a careless chmod or
        -- a shared directory would.
        assert(os.execute(("chmod 0666 '%s'"):format(sock)))
        local root = os.getenv("RMQ_TEST_ROOT") or os.getenv("RMQ_TEST_TMP")
        local d = sock:match("^(.*)/[^/]+$")
        while d ~= nil and d ~= "" and d ~= "/tmp" and (root == nil or #d >= #root) do
            assert(os.execute(("chmod o+x '%s'"):format(d)))
            d = d:match("^(.*)/[^/]+$")
        end
        local function as(who, code)
            local p = io.popen(("%s %s/rmq console %s -e '%s' 2>&1"):format(who, server.build, sock,
                code))
            local out = p:read("a")
            local _, _, rc = p:close()
            return rc, out
        end
        local rc, out = as("setpriv --reuid=65534 --regid=65534 --clear-groups", "return 6 * 7")
        assert.is_not.equal(0, rc, out)
        assert.matches("refused: the peer is not the server's user (or root)", out, 1, true)
        -- Not answered: no line of 42 (the path in the refusal may hold "42").
        for line in out:gmatch("[^\n]+") do
            assert.are_not.equal("42", line, out)
        end
        assert.matches("refused a peer %(uid 65534 pid %d+; the server's uid is 0%)", s:log())
        -- root (the server's own uid here) is served as before
        rc, out = as("", "return 6 * 7")
        assert.equal(0, rc, out)
        assert.equal("42\n", out)
        assert(os.execute(("chmod 0600 '%s'"):format(sock)))
    end)

    it("is reached with rmq console, -e or lines on stdin", function()
        local code, out = server.rmq(("console %s -e 'return 40 + 2'"):format(sock))
        assert.equal(0, code, out)
        assert.equal("42\n", out)
        code, out = server.rmq(("console %s -e 'return nil + 1'"):format(sock))
        assert.equal(1, code)
        assert.matches("attempt to perform arithmetic on a nil value", out, 1, true)
        code, out = server.rmq("console " .. dir .. "/nothing.sock -e 1")
        assert.equal(3, code)
        assert.matches("cannot reach the console at", out, 1, true)
        local p = io.popen(server.home_prefix() .. ("printf 'x = 41\\nif x then\\nprint(x + 1)\\nend\\n' | %s/rmq console %s 2>&1")
            :format(server.build, sock))
        out = p:read("a")
        p:close()
        assert.matches("broker-lc> broker-lc> >> >> 42\n", out, 1, true)
    end)

    it("shows the server's state as tables", function()
        local ok, text = eval("return topics()." .. TOPIC .. ".writeQueueNums, store().queues['"
            .. TOPIC .. "@0'].max, ha().flushDiskType, conf().brokerName")
        assert.is_true(ok, text)
        assert.equal("4\n1\nASYNC_FLUSH\nbroker-lc\n", text)
        ok, text = eval("local n = 0 for _ in pairs(clients().consumers) do n = n + 1 end return n")
        assert.is_true(ok, text)
        assert.equal("0\n", text)
        -- A snippet's error: its message, the session goes on.
        local c = assert(client.open("unix:" .. sock))
        local kind, msg = c:line("return nil + 1")
        assert.equal("err", kind)
        assert.matches("attempt to perform arithmetic on a nil value", msg, 1, true)
        assert.is_nil(msg:find("/lua/rmq/", 1, true))
        kind = c:line("for i = 1, 2 do")
        assert.equal("more", kind)
        kind, msg = c:line("print(i) end")
        assert.equal("ok", kind)
        assert.equal("1\n2\n", msg)
        c:close()
    end)

    it("replaces the slave-read policy on every worker at once", function()
        -- Four connections, dealt to the two workers in turn: the probe
        -- handler (installed through the console too) says which.
        local ok, text = eval(("return handler(%d, %q)"):format(PROBE,
            "return function() return { code = 0, remark = tostring(require('rmq.net').worker_id()) } end"))
        assert.is_true(ok, text)
        assert.equal("handler 9901 (broker) replaced on 2 workers\n", text)
        local seen = {}
        for _, c in ipairs(conns) do
            local r = assert(c:call({ code = PROBE }))
            assert.equal(R.SUCCESS, r.code)
            seen[r.remark] = true
        end
        assert.same({ ["0"] = true, ["1"] = true }, seen)

        assert.equal("0,0,0,0", suggestions())   -- 4.9.8's rule: not slow, the master
        ok, text = eval(("return replace('rmq.policy.slave_read', %q)"):format(policy_src(1)))
        assert.is_true(ok, text)
        assert.equal("replaced rmq.policy.slave_read on 2 workers\n", text)
        assert.equal("1,1,1,1", suggestions())
    end)

    it("refuses a broken snippet and keeps the old policy answering", function()
        local ok, text = eval(("return replace('rmq.policy.slave_read', %q)"):format("local M = {"))
        assert.is_false(ok)
        assert.matches("rmq.policy.slave_read:1: unexpected symbol near <eof>", text, 1, true)
        assert.equal("1,1,1,1", suggestions())
        -- Loads, but is no policy: refused before any worker switched.
        ok, text = eval(("return replace('rmq.policy.slave_read', %q)"):format("return { nothing = true }"))
        assert.is_false(ok)
        assert.matches("lacks function(s) the running module has: is_slow, suggest", text, 1, true)
        ok, text = eval(("return replace('rmq.policy.slave_read', %q)"):format("error('boom')"))
        assert.is_false(ok)
        assert.matches("load error: rmq.policy.slave_read:1: boom", text, 1, true)
        assert.equal("1,1,1,1", suggestions())
        -- A request code C serves cannot be replaced live: refused by
        -- every worker, none switched, pulls still answered.
        ok, text = eval("return handler('PULL_MESSAGE', 'return function() end')")
        assert.is_false(ok)
        assert.matches("refused, no worker switched: worker 0, 1: request code 11 is served in C", text, 1, true)
        assert.equal("1,1,1,1", suggestions())
    end)

    it("reloads a policy module from its file", function()
        local ok, text = eval("return reload('rmq.policy.slave_read')")
        assert.is_true(ok, text)
        assert.equal("reloaded rmq.policy.slave_read on 2 workers\n", text)
        assert.equal("0,0,0,0", suggestions())
    end)

    it("changes live config keys with UPDATE_BROKER_CONFIG's allow-list", function()
        local ok, text = eval("return set('slaveReadPolicy', 'rmq.policy.slave_read_always')")
        assert.is_true(ok, text)
        assert.equal("slaveReadPolicy = rmq.policy.slave_read_always (was rmq.policy.slave_read)\n", text)
        assert.equal("1,1,1,1", suggestions())   -- slave_read_always: the group's slave (1)
        ok, text = eval("return set('flushDiskType', 'SYNC_FLUSH')")
        assert.is_false(ok)
        assert.matches("cannot be changed while rmq runs", text, 1, true)
        ok, text = eval("return set('slaveReadPolicy', 'rmq.policy.no_such')")
        assert.is_false(ok)
        assert.matches("no policy module rmq.policy.no_such", text, 1, true)
        ok, text = eval("return set('slaveReadPolicy', 'rmq.policy.slave_read')")
        assert.is_true(ok, text)
        assert.equal("0,0,0,0", suggestions())
    end)

    it("reloads the conf's policies on SIGHUP", function()
        local ok, text = eval(("return replace('rmq.policy.slave_read', %q)"):format(policy_src(1)))
        assert.is_true(ok, text)
        assert.equal("1,1,1,1", suggestions())
        -- SIGHUP: the conf's slaveReadPolicy (rmq.policy.slave_read) is
        -- read from its file again, on both workers.
        assert(s.proc:kill(1))
        assert.truthy(server.eventually(function()
            return s:log():find("SIGHUP: reloaded rmq.policy.admission, rmq.policy.assignment, rmq.policy.slave_read on 2 workers", 1, true)
        end, 60000), s:log())
        assert.equal("0,0,0,0", suggestions())
        -- A conf naming another policy: SIGHUP switches to it.
        write(dir .. "/conf.lua", conf_text(dir, 'slaveReadPolicy = "rmq.policy.slave_read_always",'))
        assert(s.proc:kill(1))
        assert.truthy(server.eventually(function()
            return s:log():find("SIGHUP: reloaded rmq.policy.admission, rmq.policy.assignment, rmq.policy.slave_read_always on 2 workers",
                                1, true)
        end, 60000), s:log())
        assert.equal("1,1,1,1", suggestions())
        -- A conf that does not load: nothing changes, the log says why.
        write(dir .. "/conf.lua", "return { role = 'broker', nope = 1 }")
        assert(s.proc:kill(1))
        assert.truthy(server.eventually(function()
            return s:log():find("SIGHUP: the conf does not load", 1, true)
        end, 60000), s:log())
        assert.equal("1,1,1,1", suggestions())
        write(dir .. "/conf.lua", conf_text(dir))
    end)

    it("prints the differences with --diff and applies the live ones with --apply", function()
        local port = s.ports.listen
        local function run(args)
            local p = io.popen(server.home_prefix() .. ("%s %s --listenPort=%d --bindAddress=127.0.0.1 2>&1"):format(server.binary, args, port))
            local out = p:read("a")
            local _, _, code = p:close()
            return code, out
        end
        write(dir .. "/wanted.lua", conf_text(dir, 'brokerPermission = 4, flushDiskType = "SYNC_FLUSH",'
            .. ' slaveReadPolicy = "rmq.policy.slave_read",'))
        local code, out = run("--diff " .. dir .. "/wanted.lua")
        assert.equal(0, code, out)
        assert.equal("key brokerPermission: 6 -> 4 (live)\n"
            .. "key flushDiskType: ASYNC_FLUSH -> SYNC_FLUSH (restart)\n"
            .. "key slaveReadPolicy: rmq.policy.slave_read_always -> rmq.policy.slave_read (live)\n", out)
        code, out = run("--apply " .. dir .. "/wanted.lua")
        assert.equal(0, code, out)
        assert.matches("applied: brokerPermission = 4 (was 6)\n", out, 1, true)
        assert.matches("applied: slaveReadPolicy = rmq.policy.slave_read (was rmq.policy.slave_read_always)\n",
            out, 1, true)
        assert.matches("needs a restart: flushDiskType\n", out, 1, true)
        -- Applied: read-only, and 4.9.8's rule again.
        assert.equal(R.NO_PERMISSION, assert(conns[2]:call(send_req(0))).code)
        assert.equal("0,0,0,0", suggestions())
        code, out = run("--diff " .. dir .. "/wanted.lua")
        assert.equal(0, code, out)
        assert.equal("key flushDiskType: ASYNC_FLUSH -> SYNC_FLUSH (restart)\n", out)
        code, out = run("--diff " .. dir .. "/conf.lua")
        assert.equal(0, code, out)
        assert.equal("key brokerPermission: 4 -> 6 (live)\n", out)
        code = run("--apply " .. dir .. "/conf.lua")
        assert.equal(0, code)
    end)

    it("bounds line length and sessions", function()
        local c = assert(client.open("unix:" .. sock))
        local kind, text = c:line(string.rep("x", 70000))
        assert.equal("err", kind)
        assert.matches("line longer than consoleMaxLineBytes (65536)", text, 1, true)
        assert.is_nil(c:line("return 1"))   -- closed
        c:close()
        local open = {}
        for i = 1, 4 do
            open[i] = assert(client.open("unix:" .. sock))
        end
        local fifth, err = client.open("unix:" .. sock)
        assert.is_nil(fifth)
        assert.matches("consoleMaxSessions", err, 1, true)
        for _, o in ipairs(open) do
            o:close()
        end
        assert.truthy(server.eventually(function()
            local again = client.open("unix:" .. sock)
            if again then
                again:close()
                return true
            end
        end, 60000))
        -- A runaway snippet stops at the instruction bound.
        local ok
        ok, text = eval("while true do end")
        assert.is_false(ok)
        assert.matches("consoleMaxInstructions", text, 1, true)
        ok, text = eval("return coroutine.wrap(function() while true do end end)()")
        assert.is_false(ok)
        assert.matches("consoleMaxInstructions", text, 1, true)
        -- Output past consoleMaxOutputBytes is cut, and says so.
        ok, text = eval("for i = 1, 100000 do print(('%099d'):format(i)) end")
        assert.is_true(ok)
        assert.matches("... (output cut at 1048576 bytes: consoleMaxOutputBytes)\n", text, 1, true)
        assert.truthy(#text < 1048576 + 100)
        assert.equal("0,0,0,0", suggestions())
    end)
end)

describe("live console conf", function()
    local function check(conf)
        local dir = server.tmpdir()
        local path = dir .. "/c.lua"
        write(path, "return " .. server.serialize(conf, "") .. "\n")
        local p = io.popen(server.home_prefix() .. ("%s -t %s 2>&1"):format(server.binary, path))
        local out = p:read("a")
        local _, _, code = p:close()
        return code, out
    end

    it("refuses any TCP address without consolePassword, loopback included", function()
        local base = { role = "broker", brokerName = "b", storePathRootDir = "/tmp/x", namesrvAddr = "127.0.0.1:1" }
        for _, addr in ipairs({ "10.1.2.3:7001", "127.0.0.1:7001", "[::1]:7001", "localhost:7001" }) do
            base.console, base.consolePassword = addr, nil
            local code, out = check(base)
            assert.equal(1, code, out)
            assert.matches(("key 'console' = %q is a TCP address: set consolePassword too"):format(addr), out, 1,
                true)
            base.consolePassword = "s3cret"
            code, out = check(base)
            assert.equal(0, code, out)
        end
        base.consolePassword = nil
        base.console = "unix"
        local code, out = check(base)
        assert.equal(0, code, out)
        base.console = "nowhere"
        code, out = check(base)
        assert.equal(1, code)
        assert.matches("key 'console'", out, 1, true)
    end)

    it("replaces the socket file a killed server left, and refuses one a live server serves", function()
        local dir = server.tmpdir()
        local path = dir .. "/c.sock"
        local conf = { role = "namesrv", workers = 1, kvConfigPath = dir .. "/kv.json", console = path }
        local a = server.start(conf)
        a:kill()
        assert.equal("socket", lfs.attributes(path, "mode"))   -- left behind
        local b = server.start(conf)
        local ok, err = pcall(function()
            local c = assert(client.open(path))
            c:close()
            -- A second server on the same socket: refused before READY.
            local started, why = pcall(server.start, conf)
            assert.is_false(started)
            assert.matches("console socket " .. path .. " in use", tostring(why), 1, true)
        end)
        assert.equal(0, (b:stop()))
        assert(ok, err)
        assert.is_nil(lfs.attributes(path))   -- removed at a clean stop
    end)

    it("serves a NameServer's route tables on a socket path", function()
        local code, out = check({ role = "namesrv", console = "unix" })
        assert.equal(1, code)
        assert.matches("needs a store directory", out, 1, true)
        local dir = server.tmpdir()
        local ns = server.start({ role = "namesrv", workers = 2, kvConfigPath = dir .. "/kv.json",
                                  console = dir .. "/ns.sock" })
        local ok, err = pcall(function()
            local c = assert(client.open(dir .. "/ns.sock"))
            assert.matches("role=namesrv", c.hello, 1, true)
            local done, text = c:eval("return route().counts.brokers")
            assert.is_true(done, text)
            assert.equal("0\n", text)
            done, text = c:eval("return topics()")
            assert.is_false(done)
            assert.equal("not a broker\n", text)
            c:close()
        end)
        assert.equal(0, (ns:stop()))
        assert(ok, err)
    end)

    it("asks for the password on a TCP console and keeps it out of getBrokerConfig", function()
        local s = server.start({ role = "broker", workers = 1, brokerName = "broker-pw",
                                 storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1048576,
                                 namesrvAddr = "127.0.0.1:1", console = "127.0.0.1:0", consolePassword = "s3cret",
                                 consoleAuthFailDelayMillis = 300 })
        local ok, err = pcall(function()
            local addr = "127.0.0.1:" .. s.ports.console
            local c, why = client.open(addr)
            assert.is_nil(c)
            assert.matches("wants a password", why, 1, true)
            local t0 = require("rmq.core").mono_ms()
            c, why = client.open(addr, "wrong")
            assert.is_nil(c)
            assert.matches("wrong password", why, 1, true)
            -- consoleAuthFailDelayMillis (300 here) before the answer.
            assert.truthy(require("rmq.core").mono_ms() - t0 >= 300)
            c = assert(client.open(addr, "s3cret"))
            local done, text = c:eval("return conf().consolePassword, conf().brokerName")
            assert.is_true(done, text)
            assert.equal("nil\nbroker-pw\n", text)
            c:close()
            local conn = assert(net.connect(s.addr))
            local r = assert(conn:call({ code = req.GET_BROKER_CONFIG }))
            assert.equal(R.SUCCESS, r.code)
            assert.is_nil(r.body:find("s3cret", 1, true))
            assert.matches("\nconsole=127.0.0.1:0\n", r.body, 1, true)
            -- UPDATE_BROKER_CONFIG is no oracle: the right value is
            -- refused as a wrong one is.
            for _, guess in ipairs({ "s3cret", "guess" }) do
                r = assert(conn:call({ code = req.UPDATE_BROKER_CONFIG, body = "consolePassword=" .. guess .. "\n" }))
                assert.equal(R.SYSTEM_ERROR, r.code)
                assert.matches("cannot be changed while rmq runs", r.remark, 1, true)
            end
            conn:close()
        end)
        assert.equal(0, (s:stop()))
        assert(ok, err)
    end)
end)
