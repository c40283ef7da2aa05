-- Values as readable Lua text for the live console: tables with sorted
-- keys, nested tables indented, cut at a depth and a size so a large
-- table cannot flood a session.
--
--   show(v [, {depth=, max_items=}]) -> text
local M = {}

local function key_text(k)
    if type(k) == "string" and k:match("^[%a_][%w_]*$") then
        return k
    end
    if type(k) == "string" then
        return ("[%q]"):format(k)
    end
    return "[" .. tostring(k) .. "]"
end

local function scalar(v)
    if type(v) == "string" then
        return ("%q"):format(v):gsub("\\\n", "\\n")
    end
    return tostring(v)
end

local sorted_keys = require("rmq.conf").sorted_keys

local function render(v, indent, depth, opts, seen, out)
    if type(v) ~= "table" then
        out[#out + 1] = scalar(v)
        return
    end
    if seen[v] then
        out[#out + 1] = "<cycle>"
        return
    end
    if depth >= opts.depth then
        out[#out + 1] = "{...}"
        return
    end
    local keys = sorted_keys(v)
    if #keys == 0 then
        out[#out + 1] = "{}"
        return
    end
    seen[v] = true
    local n = #v
    local inner = indent .. "  "
    out[#out + 1] = "{\n"
    for i, k in ipairs(keys) do
        if i > opts.max_items then
            out[#out + 1] = ("%s... (%d more)\n"):format(inner, #keys - opts.max_items)
            break
        end
        out[#out + 1] = inner
        if not (math.type(k) == "integer" and k >= 1 and k <= n) then
            out[#out + 1] = key_text(k) .. " = "
        end
        render(v[k], inner, depth + 1, opts, seen, out)
        out[#out + 1] = ",\n"
    end
    out[#out + 1] = indent .. "}"
    seen[v] = nil
end

function M.show(v, opts)
    opts = opts or {}
    opts.depth = opts.depth or 6
    opts.max_items = opts.max_items or 500
    local out = {}
    render(v, "", 0, opts, {}, out)
    return table.concat(out)
end

return M
