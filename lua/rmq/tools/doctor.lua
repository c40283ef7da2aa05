-- rmq doctor CONF [--KEY=VALUE ...]: what a conf exposes, before it runs.
--
-- Loads the conf as rmq-server would (rmq.conf.load, the same overrides;
-- nothing is started, nothing is bound) and lists one finding per line:
--
--   LEVEL  KEY  what it means and what to change
--
-- LEVEL is WARN (reachable by other hosts without a guard, or a setting
-- that can lose or expose data), INFO (worth knowing) or OK.  KEY is the
-- conf key to change.  Checked: the bind address and every port it
-- serves (remoting, VIP, HA, the NameServer of a standalone, the metrics
-- and web console endpoint, the live console), ACL (aclEnable; when on,
-- its plain_acl.yml present and readable), TLS (tls.server.mode), the
-- live console on TCP (a password only) or a unix socket, the web console's password and ACL
-- account (consoleAccessKey), consoleWriteEnable on a non-loopback
-- HTTP endpoint, autoCreateTopicEnable / autoCreateSubscriptionGroup on
-- an exposed broker, flushDiskType, a master without a slave.
--
-- Exit status: 0 no WARN, 1 at least one WARN, 2 the conf does not load
-- (or a usage error).  `--json` prints {"conf", "role", "findings":
-- [{"level", "key", "text"}], "warnings"} instead.
--
--   local doctor = require("rmq.tools.doctor")
--   local findings = doctor.check(conf)    -- conf: what rmq.conf.load returned
local M = {}

local function loopback(host)
    return host ~= nil and (host:match("^127%.%d+%.%d+%.%d+$") ~= nil or host == "::1" or host == "localhost")
end
M.loopback = loopback

local function any_host(host)
    return host == "0.0.0.0" or host == "::"
end

local function port_text(host, port)
    if port == 0 then
        return host .. ":(any free port)"
    end
    return host .. ":" .. port
end

-- The listeners rmq-server opens for conf: {name=, host=, port=}.
local function listeners(conf)
    local bind = conf.bindAddress or "0.0.0.0"
    local out = {}
    local function add(name, port)
        out[#out + 1] = { name = name, host = bind, port = port }
    end
    local lp = conf.listenPort
    if conf.role == "namesrv" then
        add("NameServer", lp)
    else
        if conf.role == "standalone" then
            add("NameServer", conf.namesrvListenPort)
        end
        add("broker", lp)
        add("VIP", lp == 0 and 0 or lp - 2)
        local hp = conf.haListenPort
        if hp == nil or hp == 0 then
            hp = lp == 0 and 0 or lp + 1
        end
        add("HA", hp)
    end
    return out
end

-- plain_acl.yml: where the server looks for it (rmq.acl.plain.path:
-- aclFile, RocketMQ's ROCKETMQ_HOME/conf/plain_acl.yml, or beside the
-- conf), and whether it loads and builds as the server's loader has it.
-- An address pattern (4.9.8's: *, 192.168.1.*, 192.168.1.1-200,
-- 192.168.1.{1,2}) that lets in more than a /24: "*", or fewer than three
-- fixed IPv4 octets.  nil for a narrow one.
local function wide(pattern)
    local p = pattern:match("^%s*(.-)%s*$")
    if p == "*" then
        return "every address"
    end
    local octets = {}
    for o in p:gmatch("[^.]+") do
        octets[#octets + 1] = o
    end
    if #octets ~= 4 then
        return nil
    end
    local fixed = 0
    for _, o in ipairs(octets) do
        if o:match("^%d+$") then
            fixed = fixed + 1
        end
    end
    if fixed < 3 then
        return "a wide range"
    end
end

-- The findings of an aclEnable conf's plain_acl.yml, each given to add.
local function acl_file_check(conf, add)
    local plain = require("rmq.acl.plain")
    local cacl = require("rmq.acl")
    local path = plain.path(conf)
    local key = conf.aclFile and "aclFile" or "rocketmqHome"
    local f = io.open(path, "rb")
    if f == nil then
        add("WARN", key, ("aclEnable is on but %s cannot be read: the server creates it empty and"
            .. " refuses every request not from a white-listed address"):format(path))
        return
    end
    f:close()
    local data, err = plain.read(conf)
    local t
    if data ~= nil then
        t, err = plain.build(conf, data)
    end
    if t == nil then
        add("WARN", key, ("%s does not load: %s"):format(path, tostring(err)))
        return
    end
    local warned = false
    local function warn(text)
        add("WARN", key, ("%s: %s"):format(path, text))
        warned = true
    end
    local _, _, mode = cacl.file_stamp(path)
    if mode and mode & 0x3F ~= 0 then
        warn(("mode %03o: other users of this host can read the secrets; chmod 600 it"):format(mode))
    end
    local whites = type(data.globalWhiteRemoteAddresses) == "table" and data.globalWhiteRemoteAddresses or {}
    for _, w in ipairs(whites) do
        local why = type(w) == "string" and wide(w)
        if why then
            warn(("globalWhiteRemoteAddresses %q lets %s in without a signature"):format(w, why))
        end
    end
    local accounts = type(data.accounts) == "table" and data.accounts or {}
    for i, a in ipairs(accounts) do
        local w = a.whiteRemoteAddress
        local why = type(w) == "string" and wide(w)
        if why then
            warn(("accounts[%d] (%s) whiteRemoteAddress %q lets %s in without a signature"):format(
                i, tostring(a.accessKey), w, why))
        end
        if tostring(a.secretKey) == "12345678" then
            warn(("accounts[%d] (%s) has RocketMQ's sample secretKey 12345678: anyone can sign as it"):format(
                i, tostring(a.accessKey)))
        end
    end
    if not warned then
        add("OK", "aclEnable", ("ACL on, accounts from %s"):format(path))
    end
end

--- The findings for a loaded conf: a list of {level=, key=, text=}.
function M.check(conf)
    local f = {}
    local function add(level, key, text)
        f[#f + 1] = { level = level, key = key, text = text }
    end
    local role = conf.role
    local broker = role ~= "namesrv"
    local bind = conf.bindAddress or "0.0.0.0"
    local exposed = not loopback(bind)
    local where = any_host(bind) and "every interface of this host" or bind

    -- The remoting listeners.
    local ls = listeners(conf)
    local list = {}
    for _, l in ipairs(ls) do
        list[#list + 1] = ("%s %s"):format(l.name, port_text(l.host, l.port))
    end
    if exposed then
        add("INFO", "bindAddress", ("listening on %s: %s"):format(where, table.concat(list, ", ")))
    else
        add("OK", "bindAddress", ("this host only: %s"):format(table.concat(list, ", ")))
    end

    -- ACL (RocketMQ 4.x has it on the broker only; rmq's NameServer too).
    local what = broker and "send, consume, delete topics, change permissions and live config"
        or "register a broker (hijacking routes) and change the NameServer's config"
    if conf.aclEnable then
        acl_file_check(conf, add)
    elseif exposed then
        add("WARN", "aclEnable", ("ACL is off and this %s is reachable from other hosts: anyone who connects"
            .. " can %s; set aclEnable = true (or bindAddress = \"127.0.0.1\", or a firewall)"):format(
            role == "standalone" and "server" or role, what))
    else
        add("INFO", "aclEnable", "ACL is off (fine while bindAddress is loopback)")
    end

    -- TLS.
    local mode = conf["tls.server.mode"]
    local cert = conf["tls.server.certPath"]
    if mode == "enforcing" then
        add("OK", "tls.server.mode", "TLS only (enforcing)")
    elseif mode == "permissive" and cert then
        add(exposed and "INFO" or "OK", "tls.server.mode",
            "TLS offered, plaintext accepted too (permissive); enforcing refuses plaintext")
    elseif exposed then
        add("INFO", "tls.server.mode", "no TLS: requests, messages and ACL signatures cross the network in clear;"
            .. " set tls.server.mode = \"enforcing\" with tls.server.certPath/keyPath")
    else
        add("OK", "tls.server.mode", "no TLS (loopback only)")
    end

    -- The HA port: 4.9.8's HA protocol has no authentication at all.
    if broker and exposed then
        local ha
        for _, l in ipairs(ls) do
            if l.name == "HA" then ha = l end
        end
        if conf.haAllowAnyAddress then
            add("WARN", "haAllowAnyAddress", ("the HA port %s serves this broker's whole commit log to any host that"
                .. " connects as a slave (RocketMQ's HA has no authentication): remove haAllowAnyAddress (the"
                .. " default serves the brokers registered for %s at the NameServers, haMasterAddress and"
                .. " haAllowedAddresses), or firewall it"):format(port_text(ha.host, ha.port), conf.brokerName))
        else
            add("INFO", "haListenPort", ("the HA port %s serves only the brokers registered for %s at the"
                .. " NameServers, haMasterAddress%s (by address: RocketMQ's HA has no authentication; whoever"
                .. " may register a broker at the NameServers may replicate: run them with ACL)"):format(
                port_text(ha.host, ha.port), conf.brokerName,
                conf.haAllowedAddresses and (" and " .. conf.haAllowedAddresses) or ""))
        end
    end

    -- The metrics endpoint and the web console.
    if conf.metricsExporterType == "PROM" then
        local h = conf.metricsPromExporterHost or "127.0.0.1"
        local ep = port_text(h, conf.metricsPromExporterPort)
        if loopback(h) then
            add("OK", "metricsPromExporterHost", ("metrics%s on %s: this host only"):format(
                broker and " and web console" or "", ep))
        elseif broker and conf.consolePassword == nil then
            add("WARN", "metricsPromExporterHost", ("metrics and the web console on %s, reachable from other hosts:"
                .. " topics, groups and message lookup (bodies) without a password%s; bind it to 127.0.0.1"
                .. " and scrape through a proxy, or set consolePassword (every /api route then needs it)"):format(ep,
                conf.aclEnable and (", with the rights of " .. (conf.consoleAccessKey
                    and ("consoleAccessKey " .. conf.consoleAccessKey) or "an unsigned client")) or ""))
        elseif broker then
            add("WARN", "metricsPromExporterHost", ("metrics and the web console on %s, reachable from other hosts:"
                .. " every /api route guarded only by consolePassword over plain HTTP; bind it to 127.0.0.1"
                .. " and scrape through a proxy"):format(ep))
        else
            add("INFO", "metricsPromExporterHost", ("metrics on %s, reachable from other hosts"):format(ep))
        end
        -- Slowloris from many addresses fills metricsHttpMaxConnections;
        -- the scraper's addresses have a pool of their own only when listed.
        if not loopback(h) and conf.metricsAllowedAddresses == nil then
            add("INFO", "metricsAllowedAddresses", ("%s is reachable from other hosts: connections trickling"
                .. " their headers from many addresses can take all %d slots (each for up to %d ms); list the"
                .. " Prometheus servers in metricsAllowedAddresses to keep scrapes answered"):format(ep,
                conf.metricsHttpMaxConnections, conf.metricsHttpHeaderTimeoutMillis))
        end
        -- With ACL on, the console reads with its own account's rights.
        if broker and conf.aclEnable then
            if conf.consoleAccessKey == nil then
                add("INFO", "consoleAccessKey", "the web console's requests are unsigned: the broker refuses them"
                    .. " unless 127.0.0.1 is white-listed; set consoleAccessKey/consoleSecretKey to an account"
                    .. " granted only what the console may show")
            elseif conf.consoleAccessKey == conf.accessKey then
                add("WARN", "consoleAccessKey", ("the web console signs with the broker's own account %s (an admin"
                    .. " on an ACL NameServer): whoever reaches it reads as that account; give the console an"
                    .. " account of its own, granted only what it may show"):format(conf.accessKey))
            else
                add("OK", "consoleAccessKey", ("the web console reads as %s, with that account's rights"):format(
                    conf.consoleAccessKey))
            end
        end
        if broker and conf.consoleWriteEnable then
            if not loopback(h) then
                -- (without consolePassword the conf does not load)
                add("WARN", "consoleWriteEnable", ("POST /api/send is reachable from other hosts on %s, guarded"
                    .. " only by consolePassword over plain HTTP; bind metricsPromExporterHost to 127.0.0.1"
                    .. " or set consoleWriteEnable = false"):format(ep))
            else
                add("INFO", "consoleWriteEnable", "the web console can send test messages (POST /api/send)"
                    .. (conf.consolePassword and ", with consolePassword" or ", from this host"))
            end
        end
    end

    -- The live console: a Lua prompt into the server.
    local c = conf.console
    if c == nil then
        add("OK", "console", "no live console")
    else
        local host = c:match("^%[?([^%]]*)%]?:%d+$")
        if host == nil or c:match("^unix:") then
            add("OK", "console", ("live console on a unix socket (%s, mode 0600; peers of the server's uid or"
                .. " root only, by SO_PEERCRED)"):format(c == "unix" and "STORE/console.sock" or c))
        elseif conf.consolePassword == nil then
            -- (the conf does not load: every TCP console needs a password)
            add("WARN", "consolePassword", ("live console on %s without a password: any user who reaches it"
                .. " runs Lua in the server; set consolePassword or console = \"unix\""):format(c))
        elseif loopback(host) then
            add("WARN", "console", ("live console on %s: any user of this host can connect and try"
                .. " consolePassword (a Lua prompt in the server, as its user); prefer console = \"unix\""
                .. " (the server's uid or root only)"):format(c))
        else
            add("WARN", "console", ("live console on %s, reachable from other hosts (password only, no TLS):"
                .. " prefer console = \"unix\" and ssh"):format(c))
        end
    end

    if broker then
        for _, k in ipairs({ "autoCreateTopicEnable", "autoCreateSubscriptionGroup" }) do
            if conf[k] and exposed then
                add("WARN", k, ("%s = true on an exposed broker: any client creates %s by naming one;"
                    .. " set false and create them with mqadmin"):format(k,
                    k == "autoCreateTopicEnable" and "topics" or "subscription groups"))
            elseif conf[k] then
                add("INFO", k, ("%s = true (fine for development)"):format(k))
            end
        end
        if conf.flushDiskType == "SYNC_FLUSH" then
            add("OK", "flushDiskType", "SYNC_FLUSH: a send is acknowledged once on disk")
        else
            add("INFO", "flushDiskType", "ASYNC_FLUSH: a power loss (not a crash) can lose the last moment of"
                .. " acknowledged messages; SYNC_FLUSH or a slave covers it")
        end
        if conf.brokerRole == "SLAVE" then
            add("OK", "brokerRole", "a slave of " .. tostring(conf.brokerName))
        elseif conf.brokerRole == "SYNC_MASTER" then
            add("INFO", "brokerRole", "SYNC_MASTER: sends answer SLAVE_NOT_AVAILABLE until a slave is connected")
        else
            add("INFO", "brokerRole", "ASYNC_MASTER: one copy until a slave (brokerRole = \"SLAVE\", same"
                .. " brokerName) follows it; a lost disk loses the messages")
        end
    end
    return f
end

local function count(findings, level)
    local n = 0
    for _, x in ipairs(findings) do
        if x.level == level then n = n + 1 end
    end
    return n
end

--- `rmq doctor` itself: argv = { CONF, [--json], [--KEY=VALUE ...] }.
--- Returns the exit status.
function M.main(argv)
    local path, overrides, json = nil, {}, false
    for _, a in ipairs(argv) do
        if a == "--json" then
            json = true
        elseif a == "-h" or a == "--help" then
            print("usage: rmq doctor CONF [--json] [--KEY=VALUE ...]")
            return 0
        elseif a:match("^%-%-[^=]+=") then
            overrides[#overrides + 1] = a:sub(3)
        elseif a:sub(1, 1) == "-" then
            io.stderr:write(("rmq: doctor: unknown option '%s'\nusage: rmq doctor CONF [--json] [--KEY=VALUE ...]\n")
                :format(a))
            return 2
        elseif path == nil then
            path = a
        else
            io.stderr:write("rmq: doctor: one CONF only\nusage: rmq doctor CONF [--json] [--KEY=VALUE ...]\n")
            return 2
        end
    end
    if path == nil then
        io.stderr:write("rmq: doctor: CONF is required\nusage: rmq doctor CONF [--json] [--KEY=VALUE ...]\n")
        return 2
    end
    local conf, warnings = require("rmq.conf").load(path, overrides)
    require("rmq.acl.plain").set_conf_path(path)
    if conf == nil then
        io.stderr:write("rmq: doctor: " .. tostring(warnings) .. "\n")
        return 2
    end
    for _, w in ipairs(type(warnings) == "table" and warnings or {}) do
        io.stderr:write("rmq: doctor: " .. tostring(w) .. "\n")
    end
    local findings = M.check(conf)
    local warns = count(findings, "WARN")
    if json then
        local cjson = require("cjson")
        io.stdout:write(cjson.encode({ conf = path, role = conf.role, findings = findings,
                                       warnings = warns }), "\n")
    else
        print(("%s: role %s"):format(path, conf.role))
        local width = 0
        for _, x in ipairs(findings) do
            width = math.max(width, #x.key)
        end
        for _, x in ipairs(findings) do
            print(("%-4s  %-" .. width .. "s  %s"):format(x.level, x.key, x.text))
        end
        print(("%d warning%s, %d note%s"):format(warns, warns == 1 and "" or "s",
            count(findings, "INFO"), count(findings, "INFO") == 1 and "" or "s"))
    end
    return warns > 0 and 1 or 0
end

return M
