-- Role switches of a broker in a replicated group, decided by someone
-- else (issue 24: the controller client; a person at the live console),
-- fenced by epochs as RocketMQ 5's AutoSwitchHAService fences them.
--
-- The two entry points (b: the broker object rmq.broker.init passes to
-- its modules, main thread; both return true, or nil and a message; a
-- stale or malformed call changes nothing):
--
--   change_to_master(b, {epoch = E, sync_state_set = {ids}, broker_id = ID})
--       This broker is the master of its group from epoch E on.  E must
--       be above the last epoch of this store's epoch file (equal: the
--       same term again, only the SyncStateSet is updated).  Appends
--       "E-<this log's end>" to the epoch file, stops following any
--       master, takes sends again (brokerPermission back to the conf's)
--       and registers with brokerId 0, so the NameServers' route follows.
--       sync_state_set (broker ids, this one included; broker_id is this
--       broker's id in the controller) is where the master's own upkeep
--       starts: every second members not caught up for
--       haMaxTimeSlaveNotCatchup leave and caught-up slaves join, each
--       change proposed to set_sync_state_set_handler's fn (the controller
--       client: ALTER_SYNC_STATE_SET) or, with none, applied; with
--       allAckInSyncStateSet (SYNC_MASTER) a send is acknowledged only
--       when every other member's HA connection acknowledged it.
--
--   change_to_slave(b, {master_addr = "ip:port", master_ha_addr = "ip:port",
--                       epoch = E, broker_id = ID})
--       This broker follows master_ha_addr (left out: the haServerAddr the
--       master names in its GET_BROKER_EPOCH_CACHE reply) from epoch E on (ID >= 1, its
--       brokerId at the NameServers).  E must not be below the last epoch
--       of this store's epoch file.  The master's epoch entries are read
--       with GET_BROKER_EPOCH_CACHE (1007, 5.x's) from master_addr; the
--       log is cut back to the end of the last epoch both share (5.x's
--       findConsistentPoint) before it takes anything from the master: the
--       HA client's first offset is that point, the master sends from
--       there, and the slave truncates what follows, logging how many
--       bytes and messages it dropped (only ever unacknowledged data).
--       Sends are refused from then on (brokerPermission 4, read-only,
--       as a 4.x slave refuses them), and it registers as ID.  The slave
--       sync asks master_addr from then on (rmq.broker.register's
--       set_master: not only once a NameServer's answer names it).
--
-- The epoch file is 5.x's: storePathRootDir/epochFileCheckpoint, the
-- number of entries on the first line, then "epoch-startOffset" lines
-- (CheckpointFile + EpochFileCache.EpochEntrySerializer).
--
-- What follows a role at run time, both ways, whatever brokerRole the
-- broker was started with: the HA service (rmq.ha set_role); the
-- master the slave sync asks (rmq.broker.register.set_master); the
-- registration (brokerId, brokerPermission: run-time settings, as
-- UPDATE_BROKER_CONFIG's); brokerRole itself (a run-time setting every
-- worker's conf follows); the store's role (st:set_role: a slave's store
-- is fenced, every local put refused, and its pulls do not correct
-- offsets; a master with allAckInSyncStateSet waits for its slaves); the
-- send, pull, reply and END_TRANSACTION paths (they read the store's
-- role per request); POP (C asks the store's role per request; the
-- revive thread pauses while the store is fenced); and the master-only
-- services: delayed-message delivery, the transaction check and the
-- timer service (RIP-43), stopped on change_to_slave (the timer files
-- discarded: the new master delivers, and this log may be cut back) and
-- started on change_to_master (the timer wheel rebuilt from the commit
-- log).
local store = require("rmq.store")
local configfile = require("rmq.configfile")
local net = require("rmq.net")
local log = require("rmq.log")
local codes = require("rmq.codes")
local fastjson = require("rmq.fastjson")
local reply = require("rmq.reply")
local tables = require("rmq.broker.tables")
local shared = require("rmq.shared")
local core = require("rmq.core")

local M = {}

M.FILE = "epochFileCheckpoint"
M.MAX_ENTRIES = 100000          -- an epoch file past this is not ours
M.EPOCH_TIMEOUT_MS = 5000       -- GET_BROKER_EPOCH_CACHE to the new master

local INT_MAX = 2147483647      -- epochs are Java ints

-- The master's view of which HA connection is which broker: a slave
-- names its id and its end of the HA connection in the
-- GET_BROKER_EPOCH_CACHE it sends every second (rmq's ext fields, which
-- a 5.x broker ignores).  Keyed by that "ip:port"; at most PEERS_MAX
-- entries, pruned every second to the connections the master has.
local peers = shared.map("broker.replica.peers")
M.PEERS_MAX = 256

-- {{{ The epoch file

function M.path(conf)
    return (conf.storePathRootDir or ".") .. "/" .. M.FILE
end

--- Parses an epoch file's text: entries {epoch=, start=} sorted by
--- epoch, or nil, err.  An empty text is no entries.
function M.parse(text)
    if text == nil or text == "" then
        return {}
    end
    local lines = {}
    for line in (text:gsub("\r", "")):gmatch("[^\n]+") do
        lines[#lines + 1] = line
        if #lines > M.MAX_ENTRIES + 1 then
            return nil, "more than " .. M.MAX_ENTRIES .. " entries"
        end
    end
    local n = tonumber(lines[1] or "")
    if n == nil or math.type(n) ~= "integer" or n < 0 then
        return nil, "the first line is not the number of entries"
    end
    local out = {}
    for i = 2, #lines do
        local e, s = lines[i]:match("^(%d+)%-(%d+)$")
        local epoch, start = tonumber(e), tonumber(s)
        if epoch == nil or start == nil or epoch > INT_MAX or math.type(start) ~= "integer" then
            return nil, ("line %d is not epoch-startOffset: %q"):format(i, lines[i]:sub(1, 40))
        end
        local last = out[#out]
        if last and (epoch <= last.epoch or start < last.start) then
            return nil, ("line %d: epochs and offsets must grow"):format(i)
        end
        out[#out + 1] = { epoch = epoch, start = start }
    end
    if #out ~= n then
        return nil, ("expected %d entries, found %d"):format(n, #out)
    end
    return out
end

function M.format(entries)
    local out = { tostring(#entries) }
    for _, e in ipairs(entries) do
        out[#out + 1] = ("%d-%d"):format(e.epoch, e.start)
    end
    return table.concat(out, "\n") .. "\n"
end

function M.read(conf)
    local f = io.open(M.path(conf), "rb")
    if f == nil then
        return {}
    end
    local text = f:read("a")
    f:close()
    local entries, err = M.parse(text)
    if entries == nil then
        return nil, M.FILE .. ": " .. err
    end
    return entries
end

function M.write(conf, entries)
    if #entries == 0 then   -- (5.x leaves the file as it is too)
        return true
    end
    return store.atomic_write(M.path(conf), M.format(entries))
end

--- 5.x's findConsistentPoint: the end of the last epoch both lists hold
--- with the same start offset, each entry ending where the next starts
--- and the last at its side's log end (mine_end, theirs_end).  -1: none.
function M.consistent_point(mine, mine_end, theirs, theirs_end)
    local by_epoch = {}
    for i, e in ipairs(theirs) do
        by_epoch[e.epoch] = { start = e.start, stop = theirs[i + 1] and theirs[i + 1].start or theirs_end }
    end
    for i = #mine, 1, -1 do
        local e = mine[i]
        local t = by_epoch[e.epoch]
        if t and t.start == e.start then
            local stop = mine[i + 1] and mine[i + 1].start or mine_end
            return math.min(stop, t.stop)
        end
    end
    return -1
end

-- This store's last role decision (rmq's file, beside the epoch file):
-- {"role":"master"|"slave","brokerId":N,"epoch":E}.
M.ROLE_FILE = "replicaRole.json"

local function role_path(conf)
    return (conf.storePathRootDir or ".") .. "/" .. M.ROLE_FILE
end

local function save_role(conf, role, id, epoch)
    return configfile.write(role_path(conf), fastjson.encode({ role = role, brokerId = id, epoch = epoch }))
end

local function load_role(conf)
    local t = configfile.read(role_path(conf))   -- .bak when torn
    if type(t) ~= "table" or not fastjson.int(t.brokerId) then
        return nil
    end
    return { role = t.role, broker_id = fastjson.int(t.brokerId), epoch = fastjson.int(t.epoch) }
end

-- }}}

-- {{{ State (main thread)

local state = { role = nil, epoch = nil, sync_state_set = nil, broker_id = nil, master = nil }
local last_in_sync = {}   -- master: broker id -> core.mono_ms() it was last caught up
local name_ack_peers      -- (below, with the SyncStateSet)
local ACK_PEERS_MAX = 4000 -- ha:set_ack_peers's list, bytes (HA_ACK_PEERS_MAX)

function M.state()
    return { role = state.role, epoch = state.epoch, sync_state_set = state.sync_state_set,
             broker_id = state.broker_id, master = state.master, pending = state.pending }
end

local function ha_service()
    return require("rmq.broker.ha").service()
end

local function check_int(v, what, min)
    if math.type(v) ~= "integer" or v < min or v > INT_MAX then
        return nil, ("%s must be an integer >= %d, got %s"):format(what, min, tostring(v))
    end
    return v
end

local function check_addr(v, what)
    if type(v) ~= "string" or not v:match("^[%w%.%-:%[%]]+:%d+$") or #v > 255 then
        return nil, ("%s must be \"host:port\", got %s"):format(what, tostring(v))
    end
    return v
end

-- The run-time settings a role implies (as UPDATE_BROKER_CONFIG sets
-- them), then a registration that waits for the NameServers.
local function apply_settings(b, id, perm)
    local conf = b.conf
    local changed = false
    for k, v in pairs({ brokerId = id, brokerPermission = perm }) do
        if tables.sync_conf(conf)[k] ~= v then
            tables.set_setting(k, v)
            conf[k] = v
            changed = true
        end
    end
    if changed then
        tables.new("broker.config"):bump()
        require("rmq.broker.topics").table:bump()
    end
    local register = require("rmq.broker.register")
    local ok, err = register.sync(b, (conf.registerBrokerTimeoutMills or 6000) + 1000)
    if not ok then
        log.warn("role change: registration not confirmed yet: %s (the next round retries)", tostring(err))
    end
end

-- The services that write on their own (delayed-message delivery, the
-- transaction check, timer delivery) run on the master only: they stop
-- on change_to_slave and start on change_to_master, whatever role the
-- broker started with (b.role_services_stopped: not running).
local SERVICES = { "schedule", "transaction" }

-- The brokerRole a master serves with: the conf's; with
-- allAckInSyncStateSet SYNC_MASTER while another member's acknowledgement
-- counts (name_ack_peers named one), else ASYNC_MASTER: 5.x waits for the
-- SyncStateSet in controller mode whatever brokerRole says, and answers
-- PUT_OK at once when the set (with what is being proposed) is the master
-- alone (GroupTransferService.doWaitTransfer: syncStateSet.size() <= 1).
-- A broker started as a SLAVE serves as an ASYNC_MASTER.
local function master_role(b)
    if b.conf.allAckInSyncStateSet then
        return (state.ack_peers or "") ~= "" and "SYNC_MASTER" or "ASYNC_MASTER"
    end
    local r = b.role_conf_role or b.conf.brokerRole
    return r ~= "SLAVE" and r or "ASYNC_MASTER"
end

local function stop_services(b, discard_timers)
    if not b.role_services_stopped then
        for _, name in ipairs(SERVICES) do
            local ok, err = pcall(require("rmq.broker." .. name).main_stop, b)
            if not ok then
                log.error("role: stopping the %s service: %s", name, tostring(err))
            end
        end
        b.role_services_stopped = true
    end
    local ok, err = require("rmq.broker.timer").stop_service(b, discard_timers)
    if not ok then
        log.error("role: stopping the timer service: %s", tostring(err))
    end
end

local function start_services(b)
    if not b.role_services_stopped then
        return
    end
    b.role_services_stopped = false
    for _, name in ipairs(SERVICES) do
        local ok, err = pcall(require("rmq.broker." .. name).main_start, b)
        if not ok then
            log.error("role: starting the %s service: %s", name, tostring(err))
        end
    end
    local ok, err = require("rmq.broker.timer").start_service(b)
    if not ok then
        log.error("role: %s", tostring(err))
    end
end

-- The role every worker's conf, and the store, follow.
local function set_role(b, role, fenced)
    b.role_conf_role = b.role_conf_role or b.conf.brokerRole
    b.store:set_role(role, fenced)
    if tables.sync_conf(b.conf).brokerRole ~= role then
        tables.set_setting("brokerRole", role)
        b.conf.brokerRole = role
    end
end

-- The permission a master serves with: the conf file's.
local function master_perm(b)
    b.role_conf_perm = b.role_conf_perm or b.conf.brokerPermission or 6
    return b.role_conf_perm
end

function M.change_to_master(b, args)
    if type(args) ~= "table" then
        return nil, "change_to_master(b, {epoch=, sync_state_set=, broker_id=})"
    end
    local epoch, err = check_int(args.epoch, "epoch", 1)
    if not epoch then
        return nil, err
    end
    local id = args.broker_id
    if id ~= nil then
        id, err = check_int(id, "broker_id", 0)
        if not id then
            return nil, err
        end
    end
    local sss = args.sync_state_set or {}
    if type(sss) ~= "table" or #sss > 1024 then
        return nil, "sync_state_set must be a list of broker ids"
    end
    for _, v in ipairs(sss) do
        if not check_int(v, "a sync_state_set id", 0) then
            return nil, "sync_state_set must be a list of broker ids"
        end
    end
    local entries
    entries, err = M.read(b.conf)
    if not entries then
        return nil, err
    end
    local last = entries[#entries]
    local st = b.store
    local perm = master_perm(b)
    if last and epoch < last.epoch then
        return nil, ("stale epoch %d: this broker is at epoch %d"):format(epoch, last.epoch)
    end
    if not last or epoch > last.epoch then
        local start = st:max_phy()
        if last and start < last.start then
            return nil, ("this log ends at %d, before epoch %d's start %d"):format(start, last.epoch, last.start)
        end
        if last and start == last.start then
            entries[#entries] = nil   -- (an empty term: 5.x's appendEntry needs a larger offset)
        end
        entries[#entries + 1] = { epoch = epoch, start = start }
        local ok, werr = M.write(b.conf, entries)
        if not ok then
            return nil, "cannot write " .. M.FILE .. ": " .. tostring(werr)
        end
        log.info("role: master of %s at epoch %d from offset %d (SyncStateSet %s)", b.conf.brokerName, epoch,
                 start, table.concat(sss, ","))
    end
    local ha = ha_service()
    if ha then
        require("rmq.broker.ha").take_control(b)
        ha:set_role(false)
        -- allAckInSyncStateSet: every other member must have a send.
        local others = 0
        for _, m in ipairs(sss) do
            if m ~= id then
                others = others + 1
            end
        end
        ha:set_min_acks(b.conf.allAckInSyncStateSet and others or 0)
    end
    state.role, state.epoch, state.sync_state_set = "master", epoch, sss
    state.broker_id, state.master = id, nil
    -- (a new term: no proposal of the last one is pending any more)
    state.pending, state.proposing = nil, nil
    if ha then
        name_ack_peers(b, ha)   -- at once, not at the next pass
    end
    set_role(b, master_role(b), false)
    require("rmq.broker.register").set_master(nil)
    start_services(b)
    local now = core.mono_ms()
    for _, m in ipairs(sss) do
        last_in_sync[m] = math.max(last_in_sync[m] or 0, now)
    end
    local ok, werr = save_role(b.conf, "master", id or 0, epoch)
    if not ok then
        log.warn("role: cannot write %s: %s", M.ROLE_FILE, tostring(werr))
    end
    apply_settings(b, 0, perm)
    return true
end

--- A master cut from its controllers (the controller client's lease,
--- masterLeaseTimeoutMills): fenced = true refuses every local put (the
--- store is fenced) and stops the services that write, until
--- fence(b, false) (the controller confirmed this master again).  A
--- slave's store is always fenced; nothing to do there.
function M.fence(b, fenced)
    if state.role ~= "master" then
        return nil, "not the master"
    end
    b.store:set_role(master_role(b), fenced == true)
    if fenced then
        stop_services(b, false)
    else
        start_services(b)
    end
    return true
end

-- The master's epoch entries and log end (GET_BROKER_EPOCH_CACHE).
local function master_epochs(conf, addr, ext)
    local r = net.call(addr, { code = codes.request.GET_BROKER_EPOCH_CACHE, ext = ext,
                               credentials = require("rmq.client.credentials").of(conf) }, M.EPOCH_TIMEOUT_MS)
    if not r then
        return nil, "no answer from " .. addr
    end
    if r.code ~= 0 then
        return nil, ("%s refused GET_BROKER_EPOCH_CACHE: %s"):format(addr, tostring(r.remark))
    end
    local body = fastjson.decode(r.body or "")
    local max = type(body) == "table" and fastjson.int(body.maxOffset)
    if not max or type(body.epochList) ~= "table" then
        return nil, addr .. " answered GET_BROKER_EPOCH_CACHE without epochList and maxOffset"
    end
    local out = {}
    for _, e in ipairs(body.epochList) do
        local epoch = type(e) == "table" and fastjson.int(e.epoch)
        local start = type(e) == "table" and fastjson.int(e.startOffset)
        if not epoch or not start then
            return nil, addr .. " answered an epoch entry without epoch and startOffset"
        end
        out[#out + 1] = { epoch = epoch, start = start }
    end
    table.sort(out, function(x, y) return x.epoch < y.epoch end)
    return out, max, r.ext and r.ext.haServerAddr
end

function M.change_to_slave(b, args)
    if type(args) ~= "table" then
        return nil, "change_to_slave(b, {master_addr=, master_ha_addr=, epoch=, broker_id=})"
    end
    local epoch, err = check_int(args.epoch, "epoch", 1)
    if not epoch then
        return nil, err
    end
    local id
    id, err = check_int(args.broker_id, "broker_id", 1)
    if not id then
        return nil, err
    end
    local maddr, haddr
    maddr, err = check_addr(args.master_addr, "master_addr")
    if not maddr then
        return nil, err
    end
    if args.master_ha_addr ~= nil then
        haddr, err = check_addr(args.master_ha_addr, "master_ha_addr")
        if not haddr then
            return nil, err
        end
    end
    local conf = b.conf
    local entries
    entries, err = M.read(conf)
    if not entries then
        return nil, err
    end
    local last = entries[#entries]
    if last and epoch < last.epoch then
        return nil, ("stale epoch %d: this broker is at epoch %d"):format(epoch, last.epoch)
    end
    local theirs, their_end, their_ha = master_epochs(conf, maddr)
    if not theirs then
        return nil, their_end
    end
    if haddr == nil then
        haddr, err = check_addr(their_ha, "the master's haServerAddr")
        if not haddr then
            return nil, err
        end
    end
    local tlast = theirs[#theirs]
    if tlast == nil or tlast.epoch ~= epoch then
        return nil, ("master %s is at epoch %s, not %d"):format(maddr, tlast and tostring(tlast.epoch) or "(none)",
                                                              epoch)
    end
    local st = b.store
    local my_end = st:max_phy()
    local trunc = -1
    if #entries > 0 then
        local point = M.consistent_point(entries, my_end, theirs, their_end)
        if point < 0 then
            -- Nothing in common: the master's history replaces ours whole.
            point = math.min(my_end, theirs[1].start)
        end
        if point < my_end then
            trunc = point
            log.warn("role: this log (end %d) holds %d bytes past the last epoch it shares with master %s "
                     .. "(epoch %d); they are dropped as the master's data arrives", my_end, my_end - point, maddr,
                     epoch)
        end
    end
    -- The epoch file: ours up to the common point, then the master's.
    local kept = {}
    local cut = trunc >= 0 and trunc or my_end
    for _, e in ipairs(theirs) do
        if e.start <= cut and (kept[#kept] == nil or e.start > kept[#kept].start) then
            kept[#kept + 1] = { epoch = e.epoch, start = e.start }
        elseif e.start <= cut then
            kept[#kept] = { epoch = e.epoch, start = e.start }
        end
    end
    local ok, werr = M.write(conf, kept)
    if not ok then
        return nil, "cannot write " .. M.FILE .. ": " .. tostring(werr)
    end
    local ha = ha_service()
    if not ha then
        return nil, "the HA service is not running"
    end
    master_perm(b)
    ok, werr = save_role(conf, "slave", id, epoch)
    if not ok then
        return nil, "cannot write " .. M.ROLE_FILE .. ": " .. tostring(werr)
    end
    -- Sends and the services that write stop before the log is cut back.
    set_role(b, "SLAVE", true)
    stop_services(b, true)
    -- The slave sync asks this master from now on, not once a
    -- NameServer's answer names it (rmq.broker.register's rule).
    require("rmq.broker.register").set_master(maddr, haddr)
    apply_settings(b, id, 4)
    require("rmq.broker.ha").take_control(b)
    ha:set_min_acks(0)
    ha:set_ack_peers("")
    state.ack_peers = nil
    ha:set_role(true, haddr, trunc)
    state.role, state.epoch, state.sync_state_set = "slave", epoch, nil
    state.pending, state.proposing = nil, nil
    state.broker_id, state.master = id, { addr = maddr, ha = haddr, epochs = theirs }
    log.info("role: slave of %s (HA %s) at epoch %d, registered as brokerId %d", maddr, haddr, epoch, id)
    return true
end

-- {{{ The master's SyncStateSet

local handler   -- set_sync_state_set_handler's

--- Who decides a SyncStateSet change the master proposes: fn(b, {epoch =,
--- sync_state_set = new, old = current}) -> true (apply `new`), or a
--- list of ids (apply that: what the controller answered), or nil, err
--- (keep the current set; proposed again next second).  The controller
--- client sends ALTER_SYNC_STATE_SET from it.  nil: no controller, the
--- master applies its proposal itself.
function M.set_sync_state_set_handler(fn)
    handler = fn
end

local function apply_set(b, set)
    state.sync_state_set = set
    local others = 0
    for _, m in ipairs(set) do
        if m ~= state.broker_id then
            others = others + 1
        end
    end
    local ha = ha_service()
    if ha then
        ha:set_min_acks(b.conf.allAckInSyncStateSet and others or 0)
    end
end

local function same_set(x, y)
    if #x ~= #y then
        return false
    end
    local seen = {}
    for _, v in ipairs(x) do
        seen[v] = true
    end
    for _, v in ipairs(y) do
        if not seen[v] then
            return false
        end
    end
    return true
end

-- x's ids, then y's not in x.
local function union(x, y)
    local out, seen = {}, {}
    for _, set in ipairs({ x, y or {} }) do
        for _, m in ipairs(set) do
            if not seen[m] then
                seen[m] = true
                out[#out + 1] = m
            end
        end
    end
    return out
end

-- Every second on a master: members whose connection went or that did
-- not catch up for haMaxTimeSlaveNotCatchup leave; slaves that caught up
-- join (5.x's maybeShrinkSyncStateSet / maybeExpandSyncStateSet).
-- allAckInSyncStateSet by name: the members' HA connections, once the
-- slaves said which is theirs; a member with none holds every send
-- ("absent:ID" matches no connection).  Each member is one ";" item, its
-- connections ","-separated (a reconnecting slave has two for a moment;
-- the HA service counts the member once, by its newest connection).
--
-- Whose acknowledgements count: the applied set's members and, while a
-- change is proposed and until the controller confirmed one (state.pending:
-- every id proposed since the last confirmed set), those of every
-- proposal too.  The controller may apply a proposal before its answer
-- arrives, or apply it and lose the answer; from then on it can elect a
-- member that joined, or one that has not left for it.  So a send is
-- acknowledged only once every member of either set has it (5.x: the
-- union while isSynchronizingSyncStateSet, until setSyncStateSet).
function name_ack_peers(b, ha)
    if not b.conf.allAckInSyncStateSet then
        return
    end
    local by_id = {}
    for addr, id in pairs(peers:all()) do
        id = fastjson.int(id) or -1
        by_id[id] = by_id[id] or {}
        table.insert(by_id[id], addr)
    end
    local list = {}
    for _, m in ipairs(union(state.sync_state_set or {}, state.pending)) do
        if m ~= state.broker_id then
            local addrs = by_id[m]
            if addrs then
                table.sort(addrs)   -- (one text for one state: set_ack_peers only on a change)
                list[#list + 1] = table.concat(addrs, ",")
            else
                list[#list + 1] = "absent:" .. m
            end
        end
    end
    local text = table.concat(list, ";")
    if #text >= ACK_PEERS_MAX then
        -- (only a peer claiming many connections for members in
        -- GET_BROKER_EPOCH_CACHE gets here: every member then holds every
        -- send, never an old list that may leave one out)
        local absent = {}
        for _, m in ipairs(union(state.sync_state_set or {}, state.pending)) do
            if m ~= state.broker_id then
                absent[#absent + 1] = "absent:" .. m
            end
        end
        log.warn("role: the members' HA connections take %d bytes, past %d: no send is acknowledged until fewer "
                 .. "are named", #text, ACK_PEERS_MAX - 1)
        text = table.concat(absent, ";")
    end
    if text ~= state.ack_peers then
        state.ack_peers = text
        ha:set_ack_peers(text)
        log.info("role: a send is acknowledged once these members' HA connections have it: %s",
                 text == "" and "(none: no other member)" or text)
    end
    -- The wait follows the names at once (a member proposed counts from
    -- before the controller can apply it; the master alone waits for no
    -- slave).  Only a store already serving as master: change_to_master
    -- sets its role itself, after naming.
    local role, fenced = b.store:role()
    if state.role == "master" and role ~= "SLAVE" and role ~= master_role(b) then
        set_role(b, master_role(b), fenced)
    end
end

--- The SyncStateSet a master proposes next (5.x's shrink and expand),
--- from plain facts, deciding nothing else:
---   p.self          the master's broker id (always a member)
---   p.cur           the set now (broker ids)
---   p.caught_up_ago slave id -> ms since it was last caught up (connected
---                   slaves only)
---   p.ack           slave id -> the log offset it has acknowledged
---   p.last_in_sync  broker id -> core.mono_ms() it was last caught up
---   p.now, p.limit  core.mono_ms(); haMaxTimeSlaveNotCatchup
---   p.join_within   a slave caught up at most this long ago may join
---   p.confirm       nil, or the offset every member has acknowledged
---                   (allAckInSyncStateSet with other members: 5.x's
---                   confirm offset), which a joiner must hold
--- Returns the new set, sorted, and the reasons for each change.
function M.next_sync_state_set(p)
    local new, why, member = { p.self }, {}, {}
    for _, m in ipairs(p.cur) do
        member[m] = true
        if m ~= p.self then
            -- (5.x: lastCaughtUpTime; a member keeps its place for the
            -- limit after the term began, connected or not)
            if p.now - (p.last_in_sync[m] or 0) <= p.limit then
                new[#new + 1] = m
            else
                why[#why + 1] = ("broker %d left (not caught up for %d ms)"):format(m, p.limit)
            end
        end
    end
    -- A slave joins holding everything acknowledged so far (5.x's
    -- maybeExpandInSyncStateSet: its offset >= the confirm offset): a
    -- send the members acknowledged before the proposal named it may be
    -- missing on a slave that was caught up seconds ago but lags now, and
    -- it would be lost if that slave were elected (controller_sss_window
    -- at load 20: 40).  Only while other members' acknowledgements count:
    -- a master alone acknowledges on its own write, as before.
    for id, ago in pairs(p.caught_up_ago) do
        if not member[id] and id ~= p.self and id <= INT_MAX and ago <= p.join_within
            and (p.confirm == nil or (p.ack[id] or -1) >= p.confirm) then
            new[#new + 1] = id
            why[#why + 1] = ("broker %d caught up"):format(id)
        end
    end
    table.sort(new)
    return new, why
end

local function check_sync_state_set(b)
    if state.role ~= "master" or state.sync_state_set == nil or state.broker_id == nil then
        return
    end
    if select(2, b.store:role()) then
        return   -- fenced (cut from the controllers): nothing can be proposed
    end
    local ha = ha_service()
    if not ha then
        return
    end
    name_ack_peers(b, ha)
    if state.proposing then
        -- One proposal at a time (this pass is a new task while the last
        -- one waits for the controller): its answer decides the set.
        return
    end
    local limit = b.conf.haMaxTimeSlaveNotCatchup or 15000
    local st = ha:stats()
    local now = core.mono_ms()
    local by_id, live, ack = {}, {}, {}
    for _, sl in ipairs(st.slaves or {}) do
        live[sl.addr] = true
        local id = fastjson.int(peers:get(sl.addr))
        if id and sl.caughtUpAgo >= 0 then
            by_id[id] = sl.caughtUpAgo
            last_in_sync[id] = math.max(last_in_sync[id] or 0, now - sl.caughtUpAgo)
        end
        if id then
            ack[id] = math.max(ack[id] or -1, sl.ack or -1)
        end
    end
    for addr in pairs(peers:all()) do
        if not live[addr] then
            peers:del(addr)
        end
    end
    local cur = state.sync_state_set
    local new, why = M.next_sync_state_set({
        self = state.broker_id, cur = cur, caught_up_ago = by_id, ack = ack,
        last_in_sync = last_in_sync, now = now, limit = limit,
        join_within = 2 * (b.conf.haSendHeartbeatInterval or 5000),
        confirm = b.conf.allAckInSyncStateSet and #cur > 1 and st.acked or nil,
    })
    if same_set(new, cur) and state.pending == nil then
        return
    end
    -- (with a proposal pending whose outcome is unknown, `new` is proposed
    -- even when it is the applied set: the controller's answer ends the
    -- doubt)
    local apply = new
    if handler then
        local term = state.epoch
        state.pending = union(state.pending or {}, new)
        state.proposing = term
        name_ack_peers(b, ha)   -- before the controller can apply it
        local ok, r, why_not = pcall(handler, b, { epoch = state.epoch, sync_state_set = new, old = cur })
        local hold = store.errinj("sss_answer_delay_ms")
        if hold > 0 then
            net.sleep(hold)   -- (fault injection: the answer applied late)
        end
        if state.role ~= "master" or state.epoch ~= term or state.proposing ~= term then
            return   -- a new term began meanwhile: this answer is stale
        end
        state.proposing = nil
        if not ok or not r then
            why_not = tostring(ok and (why_not or "refused") or r)
            -- The controller holds exactly `new` already (5.x's and rmq's
            -- refusal of an equal set): the doubt is over.
            if ok and why_not:find("is equal with oldSyncStateSet", 1, true) then
                state.pending = nil
                if not same_set(new, cur) then
                    apply_set(b, new)
                end
                name_ack_peers(b, ha)
                return
            end
            log.warn("role: SyncStateSet change %s -> %s not confirmed: %s (acknowledgements wait for both)",
                     table.concat(cur, ","), table.concat(new, ","), why_not)
            return
        end
        if type(r) == "table" then
            apply = r
        end
    end
    if not same_set(apply, cur) then
        log.info("role: SyncStateSet of %s at epoch %d: {%s} -> {%s}: %s", b.conf.brokerName, state.epoch,
                 table.concat(cur, ","), table.concat(apply, ","), table.concat(why, "; "))
    end
    state.pending = nil
    apply_set(b, apply)
    name_ack_peers(b, ha)
end

-- }}}

-- {{{ Keeping a slave's epoch file up to date; GET_BROKER_EPOCH_CACHE

-- A slave adopts the master's epochs its log has reached (5.x: from the
-- transfer headers), checked every second.
local function follow_epochs(b)
    if state.role ~= "slave" or not state.master then
        return
    end
    local ha = ha_service()
    local st = ha and ha:stats()
    local ext = st and st.connected and st["local"] ~= "" and { brokerId = tostring(state.broker_id),
                                                               haLocal = st["local"] } or nil
    local theirs = master_epochs(b.conf, state.master.addr, ext)
    if not theirs then
        return
    end
    local mine = M.read(b.conf)
    if not mine then
        return
    end
    local my_end = b.store:max_phy()
    local changed = false
    for _, e in ipairs(theirs) do
        local last = mine[#mine]
        if e.start <= my_end and (last == nil or e.epoch > last.epoch) and (last == nil or e.start >= last.start) then
            if last and e.start == last.start then
                mine[#mine] = nil
            end
            mine[#mine + 1] = { epoch = e.epoch, start = e.start }
            changed = true
        end
    end
    if changed then
        M.write(b.conf, mine)
    end
end

local main_b   -- the main thread's broker object (for the live console)

function M.main_init(b)
    main_b = b
    state.role, state.epoch, state.sync_state_set, state.broker_id, state.master = nil, nil, nil, nil, nil
    -- A store whose roles a controller decided comes back fenced: it
    -- cannot know whether it is still the master (another may have been
    -- elected meanwhile), so it takes no sends and registers under its
    -- own id, not 0, until change_to_master or change_to_slave.
    local last = load_role(b.conf)
    b.role_services_stopped = b.conf.brokerRole == "SLAVE"
    if last then
        -- Nothing that writes runs before the role is known (the store
        -- refuses local puts; schedule and transaction see
        -- role_services_stopped in their main_start).
        b.role_conf_role = b.conf.brokerRole
        b.store:set_role("SLAVE", true)
        b.role_services_stopped = true
        require("rmq.broker.timer").stop_service(b, false)
        master_perm(b)
        tables.set_setting("brokerId", last.broker_id)
        tables.set_setting("brokerPermission", 4)
        b.conf.brokerId, b.conf.brokerPermission = last.broker_id, 4
        log.info("role: this store was %s (brokerId %d, epoch %s) under a controller; fenced (no sends, brokerId %d)"
                 .. " until told its role", tostring(last.role), last.broker_id, tostring(last.epoch), last.broker_id)
    end
end

--- The broker object of the main thread: from the live console,
---   rr = require("rmq.broker.replica_role")
---   rr.change_to_master(rr.broker(), {epoch = 2})
function M.broker()
    return main_b
end

function M.main_start(b)
    peers:clear()
    b.replica_timer = net.timer(1000, 1000, function()
        local ok, err = pcall(follow_epochs, b)
        if not ok then
            log.warn("role: reading the master's epochs: %s", tostring(err))
        end
        ok, err = pcall(check_sync_state_set, b)
        if not ok then
            log.warn("role: the SyncStateSet: %s", tostring(err))
        end
    end)
end

function M.main_stop(b)
    if b.replica_timer then
        b.replica_timer:stop()
        b.replica_timer = nil
    end
end

function M.processors(b)
    local conf = b.conf
    local st = b.store
    return {
        -- 5.x's EpochEntryCache: this broker's epochs (the last one ends
        -- at the log's end) and its log end.
        [codes.request.GET_BROKER_EPOCH_CACHE] = { run = function(_, cmd)
            local ext = cmd and cmd.ext or {}
            local id = fastjson.int(ext.brokerId)
            local at = ext.haLocal
            if id and id >= 1 and id <= INT_MAX and type(at) == "string" and #at <= 64
                and at:match("^[%x%.:]+:%d+$") and (peers:get(at) or peers:count() < M.PEERS_MAX) then
                peers:set(at, tostring(id))
            end
            local entries, err = M.read(conf)
            if not entries then
                return reply.system_error(err)
            end
            local max = st:max_phy()
            local list = setmetatable({}, fastjson.array_mt)
            for i, e in ipairs(entries) do
                list[i] = { epoch = e.epoch, startOffset = e.start,
                            endOffset = entries[i + 1] and entries[i + 1].start or max }
            end
            tables.sync_conf(conf)
            -- haServerAddr: rmq's ext field (5.x ignores it), so a slave
            -- told only the master's address (the controller's
            -- GET_REPLICA_INFO names no HA port) finds where to follow.
            return { code = 0, ext = { haServerAddr = shared.map("broker.ha.self"):get("addr") or b.ha_addr }, body = fastjson.encode({
                clusterName = conf.brokerClusterName, brokerName = conf.brokerName,
                brokerId = conf.brokerId, epochList = list, maxOffset = max }) }
        end },
    }
end

-- }}}

return M
