-- Helpers for the store specs: temp directories, copies of the fixture
-- stores, and walks over the commit log records of files and gets.
local core = require("rmq.core")
local message = require("rmq.message")
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

-- The record at `pos` (1-based) of s and the position after it, or nil
-- and the reason: the store's own decoder (rmq.message.decode_record).
-- The layout itself is checked against protocol.md §5.1 byte by byte in
-- store_put_get_spec, and the decoder against a Java broker's records in
-- store_fixture_spec.
function M.parse_record(s, pos)
    return message.decode_record(s, pos)
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
