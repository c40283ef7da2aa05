-- A hostile HTTP/2 peer for the gRPC port's abuse specs: plain luasocket
-- TCP sockets in non-blocking mode that speak just enough HTTP/2 to open
-- gRPC streams and leave them idle, reset them, or flood: the preface,
-- SETTINGS (acknowledged), PING (answered, so the server's keepalive
-- sees a live peer), HEADERS with HPACK literals (no Huffman, no
-- indexing: RFC 7541 6.2.2), RST_STREAM.  What the server sends back is
-- parsed as frames only (no HPACK decoding): a HEADERS or DATA frame
-- with END_STREAM or an RST_STREAM ends a stream, a GOAWAY the
-- connection.
--
--   local h2 = require("support.h2raw")
--   local c = h2.connect("127.0.0.1:PORT" [, from])   -- from: a local address
--                                                     -- ("127.0.0.2": another peer)
--   c:open("Telemetry")          -> stream id (HEADERS, no END_STREAM: idle)
--   c:reset(id)                  RST_STREAM CANCEL
--   c:pump()                     send what the kernel takes, read what came
--   c:frame(type, flags, id, payload)   any frame, as given
--   c:open_block(id, block [, flags])   HEADERS on a chosen id (END_HEADERS
--                                       and flags), a block of h2.literal()s
--   c.opened, c.ended[id] = "rst:N" | "end", c.nended, c.goaway (error code),
--   c.goaway_last (its last stream id), c.settings_acks (SETTINGS ACKs read), c.block[id] (the header blocks the
--   server sent on a stream, concatenated; h2.grpc_status(block) reads
--   our server's grpc-status out of one), c.closed (the server closed the
--   socket), c:backlog()
--   c:close()
local slow = require("support.slowreader")

local M = {}

local C = {}
C.__index = C

local PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
local T_DATA, T_HEADERS, T_RST, T_SETTINGS, T_PING, T_GOAWAY = 0, 1, 3, 4, 6, 7
local F_END_STREAM, F_ACK, F_END_HEADERS = 0x1, 0x1, 0x4

local function frame(ftype, flags, id, payload)
    return string.pack(">I3BBI4", #payload, ftype, flags, id) .. payload
end

-- HPACK integer with an N-bit prefix (RFC 7541 5.1), first byte's high
-- bits zero.
local function hint(v, nbits)
    local max = (1 << nbits) - 1
    if v < max then
        return string.char(v)
    end
    local out = { string.char(max) }
    v = v - max
    while v >= 128 do
        out[#out + 1] = string.char(v % 128 + 128)
        v = v // 128
    end
    out[#out + 1] = string.char(v)
    return table.concat(out)
end

-- Literal header field without indexing, new name (0000 0000).
local function literal(name, value)
    return "\0" .. hint(#name, 7) .. name .. hint(#value, 7) .. value
end
M.literal = literal

-- grpc-status from a header block rmq's server wrote (h2.c writes it as
-- a literal with a new name, no Huffman); nil when absent.
function M.grpc_status(block)
    local n, rest = (block or ""):match("grpc%-status(.)(.*)")
    return n and tonumber(rest:sub(1, n:byte())) or nil
end

function M.headers_block(method, extra)
    local parts = {
        literal(":method", "POST"), literal(":scheme", "http"),
        literal(":path", "/apache.rocketmq.v2.MessagingService/" .. method),
        literal(":authority", "rmq"), literal("content-type", "application/grpc"),
        literal("te", "trailers"),
    }
    for k, v in pairs(extra or {}) do
        parts[#parts + 1] = literal(k, v)
    end
    return table.concat(parts)
end

-- settings: the SETTINGS frame's payload (default none).
function M.connect(addr, from, settings)
    local c = setmetatable({ s = slow.socket(addr, from), parts = {}, head = "", inbuf = "", next_id = 1,
                             opened = 0, ended = {}, nended = 0, closed = false, block = {},
                             bodies = {} }, C)
    c:queue(PREFACE .. frame(T_SETTINGS, 0, 0, settings or ""))
    return c
end

function C:queue(bytes)
    self.parts[#self.parts + 1] = bytes
end

function C:backlog()
    if self.closed then
        return 0   -- nothing more will be sent
    end
    local n = #self.head
    for _, p in ipairs(self.parts) do
        n = n + #p
    end
    return n
end

-- Opens a stream of `method` and sends only its headers (END_HEADERS,
-- not END_STREAM): the call waits for a request that never comes.
-- block: a prebuilt headers_block (the same for thousands of streams).
function C:open(method, block, end_stream)
    local id = self.next_id
    self.next_id = id + 2
    self.opened = self.opened + 1
    self:queue(frame(T_HEADERS, F_END_HEADERS | (end_stream and F_END_STREAM or 0), id,
                     block or M.headers_block(method)))
    return id
end

function C:frame(ftype, flags, id, payload)
    self:queue(frame(ftype, flags, id, payload or ""))
end

function C:open_block(id, block, flags)
    self.opened = self.opened + 1
    if id >= self.next_id then
        self.next_id = id + 2
    end
    self:queue(frame(T_HEADERS, F_END_HEADERS | (flags or 0), id, block))
end

function C:reset(id)
    self:queue(frame(T_RST, 0, id, string.pack(">I4", 8)))   -- CANCEL
end

-- One gRPC message as a DATA frame (compressed: its flag set, the bytes
-- as given).
function C:data(id, message, end_stream, compressed)
    self:queue(frame(T_DATA, end_stream and F_END_STREAM or 0, id,
                     string.pack(">BI4", compressed and 1 or 0, #message) .. message))
end

-- WINDOW_UPDATE (type 8); an increment of 0 on a stream is a stream
-- error the server answers with RST_STREAM (RFC 9113 6.9).
function C:window_update(id, inc)
    self:queue(frame(8, 0, id, string.pack(">I4", inc)))
end

local function ended(self, id, how)
    if id ~= 0 and self.ended[id] == nil then
        self.ended[id] = how
        self.nended = self.nended + 1
    end
end

local function take(self)
    local buf, pos = self.inbuf, 1
    while #buf - pos + 1 >= 9 do
        local len, ftype, flags, id = string.unpack(">I3BBI4", buf, pos)
        id = id & 0x7fffffff
        if #buf - pos + 1 < 9 + len then
            break
        end
        local payload = buf:sub(pos + 9, pos + 8 + len)
        pos = pos + 9 + len
        if ftype == T_SETTINGS and flags & F_ACK == 0 then
            self:queue(frame(T_SETTINGS, F_ACK, 0, ""))
        elseif ftype == T_SETTINGS then
            self.settings_acks = (self.settings_acks or 0) + 1
        elseif ftype == T_PING and flags & F_ACK == 0 then
            self:queue(frame(T_PING, F_ACK, 0, payload))
        elseif ftype == T_GOAWAY then
            self.goaway_last = string.unpack(">I4", payload) & 0x7fffffff
            self.goaway = string.unpack(">I4", payload, 5)
            self.goaway_text = payload:sub(9)
        elseif ftype == T_RST then
            ended(self, id, "rst:" .. string.unpack(">I4", payload))
        end
        if ftype == T_HEADERS then
            self.block[id] = (self.block[id] or "") .. payload
        elseif ftype == T_DATA then
            self.bodies[id] = (self.bodies[id] or "") .. payload   -- unpadded (rmq never pads)
        end
        if (ftype == T_HEADERS or ftype == T_DATA) and flags & F_END_STREAM ~= 0 then
            ended(self, id, "end")
        end
    end
    self.inbuf = buf:sub(pos)
end

-- Sends what the kernel takes now and reads whatever arrived; never
-- blocks.  Returns false once the server has closed the socket.
function C:pump()
    if self.closed then
        return false
    end
    while true do
        if self.head == "" then
            if #self.parts == 0 then
                break
            end
            self.head = table.concat(self.parts)
            self.parts = {}
        end
        local n, err, partial = self.s:send(self.head)
        n = n or partial or 0
        self.head = self.head:sub(n + 1)
        if err == "timeout" then
            break
        elseif err ~= nil then
            -- The server closed: what it wrote before may still be
            -- there to read (its GOAWAY).
            self.head, self.parts = "", {}
            break
        end
    end
    while true do
        local data, err, partial = self.s:receive(65536)
        data = data or partial
        if data and #data > 0 then
            self.inbuf = self.inbuf .. data
        end
        if err ~= nil and err ~= "timeout" then
            -- "closed" (rmq's server shuts its side once its last
            -- frames are written, and reads and drops ours until we
            -- close or serverChannelCloseLingerMillis passes), or
            -- "connection reset by peer"
            self.closed = true
            break
        elseif err ~= nil or not data or #data == 0 then
            break
        end
    end
    take(self)
    return not self.closed
end

function C:close()
    self.s:close()
    self.closed = true
end

return M
