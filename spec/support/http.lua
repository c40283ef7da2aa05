-- HTTP from specs over real sockets (luasocket), nothing parsed for us:
--   http.raw(addr, bytes [, wait_s]) -> everything until close, closed?
--   http.request(addr, method, path [, body [, headers]]) -> status, body, head
--   http.json(addr, path) -> status, decoded body
local socket = require("socket")
local cjson = require("cjson")

local M = {}

local function split(addr)
    local host, port = addr:match("^(.*):(%d+)$")
    return host, tonumber(port)
end

--- from: a local address to connect from (e.g. "127.0.0.2": another
--- peer on the loopback), or nil.
function M.connect(addr, timeout, from)
    local host, port = split(addr)
    local c = assert(socket.tcp())
    c:settimeout(timeout or 5)
    if from then
        assert(c:bind(from, 0))
    end
    local ok, err = c:connect(host, port)
    if not ok then
        c:close()
        return nil, err
    end
    return c
end

--- Sends bytes on a fresh connection and reads until the server closes
--- (or wait seconds pass).  Returns what came, and whether it closed.
function M.raw(addr, bytes, wait, from)
    local c = assert(M.connect(addr, wait or 5, from))
    c:send(bytes)
    local chunks, closed = {}, false
    local t0 = socket.gettime()
    while socket.gettime() - t0 < (wait or 5) do
        local data, e, partial = c:receive(4096)
        local got = data or partial
        if got and #got > 0 then
            chunks[#chunks + 1] = got
        end
        if e == "closed" then
            closed = true
            break
        elseif e == "timeout" then
            break
        end
    end
    c:close()
    return table.concat(chunks), closed
end

-- wait: seconds to wait for the whole answer (default 5).
function M.request(addr, method, path, body, headers, from, wait)
    local lines = { ("%s %s HTTP/1.1"):format(method, path), "Host: rmq", "Connection: close" }
    for k, v in pairs(headers or {}) do
        lines[#lines + 1] = k .. ": " .. v
    end
    if body then
        lines[#lines + 1] = "Content-Length: " .. #body
    end
    local out = M.raw(addr, table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""), wait, from)
    local status = tonumber(out:match("^HTTP/1%.%d (%d+)"))
    local head, rest = out:match("^(.-)\r\n\r\n(.*)$")
    return status, rest or "", head or out
end

function M.json(addr, path, method, body, wait)
    local status, text = M.request(addr, method or "GET", path, body,
                                   body and { ["Content-Type"] = "application/json" } or nil, nil, wait)
    local ok, t = pcall(cjson.decode, text)
    return status, ok and t or text
end

return M
