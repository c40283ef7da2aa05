-- The NameServer's KV config (RocketMQ's KVConfigManager): load at start,
-- persist after every change, and the four KV requests (protocol.md §3.9).
-- The store itself is C, shared by every worker (rmq.route: rt:kv_*).
--
--   local kv = require "rmq.namesrv.kvconfig"
--   kv.load(rt, path)            -- at start; raises on an unreadable file
--   local P = kv.processors(rt, conf)   -- {[code] = handler}
local codes = require "rmq.codes"
local fastjson = require "rmq.fastjson"
local log = require "rmq.log"

local M = {}

local SUCCESS = codes.response.SUCCESS
local SYSTEM_ERROR = codes.response.SYSTEM_ERROR
local QUERY_NOT_FOUND = codes.response.QUERY_NOT_FOUND

--- The namespace RocketMQ keeps ordered-topic queue layouts in.
M.ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

local function read_file(path)
    local f, err = io.open(path, "rb")
    if f == nil then
        return nil, err
    end
    local s = f:read("a")
    f:close()
    return s
end

--- Loads kvConfig.json ({"configTable":{ns:{key:value}}}) into rt.  A
--- missing file is an empty store; an unreadable or malformed one raises,
--- so the NameServer refuses to start rather than overwrite it later.
function M.load(rt, path)
    local f = io.open(path, "rb")
    if f == nil then
        log.info("KV config %s does not exist yet: starting empty", path)
        return 0
    end
    f:close()
    local text, rerr = read_file(path)
    if text == nil then
        error(("cannot read the KV config %s: %s"):format(path, rerr), 0)
    end
    if not text:match("%S") then
        return 0
    end
    local t, err = fastjson.decode(text)
    if type(t) ~= "table" then
        error(("the KV config %s is not valid JSON (%s); fix or remove it")
            :format(path, err or "not an object"), 0)
    end
    local tables = t.configTable
    if tables == nil or tables == fastjson.null then
        return 0
    end
    if type(tables) ~= "table" then
        error(("the KV config %s: configTable is not an object"):format(path), 0)
    end
    local n = 0
    for ns, kvs in pairs(tables) do
        if type(kvs) ~= "table" then
            error(("the KV config %s: namespace %s is not an object"):format(path, ns), 0)
        end
        for k, v in pairs(kvs) do
            if type(v) ~= "string" then
                error(("the KV config %s: %s/%s is not a string"):format(path, ns, k), 0)
            end
            rt:kv_put(ns, k, v)
            n = n + 1
        end
    end
    log.info("KV config loaded from %s: %d entries", path, n)
    return n
end

--- Writes the store to path (atomically, see src/route/kvconfig.h).
--- Like RocketMQ, a failure is logged and the request still succeeds:
--- the change is in memory and the next write retries the file.
function M.persist(rt, path)
    local ok, err = rt:kv_persist(path)
    if not ok then
        log.error("persist KV config %s failed: %s", path, err)
    end
    return ok, err
end

local function missing(field)
    return { code = SYSTEM_ERROR, remark = "the custom field <" .. field .. "> is null" }
end

--- {[code] = handler} for PUT/GET/DELETE_KV_CONFIG and
--- GET_KVLIST_BY_NAMESPACE.
function M.processors(rt, conf)
    local path = conf.kvConfigPath
    local P = {}

    P[codes.request.PUT_KV_CONFIG] = function(ctx, cmd)
        -- All three are @CFNotNull: Java's header decoding refuses a
        -- missing one before the handler's own "namespace or key is
        -- null" check could run.
        local ns, key, value = cmd:get("namespace"), cmd:get("key"), cmd:get("value")
        if ns == nil then
            return missing("namespace")
        elseif key == nil then
            return missing("key")
        elseif value == nil then
            return missing("value")
        end
        rt:kv_put(ns, key, value)
        log.info("putKVConfig %s/%s = %s (from %s)", ns, key, value, ctx.peer)
        M.persist(rt, path)
        return { code = SUCCESS }
    end

    P[codes.request.GET_KV_CONFIG] = function(ctx, cmd)
        local ns, key = cmd:get("namespace"), cmd:get("key")
        if ns == nil then
            return missing("namespace")
        elseif key == nil then
            return missing("key")
        end
        local v = rt:kv_get(ns, key)
        if v == nil then
            return { code = QUERY_NOT_FOUND,
                     remark = "No config item, Namespace: " .. ns .. " Key: " .. key }
        end
        return { code = SUCCESS, ext = { value = v } }
    end

    P[codes.request.DELETE_KV_CONFIG] = function(ctx, cmd)
        local ns, key = cmd:get("namespace"), cmd:get("key")
        if ns == nil then
            return missing("namespace")
        elseif key == nil then
            return missing("key")
        end
        if rt:kv_delete(ns, key) then
            log.info("deleteKVConfig %s/%s (from %s)", ns, key, ctx.peer)
        end
        M.persist(rt, path)
        return { code = SUCCESS }
    end

    P[codes.request.GET_KVLIST_BY_NAMESPACE] = function(ctx, cmd)
        local ns = cmd:get("namespace")
        if ns == nil then
            return missing("namespace")
        end
        local body = rt:kv_list(ns)
        if body == nil then
            return { code = QUERY_NOT_FOUND, remark = "No config item, Namespace: " .. ns }
        end
        return { code = SUCCESS, body = body }
    end

    return P
end

return M
