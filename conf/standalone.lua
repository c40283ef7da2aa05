-- rmq standalone configuration: a NameServer and a broker in one process.
--
-- The quick start. One command, and RocketMQ clients can send and
-- consume:
--
--     rmq-server conf/standalone.lua
--
-- then point clients and mqadmin at 127.0.0.1:9876, e.g.
--
--     mqadmin clusterList -n 127.0.0.1:9876
--
-- To outgrow it, split it into conf/namesrv.lua and conf/broker-a.lua:
-- the keys are the same. Any key can also be given on the command line,
-- e.g. `--listenPort=20911`.
--
-- This file is Lua: it returns one table. Keys use Apache RocketMQ's own
-- names (see conf/namesrv.lua and conf/broker-a.lua for what each does).
-- Everything not written here takes its RocketMQ 4.9.8 default.

local home = os.getenv("HOME") or "."

return {
    role = "standalone",

    -- The embedded NameServer's port: what clients and mqadmin use.
    namesrvListenPort = 9876,

    -- The broker's port (it also takes listenPort - 2 and listenPort + 1).
    listenPort = 10911,

    -- "127.0.0.1" keeps both private to this host, which suits a laptop.
    -- Use "0.0.0.0" to serve other hosts, and then also set brokerIP1 to
    -- the address they should dial, and turn on ACL (aclEnable = true)
    -- and TLS (conf/broker-a.lua says more;
    -- `rmq doctor conf/standalone.lua` lists what a conf exposes).
    bindAddress = "127.0.0.1",
    -- brokerIP1 = "192.168.1.10",

    -- The broker registers with the embedded NameServer; nothing to set.
    -- namesrvAddr = "127.0.0.1:9876",

    brokerClusterName = "DefaultCluster",
    brokerName = "broker-a",

    -- Messages, topics and offsets survive restarts here. Delete the
    -- directory (with the server stopped) to start from scratch.
    storePathRootDir = home .. "/rmq/store-standalone",

    -- 1 GiB commit log files are RocketMQ's default; a quick start does
    -- not need them that large. Change it only on an empty store.
    mappedFileSizeCommitLog = 64 * 1024 * 1024,

    -- Topics and consumer groups appear as clients use them: no mqadmin
    -- step before the first send.
    autoCreateTopicEnable = true,
    autoCreateSubscriptionGroup = true,

    -- One worker is plenty for trying things out and the easiest to debug.
    -- 0 means one per CPU core.
    workers = 1,

    logLevel = "info",

    -- Prometheus metrics: curl http://127.0.0.1:5557/metrics (private to
    -- this host; metricsPromExporterHost = "0.0.0.0" to scrape from
    -- elsewhere). "DISABLE" turns them off.
    metricsExporterType = "PROM",
    metricsPromExporterPort = 5557,
}
