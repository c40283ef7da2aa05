-- rmq.console.top: `rmq top -n NAMESRV`, a terminal view of a cluster:
-- TPS in/out per topic and lag per group, refreshed every interval.
-- The brokers come from the NameServer (GET_BROKER_CLUSTER_INFO, masters
-- only: a slave holds copies); each broker is read with the console's
-- remoting requests (rmq.console.api snapshots), so it needs nothing but
-- the remoting ports, and works against any broker that answers them.
--
--   top.frame(prev, cur, all, names) -> {topics = {...}, groups = {...}}
--       prev, cur: {[addr] = snapshot} (prev may be empty); TPS is the
--       change over their time apart; all: system topics and groups too
--   top.render(frame, title) -> text
--   top.run(opts) -> exit code, err   opts: namesrv, interval (ms),
--       once, json, all, timeout (ms)
local api = require("rmq.console.api")
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local json = require("rmq.console.json")
local net = require("rmq.net")
local route = require("rmq.client.route")

local M = {}

--- The master brokers the NameServer knows: {{name=, addr=}} and the set
--- of cluster and broker names (whose topics are system topics), or nil, err.
function M.brokers(namesrv, timeout)
    local addr = route.parse_namesrv(namesrv)[1]
    local r, err = net.call(addr, { code = codes.request.GET_BROKER_CLUSTER_INFO }, timeout)
    if not r then
        return nil, addr .. ": " .. tostring(err)
    end
    if r.code ~= 0 then
        return nil, ("%s: code %d %s"):format(addr, r.code, r.remark or "")
    end
    local info = route.decode_json(r.body or "{}") or {}
    local out, names = {}, {}
    for cl in pairs(info.clusterAddrTable or {}) do
        names[cl] = true
    end
    for name, bd in pairs(info.brokerAddrTable or {}) do
        names[name] = true
        local master = (bd.brokerAddrs or {})["0"]
        if master then
            out[#out + 1] = { name = name, addr = master }
        end
    end
    table.sort(out, function(a, b) return a.name < b.name end)
    return out, names
end

local function per_second(a, b, ta, tb)
    if a == nil or b == nil or tb <= ta then
        return 0
    end
    return math.max(0, b - a) * 1000 / (tb - ta)
end

-- Sum of one group's committed offsets on one topic.
local function consumed(g, topic)
    local n = 0
    for _, off in pairs(g and g.topics[topic] or {}) do
        n = n + math.max(off, 0)
    end
    return n
end

function M.frame(prev, cur, all, names)
    local topics, groups = {}, {}
    for addr, s in pairs(cur) do
        local p = prev[addr]
        local tp, tc = p and p.t or 0, s.t
        for name, t in pairs(s.topics) do
            if all or not api.system_topic(name, names) then
                local row = topics[name] or { topic = name, queues = 0, messages = 0, tpsIn = 0, tpsOut = 0 }
                topics[name] = row
                row.queues = row.queues + t.nqueues
                row.messages = row.messages + (t.messages or 0)
                local pt = p and p.topics[name]
                row.tpsIn = row.tpsIn + per_second(pt and pt.sum_max, t.sum_max, tp, tc)
            end
        end
        for gname, g in pairs(s.groups) do
            if all or not api.system_group(gname) then
                local pg = p and p.groups[gname]
                for topic in pairs(g.topics) do
                    local tps = per_second(pg and pg.topics[topic] and consumed(pg, topic), consumed(g, topic), tp, tc)
                    local key = gname .. "\0" .. topic
                    local row = groups[key] or { group = gname, topic = topic, lag = 0, consumeTps = 0 }
                    groups[key] = row
                    for _, q in ipairs(g.queues) do
                        if q.topic == topic then
                            row.lag = row.lag + q.lag
                        end
                    end
                    row.consumeTps = row.consumeTps + tps
                    if topics[topic] then
                        topics[topic].tpsOut = topics[topic].tpsOut + tps
                    end
                end
            end
        end
    end
    local tl, gl = {}, {}
    for _, r in pairs(topics) do tl[#tl + 1] = r end
    for _, r in pairs(groups) do gl[#gl + 1] = r end
    table.sort(tl, function(a, b) return a.topic < b.topic end)
    table.sort(gl, function(a, b)
        if a.group ~= b.group then
            return a.group < b.group
        end
        return a.topic < b.topic
    end)
    return { topics = setmetatable(tl, fastjson.array_mt), groups = setmetatable(gl, fastjson.array_mt) }
end

function M.render(f, title)
    local out = { title, "" }
    out[#out + 1] = ("%-40s %7s %12s %10s %10s"):format("TOPIC", "QUEUES", "MESSAGES", "TPS IN", "TPS OUT")
    for _, r in ipairs(f.topics) do
        out[#out + 1] = ("%-40s %7d %12d %10.1f %10.1f"):format(r.topic, r.queues, r.messages, r.tpsIn, r.tpsOut)
    end
    out[#out + 1] = ""
    out[#out + 1] = ("%-32s %-32s %10s %12s"):format("GROUP", "TOPIC", "LAG", "CONSUME TPS")
    for _, r in ipairs(f.groups) do
        out[#out + 1] = ("%-32s %-32s %10d %12.1f"):format(r.group, r.topic, r.lag, r.consumeTps)
    end
    return table.concat(out, "\n") .. "\n"
end

-- {[addr] = snapshot} of every broker; the ones that did not answer are
-- listed in the second result.
local function collect(c, brokers)
    local snaps, down = {}, {}
    for _, b in ipairs(brokers) do
        local s, err = c:snapshot(b.addr)
        if s then
            snaps[b.addr] = s
        else
            down[#down + 1] = b.name .. " (" .. tostring(err) .. ")"
        end
    end
    return snaps, down
end

function M.run(opts)
    local timeout = opts.timeout or 3000
    local interval = opts.interval or 1000
    local c = api.new({ timeout = timeout, maxQueues = opts.maxQueues })
    local brokers, names = M.brokers(opts.namesrv, timeout)
    if not brokers then
        return nil, names
    end
    if #brokers == 0 then
        return nil, "the NameServer " .. opts.namesrv .. " knows no broker"
    end
    local prev = collect(c, brokers)
    local refreshed = core.now_ms()
    while true do
        net.sleep(interval)
        -- New brokers appear within ten refreshes.
        if core.now_ms() - refreshed > interval * 10 then
            local b, n = M.brokers(opts.namesrv, timeout)
            if b then
                brokers, names = b, n
            end
            refreshed = core.now_ms()
        end
        local cur, down = collect(c, brokers)
        local f = M.frame(prev, cur, opts.all, names)
        if opts.json then
            f.brokers = setmetatable({}, fastjson.array_mt)
            for i, b in ipairs(brokers) do
                f.brokers[i] = b.name .. "@" .. b.addr
            end
            f.down = setmetatable(down, fastjson.array_mt)
            io.stdout:write(json.encode(f), "\n")
        else
            local title = ("rmq top  %s  %s  brokers: %d%s"):format(opts.namesrv, os.date("!%Y-%m-%d %H:%M:%SZ"),
                #brokers, #down > 0 and ("  DOWN: " .. table.concat(down, ", ")) or "")
            if not opts.once then
                io.stdout:write("\27[H\27[2J")
            end
            io.stdout:write(M.render(f, title))
        end
        io.stdout:flush()
        if opts.once then
            return 0
        end
        prev = cur
    end
end

return M
