-- A broker group in controller mode for failover specs and benchmarks:
-- a real etcd (Debian's etcd-server), one controller (clean elections
-- only: no enableElectUncleanMaster), a NameServer and three brokers of
-- one broker set with allAckInSyncStateSet, each on a store of its own
-- that survives its kills.  `rmq audit produce` runs as a child process.
--
--   local failover = require("support.failover")
--   local start = failover.suite(pending, teardown)   -- in a describe block
--   local g = failover.start({ name = "fo", hb_timeout = 1500, brokers = 3,
--                              broker = {extra conf keys}, conf_source = "c.processors = ..." })
--   g:master()            -> index of the master in the route, its address
--   g:wait_sync_state_set(3, ms)   the master's SyncStateSet has 3 members
--   g:kill_master()       -> index, old address, t0 (core.mono_ms of the kill)
--   g:wait_new_master(old, ms) -> new address | nil
--   g:restart(i)          the broker on its store again
--   g:audit_produce(path, args) / g:stop_produce()
--   g:audit_consume(path) / g:stop_consume()
--   g:stop()
local core = require("rmq.core")
local net = require("rmq.net")
local children = require("support.children")
local server = require("support.server")
local etcd = require("support.etcd")
local tmp = require("support.tmp")
local ns = require("support.nsclient")
local prom = require("support.prom")

local M = {}

M.available = etcd.available
function M.why()
    return etcd.why
end

local G = {}
G.__index = G

--- The start of a describe block on groups: pending (and nil) where
--- there is no etcd; else a start(opts), as M.start, whose groups are all
--- stopped at the block's teardown, even when a case failed half way.
--- busted's pending and teardown are the spec's (a support module does
--- not see them):
---   local start = failover.suite(pending, teardown)
---   if not start then return end
function M.suite(pending, teardown)
    if not M.available() then
        pending(M.why())
        return nil
    end
    local groups = {}
    teardown(function()
        for i = #groups, 1, -1 do
            groups[i]:stop()
        end
    end)
    return function(opts)
        local g = M.start(opts)
        groups[#groups + 1] = g
        return g
    end
end

function M.start(opts)
    opts = opts or {}
    local g = setmetatable({ opts = opts, name = opts.name or "bs-fo", topic = opts.topic or "TopicFo",
                             stores = {}, brokers = {}, children = {} }, G)
    g.e = etcd.start()
    g.ctl = server.start({ role = "controller" }, { "etcdEndpoints=" .. g.e.url, "scanNotActiveBrokerInterval=300",
        "etcdLeaseTtlSeconds=2" })
    g.ns = server.start({ role = "namesrv" })
    g.admin = assert(net.connect(g.ns.addr))
    assert(server.eventually(function()
        local r = net.call(g.ctl.addr, { code = 1005, ext = {} }, 3000)
        return r and r.ext.isLeader == "true"
    end, 15000), "the controller never became active")
    for i = 1, opts.brokers or 3 do
        g.brokers[i] = g:start_broker(i)
    end
    return g
end

--- The conf of broker `priority` of a set in controller mode, as every
--- controller spec starts them: its store, cluster and set names, the
--- NameServer and the controller, heartbeats fast enough for a spec,
--- autoCreateTopicEnable and /metrics; `extra` keys added or replacing.
function M.broker_conf(store, cluster, name, namesrv_addr, controller_addr, priority, extra)
    local c = { role = "broker", storePathRootDir = store, brokerClusterName = cluster, brokerName = name,
        namesrvAddr = namesrv_addr, enableControllerMode = true, controllerAddr = controller_addr,
        brokerHeartbeatInterval = 300, controllerHeartBeatTimeoutMills = 1500, syncBrokerMetadataPeriod = 500,
        haListenPort = 0, workers = 1, autoCreateTopicEnable = true, brokerElectionPriority = priority,
        metricsExporterType = "PROM", metricsPromExporterPort = 0, metricsPromExporterHost = "127.0.0.1" }
    for k, v in pairs(extra or {}) do
        c[k] = v
    end
    return c
end

--- Waits until route_addrs() ({[brokerId] = addr}) names n brokers, a
--- master among them: the route, and the master's index in brokers (a
--- table of servers); nil when it does not within ms.
function M.wait_route(route_addrs, brokers, n, ms)
    local addrs = server.eventually(function()
        local a = route_addrs()
        local k = 0
        for _ in pairs(a) do k = k + 1 end
        return a[0] and k == n and a
    end, ms or 20000)
    if not addrs then
        return nil
    end
    for i, b in pairs(brokers) do
        if b.addr == addrs[0] then
            return addrs, i
        end
    end
    return addrs, nil
end

--- Waits until route_addrs() names a master other than `old`: its
--- address, or nil after ms.
function M.wait_other_master(route_addrs, old, ms)
    return server.eventually(function()
        local a = route_addrs()
        return a[0] and a[0] ~= old and a[0]
    end, ms or 10000)
end

--- The store host part of an offset message id (its first 16 hex
--- digits) that a broker at addr ("a.b.c.d:port") writes.
function M.offset_msg_host(addr)
    local ip, port = addr:match("^(%d+%.%d+%.%d+%.%d+):(%d+)$")
    local a, b, c, d = ip:match("(%d+)%.(%d+)%.(%d+)%.(%d+)")
    return ("%02X%02X%02X%02X%08X"):format(tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(port))
end

function G:start_broker(i)
    self.stores[i] = self.stores[i] or tmp.dir()
    local c = M.broker_conf(self.stores[i], "FoCluster", self.name, self.ns.addr, self.ctl.addr, i, {
        controllerHeartBeatTimeoutMills = self.opts.hb_timeout or 1500,
        allAckInSyncStateSet = true, haSendHeartbeatInterval = 500, slaveSynchronizePeriodMillis = 1000,
        haMaxTimeSlaveNotCatchup = 5000, registerNameServerPeriod = 2000 })
    for k, v in pairs(self.opts.broker or {}) do
        c[k] = v
    end
    if self.opts.conf_source then
        -- Lua source run on the conf table `c` (what plain data cannot
        -- say: processors = {...} hooks of a spec)
        return server.start({ source = "local c = " .. server.serialize(c, "") .. "\n" .. self.opts.conf_source
                                  .. "\nreturn c\n" })
    end
    return server.start(c)
end

function G:gauge(i, name)
    local b = self.brokers[i]
    local ok, text = pcall(prom.scrape, b.metrics_addr)
    return ok and prom.value(text, name) or nil
end

-- {[brokerId] = addr} of the set in the route.
function G:route()
    -- (TBW102: every broker with autoCreateTopicEnable registers it.)  A
    -- call that timed out (a NameServer under ASan at load 15 once) is a
    -- route not seen yet: the callers poll.
    local ok, r = pcall(ns.route, self.admin, "TBW102")
    return ok and r and ns.addrs(r, self.name) or {}
end

function G:index_of(addr)
    for i, b in pairs(self.brokers) do
        if b.addr == addr then
            return i
        end
    end
end

-- The master in the route (index, address), or nil.
function G:master()
    local a = self:route()[0]
    return a and self:index_of(a), a
end

function G:wait_master(ms)
    return server.eventually(function()
        local i = self:master()
        return i and self:gauge(i, "rmq_replica_role") == 1 and i
    end, ms or 30000)
end

function G:wait_sync_state_set(n, ms)
    return server.eventually(function()
        local i = self:master()
        return i and self:gauge(i, "rmq_replica_sync_state_set_size") == n
    end, ms or 30000)
end

function G:kill_master()
    local i, addr = self:master()
    assert(i, "no master in the route")
    local t0 = core.mono_ms()
    self.brokers[i]:kill()
    self.brokers[i] = nil
    return i, addr, t0
end

function G:wait_new_master(old, ms)
    return M.wait_other_master(function() return self:route() end, old, ms)
end

function G:restart(i)
    self.brokers[i] = self:start_broker(i)
    return self.brokers[i]
end

-- `rmq ARGS...` as a child the loop does not wait for.
function G:spawn_rmq(key, args, out)
    local p = assert(children.spawn({ file = server.build .. "/rmq", args = args, stdout = out, stderr = out .. ".err",
        env = server.env_with_home(tmp.dir()) }))
    self.children[key] = p
    return p
end

function G:audit_produce(path, extra)
    self.produce_stop = tmp.name()
    local args = { "audit", "produce", "-n", self.ns.addr, "-t", self.topic, "-o", path, "-c", "4", "-r", "200",
        "-s", "128", "--timeout", "3000", "--id", "P", "--stop-file", self.produce_stop }
    for _, a in ipairs(extra or {}) do
        args[#args + 1] = a
    end
    return self:spawn_rmq("produce", args, path .. ".out")
end

local function touch(path)
    assert(io.open(path, "w")):close()
end

function G:stop_child(key, stop_file)
    local p = self.children[key]
    if p and not p.exited then
        touch(stop_file)
        p:wait(30000)
        if not p.exited then
            p:kill(9)
            p:wait()
        end
    end
    self.children[key] = nil
end

function G:stop_produce()
    self:stop_child("produce", self.produce_stop)
end

function G:audit_consume(path, group)
    self.consume_stop = tmp.name()
    return self:spawn_rmq("consume", { "audit", "consume", "-n", self.ns.addr, "-t", self.topic, "-g",
        group or "FoAuditGroup", "-o", path, "--stop-file", self.consume_stop }, path .. ".out")
end

function G:stop_consume()
    self:stop_child("consume", self.consume_stop)
end

-- Lines of kind ("A", "R", "F") in a record file so far.
function M.count_lines(path, kind)
    local f = io.open(path)
    if not f then
        return 0
    end
    local n = 0
    for line in f:lines() do
        if line:sub(1, 2) == kind .. " " then
            n = n + 1
        end
    end
    f:close()
    return n
end

function G:stop()
    for key, p in pairs(self.children) do
        if not p.exited then
            p:kill(9)
            p:wait()
        end
        self.children[key] = nil
    end
    for _, b in pairs(self.brokers) do
        b:kill()
    end
    for _, s in ipairs({ self.ctl, self.ns }) do
        if s then
            s:kill()
        end
    end
    if self.e then
        self.e:stop()
    end
end

return M
