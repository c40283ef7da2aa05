-- The topic family of `rmq admin` (being written).
local M = {}

M.commands = {}

return M
