-- fuzz/seeds.lua FIXTURES OUT: the seeds of fuzz_record and fuzz_bodies,
-- cut from the captured fixtures (../shared/fixtures/README.md), written
-- by scripts/fuzz.sh under OUT/record and OUT/bodies (plain lua5.4 with
-- lua-cjson; no rmq module needed).
--
-- record: from every store/*/commitlog/* file, the first 1, 2, 4 and 16
--   records; each of the first 8 alone; the first record truncated
--   (size-1, 91, 50, 8, 4 bytes); the last record followed by the
--   file's BLANK and rest, or by zeros; the first records with their
--   born/store host widened to IPv6 (sysflag bits 4/5, the same record
--   12 bytes longer per host); and every PULL_MESSAGE FOUND body of the
--   frames (stored records as a broker serves them).
-- bodies: the bodies of every REGISTER_BROKER (plain, oneway, compressed
--   and its inflated form rebuilt from `body_inflated`), HEART_BEAT and
--   GET_ALL_TOPIC_CONFIG frame; UPDATE_AND_CREATE_TOPIC's extFields as a
--   TopicConfig JSON; the stores' config/*.json files.
local cjson = require("cjson")

local fixtures, out = arg[1], arg[2]
assert(fixtures and out, "usage: lua5.4 fuzz/seeds.lua FIXTURES OUT")

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("a")
    f:close()
    return s
end

local function ls(dir, pattern)
    local names = {}
    local p = assert(io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null"))
    for name in p:lines() do
        if not pattern or name:match(pattern) then
            names[#names + 1] = name
        end
    end
    p:close()
    table.sort(names)
    return names
end

local counts = {}
local function seed(kind, name, bytes)
    local f = assert(io.open(("%s/%s/%s"):format(out, kind, name:gsub("[^%w%._-]", "_")), "wb"))
    f:write(bytes)
    f:close()
    counts[kind] = (counts[kind] or 0) + 1
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local b64val = {}
for i = 1, 64 do
    b64val[B64:byte(i)] = i - 1
end
local function unbase64(s)
    local outb, bits, nbits = {}, 0, 0
    for i = 1, #s do
        local v = b64val[s:byte(i)]
        if v then
            bits = (bits << 6) | v
            nbits = nbits + 6
            if nbits >= 8 then
                nbits = nbits - 8
                outb[#outb + 1] = string.char((bits >> nbits) & 0xFF)
            end
        end
    end
    return table.concat(outb)
end

-- {{{ record

-- The records at the start of a commit log file: {pos (1-based), size}.
local function records(data)
    local list, pos = {}, 1
    while pos + 8 <= #data do
        local size, magic = string.unpack(">I4I4", data, pos)
        if magic ~= 0xDAA320A7 or size < 91 or pos + size - 1 > #data then
            break
        end
        list[#list + 1] = { pos = pos, size = size }
        pos = pos + size
    end
    return list, pos
end

-- The record s (a whole record) with its hosts widened to IPv6: the
-- IPv4 address as ::ffff:a.b.c.d, its sysflag bit set, the size fixed.
local function widen(s, born, storeh)
    local sysflag = string.unpack(">I4", s, 37)
    local function v6(ip)
        return ("\0"):rep(10) .. "\255\255" .. ip
    end
    local flag, at = sysflag, 49
    local bl = sysflag & 0x10 ~= 0 and 16 or 4
    local born_ip = s:sub(at, at + bl - 1)
    at = at + bl
    if born and bl == 4 then
        born_ip, flag = v6(born_ip), flag | 0x10
    end
    local mid = s:sub(at, at + 11)   -- born port, store timestamp
    at = at + 12
    local sl = sysflag & 0x20 ~= 0 and 16 or 4
    local store_ip = s:sub(at, at + sl - 1)
    at = at + sl
    if storeh and sl == 4 then
        store_ip, flag = v6(store_ip), flag | 0x20
    end
    local rest = s:sub(9, 36) .. string.pack(">I4", flag) .. s:sub(41, 48) .. born_ip .. mid
        .. store_ip .. s:sub(at)
    return string.pack(">I4I4", 8 + #rest, 0xDAA320A7) .. rest
end

for _, which in ipairs(ls(fixtures .. "/store", "^%a+$")) do
    local dir = ("%s/store/%s/commitlog"):format(fixtures, which)
    for _, name in ipairs(ls(dir, "^%d+$")) do
        local data = read(dir .. "/" .. name)
        local recs, after = records(data)
        local tag = which .. "-" .. name:gsub("^0+(%d)", "%1")
        if #recs > 0 then
            for _, k in ipairs({ 1, 2, 4, 16 }) do
                local last = recs[math.min(k, #recs)]
                seed("record", ("%s-first%d"):format(tag, k), data:sub(1, last.pos + last.size - 1))
            end
            for i = 1, math.min(8, #recs) do
                local r = recs[i]
                seed("record", ("%s-rec%d"):format(tag, i), data:sub(r.pos, r.pos + r.size - 1))
            end
            local r1 = recs[1]
            for _, cut in ipairs({ r1.size - 1, 91, 50, 8, 4 }) do
                seed("record", ("%s-cut%d"):format(tag, cut), data:sub(r1.pos, r1.pos + cut - 1))
            end
            local last = recs[#recs]
            local lastrec = data:sub(last.pos, last.pos + last.size - 1)
            if after + 8 <= #data and string.unpack(">I4", data, after + 4) == 0xCBD43194 then
                seed("record", tag .. "-last-blank", lastrec .. data:sub(after))
            end
            seed("record", tag .. "-last-zeros", lastrec .. ("\0"):rep(64))
            for i = 1, math.min(2, #recs) do
                local s = data:sub(recs[i].pos, recs[i].pos + recs[i].size - 1)
                seed("record", ("%s-rec%d-v6born"):format(tag, i), widen(s, true, false))
                seed("record", ("%s-rec%d-v6store"):format(tag, i), widen(s, false, true))
                seed("record", ("%s-rec%d-v6both"):format(tag, i), widen(s, true, true))
            end
        end
    end
end

-- }}}

-- {{{ frames

local function frames(file)
    local list = {}
    for line in io.lines(file) do
        if line:match("%S") then
            local row = cjson.decode(line)
            local raw = unbase64(row.raw_b64)
            local hword = string.unpack(">I4", raw, 5)
            local hlen = hword & 0xFFFFFF
            row.body = raw:sub(9 + hlen)
            list[#list + 1] = row
        end
    end
    return list
end

local function i32(n)
    return string.pack(">i4", n)
end

local BODY_FILES = {
    ["register-broker"] = true, ["register-broker-oneway"] = true,
    ["register-broker-compressed"] = true, ["get-all-topic-config"] = true,
    ["update-and-create-topic"] = true,
}

for _, name in ipairs(ls(fixtures .. "/frames", "%.jsonl$")) do
    local base = name:gsub("%.jsonl$", "")
    local rows = frames(fixtures .. "/frames/" .. name)
    for i, row in ipairs(rows) do
        local d = row.decoded or {}
        local tag = ("%s-%d"):format(base, i)
        if base:match("^pull") and row.dir == "s2c" and d.code == 0 and #row.body > 0 then
            seed("record", tag, row.body)
        end
        if (BODY_FILES[base] or base:match("^heartbeat")) and #row.body > 0 then
            seed("bodies", tag, row.body)
        end
        local inf = d.body_inflated
        if type(inf) == "table" then
            local dv = ('{"counter":%d,"timestamp":%d}'):format(inf.dataVersion.counter,
                                                                 inf.dataVersion.timestamp)
            local parts = { i32(#dv), dv, i32(#inf.topicConfigs) }
            for _, t in ipairs(inf.topicConfigs) do
                parts[#parts + 1] = i32(#t) .. t
            end
            parts[#parts + 1] = i32(2) .. "[]"
            seed("bodies", tag .. "-inflated", table.concat(parts))
        end
        if d.code == 17 and row.dir == "c2s" and type(d.extFields) == "table" then
            local e = d.extFields
            seed("bodies", tag .. "-topicconfig", cjson.encode({
                topicName = e.topic, readQueueNums = tonumber(e.readQueueNums),
                writeQueueNums = tonumber(e.writeQueueNums), perm = tonumber(e.perm),
                topicFilterType = e.topicFilterType, topicSysFlag = tonumber(e.topicSysFlag),
                order = e.order == "true",
            }))
        end
    end
end

for _, which in ipairs(ls(fixtures .. "/store", "^%a+$")) do
    local dir = ("%s/store/%s/config"):format(fixtures, which)
    for _, name in ipairs(ls(dir, "%.json$")) do
        seed("bodies", which .. "-" .. name, read(dir .. "/" .. name))
    end
end

-- }}}

print(("fuzz/seeds.lua: %d record seeds, %d body seeds"):format(counts.record or 0,
                                                                counts.bodies or 0))
