-- The admin plane is safe by default, with ACL off: UPDATE_BROKER_CONFIG
-- (25) and UPDATE_NAMESRV_CONFIG (318) change only an allow-list of keys,
-- each within a range (rmq.broker.admin LIVE, rmq.namesrv.processor
-- LIVE).  A path, a module to load, an out-of-range timeout or period,
-- brokerPermission outside 2/4/6, brokerChannelExpiredTime at the
-- NameServer: each is refused with a reply naming the key, nothing
-- changes, and the servers keep serving.  The bodies are what mqadmin
-- sends (MixAll.properties2String: "key=value\n" per entry, no header).
local net = require("rmq.net")
local codes = require("rmq.codes")
local server = require("support.server")
local rq = require("support.requests")
local admin = require("support.admin")
local ns = require("support.nsclient")
local prom = require("support.prom")

local req, R = codes.request, codes.response

-- MixAll.properties2String of a list of {key, value}.
local function props(list)
    local out = {}
    for _, kv in ipairs(list) do
        out[#out + 1] = kv[1] .. "=" .. kv[2] .. "\n"
    end
    return table.concat(out)
end

local function update(addr, code, list)
    return assert(net.call(addr, { code = code, body = props(list) }, 10000))
end

local function config(addr, code)
    local r = assert(net.call(addr, { code = code }, 10000))
    assert.equal(R.SUCCESS, r.code)
    local t = {}
    for k, v in r.body:gmatch("([^\n=]+)=([^\n]*)\n") do
        t[k] = v
    end
    return t
end

describe("the admin plane with ACL off", function()
    local n, b, nc
    local store = server.tmpdir() .. "/store"

    setup(function()
        -- A quick scan: brokerChannelExpiredTime = 1 would drop the
        -- broker within 100 ms if it were taken.
        n = server.start({ role = "namesrv", workers = 2, kvConfigPath = server.tmpdir() .. "/kv.json",
                           scanNotActiveBrokerInterval = 100, consolePassword = "namesrv-secret",
                           -- rmq_namesrv_scans_total: a signal per scan
                           metricsExporterType = "PROM", metricsPromExporterPort = 0 })
        b = server.start({
            role = "broker", workers = 2, brokerName = "broker-safe",
            storePathRootDir = store, mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = n.addr, autoCreateTopicEnable = false,
        })
        nc = assert(net.connect(n.addr))
        admin.create_topic(b.addr, "SafeTopic", 2)
        assert.truthy(server.eventually(function()
            local route = ns.route(nc, "SafeTopic")
            return route and ns.queue(route, "broker-safe")
        end, 10000))
    end)

    teardown(function()
        if nc then nc:close() end
        if b then assert.equal(0, b:stop()) end
        if n then assert.equal(0, n:stop()) end
    end)

    local function send_ok(body)
        local code, out = server.rmq(("send -n %s -t SafeTopic %q"):format(n.addr, body))
        assert.equal(0, code, out)
    end

    describe("UPDATE_BROKER_CONFIG", function()
        it("refuses each class of dangerous key, naming it, and changes nothing", function()
            local before = config(b.addr, req.GET_BROKER_CONFIG)
            for _, c in ipairs({
                -- paths
                { "storePathRootDir", "/tmp/evil", "key 'storePathRootDir' cannot be changed while rmq runs" },
                { "storePathCommitLog", "/tmp/evil/commitlog", "key 'storePathCommitLog' cannot be changed" },
                { "logFile", "/tmp/evil.log", "key 'logFile' cannot be changed" },
                { "rocketmqHome", "/tmp", "key 'rocketmqHome' cannot be changed" },
                -- code to load
                { "slaveReadPolicy", "os", "key 'slaveReadPolicy': a remote update may name only rmq.policy.*" },
                { "slaveReadPolicy", "rmq.policy.no_such_policy",
                  "key 'slaveReadPolicy': no policy module rmq.policy.no_such_policy" },
                { "pullFilters", "os.execute", "key 'pullFilters'" },
                { "processors", "x", "key 'processors'" },
                -- out-of-range periods and timeouts
                { "registerNameServerPeriod", "1",
                  "key 'registerNameServerPeriod' may be changed live only within 10000..60000, got 1" },
                { "registerNameServerPeriod", "86400000", "key 'registerNameServerPeriod' may be changed live only" },
                { "registerBrokerTimeoutMills", "1",
                  "key 'registerBrokerTimeoutMills' may be changed live only within 1000..60000, got 1" },
                -- permissions outside read/write
                { "brokerPermission", "0", "key 'brokerPermission' may be changed live only to 2, 4 or 6, got 0" },
                { "brokerPermission", "7", "key 'brokerPermission' may be changed live only to 2, 4 or 6, got 7" },
                { "brokerPermission", "99", "key 'brokerPermission' must be <= 15, got 99" },
                -- listeners, limits, the console and its secret
                { "listenPort", "1", "key 'listenPort' cannot be changed" },
                { "bindAddress", "0.0.0.0", "key 'bindAddress' cannot be changed" },
                { "maxMessageSize", "1", "key 'maxMessageSize' cannot be changed" },
                { "console", "0.0.0.0:7000", "key 'console' cannot be changed" },
                { "consolePassword", "x", "key 'consolePassword' cannot be changed" },
                { "autoCreateTopicEnable", "true", "key 'autoCreateTopicEnable' cannot be changed" },
            }) do
                local r = update(b.addr, req.UPDATE_BROKER_CONFIG, { { c[1], c[2] } })
                assert.equal(R.SYSTEM_ERROR, r.code, c[1] .. "=" .. c[2])
                assert.equal(c[3], r.remark:sub(1, #c[3]), c[1] .. "=" .. c[2])
                assert.is_nil(r.remark:find("%.lua"), r.remark)   -- no server path
            end
            -- All or nothing: an allowed key beside a refused one is not taken.
            local r = update(b.addr, req.UPDATE_BROKER_CONFIG,
                             { { "forceRegister", "false" }, { "storePathRootDir", "/tmp/evil" } })
            assert.equal(R.SYSTEM_ERROR, r.code)
            assert.same(before, config(b.addr, req.GET_BROKER_CONFIG))
            -- Still serving: the store it had, sends and route.
            send_ok("after the refusals")
            assert.equal(6, ns.queue(ns.route(nc, "SafeTopic"), "broker-safe").perm)
            local log = b:log()
            assert.matches("UPDATE_BROKER_CONFIG", log, 1, true)
            assert.matches("refused: key 'storePathRootDir'", log, 1, true)
            assert.is_nil(log:find("= /tmp/evil", 1, true))
        end)

        it("takes the allowed keys within their range", function()
            for _, c in ipairs({
                { "forceRegister", "false" }, { "compressedRegister", "true" },
                { "registerNameServerPeriod", "20000" }, { "registerBrokerTimeoutMills", "3000" },
                { "topicQueueNumsMax", "64" }, { "enablePropertyFilter", "true" },
                { "slaveReadEnable", "true" }, { "slaveReadPolicy", "rmq.policy.slave_read_lag" },
            }) do
                local r = update(b.addr, req.UPDATE_BROKER_CONFIG, { c })
                assert.equal(R.SUCCESS, r.code, c[1] .. ": " .. tostring(r.remark))
                assert.equal(c[2], config(b.addr, req.GET_BROKER_CONFIG)[c[1]], c[1])
            end
            -- An unchanged value of any key is no change.
            assert.equal(R.SUCCESS, update(b.addr, req.UPDATE_BROKER_CONFIG,
                                           { { "storePathRootDir", store } }).code)
            -- brokerPermission 4 stops sends (the route says so at once), 6 restores.
            assert.equal(R.SUCCESS, update(b.addr, req.UPDATE_BROKER_CONFIG, { { "brokerPermission", "4" } }).code)
            assert.equal(4, ns.queue(ns.route(nc, "SafeTopic"), "broker-safe").perm)
            assert.equal(R.SUCCESS, update(b.addr, req.UPDATE_BROKER_CONFIG, { { "brokerPermission", "6" } }).code)
            assert.equal(6, ns.queue(ns.route(nc, "SafeTopic"), "broker-safe").perm)
            update(b.addr, req.UPDATE_BROKER_CONFIG, { { "forceRegister", "true" }, { "compressedRegister", "false" },
                                                      { "registerNameServerPeriod", "30000" } })
            send_ok("after the changes")
        end)

        it("answers mqadmin-style updateBrokerConfig with a line naming the key", function()
            local code, out = server.rmq(("admin updateBrokerConfig -b %s -k storePathRootDir -v /tmp/evil")
                :format(b.addr))
            assert.equal(1, code, out)
            assert.matches("refused UPDATE_BROKER_CONFIG: SYSTEM_ERROR %(code 1%): key 'storePathRootDir'", out)
        end)
    end)

    describe("UPDATE_NAMESRV_CONFIG", function()
        it("refuses brokerChannelExpiredTime=1 and keeps the routes", function()
            local r = update(n.addr, req.UPDATE_NAMESRV_CONFIG, { { "brokerChannelExpiredTime", "1" } })
            assert.equal(R.SYSTEM_ERROR, r.code)
            assert.matches("^key 'brokerChannelExpiredTime' cannot be changed while rmq runs", r.remark)
            assert.equal("120000", config(n.addr, req.GET_NAMESRV_CONFIG).brokerChannelExpiredTime)
            -- Several scans later the broker is still routed.
            local function scans()
                return prom.value(prom.scrape(n.metrics_addr), "rmq_namesrv_scans_total") or 0
            end
            local after = scans() + 3
            assert.truthy(server.eventually(function() return scans() >= after end, 30000))
            assert.truthy(ns.queue(assert(ns.route(nc, "SafeTopic")), "broker-safe"))
            assert.is_nil(n:log():find("expired", 1, true))
        end)

        it("refuses paths, listeners, the console and out-of-range periods, naming the key", function()
            local before = config(n.addr, req.GET_NAMESRV_CONFIG)
            for _, c in ipairs({
                { "logFile", "/tmp/evil.log", R.SYSTEM_ERROR, "key 'logFile' cannot be changed while rmq runs" },
                { "rocketmqHome", "/tmp", R.SYSTEM_ERROR, "key 'rocketmqHome' cannot be changed" },
                { "kvConfigPath", "/tmp/evil.json", R.NO_PERMISSION, "Can not update config in black list." },
                { "listenPort", "1", R.SYSTEM_ERROR, "key 'listenPort' cannot be changed" },
                { "console", "0.0.0.0:7000", R.SYSTEM_ERROR, "key 'console' cannot be changed" },
                { "consolePassword", "namesrv-secret", R.SYSTEM_ERROR, "key 'consolePassword' cannot be changed" },
                { "registerBodyMaxInflatedSize", "1073741824", R.SYSTEM_ERROR,
                  "key 'registerBodyMaxInflatedSize' cannot be changed" },
                { "scanNotActiveBrokerInterval", "1", R.SYSTEM_ERROR,
                  "key 'scanNotActiveBrokerInterval' may be changed live only within 1000..60000, got 1" },
            }) do
                local r = update(n.addr, req.UPDATE_NAMESRV_CONFIG, { { c[1], c[2] } })
                assert.equal(c[3], r.code, c[1])
                assert.equal(c[4], r.remark:sub(1, #c[4]), c[1])
            end
            assert.same(before, config(n.addr, req.GET_NAMESRV_CONFIG))
            -- The password is never shown.
            assert.is_nil(before.consolePassword)
            assert.truthy(ns.route(nc, "SafeTopic"))
        end)

        it("takes the allowed keys, and ignores unknown ones as 4.9.8 does", function()
            local r = update(n.addr, req.UPDATE_NAMESRV_CONFIG,
                             { { "scanNotActiveBrokerInterval", "2000" }, { "orderMessageEnable", "true" },
                               { "noSuchKey", "1" } })
            assert.equal(R.SUCCESS, r.code, r.remark)
            assert.equal("ignored unknown keys: noSuchKey", r.remark)
            local c = config(n.addr, req.GET_NAMESRV_CONFIG)
            assert.equal("2000", c.scanNotActiveBrokerInterval)
            assert.equal("true", c.orderMessageEnable)
            local code, out = server.rmq(("admin updateNamesrvConfig -n %s -k brokerChannelExpiredTime -v 1")
                :format(n.addr))
            assert.equal(1, code, out)
            assert.matches("key 'brokerChannelExpiredTime'", out)
            update(n.addr, req.UPDATE_NAMESRV_CONFIG, { { "orderMessageEnable", "false" } })
        end)
    end)
end)

-- The relay of GET_CONSUMER_RUNNING_INFO (307) to a client: a client that
-- never answers holds at most adminClientCallMaxPendingPerClient waits,
-- and closing it ends them at once; response frames nobody asked for are
-- dropped (one log line per 10 s), not run one Lua task each.
describe("the relay of admin calls to clients", function()
    local cjson = require("cjson")
    local n, b
    local GROUP = "SafeRelayGroup"

    setup(function()
        n = server.start({ role = "namesrv", workers = 1, kvConfigPath = server.tmpdir() .. "/kv.json" })
        b = server.start({
            role = "broker", workers = 2, brokerName = "broker-relay",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = n.addr,
            -- Longer than any wait below: an answer before it was not a timeout.
            adminClientCallTimeoutMillis = 60000, adminClientCallMaxPendingPerClient = 2,
        })
        admin.create_topic(b.addr, "SafeRelayTopic", 1)
    end)

    teardown(function()
        if b then assert.equal(0, b:stop()) end
        if n then assert.equal(0, n:stop()) end
    end)

    local function heartbeat(conn, cid)
        local empty = setmetatable({}, cjson.array_mt)
        local body = cjson.encode({ clientID = cid, producerDataSet = empty, consumerDataSet = { {
            groupName = GROUP, consumeType = "CONSUME_PASSIVELY", messageModel = "CLUSTERING",
            consumeFromWhere = "CONSUME_FROM_LAST_OFFSET", unitMode = false,
            subscriptionDataSet = { { topic = "SafeRelayTopic", subString = "*", tagsSet = empty,
                                      codeSet = empty, subVersion = 1 } } } } })
        assert.equal(R.SUCCESS, assert(conn:call({ code = req.HEART_BEAT, body = body })).code)
    end

    -- A consumer connection; answers 307 unless silent.
    local function client(cid, silent)
        local c = assert(net.connect(b.addr, { on_request = function(_, cmd)
            if silent or cmd.code ~= req.GET_CONSUMER_RUNNING_INFO then
                return nil
            end
            return { code = 0, body = '{"properties":{"me":"' .. cid .. '"}}' }
        end }))
        heartbeat(c, cid)
        return c
    end

    local function running_info(cid, into)
        local c = assert(net.connect(b.addr))
        local r = assert(c:call({ code = req.GET_CONSUMER_RUNNING_INFO,
                                  ext = { consumerGroup = GROUP, clientId = cid } }, 60000))
        c:close()
        if into then
            into[#into + 1] = r
        end
        return r
    end

    it("bounds the waits per client connection and ends them when it closes", function()
        local silent = client("127.0.0.1@silent", true)
        local waiting = {}
        -- Three calls on one connection, which the broker reads in order:
        -- the third is refused because the first two wait (the positive
        -- signal that they do), and they are still unanswered after it.
        local conn = assert(net.connect(b.addr))
        local function info(into)
            local r = assert(conn:call({ code = req.GET_CONSUMER_RUNNING_INFO,
                                         ext = { consumerGroup = GROUP, clientId = "127.0.0.1@silent" } }, 60000))
            if into then
                into[#into + 1] = r
            end
            return r
        end
        for _ = 1, 2 do
            net.spawn(function() info(waiting) end)
        end
        local r = info()
        assert.equal(R.SYSTEM_ERROR, r.code)
        assert.matches("2 calls already wait for this client (adminClientCallMaxPendingPerClient)", r.remark, 1, true)
        assert.equal(0, #waiting)
        -- Another client is served meanwhile.
        local other = client("127.0.0.1@other")
        r = running_info("127.0.0.1@other")
        assert.equal(R.SUCCESS, r.code, r.remark)
        assert.equal('{"properties":{"me":"127.0.0.1@other"}}', r.body)
        -- The silent one goes: its two waits end now, not after 60 s.
        silent:close()
        assert.truthy(server.eventually(function() return #waiting == 2 end, 10000))
        for _, w in ipairs(waiting) do
            assert.equal(R.SYSTEM_ERROR, w.code)
            assert.matches("closed before it answered", w.remark, 1, true)
        end
        conn:close()
        other:close()
    end)

    it("drops response frames no relay waits for, logging them once, and keeps relaying", function()
        local c = assert(net.connect(b.addr))
        local frames = {}
        for i = 1, 2000 do
            local hdr = ('{"code":0,"extFields":{},"flag":1,"language":"JAVA","opaque":%d,'
                         .. '"serializeTypeCurrentRPC":"JSON","version":401}'):format(i)
            frames[#frames + 1] = rq.frame(hdr)
        end
        assert(c:send_raw(table.concat(frames)))
        -- Read in order: the request after them is answered.
        assert.equal(R.SUCCESS, assert(c:call({ code = req.GET_BROKER_RUNTIME_INFO }, 10000)).code)
        c:close()
        local _, lines = b:log():gsub("response frame%(s%) no request waits for", "")
        assert.is_true(lines >= 1 and lines <= 2, b:log())
        local answering = client("127.0.0.1@after")
        local r = running_info("127.0.0.1@after")
        assert.equal(R.SUCCESS, r.code, r.remark)
        answering:close()
    end)
end)

-- The web console's POST /api/send follows the live console's rule:
-- local-only unless consolePassword is set, and then it needs the
-- password (HTTP Basic, any user name), one wrong guess at a time.
describe("web console writes", function()
    local http = require("support.http")

    local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    local function base64(text)
        return ((text:gsub(".", function(ch)
            local bits, v = {}, ch:byte()
            for i = 7, 0, -1 do
                bits[#bits + 1] = (v >> i) & 1
            end
            return table.concat(bits)
        end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(six)
            if #six < 6 then
                return ""
            end
            local v = tonumber(six, 2)
            return B64:sub(v + 1, v + 1)
        end) .. ({ "", "==", "=" })[#text % 3 + 1])
    end

    local function standalone(extra, overrides)
        local conf = {
            role = "standalone", workers = 1, brokerName = "broker-w",
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            autoCreateTopicEnable = true, consoleWriteEnable = true,
            metricsExporterType = "PROM", metricsPromExporterPort = 0,
        }
        for k, v in pairs(extra) do
            conf[k] = v
        end
        local all = { "namesrvListenPort=0" }
        for _, o in ipairs(overrides or {}) do
            all[#all + 1] = o
        end
        return server.start(conf, all)
    end

    it("are refused at start on an endpoint other hosts reach, without a password", function()
        local ok, err = pcall(standalone, {}, { "metricsPromExporterHost=0.0.0.0" })
        assert.is_false(ok)
        assert.matches("exited %(status 1%) before READY", err)
        assert.matches("key 'consoleWriteEnable' = true with metricsPromExporterHost \"0.0.0.0\"", err, 1, true)
        ok, err = pcall(standalone, { consolePassword = "" })
        assert.is_false(ok)
        assert.matches("key 'consolePassword' is empty", err, 1, true)
    end)

    it("need the password once it is set", function()
        -- 3 s: "at once" holds on a loaded machine (with 300 ms, the next
        -- request came after it at load 20).
        local s = standalone({ consolePassword = "web-pw-42", consoleAuthFailDelayMillis = 3000 })
        local function post(auth)
            local headers = { ["Content-Type"] = "application/json" }
            if auth then
                headers.Authorization = "Basic " .. base64(auth)
            end
            return http.request(s.metrics_addr, "POST", "/api/send", '{"topic":"WebT","body":"x"}', headers)
        end
        local status, body, head = post(nil)
        assert.equal(401, status)
        assert.matches("needs the console password", body, 1, true)
        assert.matches("WWW%-Authenticate: Basic realm=\"rmq console\"", head)
        status, body = post("admin:wrong")
        assert.equal(401, status)
        assert.matches("wrong console password", body, 1, true)
        -- Right at once after a wrong one: refused, then accepted.
        status = post("admin:web-pw-42")
        assert.equal(429, status)
        assert.truthy(server.eventually(function()
            local st, text = post("admin:web-pw-42")
            assert.is_true(st == 200 or st == 429, text)
            return st == 200
        end, 15000))
        assert.is_nil(s:log():find("web-pw-42", 1, true))
        local _, cluster = http.request(s.metrics_addr, "GET", "/api/cluster")
        assert.is_nil(cluster:find("web-pw-42", 1, true))
        assert.equal(0, s:stop())
    end)
end)

-- haAllowedAddresses: the HA port takes slaves from those addresses only.
describe("the HA port", function()
    local socket = require("socket")

    local function master(allowed)
        return server.start({
            role = "broker", workers = 1, brokerName = "broker-ha-" .. allowed:gsub("%.", ""),
            storePathRootDir = server.tmpdir() .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            namesrvAddr = "127.0.0.1:1", haAllowedAddresses = allowed,
            -- an unknown peer is held while the list is read again: not long here
            haUnknownPeerHoldMillis = 1000,
        })
    end

    -- What a slave connecting from 127.0.0.1 sees: "closed" or "timeout"
    -- (the master waits for its first offset report).
    local function first_read(addr)
        local host, port = addr:match("^(.*):(%d+)$")
        local t = assert(socket.tcp())
        assert(t:connect(host, tonumber(port)))
        t:settimeout(2)
        local _, why = t:receive(1)
        t:close()
        return why
    end

    it("closes a slave from an address not in haAllowedAddresses, and takes one that is", function()
        local refused = master("127.0.0.2")
        assert.equal("closed", first_read(refused.ha_addr))
        assert.truthy(server.eventually(function()
            return refused:log():find("HA: refusing peer 127%.0%.0%.1")
        end, 5000))
        -- Still a broker: its remoting port answers.
        assert.equal(R.SUCCESS, assert(net.call(refused.addr, { code = req.GET_BROKER_RUNTIME_INFO }, 10000)).code)
        assert.equal(0, refused:stop())
        local allowed = master("127.0.0.2; 127.0.0.1")
        assert.equal("timeout", first_read(allowed.ha_addr))
        assert.matches("HA: slave 127%.0%.0%.1:%d+ connected", allowed:log())
        assert.equal(0, allowed:stop())
        local ok, err = pcall(master, "10.0.0.0/8")
        assert.is_false(ok)
        assert.matches("haAllowedAddresses", err, 1, true)
    end)
end)
