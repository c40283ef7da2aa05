-- Seeds for fuzz/fuzz_grpc.c (scripts/fuzz.sh grpc): a client's HTTP/2
-- frames after the preface, as a gRPC client sends them, HPACK literals
-- without Huffman so the mutator can edit names and values.  The first
-- byte of each seed is the fuzzer's read size.
--   lua5.4 fuzz/grpc_seeds.lua DIR
local dir = assert(arg[1], "usage: grpc_seeds.lua DIR")

local function be(n, bytes)
    local t = {}
    for i = bytes - 1, 0, -1 do
        t[#t + 1] = string.char((n >> (8 * i)) & 0xff)
    end
    return table.concat(t)
end

local function frame(ftype, flags, stream, payload)
    return be(#payload, 3) .. string.char(ftype, flags) .. be(stream, 4) .. payload
end

local function lit(name, value)   -- literal without indexing, new name
    return "\0" .. string.char(#name) .. name .. string.char(#value) .. value
end

local function headers(path, extra)
    local h = lit(":method", "POST") .. lit(":scheme", "http") .. lit(":path", path)
        .. lit(":authority", "x") .. lit("content-type", "application/grpc") .. lit("te", "trailers")
    for _, kv in ipairs(extra or {}) do
        h = h .. lit(kv[1], kv[2])
    end
    return h
end

local function pb_len(field, s)   -- a length-delimited field (short)
    return string.char(field << 3 | 2, #s) .. s
end

local function grpc_msg(m, compressed)
    return string.char(compressed and 1 or 0) .. be(#m, 4) .. m
end

local settings = frame(4, 0, 0, "")
local topic = pb_len(1, pb_len(2, "T"))
local sysprops = pb_len(3, pb_len(1, "TagA") .. pb_len(2, "k1") .. pb_len(3, "ID1") .. pb_len(17, "g1"))
local message = topic .. pb_len(2, pb_len(1, "color") .. pb_len(2, "red")) .. sysprops .. pb_len(4, "body")
local send = pb_len(1, message)
local S = "/apache.rocketmq.v2.MessagingService/"

local seeds = {
    send = settings .. frame(1, 4, 1, headers(S .. "SendMessage", { { "grpc-timeout", "3S" } }))
        .. frame(0, 1, 1, grpc_msg(send)),
    route = settings .. frame(1, 4, 1, headers(S .. "QueryRoute"))
        .. frame(0, 1, 1, grpc_msg(topic .. pb_len(2, pb_len(2, pb_len(1, "127.0.0.1"))))),
    telemetry = settings .. frame(1, 4, 1, headers(S .. "Telemetry"))
        .. frame(0, 0, 1, grpc_msg(pb_len(2, "\8\1" .. pb_len(5, pb_len(1, pb_len(2, "T"))))))
        .. frame(0, 1, 1, ""),
    gzip = settings .. frame(1, 4, 1, headers(S .. "SendMessage", { { "grpc-encoding", "gzip" } }))
        .. frame(0, 1, 1, grpc_msg("\31\139\8\0\0\0\0\0\0\3\3\0\0\0\0\0\0\0\0\0", true)),
    reset = settings .. frame(1, 4, 1, headers(S .. "Heartbeat")) .. frame(3, 0, 1, be(8, 4))
        .. frame(1, 4, 3, headers(S .. "NotifyClientTermination")) .. frame(6, 0, 0, "12345678")
        .. frame(8, 0, 3, be(1000, 4)) .. frame(0, 1, 3, grpc_msg("")),
    split = settings .. frame(1, 4, 1, headers(S .. "EndTransaction"))
        .. frame(0, 0, 1, grpc_msg(pb_len(2, "ID1") .. pb_len(3, "00000000000000000000000000000000@0") .. "\32\1"):sub(1, 7))
        .. frame(0, 1, 1, grpc_msg(pb_len(2, "ID1") .. pb_len(3, "00000000000000000000000000000000@0") .. "\32\1"):sub(8)),
}
-- The frame reader's other paths (src/grpc/h2.c): literals with
-- incremental indexing and then the same fields by their dynamic index, a
-- block cut into CONTINUATIONs, padding and priority fields, a size
-- update, RFC 7541 C.4's Huffman request (a GET: answered 415), windows
-- and settings moving, PING, PRIORITY, GOAWAY.
local function ilit(name, value)   -- literal with incremental indexing, new name
    return "\64" .. string.char(#name) .. name .. string.char(#value) .. value
end
local indexed = ilit(":method", "POST") .. ilit(":path", S .. "Heartbeat") .. ilit("content-type", "application/grpc")
local again = "\192\191\190"   -- dynamic indexes 64, 63, 62
local huff = string.char(0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90,
                         0xf4, 0xff)
local block = headers(S .. "QueryAssignment")
seeds.hpack = settings .. frame(1, 5, 1, indexed) .. frame(1, 5, 3, again)
    .. frame(1, 5, 5, huff) .. frame(1, 5, 7, "\63\225\31" .. again) .. frame(1, 5, 9, "\32" .. indexed)
seeds.continuation = settings .. frame(1, 0, 1, block:sub(1, 10)) .. frame(9, 0, 1, block:sub(11, 30))
    .. frame(9, 4, 1, block:sub(31)) .. frame(0, 9, 1, "\3" .. grpc_msg(topic) .. "pad")
seeds.priority = settings .. frame(1, 0x2c, 1, "\2" .. be(0, 4) .. "\16" .. headers(S .. "Heartbeat") .. "pp")
    .. frame(2, 0, 1, be(0, 4) .. "\16") .. frame(0, 1, 1, grpc_msg(""))
seeds.windows = frame(4, 0, 0, be(4, 2) .. be(0, 4) .. be(1, 2) .. be(0, 4) .. be(5, 2) .. be(32768, 4))
    .. frame(1, 4, 1, headers(S .. "QueryRoute")) .. frame(0, 1, 1, grpc_msg(topic))
    .. frame(4, 0, 0, be(4, 2) .. be(65535, 4)) .. frame(8, 0, 1, be(100, 4)) .. frame(8, 0, 0, be(100000, 4))
    .. frame(6, 0, 0, "abcdefgh") .. frame(6, 1, 0, "abcdefgh") .. frame(4, 1, 0, "")
    .. frame(7, 0, 0, be(1, 4) .. be(0, 4))
local n = 0
for name, bytes in pairs(seeds) do
    for _, chunk in ipairs({ 255, 7 }) do
        local f = assert(io.open(("%s/%s-%d"):format(dir, name, chunk), "wb"))
        f:write(string.char(chunk) .. bytes)
        f:close()
        n = n + 1
    end
end
print(("grpc_seeds.lua: %d seeds"):format(n))
