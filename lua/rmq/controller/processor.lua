-- The controller's request handlers (RocketMQ 5's ControllerRequestProcessor
-- and ReplicasInfoManager rules) with the state in etcd.
--
-- State, under etcdKeyPrefix P:
--   P/leader             the active controller's token and address, put
--                        with its lease (gone when the lease expires)
--   P/members/ADDR       each running controller, with its lease (peers)
--   P/sets/BROKERNAME    one broker set, JSON: clusterName, brokerName,
--                        nextId, brokers {id = {addr, checkCode}}, master,
--                        masterEpoch, sss (ids), sssEpoch, elected
-- Every change of a set is one etcd transaction guarded by the set key's
-- mod revision (compare-and-swap) and by P/leader still holding this
-- controller's token: a controller whose lease expired cannot write even
-- if it does not know yet.  It also stops answering writes as soon as its
-- own clock says the lease may have expired (state.lease_deadline).
--
-- Heartbeats (BROKER_HEARTBEAT, 904) are kept in memory by every
-- controller (brokers send them to all controllers, as 5.x brokers do),
-- bounded by controllerMaxBrokers.
local cjson = require "cjson.safe"
local codes = require "rmq.codes"
local core = require "rmq.core"
local fastjson = require "rmq.fastjson"
local log = require "rmq.log"
local metrics = require "rmq.metrics"
local policy = require "rmq.policy"
local reply = require "rmq.reply"

local M = {}

local req = codes.request

-- ResponseCode (RocketMQ 5, remoting/.../ResponseCode.java): the
-- CONTROLLER_* codes of rmq.codes, without their prefix.
local C = {}
for name, code in pairs(codes.response) do
    local short = name:match("^CONTROLLER_(.+)$")
    if short then
        C[short] = code
    end
end
M.codes = C

-- MixAll.FIRST_BROKER_CONTROLLER_ID
local FIRST_ID = 1
-- BrokerConfig.controllerHeartBeatTimeoutMills: a heartbeat without one.
local DEFAULT_HEARTBEAT_TIMEOUT = 10000

-- {{{ State of this controller (one worker: server.lua gives it one)

local S = {
    conf = nil,
    etcd = nil,
    token = nil,          -- this controller's identity in P/leader
    addr = nil,           -- its remoting address
    leader = false,
    lease_deadline = 0,   -- mono ms after which the lease may be gone
    live = {},            -- "brokerName\0id" -> heartbeat record
    live_count = 0,
    kept = {},            -- brokerName -> true: its silent master kept at the last scan (logged once)
    started = 0,          -- mono ms
    elections = 0,
    leader_addr = nil,    -- what P/leader said last
    peers = nil,          -- P/members as the last round read it (sorted)
}
M.state = S

local function key(...)
    return S.conf.etcdKeyPrefix .. "/" .. table.concat({ ... }, "/")
end

function M.is_leader()
    return S.leader and core.mono_ms() < S.lease_deadline
end

local function not_leader(why)
    return reply.error(C.NOT_LEADER, why or ("The controller is not in leader state; the leader is %s")
        :format(tostring(S.leader_addr)))
end

-- }}}

-- {{{ Heartbeats

-- Keyed by cluster, set and id, as 5.x's BrokerIdentityInfo: a heartbeat
-- naming another cluster is another broker's, and never keeps this set's
-- master alive nor speaks for its candidates.
local function live_key(cluster, name, id)
    return tostring(cluster) .. "\0" .. name .. "\0" .. tostring(id)
end

local function record(set, id)
    return S.live[live_key(set.clusterName, set.brokerName, id)]
end

local function alive(set, id)
    local r = record(set, id)
    return r ~= nil and core.mono_ms() - r.last < r.timeout
end

--- Drops heartbeat records silent for six of their timeouts.
function M.expire_heartbeats()
    local now = core.mono_ms()
    for k, r in pairs(S.live) do
        if now - r.last > 6 * r.timeout then
            S.live[k] = nil
            S.live_count = S.live_count - 1
        end
    end
end

-- }}}

-- {{{ Broker sets in etcd

local function decode_set(text)
    local t = cjson.decode(text)
    if type(t) ~= "table" then
        return nil
    end
    t.brokers = type(t.brokers) == "table" and t.brokers or {}
    local sss = {}
    for _, id in ipairs(type(t.sss) == "table" and t.sss or {}) do
        sss[#sss + 1] = math.tointeger(id)
    end
    t.sss = sss
    -- cjson reads numbers as floats: ids and epochs are integers.
    for _, k in ipairs({ "master", "masterEpoch", "sssEpoch", "nextId" }) do
        t[k] = t[k] ~= nil and math.tointeger(t[k]) or nil
    end
    return t
end

local function encode_set(set)
    local sss = setmetatable({}, cjson.array_mt)
    for i, id in ipairs(set.sss) do
        sss[i] = id
    end
    local copy = {}
    for k, v in pairs(set) do
        copy[k] = v
    end
    copy.sss = sss
    if next(copy.brokers) == nil then
        copy.brokers = setmetatable({}, { __jsontype = "object" })
    end
    return assert(cjson.encode(copy))
end

-- A broker set's name becomes an etcd key: no separators, no control
-- characters, bounded (RocketMQ's names are letters, digits, - and _).
local function bad_name(name)
    if #name == 0 or #name > 255 or name:find("[%c/%s]") then
        return reply.error(C.INVALID_REQUEST, "invalid broker name")
    end
end

--- Reads one set: set | false (none), mod revision | nil, err.
local function read_set(name)
    if bad_name(name) then
        return false, 0      -- no such set can exist
    end
    local r, err = S.etcd:range(key("sets", name))
    if not r then
        return nil, err
    end
    local kv = r.kvs[1]
    if kv == nil then
        return false, 0
    end
    local set = decode_set(kv.value)
    if set == nil then
        return nil, "undecodable broker set " .. name
    end
    return set, kv.mod
end

local function read_all_sets()
    local r, err = S.etcd:range(key("sets", ""), true)
    if not r then
        return nil, err
    end
    local out = {}
    for _, kv in ipairs(r.kvs) do
        local set = decode_set(kv.value)
        if set and set.brokerName then
            out[#out + 1] = set
        end
    end
    table.sort(out, function(a, b) return a.brokerName < b.brokerName end)
    return out
end

local function in_sss(set, id)
    for _, x in ipairs(set.sss) do
        if x == id then
            return true
        end
    end
    return false
end

local function broker_addr(set, id)
    local b = id and set.brokers[tostring(id)]
    return b and b.addr or nil
end

local function set_count(set)
    local n = 0
    for _ in pairs(set.brokers) do
        n = n + 1
    end
    return n
end

--- Changes one set under compare-and-swap.  fn(set | false) returns the
--- reply and the new set (nil: no write; false: delete the set).  A
--- conflict (another write between our read and our transaction) runs fn
--- again on the fresh set, a few times.
local function update(name, fn)
    local bad = bad_name(name)
    if bad then
        return bad
    end
    if not M.is_leader() then
        return not_leader()
    end
    for _ = 1, 5 do
        local set, mod = read_set(name)
        if set == nil then
            return not_leader(tostring(mod))
        end
        local r, new = fn(set)
        if new == nil then
            return r
        end
        if not M.is_leader() then
            return not_leader()
        end
        local k = key("sets", name)
        local op = new == false and { delete = k } or { put = k, value = encode_set(new) }
        local ok, err = S.etcd:txn({
            { key = k, target = "MOD", value = mod },
            { key = key("leader"), target = "VALUE", value = S.token },
        }, { op })
        if ok == nil then
            return not_leader(tostring(err))
        end
        if ok then
            return r, new
        end
        -- Lost the compare: was it the set or the leadership?
        local lr = S.etcd:range(key("leader"))
        if lr == nil or lr.kvs[1] == nil or lr.kvs[1].value ~= S.token then
            S.leader = false
            log.warn("controller: lost the leadership (a write found %s the leader)",
                lr and lr.kvs[1] and "another controller" or "no controller")
            return not_leader()
        end
    end
    return reply.error(C.INVALID_REQUEST, "too many concurrent changes of broker set " .. name)
end

-- }}}

-- {{{ Bodies

local function sss_body(set)
    local ids = {}
    for i, id in ipairs(set.sss) do
        ids[i] = id
    end
    table.sort(ids)
    if #ids == 0 then
        ids = setmetatable({}, fastjson.array_mt)
    end
    return fastjson.encode({ syncStateSet = ids, syncStateSetEpoch = set.sssEpoch or 0 })
end

local function member_group(set)
    local addrs = {}
    for id, b in pairs(set.brokers) do
        addrs[math.tointeger(tonumber(id))] = b.addr
    end
    return { cluster = set.clusterName, brokerName = set.brokerName, brokerAddrs = fastjson.map(addrs) }
end

local function master_ext(set, ext)
    ext = ext or {}
    if set.master ~= nil then
        ext.masterBrokerId = tostring(set.master)
        ext.masterAddress = broker_addr(set, set.master)
    end
    ext.masterEpoch = tostring(set.masterEpoch or 0)
    ext.syncStateSetEpoch = tostring(set.sssEpoch or 0)
    return ext
end

-- }}}

-- {{{ Election

--- The candidates rmq.policy.elect sees for a set.  A broker reporting a
--- master epoch the controller never gave (beyond the set's) reports
--- nonsense, forged or from a store that is not this set's: it is given
--- as not alive, with `suspect` saying why, so no policy that honours
--- `alive` elects it.
function M.candidates(set)
    local out = {}
    local epoch = set.masterEpoch or 0
    for sid, b in pairs(set.brokers) do
        local id = math.tointeger(tonumber(sid))
        local r = record(set, id)
        local c = {
            brokerId = id, address = b.addr,
            maxOffset = r and r.maxOffset or 0, epoch = r and r.epoch or 0,
            priority = r and r.priority or 0, lastHeartbeat = r and r.wall or nil,
            alive = alive(set, id), inSyncStateSet = in_sss(set, id),
        }
        if c.epoch > epoch then
            c.alive = false
            c.suspect = ("reports master epoch %d, beyond the set's %d"):format(c.epoch, epoch)
            log.warn("controller: %s broker %d %s; not a candidate", set.brokerName, id, c.suspect)
        end
        out[#out + 1] = c
    end
    table.sort(out, function(a, b) return a.brokerId < b.brokerId end)
    return out
end

local elect_fn, elect_gen = nil, nil

local function elect_policy()
    local gen = policy.generation()
    if elect_fn == nil or gen ~= elect_gen then
        local fn, err = policy.resolve(S.conf.electPolicy, "elect", "rmq.policy.elect")
        if fn == nil then
            log.warn("electPolicy %s: %s; using rmq.policy.elect", tostring(S.conf.electPolicy), tostring(err))
            fn = require("rmq.policy.elect").elect
        end
        elect_fn, elect_gen = fn, gen
    end
    return elect_fn
end

--- Elects a master for `name`: broker_id -1 when the controller itself
--- asks (a dead master), else the asking/designated broker's id.
function M.elect(name, cluster, broker_id, designate)
    return update(name, function(set)
        if not set then
            return reply.error(C.BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        end
        if cluster and cluster ~= "" and cluster ~= set.clusterName then
            return reply.error(C.INVALID_REQUEST, ("broker set %s is in cluster %s, not %s")
                :format(name, tostring(set.clusterName), cluster))
        end
        if broker_id ~= -1 and set.brokers[tostring(broker_id)] == nil then
            return reply.error(C.BROKER_NEED_TO_BE_REGISTERED,
                ("BrokerId: %d hasn't been registered in broker-set: %s"):format(broker_id, name))
        end
        local old = set.master
        local new
        if not set.elected and broker_id ~= -1 then
            new = broker_id    -- the first master of a set: whoever asks first (5.x)
        end
        local why
        if new == nil then
            local ok, id, w = pcall(elect_policy(), M.candidates(set), {
                clusterName = set.clusterName, brokerName = name, oldMaster = old,
                prefer = designate and broker_id ~= -1 and broker_id or nil,
                unclean = S.conf.enableElectUncleanMaster,
            })
            if not ok then
                log.error("electPolicy failed: %s", tostring(id))
                id, w = nil, "the election policy failed"
            end
            if id ~= nil and set.brokers[tostring(id)] == nil then
                log.error("electPolicy chose %s, not a member of %s; ignored", tostring(id), name)
                id, w = nil, "the election policy chose a broker outside the set"
            end
            new, why = id, w
        end
        if new ~= nil and new == old then
            local r = reply.error(C.MASTER_STILL_EXIST, ("The old master %s is still alive, not need to elect"
                .. " new master for broker %s"):format(old, name), master_ext(set))
            r.body = fastjson.encode({ brokerMemberGroup = member_group(set), syncStateSet = set.sss })
            return r
        end
        if new ~= nil then
            local n = {}
            for k, v in pairs(set) do
                n[k] = v
            end
            n.master, n.masterEpoch, n.sss = new, (set.masterEpoch or 0) + 1, { new }
            n.sssEpoch, n.elected = (set.sssEpoch or 0) + 1, true
            local ext = master_ext(n)
            local r = reply.ok(ext, fastjson.encode({ brokerMemberGroup = member_group(n), syncStateSet = { new } }))
            return r, n
        end
        log.warn("controller: no new master for %s: %s", name, tostring(why))
        if broker_id == -1 then
            if old == nil then
                return reply.error(C.MASTER_NOT_AVAILABLE, "no master and none electable: " .. tostring(why))
            end
            local n = {}
            for k, v in pairs(set) do
                n[k] = v
            end
            n.master = nil
            return reply.error(C.MASTER_NOT_AVAILABLE,
                "Old master has down and failed to elect a new broker master"), n
        end
        return reply.error(C.ELECT_MASTER_FAILED, "Failed to elect a new master: " .. tostring(why))
    end)
end

-- Whether any broker of a set is alive (5.x's scanNeedReelectBrokerSets
-- re-elects a set only then).
local function any_alive(set)
    for id in pairs(set.brokers) do
        if alive(set, id) then
            return true
        end
    end
    return false
end

--- The leader's scan: sets whose master stopped heartbeating get a new
--- one.  A controller that just started has heard nobody yet: it waits
--- one default heartbeat timeout before judging a master it never heard.
--- As in 5.x, a set none of whose brokers is alive keeps its master: an
--- election could only clear it, and a 5.x broker asks ELECT_MASTER
--- before its first heartbeat, so its set would lose the master it was
--- just given (logged once while it lasts).
function M.scan()
    if not M.is_leader() then
        return
    end
    M.expire_heartbeats()
    local sets = read_all_sets()
    if sets == nil then
        return
    end
    local young = core.mono_ms() - S.started < DEFAULT_HEARTBEAT_TIMEOUT
    local was = S.kept
    S.kept = {}
    for _, set in ipairs(sets) do
        local m = set.master
        if m ~= nil and not alive(set, m) then
            local heard = record(set, m) ~= nil
            if (heard or not young) and not any_alive(set) then
                S.kept[set.brokerName] = true
                if not was[set.brokerName] then
                    log.info("controller: master %d of %s is silent and no broker of the set is alive: kept", m,
                        set.brokerName)
                end
            elseif heard or not young then
                log.warn("controller: master %d of %s stopped heartbeating; electing", m, set.brokerName)
                local r, n = M.elect(set.brokerName, nil, -1, false)
                if n and n.master then
                    S.elections = S.elections + 1
                    metrics.replica("elections", S.elections)
                    log.info("controller: %s elected broker %d (%s) master, epoch %d", set.brokerName,
                        n.master, tostring(broker_addr(n, n.master)), n.masterEpoch)
                    M.notify(n)
                elseif r then
                    log.warn("controller: election for %s: %s", set.brokerName, tostring(r.remark))
                end
            end
        end
    end
end

-- Tells every member of a set about its new master (5.x
-- notifyBrokerRoleChanged: NOTIFY_BROKER_ROLE_CHANGED, oneway).
function M.notify(set)
    if not S.conf.notifyBrokerRoleChanged then
        return
    end
    local net = require "rmq.net"
    for _, b in pairs(set.brokers) do
        local ok = net.oneway(b.addr, { code = req.NOTIFY_BROKER_ROLE_CHANGED, ext = master_ext(set, {}),
            body = sss_body(set) })
        if not ok then
            log.debug("controller: could not notify %s", tostring(b.addr))
        end
    end
end

-- }}}

-- {{{ Handlers

local function need_leader(fn)
    return function(ctx, cmd, h)
        if not M.is_leader() then
            return not_leader()
        end
        return fn(ctx, cmd, h)
    end
end

local H = {}

H[req.CONTROLLER_GET_NEXT_BROKER_ID] = {
    header = { { "clusterName", "string", true }, { "brokerName", "string", true } },
    run = need_leader(function(_, _, h)
        local set, err = read_set(h.brokerName)
        if set == nil then
            return not_leader(tostring(err))
        end
        if set and set.clusterName ~= h.clusterName then
            return reply.error(C.INVALID_REQUEST, ("broker set %s is in cluster %s, not %s")
                :format(h.brokerName, tostring(set.clusterName), h.clusterName))
        end
        return reply.ok({ clusterName = h.clusterName, brokerName = h.brokerName,
            nextBrokerId = tostring(set and set.nextId or FIRST_ID) })
    end),
}

H[req.CONTROLLER_APPLY_BROKER_ID] = {
    header = { { "clusterName", "string", true }, { "brokerName", "string", true },
               { "appliedBrokerId", "long", true }, { "registerCheckCode", "string", true } },
    run = function(_, _, h)
        local id, code = h.appliedBrokerId, h.registerCheckCode
        local addr = code:match("^([^;]+)")
        if addr == nil or id < FIRST_ID then
            return reply.error(C.BROKER_ID_INVALID, ("Fail to apply brokerId: %d in broker-set: %s")
                :format(id, h.brokerName))
        end
        return update(h.brokerName, function(set)
            local ext = { clusterName = h.clusterName, brokerName = h.brokerName }
            if not set then
                local n, cerr = S.etcd:count(key("sets", ""))
                if n == nil then
                    return not_leader(tostring(cerr))
                elseif n >= S.conf.controllerMaxBrokerSets then
                    return reply.error(C.BROKER_ID_INVALID, ("the controller has %d broker sets"
                        .. " (controllerMaxBrokerSets)"):format(n))
                end
                if id ~= FIRST_ID then
                    return reply.error(C.BROKER_ID_INVALID, ("Broker-set: %s hasn't been registered in"
                        .. " controller, but broker try to apply brokerId: %d"):format(h.brokerName, id))
                end
                set = { clusterName = h.clusterName, brokerName = h.brokerName, nextId = FIRST_ID,
                        brokers = {}, sss = {}, masterEpoch = 0, sssEpoch = 0, elected = false }
            elseif set.clusterName ~= h.clusterName then
                return reply.error(C.INVALID_REQUEST, ("broker set %s is in cluster %s, not %s")
                    :format(h.brokerName, tostring(set.clusterName), h.clusterName))
            end
            local b = set.brokers[tostring(id)]
            if b ~= nil then
                if b.checkCode == code then
                    return reply.ok(ext)            -- the same broker again
                end
                return reply.error(C.BROKER_ID_INVALID, ("Fail to apply brokerId: %d in broker-set: %s")
                    :format(id, h.brokerName))
            end
            if set_count(set) >= S.conf.controllerMaxBrokersPerSet then
                return reply.error(C.BROKER_ID_INVALID, ("broker set %s has %d brokers"
                    .. " (controllerMaxBrokersPerSet)"):format(h.brokerName, set_count(set)))
            end
            set.brokers[tostring(id)] = { addr = addr, checkCode = code }
            if id >= (set.nextId or FIRST_ID) then
                set.nextId = id + 1
            end
            return reply.ok(ext), set
        end)
    end,
}

H[req.CONTROLLER_REGISTER_BROKER] = {
    header = { { "clusterName", "string", true }, { "brokerName", "string", true },
               { "brokerId", "long", true }, { "brokerAddress", "string", true } },
    run = function(_, _, h)
        return update(h.brokerName, function(set)
            if not set then
                return reply.error(C.BROKER_NEED_TO_BE_REGISTERED,
                    ("Broker-set: %s hasn't been registered in controller"):format(h.brokerName))
            end
            if set.clusterName ~= h.clusterName then
                return reply.error(C.INVALID_REQUEST, ("broker set %s is in cluster %s, not %s")
                    :format(h.brokerName, tostring(set.clusterName), h.clusterName))
            end
            local b = set.brokers[tostring(h.brokerId)]
            if b == nil then
                return reply.error(C.BROKER_NEED_TO_BE_REGISTERED,
                    ("BrokerId: %d hasn't been registered in broker-set: %s"):format(h.brokerId, h.brokerName))
            end
            local ext = { clusterName = h.clusterName, brokerName = h.brokerName }
            if set.master ~= nil and alive(set, set.master) then
                master_ext(set, ext)
            end
            local r = reply.ok(ext, sss_body(set))
            if b.addr ~= h.brokerAddress then
                b.addr = h.brokerAddress
                return r, set
            end
            return r
        end)
    end,
}

H[req.BROKER_HEARTBEAT] = {
    header = { { "clusterName", "string", false }, { "brokerAddr", "string", false },
               { "brokerName", "string", false }, { "brokerId", "long", false },
               { "epoch", "int", false }, { "maxOffset", "long", false },
               { "confirmOffset", "long", false }, { "heartbeatTimeoutMills", "long", false },
               { "electionPriority", "int", false } },
    run = function(_, _, h)
        if h.clusterName == nil or h.brokerName == nil or h.brokerId == nil then
            return reply.error(C.INVALID_REQUEST, "heartbeat without clusterName, brokerName or brokerId")
        end
        if (h.epoch or 0) < 0 or (h.maxOffset or 0) < 0 or (h.confirmOffset or 0) < 0 then
            return reply.error(C.INVALID_REQUEST, "heartbeat with a negative epoch or offset")
        end
        local k = live_key(h.clusterName, h.brokerName, h.brokerId)
        local r = S.live[k]
        if r == nil then
            if S.live_count >= S.conf.controllerMaxBrokers then
                return reply.error(C.INVALID_REQUEST, ("the controller knows %d brokers"
                    .. " (controllerMaxBrokers)"):format(S.live_count))
            end
            r = {}
            S.live[k] = r
            S.live_count = S.live_count + 1
        end
        r.cluster, r.addr = h.clusterName, h.brokerAddr
        r.epoch, r.maxOffset, r.confirmOffset = h.epoch or 0, h.maxOffset or 0, h.confirmOffset or 0
        r.priority = h.electionPriority or 0
        local t = h.heartbeatTimeoutMills
        r.timeout = (t and t > 0) and math.min(t, 600000) or DEFAULT_HEARTBEAT_TIMEOUT
        r.last, r.wall = core.mono_ms(), core.now_ms()
        return reply.ok()
    end,
}

H[req.CONTROLLER_ELECT_MASTER] = {
    header = { { "clusterName", "string", false }, { "brokerName", "string", true },
               { "brokerId", "long", false }, { "designateElect", "bool", false } },
    run = function(_, _, h)
        local r, n = M.elect(h.brokerName, h.clusterName, h.brokerId or -1, h.designateElect)
        if n and n.master then
            S.elections = S.elections + 1
            metrics.replica("elections", S.elections)
            log.info("controller: %s elected broker %d master, epoch %d (asked by %s)", h.brokerName,
                n.master, n.masterEpoch, tostring(h.brokerId))
            M.notify(n)
        end
        return r
    end,
}

H[req.CONTROLLER_ALTER_SYNC_STATE_SET] = {
    header = { { "brokerName", "string", true }, { "masterBrokerId", "long", true },
               { "masterEpoch", "int", true } },
    run = function(_, cmd, h)
        local body = cjson.decode(cmd.body or "")
        if type(body) ~= "table" or type(body.syncStateSet) ~= "table" then
            return reply.error(C.INVALID_REQUEST, "the body must be a SyncStateSet")
        end
        local new, seen = {}, {}
        for _, v in ipairs(body.syncStateSet) do
            local id = math.tointeger(v)
            if id == nil then
                return reply.error(C.INVALID_REQUEST, "the SyncStateSet holds broker ids")
            end
            if not seen[id] then
                seen[id] = true
                new[#new + 1] = id
            end
        end
        local epoch = math.tointeger(body.syncStateSetEpoch) or -1
        local r, n = update(h.brokerName, function(set)
            if not set then
                return reply.error(C.ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
            end
            local same = #set.sss == #new
            for _, id in ipairs(set.sss) do
                same = same and seen[id] == true
            end
            if same then
                return reply.error(C.ALTER_SYNC_STATE_SET_FAILED,
                    "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
            end
            if set.master == nil or set.master ~= h.masterBrokerId then
                return reply.error(C.INVALID_MASTER, ("Rejecting alter syncStateSet request because the"
                    .. " current leader is:{%s}, not {%d}"):format(tostring(set.master), h.masterBrokerId))
            end
            if h.masterEpoch ~= (set.masterEpoch or 0) then
                return reply.error(C.FENCED_MASTER_EPOCH, ("Rejecting alter syncStateSet request because"
                    .. " the current master epoch is:{%d}, not {%d}"):format(set.masterEpoch or 0, h.masterEpoch))
            end
            if epoch ~= (set.sssEpoch or 0) then
                return reply.error(C.FENCED_SYNC_STATE_SET_EPOCH, ("Rejecting alter syncStateSet request"
                    .. " because the current syncStateSet epoch is:{%d}, not {%d}"):format(set.sssEpoch or 0, epoch))
            end
            for _, id in ipairs(new) do
                if set.brokers[tostring(id)] == nil then
                    return reply.error(C.INVALID_REPLICAS, ("Rejecting alter syncStateSet request because"
                        .. " the replicas {%d} don't exist"):format(id))
                end
                if not alive(set, id) then
                    return reply.error(C.BROKER_NOT_ALIVE, ("Rejecting alter syncStateSet request because"
                        .. " the replicas {%d} don't alive"):format(id))
                end
            end
            if not seen[set.master] then
                return reply.error(C.ALTER_SYNC_STATE_SET_FAILED, ("Rejecting alter syncStateSet request"
                    .. " because the newSyncStateSet don't contains origin leader {%d}"):format(set.master))
            end
            set.sss, set.sssEpoch = new, (set.sssEpoch or 0) + 1
            return reply.ok({ newSyncStateSetEpoch = tostring(set.sssEpoch) }, sss_body(set)), set
        end)
        if n then
            log.info("controller: %s SyncStateSet now %s (epoch %d)", h.brokerName,
                table.concat(n.sss, ","), n.sssEpoch)
        end
        return r
    end,
}

H[req.CONTROLLER_GET_REPLICA_INFO] = {
    header = { { "brokerName", "string", true } },
    run = need_leader(function(_, _, h)
        local set, err = read_set(h.brokerName)
        if set == nil then
            return not_leader(tostring(err))
        end
        if not set then
            return reply.error(C.BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        end
        local ext = { masterEpoch = tostring(set.masterEpoch or 0) }
        if set.master ~= nil then
            ext.masterBrokerId = tostring(set.master)
            ext.masterAddress = broker_addr(set, set.master)
        end
        return reply.ok(ext, sss_body(set))
    end),
}

local function identities(set, ids)
    local out = {}
    for _, id in ipairs(ids) do
        out[#out + 1] = { brokerName = set.brokerName, brokerId = id,
            brokerAddress = broker_addr(set, id) or "", alive = alive(set, id) }
    end
    if #out == 0 then
        out = setmetatable(out, fastjson.array_mt)
    end
    return out
end

--- BrokerReplicasInfo of the named sets (all when names is empty).
function M.sync_state_data(names)
    local sets, err = read_all_sets()
    if sets == nil then
        return nil, err
    end
    local want = nil
    if names and #names > 0 then
        want = {}
        for _, n in ipairs(names) do
            want[n] = true
        end
    end
    local tbl = {}
    for _, set in ipairs(sets) do
        if want == nil or want[set.brokerName] then
            local ins, outs = {}, {}
            for sid in pairs(set.brokers) do
                local id = math.tointeger(tonumber(sid))
                if in_sss(set, id) then
                    ins[#ins + 1] = id
                else
                    outs[#outs + 1] = id
                end
            end
            table.sort(ins)
            table.sort(outs)
            tbl[set.brokerName] = {
                masterBrokerId = set.master, masterAddress = broker_addr(set, set.master) or "",
                masterEpoch = set.masterEpoch or 0, syncStateSetEpoch = set.sssEpoch or 0,
                inSyncReplicas = identities(set, ins), notInSyncReplicas = identities(set, outs),
            }
        end
    end
    return { replicasInfoTable = tbl }, sets
end

H[req.CONTROLLER_GET_SYNC_STATE_DATA] = need_leader(function(_, cmd)
    local names = {}
    if cmd.body and #cmd.body > 0 then
        local t = cjson.decode(cmd.body)
        if type(t) ~= "table" then
            return reply.error(C.INVALID_REQUEST, "the body must be a JSON list of broker names")
        end
        for _, n in ipairs(t) do
            names[#names + 1] = tostring(n)
        end
    end
    local info, err = M.sync_state_data(names)
    if info == nil then
        return not_leader(tostring(err))
    end
    return reply.ok(nil, fastjson.encode(info))
end)

H[req.CONTROLLER_GET_METADATA_INFO] = function()
    -- From memory, as 5.x answers it: the campaign round reads the
    -- members every TTL/3, so this request (every broker's way to find
    -- the active controller) costs etcd nothing and answers while etcd
    -- is down.
    local peers = S.peers or { S.addr }
    local leader = M.is_leader()
    return reply.ok({
        group = S.conf.etcdKeyPrefix,
        controllerLeaderId = S.leader_addr and S.leader_addr or nil,
        controllerLeaderAddress = S.leader_addr,
        isLeader = tostring(leader),
        peers = table.concat(peers, ";"),
    })
end

H[req.CLEAN_BROKER_DATA] = {
    header = { { "clusterName", "string", false }, { "brokerName", "string", true },
               { "brokerControllerIdsToClean", "string", false }, { "isCleanLivingBroker", "bool", false } },
    run = function(_, _, h)
        local ids = nil
        local list = h.brokerControllerIdsToClean
        if list and list ~= "" then
            ids = {}
            for s in list:gmatch("[^;]+") do
                local id = math.tointeger(tonumber(s))
                if id == nil then
                    return reply.error(C.INVALID_CLEAN_BROKER_METADATA,
                        "Please set the option <brokerControllerIdsToClean> according to the format")
                end
                ids[#ids + 1] = id
            end
        end
        return update(h.brokerName, function(set)
            if not set then
                return reply.error(C.INVALID_CLEAN_BROKER_METADATA, ("Broker %s is not existed,clean broker"
                    .. " data failure."):format(h.brokerName))
            end
            if h.clusterName and h.clusterName ~= "" and h.clusterName ~= set.clusterName then
                return reply.error(C.INVALID_REQUEST, ("broker set %s is in cluster %s, not %s")
                    :format(h.brokerName, tostring(set.clusterName), h.clusterName))
            end
            if not h.isCleanLivingBroker then
                if ids == nil and set.master ~= nil then
                    return reply.error(C.INVALID_CLEAN_BROKER_METADATA,
                        ("Broker %s is still alive, clean up failure"):format(h.brokerName))
                end
                for _, id in ipairs(ids or {}) do
                    if alive(set, id) then
                        return reply.error(C.INVALID_CLEAN_BROKER_METADATA,
                            ("Broker [%s,  %d] is still alive, clean up failure"):format(h.brokerName, id))
                    end
                end
            end
            if ids == nil then
                return reply.ok(), false
            end
            for _, id in ipairs(ids) do
                set.brokers[tostring(id)] = nil
                if set.master == id then
                    set.master = nil
                end
                local keep = {}
                for _, x in ipairs(set.sss) do
                    if x ~= id then
                        keep[#keep + 1] = x
                    end
                end
                set.sss = keep
            end
            if next(set.brokers) == nil then
                return reply.ok(), false
            end
            return reply.ok(), set
        end)
    end,
}

-- UPDATE_CONTROLLER_CONFIG (1009): as 5.x, a Properties body changing
-- this one controller's keys in memory (not the conf file, not the other
-- controllers).  Only the keys below change live; another controller key
-- is refused unless its value is the one in force (the etcd keys, the
-- limits: a restart); keys the controller does not know are ignored, as
-- 5.x's Configuration ignores them, and the reply says which.  Every
-- entry is checked before any is applied.
M.LIVE = {
    scanNotActiveBrokerInterval = { min = 100, max = 60000 },
    enableElectUncleanMaster = {},
    notifyBrokerRoleChanged = {},
    electPolicy = {},
}

local function live_value(name, text)
    local conf_mod = require "rmq.conf"
    local e = conf_mod.describe(name)
    if e == nil or e.ignored or not e.roles.controller then
        return nil, "unknown"
    end
    local v, err = conf_mod.coerce(name, text)
    if v == nil then
        return nil, err
    end
    local live = M.LIVE[name]
    if live == nil then
        if v == S.conf[name] and not e.secret then
            return v
        end
        return nil, ("key '%s' cannot be changed while rmq runs; set it in the conf file and restart"
            .. " (live keys: %s)"):format(name, table.concat(require("rmq.strings").sorted_keys(M.LIVE), ", "))
    end
    if live.min and (v < live.min or v > live.max) then
        return nil, ("key '%s' may be changed live only within %d..%d, got %s"):format(name, live.min, live.max, text)
    end
    if e.check then
        local why = e.check(v)
        if why then
            return nil, ("key '%s' %s"):format(name, why)
        end
    end
    if name == "electPolicy" then
        local fn, perr = policy.resolve(v, "elect", "rmq.policy.elect")
        if fn == nil then
            return nil, ("key 'electPolicy': %s"):format(tostring(perr))
        end
    end
    return v
end

H[req.UPDATE_CONTROLLER_CONFIG] = function(ctx, cmd)
    log.info("updateConfig called by %s", tostring(ctx and ctx.peer))
    if cmd.body == nil or #cmd.body == 0 then
        return reply.ok()
    end
    local props, order = require("rmq.properties").parse(cmd.body)
    local good, unknown = {}, {}
    for _, k in ipairs(order) do
        local v, why = live_value(k, props[k])
        if v == nil and why == "unknown" then
            unknown[#unknown + 1] = k
        elseif v == nil then
            log.warn("updateConfig from %s refused: %s", tostring(ctx and ctx.peer), why)
            return reply.system_error(why)
        elseif M.LIVE[k] then
            good[#good + 1] = { k, v }
        end
    end
    for _, kv in ipairs(good) do
        S.conf[kv[1]] = kv[2]
        log.info("config %s = %s (set by %s)", kv[1], tostring(kv[2]), tostring(ctx and ctx.peer))
    end
    elect_fn = nil          -- electPolicy may have changed
    if #unknown > 0 then
        log.warn("updateConfig from %s: ignored unknown keys %s", tostring(ctx and ctx.peer),
            table.concat(unknown, ", "))
        return { code = 0, remark = "ignored unknown keys: " .. table.concat(unknown, ", ") }
    end
    return reply.ok()
end

H[req.GET_CONTROLLER_CONFIG] = function()
    local lines = {}
    local keys = { "etcdEndpoints", "etcdKeyPrefix", "etcdLeaseTtlSeconds", "etcdRequestTimeoutMillis",
        "etcdMaxResponseBytes", "etcdMaxCallsInFlight",
        "scanNotActiveBrokerInterval", "enableElectUncleanMaster", "electPolicy", "notifyBrokerRoleChanged",
        "controllerMaxBrokers", "controllerMaxBrokerSets", "controllerMaxBrokersPerSet" }
    for _, k in ipairs(keys) do
        lines[#lines + 1] = k .. "=" .. tostring(S.conf[k])
    end
    return reply.ok(nil, table.concat(lines, "\n") .. "\n")
end

-- }}}

-- A handler answers one reply: update()'s second value (the new set)
-- stays here.
local function one(fn)
    return function(...)
        return (fn(...))
    end
end

function M.new(conf, etcd, token, addr)
    S.conf, S.etcd, S.token, S.addr = conf, etcd, token, addr
    S.started = core.mono_ms()
    metrics.replica("elections", 0)
    metrics.replica("active", 0)
    local out = {}
    for code, h in pairs(H) do
        if type(h) == "table" then
            out[code] = { header = h.header, run = one(h.run) }
        else
            out[code] = one(h)
        end
    end
    return out
end

return M
