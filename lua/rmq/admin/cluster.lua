-- The cluster family: clusterList, brokerStatus, clusterRT (mqadmin's
-- ClusterListSubCommand, BrokerStatusSubCommand, CLusterSendMsgRTCommand).
--
--   cluster.list(ctx, {moreStats=}) -> { {cluster=, brokerName=, brokerId=, addr=, version=,
--       inTPS=, outTPS=, sendQueue=, ..., hour=, space=}, ... }
--   cluster.brokers(info) -> { {cluster=, broker=, id=, addr=}, ... }  (sorted)
--   cluster.runtime(ctx, addr) -> the broker's runtime KVTable
--   cluster.broker_status(ctx, {brokerAddr= | clusterName=}) -> { {addr=, stats={k=v}}, ... }
local codes = require("rmq.codes")
local core = require("rmq.core")
local remote = require("rmq.admin.remote")

local M = {}

--- Every broker of a ClusterInfo as {cluster=, broker=, id=, addr=},
--- sorted by cluster, broker name and id.
function M.brokers(info)
    local out = {}
    for _, cl in ipairs(remote.sorted_keys(info.clusterAddrTable)) do
        local names = {}
        for _, n in ipairs(info.clusterAddrTable[cl]) do
            names[#names + 1] = n
        end
        table.sort(names)
        for _, bn in ipairs(names) do
            local addrs = ((info.brokerAddrTable or {})[bn] or {}).brokerAddrs or {}
            for _, id in ipairs(remote.sorted_keys(addrs)) do
                out[#out + 1] = { cluster = cl, broker = bn, id = tonumber(id), addr = addrs[id] }
            end
        end
    end
    return out
end

--- GET_BROKER_RUNTIME_INFO of one broker: its KVTable.
function M.runtime(ctx, addr)
    local r = remote.ok(ctx, addr, { code = codes.request.GET_BROKER_RUNTIME_INFO })
    return remote.kvtable(r.body, addr)
end

local function first_number(s)
    return tonumber((tostring(s or ""):match("^%s*(%S+)"))) or 0
end

--- clusterList: every broker with its figures from its runtime info (a
--- broker that does not answer keeps zeros, as mqadmin prints it).
function M.list(ctx, o)
    local rows = {}
    for _, b in ipairs(M.brokers(remote.cluster_info(ctx))) do
        local row = { cluster = b.cluster, brokerName = b.broker, brokerId = b.id, addr = b.addr }
        local ok, kv = pcall(M.runtime, ctx, b.addr)
        if ok then
            if o and o.moreStats then
                local function n(k) return tonumber(kv[k]) or 0 end
                row.inTotalYest = n("msgPutTotalTodayMorning") - n("msgPutTotalYesterdayMorning")
                row.outTotalYest = n("msgGetTotalTodayMorning") - n("msgGetTotalYesterdayMorning")
                row.inTotalToday = n("msgPutTotalTodayNow") - n("msgPutTotalTodayMorning")
                row.outTotalToday = n("msgGetTotalTodayNow") - n("msgGetTotalTodayMorning")
            else
                row.version = kv.brokerVersionDesc
                row.inTPS = first_number(kv.putTps)
                row.outTPS = first_number(kv.getTransferedTps)
                row.sendThreadPoolQueueSize = kv.sendThreadPoolQueueSize
                row.sendThreadPoolQueueHeadWaitTimeMills = kv.sendThreadPoolQueueHeadWaitTimeMills
                row.pullThreadPoolQueueSize = kv.pullThreadPoolQueueSize
                row.pullThreadPoolQueueHeadWaitTimeMills = kv.pullThreadPoolQueueHeadWaitTimeMills
                row.pageCacheLockTimeMills = kv.pageCacheLockTimeMills
                local earliest = tonumber(kv.earliestMessageTimeStamp)
                row.hour = earliest and (core.now_ms() - earliest) / 3600000 or 0
                row.space = tonumber(kv.commitLogDiskRatio) or 0
            end
        else
            row.error = tostring(kv)
        end
        rows[#rows + 1] = row
    end
    return rows
end

local function format_list(rows, o)
    local admin = require("rmq.admin")
    local out = {}
    if o.moreStats then
        for _, r in ipairs(rows) do
            out[#out + 1] = { r.cluster, r.brokerName, r.inTotalYest or 0, r.outTotalYest or 0,
                              r.inTotalToday or 0, r.outTotalToday or 0 }
        end
        return admin.table({ "#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest",
                             "#InTotalToday", "#OutTotalToday" }, out)
    end
    local function s(v) return v == nil and "null" or tostring(v) end
    for _, r in ipairs(rows) do
        out[#out + 1] = { r.cluster, r.brokerName, r.brokerId, r.addr, r.version or "",
            ("%.2f(%s,%sms)"):format(r.inTPS or 0, s(r.sendThreadPoolQueueSize), s(r.sendThreadPoolQueueHeadWaitTimeMills)),
            ("%.2f(%s,%sms)"):format(r.outTPS or 0, s(r.pullThreadPoolQueueSize), s(r.pullThreadPoolQueueHeadWaitTimeMills)),
            s(r.pageCacheLockTimeMills), ("%.2f"):format(r.hour or 0), ("%.4f"):format(r.space or 0) }
    end
    return admin.table({ "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)",
                         "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE" }, out)
end

--- brokerStatus: the runtime info of one broker (-b) or of every broker,
--- masters and slaves, of a cluster (-c).
function M.broker_status(ctx, o)
    local out = {}
    for _, addr in ipairs(remote.targets(ctx, o, "clusterName", true)) do
        local ok, kv = pcall(M.runtime, ctx, addr)
        if ok then
            out[#out + 1] = { addr = addr, stats = kv }
        elseif o.brokerAddr then
            error(kv, 0)
        else
            out[#out + 1] = { addr = addr, error = tostring(kv) }
        end
    end
    return out
end

local function format_status(rows, o)
    local out = {}
    for _, r in ipairs(rows) do
        if r.error then
            out[#out + 1] = ("%-24s %s"):format(r.addr, r.error)
        else
            for _, k in ipairs(remote.sorted_keys(r.stats)) do
                if o.brokerAddr then
                    out[#out + 1] = ("%-32s: %s"):format(k, r.stats[k])
                else
                    out[#out + 1] = ("%-24s %-32s: %s"):format(r.addr, k, r.stats[k])
                end
            end
        end
    end
    return table.concat(out, "\n")
end

--- clusterRT: `amount` sends of `size` bytes to the topic named after
--- each broker (every broker serves one), the mean RT of all but the
--- first per broker.
function M.send_rt(ctx, o)
    local function int(key, default)
        local v = o[key] == nil and default or math.tointeger(tonumber(o[key]))
        if v == nil or v < 1 then
            error(remote.usage(("--%s must be a positive integer"):format(key)), 0)
        end
        return v
    end
    local amount, size = int("amount", 100), int("size", 128)
    local info = remote.cluster_info(ctx)
    local clusters = o.cluster and { o.cluster } or remote.sorted_keys(info.clusterAddrTable)
    local producer = require("rmq.client.producer").new({
        namesrvAddr = table.concat(ctx.namesrv, ";"),
        producerGroup = ("CLUSTER_RT_%d"):format(core.now_ms()),
        sendMsgTimeout = ctx.timeout, retryTimesWhenSendFailed = 0,
        credentials = ctx.credentials,
    })
    local body = ("a"):rep(size)
    local rows = {}
    for _, cl in ipairs(clusters) do
        local names = info.clusterAddrTable[cl]
        if names == nil then
            error(remote.failed(nil, ("cluster [%s] not exist"):format(cl)), 0)
        end
        local sorted = { table.unpack(names) }
        table.sort(sorted)
        for _, bn in ipairs(sorted) do
            local ok_n, fail_n, elapsed = 0, 0, 0
            local last_err
            for i = 1, amount do
                local t0 = core.mono_ms()
                local r, err = producer:send({ topic = bn, body = body })
                if r then
                    ok_n = ok_n + 1
                else
                    fail_n = fail_n + 1
                    last_err = err
                end
                if i > 1 then
                    elapsed = elapsed + (core.mono_ms() - t0)
                end
            end
            rows[#rows + 1] = { cluster = cl, brokerName = bn, rt = amount > 1 and elapsed / (amount - 1) or 0,
                                successCount = ok_n, failCount = fail_n, lastError = last_err }
        end
    end
    return rows
end

local function format_rt(rows, o)
    local out = {}
    if o.printLog and tostring(o.printLog):lower() == "true" then
        for _, r in ipairs(rows) do
            out[#out + 1] = ("%s|%s|%s|%s|%d"):format(os.date("!%Y-%m-%d %H:%M:%S", os.time() + 8 * 3600),
                o.machineRoom or "noname", r.cluster, r.brokerName, math.floor(r.rt + 0.5))
        end
        return table.concat(out, "\n")
    end
    for _, r in ipairs(rows) do
        out[#out + 1] = { r.cluster, r.brokerName, ("%.2f"):format(r.rt), r.successCount, r.failCount }
    end
    return require("rmq.admin").table({ "#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount" }, out)
end

M.commands = {
    {
        name = "clusterList", desc = "List all of clusters",
        options = {
            { "m", "moreStats", desc = "Print more stats" },
            { "i", "interval", arg = true, desc = "specify intervals numbers, it is in seconds" },
        },
        check = remote.check_interval,
        run = M.list, format = format_list,
        -- -i: the CLI prints the table again every interval seconds.
        every = remote.every_interval,
    },
    {
        name = "brokerStatus", desc = "Fetch broker runtime status data",
        options = {
            { "b", "brokerAddr", arg = true, desc = "Broker address" },
            { "c", "clusterName", arg = true, desc = "which cluster" },
        },
        check = remote.need_broker_or("clusterName"),
        run = M.broker_status, format = format_status,
    },
    {
        name = "clusterRT", desc = "List All clusters Message Send RT (once; every -i seconds with -i)",
        options = {
            { "a", "amount", arg = true, desc = "message amount | default 100" },
            { "s", "size", arg = true, desc = "message size | default 128 Byte" },
            { "c", "cluster", arg = true, desc = "cluster name | default display all cluster" },
            -- 4.9.8's long names have a space ("print log", "machine room").
            { "p", "printLog", arg = true, desc = "print as tlog | default false" },
            { "m", "machineRoom", arg = true, desc = "machine room name | default noname" },
            { "i", "interval", arg = true, desc = "print interval | default 10 seconds" },
        },
        check = remote.check_interval,
        run = M.send_rt, format = format_rt,
        every = remote.every_interval,
    },
}

return M
