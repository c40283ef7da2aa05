-- Dispatch: request code -> handler, for one role.
--
-- A processor table maps request codes to handlers, each either
--
--   function(ctx, cmd) -> reply | nil
--   { header = spec, run = function(ctx, cmd, h) -> reply | nil }
--   { header = spec, run = ..., native = np }
--
-- where spec is an rmq.header spec (header.compile{...}) or the plain
-- declaration list header.compile takes (compiled here, once).  For the
-- second form the dispatcher reads the header once, before the handler:
-- a missing or malformed field is answered here with SYSTEM_ERROR and a
-- remark naming the field (rmq.header's texts), and the handler gets the
-- typed table `h`.  A table without a header ({run = fn}, as confs may
-- give) is a plain function.  An entry's `native` (an rmq.processors
-- value) serves the code in C, before any Lua runs (rmq.native): the
-- worker installs it (M.natives) and `run` gets what C hands back.
--
-- The dispatcher is deliberately thin: it runs once per request.  Errors
-- raised by a handler are not caught here: the C resume loop turns them
-- into a SYSTEM_ERROR reply with the error text (without its position or
-- any path) and logs the traceback, so no pcall is paid on the success
-- path.
local header = require("rmq.header")
local reply = require("rmq.reply")

local M = {}

--- The compiled spec of a processor entry's header (nil for none).
function M.spec(decl)
    if decl == nil or header.is_spec(decl) then
        return decl
    end
    return header.compile(decl)
end

--- Builds the dispatch function for a processor table.
-- @param processors  {[code] = function(ctx, cmd) | {header=, run=}}
-- @return function(ctx, cmd) -> reply | nil, and {set = function(code,
--         run)} which replaces the handler of a code while it runs (the
--         live console; a code with a header keeps it: run gets h)
function M.new(processors)
    local not_supported = reply.not_supported
    local fns, specs = {}, {}
    for code, h in pairs(processors) do
        if type(h) == "table" then
            fns[code] = assert(h.run, "a processor table needs a run function")
            specs[code] = M.spec(h.header)
        else
            fns[code] = h
        end
    end
    return function(ctx, cmd)
        local code = cmd.code
        local run = fns[code]
        if run == nil then
            return not_supported(cmd)
        end
        local spec = specs[code]
        if spec == nil then
            return run(ctx, cmd)
        end
        local h, rcode, remark = spec:read(cmd)
        if h == nil then
            return reply.error(rcode, remark)
        end
        return run(ctx, cmd, h)
    end, { set = function(code, run) fns[code] = run end }
end

--- The native processors of a processor table: {[code] = np}.
function M.natives(processors)
    local out = {}
    for code, h in pairs(processors) do
        if type(h) == "table" and h.native ~= nil then
            out[code] = h.native
        end
    end
    return out
end

--- Copies `base` and applies `overrides` ({[code] = handler | false});
-- false removes a handler.  Neither input is modified.
function M.merge(base, overrides)
    local t = {}
    for code, h in pairs(base) do
        t[code] = h
    end
    for code, h in pairs(overrides or {}) do
        t[code] = h or nil
    end
    return t
end

return M
