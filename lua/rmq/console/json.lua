-- rmq.console.json: JSON for people and scripts (the console's /api,
-- `rmq top --json`): floats as %.3f (rmq.fastjson's writer refuses them),
-- keys sorted, a table marked with fastjson.array_mt (or with t[1]) as a
-- list, NaN and infinities as null.  With pretty, one member a line,
-- indented with tabs (as fastjson's PrettyFormat; `rmq admin`).
--
--   require("rmq.console.json").encode({ tps = 1.5, l = {} })  --> {"l":{},"tps":1.500}
--   require("rmq.console.json").encode(v, true)                --> "{\n\t\"l\":{},..."
local cjson = require("cjson")
local fastjson = require("rmq.fastjson")

local M = {}

-- indent: nil (one line), or the newline and tabs before this value's
-- closing bracket; its members go one tab deeper.
local function encode(v, out, indent)
    local ty = type(v)
    local inner = indent and (indent .. "\t")
    if ty == "table" then
        if v[1] ~= nil or getmetatable(v) == fastjson.array_mt then
            out[#out + 1] = "["
            for i, x in ipairs(v) do
                out[#out + 1] = (i > 1 and "," or "") .. (inner or "")
                encode(x, out, inner)
            end
            out[#out + 1] = (#v > 0 and indent or "") .. "]"
        else
            local keys = {}
            for k in pairs(v) do
                keys[#keys + 1] = tostring(k)
            end
            table.sort(keys)
            out[#out + 1] = "{"
            for i, k in ipairs(keys) do
                out[#out + 1] = (i > 1 and "," or "") .. (inner or "") .. cjson.encode(k) .. ":"
                local x = v[k]
                if x == nil then
                    x = v[tonumber(k)]
                end
                encode(x, out, inner)
            end
            out[#out + 1] = (#keys > 0 and indent or "") .. "}"
        end
    elseif ty == "number" then
        if math.type(v) == "integer" then
            out[#out + 1] = ("%d"):format(v)
        elseif v ~= v or v == math.huge or v == -math.huge then
            out[#out + 1] = "null"
        elseif v == math.floor(v) and math.abs(v) < 2 ^ 53 then
            out[#out + 1] = ("%d"):format(math.floor(v))
        else
            out[#out + 1] = ("%.3f"):format(v)
        end
    elseif ty == "string" then
        out[#out + 1] = cjson.encode(v)
    elseif ty == "boolean" then
        out[#out + 1] = tostring(v)
    else
        out[#out + 1] = "null"
    end
end

function M.encode(v, pretty)
    local out = {}
    encode(v, out, pretty and "\n" or nil)
    return table.concat(out)
end


return M
