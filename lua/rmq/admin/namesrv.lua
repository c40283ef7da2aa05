-- The namesrv family of `rmq admin` (being written).
local M = {}

M.commands = {}

return M
