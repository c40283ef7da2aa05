-- rmq.properties: Java's Properties text, as UPDATE_NAMESRV_CONFIG and
-- UPDATE_BROKER_CONFIG bodies carry it.
--
--   local props, order = properties.parse("a=1\nb : two\n")
--   --> { a = "1", b = "two" }, { "a", "b" }   (order: first appearance)
local M = {}

-- Java's Properties.load, for the simple `key=value` lines mqadmin
-- sends: `#`/`!` comments, `=`, `:` or blanks as separator, a trailing
-- backslash continues a line, \t \n \r \f \\ \uXXXX escapes.
function M.parse(text)
    local props, order = {}, {}
    local lines = {}
    local pending = nil
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        line = line:gsub("\r$", "")
        if pending then
            line = pending .. line:gsub("^%s+", "")
            pending = nil
        end
        local bs = #line:match("\\*$")
        if bs % 2 == 1 then
            pending = line:sub(1, -2)
        else
            lines[#lines + 1] = line
        end
    end
    if pending then
        lines[#lines + 1] = pending
    end
    local function unescape(s)
        s = s:gsub("\\u(%x%x%x%x)", function(h)
            return utf8.char(tonumber(h, 16))
        end)
        return (s:gsub("\\(.)", { t = "\t", n = "\n", r = "\r", f = "\f" }))
    end
    for _, line in ipairs(lines) do
        local l = line:gsub("^%s+", "")
        if l ~= "" and not l:match("^[#!]") then
            -- the key ends at the first unescaped separator
            local i, n = 1, #l
            while i <= n do
                local c = l:sub(i, i)
                if c == "\\" then
                    i = i + 2
                elseif c == "=" or c == ":" or c:match("%s") then
                    break
                else
                    i = i + 1
                end
            end
            local key = unescape(l:sub(1, i - 1))
            local rest = l:sub(i):gsub("^%s*", "")
            if rest:sub(1, 1) == "=" or rest:sub(1, 1) == ":" then
                rest = rest:sub(2):gsub("^%s*", "")
            end
            if props[key] == nil then
                order[#order + 1] = key
            end
            props[key] = unescape(rest)
        end
    end
    return props, order
end

return M
