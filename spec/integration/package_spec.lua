-- The Debian package (debian/, scripts/package.sh): built with
-- dpkg-buildpackage from this tree, installed into a scratch root with
-- dpkg --root (its maintainer scripts run there: the rmq user, the
-- enabled unit), its files checked, its units checked with
-- `systemd-analyze verify`, lintian run on it; then the installed
-- rmq-server runs the installed standalone conf (ports, store and KV
-- file overridden into this spec's temp dir) to READY with systemd's
-- readiness message, the installed `rmq` sends and consumes one message,
-- SIGHUP (ExecReload) reloads the policies and SIGTERM stops it cleanly.
-- Also: docs/configuration.md is the build's generated reference, and
-- the bash completion completes commands and options.
--
-- Without dpkg-buildpackage or debhelper (scripts/setup.sh installs them)
-- the package part is skipped, with a message saying so.
local server = require("support.server")
local tmp = require("support.tmp")

-- The package is a normal build whatever the specs' build is: under
-- scripts/test.sh --asan, the sanitizer runtime preloaded into lua5.4
-- stays out of the package tools and the installed binaries.
local function sh(cmd)
    local p = io.popen("env -u LD_PRELOAD -u ASAN_OPTIONS sh -c " .. ("'" .. cmd:gsub("'", "'\\''") .. "'") .. " 2>&1")
    local out = p:read("a")
    local _, _, code = p:close()
    return code, out
end

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function read(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("a")
    f:close()
    return s
end

local function exists(path)
    return os.execute("test -e " .. q(path)) == true
end

local function link_of(path)
    local p = io.popen("readlink " .. q(path))
    local target = p:read("l")
    p:close()
    return target
end

local function have(cmd)
    return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == true
end

describe("generated docs", function()
    setup(function()
        -- (a sanitized build makes them only when asked: they take ~10x as long)
        if not io.open(server.build .. "/doc/configuration.md") then
            assert(os.execute("env -u LD_PRELOAD cmake --build " .. server.build .. " --target docs >/dev/null"))
        end
    end)

    it("docs/configuration.md is the reference the build generates from the conf schema", function()
        local built = read(server.build .. "/doc/configuration.md")
        assert.truthy(built, "the build made no doc/configuration.md")
        local kept = read("docs/configuration.md")
        assert(kept == built, "docs/configuration.md is out of date: cp " .. server.build
            .. "/doc/configuration.md docs/configuration.md")
        -- Every key of the schema, with RocketMQ's name or (rmq only).
        local conf = require("rmq.conf")
        for _, e in ipairs(conf.schema) do
            assert.truthy(built:find("| `" .. e.name .. "` |", 1, true), e.name)
        end
        assert.truthy(built:find("| `brokerPermission` | integer | 6 |", 1, true))
        assert.matches("| `listenPort` | integer | namesrv: 9876; broker: 10911; standalone: 10911 | 0..65535 | restart |",
                       built, 1, true)
    end)

    it("the man pages come from the commands' own --help", function()
        for _, page in ipairs({ "rmq-server.8", "rmq.1", "rmq-admin.1", "rmq.conf.5" }) do
            local text = read(server.build .. "/doc/" .. page)
            assert.truthy(text, page)
            assert.matches('^%.\\" generated', text)
        end
        local _, help = sh(server.build .. "/rmq admin topicList -h")
        local opt = help:match("(%-%-namesrvAddr)")
        assert.truthy(opt)
        assert.truthy(read(server.build .. "/doc/rmq-admin.1"):find("\\-\\-namesrvAddr", 1, true))
        assert.truthy(read(server.build .. "/doc/rmq.conf.5"):find(".B slaveReadEnable", 1, true))
    end)
end)

describe("the Debian package", function()
    local missing = {}
    for _, c in ipairs({ "dpkg-buildpackage", "dh", "dpkg-architecture" }) do
        if not have(c) then
            missing[#missing + 1] = c
        end
    end
    if #missing > 0 then
        pending("skipped: " .. table.concat(missing, ", ") .. " not installed (scripts/setup.sh installs them)")
        return
    end

    local root, deb, s
    local multiarch = io.popen("dpkg-architecture -qDEB_HOST_MULTIARCH"):read("l")

    setup(function()
        -- build-deb/ keeps its build directory: a second run rebuilds
        -- only what changed.
        local code, out = sh("nice scripts/package.sh build-deb")
        assert(code == 0, out)
        deb = out:match("(%S+%.deb)%s*$")
        assert(deb, out)
        root = tmp.dir() .. "/root"
        assert(os.execute(("mkdir -p %s/var/lib/dpkg/info %s/var/lib/dpkg/updates %s/var/log && touch %s/var/lib/dpkg/status")
            :format(q(root), q(root), q(root), q(root))))
        -- dpkg --root: the package's own dependencies are the host's
        -- (--force-depends); its maintainer scripts run outside a chroot
        -- with DPKG_ROOT set (systemd-sysusers --root, deb-systemd-helper),
        -- so they write into the scratch root only.
        code, out = sh(("dpkg --root=%s --force-depends --force-not-root --force-script-chrootless --log=%s -i %s")
            :format(q(root), q(root .. "/var/log/dpkg.log"), q(deb)))
        assert(code == 0, out)
    end)

    teardown(function()
        if s then
            s:kill()
        end
    end)

    it("installs its files, the rmq user and the enabled standalone unit", function()
        for _, f in ipairs({
            "usr/sbin/rmq-server", "usr/bin/rmq", "usr/lib/" .. multiarch .. "/lua/5.4/rmq.so",
            "etc/rmq/namesrv.lua", "etc/rmq/broker-a.lua", "etc/rmq/standalone.lua",
            "lib/systemd/system/rmq-namesrv.service", "lib/systemd/system/rmq-broker@.service",
            "lib/systemd/system/rmq-standalone.service", "usr/lib/sysusers.d/rmq.conf",
            "usr/share/man/man8/rmq-server.8.gz", "usr/share/man/man1/rmq.1.gz",
            "usr/share/man/man1/rmq-admin.1.gz", "usr/share/man/man5/rmq.conf.5.gz",
            "usr/share/bash-completion/completions/rmq", "usr/share/doc/rmq/copyright",
        }) do
            assert.is_true(exists(root .. "/" .. f), f)
        end
        -- The confs are conffiles, and their stores are under /var/lib/rmq.
        local conffiles = read(root .. "/var/lib/dpkg/info/rmq.conffiles")
        for _, name in ipairs({ "namesrv", "broker-a", "standalone" }) do
            assert.truthy(conffiles:find("/etc/rmq/" .. name .. ".lua", 1, true), conffiles)
            local code, out = sh(("%s/usr/sbin/rmq-server -t %s/etc/rmq/%s.lua"):format(q(root), q(root), name))
            assert.equal(0, code, out)
        end
        assert.matches('storePathRootDir = "/var/lib/rmq/standalone"', read(root .. "/etc/rmq/standalone.lua"), 1, true)
        assert.matches('storePathRootDir = "/var/lib/rmq/broker-a"', read(root .. "/etc/rmq/broker-a.lua"), 1, true)
        assert.matches('kvConfigPath = "/var/lib/rmq/namesrv/kvConfig.json"', read(root .. "/etc/rmq/namesrv.lua"),
                       1, true)
        -- postinst: the system user (home: the stores' root), the unit.
        assert.matches("\nrmq:x:%d+:%d+:[^:]*:/var/lib/rmq:/usr/sbin/nologin\n", "\n" .. read(root .. "/etc/passwd"))
        local wants = root .. "/etc/systemd/system/multi-user.target.wants/"
        assert.equal("/lib/systemd/system/rmq-standalone.service", link_of(wants .. "rmq-standalone.service"))
        assert.is_nil(link_of(wants .. "rmq-namesrv.service"))
        -- The version in the package is the binaries'.
        local _, status = sh(("dpkg --root=%s -s rmq"):format(q(root)))
        local version = status:match("\nVersion: (%S+)")
        local _, v = sh(q(root .. "/usr/sbin/rmq-server") .. " --version")
        assert.equal(version, v:match("^rmq%-server (%S+)"))
        -- rmq.so carries the Lua modules: plain lua5.4, no lua/ tree.
        local code, out = sh(("cd / && lua5.4 -e %s"):format(q(([[
            package.path = ""
            package.cpath = %q
            require("rmq")
            print(require("rmq.conf").schema ~= nil, require("rmq.core").version)
        ]]):format(root .. "/usr/lib/" .. multiarch .. "/lua/5.4/?.so"))))
        assert.equal(0, code, out)
        assert.equal("true\t" .. version .. "\n", out)
    end)

    it("has units systemd-analyze verify accepts", function()
        if not have("systemd-analyze") then
            pending("skipped: systemd-analyze not installed")
            return
        end
        -- verify --root wants the rest of a system there: the host's
        -- targets (sysinit.target, ...) and /bin/kill (ExecReload).
        assert(os.execute(("mkdir -p %s/usr/lib/systemd/system %s/bin && cp -a /lib/systemd/system/. %s/usr/lib/systemd/system/ && cp /bin/kill %s/bin/")
            :format(q(root), q(root), q(root), q(root))))
        local code, out = sh(("systemd-analyze verify --root=%s --man=no rmq-namesrv.service rmq-standalone.service rmq-broker@broker-a.service")
            :format(q(root)))
        assert.equal(0, code, out)
        assert.equal("", out)   -- not even an unknown key
        local unit = read(root .. "/lib/systemd/system/rmq-broker@.service")
        for _, line in ipairs({ "Type=notify", "ExecStart=/usr/sbin/rmq-server /etc/rmq/%i.lua",
                                "ExecReload=/bin/kill -HUP $MAINPID", "KillSignal=SIGTERM", "User=rmq",
                                "NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/rmq",
                                "LimitNOFILE=65536" }) do
            assert.truthy(unit:find("\n" .. line .. "\n", 1, true), line)
        end
    end)

    it("passes lintian without errors", function()
        if not have("lintian") then
            pending("skipped: lintian not installed (scripts/setup.sh installs it)")
            return
        end
        local code, out = sh("lintian --fail-on error " .. q(deb))
        assert.equal(0, code, out)
        assert.is_nil(out:match("\nE: ") or out:match("^E: "), out)
    end)

    it("runs the installed server with the installed conf, and the installed rmq sends and consumes", function()
        local dir = tmp.dir()
        local notify = dir .. "/notify"
        local sock = assert(require("socket.unix").dgram())
        assert(sock:bind(notify))
        sock:settimeout(0)
        local env = { "HOME=/nonexistent", "PATH=/usr/bin:/bin", "NOTIFY_SOCKET=" .. notify }
        s = server.start(root .. "/etc/rmq/standalone.lua", {
            "namesrvListenPort=0", "storePathRootDir=" .. dir .. "/store",
            "kvConfigPath=" .. dir .. "/kvConfig.json", "metricsPromExporterPort=0",
        }, { binary = root .. "/usr/sbin/rmq-server", env = env, cwd = dir })
        assert.equal("standalone", s.role)
        local got = ""
        local function heard(what)
            return server.eventually(function()
                local d = sock:receive()
                if d then
                    got = got .. d
                end
                return got:find(what, 1, true)
            end, 5000)
        end
        assert.truthy(heard("READY=1"), got)

        local rmq = q(root .. "/usr/bin/rmq")
        local ns = "127.0.0.1:" .. s.ports.listen
        local code, out = sh(("%s send -n %s -t PkgTopic hello-package"):format(rmq, ns))
        assert.equal(0, code, out)
        assert.matches("SEND_OK", out)
        code, out = sh(("%s consume -n %s -t PkgTopic -g PkgGroup -c 1 --from first"):format(rmq, ns))
        assert.equal(0, code, out)
        assert.matches("hello%-package", out)

        -- ExecReload: SIGHUP swaps the conf's policies on every worker.
        assert(s.proc:kill(1))
        assert.truthy(server.eventually(function()
            return s:log():find("SIGHUP: reloaded rmq.policy.admission, rmq.policy.assignment, rmq.policy.slave_read", 1, true)
        end, 5000), s:log())

        -- systemctl stop: SIGTERM, STOPPING=1, exit 0, the store closed.
        local status = s:stop(30000)
        local log = s:log()
        s = nil
        assert.equal(0, status, log)
        assert.truthy(heard("STOPPING=1"), got)
        assert.matches("SIGTERM: shutting down", log, 1, true)
        assert.matches("stopped", log, 1, true)
        sock:close()
    end)

    it("runs the installed namesrv and broker-a confs as a pair (rmq-namesrv, rmq-broker@broker-a)", function()
        local dir = tmp.dir()
        local env = { "HOME=/nonexistent", "PATH=/usr/bin:/bin" }
        local binary = root .. "/usr/sbin/rmq-server"
        local ns = server.start(root .. "/etc/rmq/namesrv.lua", { "kvConfigPath=" .. dir .. "/kvConfig.json" },
                                { binary = binary, env = env, cwd = dir })
        local ok, err = pcall(function()
            local nsaddr = "127.0.0.1:" .. ns.ports.listen
            local b = server.start(root .. "/etc/rmq/broker-a.lua", {
                "namesrvAddr=" .. nsaddr, "storePathRootDir=" .. dir .. "/store",
            }, { binary = binary, env = env, cwd = dir })
            local rmq = q(root .. "/usr/bin/rmq")
            local code, out
            -- The broker registers before its READY line; a few tries
            -- all the same, on a loaded machine.
            for _ = 1, 10 do
                code, out = sh(("%s send -n %s -t PkgPair hello-pair"):format(rmq, nsaddr))
                if code == 0 then
                    break
                end
                require("rmq.net").sleep(500)
            end
            assert.equal(0, code, out)
            assert.matches("SEND_OK", out)
            code, out = sh(("%s consume -n %s -t PkgPair -g PkgPairGroup -c 1 --from first"):format(rmq, nsaddr))
            assert.equal(0, code, out)
            assert.matches("hello%-pair", out)
            assert.equal(0, b:stop(30000), b:log())
        end)
        assert.equal(0, ns:stop(30000), ns:log())
        assert(ok, err)
    end)

    it("completes rmq and rmq admin commands and options in bash", function()
        local completion = root .. "/usr/share/bash-completion/completions/rmq"
        local function complete(...)
            local words = { ... }
            local script = ("source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _rmq; printf '%%s\\n' \"${COMPREPLY[@]}\"")
                :format(q(completion), table.concat(words, " "), #words - 1)
            local _, out = sh("bash -c " .. q(script))
            return out
        end
        assert.equal("admin\n", complete("rmq", "adm"))
        assert.equal("topicList\n", complete("rmq", "admin", "topicL"))
        assert.equal("--namesrvAddr\n", complete("rmq", "admin", "topicList", "--names"))
        assert.equal("--topic\n", complete("rmq", "send", "--top"))
    end)
end)
