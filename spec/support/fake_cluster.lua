-- A NameServer and brokers made of conf handlers, for client specs that
-- need brokers to misbehave on purpose (slow, failing) before the real
-- broker exists.  Each is a real rmq-server process on loopback.
--
--   local cluster = fake.start{ brokers = { ["broker-a"] = {delay_ms=0, fail_code=nil}, ... },
--                               topic = "T", queues = 4 }
--   cluster.namesrv_addr, cluster.brokers["broker-a"].addr
--   fake.stats(addr) -> {count=, last=<ext of the last send>, ...}
--   cluster:stop()
local net = require("rmq.net")
local server = require("support.server")

local M = {}

-- Brokers are spec/support/fake_broker.lua, loaded by the server from
-- the repository root (its cwd) through package.path's "./?.lua".
local BROKER = 'return require("spec.support.fake_broker").conf({ delay_ms = %d, fail_code = %s })'

-- A NameServer that knows one topic on the given brokers.
local NAMESRV = [[
local cjson = require("cjson")
local route = cjson.decode(%q)
return {
    role = "namesrv",
    workers = 1,
    processors = {
        [105] = function(ctx, cmd)
            local t = cmd.ext.topic
            if route[t] == nil then
                return { code = 17, remark = "No topic route info in name server for the topic: " .. t }
            end
            return { code = 0, body = route[t] }
        end,
    },
}
]]

local Cluster = {}
Cluster.__index = Cluster

function Cluster:stop()
    for _, b in pairs(self.brokers) do
        b.server:stop()
        if b.slave then b.slave.server:stop() end
    end
    self.namesrv:stop()
end

--- Changes a broker's behaviour while it runs.
function Cluster:set(name, knobs)
    local r = assert(net.call(self.brokers[name].addr, { code = 7006, ext = knobs }))
    assert(r.code == 0)
end

function M.stats(addr)
    local r = assert(net.call(addr, { code = 7005 }))
    return r.ext
end

function M.start(opts)
    local c = setmetatable({ brokers = {} }, Cluster)
    local datas, queues = {}, {}
    local names = {}
    for name in pairs(opts.brokers) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, name in ipairs(names) do
        local knobs = opts.brokers[name]
        local s = server.start({ source = BROKER:format(knobs.delay_ms or 0,
            knobs.fail_code and tostring(knobs.fail_code) or "nil") })
        c.brokers[name] = { server = s, addr = s.addr }
        local addrs = string.format('"0":"%s"', s.addr)
        if knobs.with_slave then
            local slave = server.start({ source = BROKER:format(0, "nil") })
            c.brokers[name].slave = { server = slave, addr = slave.addr }
            addrs = addrs .. string.format(',"1":"%s"', slave.addr)
        end
        datas[#datas + 1] = string.format(
            '{"brokerAddrs":{%s},"brokerName":"%s","cluster":"DefaultCluster"}', addrs, name)
        queues[#queues + 1] = string.format(
            '{"brokerName":"%s","perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}',
            name, opts.queues or 4, opts.queues or 4)
    end
    local body = string.format('{"brokerDatas":[%s],"filterServerTable":{},"queueDatas":[%s]}',
        table.concat(datas, ","), table.concat(queues, ","))
    local routes = { [opts.topic] = body, ["%RETRY%" .. (opts.group or "FxConsumerGroup")] = body }
    if opts.template ~= false then
        routes.TBW102 = body
    end
    local cjson = require("cjson")
    c.namesrv = server.start({ source = NAMESRV:format(cjson.encode(routes)) })
    c.namesrv_addr = c.namesrv.addr
    return c
end

return M
