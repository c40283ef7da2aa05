-- One binary: rmq-server and rmq carry their Lua (src/runtime/lua_source.h),
-- so a copy of the binary alone, in an empty directory with no lua/ tree
-- anywhere it could look, runs a conf and serves; $RMQ_LUA_DIR points the
-- binaries at a lua/ tree instead (a changed module loads without a
-- rebuild, the modules the tree lacks still come from the binary); a
-- conf's own policy module still loads from disk; --version and
-- `rmq version` print the version and the git revision; systemd's
-- readiness protocol: READY=1 on $NOTIFY_SOCKET when the READY line is
-- printed, STOPPING=1 on SIGTERM.
local server = require("support.server")
local tmp = require("support.tmp")

local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function abs(path)
    if path:sub(1, 1) == "/" then
        return path
    end
    return assert(os.getenv("PWD")) .. "/" .. path
end

-- An environment with no way back to the source tree: no RMQ_LUA_DIR,
-- no LUA_PATH, HOME in the copy's directory.
local function bare_env(dir, extra, for_server)
    local env = { "HOME=" .. dir, "PATH=/usr/bin:/bin" }
    -- Under scripts/test.sh --asan the copies are sanitized binaries: the
    -- server checks for leaks at exit, the command line does not (as
    -- spec/support/server.lua's servers and server.rmq).
    local asan = for_server and os.getenv("RMQ_SERVER_ASAN_OPTIONS") or os.getenv("ASAN_OPTIONS")
    if asan and os.getenv("RMQ_SERVER_ASAN_OPTIONS") then
        env[#env + 1] = "ASAN_OPTIONS=" .. asan
        env[#env + 1] = "UBSAN_OPTIONS=" .. (os.getenv("UBSAN_OPTIONS") or "")
    end
    for _, e in ipairs(extra or {}) do
        env[#env + 1] = e
    end
    return env
end

local function env_prefix(env)
    local parts = { "env -i" }
    for _, e in ipairs(env) do
        parts[#parts + 1] = q(e)
    end
    return table.concat(parts, " ") .. " "
end

describe("one binary", function()
    local dir, s

    setup(function()
        dir = tmp.dir() .. "/empty"
        assert(os.execute("mkdir -p " .. q(dir)))
        for _, b in ipairs({ "rmq-server", "rmq" }) do
            assert(os.execute(("cp %s %s/"):format(q(abs(server.build .. "/" .. b)), q(dir))))
        end
        -- A policy of the conf's own, on disk beside it (package.path's
        -- "./?.lua": the server runs in dir): rmq's own, renamed.
        write(dir .. "/my_admission.lua", assert(io.open("lua/rmq/policy/admission.lua")):read("a"))
        write(dir .. "/conf.lua", ([[
return {
    role = "standalone", namesrvListenPort = 0, listenPort = 0,
    bindAddress = "127.0.0.1", storePathRootDir = %q,
    kvConfigPath = %q,
    autoCreateTopicEnable = true, autoCreateSubscriptionGroup = true,
    workers = 1, metricsExporterType = "DISABLE",
    admissionPolicy = "my_admission",
}
]]):format(dir .. "/store", dir .. "/kv/kvConfig.json"))
    end)

    teardown(function()
        if s then
            s:stop()
        end
    end)

    it("runs from a copy alone, in an empty directory, and serves", function()
        local notify = tmp.name()
        local unix = require("socket.unix")
        local sock = assert(unix.dgram())
        assert(sock:bind(notify))
        sock:settimeout(0)
        s = server.start(dir .. "/conf.lua", {}, {
            binary = dir .. "/rmq-server", cwd = dir,
            env = bare_env(dir, { "NOTIFY_SOCKET=" .. notify }, true),
        })
        assert.equal("standalone", s.role)
        -- READY=1 came with the READY line (Type=notify).
        local got = ""
        assert.truthy(server.eventually(function()
            local d = sock:receive()
            if d then
                got = got .. d
            end
            return got:find("READY=1", 1, true)
        end, 5000), got)
        assert.matches("MAINPID=" .. s.pid, got, 1, true)

        local ns = "127.0.0.1:" .. s.ports.listen
        local env = env_prefix(bare_env(dir))
        local rmq = env .. q(dir .. "/rmq")
        local code, out = sh(("cd %s && %s send -n %s -t OneBinary hello-copy"):format(q(dir), rmq, ns))
        assert.equal(0, code, out)
        assert.matches("SEND_OK", out)
        code, out = sh(("cd %s && %s consume -n %s -t OneBinary -g OneBinaryG -c 1 --from first")
            :format(q(dir), rmq, ns))
        assert.equal(0, code, out)
        assert.matches("hello%-copy", out)
        assert.is_nil(s:log():find("error", 1, true), s:log())
        -- SIGHUP (the units' ExecReload) reloads the conf's policies: its
        -- own module from the file beside it, rmq's from the binary.
        assert(s.proc:kill(1))
        assert.truthy(server.eventually(function()
            return s:log():find("SIGHUP: reloaded my_admission, rmq.policy.assignment, rmq.policy.slave_read on 1 workers", 1, true)
        end, 5000), s:log())

        -- SIGTERM: STOPPING=1, then a clean exit.
        local status = s:stop()
        s = nil
        assert.equal(0, status)
        assert.truthy(server.eventually(function()
            local d = sock:receive()
            if d then
                got = got .. d
            end
            return got:find("STOPPING=1", 1, true)
        end, 5000), got)
        sock:close()
        os.remove(notify)
    end)

    it("loads a changed module from $RMQ_LUA_DIR, the rest from the binary", function()
        local tree = tmp.dir()
        assert(os.execute("mkdir -p " .. q(tree .. "/rmq")))
        local src = assert(io.open("lua/rmq/cli.lua")):read("a")
        local changed, n = src:gsub('print%(%("rmq %%s %(git %%s%)"%)', 'print(("rmq-from-tree %%s (git %%s)")')
        assert.equal(1, n)
        write(tree .. "/rmq/cli.lua", changed)
        local rmq = q(dir .. "/rmq")
        local code, out = sh(env_prefix(bare_env(dir)) .. rmq .. " version")
        assert.equal(0, code, out)
        assert.matches("^rmq %S+ %(git %x+", out)
        code, out = sh(env_prefix(bare_env(dir, { "RMQ_LUA_DIR=" .. tree })) .. rmq .. " version")
        assert.equal(0, code, out)
        assert.matches("^rmq%-from%-tree %S+ %(git %x+", out)
        -- The server too: the tree's rmq.server is the one that runs.
        write(tree .. "/rmq/server.lua", "error('rmq.server from the tree')\n")
        local check = q(dir .. "/rmq-server") .. " -t " .. q(dir .. "/conf.lua")
        code, out = sh(env_prefix(bare_env(dir, { "RMQ_LUA_DIR=" .. tree })) .. check)
        assert.are_not.equal(0, code, out)
        assert.matches("rmq.server from the tree", out, 1, true)
        code, out = sh(env_prefix(bare_env(dir)) .. check)
        assert.equal(0, code, out)
        -- A mistyped override is refused, not silently ignored.
        code, out = sh(env_prefix(bare_env(dir, { "RMQ_LUA_DIR=" .. tree .. "/nope" })) .. check)
        assert.equal(1, code, out)
        assert.matches("RMQ_LUA_DIR=%S+/nope has no rmq/ directory", out)
        code, out = sh(env_prefix(bare_env(dir, { "RMQ_LUA_DIR=" .. tree .. "/nope" })) .. rmq .. " version")
        assert.equal(1, code, out)
        assert.matches("^rmq: RMQ_LUA_DIR=%S+/nope has no rmq/ directory", out)
    end)

    it("prints the version and the git revision", function()
        local code, out = sh(q(dir .. "/rmq-server") .. " --version")
        assert.equal(0, code, out)
        local version, rev = out:match("^rmq%-server (%S+) %(git (%x+)")
        assert.truthy(version, out)
        -- The tag's version, or 0.0.0+gREV before the first tag.
        assert.truthy(version:match("^%d+%.%d+%.%d+") , version)
        -- A commit of this repository (the one built: HEAD unless a commit
        -- came after the build), and the version names it past the tag.
        if os.execute("git rev-parse --git-dir >/dev/null 2>&1") then
            assert.is_true(os.execute("git cat-file -e " .. rev .. "^{commit} 2>/dev/null"), rev)
            if not io.popen("git describe --tags --match 'v[0-9]*' 2>/dev/null"):read("l") then
                assert.equal("0.0.0+g" .. rev, version)
            end
        end
        local code2, out2 = sh(q(dir .. "/rmq") .. " version")
        assert.equal(0, code2, out2)
        assert.equal(("rmq %s (git %s"):format(version, rev), out2:match("^rmq %S+ %(git %x+"))
    end)
end)
