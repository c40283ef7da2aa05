-- rmq.strings: string helpers shared by the control plane.
--
--   strings.trim(s) -> s without leading and trailing blanks (Lua's %s)
--   strings.getenv(name) -> the variable's value, nil when unset or empty
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

function M.getenv(name)
    local v = os.getenv(name)
    if v == nil or v == "" then
        return nil
    end
    return v
end

-- A table's keys in a total order, for printing and for stable output:
-- numbers and numeric strings first, by value ("9" before "10": broker
-- ids, queue ids), then other strings, then anything else by tostring.
local function key_rank(k)
    local n = tonumber(k)
    if n ~= nil then
        return 0, n
    elseif type(k) == "string" then
        return 1, k
    end
    return 2, tostring(k)
end

function M.sorted_keys(t)
    local keys = {}
    for k in pairs(t or {}) do
        keys[#keys + 1] = k
    end
    table.sort(keys, function(a, b)
        local ra, va = key_rank(a)
        local rb, vb = key_rank(b)
        if ra ~= rb then
            return ra < rb
        elseif va ~= vb then
            return va < vb
        end
        return tostring(a) < tostring(b)   -- 1 and "1": by type name's text
    end)
    return keys
end

return M
