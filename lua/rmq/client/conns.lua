-- rmq.client.conns: the connections a client keeps to brokers, one per
-- address, with its handler for the requests a broker sends back
-- (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED, pushed replies).
-- Every client role that needs such a channel (transaction producer,
-- push consumer, request-reply) keeps its connections in one of these.
--
--   local conns = require("rmq.client.conns")
--   local cache = conns.new({
--       on_request = function(addr, ctx, cmd) -> reply | nil,  -- optional
--       on_connect = function(addr, c),   -- optional: a new connection
--                                         -- was kept (heartbeat it, ...)
--   })
--   cache:get(addr, timeout) -> conn | nil, err
--       the open connection to addr, connecting (again) when there is
--       none or it closed; timeout is net.connect's (ms)
--   cache:peek(addr) -> conn | nil     the open one, without connecting
--   cache:each() -> iterator of addr, conn (open ones)
--   cache:close_all(before)           before(addr, c) runs first on each
--                                      open one (UNREGISTER_CLIENT, ...)
--
-- Reconnects: net.connect yields, so several tasks that find the
-- connection gone (pull loops after a broker restart) connect side by
-- side; the first connection back is kept and the others closed at once
-- (each is a descriptor on both sides until collected), and on_connect
-- runs for the kept one only.
local net = require("rmq.net")

local M = {}

local Cache = {}
Cache.__index = Cache

function M.new(opts)
    opts = opts or {}
    return setmetatable({
        by_addr = {},
        on_request = opts.on_request,
        on_connect = opts.on_connect,
    }, Cache)
end

function Cache:peek(addr)
    local c = self.by_addr[addr]
    if c and not c.closed then
        return c
    end
    return nil
end

function Cache:get(addr, timeout)
    local c = self:peek(addr)
    if c then
        return c
    end
    local on_request = self.on_request
    local err
    c, err = net.connect(addr, {
        timeout = timeout,
        on_request = on_request and function(ctx, cmd) return on_request(addr, ctx, cmd) end,
    })
    if not c then
        return nil, err
    end
    local first = self:peek(addr)
    if first then
        c:close()
        return first
    end
    self.by_addr[addr] = c
    if self.on_connect then
        self.on_connect(addr, c)
    end
    return c
end

function Cache:each()
    local addrs = {}
    for addr, c in pairs(self.by_addr) do
        if not c.closed then
            addrs[#addrs + 1] = addr
        end
    end
    table.sort(addrs)
    local i = 0
    return function()
        while true do
            i = i + 1
            local addr = addrs[i]
            if addr == nil then
                return nil
            end
            local c = self:peek(addr)
            if c then
                return addr, c
            end
        end
    end
end

function Cache:close_all(before)
    local all = self.by_addr
    self.by_addr = {}
    for addr, c in pairs(all) do
        if not c.closed then
            if before then
                before(addr, c)
            end
            c:close()
        end
    end
end

return M
