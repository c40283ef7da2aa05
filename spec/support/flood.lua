-- A held-pull flood (issue 21, item 2): many plain sockets, each sending
-- long-poll PULLs on an empty queue, and reading whatever comes back (so
-- refusals are counted, and a full socket never stalls the broker).
-- Used by spec/integration/memory_budget_spec.lua and
-- scripts/bench/attacks.lua.
--
--   local flood = require("support.flood")
--   local f = flood.open(addr, nconn [, from])        -- nconn sockets (from: a local
--                                                     -- address such as "127.0.0.2",
--                                                     -- so the flood is another peer)
--   f:queue_pulls(per_conn, {topic=, queueId=, suspendMillis=})
--   f:pump()                                          -- send and read what is possible now
--   f.replies, f.codes[code], f.remarks[remark]       -- what came back so far
--   f:close()
local codec = require("rmq.codec")
local slow = require("support.slowreader")

local M = {}

local F = {}
F.__index = F

function M.open(addr, nconn, from)
    local f = setmetatable({ conns = {}, replies = 0, codes = {}, remarks = {}, sent_frames = 0 }, F)
    for i = 1, nconn do
        f.conns[i] = { s = slow.socket(addr, from), out = {}, head = "", inbuf = "" }
    end
    return f
end

function F:queue_pulls(per_conn, o)
    local opaque = 0
    for _, c in ipairs(self.conns) do
        for _ = 1, per_conn do
            opaque = opaque + 1
            c.out[#c.out + 1] = slow.pull_frame(opaque, o)
            self.sent_frames = self.sent_frames + 1
        end
    end
end

-- Decodes the complete frames in c.inbuf.
local function take(self, c)
    local buf, pos = c.inbuf, 1
    while #buf - pos + 1 >= 4 do
        local len = string.unpack(">I4", buf, pos)
        if #buf - pos + 1 < 4 + len then
            break
        end
        local cmd = codec.decode(buf:sub(pos, pos + 3 + len))
        pos = pos + 4 + len
        if cmd then
            self.replies = self.replies + 1
            self.codes[cmd.code] = (self.codes[cmd.code] or 0) + 1
            local r = cmd.remark or ""
            self.remarks[r] = (self.remarks[r] or 0) + 1
        end
    end
    c.inbuf = buf:sub(pos)
end

--- Sends what the kernel takes now and reads what has arrived, on every
--- socket; returns the bytes still waiting to be sent.
function F:pump()
    local backlog = 0
    for _, c in ipairs(self.conns) do
        if not c.dead then
            if c.head == "" and #c.out > 0 then
                c.head = table.concat(c.out)
                c.out = {}
            end
            if c.head ~= "" then
                local last, err, partial = c.s:send(c.head)
                local n = last or partial or 0
                c.head = c.head:sub(n + 1)
                if err ~= nil and err ~= "timeout" then
                    c.dead = true
                end
            end
            while true do
                local data, err, partial = c.s:receive(65536)
                local got = data or partial
                if got and #got > 0 then
                    c.inbuf = c.inbuf .. got
                end
                if err == "closed" then
                    c.dead = true
                    break
                end
                if not data then
                    break
                end
            end
            take(self, c)
            backlog = backlog + #c.head
        end
    end
    return backlog
end

--- "code:count ..." of the replies so far.
function F:summary()
    local parts = {}
    for code, n in pairs(self.codes) do
        parts[#parts + 1] = ("%d:%d"):format(code, n)
    end
    table.sort(parts)
    return table.concat(parts, " ")
end

function F:close()
    for _, c in ipairs(self.conns) do
        c.s:close()
    end
end

return M
