-- base64: RFC 4648 (standard alphabet, '=' padding): decoding for the
-- fixture frames, which store raw bytes as raw_b64, and encoding for
-- HTTP Basic authentication.  Lua has no base64
-- of its own and the specs should not need a C module for it.
local M = {}

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local VALUE = {}
for i = 1, #ALPHABET do
    VALUE[ALPHABET:byte(i)] = i - 1
end

-- Decodes s; raises on a character outside the alphabet or bad padding.
function M.decode(s)
    s = s:gsub("%s", "")
    if #s % 4 ~= 0 then
        error("base64: length " .. #s .. " is not a multiple of 4", 2)
    end
    local out = {}
    for i = 1, #s, 4 do
        local a, b, c, d = s:byte(i, i + 3)
        local va, vb = VALUE[a], VALUE[b]
        local vc = c ~= 61 and VALUE[c] or 0
        local vd = d ~= 61 and VALUE[d] or 0
        if not (va and vb and vc and vd) or (c == 61 and d ~= 61)
            or ((c == 61 or d == 61) and i + 3 ~= #s) then
            error("base64: bad input near offset " .. i, 2)
        end
        local n = va << 18 | vb << 12 | vc << 6 | vd
        if c == 61 then
            out[#out + 1] = string.char(n >> 16)
        elseif d == 61 then
            out[#out + 1] = string.char(n >> 16, n >> 8 & 0xFF)
        else
            out[#out + 1] = string.char(n >> 16, n >> 8 & 0xFF, n & 0xFF)
        end
    end
    return table.concat(out)
end

-- Encodes s.
function M.encode(s)
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = a << 16 | (b or 0) << 8 | (c or 0)
        local q = { n >> 18, n >> 12 & 63, n >> 6 & 63, n & 63 }
        for j = 1, 4 do
            q[j] = ALPHABET:sub(q[j] + 1, q[j] + 1)
        end
        if c == nil then q[4] = "=" end
        if b == nil then q[3] = "=" end
        out[#out + 1] = table.concat(q)
    end
    return table.concat(out)
end

return M
