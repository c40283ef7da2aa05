-- A broker's and an admin's side of the NameServer protocol, for specs
-- and benchmarks: builds REGISTER_BROKER bodies (JSON and compressed, as
-- a 4.9.8 broker writes them) and wraps the requests.
--
--   local ns = require("support.nsclient")
--   local r = ns.register(conn, { cluster = "C", name = "broker-a", id = 0,
--       addr = "10.0.0.1:10911", topics = { { "T", 4, 4, 6 } }, counter = 1 })
--   local route = ns.route(conn, "T")          -- decoded TopicRouteData or nil, reply
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")

local M = {}

local req = codes.request

local function q(s)
    return '"' .. s:gsub('[%c"\\]', function(c)
        return string.format("\\u%04x", c:byte())
    end) .. '"'
end

-- topics: list of {name, read, write, perm [, sysflag]}
local function topic_table(topics)
    local parts = {}
    for _, t in ipairs(topics or {}) do
        parts[#parts + 1] = ("%s:{\"order\":false,\"perm\":%d,\"readQueueNums\":%d,"
            .. "\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":%s,\"topicSysFlag\":%d,"
            .. "\"writeQueueNums\":%d}"):format(q(t[1]), t[4] or 6, t[2] or 4, q(t[1]), t[5] or 0,
            t[3] or 4)
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

local function dv_json(o)
    if o.state then
        return ("{\"counter\":%d,\"stateVersion\":%d,\"timestamp\":%d}")
            :format(o.counter or 0, o.state, o.timestamp or 1700000000000)
    end
    return ("{\"counter\":%d,\"timestamp\":%d}"):format(o.counter or 0, o.timestamp or 1700000000000)
end

--- RegisterBrokerBody JSON.
function M.body_json(o)
    local filters = {}
    for _, f in ipairs(o.filters or {}) do
        filters[#filters + 1] = q(f)
    end
    return ("{\"filterServerList\":[%s],\"topicConfigSerializeWrapper\":{\"dataVersion\":%s,"
        .. "\"topicConfigTable\":%s}}"):format(table.concat(filters, ","), dv_json(o),
        topic_table(o.topics))
end

--- The compressed form (zlib of int32-length-prefixed records).
function M.body_compressed(o)
    local parts = {}
    local function rec(s)
        parts[#parts + 1] = string.pack(">s4", s)
    end
    rec(dv_json(o))
    parts[#parts + 1] = string.pack(">i4", #(o.topics or {}))
    for _, t in ipairs(o.topics or {}) do
        rec(("%s %d %d %d SINGLE_TAG"):format(t[1], t[2] or 4, t[3] or 4, t[4] or 6))
    end
    rec("[]")
    return core.deflate(table.concat(parts), 9)
end

--- The REGISTER_BROKER command table for o: cluster, name, id, addr, ha,
--- topics, counter, state, timestamp, compressed, crc (false: none),
--- timeout (5.x heartbeatTimeoutMillis), acting (5.x enableActingMaster).
function M.register_cmd(o)
    local body = o.body or (o.compressed and M.body_compressed(o) or M.body_json(o))
    local ext = {
        brokerName = o.name, brokerAddr = o.addr, clusterName = o.cluster or "DefaultCluster",
        haServerAddr = o.ha or (o.addr:gsub(":%d+$", ":10912")), brokerId = tostring(o.id or 0),
        compressed = o.compressed and "true" or "false",
    }
    if o.crc ~= false then
        ext.bodyCrc32 = tostring(core.crc32(body) & 0x7FFFFFFF)
    end
    if o.timeout then
        ext.heartbeatTimeoutMillis = tostring(o.timeout)
    end
    if o.acting ~= nil then
        ext.enableActingMaster = tostring(o.acting)
    end
    return { code = req.REGISTER_BROKER, ext = ext, body = body, version = o.version or 409 }
end

function M.register(conn, o)
    return conn:call(M.register_cmd(o), o.call_timeout or 30000)
end

function M.unregister(conn, o)
    return conn:call({ code = req.UNREGISTER_BROKER, ext = {
        brokerName = o.name, brokerAddr = o.addr, clusterName = o.cluster or "DefaultCluster",
        brokerId = tostring(o.id or 0) } })
end

--- GET_ROUTEINFO_BY_TOPIC: the decoded TopicRouteData (nil when the
--- reply is not SUCCESS), the reply.
function M.route(conn, topic, version)
    local r = assert(conn:call({ code = req.GET_ROUTEINFO_BY_TOPIC, ext = { topic = topic },
                                 version = version or 409 }))
    if r.code ~= 0 then
        return nil, r
    end
    return assert(fastjson.decode(r.body)), r
end

function M.cluster_info(conn)
    local r = assert(conn:call({ code = req.GET_BROKER_CLUSTER_INFO }))
    assert(r.code == 0, r.remark)
    return assert(fastjson.decode(r.body)), r
end

--- brokerAddrs of brokerName in a decoded route, keys as numbers.
function M.addrs(route, name)
    for _, bd in ipairs(route and route.brokerDatas or {}) do
        if bd.brokerName == name then
            local out = {}
            for k, v in pairs(bd.brokerAddrs) do
                out[math.tointeger(tonumber(k))] = v
            end
            return out
        end
    end
    return nil
end

--- The QueueData of brokerName in a decoded route.
function M.queue(route, name)
    for _, qd in ipairs(route and route.queueDatas or {}) do
        if qd.brokerName == name then
            return qd
        end
    end
    return nil
end

--- Sorted list of a TopicList reply's topics.
function M.topic_list(conn, code, ext)
    local r = assert(conn:call({ code = code, ext = ext }))
    assert(r.code == 0, r.remark)
    local t = assert(fastjson.decode(r.body))
    local list = {}
    for _, x in ipairs(t.topicList) do
        list[#list + 1] = x
    end
    table.sort(list)
    return list, t, r
end

return M
