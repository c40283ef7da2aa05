-- rmq.fastjson: JSON the way RocketMQ's Java side (fastjson 1.2.69)
-- reads and writes it.
--
-- Writing is C (rmq.fjson, the writer of the NameServer's bodies):
-- encode(v [, pretty]) writes strings with fastjson's escapes, integers,
-- booleans, lists (a table with t[1], or an empty one marked with
-- array_mt), Maps with integer keys (a table marked by map(t): bare keys,
-- ascending) and objects (string keys in String.compareTo order, as
-- fastjson's SortField writes a JavaBean); pretty is PrettyFormat (tabs,
-- as the broker's config files are written).
--
--   fastjson.encode({ offsetTable = fastjson.map({ [1] = 0 }) })
--       --> '{"offsetTable":{1:0}}'
--
-- Reading: fastjson writes map keys that are not strings without quotes
-- ({0:"x"}, {0:25}; protocol.md §1.11): a 5.x broker's registration
-- carries them (topicQueueMappingInfoMap), so do the consumer offset
-- files.  lua-cjson is strict, so decode() quotes such keys first: every
-- number that stands where an object key belongs (after `{` or `,` of an
-- object, before `:`).  Strings are skipped whole, so text inside them is
-- never touched.  Bodies without bare keys (the usual case) go to cjson
-- unchanged after one pattern search.
--
--   local fastjson = require "rmq.fastjson"
--   local t, err = fastjson.decode('{"a":{0:25}}')   --> {a = {["0"] = 25}}
--
-- Numbers come back as Lua floats (cjson); fastjson.int(v) turns an
-- integral one into an integer.
local cjson = require "cjson"
local fjson = require "rmq.fjson"

local M = {}

M.null = cjson.null

M.encode = fjson.encode
M.array_mt = fjson.array_mt

--- Marks t (integer keys) to be written as a Java Map: {1:0,2:5}.
function M.map(t)
    return setmetatable(t, fjson.map_mt)
end

-- Quotes bare numeric object keys; returns the text unchanged when none.
function M.quote_keys(s)
    -- Fast path: no digit directly after `{` or `,` (whitespace allowed)
    -- anywhere, inside strings or not.
    if not s:find("[{,]%s*%-?%d") then
        return s
    end
    local out = {}
    local i, n = 1, #s
    local stack = {}          -- "{" or "[" of the open containers
    local expect_key = false  -- right after `{` or an object's `,`
    local last = 1            -- start of the text not yet copied
    while i <= n do
        local c = s:sub(i, i)
        if c == '"' then
            -- skip the string, honouring escapes
            local j = i + 1
            while j <= n do
                local d = s:sub(j, j)
                if d == "\\" then
                    j = j + 2
                elseif d == '"' then
                    break
                else
                    j = j + 1
                end
            end
            i = j + 1
            expect_key = false
        elseif c == "{" then
            stack[#stack + 1] = "{"
            expect_key = true
            i = i + 1
        elseif c == "[" then
            stack[#stack + 1] = "["
            expect_key = false
            i = i + 1
        elseif c == "}" or c == "]" then
            stack[#stack] = nil
            expect_key = false
            i = i + 1
        elseif c == "," then
            expect_key = stack[#stack] == "{"
            i = i + 1
        elseif c:match("%s") then
            i = i + 1
        elseif expect_key and s:find("^%-?%d", i) then
            -- (a '-' that starts no number is left for cjson to refuse)
            local num = s:match("^%-?%d+%.?%d*[eE]?[%+%-]?%d*", i)
            local j = i + #num
            local after = s:match("^%s*:", j)
            if after then
                out[#out + 1] = s:sub(last, i - 1)
                out[#out + 1] = '"' .. num .. '"'
                last = j
            end
            i = j
            expect_key = false
        else
            expect_key = false
            i = i + 1
        end
    end
    if last == 1 then
        return s
    end
    out[#out + 1] = s:sub(last)
    return table.concat(out)
end

--- Decodes fastjson output.  Returns the value, or nil and a message.
function M.decode(s)
    if type(s) ~= "string" then
        return nil, "not a string"
    end
    local ok, v = pcall(cjson.decode, M.quote_keys(s))
    if not ok then
        return nil, tostring(v)
    end
    return v
end

--- An integral number as a Lua integer; nil for anything else.
function M.int(v)
    if type(v) == "string" then
        v = tonumber(v)
    end
    if type(v) ~= "number" then
        return nil
    end
    return math.tointeger(v)
end

return M
