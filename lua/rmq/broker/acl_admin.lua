-- Broker: the ACL admin requests as a 4.9.8 broker answers them
-- (AdminBrokerProcessor and PlainPermissionManager @4.9.8):
--
--   UPDATE_AND_CREATE_ACL_CONFIG (50)       an account created or updated
--   DELETE_ACL_CONFIG (51)                  an account removed
--   GET_BROKER_CLUSTER_ACL_INFO (52)        the file's dataVersion
--   UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53)   globalWhiteRemoteAddresses set
--
-- GET_BROKER_CLUSTER_ACL_CONFIG (54) has no processor in 4.9.8 either:
-- it is answered REQUEST_CODE_NOT_SUPPORTED.  Every change rewrites
-- aclFile atomically (rmq.acl.plain.write: temp file + rename) and loads
-- it at once; one change at a time across the workers (a 4.9.8 broker's
-- methods are synchronized).  Unlike 4.9.8, a change that would leave a
-- file the broker cannot load (a bad address pattern) is refused and the
-- file left alone; and the ACL check asks these of an admin account.
local codes = require("rmq.codes")
local header = require("rmq.header")
local net = require("rmq.net")
local log = require("rmq.log")
local cacl = require("rmq.acl")
local cjson = require("cjson")
local plain = require("rmq.acl.plain")

local M = {}

local req, R = codes.request, codes.response
local NULL = cacl.NULL

M.HEADER_CREATE = header.compile({
    { "accessKey", "string", true },
    { "secretKey", "string", false },
    { "whiteRemoteAddress", "string", false },
    { "admin", "bool", false },
    { "defaultTopicPerm", "string", false },
    { "defaultGroupPerm", "string", false },
    { "topicPerms", "string", false },
    { "groupPerms", "string", false },
})
M.HEADER_DELETE = header.compile({ { "accessKey", "string", true } })
-- Both fields are @CFNotNull in 4.9.8, but its reflective header
-- decoding only logs a missing field and goes on: mqadmin
-- updateGlobalWhiteAddr without -p sends no aclFileFullPath and 4.9.8
-- writes its default file; without globalWhiteAddrs it answers
-- "The globalWhiteAddresses[null] has been updated failed.".
M.HEADER_WHITE = header.compile({
    { "globalWhiteAddrs", "string", false },
    { "aclFileFullPath", "string", false },
})

-- Java's String.split(","): trailing empty pieces dropped, "" stays [""].
local function jsplit(s)
    if s == nil then
        return nil
    end
    local out = {}
    for piece in (s .. ","):gmatch("([^,]*),") do
        out[#out + 1] = piece
    end
    while #out > 1 and out[#out] == "" do
        out[#out] = nil
    end
    return out
end

-- Permission.checkResourcePerms
local function check_resource_perms(list)
    for _, r in ipairs(list or {}) do
        local items = {}
        for piece in r:gmatch("[^=]+") do
            items[#items + 1] = piece
        end
        if #items ~= 2 then
            return ("Parse Resource format error for %s.\n"
                .. "The expected resource format is 'Res=Perm'. For example: topicA=SUB"):format(r)
        end
        local p = items[2]:match("^%s*(.-)%s*$")
        if p ~= "DENY" and not cacl.perm_valid(p) then
            return ("Parse resource permission error for %s.\n"
                .. "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."):format(r)
        end
    end
end

-- One change at a time across the workers (and the main thread's
-- reload): a flag in a shared map.
local LOCK = plain.LOCK
local function locked(fn)
    local me = tostring(net.worker_id())
    local waited = 0
    while not LOCK:set("lock", me, true) do
        net.sleep(1)
        waited = waited + 1
        if waited > 10000 then
            return nil, "another ACL change is still running"
        end
    end
    local ok, a, b = pcall(fn)
    LOCK:del("lock")
    if not ok then
        error(a, 0)
    end
    return a, b
end

-- Runs fn(data) on the file's data under the lock; fn changes data and
-- returns plain.write's result (or false: nothing to change).
local function edit(conf, fn)
    return locked(function()
        local data, err = plain.read(conf)
        if not data then
            return nil, err
        end
        return fn(data)
    end)
end

local function nonempty(s)
    return s ~= nil and s ~= ""
end

-- createAclAccessConfigMap: the header's fields over an existing account.
local function merge(account, h)
    local a = account or {}
    if not nonempty(h.accessKey) or #h.accessKey <= 6 then
        return nil, ("The accessKey=%s cannot be null and length should longer than 6"):format(
            tostring(h.accessKey))
    end
    a.accessKey = h.accessKey
    if nonempty(h.secretKey) then
        if #h.secretKey <= 6 then
            return nil, ("The secretKey=%s value length should longer than 6"):format(h.secretKey)
        end
        a.secretKey = h.secretKey
    end
    if h.whiteRemoteAddress ~= nil then
        a.whiteRemoteAddress = h.whiteRemoteAddress
    end
    a.admin = h.admin == true
    if nonempty(h.defaultTopicPerm) then
        a.defaultTopicPerm = h.defaultTopicPerm
    end
    if nonempty(h.defaultGroupPerm) then
        a.defaultGroupPerm = h.defaultGroupPerm
    end
    if h.topicPerms ~= nil then
        a.topicPerms = jsplit(h.topicPerms)
    end
    if h.groupPerms ~= nil then
        a.groupPerms = jsplit(h.groupPerms)
    end
    return a
end

local function accounts_of(data)
    if type(data.accounts) ~= "table" then
        data.accounts = {}
    end
    return data.accounts
end

local function update_account(conf, h)
    local ak, sk = h.accessKey, h.secretKey
    if ak == nil or sk == nil or #ak <= 6 or #sk <= 6 then
        return nil, ("The accessKey=%s and secretKey=%s cannot be null and length should longer than 6"):format(
            tostring(ak), tostring(sk))
    end
    local tp, gp = jsplit(h.topicPerms), jsplit(h.groupPerms)
    local perr = check_resource_perms(tp) or check_resource_perms(gp)
    if perr then
        return nil, perr
    end
    return edit(conf, function(data)
        local accounts = accounts_of(data)
        local existing
        for i, a in ipairs(accounts) do
            if type(a) == "table" and a.accessKey == ak then
                existing = table.remove(accounts, i)
                break
            end
        end
        local merged, merr = merge(existing, h)
        if not merged then
            return nil, merr
        end
        -- an update goes to the end, as 4.9.8's remove + add
        accounts[#accounts + 1] = merged
        return plain.write(conf, data)
    end)
end

local function delete_account(conf, ak)
    if not nonempty(ak) then
        return false
    end
    return edit(conf, function(data)
        for i, a in ipairs(accounts_of(data)) do
            if type(a) == "table" and a.accessKey == ak then
                table.remove(data.accounts, i)
                return plain.write(conf, data)
            end
        end
        return false
    end)
end

local function update_white(conf, list, file)
    if list == nil then
        return false
    end
    if file ~= nil and file ~= "" and file ~= plain.path(conf) then
        log.warn("UPDATE_GLOBAL_WHITE_ADDRS_CONFIG for %s refused: the ACL file is %s", file, plain.path(conf))
        return false
    end
    return edit(conf, function(data)
        data.globalWhiteRemoteAddresses = list
        return plain.write(conf, data)
    end)
end

-- DataVersion.toJson (fastjson: keys sorted).
local function version_json(dv)
    return ('{"counter":%d,"timestamp":%d}'):format(dv.counter, dv.timestamp)
end

local function data_version(conf)
    local data = plain.read(conf) or {}
    local dv = type(data.dataVersion) == "table" and data.dataVersion[1] or nil
    local counter = dv and math.tointeger(tonumber(dv.counter ~= NULL and dv.counter or 0)) or 0
    local ts = dv and math.tointeger(tonumber(dv.timestamp ~= NULL and dv.timestamp or 0)) or 0
    return { counter = counter or 0, timestamp = ts or 0 }
end

function M.processors(b)
    local conf = b.conf
    local P = {}
    if not conf.aclEnable then
        return P
    end

    -- SUCCESS, or the FAILED code with the reason (4.9.8's exception
    -- message) or 4.9.8's "... has been updated failed." text
    local function answer(ok, err, failed, fallback)
        if ok then
            return { code = R.SUCCESS }
        end
        -- a file's trouble (unreadable, broken by hand, disk full) is the
        -- operator's to read in the log: a reply names no server path
        if err and err:find(plain.path(conf), 1, true) then
            log.error("ACL change refused: %s", err)
            err = nil
        end
        return { code = failed, remark = err or fallback }
    end

    P[req.UPDATE_AND_CREATE_ACL_CONFIG] = { header = M.HEADER_CREATE, run = function(ctx, cmd, h)
        log.info("UPDATE_AND_CREATE_ACL_CONFIG %s from %s", h.accessKey, ctx.peer)
        local ok, err = update_account(conf, h)
        return answer(ok, err, R.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
            ("The accesskey[%s] corresponding to accessConfig has been updated failed."):format(h.accessKey))
    end }

    P[req.DELETE_ACL_CONFIG] = { header = M.HEADER_DELETE, run = function(ctx, cmd, h)
        log.info("DeleteAccessConfig called by %s", ctx.peer)
        local ok, err = delete_account(conf, h.accessKey)
        return answer(ok, err, R.DELETE_ACL_CONFIG_FAILED,
            ("The accesskey[%s] corresponding to accessConfig has been deleted failed."):format(h.accessKey))
    end }

    P[req.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG] = { header = M.HEADER_WHITE, run = function(ctx, cmd, h)
        log.info("UPDATE_GLOBAL_WHITE_ADDRS_CONFIG %s from %s", h.globalWhiteAddrs, ctx.peer)
        local ok, err = update_white(conf, jsplit(h.globalWhiteAddrs), h.aclFileFullPath)
        return answer(ok, err, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
            ("The globalWhiteAddresses[%s] has been updated failed."):format(h.globalWhiteAddrs or "null"))
    end }

    P[req.GET_BROKER_CLUSTER_ACL_INFO] = function()
        local dv = data_version(conf)
        return { code = R.SUCCESS, ext = {
            version = version_json(dv),
            -- fastjson's shape, keys sorted; 4.9.8 keys it by the file's
            -- full path, rmq by its name (a reply names no server path)
            allAclFileVersion = "{" .. cjson.encode(plain.path(conf):match("[^/]*$")) .. ":"
                .. version_json(dv) .. "}",
            brokerAddr = b.addr, brokerName = conf.brokerName, clusterName = conf.brokerClusterName,
        } }
    end

    return P
end

return M
