-- The broker role.  Its processors (send, pull, clients, offsets, admin)
-- come with the storage and messaging issues; until then it listens on
-- listenPort and the VIP port and answers REQUEST_CODE_NOT_SUPPORTED, and
-- a conf may add handlers of its own.
local M = {}

function M.processors(conf)
    return {}
end

return M
