-- rmq.console.json: JSON for people and scripts (the console's /api,
-- `rmq top --json`): floats as %.3f (rmq.fastjson's writer refuses them),
-- keys sorted, a table marked with fastjson.array_mt (or with t[1]) as a
-- list, NaN and infinities as null.
--
--   require("rmq.console.json").encode({ tps = 1.5, l = {} })  --> {"l":{},"tps":1.500}
local cjson = require("cjson")
local fastjson = require("rmq.fastjson")

local M = {}

local function encode(v, out)
    local ty = type(v)
    if ty == "table" then
        if v[1] ~= nil or getmetatable(v) == fastjson.array_mt then
            out[#out + 1] = "["
            for i, x in ipairs(v) do
                if i > 1 then
                    out[#out + 1] = ","
                end
                encode(x, out)
            end
            out[#out + 1] = "]"
        else
            local keys = {}
            for k in pairs(v) do
                keys[#keys + 1] = tostring(k)
            end
            table.sort(keys)
            out[#out + 1] = "{"
            for i, k in ipairs(keys) do
                if i > 1 then
                    out[#out + 1] = ","
                end
                out[#out + 1] = cjson.encode(k) .. ":"
                local x = v[k]
                if x == nil then
                    x = v[tonumber(k)]
                end
                encode(x, out)
            end
            out[#out + 1] = "}"
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

function M.encode(v)
    local out = {}
    encode(v, out)
    return table.concat(out)
end


return M
