-- rmq.conf: loading, defaults, overrides and the one-line errors.
local conf = require "rmq.conf"
local tmp = require("support.tmp")
local codes = require "rmq.codes"

-- Each case writes its conf into a fresh temporary file.
local written = {}

local function write(text)
    local path = tmp.file()
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    written[#written + 1] = path
    return path
end

local function load_text(text, overrides)
    local path = write(text)
    local c, w = conf.load(path, overrides)
    return c, w, path
end

-- Expect failure; return the message and check it is one line naming the file.
local function load_error(text, overrides)
    local c, err, path = load_text(text, overrides)
    assert.is_nil(c)
    assert.is_string(err)
    assert.is_nil(err:find("\n"), "error is not one line: " .. err)
    assert.are.equal(path .. ":", err:sub(1, #path + 1))
    return err:sub(#path + 3), path, err
end

local function has(list, pattern)
    for _, s in ipairs(list) do
        if s:find(pattern, 1, true) then
            return true
        end
    end
    return false
end

local HOME = os.getenv("HOME")

describe("rmq.conf", function()
    describe("role proxy (the cluster-mode gRPC proxy)", function()
        it("takes conf/proxy.lua: gRPC on 8081 by default, 5.x's route cache keys", function()
            local c = assert(conf.load("conf/proxy.lua"))
            assert.equal("proxy", c.role)
            assert.equal(8081, c.grpcServerPort)
            assert.equal("127.0.0.1:9876", c.namesrvAddr)
            assert.equal(20, c.topicRouteServiceCacheRefreshSeconds)
            c = assert(load_text('return { role = "proxy", namesrvAddr = "127.0.0.1:9876" }'))
            assert.equal(8081, c.grpcServerPort)
            assert.equal(256, c.proxyMaxBrokerConnections)
            assert.is_nil(c.listenPort)
        end)

        it("refuses keys a proxy does not use, and a proxy without NameServers", function()
            local msg = load_error('return { role = "proxy", namesrvAddr = "127.0.0.1:9876", brokerName = "b" }')
            assert.matches("key 'brokerName' is not a proxy's", msg, 1, true)
            msg = load_error('return { role = "proxy", namesrvAddr = "127.0.0.1:9876", listenPort = 10911 }')
            assert.matches("key 'listenPort' is not a proxy's", msg, 1, true)
            msg = load_error('return { role = "proxy", namesrvAddr = "127.0.0.1:9876", aclEnable = true }')
            assert.matches("key 'aclEnable' is not a proxy's", msg, 1, true)
            msg = load_error('return { role = "proxy" }')
            assert.matches("a proxy needs namesrvAddr", msg, 1, true)
            msg = load_error('return { role = "proxy", namesrvAddr = "127.0.0.1:9876", grpcServerPort = -1 }')
            assert.matches("grpcServerPort must be 0", msg, 1, true)
            -- The proxy's own keys are not a broker's.
            local _, w = assert(load_text('return { role = "broker", proxyMaxBrokerConnections = 3 }'))
            assert.is_true(has(w, "proxyMaxBrokerConnections"))
        end)
    end)

    teardown(function()
        for _, p in ipairs(written) do
            os.remove(p)
        end
    end)

    describe("a valid conf", function()
        it("fills every default of the role", function()
            local c, w, path = load_text([[
                return { role = "broker", brokerName = "broker-a",
                         namesrvAddr = "127.0.0.1:9876", storePathRootDir = "/data/a" }
            ]])
            assert.are.same({}, w)
            assert.are.equal("broker", c.role)
            assert.are.equal(path, c._path)
            assert.are.equal("broker-a", c.brokerName)
            assert.are.equal("DefaultCluster", c.brokerClusterName)
            assert.are.equal(0, c.brokerId)
            assert.are.equal("ASYNC_MASTER", c.brokerRole)
            assert.are.equal("ASYNC_FLUSH", c.flushDiskType)
            assert.are.equal(10911, c.listenPort)
            assert.are.equal(10912, c.haListenPort)
            assert.are.equal("/data/a/commitlog", c.storePathCommitLog)
            assert.are.equal(1073741824, c.mappedFileSizeCommitLog)
            assert.are.equal(6000000, c.mappedFileSizeConsumeQueue)
            assert.are.equal(4194304, c.maxMessageSize)
            assert.are.equal(8, c.defaultTopicQueueNums)
            assert.are.equal(30000, c.registerNameServerPeriod)
            assert.are.equal(40, c.accessMessageInMemoryMaxRatio)
            assert.are.equal("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
                c.messageDelayLevel)
            assert.are.equal("rmq.policy.slave_read", c.slaveReadPolicy)
            assert.are.equal(16777216, c.frameMaxLength)
            assert.are.equal("info", c.logLevel)
            assert.is_nil(c.logFile)
            assert.are.same({ broker = {} }, c.processors)
            -- every applicable key with a fixed default is present
            for _, k in ipairs(conf.keys_for_role("broker")) do
                local e = conf.describe(k)
                if (e.default ~= nil and type(e.default) ~= "function") or e.default_by_role then
                    assert.is_not_nil(c[k], k)
                end
            end
            -- and nothing of the NameServer
            assert.is_nil(c.kvConfigPath)
        end)

        it("uses a per-role listenPort default", function()
            local ns = assert(load_text('return { role = "namesrv" }'))
            assert.are.equal(9876, ns.listenPort)
            local sa = assert(load_text('return { role = "standalone" }'))
            assert.are.equal(10911, sa.listenPort)
            assert.are.equal(9876, sa.namesrvListenPort)
            local br = assert(load_text('return { role = "broker", namesrvAddr = "h:1" }'))
            assert.are.equal(10911, br.listenPort)
            assert.is_nil(br.namesrvListenPort)
        end)

        it("expands ~ in paths with HOME", function()
            local ns = assert(load_text('return { role = "namesrv" }'))
            assert.are.equal(HOME .. "/namesrv/kvConfig.json", ns.kvConfigPath)
            local br = assert(load_text([[
                return { role = "broker", namesrvAddr = "h:1", storePathRootDir = "~/rmq/a" }
            ]]))
            assert.are.equal(HOME .. "/rmq/a", br.storePathRootDir)
            assert.are.equal(HOME .. "/rmq/a/commitlog", br.storePathCommitLog)
            local def = assert(load_text('return { role = "broker", namesrvAddr = "h:1" }'))
            assert.are.equal(HOME .. "/store", def.storePathRootDir)
        end)

        it("derives standalone's namesrvAddr from namesrvListenPort", function()
            local c, w = load_text('return { role = "standalone" }')
            assert.are.equal("127.0.0.1:9876", c.namesrvAddr)
            assert.are.same({}, w)
            c = load_text('return { role = "standalone" }', { "namesrvListenPort=19876" })
            assert.are.equal("127.0.0.1:19876", c.namesrvAddr)
            c = load_text('return { role = "standalone", namesrvListenPort = 0, listenPort = 0 }')
            assert.is_nil(c.namesrvAddr)
            assert.are.equal(0, c.haListenPort)
            c = load_text('return { role = "standalone", namesrvAddr = "10.0.0.1:9876" }')
            assert.are.equal("10.0.0.1:9876", c.namesrvAddr)
        end)

        it("gives standalone the keys of both roles", function()
            local c = assert(load_text('return { role = "standalone" }'))
            assert.is_string(c.kvConfigPath)
            assert.is_string(c.brokerName)
            assert.are.same({ namesrv = {}, broker = {} }, c.processors)
        end)

        it("accepts an integral float for an integer key", function()
            local c = assert(load_text('return { role = "namesrv", listenPort = 9877.0 }'))
            assert.are.equal("integer", math.type(c.listenPort))
            assert.are.equal(9877, c.listenPort)
        end)

        it("loads every shipped conf without a warning", function()
            for _, name in ipairs({ "namesrv", "broker-a", "broker-a-s", "broker-b", "standalone" }) do
                local c, w = conf.load("conf/" .. name .. ".lua")
                assert.is_table(c, name .. ": " .. tostring(w))
                assert.are.same({}, w)
            end
            local s = conf.load("conf/broker-a-s.lua")
            assert.are.equal("SLAVE", s.brokerRole)
            assert.are.equal(1, s.brokerId)
            assert.are.equal(11912, s.haListenPort)
        end)
    end)

    describe("unknown keys", function()
        it("suggests the closest declared key", function()
            local msg = load_error('return { role = "namesrv", listenPrt = 1 }')
            assert.are.equal("unknown key 'listenPrt' (did you mean 'listenPort'?)", msg)
        end)

        it("suggests across case", function()
            local msg = load_error('return { role = "broker", brokerclustername = "x" }')
            assert.are.equal("unknown key 'brokerclustername' (did you mean 'brokerClusterName'?)", msg)
        end)

        it("suggests nothing when nothing is close", function()
            local msg = load_error('return { role = "namesrv", frobnicate = 1 }')
            assert.are.equal("unknown key 'frobnicate'", msg)
        end)

        it("rejects keys that are not names", function()
            local msg = load_error('return { role = "namesrv", 42 }')
            assert.truthy(msg:find("key integer 1 is not a name", 1, true), msg)
        end)
    end)

    describe("overrides", function()
        local base = 'return { role = "broker", namesrvAddr = "h:1", listenPort = 10911 }'

        it("coerces integers, booleans and strings, and wins over the file", function()
            local c = assert(load_text(base, {
                "listenPort=10921", "autoCreateTopicEnable=false", "slaveReadEnable=TRUE",
                "--brokerName=broker-x", "deleteWhen=04;16",
            }))
            assert.are.equal(10921, c.listenPort)
            assert.are.equal("integer", math.type(c.listenPort))
            assert.are.equal(10922, c.haListenPort)
            assert.is_false(c.autoCreateTopicEnable)
            assert.is_true(c.slaveReadEnable)
            assert.are.equal("broker-x", c.brokerName)
            assert.are.equal("04;16", c.deleteWhen)
        end)

        it("keeps '=' inside a value", function()
            local c = assert(load_text('return { role = "namesrv" }', { "configBlackList=a=b" }))
            assert.are.equal("a=b", c.configBlackList)
        end)

        it("rejects an unknown key with a suggestion", function()
            local msg = load_error(base, { "listenPrt=1" })
            assert.are.equal("override 'listenPrt=1': unknown key 'listenPrt' (did you mean 'listenPort'?)", msg)
        end)

        it("rejects an override without '='", function()
            local msg = load_error(base, { "--listenPort" })
            assert.are.equal("override '--listenPort': expected KEY=VALUE", msg)
        end)

        it("parses integers strictly", function()
            for _, bad in ipairs({ "abc", "10911.5", "1e3", "", "0x10", "99999999999999999999" }) do
                local msg = load_error(base, { "listenPort=" .. bad })
                assert.truthy(msg:find("key 'listenPort' must be an integer", 1, true), msg)
            end
            local msg = load_error(base, { "listenPort=abc" })
            assert.are.equal("override 'listenPort=abc': key 'listenPort' must be an integer, got string \"abc\"", msg)
        end)

        it("accepts only true and false for booleans", function()
            local msg = load_error(base, { "aclEnable=yes" })
            assert.are.equal("override 'aclEnable=yes': key 'aclEnable' must be a boolean, got string \"yes\"", msg)
        end)

        it("still checks ranges and enums after coercion", function()
            local msg = load_error(base, { "listenPort=70000" })
            assert.are.equal("key 'listenPort' must be between 0 and 65535, got 70000", msg)
            msg = load_error(base, { "brokerRole=master" })
            assert.truthy(msg:find("key 'brokerRole' must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE", 1, true), msg)
        end)

        it("cannot set a table key", function()
            local msg = load_error(base, { "processors=x" })
            assert.truthy(msg:find("cannot be set from text", 1, true), msg)
        end)

        it("may supply the role", function()
            local c = assert(load_text("return {}", { "role=namesrv" }))
            assert.are.equal("namesrv", c.role)
        end)
    end)

    describe("wrong values", function()
        it("names the key, the type wanted and the value got", function()
            local msg = load_error('return { role = "namesrv", listenPort = "abc" }')
            assert.are.equal("key 'listenPort' must be an integer, got string \"abc\"", msg)
            msg = load_error('return { role = "broker", autoCreateTopicEnable = "true" }')
            assert.are.equal("key 'autoCreateTopicEnable' must be a boolean, got string \"true\"", msg)
            msg = load_error('return { role = "broker", brokerName = 7 }')
            assert.are.equal("key 'brokerName' must be a string, got integer 7", msg)
            msg = load_error('return { role = "namesrv", listenPort = 1.5 }')
            assert.are.equal("key 'listenPort' must be an integer, got number 1.5", msg)
            msg = load_error('return { role = "broker", slaveReadPolicy = 3 }')
            assert.are.equal("key 'slaveReadPolicy' must be a module name (string) or a function, got integer 3", msg)
        end)

        it("rejects bad enum values", function()
            local msg = load_error('return { role = "broker", flushDiskType = "SYNC" }')
            assert.are.equal("key 'flushDiskType' must be one of ASYNC_FLUSH, SYNC_FLUSH, got string \"SYNC\"", msg)
            msg = load_error('return { role = "broker", brokerRole = "slave" }')
            assert.are.equal(
                "key 'brokerRole' must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE, got string \"slave\" (did you mean 'SLAVE'?)",
                msg)
            msg = load_error('return { role = "namesrv", logLevel = "verbose" }')
            assert.truthy(msg:find("key 'logLevel' must be one of debug, info, warn, error", 1, true), msg)
            msg = load_error('return { role = "nameserver" }')
            assert.are.equal(
                "key 'role' must be one of namesrv, broker, standalone, controller, proxy, got string \"nameserver\"", msg)
        end)

        it("requires a role", function()
            local msg = load_error('return { listenPort = 1 }')
            assert.are.equal("missing key 'role' (one of namesrv, broker, standalone, controller)", msg)
        end)

        it("a controller needs etcdEndpoints as http://IP:PORT URLs and takes no broker keys", function()
            local msg = load_error('return { role = "controller" }')
            assert.truthy(msg:find("role controller needs key 'etcdEndpoints'", 1, true), msg)
            msg = load_error('return { role = "controller", etcdEndpoints = "127.0.0.1:2379" }')
            assert.truthy(msg:find("etcd client URLs", 1, true), msg)
            local c = load_text('return { role = "controller", etcdEndpoints = "http://127.0.0.1:2379;http://10.0.0.2:2379" }')
            assert.are.equal(19876, c.listenPort)
            assert.are.equal("rmq.policy.elect", c.electPolicy)
            assert.is_nil(c.brokerName)
            local _, w = load_text('return { role = "controller", etcdEndpoints = "http://127.0.0.1:2379",'
                .. ' brokerName = "x" }')
            assert.truthy(has(w, "key 'brokerName' has no effect for role controller"), table.concat(w, "\n"))
        end)

        it("enableControllerInNamesrv: a namesrv conf takes the controller's keys, its port, one worker", function()
            local c, w = load_text('return { role = "namesrv", enableControllerInNamesrv = true,'
                .. ' etcdEndpoints = "http://127.0.0.1:2379", enableElectUncleanMaster = true, workers = 4 }')
            assert.are.equal(9877, c.controllerListenPort)     -- listenPort + 1, as 5.x's example
            assert.are.equal("http://127.0.0.1:2379", c.etcdEndpoints)
            assert.are.equal("/rmq/controller", c.etcdKeyPrefix)
            assert.is_true(c.enableElectUncleanMaster)
            assert.are.equal(1, c.workers)
            assert.truthy(has(w, "workers 4 ignored: a controller runs one worker"), table.concat(w, "\n"))
            c = load_text('return { role = "namesrv", listenPort = 0, enableControllerInNamesrv = true,'
                .. ' etcdEndpoints = "http://127.0.0.1:2379" }')
            assert.are.equal(0, c.controllerListenPort)
            -- etcd is required; the controller needs a port of its own.
            local msg = load_error('return { role = "namesrv", enableControllerInNamesrv = true }')
            assert.truthy(msg:find("enableControllerInNamesrv needs key 'etcdEndpoints'", 1, true), msg)
            msg = load_error('return { role = "namesrv", enableControllerInNamesrv = true, controllerListenPort = 9876,'
                .. ' etcdEndpoints = "http://127.0.0.1:2379" }')
            assert.truthy(msg:find("key 'controllerListenPort' 9876 is the NameServer's listenPort", 1, true), msg)
            msg = load_error('return { role = "standalone", enableControllerInNamesrv = true,'
                .. ' etcdEndpoints = "http://127.0.0.1:2379" }')
            assert.truthy(msg:find("key 'enableControllerInNamesrv' = true needs role namesrv", 1, true), msg)
            -- Without the switch the controller's keys do nothing, and say so.
            c, w = load_text('return { role = "namesrv", etcdEndpoints = "http://127.0.0.1:2379", workers = 2 }')
            assert.are.equal(2, c.workers)
            assert.truthy(has(w, "key 'etcdEndpoints' has no effect without enableControllerInNamesrv = true"),
                table.concat(w, "\n"))
            assert.is_table((load_text('return { role = "namesrv", enableControllerInNamesrv = false }')))
            -- A broker still takes none of them.
            local _, wb = load_text('return { role = "broker", etcdEndpoints = "http://127.0.0.1:2379" }')
            assert.truthy(has(wb, "key 'etcdEndpoints' has no effect for role broker"), table.concat(wb, "\n"))
        end)

        it("checks the shape of structured strings", function()
            local msg = load_error('return { role = "broker", namesrvAddr = "localhost" }')
            assert.truthy(msg:find("key 'namesrvAddr' must be host:port entries separated by ';'", 1, true), msg)
            assert.is_table((load_text('return { role = "broker", namesrvAddr = "a:1;b:2" }')))
            msg = load_error('return { role = "broker", namesrvAddr = "h:1", deleteWhen = "4am" }')
            assert.truthy(msg:find("key 'deleteWhen' must be hours 00-23", 1, true), msg)
            msg = load_error('return { role = "broker", namesrvAddr = "h:1", messageDelayLevel = "1x" }')
            assert.truthy(msg:find("key 'messageDelayLevel' must be space-separated durations", 1, true), msg)
        end)

        it("applies RocketMQ's brokerId rules", function()
            local msg = load_error('return { role = "broker", namesrvAddr = "h:1", brokerRole = "SLAVE" }')
            assert.are.equal("brokerRole SLAVE needs brokerId > 0 (0 is the master's id)", msg)
            local c, w = load_text('return { role = "broker", namesrvAddr = "h:1", brokerId = 2 }')
            assert.are.equal(0, c.brokerId)
            assert.is_true(has(w, "brokerId 2 ignored"))
        end)

        it("says when a derived default is out of range", function()
            local msg = load_error('return { role = "broker", namesrvAddr = "h:1", listenPort = 65535 }')
            assert.are.equal("key 'haListenPort' must be between 0 and 65535, got 65536"
                .. " (its default, derived from other keys: set it explicitly)", msg)
        end)

        it("refuses colliding standalone ports", function()
            local msg = load_error('return { role = "standalone", namesrvListenPort = 10909 }')
            assert.truthy(msg:find("key 'namesrvListenPort' 10909 collides", 1, true), msg)
        end)
    end)

    describe("broken files", function()
        it("reports a syntax error with its line", function()
            local msg, path, err = load_error('return {\n  role = "namesrv"\n  listenPort = 1 }')
            assert.truthy(err:find("^" .. path:gsub("%p", "%%%0") .. ":3:"), err)
            assert.is_string(msg)
        end)

        it("reports a RocketMQ properties file fed by mistake", function()
            local _, _, err = load_error("namesrvAddr = 127.0.0.1:9876\n")
            assert.truthy(err:find(":1:", 1, true), err)
        end)

        it("reports a runtime error in the conf", function()
            local _, path, err = load_error('local x = nil\nreturn { role = "namesrv" .. x }')
            assert.truthy(err:find(path .. ":2: attempt to concatenate", 1, true), err)
        end)

        it("requires a returned table", function()
            local msg = load_error("return 42")
            assert.are.equal("must return a table, got integer 42", msg)
            msg = load_error('role = "namesrv"\nlistenPort = 9876\n')
            assert.are.equal(
                "must return a table, got nil (it sets globals listenPort, role: put them in `return { ... }`)", msg)
        end)

        it("reports a missing file", function()
            local path = tmp.name()
            local c, err = conf.load(path)
            assert.is_nil(c)
            -- "path: No such file or directory", in the C library's words
            assert.are.equal(path .. ": ", err:sub(1, #path + 2))
            assert.is_nil(err:find("\n"))
        end)

        it("runs the file without io, os.execute or the server's globals", function()
            local c, w = load_text([[
                assert(io == nil and os.execute == nil and os.exit == nil and _G == nil)
                assert(type(os.getenv("HOME")) == "string" and string.format("%d", 1) == "1")
                string.format = nil        -- only the conf's copy
                leaked_global = true
                return { role = "namesrv" }
            ]])
            assert.is_table(c, tostring(w))
            assert.is_function(string.format)
            assert.is_nil(rawget(_G, "leaked_global"))
        end)
    end)

    describe("keys rmq does not implement", function()
        local base = 'return { role = "broker", namesrvAddr = "h:1" }'
        local function broker(extra)
            return 'return { role = "broker", namesrvAddr = "h:1", ' .. extra .. ' }'
        end

        -- A value of e's type that is not `off` (or any value for a
        -- tuning key), written as Lua source.
        local function other_value(e, off)
            if e.type == "boolean" then
                return tostring(not off)
            elseif e.type == "integer" then
                return off == 1 and "2" or "1"
            end
            return '"x"'
        end

        it("takes aclEnable (ACL 1.0 is implemented) with its limits' defaults", function()
            local c, w = load_text(broker("aclEnable = true"))
            assert.are.same({}, w)
            assert.is_true(c.aclEnable)
            assert.are.equal(5000, c.aclReloadIntervalMillis)
            assert.are.equal(100000, c.aclMaxAccounts)
            c, w = load_text(base, { "aclEnable=false" })
            assert.are.same({}, w)
            assert.is_false(c.aclEnable)
            local msg = load_error(base, { "aclReloadIntervalMillis=10" })
            assert.truthy(msg:find("aclReloadIntervalMillis", 1, true), msg)
            -- a standalone's own NameServer would refuse its unsigned registrations
            c, w = load_text('return { role = "standalone", aclEnable = true }')
            assert.is_true(c.aclEnable)
            assert.are.equal(1, #w)
            assert.truthy(w[1]:find("aclEnable without accessKey/secretKey: the broker cannot register with its own"
                .. " NameServer", 1, true), w[1])
            local signed, sw = load_text('return { role = "standalone", aclEnable = true, accessKey = "rocketmq2",'
                .. ' secretKey = "12345678" }')
            assert.are.equal("rocketmq2", signed.accessKey)
            assert.are.same({}, sw)
        end)

        it("takes the SQL92 filter switches, checks pullFilters, refuses the address server switch", function()
            local c0 = load_text(broker("enablePropertyFilter = true, filterSupportRetry = true"))
            assert.is_true(c0.enablePropertyFilter)
            assert.is_true(c0.filterSupportRetry)
            assert.are.equal(128, c0.filterExpressionMaxDepth)
            local msg = load_error(broker('pullFilters = { T = 42 }'))
            assert.truthy(msg:find("[T] must be a function", 1, true), msg)
            msg = load_error(broker('pullFilters = { T = "nodot" }'))
            assert.truthy(msg:find("must name a module function", 1, true), msg)
            msg = load_error(broker('pullFilters = { T = { fn = "m.f", body = 1 } }'))
            assert.truthy(msg:find("[T].body must be a boolean", 1, true), msg)
            msg = load_error(base, { "fetchNamesrvAddrByAddressServer=true" })
            assert.are.equal("key 'fetchNamesrvAddrByAddressServer' = true is not supported: rmq has no address"
                .. " server client (set namesrvAddr); remove it or set false", msg)
            local c, w = load_text(broker("enablePropertyFilter = false, filterSupportRetry = false,"
                .. " fetchNamesrvAddrByAddressServer = false"))
            assert.are.same({}, w)
            assert.is_false(c.enablePropertyFilter)
        end)

        it("takes every brokerRole (SYNC_MASTER since HA replication exists)", function()
            for _, role in ipairs({ "ASYNC_MASTER", "SYNC_MASTER" }) do
                local c, w = load_text(broker(('brokerRole = "%s"'):format(role)))
                assert.are.same({}, w)
                assert.are.equal(role, c.brokerRole)
            end
            local c, w = load_text(broker('brokerRole = "SLAVE", brokerId = 1'))
            assert.are.same({}, w)
            assert.are.equal("SLAVE", c.brokerRole)
            c = assert(load_text('return { role = "standalone", brokerRole = "SYNC_MASTER" }'))
            assert.are.equal("SYNC_MASTER", c.brokerRole)
            local msg = load_error(broker('brokerRole = "MASTER"'))
            assert.truthy(msg:find("brokerRole", 1, true), msg)
        end)

        it("refuses every feature switch rmq lacks when on, and takes it silently when off", function()
            local n = 0
            for _, entry in ipairs(conf.schema) do
                local e = conf.describe(entry.name)
                if e.ignored and e.refuse then
                    -- its doc names the one value accepted
                    local off = ({ ["false"] = false, ["0"] = 0, ['""'] = "" })[e.doc:match(": only (.+)$")]
                    assert.is_not_nil(off, e.name .. ": " .. e.doc)
                    local off_src = type(off) == "string" and '""' or tostring(off)
                    local c, w = load_text(broker(e.name .. " = " .. off_src))
                    assert.is_table(c, e.name .. ": " .. tostring(w))
                    assert.are.same({}, w, e.name)
                    assert.are.equal(off, c[e.name])
                    local bad = other_value(e, off)
                    local msg = load_error(broker(e.name .. " = " .. bad))
                    assert.truthy(msg:find(("key '%s' = %s is not supported: "):format(e.name, bad), 1, true), msg)
                    assert.truthy(msg:find("; remove it or set " .. off_src, 1, true), msg)
                    n = n + 1
                end
            end
            assert.is_true(n >= 14, "feature switches found: " .. n)
            -- the ones a migrated broker.conf most often carries (brokerFastFailureEnable is a real key now)
            local c, w = load_text(broker("transientStorePoolEnable = false, enableDLegerCommitLog = false,"
                .. " brokerFastFailureEnable = false, filterServerNums = 0"))
            assert.are.same({}, w)
            assert.is_false(c.transientStorePoolEnable)
            local msg = load_error(broker("enableDLegerCommitLog = true"))
            assert.are.equal("key 'enableDLegerCommitLog' = true is not supported: rmq has no DLedger commit log;"
                .. " remove it or set false", msg)
            -- transientStorePoolEnable is served (staged appends, on by default), its pool size not
            c = assert(load_text(base, { "transientStorePoolEnable=true" }))
            assert.is_true(c.transientStorePoolEnable)
            assert.is_true(assert(load_text(base)).transientStorePoolEnable)
            msg = load_error(base, { "transientStorePoolSize=5" })
            assert.truthy(msg:find("key 'transientStorePoolSize' = 5 has no effect in rmq", 1, true), msg)
            assert.truthy(msg:find("commitLogStagingBytes", 1, true), msg)
        end)

        it("refuses Java tuning keys whatever their value, saying what to use instead", function()
            local msg = load_error('return { role = "namesrv", serverWorkerThreads = 8 }')
            assert.are.equal("key 'serverWorkerThreads' = 8 has no effect in rmq; remove it"
                .. " (rmq sizes its loops with `workers`)", msg)
            msg = load_error(base, { "sendMessageThreadPoolNums=16" })
            assert.are.equal("key 'sendMessageThreadPoolNums' = 16 has no effect in rmq; remove it"
                .. " (rmq serves requests on its `workers` loops, with no thread pools or queues)", msg)
            msg = load_error(broker("useEpollNativeSelector = false"))
            assert.truthy(msg:find("key 'useEpollNativeSelector' = false has no effect in rmq; remove it (", 1, true), msg)
            local n = 0
            for _, entry in ipairs(conf.schema) do
                local e = conf.describe(entry.name)
                if e.noeffect then
                    assert.is_true(e.ignored, e.name)
                    local role = e.roles.namesrv and "namesrv" or "broker"
                    local v = other_value(e, nil)
                    msg = load_error(('return { role = %q, namesrvAddr = "h:1", %s = %s }'):format(role, e.name, v))
                    assert.are.equal(("key '%s' = %s has no effect in rmq; remove it (%s)"):format(e.name, v, e.noeffect), msg)
                    n = n + 1
                end
            end
            assert.is_true(n >= 60, "tuning keys found: " .. n)
        end)

        it("takes 4.9.8's tls.* keys and refuses the other tls keys with the list", function()
            local msg = load_error('return { role = "namesrv", tlsEnable = true }')
            assert.truthy(msg:find("key 'tlsEnable' = true is not supported: rmq's TLS keys are tls.server.mode,", 1, true), msg)
            assert.truthy(msg:find("(did you mean 'tls.enable'?); remove it", 1, true), msg)
            msg = load_error('return { role = "standalone", tlsTestModeEnable = false }')
            assert.truthy(msg:find("key 'tlsTestModeEnable' = false is not supported", 1, true), msg)
            msg = load_error(base, { "tls.config.file=/etc/rocketmq/tls.properties" })
            assert.truthy(msg:find("rmq reads no tls.properties: put its keys in the conf", 1, true), msg)
            msg = load_error(base, { "tlsEnable=true" })
            assert.truthy(msg:find("key 'tlsEnable' = true is not supported", 1, true), msg)
            -- Declared keys: defaults as 4.9.8 (permissive, no client auth),
            -- and no TLS at all without a certificate.
            local c = assert(load_text(base))
            assert.are.equal("permissive", c["tls.server.mode"])
            assert.are.equal("none", c["tls.server.need.client.auth"])
            assert.is_false(c["tls.enable"])
            assert.is_nil(c["tls.server.certPath"])
            c = assert(load_text(broker('["tls.server.mode"] = "enforcing", ["tls.server.certPath"] = "/c.pem",'
                .. ' ["tls.server.keyPath"] = "/k.pem", ["tls.enable"] = true')))
            assert.are.equal("enforcing", c["tls.server.mode"])
            assert.is_true(c["tls.enable"])
            -- Settings that cannot work are refused with why.
            msg = load_error(broker('["tls.server.mode"] = "enforcing"'))
            assert.truthy(msg:find("'tls.server.mode' = \"enforcing\" needs tls.server.certPath", 1, true), msg)
            msg = load_error(broker('["tls.server.mode"] = "strict"'))
            assert.truthy(msg:find("must be one of disabled, permissive, enforcing", 1, true), msg)
            msg = load_error(broker('["tls.server.certPath"] = "/c.pem"'))
            assert.truthy(msg:find("go together", 1, true), msg)
            msg = load_error(broker('["tls.server.certPath"] = "/c.pem", ["tls.server.keyPath"] = "/k.pem",'
                .. ' ["tls.server.authClient"] = true'))
            assert.truthy(msg:find("never asks for one", 1, true), msg)
            msg = load_error(base, { "tls.test.mode.enable=true" })
            assert.truthy(msg:find("rmq does not generate a self-signed certificate", 1, true), msg)
            assert(load_text(base, { "tls.test.mode.enable=false" }))
        end)

        it("declares regionId and traceOn, which SEND_MESSAGE replies carry", function()
            local c = assert(load_text(base))
            assert.are.equal("DefaultRegion", c.regionId)
            assert.is_true(c.traceOn)
            c = assert(load_text(broker('regionId = "eu-1", traceOn = false')))
            assert.are.equal("eu-1", c.regionId)
            assert.is_false(c.traceOn)
        end)

        it("tells run-time updates what they may not switch on", function()
            assert.is_nil(conf.refusal("fetchNamesrvAddrByAddressServer", false))
            assert.are.equal("key 'fetchNamesrvAddrByAddressServer' = true is not supported: rmq has no address"
                .. " server client (set namesrvAddr); remove it or set false",
                conf.refusal("fetchNamesrvAddrByAddressServer", true))
            assert.is_nil(conf.refusal("brokerRole", "SYNC_MASTER"))
            assert.is_nil(conf.refusal("brokerRole", "SLAVE"))
            assert.is_nil(conf.refusal("brokerPermission", 4))
            assert.truthy(conf.refusal("tlsEnable", true))
            assert.truthy(conf.refusal("tls.test.mode.enable", true))
            assert.is_nil(conf.refusal("tls.server.mode", "enforcing"))
            assert.truthy(conf.refusal("serverWorkerThreads", 4))
            assert.is_nil(conf.refusal("noSuchKey", 1))
        end)

        it("still type-checks them first", function()
            local msg = load_error('return { role = "broker", sendMessageThreadPoolNums = "many" }')
            assert.are.equal("key 'sendMessageThreadPoolNums' must be an integer, got string \"many\"", msg)
            msg = load_error('return { role = "broker", aclEnable = "yes" }')
            assert.are.equal("key 'aclEnable' must be a boolean, got string \"yes\"", msg)
        end)
    end)

    describe("warnings", function()
        it("warns about keys of another role and drops them", function()
            local c, w, path = load_text('return { role = "namesrv", brokerName = "broker-a" }')
            assert.are.same({ path .. ": key 'brokerName' has no effect for role namesrv" }, w)
            assert.is_nil(c.brokerName)
        end)
    end)

    describe("processors", function()
        local function h() end

        it("takes a flat table for one role, by number or request name", function()
            local path = write('return { role = "broker", namesrvAddr = "h:1" }')
            local c = assert(conf.load(path))
            assert.are.same({ broker = {} }, c.processors)
            -- a processors table can only come from the file; build one here
            local f = assert(io.open(path, "w"))
            f:write([[
                local function h() end
                return { role = "broker", namesrvAddr = "h:1",
                         processors = { [310] = h, SEND_MESSAGE = { run = h, need = { "topic" } },
                                        PULL_MESSAGE = false } }
            ]])
            f:close()
            c = assert(conf.load(path))
            assert.is_function(c.processors.broker[310])
            assert.is_function(c.processors.broker[codes.SEND_MESSAGE].run)
            assert.is_false(c.processors.broker[codes.PULL_MESSAGE])
            assert.is_nil(c.processors.broker.SEND_MESSAGE)
        end)

        it("takes sections, and requires them for standalone", function()
            local c = assert(load_text([[
                return { role = "standalone",
                         processors = { namesrv = { GET_ROUTEINFO_BY_TOPIC = function() end } } }
            ]]))
            assert.is_function(c.processors.namesrv[105])
            assert.are.same({}, c.processors.broker)
            local msg = load_error([[
                return { role = "standalone", processors = { [105] = function() end } }
            ]])
            assert.truthy(msg:find("a standalone conf must use sections", 1, true), msg)
            local w
            c, w = load_text([[
                return { role = "namesrv", processors = { broker = { [10] = function() end } } }
            ]])
            assert.are.same({ namesrv = {} }, c.processors)
            assert.is_true(has(w, "processors.broker has no effect for role namesrv"))
        end)

        it("rejects bad handlers and unknown code names", function()
            local msg = load_error('return { role = "namesrv", processors = { [105] = "x" } }')
            assert.are.equal(
                "processors[105] must be a function, a table with a run function, or false, got string \"x\"", msg)
            msg = load_error('return { role = "broker", processors = { SEND_MESAGE = function() end } }')
            assert.are.equal(
                "processors: unknown request code name 'SEND_MESAGE' (did you mean 'SEND_MESSAGE'?)", msg)
            msg = load_error('return { role = "broker", processors = { [10] = function() end, SEND_MESSAGE = function() end } }')
            assert.are.equal("processors: request code 10 is given twice", msg)
            assert.is_function(h)
        end)
    end)

    describe("helpers", function()
        it("describes a key", function()
            local e = conf.describe("listenPort")
            assert.are.equal("integer", e.type)
            assert.are.equal(9876, e.default_by_role.namesrv)
            assert.is_string(e.doc)
            assert.is_nil(conf.describe("nope"))
            assert.is_true(conf.describe("serverWorkerThreads").ignored)
            assert.is_string(conf.describe("serverWorkerThreads").noeffect)
        end)

        it("lists the keys of a role, sorted, without ignored ones", function()
            local ns = conf.keys_for_role("namesrv")
            local sorted = { table.unpack(ns) }
            table.sort(sorted)
            assert.are.same(sorted, ns)
            local set = {}
            for _, k in ipairs(ns) do set[k] = true end
            assert.is_true(set.kvConfigPath and set.listenPort and set.role)
            assert.is_nil(set.brokerName)
            assert.is_nil(set.namesrvListenPort)
            assert.is_nil(set.serverWorkerThreads)
            local sa = {}
            for _, k in ipairs(conf.keys_for_role("standalone")) do sa[k] = true end
            assert.is_true(sa.kvConfigPath and sa.brokerName and sa.namesrvListenPort)
            assert.has_error(function() conf.keys_for_role("nameserver") end)
        end)

        it("coerces text for a key", function()
            assert.are.equal(5, conf.coerce("brokerId", " 5 "))
            assert.is_false(conf.coerce("slaveReadEnable", "False"))
            local v, err = conf.coerce("brokerIdd", "1")
            assert.is_nil(v)
            assert.are.equal("unknown key 'brokerIdd' (did you mean 'brokerId'?)", err)
        end)

        it("raises on misuse", function()
            assert.has_error(function() conf.load(nil) end)
            assert.has_error(function() conf.load("x", "listenPort=1") end)
            assert.has_error(function() conf.load("x", { 1 }) end)
        end)
    end)
end)
