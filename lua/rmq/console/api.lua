-- rmq.console.api: what the web console (/api/*) and `rmq top` show,
-- gathered with RocketMQ's own admin requests over remoting, the way
-- mqadmin would, so it reads no worker state and works against any
-- broker (rmq or Java) it can reach:
--
--   GET_ALL_TOPIC_CONFIG (21)            topics and their queue counts
--   GET_MAX_OFFSET / GET_MIN_OFFSET (30, 31)   per queue
--   GET_ALL_CONSUMER_OFFSET (43)         every group's committed offsets
--   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)  the groups
--   GET_CONSUMER_LIST_BY_GROUP (38)      members of a group
--   GET_BROKER_RUNTIME_INFO (28)         version, role, disk, store size
--   GET_BROKER_CLUSTER_INFO (106, NameServer)   the brokers
--   VIEW_MESSAGE_BY_ID (33), QUERY_MESSAGE (12)  message lookup
--
-- Inputs and outputs are plain tables; the caller does the waiting
-- (rmq.net blocking calls, each bounded by opts.timeout ms).
--
--   local api = require("rmq.console.api")
--   local c = api.new({ broker = "127.0.0.1:10911", namesrv = "127.0.0.1:9876",
--                       timeout = 3000, maxQueues = 4096, historySize = 120 })
--   c:sample()                       -- records a snapshot (history, TPS)
--   c:topics() c:groups() c:group(name) c:cluster() c:message(q)
--
-- Lag is RocketMQ's ConsumeStats diff: broker max offset minus the
-- committed offset (a queue without one counts from 0).  TPS is the
-- change between the two newest snapshots over their time apart.
--
-- History (docs/memory.md).  Only the two newest snapshots are kept (for
-- TPS).  The sparklines' points are series, each a ring of historySize
-- numbers extended by one point per sample (never recomputed from old
-- snapshots): the total lag of the groups a user opened (and each of
-- their queues'), then of the groups with the most lag, then the most
-- consumed, as many as fit in historyMaxBytes beside the snapshots
-- (SERIES_BYTES each).  A group without a series shows its current lag
-- alone.  While nobody has asked for a view for idleMillis, sample()
-- does nothing and everything is dropped (the next view takes a fresh
-- snapshot).  After each sample the state's heap is reported to the
-- broker's memory budget (core.memory_budget_add "console").
local codes = require("rmq.codes")
local core = require("rmq.core")
local fastjson = require("rmq.fastjson")
local message = require("rmq.client.message")
local net = require("rmq.net")
local route = require("rmq.client.route")

local req = codes.request
local resp = codes.response

local M = {}

-- {{{ names

local SYSTEM_TOPICS = {
    TBW102 = true, SCHEDULE_TOPIC_XXXX = true, OFFSET_MOVED_EVENT = true, SELF_TEST_TOPIC = true,
    BenchmarkTest = true, TRANS_CHECK_MAX_TIME_TOPIC = true,
}

--- True for the topics a broker makes for itself (and retry/DLQ topics);
--- names: a set of cluster and broker names (their topics are system's).
function M.system_topic(name, names)
    if SYSTEM_TOPICS[name] or name:find("^RMQ_SYS_") or name:find("^rmq_sys_")
            or name:find("^%%RETRY%%") or name:find("^%%DLQ%%") or name:find("_REPLY_TOPIC$") then
        return true
    end
    return names ~= nil and names[name] == true
end

local SYSTEM_GROUPS = {
    TOOLS_CONSUMER = true, FILTERSRV_CONSUMER = true, SELF_TEST_C_GROUP = true,
    ["CID_ONS-HTTP-PROXY"] = true, CID_ONSAPI_PERMISSION = true, CID_ONSAPI_OWNER = true,
    CID_ONSAPI_PULL = true, CID_RMQ_SYS_TRANS = true,
}

function M.system_group(name)
    return SYSTEM_GROUPS[name] or name:find("^CID_RMQ_SYS_") ~= nil
end

-- }}}

-- {{{ remoting

local C = {}
C.__index = C

function M.new(opts)
    return setmetatable({
        broker = opts.broker,
        namesrv = opts.namesrv,
        timeout = opts.timeout or 3000,
        max_queues = opts.maxQueues or 4096,
        history_size = opts.historySize or 120,
        history_max_bytes = opts.historyMaxBytes or 32 * 1024 * 1024,
        idle_ms = opts.idleMillis or 300000,
        history = {},        -- the two newest snapshots, oldest first
        series = {},         -- key -> {v = ring, i = next slot, n = points}
        nseries = 0,
        opened = {},         -- group -> when a user last opened it (ms)
        viewed = nil,        -- when a view was last asked for (ms)
        reported = 0,        -- heap bytes reported to the memory budget
        conns = {},          -- addr -> the console's own connection (C:call)
    }, C)
end

-- One request; the reply, or nil and a one-line reason.  The console
-- keeps a connection of its own per address (not net.call's pool, which
-- lives as long as the state): forget() closes them when nobody looks,
-- so an idle console holds no read buffer (a GET_ALL_TOPIC_CONFIG reply
-- of 26,000 topics grows one to 4 MB), and a call that failed drops its
-- connection, so the rest of a late reply never waits in a buffer that
-- no loop reads any more (docs/memory.md).
function C:call(addr, cmd)
    local c = self.conns[addr]
    if c == nil then
        local err
        c, err = net.connect(addr, { timeout = self.timeout })
        if not c then
            return nil, ("%s: %s"):format(addr, tostring(err))
        end
        if self.conns[addr] ~= nil then
            c:close()   -- another task of this state connected first
            c = self.conns[addr]
        else
            self.conns[addr] = c
        end
    end
    local r, err = c:call(cmd, self.timeout)
    if not r then
        if self.conns[addr] == c then
            self.conns[addr] = nil
        end
        c:close()
        return nil, ("%s: %s"):format(addr, tostring(err))
    end
    return r
end

-- Closes the console's connections (the next call opens them again).
local function disconnect(self)
    local conns = self.conns
    self.conns = {}
    for _, c in pairs(conns) do
        c:close()
    end
    -- The console's loop runs only while it waits: one turn, so the
    -- closes finish and the connections' buffers are freed now.
    net.sleep(1)
end

local function ok_body(self, addr, cmd, what)
    local r, err = self:call(addr, cmd)
    if not r then
        return nil, err
    end
    if r.code ~= 0 then
        return nil, ("%s from %s: code %d %s"):format(what, addr, r.code, r.remark or "")
    end
    local t, derr = fastjson.decode(r.body or "{}")
    if type(t) ~= "table" then
        return nil, ("%s from %s: bad body: %s"):format(what, addr, tostring(derr))
    end
    return t
end

local function offset_of(self, addr, code, topic, qid)
    local r = self:call(addr, { code = code, ext = { topic = topic, queueId = qid } })
    if r and r.code == 0 and r.ext then
        return tonumber(r.ext.offset)
    end
    return nil
end

-- }}}

-- {{{ snapshots

--- One broker's topics (queue min/max offsets) and groups (committed
--- offsets, members), at one time.  nil, err when the broker does not
--- answer the topic list.
function C:snapshot(addr)
    addr = addr or self.broker
    local tc, err = ok_body(self, addr, { code = req.GET_ALL_TOPIC_CONFIG, ext = {} }, "GET_ALL_TOPIC_CONFIG")
    if not tc then
        return nil, err
    end
    local snap = { t = core.now_ms(), addr = addr, topics = {}, groups = {}, truncated = false }
    local names = {}
    for name in pairs(tc.topicConfigTable or {}) do
        names[#names + 1] = name
    end
    table.sort(names)
    local budget = self.max_queues
    for _, name in ipairs(names) do
        local cfg = tc.topicConfigTable[name]
        local n = math.floor(tonumber(cfg.readQueueNums) or 0)
        local t = { name = name, queues = {}, nqueues = n, sum_max = 0, messages = 0 }
        -- The broker's own topics (BenchmarkTest alone has 1024 queues)
        -- are listed unread; retry and DLQ topics are read (group lag).
        local unread = M.system_topic(name) and not name:find("^%%RETRY%%") and not name:find("^%%DLQ%%")
        if unread then
            t.messages = nil
            n = 0
        end
        for qid = 0, n - 1 do
            if budget <= 0 then
                snap.truncated = true
                break
            end
            budget = budget - 1
            local max = offset_of(self, addr, req.GET_MAX_OFFSET, name, qid) or 0
            local min = offset_of(self, addr, req.GET_MIN_OFFSET, name, qid) or 0
            t.queues[qid] = { min = min, max = max }
            t.sum_max = t.sum_max + max
            t.messages = t.messages + math.max(0, max - min)
        end
        snap.topics[name] = t
    end
    local offs = ok_body(self, addr, { code = req.GET_ALL_CONSUMER_OFFSET, ext = {} }, "GET_ALL_CONSUMER_OFFSET")
    for key, qs in pairs(offs and offs.offsetTable or {}) do
        local topic, group = key:match("^(.*)@([^@]*)$")
        if topic then
            local g = snap.groups[group] or { name = group, topics = {} }
            snap.groups[group] = g
            local per = {}
            for qid, off in pairs(qs) do
                per[math.floor(tonumber(qid))] = math.floor(tonumber(off))
            end
            g.topics[topic] = per
        end
    end
    local subs = ok_body(self, addr, { code = req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ext = {} },
                         "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
    for name in pairs(subs and subs.subscriptionGroupTable or {}) do
        snap.groups[name] = snap.groups[name] or { name = name, topics = {} }
    end
    -- Per group: lag per queue and the sum of committed offsets (for TPS).
    for _, g in pairs(snap.groups) do
        g.lag, g.consumed, g.queues = 0, 0, {}
        for topic, per in pairs(g.topics) do
            local t = snap.topics[topic]
            for qid, committed in pairs(per) do
                local q = t and t.queues[qid]
                local max = q and q.max or committed
                local lag = math.max(0, max - math.max(committed, 0))
                g.queues[#g.queues + 1] = { topic = topic, queueId = qid, brokerOffset = max,
                                            consumerOffset = committed, lag = lag }
                g.lag = g.lag + lag
                g.consumed = g.consumed + math.max(committed, 0)
            end
        end
        table.sort(g.queues, function(a, b)
            if a.topic ~= b.topic then
                return a.topic < b.topic
            end
            return a.queueId < b.queueId
        end)
    end
    return snap
end

--- Members (client ids) of a group on a broker; {} when none.
function C:members(group, addr)
    local t = ok_body(self, addr or self.broker,
                      { code = req.GET_CONSUMER_LIST_BY_GROUP, ext = { consumerGroup = group } },
                      "GET_CONSUMER_LIST_BY_GROUP")
    local ids = t and t.consumerIdList or {}
    table.sort(ids)
    return ids
end

-- {{{ history

-- What one series costs in the Lua heap: its ring (16-byte values), the
-- table, the key (a group name, or group, topic and queue id).
local function series_bytes(size)
    return 120 + 16 * size
end

-- Groups a user opened that keep their series (the most recent first).
M.MAX_OPENED = 16

local function series_key(group, topic, qid)
    if topic == nil then
        return group
    end
    return group .. "\0" .. topic .. "\0" .. qid
end

local function push(self, key, value)
    local s = self.series[key]
    if s == nil then
        s = { v = {}, i = 1, n = 0 }
    end
    s.v[s.i] = value
    s.i = s.i % self.history_size + 1
    s.n = math.min(s.n + 1, self.history_size)
    return s
end

-- The heap now, and reports the change to the memory budget.
local function report(self)
    local bytes = math.floor(collectgarbage("count") * 1024)
    local ok = pcall(core.memory_budget_add, "console", bytes - self.reported)
    if ok then
        self.reported = bytes
    end
    return bytes
end

-- Drops every snapshot and series (nobody is looking).
local function forget(self)
    if next(self.conns) ~= nil then
        disconnect(self)
    end
    if #self.history == 0 and self.nseries == 0 then
        return
    end
    self.history, self.series, self.nseries, self.opened = {}, {}, 0, {}
    collectgarbage()
    report(self)
end

-- The series kept after a sample, most wanted first: the opened groups
-- (their total, then each queue), then by lag, then by consumption.
local function wanted(self, snap)
    local keys, values = {}, {}
    local opened = {}
    for g, t in pairs(self.opened) do
        opened[#opened + 1] = { g = g, t = t }
    end
    table.sort(opened, function(a, b) return a.t > b.t end)
    for i = M.MAX_OPENED + 1, #opened do
        self.opened[opened[i].g] = nil
    end
    local seen = {}
    for i = 1, math.min(#opened, M.MAX_OPENED) do
        local g = snap.groups[opened[i].g]
        if g then
            keys[#keys + 1] = g.name
            values[#keys] = g.lag
            seen[g.name] = true
            for _, q in ipairs(g.queues) do
                keys[#keys + 1] = series_key(g.name, q.topic, q.queueId)
                values[#keys] = q.lag
            end
        end
    end
    local nopened = #keys
    local rest = {}
    local prev = self.history[#self.history - 1]
    for name, g in pairs(snap.groups) do
        if not seen[name] then
            local pg = prev and prev.groups[name]
            rest[#rest + 1] = { name = name, lag = g.lag,
                                moved = pg and math.max(0, g.consumed - pg.consumed) or 0 }
        end
    end
    table.sort(rest, function(a, b)
        if a.lag ~= b.lag then
            return a.lag > b.lag
        end
        if a.moved ~= b.moved then
            return a.moved > b.moved
        end
        return a.name < b.name
    end)
    for _, r in ipairs(rest) do
        keys[#keys + 1] = r.name
        values[#keys] = r.lag
    end
    return keys, values, nopened
end

-- Extends the kept series by the newest snapshot and drops the rest,
-- within history_max_bytes.
local function extend(self, snap)
    -- A series is planned at its full length; what the kept ones take
    -- now is counted at their current length.
    local per = series_bytes(self.history_size)
    local function without_series()
        local now = 0
        for _, sr in pairs(self.series) do
            now = now + series_bytes(sr.n)
        end
        return math.floor(collectgarbage("count") * 1024) - now
    end
    -- What the snapshots and the rest of the state take without series.
    local base = without_series()
    if base > self.history_max_bytes and #self.history > 1 then
        -- Too big for two: keep the newest alone (TPS shows 0).
        table.remove(self.history, 1)
        collectgarbage()
        base = without_series()
    end
    local keys, values, nopened = wanted(self, snap)
    local fit = math.max(0, (self.history_max_bytes - base) // per)
    local n = math.min(#keys, math.max(fit, math.min(nopened, 1)))
    local series = {}
    for i = 1, n do
        series[keys[i]] = push(self, keys[i], values[i])
    end
    self.series, self.nseries = series, n
end

--- Takes a snapshot of the broker into the history (nothing while
--- nobody looks: nil, "idle").
function C:sample()
    local now = core.now_ms()
    if self.viewed == nil or now - self.viewed > self.idle_ms then
        forget(self)
        return nil, "idle"
    end
    local snap, err = self:snapshot()
    if not snap then
        return nil, err
    end
    local h = self.history
    h[#h + 1] = snap
    while #h > 2 do
        table.remove(h, 1)
    end
    extend(self, snap)
    collectgarbage()
    report(self)
    return snap
end

--- A view was asked for (the sampler works while views come).
function C:viewed_now()
    self.viewed = core.now_ms()
end

-- The newest snapshot, taken now when none is fresher than max_age ms.
function C:current(max_age)
    self:viewed_now()
    local h = self.history
    local last = h[#h]
    if last == nil or core.now_ms() - last.t > (max_age or 1000) then
        return self:sample()
    end
    return last
end

--- The points of a group's lag (topic and qid: one queue's), oldest
--- first; the current value alone without a series.
function C:lag_history(group, topic, qid)
    local out = {}
    local s = self.series[series_key(group, topic, qid)]
    if s then
        local size = self.history_size
        local first = s.n < size and 1 or s.i
        for k = 0, s.n - 1 do
            out[#out + 1] = s.v[(first - 1 + k) % size + 1]
        end
    else
        local snap = self.history[#self.history]
        local g = snap and snap.groups[group]
        local v = 0
        if g and topic == nil then
            v = g.lag
        elseif g then
            for _, q in ipairs(g.queues) do
                if q.topic == topic and q.queueId == qid then
                    v = q.lag
                end
            end
        end
        out[1] = v
    end
    return setmetatable(out, fastjson.array_mt)
end

--- Figures of the history: {snapshots=, series=, heapBytes=, maxBytes=}.
function C:history_figures()
    return { snapshots = #self.history, series = self.nseries,
             heapBytes = math.floor(collectgarbage("count") * 1024), maxBytes = self.history_max_bytes }
end

-- }}}

-- Per second between the two newest snapshots: f(snapshot) -> number.
local function rate(h, f)
    local a, b = h[#h - 1], h[#h]
    if a == nil or b == nil or b.t <= a.t then
        return 0
    end
    local va, vb = f(a), f(b)
    if va == nil or vb == nil then
        return 0
    end
    return math.max(0, vb - va) * 1000 / (b.t - a.t)
end
M.rate = rate

-- }}}

-- {{{ views (plain tables, what /api returns)

function C:topics(names)
    local snap, err = self:current()
    if not snap then
        return nil, err
    end
    local out = {}
    for name, t in pairs(snap.topics) do
        out[#out + 1] = {
            topic = name, queues = t.nqueues, messages = t.messages,   -- nil: not read
            tpsIn = rate(self.history, function(s) return s.topics[name] and s.topics[name].sum_max end),
            system = M.system_topic(name, names),
        }
    end
    table.sort(out, function(a, b) return a.topic < b.topic end)
    return { broker = snap.addr, time = snap.t, truncated = snap.truncated,
             topics = setmetatable(out, fastjson.array_mt) }
end

local function consume_tps(h, name)
    return rate(h, function(s) return s.groups[name] and s.groups[name].consumed end)
end

function C:groups()
    local snap, err = self:current()
    if not snap then
        return nil, err
    end
    local out = {}
    for name, g in pairs(snap.groups) do
        out[#out + 1] = {
            group = name, members = #self:members(name), lag = g.lag,
            consumeTps = consume_tps(self.history, name), system = M.system_group(name) and true or false,
            lagHistory = self:lag_history(name),
        }
    end
    table.sort(out, function(a, b) return a.group < b.group end)
    return { broker = snap.addr, time = snap.t, groups = setmetatable(out, fastjson.array_mt) }
end

function C:group(name)
    local snap, err = self:current()
    if not snap then
        return nil, err
    end
    local g = snap.groups[name]
    if g == nil then
        return nil, ("no consumer group %s on %s"):format(name, snap.addr), 404
    end
    -- Opened: its series (total and per queue) are kept from now on.
    if self.series[name] == nil then
        self.series[name] = push(self, name, g.lag)
        self.nseries = self.nseries + 1
    end
    for _, q in ipairs(g.queues) do
        local key = series_key(name, q.topic, q.queueId)
        if self.series[key] == nil then
            self.series[key] = push(self, key, q.lag)
            self.nseries = self.nseries + 1
        end
    end
    self.opened[name] = core.now_ms()
    local queues = {}
    for i, q in ipairs(g.queues) do
        queues[i] = { topic = q.topic, queueId = q.queueId, brokerOffset = q.brokerOffset,
                      consumerOffset = q.consumerOffset, lag = q.lag,
                      lagHistory = self:lag_history(name, q.topic, q.queueId) }
    end
    return { group = name, broker = snap.addr, time = snap.t, lag = g.lag,
             consumeTps = consume_tps(self.history, name),
             members = setmetatable(self:members(name), fastjson.array_mt),
             queues = setmetatable(queues, fastjson.array_mt),
             lagHistory = self:lag_history(name) }
end

local function runtime(self, addr)
    local t = ok_body(self, addr, { code = req.GET_BROKER_RUNTIME_INFO, ext = {} }, "GET_BROKER_RUNTIME_INFO")
    return t and t.table or nil
end

-- A broker's row: what GET_BROKER_RUNTIME_INFO says; TPS for this
-- console's own broker from its snapshots, else the broker's putTps.
function C:broker_row(cluster, name, id, addr)
    -- This broker is asked over loopback, whatever address it registers.
    local mine = addr == self.broker or (self.self_addr ~= nil and addr == self.self_addr)
    local rt = runtime(self, mine and self.broker or addr) or {}
    local row = {
        cluster = cluster, brokerName = name, brokerId = tonumber(id), addr = addr,
        role = rt.brokerRole or (tostring(id) == "0" and "MASTER" or "SLAVE"),
        version = rt.brokerVersionDesc, online = next(rt) ~= nil,
        diskRatio = tonumber(rt.commitLogDiskRatio),
        storeBytes = (tonumber(rt.commitLogMaxOffset) or 0) - (tonumber(rt.commitLogMinOffset) or 0),
    }
    if mine then
        local h = self.history
        row.tpsIn = rate(h, function(s)
            local n = 0
            for _, t in pairs(s.topics) do n = n + t.sum_max end
            return n
        end)
        row.tpsOut = rate(h, function(s)
            local n = 0
            for _, g in pairs(s.groups) do n = n + g.consumed end
            return n
        end)
    else
        row.tpsIn = tonumber(((rt.putTps or ""):match("^(%S+)")))
    end
    return row
end

--- The brokers the NameServer knows (or this broker alone).
function C:cluster(conf)
    self:current()
    local brokers = {}
    local info
    if self.namesrv then
        local addr = route.parse_namesrv(self.namesrv)[1]
        info = ok_body(self, addr, { code = req.GET_BROKER_CLUSTER_INFO }, "GET_BROKER_CLUSTER_INFO")
    end
    if info then
        for cl, names in pairs(info.clusterAddrTable or {}) do
            for _, bn in ipairs(names) do
                local bd = (info.brokerAddrTable or {})[bn] or {}
                for id, a in pairs(bd.brokerAddrs or {}) do
                    brokers[#brokers + 1] = self:broker_row(cl, bn, id, a)
                end
            end
        end
    end
    if #brokers == 0 then
        brokers[1] = self:broker_row(conf and conf.brokerClusterName, conf and conf.brokerName, 0, self.broker)
    end
    table.sort(brokers, function(a, b)
        if a.brokerName ~= b.brokerName then
            return tostring(a.brokerName) < tostring(b.brokerName)
        end
        return a.brokerId < b.brokerId
    end)
    return { namesrv = self.namesrv, brokers = setmetatable(brokers, fastjson.array_mt) }
end

--- The broker sets the controllers keep, for a broker in controller mode
--- (self.controllers: its controllerAddr): its own set and every set the
--- NameServer names, each with its master, master epoch and SyncStateSet,
--- as the active controller answers CONTROLLER_GET_SYNC_STATE_DATA (what
--- `rmq admin getSyncStateSet` prints).  {controller = addr, sets = {...}};
--- {sets = {}} when the broker is not in controller mode; nil, why when no
--- controller answers.
function C:controller(conf)
    local sets = setmetatable({}, fastjson.array_mt)
    if not self.controllers then
        return { sets = sets }
    end
    local names, seen = {}, {}
    local function add(n)
        if n and not seen[n] then
            seen[n] = true
            names[#names + 1] = n
        end
    end
    add(conf and conf.brokerName)
    if self.namesrv then
        local info = ok_body(self, route.parse_namesrv(self.namesrv)[1], { code = req.GET_BROKER_CLUSTER_INFO },
            "GET_BROKER_CLUSTER_INFO")
        for n in pairs(info and info.brokerAddrTable or {}) do
            add(n)
        end
    end
    table.sort(names)
    local leader, why
    for a in tostring(self.controllers):gmatch("[^;%s]+") do
        local r, err = self:call(a, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} })
        if r and r.code == 0 and r.ext then
            if r.ext.isLeader == "true" then
                leader = a
                break
            end
            leader = leader or r.ext.controllerLeaderAddress
        end
        why = why or err
    end
    if leader == nil then
        return nil, "no active controller: " .. tostring(why or "none named")
    end
    local t, err = ok_body(self, leader, { code = req.CONTROLLER_GET_SYNC_STATE_DATA, ext = {},
        body = fastjson.encode(setmetatable(names, fastjson.array_mt)) }, "CONTROLLER_GET_SYNC_STATE_DATA")
    if t == nil then
        return nil, err
    end
    local function ids(list)
        local out = setmetatable({}, fastjson.array_mt)
        for _, m in ipairs(list or {}) do
            out[#out + 1] = { brokerId = m.brokerId, address = m.brokerAddress, alive = m.alive }
        end
        return out
    end
    for _, n in ipairs(names) do
        local x = (t.replicasInfoTable or {})[n]
        if x then
            sets[#sets + 1] = { brokerName = n, masterBrokerId = x.masterBrokerId, masterAddress = x.masterAddress,
                masterEpoch = x.masterEpoch, syncStateSetEpoch = x.syncStateSetEpoch,
                inSync = ids(x.inSyncReplicas), notInSync = ids(x.notInSyncReplicas) }
        end
    end
    return { controller = leader, sets = sets }
end

-- }}}

-- {{{ message lookup

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function base64(s)
    return ((s:gsub(".", function(x)
        local r, b = "", x:byte()
        for i = 8, 1, -1 do
            r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and "1" or "0")
        end
        return r
    end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(x)
        if #x < 6 then
            return ""
        end
        local c = 0
        for i = 1, 6 do
            c = c + (x:sub(i, i) == "1" and 2 ^ (6 - i) or 0)
        end
        return B64:sub(c + 1, c + 1)
    end) .. ({ "", "==", "=" })[#s % 3 + 1])
end

local BODY_SHOWN = 65536

local function view(m)
    local body = m.body or ""
    local out = {
        msgId = m.msgId, offsetMsgId = m.offsetMsgId, topic = m.topic, queueId = m.queueId,
        queueOffset = m.queueOffset, tags = m.tags, keys = m.keys, bornHost = m.bornHost,
        storeHost = m.storeHost, bornTimestamp = m.bornTimestamp, storeTimestamp = m.storeTimestamp,
        reconsumeTimes = m.reconsumeTimes, bodyLength = #body, properties = m.properties,
    }
    if #body > BODY_SHOWN then
        body = body:sub(1, BODY_SHOWN)
        out.bodyTruncated = true
    end
    if utf8.len(body) then
        out.body = body
    else
        out.bodyBase64 = base64(body)
    end
    return out
end

local function records(self, addr, cmd)
    local r, err = self:call(addr, cmd)
    if not r then
        return nil, err, 502
    end
    if r.code ~= 0 then
        -- Not found is an empty list; anything else (an ACL refusal:
        -- code 1 with the AclException's text) is the error, as the
        -- broker said it.
        local remark = r.remark or ""
        if r.code == resp.QUERY_NOT_FOUND or (r.code == resp.SYSTEM_ERROR
                and remark:find("^can not find message")) then
            return {}
        end
        local refused = r.code == resp.NO_PERMISSION or remark:find("AclException", 1, true)
        return nil, ("%s refused by %s: code %d %s"):format(cmd.code == req.QUERY_MESSAGE and "QUERY_MESSAGE"
            or "VIEW_MESSAGE_BY_ID", addr, r.code, remark:sub(1, 500)), refused and 403 or 502
    end
    local msgs, derr = message.decode_records(r.body or "")
    if not msgs then
        return nil, "undecodable records: " .. tostring(derr), 502
    end
    return msgs
end

--- q = {id=} (an offset message id of this broker, or a client id with
--- topic=) or {key=, topic=}.  {messages = [...]}, or nil, err, status.
function C:message(q, known_addrs)
    local msgs, err, status
    if q.id then
        if not q.id:match("^%x+$") or #q.id ~= 32 then
            return nil, "id must be 32 hex digits (a message id or an offset message id)", 400
        end
        local addr, off = message.decode_offset_msg_id(q.id)
        if addr and (known_addrs or {})[addr] then
            msgs, err, status = records(self, self.broker, { code = req.VIEW_MESSAGE_BY_ID,
                                                              ext = { offset = off } })
            if msgs == nil then
                return nil, err, status
            end
        end
        if (msgs == nil or #msgs == 0) and q.topic then
            msgs, err, status = records(self, self.broker, {
                code = req.QUERY_MESSAGE,
                ext = { topic = q.topic, key = q.id:upper(), maxNum = 32, beginTimestamp = 0,
                        endTimestamp = core.now_ms() + 60000, _UNIQUE_KEY_QUERY = "true" } })
        elseif msgs == nil then
            return nil, "not an offset message id of this broker: add topic= to look up a client message id", 400
        end
    elseif q.key and q.topic then
        msgs, err, status = records(self, self.broker, {
            code = req.QUERY_MESSAGE,
            ext = { topic = q.topic, key = q.key, maxNum = 32, beginTimestamp = 0,
                    endTimestamp = core.now_ms() + 60000 } })
    else
        return nil, "give id=, or key= and topic=", 400
    end
    if msgs == nil then
        return nil, err, status
    end
    local out = {}
    for i, m in ipairs(msgs) do
        out[i] = view(m)
    end
    return { messages = setmetatable(out, fastjson.array_mt) }
end

-- }}}

return M
