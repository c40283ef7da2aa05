-- rmq NameServer configuration.
--
-- Start it with:
--
--     rmq-server conf/namesrv.lua
--
-- Any key can also be given on the command line, which wins over this
-- file:
--
--     rmq-server conf/namesrv.lua --listenPort=9877 --logLevel=debug
--
-- and `rmq-server -t conf/namesrv.lua` checks the file and exits.
--
-- This file is Lua: it returns one table. Keys use Apache RocketMQ's own
-- names, so what you know from namesrv.properties applies. A key rmq does
-- not know is an error (with a "did you mean" when it is a typo); a
-- RocketMQ key that makes no sense here (thread pool sizes, ...) is
-- accepted with a warning. Everything not written below takes its
-- RocketMQ 4.9.8 default.
--
-- A NameServer holds no messages. It keeps the route table: which brokers
-- exist, which topics they serve, and which of them are still alive.
-- Brokers register with every NameServer every 30 seconds; clients ask
-- any of them for routes. NameServers never talk to each other, so to
-- run two for redundancy, start two with this same file (on two hosts,
-- or on one host with two listenPorts) and list both in every broker's
-- namesrvAddr and every client's namesrv address.

return {
    role = "namesrv",

    ---------------------------------------------------------------- NETWORK

    -- The port clients, brokers and mqadmin connect to. 9876 is what every
    -- RocketMQ tool assumes when you give it a bare host, so keep it unless
    -- it is taken.
    listenPort = 9876,

    -- The address to listen on. "127.0.0.1" keeps the NameServer private
    -- to this host: anyone who can reach this port can register a broker
    -- (and so hijack a topic's route) or change the NameServer's config.
    -- To serve brokers and clients on other hosts, set "0.0.0.0" (every
    -- interface) or one address of this host, and turn on ACL
    -- (aclEnable = true with conf/plain_acl.yml) and TLS
    -- (["tls.server.mode"] = "enforcing"), or keep the
    -- port behind a firewall. `rmq doctor conf/namesrv.lua` lists what a
    -- conf exposes.
    bindAddress = "127.0.0.1",

    -- Worker threads, each with its own event loop. Route look-ups are
    -- cheap, so a NameServer rarely needs many. 0 means one per CPU core.
    -- If unsure, leave 0; use 1 when debugging, it is always supported.
    workers = 0,

    -- A connection that sends and receives nothing for this many seconds
    -- is closed. Clients and brokers talk at least every 30 s, so only
    -- dead peers are affected.
    -- serverChannelMaxIdleTimeSeconds = 120,

    ------------------------------------------------------------ BROKER LIVENESS

    -- A broker that has not registered for this many milliseconds is
    -- removed from every route. Brokers register every 30 s by default,
    -- so the default tolerates three missed rounds. Lower it to fail over
    -- faster; never set it below the brokers' registerNameServerPeriod.
    -- brokerChannelExpiredTime = 120000,

    -- How often (ms) to look for such brokers.
    -- scanNotActiveBrokerInterval = 5000,

    ------------------------------------------------------------------- KV CONFIG

    -- Where the KV config (PUT_KV_CONFIG, including ORDER_TOPIC_CONFIG
    -- for ordered topics) is kept across restarts. "~" is your home
    -- directory. Give each NameServer on one host its own file.
    -- kvConfigPath = "~/namesrv/kvConfig.json",

    -- Attach the ORDER_TOPIC_CONFIG KV entries to topic routes. Only
    -- needed by the old "global order" deployments; if unsure, leave false.
    -- orderMessageEnable = false,

    --------------------------------------------------------------------- METRICS

    -- Prometheus metrics (GET /metrics): request counts and latency per
    -- request code. Off unless set; 5557 is a broker's default port, so a
    -- NameServer beside one takes another.
    -- metricsExporterType = "PROM",
    -- metricsPromExporterPort = 5558,

    --------------------------------------------------------------------- LOGGING

    -- debug, info, warn or error. info logs start-up, registrations and
    -- brokers coming and going; debug adds every request.
    logLevel = "info",

    -- Log to this file instead of stderr.
    -- logFile = "~/rmq/logs/namesrv.log",
}
