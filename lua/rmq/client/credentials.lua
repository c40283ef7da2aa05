-- ACL 1.0 credentials of a client: Java's SessionCredentials (accessKey,
-- secretKey, optional securityToken).  A request whose command table
-- carries `credentials = creds` is signed when it is encoded, in C
-- (src/lua/l_credentials.c, as AclClientRPCHook: AccessKey and
-- SecurityToken into extFields, then Signature over the sorted extField
-- values and the body); a request without the field is signed with the
-- Lua state's default (net.credentials(creds)), if one was set, and
-- `credentials = false` sends one unsigned.  The client objects
-- (producer, consumers, transactional producer, trace, admin contexts)
-- take the options below and put their credentials on every request
-- they send, NameServer lookups included.
--
--   local credentials = require("rmq.client.credentials")
--   local creds = credentials.of{ accessKey = "RocketMQ", secretKey = "12345678" }
--   net.call(addr, { code = ..., ext = ..., credentials = creds })
--   credentials.of{}        -> nil (no credentials: unsigned, or the default)
--   credentials.from_env()  -> RMQ_ACCESS_KEY / RMQ_SECRET_KEY
--                              (/ RMQ_SECURITY_TOKEN), or nil
local M = {}

M.ENV_ACCESS_KEY = "RMQ_ACCESS_KEY"
M.ENV_SECRET_KEY = "RMQ_SECRET_KEY"
M.ENV_SECURITY_TOKEN = "RMQ_SECURITY_TOKEN"

local function check_string(name, v)
    if v ~= nil and (type(v) ~= "string" or v == "") then
        error(("credentials: %s must be a non-empty string"):format(name), 0)
    end
end

--- The credentials of an options table (accessKey, secretKey,
--- securityToken), or nil when it has none.  Raises (one line) when
--- only one of accessKey and secretKey is given, or a value is not a
--- non-empty string: a client with half its credentials would send
--- requests the broker refuses, with no hint why.
function M.of(opts)
    if opts == nil then
        return nil
    end
    local ak, sk, token = opts.accessKey, opts.secretKey, opts.securityToken
    check_string("accessKey", ak)
    check_string("secretKey", sk)
    check_string("securityToken", token)
    if ak == nil and sk == nil then
        if token ~= nil then
            error("credentials: securityToken needs accessKey and secretKey", 0)
        end
        return nil
    end
    if ak == nil or sk == nil then
        error(("credentials: %s given without %s"):format(ak and "accessKey" or "secretKey",
            ak and "secretKey" or "accessKey"), 0)
    end
    return { accessKey = ak, secretKey = sk, securityToken = token }
end

--- The credentials in the environment (RMQ_ACCESS_KEY, RMQ_SECRET_KEY,
--- RMQ_SECURITY_TOKEN), or nil; raises as M.of.  Empty variables count
--- as unset.
function M.from_env(getenv)
    getenv = getenv or os.getenv
    local function get(name)
        local v = getenv(name)
        return v ~= "" and v or nil
    end
    return M.of({ accessKey = get(M.ENV_ACCESS_KEY), secretKey = get(M.ENV_SECRET_KEY),
                  securityToken = get(M.ENV_SECURITY_TOKEN) })
end

--- A copy for display: the secret replaced (logs, --json, errors).
function M.redacted(creds)
    if creds == nil then
        return nil
    end
    return { accessKey = creds.accessKey, secretKey = "***",
             securityToken = creds.securityToken and "***" or nil }
end

return M
