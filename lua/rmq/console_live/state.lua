-- The running server's state as plain Lua tables, for the live console
-- (main thread; every figure is read from the shared C tables, never
-- from a worker's state).  Each function returns a fresh table, or nil
-- and why (a NameServer has no topics; a broker alone has no routes).
local cjson = require("cjson")
local shared = require("rmq.shared")

local M = {}

-- The store seen from here (attach wants the broker's host:port).
local attached
local function attach_store(conf, h)
    if attached == nil then
        attached = require("rmq.store").attach(h, "127.0.0.1:" .. conf.listenPort)
    end
    return attached
end

local function broker(conf)
    return conf.role == "broker" or conf.role == "standalone"
end

-- fn(conf, ...) for a broker (or a standalone); nil, why elsewhere.
local function broker_only(fn)
    return function(conf, ...)
        if not broker(conf) then
            return nil, "not a broker"
        end
        return fn(conf, ...)
    end
end

M.topics = broker_only(function(conf)
    return require("rmq.broker.topics").all()
end)

M.groups = broker_only(function(conf)
    return require("rmq.broker.groups").all()
end)

--- Client connections by group: {consumers = {group = {members...}},
--- producers = {group = {members...}}, counts = {...}}.
M.clients = broker_only(function(conf)
    local reg = require("rmq.broker.clients").registry
    local out = { consumers = {}, producers = {}, counts = reg:counts() }
    for _, kind in ipairs({ "consumer", "producer" }) do
        for _, g in ipairs(reg:groups(kind)) do
            local list = {}
            for conn, info in pairs(reg:members(kind, g) or {}) do
                info.conn = conn
                list[#list + 1] = info
            end
            table.sort(list, function(a, b) return tostring(a.clientId) < tostring(b.clientId) end)
            out[kind .. "s"][g] = list
        end
    end
    return out
end)

--- Committed consumer offsets: {["topic@group"] = {[queueId] = offset}}.
M.offsets = broker_only(function(conf)
    return require("rmq.broker.offsets").table()
end)

--- The store: its figures and every queue's min/max offset.
M.store = broker_only(function(conf)
    local h = shared.get_handle("broker.store")
    if h == nil then
        return nil, "the store is not open"
    end
    local st = attach_store(conf, h)
    local out = st:stats()
    out.maxPhyOffset, out.minPhyOffset, out.flushedOffset = st:max_phy(), st:min_phy(), st:flushed()
    local queues = {}
    for _, q in ipairs(st:queues()) do
        queues[q.topic .. "@" .. q.queueId] = { min = q.min, max = q.max }
    end
    out.queues = queues
    return out
end)

--- Flush and replication: rmq.ha's figures (nil without HA).
M.ha = broker_only(function(conf)
    local h = shared.get_handle("broker.ha")
    local out = { flushDiskType = conf.flushDiskType, brokerRole = conf.brokerRole }
    local sh = shared.get_handle("broker.store")
    if sh ~= nil then
        local st = attach_store(conf, sh)
        out.maxPhyOffset, out.flushedOffset = st:max_phy(), st:flushed()
        out.flushBehindBytes = out.maxPhyOffset - out.flushedOffset
    end
    if h ~= nil then
        out.replication = require("rmq.ha").stats(h)
    end
    return out
end)

--- The NameServer's route tables (a NameServer or a standalone):
--- route(topic) -> TopicRouteData, route() -> ClusterInfo.
function M.route(conf, topic)
    if conf.role == "broker" then
        return nil, "not a NameServer"
    end
    local fastjson = require("rmq.fastjson")
    local rt = require("rmq.route").shared()
    local body
    if topic ~= nil then
        body = rt:route(topic, true)
        if body == nil then
            return nil, "no route for topic " .. tostring(topic)
        end
    else
        body = rt:cluster_info()
    end
    -- Whole numbers as integers (JSON brought them back as floats).
    local function ints(t)
        for k, v in pairs(t) do
            if type(v) == "table" then
                ints(v)
            elseif math.type(v) == "float" and math.tointeger(v) then
                t[k] = math.tointeger(v)
            end
        end
        return t
    end
    local decoded = ints(fastjson.decode(body))
    decoded.counts = topic == nil and rt:counts() or nil
    return decoded
end

-- {{{ Per-request-code figures from the metrics registry

local function labels(text)
    local t = {}
    for k, v in text:gmatch('([%w_]+)="([^"]*)"') do
        t[k] = v
    end
    return t
end

-- The percentile p (0..1) of a cumulative histogram {{le, count}, ...}.
local function percentile(buckets, total, p)
    if total == 0 then
        return nil
    end
    local want = total * p
    for _, b in ipairs(buckets) do
        if b[2] >= want then
            return b[1]
        end
    end
    return math.huge
end

--- {[request_code] = {count=, responses = {[response_code] = n},
--- p50=, p90=, p99= (ms, upper bucket bounds)}} over every worker;
--- nil, why with metrics off (metricsExporterType).
function M.requests()
    local text = require("rmq.console_io").metrics_text()
    if text == nil then
        return nil, "metrics are off (metricsExporterType = \"PROM\" turns them on)"
    end
    local out, hist = {}, {}
    local function entry(code)
        local e = out[code]
        if e == nil then
            e = { count = 0, responses = {} }
            out[code] = e
        end
        return e
    end
    for line in text:gmatch("[^\n]+") do
        local name, lab, value = line:match("^([%w_]+){(.-)} (%S+)$")
        if name == "rmq_requests_total" then
            local l = labels(lab)
            local code = tonumber(l.request_code)
            if code then
                local e = entry(code)
                local n = math.tointeger(tonumber(value)) or 0
                e.count = e.count + n
                local rc = tonumber(l.response_code) or l.response_code
                e.responses[rc] = (e.responses[rc] or 0) + n
            end
        elseif name == "rocketmq_rpc_latency_bucket" then
            local l = labels(lab)
            local code = tonumber(l.request_code)
            if code then
                local le = l.le == "+Inf" and math.huge or tonumber(l.le)
                local h = hist[code] or {}
                hist[code] = h
                h[le] = (h[le] or 0) + (tonumber(value) or 0)
            end
        end
    end
    for code, h in pairs(hist) do
        local buckets = {}
        for le, n in pairs(h) do
            buckets[#buckets + 1] = { le, n }
        end
        table.sort(buckets, function(a, b) return a[1] < b[1] end)
        local total = buckets[#buckets] and buckets[#buckets][2] or 0
        local e = entry(code)
        e.p50, e.p90, e.p99 = percentile(buckets, total, 0.5), percentile(buckets, total, 0.9),
            percentile(buckets, total, 0.99)
    end
    return out
end

-- }}}

--- The conf in force (run-time changes included), secrets left out.
function M.conf(conf)
    local out = {}
    if broker(conf) then
        require("rmq.broker.tables").sync_conf(conf)
    end
    local conf_mod = require("rmq.conf")
    for k, v in pairs(conf) do
        local e = conf_mod.describe(k)
        if type(v) ~= "function" and k ~= "processors" and k:sub(1, 1) ~= "_" and not (e and e.secret) then
            if type(v) == "table" then
                local ok, copy = pcall(function() return cjson.decode(cjson.encode(v)) end)
                out[k] = ok and copy or nil
            else
                out[k] = v
            end
        end
    end
    return out
end

return M
