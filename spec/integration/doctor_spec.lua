-- `rmq doctor CONF`: the shipped confs are private to the host (no WARN,
-- exit 0); a deliberately open conf gets a WARN per exposure, each naming
-- the key to change (exit 1); a conf that does not load is exit 2.  And
-- the READY line of a server agrees with what doctor said: it prints
-- the address bound, 0.0.0.0 included.
local server = require("support.server")
local net = require("rmq.net")
local cjson = require("cjson")

local function doctor(args)
    return server.rmq("doctor " .. args)
end

local function findings(args)
    local code, out = doctor("--json " .. args)
    local ok, t = pcall(cjson.decode, out:match("{.*}") or "")
    assert(ok and type(t) == "table", out)
    local by = {}
    for _, f in ipairs(t.findings) do
        by[f.level .. " " .. f.key] = f.text
    end
    return code, by, t
end

describe("rmq doctor", function()
    for _, name in ipairs({ "namesrv", "broker-a", "broker-a-s", "broker-b", "broker-a-slave-read", "standalone" }) do
        it("finds conf/" .. name .. ".lua private to this host", function()
            local code, by, t = findings("conf/" .. name .. ".lua")
            assert.equal(0, code, cjson.encode(t))
            assert.equal(0, t.warnings)
            assert.matches("^this host only: ", by["OK bindAddress"])
            assert.matches("127%.0%.0%.1:", by["OK bindAddress"])
        end)
    end

    it("warns about each exposure of an open broker, naming the key", function()
        local code, by, t = findings("conf/broker-a.lua --bindAddress=0.0.0.0 --metricsExporterType=PROM"
            .. " --metricsPromExporterHost=0.0.0.0 --consoleWriteEnable=true --consolePassword=pw"
            .. " --console=127.0.0.1:7001")
        assert.equal(1, code)
        assert.matches("every interface.*broker 0%.0%.0%.0:10911, VIP 0%.0%.0%.0:10909, HA 0%.0%.0%.0:10912",
            by["INFO bindAddress"])
        assert.matches("ACL is off", by["WARN aclEnable"])
        assert.matches("serves only the brokers registered for broker%-a", by["INFO haListenPort"])
        assert.matches("0%.0%.0%.0:5557", by["WARN metricsPromExporterHost"])
        assert.matches("metricsAllowedAddresses to keep scrapes answered", by["INFO metricsAllowedAddresses"], 1, true)
        assert.matches("POST /api/send", by["WARN consoleWriteEnable"])
        assert.matches("any user of this host can connect and try consolePassword", by["WARN console"], 1, true)
        assert.truthy(by["WARN autoCreateTopicEnable"])
        assert.truthy(by["WARN autoCreateSubscriptionGroup"])
        assert.matches("ASYNC_FLUSH", by["INFO flushDiskType"])
        assert.matches("slave", by["INFO brokerRole"])
        assert.equal(6, t.warnings)
        -- 4.9.8's HA port (any peer) is a warning of its own.
        local _, hby = findings("conf/broker-a.lua --bindAddress=0.0.0.0 --haAllowAnyAddress=true")
        assert.matches("whole commit log to any host", hby["WARN haAllowAnyAddress"], 1, true)
        assert.is_nil(hby["INFO haListenPort"])
        -- The text form: one line per finding, LEVEL then KEY, and the count.
        local tcode, out = doctor("conf/broker-a.lua --bindAddress=0.0.0.0")
        assert.equal(1, tcode)
        assert.matches("\nWARN%s+aclEnable%s+ACL is off", out)
        assert.matches("\n%d+ warnings?, %d+ notes?\n$", out)
    end)

    it("warns about an open NameServer, and a broker closed again is quiet", function()
        local code, by = findings("conf/namesrv.lua --bindAddress=0.0.0.0")
        assert.equal(1, code)
        assert.matches("register a broker", by["WARN aclEnable"])
        code, by = findings("conf/broker-a.lua --flushDiskType=SYNC_FLUSH --autoCreateTopicEnable=false"
            .. " --console=unix")
        assert.equal(0, code)
        assert.truthy(by["OK flushDiskType"])
        assert.matches("unix socket", by["OK console"])
        assert.matches("server's uid or root only", by["OK console"], 1, true)
        assert.is_nil(by["INFO autoCreateTopicEnable"])
    end)

    it("refuses a conf the server would refuse, with its message (exit 2)", function()
        local code, out = doctor("conf/broker-a.lua --listenPortt=1")
        assert.equal(2, code)
        assert.matches("listenPortt", out)
        -- The web console's writes on an open endpoint need a password.
        code, out = doctor("conf/standalone.lua --metricsPromExporterHost=0.0.0.0 --consoleWriteEnable=true")
        assert.equal(2, code)
        assert.matches("set consolePassword too", out, 1, true)
        -- A TCP console needs a password, loopback too (issue 21 item 5).
        code, out = doctor("conf/standalone.lua --console=127.0.0.1:7001")
        assert.equal(2, code)
        assert.matches("key 'console' = \"127.0.0.1:7001\" is a TCP address: set consolePassword too", out, 1, true)
        code, out = doctor("")
        assert.equal(2, code)
        assert.matches("CONF is required", out)
    end)

    it("checks plain_acl.yml when ACL is on", function()
        -- (the findings as a function of a loaded conf, ACL switched on by hand)
        local doctor_mod = require("rmq.tools.doctor")
        local home = server.tmpdir()
        local conf = assert(require("rmq.conf").load("conf/broker-a.lua",
            { "bindAddress=0.0.0.0", "rocketmqHome=" .. home }))
        conf.aclEnable = true
        local function level_of(key)
            for _, f in ipairs(doctor_mod.check(conf)) do
                if f.key == key and f.text:find("plain_acl", 1, true) then
                    return f.level, f.text
                end
            end
        end
        local level, text = level_of("rocketmqHome")
        assert.equal("WARN", level)
        assert.matches(home .. "/conf/plain_acl.yml cannot be read: the server creates it empty", text, 1, true)
        assert(os.execute("mkdir -p " .. home .. "/conf"))
        local f = assert(io.open(home .. "/conf/plain_acl.yml", "w"))
        f:write("globalWhiteRemoteAddresses:\n  - 10.10.103.*\naccounts:\n  - accessKey: RocketMQ\n"
            .. "    secretKey: a-real-secret\n    whiteRemoteAddress: 192.168.1.*\n    admin: true\n")
        f:close()
        assert(os.execute("chmod 600 " .. home .. "/conf/plain_acl.yml"))
        level, text = level_of("aclEnable")
        assert.equal("OK", level, text)
        -- Wide white lists, a file others can read, RocketMQ's sample
        -- secret: a WARN each, and no OK.
        local function warnings()
            local out = {}
            for _, x in ipairs(doctor_mod.check(conf)) do
                if x.text:find("plain_acl", 1, true) then
                    assert.not_equal("OK", x.level, x.text)
                    if x.level == "WARN" then out[#out + 1] = x.text end
                end
            end
            return table.concat(out, "\n")
        end
        f = assert(io.open(home .. "/conf/plain_acl.yml", "w"))
        f:write("globalWhiteRemoteAddresses:\n  - '*'\n  - 10.10.*.*\naccounts:\n  - accessKey: RocketMQ\n"
            .. "    secretKey: 12345678\n    whiteRemoteAddress: 192.168.*.*\n    admin: true\n")
        f:close()
        assert(os.execute("chmod 644 " .. home .. "/conf/plain_acl.yml"))
        text = warnings()
        assert.matches('globalWhiteRemoteAddresses "*" lets every address in', text, 1, true)
        assert.matches('globalWhiteRemoteAddresses "10.10.*.*" lets a wide range in', text, 1, true)
        assert.matches('accounts[1] (RocketMQ) whiteRemoteAddress "192.168.*.*" lets a wide range in', text, 1, true)
        assert.matches("accounts[1] (RocketMQ) has RocketMQ's sample secretKey 12345678", text, 1, true)
        assert.matches("mode 644: other users of this host can read the secrets", text, 1, true)
        -- A file the server's loader would refuse is named with its error.
        f = assert(io.open(home .. "/conf/plain_acl.yml", "w"))
        f:write("accounts:\n  - accessKey: RocketMQ\n    secretKey: [unclosed\n")
        f:close()
        level, text = level_of("rocketmqHome")
        assert.equal("WARN", level)
        assert.matches("plain_acl.yml does not load: ", text, 1, true)
    end)

    it("warns when ACL is on and the web console is open to other hosts, or reads as the broker", function()
        local doctor_mod = require("rmq.tools.doctor")
        local function finding(conf, key)
            for _, f in ipairs(doctor_mod.check(conf)) do
                if f.key == key then
                    return f.level, f.text
                end
            end
        end
        local conf = assert(require("rmq.conf").load("conf/broker-a.lua",
            { "metricsExporterType=PROM", "metricsPromExporterHost=0.0.0.0", "accessKey=rocketmq2",
              "secretKey=12345678", "consoleAccessKey=ConsoleReader", "consoleSecretKey=s" }))
        conf.aclEnable = true
        local level, text = finding(conf, "metricsPromExporterHost")
        assert.equal("WARN", level)
        assert.matches("without a password, with the rights of consoleAccessKey ConsoleReader", text, 1, true)
        assert.equal("OK", (finding(conf, "consoleAccessKey")))
        conf.consoleAccessKey = "rocketmq2"
        level, text = finding(conf, "consoleAccessKey")
        assert.equal("WARN", level)
        assert.matches("the broker's own account rocketmq2", text, 1, true)
        conf.consoleAccessKey, conf.consolePassword = nil, "pw"
        level, text = finding(conf, "metricsPromExporterHost")
        assert.equal("WARN", level)
        assert.matches("guarded only by consolePassword", text, 1, true)
        assert.equal("INFO", (finding(conf, "consoleAccessKey")))
    end)

    it("agrees with the READY line, which prints the address bound", function()
        -- A NameServer on every interface for a moment (an ephemeral
        -- port; the spec connects over loopback only).  The last
        -- --bindAddress wins over the one support.server adds.
        local s = server.start("conf/namesrv.lua", { "bindAddress=0.0.0.0",
                                                     "kvConfigPath=" .. server.tmpdir() .. "/kv.json" })
        local port = s.ready_line:match(" listen=0%.0%.0%.0:(%d+) ")
        local ok, why = pcall(function()
            assert.truthy(port, s.ready_line)
            local c = assert(net.connect("127.0.0.1:" .. port))
            assert.equal(0, assert(c:call({ code = 319 })).code)   -- GET_NAMESRV_CONFIG
            c:close()
        end)
        assert.equal(0, s:stop())
        assert(ok, why)
        local _, by = findings("conf/namesrv.lua --bindAddress=0.0.0.0")
        assert.matches("NameServer 0%.0%.0%.0:9876", by["INFO bindAddress"])
    end)
end)
