-- Reading a server's Prometheus text for specs: one scrape, one series'
-- value, and promtool's verdict.
--
--   local prom = require("support.prom")
--   local text = prom.scrape(s.metrics_addr)        -- the body of a 200
--   prom.value(text, "rocketmq_messages_in_total", 'topic="T"')  -- number | nil
--   prom.promtool_check(dir, text, "name.txt")      -- "absent" | ok, output
local socket = require("socket")

local M = {}

--- GET /metrics on a fresh connection; errors unless the answer is 200.
function M.scrape(addr)
    local host, port = addr:match("^(.*):(%d+)$")
    local c = assert(socket.tcp())
    c:settimeout(5)
    assert(c:connect(host, tonumber(port)))
    assert(c:send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    local out = assert(c:receive("*a"))
    c:close()
    assert(out:match("^HTTP/1%.1 200"), out:sub(1, 200))
    return out:match("\r\n\r\n(.*)$")
end

--- The value of the first series of `name` whose labels contain the
--- plain text `labels` (nil: any), or nil.
function M.value(text, name, labels)
    for line in text:gmatch("[^\n]+") do
        local n, l, v = line:match("^([%w_]+){(.-)} (%S+)$")
        if n == name and l:find(labels or "", 1, true) then
            return tonumber(v)
        end
    end
    return nil
end

--- promtool check metrics on text (written to dir/name): "absent" when
--- promtool is not installed, else whether it accepts and what it said.
function M.promtool_check(dir, text, name)
    local p = io.popen("command -v promtool 2>/dev/null")
    local have = p:read("l")
    p:close()
    if not have then
        return "absent"
    end
    local path = dir .. "/" .. name
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    p = io.popen(("promtool check metrics < %q 2>&1"):format(path))
    local said = p:read("a")
    return p:close() == true, said
end

return M
