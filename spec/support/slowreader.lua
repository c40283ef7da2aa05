-- A client that sends requests and never reads its socket, for the
-- backpressure spec and scripts/bench/slowreader.lua.  rmq.net's
-- connections read whatever arrives, so this one is a plain luasocket
-- TCP socket (lua-socket) in non-blocking mode: send() takes what the
-- kernel accepts and the rest waits for the next pump().
--
--   local slow = require("support.slowreader")
--   local c = slow.connect("127.0.0.1:PORT")
--   local s = slow.socket("127.0.0.1:PORT" [, from])
--                           a connected luasocket TCP socket, non-blocking
--                           (from: a local address such as "127.0.0.2",
--                           so the connection is another peer); h2raw's
--                           and flood's connections are these too
--   c:queue(frame)          add bytes to send (never blocks)
--   c:pump()                send what the kernel takes now -> bytes sent
--   c.sent, c:backlog()     bytes sent so far, bytes still waiting here
--   c:close()
--   slow.pull_frame(opaque, {topic=, queueId=, offset=, max=, group=,
--                            suspendMillis=})   a PULL_MESSAGE (code 11)
--   slow.send_frame(opaque, topic, queueId, body)  a SEND_MESSAGE_V2 (310)
--   slow.cmd(frame)         the command table of a frame, for rmq.net's
--                           c:call (without its opaque: call picks one)
--   slow.rss_kb(pid)        VmRSS of a process, in KiB
local socket = require("socket")
local codec = require("rmq.codec")
local rq = require("support.requests")

local M = {}

local Slow = {}
Slow.__index = Slow

-- Connecting blocks (5 s at most: the server is local); every read and
-- write after it returns at once ("timeout" when it would block).
function M.socket(addr, from)
    local host, port = addr:match("^(.+):(%d+)$")
    local s = assert(socket.tcp())
    s:settimeout(5)
    if from then
        assert(s:bind(from, 0))
    end
    assert(s:connect(host, tonumber(port)))
    s:settimeout(0)
    return s
end

function M.connect(addr)
    return setmetatable({ s = M.socket(addr), parts = {}, head = "", sent = 0, queued = 0 }, Slow)
end

function Slow:queue(bytes)
    self.parts[#self.parts + 1] = bytes
    self.queued = self.queued + #bytes
end

function Slow:backlog()
    return self.queued - self.sent
end

--- Sends what the kernel takes without blocking; returns the bytes sent
-- by this call (0 when the socket buffer is full), or nil, err when the
-- connection is gone.
function Slow:pump()
    local total = 0
    while true do
        if self.head == "" then
            if #self.parts == 0 then
                return total
            end
            self.head = table.concat(self.parts)
            self.parts = {}
        end
        local last, err, partial = self.s:send(self.head)
        local n = last or partial or 0
        if n > 0 then
            self.head = self.head:sub(n + 1)
            self.sent = self.sent + n
            total = total + n
        end
        if err == "timeout" then
            return total
        elseif err ~= nil then
            return nil, err
        end
    end
end

function Slow:close()
    self.s:close()
end

-- The frames are support/requests.lua's commands, encoded.
function M.pull_frame(opaque, o)
    -- FLAG_SUBSCRIPTION, plus FLAG_SUSPEND for a long poll.
    return codec.encode(rq.pull({
        opaque = opaque, group = o.group or "SlowReaderGroup", topic = o.topic, qid = o.queueId,
        offset = o.offset, max = o.max, sysflag = o.suspendMillis and 6 or 4, suspend = o.suspendMillis,
        expr = "TAG",
    }))
end

function M.send_frame(opaque, topic, qid, body)
    return codec.encode(rq.send({
        opaque = opaque, group = "SlowReaderProducer", topic = topic, qid = qid, born = 1700000000000,
        wait = false, tags = "TagA", body = body,
    }))
end

function M.cmd(frame)
    local t = assert(codec.decode(frame))
    t.opaque = nil
    return t
end

function M.rss_kb(pid)
    local f = io.open("/proc/" .. pid .. "/status", "r")
    if not f then
        return nil
    end
    local s = f:read("a")
    f:close()
    return tonumber(s:match("VmRSS:%s*(%d+)"))
end

return M
