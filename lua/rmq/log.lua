-- Logging from Lua into the server's log (same lines, levels and sink as
-- the C core).  log.info(fmt, ...) formats only when the level is enabled.
local core = require("rmq.core")

local M = {}

local function make(level)
    return function(fmt, ...)
        if core.log_enabled(level) then
            if select("#", ...) > 0 then
                core.log(level, string.format(fmt, ...))
            else
                core.log(level, tostring(fmt))
            end
        end
    end
end

M.debug = make("debug")
M.info = make("info")
M.warn = make("warn")
M.error = make("error")

return M
