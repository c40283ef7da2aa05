-- rmq.strings: string helpers shared by the control plane.
--
--   strings.trim(s) -> s without leading and trailing blanks (Lua's %s)
--
-- Linear in #s: the idioms s:match("^%s*(.-)%s*$") and
-- s:gsub("%s+$", "") retry their pattern at every blank of an inner run,
-- quadratic on a string of spaces with a letter at the end, and these
-- run on request bodies (subscription expressions, config updates).
local M = {}

function M.trim(s)
    local i = s:find("%S")
    if i == nil then
        return ""
    end
    local j = #s
    while s:find("^%s", j) do
        j = j - 1
    end
    return s:sub(i, j)
end

return M
