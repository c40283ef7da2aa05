-- fixtures: finds the shared captured-traffic fixtures and reads their
-- JSON-lines files.  They live outside the repository, in ../shared
-- beside it (the same layout locally and in CI); RMQ_FIXTURES overrides.
local cjson = require "cjson"
local base64 = require "support.base64"

local M = {}

M.null = cjson.null

local function is_file(path)
    local f = io.open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

-- The fixtures directory (the one holding frames/), or nil, reason.
function M.dir()
    local candidates = {}
    local env = os.getenv("RMQ_FIXTURES")
    if env and env ~= "" then
        candidates[#candidates + 1] = env
    end
    -- Relative to the working directory (busted runs from the repo root)
    -- and to this file (spec/support/ -> repo root -> ../shared).
    candidates[#candidates + 1] = "../shared/fixtures"
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")
    if here then
        candidates[#candidates + 1] = here .. "/../../../shared/fixtures"
    end
    for _, dir in ipairs(candidates) do
        if is_file(dir .. "/frames/INDEX.md") then
            return dir
        end
    end
    return nil, "fixtures not found (tried " .. table.concat(candidates, ", ")
        .. "; set RMQ_FIXTURES)"
end

--- True when the fixtures are here, or when CI is set (CI=true: a
--- missing ../shared is a failure there, not a skip).
function M.present()
    return M.dir() ~= nil or os.getenv("CI") == "true"
end

M.SKIP = " [skipped: needs ../shared/fixtures]"

--- The `it` (or `describe`) to declare a block that needs the fixtures
--- with: the given one when they are present, else one that declares it
--- pending, so a bare clone's run passes and busted counts what it left
--- out.  Usage: local fx_it = fixtures.gate(it, pending)
function M.gate(block, pending_fn)
    if M.present() then
        return block
    end
    return function(name)
        pending_fn(name .. M.SKIP)
    end
end

-- Sorted names (not paths) of the *.jsonl files in dir.
local function list_jsonl(dir)
    local names = {}
    local ok, lfs = pcall(require, "lfs")
    if ok then
        for name in lfs.dir(dir) do
            if name:match("%.jsonl$") then
                names[#names + 1] = name
            end
        end
    else
        local p = assert(io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "'"))
        for name in p:lines() do
            if name:match("%.jsonl$") then
                names[#names + 1] = name
            end
        end
        p:close()
    end
    table.sort(names)
    return names
end

-- Every frames/*.jsonl file name, sorted.
function M.frame_files()
    local dir = assert(M.dir())
    return list_jsonl(dir .. "/frames")
end

-- The lines of a JSON-lines file as tables.  Each also gets `file`,
-- `line` and, when it has raw_b64, `raw` (the decoded bytes).
function M.read_jsonl(path)
    local f = assert(io.open(path, "rb"))
    local rows = {}
    local n = 0
    for line in f:lines() do
        n = n + 1
        if line:match("%S") then
            local row = cjson.decode(line)
            row.file = path:match("[^/]*$")
            row.line = n
            if type(row.raw_b64) == "string" then
                row.raw = base64.decode(row.raw_b64)
            end
            rows[#rows + 1] = row
        end
    end
    f:close()
    return rows
end

-- The frames of frames/<name> (e.g. "route.jsonl").
function M.frames(name)
    local dir = assert(M.dir())
    return M.read_jsonl(dir .. "/frames/" .. name)
end

-- Request/reply pairs of a capture file, matched by connection and
-- opaque: {req = row, resp = row | nil}.
function M.pairs_of(file)
    local rows = M.frames(file)
    local out = {}
    for i, r in ipairs(rows) do
        if r.dir == "c2s" then
            local p = { req = r }
            for j = i + 1, #rows do
                local x = rows[j]
                if x.dir == "s2c" and x.conn == r.conn and x.decoded.opaque == r.decoded.opaque
                    and x.decoded.flag % 2 == 1 then
                    p.resp = x
                    break
                end
            end
            out[#out + 1] = p
        end
    end
    return out
end

-- Raises, showing where two frames differ, unless they are equal.
function M.same_frame(expected, got, what)
    if expected == got then
        return
    end
    local i = 1
    while i <= #expected and expected:byte(i) == got:byte(i) do
        i = i + 1
    end
    error(("%s: reply differs at byte %d\nexpected: %q\n     got: %q")
        :format(what, i, expected:sub(math.max(1, i - 40), i + 80),
        got:sub(math.max(1, i - 40), i + 80)), 2)
end

return M
