-- Broker in controller mode (RocketMQ 5's ReplicasManager, client side):
-- enableControllerMode = true, controllerAddr = "c1:19876;c2:19876".
--
-- The main thread:
--   * finds the active controller (CONTROLLER_GET_METADATA_INFO on each
--     address: the one saying isLeader, else the leader they name);
--   * gets a broker id: the one it was given before (STORE/controller/
--     broker_id, with its registerCheckCode), else GET_NEXT_BROKER_ID +
--     APPLY_BROKER_ID; registers (CONTROLLER_REGISTER_BROKER);
--   * asks for a master when the set has none (CONTROLLER_ELECT_MASTER
--     with its own id: the first broker of a set becomes its master);
--   * heartbeats every brokerHeartbeatInterval to every controller (904:
--     its epoch, max offset, priority, timeout);
--   * learns elections from the controller's NOTIFY_BROKER_ROLE_CHANGED
--     (1008, to any worker: it wakes the main thread) and, every
--     syncBrokerMetadataPeriod, from CONTROLLER_GET_REPLICA_INFO;
--   * switches its role with rmq.broker.replica_role (change_to_master /
--     change_to_slave), which re-registers with the NameServers, so the
--     route names the new master within seconds.
-- Until it has a role the broker registers with no NameServer
-- (b.controller_waiting, read by rmq.broker.register).
--
-- Fencing (rmq's; 5.x fences a store with RunningFlags.makeFenced but
-- has no lease): a master asks the active controller for the set's
-- master at least every masterLeaseTimeoutMills / 3.  When no answer
-- confirming it (this broker, this epoch) was sent within the last
-- masterLeaseTimeoutMills, it fences itself at once (a timer, not the
-- loop, which may be waiting on a controller that does not answer):
-- every local put refused, the services that write stopped, no
-- NameServer registration.  The lease is shorter than
-- controllerHeartBeatTimeoutMills, after which the controller may elect
-- another master: so a master cut from the controllers or etcd stops
-- acknowledging before a new one can start.  The next confirming answer
-- lifts the fence; an answer naming another master makes it a slave.
local core = require("rmq.core")
local net = require("rmq.net")
local codes = require("rmq.codes")
local log = require("rmq.log")
local metrics = require("rmq.metrics")
local cjson = require("cjson.safe")
local configfile = require("rmq.configfile")
local fastjson = require("rmq.fastjson")

local M = {}

local req = codes.request
local WAKE = "controller_client.wake"
local NOT_LEADER, MASTER_STILL_EXIST, BROKER_ID_INVALID = 2007, 2011, 2014

local st = { stopped = false }
-- st.sent: core.mono_ms() when the request whose answer is being
-- handled was sent; st.confirmed: the same for the last answer that
-- confirmed this broker as the master (the lease runs from the send).

local function addrs(conf)
    local out = {}
    for a in (conf.controllerAddr or ""):gmatch("[^;%s]+") do
        out[#out + 1] = a
    end
    return out
end

local function strs(t)
    local out = {}
    for k, v in pairs(t) do
        out[k] = tostring(v)
    end
    return out
end

-- The active controller's address, or nil.
local function find_leader(conf)
    local named
    for _, a in ipairs(addrs(conf)) do
        local r = net.call(a, { code = req.CONTROLLER_GET_METADATA_INFO, ext = {} }, 3000)
        if r and r.code == 0 then
            if r.ext.isLeader == "true" then
                return a
            end
            named = named or r.ext.controllerLeaderAddress
        end
    end
    return named
end

-- A request to the active controller; finds it again on NOT_LEADER or
-- when it does not answer.
local function ask(b, code, ext, body)
    for _ = 1, 2 do
        st.leader = st.leader or find_leader(b.conf)
        if st.leader == nil then
            return nil, "no active controller"
        end
        local sent = core.mono_ms()
        local r, err = net.call(st.leader, { code = code, ext = strs(ext or {}), body = body }, 3000)
        if r and r.code ~= NOT_LEADER then
            st.sent = sent
            return r
        end
        st.leader = nil
        if not r then
            log.debug("controller %s: %s", tostring(st.leader), tostring(err))
        end
    end
    return nil, "no active controller answered"
end

-- {{{ The broker id, kept across restarts

local function id_path(conf)
    return conf.storePathRootDir .. "/controller_broker_id.json"
end

-- Read and written as every config file (rmq.configfile: .bak
-- fallback; temp file, fsync, rename).
local function load_id(conf)
    local t = configfile.read(id_path(conf))
    if type(t) == "table" and math.tointeger(t.brokerId) and type(t.registerCheckCode) == "string" then
        return math.tointeger(t.brokerId), t.registerCheckCode
    end
    return nil
end

local function save_id(conf, id, code)
    assert(configfile.write(id_path(conf), cjson.encode({ brokerId = id, registerCheckCode = code })))
end

-- }}}

local function cluster_ext(b, t)
    t.clusterName, t.brokerName = b.conf.brokerClusterName, b.conf.brokerName
    return t
end

local function get_id(b)
    local id, code = load_id(b.conf)
    if id then
        local r = ask(b, req.CONTROLLER_APPLY_BROKER_ID, cluster_ext(b,
            { appliedBrokerId = id, registerCheckCode = code }))
        if r and r.code == 0 then
            return id
        elseif r then
            log.warn("controller: broker id %d refused (%d %s); asking for a new one", id, r.code, tostring(r.remark))
        else
            return nil
        end
    end
    for _ = 1, 5 do
        local r = ask(b, req.CONTROLLER_GET_NEXT_BROKER_ID, cluster_ext(b, {}))
        if not r or r.code ~= 0 then
            return nil, r and r.remark
        end
        id = math.tointeger(tonumber(r.ext.nextBrokerId))
        code = b.addr .. ";" .. core.now_ms()
        r = ask(b, req.CONTROLLER_APPLY_BROKER_ID, cluster_ext(b, { appliedBrokerId = id, registerCheckCode = code }))
        if r and r.code == 0 then
            save_id(b.conf, id, code)
            return id
        end
        if not r or r.code ~= BROKER_ID_INVALID then
            return nil, r and r.remark
        end
    end
    return nil, "no broker id after 5 tries"
end

-- The broker ids (integers) and the set's epoch of a SyncStateSet body;
-- nil when the body is not one.
local function sss_ids(body)
    local sss = cjson.decode(body or "")
    if type(sss) ~= "table" or type(sss.syncStateSet) ~= "table" then
        return nil
    end
    local ids = {}
    for i, v in ipairs(sss.syncStateSet) do
        ids[i] = math.tointeger(v)
        if ids[i] == nil then
            return nil
        end
    end
    return ids, math.tointeger(sss.syncStateSetEpoch)
end

-- The master's SyncStateSet changes (rmq.broker.replica_role proposes
-- them every second: members that fell behind leave, caught-up slaves
-- join) go to the active controller as ALTER_SYNC_STATE_SET, fenced by
-- this master's epoch and the set's epoch; what the controller answers
-- is what the master applies.
local function propose_sync_state_set(b, p)
    if st.role ~= "master" or st.id == nil then
        return nil, "not the master"
    end
    local proposed = setmetatable({}, fastjson.array_mt)
    for i, id in ipairs(p.sync_state_set) do
        proposed[i] = id
    end
    local r, err = ask(b, req.CONTROLLER_ALTER_SYNC_STATE_SET,
        { brokerName = b.conf.brokerName, masterBrokerId = st.id, masterEpoch = st.epoch },
        fastjson.encode({ syncStateSet = proposed, syncStateSetEpoch = st.sss_epoch or 0 }))
    if not r then
        return nil, err
    elseif r.code ~= 0 then
        return nil, ("ALTER_SYNC_STATE_SET refused: %d %s"):format(r.code, tostring(r.remark))
    end
    st.sss_epoch = math.tointeger(tonumber(r.ext.newSyncStateSetEpoch)) or st.sss_epoch
    local ids = sss_ids(r.body)
    if ids then
        metrics.replica("sss", #ids)
        return ids
    end
    return true
end

-- Applies what the controller says the set's master is.
local function apply(b, master_id, master_addr, epoch, sss_body)
    if master_id == nil then
        return
    end
    epoch = epoch or 0
    local role = require("rmq.broker.replica_role")
    if master_id == st.id then
        if st.role ~= "master" or st.epoch ~= epoch then
            role.set_sync_state_set_handler(propose_sync_state_set)
            local ok, err = role.change_to_master(b, { epoch = epoch, sync_state_set = sss_ids(sss_body) or { st.id },
                                                       broker_id = st.id })
            if not ok then
                log.warn("controller: cannot become master at epoch %d: %s", epoch, tostring(err))
                return
            end
            st.role, st.epoch, st.master = "master", epoch, master_id
        end
        -- The controller says this broker is the master: the lease renews.
        if st.role == "master" and st.epoch == epoch then
            M.confirm(b, st.sent or core.mono_ms())
        end
    elseif st.role ~= "slave" or st.master ~= master_id or st.epoch ~= epoch then
        local ok, err = role.change_to_slave(b, { master_addr = master_addr, epoch = epoch, broker_id = st.id })
        if not ok then
            -- Tried again every syncBrokerMetadataPeriod: said once per
            -- master and epoch (a 5.x master, say, never stops refusing).
            local why = ("%s@%d"):format(tostring(master_addr), epoch)
            if st.follow_failed ~= why then
                st.follow_failed = why
                log.warn("controller: cannot follow master %s at epoch %d: %s (logged once per master and epoch)",
                    tostring(master_addr), epoch, tostring(err))
            end
            return
        end
        st.follow_failed = nil
        st.role, st.epoch, st.master = "slave", epoch, master_id
        if st.fenced then
            st.fenced = false   -- (a slave's store is fenced anyway)
            metrics.replica("fenced", 0)
        end
    end
    b.controller_waiting = nil
    metrics.replica("role", st.role == "master" and 1 or 0)
    metrics.replica("epoch", epoch)
    local ids, sss_epoch = sss_ids(sss_body)
    if ids then
        st.sss_epoch = sss_epoch or st.sss_epoch
        metrics.replica("sss", #ids)
    end
end

--- The lease of this master renews from `sent` (core.mono_ms() the
--- confirming request was sent); a fenced master takes writes again.
function M.confirm(b, sent)
    if st.role ~= "master" then
        return
    end
    st.confirmed = math.max(st.confirmed or sent, sent)
    if st.fenced then
        local ok, err = require("rmq.broker.replica_role").fence(b, false)
        if not ok then
            log.warn("controller: cannot lift the fence: %s", tostring(err))
            return
        end
        st.fenced = false
        metrics.replica("fenced", 0)
        b.controller_waiting = nil
        log.warn("controller: this master (epoch %d) is confirmed again: writes taken, registered again",
                 st.epoch or 0)
        require("rmq.broker.register").sync(b, (b.conf.registerBrokerTimeoutMills or 6000) + 1000)
    end
end

-- A master no active controller confirmed keeps its lease (or gets it
-- back) while every controller of controllerAddr answers its
-- GET_REPLICA_INFO with CONTROLLER_NOT_LEADER (not active, or active
-- but etcd unreachable): none of them can change the set in etcd then,
-- and its heartbeats reach every controller (so none that becomes
-- active finds it silent).  A controller that answers the set is
-- authoritative (applied as usual); one it cannot reach renews nothing.
local function reach_all(b)
    local sent = core.mono_ms()
    local timeout = math.max(100, b.conf.masterLeaseTimeoutMills // 3)
    for _, a in ipairs(addrs(b.conf)) do
        local r = net.call(a, { code = req.CONTROLLER_GET_REPLICA_INFO,
                                ext = { brokerName = b.conf.brokerName } }, timeout)
        if not r then
            return
        elseif r.code == 0 then
            st.leader, st.sent = a, sent
            apply(b, math.tointeger(tonumber(r.ext.masterBrokerId or "")), r.ext.masterAddress,
                math.tointeger(tonumber(r.ext.masterEpoch)), r.body)
            return
        elseif r.code ~= NOT_LEADER then
            return
        end
    end
    M.confirm(b, sent)
end

local function elect_self(b)
    local r = ask(b, req.CONTROLLER_ELECT_MASTER, cluster_ext(b, { brokerId = st.id, designateElect = false }))
    if r and (r.code == 0 or r.code == MASTER_STILL_EXIST) then
        apply(b, math.tointeger(tonumber(r.ext.masterBrokerId)), r.ext.masterAddress,
            math.tointeger(tonumber(r.ext.masterEpoch)), nil)
    elseif r then
        log.debug("controller: elect: %d %s", r.code, tostring(r.remark))
    end
end

local function register(b)
    local id, err = get_id(b)
    if not id then
        return nil, err
    end
    st.id = id
    local r = ask(b, req.CONTROLLER_REGISTER_BROKER, cluster_ext(b, { brokerId = id, brokerAddress = b.addr }))
    if not r or r.code ~= 0 then
        return nil, r and r.remark or "no active controller"
    end
    log.info("controller: broker %s/%s is id %d in the controller (%s)", b.conf.brokerClusterName,
        b.conf.brokerName, id, st.leader)
    st.registered = true
    if r.ext.masterBrokerId then
        apply(b, math.tointeger(tonumber(r.ext.masterBrokerId)), r.ext.masterAddress,
            math.tointeger(tonumber(r.ext.masterEpoch)), r.body)
    else
        elect_self(b)
    end
    return true
end

local function heartbeat(b)
    if not st.id then
        return
    end
    local conf = b.conf
    local ext = strs(cluster_ext(b, {
        brokerAddr = b.addr, brokerId = st.id, epoch = st.epoch or 0, maxOffset = b.store:max_phy(),
        confirmOffset = b.store:max_phy(), heartbeatTimeoutMills = conf.controllerHeartBeatTimeoutMills,
        electionPriority = conf.brokerElectionPriority,
    }))
    for _, a in ipairs(addrs(conf)) do
        net.oneway(a, { code = req.BROKER_HEARTBEAT, ext = ext })
    end
end

local function sync_metadata(b)
    local r = ask(b, req.CONTROLLER_GET_REPLICA_INFO, { brokerName = b.conf.brokerName })
    if not r or r.code ~= 0 then
        if st.role == "master" then
            reach_all(b)
        end
        return
    end
    local master = math.tointeger(tonumber(r.ext.masterBrokerId or ""))
    if master == nil then
        elect_self(b)    -- no master: ask for one (the controller's policy decides)
    else
        apply(b, master, r.ext.masterAddress, math.tointeger(tonumber(r.ext.masterEpoch)), r.body)
    end
end

-- Every 100 ms on the main thread: a master whose lease ran out fences
-- itself (see the top of this file).
local function check_lease(b)
    if st.role ~= "master" or st.fenced or st.confirmed == nil then
        return
    end
    local lease = b.conf.masterLeaseTimeoutMills
    local age = core.mono_ms() - st.confirmed
    if age <= lease then
        return
    end
    local ok, err = require("rmq.broker.replica_role").fence(b, true)
    if not ok then
        log.warn("controller: cannot fence: %s", tostring(err))
        return
    end
    st.fenced = true
    b.controller_waiting = true
    metrics.replica("fenced", 1)
    log.warn("controller: no answer from the active controller confirming this master (epoch %d) for %.0f ms"
             .. " (masterLeaseTimeoutMills %d): fenced, writes refused until it confirms again", st.epoch or 0, age,
             lease)
end

local function loop(b)
    local conf = b.conf
    local next_beat, next_sync, last_warn = 0, 0, -math.huge
    while not st.stopped do
        local now = core.mono_ms()
        local ok, err = pcall(function()
            if not st.registered then
                local rok, rerr = register(b)
                if not rok and now - last_warn >= 5000 then
                    log.warn("controller: cannot register with the controllers (%s): %s",
                        conf.controllerAddr, tostring(rerr))
                    last_warn = now
                end
            end
            if now >= next_beat then
                heartbeat(b)
                next_beat = now + conf.brokerHeartbeatInterval
            end
            if st.registered and (now >= next_sync or st.woken) then
                st.woken = false
                sync_metadata(b)
                -- a master renews its lease three times a lease
                local period = conf.syncBrokerMetadataPeriod
                if st.role == "master" then
                    period = math.min(period, conf.masterLeaseTimeoutMills // 3)
                end
                next_sync = core.mono_ms() + period
            end
        end)
        if not ok then
            log.error("controller client: %s", tostring(err))
        end
        local wait = math.floor(math.max(1, math.min(next_beat, next_sync, core.mono_ms() + 1000) - core.mono_ms()))
        if net.wait_event(WAKE, wait) then
            st.woken = true
        end
    end
end

function M.main_init(b)
    if not b.conf.enableControllerMode then
        return
    end
    if b.conf.masterLeaseTimeoutMills >= b.conf.controllerHeartBeatTimeoutMills then
        error(("masterLeaseTimeoutMills (%d) must be below controllerHeartBeatTimeoutMills (%d): a master cut from"
               .. " the controllers must stop taking writes before another can be elected")
              :format(b.conf.masterLeaseTimeoutMills, b.conf.controllerHeartBeatTimeoutMills), 0)
    end
    st.stopped, st.registered, st.id, st.role, st.leader = false, false, nil, nil, nil
    st.fenced, st.confirmed, st.sent = false, nil, nil
    b.controller_waiting = true
end

function M.main_start(b)
    if not b.conf.enableControllerMode then
        return
    end
    -- One try before READY (the NameServer registration that follows then
    -- already has the role); the loop keeps trying.
    local ok, err = pcall(register, b)
    if not ok then
        log.warn("controller client: %s", tostring(err))
    end
    net.spawn(loop, b)
    st.lease_timer = net.timer(100, 100, function()
        local cok, cerr = pcall(check_lease, b)
        if not cok then
            log.error("controller client: %s", tostring(cerr))
        end
    end)
end

function M.main_stop(b)
    st.stopped = true
    if st.lease_timer then
        st.lease_timer:stop()
        st.lease_timer = nil
    end
    if b.conf.enableControllerMode then
        net.raise(WAKE)
    end
end

--- NOTIFY_BROKER_ROLE_CHANGED (1008) from a controller: wake the main
--- thread, which asks the active controller (the notification's own
--- fields are not trusted: anyone may send one).
function M.processors(b)
    if not b.conf.enableControllerMode then
        return {}
    end
    return {
        [req.NOTIFY_BROKER_ROLE_CHANGED] = function()
            net.raise(WAKE)
            return nil
        end,
    }
end

--- The metrics and admin view (main thread).
function M.status()
    return { id = st.id, role = st.role, epoch = st.epoch, master = st.master, leader = st.leader,
             fenced = st.fenced }
end

return M
