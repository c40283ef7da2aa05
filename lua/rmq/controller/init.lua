-- The controller role (RocketMQ 5's controller, RIP-44) on etcd:
-- `rmq-server conf/controller.lua`.  docs/controller.md.
--
--   processors(conf)   the worker (one: the heartbeat table lives in its
--                      Lua state): the handlers (rmq.controller.processor)
--                      and the task that holds this controller's etcd
--                      lease, campaigns for P/leader and, while active,
--                      scans for masters whose heartbeats stopped
--
-- Any number of controllers may share one etcd (and etcdKeyPrefix); one
-- is active at a time: the one whose lease holds P/leader.  They keep no
-- state of their own but heartbeats, so a crash loses nothing.
local core = require "rmq.core"
local etcd_mod = require "rmq.controller.etcd"
local log = require "rmq.log"
local metrics = require "rmq.metrics"
local net = require "rmq.net"
local processor = require "rmq.controller.processor"
local shared = require "rmq.shared"

local M = {}

local S = processor.state

-- Shutdown, from the main thread (main_stop) to the worker's task: a
-- flag in a shared map and an event that cuts the task's wait short.
local flags = shared.map("controller")
local STOP = "controller.stop"

local function own_address(conf)
    local bind = conf.bindAddress
    local ip = bind
    if bind == nil or bind == "0.0.0.0" or bind == "::" then
        ip = core.ipv4_addresses()[1] or "127.0.0.1"
    end
    return ip .. ":" .. conf.listenPort
end

local function leader_of(token)
    return token and token:match("^([^#]+)") or nil
end

-- One round: keep the lease alive (or get one), hold or campaign for
-- P/leader.  Never raises; etcd trouble leaves S.leader to the deadline.
local function round(c, conf, st)
    local ttl = conf.etcdLeaseTtlSeconds
    local t0 = core.mono_ms()
    if st.lease == nil then
        local id = c:grant(ttl)
        if id == nil then
            return
        end
        st.lease = id
        S.lease_deadline = t0 + ttl * 1000
        c:txn({}, { { put = conf.etcdKeyPrefix .. "/members/" .. S.addr, value = S.addr, lease = id } })
    else
        local left = c:keepalive(st.lease)
        if left == nil then
            return                           -- unreachable: the deadline decides
        elseif left <= 0 then
            if S.leader then
                log.warn("controller: the etcd lease expired; no longer the active controller")
            end
            S.leader, st.lease = false, nil
            return
        end
        S.lease_deadline = t0 + left * 1000
    end
    local lkey = conf.etcdKeyPrefix .. "/leader"
    local won = c:txn({ { key = lkey, target = "CREATE", value = 0 } },
        { { put = lkey, value = S.token, lease = st.lease } })
    local r = c:range(lkey)
    if r == nil then
        return
    end
    local holder = r.kvs[1] and r.kvs[1].value or nil
    S.leader_addr = leader_of(holder)
    local mine = holder == S.token
    if mine and not S.leader then
        log.info("controller: active (etcd lease %s, %s)", st.lease, won and "elected" or "kept")
    elseif S.leader and not mine then
        log.warn("controller: %s holds the leadership now; standing by", tostring(S.leader_addr))
    end
    S.leader = mine
    local m = c:range(conf.etcdKeyPrefix .. "/members/", true)
    if m then
        local peers = {}
        for _, kv in ipairs(m.kvs) do
            peers[#peers + 1] = kv.value
        end
        table.sort(peers)
        S.peers = peers
    end
end

local function run(conf)
    local c = S.etcd
    local st = { lease = nil }
    local next_scan = core.mono_ms() + conf.scanNotActiveBrokerInterval
    log.info("controller %s: etcd %s, prefix %s, lease TTL %d s", S.addr, conf.etcdEndpoints,
        conf.etcdKeyPrefix, conf.etcdLeaseTtlSeconds)
    flags:del("stopping")
    while flags:get("stopping") == nil do
        local ok, err = pcall(round, c, conf, st)
        if not ok then
            log.error("controller: %s", tostring(err))
        end
        if S.leader and core.mono_ms() >= S.lease_deadline then
            log.warn("controller: no etcd lease renewal within its TTL; no longer active")
            S.leader, st.lease = false, nil
        end
        metrics.replica("active", processor.is_leader() and 1 or 0)
        if core.mono_ms() >= next_scan then
            next_scan = core.mono_ms() + conf.scanNotActiveBrokerInterval
            local sok, serr = pcall(processor.scan)
            if not sok then
                log.error("controller scan: %s", tostring(serr))
            end
        end
        -- (scanNotActiveBrokerInterval may change: UPDATE_CONTROLLER_CONFIG)
        next_scan = math.min(next_scan, core.mono_ms() + conf.scanNotActiveBrokerInterval)
        net.wait_event(STOP, math.max(100, math.min(conf.etcdLeaseTtlSeconds * 1000 // 3,
            conf.scanNotActiveBrokerInterval)))
    end
    -- Hand over at once: another controller need not wait for the TTL.
    S.leader = false
    if st.lease then
        c:revoke(st.lease)
        log.info("controller: stopped; etcd lease %s revoked", st.lease)
    end
end

--- Main thread, at SIGTERM: the worker's task revokes its lease and ends.
function M.main_stop()
    flags:set("stopping", "1")
    net.raise(STOP)
end

function M.processors(conf)
    local addr = own_address(conf)
    local token = ("%s#%d#%d"):format(addr, core.pid(), core.now_ms())
    local c = etcd_mod.new(conf)
    local handlers = processor.new(conf, c, token, addr)
    net.spawn(run, conf)
    return handlers
end

return M
