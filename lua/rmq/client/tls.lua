-- TLS for the project's client: what 4.9.8's Java client does with
-- -Dtls.enable=true and the tls.client.* properties.  Settings apply to
-- every connection the process opens from then on (rmq.net's net.tls),
-- as 4.9.8's are JVM-wide.
--
--   settings(tls) -> table | nil      tls: true, a table, false or nil
--       (nil: the environment decides): {authServer=, trustCertPath=,
--       certPath=, keyPath=, keyPassword=} for net.tls, or nil for
--       plaintext.  The environment: RMQ_TLS=1 turns TLS on;
--       RMQ_TLS_TRUST=ca.pem verifies the server against that CA file
--       (tls.client.authServer + trustCertPath); RMQ_TLS_CERT /
--       RMQ_TLS_KEY / RMQ_TLS_KEY_PASSWORD present a client certificate.
--   apply(tls) -> true | nil, err     settings(tls) into net.tls (when
--       tls is nil and the environment asks for nothing, leaves it)
--   strip_argv(argv) -> argv, tls     the `rmq` flags --tls,
--       --tls-trust=FILE, --tls-cert=FILE, --tls-key=FILE (anywhere on
--       the line) taken out; tls = their settings or nil
local env = require("rmq.strings").getenv

local M = {}

local function from_env()
    local on = env("RMQ_TLS")
    if on == nil or on == "0" or on:lower() == "false" then
        return nil
    end
    return {}
end

-- Fills what the table leaves out from the environment's file names.
local function complete(t)
    local s = {}
    for k, v in pairs(t) do
        s[k] = v
    end
    s.trustCertPath = s.trustCertPath or env("RMQ_TLS_TRUST")
    if s.authServer == nil then
        s.authServer = s.trustCertPath ~= nil
    end
    s.certPath = s.certPath or env("RMQ_TLS_CERT")
    s.keyPath = s.keyPath or env("RMQ_TLS_KEY")
    s.keyPassword = s.keyPassword or env("RMQ_TLS_KEY_PASSWORD")
    return s
end

function M.settings(tls)
    if tls == false then
        return nil
    elseif tls == true then
        return complete({})
    elseif type(tls) == "table" then
        return complete(tls)
    elseif tls == nil then
        local e = from_env()
        return e and complete(e)
    end
    error("tls must be true, false or a table of settings", 3)
end

function M.apply(tls)
    local s = M.settings(tls)
    if s == nil then
        if tls == false then
            return require("rmq.net").tls(false)
        end
        return true
    end
    return require("rmq.net").tls(s)
end

local VALUED = { ["--tls-trust"] = "trustCertPath", ["--tls-cert"] = "certPath",
                 ["--tls-key"] = "keyPath" }

function M.strip_argv(argv)
    local out, tls = {}, nil
    local i = 1
    while i <= #argv do
        local a = argv[i]
        local flag, inline = a:match("^(%-%-tls[%w-]*)=(.*)$")
        flag = flag or a
        if flag == "--tls" and inline == nil then
            tls = tls or {}
        elseif VALUED[flag] then
            local v = inline
            if v == nil then
                i = i + 1
                v = argv[i]
            end
            if v == nil then
                return nil, ("option %s needs a FILE"):format(flag)
            end
            tls = tls or {}
            tls[VALUED[flag]] = v
        else
            out[#out + 1] = a
        end
        i = i + 1
    end
    return out, tls
end

return M
