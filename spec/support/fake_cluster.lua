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

-- A broker that acknowledges SEND_MESSAGE_V2 like RocketMQ does, after
-- an optional delay, or refuses with a fixed code.  7005 reports stats.
local BROKER = [[
local net = require("rmq.net")
local core = require("rmq.core")
local knobs = { delay_ms = %d, fail_code = %s }
local count, offset, last, last_body = 0, 0, nil, nil
local function send(ctx, cmd)
    count = count + 1
    last = cmd.ext
    last_body = cmd.body
    if knobs.delay_ms > 0 then net.sleep(knobs.delay_ms) end
    if knobs.fail_code then
        return { code = knobs.fail_code, remark = "fake broker refuses" }
    end
    offset = offset + 1
    return { code = 0, ext = {
        msgId = ("7F00000100002A9F%%016X"):format(offset * 100),
        queueId = cmd.ext.e, queueOffset = offset - 1,
        MSG_REGION = "DefaultRegion", TRACE_ON = "true" } }
end
return {
    role = "namesrv",
    workers = 1,
    processors = {
        [310] = send,
        [320] = send,
        [7005] = function(ctx, cmd)
            local ext = { count = count }
            for k, v in pairs(last or {}) do ext["last_" .. k] = v end
            if last_body and last and (tonumber(last.f) or 0) & 1 == 1 then
                local plain = core.inflate(last_body)
                ext.inflated_len = plain and #plain or -1
                ext.inflated_crc = plain and core.crc32(plain) or -1
            end
            return { code = 0, ext = ext }
        end,
        [7006] = function(ctx, cmd)
            knobs.delay_ms = tonumber(cmd.ext.delay_ms) or knobs.delay_ms
            if cmd.ext.fail_code == "none" then knobs.fail_code = nil
            elseif cmd.ext.fail_code then knobs.fail_code = tonumber(cmd.ext.fail_code) end
            return { code = 0 }
        end,
    },
}
]]

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
        datas[#datas + 1] = string.format(
            '{"brokerAddrs":{"0":"%s"},"brokerName":"%s","cluster":"DefaultCluster"}', s.addr, name)
        queues[#queues + 1] = string.format(
            '{"brokerName":"%s","perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}',
            name, opts.queues or 4, opts.queues or 4)
    end
    local body = string.format('{"brokerDatas":[%s],"filterServerTable":{},"queueDatas":[%s]}',
        table.concat(datas, ","), table.concat(queues, ","))
    local routes = { [opts.topic] = body }
    if opts.template ~= false then
        routes.TBW102 = body
    end
    local cjson = require("cjson")
    c.namesrv = server.start({ source = NAMESRV:format(cjson.encode(routes)) })
    c.namesrv_addr = c.namesrv.addr
    return c
end

return M
