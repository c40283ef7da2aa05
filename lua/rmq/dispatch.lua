-- Dispatch: request code -> handler, for one role.
--
-- A processor table maps request codes to handlers
-- `function(ctx, cmd) -> reply | nil`.  The dispatcher is deliberately
-- thin: it runs once per request.  Errors raised by a handler are not
-- caught here: the C resume loop turns them into a SYSTEM_ERROR reply with
-- the error text and logs the traceback, so no pcall is paid on the
-- success path.
local reply = require("rmq.reply")

local M = {}

--- Builds the dispatch function for a processor table.
-- @param processors  {[code] = function(ctx, cmd)}
-- @return function(ctx, cmd) -> reply | nil
function M.new(processors)
    local not_supported = reply.not_supported
    return function(ctx, cmd)
        local h = processors[cmd.code]
        if h == nil then
            return not_supported(cmd)
        end
        return h(ctx, cmd)
    end
end

--- Copies `base` and applies `overrides` ({[code] = fn | false}); false
-- removes a handler.  Neither input is modified.
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
