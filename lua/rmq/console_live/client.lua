-- A client of the live console (rmq.console_live's wire): for `rmq
-- console`, `rmq-server --diff/--apply` and specs.  Blocking.
--
--   local c, err = client.open(addr [, password [, timeout_ms]])
--   c.hello                        the server's greeting line
--   c:line(text) -> kind, text     one line: "ok" | "err" | "more"
--   c:eval(code) -> ok, text       a whole snippet (its lines in turn)
--   c:close()
local cio = require("rmq.console_io")

local M = {}

M.MAX_FRAME = 256 * 1024 * 1024   -- above any consoleMaxOutputBytes

local Client = {}
Client.__index = Client

local function read_frame(sock)
    local head, err = sock:read_line(256)
    if head == nil then
        return nil, err
    end
    local kind, len = head:match("^(%a+) (%d+)$")
    len = tonumber(len)
    if kind == nil or len > M.MAX_FRAME then
        return nil, "not a console answer: " .. head:sub(1, 80)
    end
    local text = ""
    if len > 0 then
        text, err = sock:read(len)
        if text == nil then
            return nil, err
        end
    end
    return kind, text
end

function M.open(addr, password, timeout_ms)
    local sock, err = cio.connect(addr, timeout_ms or 30000)
    if sock == nil then
        return nil, ("cannot reach the console at %s: %s"):format(addr, err)
    end
    local kind, text = read_frame(sock)
    if kind == "auth" then
        if password == nil then
            sock:close()
            return nil, ("the console at %s wants a password (--password, or $RMQ_CONSOLE_PASSWORD)"):format(addr)
        end
        sock:send(password .. "\n")
        kind, text = read_frame(sock)
    end
    if kind ~= "hello" then
        sock:close()
        return nil, ("console at %s: %s"):format(addr, (tostring(text or kind):gsub("\n$", "")))
    end
    return setmetatable({ sock = sock, hello = text:gsub("\n$", "") }, Client)
end

function Client:line(text)
    local ok, err = self.sock:send(text .. "\n")
    if not ok then
        return nil, err
    end
    return read_frame(self.sock)
end

--- Sends a snippet line by line; its answers' text joined.  ok is false
--- when a line was refused or failed, or the snippet never completed.
function Client:eval(code)
    local out, kind = {}, nil
    for line in (code:gsub("\n$", "") .. "\n"):gmatch("([^\n]*)\n") do
        local text
        kind, text = self:line(line)
        if kind == nil then
            return false, "console connection: " .. tostring(text)
        end
        out[#out + 1] = text
        if kind == "err" then
            return false, table.concat(out)
        end
    end
    if kind == "more" then
        return false, "the snippet is not complete (an open block)\n"
    end
    return true, table.concat(out)
end

function Client:close()
    self.sock:close()
end

return M
