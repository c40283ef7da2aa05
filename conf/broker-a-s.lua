-- rmq broker configuration: broker-a-s, the slave of broker group "a".
--
-- Start it after broker-a (conf/broker-a.lua):
--
--     rmq-server conf/broker-a-s.lua
--
-- A slave keeps a byte-for-byte copy of its master's commit log, pulled
-- over the master's HA port, plus copies of its topics, subscription
-- groups and consumer offsets (fetched every 10 s). It refuses sends.
-- Consumers read from it when the master is down, or when slaveReadEnable
-- is on at the master and they have fallen behind.
--
-- What makes this broker a slave of broker-a: the same brokerClusterName
-- and brokerName, a brokerId above 0, and brokerRole = "SLAVE". It finds
-- the master's HA address through the NameServer, so it needs no
-- master address of its own.
--
-- This file is Lua: it returns one table. See conf/broker-a.lua for the
-- keys a master has; only what differs is explained here.

local home = os.getenv("HOME") or "."

return {
    role = "broker",

    brokerClusterName = "DefaultCluster",

    -- Same group as the master ...
    brokerName = "broker-a",

    -- ... with its own id: 1 for the first slave, 2 for a second, ...
    -- A slave must not use 0.
    brokerId = 1,

    brokerRole = "SLAVE",

    namesrvAddr = "127.0.0.1:9876",

    -- Its own ports: 11911 for clients, 11909 (VIP), 11912 (HA, unused by
    -- a slave but reserved). On another host it could keep 10911.
    listenPort = 11911,

    -- Private to this host; conf/broker-a.lua says how to open up.
    bindAddress = "127.0.0.1",

    -- Its own store: a slave on the same host as its master must not
    -- share the master's directory.
    storePathRootDir = home .. "/rmq/store-a-s",

    -- The master's HA address (host:port). Unset, the slave learns it from
    -- the NameServer when it registers, which is what you want unless
    -- the master advertises an address this host cannot reach.
    -- haMasterAddress = "127.0.0.1:10912",

    -- A slave flushes on its own schedule; what it has is already safe on
    -- the master. If unsure, ASYNC_FLUSH.
    flushDiskType = "ASYNC_FLUSH",

    -- Keep the slave's retention equal to the master's, or consumers that
    -- fail over may find their offsets already deleted.
    -- fileReservedTime = 72,

    workers = 0,
    logLevel = "info",
    -- logFile = home .. "/rmq/logs/broker-a-s.log",
}
