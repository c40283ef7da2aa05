-- rmq broker configuration: broker-a (conf/broker-a.lua) sending slow
-- consumers to its slave only while the slave keeps up: RocketMQ 4.9.8's
-- rule (rmq.policy.slave_read) unless the slave is more than 64 MiB
-- behind (rmq.policy.slave_read_lag; its MAX_LAG_BYTES).  The lag is the
-- HA service's figure; a broker without it follows 4.9.8's rule.
--
--     rmq-server conf/broker-a-slave-read-lag.lua

local home = os.getenv("HOME") or "."

return {
    role = "broker",
    brokerClusterName = "DefaultCluster",
    brokerName = "broker-a",
    brokerId = 0,
    brokerRole = "ASYNC_MASTER",
    namesrvAddr = "127.0.0.1:9876",
    listenPort = 10911,
    storePathRootDir = home .. "/rmq/store-a",
    flushDiskType = "ASYNC_FLUSH",
    slaveReadEnable = true,
    slaveReadPolicy = "rmq.policy.slave_read_lag",
    workers = 0,
    logLevel = "info",
}
