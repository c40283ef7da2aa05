-- Helpers for the store specs: temp directories, copies of the fixture
-- stores, and an independent reader of RocketMQ commit log records
-- (protocol.md §5.1) written with string.unpack, so the specs check the
-- C code's bytes against the document rather than against itself.
local core = require("rmq.core")
local fixtures = require("support.fixtures")

local tmp = require("support.tmp")

local M = {}

--- A copy of base with extra's keys set over it (store option tables).
function M.merged(base, extra)
    local t = {}
    for k, v in pairs(base) do
        t[k] = v
    end
    for k, v in pairs(extra or {}) do
        t[k] = v
    end
    return t
end

M.tmpdir = tmp.dir

function M.rmrf(p)
    assert(p:match("^/tmp/"), "refusing to delete " .. p)
    os.execute("rm -rf '" .. p .. "'")
end

function M.read_file(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("a")
    f:close()
    return s
end

function M.write_at(path, offset, bytes)
    local f = assert(io.open(path, "r+b"))
    assert(f:seek("set", offset))
    assert(f:write(bytes))
    f:close()
end

function M.exists(path)
    local f = io.open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

function M.ls(dir)
    local names = {}
    local p = assert(io.popen("ls -1 '" .. dir .. "' 2>/dev/null"))
    for name in p:lines() do
        names[#names + 1] = name
    end
    p:close()
    table.sort(names)
    return names
end

-- The fixture store directory (clean / crashed) and the manifests.
function M.fixture_dir(name)
    return assert(fixtures.dir()) .. "/store/" .. name
end

function M.manifest(name)
    local file = name == "crashed" and "MANIFEST-crashed.jsonl" or "MANIFEST.jsonl"
    return fixtures.read_jsonl(assert(fixtures.dir()) .. "/store/" .. file)
end

-- A writable copy of a fixture store (recovery rewrites files).
function M.copy_fixture(name)
    local dst = M.tmpdir()
    assert(os.execute("cp -r '" .. M.fixture_dir(name) .. "/.' '" .. dst .. "/' && chmod -R u+w '" .. dst .. "'"))
    return dst
end

-- The fixture stores' settings (store/broker.conf).
M.FIXTURE_OPTS = {
    mappedFileSizeCommitLog = 1048576,
    mappedFileSizeConsumeQueue = 6000,
    maxHashSlotNum = 500,
    maxIndexNum = 2000,
    storeHost = "127.0.0.1:32911",
}

-- Java String.hashCode over UTF-16 code units, written independently of
-- the C version.
function M.java_hash(s)
    local h = 0
    local function add(u)
        h = (h * 31 + u) & 0xFFFFFFFF
    end
    for _, cp in utf8.codes(s) do
        if cp >= 0x10000 then
            cp = cp - 0x10000
            add(0xD800 + (cp >> 10))
            add(0xDC00 + (cp & 0x3FF))
        else
            add(cp)
        end
    end
    if h >= 0x80000000 then
        h = h - 0x100000000
    end
    return h
end

local function host(s, pos, v6)
    if v6 then
        local a = { string.byte(s, pos, pos + 15) }
        local port = string.unpack(">i4", s, pos + 16)
        local parts = {}
        for i = 1, 16, 2 do
            parts[#parts + 1] = string.format("%x", a[i] * 256 + a[i + 1])
        end
        return table.concat(parts, ":") .. ":" .. port, pos + 20
    end
    local a, b, c, d = string.byte(s, pos, pos + 3)
    local port = string.unpack(">i4", s, pos + 4)
    return ("%d.%d.%d.%d:%d"):format(a, b, c, d, port), pos + 8
end

function M.parse_props(s)
    local t = {}
    for seg in (s .. "\2"):gmatch("([^\2]*)\2") do
        local k, v = seg:match("^([^\1]+)\1(.+)$")
        if k then
            t[k] = v
        end
    end
    return t
end

-- Parses the record at `pos` (1-based) of s: every field of §5.1.
-- Returns the record table and the position after it, or nil, reason.
function M.parse_record(s, pos)
    pos = pos or 1
    local r = {}
    local p
    r.totalSize, r.magic, r.bodyCRC, r.queueId, r.flag, r.queueOffset,
        r.physicalOffset, r.sysFlag, r.bornTimestamp, p =
        string.unpack(">i4I4i4i4i4i8i8i4i8", s, pos)
    if r.magic ~= 0xDAA320A7 then
        return nil, ("magic %08X at %d"):format(r.magic, pos - 1)
    end
    r.bornHost, p = host(s, p, r.sysFlag & 0x10 ~= 0)
    r.storeTimestamp, p = string.unpack(">i8", s, p)
    r.storeHost, p = host(s, p, r.sysFlag & 0x20 ~= 0)
    r.reconsumeTimes, r.preparedTransactionOffset, r.body, p =
        string.unpack(">i4i8s4", s, p)
    local tlen
    tlen, p = string.unpack(">i1", s, p)
    r.topic = s:sub(p, p + tlen - 1)
    p = p + tlen
    r.propertiesString, p = string.unpack(">s2", s, p)
    r.properties = M.parse_props(r.propertiesString)
    if p - pos ~= r.totalSize then
        return nil, ("fields add up to %d, TOTALSIZE says %d"):format(p - pos, r.totalSize)
    end
    return r, p
end

-- Every record of a commit log directory: reads the files in name order,
-- skipping each file's BLANK tail; stops at zeros.  Returns the list
-- (each with .offset) and the end offset.
function M.scan_commitlog(dir, file_size)
    local out = {}
    local last_end = 0
    for _, name in ipairs(M.ls(dir)) do
        local base = tonumber(name)
        local data = M.read_file(dir .. "/" .. name)
        assert(#data == file_size, name .. " has the wrong size")
        local pos = 1
        while pos + 8 <= #data do
            local size, magic = string.unpack(">i4I4", data, pos)
            if magic == 0xCBD43194 then
                assert(size == #data - pos + 1, "BLANK size is the rest of the file")
                last_end = base + #data
                break
            end
            if size == 0 and magic == 0 then
                break
            end
            local r, nextpos = M.parse_record(data, pos)
            assert(r, nextpos)
            r.offset = base + pos - 1
            out[#out + 1] = r
            pos = nextpos
            last_end = base + pos - 1
        end
    end
    return out, last_end
end

function M.crc(s)
    return core.crc32(s) & 0x7FFFFFFF
end

-- Splits a records string (a get's :tostring()) into parsed records.
function M.parse_all(s)
    local out, pos = {}, 1
    while pos <= #s do
        local r, nextpos = M.parse_record(s, pos)
        assert(r, nextpos)
        out[#out + 1] = r
        pos = nextpos
    end
    return out
end

-- The batch encoding of protocol.md §5.8.
function M.batch(msgs)
    local parts = {}
    for _, m in ipairs(msgs) do
        local props = m.properties or ""
        parts[#parts + 1] = string.pack(">i4i4i4i4s4s2", 20 + #m.body + 2 + #props,
            0, 0, m.flag or 0, m.body, props)
    end
    return table.concat(parts)
end

return M
