-- The topic family: topicList, topicRoute, topicStatus, topicClusterList,
-- updateTopic, deleteTopic, updateTopicPerm, updateOrderConf, allocateMQ
-- (mqadmin's tools/command/topic, DefaultMQAdminExtImpl and
-- MQClientAPIImpl of 4.9.8 for the requests).
--
--   topic.list(ctx, {clusterModel=}) -> {topics = {...}} or {rows = {{cluster=, topic=, group=}}}
--   topic.route(ctx, {topic=}) -> TopicRouteData (decoded)
--   topic.status(ctx, {topic=}) -> {{brokerName=, queueId=, minOffset=, maxOffset=, lastUpdateTimestamp=}}
--   topic.clusters(ctx, {topic=}) -> {"DefaultCluster", ...}
--   topic.update(ctx, {topic=, brokerAddr= | clusterName=, readQueueNums=, ...}) -> {brokers=, topicConfig=}
--   topic.delete(ctx, {topic=, clusterName=}) -> {brokers=, namesrvs=}
--   topic.update_perm(ctx, {topic=, perm=, brokerAddr= | clusterName=}) -> {updated = {{addr=, from=, to=}}}
--   topic.order_conf(ctx, {topic=, method=get|put|delete, orderConf=}) -> {topic=, orderConf=}
--   topic.allocate(ctx, {topic=, ipList="a,b"}) -> {result = {ip = {queues}}}
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")
local route_lib = require("rmq.client.route")
local allocate = require("rmq.policy.allocate")

local M = {}

M.NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"   -- NamesrvUtil
local RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"

local function array(t)
    return setmetatable(t, fastjson.array_mt)
end

local function usage(msg)
    error(remote.usage(msg), 0)
end

local function int_opt(o, key, default, min, max)
    local v = o[key]
    if v == nil then
        return default
    end
    local n = math.tointeger(tonumber(v))
    if n == nil or (min and n < min) or (max and n > max) then
        usage(("--%s must be an integer%s, not '%s'"):format(key,
            min and (" from %d to %d"):format(min, max) or "", tostring(v)))
    end
    return n
end

local function bool_opt(o, key)
    -- Boolean.parseBoolean: "true" in any case is true, anything else false.
    return o[key] ~= nil and tostring(o[key]):lower() == "true"
end

--- The cluster a topic's first broker belongs to (findTopicBelongToWhichCluster).
local function cluster_of(info, route)
    local bd = route.brokerDatas and route.brokerDatas[1]
    if not bd then
        return nil
    end
    for _, cl in ipairs(remote.sorted_keys(info.clusterAddrTable)) do
        for _, bn in ipairs(info.clusterAddrTable[cl]) do
            if bn == bd.brokerName then
                return cl
            end
        end
    end
    return nil
end

--- The address of a broker data mqadmin would ask (BrokerData.selectBrokerAddr:
--- the master, else any).
local function select_addr(bd)
    local addrs = bd.brokerAddrs or {}
    if addrs["0"] then
        return addrs["0"]
    end
    local ids = remote.sorted_keys(addrs)
    return ids[1] and addrs[ids[1]]
end
M.select_addr = select_addr

function M.all_topics(ctx)
    local r, addr = remote.ns(ctx, { code = codes.request.GET_ALL_TOPIC_LIST_FROM_NAMESERVER })
    local t = remote.json(r.body or '{"topicList":[]}', addr)
    local list = {}
    for _, name in ipairs(t.topicList or {}) do
        list[#list + 1] = name
    end
    table.sort(list)
    return list
end

--- The groups consuming a topic, from its brokers (QUERY_TOPIC_CONSUME_BY_WHO).
function M.consumed_by(ctx, topic, route)
    route = route or remote.route(ctx, topic)
    local seen, groups = {}, {}
    for _, bd in ipairs(route.brokerDatas or {}) do
        local addr = select_addr(bd)
        if addr then
            local r = remote.ok(ctx, addr, { code = codes.request.QUERY_TOPIC_CONSUME_BY_WHO, ext = { topic = topic } })
            for _, g in ipairs(remote.json(r.body or "{}", addr).groupList or {}) do
                if not seen[g] then
                    seen[g] = true
                    groups[#groups + 1] = g
                end
            end
        end
    end
    table.sort(groups)
    return groups
end

function M.list(ctx, o)
    local topics = M.all_topics(ctx)
    if not o.clusterModel then
        return { topics = array(topics) }
    end
    local info = remote.cluster_info(ctx)
    local rows = {}
    for _, topic in ipairs(topics) do
        if topic:sub(1, #RETRY_PREFIX) ~= RETRY_PREFIX and topic:sub(1, #DLQ_PREFIX) ~= DLQ_PREFIX then
            -- mqadmin swallows a failure here and prints the topic with no
            -- cluster or group.
            local cluster, groups = "", {}
            local ok, route = pcall(remote.route, ctx, topic)
            if ok then
                cluster = cluster_of(info, route) or ""
                local gok, g = pcall(M.consumed_by, ctx, topic, route)
                groups = gok and g or {}
            end
            if #groups == 0 then
                groups = { "" }
            end
            for _, g in ipairs(groups) do
                rows[#rows + 1] = { cluster = cluster, topic = topic, group = g }
            end
        end
    end
    return { rows = array(rows) }
end

local function format_list(res)
    if res.topics then
        return table.concat(res.topics, "\n")
    end
    local rows = {}
    for _, r in ipairs(res.rows) do
        rows[#rows + 1] = { r.cluster, r.topic, r.group }
    end
    return require("rmq.admin").table({ "#Cluster Name", "#Topic", "#Consumer Group" }, rows)
end

function M.route(ctx, o)
    return remote.route(ctx, o.topic)
end

-- TopicRouteData.toJson(true): fastjson's PrettyFormat (tabs, fields sorted).
local function route_json(r)
    local bds = {}
    for i, bd in ipairs(r.brokerDatas or {}) do
        bds[i] = { brokerAddrs = bd.brokerAddrs or {}, brokerName = bd.brokerName, cluster = bd.cluster }
    end
    local qds = {}
    for i, qd in ipairs(r.queueDatas or {}) do
        qds[i] = { brokerName = qd.brokerName, perm = qd.perm, readQueueNums = qd.readQueueNums,
                   topicSysFlag = qd.topicSysFlag or 0, writeQueueNums = qd.writeQueueNums }
    end
    return require("rmq.admin").pretty_json({ brokerDatas = array(bds), filterServerTable = r.filterServerTable or {},
                                              queueDatas = array(qds) })
end

local function format_route(r, o)
    if not o.list then
        return route_json(r)
    end
    local admin = require("rmq.admin")
    local qd_of = {}
    for _, qd in ipairs(r.queueDatas or {}) do
        qd_of[qd.brokerName] = qd
    end
    local bds = {}
    for i, bd in ipairs(r.brokerDatas or {}) do
        bds[i] = bd
    end
    table.sort(bds, function(a, b) return a.brokerName < b.brokerName end)
    local rows, nread, nwrite, nbrokers = {}, 0, 0, 0
    for _, bd in ipairs(bds) do
        local qd = qd_of[bd.brokerName] or {}
        local addrs = {}
        for _, id in ipairs(remote.sorted_keys(bd.brokerAddrs)) do
            addrs[#addrs + 1] = id .. "=" .. bd.brokerAddrs[id]
        end
        nread = nread + (qd.readQueueNums or 0)
        nwrite = nwrite + (qd.writeQueueNums or 0)
        rows[#rows + 1] = { bd.cluster or "", bd.brokerName, "{" .. table.concat(addrs, ", ") .. "}",
                            qd.readQueueNums or "", qd.writeQueueNums or "", qd.perm or "" }
    end
    for _ in pairs(qd_of) do
        nbrokers = nbrokers + 1
    end
    rows[#rows + 1] = { "Total:", nbrokers, "", nread, nwrite, "" }
    return admin.table({ "#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm" }, rows)
end

--- topicStatus: min/max offset and last update per queue
--- (GET_TOPIC_STATS_INFO to every broker of the route).
function M.status(ctx, o)
    local route = remote.route(ctx, o.topic)
    local rows = {}
    for _, bd in ipairs(route.brokerDatas or {}) do
        local addr = select_addr(bd)
        if addr then
            local r = remote.ok(ctx, addr, { code = codes.request.GET_TOPIC_STATS_INFO, ext = { topic = o.topic } })
            local t = remote.decode_fastjson(r.body or "{}", addr)
            for _, e in ipairs(remote.entries(type(t) == "table" and t.offsetTable or {})) do
                local mq, off = e.key, e.value
                if type(mq) == "table" and type(off) == "table" then
                    rows[#rows + 1] = { brokerName = mq.brokerName, queueId = mq.queueId, topic = mq.topic,
                                        minOffset = off.minOffset, maxOffset = off.maxOffset,
                                        lastUpdateTimestamp = off.lastUpdateTimestamp }
                end
            end
        end
    end
    if #rows == 0 then
        error(remote.failed(nil, "Not found the topic stats info"), 0)
    end
    -- MessageQueue.compareTo: topic, then broker name, then queue id.
    table.sort(rows, function(a, b)
        if a.topic ~= b.topic then
            return tostring(a.topic) < tostring(b.topic)
        end
        if a.brokerName ~= b.brokerName then
            return tostring(a.brokerName) < tostring(b.brokerName)
        end
        return (a.queueId or 0) < (b.queueId or 0)
    end)
    return array(rows)
end

-- UtilAll.timeMillisToHumanString2: yyyy-MM-dd HH:mm:ss,SSS (local time).
local function human(ms)
    if not ms or ms <= 0 then
        return ""
    end
    return os.date("%Y-%m-%d %H:%M:%S", ms // 1000) .. (",%03d"):format(ms % 1000)
end
M.human_time = human

local function format_status(rows)
    local out = {}
    for _, r in ipairs(rows) do
        out[#out + 1] = { r.brokerName, r.queueId, r.minOffset, r.maxOffset, human(r.lastUpdateTimestamp) }
    end
    return require("rmq.admin").table({ "#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated" }, out)
end

--- topicClusterList: the clusters the topic's first broker is in.
function M.clusters(ctx, o)
    local info = remote.cluster_info(ctx)
    local route = remote.route(ctx, o.topic)
    local cl = cluster_of(info, route)
    return array({ cl })
end

local PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1

local function check_perm(p)
    -- PermName: only the read, write and inherit bits mean something.
    if p < 0 or p > (PERM_READ | PERM_WRITE | PERM_INHERIT) then
        usage(("--perm must be one of 2 (W), 4 (R), 6 (RW), not %d"):format(p))
    end
end

local function create_topic(ctx, addr, tc)
    remote.ok(ctx, addr, { code = codes.request.UPDATE_AND_CREATE_TOPIC, ext = {
        topic = tc.topicName, defaultTopic = "TBW102", readQueueNums = tc.readQueueNums,
        writeQueueNums = tc.writeQueueNums, perm = tc.perm, topicFilterType = tc.topicFilterType,
        topicSysFlag = tc.topicSysFlag, order = tostring(tc.order), attributes = tc.attributes } })
end

--- The broker name at a master address (CommandUtil.fetchBrokerNameByAddr).
local function broker_name_of(info, addr)
    for name, bd in pairs(info.brokerAddrTable) do
        for _, a in pairs(bd.brokerAddrs or {}) do
            if a == addr then
                return name
            end
        end
    end
    error(remote.failed(addr, "Make sure the specified broker addr exists or the nameserver which connected is correct."), 0)
end

local function put_kv(ctx, namespace, key, value)
    return require("rmq.admin.namesrv").put_kv(ctx, { namespace = namespace, key = key, value = value })
end

function M.update(ctx, o)
    local tc = {
        topicName = o.topic,
        readQueueNums = int_opt(o, "readQueueNums", 8, 1, 65535),
        writeQueueNums = int_opt(o, "writeQueueNums", 8, 1, 65535),
        perm = int_opt(o, "perm", PERM_READ | PERM_WRITE),
        topicFilterType = "SINGLE_TAG",
        order = bool_opt(o, "order"),
        -- 5.x -a: the modification as typed ("+message.type=FIFO,-k"); the
        -- broker checks it (5.x's rules, rmq.broker.topics).
        attributes = o.attributes and o.attributes:match("^%s*(.-)%s*$") or nil,
    }
    check_perm(tc.perm)
    -- TopicSysFlag.buildSysFlag(unit, hasUnitSub)
    tc.topicSysFlag = (bool_opt(o, "unit") and 1 or 0) | (bool_opt(o, "hasUnitSub") and 2 or 0)
    local res = { topicConfig = tc, brokers = array({}) }
    if o.brokerAddr then
        create_topic(ctx, o.brokerAddr, tc)
        res.brokers[1] = o.brokerAddr
        if tc.order then
            local name = broker_name_of(remote.cluster_info(ctx), o.brokerAddr)
            -- createOrUpdateOrderConf(isCluster = false): this broker's
            -- entry replaces its old one, the others stay.
            local ok, old = pcall(M.order_conf, ctx, { topic = o.topic, method = "get" })
            local entries, order = {}, {}
            for item in tostring(ok and old.orderConf or ""):gmatch("[^;]+") do
                local bn = item:match("^([^:]+)")
                if bn and not entries[bn] then
                    order[#order + 1] = bn
                end
                entries[bn or item] = item
            end
            if not entries[name] then
                order[#order + 1] = name
            end
            entries[name] = name .. ":" .. tc.writeQueueNums
            local parts = {}
            for _, bn in ipairs(order) do
                parts[#parts + 1] = entries[bn]
            end
            res.orderConf = table.concat(parts, ";")
            put_kv(ctx, M.NAMESPACE_ORDER_TOPIC_CONFIG, o.topic, res.orderConf)
        end
        return res
    end
    local info = remote.cluster_info(ctx)
    for _, addr in ipairs(remote.masters(ctx, o.clusterName, info)) do
        create_topic(ctx, addr, tc)
        res.brokers[#res.brokers + 1] = addr
    end
    if tc.order then
        local parts = {}
        for _, bn in ipairs(remote.broker_names(ctx, o.clusterName, info)) do
            parts[#parts + 1] = bn .. ":" .. tc.writeQueueNums
        end
        res.orderConf = table.concat(parts, ";")
        put_kv(ctx, M.NAMESPACE_ORDER_TOPIC_CONFIG, o.topic, res.orderConf)
    end
    return res
end

-- TopicConfig.toString, as mqadmin prints it after updateTopic.
-- With -a, 5.x's: ", attributes={+message.type=FIFO}" at the end.
local function topic_config_text(tc)
    local attrs = ""
    if tc.attributes then
        local kv = {}
        for item in tc.attributes:gmatch("[^,]+") do
            kv[#kv + 1] = item:find("=", 1, true) and item or (item .. "=")
        end
        attrs = ", attributes={" .. table.concat(kv, ", ") .. "}"
    end
    return ("TopicConfig [topicName=%s, readQueueNums=%d, writeQueueNums=%d, perm=%s, topicFilterType=%s, "
        .. "topicSysFlag=%d, order=%s%s]"):format(tc.topicName, tc.readQueueNums, tc.writeQueueNums,
        M.perm_text(tc.perm), tc.topicFilterType, tc.topicSysFlag, tostring(tc.order), attrs)
end

--- PermName.perm2String: "RW-" style.
function M.perm_text(p)
    return ((p & PERM_READ) ~= 0 and "R" or "-") .. ((p & PERM_WRITE) ~= 0 and "W" or "-")
        .. ((p & PERM_INHERIT) ~= 0 and "X" or "-")
end

local function format_update(res)
    local out = {}
    for _, addr in ipairs(res.brokers) do
        out[#out + 1] = ("create topic to %s success."):format(addr)
    end
    if res.orderConf then
        out[#out + 1] = ("set %s orderConf. isOrder=true, orderConf=[%s]"):format(
            #res.brokers == 1 and "broker" or "cluster", res.orderConf)
    end
    out[#out + 1] = topic_config_text(res.topicConfig)
    return table.concat(out, "\n")
end

--- deleteTopic: from the cluster's masters, then from every NameServer.
function M.delete(ctx, o)
    local masters = remote.masters(ctx, o.clusterName)
    for _, addr in ipairs(masters) do
        remote.ok(ctx, addr, { code = codes.request.DELETE_TOPIC_IN_BROKER, ext = { topic = o.topic } })
    end
    for _, ns in ipairs(ctx.namesrv) do
        remote.ok(ctx, ns, { code = codes.request.DELETE_TOPIC_IN_NAMESRV,
                             ext = { topic = o.topic, clusterName = o.clusterName } })
    end
    return { topic = o.topic, clusterName = o.clusterName, brokers = array(masters),
             namesrvs = array({ table.unpack(ctx.namesrv) }) }
end

local function format_delete(res)
    return ("delete topic [%s] from cluster [%s] success.\ndelete topic [%s] from NameServer success.")
        :format(res.topic, res.clusterName, res.topic)
end

--- updateTopicPerm: the route's queue counts with a new perm, to one
--- master (-b) or every master of a cluster (-c).
function M.update_perm(ctx, o)
    local perm = int_opt(o, "perm", nil)
    check_perm(perm)
    local route = remote.route(ctx, o.topic)
    local qd = (route.queueDatas or {})[1]
    if qd == nil then
        error(remote.failed(nil, "topic " .. o.topic .. " has no queue data in its route"), 0)
    end
    local tc = { topicName = o.topic, readQueueNums = qd.readQueueNums, writeQueueNums = qd.writeQueueNums,
                 topicSysFlag = qd.topicSysFlag or 0, perm = perm, topicFilterType = "SINGLE_TAG", order = false }
    local res = { topicConfig = tc, updated = array({}) }
    if o.brokerAddr then
        local name
        for _, bd in ipairs(route.brokerDatas or {}) do
            if (bd.brokerAddrs or {})["0"] == o.brokerAddr then
                name = bd.brokerName
            end
        end
        if name == nil then
            error(remote.failed(o.brokerAddr, "updateTopicPerm error broker not exit or broker is not master!"), 0)
        end
        local old = 0
        for _, q in ipairs(route.queueDatas) do
            if q.brokerName == name then
                old = q.perm
            end
        end
        if old == perm then
            res.unchanged = true
            return res
        end
        create_topic(ctx, o.brokerAddr, tc)
        res.updated[1] = { addr = o.brokerAddr, from = old, to = perm }
        return res
    end
    for _, addr in ipairs(remote.masters(ctx, o.clusterName)) do
        create_topic(ctx, addr, tc)
        res.updated[#res.updated + 1] = { addr = addr, from = qd.perm, to = perm }
    end
    return res
end

local function format_perm(res)
    if res.unchanged then
        return "new perm equals to the old one!"
    end
    local out = {}
    for _, u in ipairs(res.updated) do
        out[#out + 1] = ("update topic perm from %s to %s in %s success."):format(u.from, u.to, u.addr)
    end
    return table.concat(out, "\n")
end

--- updateOrderConf: the topic's ORDER_TOPIC_CONFIG KV at the NameServers.
function M.order_conf(ctx, o)
    local ns = require("rmq.admin.namesrv")
    local m = o.method
    if m == "get" then
        local v = ns.get_kv(ctx, { namespace = M.NAMESPACE_ORDER_TOPIC_CONFIG, key = o.topic })
        return { method = m, topic = o.topic, orderConf = v.value }
    elseif m == "put" then
        if o.orderConf == nil or o.orderConf:match("^%s*$") then
            usage("please set orderConf with option -v.")
        end
        for item in o.orderConf:gmatch("[^;]+") do
            if not item:match("^[^:]+:%d+$") then
                usage(("orderConf entry '%s' is not brokerName:num"):format(item))
            end
        end
        ns.put_kv(ctx, { namespace = M.NAMESPACE_ORDER_TOPIC_CONFIG, key = o.topic, value = o.orderConf })
        return { method = m, topic = o.topic, orderConf = o.orderConf }
    elseif m == "delete" then
        ns.delete_kv(ctx, { namespace = M.NAMESPACE_ORDER_TOPIC_CONFIG, key = o.topic })
        return { method = m, topic = o.topic }
    end
    usage("-m method must be get, put or delete")
end

local function format_order(res)
    if res.method == "get" then
        return ("get orderConf success. topic=[%s], orderConf=[%s]"):format(res.topic, tostring(res.orderConf))
    elseif res.method == "put" then
        return ("update orderConf success. topic=[%s], orderConf=[%s]"):format(res.topic, res.orderConf)
    end
    return ("delete orderConf success. topic=[%s]"):format(res.topic)
end

--- allocateMQ: how AllocateMessageQueueAveragely spreads the topic's
--- readable queues over the ips given (in that order).  Java takes the
--- queues in HashSet order; here they are sorted (broker, queue id), as a
--- consumer's rebalance sorts them.
function M.allocate(ctx, o)
    local route = remote.route(ctx, o.topic)
    local queues = route_lib.subscribe_queues(o.topic, route)
    local ips = {}
    for ip in o.ipList:gmatch("[^,]+") do
        ips[#ips + 1] = ip
    end
    if #ips == 0 then
        usage("-i ipList needs at least one ip")
    end
    local result = {}
    for _, ip in ipairs(ips) do
        local got = allocate.averagely({ queues = queues, consumers = ips, me = ip })
        local list = {}
        for i, q in ipairs(got) do
            list[i] = { brokerName = q.brokerName, queueId = q.queueId, topic = q.topic }
        end
        result[ip] = array(list)
    end
    return { result = result }
end

local function format_allocate(res)
    return fastjson.encode(res)
end

local TOPIC = { "t", "topic", arg = true, required = true, desc = "topic name" }

M.commands = {
    { name = "topicList", desc = "Fetch all topic list from name server",
      options = { { "c", "clusterModel", desc = "clusterModel" } },
      run = M.list, format = format_list },
    { name = "topicRoute", desc = "Examine topic route info",
      options = { TOPIC, { "l", "list", desc = "Use list format to print data" } },
      run = M.route, format = format_route },
    { name = "topicStatus", desc = "Examine topic Status info",
      options = { TOPIC }, run = M.status, format = format_status },
    { name = "topicClusterList", desc = "get cluster info for topic",
      options = { TOPIC }, run = M.clusters,
      format = function(list) return table.concat(list, "\n") end },
    { name = "updateTopic", desc = "Update or create topic",
      options = {
          { "b", "brokerAddr", arg = true, desc = "create topic to which broker" },
          { "c", "clusterName", arg = true, desc = "create topic to which cluster" },
          TOPIC,
          { "r", "readQueueNums", arg = true, desc = "set read queue nums" },
          { "w", "writeQueueNums", arg = true, desc = "set write queue nums" },
          { "p", "perm", arg = true, desc = "set topic's permission(2|4|6), intro[2:W 4:R; 6:RW]" },
          { "o", "order", arg = true, desc = "set topic's order(true|false)" },
          { "u", "unit", arg = true, desc = "is unit topic (true|false)" },
          { "s", "hasUnitSub", arg = true, desc = "has unit sub (true|false)" },
          { "a", "attributes", arg = true, desc = "attribute(+a=b,+c=d,-e)" },
      },
      check = remote.need_broker_or("clusterName"),
      run = M.update, format = format_update },
    { name = "deleteTopic", desc = "Delete topic from broker and NameServer.",
      options = { TOPIC, { "c", "clusterName", arg = true, required = true, desc = "delete topic from which cluster" } },
      run = M.delete, format = format_delete },
    { name = "updateTopicPerm", desc = "Update topic perm",
      options = {
          { "b", "brokerAddr", arg = true, desc = "create topic to which broker" },
          { "c", "clusterName", arg = true, desc = "create topic to which cluster" },
          TOPIC,
          { "p", "perm", arg = true, required = true, desc = "set topic's permission(2|4|6), intro[2:W; 4:R; 6:RW]" },
      },
      check = remote.need_broker_or("clusterName"),
      run = M.update_perm, format = format_perm },
    { name = "updateOrderConf", desc = "Create or update or delete order conf",
      options = {
          TOPIC,
          { "v", "orderConf", arg = true, desc = "set order conf [eg. brokerName1:num;brokerName2:num]" },
          { "m", "method", arg = true, required = true, desc = "option type [eg. put|get|delete" },
      },
      run = M.order_conf, format = format_order },
    { name = "allocateMQ", desc = "Allocate MQ",
      options = { TOPIC, { "i", "ipList", arg = true, required = true, desc = "ipList" } },
      run = M.allocate, format = format_allocate },
}

return M
