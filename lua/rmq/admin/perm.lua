-- The perm family: wipeWritePerm, addWritePerm (mqadmin's
-- WipeWritePermSubCommand, AddWritePermSubCommand): a broker name's write
-- permission taken away or given back in the routes of every NameServer
-- of -n, so producers send to the other brokers.
--
--   perm.wipe(ctx, {brokerName=}) -> { {namesrv=, count=} | {namesrv=, error=}, ... }
--   perm.add(ctx, {brokerName=})  -> the same, count = addTopicCount
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")

local M = {}

local function each(ctx, o, code, count_key)
    local out = setmetatable({}, fastjson.array_mt)
    local failed = false
    for _, ns in ipairs(ctx.namesrv) do
        local ok, r = pcall(remote.ok, ctx, ns, { code = code, ext = { brokerName = o.brokerName } })
        if ok then
            out[#out + 1] = { namesrv = ns, count = tonumber((r.ext or {})[count_key]) or 0 }
        elseif remote.is_error(r) then
            out[#out + 1] = { namesrv = ns, error = tostring(r) }
            failed = r
        else
            error(r, 0)
        end
    end
    -- Every NameServer failed: that is the command's error (exit 1 or 3).
    local failures = 0
    for _, e in ipairs(out) do
        failures = failures + (e.error and 1 or 0)
    end
    if failed and failures == #out then
        error(failed, 0)
    end
    -- Some did, some did not: the lines say which; the exit code says so.
    out.exit = failed and 1 or nil
    return out
end

function M.wipe(ctx, o)
    return each(ctx, o, codes.request.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount")
end

function M.add(ctx, o)
    return each(ctx, o, codes.request.ADD_WRITE_PERM_OF_BROKER, "addTopicCount")
end

local function formatter(verb)
    return function(rows, o)
        local out = {}
        for _, r in ipairs(rows) do
            if r.error then
                out[#out + 1] = ("%s write perm of broker[%s] in name server[%s] Failed: %s"):format(verb,
                    o.brokerName, r.namesrv, r.error)
            else
                out[#out + 1] = ("%s write perm of broker[%s] in name server[%s] OK, %d"):format(verb,
                    o.brokerName, r.namesrv, r.count)
            end
        end
        return table.concat(out, "\n")
    end
end

local BROKER = { "b", "brokerName", arg = true, required = true, desc = "broker name" }

M.commands = {
    { name = "wipeWritePerm", desc = "Wipe write perm of broker in all name server you defined in the -n param",
      options = { BROKER }, run = M.wipe, format = formatter("wipe") },
    { name = "addWritePerm", desc = "Add write perm of broker in all name server you defined in the -n param",
      options = { BROKER }, run = M.add, format = formatter("add") },
}

return M
