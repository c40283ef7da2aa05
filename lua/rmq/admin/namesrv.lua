-- The NameServer family: getNamesrvConfig, updateNamesrvConfig,
-- updateKvConfig, deleteKvConfig (mqadmin's tools/command/namesrv), and
-- the KV calls the topic family's order conf uses.
--
--   namesrv.config(ctx) -> { {addr=, config={k=v}}, ... }        every NameServer of -n
--   namesrv.update_config(ctx, {key=, value=}) -> {namesrvs=, key=, value=}
--   namesrv.get_kv(ctx, {namespace=, key=}) -> {namespace=, key=, value=}
--   namesrv.put_kv(ctx, {namespace=, key=, value=}) -> {...}    to every NameServer
--   namesrv.delete_kv(ctx, {namespace=, key=}) -> {...}         to every NameServer
--   namesrv.kv_list(ctx, {namespace=}) -> {k=v}
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")

local M = {}

local function array(t)
    return setmetatable(t, fastjson.array_mt)
end

--- MixAll.properties2String: key=value lines.
function M.properties_text(t)
    local out = {}
    for _, k in ipairs(remote.sorted_keys(t)) do
        out[#out + 1] = k .. "=" .. tostring(t[k]) .. "\n"
    end
    return table.concat(out)
end

-- A request to every NameServer of -n; the last refusal is raised after
-- all were asked (MQClientAPIImpl.putKVConfigValue and friends).
local function each_namesrv(ctx, cmd)
    if #ctx.namesrv == 0 then
        error(remote.usage("no NameServer address (-n or NAMESRV_ADDR)"), 0)
    end
    local failure
    for _, addr in ipairs(ctx.namesrv) do
        local ok, err = pcall(remote.ok, ctx, addr, cmd)
        if not ok then
            if not remote.is_error(err) then
                error(err, 0)
            end
            failure = err
        end
    end
    if failure then
        error(failure, 0)
    end
    return array({ table.unpack(ctx.namesrv) })
end

function M.config(ctx)
    local out = {}
    for _, addr in ipairs(ctx.namesrv) do
        local r = remote.ok(ctx, addr, { code = codes.request.GET_NAMESRV_CONFIG })
        out[#out + 1] = { addr = addr, config = remote.properties(r.body) }
    end
    return array(out)
end

function M.update_config(ctx, o)
    local namesrvs = each_namesrv(ctx, { code = codes.request.UPDATE_NAMESRV_CONFIG,
                                         body = M.properties_text({ [o.key] = o.value }) })
    return { namesrvs = namesrvs, key = o.key, value = o.value }
end

function M.get_kv(ctx, o)
    local r = remote.ns(ctx, { code = codes.request.GET_KV_CONFIG, ext = { namespace = o.namespace, key = o.key } })
    return { namespace = o.namespace, key = o.key, value = (r.ext or {}).value }
end

function M.put_kv(ctx, o)
    local namesrvs = each_namesrv(ctx, { code = codes.request.PUT_KV_CONFIG,
                                         ext = { namespace = o.namespace, key = o.key, value = o.value } })
    return { namespace = o.namespace, key = o.key, value = o.value, namesrvs = namesrvs }
end

function M.delete_kv(ctx, o)
    local namesrvs = each_namesrv(ctx, { code = codes.request.DELETE_KV_CONFIG,
                                         ext = { namespace = o.namespace, key = o.key } })
    return { namespace = o.namespace, key = o.key, namesrvs = namesrvs }
end

function M.kv_list(ctx, o)
    local r, addr = remote.ns(ctx, { code = codes.request.GET_KVLIST_BY_NAMESPACE, ext = { namespace = o.namespace } })
    return remote.kvtable(r.body, addr)
end

local function nonempty(key)
    return function(o)
        if o[key] == "" then
            error(remote.usage(("--%s must not be empty"):format(key)), 0)
        end
    end
end

M.commands = {
    { name = "getNamesrvConfig", desc = "Get configs of name server.",
      options = {}, run = M.config, format = remote.format_config },
    { name = "updateNamesrvConfig", desc = "Update configs of name server.",
      options = {
          { "k", "key", arg = true, required = true, desc = "config key" },
          { "v", "value", arg = true, required = true, desc = "config value" },
      },
      check = nonempty("key"),
      run = M.update_config,
      format = function(r)
          return ("update name server config success!%s\n%s : %s"):format(
              "[" .. table.concat(r.namesrvs, ", ") .. "]", r.key, r.value)
      end },
    { name = "updateKvConfig", desc = "Create or update KV config.",
      options = {
          { "s", "namespace", arg = true, required = true, desc = "set the namespace" },
          { "k", "key", arg = true, required = true, desc = "set the key name" },
          { "v", "value", arg = true, required = true, desc = "set the key value" },
      },
      check = function(o) nonempty("namespace")(o); nonempty("key")(o) end,
      run = M.put_kv,
      format = function() return "create or update kv config to namespace success." end },
    { name = "deleteKvConfig", desc = "Delete KV config.",
      options = {
          { "s", "namespace", arg = true, required = true, desc = "set the namespace" },
          { "k", "key", arg = true, required = true, desc = "set the key name" },
      },
      run = M.delete_kv,
      format = function() return "delete kv config from namespace success." end },
}

return M
