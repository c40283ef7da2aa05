-- Temporary files and directories for specs, under the run's own root
-- (RMQ_TEST_TMP: scripts/test.sh makes it and removes it after the run,
-- so runs side by side never remove each other's stores), else in /tmp
-- where Lua's os.tmpname puts them (a plain busted run).
--
--   tmp.name() -> path (nothing made), tmp.dir() -> path, tmp.file() -> path
local M = {}

local root = os.getenv("RMQ_TEST_TMP")
if root == "" then
    root = nil
end

local function exists(p)
    local f = io.open(p, "r")
    if f then
        f:close()
        return true
    end
    return os.rename(p, p) ~= nil   -- a directory
end

local ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
local seeded = false

function M.name()
    if root == nil then
        local p = os.tmpname()   -- a name no one else holds
        os.remove(p)
        return p
    end
    -- Under the run's own root: nothing is made in /tmp (os.tmpname
    -- creates its file there).  The root is this run's alone; the name
    -- is checked free (two busted processes never share a root).
    if not seeded then
        local f = io.open("/dev/urandom", "rb")
        local bytes = f and f:read(8) or tostring(os.time())
        if f then
            f:close()
        end
        math.randomseed(string.unpack("<i8", (bytes .. "\0\0\0\0\0\0\0\0"):sub(1, 8)))
        seeded = true
    end
    for _ = 1, 1000 do
        local t = {}
        for i = 1, 8 do
            local k = math.random(#ALNUM)
            t[i] = ALNUM:sub(k, k)
        end
        local p = root .. "/lua_" .. table.concat(t)
        if not exists(p) then
            return p
        end
    end
    error("no free temp name under " .. root)
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
