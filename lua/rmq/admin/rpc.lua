-- What the group, consumer, producer, message and offset admin families
-- share beside rmq.admin.remote: the look-ups DefaultMQAdminExtImpl
-- makes for them (consume stats, a group's connections and running info
-- through its retry topic's route), MessageQueue order, dates and
-- version names.  Failures raise rmq.admin.remote's errors.
--
--   local rpc = require("rmq.admin.rpc")
--   local stats = rpc.consume_stats(ctx, "group")
local codes = require("rmq.codes")
local remote = require("rmq.admin.remote")

local req = codes.request

local M = {}


--- MessageQueue.compareTo: topic, then broker name, then queue id.
function M.mq_less(a, b)
    if a.topic ~= b.topic then
        return a.topic < b.topic
    end
    if a.brokerName ~= b.brokerName then
        return a.brokerName < b.brokerName
    end
    return a.queueId < b.queueId
end

--- A request that must succeed and whose reply carries a JSON body: the
--- body decoded (object-keyed maps as remote.entries lists); raises
--- admin errors.
function M.json(ctx, addr, cmd)
    local r = remote.ok(ctx, addr, cmd)
    return remote.json(r.body, addr), r
end

--- The same as M.json, with a longer timeout.
function M.json_slow(ctx, addr, cmd, timeout)
    return M.json({ namesrv = ctx.namesrv, timeout = timeout or ctx.timeout, credentials = ctx.credentials },
                  addr, cmd)
end

--- BrokerData.selectBrokerAddr (topic.lua's): the master, else a slave.
M.select_addr = require("rmq.admin.topic").select_addr

--- Every broker name with its cluster and selectBrokerAddr, by name.
function M.brokers(ctx)
    local info = remote.cluster_info(ctx)
    local cluster_of = {}
    for cluster, names in pairs(info.clusterAddrTable) do
        for _, n in ipairs(names) do
            cluster_of[n] = cluster
        end
    end
    local out = {}
    for _, name in ipairs(remote.sorted_keys(info.brokerAddrTable)) do
        local bd = info.brokerAddrTable[name]
        out[#out + 1] = { cluster = cluster_of[name], name = name, addr = M.select_addr(bd),
                          addrs = bd.brokerAddrs or {} }
    end
    return out
end

--- The broker datas of a topic's route, by broker name.
function M.route_brokers(ctx, topic)
    local r = remote.route(ctx, topic)
    local list = {}
    for _, bd in ipairs(r.brokerDatas or {}) do
        list[#list + 1] = bd
    end
    table.sort(list, function(a, b) return a.brokerName < b.brokerName end)
    return list, r
end

--- The masters of a topic's route: {{name=, addr=}, ...} by name.
function M.route_masters(ctx, topic)
    local out = {}
    for _, bd in ipairs(M.route_brokers(ctx, topic)) do
        local m = (bd.brokerAddrs or {})["0"]
        if m then
            out[#out + 1] = { name = bd.brokerName, addr = m }
        end
    end
    return out
end

--- The master address of a broker name (any address when it has none).
function M.broker_addr(ctx, name)
    for _, b in ipairs(M.brokers(ctx)) do
        if b.name == name then
            return b.addrs["0"] or b.addr
        end
    end
    error(remote.failed(nil, ("broker %s is not in the NameServer's cluster info"):format(name)), 0)
end

--- GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP: the offset.
function M.queue_offset(ctx, addr, code, topic, qid, timestamp)
    local r = remote.ok(ctx, addr, { code = code, ext = { topic = topic, queueId = qid, timestamp = timestamp } })
    return math.tointeger(tonumber((r.ext or {}).offset)) or 0
end

--- DefaultMQAdminExt.examineConsumeStats(group [, topic]): GET_CONSUME_STATS
--- at every master of %RETRY%group's route, merged: {offsetTable = list
--- of {mq=, brokerOffset=, consumerOffset=, lastTimestamp=} sorted as
--- MessageQueue, consumeTps=}.
function M.consume_stats(ctx, group, topic)
    local out = { offsetTable = {}, consumeTps = 0 }
    for _, b in ipairs(M.route_masters(ctx, "%RETRY%" .. group)) do
        local t = M.json(ctx, b.addr, { code = req.GET_CONSUME_STATS, ext = { consumerGroup = group, topic = topic } })
        for _, kv in ipairs(remote.entries(t.offsetTable)) do
            local mq, w = kv.key, kv.value
            if type(mq) == "table" and type(w) == "table" then
                out.offsetTable[#out.offsetTable + 1] = {
                    mq = { topic = mq.topic, brokerName = mq.brokerName, queueId = mq.queueId },
                    brokerOffset = w.brokerOffset or 0, consumerOffset = w.consumerOffset or 0,
                    lastTimestamp = w.lastTimestamp or 0,
                }
            end
        end
        out.consumeTps = out.consumeTps + (tonumber(t.consumeTps) or 0)
    end
    table.sort(out.offsetTable, function(a, b) return M.mq_less(a.mq, b.mq) end)
    if topic and #out.offsetTable == 0 then
        error(remote.failed(nil, "Not found the consumer group consume stats, because return offset table is "
            .. "empty, maybe the consumer not consume any message"), 0)
    end
    return out
end

--- examineConsumerConnectionInfo(group [, addr]): GET_CONSUMER_CONNECTION_LIST
--- at addr, else at the first master of %RETRY%group's route; the
--- ConsumerConnection body and the address that answered.
function M.consumer_connection(ctx, group, addr)
    local cmd = { code = req.GET_CONSUMER_CONNECTION_LIST, ext = { consumerGroup = group } }
    if addr then
        return M.json(ctx, addr, cmd), addr
    end
    local masters = M.route_masters(ctx, "%RETRY%" .. group)
    if #masters == 0 then
        error(remote.failed(nil, ("no master serves %%RETRY%%%s"):format(group)), 0)
    end
    return M.json(ctx, masters[1].addr, cmd), masters[1].addr
end

--- getConsumerRunningInfo: GET_CONSUMER_RUNNING_INFO (the broker relays it
--- to the client's connection) at the first broker of %RETRY%group's
--- route, with three times the timeout as DefaultMQAdminExtImpl; the
--- ConsumerRunningInfo body.
function M.running_info(ctx, group, client_id, jstack)
    for _, bd in ipairs(M.route_brokers(ctx, "%RETRY%" .. group)) do
        local addr = M.select_addr(bd)
        if addr then
            return M.json_slow(ctx, addr, { code = req.GET_CONSUMER_RUNNING_INFO,
                                            ext = { consumerGroup = group, clientId = client_id,
                                                    jstackEnable = jstack and true or false } }, ctx.timeout * 3)
        end
    end
    error(remote.failed(nil, ("no broker serves %%RETRY%%%s"):format(group)), 0)
end

--- A timestamp option: milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS in
--- local time (UtilAll.YYYY_MM_DD_HH_MM_SS_SSS); a usage error else.
function M.parse_time(s, name)
    local n = math.tointeger(tonumber(s))
    if n then
        return n
    end
    local y, mo, d, h, mi, sec, ms = tostring(s):match("^(%d%d%d%d)%-(%d%d)%-(%d%d)#(%d%d):(%d%d):(%d%d):(%d%d%d)$")
    local t = y and os.time({ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(h),
                              min = tonumber(mi), sec = tonumber(sec) })
    if not t or tonumber(mo) > 12 or tonumber(d) > 31 or tonumber(h) > 23 or tonumber(mi) > 59 or tonumber(sec) > 60 then
        error(remote.usage(("--%s %q: give milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"):format(name, tostring(s))), 0)
    end
    return t * 1000 + tonumber(ms)
end

--- A connectionSet (ConsumerConnection, ProducerConnection) as plain
--- rows sorted by client id, each with its version's name.
function M.connections(set)
    local out = {}
    for _, c in ipairs(set or {}) do
        out[#out + 1] = { clientId = c.clientId, clientAddr = c.clientAddr, language = c.language,
                          version = c.version, versionDesc = M.version_desc(c.version) }
    end
    table.sort(out, function(a, b) return tostring(a.clientId) < tostring(b.clientId) end)
    return out
end

--- "yyyy-MM-dd HH:mm:ss" (UtilAll.YYYY_MM_DD_HH_MM_SS), local time.
function M.date(ms)
    ms = tonumber(ms) or 0
    return os.date("%Y-%m-%d %H:%M:%S", ms // 1000)
end

--- "yyyy-MM-dd HH:mm:ss,SSS" (UtilAll.timeMillisToHumanString2).
function M.date_ms(ms)
    ms = math.tointeger(tonumber(ms) or 0) or 0
    return os.date("%Y-%m-%d %H:%M:%S", ms // 1000) .. (",%03d"):format(ms % 1000)
end

--- MQVersion.getVersionDesc: from V4_0_0_SNAPSHOT (212) on two ordinals
--- a release (SNAPSHOT, release), ten patches a minor, ten minors a
--- major; 3.x ordinals are irregular and shown as the number.
function M.version_desc(v)
    v = math.tointeger(tonumber(v))
    if v == nil then
        return "-"
    elseif v >= 612 then
        return "HIGHER_VERSION"
    elseif v < 212 then
        return tostring(v)
    end
    local k = v - 212
    local rel = k // 2
    return ("V%d_%d_%d%s"):format(4 + rel // 100, rel // 10 % 10, rel % 10, k % 2 == 0 and "_SNAPSHOT" or "")
end

return M
