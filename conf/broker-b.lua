-- rmq broker configuration: broker-b, the master of broker group "b".
--
-- A second broker group in the same cluster as broker-a. Topics created
-- on the cluster get queues on both groups; producers spread sends over
-- them, and either group can go down without stopping the topic.
--
--     rmq-server conf/broker-b.lua
--
-- This file is Lua: it returns one table. conf/broker-a.lua explains
-- every key; only what differs from it is said here.

local home = os.getenv("HOME") or "."

return {
    role = "broker",

    brokerClusterName = "DefaultCluster",

    -- A different group from broker-a: its own name, and it is a master.
    brokerName = "broker-b",
    brokerId = 0,
    brokerRole = "ASYNC_MASTER",

    namesrvAddr = "127.0.0.1:9876",

    -- Ports 12911 (clients), 12909 (VIP), 12912 (HA): clear of broker-a
    -- (10909-10912) and its slave (11909-11912) on the same host.
    listenPort = 12911,

    -- Private to this host; conf/broker-a.lua says how to open up.
    bindAddress = "127.0.0.1",

    storePathRootDir = home .. "/rmq/store-b",

    flushDiskType = "ASYNC_FLUSH",

    autoCreateTopicEnable = true,

    workers = 0,
    logLevel = "info",
    -- logFile = home .. "/rmq/logs/broker-b.log",
}
