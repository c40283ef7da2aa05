-- How `rmq repl` shows a value.  A list of records (tables of plain
-- values: what admin commands return) is an aligned table with a header
-- line, as mqadmin prints them; a list of plain values is one per line;
-- any other table is "key  value" lines, nested tables indented, keys
-- sorted.  A list may name its columns and their order in its metatable
-- (`__columns = {"broker", "queueId", ...}`); otherwise the columns are
-- the records' keys, sorted.
--
--   pretty.format(value [, limits]) -> string
--     limits.maxRows   rows shown of one list (default 1000; the rest are
--                      counted in one "... N more" line)
--     limits.maxDepth  nesting shown (default 8)
--     limits.maxCell   characters of one cell or scalar (default 200)
local M = {}

local DEFAULTS = { maxRows = 1000, maxDepth = 8, maxCell = 200 }

local function is_plain(v)
    local t = type(v)
    return t == "string" or t == "number" or t == "boolean" or t == "nil"
end

-- 1..n with no other keys.
local function is_list(t)
    local n = #t
    if n == 0 then
        return false
    end
    local count = 0
    for _ in pairs(t) do
        count = count + 1
        if count > n then
            return false
        end
    end
    return count == n
end

local function has_tostring(v)
    local mt = type(v) == "table" and getmetatable(v)
    return mt and mt.__tostring ~= nil
end

local function is_flat(t)
    if type(t) ~= "table" or has_tostring(t) then
        return false
    end
    for _, v in pairs(t) do
        if not is_plain(v) then
            return false
        end
    end
    return true
end

-- A row of a table: plain values, or flat maps of a few entries (a
-- broker's {0 = addr}), shown in one cell.
local function is_record(t)
    if type(t) ~= "table" or has_tostring(t) then
        return false
    end
    for _, v in pairs(t) do
        if not is_plain(v) and not (is_flat(v) and #v == 0) then
            return false
        end
    end
    return true
end

local function clip(s, limits)
    if #s > limits.maxCell then
        return s:sub(1, limits.maxCell - 3) .. "..."
    end
    return s
end

local scalar

scalar = function(v, limits)
    if type(v) == "string" then
        -- Control characters would move the cursor: show them escaped.
        return clip((v:gsub("[%c]", function(c)
            return ("\\%d"):format(c:byte())
        end)), limits)
    end
    if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
        return ("%d"):format(v)   -- JSON numbers decode as floats: 4, not 4.0
    end
    if type(v) == "table" and not has_tostring(v) then
        -- A flat map in a cell: "k=v k=v", keys sorted.
        local keys, parts = {}, {}
        for k in pairs(v) do
            keys[#keys + 1] = tostring(k)
        end
        table.sort(keys)
        for i, k in ipairs(keys) do
            local x = v[k]
            if x == nil then
                x = v[tonumber(k)]
            end
            parts[i] = k .. "=" .. scalar(x, limits)
        end
        return #parts == 0 and "{}" or clip(table.concat(parts, " "), limits)
    end
    return clip(tostring(v), limits)
end

local sorted_keys = require("rmq.strings").sorted_keys

local function columns_of(list)
    local mt = getmetatable(list)
    if mt and type(mt.__columns) == "table" then
        return mt.__columns
    end
    local seen, cols = {}, {}
    for _, rec in ipairs(list) do
        for k in pairs(rec) do
            if not seen[k] then
                seen[k] = true
                cols[#cols + 1] = k
            end
        end
    end
    table.sort(cols, function(a, b)
        return tostring(a) < tostring(b)
    end)
    return cols
end

local function table_lines(list, indent, limits, out)
    local cols = columns_of(list)
    local n = math.min(#list, limits.maxRows)
    local cells, widths = {}, {}
    for c, name in ipairs(cols) do
        widths[c] = #("#" .. tostring(name))
    end
    for i = 1, n do
        local row = {}
        for c, name in ipairs(cols) do
            local v = list[i][name]
            local s = v == nil and "-" or scalar(v, limits)
            row[c] = s
            if #s > widths[c] then
                widths[c] = #s
            end
        end
        cells[i] = row
    end
    local function line(parts)
        local buf = {}
        for c, s in ipairs(parts) do
            buf[c] = c == #parts and s or s .. (" "):rep(widths[c] - #s)
        end
        out[#out + 1] = indent .. table.concat(buf, "  ")
    end
    local header = {}
    for c, name in ipairs(cols) do
        header[c] = "#" .. tostring(name)
    end
    line(header)
    for i = 1, n do
        line(cells[i])
    end
    if #list > n then
        out[#out + 1] = ("%s... %d more"):format(indent, #list - n)
    end
end

local value_lines

local function list_of_records(t)
    if not is_list(t) then
        return false
    end
    for _, v in ipairs(t) do
        if not is_record(v) or next(v) == nil then
            return false
        end
    end
    return true
end

-- Lines for table t at `indent`, into out.
value_lines = function(t, indent, limits, out, depth, seen)
    if seen[t] then
        out[#out + 1] = indent .. "(cycle)"
        return
    end
    if depth > limits.maxDepth then
        out[#out + 1] = indent .. "{...}"
        return
    end
    seen[t] = true
    if next(t) == nil then
        out[#out + 1] = indent .. "{}"
    elseif list_of_records(t) then
        table_lines(t, indent, limits, out)
    elseif is_list(t) and is_record(t) then
        local n = math.min(#t, limits.maxRows)
        for i = 1, n do
            out[#out + 1] = indent .. scalar(t[i], limits)
        end
        if #t > n then
            out[#out + 1] = ("%s... %d more"):format(indent, #t - n)
        end
    else
        local keys = sorted_keys(t)
        local width = 0
        for _, k in ipairs(keys) do
            if (is_plain(t[k]) or type(t[k]) == "table" and next(t[k]) == nil) and #tostring(k) > width then
                width = #tostring(k)
            end
        end
        local shown = 0
        for _, k in ipairs(keys) do
            shown = shown + 1
            if shown > limits.maxRows then
                out[#out + 1] = ("%s... %d more"):format(indent, #keys - limits.maxRows)
                break
            end
            local v = t[k]
            local name = tostring(k)
            if type(v) == "table" and not has_tostring(v) and next(v) ~= nil then
                out[#out + 1] = indent .. name .. ":"
                value_lines(v, indent .. "  ", limits, out, depth + 1, seen)
            else
                out[#out + 1] = indent .. name .. (" "):rep(width - #name) .. "  " .. scalar(v, limits)
            end
        end
    end
    seen[t] = nil
end

function M.format(v, limits)
    local l = {}
    for k, d in pairs(DEFAULTS) do
        l[k] = limits and limits[k] or d
    end
    if type(v) ~= "table" or has_tostring(v) then
        -- Top-level strings as they are, like lua.c (no quotes, no escapes).
        return type(v) == "string" and v or scalar(v, l)
    end
    local out = {}
    value_lines(v, "", l, out, 1, {})
    return table.concat(out, "\n")
end

return M
