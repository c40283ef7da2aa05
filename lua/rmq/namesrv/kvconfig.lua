-- The NameServer's KV config (RocketMQ's KVConfigManager): load at start,
-- persist after every change, and the four KV requests (protocol.md §3.9).
-- The store itself is C, shared by every worker (rmq.route: rt:kv_*).
--
--   local kv = require "rmq.namesrv.kvconfig"
--   kv.load(rt, path)            -- at start; raises on an unreadable file
--   local P = kv.processors(rt, conf)   -- {[code] = handler}
local codes = require "rmq.codes"
local configfile = require "rmq.configfile"
local fastjson = require "rmq.fastjson"
local log = require "rmq.log"
local reply = require "rmq.reply"

local M = {}

local QUERY_NOT_FOUND = codes.response.QUERY_NOT_FOUND

--- The namespace RocketMQ keeps ordered-topic queue layouts in.
M.ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

--- Loads kvConfig.json ({"configTable":{ns:{key:value}}}) into rt.  A
--- missing file is an empty store; an unreadable or malformed one (and
--- no readable kvConfig.json.bak, rmq.configfile.read) raises, so the
--- NameServer refuses to start rather than overwrite it later.
function M.load(rt, path)
    local t, err = configfile.read(path)
    if err then
        error(("the KV config is not valid JSON (%s); fix or remove it"):format(err), 0)
    end
    if t == nil then
        log.info("KV config %s does not exist yet: starting empty", path)
        return 0
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

-- The request headers: every field is @CFNotNull, so Java's header
-- decoding refuses a missing one (SYSTEM_ERROR "the custom field <x> is
-- null", in declaration order; rmq.header writes the same) before the
-- handler's own "namespace or key is null" check could run.
local NS_HEADER = { { "namespace", "string", true } }
local KEY_HEADER = { { "namespace", "string", true }, { "key", "string", true } }
local PUT_HEADER = { { "namespace", "string", true }, { "key", "string", true },
                     { "value", "string", true } }

--- {[code] = handler} for PUT/GET/DELETE_KV_CONFIG and
--- GET_KVLIST_BY_NAMESPACE.
function M.processors(rt, conf)
    local path = conf.kvConfigPath
    local P = {}

    P[codes.request.PUT_KV_CONFIG] = { header = PUT_HEADER, run = function(ctx, cmd, h)
        rt:kv_put(h.namespace, h.key, h.value)
        log.info("putKVConfig %s/%s = %s (from %s)", h.namespace, h.key, h.value, ctx.peer)
        M.persist(rt, path)
        return reply.ok()
    end }

    P[codes.request.GET_KV_CONFIG] = { header = KEY_HEADER, run = function(ctx, cmd, h)
        local v = rt:kv_get(h.namespace, h.key)
        if v == nil then
            return reply.error(QUERY_NOT_FOUND, "No config item, Namespace: " .. h.namespace .. " Key: " .. h.key)
        end
        return reply.ok({ value = v })
    end }

    P[codes.request.DELETE_KV_CONFIG] = { header = KEY_HEADER, run = function(ctx, cmd, h)
        if rt:kv_delete(h.namespace, h.key) then
            log.info("deleteKVConfig %s/%s (from %s)", h.namespace, h.key, ctx.peer)
        end
        M.persist(rt, path)
        return reply.ok()
    end }

    P[codes.request.GET_KVLIST_BY_NAMESPACE] = { header = NS_HEADER, run = function(ctx, cmd, h)
        local body = rt:kv_list(h.namespace)
        if body == nil then
            return reply.error(QUERY_NOT_FOUND, "No config item, Namespace: " .. h.namespace)
        end
        return reply.ok(nil, body)
    end }

    return P
end

return M
