-- The broker role.
--
-- Threads: the main thread opens the store and loads the shared tables
-- (main_init), then registers with the NameServers and persists the
-- tables on timers (main_start); every worker attaches to the same store
-- and builds its processors from the modules below, each given the
-- broker context `b`:
--
--   b.conf        the conf (ports as bound)
--   b.store       this state's rmq.store handle (same store everywhere)
--   b.topics, b.groups   rmq.broker.topics / groups (shared tables)
--   b.addr        "brokerIP1:listenPort", what clients and NameServers use
--   b.store_host  the STOREHOST written into records (= b.addr)
--   b.worker      worker id (nil in the main thread)
--
-- Request modules (each returns {processors = function(b) -> {[code] =
-- handler}}, optional on_close(b, ctx), main_start(b), main_stop(b)):
local store = require("rmq.store")
local shared = require("rmq.shared")
local metrics = require("rmq.metrics")
local core = require("rmq.core")
local net = require("rmq.net")
local log = require("rmq.log")
local topics = require("rmq.broker.topics")
local groups = require("rmq.broker.groups")

local M = {}

M.MODULES = { "send", "pull", "sendback", "schedule", "clients", "transaction", "locks", "query", "offsets", "admin", "ha",
              "register", "slave_sync", "reply", "admin_clients" }
-- Controller mode (RocketMQ 5): before register, whose first round then
-- has the role the controller gave (docs/controller.md).
table.insert(M.MODULES, 12, "controller_client")

-- After offsets: its main_init samples the committed offsets (statistics).
M.MODULES[#M.MODULES + 1] = "admin_store"
M.MODULES[#M.MODULES + 1] = "acl_admin"   -- ACL requests 50-53 (aclEnable only)
M.MODULES[#M.MODULES + 1] = "timer"       -- timer messages (RIP-43; docs/timer.md)
M.MODULES[#M.MODULES + 1] = "pop"         -- POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, ...
M.MODULES[#M.MODULES + 1] = "assignment"  -- QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE
M.MODULES[#M.MODULES + 1] = "replica_role" -- epochs, role switches (docs/replication.md)

-- brokerIP1: as configured; else the address we are bound to; else the
-- first non-loopback IPv4 address (RocketMQ's default); else loopback.
local function broker_ip(conf)
    if conf.brokerIP1 then
        return conf.brokerIP1
    end
    if conf.bindAddress and conf.bindAddress ~= "0.0.0.0" and conf.bindAddress ~= "::" then
        return conf.bindAddress
    end
    return core.ipv4_addresses()[1] or "127.0.0.1"
end

local function context(conf, st)
    local ip = broker_ip(conf)
    local addr = ip .. ":" .. conf.listenPort
    return {
        conf = conf,
        store = st,
        topics = topics,
        groups = groups,
        ip = ip,
        addr = addr,
        store_host = addr,
        ha_addr = (conf.brokerIP2 or ip) .. ":" .. (conf.haListenPort or (conf.listenPort + 1)),
        worker = net.worker_id(),
    }
end

local function store_options(conf)
    local opts = {}
    for k, v in pairs(conf) do
        opts[k] = v
    end
    opts.storeHost = broker_ip(conf) .. ":" .. conf.listenPort
    return opts
end

local main = {}  -- the main thread's context

function M.main_init(conf)
    local st, err = store.open(conf.storePathRootDir, store_options(conf))
    if not st then
        error("cannot open the store at " .. conf.storePathRootDir .. ": " .. tostring(err), 0)
    end
    shared.put_handle("broker.store", st:share())
    local ok
    ok, err = topics.load(conf)
    if not ok then
        error(err, 0)
    end
    ok, err = groups.load(conf)
    if not ok then
        error(err, 0)
    end
    main.b = context(conf, st)
    for _, name in ipairs(M.MODULES) do
        local mod = require("rmq.broker." .. name)
        if mod.main_init then
            mod.main_init(main.b)
        end
    end
    log.info("broker %s (%s, id %d) store %s: max offset %d", conf.brokerName,
             conf.brokerClusterName, conf.brokerId, conf.storePathRootDir, st:max_phy())
end

function M.processors(conf)
    local handle = shared.get_handle("broker.store")
    if handle == nil then
        error("the store is not open", 0)
    end
    -- Records stored through this handle carry the broker's address as
    -- STOREHOST (offset message ids point clients back here).
    local st = store.attach(handle, broker_ip(conf) .. ":" .. conf.listenPort)
    local b = context(conf, st)
    require("rmq.broker.admission").install(b)   -- flow control, before any processor
    local P, closers = {}, {}
    for _, name in ipairs(M.MODULES) do
        local mod = require("rmq.broker." .. name)
        for code, h in pairs(mod.processors and mod.processors(b) or {}) do
            P[code] = h
        end
        if mod.on_close then
            closers[#closers + 1] = mod.on_close
        end
    end
    local function on_close(ctx)
        for _, f in ipairs(closers) do
            f(b, ctx)
        end
    end
    return P, on_close
end

-- force: rewrite the files whole and drop their journals (shutdown: a
-- stopped store is exactly what a Java broker writes).
local function persist_tables(b, force)
    local ok, err = topics.persist(b.conf, force)
    if not ok then
        log.error("cannot persist topics: %s", err)
    end
    ok, err = groups.persist(b.conf, force)
    if not ok then
        log.error("cannot persist subscription groups: %s", err)
    end
end

function M.main_start(conf)
    local b = main.b
    -- Computed at each scrape, on the endpoint's thread (no-op with metrics off).
    metrics.watch_consumer_lag(shared.get_handle("broker.store"))
    b.timers = {
        net.timer(1000, 1000, function() persist_tables(b) end),
    }
    for _, name in ipairs(M.MODULES) do
        local mod = require("rmq.broker." .. name)
        if mod.main_start then
            mod.main_start(b)
        end
    end
end

--- Extra READY fields: {ha = "host:port"} on a master.
function M.ready_fields()
    return main.b and main.b.ready_fields or {}
end

function M.main_stop(conf)
    local b = main.b
    if b == nil then
        return
    end
    for _, t in ipairs(b.timers or {}) do
        t:stop()
    end
    metrics.watch_consumer_lag(nil)
    for i = #M.MODULES, 1, -1 do
        local mod = require("rmq.broker." .. M.MODULES[i])
        if mod.main_stop then
            local ok, err = pcall(mod.main_stop, b)
            if not ok then
                log.error("broker %s shutdown: %s", M.MODULES[i], tostring(err))
            end
        end
    end
    persist_tables(b, true)
    main.tables_written_t, main.tables_written_g = topics.table:version(), groups.table:version()
end

--- After the workers ended (requests answered during the drain may have
--- changed offsets and tables after main_stop wrote them): the last writes.
function M.main_after_workers(conf)
    local b = main.b
    if b == nil then
        return
    end
    for _, name in ipairs(M.MODULES) do
        local mod = require("rmq.broker." .. name)
        if mod.after_workers then
            local ok, err = pcall(mod.after_workers, b)
            if not ok then
                log.error("broker %s final write: %s", name, tostring(err))
            end
        end
    end
    if topics.table:version() ~= main.tables_written_t or groups.table:version() ~= main.tables_written_g then
        persist_tables(b, true)
    end
end

return M
