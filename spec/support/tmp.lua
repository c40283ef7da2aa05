-- Temporary files and directories for specs, under the run's own root
-- (RMQ_TEST_TMP: scripts/test.sh makes it and removes it after the run,
-- so runs side by side never remove each other's stores), else in /tmp
-- where Lua's os.tmpname puts them (a plain busted run).
--
--   tmp.name() -> path (nothing made), tmp.dir() -> path, tmp.file() -> path
local M = {}

local root = os.getenv("RMQ_TEST_TMP")

function M.name()
    local p = os.tmpname()   -- a name no one else holds
    os.remove(p)
    if root ~= nil and root ~= "" then
        return root .. "/" .. p:match("[^/]+$")
    end
    return p
end

function M.dir()
    local p = M.name()
    assert(os.execute("mkdir -p '" .. p .. "'"))
    return p
end

function M.file()
    local p = M.name()
    assert(io.open(p, "w")):close()
    return p
end

return M
