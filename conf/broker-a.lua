-- rmq broker configuration: broker-a, the master of broker group "a".
--
-- Start it (after at least one NameServer) with:
--
--     rmq-server conf/broker-a.lua
--
-- Any key can also be given on the command line, which wins over this
-- file, e.g. `--namesrvAddr=10.0.0.1:9876`. `rmq-server -t FILE` checks
-- a file and exits.
--
-- This file is Lua: it returns one table. Keys use Apache RocketMQ's own
-- names, so what you know from broker.conf applies. A key rmq does not
-- know is an error (with a "did you mean" when it is a typo); a RocketMQ
-- key that makes no sense here (thread pool sizes, ...) is accepted with
-- a warning. Everything not written below takes its RocketMQ 4.9.8
-- default; the commented-out lines show those defaults.
--
-- The example cluster in conf/ is:
--
--     namesrv.lua      NameServer          9876
--     broker-a.lua     broker-a master     10911 (VIP 10909, HA 10912)
--     broker-a-s.lua   broker-a slave      11911 (VIP 11909, HA 11912)
--     broker-b.lua     broker-b master     12911 (VIP 12909, HA 12912)
--
-- all of which fit on one host.

local home = os.getenv("HOME") or "."

return {
    role = "broker",

    ------------------------------------------------------------------ IDENTITY

    -- Brokers with the same brokerClusterName form one cluster: mqadmin
    -- `clusterList` shows them together and `updateTopic -c` creates a
    -- topic on all of them.
    brokerClusterName = "DefaultCluster",

    -- A broker group: one master and its slaves share one brokerName.
    -- Clients see a topic's queues per brokerName. Each group of a cluster
    -- needs its own name.
    brokerName = "broker-a",

    -- 0 is the master. Slaves use 1, 2, ... (see broker-a-s.lua).
    brokerId = 0,

    -- ASYNC_MASTER: a send is acknowledged once this broker has it.
    -- SLAVE: a read-only broker of the group (see broker-a-s.lua).
    -- SYNC_MASTER: acknowledged only once a slave has it too (after
    --   slaveTimeout the reply says FLUSH_SLAVE_TIMEOUT; with no slave,
    --   SLAVE_NOT_AVAILABLE: the message is stored either way).
    -- Slaves copy this broker's commit log over haListenPort
    --   (listenPort + 1), RocketMQ 4.x's own HA protocol.
    -- If unsure, use ASYNC_MASTER.
    brokerRole = "ASYNC_MASTER",

    ----------------------------------------------------------------- NETWORK

    -- The NameServers to register with, separated by ';'. Every broker
    -- must list every NameServer: they do not share what they know.
    namesrvAddr = "127.0.0.1:9876",

    -- Clients connect here. The broker also listens on listenPort - 2
    -- (the "VIP" port that old Java clients use for sends) and, for its
    -- slaves, on haListenPort (default listenPort + 1). Two brokers on
    -- one host need listenPorts at least 3 apart; 1000 apart is tidy.
    listenPort = 10911,

    -- The address to listen on (all three ports). "127.0.0.1" keeps the
    -- broker private to this host: anyone who can reach these ports can
    -- send, consume, delete topics and change live config. To serve other
    -- hosts, set "0.0.0.0" (or one address of this host) AND brokerIP1
    -- below, and turn on ACL (aclEnable = true with conf/plain_acl.yml)
    -- and TLS (["tls.server.mode"] = "enforcing"), or
    -- keep the ports behind a firewall. `rmq doctor conf/broker-a.lua`
    -- lists what a conf exposes.
    bindAddress = "127.0.0.1",

    -- The address registered with the NameServer, i.e. the one clients
    -- will dial. Unset, it is bindAddress, or with "0.0.0.0" the first
    -- non-loopback IPv4 address. Set it when this host has several, or
    -- when clients must use a different one (NAT, containers).
    -- brokerIP1 = "192.168.1.10",

    -- Worker threads. 0 means one per CPU core. If unsure, leave 0.
    workers = 0,

    ------------------------------------------------------------------- STORAGE

    -- Where messages live: commitlog/, consumequeue/, index/, config/
    -- (topics, subscription groups, consumer offsets). Each broker on a
    -- host needs its own directory.
    storePathRootDir = home .. "/rmq/store-a",

    -- ASYNC_FLUSH: fsync in the background, every flushIntervalCommitLog
    --   ms. A send is acknowledged once it is in the page cache, so a
    --   power loss (not a process crash) can lose the last moment of
    --   messages.
    -- SYNC_FLUSH: a send waits for its fsync (many sends share one).
    --   Slower; a send that waits longer than syncFlushTimeout answers
    --   FLUSH_DISK_TIMEOUT, though the message is stored.
    -- If unsure, use ASYNC_FLUSH with a slave.
    flushDiskType = "ASYNC_FLUSH",

    -- Commit log files older than this many hours are deleted at the
    -- hours listed in deleteWhen ("04" = 4 a.m.), or at once when the
    -- disk is fuller than diskMaxUsedSpaceRatio percent. Consumers that
    -- fall further behind than this lose messages.
    -- fileReservedTime = 72,
    -- deleteWhen = "04",
    -- diskMaxUsedSpaceRatio = 75,

    -- Size of one commit log file. 1 GiB is RocketMQ's; smaller files
    -- (say 64 MiB) suit a laptop or a test box.
    -- mappedFileSizeCommitLog = 1073741824,

    -- Largest message body accepted, bytes. Clients have the same limit
    -- on their side (4 MiB by default); raise both together.
    -- maxMessageSize = 4194304,

    ------------------------------------------------------------ TOPICS & GROUPS

    -- Create a topic the first time a producer sends to it. Handy in
    -- development; in production, turn it off and create topics with
    -- mqadmin updateTopic, so a typo in a topic name fails loudly.
    autoCreateTopicEnable = true,

    -- Queues of an auto-created topic (the TBW102 template).
    -- defaultTopicQueueNums = 8,

    -- Likewise for consumer groups.
    -- autoCreateSubscriptionGroup = true,

    -------------------------------------------------------------- SLAVE READ

    -- Let consumers that fall far behind (their data no longer in memory)
    -- pull from a slave, sparing this master's disk. Needs a slave.
    -- slaveReadEnable = false,

    ---------------------------------------------------------------- METRICS

    -- Prometheus metrics (GET /metrics, RocketMQ 5's names) on
    -- 127.0.0.1:5557; metricsPromExporterHost = "0.0.0.0" lets another
    -- host scrape it. Off unless set.
    -- metricsExporterType = "PROM",
    -- metricsPromExporterPort = 5557,

    ---------------------------------------------------------------- LOGGING

    logLevel = "info",
    -- logFile = home .. "/rmq/logs/broker-a.log",
}
