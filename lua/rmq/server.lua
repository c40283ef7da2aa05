-- The server's Lua side: turns a conf into a plan for the C runtime
-- (ports, workers, limits), builds each worker's dispatch functions, and
-- runs the roles' main-thread hooks.
--
-- Called from C (src/lua/l_roles.c), in this order:
--   prepare(path, overrides)           main thread -> plan | nil, err
--   bound(ports)                       main thread: {listenerName = port};
--                                      runs the roles' main_init hooks,
--                                      before any worker thread exists
--   worker(path, overrides, id, ports) each worker -> {role = dispatch},
--                                      {role = on_close}, {role = {[code] =
--                                      native processor}} (rmq.native)
--   main_start()                       main thread, as a task
--   main_stop(done)                    main thread, as a task, at SIGTERM;
--                                      calls done() when the hooks ran
--   after_workers()                    main thread, once every worker has
--                                      ended (outside the loop: no waits)
--
-- A role is a module rmq.<role> returning:
--   processors(conf) -> {[code] = handler} [, on_close]
--                                              called in every worker;
--       on_close(ctx), when given, runs as a task in the worker each time
--       a connection accepted for the role closes (ctx.id names it)
--   main_init(conf)                             optional, main thread,
--       before the workers start (shared state; may raise to refuse start)
--   main_start(conf), main_stop(conf)           optional, main thread
--   main_after_workers(conf)                    optional, main thread, after
--       the workers ended: last writes that must include the drain
local conf_loader = require("rmq.conf")
local dispatch = require("rmq.dispatch")
local log = require("rmq.log")
local acl_plain = require("rmq.acl.plain")

local M = {}

-- Which role modules a conf's role runs, in start order.
local ROLES = {
    namesrv = { "namesrv" },
    broker = { "broker" },
    standalone = { "namesrv", "broker" },
    controller = { "controller" },
    proxy = { "proxy" },
}

-- A NameServer with enableControllerInNamesrv also runs the controller,
-- as 5.x's NamesrvStartup starts a ControllerManager beside the
-- NamesrvController, on a port of its own (listener "controller").
local function roles_of(conf)
    if conf.role == "namesrv" and conf.enableControllerInNamesrv then
        return { "namesrv", "controller" }
    end
    return ROLES[conf.role]
end

-- The conf a role's hooks see.  The embedded controller gets its own
-- copy, with its port as listenPort (its address in P/leader and
-- P/members): UPDATE_CONTROLLER_CONFIG changes the controller's keys,
-- not the NameServer's (scanNotActiveBrokerInterval is in both, as 5.x's
-- NamesrvConfig and ControllerConfig each have it).
local function role_conf(conf, role)
    if role ~= "controller" or conf.role == "controller" then
        return conf
    end
    local copy = {}
    for k, v in pairs(conf) do
        copy[k] = v
    end
    copy.listenPort = conf.controllerListenPort
    return copy
end

local state = { conf = nil, ports = nil, overrides = nil }

local function load_conf(path, overrides)
    local conf, warnings = conf_loader.load(path, overrides)
    if not conf then
        return nil, warnings
    end
    acl_plain.set_conf_path(path)
    return conf, warnings
end

-- The ports each role serves.  The broker's VIP port is listenPort - 2,
-- as RocketMQ's BrokerController sets it; with listenPort 0 both are
-- picked by the kernel.
local function listeners(conf)
    local role = conf.role
    local out = {}
    local function vip(port)
        if port == 0 then
            return 0
        end
        return port - 2
    end
    if role == "proxy" then
        -- Cluster mode (src/grpc/upstream.c): only the gRPC port.
        return { { name = "grpc", role = "proxy", port = conf.grpcServerPort, protocol = "grpc" } }
    elseif role == "namesrv" or role == "controller" then
        out[1] = { name = "listen", role = role, port = conf.listenPort }
        if role == "namesrv" and conf.enableControllerInNamesrv then
            out[2] = { name = "controller", role = "controller", port = conf.controllerListenPort }
        end
    elseif role == "broker" then
        out[1] = { name = "listen", role = "broker", port = conf.listenPort }
        out[2] = { name = "vip", role = "broker", port = vip(conf.listenPort) }
    else
        out[1] = { name = "listen", role = "namesrv", port = conf.namesrvListenPort }
        out[2] = { name = "broker", role = "broker", port = conf.listenPort }
        out[3] = { name = "vip", role = "broker", port = vip(conf.listenPort) }
    end
    -- RocketMQ 5's gRPC API (src/grpc/): a broker listener whose
    -- connections speak HTTP/2.
    if (role == "broker" or role == "standalone") and conf.grpcServerPort >= 0 then
        out[#out + 1] = { name = "grpc", role = "broker", port = conf.grpcServerPort, protocol = "grpc" }
    end
    return out
end

-- The Prometheus endpoint (nil: off) and the labels every series has:
-- a broker's cluster and brokerName, a NameServer's address.
local function metrics_plan(conf)
    if conf.metricsExporterType ~= "PROM" then
        return nil
    end
    local broker = conf.role == "broker" or conf.role == "standalone"
    return {
        host = conf.metricsPromExporterHost,
        port = conf.metricsPromExporterPort,
        maxLabelSets = conf.metricsMaxLabelSets,
        maxConnections = conf.metricsHttpMaxConnections,
        timeoutSeconds = conf.metricsHttpTimeoutSeconds,
        headerTimeoutMillis = conf.metricsHttpHeaderTimeoutMillis,
        maxConnectionsPerAddress = conf.metricsHttpMaxConnectionsPerAddress,
        allowedAddresses = conf.metricsAllowedAddresses,
        maxHeaderBytes = conf.metricsHttpMaxHeaderBytes,
        maxBodyBytes = conf.metricsHttpMaxBodyBytes,
        cluster = broker and conf.brokerClusterName or "",
        nodeType = broker and "broker" or conf.role,
        -- A NameServer's: its address, once bound (C fills it in).
        nodeId = broker and conf.brokerName or "",
    }
end

--- Checks the conf and returns what C needs to start.
function M.prepare(path, overrides)
    local conf, warnings = load_conf(path, overrides)
    if not conf then
        return nil, warnings
    end
    for _, w in ipairs(warnings) do
        log.warn("%s", w)
    end
    state.conf = conf
    state.overrides = overrides
    return {
        role = conf.role,
        workers = conf.workers,
        bindAddress = conf.bindAddress,
        frameMaxLength = conf.frameMaxLength,
        serverChannelMaxIdleTimeSeconds = conf.serverChannelMaxIdleTimeSeconds,
        shutdownAwaitMillis = conf.shutdownAwaitMillis,
        serverReservedDescriptors = conf.serverReservedDescriptors,
        -- 0 keeps Netty's water marks, as RocketMQ's default 0 does.
        writeBufferHighWaterMark = conf.writeBufferHighWaterMark > 0 and conf.writeBufferHighWaterMark or 65536,
        writeBufferLowWaterMark = conf.writeBufferLowWaterMark > 0 and conf.writeBufferLowWaterMark or 32768,
        serverChannelWriteTimeoutMillis = conf.serverChannelWriteTimeoutMillis,
        serverChannelCloseLingerMillis = conf.serverChannelCloseLingerMillis,
        serverChannelMaxInFlight = conf.serverChannelMaxInFlight,
        serverChannelMaxFramesPerTurn = conf.serverChannelMaxFramesPerTurn,
        serverPeerMaxFramesPerTurn = conf.serverPeerMaxFramesPerTurn,
        serverBatchWriteEnable = conf.serverBatchWriteEnable,
        memoryBudgetBytes = conf.memoryBudgetBytes,
        memoryBudgetPerPeerBytes = conf.memoryBudgetPerPeerBytes,
        memoryBudgetPerConnectionBytes = conf.memoryBudgetPerConnectionBytes,
        logLevel = conf.logLevel,
        logFile = conf.logFile,
        logBufferBytes = conf.logBufferBytes,
        listeners = listeners(conf),
        metrics = metrics_plan(conf),
        grpc = (conf.role == "broker" or conf.role == "standalone" or conf.role == "proxy")
            and conf.grpcServerPort >= 0 and {
            maxInboundMessageSize = conf.grpcMaxInboundMessageSize,
            maxConnectionBufferBytes = conf.grpcMaxConnectionBufferBytes,
            maxConcurrentStreams = conf.grpcMaxConcurrentStreams,
            maxInboundMetadataSize = conf.grpcMaxInboundMetadataSize,
            maxStreamsPerSecond = conf.grpcMaxStreamsPerSecond,
            maxResetsPerSecond = conf.grpcMaxResetsPerSecond,
            maxSettingsEntries = conf.grpcMaxSettingsEntries,
            maxSettingsPerSecond = conf.grpcMaxSettingsPerSecond,
            requestTimeoutMillis = conf.grpcRequestTimeoutMillis,
            keepAliveTimeMillis = conf.grpcKeepAliveTimeMillis,
            keepAliveTimeoutMillis = conf.grpcKeepAliveTimeoutMillis,
            aclEnable = conf.aclEnable,
            -- A proxy has no ACL (aclEnable is not its key): unused there.
            authDateTimeWindowMillis = conf.grpcAuthDateTimeWindowMillis or 0,
            brokerName = conf.brokerName,
            host = conf.brokerIP1 or "127.0.0.1",
            maxMessageSize = conf.maxMessageSize,
            popInvisibleTimeMinMillis = conf.popInvisibleTimeMinMillis,
            minLongPollingMillis = conf.grpcClientConsumerMinLongPollingTimeoutMillis,
            maxLongPollingMillis = conf.grpcClientConsumerMaxLongPollingTimeoutMillis,
            minInvisibleTimeMillsForRecv = conf.minInvisibleTimeMillsForRecv,
            maxInvisibleTimeMills = conf.maxInvisibleTimeMills,
            maxProducerTopics = conf.grpcMaxProducerTopics,
            -- ReceiveMessage's auto_renew (src/grpc/renew.h).
            enableProxyAutoRenew = conf.enableProxyAutoRenew,
            defaultInvisibleTimeMills = conf.defaultInvisibleTimeMills,
            renewAheadTimeMillis = conf.renewAheadTimeMillis,
            renewMaxTimeMillis = conf.renewMaxTimeMillis,
            renewSchedulePeriodMillis = conf.renewSchedulePeriodMillis,
            maxRenewRetryTimes = conf.maxRenewRetryTimes,
            invisibleTimeMillisWhenClear = conf.invisibleTimeMillisWhenClear,
            -- Cluster mode: the brokers behind, found from the NameServers.
            cluster = conf.role == "proxy",
            namesrvAddr = conf.role == "proxy" and conf.namesrvAddr or nil,
            routeRefreshMillis = conf.role == "proxy" and conf.topicRouteServiceCacheRefreshSeconds * 1000 or nil,
            routeExpireMillis = conf.role == "proxy" and conf.topicRouteServiceCacheExpiredSeconds * 1000 or nil,
            routeMax = conf.topicRouteServiceCacheMaxNum,
            topicConfigRefreshMillis = conf.role == "proxy" and conf.topicConfigCacheRefreshSeconds * 1000 or nil,
            groupConfigRefreshMillis = conf.role == "proxy" and conf.subscriptionGroupConfigCacheRefreshSeconds * 1000 or nil,
            groupConfigExpireMillis = conf.role == "proxy" and conf.subscriptionGroupConfigCacheExpiredSeconds * 1000 or nil,
            groupConfigMax = conf.subscriptionGroupConfigCacheMaxNum,
            maxBrokerConnections = conf.proxyMaxBrokerConnections,
            maxWaitingRequests = conf.proxyMaxWaitingRequests,
            brokerCallTimeoutMillis = conf.proxyBrokerCallTimeoutMillis,
            transactionDataExpireMillis = conf.transactionDataExpireMillis,
            transactionDataMaxNum = conf.transactionDataMaxNum,
            proxyMaxTransactionData = conf.proxyMaxTransactionData,
        } or nil,
        tls = {
            mode = conf["tls.server.mode"],
            certPath = conf["tls.server.certPath"],
            keyPath = conf["tls.server.keyPath"],
            keyPassword = conf["tls.server.keyPassword"],
            trustCertPath = conf["tls.server.trustCertPath"],
            needClientAuth = conf["tls.server.need.client.auth"],
            authClient = conf["tls.server.authClient"],
            handshakeTimeoutMillis = conf["tls.server.handshakeTimeoutMillis"],
        },
    }
end

-- Ports as bound (port 0 resolved) go into the conf each state sees, so
-- a role always knows the address it really serves.
local function apply_ports(conf, ports)
    if conf.role == "standalone" then
        conf.namesrvListenPort = ports.listen
        conf.listenPort = ports.broker
    else
        conf.listenPort = ports.listen
        conf.controllerListenPort = ports.controller
    end
end

-- The broker's own connections (registration, slave sync, relays) use
-- TLS when its conf says tls.enable, as 4.9.8's BrokerOuterAPI does.
local function client_tls_settings(conf)
    return {
        authServer = conf["tls.client.authServer"],
        trustCertPath = conf["tls.client.trustCertPath"],
        certPath = conf["tls.client.certPath"],
        keyPath = conf["tls.client.keyPath"],
        keyPassword = conf["tls.client.keyPassword"],
    }
end

local function client_tls(conf)
    if conf["tls.enable"] then
        assert(require("rmq.net").tls(client_tls_settings(conf)))
    end
end

function M.bound(ports)
    state.ports = ports
    apply_ports(state.conf, ports)
    -- ACL first: no request is served before its accounts are loaded.
    acl_plain.main_init(state.conf)
    client_tls(state.conf)
    for _, role in ipairs(roles_of(state.conf)) do
        local mod = require("rmq." .. role)
        if mod.main_init then
            mod.main_init(role_conf(state.conf, role))
        end
    end
end

--- What the web console (rmq.console.http, on the metrics endpoint's
--- thread) needs, as JSON; nil for a NameServer, which has no console.
--- Called after bound(): the ports are the real ones.
function M.console_settings()
    local conf = state.conf
    if conf == nil or conf.role == "namesrv" or conf.role == "controller" or conf.role == "proxy" then
        return nil
    end
    local bind = conf.bindAddress
    local ip = (bind == nil or bind == "0.0.0.0" or bind == "::") and "127.0.0.1" or bind
    local broker = ip .. ":" .. conf.listenPort
    local namesrv = conf.namesrvAddr
    if conf.role == "standalone" then
        namesrv = namesrv or (ip .. ":" .. conf.namesrvListenPort)
    end
    -- What the broker registers and writes as STOREHOST (rmq.broker's
    -- broker_ip): offset message ids of this broker carry it.
    local reg_ip = conf.brokerIP1 or (ip ~= "127.0.0.1" and ip)
        or require("rmq.core").ipv4_addresses()[1] or "127.0.0.1"
    local self_addr = reg_ip .. ":" .. conf.listenPort
    return require("cjson").encode({
        broker = broker, namesrv = namesrv, selfAddr = self_addr,
        knownAddrs = { broker, self_addr },
        timeout = conf.consoleApiTimeoutMillis, maxQueues = conf.consoleMaxQueues,
        historySize = conf.consoleHistorySize, sampleMillis = conf.consoleSampleSeconds * 1000,
        historyMaxBytes = conf.consoleHistoryMaxBytes, idleMillis = conf.consoleIdleStopSeconds * 1000,
        writeEnable = conf.consoleWriteEnable,
        -- POST /api/send needs it when set (rmq.console.http); never shown.
        password = conf.consolePassword, authFailDelay = conf.consoleAuthFailDelayMillis,
        authFailPeers = conf.consoleAuthFailMaxPeers,
        cluster = conf.brokerClusterName, brokerName = conf.brokerName,
        controllerAddr = conf.enableControllerMode and conf.controllerAddr or nil,
        -- The console's own account, never the broker's (an admin on an
        -- ACL NameServer): it reads no more than it was granted.  Unset:
        -- unsigned.
        accessKey = conf.consoleAccessKey, secretKey = conf.consoleSecretKey,
        -- Its loopback requests need TLS where the port enforces it (as
        -- the broker's own connections have it, if they do).
        tls = conf["tls.enable"] and client_tls_settings(conf)
            or (conf["tls.server.mode"] == "enforcing" and {}) or nil,
    })
end

-- A {header=, run=} entry goes to dispatch as it is (dispatch reads the
-- header); any other table stands for its run function.
local function handler_fn(h)
    if type(h) == "table" and h.header == nil then
        return h.run
    end
    return h
end

--- Builds one worker's dispatch function per role, the roles' close
--- hooks and their native processors (none with nativeProcessors = false).
function M.worker(path, overrides, worker_id, ports)
    local conf = assert(load_conf(path, overrides))
    apply_ports(conf, ports)
    client_tls(conf)
    conf.workerId = worker_id
    state.conf = conf
    local custom = conf.processors or {}
    local out, closers, natives, setters = {}, {}, {}, {}
    for _, role in ipairs(roles_of(conf)) do
        local mod = require("rmq." .. role)
        local base, on_close = mod.processors(role_conf(conf, role))
        local merged = dispatch.merge(base, custom[role])
        if conf.nativeProcessors then
            natives[role] = dispatch.natives(merged)
        end
        for code, h in pairs(merged) do
            merged[code] = handler_fn(h)
        end
        out[role], setters[role] = dispatch.new(merged)
        closers[role] = on_close
    end
    -- The live console's swaps reach this worker through it.
    require("rmq.console_live.swap").worker_start(conf, setters, natives)
    acl_plain.worker_install(conf, listeners(conf))
    return out, closers, natives
end

function M.main_start()
    local conf = state.conf
    acl_plain.main_start(conf)
    for _, role in ipairs(roles_of(conf)) do
        local mod = require("rmq." .. role)
        if mod.main_start then
            mod.main_start(role_conf(conf, role))
        end
    end
    -- The live console (conf `console`) and SIGHUP: after the roles, so
    -- what it shows exists.
    require("rmq.console_live").main_start(conf, state.overrides)
end

--- Extra READY fields (" name=host:port ..."): the roles' ready_fields().
function M.ready_fields()
    local out = {}
    local console = require("rmq.console_live").address()
    if console then
        out[1] = " console=" .. console
    end
    for _, role in ipairs(roles_of(state.conf)) do
        local mod = require("rmq." .. role)
        if mod.ready_fields then
            for k, v in pairs(mod.ready_fields()) do
                out[#out + 1] = (" %s=%s"):format(k, v)
            end
        end
    end
    table.sort(out)
    return table.concat(out)
end

--- Runs the roles' shutdown hooks, then done() (C's signal that the
--- process may exit once the workers are gone too).
function M.main_stop(done)
    local conf = state.conf
    require("rmq.console_live").main_stop()
    acl_plain.main_stop()
    if conf ~= nil then
        local roles = roles_of(conf)
        -- Reverse start order: the broker unregisters before its
        -- NameServer goes away.
        for i = #roles, 1, -1 do
            local mod = require("rmq." .. roles[i])
            if mod.main_stop then
                local ok, err = pcall(mod.main_stop, role_conf(conf, roles[i]))
                if not ok then
                    log.error("%s shutdown hook failed: %s", roles[i], tostring(err))
                end
            end
        end
    end
    if done then
        done()
    end
end

--- Runs the roles' last hooks once every worker has ended.
function M.after_workers()
    local conf = state.conf
    if conf == nil then
        return
    end
    local roles = roles_of(conf)
    for i = #roles, 1, -1 do
        local mod = require("rmq." .. roles[i])
        if mod.main_after_workers then
            local ok, err = pcall(mod.main_after_workers, role_conf(conf, roles[i]))
            if not ok then
                log.error("%s final hook failed: %s", roles[i], tostring(err))
            end
        end
    end
end

return M
