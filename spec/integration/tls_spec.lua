-- TLS on the remoting ports (src/net/tls.h) as RocketMQ 4.9.8 offers it:
-- tls.server.mode disabled | permissive | enforcing, certificates from
-- tls.server.certPath / keyPath, client certificates (need.client.auth,
-- authClient), the broker's own connections with tls.enable, and the
-- project's client and `rmq` with --tls.  The certificates are made here,
-- with the openssl command, in the spec's temp dir.
local net = require("rmq.net")
local socket = require("socket")
local cjson = require("cjson")
local core = require("rmq.core")
local server = require("support.server")
local rq = require("support.requests")

local GET_BROKER_CLUSTER_INFO = 106

local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a")
    local ok, _, code = p:close()
    assert(ok, ("%s: exit %s\n%s"):format(cmd, tostring(code), out))
    return out
end

-- A CA, a server and a client certificate it signed, a self-signed
-- "rogue" client certificate, and the server key encrypted (PKCS#8).
local function make_certs(dir)
    local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    sh(("cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 1 -subj '/CN=rmq spec CA'")
        :format(dir, ec))
    for _, name in ipairs({ "server", "client" }) do
        sh(("cd %s && openssl req %s -keyout %s.key -out %s.csr -subj '/CN=rmq spec %s'"
            .. " && openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key -CAcreateserial"
            .. " -out %s.pem -days 1"):format(dir, ec, name, name, name, name, name))
    end
    sh(("cd %s && openssl req -x509 %s -keyout rogue.key -out rogue.pem -days 1 -subj '/CN=rogue'")
        :format(dir, ec))
    sh(("cd %s && openssl pkcs8 -topk8 -in server.key -out server_enc.key -passout pass:s3cret")
        :format(dir))
    local c = {}
    for _, f in ipairs({ "ca.pem", "server.pem", "server.key", "client.pem", "client.key",
                         "rogue.pem", "rogue.key", "server_enc.key" }) do
        c[f:gsub("%.", "_")] = dir .. "/" .. f
    end
    return c
end

local certs

local function tls_conf(extra)
    local conf = { role = "namesrv", workers = 2,
                   ["tls.server.certPath"] = certs.server_pem, ["tls.server.keyPath"] = certs.server_key }
    for k, v in pairs(extra or {}) do
        conf[k] = v
    end
    return conf
end

local function start_namesrv(extra)
    local dir = server.tmpdir()
    local conf = tls_conf(extra)
    conf.kvConfigPath = dir .. "/kv.json"
    return server.start(conf)
end

-- One request on a new connection: the reply's code, or nil, why.
local function ask(addr, tls)
    local c, err = net.connect(addr, { tls = tls, timeout = 5000 })
    if not c then
        return nil, err
    end
    local r, cerr = c:call({ code = GET_BROKER_CLUSTER_INFO }, 5000)
    c:close()
    if not r then
        return nil, cerr
    end
    return r.code
end

-- A raw TCP connection (lua-socket): bytes exactly as given.
local function raw(addr)
    return assert(require("support.http").connect(addr, 5))
end

-- True once the server has closed t (what a client sees as EOF).
local function closed_by_server(t, seconds)
    t:settimeout(seconds or 10)
    local _, err, partial = t:receive("*a")
    t:close()
    return err == nil or err == "closed", err, partial
end

-- A real ClientHello, as rmq's own client sends it: dialled to a socket
-- nobody answers, read back from its accept queue.
local function client_hello()
    local l = assert(socket.bind("127.0.0.1", 0))
    local _, port = l:getsockname()
    assert.is_nil(net.connect("127.0.0.1:" .. port, { tls = true, timeout = 300 }))
    l:settimeout(2)
    local t = assert(l:accept())
    t:settimeout(2)
    local hello, _, partial = t:receive("*a")
    t:close()
    l:close()
    hello = hello or partial
    assert.equal(0x16, hello:byte(1), "a TLS handshake record")
    return hello
end

-- A remoting request frame (RocketMQ serialisation is not needed: JSON).
local function plaintext_frame()
    local header = cjson.encode({ code = GET_BROKER_CLUSTER_INFO, flag = 0, language = "JAVA",
                                  opaque = 1, serializeTypeCurrentRPC = "JSON", version = 399 })
    return rq.frame(header)
end

describe("TLS on the remoting ports", function()
    setup(function()
        certs = make_certs(server.tmpdir())
    end)

    it("serves the project's client and a broker's registration in enforcing mode and refuses plaintext", function()
        local ns = start_namesrv({ ["tls.server.mode"] = "enforcing" })
        local dir = server.tmpdir()
        -- The broker's own port enforcing too; it registers over TLS,
        -- checking the NameServer's certificate against the CA.
        local broker = server.start(tls_conf({
            role = "broker", brokerName = "broker-tls", namesrvAddr = ns.addr,
            storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
            ["tls.server.mode"] = "enforcing", ["tls.enable"] = true,
            ["tls.client.authServer"] = true, ["tls.client.trustCertPath"] = certs.ca_pem,
            metricsExporterType = "PROM", metricsPromExporterPort = 0,
        }))
        local ok, err = pcall(function()
            local rmq = ("timeout 30 %s/rmq --tls-trust %s"):format(server.build, certs.ca_pem)
            assert.truthy(server.eventually(function()
                local code = server.rmq(("--tls topic-route -n %s TBW102"):format(ns.addr))
                return code == 0
            end, 10000), "the broker registered over TLS")
            for i = 1, 3 do
                local out = sh(("%s send -n %s -t TlsTopic --json tls-body-%d"):format(rmq, ns.addr, i))
                assert.equal("SEND_OK", cjson.decode(out).status)
            end
            local out = sh(("%s consume -n %s -t TlsTopic -g TlsGroup -c 3 --from first --json")
                :format(rmq, ns.addr))
            local bodies = {}
            for line in out:gmatch("[^\n]+") do
                bodies[#bodies + 1] = cjson.decode(line).body
            end
            table.sort(bodies)
            assert.same({ "tls-body-1", "tls-body-2", "tls-body-3" }, bodies)
            -- The client library itself (tls = true: every connection of
            -- this process until it is switched off).
            local producer = require("rmq.client.producer")
            local p = producer.new({ namesrvAddr = ns.addr, producerGroup = "TlsLuaProducer", tls = true })
            local r = assert(p:send({ topic = "TlsTopic", body = "from lua" }))
            assert.equal("SEND_OK", r.status)
            assert(net.tls(false))
            -- RMQ_TLS=1 is --tls (4.9.8's -Dtls.enable=true).
            local route = sh(("RMQ_TLS=1 timeout 30 %s/rmq topic-route -n %s --json TlsTopic")
                :format(server.build, ns.addr))
            assert.truthy(route:find("broker-tls", 1, true), route)
            -- Plaintext: refused on both servers, with a line in the log.
            local code, text = server.rmq(("send -n %s -t TlsTopic plain"):format(ns.addr))
            assert.are_not.equal(0, code, text)
            local t = raw(broker.addr)
            t:send(plaintext_frame())
            assert.is_true((closed_by_server(t)))
            assert.is_nil(ask(broker.addr, false))
            -- The web console asks its own, enforcing, port over TLS.
            local status, c = require("support.http").json(broker.metrics_addr, "/api/cluster")
            assert.equal(200, status, c)
            assert.equal("broker-tls", c.brokers[1].brokerName)
            assert.truthy(ns:log():find("plaintext refused (tls.server.mode enforcing)", 1, true), ns:log())
            assert.truthy(broker:log():find("plaintext refused (tls.server.mode enforcing)", 1, true))
        end)
        net.tls(false)
        local bcode = broker:stop()
        local ncode = ns:stop()
        assert(ok, err)
        assert.equal(0, bcode, broker:log())
        assert.equal(0, ncode, ns:log())
    end)

    it("serves both in permissive mode; plaintext only when disabled or without a certificate", function()
        local permissive = start_namesrv({ ["tls.server.mode"] = "permissive" })
        local disabled = start_namesrv({ ["tls.server.mode"] = "disabled" })
        local plain = server.start({ role = "namesrv", workers = 1,
                                     kvConfigPath = server.tmpdir() .. "/kv.json" })
        local ok, err = pcall(function()
            assert.equal(0, ask(permissive.addr, true))
            assert.equal(0, ask(permissive.addr, false))
            for _, s in ipairs({ disabled, plain }) do
                assert.equal(0, ask(s.addr, false))
                local code, why = ask(s.addr, true)
                assert.is_nil(code)
                assert.truthy(why:find("cannot connect", 1, true), why)
                assert.equal(0, ask(s.addr, false), "still serving")
            end
            assert.truthy(disabled:log():find("serves plaintext only (tls.server.mode disabled)", 1, true))
            assert.truthy(plain:log():find("serves plaintext only (no tls.server.certPath)", 1, true))
        end)
        for _, s in ipairs({ permissive, disabled, plain }) do
            assert.equal(0, s:stop(), s:log())
        end
        assert(ok, err)
    end)

    it("closes a stalled handshake after tls.server.handshakeTimeoutMillis, serving others meanwhile", function()
        local ns = start_namesrv({ ["tls.server.mode"] = "enforcing",
                                   ["tls.server.handshakeTimeoutMillis"] = 1000 })
        local ok, err = pcall(function()
            local hello = client_hello()
            local stalled = raw(ns.addr)
            stalled:send(hello:sub(1, 20))   -- part of a record, then nothing
            local silent = raw(ns.addr)      -- connects and sends nothing
            local t0 = core.mono_ms()
            for _ = 1, 3 do
                assert.equal(0, ask(ns.addr, true))
            end
            -- Still open while the others were served (well before 1 s)...
            if core.mono_ms() - t0 < 500 then
                stalled:settimeout(0)
                local _, e = stalled:receive(1)
                assert.equal("timeout", e)
            end
            -- ...and closed by the timeout.
            assert.is_true((closed_by_server(stalled, 10)))
            assert.is_true((closed_by_server(silent, 10)))
            assert.truthy(server.eventually(function()
                local log = ns:log()
                return log:find("TLS handshake not finished after", 1, true)
                    and log:find("nothing received after", 1, true)
            end, 3000), ns:log())
            assert.equal(0, ask(ns.addr, true))
        end)
        assert.equal(0, ns:stop(), ns:log())
        assert(ok, err)
    end)

    it("closes garbage in a handshake and after a ClientHello, and keeps serving", function()
        local ns = start_namesrv({ ["tls.server.mode"] = "permissive" })
        local ok, err = pcall(function()
            local hello = client_hello()
            -- A handshake record whose message is nonsense.
            local t = raw(ns.addr)
            t:send("\22\3\1\0\8" .. "nonsense")
            assert.is_true((closed_by_server(t)))
            -- A ClientHello, then a record that is no handshake message.
            t = raw(ns.addr)
            t:send(hello .. "\23\3\3\0\16" .. string.rep("\0", 16))
            assert.is_true((closed_by_server(t)))
            -- Random bytes after the ClientHello.
            t = raw(ns.addr)
            local junk = {}
            for i = 1, 4096 do
                junk[i] = string.char(math.random(0, 255))
            end
            t:send(hello .. table.concat(junk))
            assert.is_true((closed_by_server(t)))
            assert.truthy(ns:log():find("TLS handshake failed", 1, true), ns:log())
            assert.equal(0, ask(ns.addr, true))
            assert.equal(0, ask(ns.addr, false))
        end)
        assert.equal(0, ns:stop(), ns:log())
        assert(ok, err)
    end)

    it("checks client certificates with need.client.auth and authClient", function()
        local strict = start_namesrv({ ["tls.server.mode"] = "enforcing",
                                       ["tls.server.need.client.auth"] = "require",
                                       ["tls.server.authClient"] = true,
                                       ["tls.server.trustCertPath"] = certs.ca_pem })
        -- 4.9.8 with authClient false: a certificate is asked for, any is taken.
        local lax = start_namesrv({ ["tls.server.mode"] = "enforcing",
                                    ["tls.server.need.client.auth"] = "optional" })
        local signed = { certPath = certs.client_pem, keyPath = certs.client_key }
        local rogue = { certPath = certs.rogue_pem, keyPath = certs.rogue_key }
        local ok, err = pcall(function()
            assert.equal(0, ask(strict.addr, signed))
            assert.is_nil(ask(strict.addr, true))
            assert.is_nil(ask(strict.addr, rogue))
            assert.equal(0, ask(strict.addr, signed), "still serving")
            local log = strict:log()
            assert.truthy(log:find("peer did not return a certificate", 1, true), log)
            assert.truthy(log:find("certificate verify failed", 1, true), log)
            assert.equal(0, ask(lax.addr, true))
            assert.equal(0, ask(lax.addr, rogue))
            -- The client's side: a server certificate its CA did not sign.
            local code, why = ask(lax.addr, { authServer = true, trustCertPath = certs.rogue_pem })
            assert.is_nil(code)
            assert.truthy(why:find("certificate verify failed", 1, true), why)
            assert.equal(0, ask(lax.addr, { authServer = true, trustCertPath = certs.ca_pem }))
            -- `rmq` presents one too.
            local rc, out = server.rmq(("--tls-cert %s --tls-key %s topic-route -n %s TBW102")
                :format(certs.client_pem, certs.client_key, strict.addr))
            assert.truthy(out:find("No topic route info", 1, true), out)
            assert.are_not.equal(0, rc)
        end)
        assert.equal(0, strict:stop(), strict:log())
        assert.equal(0, lax:stop(), lax:log())
        assert(ok, err)
    end)

    it("registers a broker that presents tls.client.certPath with a NameServer that requires one", function()
        local ns = start_namesrv({ ["tls.server.mode"] = "enforcing",
                                   ["tls.server.need.client.auth"] = "require",
                                   ["tls.server.authClient"] = true,
                                   ["tls.server.trustCertPath"] = certs.ca_pem })
        local function broker(name, extra)
            local dir = server.tmpdir()
            local conf = { role = "broker", workers = 1, brokerName = name, namesrvAddr = ns.addr,
                           storePathRootDir = dir .. "/store", mappedFileSizeCommitLog = 1024 * 1024,
                           ["tls.enable"] = true }
            for k, v in pairs(extra) do
                conf[k] = v
            end
            return server.start(conf)
        end
        local good = broker("broker-cert", { ["tls.client.certPath"] = certs.client_pem,
                                             ["tls.client.keyPath"] = certs.client_key })
        local bad = broker("broker-nocert", {})
        local ok, err = pcall(function()
            local names = {}
            assert.truthy(server.eventually(function()
                local c = assert(net.connect(ns.addr, { tls = { certPath = certs.client_pem,
                                                                keyPath = certs.client_key } }))
                local r = assert(c:call({ code = GET_BROKER_CLUSTER_INFO }, 5000))
                c:close()
                -- (fastjson: brokerAddrs has integer keys, not JSON)
                names = {}
                for n in r.body:gmatch('"brokerName":"([^"]+)"') do
                    names[#names + 1] = n
                end
                return #names > 0
            end, 10000))
            assert.same({ "broker-cert" }, names)
            assert.truthy(server.eventually(function()
                return ns:log():find("peer did not return a certificate", 1, true)
            end, 5000), ns:log())
        end)
        assert.equal(0, good:stop(), good:log())
        assert.equal(0, bad:stop(), bad:log())
        assert.equal(0, ns:stop(), ns:log())
        assert(ok, err)
    end)

    it("loads an encrypted key with tls.server.keyPassword; a bad one fails the start with why", function()
        local function check(extra)
            local path = server.tmpdir() .. "/conf.lua"
            local f = assert(io.open(path, "w"))
            f:write("return " .. server.serialize(tls_conf(extra), "") .. "\n")
            f:close()
            local p = io.popen(server.home_prefix() .. server.binary .. " -t " .. path .. " 2>&1")
            local out = p:read("a")
            local _, _, code = p:close()
            return code, out
        end
        local code, out = check({ ["tls.server.keyPath"] = certs.server_enc_key,
                                  ["tls.server.keyPassword"] = "s3cret" })
        assert.equal(0, code, out)
        code, out = check({ ["tls.server.keyPath"] = certs.server_enc_key,
                            ["tls.server.keyPassword"] = "wrong" })
        assert.equal(1, code)
        assert.truthy(out:find("tls.server.keyPath " .. certs.server_enc_key .. " (with keyPassword)", 1, true), out)
        code, out = check({ ["tls.server.certPath"] = certs.server_key })
        assert.equal(1, code)
        assert.truthy(out:find("tls.server.certPath", 1, true), out)
        code, out = check({ ["tls.server.keyPath"] = certs.client_key })
        assert.equal(1, code)
        assert.truthy(out:find("does not match", 1, true) or out:find("mismatch", 1, true), out)
        -- And a server with it serves TLS.
        local ns = start_namesrv({ ["tls.server.mode"] = "enforcing", ["tls.server.keyPath"] = certs.server_enc_key,
                                   ["tls.server.keyPassword"] = "s3cret" })
        local ok, err = pcall(function()
            assert.equal(0, ask(ns.addr, true))
        end)
        assert.equal(0, ns:stop(), ns:log())
        assert(ok, err)
    end)

    it("stops reading a peer that makes it write TLS records and never reads them", function()
        -- spec/tools/tls_keyupdate.c: KeyUpdate(requested) after KeyUpdate,
        -- a frame never completed, nothing read.  Each one makes the
        -- server answer with a KeyUpdate of its own.
        local tool = server.build .. "/tls_keyupdate"
        local ns = start_namesrv({ ["tls.server.mode"] = "enforcing", writeBufferHighWaterMark = 65536,
                                   writeBufferLowWaterMark = 32768, serverChannelWriteTimeoutMillis = 0 })
        local function rss_kb()
            local f = assert(io.open("/proc/" .. ns.pid .. "/status"))
            local kb = tonumber(f:read("a"):match("VmRSS:%s*(%d+)"))
            f:close()
            return kb
        end
        local ok, err = pcall(function()
            assert.equal(0, ask(ns.addr, true))
            local before = rss_kb()
            local host, port = ns.addr:match("^(.+):(%d+)$")
            -- (at most 120 s: it ends once a write blocks, in a second or
            -- two on a quiet machine; under ASan at load 60 the peer made
            -- 3,408 updates in 20 s, where the server's 64 KiB mark and
            -- its receive buffer take about 8,000)
            local p = assert(io.popen(("%s %s %s 120 3 2>&1"):format(tool, host, port)))
            local line = p:read("l")
            local after = rss_kb()
            -- still serving others meanwhile
            assert.equal(0, ask(ns.addr, true))
            p:close()
            local updates, blocked = tostring(line):match("^updates=(%d+) blocked=(%d) ")
            assert.truthy(updates, line)
            -- the server stopped reading: the peer's writes blocked
            -- (without the pause it reads on and 20 s of updates pass:
            -- 444,784 of them, measured)
            assert.equal("1", blocked, line)
            -- and its memory stayed bounded by the mark, not by the peer
            -- (not under ASan: its quarantine keeps every freed record)
            if not os.getenv("RMQ_SERVER_ASAN_OPTIONS") then
                assert.is_true(after - before < 16 * 1024,
                    ("RSS %d -> %d KiB after %s"):format(before, after, line))
            end
        end)
        assert.equal(0, ns:stop(), ns:log())
        assert(ok, err)
    end)

    it("refuses at start a TLS path or key password too long to hold, naming the key", function()
        local dir = server.tmpdir()
        -- a password longer than the 255 bytes kept, the key really encrypted with it
        local pass = ("p"):rep(300)
        sh(("cd %s && openssl pkcs8 -topk8 -in %s -out long.key -passout pass:%s"):format(dir, certs.server_key, pass))
        local ok, err = pcall(start_namesrv, { ["tls.server.mode"] = "enforcing",
            ["tls.server.keyPath"] = dir .. "/long.key", ["tls.server.keyPassword"] = pass })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("key 'tls.server.keyPassword' is too long (300 bytes; at most 255)", 1, true),
            err)
        -- a real certificate whose path is longer than the 1023 bytes kept
        local long = dir
        while #long < 1100 do
            long = long .. "/" .. ("d"):rep(200)
        end
        sh(("mkdir -p %s && cp %s %s/server.pem"):format(long, certs.server_pem, long))
        ok, err = pcall(start_namesrv, { ["tls.server.mode"] = "enforcing",
            ["tls.server.certPath"] = long .. "/server.pem" })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("key 'tls.server.certPath' is too long (" .. #long + 11
            .. " bytes; at most 1023)", 1, true), err)
    end)
end)
