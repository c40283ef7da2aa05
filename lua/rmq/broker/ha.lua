-- HA replication (issue 11): starts the C service (rmq.ha, src/ha/) for
-- the broker's store in the main thread.
--
--   every broker listens on haListenPort (a slave too, as 4.9.8's: its
--     own slaves follow it); the bound port goes into b.ha_addr, the
--     haServerAddr registered with the NameServers (and the READY line's
--     ha=HOST:PORT).
--   slave: follows haMasterAddress, else the haServerAddr of the last
--     REGISTER_BROKER reply (register.ha_master_addr()), re-read every
--     second as 4.9.8 re-reads it at every registration -- until
--     rmq.broker.replica_role takes control (take_control): from then on
--     it follows the master a role change names (change_to_slave's
--     master_ha_addr, which register.ha_master_addr() answers too).
--
--   who may replicate (issue 21): RocketMQ's HA protocol has no
--     authentication, so a master serves only the brokers registered for
--     its brokerName at the NameServers (GET_BROKER_CLUSTER_INFO: their
--     addresses' IPs, this broker's own entry left out), haMasterAddress,
--     and haAllowedAddresses; haAllowAnyAddress = true serves anyone, as
--     4.9.8 does.  The list is read every registration period, and at
--     once when an unknown peer connects (C holds it, unread, meanwhile:
--     a new slave may connect before the last read saw it), at most once
--     a second.
--
-- Other code reads replication state with
--   require("rmq.ha").stats(shared.get_handle("broker.ha"))
-- (see src/lua/l_ha.c for the fields), from any thread.
local ha = require("rmq.ha")
local shared = require("rmq.shared")
local net = require("rmq.net")
local core = require("rmq.core")
local log = require("rmq.log")
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local credentials = require("rmq.client.credentials")

local M = {}

local svc   -- the service (main thread)

local function options(b)
    local conf = b.conf
    return {
        slave = conf.brokerRole == "SLAVE",
        bind = conf.bindAddress or "0.0.0.0",
        haListenPort = conf.haListenPort or 0,
        haMasterAddress = conf.haMasterAddress,
        haSendHeartbeatInterval = conf.haSendHeartbeatInterval,
        haHousekeepingInterval = conf.haHousekeepingInterval,
        haTransferBatchSize = conf.haTransferBatchSize,
        haMaxSlaves = conf.haMaxSlaves,
        haTransferFromMinOffset = conf.haTransferFromMinOffset,
        haAllowedAddresses = conf.haAllowedAddresses,
        haAllowAnyAddress = conf.haAllowAnyAddress,
        haUnknownPeerHoldMillis = conf.haUnknownPeerHoldMillis,
        haUnknownPeersMax = conf.haUnknownPeersMax,
    }
end

-- "ip:port" / "[v6]:port" -> ip
local function host_of(addr)
    return type(addr) == "string" and addr:match("^%[?([^%]]-)%]?:%d+$") or nil
end

--- The IPs allowed on the HA port besides haAllowedAddresses, from the
--- cluster info each NameServer answered (infos: decoded bodies) and
--- the master addresses known; sorted, distinct.  nil when no
--- NameServer answered and no master address is known (keep the list).
function M.peer_ips(conf, infos, masters)
    local set, any = {}, false
    for _, addr in ipairs(masters) do
        local ip = host_of(addr)
        if ip then
            set[ip], any = true, true
        end
    end
    for _, info in ipairs(infos) do
        any = true
        local table_ = type(info) == "table" and info.brokerAddrTable
        local entry = type(table_) == "table" and table_[conf.brokerName]
        local addrs = type(entry) == "table" and entry.brokerAddrs
        for id, addr in pairs(type(addrs) == "table" and addrs or {}) do
            local ip = host_of(addr)
            if ip and tonumber(id) ~= conf.brokerId then
                set[ip] = true
            end
        end
    end
    if not any then
        return nil
    end
    local out = {}
    for ip in pairs(set) do
        out[#out + 1] = ip
    end
    table.sort(out)
    return out
end

-- One read of every NameServer's cluster info (in turn, each bounded).
local function refresh(b, register, last)
    local conf = b.conf
    local infos = {}
    for _, addr in ipairs(register.namesrvs(conf)) do
        local r = net.call(addr, { code = codes.request.GET_BROKER_CLUSTER_INFO,
                                   credentials = credentials.of(conf) }, M.REFRESH_TIMEOUT_MS)
        local info = r and r.code == 0 and fastjson.decode(r.body or "")
        if type(info) == "table" then
            infos[#infos + 1] = info
        end
    end
    local masters = {}   -- (a role change's master too: rmq.broker.register's rule)
    masters[#masters + 1] = conf.haMasterAddress
    masters[#masters + 1] = register.master_addr()
    masters[#masters + 1] = register.ha_master_addr()
    local ips = M.peer_ips(conf, infos, masters)
    if ips == nil then
        return last
    end
    local list = table.concat(ips, ";")
    if list ~= last and svc then   -- (svc: nil once stopped during the calls)
        log.info("HA: serving peers %s (registered for %s at the NameServers, the master)%s",
            list == "" and "(none)" or list, conf.brokerName,
            conf.haAllowedAddresses and (", and haAllowedAddresses " .. conf.haAllowedAddresses) or "")
        svc:set_peers(list)
    end
    return list
end

M.REFRESH_TIMEOUT_MS = 3000

-- The main thread's watch: every second, a refresh if an unknown peer
-- waits; every registration period, one anyway.
local function watch_peers(b)
    local register = require("rmq.broker.register")
    local last, next_at = nil, 0
    while svc and not M.stopped do
        local ok, err = pcall(function()
            if svc:take_refresh() or core.mono_ms() >= next_at then
                last = refresh(b, register, last)
                next_at = core.mono_ms() + register.period(b.conf)
            end
        end)
        if not ok then
            log.warn("HA: reading the registered peers: %s", tostring(err))
        end
        net.wait_event(M.WAKE, 1000)
    end
end

M.WAKE = "broker.ha.peers"

--- The service (main thread), or nil before main_init / after the stop.
function M.service()
    return svc
end

--- rmq.broker.replica_role decides whom this broker follows from now on:
--- the 4.x follow of the NameServers' haServerAddr stops.
function M.take_control(b)
    if b.ha_timer then
        b.ha_timer:stop()
        b.ha_timer = nil
    end
end

function M.main_init(b)
    local ok, h = pcall(ha.start, b.store, options(b))
    if not ok then
        error("HA: " .. tostring(h), 0)
    end
    svc = h
    shared.put_handle("broker.ha", h:share())
    -- A slave listens too, as 4.9.8's does (a slave of a slave).
    local ip = b.conf.brokerIP2 or b.ip
    b.ha_addr = ip .. ":" .. h:port()
    -- The workers' copies of b keep the conf's port (0: ephemeral); the
    -- bound address is theirs to name too (GET_BROKER_EPOCH_CACHE).
    shared.map("broker.ha.self"):set("addr", b.ha_addr)
    b.ready_fields = b.ready_fields or {}
    b.ready_fields.ha = (b.conf.bindAddress or "0.0.0.0") .. ":" .. h:port()   -- as bound
    log.info("HA: listening on port %d (%s)", h:port(), b.conf.brokerRole)
end

function M.main_start(b)
    M.stopped = false
    if not b.conf.haAllowAnyAddress then
        net.spawn(watch_peers, b)
    end
    if b.conf.brokerRole ~= "SLAVE" or b.conf.haMasterAddress then
        return
    end
    local register = require("rmq.broker.register")
    local function follow()
        local addr = register.ha_master_addr() or ""
        svc:set_master(addr)
    end
    follow()
    b.ha_timer = net.timer(1000, 1000, follow)
end

function M.main_stop(b)
    M.stopped = true
    net.raise(M.WAKE)
    if b.ha_timer then
        b.ha_timer:stop()
        b.ha_timer = nil
    end
end

-- Only once the workers are gone: SYNC_MASTER sends answered during the
-- drain still need the slaves' acks, and a worker may read ha.stats.
function M.after_workers()
    if svc then
        svc:stop()
        svc = nil
    end
end

return M
