-- The broker family: getBrokerConfig, updateBrokerConfig, cleanExpiredCQ,
-- cleanUnusedTopic, deleteExpiredCommitLog, statsAll, exportMetadata,
-- exportConfigs, decodeMessageId (mqadmin's tools/command/broker, stats,
-- export and message/DecodeMessageIdCommond of 4.9.8).
--
--   broker.config(ctx, {brokerAddr= | clusterName=}) -> { {addr=, role=, master=, config={k=v}}, ... }
--   broker.update_config(ctx, {key=, value=, brokerAddr= | clusterName=}) -> { {addr=} | {addr=, error=} }
--   broker.clean_expired_cq(ctx, o), broker.clean_unused_topic(ctx, o),
--   broker.delete_expired_commitlog(ctx, o) -> {result = bool, brokers = {...}}
--   broker.stats_all(ctx, {activeTopic=, topic=}) -> {rows = {...}, skipped = {...}}
--   broker.export_metadata(ctx, o), broker.export_configs(ctx, o) -> {path=, content=}
--   broker.decode_message_id(id [, now_ms]) -> {ip=, date=, ms=}
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")

local M = {}

local function array(t)
    return setmetatable(t or {}, fastjson.array_mt)
end

local function usage(msg)
    error(remote.usage(msg), 0)
end

-- {{{ config

function M.get_config(ctx, addr)
    local r = remote.ok(ctx, addr, { code = codes.request.GET_BROKER_CONFIG })
    return remote.properties(r.body)
end

--- Masters of a cluster and their slaves (CommandUtil.fetchMasterAndSlaveDistinguish).
local function masters_and_slaves(ctx, cluster)
    local info = remote.cluster_info(ctx)
    local out = {}
    for _, bn in ipairs(remote.broker_names(ctx, cluster, info)) do
        local addrs = (info.brokerAddrTable[bn] or {}).brokerAddrs or {}
        local master = addrs["0"]
        if master then
            local slaves = {}
            for _, id in ipairs(remote.sorted_keys(addrs)) do
                if id ~= "0" then
                    slaves[#slaves + 1] = addrs[id]
                end
            end
            out[#out + 1] = { master = master, slaves = slaves }
        end
    end
    return out
end

function M.config(ctx, o)
    if o.brokerAddr then
        return array({ { addr = o.brokerAddr, config = M.get_config(ctx, o.brokerAddr) } })
    end
    local out = array()
    for _, g in ipairs(masters_and_slaves(ctx, o.clusterName)) do
        out[#out + 1] = { addr = g.master, role = "master", config = M.get_config(ctx, g.master) }
        for _, s in ipairs(g.slaves) do
            out[#out + 1] = { addr = s, role = "slave", master = g.master, config = M.get_config(ctx, s) }
        end
    end
    return out
end

local function format_config(list)
    local out = {}
    for _, e in ipairs(list) do
        if e.role == "master" then
            out[#out + 1] = ("============Master: %s============"):format(e.addr)
        elseif e.role == "slave" then
            out[#out + 1] = ("============My Master: %s=====Slave: %s============"):format(e.master, e.addr)
        else
            out[#out + 1] = ("============%s============"):format(e.addr)
        end
        for _, k in ipairs(remote.sorted_keys(e.config)) do
            out[#out + 1] = ("%-50s=  %s"):format(k, e.config[k])
        end
        out[#out + 1] = ""
    end
    return table.concat(out, "\n")
end

function M.update_config(ctx, o)
    local body = require("rmq.admin.namesrv").properties_text({ [o.key] = o.value })
    local cmd = { code = codes.request.UPDATE_BROKER_CONFIG, body = body }
    if o.brokerAddr then
        remote.ok(ctx, o.brokerAddr, cmd)
        return array({ { addr = o.brokerAddr } })
    end
    -- A cluster: every master is asked; one refusing does not stop the
    -- others (mqadmin prints the exception and goes on).
    local out, last_err = array(), nil
    local masters = remote.masters(ctx, o.clusterName)
    for _, addr in ipairs(masters) do
        local ok, err = pcall(remote.ok, ctx, addr, cmd)
        if ok then
            out[#out + 1] = { addr = addr }
        elseif remote.is_error(err) then
            out[#out + 1] = { addr = addr, error = tostring(err) }
            last_err = err
        else
            error(err, 0)
        end
    end
    -- Every master refused: that is the command's failure (exit 1 or 3).
    local failed = 0
    for _, e in ipairs(out) do
        failed = failed + (e.error and 1 or 0)
    end
    if last_err and failed == #out then
        error(last_err, 0)
    end
    out.exit = last_err and 1 or nil   -- some refused: the lines say which
    return out
end

local function format_update(list)
    local out = {}
    for _, e in ipairs(list) do
        out[#out + 1] = e.error and ("update broker config failed, %s"):format(e.error)
            or ("update broker config success, %s"):format(e.addr)
    end
    return table.concat(out, "\n")
end

-- }}}
-- {{{ clean / delete

-- A request to one broker (-b), or to every broker, masters and slaves, of
-- one cluster (-c) or of every cluster (neither), as DefaultMQAdminExtImpl's
-- loops do.
local function to_brokers(ctx, o, code)
    local addrs
    if o.brokerAddr then
        addrs = { o.brokerAddr }
    else
        local info = remote.cluster_info(ctx)
        addrs = {}
        local clusters = o.cluster and { o.cluster } or remote.sorted_keys(info.clusterAddrTable)
        for _, cl in ipairs(clusters) do
            for _, a in ipairs(remote.all_addrs(ctx, cl, info)) do
                addrs[#addrs + 1] = a
            end
        end
    end
    -- SUCCESS is true (MQClientAPIImpl.cleanExpiredConsumeQueue and
    -- friends); a refusal raises.  No broker at all: false.
    for _, addr in ipairs(addrs) do
        remote.ok(ctx, addr, { code = code })
    end
    return { result = #addrs > 0, brokers = array(addrs) }
end

function M.clean_expired_cq(ctx, o)
    return to_brokers(ctx, o, codes.request.CLEAN_EXPIRED_CONSUMEQUEUE)
end

function M.clean_unused_topic(ctx, o)
    return to_brokers(ctx, o, codes.request.CLEAN_UNUSED_TOPIC)
end

function M.delete_expired_commitlog(ctx, o)
    return to_brokers(ctx, o, codes.request.DELETE_EXPIRED_COMMITLOG)
end

local function format_result(res)
    return res.result and "success" or "false"
end

-- }}}
-- {{{ statsAll

--- VIEW_BROKER_STATS_DATA: a broker's BrokerStatsData for a stats item.
function M.stats_data(ctx, addr, name, key)
    local r = remote.ok(ctx, addr, { code = codes.request.VIEW_BROKER_STATS_DATA,
                                     ext = { statsName = name, statsKey = key } })
    return remote.json(r.body, addr)
end

-- StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's,
-- else the minute's.
local function sum24(bsd)
    for _, k in ipairs({ "statsDay", "statsHour", "statsMinute" }) do
        local s = tonumber((bsd[k] or {}).sum) or 0
        if s ~= 0 then
            return s
        end
    end
    return 0
end

--- ConsumeStats of a group for one topic, summed over the brokers of the
--- group's retry topic (DefaultMQAdminExtImpl.examineConsumeStats).
function M.consume_stats(ctx, group, topic)
    local route = remote.route(ctx, "%RETRY%" .. group)
    local entries, tps = {}, 0
    for _, bd in ipairs(route.brokerDatas or {}) do
        local addr = require("rmq.admin.topic").select_addr(bd)
        if addr then
            local r = remote.ok(ctx, addr, { code = codes.request.GET_CONSUME_STATS,
                                             ext = { consumerGroup = group, topic = topic } })
            local cs = remote.decode_fastjson(r.body or "{}", addr)
            tps = tps + (tonumber(cs.consumeTps) or 0)
            for _, e in ipairs(remote.entries(cs.offsetTable)) do
                entries[#entries + 1] = e
            end
        end
    end
    local diff = 0
    for _, e in ipairs(entries) do
        diff = diff + (tonumber(e.value.brokerOffset) or 0) - (tonumber(e.value.consumerOffset) or 0)
    end
    return { consumeTps = tps, diff = diff, queues = #entries }
end

function M.stats_all(ctx, o)
    local topic_lib = require("rmq.admin.topic")
    local rows, skipped = array(), array()
    for _, topic in ipairs(topic_lib.all_topics(ctx)) do
        if topic:sub(1, 7) ~= "%RETRY%" and topic:sub(1, 5) ~= "%DLQ%"
           and (o.topic == nil or o.topic == "" or o.topic == topic) then
            local ok, err = pcall(function()
                local route = remote.route(ctx, topic)
                local groups = topic_lib.consumed_by(ctx, topic, route)
                local in_tps, in_today = 0, 0
                local masters = {}
                for _, bd in ipairs(route.brokerDatas or {}) do
                    masters[#masters + 1] = (bd.brokerAddrs or {})["0"]
                end
                for _, addr in ipairs(masters) do
                    local sok, bsd = pcall(M.stats_data, ctx, addr, "TOPIC_PUT_NUMS", topic)
                    if sok then
                        in_tps = in_tps + (tonumber((bsd.statsMinute or {}).tps) or 0)
                        in_today = in_today + sum24(bsd)
                    end
                end
                if #groups == 0 then
                    if not o.activeTopic or in_today > 0 then
                        rows[#rows + 1] = { topic = topic, group = "", accumulation = 0, inTPS = in_tps,
                                            inMsg24Hour = in_today, noConsumer = true }
                    end
                    return
                end
                for _, g in ipairs(groups) do
                    local out_tps, out_today = 0, 0
                    for _, addr in ipairs(masters) do
                        local sok, bsd = pcall(M.stats_data, ctx, addr, "GROUP_GET_NUMS", topic .. "@" .. g)
                        if sok then
                            out_tps = out_tps + (tonumber((bsd.statsMinute or {}).tps) or 0)
                            out_today = out_today + sum24(bsd)
                        end
                    end
                    local cok, cs = pcall(M.consume_stats, ctx, g, topic)
                    local acc = cok and math.max(0, cs.diff) or 0
                    if not o.activeTopic or in_today > 0 or out_today > 0 then
                        rows[#rows + 1] = { topic = topic, group = g, accumulation = acc, inTPS = in_tps,
                                            outTPS = out_tps, inMsg24Hour = in_today, outMsg24Hour = out_today }
                    end
                end
            end)
            if not ok then
                -- mqadmin skips such a topic silently; we say which and why.
                skipped[#skipped + 1] = { topic = topic, error = tostring(err) }
            end
        end
    end
    return { rows = rows, skipped = skipped }
end

local function format_stats(res)
    local out = {}
    for _, r in ipairs(res.rows) do
        if r.noConsumer then
            out[#out + 1] = { r.topic, "", 0, ("%.2f"):format(r.inTPS), "", r.inMsg24Hour, "NO_CONSUMER" }
        else
            out[#out + 1] = { r.topic, r.group, r.accumulation, ("%.2f"):format(r.inTPS),
                              ("%.2f"):format(r.outTPS), r.inMsg24Hour, r.outMsg24Hour }
        end
    end
    local text = require("rmq.admin").table({ "#Topic", "#Consumer Group", "#Accumulation", "#InTPS",
                                              "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour" }, out)
    for _, s in ipairs(res.skipped) do
        text = text .. ("\n(skipped %s: %s)"):format(s.topic, s.error)
    end
    return text
end

-- }}}
-- {{{ export

local DEFAULT_EXPORT_PATH = "/tmp/rocketmq/export"

local SYSTEM_GROUPS = {
    DEFAULT_CONSUMER = true, DEFAULT_PRODUCER = true, TOOLS_CONSUMER = true, FILTERSRV_CONSUMER = true,
    __MONITOR_CONSUMER = true, CLIENT_INNER_PRODUCER = true, SELF_TEST_P_GROUP = true,
    SELF_TEST_C_GROUP = true, CID_ONS_HTTP_PROXY = true, CID_ONSAPI_PERMISSION = true,
    CID_ONSAPI_OWNER = true, CID_ONSAPI_PULL = true, CID_RMQ_SYS_TRANS = true,
}

local function write_file(path, text)
    local dir = path:match("^(.*)/[^/]*$")
    if dir and dir ~= "" then
        local ok = os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
        if not ok then
            error(remote.failed(nil, "cannot create directory " .. dir), 0)
        end
    end
    local f, err = io.open(path, "w")
    if not f then
        error(remote.failed(nil, "cannot write " .. tostring(err)), 0)
    end
    f:write(text)
    f:close()
end

--- A broker's user topics (getUserTopicConfig): its topic table less the
--- system topics it lists (GET_SYSTEM_TOPIC_LIST_FROM_BROKER), and less
--- the retry and DLQ topics unless specialTopic.
function M.user_topics(ctx, addr, special)
    local r = remote.ok(ctx, addr, { code = codes.request.GET_ALL_TOPIC_CONFIG })
    local wrapper = remote.json(r.body, addr)
    local sr = remote.ok(ctx, addr, { code = codes.request.GET_SYSTEM_TOPIC_LIST_FROM_BROKER })
    local sys = {}
    for _, t in ipairs(remote.json(sr.body or '{"topicList":[]}', addr).topicList or {}) do
        sys[t] = true
    end
    local out = {}
    for name, tc in pairs(wrapper.topicConfigTable or {}) do
        if not sys[name] and (special or (name:sub(1, 7) ~= "%RETRY%" and name:sub(1, 5) ~= "%DLQ%")) then
            out[name] = tc
        end
    end
    return out, wrapper
end

function M.user_groups(ctx, addr)
    local r = remote.ok(ctx, addr, { code = codes.request.GET_ALL_SUBSCRIPTIONGROUP_CONFIG })
    local wrapper = remote.json(r.body, addr)
    local out = {}
    for name, g in pairs(wrapper.subscriptionGroupTable or {}) do
        if not SYSTEM_GROUPS[name] and name:sub(1, 12) ~= "CID_RMQ_SYS_" then
            out[name] = g
        end
    end
    return out, wrapper
end

function M.export_metadata(ctx, o)
    local dir = o.filePath or DEFAULT_EXPORT_PATH
    local special = o.specialTopic and true or false
    local content, path
    if o.brokerAddr then
        if o.topic then
            local topics, wrapper = M.user_topics(ctx, o.brokerAddr, special)
            content = { topicConfigTable = topics, dataVersion = wrapper.dataVersion }
            path = dir .. "/topic.json"
        elseif o.subscriptionGroup then
            local groups, wrapper = M.user_groups(ctx, o.brokerAddr)
            content = { subscriptionGroupTable = groups, dataVersion = wrapper.dataVersion }
            path = dir .. "/subscriptionGroup.json"
        else
            usage("with -b, one of -t (topics) or -g (subscription groups) is required")
        end
    elseif o.clusterName then
        local topics, groups = {}, {}
        for _, addr in ipairs(remote.masters(ctx, o.clusterName)) do
            -- Queue counts add up over the brokers, as mqadmin sums them.
            for name, tc in pairs(M.user_topics(ctx, addr, special)) do
                local old = topics[name]
                if old then
                    tc.writeQueueNums = (tc.writeQueueNums or 0) + (old.writeQueueNums or 0)
                    tc.readQueueNums = (tc.readQueueNums or 0) + (old.readQueueNums or 0)
                end
                topics[name] = tc
            end
            for name, g in pairs(M.user_groups(ctx, addr)) do
                local old = groups[name]
                if old then
                    g.retryQueueNums = (g.retryQueueNums or 0) + (old.retryQueueNums or 0)
                end
                groups[name] = g
            end
        end
        content = {}
        if o.topic then
            content.topicConfigTable = topics
            path = dir .. "/topic.json"
        elseif o.subscriptionGroup then
            content.subscriptionGroupTable = groups
            path = dir .. "/subscriptionGroup.json"
        else
            content.topicConfigTable = topics
            content.subscriptionGroupTable = groups
            path = dir .. "/metadata.json"
        end
        content.exportTime = core.now_ms()
    else
        usage("one of -b brokerAddr or -c clusterName is required")
    end
    write_file(path, require("rmq.admin").pretty_json(content))
    return { path = path, content = content }
end

-- The broker keys exportConfigs keeps (ExportConfigsCommand.needBrokerProprties).
local EXPORT_KEYS = { "brokerClusterName", "brokerId", "brokerName", "brokerRole", "fileReservedTime",
    "filterServerNums", "flushDiskType", "maxMessageSize", "messageDelayLevel", "msgTraceTopicName",
    "slaveReadEnable", "traceOn", "traceTopicEnable", "useTLS", "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup" }

function M.export_configs(ctx, o)
    local dir = o.filePath or DEFAULT_EXPORT_PATH
    local configs, nmaster, nslave = {}, 0, 0
    local missing = {}
    for _, g in ipairs(masters_and_slaves(ctx, o.clusterName)) do
        local props = M.get_config(ctx, g.master)
        nmaster = nmaster + 1
        nslave = nslave + #g.slaves
        local kept = {}
        for _, k in ipairs(EXPORT_KEYS) do
            if props[k] == nil then
                -- Java's Properties.setProperty(k, null) throws here.
                missing[#missing + 1] = g.master .. ":" .. k
            end
            kept[k] = props[k]
        end
        configs[props.brokerName or g.master] = kept
    end
    if #missing > 0 then
        error(remote.failed(nil, "broker config lacks keys mqadmin needs: " .. table.concat(missing, ", ")), 0)
    end
    local content = {
        brokerConfigs = configs,
        clusterScale = { namesrvSize = #ctx.namesrv, masterBrokerSize = nmaster, slaveBrokerSize = nslave },
    }
    local path = dir .. "/configs.json"
    write_file(path, require("rmq.admin").pretty_json(content))
    return { path = path, content = content }
end

local function format_export(res)
    return ("export %s success"):format(res.path)
end

-- }}}
-- {{{ decodeMessageId

--- The ip and the (nearly) born time in a client's unique message id
--- (MessageClientIDSetter): ip (4 or 16 bytes), pid (2), class loader
--- hash (4), ms since the start of the month (4), counter (2).
function M.decode_message_id(id, now_ms)
    if type(id) ~= "string" or not id:match("^%x+$") or (#id ~= 32 and #id ~= 56) then
        usage(("'%s' is not a unique message id (32 or 56 hex digits)"):format(tostring(id)))
    end
    local bytes = {}
    for i = 1, #id, 2 do
        bytes[#bytes + 1] = tonumber(id:sub(i, i + 1), 16)
    end
    local iplen = #bytes == 28 and 16 or 4
    local ip
    if iplen == 4 then
        ip = ("%d.%d.%d.%d"):format(bytes[1], bytes[2], bytes[3], bytes[4])
    else
        local groups = {}
        for i = 1, 16, 2 do
            groups[#groups + 1] = ("%x"):format(bytes[i] * 256 + bytes[i + 1])
        end
        ip = table.concat(groups, ":")
    end
    local o = iplen + 2 + 4
    local span = ((bytes[o + 1] << 24) | (bytes[o + 2] << 16) | (bytes[o + 3] << 8) | bytes[o + 4])
    now_ms = now_ms or core.now_ms()
    -- The start of this month, local time; the previous month's when that
    -- would put the time in the future.
    local now_t = os.date("*t", now_ms // 1000)
    local function month_start(year, month)
        return os.time({ year = year, month = month, day = 1, hour = 0, min = 0, sec = 0 }) * 1000
    end
    local start = month_start(now_t.year, now_t.month)
    if start + span >= now_ms then
        start = month_start(now_t.month == 1 and now_t.year - 1 or now_t.year, now_t.month == 1 and 12 or now_t.month - 1)
    end
    local ms = start + span
    return { ip = ip, ms = ms, date = os.date("%Y-%m-%d %H:%M:%S", ms // 1000) .. (",%03d"):format(ms % 1000) }
end

-- }}}

local CLUSTER_OPT = { "c", "cluster", arg = true, desc = "clustername" }
local BROKER_OPT = { "b", "brokerAddr", arg = true, desc = "Broker address" }

M.commands = {
    { name = "getBrokerConfig", desc = "Get broker config by cluster or special broker!",
      options = { { "b", "brokerAddr", arg = true, desc = "get which broker" },
                  { "c", "clusterName", arg = true, desc = "get which cluster" } },
      check = remote.need_broker_or("clusterName"), run = M.config, format = format_config },
    { name = "updateBrokerConfig", desc = "Update broker's config",
      options = { { "b", "brokerAddr", arg = true, desc = "update which broker" },
                  { "c", "clusterName", arg = true, desc = "update which cluster" },
                  { "k", "key", arg = true, required = true, desc = "config key" },
                  { "v", "value", arg = true, required = true, desc = "config value" } },
      check = remote.need_broker_or("clusterName"), run = M.update_config, format = format_update },
    { name = "cleanExpiredCQ", desc = "Clean expired ConsumeQueue on broker.",
      options = { BROKER_OPT, CLUSTER_OPT }, run = M.clean_expired_cq, format = format_result },
    { name = "cleanUnusedTopic", desc = "Clean unused topic on broker.",
      options = { BROKER_OPT, { "c", "cluster", arg = true, desc = "cluster name" } },
      run = M.clean_unused_topic, format = format_result },
    { name = "deleteExpiredCommitLog", desc = "Delete expired CommitLog files",
      options = { BROKER_OPT, CLUSTER_OPT }, run = M.delete_expired_commitlog, format = format_result },
    { name = "statsAll", desc = "Topic and Consumer tps stats",
      options = { { "a", "activeTopic", desc = "print active topic only" },
                  { "t", "topic", arg = true, desc = "print select topic only" } },
      run = M.stats_all, format = format_stats },
    { name = "exportMetadata", desc = "export metadata",
      options = { { "c", "clusterName", arg = true, desc = "choose a cluster to export" },
                  { "b", "brokerAddr", arg = true, desc = "choose a broker to export" },
                  { "f", "filePath", arg = true, desc = "export metadata.json path | default /tmp/rocketmq/export" },
                  { "t", "topic", desc = "only export topic metadata" },
                  { "g", "subscriptionGroup", desc = "only export subscriptionGroup metadata" },
                  { "s", "specialTopic", desc = "need retryTopic and dlqTopic" } },
      run = M.export_metadata, format = format_export },
    { name = "exportConfigs", desc = "export configs",
      options = { { "c", "clusterName", arg = true, required = true, desc = "choose a cluster to export" },
                  { "f", "filePath", arg = true, desc = "export configs.json path | default /tmp/rocketmq/export" } },
      run = M.export_configs, format = format_export },
    { name = "decodeMessageId", aliases = { "DecodeMessageId" }, desc = "decode unique message ID",
      options = { { "i", "messageId", arg = true, required = true, desc = "unique message ID" } },
      run = function(_, o) return M.decode_message_id(o.messageId) end,
      format = function(r) return ("ip=%s\ndate=%s"):format(r.ip, r.date) end },
}

return M
