-- The NameServer role.  Its processors (route registry, KV config) are
-- issue #3; until then every request gets REQUEST_CODE_NOT_SUPPORTED from
-- the dispatcher, and a conf may add handlers of its own.
local M = {}

--- {[request code] = function(ctx, cmd)} for one worker.
function M.processors(conf)
    return {}
end

return M
