-- Broker: registration with the NameServers (RocketMQ's
-- BrokerController.registerBrokerAll / BrokerOuterAPI, protocol.md 3.1-3.3,
-- 6.5).
--
-- The main thread owns every conversation with the NameServers, over
-- one pooled connection per NameServer (net.call / net.oneway), because
-- a NameServer ties the broker's liveness to the connection it
-- registered on: it drops the broker the moment that connection closes.
-- Workers only ask:
--
--   register.now([b])        any thread: register at once, one-way (what
--                            the Java broker does after it creates a
--                            topic); returns at once
--   register.sync([b], ms)   any thread, in a task: register at once,
--                            two-way, and wait until a registration that
--                            includes every topic change made so far has
--                            been answered (admin topic changes, as the
--                            Java broker's registerIncrementBrokerData);
--                            true, or nil, "timeout"
--   register.master_addr(), register.ha_master_addr()
--                            a slave's master and its HA address
--   register.set_master(addr, ha_addr)
--                            a role change names the master (nil: none)
--
-- Where a slave's master address comes from (the one place that
-- decides it; rmq.broker.slave_sync, rmq.broker.ha and the runtime info
-- read it through master_addr / ha_master_addr):
--
--   * A role change names it at once: rmq.broker.replica_role's
--     change_to_slave (the controller client, the live console) calls
--     set_master(master_addr, master_ha_addr) before it registers, as
--     5.x's ReplicasManager.changeToSlave hands the controller's master
--     to the slave synchronizer (handleSlaveSynchronize) and the HA
--     client; change_to_master forgets it (set_master(nil)).
--   * Every two-way registration's answer (the first NameServer's)
--     updates it where it names a master (masterAddr, haServerAddr), as
--     4.9.8 and 5.x take it (handleRegisterBrokerResult).
--   * An answer naming none clears it (4.9.8: the master is gone, the
--     slave serves as the acting master, RIP-32) -- but not a master a
--     role change named: that NameServer has not heard from the new
--     master yet (5.x would drop the controller's master there and sync
--     nothing until a later registration named it again).
--
-- A change of the master raises MASTER_EVENT (the slave sync starts a
-- round at once).
--
-- The main thread registers at start (main_start, forced, two-way: the
-- READY line comes after it), then every registerNameServerPeriod
-- (clamped to 10..60 s as in Java; the first after 10 s) and whenever
-- asked; it unregisters from every NameServer at shutdown (main_stop).
-- A round goes to every NameServer in parallel, each call bounded by
-- registerBrokerTimeoutMills.  With forceRegister = false a periodic
-- round first asks QUERY_DATA_VERSION and registers only if some
-- NameServer reports a change (Java's needRegister).
--
-- A round asked for after a topic change (register.now / sync) carries
-- only the topics changed since the last round every NameServer took,
-- as the Java broker's registerIncrementBrokerData does (a NameServer
-- only adds or updates topics from a registration whose DataVersion
-- moved, never removes); the periodic rounds carry every topic.  A
-- JSON body over half of frameMaxLength is sent compressed instead.
--
-- The body is what a 4.9.8 broker sends, byte for byte: RegisterBrokerBody
-- JSON, or with compressedRegister the zlib stream of length-prefixed
-- records; bodyCrc32 = CRC32 & 0x7FFFFFFF of the body as sent.  When
-- brokerPermission is not read+write, every topic is registered with the
-- broker's permission instead of its own (Java does the same).
--
-- With accessKey / secretKey in the conf every request to a NameServer
-- is signed (ACL 1.0, rmq.client.credentials); 4.9.8's broker signs
-- nothing, which a NameServer with ACL (an rmq extension) only takes
-- from a whitelisted address.
local core = require("rmq.core")
local net = require("rmq.net")
local shared = require("rmq.shared")
local codes = require("rmq.codes")
local log = require("rmq.log")
local fastjson = require("rmq.fastjson")
local config_table = require("rmq.config_table")
local tables = require("rmq.broker.tables")
local topics = require("rmq.broker.topics")
local credentials = require("rmq.client.credentials")

local M = {}

local req = codes.request

local WAKE = "broker.register"            -- raised: a worker wants a round
local DONE = "broker.register.done"       -- raised after every round
local GATHER = "broker.register.gather."  -- .. n: a round's calls ended

local meta = shared.map("broker.meta")
-- meta keys:
--   register.requested  set by now(): a round is wanted
--   register.sync       set by sync(): the next round is two-way
--   register.begun      rounds begun (the main thread counts them)
--   register.synced     the number of the last round that took a sync()
--                       request, once it finished
--   register.masterAddr, register.haMasterAddr   a slave's master (set_master,
--                       the replies)
--   register.masterByRole  "1": a role change named the master

M.INITIAL_DELAY = 10000   -- BrokerController: the periodic task's delay
M.RECHECK_MS = 200        -- how late a registration request may be noticed (see loop)
M.PERIOD_MIN, M.PERIOD_MAX = 10000, 60000

local state = { stopped = false, registered = nil, gathers = 0 }

M.MASTER_EVENT = "broker.register.master"   -- raised when master_addr() changed

-- {{{ Addresses and bodies

--- The NameServer addresses of conf (namesrvAddr, ';'-separated; a
--- standalone server's own NameServer when unset).
function M.namesrvs(conf)
    local addr = conf.namesrvAddr
    if (addr == nil or addr == "") and conf.role == "standalone" and conf.namesrvListenPort then
        local host = conf.bindAddress
        if host == nil or host == "0.0.0.0" or host == "::" then
            host = "127.0.0.1"
        end
        addr = host .. ":" .. conf.namesrvListenPort
    end
    local out = {}
    for a in tostring(addr or ""):gmatch("[^;%s]+") do
        out[#out + 1] = a
    end
    return out
end

--- The registration period in ms: registerNameServerPeriod clamped as
--- BrokerController clamps it.
function M.period(conf)
    return math.max(M.PERIOD_MIN, math.min(conf.registerNameServerPeriod or 30000, M.PERIOD_MAX))
end

-- The fields every broker -> NameServer request carries.
local function identity(b)
    return {
        brokerAddr = b.addr,
        brokerId = tostring(b.conf.brokerId),
        brokerName = b.conf.brokerName,
        clusterName = b.conf.brokerClusterName,
    }
end

-- The permission every topic is registered with instead of its own
-- (registerBrokerAll does that when the broker is not read+write), or
-- -1.
local function perm_override(conf)
    local perm = conf.brokerPermission
    if (perm & topics.PERM_WRITE) ~= 0 and (perm & topics.PERM_READ) ~= 0 then
        return -1
    end
    return perm
end

--- RegisterBrokerBody.encode(compressed) of a TopicConfigSerializeWrapper
--- given as Lua tables ({dataVersion=, topicConfigTable=}); perm as in
--- perm_override.  The same C encoder as the live table's (specs compare
--- it with captured bodies).
function M.body(w, compressed, perm)
    local tmp = config_table.new_topics()
    for name, cfg in pairs(w.topicConfigTable or {}) do
        local copy = {}
        for k, v in pairs(cfg) do
            copy[k] = v
        end
        copy.topicName = copy.topicName or name
        tmp:put(copy, false, true)
    end
    tmp:set_data_version(w.dataVersion)
    return (tmp:register_body(compressed, perm or -1, 0))
end

local oversize_logged = false

--- The REGISTER_BROKER command with the topics changed after table
--- version `since` (0: every topic; offset/limit: a part of them).
--- Returns the command, the number of topics in it and the table
--- version it covers.
function M.command(b, conf, since, offset, limit)
    local compressed = conf.compressedRegister == true
    local perm = perm_override(conf)
    local body, n, version = topics.register_body(compressed, perm, since, offset, limit)
    if not compressed and #body > (conf.frameMaxLength or 16777216) // 2 then
        -- A JSON body that large would soon not fit a frame; every 4.x
        -- NameServer takes the compressed form (the header says which).
        compressed = true
        body, n, version = topics.register_body(true, perm, since, offset, limit)
        if not oversize_logged then
            oversize_logged = true
            log.warn("registering %d topics compressed: the JSON body would be over half of frameMaxLength"
                .. " (set compressedRegister=true to say so)", n)
        end
    end
    local ext = identity(b)
    ext.haServerAddr = b.ha_addr
    if conf.enableSlaveActingMaster then
        -- 5.x's header field: a NameServer with supportActingMaster may
        -- then route to this slave while the master is gone (RIP-32).
        -- It expires the broker after heartbeatTimeoutMillis without a
        -- registration or a BROKER_HEARTBEAT (heartbeats, below).
        ext.enableActingMaster = "true"
        ext.heartbeatTimeoutMillis = tostring(conf.brokerNotActiveTimeoutMillis or 10000)
    end
    ext.compressed = compressed and "true" or "false"
    ext.bodyCrc32 = tostring(core.crc32(body) & 0x7FFFFFFF)
    return { code = req.REGISTER_BROKER, ext = ext, body = body, credentials = credentials.of(conf) }, n, version
end

-- }}}

-- {{{ Calls to every NameServer

-- Runs fn(addr) for every address as parallel tasks and waits until all
-- returned (each is bounded by its own timeout).  Returns
-- {[i] = {ok, result, err}}.
local function gather(addrs, fn)
    local n, done, out = #addrs, 0, {}
    if n == 0 then
        return out
    end
    state.gathers = state.gathers + 1
    local key = GATHER .. state.gathers
    for i, addr in ipairs(addrs) do
        net.spawn(function()
            local ok, r, err = pcall(fn, addr)
            if not ok then
                r, err = nil, tostring(r)
            end
            out[i] = { r = r, err = err }
            done = done + 1
            if done == n then
                net.raise(key)
            end
        end)
    end
    while done < n do
        net.wait_event(key, 100)
    end
    return out
end

-- QUERY_DATA_VERSION to every NameServer: true when one of them
-- reports a change (or does not answer: it must be registered with).
local function need_register(b, addrs, dv, timeout)
    local body = tables.encode_dv(dv)
    local ext = identity(b)
    local results = gather(addrs, function(addr)
        return net.call(addr, { code = req.QUERY_DATA_VERSION, ext = ext, body = body,
                                credentials = credentials.of(b.conf) }, timeout)
    end)
    for i, res in ipairs(results) do
        local r = res.r
        if r == nil then
            log.warn("QUERY_DATA_VERSION to %s failed: %s", addrs[i], tostring(res.err))
            return true
        end
        if r.code ~= 0 then
            -- Java ignores such a reply; a NameServer that cannot say it
            -- knows us is safer registered with.
            log.warn("QUERY_DATA_VERSION to %s: code %d %s", addrs[i], r.code, tostring(r.remark))
            return true
        end
        local changed = r.ext and r.ext.changed
        if changed == nil or tostring(changed):lower() == "true" then
            return true
        end
        if r.body and r.body ~= "" then
            local theirs = fastjson.decode(r.body)
            if type(theirs) ~= "table" or fastjson.int(theirs.counter) ~= dv.counter
                or fastjson.int(theirs.timestamp) ~= dv.timestamp then
                return true
            end
        end
    end
    return false
end

local failing = {}   -- addr -> true while registrations to it fail

-- What a NameServer answered (the first that answered, in namesrvAddr
-- order, as Java takes the first result): the master's addresses for a
-- slave (the rule at the top), and ORDER_TOPIC_CONFIG.
local function apply_reply(b, r, check_order)
    local ext = r.ext or {}
    local by_role = meta:get("register.masterByRole") ~= nil
    local old_master = meta:get("register.masterAddr")
    for _, k in ipairs({ "masterAddr", "haServerAddr" }) do
        local key = k == "masterAddr" and "register.masterAddr" or "register.haMasterAddr"
        local v = ext[k]
        if v == "" then
            v = nil
        end
        local old = meta:get(key)
        if v ~= old then
            if v then
                meta:set(key, v)
                log.info("NameServer: %s of broker group %s is %s", k, b.conf.brokerName, v)
            elseif not by_role then
                meta:del(key)
            end
        end
    end
    if meta:get("register.masterAddr") ~= old_master then
        net.raise(M.MASTER_EVENT)
    end
    if check_order and r.body and r.body ~= "" then
        local kv = fastjson.decode(r.body)
        if type(kv) == "table" and type(kv.table) == "table" then
            topics.apply_order(kv.table)
        end
    end
end

--- One registration round.  opts: oneway, force, check_order,
--- incremental (only the topics changed since the last round that every
--- NameServer took: RocketMQ's registerIncrementBrokerData; a full round
--- follows any failure), synced (the round took a sync() request: it
--- records its number when it ends).  Returns the number of NameServers
--- that took it.
function M.round(b, opts)
    local seq = (tonumber(meta:get("register.begun")) or 0) + 1
    meta:set("register.begun", tostring(seq))
    local conf = tables.sync_conf(b.conf)
    local addrs = M.namesrvs(conf)
    -- Controller mode: no registration before the controller gave a role.
    if b.controller_waiting then
        addrs = {}
    end
    local dv = topics.data_version()
    local timeout = conf.registerBrokerTimeoutMills or 6000
    local taken = 0
    local since = 0
    -- A permission change applies to every topic: a full round.
    if opts.incremental and state.sent_version and next(failing) == nil
        and state.sent_perm == perm_override(conf) then
        since = state.sent_version
    end
    local covered
    if #addrs > 0 and (opts.force or need_register(b, addrs, dv, timeout)) then
        -- Split registration (5.x enableSplitRegistration): a full round
        -- of a large table goes as parts of splitRegistrationSize topics,
        -- each with a DataVersion of its own, so that every NameServer
        -- (4.9.8 too: it applies a registration whose version moved)
        -- takes every part.
        local parts, size = 1, nil
        if since == 0 and conf.enableSplitRegistration and topics.table:count() >= conf.splitRegistrationSize then
            size = conf.splitRegistrationSize
            parts = (topics.table:count() + size - 1) // size
        end
        local ntopics, results, cmd, version = 0
        for part = 1, parts do
            if size then
                topics.table:bump()
            end
            local n, v
            cmd, n, v = M.command(b, conf, since, size and (part - 1) * size, size)
            ntopics = ntopics + n
            -- What changes after the first part's copy is sent again by
            -- the next incremental round.
            version = version or v
            local res = gather(addrs, function(addr)
                if opts.oneway then
                    return net.oneway(addr, cmd)
                end
                return net.call(addr, cmd, timeout)
            end)
            -- A NameServer that refused one part has not got the table.
            if results == nil then
                results = res
            else
                for i, r in ipairs(res) do
                    if r.r == nil or (not opts.oneway and r.r.code ~= 0) then
                        results[i] = r
                    end
                end
            end
        end
        dv = topics.data_version()
        covered = version
        local first
        for i, res in ipairs(results) do
            local addr, r = addrs[i], res.r
            local err = res.err
            if r ~= nil and not opts.oneway and r.code ~= 0 then
                err = ("code %d %s"):format(r.code, tostring(r.remark))
                r = nil
            end
            if r == nil then
                if not failing[addr] then
                    log.warn("register broker %s (%s) to NameServer %s failed: %s", conf.brokerName,
                             b.addr, addr, tostring(err))
                end
                failing[addr] = true
            else
                taken = taken + 1
                if failing[addr] or state.registered == nil then
                    log.info("registered broker %s (%s, id %d) with NameServer %s", conf.brokerName,
                             b.addr, conf.brokerId, addr)
                else
                    log.debug("registered broker %s with NameServer %s (counter %d, %d topics%s)",
                              conf.brokerName, addr, dv.counter, ntopics, since > 0 and ", changed only" or "")
                end
                failing[addr] = nil
                if first == nil and not opts.oneway then
                    first = r
                end
            end
        end
        if first then
            apply_reply(b, first, opts.check_order)
        end
        if taken == #addrs then
            state.sent_version, state.sent_perm = version, perm_override(conf)
        end
    end
    state.registered = dv.counter
    if opts.synced then
        meta:set("register.synced", tostring(seq))
    end
    net.raise(DONE)
    return taken, covered
end

-- }}}

-- {{{ Requests from any thread

--- Asks the main thread for a registration now (one-way).
function M.now()
    meta:set("register.requested", "1")
    net.raise(WAKE)
end

--- Asks for a two-way registration now and waits until one that covers
--- the table as it is now has finished: true, or nil, "timeout".
---
--- The round that takes the request (it clears register.sync) began
--- after the request, so it sends the table as it is now or later; it
--- is the first round numbered past `before` to record itself as
--- synced.  (Not the DataVersion: the slave sync sets the master's, which
--- may be lower than ours.)
function M.sync(_, timeout)
    -- Before main_start's first round (a role decided while the broker
    -- starts), that round registers what is set by then.
    if not meta:get("register.started") then
        return true
    end
    local before = tonumber(meta:get("register.begun")) or 0
    meta:set("register.sync", "1")
    meta:set("register.requested", "1")
    net.raise(WAKE)
    local deadline = core.mono_ms() + (timeout or 6000)
    while true do
        local synced = tonumber(meta:get("register.synced")) or 0
        if synced > before and not meta:get("register.sync") then
            return true
        end
        local left = deadline - core.mono_ms()
        if left <= 0 then
            return nil, "timeout"
        end
        net.wait_event(DONE, math.max(1, math.min(math.floor(left), 100)))
    end
end

--- This slave's master ("ip:port"), or nil (the rule at the top).
function M.master_addr()
    return meta:get("register.masterAddr")
end

--- Its HA address ("ip:port"), or nil.
function M.ha_master_addr()
    return meta:get("register.haMasterAddr")
end

--- A role change names this slave's master (addr, ha_addr: "ip:port";
--- ha_addr nil: not known) at once, or forgets it (addr nil: this
--- broker is a master now).  Any thread.
function M.set_master(addr, ha_addr)
    local old = meta:get("register.masterAddr")
    if addr then
        meta:set("register.masterByRole", "1")
        meta:set("register.masterAddr", addr)
        if ha_addr then
            meta:set("register.haMasterAddr", ha_addr)
        else
            meta:del("register.haMasterAddr")
        end
    else
        for _, k in ipairs({ "register.masterByRole", "register.masterAddr", "register.haMasterAddr" }) do
            meta:del(k)
        end
    end
    if addr ~= old then
        net.raise(M.MASTER_EVENT)
    end
end

-- }}}

-- {{{ Main thread

local function pending()
    return meta:get("register.requested") ~= nil
        or topics.data_version().counter ~= state.registered
end

local function loop(b)
    local next_periodic = core.mono_ms() + M.INITIAL_DELAY
    while not state.stopped do
        local left = next_periodic - core.mono_ms()
        if left > 0 and not pending() then
            -- A raise between pending() and the wait finds no waiter and
            -- is lost: the wait is cut so a request waits at most that.
            net.wait_event(WAKE, math.max(1, math.floor(math.min(left, M.RECHECK_MS))))
        end
        if state.stopped then
            break
        end
        local ok, err = pcall(function()
            if pending() then
                meta:del("register.requested")
                local sync = meta:del("register.sync")
                M.round(b, { oneway = not sync, force = true, check_order = sync, incremental = true,
                             synced = sync ~= nil })
            elseif core.mono_ms() >= next_periodic then
                local conf = tables.sync_conf(b.conf)
                M.round(b, { force = conf.forceRegister, check_order = true })
                next_periodic = core.mono_ms() + M.period(conf)
            end
        end)
        if not ok then
            log.error("broker registration: %s", tostring(err))
            net.sleep(1000)
        end
    end
end

function M.main_init(b)
    for _, k in ipairs({ "register.requested", "register.sync", "register.begun", "register.synced",
                         "register.masterAddr", "register.haMasterAddr", "register.masterByRole",
                         "register.started" }) do
        meta:del(k)
    end
    state.stopped = false
    state.registered = nil
    state.sent_version = nil
end

-- 5.x (BrokerController.sendHeartbeat with enableSlaveActingMaster):
-- a one-way BROKER_HEARTBEAT to every NameServer each
-- brokerHeartbeatInterval keeps the registration alive between rounds.
local function heartbeats(b)
    local conf = b.conf
    while not state.stopped do
        net.sleep(conf.brokerHeartbeatInterval or 1000)
        if state.stopped then
            return
        end
        local ext = identity(b)
        for _, addr in ipairs(M.namesrvs(conf)) do
            -- A NameServer not reachable now is the registration round's
            -- to report; a heartbeat lost is only a heartbeat.
            pcall(net.oneway, addr, { code = req.BROKER_HEARTBEAT, ext = ext, credentials = credentials.of(conf) })
        end
    end
end

function M.main_start(b)
    local addrs = M.namesrvs(b.conf)
    if #addrs == 0 then
        log.warn("broker %s: no NameServer to register with (namesrvAddr)", b.conf.brokerName)
    end
    meta:set("register.started", "1")
    M.round(b, { force = true, check_order = true })
    net.spawn(loop, b)
    if b.conf.enableSlaveActingMaster then
        net.spawn(heartbeats, b)
    end
end

-- A standalone server's own NameServer stops with it (its workers are
-- already draining, so a request to it would only wait for the timeout):
-- there is nobody to unregister from there.
local function own_namesrv(conf, b, addr)
    if conf.role ~= "standalone" or not conf.namesrvListenPort then
        return false
    end
    local host, port = addr:match("^(.*):(%d+)$")
    if tonumber(port) ~= conf.namesrvListenPort then
        return false
    end
    return host == "127.0.0.1" or host == "localhost" or host == "::1" or host == conf.bindAddress
        or host == b.ip
end

function M.main_stop(b)
    state.stopped = true
    net.raise(WAKE)
    local conf = b.conf
    local addrs = {}
    for _, addr in ipairs(M.namesrvs(conf)) do
        if not own_namesrv(conf, b, addr) then
            addrs[#addrs + 1] = addr
        end
    end
    local ext = identity(b)
    local timeout = conf.registerBrokerTimeoutMills or 6000
    local results = gather(addrs, function(addr)
        return net.call(addr, { code = req.UNREGISTER_BROKER, ext = ext, credentials = credentials.of(conf) },
                        timeout)
    end)
    for i, res in ipairs(results) do
        if res.r and res.r.code == 0 then
            log.info("unregistered broker %s (%s) from NameServer %s", conf.brokerName, b.addr, addrs[i])
        else
            log.warn("unregister broker %s from NameServer %s failed: %s", conf.brokerName, addrs[i],
                     res.r and ("code " .. res.r.code .. " " .. tostring(res.r.remark)) or tostring(res.err))
        end
    end
end

-- }}}

function M.processors(b)
    return {}
end

return M
